"""A gradient at rounding level is zero: tell round-off from a small real gradient.

A derivative that is zero in exact arithmetic (a softmax over one key, top-1 routing renormalised as
``p / p``, a LayerNorm over a single feature) comes out in float32 at 1e-8 to 1e-10 of the other
gradients, not at 0. A real gradient that a deep stack made small is as small. They differ in how
they scale with the precision: round-off is a fixed number of units in the last place, so in
float64 it falls by about nine orders of magnitude, while a real gradient stays where it was.

The test (docs/verdicts.md): a gradient whose RMS is under :data:`SUSPECT` of the largest
parameter gradient's RMS is a suspect; a float64 copy of the model, with the same weights, buffers,
inputs and random draws, runs the same forward and backward; a suspect whose relative size there
is under :data:`COLLAPSE` times its relative size in the checked precision (or exactly 0) is
round-off, and counts as exactly zero. Only suspects pay for the copy: a model with none runs nothing here.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable, Collection, Sequence

import torch
from torch.utils._pytree import tree_map

from .gradients import GradInfo

if TYPE_CHECKING:  # pragma: no cover
    from .probe import ProbeResult

SUSPECT = 1e-5  # a gradient under this fraction of the largest (RMS) is rechecked in float64
COLLAPSE = 1e-3  # in float64 it falls by at least this factor more: round-off
# The float64 copy of a model with more parameter and buffer values than this is not made (2 GiB in
# float64): its small gradients stay as measured, and a note says so.
COPY_LIMIT_VALUES = 2**28

Relative = dict[str, float]  # parameter -> its gradient's RMS over the largest parameter gradient's RMS


def relative_sizes(grads: dict[str, GradInfo]) -> Relative:
    """Each parameter's gradient RMS over the largest one's (0.0: none, exactly zero or not finite)."""
    sizes = {name: info.rms if info.present and info.finite and info.rms is not None and not info.all_zero else 0.0
             for name, info in grads.items()}
    largest = max(sizes.values(), default=0.0)
    return {name: size / largest if largest > 0 else 0.0 for name, size in sizes.items()}


def suspects(relative: Relative, among: Collection[str] | None = None) -> list[str]:
    """The gradients small enough to be round-off (non-zero, under :data:`SUSPECT` of the largest)."""
    return sorted(name for name, size in relative.items()
                  if 0.0 < size < SUSPECT and (among is None or name in among))


# Runs forward and backward of a model on inputs: the gradients' GradInfo, None where it raised.
RunOn = Callable[[torch.nn.Module, Sequence[Any]], "dict[str, GradInfo] | None"]


class RoundingCheck:
    """Which suspects are round-off: the same step again on a float64 copy of the model as it is now."""

    def __init__(self, model: torch.nn.Module, inputs: Sequence[Any], run_on: RunOn) -> None:
        self.model = model
        self.inputs = inputs
        self.run_on = run_on
        self.note: str | None = None  # why no recheck could run, when it could not

    def __call__(self, relative: Relative, names: Collection[str]) -> set[str]:
        """The ``names`` (suspects, sized by ``relative`` in the checked precision) that are round-off."""
        names = [name for name in names if relative.get(name, 0.0) > 0.0]
        if not names:
            return set()
        if all(p.dtype in (torch.float64, torch.complex128) for p in self.model.parameters() if p.is_floating_point()):
            return set()  # already float64: nothing more precise to compare with
        values = sum(t.numel() for t in (*self.model.parameters(), *self.model.buffers()))
        if values > COPY_LIMIT_VALUES:
            self.note = (f"no float64 recheck of round-off: the model's {values:,} values are over the copy limit; "
                         f"{len(names)} small gradient{'s' if len(names) != 1 else ''} kept as measured")
            return set()
        try:
            wide = copy.deepcopy(self.model)
            for parameter in wide.parameters():
                parameter.grad = None
            wide.to(torch.float64)
            grads = self.run_on(wide, tree_map(_to_float64, tuple(self.inputs)))
        except Exception as error:  # the model cannot run in float64 (a hard-coded dtype): it stays as measured
            grads, self.note = None, f"no float64 recheck of round-off: {type(error).__name__}"
        if grads is None:
            self.note = self.note or "no float64 recheck of round-off: the float64 run raised"
            return set()
        if any(info.present and not info.finite for info in grads.values()):
            # inf or NaN in float64 where the checked run was finite (a float32 constant such as finfo.min
            # written into forward): the runs are not the same computation, so nothing is learnt from it
            self.note = "no float64 recheck of round-off: the float64 run gave inf or NaN gradients"
            return set()
        wide_relative = relative_sizes(grads)
        return {name for name in names if wide_relative.get(name, 0.0) < COLLAPSE * relative[name]}


def _to_float64(value: Any) -> Any:
    return value.to(torch.float64) if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def round_off_to_zero(result: "ProbeResult", check: RoundingCheck) -> list[str]:
    """The first step's gradients that are round-off, set to exactly zero in ``result``; their names."""
    relative = relative_sizes(result.grads)
    rounded = sorted(check(relative, suspects(relative)))
    for name in rounded:
        result.grads[name] = GradInfo(present=True, norm=0.0, rms=0.0, finite=True, all_zero=True)
    if check.note:
        result.notes.append(check.note)
    return rounded
