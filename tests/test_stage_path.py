"""The path of a model through ``fxflow.check`` (issue 19): the pipeline calls each stage once, in
the order the docs draw, and never returns to a stage it left.

A stage is a subpackage of fxflow (``prepare``, ``dynamic``, ``capture``, ``static``, ``diagnose``,
``reconcile``); the path is the sequence of stages whose functions :mod:`fxflow.pipeline` calls,
recorded with ``sys.setprofile`` while real models are checked.
"""
from __future__ import annotations

import os
import sys

import pytest
import torch
from torch import nn

import fxflow
import fxflow.pipeline

STAGES = ("prepare", "dynamic", "capture", "static", "diagnose", "reconcile")
PIPELINE = os.path.abspath(fxflow.pipeline.__file__)


def stage_path(model: nn.Module, inputs: object) -> tuple[list[str], fxflow.Report]:
    """The stages the pipeline entered while checking ``model``, in order (a stage entered again
    after another one appears twice)."""
    path: list[str] = []

    def profile(frame, event, arg):
        if event != "call" or frame.f_back is None or frame.f_back.f_code.co_filename != PIPELINE:
            return
        parts = frame.f_globals.get("__name__", "").split(".")
        if parts[0] == "fxflow" and len(parts) > 1 and parts[1] in STAGES and (not path or path[-1] != parts[1]):
            path.append(parts[1])

    sys.setprofile(profile)
    try:
        report = fxflow.check(model, inputs)
    finally:
        sys.setprofile(None)
    return path, report


class RoundedHead(nn.Module):
    """``round`` gives its input an exactly zero gradient: the diagnose stage runs to say where."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.round(self.body(x)))


def gpt2() -> tuple[nn.Module, dict]:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=8)
    ids = torch.randint(0, 32, (2, 8))
    return transformers.GPT2LMHeadModel(config), {"input_ids": ids, "labels": ids}


def test_every_stage_once_in_order_with_the_diagnosis():
    path, report = stage_path(RoundedHead(), torch.randn(3, 4))
    assert report.parameter("body.weight").dynamic == "zero"  # so the diagnose stage had work to do
    assert path == list(STAGES)


@pytest.mark.parametrize("build", [gpt2, lambda: (nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1,
                                                                 num_decoder_layers=1, dim_feedforward=16),
                                                  (torch.randn(3, 2, 16), torch.randn(4, 2, 16)))],
                         ids=["gpt2 (run-time capture)", "nn.Transformer"])
def test_no_stage_is_entered_twice(build):
    model, inputs = build()
    path, report = stage_path(model, inputs)
    assert report.verified
    assert path == [stage for stage in STAGES if stage in path] and len(path) >= 5
