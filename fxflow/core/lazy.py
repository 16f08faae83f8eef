"""Lazy modules (``nn.LazyLinear``...) initialized for a check, then made lazy again."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .guard import guard
from .state import put_back_attributes, saved_attributes


@dataclass
class LazyModules:
    """Lazy modules (``nn.LazyLinear``...) initialized for a check, and how to make them lazy again."""

    notes: list[str] = field(default_factory=list)
    modules: list[tuple[torch.nn.Module, type]] = field(default_factory=list)
    attributes: list = field(default_factory=list)  # the lazy modules' own attributes and hook tables
    tensors: list[tuple[torch.Tensor, type, torch.Tensor]] = field(default_factory=list)  # class, placeholder

    def restore(self) -> None:
        """The user's modules lazy again: their class, hooks and uninitialized parameters and buffers
        (the same objects, so an optimizer built on them still holds them)."""
        for tensor, kind, placeholder in self.tensors:
            tensor.data = placeholder
            tensor.__class__ = kind
        for module, kind in self.modules:
            module.__class__ = kind
        put_back_attributes(self.attributes)


def materialize_lazy(model: torch.nn.Module, call: Callable[[], Any], inputs: Any = ()) -> LazyModules:
    """Initialize lazy modules by one forward, as the first training step would: their parameters
    have no shape before it, so nothing can be checked. :meth:`LazyModules.restore` makes them lazy
    again once the check is done.

    The forward runs in eval mode without autograd, so no running statistic or dropout draw
    changes; the random state, the values of everything else the forward writes (initialized
    weights, plain tensor attributes, ``inputs``) are put back: only the lazy tensors get their
    shape and initial values.
    """
    uninitialized = torch.nn.parameter.UninitializedTensorMixin
    lazy = [name for name, p in model.named_parameters() if isinstance(p, uninitialized)]
    if not lazy:
        return LazyModules()
    modules = [m for m in model.modules() if isinstance(m, torch.nn.modules.lazy.LazyModuleMixin)]
    undo = LazyModules(modules=[(m, type(m)) for m in modules], attributes=saved_attributes(modules), tensors=[
        (t, type(t), t.data) for m in modules for t in [*m._parameters.values(), *m._buffers.values()]
        if isinstance(t, uninitialized)])
    # the guard puts back everything but the lazy modules' own attributes (their lazy state is `undo`'s)
    with guard(model, inputs, keep=modules, lazy=undo):
        model.eval()
        with torch.no_grad():
            call()
    shown = ", ".join(lazy[:3]) + (" ..." if len(lazy) > 3 else "")
    undo.notes.append(f"lazy parameters ({shown}) had no shape yet: one forward without autograd initialized them "
                      "for the check, as the first training step would, and they are lazy again after it")
    return undo
