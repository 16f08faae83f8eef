"""Forward returning several outputs: tuple, list, dict, namedtuple, dataclass, ModelOutput-like.

Regression: a plain dataclass output used to look tensor-free to the analysis, so every
parameter came out "cut" while the real backward delivered gradients.
"""
from __future__ import annotations

from collections import namedtuple

import pytest
import torch
import torch.nn as nn

import fxflow
from tests.models import STATIC_PROMISE, ModelState, grad_kind, projection, real_grads
from tests.models.causes import ModelOutput, Output

Pair = namedtuple("Pair", "live dead")

FORMS = {
    "tuple": lambda live, dead: (live, dead),
    "list": lambda live, dead: [live, dead],
    "dict": lambda live, dead: {"live": live, "dead": dead},
    "nested": lambda live, dead: {"outer": (live, [dead])},
    "namedtuple": lambda live, dead: Pair(live, dead),
    "dataclass": lambda live, dead: Output(logits=live, hidden=dead),
    "modeloutput": lambda live, dead: ModelOutput(logits=live, hidden_states=dead),
}


class Heads(nn.Module):
    """``live`` comes from layer b; ``dead`` from layer a through a detach; layer c feeds both."""

    def __init__(self, form: str) -> None:
        super().__init__()
        self.form = form
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.c = nn.Linear(4, 4)

    def forward(self, x):
        h = self.c(x)
        return FORMS[self.form](self.b(h), self.a(h).detach())


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_output_counts(form: str) -> None:
    torch.manual_seed(0)
    model = Heads(form)
    x = torch.randn(3, 4)
    before = ModelState.of(model)
    report = fxflow.check(model, x, loss_fn=projection)
    ModelState.of(model).assert_same(before)
    grads = real_grads(model, (x,), loss_fn=projection)
    verdicts = {p.name.split(".")[0]: p.static for p in report.parameters}
    assert verdicts == {"a": "cut", "b": "reachable", "c": "reachable"}
    for parameter in report.parameters:
        assert STATIC_PROMISE[parameter.static] == grad_kind(grads[parameter.name])
        assert parameter.agree is True


class OnlyIntegerBesides(nn.Module):
    """One floating output and one integer output (argmax): the integer output carries nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        return self.b(x), self.a(x).argmax(-1)


def test_integer_output_is_a_cut_not_a_path() -> None:
    model = OnlyIntegerBesides()
    x = torch.randn(3, 4)
    report = fxflow.check(model, x)
    grads = real_grads(model, (x,))
    assert grads["a.weight"] is None
    assert report.parameter("a.weight").static == "cut"
    assert [s.op for s in report.parameter("a.weight").cut_by] == ["argmax"]
