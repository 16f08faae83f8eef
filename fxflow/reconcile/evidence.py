"""What was seen after the first backward, turned into verdicts in one place.

The first backward gives each parameter its dynamic verdict (:func:`fxflow.reconcile.parameter_reports`).
What came after it is :class:`Evidence`: the look-ahead's steps (``fxflow.check``), the real later
steps (``watch``, the trainer callbacks), other draws of the model's random numbers, and the counts
of many steps. :func:`settle` is the one function that turns it into each parameter's final dynamic
verdict, its reason (a :class:`~fxflow.verdicts.ZeroReason` for an exact zero) and its agreement, in a
fixed order: exact zeros first (held / zero / unconfirmed, :mod:`.zeros`), then other draws
(:mod:`.redrawn`: reached on another draw, or not verified where a random choice left outcomes
unpicked), then many steps (:func:`fxflow.dynamic.steps.apply_steps`); each later kind of
evidence speaks only where the earlier left a parameter dry.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from ..dynamic.steps import StepTally, apply_steps
from .redrawn import mark_redrawn, mark_undrawn
from .zeros import classify_zeros

if TYPE_CHECKING:  # pragma: no cover
    from ..dynamic.lookahead import LookAhead
    from ..dynamic.probe import ProbeResult
    from ..report import ParameterReport
    from ..verdicts import CutSite


@dataclass
class Evidence:
    """Everything seen after the first backward that can change a verdict."""

    look: "LookAhead | None" = None  # fxflow.check's look-ahead past exact zeros
    steps: StepTally | None = None  # the gradients of more steps than the first
    watched: bool = False  # the steps are the user's own (watch, trainers): no look-ahead could run
    measurable: bool = True  # the gradients have sizes (not a meta or fake run)
    held_by: dict[str, list[str]] = field(default_factory=dict)  # exact zero -> the all-zero weights behind it
    sites: "dict[str, CutSite]" = field(default_factory=dict)  # exact zero -> where it was made
    fed_by: dict[str, list[str]] = field(default_factory=dict)  # dead unit's zero -> learning weights feeding it
    redrawn: dict[str, int] = field(default_factory=dict)  # dry parameter -> the seed of a draw that reached it
    draws: list[str] = field(default_factory=list)  # ``op @ file:line`` of the calls that drew
    # the dry parameters no other draw reached, the draws made, and the random choices with outcomes no
    # draw picked (fxflow.dynamic.redraw.Redrawn)
    undecided: list[str] = field(default_factory=list)
    drawn: int = 0
    unpicked: list[dict[str, Any]] = field(default_factory=list)
    next_seed: int | None = None  # the seed whose other draws are none of those made

    @classmethod
    def of(cls, result: "ProbeResult | None", steps: StepTally | None, watched: bool) -> "Evidence":
        if result is None:
            return cls(steps=steps, watched=watched, measurable=False)
        redraws = result.redraws
        return cls(result.look_ahead, steps, watched, result.measurable, result.held_by, result.explanations,
                   result.fed_by, redraws.found, redraws.draws, redraws.undecided, redraws.drawn,
                   redraws.unpicked, redraws.next_seed)

    @property
    def counted(self) -> int:
        return self.steps.steps if self.steps is not None else 1


def settle(parameters: "Iterable[ParameterReport]", evidence: Evidence) -> list[str]:
    """Give each parameter the verdict the evidence shows; returns notes on the evidence itself."""
    parameters = list(parameters)
    notes = []
    look, steps, counted = evidence.look, evidence.steps, evidence.counted
    if look is not None:  # check: the look-ahead's steps tell designed zero-inits from dead units
        classify_zeros(parameters, look.learns_from, evidence.held_by, look.steps, evidence.sites,
                       exhausted=look.exhausted, rounding=look.rounding, fed_by=evidence.fed_by)
        if look.note:
            notes.append(look.note)
    elif steps is not None and evidence.watched and evidence.measurable:
        # the loop's own optimizer steps tell designed zero-inits from dead units where some were seen
        # (fxflow.dynamic.steps.watched_tally); a zero no update and later call settled stays unconfirmed
        classify_zeros([p for p in parameters if p.name not in steps.unconfirmed], steps.learned, evidence.held_by,
                       steps.updates_seen + 1)
        classify_zeros([p for p in parameters if p.name in steps.unconfirmed], None, evidence.held_by, 1)
    mark_redrawn(parameters, evidence.redrawn, evidence.draws)
    mark_undrawn(parameters, evidence.undecided, evidence.drawn, evidence.unpicked, evidence.next_seed)
    if steps is not None and counted > 1:
        apply_steps(parameters, steps)
    return notes
