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
from ..verdicts import CutSite, DynamicVerdict as Dynamic, StaticVerdict as Static

if TYPE_CHECKING:  # pragma: no cover
    from ..report import ParameterReport


def classify_zeros(parameters: "Iterable[ParameterReport]", learns_from: dict[str, int] | None,
                   held_by: dict[str, list[str]], steps_seen: int, sites: "dict[str, CutSite] | None" = None) -> None:
    """Give each exactly-zero parameter its verdict: ``held`` (learns from ``learns_from[name]``),
    ``zero`` (still zero after ``steps_seen`` steps), or ``unconfirmed`` (``learns_from`` is None:
    no later step was seen). ``held_by``: the all-zero weights that zeroed each one, when known;
    ``sites``: where each zero was made (:mod:`fxflow.diagnose.localize`), when located."""
    for parameter in parameters:
        later = learns_from is not None and parameter.name in learns_from  # also when the last step's grad is fine
        if parameter.static not in (Static.REACHABLE, Static.UNKNOWN) or not (parameter.dynamic == Dynamic.ZERO or later):
            continue
        holders = held_by.get(parameter.name, [])
        if learns_from is None:
            parameter.dynamic = Dynamic.UNCONFIRMED
            parameter.diagnosis = _unconfirmed(parameter.diagnosis, holders)
        elif parameter.name in learns_from:
            parameter.dynamic = Dynamic.HELD
            parameter.learns_from_step = learns_from[parameter.name]
            parameter.held_by = list(holders)
            parameter.diagnosis = held_reason(holders, parameter.learns_from_step)
            parameter.agree = True
        else:
            site = (sites or {}).get(parameter.name)
            parameter.held_by = list(holders)  # it stays zero: what holds it, a frozen all-zero weight included
            dead = site is not None and passes_nothing_back(site.op)
            parameter.diagnosis = _stays_zero(parameter.diagnosis, holders, steps_seen, dead)


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
    if holders:
        return head + f"{later}: {_listed(holders)} get{'s' if len(holders) == 1 else ''} no gradient either, so it never learns"
    if dead:
        return head + (f"{later}: a dead unit, and the weights that feed it get exactly 0 too, so no step "
                       "revives it and it never learns")
    return head + f"{later}: the zero comes from something no optimizer step changes, so it never learns"


def _listed(names: list[str], keep: int = 3) -> str:
    shown = ", ".join(names[:keep])
    return shown + (f" and {len(names) - keep} more" if len(names) > keep else "")
