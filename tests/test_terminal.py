"""Terminal output: the rich table on a terminal, plain text when piped, --no-color, NO_COLOR, --quiet."""
import io
import os
import pty
import subprocess
import sys

import pytest
import torch
from rich.console import Console

import fxflow
from fxflow.present.terminal import Terminal, rich_report
from fxflow.present.text import render_text, summary_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
from seed import Net  # noqa: E402

EXPECTED = """fxflow check examples/seed.py:Net  [trace: symbolic_trace, 8 nodes]

parameter      shape  static     dynamic  grad norm  cut by
first.weight   32x10  cut        missing          -  detach @ examples/seed.py:15
first.bias     32     cut        missing          -  detach @ examples/seed.py:15
middle.weight  32x32  cut        missing          -  detach @ examples/seed.py:15
middle.bias    32     cut        missing          -  detach @ examples/seed.py:15
last.weight    2x32   reachable  ok           7.038
last.bias      2      reachable  ok           4.731

detach at examples/seed.py:15 (node detach) cuts first.weight, first.bias, middle.weight,
middle.bias off from the output: detach() returns a tensor with no autograd history, so the gradient
stops here.
fix: remove the detach, or use a straight-through estimator: `x + (f(x) - x).detach()`; for a
  deliberate freeze, pass --allow 'first.*' --allow 'middle.*'

loss: random projection of all outputs (the model returns no loss)

problem: 4 of 6 parameters will not learn: 4 cut (first cut: detach @ examples/seed.py:15)
"""


@pytest.fixture(scope="module")
def report():
    torch.manual_seed(0)
    model = Net()
    return fxflow.check(model, torch.randn(16, 10), target="examples/seed.py:Net")


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def _rich(report, color_system=None):
    console = Console(file=io.StringIO(), width=100, force_terminal=color_system is not None,
                      color_system=color_system, record=True)
    rich_report(report, console)
    return console


def test_rich_text_is_the_plain_words_at_a_fixed_width(report):
    text = _rich(report).export_text()
    assert "\n".join(line.rstrip() for line in text.splitlines()) + "\n" == EXPECTED


def test_plain_text_at_the_same_width_is_the_same_text(report):
    assert render_text(report, width=100) + "\n" == EXPECTED


def _fits_but_whole_sites(text: str, width: int) -> bool:
    """Every line fits ``width`` but a table row whose one cut-by site is longer than its column's
    room: that row keeps ``op @ file:line`` whole on its line instead of doubling the table."""
    lines = text.splitlines()
    table = lines[3:lines.index("", 3)]
    whole = all(line.endswith("detach @ examples/seed.py:15") for line in table if "cut" in line.split())
    return whole and all(len(line) <= width for line in lines if line not in table)


def test_plain_table_fits_80_columns_and_keeps_every_word(report):
    wide, narrow = render_text(report), render_text(report, width=80)
    assert max(len(line) for line in wide.splitlines()) > 80  # the case the width is for
    assert _fits_but_whole_sites(narrow, 80)
    assert narrow.split() == wide.split()  # wrapped, nothing lost or reordered
    header = narrow.splitlines()[2]
    column = header.index("cut by")
    rows = [line for line in narrow.splitlines()[3:9]]
    # continuation lines of a wrapped cell start in the cut-by column: the table stays a table
    assert all(line.startswith(" " * column) and line[column] != " " for line in rows if line.startswith(" "))


def test_cli_wraps_at_columns_and_at_100_when_piped_without(run_fxflow):
    code, narrow, _ = run_fxflow("check", "examples/seed.py:Net", env={"COLUMNS": "80"})
    assert code == 1 and _fits_but_whole_sites(narrow, 80)
    code, piped, _ = run_fxflow("check", "examples/seed.py:Net", env={"COLUMNS": None})
    assert "middle.weight  32x32  cut        missing          -  detach @ examples/seed.py:15" in piped.splitlines()
    assert narrow.split() == piped.split()
    # piped output is what the README shows (issue 21): wrapped at 100, as a 100-column terminal
    _, hundred, _ = run_fxflow("check", "examples/seed.py:Net", env={"COLUMNS": "100"})
    assert piped == hundred and max(len(line) for line in piped.splitlines()) <= 100


def test_rich_colors_verdicts(report):
    raw = _rich(report, "standard").file.getvalue()
    assert "\x1b[1;31mcut" in raw  # cut: bold red
    assert "\x1b[31mmissing" in raw  # missing: red
    assert "\x1b[32mreachable" in raw and "\x1b[32mok" in raw  # wet: green
    assert "\x1b[1;31mproblem: 4 of 6" in raw


def test_plain_when_not_a_terminal(report, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)  # piped without COLUMNS: wrapped at 100, like the README
    out = io.StringIO()
    Terminal(file=out).show(report)
    assert out.getvalue() == render_text(report, width=100) + "\n"
    assert "\x1b[" not in out.getvalue()


def test_color_on_a_terminal_unless_no_color(report, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = FakeTTY()
    Terminal(file=out).show(report)
    assert "\x1b[" in out.getvalue()
    for terminal in (Terminal(color=False, file=FakeTTY()),):
        terminal.show(report)
        assert "\x1b[" not in terminal.file.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")
    out = FakeTTY()
    Terminal(file=out).show(report)
    assert out.getvalue() == render_text(report, width=100) + "\n" == EXPECTED


def test_quiet_prints_only_the_summary(report):
    out = FakeTTY()
    Terminal(quiet=True, file=out).show(report)
    assert out.getvalue() == summary_line(report) + "\n"


def test_progress_is_silent_off_a_terminal():
    err = io.StringIO()
    with Terminal(err=err).progress() as step:
        step("tracing")
    assert err.getvalue() == ""


def _cli_on_a_tty(*args, env=None):
    """Run the real CLI with stdout and stderr on a pseudo-terminal; returns (exit code, bytes seen)."""
    leader, follower = pty.openpty()
    environment = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    environment.update(env or {}, COLUMNS="120", TERM="xterm")
    process = subprocess.Popen([sys.executable, "-m", "fxflow", "check", "examples/seed.py:Net", *args],
                               stdout=follower, stderr=follower, cwd=ROOT, env=environment)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return process.wait(timeout=120), b"".join(chunks).decode()


def test_cli_colors_a_terminal_and_not_a_pipe():
    code, seen = _cli_on_a_tty()
    assert code == 1 and "\x1b[1;31mcut" in seen
    code, seen = _cli_on_a_tty("--no-color")
    assert code == 1 and "\x1b[1;31m" not in seen and "detach @ examples/seed.py:15" in seen
    code, seen = _cli_on_a_tty(env={"NO_COLOR": "1"})
    assert "\x1b[1;31m" not in seen
    piped = subprocess.run([sys.executable, "-m", "fxflow", "check", "examples/seed.py:Net", "--quiet"],
                           capture_output=True, text=True, cwd=ROOT)
    assert piped.returncode == 1 and piped.stderr == ""
    assert piped.stdout == "problem: 4 of 6 parameters will not learn: 4 cut (first cut: detach @ examples/seed.py:15)\n"
