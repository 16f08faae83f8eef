"""Twins "recorded": the annotation of the check's own recorded forward reads the results that run
computed, instead of running the graph again on twins (issue 18: GPT-2 small's annotation went
from 0.13 s to 0.03 s). Read or rebuilt, every node must get the same edges: compared node by node
against meta and real twins on Hugging Face architectures, torch.nn's own layers, and the cases the
reading handles on purpose (a rebased op with no derivative, a custom Function's own backward, a
saved tensor the real backward freed, values only real data can decide). A forward that changes a
tensor after making it cannot be read back: the check then runs on twins, and still agrees with a
real backward. tests/zoo_matrix.py compares every zoo model the same way.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import fxflow
from fxflow.capture import capture
from fxflow.core.guard import guard
from gradtruth import assert_agrees, real_grads
from recorded_flows import flow_differences, recorded_run
from test_functions import ScaleGrad  # examples/hidden_autograd_function.py's: its backward returns None

transformers = pytest.importorskip("transformers")


class Layers(nn.Module):
    """Two Linears with ``between`` (a function of the hidden values) in the middle."""

    def __init__(self, between) -> None:
        super().__init__()
        self.first, self.last, self.between = nn.Linear(4, 8), nn.Linear(8, 2), between

    def forward(self, x):
        return self.last(self.between(self.first(x)))


def _positive_rows(h):  # a boolean mask: meta twins need stand-ins, the recording has the real rows
    return h[h.sum(-1) > -1e9] * 1.0


def _halves_and_rest(h):  # floor_divide has no derivative: the probe's tripwire rebases its result
    return h + torch.floor_divide(h, 2.0)


def _threshold(h):  # .item(): an escape from torch and back
    return h * float(h.mean().item() > -1e9)


def _gpt2():
    config = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=2)
    ids = torch.randint(0, 50, (2, 6))
    return transformers.GPT2LMHeadModel(config), {"input_ids": ids, "labels": ids}


def _bert():
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16)
    return transformers.BertForMaskedLM(config), {"input_ids": torch.randint(0, 50, (2, 6))}


def _llama():
    config = transformers.LlamaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1, intermediate_size=32, max_position_embeddings=16)
    ids = torch.randint(0, 50, (2, 6))
    return transformers.LlamaForCausalLM(config), {"input_ids": ids, "labels": ids}


def _torch_transformer():
    model = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32,
                           dropout=0.0, batch_first=True)
    return model, (torch.randn(2, 5, 16), torch.randn(2, 4, 16))


def _lstm():
    return nn.LSTM(4, 8, num_layers=2, bidirectional=True, batch_first=True), (torch.randn(2, 5, 4),)


CASES = {
    "gpt2": _gpt2, "bert": _bert, "llama": _llama, "nn.Transformer": _torch_transformer, "nn.LSTM": _lstm,
    "custom Function": lambda: (Layers(lambda h: ScaleGrad.apply(h)), (torch.randn(3, 4),)),
    "no derivative": lambda: (Layers(_halves_and_rest), (torch.randn(3, 4),)),
    "sgn of a real tensor": lambda: (Layers(lambda h: h * torch.sgn(h)), (torch.randn(3, 4),)),
    "boolean mask": lambda: (Layers(_positive_rows), (torch.randn(3, 4),)),
    ".item()": lambda: (Layers(_threshold), (torch.randn(3, 4),)),
}


@pytest.mark.parametrize("name", CASES)
def test_read_edges_are_the_edges_twins_rebuild(name: str) -> None:
    torch.manual_seed(0)
    model, inputs = CASES[name]()
    differences = flow_differences(model, inputs)
    assert differences is not None, "the recording was not kept"
    assert differences == []


def _in_place(h):
    return h.add_(1.0)


def _detached_in_place(h):
    g = h * 2.0
    g.detach_()
    return g + h


def _flipped(h):
    g = (h * 2.0).detach()
    g.requires_grad = True  # no torch call: only the tensor's state says it
    return g + h


def _written_through_a_view(h):
    out = torch.zeros(h.shape[0], 16)
    out[:, :8] = h
    return out[:, 8:] + out[:, :8]


CHANGING = {"add_": _in_place, "detach_": _detached_in_place, "requires_grad flipped": _flipped,
            "a slice written": _written_through_a_view}


@pytest.mark.parametrize("name", CHANGING)
def test_a_forward_that_changes_a_tensor_after_making_it_is_checked_on_twins(name: str) -> None:
    class Changing(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.last = nn.Linear(4, 8), nn.Linear(8, 2)

        def forward(self, x):
            return self.last(CHANGING[name](self.first(x)))

    torch.manual_seed(0)
    model, inputs = Changing(), (torch.randn(3, 4),)
    with guard(model, fresh_grads=True):
        recorded, _, _ = recorded_run(model, inputs)
    assert recorded.graph_module is not None and recorded.values is None
    report = fxflow.check(model, inputs, capture_methods=["runtime"])
    assert_agrees(report, real_grads(model, inputs))


def test_the_capture_hands_the_recorded_results_on_only_with_the_recorded_graph() -> None:
    torch.manual_seed(0)
    model, inputs = _gpt2()
    with guard(model, fresh_grads=True):
        recorded, runner, example = recorded_run(model, inputs)
        captured = capture(runner, example, recorded=recorded)
    assert captured.method == "runtime" and captured.values is recorded.values is not None
    traced = Layers(torch.relu)
    with guard(traced, fresh_grads=True):
        recorded, runner, example = recorded_run(traced, (torch.randn(3, 4),))
        captured = capture(runner, example, recorded=recorded)
    assert captured.method == "symbolic_trace" and captured.values is None


def test_a_recording_keeps_no_activation_once_forward_has_returned() -> None:
    """What the recording hands on are snapshots: the real activations are the backward's to free,
    as in a plain step (held through it, they cost GPT-2 small 0.04 s of fresh memory)."""
    import gc
    import weakref

    from fxflow.dynamic.recording import record_run
    from fxflow.prepare import prepare

    torch.manual_seed(0)
    model, inputs = _gpt2()
    prepared = prepare(model, inputs, None, infer=False)  # forward called with keywords, as the check calls it
    made = []
    handle = model.transformer.h[0].mlp.register_forward_hook(lambda module, args, out: made.append(weakref.ref(out)))
    try:
        recorded = record_run(prepared.runner, prepared.example)
    finally:
        handle.remove()
    gc.collect()
    assert recorded.values is not None and made and made[0]() is None  # the MLP's output is gone
    results = [t for value in recorded.values.results.values() for t in (value if isinstance(value, tuple) else (value,))
               if isinstance(t, torch.Tensor) and not isinstance(t, nn.Parameter)]
    assert results and all(t.is_meta or t.dim() == 0 for t in results)


def test_the_check_lets_go_of_the_recorded_results() -> None:
    """The recorded activations are held only until the annotation has read them."""
    import gc
    import weakref

    torch.manual_seed(0)
    model, inputs = _gpt2()
    import fxflow.pipeline

    kept = []
    original = fxflow.pipeline.analyze_capture

    def spy(captured, *args, **kwargs):
        kept.extend(weakref.ref(t) for t in captured.values.results.values() if isinstance(t, torch.Tensor)
                    and not isinstance(t, nn.Parameter))
        return original(captured, *args, **kwargs)

    fxflow.pipeline.analyze_capture = spy
    try:
        report = fxflow.check(model, inputs)
    finally:
        fxflow.pipeline.analyze_capture = original
    gc.collect()
    assert report.trace.method == "runtime" and kept
    inputs_kept = {id(t) for t in inputs.values()}
    alive = [ref() for ref in kept if ref() is not None and id(ref()) not in inputs_kept]
    assert alive == []
