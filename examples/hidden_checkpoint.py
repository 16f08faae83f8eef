"""Reentrant ``torch.utils.checkpoint`` whose inputs do not require grad: the block never learns.

With ``use_reentrant=True`` the checkpoint's output only carries autograd history when one of its
tensor inputs requires grad; here the input is the raw data. ``use_reentrant=False`` fixes it.
Run: ``fxflow check examples/hidden_checkpoint.py:Net``.
"""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Net(nn.Module):
    def __init__(self, use_reentrant: bool = True):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(10, 32), nn.ReLU())
        self.head = nn.Linear(32, 2)
        self.use_reentrant = use_reentrant

    def forward(self, x):
        h = checkpoint(self.block, x, use_reentrant=self.use_reentrant)  # the bug
        return self.head(h)


def example_inputs():
    return torch.randn(16, 10)
