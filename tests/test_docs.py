"""Docs that cannot drift: every command-and-output example in README.md and docs/*.md runs here.

The convention (an example is one of these two forms):

1. A ```` ```console ```` block. A line starting with ``$ `` is a command; following lines starting
   with ``> `` continue it (the shell's secondary prompt, joined with newlines); the lines after it,
   up to the next ``$ `` line, are its expected output.
2. A ```` ```bash ```` block holding exactly one command line, followed by a bare ```` ``` ```` block
   with only blank lines between them: the bare block is that command's expected output.

Any other block (a ``bash`` block of several lines, one followed by prose, ``python``, ``yaml``)
is shown, never run. Commands run in bash, in a fresh folder holding a copy of ``examples/``
(so ``examples/seed.py:15`` reads as in the repository and files a command writes vanish), with
``fxflow`` and ``python`` being this checkout's fxflow and the test's interpreter, ``NO_COLOR=1``,
``COLUMNS=100`` and ``PYTHONHASHSEED=0``. The expected output is stdout and stderr together,
compared line by line with trailing spaces and trailing blank lines ignored. The commands of one
console block share their folder, so a block can write a file and read it in the next command.

Output that depends on timing or on the machine must stay out of these blocks.

``FXFLOW_REGEN_DOCS=1 python -m pytest tests/test_docs.py -n 4`` rewrites every expected output
in place with what the commands print now (the way golden DOT files are regenerated), instead
of failing; review the diff.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import FORK, zygote

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REGENERATE = os.environ.get("FXFLOW_REGEN_DOCS") == "1"
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Block:
    language: str
    first: int  # index of the line after the opening fence
    last: int  # index of the closing fence
    lines: list[str]


@dataclass
class Example:
    path: Path
    index: int  # which example of the file (stable while only outputs change)
    line: int  # 1-based line of the example, for the test id
    commands: list[tuple[str, list[str]]]  # (command, expected output lines)


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, with their line ranges."""
    lines = text.split("\n")
    found, opening = [], None
    for number, line in enumerate(lines):
        match = FENCE.match(line)
        if opening is None and (match or line.startswith("```")):
            opening = (number, match.group(1) if match else line[3:].strip())
        elif opening is not None and line.rstrip() == "```":
            found.append(Block(opening[1], opening[0] + 1, number, lines[opening[0] + 1:number]))
            opening = None
    return found


def examples_of(path: Path, text: str | None = None) -> list[tuple[Example, list[Block]]]:
    """Every runnable example of one file, with the blocks that hold its expected output."""
    text = path.read_text() if text is None else text
    lines = text.split("\n")
    found: list[tuple[Example, list[Block]]] = []
    all_blocks = blocks(text)
    for position, block in enumerate(all_blocks):
        if block.language == "console":
            found.append((Example(path, len(found), block.first, _console_commands(block.lines)), [block]))
        elif block.language == "bash" and len([l for l in block.lines if l.strip()]) == 1:
            following = all_blocks[position + 1] if position + 1 < len(all_blocks) else None
            between = lines[block.last + 1:following.first - 1] if following else ["?"]
            if following and following.language == "" and not any(l.strip() for l in between):
                command = next(l for l in block.lines if l.strip()).strip()
                found.append((Example(path, len(found), block.first, [(command, following.lines)]), [following]))
    return found


def _console_commands(lines: list[str]) -> list[tuple[str, list[str]]]:
    commands: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif line.startswith("> ") and commands and not commands[-1][1]:
            commands[-1] = (commands[-1][0] + "\n" + line[2:], [])
        elif commands:
            commands[-1][1].append(line)
    return commands


def _console_lines(commands: list[tuple[str, list[str]]]) -> list[str]:
    lines = []
    for command, output in commands:
        first, *rest = command.split("\n")
        lines += [f"$ {first}"] + [f"> {line}" for line in rest] + output
    return lines


def _normalise(lines: list[str]) -> list[str]:
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def run_example(example: Example) -> list[tuple[str, list[str]]]:
    """Run the example's commands in one fresh folder; returns (command, output lines) pairs."""
    with tempfile.TemporaryDirectory(prefix="fxflow-docs-") as folder:
        shutil.copytree(ROOT / "examples", Path(folder) / "examples")
        bin_dir = Path(folder) / ".bin"
        bin_dir.mkdir()
        env = dict(os.environ, NO_COLOR="1", COLUMNS="100", PYTHONHASHSEED="0", PYTHONUNBUFFERED="1",
                   OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        env.pop("FXFLOW_REGEN_DOCS", None)
        fxflow = f'exec "{sys.executable}" -m fxflow "$@"'
        if FORK:  # forked from a process that imported torch already, as the CLI tests are
            client = Path(__file__).with_name("cli_client.py")
            fxflow = f'FXFLOW_ZYGOTE="{zygote(env).socket}" exec "{sys.executable}" -S -E "{client}" "$@"'
        for name, line in (("fxflow", fxflow), ("python", f'exec "{sys.executable}" "$@"')):
            (bin_dir / name).write_text(f"#!/bin/sh\n{line}\n")
            (bin_dir / name).chmod(0o755)
        results = []
        for command, _ in example.commands:
            done = subprocess.run(["bash", "-c", command], cwd=folder, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=600)
            results.append((command, done.stdout.split("\n")))
        return results


def _rewrite(example: Example, results: list[tuple[str, list[str]]]) -> None:
    """Put fresh outputs into the file, under a lock: parallel workers may rewrite the same file."""
    with open(example.path, "r+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        text = handle.read()
        _, (block,) = examples_of(example.path, text)[example.index]
        lines = text.split("\n")
        if len(results) == 1 and block.language == "":
            fresh = _normalise(results[0][1])
        else:
            fresh = _console_lines([(command, _normalise(output)) for command, output in results])
        lines[block.first:block.last] = fresh
        handle.seek(0)
        handle.write("\n".join(lines))
        handle.truncate()


ALL = [example for path in DOCS for example, _ in examples_of(path)]


def test_the_docs_have_runnable_examples() -> None:
    files = {example.path.name for example in ALL}
    assert {"README.md", "getting-started.md", "api.md", "json.md", "ci.md"} <= files


def test_convention_parses_both_forms() -> None:
    text = "\n".join(["```bash", "fxflow --version", "```", "", "```", "fxflow 0.1.0", "```", "",
                      "```bash", "echo shown only", "echo never run", "```", "```", "x", "```",
                      "```console", "$ echo a", "a", "$ printf 'b\\n' \\", "> ", "b", "```"])
    found = [example.commands for example, _ in examples_of(Path("x.md"), text)]
    assert found == [[("fxflow --version", ["fxflow 0.1.0"])],
                     [("echo a", ["a"]), ("printf 'b\\n' \\\n", ["b"])]]


@pytest.mark.parametrize("example", ALL, ids=[f"{e.path.name}:{e.line}" for e in ALL])
def test_doc_example_output_is_what_the_command_prints(example: Example) -> None:
    results = run_example(example)
    if REGENERATE:
        _rewrite(example, results)
        return
    for (command, expected), (_, actual) in zip(example.commands, results):
        assert _normalise(actual) == _normalise(expected), (
            f"{example.path.relative_to(ROOT)}:{example.line}: `{command}` prints something else "
            "(FXFLOW_REGEN_DOCS=1 rewrites the docs)")
