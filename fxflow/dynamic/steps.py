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

import math

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

from ..verdicts import CutSite, DynamicVerdict as Dynamic, StaticVerdict as Static, StepsReason, agreement

if TYPE_CHECKING:  # pragma: no cover
    from .backward_calls import BackwardCall
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
    # A watched loop's exact zeros (watch and the trainer callbacks; check's look-ahead has its own):
    # the optimizer step (1: the first judged call's) from which each came alive, the ones no
    # update was seen to settle, and the optimizer steps seen after the first judged call.
    zeros: set[str] = field(default_factory=set)  # exactly zero on the first judged call
    # No gradient on any judged call, then a non-zero one on a later call of the block: its call.
    reached_later: dict[str, int] = field(default_factory=dict)
    learned: dict[str, int] = field(default_factory=dict)
    unconfirmed: set[str] = field(default_factory=set)
    updates_seen: int = 0
    calls: list[int] = field(default_factory=list)  # the backward call each judged step is (1-based)

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

    def without_gradient(self, name: str) -> list[int]:
        """The steps in which a parameter got no gradient at all (None): DDP's unused parameters."""
        got = set(self.present.get(name, []))
        return [step for step in range(1, self.steps + 1) if step not in got]

    def with_gradient(self, name: str) -> int:
        return len(self.received.get(name, []))

    def missed(self, name: str) -> list[int]:
        got = set(self.received.get(name, []))
        return [step for step in range(1, self.steps + 1) if step not in got]


# What a backward call gave one parameter, ordered so that the most telling rank wins when combined.
UNSEEN, ABSENT, ZERO, NONZERO, NONFINITE = -1, 0, 1, 2, 3


def call_codes(calls: "Sequence[BackwardCall]", names: Iterable[str]) -> dict[str, list[int]]:
    """Per parameter, what each call gave it (``UNSEEN`` where a confirming call did not look)."""
    codes: dict[str, list[int]] = {}
    for name in names:
        row = codes[name] = []
        for call in calls:
            total = call.totals.get(name)
            if total is None:
                row.append(ABSENT if call.full or name in call.pending else UNSEEN)
            else:
                row.append(ZERO if total == 0.0 else NONZERO if math.isfinite(total) else NONFINITE)
    return codes


def watched_tally(calls: "Sequence[BackwardCall]", per_rank: Sequence[dict[str, list[int]]], steps: int) -> StepTally:
    """The tally of a watched loop: ``calls`` (every rank ran the same ones), ``per_rank`` their
    :func:`call_codes` on each rank, ``steps`` the calls to judge (skipped ones not counted).

    A gradient is received on a call when some rank got a non-zero one (DDP averages them), and
    present when every rank got one (DDP needs every rank's). An exact zero on the first judged
    call is ``learned`` from the optimizer step of the first later call that gave it a non-zero
    gradient; it stays ``unconfirmed`` when no update and later call were seen, or when the last
    optimizer step seen still brought parameters alive (more steps might bring it too)."""
    kept = [index for index, call in enumerate(calls) if not call.skipped] or list(range(len(calls)))
    judged = [index for index in kept if calls[index].full][:steps]
    tally = StepTally(steps=len(judged), calls=[calls[index].index for index in judged])
    if not judged:
        return tally
    first = calls[judged[0]]
    followed = [index for index in kept if index > judged[0]]
    tally.updates_seen = max((calls[index].update - first.update for index in followed), default=0)
    for name in per_rank[0]:
        best = [max(rank[name][index] for rank in per_rank) for index in range(len(calls))]
        everywhere = [min(rank[name][index] for rank in per_rank) for index in range(len(calls))]
        tally.received[name] = [step for step, index in enumerate(judged, 1) if best[index] == NONZERO]
        tally.present[name] = [step for step, index in enumerate(judged, 1) if everywhere[index] >= ZERO]
        if not tally.received[name] and best[judged[0]] == ABSENT:
            later = next((index for index in followed if index > judged[-1] and best[index] == NONZERO), None)
            if later is not None:
                tally.reached_later[name] = calls[later].index
        if best[judged[0]] != ZERO:
            continue
        tally.zeros.add(name)
        alive = next((index for index in followed if best[index] == NONZERO), None)
        if alive is not None:
            tally.learned[name] = calls[alive].update - first.update + 1
    still = {name for name in per_rank[0]
             if max(rank[name][judged[0]] for rank in per_rank) == ZERO and name not in tally.learned}
    reviving = bool(tally.learned) and max(tally.learned.values()) == tally.updates_seen + 1
    if tally.updates_seen == 0 or reviving:
        tally.unconfirmed = still
    return tally


def apply_reached_later(parameters: "Iterable[ParameterReport]", tally: StepTally) -> None:
    """A parameter no judged call reached, that a later call of the watched block did reach, learns on
    some steps: ``intermittent`` (a GAN's generator on the discriminator's backward call, an expert
    the first batch did not route to), naming the calls."""
    for parameter in parameters:
        call = tally.reached_later.get(parameter.name)
        if call is None or parameter.dynamic != Dynamic.MISSING:
            continue
        parameter.dynamic = Dynamic.INTERMITTENT
        parameter.missed_steps = list(range(1, tally.steps + 1))
        parameter.finding, parameter.reasons = None, [StepsReason.LATER_CALL]  # words: fxflow.present.reasons
        parameter.facts.update(calls=list(tally.calls), later_call=call)


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
        # words: fxflow.present.reasons; on some steps the gradient was None, not zero: DDP must be told
        none_on_some = bool(tally.without_gradient(parameter.name))
        parameter.finding = None
        parameter.reasons = [StepsReason.SOME_STEPS_NONE if none_on_some else StepsReason.SOME_STEPS]
