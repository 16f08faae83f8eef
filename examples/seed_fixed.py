"""The seed tutorial's model with the planted detach removed: every layer learns."""
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
        h = torch.relu(self.middle(h))  # the fix: no detach
        return self.last(h)


def example_inputs():
    return torch.randn(16, 10)
