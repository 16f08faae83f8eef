"""The zero-init path costs one more step: zeros by construction run only on the zeros the look-ahead
leaves unexplained, and the look-ahead pays one forward and backward per step (issue 38, item 1).

The truth of each designed zero-init is real Adam steps in plain torch (:func:`real_first_steps`);
the cost is counted in calls, not timed: stand-in backward reads of zeros by construction, and the
user's forward.
"""
from __future__ import annotations

import pytest
import torch

import fxflow
from fxflow.static import zero_by_construction
from models import zero_init
from test_training_lookahead import inputs_of, projection_loss, real_first_steps


@pytest.mark.parametrize("name", ["LoRANet", "DiT", "ZeroChain", "ReZero", "ZeroConv"])
def test_held_zeros_cost_no_construction_check(name, monkeypatch):
    reads: list[int] = []
    original = zero_by_construction.ZeroByConstruction._read

    def counted(self, *args, **kwargs):
        reads.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(zero_by_construction.ZeroByConstruction, "_read", counted)
    torch.manual_seed(0)
    model = getattr(zero_init, name)()
    inputs = inputs_of(model)
    truth = real_first_steps(model, inputs)
    forwards: list[int] = []
    # the user's model only: a float64 copy that rechecks a small revived gradient for round-off is another model
    model.register_forward_pre_hook(lambda module, args: forwards.append(1) if module is model else None)
    report = fxflow.check(model, inputs, loss_fn=projection_loss)
    held = {p.name: p.learns_from_step for p in report.parameters if p.dynamic == "held"}
    assert held and held == {name: step for name, step in truth.items() if step and step > 1}
    assert report.ok
    assert not reads, "every zero was held: no stand-in backward should run"
    # the real step, then one forward per look-ahead step: the last step is the one that revived the last zero
    assert len(forwards) == max(held.values())
