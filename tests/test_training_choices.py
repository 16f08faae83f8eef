"""Redraws follow the model's recorded random choices (issue 39, item 3): generators passed to forward
are redrawn like the ones the model holds, and a choice among n branches is drawn until every branch
was picked, not a fixed number of times.

The truth is real optimizer steps in plain torch: each branch gets a gradient on some of them.
"""
from __future__ import annotations

import copy
import random

import pytest
import torch
import torch.nn as nn

import fxflow
from test_training_lookahead import projection_loss
from test_training_randomness import KINDS, uniform


class GivenGeneratorChoice(nn.Module):
    """A branch kept or dropped per step by a draw from a generator forward is given."""

    def __init__(self):
        super().__init__()
        self.main, self.side = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x, generator):
        keep = float(uniform(generator) < 0.5)
        return self.main(x) + keep * self.side(x)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_branch_a_generator_passed_in_drops_is_used_on_some_steps(kind):
    seed = next(seed for seed in range(100) if uniform(KINDS[kind](seed)) >= 0.5)  # dropped on the first step
    torch.manual_seed(0)
    model, x, generator = GivenGeneratorChoice(), torch.randn(4, 8), KINDS[kind](seed)
    trained, real = copy.deepcopy(model), copy.deepcopy(generator)
    optimizer = torch.optim.Adam(trained.parameters(), lr=1e-3)
    used = []
    for _ in range(12):  # the truth: the user's loop passes its generator each step
        optimizer.zero_grad(set_to_none=True)
        projection_loss(trained(x, real)).backward()
        used.append(bool(trained.side.weight.grad.count_nonzero()))
        optimizer.step()
    assert not used[0] and any(used)
    next_draw = uniform(copy.deepcopy(generator))
    report = fxflow.check(model, (x, generator), loss_fn=projection_loss)
    assert uniform(copy.deepcopy(generator)) == next_draw, "the check moved the generator it was given"
    side = report.parameter("side.weight")
    assert side.dynamic == "intermittent", (side.dynamic, side.diagnosis)
    assert report.exit_code == 0


class ChoiceOf(nn.Module):
    """One of ``n`` ops picked at random per batch (a NAS-style choice), by torch or by Python's ``random``."""

    def __init__(self, n: int, pick):
        super().__init__()
        self.ops = nn.ModuleList(nn.Linear(8, 8) for _ in range(n))
        self.pick = pick

    def forward(self, x):
        return self.ops[self.pick(len(self.ops))](x)


PICKS = {"torch.randint": lambda n: int(torch.randint(0, n, ())),
         "random.choice": lambda n: random.choice(range(n)),
         "random.randrange": lambda n: random.randrange(n),
         "torch.multinomial": lambda n: int(torch.multinomial(torch.ones(n), 1))}


def used_by_real_steps(model: nn.Module, x: torch.Tensor, steps: int) -> set[str]:
    trained = copy.deepcopy(model)
    optimizer = torch.optim.SGD(trained.parameters(), lr=1e-3)
    used = set()
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        projection_loss(trained(x)).backward()
        used |= {name for name, p in trained.named_parameters() if p.grad is not None and p.grad.any()}
        optimizer.step()
    return used


@pytest.mark.parametrize("pick", sorted(PICKS))
@pytest.mark.parametrize("seed", [0, 1])
def test_every_branch_of_a_one_of_thirty_choice_is_used_on_some_steps(pick, seed):
    """30 branches: about 120 draws to see them all (the coupon collector), more than 64 reruns give."""
    torch.manual_seed(seed)
    random.seed(seed)
    model, x = ChoiceOf(30, PICKS[pick]), torch.randn(4, 8)
    assert used_by_real_steps(model, x, 400) == {name for name, _ in model.named_parameters()}
    report = fxflow.check(model, (x,), loss_fn=projection_loss, seed=seed)
    assert {p.dynamic for p in report.parameters} == {"ok", "intermittent"}, \
        [(p.name, p.dynamic) for p in report.parameters if p.dynamic not in ("ok", "intermittent")]
    assert report.exit_code == 0


class ChoiceBesideDead(nn.Module):
    """A one-of-four choice, and a layer whose output is multiplied by zero: dead on every draw."""

    def __init__(self):
        super().__init__()
        self.ops = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
        self.dead = nn.Linear(8, 8)

    def forward(self, x):
        return self.ops[int(torch.randint(0, 4, ()))](x) + 0.0 * self.dead(x)


def test_a_dead_layer_beside_a_choice_stays_dead_once_every_branch_was_picked():
    torch.manual_seed(0)
    model, x = ChoiceBesideDead(), torch.randn(4, 8)
    used = used_by_real_steps(model, x, 100)
    assert "dead.weight" not in used and {f"ops.{i}.weight" for i in range(4)} <= used
    report = fxflow.check(model, (x,), loss_fn=projection_loss)
    assert report.parameter("dead.weight").problem, report.parameter("dead.weight").dynamic
    assert {report.parameter(f"ops.{i}.weight").dynamic for i in range(4)} <= {"ok", "intermittent"}
