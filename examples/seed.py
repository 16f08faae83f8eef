"""The seed tutorial's model: a planted detach in the middle of forward."""
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
        h = torch.relu(self.middle(h)).detach()  # the bug: detach cuts the wire here
        return self.last(h)


def example_inputs():
    return torch.randn(16, 10)
