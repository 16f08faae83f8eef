"""A trip through Python data and back: gradients cannot follow ``.tolist()``.

Symbolic tracing and torch.export cannot capture the branch on a tensor's value; fxflow then
records the actual run, links ``torch.tensor(...)`` to the ``.tolist()`` it came from, and
reports the first layer ``cut`` at that line (not ``unused``).
Run: ``fxflow check examples/hidden_numpy.py:Net``.
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
        if h.mean() > 100:  # data-dependent branch: only a run-time capture follows it
            h = h / h.mean()
        values = h.tolist()  # the bug: the tensor leaves torch ...
        h = torch.tensor(values)  # ... and comes back without its history
        return self.last(h)


def example_inputs():
    return torch.randn(16, 10)
