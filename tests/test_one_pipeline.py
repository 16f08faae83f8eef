"""One pipeline (issue 19): ``fxflow.check`` and ``fxflow.watch`` assemble their Report with the same
function, so the same model and step give equal Reports whichever way they were checked.

``check`` runs fxflow's own backward of ``loss_fn``; ``watch`` observes the user's step with the
same loss. Everything but the wording of the loss (``"the given loss function"`` against ``"the
loss of the watched training step"``) and the timings must be equal: verdicts, cut sites, notes,
uncertainty, unregistered rows. One thing only ``check`` can add, by design: where a zero or
vanishing gradient died (it replays its own forward; ``watch`` cannot replay the user's step), so
the vanishing factor here is one at which these models have no vanishing gradient. The models are examples, torch.nn's own layers, a Hugging Face
model, and models whose analysis runs on stand-ins or meta twins.
"""
from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from torch import nn

import fxflow
from fxflow.prepare.load import load_target

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = [
    "seed.py:Net", "seed_fixed.py:Net", "break_frozen.py:Net", "break_threshold.py:Net", "break_unused.py:Net",
    "hidden_autograd_function.py:Net", "hidden_checkpoint.py:Net", "hidden_detach_inplace.py:Net",
    "hidden_inference_mode.py:Net", "hidden_no_grad.py:Net", "hidden_numpy.py:Net", "render_nested.py:Net",
    "transfer_frozen.py:FrozenBackbone", "transfer_frozen.py:DetachedBackbone",
]


def loss_of(outputs) -> torch.Tensor:
    """The step's loss: every floating output, each element weighted by a fixed random number. Not a plain
    sum: the sum of a LayerNorm's output does not depend on its input, so every gradient behind it is
    round-off, which check reads as zero (a float64 rerun) and watch, which cannot rerun the step, cannot."""
    from fxflow.dynamic.loss import floating_outputs

    def weights(t: torch.Tensor, index: int) -> torch.Tensor:
        return torch.randn(t.shape, generator=torch.Generator().manual_seed(index)).to(t.device)

    return sum((t.float() * weights(t, index)).sum() for index, t in enumerate(floating_outputs(outputs))
               if t.requires_grad)


class Unregistered(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(8, 8)]
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.layers[0](x))


class ItemThreshold(nn.Module):
    """``.item()`` in forward: the analysis runs this node on stand-ins."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 2)

    def forward(self, x):
        h = self.a(x)
        return self.b(h * (h.mean().item() > -10))


def _built(name: str):
    if ":" in name:
        loaded = load_target(os.path.join(ROOT, "examples", name))
        return loaded.model, loaded.inputs
    torch.manual_seed(0)
    if name == "nn.Transformer":
        return nn.Transformer(16, 2, 1, 1, 32, dropout=0.0), (torch.randn(3, 2, 16), torch.randn(4, 2, 16))
    if name == "nn.LSTM":
        return nn.LSTM(8, 8, batch_first=True), (torch.randn(2, 5, 8),)
    if name == "nn.MultiheadAttention":
        x = torch.randn(2, 5, 8)
        return nn.MultiheadAttention(8, 2, batch_first=True), (x, x, x)
    if name == "unregistered":
        return Unregistered(), (torch.randn(2, 8),)
    if name == "stand-ins":
        return ItemThreshold(), (torch.randn(2, 8),)
    if name == "gpt2":
        transformers = pytest.importorskip("transformers")
        config = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return transformers.GPT2Model(config), {"input_ids": torch.randint(0, 50, (2, 6))}
    raise KeyError(name)


MODELS = EXAMPLES + ["nn.Transformer", "nn.LSTM", "nn.MultiheadAttention", "unregistered", "stand-ins", "gpt2"]


def _comparable(report: fxflow.Report) -> fxflow.Report:
    return dataclasses.replace(report, loss=None, timings={})


@pytest.mark.parametrize("twins", ["real", "meta"])
@pytest.mark.parametrize("name", MODELS)
def test_watch_and_check_give_equal_reports(name, twins, monkeypatch):
    monkeypatch.setenv("FXFLOW_TWINS", twins)
    model, inputs = _built(name)
    model.eval()  # one step each: no dropout draw may differ between them
    checked = fxflow.check(model, inputs, loss_fn=loss_of, target="m", vanishing=1e-30)
    with fxflow.watch(model, vanishing=1e-30) as watched:
        outputs = model(**inputs) if isinstance(inputs, dict) else model(*inputs)
        loss_of(outputs).backward()
    for parameter in model.parameters():
        parameter.grad = None
    assert watched.report.loss == "the loss of the watched training step"
    assert checked.loss == "the given loss function `loss_of`"
    watched_report = dataclasses.replace(watched.report, target="m")
    assert _comparable(watched_report).to_dict() == _comparable(checked).to_dict()
    assert _comparable(watched_report) == _comparable(checked)


def test_every_module_the_pipeline_drawing_names_exists():
    """docs/how-it-works.md draws the pipeline with a module path per stage: each must exist."""
    import re

    text = open(os.path.join(ROOT, "docs", "how-it-works.md"), encoding="utf-8").read()
    named = set(re.findall(r"fxflow/[\w/]+(?:\.py|/)", text))
    assert len(named) >= 10, named
    missing = sorted(path for path in named if not os.path.exists(os.path.join(ROOT, path)))
    assert missing == []
