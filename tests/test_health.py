"""Gradient health over training (issue 20): per layer and step, mean and largest |grad| and the
optimizer's update-to-weight ratio, checked against the gradients of the same loop run plainly;
layers that vanish next to the rest are flagged with the step it began; the chart draws."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import fxflow


class Damped(nn.Module):
    """Three layers; from step 3 on, the middle layer's output is scaled down by 1e-6 (a bad gate)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(6, 6)
        self.middle = nn.Linear(6, 6)
        self.last = nn.Linear(6, 2)
        self.scale = 1.0

    def forward(self, x):
        return self.last(torch.tanh(self.middle(torch.tanh(self.first(x)))) * self.scale)


def run(model: Damped, optimizer, data, hook=None) -> list[dict[str, torch.Tensor]]:
    grads = []
    for step, x in enumerate(data, 1):
        model.scale = 1e-6 if step >= 3 else 1.0
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
        optimizer.step()
    return grads


def test_per_layer_statistics_are_those_of_the_plain_loop():
    torch.manual_seed(0)
    data = [torch.randn(8, 6) for _ in range(4)]
    plain, watched = Damped(), Damped()
    watched.load_state_dict(plain.state_dict())
    before = [watched.last.weight.detach().clone(), watched.last.bias.detach().clone()]
    expected = run(plain, torch.optim.SGD(plain.parameters(), lr=0.1), data)
    with fxflow.watch(watched, steps=4) as w:
        run(watched, torch.optim.SGD(watched.parameters(), lr=0.1), data)
    history = w.report.gradient_history
    assert set(history) == {"first", "middle", "last"}
    for layer, records in history.items():
        assert [r.step for r in records] == [1, 2, 3, 4]
        for record, grads in zip(records, expected):
            values = torch.cat([grads[f"{layer}.weight"].abs().flatten(), grads[f"{layer}.bias"].abs().flatten()])
            assert math.isclose(record.mean, float(values.double().mean()), rel_tol=1e-6)
            assert math.isclose(record.max, float(values.max()), rel_tol=1e-6)
            assert record.update_ratio is not None and record.update_ratio > 0  # SGD stepped after each
    # the update of SGD is lr * grad: the ratio is that over the weight before the step
    first = history["last"][0]
    assert first.update_ratio == pytest.approx(
        0.1 * math.sqrt(sum(float(expected[0][f"last.{k}"].double().pow(2).sum()) for k in ("weight", "bias")))
        / math.sqrt(sum(float(p.double().pow(2).sum()) for p in before)), rel=1e-4)


def test_a_layer_whose_gradient_vanishes_is_flagged_from_the_step_it_began():
    torch.manual_seed(0)
    model = Damped()
    data = [torch.randn(8, 6) for _ in range(5)]
    with fxflow.watch(model, steps=5) as w:
        run(model, torch.optim.SGD(model.parameters(), lr=0.01), data)
    flags = {(f.layer, f.kind): f.since for f in w.report.gradient_flags}
    assert flags[("first", "vanishing")] == 3 and flags[("middle", "vanishing")] == 3
    assert ("last", "vanishing") not in flags
    assert "The gradient of first is vanishing next to the rest of the model since step 3" in w.report.table()
    data_json = w.report.to_dict()
    assert data_json["gradient_flags"][0]["since"] == 3
    assert len(data_json["gradient_history"]["first"]) == 5


def test_the_chart_draws_per_layer_and_over_steps(tmp_path):
    pytest.importorskip("matplotlib")
    torch.manual_seed(0)
    model = Damped()
    with fxflow.watch(model, steps=3) as w:
        run(model, torch.optim.SGD(model.parameters(), lr=0.01), [torch.randn(8, 6) for _ in range(3)])
    figure = w.report.plot()
    bars, steps = figure.axes
    assert [t.get_text() for t in bars.get_xticklabels()] == ["first", "middle", "last"]
    assert steps.get_title() == "first"  # the first flagged layer
    path = tmp_path / "health.png"
    figure.savefig(path)
    assert path.stat().st_size > 1000
    with pytest.raises(fxflow.FxflowError, match="no layer 'nope'"):
        w.report.plot("nope")
