"""Which verdicts the model's own randomness decides: a dry parameter that another draw reaches.

Layer drop, stochastic depth that drops a whole block, dropout in front of a gate, a detector's
random proposal sampling: the forward draws random numbers, and what it drew decides which
parameters the gradient reaches. Such a parameter is dry on this draw and learns on others, so it
is not a parameter that never learns.

:func:`redraw` runs forward and backward again with other draws (torch's, Python's and NumPy's
generators seeded with ``seed + 1``, ``seed + 2``...), only when the first run left trainable
parameters dry and its forward moved a random generator, and tells which dry parameters got a
non-zero gradient on which draw. A forward that draws nothing costs nothing here.

The model draws from the global generators, so the redraw has to set them (a process-wide effect,
listed in docs/how-it-works.md): only the default ones, directly, and all of them are put back.

How many draws follows from the random choices the forward makes (:class:`RandomChoices`): a draw of
one of ``n`` outcomes (``torch.randint``, ``randperm``, ``multinomial``; Python's ``random.choice``,
``randrange``, ``randint``, ``sample``) is redrawn until every outcome was picked once, within the
draws that show all ``n`` with high probability, so a branch no draw reached is one none picked.
"""
from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..core.guard import Saved, guard
from .choices import CHOICE_DRAWS_LIMIT, RandomChoices, draws_to_see_all  # noqa: F401 - named here before

DRAWS = 4  # other draws at most: a block dropped half the time is missed 1 time in 16, one dropped 1 in 10 never

Rerun = Callable[[], "dict[str, bool] | None"]  # forward + backward again: which parameters got a non-zero gradient


def drew_random_numbers(saved_before: Saved, saved_after: Saved) -> bool:
    """Whether anything between two saves of the generators advanced one of them."""
    before, after = saved_before.random, saved_after.random
    if not torch.equal(before.torch_cpu, after.torch_cpu) or before.python != after.python:
        return True
    if before.torch_cuda is not None and after.torch_cuda is not None:
        if any(not torch.equal(a, b) for a, b in zip(before.torch_cuda, after.torch_cuda)):
            return True
    if before.numpy is not None and after.numpy is not None:
        return any(not _same(a, b) for a, b in zip(before.numpy, after.numpy))
    return False


def _same(a: object, b: object) -> bool:
    equal = a == b
    return bool(equal.all()) if hasattr(equal, "all") else bool(equal)


def redraw(dry: list[str], rerun: Rerun, seed: int, draws: int = DRAWS) -> dict[str, int]:
    """``{name: seed}`` for each of ``dry`` that got a non-zero gradient when the generators were seeded
    with ``seed`` (one of ``seed + 1 .. seed + draws``). The generators are put back afterwards."""
    found: dict[str, int] = {}
    with guard():  # the global generators
        for offset in range(1, draws + 1):
            _seed_everything(seed + offset)
            alive = rerun()
            if alive is None:  # this draw's forward or backward raised: no answer from it
                continue
            for name in dry:
                if name not in found and alive.get(name):
                    found[name] = seed + offset
            if len(found) == len(dry):
                break
    return found


REDRAW_LIMIT = 64  # draws at most, while recent draws still reach parameters that earlier ones did not


@dataclass
class Redrawn:
    """What other draws showed: the dry parameters one reached (``found``: the draw's seed), ``op @
    file:line`` of the calls that drew (``draws``), the dry parameters no draw reached (``undecided``) in
    the ``drawn`` draws made, and the random choices that still had outcomes no draw picked when the draws
    ended (``unpicked``, :meth:`RandomChoices.unpicked`): what those outcomes do was not seen."""

    found: dict[str, int] = field(default_factory=dict)
    draws: list[str] = field(default_factory=list)
    unpicked: list[dict[str, Any]] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)
    drawn: int = 0
    next_seed: int | None = None  # the seed of a check whose other draws use none of these seeds


def redraw_choices(dry: list[str], rerun: Rerun, seed: int, choices: RandomChoices) -> Redrawn:
    """:func:`redraw` in rounds of :data:`DRAWS`: while a recorded choice (one of n outcomes) has an outcome
    no draw picked, within the draws that show all n (at most :data:`CHOICE_DRAWS_LIMIT`); then, for what
    is not a choice (dropout, a draw compared with a threshold), for as long as three times the draws it
    took to reach the last parameter reached (at most :data:`REDRAW_LIMIT`): a dead parameter beside a
    dropout costs one round. ``choices`` watches ``rerun``'s forwards."""
    found: dict[str, int] = {}
    drawn = 0
    while len(found) < len(dry):
        found.update(redraw([name for name in dry if name not in found], rerun, seed + drawn))
        drawn += DRAWS
        if choices.open(drawn):
            continue
        if drawn >= REDRAW_LIMIT or drawn >= max(DRAWS, 3 * (max(found.values(), default=seed) - seed)):
            break
    undecided = [name for name in dry if name not in found]
    return Redrawn(found, unpicked=choices.unpicked(drawn) if undecided else [], undecided=undecided, drawn=drawn,
                   next_seed=seed + drawn + 1)


def _seed_everything(seed: int) -> None:
    """Give the generators the model draws from fresh states for ``seed`` (put back by :func:`redraw`).

    The model's own draws come from the global generators, so their states must change; nothing
    else does. ``torch.manual_seed`` is not used: before CUDA starts it queues a CUDA seed, which
    would replace one the user queued (``torch.manual_seed`` before the first CUDA call) and which no
    save of the generators can read back. Each started CUDA device's generator is seeded directly.
    """
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():  # a model on CUDA started it; otherwise nothing draws there
        for generator in torch.cuda.default_generators:
            generator.manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % 2**32)
