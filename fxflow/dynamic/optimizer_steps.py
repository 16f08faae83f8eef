"""What ``optimizer.step()`` did while a training loop was watched (``fxflow.watch(optimizer=...)``
and the trainer callbacks; ``check`` takes no step).

:class:`StepLog` observes each step through the optimizer's own step hooks
(``register_step_pre_hook`` / ``register_step_post_hook``, removed when watching ends; the
optimizer itself is not changed): the lr each group ran with, and, per model parameter that had a
non-zero gradient then, whether the step moved it at all (its value before and after, compared
exactly). The watch tells it where each backward call began, so a backward that no step followed
is a skipped step: a ``GradScaler`` that found inf or NaN in the gradients, or a loop that did not
call ``optimizer.step()``.
"""
from __future__ import annotations

from typing import Any, Iterable

import torch
from torch import nn

from ..core.records import SkippedStep
from ..verdicts import OptimizerReason

NONFINITE_SKIP = "the gradients held inf or NaN, and a GradScaler skips optimizer.step() then, lowering its scale"
NOT_CALLED = "optimizer.step() was not called in the watched block (gradient accumulation, or a loop that never steps)"


class StepLog:
    """The optimizer steps taken while watching (see the module docstring)."""

    def __init__(self, optimizers: Iterable[torch.optim.Optimizer], module: nn.Module) -> None:
        self.optimizers = list(optimizers)
        named = dict(module.named_parameters())
        self._name_of = {id(p): name for name, p in named.items()}
        self._tasks: list[int] = []  # the backward calls, by autograd graph task
        self.after: dict[int, int] = {}  # backward call (1-based) -> optimizer.step() calls after it
        self.steps_run = 0
        self.with_gradient: dict[str, int] = {}  # parameter -> steps that ran while it had a non-zero gradient
        self.at_zero_lr: dict[str, int] = {}  # ... of which its group's lr was 0
        self.moved: set[str] = set()
        self._before: dict[str, torch.Tensor] = {}  # the values a running step started from (buffers reused)
        self._pending: list[tuple[str, nn.Parameter]] = []
        self._handles = [hook for optimizer in self.optimizers
                         for hook in (optimizer.register_step_pre_hook(self._pre_step),
                                      optimizer.register_step_post_hook(self._post_step))]

    def backward(self, task: int) -> None:
        """A backward call is running (any number of calls per call; one per graph task counts)."""
        if task not in self._tasks:
            self._tasks.append(task)

    @property
    def backwards(self) -> int:
        return len(self._tasks)

    def remove(self) -> None:
        """Take the hooks off the optimizers and let the buffers go."""
        for handle in self._handles:
            handle.remove()
        self._handles, self._before, self._pending = [], {}, []

    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        # Every held parameter's value, grad or not: Lightning runs the backward inside step(closure),
        # after this hook, so whether it had a gradient is read after the step.
        self._pending = []
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                name = self._name_of.get(id(parameter))
                if name is None or not parameter.requires_grad or name in self.moved:
                    continue  # not the model's, frozen, or already known to move: no copy needed
                buffer = self._before.get(name)
                if buffer is None or buffer.shape != parameter.shape or buffer.dtype != parameter.dtype:
                    buffer = self._before[name] = torch.empty_like(parameter.detach())
                buffer.copy_(parameter.detach())
                self._pending.append((name, parameter))

    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        pending = dict(self._pending)
        for group in optimizer.param_groups:
            at_zero = float(group["lr"]) == 0.0  # the lr this step used: schedulers step after it
            for parameter in group["params"]:
                name = self._name_of.get(id(parameter))
                if name is None or not _nonzero(parameter.grad):
                    continue
                self.with_gradient[name] = self.with_gradient.get(name, 0) + 1
                self.at_zero_lr[name] = self.at_zero_lr.get(name, 0) + at_zero
                if name in pending and not torch.equal(self._before[name], parameter.detach()):
                    self.moved.add(name)
        self._pending = []
        self.steps_run += 1
        call = max(self.backwards, 1)
        self.after[call] = self.after.get(call, 0) + 1

    def skipped(self, nonfinite_steps: Iterable[int] = (), *, last_pending: bool = False) -> list[SkippedStep]:
        """The backward calls no ``optimizer.step()`` followed, and why. ``nonfinite_steps``: the
        calls whose gradients held inf or NaN (a GradScaler's skips); ``last_pending``: the last
        call's step comes after watching ends (a trainer callback), so it is not judged.

        A backward with finite gradients and no step after it is gradient accumulation as often as
        a bug: such calls are listed only when no step ran at all over two or more of them."""
        nonfinite = set(nonfinite_steps)
        judged = [call for call in range(1, self.backwards + (0 if last_pending else 1)) if not self.after.get(call)]
        found = [SkippedStep(call, NONFINITE_SKIP) for call in judged if call in nonfinite]
        if not found and self.steps_run == 0 and len(judged) >= 2:
            found = [SkippedStep(call, NOT_CALLED) for call in judged]
        return found

    def unmoved(self, name: str) -> tuple[OptimizerReason, int] | None:
        """What the steps did to ``name`` when it had a gradient on some step that ran but was never moved:
        the code (its group's lr was 0 on each, or the step left it exactly unchanged) and how many such
        steps ran; None when it moved or had no gradient when a step ran. Words: fxflow.present."""
        count = self.with_gradient.get(name, 0)
        if name in self.moved or count == 0:
            return None
        if self.at_zero_lr.get(name, 0) == count:
            return OptimizerReason.ZERO_LR_STEPS, count
        return OptimizerReason.UNCHANGED, count


def _nonzero(grad: torch.Tensor | None) -> bool:
    if grad is None:
        return False
    values = grad.coalesce().values() if grad.is_sparse else grad
    return bool(values.any())
