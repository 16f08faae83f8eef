"""A small transformer-shaped model with every kind of trouble fxflow draws.

    fxflow render examples/render_nested.py:Net -o nested.svg
    fxflow render examples/render_nested.py:Net -o nested.svg --depth 1   # one box per block, folded x4
    fxflow render examples/render_nested.py:Net -o nested.svg --focus     # only what is broken

* ``stem`` is cut off: the features are detached before the blocks (the bug);
* ``gate`` is rounded, so its gradient arrives as an exact zero;
* ``pos`` is frozen on purpose (requires_grad is False);
* ``aux_head`` is never called in forward.
"""
import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mlp = MLP(width)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Net(nn.Module):
    def __init__(self, width: int = 16, depth: int = 4):
        super().__init__()
        self.stem = nn.Linear(8, width)
        self.pos = nn.Parameter(torch.zeros(width), requires_grad=False)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.gate = nn.Parameter(torch.ones(width))
        self.head = nn.Linear(width, 2)
        self.aux_head = nn.Linear(width, 2)

    def forward(self, x):
        h = self.stem(x).detach() + self.pos  # the bug: stem never learns
        for block in self.blocks:
            h = block(h)
        h = h * self.gate.round()  # zero derivative: gate's gradient is exactly 0
        return self.head(h)


def example_inputs():
    return torch.randn(4, 8)
