"""One classification of exact zeros, whatever saw the later steps.

A parameter whose first gradient is exactly zero is ``held`` (not a problem) when a later step gives
it a non-zero gradient: the look-ahead of ``fxflow.check`` (:mod:`fxflow.dynamic.lookahead`), or the
real steps of ``watch(steps=N)`` and the trainer callbacks. When no later step was seen (a one-step
``watch``), the zero is ``unconfirmed``: neither ok nor a problem. When later steps were seen and it
stayed zero, it keeps ``zero``, with the reason it cannot recover.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..diagnose.localize import passes_nothing_back
from ..verdicts import LABEL_LOSSES, CutSite, DynamicVerdict as Dynamic, StaticVerdict as Static, ZeroReason, agreement

if TYPE_CHECKING:  # pragma: no cover
    from ..report import ParameterReport


def classify_zeros(parameters: "Iterable[ParameterReport]", learns_from: dict[str, int] | None,
                   held_by: dict[str, list[str]], steps_seen: int, sites: "dict[str, CutSite] | None" = None,
                   exhausted: bool = False, rounding: dict[str, int] | None = None,
                   fed_by: dict[str, list[str]] | None = None) -> None:
    """Give each exactly-zero parameter its verdict: ``held`` (learns from ``learns_from[name]``),
    ``zero`` (still zero after ``steps_seen`` steps), or ``unconfirmed`` (``learns_from`` is None: no
    later step was seen; ``exhausted``: the steps stopped at their limit while still reviving others).
    ``held_by``: the all-zero weights that zeroed each one, when known; ``sites``: where each zero was
    made (:mod:`fxflow.diagnose.localize`), when located; ``rounding``: the parameters whose gradient
    was round-off (zero up to rounding), by the step it was seen on; ``fed_by``: for a zero a dead unit
    made, the weights computing its input that got a gradient (they move, so it may revive later)."""
    rounding = rounding or {}
    parameters = list(parameters)
    chosen = [p for p in parameters if p.static in (Static.REACHABLE, Static.UNKNOWN)
              and (p.dynamic == Dynamic.ZERO or (learns_from is not None and p.name in learns_from))]
    # the holders that stay zero too: the zeros no step lifted, and frozen weights (no step moves them)
    still_zero = {p.name for p in chosen if learns_from is None or p.name not in learns_from}
    still_zero |= {p.name for p in parameters if p.static == Static.FROZEN}
    for parameter in chosen:
        verdict, code = zero_verdict(parameter.name, learns_from, steps_seen, exhausted, parameter.name in rounding)
        holders = held_by.get(parameter.name, [])
        parameter.dynamic = verdict
        parameter.agree = agreement(parameter.static, verdict)
        if code == ZeroReason.HELD:
            parameter.learns_from_step = learns_from[parameter.name]
            parameter.held_by = list(holders)
            parameter.finding, parameter.reasons = None, [code]  # the hold explains the zero whole
            continue
        parameter.later_steps = max(steps_seen - 1, 0)
        rounded = parameter.name in rounding
        # what was told of the first step comes first; a zero's code from an earlier call gives way
        told = [] if rounded else [code for code in parameter.reasons if code not in _ZERO_CODES]
        if rounded:  # round-off: what the gradient was replaces where it was made
            parameter.finding = None
        if code in (ZeroReason.ROUNDING, ZeroReason.STAYS_ZERO, ZeroReason.NO_STEP_MOVES):
            site = (sites or {}).get(parameter.name)
            # it stays zero: what holds it for good is the all-zero weights that stayed zero too, a
            # frozen one included; one that got a gradient and moved holds nothing
            parameter.held_by = [h for h in holders if h in still_zero]
            feeders = (fed_by or {}).get(parameter.name, [])
            code = _what_holds_it(parameter.held_by, site, feeders, steps_seen)
            parameter.fed_by = list(feeders) if code == ZeroReason.DEAD_INPUT_MOVES else []
        elif code == ZeroReason.ONE_STEP:
            parameter.held_by = list(holders)  # what may hold it: one step cannot tell
        parameter.reasons = told + ([ZeroReason.ROUNDING] if rounded else []) + [code]


_ZERO_CODES = frozenset(ZeroReason)


def _what_holds_it(holders: list[str], site: "CutSite | None", feeders: list[str], steps_seen: int) -> ZeroReason:
    """The code of a zero the later steps did not lift: no holder and a loss given labels is the batch's
    labels; no holder and a unit that passes nothing back is a dead unit (one whose input weights that
    learn compute, ``feeders``, may come back); else it stays zero."""
    if not holders and site is not None and site.op in LABEL_LOSSES:
        return ZeroReason.LABELS
    if not holders and site is not None and passes_nothing_back(site.op):
        return ZeroReason.DEAD_INPUT_MOVES if feeders else ZeroReason.DEAD_UNIT
    return ZeroReason.STAYS_ZERO if steps_seen > 1 else ZeroReason.NO_STEP_MOVES


def zero_verdict(name: str, learns_from: dict[str, int] | None, steps_seen: int,
                 exhausted: bool = False, rounded: bool = False) -> tuple[Dynamic, ZeroReason]:
    """The verdict of a first-step exact zero and the code of what was observed (words:
    :mod:`fxflow.present.reasons`);
    ``rounded``: its gradient was round-off on some step."""
    if learns_from is None:
        return Dynamic.UNCONFIRMED, ZeroReason.ONE_STEP
    if name in learns_from:
        return Dynamic.HELD, ZeroReason.HELD
    if exhausted:
        return Dynamic.UNCONFIRMED, ZeroReason.STILL_REVIVING
    if rounded:
        return Dynamic.ZERO, ZeroReason.ROUNDING
    return Dynamic.ZERO, (ZeroReason.NO_STEP_MOVES if steps_seen <= 1 else ZeroReason.STAYS_ZERO)


