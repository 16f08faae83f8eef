"""Distributed training support: unwrap DDP / FSDP2 / torch.compile, gather grads across ranks, DDP guidance.

Everything here is safe in a single process: with ``torch.distributed`` not initialised (or a
world of one) the collectives are skipped and the local values are returned.

* :func:`unwrap` gives the user's own module, so parameters keep their original names
  (``first.weight``, never ``module.first.weight`` or ``_orig_mod.first.weight``).
* :func:`plain_structure` temporarily turns an FSDP2 (``fully_shard``) module back into a plain
  module with meta-device parameters of the full (unsharded) shape, and without FSDP's hooks,
  so the static analysis can trace it without running a single collective.
* :func:`all_gather` is the one collective (what every rank saw of the gradients:
  :func:`fxflow.dynamic.gradients.read_gradients`).
* :func:`ddp_guidance` says whether ``find_unused_parameters=True`` is needed, and which
  parameters would make DDP fail with "Expected to have finished reduction in the prior iteration".
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import nn
from torch.utils._pytree import tree_map_only

from ..verdicts import DynamicVerdict as Dynamic, StaticVerdict as Static

def find_ddp(model: nn.Module) -> "nn.parallel.DistributedDataParallel | None":
    """The DDP wrapper around the user's module, if there is one (possibly under torch.compile)."""
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            return model
        inner = model.__dict__.get("_modules", {}).get("_orig_mod")
        if inner is None:
            return None
        model = inner


