"""A layer whose ReLU is never active (bias -100): the graph reaches it, a real backward gives it
exact zeros. The table fails it; the picture (issue 17, item 13) and the annotations (issue 21)
must say so, at the relu's line. A CLI target: ``fxflow check tests/models/dead_relu.py:DeadRelu``."""
import torch
import torch.nn as nn

RELU_LINE = 21  # the line of forward whose relu is never active


class DeadRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 8)
        self.dead = nn.Linear(8, 8)
        self.last = nn.Linear(8, 2)
        with torch.no_grad():
            self.dead.bias.fill_(-100.0)

    def forward(self, x):
        h = torch.relu(self.first(x))
        return self.last(h + torch.relu(self.dead(h)))


def example_inputs():
    return torch.randn(16, 4)
