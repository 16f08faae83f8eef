"""Seed "try it yourself" #3: a fourth layer is defined in __init__ but never called in forward.

named_parameters() still lists fourth.weight and fourth.bias; their grad stays None: unused.
"""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(10, 32)
        self.middle = nn.Linear(32, 32)
        self.last = nn.Linear(32, 2)
        self.fourth = nn.Linear(2, 2)  # the break: defined, never called

    def forward(self, x):
        h = torch.relu(self.first(x))
        h = torch.relu(self.middle(h))
        return self.last(h)


def example_inputs():
    return torch.randn(16, 10)
