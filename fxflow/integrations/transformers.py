"""``GradientFlowCallback``: check the first optimizer step of a Hugging Face ``Trainer``.

::

    from fxflow.integrations.transformers import GradientFlowCallback

    trainer = Trainer(model, args, train_dataset=data, callbacks=[GradientFlowCallback()])
    trainer.train()   # prints the report once (main process); raises GradientFlowError on a problem

Parameter names are those of the model given to the ``Trainer`` (a PEFT model's own names under
LoRA: the frozen base is ``frozen``, never a problem; only trainable parameters can fail).
Install with ``pip install fxflow[transformers]``.
"""
from __future__ import annotations

import copy
import sys
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback
from transformers.trainer_callback import CallbackHandler

from .first_step import FirstStepCallback, GradientFlowError, GradientFlowWarning, history_metrics

if TYPE_CHECKING:  # pragma: no cover
    from transformers import TrainerControl, TrainerState, TrainingArguments

__all__ = ["GradientFlowCallback", "GradientFlowError", "GradientFlowWarning"]


class GradientFlowCallback(FirstStepCallback, TrainerCallback):
    """Watch the first optimizer step with ``fxflow.watch``; raise or warn when a parameter gets no gradient.

    Options: see :class:`fxflow.integrations.first_step.FirstStepCallback`. With ``steps=N`` the
    per-layer gradient norms of the watched steps go to the Trainer's reporters (``report_to``:
    TensorBoard, W&B, MLflow...) as ``fxflow/grad_mean/<layer>``, ``fxflow/grad_max/<layer>`` and
    ``fxflow/update_ratio/<layer>``, each at the global step it was measured in.
    """

    _first_step: int | None = None  # the Trainer's global step when watching began

    def on_step_begin(self, args: "TrainingArguments", state: "TrainerState", control: "TrainerControl",
                      model: Any = None, **kwargs: Any) -> None:
        if self._first_step is None:
            self._first_step = state.global_step
        # the optimizer and scheduler the Trainer built (the handler passes them with every event)
        self.check.begin(model, kwargs.get("optimizer"), kwargs.get("lr_scheduler"))

    def on_pre_optimizer_step(self, args: "TrainingArguments", state: "TrainerState", control: "TrainerControl",
                              **kwargs: Any) -> None:
        # The Trainer clips before this hook: norms are scaled, verdicts (relative) are not.
        notes = [f"grad norms are read after the Trainer's gradient clipping (max_grad_norm={args.max_grad_norm})"] \
            if args.max_grad_norm and args.max_grad_norm > 0 else []
        self._log(args, state, control, self.check.end(notes), kwargs)

    def on_train_end(self, args: "TrainingArguments", state: "TrainerState", control: "TrainerControl",
                     **kwargs: Any) -> None:
        self._log(args, state, control, self.check.finish(), kwargs)

    def _log(self, args: "TrainingArguments", state: "TrainerState", control: "TrainerControl", report: Any,
             event: dict[str, Any]) -> None:
        """Hand the watched steps' per-layer norms to the Trainer's reporters, one log per step.

        A callback is not given the Trainer, and the reporters' ``on_log`` runs before a user
        callback's, so the norms cannot ride on the Trainer's own log: they go to each reporter
        directly, with the global step they belong to, and stay out of ``state.log_history``.
        """
        metrics = history_metrics(report)
        handler = _calling_handler() if metrics else None
        reporters = [callback for callback in handler.callbacks if _is_reporter(callback)] if handler else []
        for step, values in metrics if reporters else ():
            at_step = copy.copy(state)
            at_step.global_step = (self._first_step or 0) + step
            for reporter in reporters:
                reporter.on_log(args, at_step, control, logs=dict(values), **event)


def _calling_handler() -> CallbackHandler | None:
    """The Trainer's callback handler that is running the current event (found up the call stack)."""
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, CallbackHandler):
            return candidate
        frame = frame.f_back
    return None


def _is_reporter(callback: Any) -> bool:
    """Whether ``callback`` is one of the loggers ``report_to`` installs (TensorBoard, W&B, MLflow...)."""
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    return isinstance(callback, tuple(INTEGRATION_TO_CALLBACK.values()))
