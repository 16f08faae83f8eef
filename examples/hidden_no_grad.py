"""A no-grad region hidden inside a submodule's forward: the encoder never learns.

torch.fx drops ``set_grad_enabled(False)`` silently; fxflow records where the region began.
Run: ``fxflow check examples/hidden_no_grad.py:Net``.
"""
import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(10, 32)

    def forward(self, x):
        torch.set_grad_enabled(False)  # the bug: meant for an evaluation helper
        h = torch.relu(self.proj(x))
        torch.set_grad_enabled(True)
        return h


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


def example_inputs():
    return torch.randn(16, 10)
