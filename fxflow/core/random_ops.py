"""Which torch calls draw random numbers, and a part of the forward observer that notes where they ran.

The ops that draw random numbers are the ones torch itself tags ``nondeterministic_seeded``
(dropout, bernoulli, rand, randperm, multinomial...), looked up by the op's name, so no list of
names is kept here.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Callable

import torch

from .observer import ForwardPart
from .source import current_user_source

_DIMENSIONS = re.compile(r"[123]d$")  # Dropout2d -> dropout: the module's functional form


@functools.lru_cache(maxsize=1024)
def draws_random_numbers(op: str) -> bool:
    """Whether an op (``dropout``, ``Dropout2d``, ``bernoulli_``) is tagged ``nondeterministic_seeded``."""
    name = op.lower().strip("_")
    for candidate in dict.fromkeys((name, _DIMENSIONS.sub("", name))):
        packet = getattr(torch.ops.aten, candidate, None)
        if packet is None or not hasattr(packet, "overloads"):
            continue
        if any(torch.Tag.nondeterministic_seeded in getattr(packet, overload).tags for overload in packet.overloads()):
            return True
    return False


def target_draws_random_numbers(target: Any) -> bool:
    """Whether an fx node's target draws random numbers: a torch function (``torch.rand``), a method's name
    (``"bernoulli_"``) or an aten overload (``aten.rand.default``, whose own tags say)."""
    if isinstance(target, torch._ops.OpOverload):
        return torch.Tag.nondeterministic_seeded in target.tags
    name = target if isinstance(target, str) else getattr(target, "__name__", None)
    return isinstance(name, str) and draws_random_numbers(name)


class RandomDraws(ForwardPart):
    """Notes ``op @ file:line`` of each call in the forward that drew random numbers, in order."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def observe(self, func: Callable, args: tuple, kwargs: dict, result: Any) -> None:
        name = getattr(func, "__name__", "")
        if name and draws_random_numbers(name):
            label = f"{name} @ {current_user_source() or '?'}"
            if label not in self.found:
                self.found.append(label)
