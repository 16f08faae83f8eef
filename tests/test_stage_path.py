"""The path of a model through ``fxflow.check``: the pipeline calls each stage once, in the order the
docs draw, and never returns to a stage it left; and a stage calls only into itself and the stages
before it.

A stage is a subpackage of fxflow (``prepare``, ``dynamic``, ``capture``, ``static``, ``diagnose``,
``reconcile``). Both are recorded with ``sys.setprofile`` while real models are checked: the path is
the sequence of stages whose functions :mod:`fxflow.pipeline` calls; a forward call is a call from a
function of one stage into a function of a later one. A call back into a stage that is already
further down the stack (static hands prepare the function that makes its twins) is not one: the
later stage called the earlier one, which only answers.
"""
from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable

import pytest
import torch
from torch import nn

import fxflow
import fxflow.pipeline

STAGES = ("prepare", "dynamic", "capture", "static", "diagnose", "reconcile")
PIPELINE = os.path.abspath(fxflow.pipeline.__file__)

# Calls from a stage into a later one that the code still makes, as (caller module, callee module):
# none since the shared helpers live in the floor (fxflow.core) and the run records itself. A line
# added here is a debt: the test fails on a line no check makes any more, and on any call not listed.
FORWARD_CALLS_TO_REMOVE: set[tuple[str, str]] = set()


def stage_of(frame: FrameType | None) -> str | None:
    """The stage a frame's function belongs to, or None outside the stages."""
    parts = (frame.f_globals.get("__name__", "") if frame is not None else "").split(".")
    return parts[1] if parts[0] == "fxflow" and len(parts) > 1 and parts[1] in STAGES else None


@dataclass
class Trace:
    """What one check did: the stages the pipeline entered in order (a stage entered again after
    another one appears twice), and the forward calls between stages."""

    path: list[str] = field(default_factory=list)
    forward_calls: set[tuple[str, str]] = field(default_factory=set)

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or frame.f_back is None:
            return
        callee, caller = stage_of(frame), stage_of(frame.f_back)
        if callee is None:
            return
        if frame.f_back.f_code.co_filename == PIPELINE and (not self.path or self.path[-1] != callee):
            self.path.append(callee)
        if caller is not None and STAGES.index(callee) > STAGES.index(caller) and not _called_back(frame, callee):
            self.forward_calls.add((frame.f_back.f_globals["__name__"], frame.f_globals["__name__"]))


def _called_back(frame: FrameType, stage: str) -> bool:
    """Whether ``stage`` is already on the stack below the caller: the call answers it."""
    below = frame.f_back.f_back
    while below is not None:
        if stage_of(below) == stage:
            return True
        below = below.f_back
    return False


def traced_check(model: nn.Module, inputs: object) -> tuple[Trace, fxflow.Report]:
    trace = Trace()
    sys.setprofile(trace.profile)
    try:
        report = fxflow.check(model, inputs)
    finally:
        sys.setprofile(None)
    return trace, report


class RoundedHead(nn.Module):
    """``round`` gives its input an exactly zero gradient: the diagnose stage runs to say where."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.round(self.body(x)))


def rounded_head() -> tuple[nn.Module, object]:
    return RoundedHead(), torch.randn(3, 4)


def gpt2() -> tuple[nn.Module, dict]:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=8)
    ids = torch.randint(0, 32, (2, 8))
    return transformers.GPT2LMHeadModel(config), {"input_ids": ids, "labels": ids}


def transformer() -> tuple[nn.Module, object]:
    model = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16)
    return model, (torch.randn(3, 2, 16), torch.randn(4, 2, 16))


MODELS: dict[str, Callable[[], tuple[nn.Module, object]]] = {
    "rounded head": rounded_head, "gpt2 (run-time capture)": gpt2, "nn.Transformer": transformer}


@functools.cache
def traced(name: str) -> tuple[Trace, fxflow.Report]:
    """The trace of checking one of :data:`MODELS`, once per test process."""
    return traced_check(*MODELS[name]())


def test_every_stage_once_in_order_with_the_diagnosis():
    trace, report = traced("rounded head")
    assert report.parameter("body.weight").dynamic == "zero"  # so the diagnose stage had work to do
    assert trace.path == list(STAGES)


@pytest.mark.parametrize("name", ["gpt2 (run-time capture)", "nn.Transformer"])
def test_no_stage_is_entered_twice(name):
    trace, report = traced(name)
    assert report.verified
    assert trace.path == [stage for stage in STAGES if stage in trace.path] and len(trace.path) >= 5


def test_a_stage_calls_only_into_itself_and_earlier_stages():
    pytest.importorskip("transformers")
    found = set().union(*(traced(name)[0].forward_calls for name in MODELS))
    assert found - FORWARD_CALLS_TO_REMOVE == set(), "a stage calls into a later one"
    assert FORWARD_CALLS_TO_REMOVE - found == set(), "these calls are gone: delete them from the list"


def test_a_forward_call_is_seen_and_a_call_back_is_not():
    """The recorder itself, on a stand-in pair of stages: capture calling static is a forward call;
    static handing capture a function that capture calls back is not."""
    trace = Trace()
    static_globals, capture_globals = {"__name__": "fxflow.static.x"}, {"__name__": "fxflow.capture.y"}
    exec("def answer():\n    return 1\n", static_globals)  # noqa: S102 - functions "in" those modules
    exec("def ask(f):\n    return f()\n", capture_globals)  # noqa: S102
    exec("def hand(f, g):\n    return f(g)\n", static_globals)  # noqa: S102
    sys.setprofile(trace.profile)
    try:
        capture_globals["ask"](static_globals["answer"])  # called from the test: capture -> static
        forward = set(trace.forward_calls)
        trace.forward_calls.clear()
        static_globals["hand"](capture_globals["ask"], static_globals["answer"])  # static -> capture -> static
    finally:
        sys.setprofile(None)
    assert forward == {("fxflow.capture.y", "fxflow.static.x")}
    assert trace.forward_calls == set()
