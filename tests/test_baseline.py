"""Baselines: ``--write-baseline`` records today's problems, ``--baseline`` fails only on new ones."""
from __future__ import annotations

import json

import pytest

MODEL = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x):
        h = self.a(x).detach()  # a deliberate cut, accepted in the baseline
        h = self.b(h){second_cut}
        return self.c(h)


def example_inputs():
    return torch.randn(3, 4)
"""


def write(tmp_path, *, second_cut: bool = False, blank_lines: int = 0) -> None:
    source = MODEL.replace("class Net", "\n" * blank_lines + "class Net")
    (tmp_path / "model.py").write_text(source.format(second_cut=".detach()" if second_cut else ""))


def test_baseline_accepts_known_problems_and_fails_on_new_ones(run_fxflow, tmp_path):
    write(tmp_path)
    code, out, err = run_fxflow("check", "model.py:Net", "--write-baseline", "-q", cwd=tmp_path)
    assert code == 0 and err == "fxflow: recorded 2 problems of model.py:Net in fxflow-baseline.json\n"
    recorded = json.loads((tmp_path / "fxflow-baseline.json").read_text())
    assert recorded == {"fxflow_baseline": 1, "targets": {"model.py:Net": [
        {"parameter": "a.bias", "verdict": "cut", "cut_by": ["detach @ model.py"]},
        {"parameter": "a.weight", "verdict": "cut", "cut_by": ["detach @ model.py"]}]}}

    # moving the code keeps the fingerprint: still exit 0
    write(tmp_path, blank_lines=3)
    code, out, err = run_fxflow("check", "model.py:Net", "--baseline", "fxflow-baseline.json", "-q", cwd=tmp_path)
    assert code == 0, err
    assert out.splitlines() == ["problem: 2 of 6 parameters will not learn: 2 cut (first cut: detach @ model.py:15)",
                                "baseline fxflow-baseline.json: 2 known problems, none new"]

    # a second cut starves b as well: new problems, exit 1; GitHub annotates only the new cut
    write(tmp_path, second_cut=True)
    code, out, err = run_fxflow("check", "model.py:Net", "--baseline", "fxflow-baseline.json", "-q", cwd=tmp_path)
    assert code == 1, err
    assert out.splitlines()[-1] == "baseline fxflow-baseline.json: 2 known problems, 2 new: b.weight (cut), b.bias (cut)"
    code, out, err = run_fxflow("check", "model.py:Net", "--baseline", "fxflow-baseline.json", "--format", "github",
                                cwd=tmp_path)
    assert code == 1
    errors = [line for line in out.splitlines() if line.startswith("::error")]
    assert len(errors) == 1 and "line=13" in errors[0] and "cuts b.weight, b.bias" in errors[0]
    code, out, err = run_fxflow("check", "model.py:Net", "--baseline", "fxflow-baseline.json", "--format", "sarif",
                                cwd=tmp_path)
    states = {r["locations"][0]["physicalLocation"]["region"]["startLine"]: (r["baselineState"], r["level"])
              for r in json.loads(out)["runs"][0]["results"]}
    assert states == {12: ("unchanged", "note"), 13: ("new", "error")}


def test_baseline_joins_allow_and_reports_fixed_entries(run_fxflow, tmp_path):
    write(tmp_path, second_cut=True)
    code, _, err = run_fxflow("check", "model.py:Net", "--write-baseline", "--baseline", "base.json", "-q",
                              cwd=tmp_path)
    assert code == 0, err
    write(tmp_path)  # the second cut is fixed
    code, out, err = run_fxflow("check", "model.py:Net", "--baseline", "base.json", "--allow", "a.*", "--json",
                                cwd=tmp_path)
    assert code == 0, err
    report = json.loads(out)
    assert report["ok"] is True  # a.* is allowed, b learns again
    assert report["baseline"] == {"path": "base.json", "known": [], "new": [], "ok": True,
                                  "fixed": ["a.bias", "a.weight", "b.bias", "b.weight"]}


@pytest.mark.parametrize("content", [None, "not json", '{"something": "else"}'])
def test_missing_or_foreign_baseline_is_a_one_line_error(run_fxflow, tmp_path, content):
    write(tmp_path)
    if content is not None:
        (tmp_path / "base.json").write_text(content)
    code, out, err = run_fxflow("check", "model.py:Net", "--baseline", "base.json", cwd=tmp_path)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "base.json" in err
