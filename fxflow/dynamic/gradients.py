"""Gradient statistics: what a ``.grad`` holds, as one process or every rank together saw it.

The one way fxflow reads gradients, whether the backward was its own (:mod:`fxflow.dynamic.probe`) or the
user's training step (:mod:`fxflow.watching`): a single process is the world-size-1 case. Each
rank summarises its own ``.grad`` (:func:`local_grad`: a sharded ``DTensor`` only its local
shard), one ``all_gather_object`` collects the summaries, and :func:`combine` makes one
:class:`GradInfo` per tensor.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..core.distributed import is_dtensor, all_gather
from ..core.tensors import l2_norm, stored_values
from ..verdicts import DynamicVerdict as Dynamic

if TYPE_CHECKING:  # pragma: no cover
    from .probe import ProbeResult


@dataclass
class GradInfo:
    """What the real backward left in one parameter's ``.grad``."""

    present: bool
    norm: float | None = None
    rms: float | None = None
    finite: bool = True
    all_zero: bool = False


@dataclass
class LocalGrad:
    """What one rank's ``.grad`` of one parameter holds (plain data, cheap to gather)."""

    present: bool
    sum_squares: float = 0.0
    numel: int = 0
    finite: bool = True
    all_zero: bool = True
    sharded: bool = False  # a shard of a DTensor: norms add up over ranks


def local_grad(grad: torch.Tensor | None) -> LocalGrad:
    """Summarise a gradient; a ``DTensor`` contributes only its local shard (no collective)."""
    if grad is None:
        return LocalGrad(False)
    sharded = False
    numel = grad.numel()
    if is_dtensor(grad):
        sharded = any(p.is_shard() for p in grad.placements)
        grad = grad.to_local()
    if grad.is_meta:
        return LocalGrad(True, math.nan, numel, True, False, sharded)
    if grad.layout != torch.strided:  # sparse (Embedding(sparse=True)): over the rows it holds
        grad = stored_values(grad.detach())
        numel = grad.numel()
    # One reduction answers everything: NaN and inf propagate into the norm, and a norm of exactly
    # zero means every entry is zero (no copy of the gradient; float64 where float32 could underflow).
    norm = l2_norm(grad.detach())
    finite = math.isfinite(norm)
    return LocalGrad(True, norm * norm if finite else math.inf, numel, finite, norm == 0.0, sharded)


def combine(per_rank: list[LocalGrad]) -> GradInfo:
    """One :class:`GradInfo` from every rank's view of a parameter's gradient.

    A sharded gradient is the sum of its shards; a replicated one (DDP) is read from the first
    rank that has it. A gradient present on any rank counts as present.
    """
    present = [g for g in per_rank if g.present]
    if not present:
        return GradInfo(present=False)
    if any(math.isnan(g.sum_squares) for g in present) and all(g.finite for g in present):
        return GradInfo(present=True)  # meta tensors: presence only
    if present[0].sharded:
        sum_squares = sum(g.sum_squares for g in present)
        numel = present[0].numel
        finite = all(g.finite for g in present)
        all_zero = all(g.all_zero for g in present)
    else:
        first = present[0]
        sum_squares, numel, finite, all_zero = first.sum_squares, first.numel, first.finite, first.all_zero
    if not finite:  # no norm to speak of: the report stays strict JSON
        return GradInfo(True, None, None, False, False)
    norm = math.sqrt(sum_squares)
    return GradInfo(True, norm, norm / math.sqrt(max(numel, 1)), finite, all_zero)


def read_gradients(named: dict[str, torch.Tensor | None], group: Any = None) -> tuple[dict[str, GradInfo], list[str]]:
    """Every gradient as all ranks together saw it (in one process: as it is), plus notes on rank
    disagreements. The one way fxflow reads gradients: the probe, watch and the trainers."""
    return gather_gradients({name: local_grad(grad) for name, grad in named.items()}, group)


def gather_gradients(local: dict[str, LocalGrad], group: Any = None) -> tuple[dict[str, GradInfo], list[str]]:
    """Each rank's summaries of its gradients (:func:`local_grad`), combined over ranks, plus notes on
    rank disagreements (one collective; none in one process)."""
    gathered = all_gather(local, group)
    infos = {name: combine([view[name] for view in gathered]) for name in local}
    notes = []
    if len(gathered) > 1:
        uneven = sorted(name for name in local if len({view[name].present for view in gathered}) > 1)
        if uneven:
            notes.append(f"gradient present on some ranks only (data-dependent forward?): {', '.join(uneven)}")
    return infos, notes


def dynamic_verdicts(result: "ProbeResult", vanishing: float) -> dict[str, Dynamic]:
    """missing / zero / vanishing / nonfinite / ok (present on meta) for every parameter."""
    rms_values = [g.rms for g in result.grads.values() if g.present and g.finite and g.rms is not None]
    largest = max(rms_values, default=0.0)
    verdicts = {}
    for name, info in result.grads.items():
        if not info.present:
            verdicts[name] = Dynamic.MISSING
        elif not result.measurable:
            verdicts[name] = Dynamic.PRESENT
        elif not info.finite:
            verdicts[name] = Dynamic.NONFINITE
        elif info.all_zero:
            verdicts[name] = Dynamic.ZERO
        elif info.rms is not None and info.rms < vanishing * largest:
            verdicts[name] = Dynamic.VANISHING
        else:
            verdicts[name] = Dynamic.OK
    return verdicts
