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
from ..verdicts import CutSite, DynamicVerdict as Dynamic, StaticVerdict as Static, ZeroReason, agreement

if TYPE_CHECKING:  # pragma: no cover
    from ..report import ParameterReport


def classify_zeros(parameters: "Iterable[ParameterReport]", learns_from: dict[str, int] | None,
                   held_by: dict[str, list[str]], steps_seen: int, sites: "dict[str, CutSite] | None" = None,
                   exhausted: bool = False, rounding: dict[str, int] | None = None) -> None:
    """Give each exactly-zero parameter its verdict: ``held`` (learns from ``learns_from[name]``),
    ``zero`` (still zero after ``steps_seen`` steps), or ``unconfirmed`` (``learns_from`` is None: no
    later step was seen; ``exhausted``: the steps stopped at their limit while still reviving others).
    ``held_by``: the all-zero weights that zeroed each one, when known; ``sites``: where each zero was
    made (:mod:`fxflow.diagnose.localize`), when located; ``rounding``: the parameters whose gradient
    was round-off (zero up to rounding), by the step it was seen on."""
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
            parameter.diagnosis = held_reason(holders, parameter.learns_from_step)
            continue
        found = _ROUNDED if parameter.name in rounding else parameter.diagnosis
        if code == ZeroReason.ONE_STEP:
            parameter.diagnosis = _unconfirmed(found, holders)
        elif code == ZeroReason.STILL_REVIVING:
            parameter.diagnosis = _still_reviving(found, steps_seen)
        else:
            site = (sites or {}).get(parameter.name)
            parameter.held_by = list(holders)  # it stays zero: what holds it, a frozen all-zero weight included
            dead = site is not None and passes_nothing_back(site.op)
            parameter.diagnosis = _stays_zero(found, [h for h in holders if h in still_zero], steps_seen, dead)


def zero_verdict(name: str, learns_from: dict[str, int] | None, steps_seen: int,
                 exhausted: bool = False, rounded: bool = False) -> tuple[Dynamic, ZeroReason]:
    """The verdict of a first-step exact zero and the code of what was observed (words: the callers');
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


_ROUNDED = ("zero up to rounding: its gradient is round-off, tiny next to the largest and collapsing by orders "
            "of magnitude when the same step runs in float64, so it is zero in exact arithmetic")


def _still_reviving(found: str | None, steps_seen: int) -> str:
    head = f"{found}. " if found else ""
    return head + (f"still exactly 0 after the look-ahead's {steps_seen - 1} steps, while its last step was still "
                   "reviving other zero-initialized weights: a longer chain may hold it; not verified")


def held_reason(holders: list[str], step: int) -> str:
    """Why an exactly zero first gradient is no problem."""
    if holders:
        who = _listed(holders)
        return (f"exactly 0 on the first step{'s' if step > 2 else ''} because {who} (all zeros at init) "
                f"hold{'s' if len(holders) == 1 else ''} it; {'it gets' if len(holders) == 1 else 'they get'} a "
                f"gradient, so it learns from step {step}")
    return (f"exactly 0 on the first step{'s' if step > 2 else ''}, as behind a zero-initialized weight; "
            f"non-zero once the optimizer has moved that weight, so it learns from step {step}")


def _unconfirmed(found: str | None, holders: list[str]) -> str:
    head = f"{found}. " if found else ""
    if holders:
        return (head + f"{_listed(holders)} (all zeros now) may hold it until the first optimizer step moves "
                "them; one watched step cannot tell: watch two steps (watch(steps=2)) or run fxflow.check")
    return (head + "exactly 0 on the one step watched: a zero-initialized weight downstream may hold it until the "
            "first optimizer step, or it may never learn; watch two steps (watch(steps=2)) or run fxflow.check")


def _stays_zero(found: str | None, holders: list[str], steps_seen: int, dead: bool = False) -> str:
    head = f"{found}. " if found else ""
    later = f"still exactly 0 after {steps_seen - 1} step{'s' if steps_seen > 2 else ''} that moved every weight with a gradient"
    if steps_seen <= 1:
        later = "no weight with a gradient could move what zeroes it"
    if holders:  # only the holders that stayed zero too: one that got a gradient and moved holds nothing
        return head + f"{later}: {_listed(holders)} get{'s' if len(holders) == 1 else ''} no gradient either, so it never learns"
    if dead:
        return head + (f"{later}: a dead unit, and the weights that feed it get exactly 0 too, so no step "
                       "revives it and it never learns")
    return head + f"{later}: the zero comes from something no optimizer step changes, so it never learns"


def _listed(names: list[str], keep: int = 3) -> str:
    shown = ", ".join(names[:keep])
    return shown + (f" and {len(names) - keep} more" if len(names) > keep else "")
