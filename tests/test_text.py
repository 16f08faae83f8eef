"""The terminal report's words: one paragraph per cut naming op, line and victims; a true summary."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fxflow
from tests.models import marker_line, real_grads
from tests.models.causes import Detach, Round, TwoCutsInParallel, Unused


def report_of(cls):
    torch.manual_seed(0)
    model = cls()
    x = torch.randn(5, 6)
    return model, x, fxflow.check(model, x)


def test_cut_paragraph_names_op_line_and_victims() -> None:
    model, x, report = report_of(Detach)
    text = report.table()
    _, line = marker_line(Detach, "plant-detach")
    missing = [n for n, g in real_grads(model, (x,)).items() if g is None]  # named_parameters order
    paragraph = next(l for l in text.splitlines() if l.startswith("detach at "))
    assert f"causes.py:{line}" in paragraph
    assert "cuts " + ", ".join(missing) + " off from the output" in paragraph
    assert paragraph.endswith(".")


def test_zero_paragraph_does_not_call_it_a_cut() -> None:
    _, _, report = report_of(Round)
    text = report.table()
    paragraph = next(l for l in text.splitlines() if l.startswith("round at "))
    assert "exactly zero gradient" in paragraph and "cuts" not in paragraph
    assert "first zero: round" in report.summary()


def test_parallel_cuts_get_a_paragraph_each_and_summary_names_first() -> None:
    _, _, report = report_of(TwoCutsInParallel)
    lines = report.table().splitlines()
    assert any(l.startswith("detach at ") for l in lines) and any(l.startswith("gt at ") for l in lines)
    _, left = marker_line(TwoCutsInParallel, "plant-left")
    assert f"first cut: detach @ tests/models/causes.py:{left}" in report.summary() or \
        report.summary().endswith(f"causes.py:{left})")


def test_unused_parameters_share_one_line_per_module() -> None:
    _, _, report = report_of(Unused)
    lines = [l for l in report.table().splitlines() if "unused:" in l]
    assert lines == ["c.weight, c.bias are unused: its module c is never called in forward."]


def test_summary_counts_match_the_report() -> None:
    for cls in (Detach, Round, Unused, TwoCutsInParallel):
        _, _, report = report_of(cls)
        problems = len(report.problems)
        assert report.summary().startswith(f"problem: {problems} of {len(report.parameters)} parameters")


# -- friction found by a new user ------------------------------------------------------------------

import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402

from torch import nn  # noqa: E402

from fxflow.static.explain import with_article  # noqa: E402
from fxflow.present.text import format_norm, render_text  # noqa: E402
from tests.gradtruth import real_gradients  # noqa: E402
from tests.models import reference_dynamic  # noqa: E402
from tests.models.causes import Argmax  # noqa: E402


class Backbone(nn.Module):
    """A backbone whose output is detached: its 4 parameters are cut, the head's 2 learn."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.backbone(x).detach())


def test_allowed_dryness_is_named_in_the_ok_summary() -> None:
    torch.manual_seed(0)
    model, x = Backbone(), torch.randn(4, 6)
    grads = real_grads(model, (x,))
    dry = [n for n, g in grads.items() if g is None]
    report = fxflow.check(model, x, allow=["backbone.*"])
    assert report.ok and len(dry) == 4
    assert report.summary() == f"ok: no unexpected problems; {len(dry)} allowed (cut)"
    mixed = fxflow.check(model, x, allow=["backbone.*", "head.bias"])  # a healthy allowed parameter is not counted
    assert mixed.summary() == "ok: no unexpected problems; 4 allowed (cut)"


def test_healthy_model_says_all_get_a_gradient() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    assert fxflow.check(model, torch.randn(4, 6)).summary() == "ok: all 4 trainable parameters get a gradient"


def sigmoid_stack(depth: int = 30) -> nn.Module:
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(4, 4), nn.Sigmoid()]
    return nn.Sequential(*layers, nn.Linear(4, 1))


def test_vanishing_norms_show_their_magnitude_and_the_summary_says_so() -> None:
    model, x = sigmoid_stack(), torch.randn(3, 4)
    expected = reference_dynamic(real_grads(model, (x,)))
    vanishing = [n for n, v in expected.items() if v == "vanishing"]
    assert len(vanishing) > 20  # the model does what it is for
    report = fxflow.check(model, x)
    assert [p.name for p in report.parameters if p.dynamic == "vanishing"] == vanishing
    rows = {line.split()[0]: line for line in render_text(report, all_rows=True).splitlines()[3:3 + len(report.parameters)]}
    for parameter in report.parameters:
        cell = rows[parameter.name].split()[4]
        assert math.isclose(float(cell), parameter.grad_norm, rel_tol=1e-3)  # the printed digits are the value
        assert float(cell) != 0.0
    smallest = min(p.grad_norm for p in report.parameters if p.dynamic == "vanishing")
    largest = max(float(g.norm()) for g in real_gradients(model, (x,)).values())  # the real backward's
    summary = report.summary()
    assert summary.startswith(f"ok: all {len(report.parameters)} trainable parameters get a gradient; "
                              f"{len(vanishing)} vanishing (smallest norm {format_norm(smallest)}, 1/")
    # relative to what: the largest gradient in the model, as a fraction a reader can picture
    found = re.search(r", 1/(\S+) of the largest's (\S+)\)$", summary)
    assert math.isclose(float(found[2]), largest, rel_tol=1e-3)
    assert math.isclose(float(found[1]), largest / smallest, rel_tol=0.05)
    assert "e-" in format_norm(smallest)


def test_format_norm() -> None:
    assert [format_norm(v) for v in (None, 0.0, 7.038044634156954, 1.2e-25, float("nan"), float("inf"))] == \
        ["-", "0", "7.038", "1.2e-25", "nan", "inf"]


class NonFinite(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x):
        return self.b(torch.sqrt(self.a(x) * 0.0))  # d sqrt(0) = inf, times 0: NaN reaches a


def test_nonfinite_norm_agrees_in_table_json_and_docs() -> None:
    torch.manual_seed(0)
    model, x = NonFinite(), torch.randn(3, 4)
    grads = real_grads(model, (x,))
    assert not bool(torch.isfinite(grads["a.weight"]).all())
    report = fxflow.check(model, x)
    assert report.parameter("a.weight").dynamic == "nonfinite"
    row = next(line for line in render_text(report).splitlines() if line.startswith("a.weight "))
    assert row.split()[3:5] == ["nonfinite", "-"]
    data = json.loads(report.to_json(), parse_constant=lambda name: pytest.fail(f"JSON has {name}"))
    assert next(p for p in data["parameters"] if p["name"] == "a.weight")["grad_norm"] is None
    docs = (Path(__file__).resolve().parent.parent / "docs" / "json.md").read_text()
    assert "null when none arrived, when it is not finite" in docs and "Infinity" not in docs


def test_integer_dtype_reason_reads_an_int64() -> None:
    _, _, report = report_of(Argmax)
    assert [site.reason for site in report.cuts] == [
        "argmax returns an int64 tensor (indices or flags), which carries no gradient"]
    assert [with_article(w) for w in ("int64", "int32", "bool", "uint8", "float16")] == \
        ["an int64", "an int32", "a bool", "a uint8", "a float16"]
