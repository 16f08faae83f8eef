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


@pytest.mark.parametrize("make", [lambda: nn.LSTM(4, 6, num_layers=2, dropout=0.0),
                                  lambda: nn.GRU(4, 6, num_layers=2, dropout=0.5).eval()],
                         ids=["lstm dropout 0", "gru in eval"])
def test_an_rnn_that_draws_nothing_is_not_random(make):
    """torch tags the RNN ops random for their dropout; with dropout 0, or in eval mode, they draw nothing:
    a zero they give (here: a zero input, so weight_ih_l0 never learns) does not depend on the seed."""

    class ZeroInput(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn, self.out = make(), nn.Linear(6, 2)

        def forward(self, x):
            return self.out(self.rnn(x * 0)[0])

    torch.manual_seed(0)
    model = ZeroInput()
    model.rnn.training = make().training
    x = torch.randn(5, 3, 4)
    grads = []
    for seed in (0, 1):  # the truth: another seed, bit-identical gradients; weight_ih_l0 gets none
        torch.manual_seed(seed)
        model.zero_grad(set_to_none=True)
        projection_loss(model(x)).backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
    assert all(torch.equal(grads[0][name], grads[1][name]) for name in grads[0])
    assert not grads[0]["rnn.weight_ih_l0"].any()
    model.zero_grad(set_to_none=True)
    report = fxflow.check(model, (x,), loss_fn=projection_loss)
    dead = report.parameter("rnn.weight_ih_l0")
    assert dead.problem and not dead.random_ops and "depends on randomness" not in dead.diagnosis, dead.diagnosis


class ChoiceOfEight(nn.Module):
    """One of eight ops picked at random per batch (a NAS-style choice)."""

    def __init__(self):
        super().__init__()
        self.ops = nn.ModuleList(nn.Linear(8, 8) for _ in range(8))

    def forward(self, x):
        return self.ops[int(torch.randint(0, 8, ()))](x)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_branch_of_a_one_of_eight_choice_is_used_on_some_steps(seed):
    torch.manual_seed(seed)
    model = ChoiceOfEight()
    x = torch.randn(4, 8)
    trained = copy.deepcopy(model)
    optimizer = torch.optim.SGD(trained.parameters(), lr=1e-3)
    used = set()
    for _ in range(64):  # the truth: real steps reach every branch, each on some steps only
        optimizer.zero_grad(set_to_none=True)
        projection_loss(trained(x)).backward()
        used |= {name for name, p in trained.named_parameters() if p.grad is not None and p.grad.any()}
        optimizer.step()
    assert used == {name for name, _ in model.named_parameters()}
    report = fxflow.check(model, (x,), loss_fn=projection_loss, seed=seed)
    assert {p.dynamic for p in report.parameters} == {"ok", "intermittent"}, [(p.name, p.dynamic) for p in report.parameters]
    assert report.exit_code == 0
