"""Fake tensors standing in for a model's weights: shapes, dtypes and autograd, no memory or compute."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from .state import preserved_module_attributes


def new_fake_mode() -> FakeTensorMode:
    """A fake mode that also accepts real tensors a module keeps as plain attributes."""
    return FakeTensorMode(allow_non_fake_inputs=True)


@contextlib.contextmanager
def fake_weights(model: torch.nn.Module, mode: FakeTensorMode) -> Iterator[dict[int, str]]:
    """Swap every parameter and buffer for a fake twin, then put the real ones back.

    Yields ``{id(fake parameter): qualified name}``. Fakes keep ``requires_grad`` and start with no
    ``.grad``; the real tensors, their grads and the module tables are untouched.
    """
    names = {id(p): name for name, p in model.named_parameters()}
    twins: dict[int, torch.Tensor] = {}
    fake_names: dict[int, str] = {}
    with preserved_module_attributes(model):
        for module in model.modules():
            for table in (module._parameters, module._buffers):
                for key, tensor in list(table.items()):
                    if tensor is None:
                        continue
                    if id(tensor) not in twins:
                        twin = mode.from_tensor(tensor)
                        twin.grad = None
                        twins[id(tensor)] = twin
                        if id(tensor) in names:
                            fake_names[id(twin)] = names[id(tensor)]
                    table[key] = twins[id(tensor)]
        yield fake_names


def fake_inputs(mode: FakeTensorMode, inputs: Any) -> Any:
    """The same inputs as fakes (non-tensors pass through)."""
    return tuple(mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs)
