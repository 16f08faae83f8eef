"""The backward of a model that lives on the meta device, riding on the run-time capture's forward.

A model built on meta (``fxflow check --device meta``) has no values to compute with: its check
reads which parameters a gradient reaches, not how large. :func:`fxflow.dynamic.probe.probe` with
``fake=True`` answers that with a forward and backward of its own on fake twins of the weights.
:class:`MetaProbe` runs that forward once on the model's own meta tensors with autograd on,
recorded for the capture stage as the real probe's is, and differentiates its outputs: one
forward, not two (on a LLaMA-7B config each meta forward costs about a second and a half).

The result is the fake probe's, field for field: which parameters got a ``.grad``, the loss
differentiated and where it sits among the outputs. Where this run cannot answer (forward raised
or returned nothing to differentiate, the backward raised), :attr:`MetaProbe.result` stays None
and the caller runs the fake probe as before, so every verdict is the one the fake probe gives.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from ..static.flow import call_tensors
from .gradients import GradInfo
from .no_derivative import StopAtMissingDerivatives
from .loss import floating_outputs, training_loss
from .probe import ProbeResult, RecordedForward

if TYPE_CHECKING:  # pragma: no cover
    from ..capture import Recorded


def on_meta(model: torch.nn.Module, example: tuple[Any, ...] | None) -> bool:
    """Every parameter, buffer and example tensor lives on meta: a forward of ``model`` computes nothing."""
    tensors = list(model.parameters()) + list(model.buffers())
    tensors += [x for x in example or () if isinstance(x, torch.Tensor)]
    return bool(tensors) and all(t.is_meta for t in tensors)


class MetaProbe:
    """The fake probe's answer, read from the backward of one recorded meta forward (:meth:`run`).

    Use inside :func:`fxflow.prepare.state.untouched`, which starts every ``.grad`` at None and puts
    the user's back. :attr:`recorded` is the recording, for the capture stage.
    """

    def __init__(self, model: torch.nn.Module, *, loss_fn: Callable[[Any], torch.Tensor] | None = None,
                 labels_given: bool = False) -> None:
        self.model = model
        self.loss_fn = loss_fn
        self.labels_given = labels_given
        self.result: ProbeResult | None = None
        self.recorded: Recorded | None = None

    def run(self, inputs: Sequence[Any]) -> ProbeResult | None:
        """The recorded meta forward on ``inputs``, then :meth:`backward`; None where the fake probe must answer."""
        forward = RecordedForward(self.model, inputs)
        with forward:
            try:
                outputs = forward.run(self.forward, lambda: self._stops.rebased)
            except Exception:  # noqa: BLE001 - the fake probe then runs and reports it as it always did
                outputs = None
            if outputs is not None:
                self.backward(outputs)
        self.recorded = forward.recorded
        return self.result

    def forward(self, call: Callable[[], Any]) -> Any:
        """Run ``call`` as the fake probe runs forward: ops with no derivative stop the backward
        instead of raising it. Errors propagate unchanged, so the capture fails as it would alone."""
        self._stops = _MetaOnly()
        with torch.enable_grad(), self._stops:
            return call()

    def backward(self, outputs: Any) -> None:
        """Differentiate the training loss of ``outputs`` (seed 0, as the fake probe does) and note
        which parameters a gradient reached; on any failure leave :attr:`result` None."""
        if self._stops.real or not floating_outputs(outputs):
            return
        try:
            with torch.enable_grad():
                loss = training_loss(outputs, self.loss_fn, 0, self.labels_given)
                if isinstance(loss.tensor, torch.Tensor) and loss.tensor.requires_grad:
                    loss.tensor.backward()
        except Exception:  # noqa: BLE001 - the fake probe then runs and reports it as it always did
            return
        grads = {name: GradInfo(present=parameter.grad is not None)
                 for name, parameter in self.model.named_parameters()}
        self.result = ProbeResult(grads, measurable=False, loss=loss.description,
                                  loss_output=loss.output_index)


class _MetaOnly(StopAtMissingDerivatives):
    """The probe's forward mode, also noting whether any call saw a tensor that is not on meta.

    Such a tensor is one forward made itself (``torch.rand([])`` for a layer drop, without a
    device): on fake tensors the fake mode takes it over, and a data-dependent branch on it raises
    there, where on meta it runs on real values. The two runs then differ, and the fake probe's
    answer is the one the check gives.
    """

    real = False

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        result = super().__torch_function__(func, types, args, kwargs)
        if not self.real and not all(t.is_meta for t in call_tensors((args, kwargs or {}, result))):
            self.real = True
        return result
