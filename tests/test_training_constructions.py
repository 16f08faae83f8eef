"""Zeros by construction that two ops make together (issue 39, item 4): ``r - r.mean(dim)`` over a dim
of size 1 is ``r - r`` whatever the values, so what computes ``r`` never learns; over a dim of two it
learns. The stand-ins run the mean on the stand-in of ``r`` itself, as the code does.

The truth is real SGD steps in plain torch: the projection never gets a non-zero gradient, or does.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import fxflow
from test_training_lookahead import projection_loss

CENTRES = {"mean": lambda r: r.mean(1, keepdim=True), "max": lambda r: r.max(1, keepdim=True)[0],
           "amax": lambda r: torch.amax(r, 1, keepdim=True)}


class Centred(nn.Module):
    """``r - centre(r)`` over groups of ``group`` features, then squared: centring a group of one is zero."""

    def __init__(self, centre: str, group: int):
        super().__init__()
        self.proj, self.out = nn.Linear(8, 8), nn.Linear(8, 4)
        self.centre, self.group = CENTRES[centre], group

    def forward(self, x):
        r = self.proj(x).view(x.shape[0], self.group, 8 // self.group)
        c = r - self.centre(r)
        return self.out(x) + c.flatten(1).pow(2).sum(-1, keepdim=True)


def learns_in_real_steps(model: nn.Module, x: torch.Tensor, steps: int = 5) -> bool:
    """Whether ``proj.weight`` gets a non-zero gradient on some of ``steps`` real SGD steps."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    got = False
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        projection_loss(model(x)).backward()
        got |= bool(model.proj.weight.grad.count_nonzero())
        optimizer.step()
    return got


@pytest.mark.parametrize("centre", sorted(CENTRES))
def test_centring_a_group_of_one_is_zero_by_construction(centre):
    torch.manual_seed(0)
    model, x = Centred(centre, group=1), torch.randn(4, 8)
    assert not learns_in_real_steps(model, x)
    report = fxflow.check(model, (x,), loss_fn=projection_loss)
    proj = report.parameter("proj.weight")
    assert (proj.static, proj.dynamic) == ("zero", "zero"), (proj.static, proj.dynamic, proj.diagnosis)
    assert report.exit_code == 1


@pytest.mark.parametrize("centre", sorted(CENTRES))
def test_centring_a_group_of_two_learns(centre):
    torch.manual_seed(0)
    model, x = Centred(centre, group=2), torch.randn(4, 8)
    assert learns_in_real_steps(model, x)
    report = fxflow.check(model, (x,), loss_fn=projection_loss)
    proj = report.parameter("proj.weight")
    assert (proj.static, proj.dynamic) == ("reachable", "ok"), (proj.static, proj.dynamic, proj.diagnosis)
    assert report.exit_code == 0
