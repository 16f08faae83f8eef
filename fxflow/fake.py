"""Fake tensors standing in for a model's weights: shapes, dtypes and autograd, no memory or compute."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from .state import swapped_weights


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
    fake_names: dict[int, str] = {}

    def twin_of(tensor: torch.Tensor) -> torch.Tensor:
        twin = mode.from_tensor(tensor)
        twin.grad = None
        if id(tensor) in names:
            fake_names[id(twin)] = names[id(tensor)]
        return twin

    with swapped_weights(model, twin_of):
        yield fake_names


def fake_inputs(mode: FakeTensorMode, inputs: Any) -> Any:
    """The same inputs as fakes (non-tensors pass through)."""
    return tuple(mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs)
