"""``GradientFlowCheck``: check the first optimizer step of a PyTorch Lightning ``Trainer``.

::

    from fxflow.integrations.lightning import GradientFlowCheck

    trainer = pl.Trainer(max_steps=100, callbacks=[GradientFlowCheck()])
    trainer.fit(module, loader)   # prints the report once (rank 0); raises GradientFlowError on a problem

Parameter names are those of the ``LightningModule``. The static half (which line cut a
parameter) needs ``training_step`` to call the module itself (``self(x)``): the forward's inputs
are recorded there; otherwise the report has the real backward's verdicts only, and says so.
Install with ``pip install fxflow[lightning]``.
"""
from __future__ import annotations

from typing import Any

import pytorch_lightning as pl

from .first_step import FirstStepCallback, GradientFlowError, GradientFlowWarning, history_metrics

__all__ = ["GradientFlowCheck", "GradientFlowError", "GradientFlowWarning"]


class GradientFlowCheck(FirstStepCallback, pl.Callback):
    """Watch the first optimizer step with ``fxflow.watch``; raise or warn when a parameter gets no gradient.

    Options: see :class:`fxflow.integrations.first_step.FirstStepCallback`.
    """

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self.check.begin(pl_module, trainer.optimizers, trainer.lr_scheduler_configs)  # what configure_optimizers gave

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        # Lightning calls this after the backward (and AMP unscaling), before it clips: the grads are raw.
        self._log(trainer, self.check.end())

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._log(trainer, self.check.finish())

    @staticmethod
    def _log(trainer: pl.Trainer, report: Any) -> None:
        """The per-layer gradient norms of the watched steps, to the trainer's own logger when it
        has one (TensorBoard, W&B, CSV...), each at the step it was measured in (:func:`history_metrics`)."""
        for step, metrics in history_metrics(report) if trainer.loggers else ():
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step - 1)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.check.abandon()
