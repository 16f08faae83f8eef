"""Twin tensors: the same verdicts whatever the twin kind and the machine's load, and the user's
weights never swapped (each module call gets its twins passed in)."""
from __future__ import annotations

import importlib.util
import math
import time
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import fxflow
from fxflow.static.annotate import annotate
from fxflow.capture import capture
from gradtruth import assert_agrees, real_grads


class Translation(nn.Module):
    """The standard translation model (PyTorch's seq2seq tutorial, tiny): token embeddings, an
    ``nn.Transformer`` called with attention and padding masks, a generator Linear.

    ``delay`` makes forward slow (as on a busy machine) without changing what it computes.
    """

    def __init__(self, vocab: int = 30, width: int = 16, delay: float = 0.0) -> None:
        super().__init__()
        self.src_embed, self.tgt_embed = nn.Embedding(vocab, width), nn.Embedding(vocab, width)
        self.transformer = nn.Transformer(d_model=width, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                                          dim_feedforward=32, dropout=0.0)
        self.generator = nn.Linear(width, vocab)
        self.width, self.delay = width, delay

    def forward(self, src, tgt, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask):
        time.sleep(self.delay)
        scale = math.sqrt(self.width)
        out = self.transformer(self.src_embed(src) * scale, self.tgt_embed(tgt) * scale, src_mask, tgt_mask, None,
                               src_padding_mask, tgt_padding_mask, src_padding_mask)
        return self.generator(out)


def translation_inputs(source: int = 6, target: int = 5, batch: int = 2) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    src_padding = torch.zeros(batch, source, dtype=torch.bool)
    src_padding[0, -1] = True
    tgt_padding = torch.zeros(batch, target, dtype=torch.bool)
    tgt_padding[1, -1] = True
    return (torch.randint(0, 30, (source, batch), generator=generator),
            torch.randint(0, 30, (target, batch), generator=generator),
            torch.zeros(source, source, dtype=torch.bool),
            nn.Transformer.generate_square_subsequent_mask(target),
            src_padding, tgt_padding)


def _verdicts(report: fxflow.Report) -> list[tuple]:
    return [(p.name, p.static, [(s.op, s.source) for s in p.cut_by]) for p in report.parameters]


