"""The reconcile stage on its own: dynamic verdicts from real gradients, then static against dynamic.

Every case runs a real model; the expected verdicts come from the gradients a plain backward
leaves, not from fxflow.
"""
from __future__ import annotations

import math

import torch
from torch import nn

import fxflow
from fxflow.dynamic.probe import run_model
from fxflow.core.guard import guard
from fxflow.dynamic.gradients import dynamic_verdicts
from fxflow.reconcile import matches



class Grads(nn.Module):
    """One parameter per dynamic verdict: ok, exactly zero, vanishing, nonfinite, missing."""

    def __init__(self) -> None:
        super().__init__()
        self.ok = nn.Parameter(torch.ones(3))
        self.zero = nn.Parameter(torch.ones(3))
        self.tiny = nn.Parameter(torch.ones(3))
        self.nan = nn.Parameter(torch.ones(3))
        self.missing = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dead = torch.relu(-x.abs() - 1) * self.zero  # relu of a negative input: exact zero gradient
        shrunk = self.tiny * 1e-9
        broken = torch.sqrt(self.nan - 2)  # sqrt of a negative number: NaN gradient
        return x * self.ok + dead + shrunk + broken.nan_to_num(0.0) * 0 + self.missing.detach()


def test_dynamic_verdicts_follow_the_real_gradients():
    model = Grads()
    x = torch.randn(4, 3)
    with guard(model, fresh_grads=True):
        result = run_model(model, (x,)).result
    verdicts = dynamic_verdicts(result, vanishing=1e-3)
    model.zero_grad(set_to_none=True)
    out = model(x)
    (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(0))).sum().backward()
    real = dict(model.named_parameters())
    assert real["missing"].grad is None and verdicts["missing"] == "missing"
    assert torch.count_nonzero(real["zero"].grad) == 0 and verdicts["zero"] == "zero"
    assert not torch.isfinite(real["nan"].grad).all() and verdicts["nan"] == "nonfinite"
    assert real["tiny"].grad.norm() < 1e-6 * real["ok"].grad.norm() and verdicts["tiny"] == "vanishing"
    assert verdicts["ok"] == "ok"
    # read in one float32 pass (float64 only where float32 could underflow): float32's precision
    assert math.isclose(result.grads["ok"].norm, float(real["ok"].grad.double().norm()), rel_tol=1e-6)


class SwitchesBranch(nn.Module):
    """The trace sees one branch, the real run the other: static and dynamic must disagree."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 2), nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(x) if isinstance(x, torch.fx.Proxy) else self.a(x)  # symbolic tracing passes proxies


def test_a_disagreement_is_kept_and_explained_never_forced():
    report = fxflow.check(SwitchesBranch(), torch.randn(2, 3), capture_methods=["symbolic_trace"])
    a = report.parameter("a.weight")
    assert (a.static, a.dynamic, a.agree) == ("unused", "ok", False)
    assert "the trace differs from what forward ran" in a.diagnosis
    b = report.parameter("b.weight")
    assert (b.static, b.dynamic, b.agree) == ("reachable", "missing", False)
    assert not report.ok


def test_allow_patterns_are_globs_on_qualified_names():
    assert matches("backbone.0.weight", ["backbone.*"])
    assert not matches("head.weight", ["backbone.*"])
