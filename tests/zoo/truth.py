"""The zoo's ground truth: a plain forward and backward with fxflow's own loss, and the verdicts
that must follow from it.

``real_gradients`` calls the model as its user would (``model(**inputs)`` for a dict), with the
seeded random projection loss fxflow's probe uses, and says for every parameter whether its
gradient is None, exactly zero, or nonzero. ``disagreements`` lists the parameters of a report
whose verdicts contradict that:

* a nonzero gradient: static ``reachable``, dynamic ``ok``/``vanishing``/``nonfinite``;
* an exactly zero gradient: static ``reachable`` or ``zero``, dynamic ``zero``;
* no gradient (None): static ``cut``/``unused``/``frozen``, dynamic ``missing``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import torch

from fxflow.dynamic.loss import labels_in, training_loss
from fxflow.core.state import ModelSnapshot
from fxflow.verdicts import DynamicVerdict, StaticVerdict


class Truth(StrEnum):
    """What the plain backward left in a parameter's ``.grad``."""

    NONE = "none"
    ZERO = "zero"
    NONZERO = "nonzero"


ALLOWED_STATIC: dict[Truth, set[str]] = {
    Truth.NONZERO: {StaticVerdict.REACHABLE},
    Truth.ZERO: {StaticVerdict.REACHABLE, StaticVerdict.ZERO},
    Truth.NONE: {StaticVerdict.CUT, StaticVerdict.UNUSED, StaticVerdict.FROZEN},
}
ALLOWED_DYNAMIC: dict[Truth, set[str]] = {
    Truth.NONZERO: {DynamicVerdict.OK, DynamicVerdict.VANISHING, DynamicVerdict.NONFINITE},
    Truth.ZERO: {DynamicVerdict.ZERO},
    Truth.NONE: {DynamicVerdict.MISSING},
}


def seed_everything(seed: int = 0) -> None:
    """The same start for every run: torch, Python and NumPy (SpecAugment draws its masks from NumPy)."""
    import numpy

    torch.manual_seed(seed)
    random.seed(seed)
    numpy.random.seed(seed)


def call(model: torch.nn.Module, inputs: Any) -> Any:
    """``model`` called the way its user calls it: keywords from a dict, positions from a tuple."""
    if isinstance(inputs, dict):
        return model(**inputs)
    return model(*inputs)


def real_gradients(model: torch.nn.Module, inputs: Any, seed: int = 0) -> dict[str, Truth]:
    """{parameter name: what a plain forward/backward left in its ``.grad``}; the model is left as found."""
    snapshot = ModelSnapshot.save(model)
    try:
        for parameter in model.parameters():
            parameter.grad = None
        seed_everything(seed)
        with torch.enable_grad():
            # the loss the check differentiates: the model's own when it returns one, else the projection
            loss = training_loss(call(model, inputs), labels_given=labels_in(inputs)).tensor
            if loss is not None and loss.requires_grad:
                loss.backward()
        return {name: _truth(p.grad) for name, p in model.named_parameters()}
    finally:
        snapshot.restore()


def _truth(grad: torch.Tensor | None) -> Truth:
    if grad is None:
        return Truth.NONE
    return Truth.ZERO if not bool(grad.any()) else Truth.NONZERO


@dataclass(frozen=True)
class Disagreement:
    """One parameter whose verdicts contradict the plain backward."""

    parameter: str
    truth: Truth
    static: str
    dynamic: str | None
    cut_by: tuple[str, ...] = field(default=())  # the ops fxflow named as the cut

    def __str__(self) -> str:
        cut = f" cut by {', '.join(self.cut_by)}" if self.cut_by else ""
        return f"{self.parameter}: real grad {self.truth}, static {self.static}{cut}, dynamic {self.dynamic}"


def disagreements(report: Any, truth: dict[str, Truth]) -> list[Disagreement]:
    """Every parameter of ``report`` whose static or dynamic verdict contradicts ``truth``."""
    verdicts = {p.name: p for p in report.parameters}
    assert set(verdicts) == set(truth), sorted(set(verdicts) ^ set(truth))
    found = []
    for name, real in truth.items():
        parameter = verdicts[name]
        if parameter.static not in ALLOWED_STATIC[real] or parameter.dynamic not in ALLOWED_DYNAMIC[real]:
            found.append(Disagreement(name, real, str(parameter.static),
                                      None if parameter.dynamic is None else str(parameter.dynamic),
                                      tuple(site.op for site in parameter.cut_by)))
    return found