@pytest.fixture(params=["meta", "real"])
def twins(request, monkeypatch) -> str:
    monkeypatch.setenv("FXFLOW_TWINS", request.param)
    return request.param


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_translation_transformer_agrees_with_a_real_backward(twins: str) -> None:
    """On meta twins the whole nn.Transformer call cannot run (it reads a mask's values): it runs
    again on real copies of its weights instead of losing its parameters."""
    torch.manual_seed(0)
    model, inputs = Translation(), translation_inputs()
    report = fxflow.check(model, inputs)
    assert report.trace.method == "symbolic_trace"
    assert_agrees(report, real_grads(model, inputs))
    inside = [p for p in report.parameters if p.name.startswith(("transformer.", "generator."))]
    assert len(inside) == len(list(model.transformer.parameters())) + 2
    assert {p.static for p in inside} == {"reachable"} and report.ok
    assert not [note for note in report.notes if "name rule" in note]  # it ran, on stand-ins: no guess


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_verdicts_do_not_depend_on_how_long_forward_takes() -> None:
    """A forward slower than the old 50 ms threshold (a busy machine) once switched to meta twins
    and lost the transformer's parameters; the twin kind is now decided by size alone."""
    reports = []
    for delay in (0.0, 0.06):  # either side of the old threshold
        torch.manual_seed(0)
        model, inputs = Translation(delay=delay), translation_inputs()
        report = fxflow.check(model, inputs)
        assert_agrees(report, real_grads(model, inputs))
        reports.append(report)
    idle, busy = reports
    assert _verdicts(idle) == _verdicts(busy)
    assert [p.dynamic for p in idle.parameters] == [p.dynamic for p in busy.parameters]


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("name", ["hidden_numpy", "hidden_detach_inplace", "hidden_checkpoint"])
def test_examples_get_the_same_verdicts_on_either_twin_kind(name: str, monkeypatch) -> None:
    """Stand-ins (hidden_numpy's .tolist()), in-place cuts and checkpoints: meta = real."""
    spec = importlib.util.spec_from_file_location(f"fxflow_example_{name}_twins", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, inputs = module.Net(), (module.example_inputs(),)
    verdicts = []
    for kind in ("meta", "real"):
        monkeypatch.setenv("FXFLOW_TWINS", kind)
        verdicts.append(_verdicts(fxflow.check(model, inputs)))
    assert verdicts[0] == verdicts[1]
    assert any(static == "cut" for _, static, _ in verdicts[0])


class Abort(BaseException):
    """Not an Exception: nothing in the analysis may catch it and carry on."""


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return self.second(self.second(torch.relu(self.first(x))))


def test_model_is_unchanged_when_the_analysis_raises_midway(twins: str) -> None:
    """``second`` raises on its 2nd call on twins or stand-ins (the zero-by-construction check runs
    each module call again on random stand-ins). While it runs, no other module holds a twin; after
    the raise every module holds the user's own tensors, values and grads."""
    torch.manual_seed(0)
    model, inputs = TwoLayers(), (torch.randn(3, 4),)
    graph_module = capture(model, inputs).graph_module
    tensors = {name: (t, t.detach().clone()) for name, t in model.state_dict(keep_vars=True).items()}
    seen: list[tuple[bool, bool]] = []

    def trip(module: nn.Module, args: tuple) -> None:
        on_twin = module.weight is not tensors["second.weight"][0]
        if on_twin:
            on_device = module.weight.device.type in (twins, tensors["second.weight"][0].device.type)
            seen.append((on_device or twins == "real", model.first.weight is tensors["first.weight"][0]))
            if len(seen) == 2:
                raise Abort

    model.second.register_forward_pre_hook(trip)
    with pytest.raises(Abort):
        annotate(graph_module, model, inputs, twins=twins)
    assert seen == [(True, True), (True, True)]  # a twin or stand-in was passed in; first kept the user's weight
    after = model.state_dict(keep_vars=True)
    assert list(after) == list(tensors)
    for name, (tensor, values) in tensors.items():
        assert after[name] is tensor and torch.equal(tensor, values) and tensor.grad is None, name
    assert all(isinstance(p, nn.Parameter) and not p.is_meta for p in model.parameters())


class Refuses(nn.Module):
    """``inner`` runs only on the user's own weights: no twin, no stand-in can run it."""

    def __init__(self) -> None:
        super().__init__()
        self.inner, self.head = nn.Linear(4, 4), nn.Linear(4, 2)
        user_weight = self.inner.weight

        def only_the_users(module: nn.Module, args: tuple) -> None:
            if module.weight is not user_weight:
                raise RuntimeError("refuses to run on anything but its own weights")

        self.inner.register_forward_pre_hook(only_the_users)

    def forward(self, x):
        return self.head(torch.tanh(self.inner(x)))


def test_a_module_call_nothing_can_run_keeps_its_parameters_with_a_note(twins: str) -> None:
    torch.manual_seed(0)
    model, inputs = Refuses(), (torch.randn(3, 4),)
    report = fxflow.check(model, inputs)
    assert_agrees(report, real_grads(model, inputs))
    assert report.parameter("inner.weight").static == "reachable"
    notes = [note for note in report.notes if "name rule" in note]
    # head runs after inner, so it is decided by rule too: both are counted
    assert len(notes) == 1 and notes[0].startswith("4 parameters (head.bias, head.weight, inner.bias, inner.weight)")
    assert "at inner, head:" in notes[0]


class SpectralNormed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.utils.spectral_norm(nn.Linear(4, 4)), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.body(x))


def test_attributes_a_module_call_assigns_from_its_twins_are_put_back(twins: str) -> None:
    """spectral_norm's pre-hook assigns ``module.weight`` from the passed-in ``weight_orig``:
    after the analysis the attribute is the user's tensor again, not one made from a twin."""
    torch.manual_seed(0)
    model, inputs = SpectralNormed(), (torch.randn(3, 4),)
    model(*inputs)
    weight = model.body.weight
    annotate(capture(model, inputs).graph_module, model, inputs, twins=twins)
    assert model.body.weight is weight
    report = fxflow.check(model, inputs)
    assert_agrees(report, real_grads(model, inputs))
