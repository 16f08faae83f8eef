"""What every trainer callback does: watch the first optimizer step, print the report, raise or warn.

The framework-specific callbacks (:mod:`fxflow.integrations.transformers`,
:mod:`fxflow.integrations.lightning`) only translate their framework's hooks into
:meth:`FirstStepCheck.begin` (before the first forward), :meth:`FirstStepCheck.end` (gradients
accumulated, optimizer not yet stepped), :meth:`FirstStepCheck.finish` (training ended) and
:meth:`FirstStepCheck.abandon` (the step failed).
The check itself is :class:`fxflow.Watch`, so the verdicts are those of ``fxflow.watch`` with
the user's real loss, and the grads the optimizer then sees are untouched.

An exactly zero gradient on the first step is not yet a verdict when the trace did not prove it:
a zero-initialized weight downstream (LoRA's ``B``, a zero-init residual branch) zeroes the
gradient of everything before it until the first optimizer step moves it. Such a step is
confirmed on the second step, whose report is then the one shown and acted on.
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from ..report import Report
    from ..watching import Watch

ON_PROBLEM = ("raise", "warn")
MAX_CONFIRMING_STEPS = 4  # as the look-ahead: a zero that lifts on step 4 at the latest is told apart


class GradientFlowError(RuntimeError):
    """Raised (on every rank) when the first step leaves trainable parameters without a usable gradient."""

    def __init__(self, report: "Report") -> None:
        from ..testing import failure_message

        super().__init__(failure_message(report))
        self.report = report


class GradientFlowWarning(UserWarning):
    """Warned (on rank 0) instead of raising, with ``on_problem="warn"``."""


class FirstStepCheck:
    """Watch the first training step with :class:`fxflow.Watch` (the second too when it must confirm
    exactly zero gradients), then print its Report once, and raise or warn on a problem."""

    def __init__(self, *, on_problem: str = "raise", allow: Iterable[str] = (), vanishing: float = 1e-3,
                 static: bool = True, show: bool = True, steps: int = 1) -> None:
        if steps < 1:
            raise ValueError(f"steps must be at least 1, got {steps}")
        if on_problem not in ON_PROBLEM:
            raise ValueError(f"on_problem must be one of {', '.join(map(repr, ON_PROBLEM))}, got {on_problem!r}")
        self.on_problem = on_problem
        self.allow = tuple(allow)
        self.vanishing = vanishing
        self.static = static
        self.show = show
        self.steps = steps  # backward calls watched before the report (fxflow.dynamic.steps)
        self._notes: list[str] = []  # the framework's notes from the steps watched so far
        self.report: Report | None = None  # the Report acted on, once checked
        self._watch: Watch | None = None
        # The steps watched so far whose exactly zero gradients wait for a later step to confirm them,
        # and per such parameter the step from which its gradient was non-zero.
        self._unconfirmed: list[Watch] = []
        self._learned: dict[str, int] = {}

    @property
    def done(self) -> bool:
        return self.report is not None

    def begin(self, model: "nn.Module", optimizer: Any = None, scheduler: Any = None) -> None:
        """Start watching ``model`` before a step's first forward; once a report was acted on, do nothing.

        ``optimizer`` and ``scheduler``: the ones the trainer built (its list, or one), checked as
        ``fxflow.watch(optimizer=..., scheduler=...)`` checks them."""
        from ..watching import Watch

        if self.done or self._watch is not None:
            return
        self._watch = Watch(model, allow=self.allow, vanishing=self.vanishing, static=self.static,
                            steps=self.steps if self.steps > 1 else None, optimizer=optimizer, scheduler=scheduler)
        self._watch.last_step_pending = True  # the report comes before the last watched step's optimizer.step()
        self._watch.start()

    def end(self, notes: Iterable[str] = ()) -> "Report | None":
        """Stop watching once the step's grads are complete: print the report, then raise or warn.

        ``notes`` (what the framework did to the grads before this point) join the report's notes.
        Returns the Report acted on; None when nothing was watched, or when exactly zero gradients
        wait for the next step to confirm them.
        """
        if self._watch is None:
            return None
        if self.steps > 1 and self._watch.steps_seen < self.steps:
            self._notes = list(dict.fromkeys([*self._notes, *notes]))
            return None  # more steps to watch: the same Watch spans them
        watch, self._watch = self._watch, None
        watch.stop()
        report = watch.report  # FxflowError when no forward or no backward ran: says which
        report.notes.extend(note for note in [*self._notes, *notes] if note not in report.notes)
        self._notes = []
        if self.steps == 1 and self._waits(report):
            self._unconfirmed.append(watch)  # judge on the next step
            return None
        if self._unconfirmed:
            self._confirm(report)
        return self._act(watch)

    def _waits(self, report: "Report") -> bool:
        """Whether the step just watched leaves exact zeros that a later step may still lift: the first
        step's, and a later one's while parameters still come alive (a chain of zero-inits)."""
        step = len(self._unconfirmed) + 1
        now = {p.name for p in report.unconfirmed}
        if self._unconfirmed:
            before = {p.name for p in self._unconfirmed[-1].report.unconfirmed}
            for name in before - now:
                self._learned.setdefault(name, step)
            if not (before - now):
                return False  # nothing came alive: a later step would not either
        return bool(now) and step < MAX_CONFIRMING_STEPS

    def _confirm(self, report: "Report") -> None:
        """The step that ends the wait: zeros lifted since the first step are ``held``; the rest ``zero``
        when the last step lifted none, ``unconfirmed`` when the wait ran out while it still lifted some."""
        from ..reconcile.zeros import classify_zeros
        from ..verdicts import DynamicVerdict

        first = self._unconfirmed[0].report
        held_by = {p.name: p.held_by for p in first.parameters}
        step = len(self._unconfirmed) + 1
        still = [p for p in report.parameters if p.dynamic == DynamicVerdict.UNCONFIRMED]
        exhausted = bool(still) and step >= MAX_CONFIRMING_STEPS and step in self._learned.values()
        for parameter in still:
            parameter.dynamic = DynamicVerdict.ZERO  # classify_zeros judges it from the steps seen
        classify_zeros(report.parameters, self._learned, held_by, step, exhausted=exhausted)
        names = sorted({p.name for p in first.unconfirmed})
        report.notes.append(f"this is step {len(self._unconfirmed) + 1}: the first gave {len(names)} parameter(s) an "
                            f"exactly zero gradient ({_shorten(names)}); those that a zero-initialized weight held "
                            "(LoRA's B, a zero-init residual branch) learn once the optimizer moved it")
        self._unconfirmed, self._learned = [], {}

    def finish(self) -> "Report | None":
        """Training ended: a first step still waiting for confirmation is judged as it is, and so
        are the steps watched so far when training ended before ``steps`` of them."""
        if self._watch is not None and self.steps > 1 and self._watch.steps_seen > 0:
            watch, self._watch = self._watch, None
            watch.stop()
            return self._act(watch)
        self.abandon()
        if not self._unconfirmed:
            return None
        watch, self._unconfirmed = self._unconfirmed[-1], []
        watch.report.notes.append("training ended before a later step could confirm the exactly zero gradients")
        return self._act(watch)

    def _act(self, watch: "Watch") -> "Report":
        """Print the watched step's report (rank 0), then raise or warn on a problem."""
        from ..core.distributed import rank
        from ..present.text import summary_line

        report = self.report = watch.report
        if self.show:
            watch.show()
        if report.ok:
            return report
        if self.on_problem == "raise":
            raise GradientFlowError(report)
        if rank() == 0:
            warnings.warn(GradientFlowWarning(f"fxflow: {summary_line(report)}"), stacklevel=4)
        return report

    def abandon(self) -> None:
        """The step failed: remove the hooks and restore the grads; no report."""
        if self._watch is not None:
            watch, self._watch = self._watch, None
            watch.stop(discard=True)


