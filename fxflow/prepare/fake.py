"""Fake tensors standing in for a model's weights: shapes, dtypes and autograd, no memory or compute.

The meta run (``device="meta"``, or a model built on the meta device) runs the user's forward and
backward under :class:`StandInFakeMode`: torch's ``FakeTensorMode``, as a user would build and run the
model inside it, with one difference: an op that cannot run on fake tensors (it reads a value, as
``.item()`` does, or its output's shape depends on values, or it has no meta kernel) runs on
stand-in values instead of failing the whole run, and the mode notes where.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch._subclasses.fake_tensor import (CONSTANT_NUMEL_LIMIT, DataDependentOutputException,
                                           DynamicOutputShapeException, FakeTensor, FakeTensorMode,
                                           UnsupportedOperatorException)
from torch.utils._mode_utils import no_dispatch
from torch.utils._pytree import tree_leaves, tree_map

from ..core.source import current_user_source
from ..core.state import call_with_weights, weights_of

# What fake tensors cannot answer: a value read (``.item()``, a branch on a tensor), a shape that
# depends on values (``nonzero``, a boolean mask), an op with no meta kernel.
_NO_FAKE_ANSWER = (DataDependentOutputException, DynamicOutputShapeException, UnsupportedOperatorException,
                   NotImplementedError)

_STAND_IN_LIMIT = 1 << 24  # elements in an op's tensor arguments, at most, for it to run on stand-ins (64 MiB of floats)


class StandInFakeMode(FakeTensorMode):
    """A fake mode that also accepts real tensors a module keeps as plain attributes, and runs an op
    fake tensors cannot answer on stand-in values: ones for floats and masks (every entry kept), zeros
    for integers (always a valid index), on the CPU, its results fakes again. :attr:`stand_ins` lists
    ``op @ file:line`` of each, once: the branch such a value decides may not be the real run's."""

    def __init__(self) -> None:
        super().__init__(allow_non_fake_inputs=True)
        self.stand_ins: list[str] = []

    def dispatch(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        try:
            result = super().dispatch(func, types, args, kwargs)
        except _NO_FAKE_ANSWER:
            tensors = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
            if sum(t.numel() for t in tensors) > _STAND_IN_LIMIT:  # stand-ins are real memory: not for a 7B weight
                raise
            return self._on_stand_ins(func, args, kwargs or {})
        if (isinstance(result, FakeTensor) and result.constant is None and result.numel() <= CONSTANT_NUMEL_LIMIT
                and result.device.type == "cpu" and result.layout == torch.strided
                and not any(isinstance(x, torch.Tensor) for x in tree_leaves((args, kwargs)))):
            # A scalar forward makes from nothing (``torch.rand([])`` for a layer drop) holds its real value, as in
            # a real run: what is computed from it, and a branch on it, follow the real run's (the fake mode
            # propagates constants), where a stand-in would decide it one way always.
            with no_dispatch():
                real = func(*args, **(kwargs or {}))
            return self.fake_tensor_converter.from_real_tensor(self, real, make_constant=True)
        return result

    def _on_stand_ins(self, func: Any, args: Any, kwargs: Any) -> Any:
        devices: list[torch.device] = []

        def real(value: Any) -> Any:
            if not isinstance(value, torch.Tensor):
                return value
            devices.append(value.device)
            make = torch.zeros if _integer(value.dtype) else torch.ones
            return make(tuple(value.shape), dtype=value.dtype, device="cpu")

        with no_dispatch():
            result = func(*tree_map(real, args), **tree_map(real, kwargs))
        name = getattr(getattr(func, "overloadpacket", func), "__name__", str(func)).strip("_")
        site = f"{name} @ {current_user_source() or 'an unknown line'}"
        if site not in self.stand_ins:
            self.stand_ins.append(site)
        device = devices[0] if devices else torch.device("cpu")
        return tree_map(lambda value: self._fake_of(value, device) if isinstance(value, torch.Tensor) else value,
                        result)

    def _fake_of(self, value: torch.Tensor, device: torch.device) -> torch.Tensor:
        """A fake of a stand-in result, on the device the op's inputs claimed."""
        meta = torch.empty_strided(tuple(value.shape), tuple(value.stride()), dtype=value.dtype, device="meta")
        return self.fake_tensor_converter.from_meta_and_device(self, meta, device)


def _integer(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def new_fake_mode() -> StandInFakeMode:
    """A fake mode that also accepts real tensors a module keeps as plain attributes (and runs an op it
    cannot answer on stand-ins: :class:`StandInFakeMode`)."""
    return StandInFakeMode()


@dataclass
class FakeWeights:
    """Fake twins of a model's parameters and buffers, passed in at call time or put in place.

    Calling it runs the model with the fakes in place of its own tensors (the same mechanism
    the analysis uses, :func:`fxflow.core.state.call_with_weights`); :meth:`in_place` keeps them in
    the module tables for a whole run (a recorded forward and its backward). The real tensors and
    their grads are never changed, and the tables get them back on leaving.
    """

    model: torch.nn.Module
    weights: dict[str, torch.Tensor]  # every local name -> its fake (tied tensors share one)
    parameters: dict[str, torch.Tensor]  # canonical parameter name -> its fake
    twins: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)  # id(model's own tensor) -> its fake

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return call_with_weights(self.model, self.weights, args, kwargs)

    @contextlib.contextmanager
    def in_place(self) -> Iterator[None]:
        """Inside, every parameter and buffer table of the model holds the fakes (tied ones stay tied);
        on leaving, the model's own tensors, the same objects, are back."""
        swapped: list[tuple[dict[str, Any], str, torch.Tensor]] = []
        try:
            for module in self.model.modules():
                for table in (module._parameters, module._buffers):
                    for name, tensor in table.items():
                        if tensor is not None and id(tensor) in self.twins:
                            swapped.append((table, name, tensor))
                            table[name] = self.twins[id(tensor)]
            yield
        finally:
            for table, name, tensor in reversed(swapped):
                table[name] = tensor


def fake_weights(model: torch.nn.Module, mode: FakeTensorMode) -> FakeWeights:
    """Fake twins of every parameter and buffer; fakes keep ``requires_grad`` and start with no ``.grad``."""
    fakes: dict[int, torch.Tensor] = {}

    def twin_of(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) not in fakes:
            fake = mode.from_tensor(tensor)
            fake.grad = None
            fakes[id(tensor)] = fake
        return fakes[id(tensor)]

    weights = weights_of(model, twin_of)
    return FakeWeights(model, weights, {name: fakes[id(p)] for name, p in model.named_parameters()}, fakes)


def fake_inputs(mode: FakeTensorMode, inputs: Any) -> Any:
    """The same inputs as fakes (non-tensors pass through)."""
    return tuple(mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs)
