"""``torch.inference_mode()`` around part of forward: torch.export drops it, fxflow does not.

Run: ``fxflow check examples/hidden_inference_mode.py:Net``.
"""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Linear(10, 32)
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        with torch.inference_mode():  # the bug: features are computed without autograd
            h = torch.relu(self.features(x))
        return self.head(h.clone())


def example_inputs():
    return torch.randn(16, 10)
