"""What a forward wrote into its model: the state the next training step starts from.

A counter (``self.step += 1``), a step buffer, an EMA statistic: training's step 2 runs from what
step 1's forward left. The recorded run puts the model back as found (later stages read it so);
:class:`ForwardWrites` keeps what it wrote, so the look-ahead (:mod:`fxflow.dynamic.lookahead`)
starts its step from there. Buffers whose values changed and attributes the forward assigned are
kept; containers changed in place (``self.cache.append``) are not.
"""
from __future__ import annotations

from typing import Any

import torch

from ..core.guard import Saved

# a module's own tables and flags: what the forward writes lives elsewhere
_TABLES = frozenset({"_parameters", "_buffers", "_modules", "training", "_non_persistent_buffers_set"})


class ForwardWrites:
    """The attributes and buffer values a forward wrote; saved around it, applied with :meth:`apply`."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.before = {module: dict(module.__dict__) for module in model.modules()}
        self.attributes: list[tuple[torch.nn.Module, str, Any]] = []
        self.buffers: list[tuple[torch.Tensor, torch.Tensor]] = []  # (the model's buffer, the value written)

    def read(self, snapshot: Saved | None) -> None:
        """After the forward, before the model is put back: what changed since ``__init__`` (the buffers
        as ``snapshot``, taken before the forward, held them)."""
        for module, attributes in self.before.items():
            for key, value in module.__dict__.items():
                if key in _TABLES or key.startswith("_") and key.endswith("hooks"):
                    continue
                if key not in attributes or attributes[key] is not value:
                    self.attributes.append((module, key, value))
        if snapshot is not None:
            for (module, name), (original, version, value) in snapshot.buffers.items():
                current = module._buffers.get(name)
                if current is not None and not current.is_meta and (current is not original
                                                                    or _written(original, version, value)):
                    self.buffers.append((original, current.detach().clone()))
        self.before = {}

    def apply(self) -> None:
        """Write it into the model again (the caller puts the model back afterwards)."""
        with torch.no_grad():
            for original, value in self.buffers:
                if original.shape == value.shape and original.dtype == value.dtype:
                    original.copy_(value)
        for module, key, value in self.attributes:
            module.__dict__[key] = value


def _written(tensor: torch.Tensor, version: int, before: torch.Tensor) -> bool:
    """Whether the forward changed ``tensor`` (batch norm's kernels update running statistics in place
    without bumping the version counter: the values are compared too)."""
    if tensor._version != version or tensor.shape != before.shape or tensor.dtype != before.dtype:
        return True
    return bool(tensor.numel()) and not torch.equal(tensor.detach(), before)
