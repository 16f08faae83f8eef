"""The random choices a forward makes, and which of their outcomes the draws picked.

A choice is a draw of one of ``n`` outcomes: an integer draw torch tags random (``torch.randint``,
``randperm``, ``multinomial`` over the categories of positive weight), or Python's ``Random._randbelow(n)``,
which ``choice``, ``randrange``, ``randint``, ``sample`` and ``shuffle`` go through. The redraws
(:mod:`fxflow.dynamic.redraw`) draw again until every outcome of each choice was picked, within the draws
that show all ``n`` with high probability; a choice still open when they end leaves the parameters no draw
reached unconfirmed, if its outcome decides something Python reads (a branch, an index into a module
list): an outcome a tensor op alone consumes (a random token id, a mask) picks values, not parameters.
"""
from __future__ import annotations

import contextlib
import math
import random
from typing import Any, Callable, Iterator

import torch

from ..core.observer import ForwardPart
from ..core.random_ops import draws_random_numbers
from ..core.source import current_user_source

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
        # The sites whose outcome Python read (``int(k)``, ``k.item()``, ``modules[k]``, ``if k == 3``):
        # it may pick a branch, so parameters. ``_derived``: per forward, the integer and boolean tensors
        # made from a choice's result (``id`` -> the tensor, kept alive while the forward runs, and its site).
        self.read: set[str] = set()
        self._derived: dict[int, tuple[torch.Tensor, str]] = {}

    def __enter__(self) -> "RandomChoices":
        self._derived.clear()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._derived.clear()
        super().__exit__(*exc)

    def observe(self, func: Callable, args: tuple, kwargs: dict, result: Any) -> None:
        name = getattr(func, "__name__", "")
        if self._derived:
            if name in _PYTHON_READS:
                site = self._origin(args[:1])
                if site is not None:
                    self.read.add(site)
                return
            if _integral(result):
                site = self._origin((*args, *kwargs.values()))
                if site is not None:  # an integer or boolean made from a choice carries it on
                    self._derived[id(result)] = (result, site)
        if not _integral(result) or result.dtype == torch.bool or not draws_random_numbers(name):
            return
        outcomes = _outcomes(args, kwargs)
        if outcomes is not None and len(outcomes) > 1:
            site = f"{func.__name__} @ {current_user_source() or '?'}"
            self._derived[id(result)] = (result, site)
            self._saw(site, outcomes, result.detach().flatten()[:4096].tolist())

    def _origin(self, values: tuple) -> str | None:
        """The choice one of ``values`` (or of the lists and tuples among them) was made from, if any."""
        for value in values:
            for item in (value if isinstance(value, (list, tuple)) else (value,)):
                found = self._derived.get(id(item)) if isinstance(item, torch.Tensor) else None
                if found is not None and found[0] is item:
                    return found[1]
        return None

    def _saw(self, site: str, outcomes: range | frozenset[int], values: list[int]) -> None:
        known = self.outcomes.get(site)
        self.outcomes[site] = outcomes if known is None or len(outcomes) > len(known) else known
        self.seen.setdefault(site, set()).update(values)

    def _unpicked(self, site: str) -> int:
        return len(self.outcomes[site]) - sum(1 for value in self.seen[site] if value in self.outcomes[site])

    def open(self, drawn: int) -> bool:
        """Whether a choice has an outcome no draw picked yet, after ``drawn`` draws too few to show all
        (:func:`draws_to_see_all`, at most :data:`CHOICE_DRAWS_LIMIT`); past 35 outcomes, only a choice
        Python reads is followed that far."""
        return any(drawn < min(draws_to_see_all(len(outcomes)), CHOICE_DRAWS_LIMIT) and self._unpicked(site)
                   and (site in self.read or draws_to_see_all(len(outcomes)) <= CHOICE_DRAWS_LIMIT)
                   for site, outcomes in self.outcomes.items())

    def unpicked(self, drawn: int, shown: int = 8) -> list[dict[str, Any]]:
        """The choices Python read that still have outcomes no draw picked after the ``drawn`` draws made, as
        the facts a reason tells: ``site``, ``outcomes`` (how many), ``count`` (how many never picked),
        ``unpicked`` (the first ``shown`` of them), ``draws`` and ``positions`` (the outcomes are positions)."""
        found = []
        for site, outcomes in sorted(self.outcomes.items()):
            count = self._unpicked(site)
            if not count or site not in self.read:  # an outcome no Python code read picks no branch
                continue
            first = list(_first(outcomes, self.seen[site], shown))
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
                self.read.add(site)  # a Python int: Python reads it
                self._saw(site, range(n), [value])
            return value
        return noted


# Tensor methods through which Python reads a value: a branch, an index, a Python number.
_PYTHON_READS = frozenset({"__int__", "__index__", "__bool__", "__float__", "item", "tolist"})


def _integral(value: Any) -> bool:
    """An integer or boolean tensor: what a choice's outcome stays while it is still an outcome."""
    return isinstance(value, torch.Tensor) and not value.is_floating_point() and not value.is_complex()


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
