"""Minimal regression tests for the failure classes the zoo showed (issue 22), each named after
the zoo entry that showed it; the entries themselves run in tests/test_zoo.py.

1. gemma3, reformer: the run-time capture wrote Python objects (an nn.ModuleList, a class) passed
   to a recorded call into the graph's code as repr text, which did not compile.
2. fuyu: dict inputs were bound to forward's positional parameters, so a decorator renaming a
   deprecated keyword never saw it, the image path never ran, and its projection was "unused".
3. autoformer, deepseek_v2: localizing an exact zero failed when the backward carries complex
   gradients (an FFT, complex rotary embeddings).

Each is checked against a real plain backward of the same model, on every capture path that
captures it.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch import nn

import fxflow
from fxflow.capture import METHODS
from every_path import reports_on_every_path
from gradtruth import assert_agrees, line_of, real_grads


# -- 1. gemma3, reformer: non-tensor arguments of a recorded call ----------------------------------
class Mode:
    """A plain class passed as an argument, as configs and strategies are."""

    scale = 2.0


class ThroughBlocks(torch.autograd.Function):
    """Like reformer's _ReversibleFunction: receives the model's blocks and a class as arguments."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, blocks: nn.ModuleList, mode: type) -> torch.Tensor:
        return hidden * (mode.scale * len(blocks))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return grad * Mode.scale * 2, None, None


class PassesObjects(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.blocks = nn.ModuleList([nn.Identity(), nn.Identity()])
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(ThroughBlocks.apply(self.embed(x), self.blocks, Mode))


def test_gemma3_reformer_objects_passed_to_a_recorded_call_become_graph_constants() -> None:
    model = PassesObjects()
    report = fxflow.check(model, torch.randn(3, 4), capture_methods=["runtime"])
    assert report.trace.method == "runtime", report.trace.notes
    assert_agrees(report, real_grads(model, (torch.randn(3, 4),)), opaque_ok=True)
    assert {p.name: p.static for p in report.parameters} == dict.fromkeys(
        ["embed.weight", "embed.bias", "head.weight", "head.bias"], "reachable")


# -- 2. fuyu: model(**inputs), exactly ------------------------------------------------------------
def renamed(old: str, new: str) -> Callable:
    """Like transformers' deprecate_kwarg: a keyword's old name is passed on under its new one."""
    def wrap(forward: Callable) -> Callable:
        @functools.wraps(forward)
        def call(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                kwargs[new] = kwargs.pop(old)
            return forward(self, *args, **kwargs)
        return call
    return wrap


class Captioner(nn.Module):
    """Fuyu's forward: ``image_patches`` is the old name of ``pixel_values``, still in the signature."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.vision = nn.Linear(6, 8)
        self.head = nn.Linear(8, 3)

    @renamed("image_patches", "pixel_values")
    def forward(self, input_ids: torch.Tensor, image_patches: torch.Tensor | None = None,
                pixel_values: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.embed(input_ids)
        if pixel_values is not None:
            hidden = hidden + self.vision(pixel_values)
        return self.head(hidden)


def test_fuyu_dict_inputs_are_passed_as_the_user_passes_them() -> None:
    model = Captioner()
    inputs = {"input_ids": torch.randint(0, 10, (2, 4)), "image_patches": torch.randn(2, 4, 6)}
    assert real_grads(model, (), inputs)["vision.weight"]  # the image path runs in a plain call
    reports = reports_on_every_path(model, inputs)
    assert {report.trace.method for report in reports} == set(METHODS)
    for report in reports:
        assert report.parameter("vision.weight").static == "reachable", report.trace.method


# -- 3. autoformer, deepseek_v2: complex gradients on the way to an exact zero ------------------
class SpectralGate(nn.Module):
    """Autoformer's FFT autocorrelation after a gate that is off on every unit."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Linear(8, 8)
        self.gate = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dead = torch.relu(self.gate(x) - 1e4)  # inactive on every unit: an exact zero for gate
        spectrum = torch.fft.rfft(self.mix(x) + dead, dim=-1)
        return torch.fft.irfft(spectrum * spectrum.conj(), n=8, dim=-1)


def test_autoformer_deepseek_v2_an_exact_zero_is_localized_through_complex_gradients() -> None:
    model = SpectralGate()
    reports = reports_on_every_path(model, torch.randn(2, 8))
    assert reports
    line = line_of(__file__, "dead = torch.relu(")
    for report in reports:
        gate = report.parameter("gate.weight")
        assert (gate.static, gate.dynamic) == ("reachable", "zero"), report.trace.method
        assert not [note for note in report.notes if "could not localize" in note], report.notes
        assert f"after `relu` at tests/test_zoo_failure_classes.py:{line}" in gate.diagnosis, gate.diagnosis
