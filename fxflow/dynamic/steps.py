"""Beyond the first step: in how many of N steps each parameter received a non-zero gradient.

One step can miss what training does: a router that picks an expert only for some batches, a
branch taken only for long sequences, a loss term switched on at step 3. DDP fails on the first
step in which a trainable parameter gets no gradient, unless ``find_unused_parameters=True``.
:class:`StepTally` counts, per parameter, the steps with a non-zero gradient; :func:`apply_steps`
turns the counts into verdicts:

* received one on every step: the first step's verdicts stand;
* on none: the parameter fails as on one step (``missing`` or ``zero``, for the first step's reason);
* on some: ``intermittent``, a finding that does not fail the check, naming the steps it missed
  (and, when the first step reached it, what cut it on the first step that missed it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from ..verdicts import CutSite, DynamicVerdict as Dynamic, StaticVerdict as Static, agreement

if TYPE_CHECKING:  # pragma: no cover
    from .gradients import GradInfo
    from ..report import ParameterReport


@dataclass
class StepTally:
    """Per parameter, the (1-based) steps in which it received a non-zero gradient."""

    steps: int = 0
    received: dict[str, list[int]] = field(default_factory=dict)
    # Per parameter, the steps in which it received a gradient at all (zero or not): what DDP cares about.
    present: dict[str, list[int]] = field(default_factory=dict)
    # Why a parameter that the first step reached got nothing on a later one: the cut sites of that step.
    later_cuts: dict[str, list[CutSite]] = field(default_factory=dict)

    def add(self, grads: "dict[str, GradInfo]") -> None:
        """One more step's gradients."""
        self.steps += 1
        for name, info in grads.items():
            self.received.setdefault(name, [])
            self.present.setdefault(name, [])
            if info.present:
                self.present[name].append(self.steps)
            if info.present and info.finite and not info.all_zero:
                self.received[name].append(self.steps)

    def learns_from(self, name: str) -> int | None:
        """The step from which a parameter present on every step got a non-zero gradient on every step,
        when that is not the first: a zero-initialized weight held it until the optimizer moved it."""
        received, present = self.received.get(name, []), self.present.get(name, [])
        if len(present) < self.steps or not received or received[0] == 1:
            return None
        return received[0] if received == list(range(received[0], self.steps + 1)) else None

    def without_gradient(self, name: str) -> list[int]:
        """The steps in which a parameter got no gradient at all (None): DDP's unused parameters."""
        got = set(self.present.get(name, []))
        return [step for step in range(1, self.steps + 1) if step not in got]

    def with_gradient(self, name: str) -> int:
        return len(self.received.get(name, []))

    def missed(self, name: str) -> list[int]:
        got = set(self.received.get(name, []))
        return [step for step in range(1, self.steps + 1) if step not in got]


def apply_steps(parameters: "Iterable[ParameterReport]", tally: StepTally) -> None:
    """Give each parameter its count of steps with a gradient, and make the verdicts of many steps."""
    for parameter in parameters:
        if parameter.static in (Static.FROZEN, Static.UNREGISTERED):
            continue
        count = tally.with_gradient(parameter.name)
        parameter.steps_with_gradient = count
        if parameter.dynamic == Dynamic.HELD or count == 0 or count == tally.steps:
            continue
        missed = tally.missed(parameter.name)
        parameter.missed_steps = missed
        parameter.dynamic = Dynamic.INTERMITTENT
        parameter.agree = agreement(parameter.static, parameter.dynamic)  # one step's graph, many steps' gradients
        if not parameter.cut_by and parameter.name in tally.later_cuts:
            parameter.cut_by = list(tally.later_cuts[parameter.name])
        parameter.diagnosis = intermittent_reason(parameter, count, tally.steps,
                                                  ddp=bool(tally.without_gradient(parameter.name)))


def intermittent_reason(parameter: "ParameterReport", count: int, steps: int, ddp: bool = True) -> str:
    """Which steps it missed, and what cut it there when that is known; ``ddp``: on some steps the
    gradient was None, not zero, which DDP needs to be told about."""
    missed = parameter.missed_steps
    shown = ", ".join(str(step) for step in missed[:8]) + (" ..." if len(missed) > 8 else "")
    reason = f"a gradient on {count} of {steps} steps; none on step{'s' if len(missed) != 1 else ''} {shown}"
    if parameter.cut_by:
        site = parameter.cut_by[0]
        reason += f", where {site.op} @ {site.source or site.node} cut it ({site.reason})"
    return reason + (": under DDP this needs find_unused_parameters=True" if ddp else "")
