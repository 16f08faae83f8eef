"""Minimal regression tests for the failure classes the zoo showed (issue 22), each named after
the zoo entry that showed it; the entries themselves run in tests/test_zoo.py.

1. gemma3, reformer: the run-time capture wrote Python objects (an nn.ModuleList, a class) passed
   to a recorded call into the graph's code as repr text, which did not compile.
2. fuyu: dict inputs were bound to forward's positional parameters, so a decorator renaming a
   deprecated keyword never saw it, the image path never ran, and its projection was "unused".
3. autoformer, deepseek_v2: localizing an exact zero failed when the backward carries complex
   gradients (an FFT, complex rotary embeddings).
4. reformer: layers run inside a custom autograd.Function that takes them as an nn.ModuleList
   argument; their parameters were "unused" while the Function's backward gives them a gradient.
5. sew_d: a custom Function whose backward is a softmax's: run with cotangents of ones, it is
   exactly zero, and the parameters before it were "zero" while the real loss gives them a gradient.
6. encodec: on meta twins, padding computed from an integer buffer came out wrong (stand-ins of
   zeros), a later add failed on mismatched shapes, and the name rules then let gradient through
   ``max(...).indices``: the encoder was "reachable" while it gets no gradient.
7. lasr_ctc: LayerDrop draws ``torch.rand([])`` in forward; the symbolic trace ran that draw for
   real before failing, so the real run behind the run-time capture dropped other layers than the
   user's own call, and a layer the user's backward trains was "unused".

Each is checked against a real plain backward of the same model, on every capture path that
captures it.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import pytest
import torch
from torch import nn

import fxflow
from fxflow.static.analyze import analyze
from fxflow.static.annotate import annotate
from fxflow.capture.symbolic import symbolic_capture
from fxflow.capture import METHODS
from every_path import reports_on_every_path
from gradtruth import assert_agrees, line_of, real_grads

DRY = {"cut", "unused", "frozen"}


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


# -- 4. reformer: a custom Function that runs the modules passed to it ----------------------------
class Reversible(torch.autograd.Function):
    """Like reformer's _ReversibleFunction: runs the first two blocks it is given without grad,
    and in backward recomputes them and runs ``backward`` itself, into their parameters' ``.grad``."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, blocks: nn.ModuleList) -> torch.Tensor:
        ctx.blocks = blocks
        ctx.save_for_backward(hidden)
        for block in blocks[:2]:
            hidden = hidden + block(hidden)
        return hidden

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        (hidden,) = ctx.saved_tensors
        with torch.enable_grad():
            start = hidden.detach().requires_grad_(True)
            out = start
            for block in ctx.blocks[:2]:
                out = out + block(out)
            torch.autograd.backward(out, grad)
        return start.grad, None


class ReversibleLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 6)
        self.blocks = nn.ModuleList([nn.Linear(6, 6), nn.Linear(6, 6), nn.Linear(6, 6)])  # the third never runs
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(Reversible.apply(self.embed(x), self.blocks))


@pytest.mark.parametrize("twins", ["meta", "real"])
def test_reformer_parameters_of_modules_passed_to_a_custom_function_are_its_inputs(twins: str, monkeypatch) -> None:
    monkeypatch.setenv("FXFLOW_TWINS", twins)
    model, x = ReversibleLayers(), torch.randn(3, 4)
    truth = real_grads(model, (x,))
    assert truth["blocks.0.weight"] and truth["blocks.1.bias"] and not truth["blocks.2.weight"]
    report = fxflow.check(model, x, capture_methods=["runtime"])
    assert report.trace.method == "runtime", report.trace.notes
    assert_agrees(report, truth)
    assert report.parameter("blocks.0.weight").static == "reachable"
    assert report.parameter("blocks.2.weight").static in DRY
    assert [name for name, p in model.named_parameters() if p.grad is not None] == []  # left as found


# -- 5. sew_d: a custom backward that a cotangent of ones zeroes ---------------------------------
class MaskedSoftmax(torch.autograd.Function):
    """Like sew_d's XSoftmax: a masked softmax with its own backward (softmax's)."""

    @staticmethod
    def forward(ctx: Any, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), -1)
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        (probs,) = ctx.saved_tensors
        return probs * (grad - (grad * probs).sum(-1, keepdim=True)), None


class MaskedAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(8, 8)
        self.value = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(x.shape[0], x.shape[1], x.shape[1], dtype=torch.bool).tril()
        probs = MaskedSoftmax.apply(self.query(x) @ x.transpose(1, 2), mask)
        return probs @ self.value(x)


@pytest.mark.parametrize("twins", ["meta", "real"])
def test_sew_d_a_softmax_backward_is_run_with_random_cotangents(twins: str, monkeypatch) -> None:
    monkeypatch.setenv("FXFLOW_TWINS", twins)
    model, x = MaskedAttention(), torch.randn(2, 5, 8)
    truth = real_grads(model, (x,))
    assert all(truth.values())
    for report in reports_on_every_path(model, x):  # each against the real backward, dynamic verdicts too
        assert report.parameter("query.weight").static == "reachable", report.trace.method


# -- 6. encodec: sizes held in integer buffers, and max's indices --------------------------------
class PaddedQuantizer(nn.Module):
    """Encodec's padded convolution (the padding from an integer buffer, as EncodecConv1d computes it),
    a learned offset of the conv's real output length, and a codebook looked up by max's indices."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 4, stride=2)
        self.register_buffer("padding_total", torch.tensor(2), persistent=False)
        self.offset = nn.Parameter(torch.randn(4, 5))  # the length the real padding gives: 9 -> 12 -> 5
        self.codebook = nn.Parameter(torch.randn(3, 4))
        self.decoder = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        frames = torch.ceil((length - 4 + self.padding_total) / 2 + 1).to(torch.int64) - 1
        extra = frames * 2 + 4 - self.padding_total - length
        hidden = (self.conv(nn.functional.pad(x, (self.padding_total, extra))) + self.offset).transpose(1, 2)
        codes = (hidden @ self.codebook.t()).max(dim=-1).indices  # no gradient goes back through these
        return self.decoder(nn.functional.embedding(codes, self.codebook))


@pytest.mark.parametrize("twins", ["meta", "real"])
def test_encodec_sizes_from_integer_buffers_and_max_indices(twins: str, monkeypatch) -> None:
    monkeypatch.setenv("FXFLOW_TWINS", twins)
    model, x = PaddedQuantizer(), torch.randn(2, 2, 9)
    truth = real_grads(model, (x,))
    assert truth["codebook"] and not truth["conv.weight"] and not truth["offset"]
    reports = reports_on_every_path(model, x)
    assert "runtime" in {report.trace.method for report in reports}
    for report in reports:
        assert not [note for note in report.notes if "name rule" in note], report.notes
        assert report.parameter("conv.weight").static in DRY, report.trace.method


def test_encodec_the_name_rules_cut_at_max_indices() -> None:
    """Where nothing runs, every edge comes from the name rules: max's indices carry no gradient."""
    model = PaddedQuantizer()
    graph_module = symbolic_capture(model)
    annotate(graph_module, model, None)
    verdicts = analyze(graph_module, model).verdicts
    truth = real_grads(model, (torch.randn(2, 2, 9),))
    assert {name: verdict.static not in DRY for name, verdict in verdicts.items()} == truth
    assert [site.op for site in verdicts["conv.weight"].cut_by] == ["indices"]


# -- 7. lasr_ctc: a failed capture attempt must not shift the real run's random draws --------------
class LayerDrop(nn.Module):
    """LayerDrop as speech encoders do it (a draw per layer in train mode), then data-dependent
    control flow that the symbolic trace cannot follow, after it has drawn."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            if self.training and torch.rand([]) < 0.5:
                continue
            x = x + layer(x)
        return x if x.sum() > -1e9 else -x


def test_lasr_ctc_failed_captures_leave_the_random_draws_to_the_real_run() -> None:
    model, x = LayerDrop().train(), torch.randn(2, 4)
    differs = 0
    for seed in range(4):  # each seed drops other layers: each must agree with its own plain run
        torch.manual_seed(seed)
        truth = real_grads(model, (x,))
        torch.manual_seed(seed)
        report = fxflow.check(model, x)
        assert report.trace.method == "runtime", report.trace.notes
        assert_agrees(report, truth)
        differs += len(set(truth.values())) > 1
    assert differs  # some seeds drop a layer and keep another
