"""The look-ahead costs one forward and one backward per step, and a model with no exact zero pays nothing
for it (issue 38): its reruns are the user's forward with no hook of fxflow's on the model, and what the
first forward wrote into the model is kept only where a look-ahead may follow.

Each test also checks the verdicts against real steps where they bear on it: the lean rerun must still
see what a training step sees (the zero-init's parameters learn from step 2, a healthy model is ok).
"""
from __future__ import annotations

import torch

import fxflow
from fxflow.dynamic.probe import run_model
from test_training_lookahead import real_first_steps


CALLS: dict[int, list[int]] = {}  # id(a Counted) -> the forward hooks on it at each call (outside the model,
# which the check puts back as found, attributes included)


class Counted(torch.nn.Linear):
    """A Linear that notes, at each call, how many forward hooks watch it."""

    @property
    def calls(self) -> list[int]:
        return CALLS.setdefault(id(self), [])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(len(self._forward_hooks))
        return super().forward(x)


class ZeroHeld(torch.nn.Module):
    """``inner`` gets an exactly zero gradient on step 1: the zero-initialized ``out`` holds it."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Counted(6, 6)
        self.out = torch.nn.Linear(6, 1)
        torch.nn.init.zeros_(self.out.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.inner(x)))


class Healthy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Counted(6, 6)
        self.out = torch.nn.Linear(6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.inner(x)))


def test_look_ahead_reruns_run_forward_with_no_hook_of_fxflow() -> None:
    torch.manual_seed(0)
    model, x = ZeroHeld(), torch.randn(4, 6)
    truth = real_first_steps(model, (x,), 3, loss_fn=lambda out: out.sum())
    report = fxflow.check(model, x, loss_fn=lambda out: out.sum())
    held = {p.name: p.learns_from_step for p in report.parameters if p.dynamic == "held"}
    assert held == {name: step for name, step in truth.items() if step and step > 1} == {
        "inner.weight": 2, "inner.bias": 2}
    first, *reruns = model.inner.calls
    assert first >= 1  # the first run measures each module's gradient (the report's per-call norms)
    # every later call (the look-ahead's step, then the symbolic trace's): the forward as training calls it
    assert reruns and reruns == [0] * len(reruns)
    assert not model.inner._forward_hooks and not model.inner._backward_hooks


def test_healthy_model_keeps_nothing_for_a_look_ahead() -> None:
    torch.manual_seed(0)
    healthy, held, x = Healthy(), ZeroHeld(), torch.randn(4, 6)
    kept = {}
    for name, model in (("healthy", healthy), ("held", held)):
        run = run_model(model, (x,), loss_fn=lambda out: out.sum(), record=True)
        kept[name] = run.writes is not None
        model.zero_grad(set_to_none=True)
    assert kept == {"healthy": False, "held": True}
    report = fxflow.check(healthy, x, loss_fn=lambda out: out.sum())
    assert report.ok and all(p.dynamic == "ok" for p in report.parameters)
    assert "look-ahead" not in report.timings
