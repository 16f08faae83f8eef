"""``fxflow diff OLD NEW``: reports or targets; verdict changes, cut sites, exit code."""
from __future__ import annotations

import json

import torch

from conftest import ROOT
from tests.models import real_grads


def dry_in_seed() -> list[str]:
    import sys

    sys.path.insert(0, str(ROOT / "examples"))
    import seed

    torch.manual_seed(0)
    return [n for n, g in real_grads(seed.Net(), (seed.example_inputs(),)).items() if g is None]


def test_fix_against_saved_report_and_regression_between_targets(run_fxflow, tmp_path):
    code, out, err = run_fxflow("check", "examples/seed.py:Net", "--json")
    assert code == 1, err
    (tmp_path / "before.json").write_text(out)
    dry = dry_in_seed()

    code, out, err = run_fxflow("diff", str(tmp_path / "before.json"), "examples/seed_fixed.py:Net")
    assert code == 0, err
    lines = out.splitlines()
    assert [line.split()[0] for line in lines if line.endswith("learns now")] == dry
    assert "cut site gone: detach @ examples/seed.py:15" in lines
    assert lines[-1] == "not worse: 0 parameters stopped learning, 4 learn now; 0 cut sites new, 1 gone"

    code, out, err = run_fxflow("diff", "examples/seed_fixed.py:Net", "examples/seed.py:Net", "--format", "json")
    assert code == 1, err
    result = json.loads(out)
    assert [c["parameter"] for c in result["changes"] if c["worse"]] == dry
    assert {(c["old"], c["new"]) for c in result["changes"]} == {("reachable/ok", "cut/missing")}
    assert result["cut_sites_new"] == [{"op": "detach", "source": "examples/seed.py:15", "node": "detach"}]
    assert result["cut_sites_gone"] == [] and result["worse"] is True


def test_same_model_twice_has_no_change(run_fxflow):
    code, out, err = run_fxflow("diff", "examples/seed.py:Net", "examples/seed.py")
    assert code == 0, err
    assert "no parameter changed its verdict" in out
    assert out.splitlines()[-1] == "not worse: 0 parameters stopped learning, 0 learn now; 0 cut sites new, 0 gone"


def test_bad_report_is_a_one_line_error(run_fxflow, tmp_path):
    (tmp_path / "bad.json").write_text('{"schema": 1}')
    code, out, err = run_fxflow("diff", str(tmp_path / "bad.json"), str(tmp_path / "absent.json"))
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "bad.json" in err


def test_a_json_report_reads_back_as_the_report_it_was_written_from():
    """``Report.from_dict`` is ``to_dict`` backwards: every field the JSON carries survives the trip."""
    from fxflow.diagnose.nonfinite import NonfiniteSite
    from fxflow.dynamic.health import HealthFlag, LayerStep
    from fxflow.report import ParameterReport, Report, TraceInfo
    from fxflow.verdicts import CutSite

    detach = CutSite("detach", "detach", "m.py:9", "detach() returns a tensor outside the graph",
                     ("forward @ m.py:20", "squash @ m.py:9"))
    report = Report(
        "m.py:Net", TraceInfo("symbolic_trace", 12, ["a note of the capture"]),
        [ParameterReport("a.weight", (4, 3), "cut", "missing", None, [detach], True, "cut by detach",
                         random_ops=["dropout @ m.py:5"], steps_with_gradient=0, missed_steps=[1, 2]),
         ParameterReport("b.bias", (), "reachable", "nonfinite", float("inf"), allowed=True)],
        device="cpu", notes=["a note"], uncertain={"stand-ins": {"nodes": 1, "parameters": ["b.bias"]}},
        backward_raises=[CutSite("searchsorted", "searchsorted", None, "no derivative")],
        nonfinite=[NonfiniteSite("forward", "log", "m.py:7", "b", "log of a negative number")],
        loss="the model's own loss", steps=3,
        gradient_history={"a": [LayerStep(1, 0.5, 1.0, 0.01), LayerStep(2, 0.25, 0.5)]},
        gradient_flags=[HealthFlag("a", "vanishing", 2, 1e-4)])
    again = Report.from_dict(json.loads(report.to_json()))
    assert again.to_dict() == report.to_dict()
    assert again.parameters[0].cut_by == [detach] and again.gradient_flags == report.gradient_flags
