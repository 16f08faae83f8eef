"""What a user adds to their own pytest suite: one line keeps a detach from ever landing again.

    python -m pytest examples/test_with_fxflow.py
"""
import os
import sys

import pytest
import torch
import torch.nn as nn

import fxflow

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seed import Net as BrokenNet  # noqa: E402  (the seed tutorial's model, detach and all)
from transfer_frozen import FrozenBackbone  # noqa: E402


class FixedNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(10, 32)
        self.middle = nn.Linear(32, 32)
        self.last = nn.Linear(32, 2)

    def forward(self, x):
        return self.last(torch.relu(self.middle(torch.relu(self.first(x)))))


def test_every_parameter_learns():
    fxflow.assert_gradients_flow(FixedNet(), torch.randn(16, 10))


def test_with_my_real_loss():
    target = torch.randint(0, 2, (16,))
    fxflow.assert_gradients_flow(FixedNet(), torch.randn(16, 10),
                                 loss_fn=lambda out: nn.functional.cross_entropy(out, target))


def test_frozen_backbone_is_not_a_failure():
    fxflow.assert_gradients_flow(FrozenBackbone(), torch.randn(2, 3, 32, 32))


def test_the_seed_bug_is_caught():
    with pytest.raises(AssertionError, match=r"detach @ .*seed\.py:15"):
        fxflow.assert_gradients_flow(BrokenNet(), torch.randn(16, 10))
