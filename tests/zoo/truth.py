"""The zoo's ground truth: a plain forward and backward, and the verdicts that must follow from it.

``real_gradients`` calls the model as its user would (``model(**inputs)`` for a dict), with the
loss a training step differentiates (tests/gradtruth.py's, written without fxflow's code: the
model's own, else a seeded random projection of every output), and says for every parameter whether its
gradient is None, exactly zero, or nonzero. ``disagreements`` lists the parameters of a report
whose verdicts contradict that:

* a nonzero gradient: static ``reachable``, dynamic ``ok``/``vanishing``/``nonfinite``;
* an exactly zero gradient (or one at rounding level: zero in exact arithmetic): static ``reachable`` or
  ``zero``, dynamic ``zero``; ``held`` only when real
  optimizer steps (``first_learning_step``) give it a first nonzero gradient on the very step fxflow's
  ``learns_from_step`` names, never for an exact zero as such;
* no gradient (None): static ``cut``/``unused``/``frozen``, dynamic ``missing``;
* ``intermittent`` for a zero or missing gradient only when another draw of the model's random numbers
  (``reached_on_other_draws``: the same plain step with the generators seeded otherwise) gives it a
  nonzero gradient, never for a missing gradient as such.

``first_learning_step`` trains the model a few real optimizer steps and says when each parameter
first gets a nonzero gradient: a zero at step 1 that turns nonzero at step 2 is a zero-initialized
weight, not a dead one (issue 27's "Red means broken").
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable

import torch

from fxflow.verdicts import DynamicVerdict, StaticVerdict
from gradtruth import Untouched, first_learning_steps, has_labels, plain_loss

STEPS = 3  # optimizer steps a parameter is given to start learning (a zero-initialized factor needs 2)
HELD_STEPS = 5  # to check a `held`: fxflow's look-ahead names learning steps up to 4


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
    # held (issue 27): zero at step 1, learns once a zero-initialized weight moves; disagreements checks
    # it against first_learning_step
    # intermittent: dry on this draw, reached on another draw of the model's own random numbers
    # (router jitter, layer drop, dropout); disagreements checks it against reached_on_other_draws
    Truth.ZERO: {DynamicVerdict.ZERO, DynamicVerdict.HELD, DynamicVerdict.INTERMITTENT},
    Truth.NONE: {DynamicVerdict.MISSING, DynamicVerdict.INTERMITTENT},
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


def _backward(model: torch.nn.Module, inputs: Any, seed: int) -> None:
    """One plain forward and ``loss.backward()`` (tests/gradtruth.py's loss, not fxflow's), ``.grad`` cleared first."""
    for parameter in model.parameters():
        parameter.grad = None
    seed_everything(seed)
    with torch.enable_grad():
        loss = plain_loss(call(model, inputs), labels_given=has_labels(inputs))
        if loss is not None and loss.requires_grad:
            loss.backward()


# docs/verdicts.md, "A gradient at rounding level is zero": under SUSPECT of the largest gradient's RMS,
# and falling by more than COLLAPSE relative to the largest when the same step runs in float64
ROUNDING_SUSPECT, ROUNDING_COLLAPSE = 1e-5, 1e-3


def real_gradients(model: torch.nn.Module, inputs: Any, seed: int = 0) -> dict[str, Truth]:
    """{parameter name: what a plain forward/backward left in its ``.grad``}, a gradient at rounding level
    counted as zero (the same step on a float64 copy, as docs/verdicts.md says); the model is left as found."""
    with Untouched(model):
        _backward(model, inputs, seed)
        truth = {name: _truth(p.grad) for name, p in model.named_parameters()}
        truth.update({name: Truth.ZERO for name in _round_off(model, inputs, list(truth), seed)})
        return truth


def _round_off(model: torch.nn.Module, inputs: Any, names: list[str], seed: int = 0) -> set[str]:
    """Which of ``names``' gradients, now in ``.grad``, are at rounding level (docs/verdicts.md's rule)."""
    relative = _relative({name: p.grad for name, p in model.named_parameters()})
    small = [name for name in names if 0 < relative.get(name, 0.0) < ROUNDING_SUSPECT]
    if not small or not any(p.dtype == torch.float32 for p in model.parameters()):
        return set()
    grads = {name: p.grad for name, p in model.named_parameters()}
    try:
        wide = _relative(_float64_gradients(model, inputs, seed))
    except Exception:  # noqa: BLE001 - code that cannot run in float64 (a dtype written into forward): as measured
        return set()
    finally:
        for name, parameter in model.named_parameters():  # the float64 step ran on a copy: these stay the model's
            parameter.grad = grads[name]
    return {name for name in small if wide.get(name, 0.0) < ROUNDING_COLLAPSE * relative[name]}


def _relative(grads: dict[str, torch.Tensor | None]) -> dict[str, float]:
    rms = {name: float(g.double().pow(2).mean().sqrt()) if g is not None and g.numel() else 0.0
           for name, g in grads.items()}
    largest = max(rms.values(), default=0.0)
    return {name: value / largest if largest else 0.0 for name, value in rms.items()}


def _float64_gradients(model: torch.nn.Module, inputs: Any, seed: int) -> dict[str, torch.Tensor | None]:
    """The same plain step on a float64 copy of ``model`` and its floating inputs."""
    import copy

    wide = copy.deepcopy(model).double()

    def widened(value: Any) -> Any:
        return value.double() if isinstance(value, torch.Tensor) and value.is_floating_point() else value

    wide_inputs = {key: widened(v) for key, v in inputs.items()} if isinstance(inputs, dict) else \
        tuple(widened(v) for v in inputs)
    _backward(wide, wide_inputs, seed)
    return {name: p.grad for name, p in wide.named_parameters()}


def seed_dependent(model: torch.nn.Module, inputs: Any, seeds: tuple[int, ...] = (0, 1, 2)) -> list[str]:
    """The parameters whose truth changes with the seed of the model's own randomness (layer drop,
    stochastic depth dropping a whole block, detection's proposal sampling): same inputs, same weights."""
    runs = [real_gradients(model, inputs, seed) for seed in seeds]
    return sorted(name for name in runs[0] if len({run[name] for run in runs}) > 1)


