"""Dry parameters that the model's own randomness decides: they learn on some steps, or, where a random
choice left outcomes no draw picked, it was not seen whether they do.

A parameter with no gradient (or an exactly zero one) on the checked draw, that another draw of the
model's random numbers reaches (:mod:`fxflow.dynamic.redraw`), is a layer dropped this time, a gate
that dropout zeroed, a proposal not sampled: ``used on some steps only``, as an expert the router
skips on some batches, not a parameter that never learns.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..verdicts import DrawReason, DynamicVerdict as Dynamic, StaticReason, agreement

_STATIC = frozenset(StaticReason)  # what the graph walk said of it: it stays, as its finding does

if TYPE_CHECKING:  # pragma: no cover
    from ..report import ParameterReport


def mark_redrawn(parameters: "Iterable[ParameterReport]", redrawn: dict[str, int], draws: list[str]) -> None:
    """Give each parameter another draw reached the verdict ``intermittent``, with the code of what was seen
    (words: :mod:`fxflow.present.reasons`) and its facts: the draw's ``seed``, what the first draw gave
    (``first``: ``missing`` or ``zero``), and what drew (``random_ops``; ``draws``: ``op @ file:line`` of the
    forward's random calls, where the parameter's path names none)."""
    for parameter in parameters:
        seed = redrawn.get(parameter.name)
        if seed is None:
            continue
        parameter.random_ops = parameter.random_ops or list(draws)
        first = Dynamic.MISSING if parameter.dynamic == Dynamic.MISSING else Dynamic.ZERO
        parameter.dynamic = Dynamic.INTERMITTENT
        parameter.agree = agreement(parameter.static, parameter.dynamic)
        parameter.finding, parameter.reasons = None, [DrawReason.OTHER_DRAW]
        parameter.facts.update(seed=seed, first=str(first))


def mark_undrawn(parameters: "Iterable[ParameterReport]", undecided: list[str], drawn: int, unpicked: list[dict],
                 next_seed: int | None = None) -> None:
    """What the ``drawn`` other draws showed of ``undecided``, the dry parameters none of them reached: a
    reason that spoke of randomness gets the count (``facts["redraws"]``: another seed may differ, yet
    these did not); where random choices had outcomes no draw picked (``unpicked``), the verdict is
    ``unconfirmed``: what those outcomes do to it was not seen, so it is neither a parameter that never
    learns nor one that learns on some steps. What the first draw's findings said of it stays; what the
    earlier codes concluded (it never learns, another seed may differ) gives way. ``next_seed``: the seed
    of a check whose other draws use none of these seeds."""
    names = set(undecided)
    for parameter in parameters:
        if parameter.name not in names or parameter.dynamic not in (Dynamic.MISSING, Dynamic.ZERO,
                                                                       Dynamic.UNCONFIRMED):
            continue
        if DrawReason.RANDOMNESS in parameter.reasons:
            parameter.facts["redraws"] = drawn
        if not unpicked:
            continue
        first = Dynamic.MISSING if parameter.dynamic == Dynamic.MISSING else Dynamic.ZERO
        parameter.dynamic = Dynamic.UNCONFIRMED
        parameter.agree = agreement(parameter.static, parameter.dynamic)
        parameter.reasons = [code for code in parameter.reasons if code in _STATIC] + [DrawReason.CHOICE_UNPICKED]
        parameter.facts.pop("redraws", None)
        parameter.facts.update(first=str(first), choices=[dict(choice) for choice in unpicked])
        if next_seed is not None:
            parameter.facts["next_seed"] = next_seed
