"""Twin tensors: what the analysis runs each node on in place of the model's real tensors.

A twin has a real tensor's shape, dtype and ``requires_grad`` and none of its history: a meta
tensor (no memory, no compute) or a real copy. Stand-ins are real tensors made up for a twin
when an op needs values (``.item()``, a mask read in Python): the analysis reads autograd's
structure from them, never their values.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import torch

from ..core.tensors import is_integer_scalar

StandIn = Callable[[torch.Tensor, torch.device], torch.Tensor]


def make_twin(tensor: torch.Tensor, kind: str) -> torch.Tensor:
    """A stand-alone copy of ``tensor`` (shape, dtype, requires_grad): on meta, or real values.

    An integer scalar keeps its value even among meta twins: it is a size, a count or a padding
    (``padding_total`` of a convolution), never differentiable and a few bytes, and the shapes
    computed from it must be the real ones, or later ops meet mismatched shapes.
    """
    meta = kind in ("meta", "recorded") and not is_integer_scalar(tensor)  # recorded: what runs again is on meta
    twin = tensor.detach().to("meta") if meta else tensor.detach().clone()
    return twin.requires_grad_(tensor.requires_grad) if twin.is_floating_point() or twin.is_complex() else twin


def stand_in(twin: torch.Tensor, device: torch.device, keep_alive: list[Any]) -> torch.Tensor:
    """A real tensor shaped like ``twin``: ones (every mask entry True), zeros for integers
    (always a valid index). Where the twin requires grad, a copy of a leaf that does (autograd
    refuses in-place writes into the leaf itself, and ``h[mask] = v`` is such a write)."""
    if is_integer_scalar(twin):  # it holds its real value: keep it
        return twin.to(device)
    integer = not (twin.dtype.is_floating_point or twin.dtype.is_complex or twin.dtype == torch.bool)
    make = torch.zeros if integer else torch.ones
    tensor = make(tuple(twin.shape), dtype=twin.dtype, device=device)
    if not twin.requires_grad:
        return tensor
    leaf = tensor.requires_grad_(True)
    keep_alive.append(leaf)
    return leaf.clone()


def random_stand_in_maker(seed: int = 0) -> StandIn:
    """Like :func:`stand_in`, but floating-point stand-ins hold seeded normal values."""
    generators: dict[torch.device, torch.Generator] = {}

    def make(twin: torch.Tensor, device: torch.device) -> torch.Tensor:
        if not (twin.dtype.is_floating_point or twin.dtype.is_complex):
            return stand_in(twin, device, [])
        generator = generators.setdefault(device, torch.Generator(device).manual_seed(seed))
        tensor = torch.randn(tuple(twin.shape), dtype=twin.dtype, device=device, generator=generator)
        return tensor.requires_grad_(twin.requires_grad)

    return make


def real_copy(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A real leaf with ``tensor``'s values (a stand-in when it lives on meta), same requires_grad."""
    copy = stand_in(tensor, device, []).detach() if tensor.is_meta else tensor.detach().clone()
    return copy.requires_grad_(tensor.requires_grad) if copy.is_floating_point() or copy.is_complex() else copy


def choose_twins(model: torch.nn.Module, inputs: Sequence[Any] | None = None, recorded: bool = False) -> str:
    """``recorded`` when the graph is a recorded run whose results are at hand (``recorded``); else
    ``real`` for small weights and inputs, else ``meta``. ``FXFLOW_TWINS`` overrides (``recorded``
    only where there is a recording to read).

    Recorded: nothing runs again; each node's edges come from the history of the result the run
    itself computed, which is what the meta and real twins rebuild (``tests/test_recorded.py``
    compares them node by node).

    Decided by size alone, never by a measured time, so a busy machine gets the same twins as
    an idle one; the verdicts do not depend on the choice either (a node that cannot run on meta
    twins runs on real stand-ins). The choice is cost: a meta op has a fixed dispatch cost whatever its size,
    and the first one imports torch._dynamo, while a small model's real ops cost less than that
    dispatch; real twins copy the weights and compute forward's ops once more.
    """
    forced = os.environ.get("FXFLOW_TWINS")
    if forced in ("meta", "real") or (forced == "recorded" and recorded):
        return forced
    if recorded:
        return "recorded"
    tensors = list(model.parameters()) + list(model.buffers())
    if any(t.is_meta for t in tensors):
        return "meta"
    if sum(t.numel() * t.element_size() for t in tensors) > _REAL_TWIN_LIMIT_BYTES:
        return "meta"
    elements = sum(x.numel() for x in inputs or () if isinstance(x, torch.Tensor))
    return "real" if elements <= _REAL_TWIN_LIMIT_ELEMENTS else "meta"


# Real twins only below both of these (see choose_twins).
_REAL_TWIN_LIMIT_BYTES = 16 * 2**20
_REAL_TWIN_LIMIT_ELEMENTS = 2**20
