"""Verdicts the model's own randomness decides (fxflow.dynamic.redraw): a block that layer drop
skipped on the checked draw, a gate that dropout zeroed, learns on other draws, so it is
``intermittent`` (used on some steps only) and the check passes; a parameter cut on every draw
still fails. Each is compared against real backward passes under the same seeds."""
from __future__ import annotations

import torch
from torch import nn

import fxflow
from gradtruth import line_of, real_gradients

HERE = __file__


class LayerDrop(nn.Module):
    """Each block is skipped with probability 1/2 in training (LayerDrop, stochastic depth)."""

    def __init__(self, detach_head: bool = False):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.head = nn.Linear(8, 1)
        self.detach_head = detach_head

    def forward(self, x):
        for block in self.blocks:
            if self.training and torch.rand(()) < 0.5:  # layer drop: this block is skipped
                continue
            x = torch.tanh(block(x))
        out = self.head(x)
        return out.detach() + x.sum() if self.detach_head else out  # a cut on every draw


def _dropped(truth: dict[str, torch.Tensor | None]) -> set[str]:
    return {name for name, grad in truth.items() if grad is None or not grad.any()}


def test_a_block_layer_drop_skipped_learns_on_other_draws_and_the_check_passes():
    model, x = LayerDrop().train(), torch.randn(4, 8)
    seen_dropped = False
    for seed in range(6):
        torch.manual_seed(seed)
        dry = _dropped(real_gradients(model, (x,)))
        torch.manual_seed(seed)
        report = fxflow.check(model, x)
        assert report.ok, report.table()
        for parameter in report.parameters:
            if parameter.name in dry:
                seen_dropped = True
                assert parameter.dynamic == "intermittent", (seed, parameter)
                assert "the model's own randomness decides" in parameter.diagnosis
                assert any(op.endswith(f"test_randomness.py:{line_of(HERE, 'layer drop: this block is skipped')}") for op in parameter.random_ops), parameter.random_ops
            else:
                assert parameter.dynamic == "ok", (seed, parameter)
    assert seen_dropped


def test_a_cut_on_every_draw_still_fails_beside_layer_drop():
    model, x = LayerDrop(detach_head=True).train(), torch.randn(4, 8)
    torch.manual_seed(0)
    truth = real_gradients(model, (x,))
    assert truth["head.weight"] is None
    torch.manual_seed(0)
    report = fxflow.check(model, x)
    assert not report.ok
    assert [p.name for p in report.problems] == ["head.weight", "head.bias"]
    assert report.parameter("head.weight").dynamic == "missing"


def test_the_redraw_runs_only_when_the_forward_drew_and_puts_the_generators_back():
    model, x = LayerDrop().eval(), torch.randn(4, 8)  # eval: no layer drop, nothing drawn
    report = fxflow.check(model, x)
    assert report.ok and "redraw" not in report.timings
    model.train()
    for seed in range(6):
        torch.manual_seed(seed)
        before = torch.get_rng_state()
        report = fxflow.check(model, x)
        assert torch.equal(torch.get_rng_state(), before), seed  # the generators as the check found them
        if "redraw" in report.timings:
            return
    raise AssertionError("no seed dropped a block")
