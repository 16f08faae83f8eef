"""A custom ``autograd.Function`` whose backward returns None: tracing sees straight through it.

fxflow records the call as one op, runs the Function's own backward on twin tensors during the
analysis, and names ``ScaleGrad.apply`` as the cut.
Run: ``fxflow check examples/hidden_autograd_function.py:Net``.
"""
import torch
import torch.nn as nn


class ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, grad):
        return None  # the bug: meant to return grad * 2.0


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(10, 32)
        self.last = nn.Linear(32, 2)

    def forward(self, x):
        h = ScaleGrad.apply(torch.relu(self.first(x)))
        return self.last(h)


def example_inputs():
    return torch.randn(16, 10)
