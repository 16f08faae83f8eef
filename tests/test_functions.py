"""Custom autograd.Functions: their own backward runs on twins, so a ``None`` it returns for an
input is a cut named at the user's line, on every capture path and both twin kinds."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import fxflow
from gradtruth import assert_agrees, line_of, real_grads


def _scale_grad() -> type:
    """``ScaleGrad`` of examples/hidden_autograd_function.py: its backward is ``return None``."""
    path = Path(__file__).resolve().parent.parent / "examples" / "hidden_autograd_function.py"
    spec = importlib.util.spec_from_file_location("fxflow_example_hidden_autograd_function_fn", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ScaleGrad


ScaleGrad = _scale_grad()


class KeepFirst(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, grad):
        return grad, None  # the second input gets nothing


class Zeroes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return torch.zeros_like(grad)  # a gradient arrives, but it is exactly zero


class SingleNone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.last = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x):
        h = ScaleGrad.apply(torch.relu(self.first(x)))  # marker: single
        return self.last(h)


class PairNone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.head = nn.Linear(4, 8), nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x):
        h = KeepFirst.apply(self.a(x), torch.tanh(self.b(x)))  # marker: pair
        return self.head(h)


class Through(nn.Module):
    """Two layers with ``function`` between them."""

    def __init__(self, function: type) -> None:
        super().__init__()
        self.first, self.last, self.function = nn.Linear(4, 8), nn.Linear(8, 2), function

    def forward(self, x):
        return self.last(self.function.apply(self.first(x)))


CASES = [
    (SingleNone, "ScaleGrad", "# marker: single", {"first.weight", "first.bias"}),
    (PairNone, "KeepFirst", "# marker: pair", {"b.weight", "b.bias"}),
]


@pytest.fixture(params=["meta", "real"])
def twins(request, monkeypatch) -> str:
    monkeypatch.setenv("FXFLOW_TWINS", request.param)
    return request.param


@pytest.mark.parametrize("method", ["symbolic_trace", "runtime"])
@pytest.mark.parametrize("case, function, marker, dry", CASES, ids=["return None", "return grad, None"])
def test_a_backward_returning_none_is_a_cut_at_the_apply(case, function, marker, dry, method, twins) -> None:
    torch.manual_seed(0)
    model, inputs = case(), (torch.randn(3, 4),)
    report = fxflow.check(model, inputs, capture_methods=[method])
    assert report.trace.method == method
    assert_agrees(report, real_grads(model, inputs))  # no opaque exception: every verdict is decided
    assert {p.name for p in report.parameters if p.static == "cut"} == dry
    assert all(p.agree for p in report.parameters)
    source = f"{_display(__file__)}:{line_of(__file__, marker)}"
    for name in dry:
        assert [(site.op, site.source) for site in report.parameter(name).cut_by] == [(f"{function}.apply", source)]
        assert "returns None" in report.parameter(name).cut_by[0].reason


def test_a_backward_returning_zeros_is_a_zero_verdict(twins: str) -> None:
    torch.manual_seed(0)
    model, inputs = Through(Zeroes), (torch.randn(3, 4),)
    report = fxflow.check(model, inputs)
    assert {p.name: (p.static, p.dynamic) for p in report.parameters} == {
        "first.weight": ("zero", "zero"), "first.bias": ("zero", "zero"),
        "last.weight": ("reachable", "ok"), "last.bias": ("reachable", "ok")}
    assert all(p.agree for p in report.parameters)


class OnlyOnce(torch.autograd.Function):
    """A backward that can run only once (the real backward): the analysis cannot run it."""

    ran = False

    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, grad):
        if OnlyOnce.ran:
            raise RuntimeError("this backward runs once")
        OnlyOnce.ran = True
        return None


def test_a_backward_that_cannot_run_stays_opaque_and_disagreement_is_not_hidden() -> None:
    """The real backward decides, and the mismatch it shows is reported as one: ``agree`` is never
    forced true because a custom Function lies on the path."""
    torch.manual_seed(0)
    OnlyOnce.ran = False
    report = fxflow.check(Through(OnlyOnce), (torch.randn(3, 4),))
    first = report.parameter("first.weight")
    assert (first.static, first.dynamic, first.agree) == ("reachable", "missing", False)
    assert "OnlyOnce" in first.diagnosis and not report.ok


def _display(path: str) -> str:
    from fxflow.core.source import display_path

    return display_path(path)
