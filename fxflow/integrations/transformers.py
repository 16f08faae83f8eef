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

from typing import TYPE_CHECKING, Any, Iterable

from transformers import TrainerCallback

from .first_step import FirstStepCheck, GradientFlowError, GradientFlowWarning

if TYPE_CHECKING:  # pragma: no cover
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from ..report import Report

__all__ = ["GradientFlowCallback", "GradientFlowError", "GradientFlowWarning"]


class GradientFlowCallback(TrainerCallback):
    """Watch the first optimizer step with ``fxflow.watch``; raise or warn when a parameter gets no gradient.

    ``on_problem``: ``"raise"`` (:class:`GradientFlowError`, before the optimizer steps) or ``"warn"``
    (:class:`GradientFlowWarning`, training goes on). ``allow``: glob patterns of parameters allowed to
    be dry; ``vanishing``: the RMS factor below which a gradient is vanishing; ``static=False`` skips
    the trace; ``show=False`` does not print the report.
    """

    def __init__(self, *, on_problem: str = "raise", allow: Iterable[str] = (), vanishing: float = 1e-3,
                 static: bool = True, show: bool = True) -> None:
        self.check = FirstStepCheck(on_problem=on_problem, allow=allow, vanishing=vanishing, static=static,
                                    show=show)

    @property
    def report(self) -> "Report | None":
        """The first step's Report (None until that step's grads are complete)."""
        return self.check.report

    def on_step_begin(self, args: "TrainingArguments", state: "TrainerState", control: "TrainerControl",
                      model: Any = None, **kwargs: Any) -> None:
        self.check.begin(model)

    def on_pre_optimizer_step(self, args: "TrainingArguments", state: "TrainerState", control: "TrainerControl",
                              **kwargs: Any) -> None:
        # The Trainer clips before this hook: norms are scaled, verdicts (relative) are not.
        notes = [f"grad norms are read after the Trainer's gradient clipping (max_grad_norm={args.max_grad_norm})"] \
            if args.max_grad_norm and args.max_grad_norm > 0 else []
        self.check.end(notes)

    def on_train_end(self, args: "TrainingArguments", state: "TrainerState", control: "TrainerControl",
                     **kwargs: Any) -> None:
        self.check.finish()
