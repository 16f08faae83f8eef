"""The zoo's truth cannot be talked into a wrong ``held`` (issue 39, item 6).

tests/zoo/truth.py used to accept ``held`` for any exact zero: a look-ahead that called a dead unit
held passed the zoo. Now a held verdict is a disagreement unless real Adam steps in plain torch
(``first_learning_step``) first give the parameter a gradient on the step fxflow names. Each test
breaks fxflow on purpose and shows the zoo's check then fails; the unbroken check agrees.
"""
from __future__ import annotations

import pytest
import torch

import fxflow.pipeline
from fxflow.dynamic.lookahead import LookAhead
from models import zero_init
from zoo.registry import DEFAULT_CHAIN
from zoo.run import check_path
from zoo.truth import real_gradients


def specimen(name: str) -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    model = getattr(zero_init, name)()
    torch.manual_seed(0)
    return model, (tuple(model.example_inputs()) if hasattr(model, "example_inputs") else (torch.randn(4, 8),))


@pytest.mark.parametrize("name", ["LoRANet", "ZeroChain", "DeadReLU"])
def test_the_unbroken_check_agrees_with_real_steps(name):
    model, inputs = specimen(name)
    result = check_path(model, inputs, real_gradients(model, inputs), DEFAULT_CHAIN)
    assert not result.error and [str(d) for d in result.disagreements] == []


def _claiming(step: int | None):
    """A broken look-ahead: every first-step zero learns from ``step`` (None: from one step later than found)."""
    real = fxflow.pipeline.look_ahead

    def broken(parameters, zeros, rerun, **kwargs) -> LookAhead:
        found = real(parameters, zeros, rerun, **kwargs)
        found.learns_from = {name: step or found.learns_from.get(name, 1) + 1 for name in found.zeros}
        found.exhausted = False
        return found
    return broken


@pytest.mark.parametrize("name, step", [("DeadReLU", 2), ("LoRANet", None), ("ZeroChain", None)])
def test_a_wrong_held_is_a_disagreement(name, step, monkeypatch):
    """A dead ReLU called held, or a zero-init called held one step late: the zoo's check fails."""
    model, inputs = specimen(name)
    truth = real_gradients(model, inputs)
    monkeypatch.setattr(fxflow.pipeline, "look_ahead", _claiming(step))
    result = check_path(model, inputs, truth, DEFAULT_CHAIN)
    assert any(d.dynamic == "held" for d in result.disagreements), [str(d) for d in result.disagreements]