def initialized() -> bool:
    """True inside a process group of more than one rank."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank (0 outside a process group)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def all_gather(value: Any, group: Any = None) -> list[Any]:
    """``[value of rank 0, value of rank 1, ...]``; ``[value]`` outside a process group."""
    if not initialized():
        return [value]
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, value, group=group)
    return gathered


# -- FSDP2 ---------------------------------------------------------------------------------
def is_dtensor(tensor: Any) -> bool:
    # A DTensor exists only once its module is imported; importing it here would load it, and
    # sympy with it, into every check of an unsharded model.
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(tensor, module.DTensor)


def _fsdp_base_class(module: nn.Module) -> type | None:
    """The class ``fully_shard`` replaced (it puts ``FSDPModule`` first in a new class's bases)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover
        return None
    bases = type(module).__bases__
    if len(bases) == 2 and bases[0] is FSDPModule:
        return bases[1]
    return None


def class_name(module: nn.Module) -> str:
    """The user's class name, also for a module whose class ``fully_shard`` replaced (``FSDPNet`` -> ``Net``)."""
    base = _fsdp_base_class(module)
    return (base or type(module)).__name__


def is_sharded(model: nn.Module) -> bool:
    """True when some parameter is a ``DTensor`` (FSDP2, tensor parallel)."""
    return any(is_dtensor(p) for p in model.parameters())


@contextlib.contextmanager
def plain_structure(model: nn.Module) -> Iterator[nn.Module]:
    """Inside the block ``model`` is a plain module the static analysis can trace without collectives.

    For an unsharded model this does nothing. For FSDP2: each module's original class is put
    back, FSDP's forward hooks are taken off, and every ``DTensor`` parameter is replaced by a
    meta-device parameter of the full shape (tied parameters stay tied). All of it is undone on exit.
    """
    if not is_sharded(model) and not any(_fsdp_base_class(m) for m in model.modules()):
        yield model
        return
    from .guard import ATTRIBUTES_ONLY, guard

    classes = [(m, type(m)) for m in model.modules()]
    replacements: dict[int, nn.Parameter] = {}
    with guard(model, **ATTRIBUTES_ONLY):
        try:
            for module, _ in classes:
                base = _fsdp_base_class(module)
                if base is not None:
                    module.__class__ = base
                    module._forward_pre_hooks.clear()
                    module._forward_hooks.clear()
                for name, parameter in list(module._parameters.items()):
                    if parameter is None or not is_dtensor(parameter):
                        continue
                    if id(parameter) not in replacements:
                        meta = torch.empty(parameter.shape, dtype=parameter.dtype, device="meta")
                        replacements[id(parameter)] = nn.Parameter(meta, requires_grad=parameter.requires_grad)
                    module._parameters[name] = replacements[id(parameter)]
                for name, buffer in list(module._buffers.items()):
                    if buffer is not None and is_dtensor(buffer):
                        module._buffers[name] = torch.empty(buffer.shape, dtype=buffer.dtype, device="meta")
            yield model
        finally:
            for module, cls in classes:
                module.__class__ = cls


def to_meta(value: Any) -> Any:
    """Tensors (nested in tuples, lists, dicts) as meta tensors of the same shape and dtype."""
    return tree_map_only(torch.Tensor, lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta"), value)


# -- DDP guidance --------------------------------------------------------------------------
DDP_ERROR = "Expected to have finished reduction in the prior iteration before starting a new one"


@dataclass
class DDPGuidance:
    """Whether DistributedDataParallel needs ``find_unused_parameters=True`` for this model, from one
    step or, over many steps, from each parameter's count of steps with a gradient."""

    needed: bool  # some trainable parameter got no gradient in some step
    parameters: list[str] = field(default_factory=list)  # trainable parameters with no gradient in any step
    configured: bool | None = None  # the wrapper's current find_unused_parameters, when known
    intermittent: list[str] = field(default_factory=list)  # over many steps: a gradient in some, not all
    steps: int = 1

    @property
    def will_fail(self) -> bool:
        """DDP without ``find_unused_parameters`` raises at the next forward."""
        return self.needed and self.configured is False

    def message(self) -> str:
        """The advice in one paragraph."""
        if not self.needed:
            every = "on every step" if self.steps > 1 else ""
            if self.configured:
                return (f"DDP: every trainable parameter got a gradient{' ' + every if every else ''}, so "
                        "find_unused_parameters=True is not needed; turning it off saves a graph traversal per iteration")
            if every:
                return f"DDP: every trainable parameter got a gradient {every}: find_unused_parameters=False is safe"
            return "DDP: every trainable parameter got a gradient; find_unused_parameters=True is not needed"
        if self.steps > 1:
            head = self._over_steps()
        else:
            count = len(self.parameters)
            head = f"DDP: {count} trainable parameter{'s' if count != 1 else ''} got no gradient ({_names(self.parameters, 8)})"
        if self.configured:
            return head + "; find_unused_parameters=True is set and is needed for them (or fix the cut, or freeze them)"
        fix = ("Fix the cut, freeze them (requires_grad_(False) before wrapping), or pass "
               "find_unused_parameters=True")
        if self.configured is None:  # no DDP wrapper in this run: what it would do, not what it did
            return (head + f"; under DDP without find_unused_parameters=True the next forward would fail with "
                    f"\"{DDP_ERROR}\". {fix}")
        return (head + f"; without find_unused_parameters=True the next forward will fail with \"{DDP_ERROR}\". "
                f"{fix}. The grad norms shown are this rank's own: DDP left their buckets unreduced")

    def _over_steps(self) -> str:
        dead = (f"{_names(self.parameters)} got no gradient on any of the {self.steps} steps: dead (remove it, or "
                "--allow it)") if self.parameters else ""
        if not self.intermittent:
            return f"DDP: {dead}; every other parameter got one on every step"
        return (f"DDP: {_names(self.intermittent)} got no gradient on some steps: find_unused_parameters=True is required"
                + (f"; {dead}" if dead else ""))


def ddp_guidance(report: Any, ddp: nn.Module | None = None) -> DDPGuidance:
    """DDP advice from a Report: the trainable parameters with a missing gradient (:func:`guidance`)."""
    return guidance(report.parameters, ddp, getattr(report, "steps", 1) or 1)


def guidance(parameters: Iterable[Any], ddp: nn.Module | None = None, steps: int = 1,
             without_gradient: Callable[[str], list[int]] | None = None) -> DDPGuidance:
    """DDP advice from parameter reports.

    DDP only registers parameters with ``requires_grad=True``; each one that gets no gradient in a
    step keeps its bucket from being reduced, and the next forward raises. Over many steps, a
    parameter with a gradient on some steps only needs ``find_unused_parameters=True`` as much as
    one with none; one with none on any step is dead. Without a backward, the static verdicts (cut,
    unused) stand in for the missing gradients.
    """
    trainable = [p for p in parameters if p.static not in (Static.FROZEN, Static.UNREGISTERED)]
    if steps > 1 and without_gradient is not None:  # DDP reduces a zero gradient like any other: None counts
        dry = [p.name for p in trainable if len(without_gradient(p.name)) == steps]
        sometimes = [p.name for p in trainable if 0 < len(without_gradient(p.name)) < steps]
    elif steps > 1:
        dry = [p.name for p in trainable if p.steps_with_gradient == 0 and p.dynamic == Dynamic.MISSING]
        sometimes = [p.name for p in trainable if p.dynamic == Dynamic.INTERMITTENT]
    else:
        dry = sorted(p.name for p in trainable if (
            p.dynamic == Dynamic.MISSING if p.dynamic is not None else p.static in (Static.CUT, Static.UNUSED)))
        sometimes = []
    configured = bool(getattr(ddp, "find_unused_parameters")) if ddp is not None else None
    return DDPGuidance(bool(dry or sometimes), dry, configured, sometimes, steps)


def _names(names: list[str], limit: int = 4) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
