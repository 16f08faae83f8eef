"""The zoo's truth cannot be talked into a wrong ``intermittent`` (issue 39, item 6).

tests/zoo/truth.py used to accept ``intermittent`` for any missing or zero gradient: redraws that
called a dead layer "used on some steps" passed the zoo. Now an intermittent verdict is a disagreement
unless the same plain step under another seed of the model's generators (``reached_on_other_draws``)
gives the parameter a gradient. The test breaks fxflow's redraws on purpose and shows the zoo's check
then fails; the unbroken check agrees.
"""
from __future__ import annotations

import torch

import fxflow.pipeline
from fxflow.dynamic.redraw import Redrawn
from test_training_choices import ChoiceBesideDead
from zoo.registry import DEFAULT_CHAIN
from zoo.run import check_path
from zoo.truth import real_gradients


def specimen() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return ChoiceBesideDead(), (torch.randn(4, 8),)


def test_the_unbroken_redraws_agree_with_other_draws():
    model, inputs = specimen()
    result = check_path(model, inputs, real_gradients(model, inputs), DEFAULT_CHAIN)
    assert not result.error and [str(d) for d in result.disagreements] == []


def test_a_dead_layer_called_intermittent_is_a_disagreement(monkeypatch):
    """Broken redraws that say every dry parameter was reached by another draw: the zoo's check fails
    on the layer multiplied by zero, which no draw reaches."""
    model, inputs = specimen()
    truth = real_gradients(model, inputs)

    def every_dry_reached(run, example, dry, seed, *args, **kwargs):
        return Redrawn({name: seed + 1 for name in dry})
    monkeypatch.setattr(fxflow.pipeline, "redraw_of", every_dry_reached)
    result = check_path(model, inputs, truth, DEFAULT_CHAIN)
    wrong = {d.parameter for d in result.disagreements if d.dynamic == "intermittent"}
    assert {"dead.weight", "dead.bias"} <= wrong, [str(d) for d in result.disagreements]