class FirstStepCallback:
    """The options and the result both trainer callbacks share (mixed into each framework's Callback).

    ``on_problem``: ``"raise"`` (:class:`GradientFlowError`, before the optimizer steps) or ``"warn"``
    (:class:`GradientFlowWarning`, training goes on). ``allow``: glob patterns of parameters allowed to
    be dry; ``vanishing``: the RMS factor below which a gradient is vanishing; ``static=False`` skips
    the trace; ``show=False`` does not print the report; ``steps=N`` watches the first N steps
    (backward calls) and counts, per parameter, the steps with a gradient (``intermittent`` for
    some does not fail; none does).
    """

    def __init__(self, *, on_problem: str = "raise", allow: Iterable[str] = (), vanishing: float = 1e-3,
                 static: bool = True, show: bool = True, steps: int = 1) -> None:
        self.check = FirstStepCheck(on_problem=on_problem, allow=allow, vanishing=vanishing, static=static,
                                    show=show, steps=steps)

    @property
    def report(self) -> "Report | None":
        """The Report acted on (None until the checked step's grads are complete)."""
        return self.check.report


def _shorten(names: list[str], keep: int = 3) -> str:
    shown = ", ".join(names[:keep])
    return shown if len(names) <= keep else f"{shown} and {len(names) - keep} more"


def history_metrics(report: "Report | None") -> list[tuple[int, dict[str, float]]]:
    """The watched steps' per-layer gradient health as (step, metrics) for a trainer's logger:
    ``fxflow/grad_mean/<layer>``, ``fxflow/grad_max/<layer>`` and, when an optimizer step followed,
    ``fxflow/update_ratio/<layer>``. Empty without a history (one watched step, or no report)."""
    if report is None or not report.gradient_history:
        return []
    by_step: dict[int, dict[str, float]] = {}
    for layer, records in report.gradient_history.items():
        for record in records:
            metrics = by_step.setdefault(record.step, {})
            metrics[f"fxflow/grad_mean/{layer}"] = record.mean
            metrics[f"fxflow/grad_max/{layer}"] = record.max
            if record.update_ratio is not None:
                metrics[f"fxflow/update_ratio/{layer}"] = record.update_ratio
    return sorted(by_step.items())
