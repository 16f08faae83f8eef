"""Stash and restore everything a check could disturb, so the user's model is left as found."""
from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

# Parameters are cloned for restoring only up to this size; above it an in-place change made by
# forward is detected through the tensor version counter and reported instead.
_PARAMETER_COPY_LIMIT_BYTES = 256 * 2**20


@contextlib.contextmanager
def preserved_module_attributes(model: torch.nn.Module) -> Iterator[None]:
    """Put back every module's attributes (including the parameter/buffer/submodule tables)."""
    saved = []
    for module in model.modules():
        tables = {key: dict(value) for key, value in module.__dict__.items() if key in _TABLES}
        saved.append((module, dict(module.__dict__), tables))
    try:
        yield
    finally:
        for module, attributes, tables in saved:
            module.__dict__.clear()
            module.__dict__.update(attributes)
            for key, content in tables.items():
                table = module.__dict__[key]
                table.clear()
                table.update(content)


_TABLES = (
    "_parameters", "_buffers", "_modules", "_forward_hooks", "_forward_pre_hooks",
    "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks",
    "_non_persistent_buffers_set",
)


@dataclass
class RandomState:
    """The global random generators fxflow may advance: torch (CPU and CUDA), Python, NumPy."""

    torch_cpu: torch.Tensor
    torch_cuda: list[torch.Tensor] | None
    python: Any
    numpy: Any = None

    @classmethod
    def save(cls) -> "RandomState":
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        numpy_state = None
        try:
            import numpy

            numpy_state = numpy.random.get_state()
        except ImportError:
            pass
        return cls(torch.get_rng_state(), cuda, random.getstate(), numpy_state)

    def restore(self) -> None:
        torch.set_rng_state(self.torch_cpu)
        if self.torch_cuda is not None:
            torch.cuda.set_rng_state_all(self.torch_cuda)
        random.setstate(self.python)
        if self.numpy is not None:
            import numpy

            numpy.random.set_state(self.numpy)


@dataclass
class ModelSnapshot:
    """What a forward and backward may change on a model, saved so it can be put back exactly."""

    model: torch.nn.Module
    grads: dict[torch.nn.Parameter, torch.Tensor | None] = field(default_factory=dict)
    requires_grad: dict[torch.nn.Parameter, bool] = field(default_factory=dict)
    versions: dict[torch.nn.Parameter, int] = field(default_factory=dict)
    parameter_copies: dict[torch.nn.Parameter, torch.Tensor] = field(default_factory=dict)
    buffers: dict[tuple[torch.nn.Module, str], tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    training: dict[torch.nn.Module, bool] = field(default_factory=dict)
    random_state: RandomState | None = None

    @classmethod
    def save(cls, model: torch.nn.Module) -> "ModelSnapshot":
        snapshot = cls(model, random_state=RandomState.save())
        parameters = list(dict.fromkeys(model.parameters()))
        copy = sum(p.numel() * p.element_size() for p in parameters) <= _PARAMETER_COPY_LIMIT_BYTES
        for parameter in parameters:
            snapshot.grads[parameter] = parameter.grad
            snapshot.requires_grad[parameter] = parameter.requires_grad
            snapshot.versions[parameter] = parameter._version
            if copy and not parameter.is_meta:
                snapshot.parameter_copies[parameter] = parameter.detach().clone()
        for module in model.modules():
            snapshot.training[module] = module.training
            for name, buffer in module._buffers.items():
                if buffer is not None:
                    snapshot.buffers[(module, name)] = (buffer, buffer.detach().clone())
        return snapshot

    def restore(self) -> list[str]:
        """Put everything back; returns notes about what could not be restored."""
        notes = []
        with torch.no_grad():
            for parameter, grad in self.grads.items():
                parameter.grad = grad
                parameter.requires_grad_(self.requires_grad[parameter])
                if parameter in self.parameter_copies:
                    if parameter._version != self.versions[parameter]:
                        parameter.copy_(self.parameter_copies[parameter])
                elif parameter._version != self.versions[parameter]:
                    notes.append("forward changed a parameter in place; it was too large to keep a copy")
            for (module, name), (original, value) in self.buffers.items():
                if not original.is_meta:
                    original.copy_(value)
                module._buffers[name] = original
        for module, training in self.training.items():
            module.training = training
        if self.random_state is not None:
            self.random_state.restore()
        return sorted(set(notes))
