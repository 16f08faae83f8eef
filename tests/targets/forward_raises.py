"""example_inputs() has 7 features, the first layer wants 10: forward raises a shape mismatch."""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 4)

    def forward(self, x):
        return self.fc(x)


def example_inputs():
    return torch.randn(3, 7)
