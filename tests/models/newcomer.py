"""The models of a newcomer's trial (issue 31): what the words, the table and the picture must
agree on. Each is small, seeded, and has a real backward the tests compare against."""
from __future__ import annotations

import torch
from torch import nn

HEALTHY_LAYERS = 72  # with the two of the dry branch: 74 Linear layers, 148 parameters


class ManyLayers(nn.Module):
    """148 parameters: a deep healthy stack and a two-layer side branch whose result is detached."""

    def __init__(self) -> None:
        super().__init__()
        self.stack = nn.Sequential(*[nn.Linear(8, 8) for _ in range(HEALTHY_LAYERS)])
        self.side = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))

    def forward(self, x):
        return self.stack(x) + self.side(x).detach()  # plant-side-detach


class ListLayers(nn.Module):
    """Layers kept in a plain Python list: called in forward, reached by the backward, and never
    handed to an optimizer built from model.parameters()."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.blocks = [nn.Linear(8, 8), nn.Linear(8, 8)]  # plant-plain-list
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = torch.relu(block(h))
        return self.head(h)


class BuiltInForward(nn.Module):
    """A layer made inside forward: a fresh, untrained Linear on every call. Its registered twin
    in __init__ is never called."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.proj = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.embed(x)
        h = nn.Linear(8, 8)(h)  # plant-built-in-forward
        return self.head(h)


class DictBatch(nn.Module):
    """forward(batch: dict, lengths): nothing can infer such inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, batch: dict, lengths):
        return self.a(batch["x"]) * lengths


def example_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(4, 8),)
