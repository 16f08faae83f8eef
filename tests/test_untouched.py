"""Never touch: a check leaves the model, its inputs and the process as it found them (issue 40).

Byte-for-byte comparisons of what a check could change, and the process-wide state a second
thread would see (queued CUDA seeds, warning filters, the garbage collector).
"""
from __future__ import annotations

import torch
from torch import nn

import fxflow


class DropsABlock(nn.Module):
    """Layer drop: ``b`` is used on half the draws, so the check redraws the model's random numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        if torch.rand(()) < 0.5:
            y = y + self.b(x)
        return y


def test_redraw_keeps_a_queued_cuda_seed():
    """``torch.manual_seed`` before CUDA starts queues a CUDA seed: the check's redraw must not
    replace it (readable without a GPU: the queue is torch's ``_lazy_seed_tracker``)."""
    model = DropsABlock()
    torch.manual_seed(1)  # the first draw drops b: its parameters are dry, and redrawn
    tracker = torch.cuda._lazy_seed_tracker
    queued = tracker.manual_seed_all_cb
    x = torch.randn(2, 3)
    cpu = torch.get_rng_state()
    report = fxflow.check(model, x)
    assert {p.name: str(p.dynamic.value) for p in report.parameters}["b.weight"] == "intermittent"  # it redrew
    assert tracker.manual_seed_all_cb is queued
    assert torch.equal(torch.get_rng_state(), cpu)  # and the global generator is back where it was
