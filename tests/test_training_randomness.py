"""Redraws cover the randomness the model holds (issue 39, item 3): a branch chosen per step from a
``torch.Generator``, NumPy ``Generator`` or ``RandomState``, or ``random.Random`` kept on the model is
used on some steps only, not a zero-init hold and not dead; the check leaves the generator as found.

The truth is real Adam steps in plain torch: the branch gets a gradient on some of them, not all.
"""
from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch
import torch.nn as nn

import fxflow
from test_training_lookahead import projection_loss

KINDS = {"torch": lambda seed: torch.Generator().manual_seed(seed), "numpy": np.random.default_rng,
         "RandomState": np.random.RandomState, "random": random.Random}


def uniform(generator) -> float:
    if isinstance(generator, torch.Generator):
        return float(torch.rand((), generator=generator))
    if isinstance(generator, np.random.RandomState):
        return float(generator.random_sample())
    return float(generator.random())


class HeldGeneratorChoice(nn.Module):
    """A branch kept or dropped per step by a draw from the model's own generator."""

    def __init__(self, generator):
        super().__init__()
        self.generator = generator
        self.main, self.side = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x):
        keep = float(uniform(self.generator) < 0.5)
        return self.main(x) + keep * self.side(x)


def dropped_first(kind: str) -> HeldGeneratorChoice:
    """A model whose generator drops the branch on the first step."""
    seed = next(seed for seed in range(100) if uniform(KINDS[kind](seed)) >= 0.5)
    torch.manual_seed(0)
    return HeldGeneratorChoice(KINDS[kind](seed))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_branch_the_models_generator_drops_is_used_on_some_steps(kind):
    model = dropped_first(kind)
    x = torch.randn(4, 8)
    trained = copy.deepcopy(model)
    optimizer = torch.optim.Adam(trained.parameters(), lr=1e-3)
    used = []
    for _ in range(12):
        optimizer.zero_grad(set_to_none=True)
        projection_loss(trained(x)).backward()
        used.append(bool(trained.side.weight.grad.count_nonzero()))
        optimizer.step()
    assert not used[0] and any(used)  # the truth: dropped on step 1, used on later steps
    next_draw = uniform(copy.deepcopy(model.generator))
    report = fxflow.check(model, (x,), loss_fn=projection_loss)
    assert uniform(copy.deepcopy(model.generator)) == next_draw, "the check moved the model's generator"
    side = report.parameter("side.weight")
    assert side.dynamic == "intermittent", (side.dynamic, side.diagnosis)
    assert report.exit_code == 0
