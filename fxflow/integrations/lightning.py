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

from typing import Any, Iterable

import pytorch_lightning as pl

from .first_step import FirstStepCheck, GradientFlowError, GradientFlowWarning
from ..report import Report

__all__ = ["GradientFlowCheck", "GradientFlowError", "GradientFlowWarning"]


class GradientFlowCheck(pl.Callback):
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
    def report(self) -> Report | None:
        """The first step's Report (None until that step's grads are complete)."""
        return self.check.report

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self.check.begin(pl_module)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        # Lightning calls this after the backward (and AMP unscaling), before it clips: the grads are raw.
        self.check.end()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.check.finish()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.check.abandon()
