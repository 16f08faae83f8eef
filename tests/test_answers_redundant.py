"""A parameter whose gradient is zero up to rounding is named as redundant where that is what it is: the key
bias of softmax attention (every score of a query moves alike, which softmax ignores). The truth is plain
torch in float64: the loss does not move when the key biases do, and Adam's steps never give them a
gradient; the fix line says to drop the bias, and its --allow glob accepts exactly those biases."""
from __future__ import annotations

import copy
import fnmatch

import torch
from torch import nn

import fxflow
from fxflow.present.text import render_text


class Attention(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.query, self.key, self.value = nn.Linear(width, width), nn.Linear(width, width), nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.query(x) @ self.key(x).transpose(-1, -2) / x.shape[-1] ** 0.5
        return x + scores.softmax(-1) @ self.value(x)


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Attention(), Attention()])
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x).square().mean()


def _continued(lines: list[str]) -> list[str]:
    """A paragraph line's continuation lines (indented), up to the next paragraph."""
    out = []
    for line in lines:
        if not line.startswith("  "):
            break
        out.append(line)
    return out


def _key_biases(model: nn.Module) -> list[str]:
    return [name for name, _ in model.named_parameters() if name.endswith("key.bias")]


def test_a_key_bias_under_softmax_is_redundant_in_plain_torch_and_the_fix_says_drop_it() -> None:
    torch.manual_seed(0)
    model, x = TwoLayers(), torch.randn(2, 6, 16)
    # truth, float64: moving the key biases leaves the loss where it was, and Adam never gives them a gradient
    wide, x64 = copy.deepcopy(model).double(), x.double()
    before = wide(x64).item()
    with torch.no_grad():
        for layer in wide.layers:
            layer.key.bias.add_(torch.randn(16, dtype=torch.float64))
    assert abs(wide(x64).item() - before) < 1e-12 * abs(before)
    optimizer = torch.optim.Adam(wide.parameters(), lr=1e-2)
    for _ in range(3):
        optimizer.zero_grad()
        wide(x64).backward()
        largest = max(p.grad.abs().max().item() for p in wide.parameters())
        assert all(layer.key.bias.grad.abs().max().item() < 1e-12 * largest for layer in wide.layers)
        optimizer.step()

    report = fxflow.check(model, (x,))
    rows = {p.name: p for p in report.parameters}
    assert sorted(name for name, row in rows.items() if row.problem) == _key_biases(model)
    assert all(rows[name].dynamic == "zero" for name in _key_biases(model))
    text = render_text(report, width=200)
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("fix:"))
    fix = " ".join([lines[start]]
                   + [line.strip() for line in _continued(lines[start + 1:])])
    assert "a key bias shifts every attention score of a query alike, which softmax ignores" in fix
    assert "build that layer with `bias=False`" in fix
    assert fix.endswith("to keep it as it is, pass --allow '*.key.bias'")
    # the glob the line offers accepts exactly the redundant biases, and the check then passes
    assert [name for name in rows if fnmatch.fnmatchcase(name, "*.key.bias")] == _key_biases(model)
    assert fxflow.check(model, (x,), allow=["*.key.bias"]).exit_code == 0
