"""Seed "try it yourself" #2: the middle activation becomes a hard threshold, (h > 0).float().

The comparison returns a bool tensor, which carries no gradient: first and middle are cut.
"""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(10, 32)
        self.middle = nn.Linear(32, 32)
        self.last = nn.Linear(32, 2)

    def forward(self, x):
        h = torch.relu(self.first(x))
        h = (self.middle(h) > 0).float()  # the break: a comparison instead of an activation
        return self.last(h)


def example_inputs():
    return torch.randn(16, 10)
