"""Fake tensors standing in for a model's weights: shapes, dtypes and autograd, no memory or compute."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ..core.state import call_with_weights, weights_of


def new_fake_mode() -> FakeTensorMode:
    """A fake mode that also accepts real tensors a module keeps as plain attributes."""
    return FakeTensorMode(allow_non_fake_inputs=True)


@dataclass
class FakeWeights:
    """Fake twins of a model's parameters and buffers, passed in at call time.

    Calling it runs the model with the fakes in place of its own tensors (the same mechanism
    the analysis uses, :func:`fxflow.core.state.call_with_weights`); the real tensors, their grads and
    the module tables are never replaced outside that call.
    """

    model: torch.nn.Module
    weights: dict[str, torch.Tensor]  # every local name -> its fake (tied tensors share one)
    parameters: dict[str, torch.Tensor]  # canonical parameter name -> its fake

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return call_with_weights(self.model, self.weights, args, kwargs)


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
    return FakeWeights(model, weights, {name: fakes[id(p)] for name, p in model.named_parameters()})


def fake_inputs(mode: FakeTensorMode, inputs: Any) -> Any:
    """The same inputs as fakes (non-tensors pass through)."""
    return tuple(mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs)
