"""Dry parameters that the model's own randomness decides: they learn on some steps.

A parameter with no gradient (or an exactly zero one) on the checked draw, that another draw of the
model's random numbers reaches (:mod:`fxflow.dynamic.redraw`), is a layer dropped this time, a gate
that dropout zeroed, a proposal not sampled: ``used on some steps only``, as an expert the router
skips on some batches, not a parameter that never learns.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..verdicts import DrawReason, DynamicVerdict as Dynamic, agreement

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
