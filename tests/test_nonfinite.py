"""Where a NaN or an inf is born (issue 20): the first op that made one from finite values,
forward or backward, named by its line; compared with ``torch.autograd.detect_anomaly`` on the
same models, which only looks at the backward and often names an op that merely carried it."""
from __future__ import annotations

import re
import warnings

import pytest
import torch
from torch import nn

import fxflow
from fxflow.core.source import display_path
from gradtruth import line_of, real_gradients

HERE = __file__


class LogOfANegative(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        h = torch.log(self.fc(x))  # born: log of a negative
        return self.out(h)


class ZeroOverZero(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        h = self.fc(x)
        d = h - h.detach()  # exactly 0, and differentiable
        unit = d / d.norm(dim=-1, keepdim=True)  # born: 0 / 0
        return self.out(h + unit)


class ExpOverflow(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        h = torch.exp(self.fc(x) * 1000)  # born: exp overflows
        return self.out(h)


class SqrtAtZero(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        h = self.fc(x)
        d = h - h.detach()
        return self.out(h) + torch.sqrt(d).sum(-1, keepdim=True)  # born in the backward: sqrt at 0


class NormOfAZeroVector(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        h = self.fc(x)
        d = h - h.detach()
        length = d.pow(2).sum(-1, keepdim=True).pow(0.5)  # born in the backward: the norm of a zero vector
        return self.out(h) + length


class MaskedAttention(nn.Module):
    """A -inf attention mask before a softmax: intentional, healed by the softmax, never reported."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 8)

    def forward(self, x):
        scores = self.q(x) @ x.transpose(-1, -2)
        mask = torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)
        return torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ x


CASES = {
    LogOfANegative: ("forward", "log", "born: log of a negative", "log of a negative number gives a NaN"),
    ZeroOverZero: ("forward", "div", "born: 0 / 0", "0 / 0 gives a NaN"),
    ExpOverflow: ("forward", "exp", "born: exp overflows", "exp overflowed"),
    SqrtAtZero: ("backward", "sqrt", "born in the backward: sqrt at 0", "the backward of sqrt"),
    NormOfAZeroVector: ("backward", "pow", "born in the backward: the norm", "the backward of pow"),
}


def _inputs(model: nn.Module) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(4, 8 if isinstance(model, MaskedAttention) else 10)


@pytest.mark.parametrize("cls", list(CASES), ids=lambda c: c.__name__)
def test_the_line_where_a_nonfinite_value_is_born_is_named(cls):
    model = cls()
    x = _inputs(model)
    real = real_gradients(model, (x,))
    assert any(g is not None and not bool(torch.isfinite(g).all()) for g in real.values())  # the real step breaks
    phase, op, marker, reason = CASES[cls]
    report = fxflow.check(model, x)
    assert report.nonfinite, report.table()
    first = report.nonfinite[0]
    assert (first.phase, first.op, first.source) == (phase, op, f"{display_path(HERE)}:{line_of(HERE, marker)}")
    assert first.reason.startswith(reason) or reason in first.reason, first.reason
    assert report.exit_code == 1
    data = report.to_dict()["nonfinite"][0]
    assert set(data) == {"phase", "op", "source", "module", "reason"}
    assert f"first non-finite value from {op} @ {first.source} ({phase})" in report.summary()


def test_an_intentional_minus_inf_mask_reports_nothing():
    model = MaskedAttention()
    report = fxflow.check(model, _inputs(model))
    assert report.ok and report.nonfinite == []


def test_the_module_of_the_op_is_named():
    model = nn.Sequential(nn.Identity(), LogOfANegative())
    report = fxflow.check(model, torch.randn(4, 10))
    assert report.nonfinite[0].module == "1"


def anomaly_line(model: nn.Module, x: torch.Tensor) -> int | None:
    """The line of this file that ``detect_anomaly``'s forward traceback ends at (None: it raised nothing)."""
    with warnings.catch_warnings(record=True) as caught, torch.autograd.detect_anomaly():
        warnings.simplefilter("always")
        try:
            model(x).sum().backward()
        except RuntimeError:
            pass
        else:
            return None
    traces = [str(w.message) for w in caught if "Traceback of forward call" in str(w.message)]
    lines = [int(m) for trace in traces for m in re.findall(rf'File "{re.escape(HERE)}", line (\d+)', trace)]
    return lines[-1] if lines else None


def test_anomaly_mode_points_elsewhere_where_fxflow_does_not():
    """The side-by-side of docs/nonfinite.md: for a NaN the forward makes, detect_anomaly names the
    first backward node that returned one, an op that only carried it."""
    elsewhere = []
    for cls, (phase, _, marker, _) in CASES.items():
        model = cls()
        x = _inputs(model)
        born = line_of(HERE, marker)
        assert fxflow.check(model, x).nonfinite[0].source.endswith(f":{born}")
        if anomaly_line(model, x) != born:
            elsewhere.append(cls.__name__)
    assert {"LogOfANegative", "ZeroOverZero", "SqrtAtZero"} <= set(elsewhere), elsewhere


def test_ci_findings_point_at_the_birth_line():
    from fxflow.present.findings import findings
    from fxflow.present.sarif import sarif_log

    model = SqrtAtZero()
    report = fxflow.check(model, _inputs(model), target=f"{HERE}:SqrtAtZero")
    origin = [f for f in findings(report) if f.rule == "nonfinite-origin"]
    assert [(f.path, f.line, f.level) for f in origin] == [(display_path(HERE), line_of(HERE, "born in the backward: sqrt"),
                                                            "error")]
    rules = {rule["id"]: rule["name"] for rule in sarif_log(report)["runs"][0]["tool"]["driver"]["rules"]}
    assert rules["nonfinite-origin"] == "NonfiniteValueBornHere"
    nonfinite = report.parameter("fc.weight")
    assert nonfinite.dynamic == "nonfinite" and f"first made by sqrt @ {origin[0].path}:{origin[0].line}" in nonfinite.diagnosis


def test_the_diagram_marks_the_birth_node_with_its_own_legend_entry():
    model = LogOfANegative()
    report = fxflow.check(model, _inputs(model))
    dot = report.to_dot()
    marked = [line.split(" [")[0].strip() for line in dot.splitlines() if "fxflow-nonfinite" in line]
    assert marked == ["log"]
    assert "NaN/inf born here" in dot
    assert fxflow.check(MaskedAttention(), _inputs(MaskedAttention())).to_dot().count("fxflow-nonfinite") == 0