OTHER_DRAWS = 64  # seeds the truth tries for an intermittent parameter (fxflow draws as long as it needs)


def reached_on_other_draws(model: torch.nn.Module, inputs: Any, names: frozenset[str],
                           seeds: range = range(1, OTHER_DRAWS + 1)) -> set[str]:
    """Which of ``names`` a plain step (same inputs, same weights) gives a nonzero gradient, above
    rounding level, when the generators it draws from are seeded with one of ``seeds``; stops once all
    are reached. The model is left as found."""
    reached: set[str] = set()
    with Untouched(model):
        named = dict(model.named_parameters())
        for seed in seeds:
            _backward(model, inputs, seed)
            new = [name for name in names - reached if _truth(named[name].grad) is Truth.NONZERO]
            reached.update(set(new) - _round_off(model, inputs, new, seed))
            if reached >= names:
                break
    return reached


def first_learning_step(model: torch.nn.Module, inputs: Any, steps: int = STEPS) -> dict[str, int | None]:
    """{parameter name: the first of ``steps`` real Adam steps whose backward gives it a nonzero
    gradient (1: the one backward the check runs), None: none of them}; the model trains, then
    everything is put back. This tells a weight that merely starts at zero (a residual branch's
    last BatchNorm, LoRA's B factor) from one that never learns."""
    with Untouched(model):
        named = dict(model.named_parameters())

        def learned(names: list[str]) -> set[str]:
            nonzero = [name for name in names if _truth(named[name].grad) is Truth.NONZERO]
            return set(nonzero) - _round_off(model, inputs, nonzero)
        first = first_learning_steps(model, lambda: _backward(model, inputs, seed=0), steps, lr=1e-2, learned=learned)
        return {name: first.get(name) for name in named}


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


def disagreements(report: Any, truth: dict[str, Truth],
                  learning: Callable[[], dict[str, int | None]] | None = None,
                  draws: Callable[[frozenset[str]], set[str]] | None = None) -> list[Disagreement]:
    """Every parameter of ``report`` whose static or dynamic verdict contradicts ``truth``; a ``held``
    one also when ``learning()`` (real optimizer steps: :func:`first_learning_step`, asked only when
    some parameter is held) does not first give it a gradient on its ``learns_from_step``; an
    ``intermittent`` one also when ``draws(names)`` (:func:`reached_on_other_draws`, asked only when
    some is intermittent) does not reach it. Without ``learning`` or ``draws`` the verdict cannot be
    checked, and is a disagreement."""
    verdicts = {p.name: p for p in report.parameters}
    assert set(verdicts) == set(truth), sorted(set(verdicts) ^ set(truth))
    found = []
    intermittent = frozenset(name for name, p in verdicts.items()
                             if p.dynamic == DynamicVerdict.INTERMITTENT and truth[name] is not Truth.NONZERO)
    reached = (draws(intermittent) if draws is not None else set()) if intermittent else set()
    for name, real in truth.items():
        parameter = verdicts[name]
        held_wrong = parameter.dynamic == DynamicVerdict.HELD and (
            learning is None or learning().get(name) != parameter.learns_from_step)
        held_wrong |= name in intermittent and name not in reached
        if parameter.static not in ALLOWED_STATIC[real] or parameter.dynamic not in ALLOWED_DYNAMIC[real] or held_wrong:
            found.append(Disagreement(name, real, str(parameter.static),
                                      None if parameter.dynamic is None else str(parameter.dynamic),
                                      tuple(site.op for site in parameter.cut_by)))
    return found
