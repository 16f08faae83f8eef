"""An in-place ``detach_()`` on an intermediate: the graph still shows the old edge.

Run: ``fxflow check examples/hidden_detach_inplace.py:Net``.
"""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(10, 32)
        self.last = nn.Linear(32, 2)

    def forward(self, x):
        h = torch.relu(self.first(x))
        h.detach_()  # the bug: every later use of h is cut
        return self.last(h)


def example_inputs():
    return torch.randn(16, 10)
