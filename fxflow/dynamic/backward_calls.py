"""The backward calls of a watched training loop, each seen as autograd produced it.

``fxflow.watch`` never reads what ``.grad`` holds when its block ends: by then the loop has
stepped, cleared, accumulated, clipped or unscaled it. :class:`BackwardCalls` hooks every
trainable parameter and notes, per backward call, the gradient autograd produced for it, before
it is added into ``.grad``::

    BackwardCalls.install()
      ├─ started()        the model's outputs receive their gradient: a backward call begins
      │                   (the parameters' versions are read: an optimizer step changes them)
      ├─ the parameter hooks
      │    ├─ plain tensors: a gradient hook, called with this call's gradient
      │    └─ DTensors (FSDP2): after the reduce-scatter, the change in ``.grad``
      ├─ ended()          autograd finished the call (DDP's averaged gradient is read then)
      └─ remove()         the block ended: was the last call followed by an optimizer step?

A call is *followed by an update* when an optimizer step ran on the model's parameters, or any of
them changed in place (a hand-written SGD loop), before the next call began; the optimizer step a
call belongs to is one more than the updates before it, so the micro-batches of gradient
accumulation share one. A call whose gradients hold inf or NaN and that no update followed is a
*skipped* step (a ``GradScaler`` calibrating its scale): it is not judged. The gradients of a loss
scaled by a ``GradScaler`` are divided by the scale the scaler stepped them with.

Only ``judged`` calls (not skipped) are recorded in full (norms, per-layer statistics); after
them, calls are followed only to see whether the parameters with no non-zero gradient so far
get one (a zero-initialized weight that held them has moved; a later batch took a branch the
first did not), for at most :data:`CONFIRMING_STEPS` more optimizer steps; then the hooks come off.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from ..core.distributed import find_ddp, is_dtensor
from ..core.tensors import magnitude_sum
from .gradients import LocalGrad, local_grad
from .health import HealthRecorder

CONFIRMING_STEPS = 4  # optimizer steps a zero is followed for after the judged calls, as the look-ahead's


@dataclass
class BackwardCall:
    """One backward call of the loop and the gradients it produced."""

    index: int  # 1-based, in the order the loop ran them
    update: int  # optimizer updates seen before it began: its optimizer step is update + 1
    versions: tuple[int, ...]  # the parameters' versions when it began
    full: bool  # recorded in full (a judged call); otherwise only ``pending``
    summarized: bool  # the first judged call (unless skipped): its gradients' norms are read too
    task: int  # autograd's graph task: the output hooks of one call share it
    pending: frozenset[str] = frozenset()  # a confirming call: the parameters exactly zero so far
    grads: dict[str, LocalGrad] = field(default_factory=dict)  # summarized: the parameters it reached
    totals: dict[str, float] = field(default_factory=dict)  # sum of |g| (0: exactly zero; inf/NaN kept)
    updated_after: bool = False  # an optimizer step (or an in-place change of a parameter) followed it
    scale: float = 1.0  # the loss scale its gradients carry (a GradScaler's), divided out when read
    closed: bool = False  # whether an update followed it is decided (when the next call begins, or at the end)

    @property
    def nonfinite(self) -> bool:
        return any(not math.isfinite(total) for total in self.totals.values())

    @property
    def skipped(self) -> bool:
        """inf or NaN and no update after it: the step was skipped (a GradScaler's calibration)."""
        return self.nonfinite and not self.updated_after

    @property
    def optimizer_step(self) -> int:
        return self.update + 1


class BackwardCalls:
    """Observes every backward call through ``module``'s parameters (see the module docstring).

    ``judged``: how many calls (skipped ones not counted) are recorded in full; ``health``: the
    per-layer statistics of those calls, when the loop's history is wanted; ``extra``: tensors
    outside ``model.parameters()`` that may get gradients too (by path), recorded alike."""

    def __init__(self, model: nn.Module, module: nn.Module, *, judged: int,
                 health: HealthRecorder | None = None, extra: dict[str, torch.Tensor] | None = None,
                 on_start: Callable[[BackwardCall], None] | None = None) -> None:
        self.model = model  # what the user passed (DDP, FSDP2, compiled or plain)
        self.judged = judged
        self.health = health
        self.calls: list[BackwardCall] = []
        self.updates = 0
        self.on_start = on_start
        self._named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        self._by_name = dict(self._named)
        self.extra = {path: t for path, t in (extra or {}).items() if t.requires_grad and t.is_leaf}
        self.done = False  # nothing left to follow: later calls are not looked at
        self.total = 0  # backward calls seen in all
        self._last_task: int | None = None
        self._ids = {id(p) for _, p in self._named}
        self._ddp = find_ddp(model) is not None
        self._running = False  # between started() and ended()
        self._stepped = False  # an optimizer step ran since the current call began
        self._before: dict[str, torch.Tensor | None] = {}  # .grad when a reduced call began (DDP, FSDP2)
        self._handles: list[Any] = []

    # -- installing --------------------------------------------------------------------------
    def install(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        for name, parameter in [*self._named, *self.extra.items()]:
            if is_dtensor(parameter):  # FSDP2 gives the sharded parameter its .grad after a reduce-scatter
                self._handles.append(parameter.register_post_accumulate_grad_hook(self._sharded_hook(name)))
            else:
                self._handles.append(parameter.register_hook(self._hook(name)))
        # Every optimizer's steps (filtered to the ones holding this model's parameters): a fused
        # optimizer changes the parameters without bumping their versions.
        self._handles += [register_optimizer_step_pre_hook(self._pre_step),
                          register_optimizer_step_post_hook(self._post_step)]

    def remove(self, *, last_pending: bool = False) -> None:
        """Take the hooks off; the last call learns whether an update followed it (``last_pending``:
        its optimizer step comes after watching ends, a trainer callback's case, so it is not asked)."""
        self._unhook()
        if self.calls and not last_pending:
            self._close(self.calls[-1])

    def _unhook(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- the calls ---------------------------------------------------------------------------
    def started(self) -> BackwardCall | None:
        """A backward call through the model's outputs begins (every output hook of it calls this);
        None once nothing is left to follow."""
        task = torch._C._current_graph_task_id()
        if self._running and self.calls and self.calls[-1].task == task:
            return self.calls[-1]
        if task != self._last_task:
            self.total += 1  # every backward call through the outputs, followed or not
            self._last_task = task
        if self.done:
            return None
        if self.calls:
            self._close(self.calls[-1])
        if not self.following():
            self.done = True
            self._unhook()  # the rest of the loop runs without fxflow
            return None
        self._running = True
        judged = sum(1 for call in self.calls if call.full and not call.skipped)
        full = judged < self.judged
        call = BackwardCall(len(self.calls) + 1, self.updates, self._versions(), full, judged == 0, task,
                            frozenset() if full else frozenset(self.still_zero()))
        self.calls.append(call)
        self._stepped = False
        if self.on_start is not None:
            self.on_start(call)
        if call.summarized and (self._ddp or self._sharded()):  # the reduced gradient: a change of .grad
            self._before = {name: (p.grad.detach().clone() if p.grad is not None else None) for name, p in self._named}
        engine = torch.autograd.Variable._execution_engine
        engine.queue_callback(lambda: engine.queue_callback(self.ended))  # after DDP's own final callback
        return call

    def ended(self) -> None:
        """autograd finished the current call: under DDP, the averaged gradients are in ``.grad`` now."""
        self._running = False
        call = self.calls[-1] if self.calls else None
        if call is not None and call.summarized and self._ddp:
            for name, parameter in self._named:
                if name in call.grads and parameter.grad is not None:
                    call.grads[name] = self._summary(self._change(name, parameter.grad), call)
        self._before = {}  # later calls' changes of .grad are read from .grad as it is

    def following(self) -> bool:
        """Whether later calls still need to be watched: judged calls are missing, or exact zeros
        wait for an update to lift them (for at most :data:`CONFIRMING_STEPS` optimizer steps)."""
        full = [call for call in self.calls if call.full and not call.skipped]
        if len(full) < self.judged:
            return True
        return self.updates - full[-1].update <= CONFIRMING_STEPS and bool(self.still_zero())

    def still_zero(self) -> set[str]:
        """The parameters that no call seen so far (skipped ones aside) gave a non-zero gradient:
        exactly zero (a zero-init may hold them) or none at all (a later batch may reach them)."""
        seen = [call for call in self.calls if not call.skipped]
        if not seen:
            return set()
        waiting = {name for name in self._by_name if seen[0].totals.get(name, 0.0) == 0.0}
        for call in seen[1:]:
            waiting = {name for name in waiting if call.totals.get(name, 0.0) == 0.0}
        return waiting

    # -- hooks -------------------------------------------------------------------------------
    def _current(self) -> BackwardCall | None:
        """The call this gradient belongs to (a reentrant checkpoint's inner backward: the call
        running it); a backward that did not pass through the outputs begins one."""
        return self.calls[-1] if self._running else self.started()

    def _hook(self, name: str) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            call = self._current()
            if call is not None and grad is not None:
                self._record(call, name, grad)

        return hook

    def _sharded_hook(self, name: str) -> Callable[[torch.Tensor], None]:
        def hook(parameter: torch.Tensor) -> None:
            call = self._current()
            if call is not None and parameter.grad is not None:
                self._record(call, name, self._change(name, parameter.grad))

        return hook

    def _record(self, call: BackwardCall, name: str, grad: torch.Tensor) -> None:
        if not call.full and name not in call.pending:
            return  # a confirming call: only the zeros waiting to be lifted matter
        values = grad.detach()
        if call.full and self.health is not None:
            total = self.health.record(call.index, name, self._by_name[name], values) if name in self._by_name \
                else _total(values)
        else:
            total = _total(values)
        call.totals[name] = call.totals.get(name, 0.0) + total
        if call.summarized:
            call.grads[name] = self._summary(values, call)

    def _summary(self, grad: torch.Tensor, call: BackwardCall) -> LocalGrad:
        summary = local_grad(grad)
        if call.scale != 1.0 and summary.finite:
            summary.sum_squares /= call.scale ** 2
        return summary

    def _change(self, name: str, grad: torch.Tensor) -> torch.Tensor:
        before = self._before.get(name)
        return grad.detach() - before if before is not None else grad.detach()

    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._holds(optimizer):
            return
        scale = _loss_scale()
        if scale is not None and scale != 1.0:  # the calls since the last update carry this scale
            for call in reversed(self.calls):
                if call.update != self.updates:
                    break
                self._rescale(call, scale)

    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        found_inf = kwargs.get("found_inf") if isinstance(kwargs, dict) else None
        if self._holds(optimizer) and not (isinstance(found_inf, torch.Tensor) and bool(found_inf.any())):
            self._stepped = True  # a fused optimizer given found_inf by a GradScaler skips inside its kernel

    def _holds(self, optimizer: torch.optim.Optimizer) -> bool:
        return any(id(p) in self._ids for group in optimizer.param_groups for p in group["params"])

    def _rescale(self, call: BackwardCall, scale: float) -> None:
        if call.scale != 1.0:
            return
        call.scale = scale
        for summary in call.grads.values():
            if summary.finite:
                summary.sum_squares /= scale ** 2
        call.totals = {name: total / scale for name, total in call.totals.items()}
        if call.full and self.health is not None:
            self.health.rescale(call.index, scale)

    # -- updates -----------------------------------------------------------------------------
    def _close(self, call: BackwardCall) -> None:
        """Whether an update followed ``call``: an optimizer step ran, or a parameter changed in place."""
        if call.closed:
            return  # decided when the next call began: later steps belong to later calls
        call.closed = True
        call.updated_after = self._stepped or self._versions() != call.versions
        if call.updated_after:
            self.updates += 1
        elif call.skipped and self.health is not None:
            self.health.drop(call.index)

    def _versions(self) -> tuple[int, ...]:
        return tuple(p._version for _, p in self._named)

    def _sharded(self) -> bool:
        return any(is_dtensor(p) for _, p in self._named)


def _total(values: torch.Tensor) -> float:
    """sum |g|: exactly 0 only for an exactly zero gradient; inf and NaN propagate."""
    if values.is_sparse:
        values = values.coalesce().values()
    return magnitude_sum(values.abs()) if values.numel() else 0.0


def _loss_scale() -> float | None:
    """The scale of the ``GradScaler`` stepping the optimizer now (its ``step`` is on the stack), if any."""
    from torch.amp import GradScaler

    frame = sys._getframe(1)
    for _ in range(12):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, GradScaler):
            return float(owner.get_scale())
        frame = frame.f_back
    return None
