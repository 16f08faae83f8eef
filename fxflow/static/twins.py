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

from ..core.history import NONE, ZERO, stronger
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


def random_stand_in_maker(seed: int = 0, scale: float = 1.0, mirrored: bool = False,
                          mixed: bool = False) -> StandIn:
    """Like :func:`stand_in`, but floating-point stand-ins hold seeded normal values times ``scale``.

    ``mirrored``: the same draw turned over, so that a pair of draws sees both sides of every
    threshold at zero: floats negated, masks inverted, integers ones instead of zeros.
    ``mixed``: integers and masks drawn too (0 or 1, True or False), not all alike.
    """
    generators: dict[torch.device, torch.Generator] = {}

    def make(twin: torch.Tensor, device: torch.device) -> torch.Tensor:
        if is_integer_scalar(twin) and twin.dtype != torch.bool:  # a size or a count: its real value
            # (a bool is a predicate, a learned gate's ``gate > 0``: drawn both ways like a mask)
            return twin.to(device)
        generator = generators.setdefault(device, torch.Generator(device).manual_seed(seed))
        shape = tuple(twin.shape)
        if twin.dtype.is_floating_point or twin.dtype.is_complex:
            tensor = torch.randn(shape, dtype=twin.dtype, device=device, generator=generator) * scale
            return (-tensor if mirrored else tensor).requires_grad_(twin.requires_grad)
        if mixed:
            bits = torch.randint(0, 2, shape, device=device, generator=generator)
        else:
            bits = torch.zeros(shape, dtype=torch.int64, device=device)
        if twin.dtype == torch.bool:  # all True unmixed (as stand_in): every mask entry kept
            bits = 1 - bits
        return (1 - bits if mirrored else bits).to(twin.dtype)

    return make


def stand_in_draws() -> list[StandIn]:
    """The stand-in makers a backward read on stand-ins runs with, the first one first.

    A backward that gives some input exactly zero on the first draw may owe it to the draw (an
    integer mask of zeros masks every key, a clamp sees only values beyond its bounds): the zero
    counts only if every draw gives it. The first draw is :func:`random_stand_in_maker`'s default
    (zeros for integers: always a valid index); each is followed by its mirror, at three scales
    of floating values, so a threshold at zero, at 0.01 or at 100 is seen from both sides.
    """
    return [random_stand_in_maker(seed, scale, mirrored, mixed=seed > 0)
            for seed, scale in enumerate((1.0, 0.01, 100.0)) for mirrored in (False, True)]


def read_on_draws(read: Callable[[StandIn], dict[str, str]]) -> dict[str, str] | None:
    """What ``read`` (one backward on stand-ins made by the maker it is given: ``{name: kind}``)
    says on the first of :func:`stand_in_draws`, each ZERO kept only if every later draw gives it
    too. Later draws run only while a zero is left to confirm; None when one of them raises: the
    zero cannot be told from an artifact of the first draw. The first draw's own error propagates.
    """
    draws = stand_in_draws()
    kinds = read(draws[0])
    for draw in draws[1:]:
        zeros = [name for name, kind in kinds.items() if kind == ZERO]
        if not zeros:
            break
        try:
            again = read(draw)
        except Exception:
            return None
        for name in zeros:
            kinds[name] = stronger(ZERO, again.get(name, NONE))
    return kinds


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
