"""A gradient at rounding level is zero, and a small real gradient is not (issue 39, item 2).

The truth is real Adam steps in plain torch, in float64 (:func:`test_training_lookahead.real_steps_in_float64`):
a parameter learns from the first step its gradient rises above round-off there.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import fxflow
from test_training_lookahead import (SingleFeatureNorm, SingleKeyAttention, Top1Renormalised, inputs_of,
                                     projection_loss, real_steps_in_float64)


class Faded(nn.Module):
    """A real gradient a constant makes tiny: 1e-9 of the others, in float32 and in float64 alike."""

    def __init__(self):
        super().__init__()
        self.main, self.faint = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x):
        return self.main(x) + 1e-9 * self.faint(x)


@pytest.mark.parametrize("make", [SingleFeatureNorm, Top1Renormalised, SingleKeyAttention, Faded])
def test_round_off_is_zero_and_a_small_gradient_is_not(make):
    torch.manual_seed(0)
    model = make()
    inputs = inputs_of(model)
    exact = real_steps_in_float64(model, inputs)
    report = fxflow.check(model, inputs, loss_fn=projection_loss)
    never = {name for name, step in exact.items() if step is None}
    assert {p.name for p in report.problems} == never
    for parameter in report.parameters:
        step = exact[parameter.name]
        if step is None:
            assert parameter.dynamic == "zero", (parameter.name, parameter.dynamic)
        elif step == 1:
            assert parameter.dynamic in ("ok", "vanishing"), (parameter.name, parameter.dynamic)
        else:
            assert parameter.dynamic == "held" and parameter.learns_from_step == step, (parameter.name, parameter.dynamic)


def test_round_off_on_the_first_step_says_so():
    """A LayerNorm over one feature: its weight's float32 gradient is about 1e-6 of the largest, zero in
    exact arithmetic; it reads zero, "zero up to rounding"."""
    torch.manual_seed(0)
    model = SingleFeatureNorm()
    report = fxflow.check(model, inputs_of(model), loss_fn=projection_loss)
    weight = report.parameter("norm.weight")
    assert weight.dynamic == "zero" and weight.diagnosis.startswith("zero up to rounding"), weight.diagnosis
    assert report.parameter("skip.weight").dynamic == "ok"


def test_a_model_too_large_to_copy_keeps_its_small_gradients_and_says_so(monkeypatch):
    from fxflow.dynamic import rounding

    monkeypatch.setattr(rounding, "COPY_LIMIT_VALUES", 0)
    torch.manual_seed(0)
    model = SingleFeatureNorm()
    report = fxflow.check(model, inputs_of(model), loss_fn=projection_loss)
    assert report.parameter("norm.weight").dynamic == "vanishing"
    assert any(note.startswith("no float64 recheck of round-off") for note in report.notes), report.notes
