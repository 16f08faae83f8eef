"""A random choice whose outcomes the redraws did not all pick (issue 39, item 3): a parameter that only
an unpicked outcome would reach is neither dead nor used on some steps as far as fxflow saw, so it is
``unconfirmed`` (not verified, exit 2), with a reason that names the choice and what it never picked.

The truth is plain torch: the outcome forced by seeding the generator the model draws from, a backward
and a real optimizer step move the branch's weights; on the other outcomes they get no gradient.
"""
from __future__ import annotations

import copy
import random

import pytest
import torch
import torch.nn as nn

import fxflow
from test_training_lookahead import projection_loss

OUTCOMES = 100_000  # far more than the 256 draws a choice gets: most outcomes stay unpicked
TRUTH_SEED = 12345  # the seed whose draw picks the rare outcome


def torch_draw(n: int) -> int:
    return int(torch.randint(0, n, ()))


def python_draw(n: int) -> int:
    return random.randrange(n)


def seeded(kind: str, seed: int) -> None:
    """Seed the generator a draw of ``kind`` comes from (the truth's way of forcing an outcome)."""
    torch.manual_seed(seed) if kind == "torch.randint" else random.seed(seed)


DRAWS = {"torch.randint": torch_draw, "random.randrange": python_draw}


def rare_outcome(kind: str) -> int:
    seeded(kind, TRUTH_SEED)
    return DRAWS[kind](OUTCOMES)


class RareBranch(nn.Module):
    """Each forward draws one of OUTCOMES outcomes; one of them, and only it, adds the ``rare`` layer."""

    def __init__(self, kind: str):
        super().__init__()
        self.main, self.rare = nn.Linear(8, 8), nn.Linear(8, 8)
        self.kind, self.outcome = kind, rare_outcome(kind)

    def forward(self, x):
        out = self.main(x)
        if DRAWS[self.kind](OUTCOMES) == self.outcome:  # the rare branch
            out = out + self.rare(x)
        return out


def sgd_step_moves(model: nn.Module, x: torch.Tensor, kind: str, seed: int) -> dict[str, bool]:
    """One real SGD step of a copy, its draw seeded with ``seed``: which parameters it moved."""
    trained = copy.deepcopy(model)
    before = {name: p.detach().clone() for name, p in trained.named_parameters()}
    optimizer = torch.optim.SGD(trained.parameters(), lr=0.1)
    seeded(kind, seed)
    projection_loss(trained(x)).backward()
    optimizer.step()
    return {name: not torch.equal(before[name], p.detach()) for name, p in trained.named_parameters()}


@pytest.mark.parametrize("kind", sorted(DRAWS))
def test_a_branch_only_an_unpicked_outcome_reaches_is_not_verified(kind):
    torch.manual_seed(0)
    model, x = RareBranch(kind), torch.randn(4, 8)
    # the truth: the step that draws the rare outcome moves the rare layer; a step that draws another does not
    assert sgd_step_moves(model, x, kind, TRUTH_SEED)["rare.weight"]
    other = next(seed for seed in range(10) if (seeded(kind, seed), DRAWS[kind](OUTCOMES))[1] != model.outcome)
    assert not sgd_step_moves(model, x, kind, other)["rare.weight"]

    torch.manual_seed(0)
    random.seed(0)
    report = fxflow.check(model, (x,), loss_fn=projection_loss, seed=0)
    rare = report.parameter("rare.weight")
    assert rare.dynamic == "unconfirmed", (rare.dynamic, rare.diagnosis)  # neither dead nor ok
    # what the graph walk found (its module is not called on this draw), then what the draws showed
    assert not rare.problem and rare.reasons == ["never-called", "choice-unpicked"], rare.reasons
    assert report.parameter("main.weight").dynamic == "ok"
    assert report.status == "not verified" and report.exit_code == 2 and not report.ok
    choice = rare.facts["choices"][0]
    assert choice["outcomes"] == OUTCOMES and choice["draws"] == 256
    assert choice["count"] >= OUTCOMES - 257  # the first draw and 256 others picked at most 257 of them
    words = rare.diagnosis
    assert f"a random choice of {OUTCOMES} outcomes at " in words and "test_training_choices_unpicked.py:" in words
    assert "never picked" in words and "not verified" in words and "never learns" not in words
    next_seed = rare.facts["next_seed"]
    assert f"`--seed {next_seed}` (`seed={next_seed}`)" in words and next_seed == 257
    assert "not verified" in report.summary() and "random choice" in report.summary()
    # the words are made from the codes and facts, so they survive the JSON
    again = fxflow.Report.from_dict(report.to_dict())
    assert again.parameter("rare.weight").diagnosis == words and again.exit_code == 2
    # allowed, it passes, and the summary does not claim that it got a gradient
    torch.manual_seed(0)
    allowed = fxflow.check(model, (x,), loss_fn=projection_loss, seed=0, allow=["rare.*"])
    assert allowed.exit_code == 0 and "get a gradient" not in allowed.summary() and "2 allowed" in allowed.summary()


