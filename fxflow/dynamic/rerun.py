"""The same step again, lean: the user's forward and one backward of the same loss, read out as the
parameters' gradients and nothing else.

The look-ahead (:mod:`fxflow.dynamic.lookahead`), the redraws (:mod:`fxflow.dynamic.redraw`) and the
round-off recheck (:mod:`fxflow.dynamic.rounding`) each run the checked step again and read one thing
from it: every parameter's gradient. What the first run (:class:`fxflow.dynamic.probe.ModelRun`) set
up is reused, and nothing else is built: no recording, no backward trace, no per-module norms, no
random state kept for a replay, no fresh search for the tensors outside ``model.parameters()``. A
rerun costs one call of the user's forward and one backward, as a training step does.

What a rerun keeps from the first run, and why:

- the random state the first run started from (the same dropout draws, unless the caller asks for
  other draws);
- the tensors the first run found outside ``model.parameters()`` (:mod:`fxflow.dynamic.unregistered`):
  their ``.grad`` is cleared around the rerun and put back, since the user's model is never changed;
- the stops at ops with no derivative (:mod:`fxflow.dynamic.no_derivative`), only where the first
  run's forward rebased a result at one: the same forward on the same inputs and draws meets the same
  ops, so a forward that met none needs none. A rerun from other draws (a redraw may take another
  branch) is watched by them always;
- the training loss, chosen as for the first run (:func:`fxflow.dynamic.loss.training_loss`).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Sequence

import torch

from ..core.observer import ForwardPart
from ..core.guard import Saved, save
from ..core.user_hooks import post_accumulate_hooks_paused
from .gradients import GradInfo, read_gradients
from .loss import TrainingLoss, floating_outputs
from .no_derivative import StopAtMissingDerivatives


class Rerun:
    """The first run's step again, as often as asked: ``rerun(inputs)`` gives each parameter's
    :class:`GradInfo` (None where forward or backward raised). The gradients are left in ``.grad``."""

    def __init__(self, model: torch.nn.Module, loss: Callable[[Any], TrainingLoss], random_state: Saved,
                 unregistered: dict[str, torch.Tensor], stops: bool) -> None:
        self.model = model
        self.loss = loss
        self.random_state = random_state  # the global generators as the first run's forward found them
        self.unregistered = list(unregistered.values())  # the first run's, on ``model``
        self.stops = stops  # the first run's forward rebased a result at an op with no derivative
        self.parameters = dict(model.named_parameters())  # the look-ahead moves their data, not the objects

    def __call__(self, inputs: Sequence[Any], same_draws: bool = True, watchers: Sequence[ForwardPart] = (),
                 model: torch.nn.Module | None = None) -> dict[str, GradInfo] | None:
        """Forward and backward once more on ``inputs``, from the first run's random draws
        (``same_draws=False``: from the generators as the caller left them), ``watchers`` watching
        its forward; on ``model`` when given (a throwaway float64 copy: nothing on it is put back)."""
        if same_draws:
            self.random_state.restore()
        target = self.model if model is None else model
        kept = save(grads_of=self.unregistered if model is None else (), fresh_grads=True, rng=False)
        try:
            parameters = self.parameters if model is None else dict(model.named_parameters())
            if not self._step(target, parameters.values(), inputs, watchers, stops=self.stops or not same_draws):
                return None
            return read_gradients({name: p.grad for name, p in parameters.items()})[0]
        finally:
            kept.restore()

    def _step(self, model: torch.nn.Module, parameters: Iterable[torch.Tensor], inputs: Sequence[Any],
              watchers: Sequence[ForwardPart], stops: bool) -> bool:
        """One forward and backward of the training loss; False where either raised."""
        try:
            with torch.enable_grad(), contextlib.ExitStack() as watching:
                for part in (*watchers, *([StopAtMissingDerivatives()] if stops else [])):
                    watching.enter_context(part)
                outputs = model(*inputs)
            if not floating_outputs(outputs):
                return False
            loss = self.loss(outputs).tensor
            if isinstance(loss, torch.Tensor) and loss.requires_grad:
                with torch.enable_grad(), post_accumulate_hooks_paused(parameters):
                    loss.backward()
        except Exception:  # noqa: BLE001 - the model's own error, as the first run reports it: this run tells nothing
            return False
        return True
