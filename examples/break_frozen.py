"""Seed "try it yourself" #1: the first layer is frozen with requires_grad_(False).

fxflow reports first.* as frozen (deliberate, not counted as a problem); middle and last learn.
"""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(10, 32)
        self.middle = nn.Linear(32, 32)
        self.last = nn.Linear(32, 2)
        self.first.requires_grad_(False)  # the break: first never learns

    def forward(self, x):
        h = torch.relu(self.first(x))
        h = torch.relu(self.middle(h))
        return self.last(h)


def example_inputs():
    return torch.randn(16, 10)