class ChoiceOf(nn.Module):
    """One of ``n`` layers picked at random per forward (a NAS-style choice)."""

    def __init__(self, n: int):
        super().__init__()
        self.ops = nn.ModuleList(nn.Linear(8, 8) for _ in range(n))

    def forward(self, x):
        return self.ops[torch_draw(len(self.ops))](x)


def test_a_one_of_three_hundred_choice_leaves_the_unpicked_branches_unconfirmed():
    """300 branches need about 3,200 draws to show all; the 256 made leave about 170 unpicked."""
    torch.manual_seed(0)
    model, x = ChoiceOf(300), torch.randn(4, 8)
    report = fxflow.check(model, (x,), loss_fn=projection_loss, seed=0)
    verdicts = {p.name: p.dynamic for p in report.parameters if p.name.endswith(".weight")}
    unconfirmed = [name for name, verdict in verdicts.items() if verdict == "unconfirmed"]
    assert set(verdicts.values()) <= {"ok", "intermittent", "unconfirmed"}, set(verdicts.values())
    assert len(unconfirmed) > 50 and report.exit_code == 2 and not report.problems
    # the truth for each unconfirmed branch: the step whose draw picks it gives it a gradient in plain torch
    seeds: dict[int, int] = {}
    for seed in range(20_000):
        torch.manual_seed(seed)
        seeds.setdefault(torch_draw(300), seed)
        if len(seeds) == 300:
            break
    for name in unconfirmed:
        index = int(name.split(".")[1])
        trained = copy.deepcopy(model)
        torch.manual_seed(seeds[index])
        projection_loss(trained(x)).backward()
        assert trained.ops[index].weight.grad is not None and trained.ops[index].weight.grad.any(), name
        words = report.parameter(name).diagnosis
        assert "random choice of 300 outcomes" in words and "not verified" in words, words


class SmallChoiceBesideDead(nn.Module):
    """A one-of-twenty choice, under the cap (20 (ln 20 + 5) = 160 draws), and a layer multiplied by zero."""

    def __init__(self):
        super().__init__()
        self.ops = nn.ModuleList(nn.Linear(8, 8) for _ in range(20))
        self.dead = nn.Linear(8, 8)

    def forward(self, x):
        return self.ops[torch_draw(20)](x) + 0.0 * self.dead(x)


def test_under_the_cap_every_branch_is_picked_and_a_dead_layer_still_fails():
    torch.manual_seed(0)
    model, x = SmallChoiceBesideDead(), torch.randn(4, 8)
    used = set()
    trained = copy.deepcopy(model)
    optimizer = torch.optim.SGD(trained.parameters(), lr=1e-3)
    for _ in range(300):  # the truth: real steps reach every branch, never the dead layer
        optimizer.zero_grad(set_to_none=True)
        projection_loss(trained(x)).backward()
        used |= {name for name, p in trained.named_parameters() if p.grad is not None and p.grad.any()}
        optimizer.step()
    assert "dead.weight" not in used and {f"ops.{i}.weight" for i in range(20)} <= used
    report = fxflow.check(model, (x,), loss_fn=projection_loss, seed=0)
    assert report.parameter("dead.weight").problem and report.exit_code == 1
    assert {report.parameter(f"ops.{i}.weight").dynamic for i in range(20)} <= {"ok", "intermittent"}
    assert not any("choice-unpicked" in p.reasons for p in report.parameters)


class RandomTokensBesideDead(nn.Module):
    """Random token ids (a draw of one of 1,000 per sample) that only a tensor op reads, and a layer
    multiplied by zero: the ids pick embedding rows, not parameters, so the dead layer still fails."""

    def __init__(self):
        super().__init__()
        self.embed, self.head, self.dead = nn.Embedding(1000, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        ids = torch.randint(0, 1000, (x.shape[0],))
        return self.head(self.embed(ids) + x) + 0.0 * self.dead(x)


def test_random_token_ids_no_python_code_reads_pick_no_parameters():
    torch.manual_seed(0)
    model, x = RandomTokensBesideDead(), torch.randn(4, 8)
    for seed in range(20):  # the truth: no draw gives the dead layer a gradient
        torch.manual_seed(seed)
        model.zero_grad(set_to_none=True)
        projection_loss(model(x)).backward()
        assert not model.dead.weight.grad.any() and model.embed.weight.grad.any()
    model.calls = 0
    report = fxflow.check(model, (x,), loss_fn=projection_loss, seed=0)
    dead = report.parameter("dead.weight")
    assert dead.problem and dead.dynamic == "zero" and report.exit_code == 1, (dead.dynamic, dead.diagnosis)
    assert not any("choice-unpicked" in p.reasons for p in report.parameters)
    assert model.calls < 40, model.calls  # the rounds of four, not the 256 draws a choice Python reads gets
