"""The random generators a model holds or is given: its own randomness, beside the global generators.

A ``torch.Generator``, a NumPy ``Generator`` or ``RandomState``, or a ``random.Random`` kept in a
module's attributes (or in a list, tuple or dict there), or passed to forward among its inputs
(``model(x, generator=g)``), draws the model's layer drop, its branch choice, its noise. Reseeding
torch, ``random`` and NumPy leaves them alone, so fxflow finds them here: to tell that the forward
drew from them, to rerun the look-ahead from the same draws, to draw again with other seeds
(:mod:`fxflow.dynamic.redraw`), and to put them back as found.
"""
from __future__ import annotations

import contextlib
import random
import sys
from typing import Any, Iterator

import torch


class ModelGenerators:
    """The generator objects held by a model's modules, saved and restored together."""

    def __init__(self, generators: list[Any]) -> None:
        self.generators = generators

    @classmethod
    def of(cls, model: torch.nn.Module, inputs: Any = ()) -> "ModelGenerators":
        """The generators ``model``'s modules hold, then those among ``inputs`` (forward's arguments: a
        tuple, with a dict of keyword arguments in it, looked into one level as the attributes are)."""
        found: dict[int, Any] = {}
        values = [value for module in model.modules() for value in module.__dict__.values()]
        for value in [*values, *_items(inputs)[1:]]:
            for item in _items(value):
                if _is_generator(item):
                    found.setdefault(id(item), item)
        return cls(list(found.values()))

    @classmethod
    @contextlib.contextmanager
    def kept(cls, model: torch.nn.Module, inputs: Any = ()) -> Iterator[tuple["ModelGenerators", list[Any]]]:
        """The generators ``model`` holds or is given in ``inputs`` and their states, put back as found on
        exit (the check's runs and the capture's draw from them)."""
        generators = cls.of(model, inputs)
        states = generators.save()
        try:
            yield generators, states
        finally:
            generators.restore(states)

    def __bool__(self) -> bool:
        return bool(self.generators)

    def save(self) -> list[Any]:
        """Each generator's state, in order."""
        return [_get_state(generator) for generator in self.generators]

    def restore(self, states: list[Any]) -> None:
        for generator, state in zip(self.generators, states):
            _set_state(generator, state)

    def advanced(self, states: list[Any]) -> bool:
        """Whether a generator moved since ``states`` were saved."""
        return any(not _same(state, now) for state, now in zip(states, self.save()))

    def seed(self, seed: int) -> None:
        """Seed every generator with ``seed`` (another draw of the model's own random numbers)."""
        for index, generator in enumerate(self.generators):
            _seed(generator, seed * 1009 + index)  # distinct generators draw distinct streams


def _items(value: Any) -> list[Any]:
    """``value`` and what it holds when it is a list, tuple or dict; a container whose own iteration
    raises (e3nn's ``o3.Irrep``, a tuple that refuses ``len``) is the model's business: not looked into."""
    try:
        if isinstance(value, (list, tuple)):
            return [value, *value]
        if isinstance(value, dict):
            return [value, *value.values()]
    except Exception:  # noqa: BLE001 - the model's object, not fxflow's error
        pass
    return [value]


def _numpy_random() -> Any:
    numpy = sys.modules.get("numpy")  # not imported: the model holds none of its generators
    return numpy.random if numpy is not None else None


def _is_generator(value: Any) -> bool:
    if isinstance(value, (torch.Generator, random.Random)):
        return True
    numpy_random = _numpy_random()
    return numpy_random is not None and isinstance(value, (numpy_random.Generator, numpy_random.RandomState))


def _get_state(generator: Any) -> Any:
    if isinstance(generator, torch.Generator):
        return generator.get_state()
    if isinstance(generator, random.Random):
        return generator.getstate()
    if isinstance(generator, _numpy_random().Generator):
        return generator.bit_generator.state
    return generator.get_state()  # RandomState


def _set_state(generator: Any, state: Any) -> None:
    if isinstance(generator, torch.Generator):
        generator.set_state(state)
    elif isinstance(generator, random.Random):
        generator.setstate(state)
    elif isinstance(generator, _numpy_random().Generator):
        generator.bit_generator.state = state
    else:
        generator.set_state(state)


def _seed(generator: Any, seed: int) -> None:
    if isinstance(generator, torch.Generator):
        generator.manual_seed(seed)
    elif isinstance(generator, random.Random):
        generator.seed(seed)
    elif isinstance(generator, _numpy_random().Generator):
        generator.bit_generator.state = type(generator.bit_generator)(seed % 2**32).state
    else:
        generator.seed(seed % 2**32)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    equal = a == b
    return bool(equal.all()) if hasattr(equal, "all") else bool(equal)
