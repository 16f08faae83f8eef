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

import contextlib
import math
import random
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from ..core.guard import Saved, guard
from ..core.observer import ForwardPart
from ..core.random_ops import draws_random_numbers
from ..core.source import current_user_source

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


CHOICE_DRAWS_LIMIT = 256  # draws at most for the choices: n (ln n + 5) of them for n up to 35 outcomes


def draws_to_see_all(outcomes: int) -> int:
    """Draws after which each of ``outcomes`` equally likely outcomes was picked, but for a chance of
    about e**-5 (0.7%) that one was not: the coupon collector's n ln n, plus 5 n."""
    return math.ceil(outcomes * (math.log(outcomes) + 5))


class RandomChoices(ForwardPart):
    """Per call site of the forward (``op @ file:line``): the outcomes each discrete random choice can
    give, and which of them the draws seen so far picked (all elements of a draw: a per-sample choice
    reaches a branch when any sample picks it).

    A choice is a random draw whose result is an integer: torch's ops tagged ``nondeterministic_seeded``
    with an integer result, whose outcomes are ``low .. high - 1`` (or ``0 .. n - 1``) from their integer
    arguments, or the categories of positive weight when a floating tensor of weights comes first
    (``multinomial``); and Python's ``Random._randbelow(n)``, which ``choice``, ``randrange``, ``randint``,
    ``sample`` and ``shuffle`` of the global generator and of those the model holds or is given go
    through (its outcomes are positions ``0 .. n - 1`` in what they pick from)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, range | frozenset[int]] = {}
        self.seen: dict[str, set[int]] = {}
        self.positions: set[str] = set()  # the sites whose outcomes are positions (Python's _randbelow)

    def observe(self, func: Callable, args: tuple, kwargs: dict, result: Any) -> None:
        if not isinstance(result, torch.Tensor) or result.is_floating_point() or result.is_complex() \
                or result.dtype == torch.bool or not draws_random_numbers(getattr(func, "__name__", "")):
            return
        outcomes = _outcomes(args, kwargs)
        if outcomes is not None and len(outcomes) > 1:
            self._saw(f"{func.__name__} @ {current_user_source() or '?'}", outcomes,
                      result.detach().flatten()[:4096].tolist())

    def _saw(self, site: str, outcomes: range | frozenset[int], values: list[int]) -> None:
        known = self.outcomes.get(site)
        self.outcomes[site] = outcomes if known is None or len(outcomes) > len(known) else known
        self.seen.setdefault(site, set()).update(values)

    def _unpicked(self, site: str) -> int:
        return len(self.outcomes[site]) - sum(1 for value in self.seen[site] if value in self.outcomes[site])

    def open(self, drawn: int) -> bool:
        """Whether a choice has an outcome no draw picked yet, after ``drawn`` draws too few to show all
        (:func:`draws_to_see_all`, at most :data:`CHOICE_DRAWS_LIMIT`)."""
        return any(drawn < min(draws_to_see_all(len(outcomes)), CHOICE_DRAWS_LIMIT) and self._unpicked(site)
                   for site, outcomes in self.outcomes.items())

    def unpicked(self, drawn: int, shown: int = 8) -> list[dict[str, Any]]:
        """The choices that still have outcomes no draw picked after the ``drawn`` draws made, as the facts
        a reason tells: ``site``, ``outcomes`` (how many), ``count`` (how many never picked), ``unpicked``
        (the first ``shown`` of them), ``draws`` and ``positions`` (the outcomes are positions)."""
        found = []
        for site, outcomes in sorted(self.outcomes.items()):
            count = self._unpicked(site)
            if not count:
                continue
            seen = self.seen[site]
            first = [value for value in _first(outcomes, seen, shown)]
            found.append({"site": site, "outcomes": len(outcomes), "count": count, "unpicked": first,
                          "draws": drawn, "positions": site in self.positions})
        return found

    @contextlib.contextmanager
    def python(self, generators: list[Any]) -> Iterator[None]:
        """Note the choices Python's global generator and the ``random.Random`` objects among
        ``generators`` make while inside (their ``_randbelow``, read through the instance)."""
        held = [generator for generator in generators if isinstance(generator, random.Random)]
        instances = [random._inst, *held]  # type: ignore[attr-defined]
        wrapped = [instance for instance in dict.fromkeys(instances) if "_randbelow" not in vars(instance)]
        for instance in wrapped:
            instance._randbelow = self._noting(instance._randbelow)
        try:
            yield
        finally:
            for instance in wrapped:
                del instance._randbelow

    def _noting(self, below: Callable[[int], int]) -> Callable[[int], int]:
        def noted(n: int) -> int:
            value = below(n)
            if 1 < n:
                site = f"random @ {current_user_source() or '?'}"
                self.positions.add(site)
                self._saw(site, range(n), [value])
            return value
        return noted


def _first(outcomes: range | frozenset[int], seen: set[int], count: int) -> Iterator[int]:
    """The first ``count`` outcomes not in ``seen``, in order (a range of a million is not listed whole)."""
    found = 0
    for value in (outcomes if isinstance(outcomes, range) else sorted(outcomes)):
        if value not in seen:
            yield value
            found += 1
            if found == count:
                return


def _outcomes(args: tuple, kwargs: dict) -> range | frozenset[int] | None:
    """The outcomes an integer draw can give, read off its arguments (see :class:`RandomChoices`)."""
    first = args[0] if args else kwargs.get("input")
    if isinstance(first, torch.Tensor) and first.is_floating_point():
        if first.dim() == 0:
            return None
        weights = (first.detach().reshape(-1, first.shape[-1]) > 0).any(0)
        return frozenset(int(index) for index in weights.nonzero().flatten().tolist())
    bounds = [a for a in (*args, kwargs.get("low"), kwargs.get("high"), kwargs.get("n"))
              if isinstance(a, int) and not isinstance(a, bool)]
    if not bounds or len(bounds) > 2:
        return None
    return range(min(bounds), max(bounds)) if len(bounds) == 2 else range(max(bounds))
