"""``fxflow check --format github|sarif|json|text``: real CLI runs, checked against a real backward."""
from __future__ import annotations

import json
import re
import sys

import pytest
import torch

from conftest import ROOT
from fxflow.present.github import escape_data, escape_property

sys.path.insert(0, str(ROOT / "examples"))
import seed  # noqa: E402

from tests.models import real_grads  # noqa: E402


def seed_truth() -> tuple[list[str], int]:
    """The parameters a real backward leaves without a gradient, and the line of the planted detach."""
    torch.manual_seed(0)
    model = seed.Net()
    dry = [name for name, grad in real_grads(model, (seed.example_inputs(),)).items() if grad is None]
    lines = (ROOT / "examples" / "seed.py").read_text().splitlines()
    (line,) = [number for number, text in enumerate(lines, 1) if ".detach()" in text]
    return dry, line


def test_github_annotation_at_the_cut_line(run_fxflow):
    dry, line = seed_truth()
    code, out, err = run_fxflow("check", "examples/seed.py:Net", "--format", "github")
    assert code == 1, err
    annotations = [l for l in out.splitlines() if l.startswith("::")]
    assert annotations == [
        f"::error file=examples/seed.py,line={line},title=fxflow cut::detach cuts {', '.join(dry)} off from the "
        "output: detach() returns a tensor with no autograd history, so the gradient stops here"
        "%0Afix: remove the detach, or use a straight-through estimator: `x + (f(x) - x).detach()`; "
        "for a deliberate freeze, pass --allow 'first.*' --allow 'middle.*'"]
    assert out.splitlines()[-1].startswith("problem: 4 of 6 parameters will not learn")


def test_github_escapes_properties_and_data(run_fxflow, write_model, tmp_path):
    assert escape_data("50%\r\nnext") == "50%25%0D%0Anext"
    assert escape_property("a,b:c%") == "a%2Cb%3Ac%25"
    folder = tmp_path / "odd,dir:name"
    folder.mkdir()
    write_model(folder, """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 1)

            def forward(self, x):
                return self.b(self.a(x).detach())  # plant

        def example_inputs():
            return torch.randn(2, 4)
    """)
    code, out, err = run_fxflow("check", "odd,dir:name/model.py:Net", "--format", "github", cwd=tmp_path)
    assert code == 1, err
    assert out.startswith("::error file=odd%2Cdir%3Aname/model.py,line=10,title=fxflow cut::detach cuts a.weight, a.bias")


def test_sarif_structure(run_fxflow):
    dry, line = seed_truth()
    code, out, err = run_fxflow("check", "examples/seed.py:Net", "--format", "sarif")
    assert code == 1, err
    log = json.loads(out)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "fxflow"
    rule_ids = [rule["id"] for rule in driver["rules"]]
    assert len(set(rule_ids)) == len(rule_ids)
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] and rule["defaultConfiguration"]["level"] in ("error", "warning", "note")
    (result,) = run["results"]
    assert result["ruleId"] == "cut" and rule_ids[result["ruleIndex"]] == "cut"
    assert result["level"] == "error"
    assert all(name in result["message"]["text"] for name in dry)
    (location,) = result["locations"]
    assert location["physicalLocation"]["artifactLocation"]["uri"] == "examples/seed.py"
    assert location["physicalLocation"]["region"]["startLine"] == line
    assert "baselineState" not in result and result["partialFingerprints"]


def test_json_flag_is_format_json_and_text_is_the_default(run_fxflow):
    results = [run_fxflow("check", "examples/seed.py:Net", *flags) for flags in
               (["--json"], ["--format", "json"], [], ["--format", "text"])]
    assert [code for code, _, _ in results] == [1, 1, 1, 1]
    assert results[0][1] == results[1][1] and json.loads(results[0][1])["ok"] is False
    assert results[2][1] == results[3][1] and results[2][1].startswith("fxflow check examples/seed.py:Net")


@pytest.mark.parametrize("fmt", ["github", "sarif"])
def test_healthy_model_has_no_error(run_fxflow, fmt):
    code, out, err = run_fxflow("check", "examples/seed_fixed.py:Net", "--format", fmt)
    assert code == 0, err
    if fmt == "github":
        assert out.splitlines() == ["ok: all 6 trainable parameters get a gradient"]
    else:
        assert json.loads(out)["runs"][0]["results"] == []


def test_unused_at_the_attribute_s_line_and_the_rest_at_the_class(run_fxflow, write_model, tmp_path):
    write_model(tmp_path, """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.stack = nn.Sequential(*[m for _ in range(30) for m in (nn.Linear(4, 4), nn.Sigmoid())])
                self.spare = nn.Linear(4, 4)

            def forward(self, x):
                return self.stack(x)

        def example_inputs():
            return torch.randn(3, 4)
    """, name="deep.py")
    code, out, err = run_fxflow("check", "deep:Net", "--format", "github", cwd=tmp_path)  # a dotted target
    assert code == 1, err
    lines = out.splitlines()
    assert "::error file=deep.py,line=8,title=fxflow unused::spare.weight, spare.bias are unused: " \
           "its module spare is never called in forward%0Afix: call the layer in forward, or delete it " \
           "(unused trainable parameters also break DDP); " \
           "for a deliberate freeze, pass --allow 'spare.*'" in lines
    (warning,) = [line for line in lines if line.startswith("::warning")]
    assert warning.startswith("::warning file=deep.py,line=4,title=fxflow vanishing::")
    assert "have vanishing gradients (smallest norm " in warning and "e-" in warning


def test_sarif_rules_have_readable_names_and_help(run_fxflow):
    code, out, err = run_fxflow("check", "examples/seed.py:Net", "--format", "sarif")
    assert code == 1, err
    for rule in json.loads(out)["runs"][0]["tool"]["driver"]["rules"]:
        assert rule["name"].lower() != rule["id"].lower().replace("-", "")  # SARIF1001 otherwise
        assert re.fullmatch(r"[A-Z][A-Za-z]+", rule["name"]) and len(rule["help"]["text"]) > 40


def test_a_dead_relu_is_annotated_at_the_relu(run_fxflow):
    from models.dead_relu import RELU_LINE, DeadRelu, example_inputs

    code, out, err = run_fxflow("check", "tests/models/dead_relu.py:DeadRelu", "--format", "sarif")
    assert code == 1, err
    (result,) = json.loads(out)["runs"][0]["results"]
    assert result["ruleId"] == "zero-gradient" and "dead.weight" in result["message"]["text"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "tests/models/dead_relu.py"
    assert location["region"]["startLine"] == RELU_LINE
    # what a plain backward of the same model gives: the ReLU is never active, the gradient exactly 0
    torch.manual_seed(0)
    model = DeadRelu()
    model(example_inputs()).sum().backward()
    assert model.dead.weight.grad.abs().sum() == 0 and model.first.weight.grad.abs().sum() > 0
