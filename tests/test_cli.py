"""``fxflow check`` end to end, in a subprocess: table, JSON, exit codes and every flag."""
from __future__ import annotations

import json

import pytest

from conftest import TARGETS

MODELS = f"{TARGETS}/models.py"


def check_json(run_fxflow, *args: str) -> tuple[int, dict]:
    code, out, err = run_fxflow("check", *args, "--json")
    assert code in (0, 1), err
    return code, json.loads(out)


def verdicts(report: dict) -> dict[str, tuple[str, str | None]]:
    return {p["name"]: (p["static"], p["dynamic"]) for p in report["parameters"]}


def test_table_names_the_cut_and_exits_1(run_fxflow):
    code, out, err = run_fxflow("check", "examples/seed.py:Net")
    assert code == 1, err
    lines = out.splitlines()
    row = next(line for line in lines if line.startswith("first.weight"))
    assert "cut" in row and "missing" in row and "detach @ examples/seed.py:15" in row
    assert next(line for line in lines if line.startswith("last.weight")).split()[2:4] == ["reachable", "ok"]
    assert lines[-1].startswith("problem: 4 of 6 parameters")


def test_a_healthy_model_exits_0(run_fxflow):
    code, out, err = run_fxflow("check", f"{MODELS}:Good")
    assert code == 0, err
    assert out.splitlines()[-1].startswith("ok:")


def test_json_report(run_fxflow):
    code, report = check_json(run_fxflow, f"{MODELS}:Cut")
    assert code == 1
    assert report["ok"] is False and report["backward"] is True
    assert report["target"] == f"{MODELS}:Cut"
    assert verdicts(report) == {"first.weight": ("cut", "missing"), "first.bias": ("cut", "missing"),
                                "last.weight": ("reachable", "ok"), "last.bias": ("reachable", "ok")}
    site = report["parameters"][0]["cut_by"][0]
    assert site["op"] == "detach" and site["source"].endswith("models.py:28")
    assert report["parameters"][0]["shape"] == [8, 10]


def test_allow_turns_deliberate_dryness_into_exit_0(run_fxflow):
    assert run_fxflow("check", f"{MODELS}:Twin")[0] == 1
    code, out, err = run_fxflow("check", f"{MODELS}:Twin", "--allow", "target_net.*")
    assert code == 0, err
    assert "(allowed)" in out
    code, out, err = run_fxflow("check", f"{MODELS}:Twin", "--allow", "target_net.weight")
    assert code == 1  # the bias is still dry and not allowed


def test_seed_makes_runs_repeat_and_differ(run_fxflow):
    def norms(seed: str) -> list:
        return [p["grad_norm"] for p in check_json(run_fxflow, f"{MODELS}:Dropout", "--seed", seed)[1]["parameters"]]

    first = norms("3")
    assert first == norms("3")
    assert first != norms("4")
    assert all(isinstance(n, float) and n > 0 for n in first)


def test_arg_values_are_python_literals(run_fxflow):
    code, report = check_json(run_fxflow, f"{MODELS}:NeedsArgs", "--arg", "hidden=6", "--arg", "depth=2",
                              "--arg", "scale=0.5", "--arg", "act='tanh'", "--input-size", "3,6")
    assert code == 0
    shapes = {p["name"]: p["shape"] for p in report["parameters"]}
    assert shapes == {"layers.0.weight": [6, 6], "layers.0.bias": [6], "layers.1.weight": [6, 6], "layers.1.bias": [6]}


def test_a_function_returning_a_module(run_fxflow):
    code, report = check_json(run_fxflow, f"{MODELS}:build", "--arg", "width=4")
    assert code == 0
    assert report["parameters"][0]["shape"] == [4, 4]


def test_dotted_module_target(run_fxflow):
    code, out, err = run_fxflow("check", "tests.targets.models:Good")
    assert code == 0, err


def test_long_input_size_gives_valid_token_ids(run_fxflow):
    # The embedding has 5 rows: ids drawn outside [0, 5) would make forward raise IndexError.
    for seed in ("0", "1", "2"):
        code, report = check_json(run_fxflow, f"{MODELS}:Embed", "--input-size", "2,7:long", "--seed", seed)
        assert code == 0
        assert verdicts(report)["embedding.weight"] == ("reachable", "ok")


def test_several_input_sizes(run_fxflow):
    code, report = check_json(run_fxflow, f"{MODELS}:TwoInputs", "--input-size", "2,10", "--input-size", "2,3")
    assert code == 0
    assert {s for s, _ in verdicts(report).values()} == {"reachable"}


def test_example_inputs_are_picked_up(run_fxflow):
    code, report = check_json(run_fxflow, "examples/seed.py:Net")
    assert "inputs from example_inputs()" in report["notes"]


@pytest.mark.parametrize("name,shape", [("Good", "(2,10)"), ("Conv", "(2,3,32,32)")])
def test_inputs_inferred_from_the_first_layer(run_fxflow, name, shape):
    code, report = check_json(run_fxflow, f"{MODELS}:{name}")
    assert code == 0
    assert any("first layer" in note and shape in note for note in report["notes"]), report["notes"]
    assert report["backward"] is True


def test_no_inputs_at_all_is_not_verified(run_fxflow):
    """The static analysis still runs, but with no backward nothing is "ok": exit 2, and the note
    names forward's arguments so the user knows what to give."""
    code, out, err = run_fxflow("check", f"{MODELS}:TwoInputs", "--json")
    report = json.loads(out)
    assert code == 2, err
    assert report["backward"] is False and report["verified"] is False
    assert report["ok"] is False and report["status"] == "not verified"
    assert any("forward(x, y)" in note and "--input-size" in note for note in report["notes"])
    code, out, err = run_fxflow("check", f"{MODELS}:TwoInputs")
    assert code == 2
    assert out.strip().splitlines()[-1].startswith("not verified: no backward ran")
    assert "ok" not in out.strip().splitlines()[-1].split(":")[0]


def test_no_backward(run_fxflow):
    code, report = check_json(run_fxflow, f"{MODELS}:Cut", "--no-backward")
    assert code == 1  # the static cut alone fails the check
    assert report["backward"] is False
    assert {d for _, d in verdicts(report).values()} == {None}
    assert all(p["grad_norm"] is None for p in report["parameters"])


def test_quiet_prints_only_the_summary(run_fxflow):
    code, out, err = run_fxflow("check", f"{MODELS}:Cut", "--quiet")
    assert code == 1
    assert out.strip().count("\n") == 0 and out.startswith("problem:")


def test_json_stays_clean_when_forward_prints(run_fxflow):
    code, out, err = run_fxflow("check", f"{MODELS}:Chatty", "--json")
    assert code == 0, err
    json.loads(out)
    assert "chatty forward called" in err


def test_python_m_and_console_script_agree(run_fxflow):
    args = ("check", "examples/seed.py:Net", "--json")
    assert run_fxflow(*args, module=True)[:2] == run_fxflow(*args, module=False)[:2]


def test_no_command_prints_help_and_exits_2(run_fxflow):
    code, out, err = run_fxflow()
    assert code == 2
    assert "check" in out + err


def test_a_closed_pipe_is_not_an_error():
    """``fxflow check ... | true``: the reader is gone before fxflow writes; no BrokenPipeError shows."""
    import subprocess
    import sys

    done = subprocess.run(f"{sys.executable} -m fxflow check examples/seed.py:Net --json | true",
                          shell=True, capture_output=True, text=True, cwd=TARGETS.parent.parent)
    assert "Broken" not in done.stderr and "Traceback" not in done.stderr, done.stderr
