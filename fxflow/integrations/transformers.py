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

from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from .first_step import FirstStepCallback, GradientFlowError, GradientFlowWarning

if TYPE_CHECKING:  # pragma: no cover
    from transformers import TrainerControl, TrainerState, TrainingArguments

__all__ = ["GradientFlowCallback", "GradientFlowError", "GradientFlowWarning"]


class GradientFlowCallback(FirstStepCallback, TrainerCallback):
    """Watch the first optimizer step with ``fxflow.watch``; raise or warn when a parameter gets no gradient.

    Options: see :class:`fxflow.integrations.first_step.FirstStepCallback`.
    """

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
