"""``fxflow.watch``: check the gradient flow of the user's real training step, with their real loss.

::

    with fxflow.watch(model) as w:
        loss = criterion(model(x), y)
        loss.backward()
    w.show()                # rank 0 prints the table; w.report is the Report

Each backward call in the block is judged from the gradients autograd produced in it
(:mod:`fxflow.dynamic.backward_calls`), never from what ``.grad`` holds when the block ends, so the
verdicts are the same whatever the loop does with ``.grad``: stepping and clearing it
(``zero_grad`` before or after, ``set_to_none=False``, ``p.grad = None``), accumulating
micro-batches, clipping, unscaling a ``GradScaler``'s loss or freeing it in an optimizer fused
into backward. fxflow never touches ``.grad``: the block ends with the gradients the loop left.

* Without ``steps=`` the first backward call is judged; with ``steps=N`` the first N (a
  ``GradScaler``'s skipped steps not counted). Exact zeros are followed through the loop's next
  optimizer steps: lifted, they are ``held``; seen zero after updates, ``zero``; with no update
  seen, ``unconfirmed``.
* asking for the report when no backward ran inside the block is an error, not a page of "missing";
* the static verdicts come from the same capture/annotate/analyze pieces as ``fxflow.check``,
  fed with the inputs the first forward in the block received (a forward pre-hook records them).

Inside ``torchrun`` with DistributedDataParallel or FSDP2 (``fully_shard``) the parameters keep
their original names, sharded ``DTensor`` grads are summed over ranks, the one collective
(an ``all_gather_object`` at exit) runs on every rank in the same place, and :meth:`Watch.show`
prints on rank 0 only. For DDP the report says whether ``find_unused_parameters=True`` is needed.
"""
from __future__ import annotations

import sys
from typing import Any, Iterable, TextIO

import torch
from torch import nn
from torch.utils._pytree import tree_map

from .core import distributed
from .prepare.unwrap import unwrap
from .errors import FxflowError
from .dynamic.backward_calls import BackwardCall, BackwardCalls
from .dynamic.gradients import LocalGrad, gather_gradients
from .dynamic.health import HealthRecorder, layer_of
from .dynamic.steps import StepTally, apply_reached_later, call_codes, watched_tally
from .dynamic.unregistered import unregistered_tensors
from .prepare.optimizers import optimizers_in, schedulers_in
from .dynamic.optimizer_steps import StepLog

WATCHED_LOSS = "the loss of the watched training step"
from .report import Report


class Watch:
    """A context manager that watches one training step (see the module docstring)."""

    def __init__(self, model: nn.Module, *, allow: Iterable[str] = (), vanishing: float = 1e-3,
                 static: bool = True, show: bool = False, group: Any = None, target: str | None = None,
                 steps: int | None = None, optimizer: Any = None, scheduler: Any = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"fxflow.watch expects an nn.Module, got {type(model).__name__}")
        self.model = model
        self.module = unwrap(model)[0]
        self.allow = list(allow)
        self.vanishing = vanishing
        self.static = static
        self.auto_show = show
        self.group = group
        self.target = target or distributed.class_name(self.module)
        self.forwards = 0
        if steps is not None and steps < 1:
            raise FxflowError(f"fxflow.watch(steps=...) must be at least 1, not {steps}")
        self.steps = steps  # judge this many backward calls (a training loop), counting gradients per step
        self.optimizers = optimizers_in(optimizer)  # whether their groups update each parameter (reconcile.optimizer)
        self.schedulers = schedulers_in(scheduler)
        # A trainer callback ends watching before the last backward's optimizer.step(): not judged as skipped.
        self.last_step_pending = False
        self._step_log: StepLog | None = None
        self._calls: BackwardCalls | None = None
        self._health = HealthRecorder()  # per layer and step: |grad| and the optimizer's update
        self.ddp_guidance: distributed.DDPGuidance | None = None
        self._inputs: tuple[Any, ...] | None = None
        self._kwargs: dict[str, Any] = {}
        self._handles: list[Any] = []
        self._recorder: Any = None
        self._uninstrumented: str | None = None  # the recorder's note on compiled / higher-order regions
        self._report: Report | None = None
        self._active = False

    # -- the context manager ----------------------------------------------------------------
    def __enter__(self) -> "Watch":
        from .dynamic.module_norms import ModuleGradRecorder

        if self._active:
            raise FxflowError("this fxflow.watch is already active; use a new one per step")
        self._active = True
        self._report = None
        self._handles = [
            self.model.register_forward_pre_hook(self._pre_forward, with_kwargs=True),
            self.model.register_forward_hook(self._post_forward),
        ]
        self._recorder = ModuleGradRecorder(self.module)
        self._step_log = StepLog(self.optimizers, self.module) if self.optimizers else None
        self._health = HealthRecorder(order=list(dict.fromkeys(layer_of(name) for name, _ in self.module.named_parameters())))
        self._calls = BackwardCalls(self.model, self.module, judged=self.steps or 1,
                                    health=self._health if self.steps is not None else None,
                                    extra=unregistered_tensors(self.module), on_start=self._call_started)
        self._calls.install()
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        self._active = False
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._recorder is not None:
            self._recorder.remove()
        if self._step_log is not None:
            self._step_log.remove()  # the optimizers' step hooks; what they saw stays
        if self._calls is not None:
            self._calls.remove(last_pending=self.last_step_pending)
        if exc_type is None:
            self._collect()
        if exc_type is None and self.auto_show and self._report is not None:
            self.show()

    # -- without a with block (trainer callbacks start and stop in different hooks) ----------
    def start(self) -> "Watch":
        """Begin watching, as entering the ``with`` block does; end with :meth:`stop`."""
        return self.__enter__()

    def stop(self, *, discard: bool = False) -> None:
        """End watching, as leaving the ``with`` block does.

        ``discard=True`` (the step failed) removes the hooks and builds no report.
        """
        self.__exit__(FxflowError if discard else None, None, None)

    # -- hooks -------------------------------------------------------------------------------
    def _pre_forward(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.forwards += 1
        if self.forwards == 1:  # one detached tensor per input tensor: forward(x, x, x) sees one tensor thrice
            memo: dict[int, torch.Tensor] = {}
            self._inputs = tuple(_detached(a, memo) for a in args)
            self._kwargs = {k: _detached(v, memo) for k, v in kwargs.items()}

    def _post_forward(self, module: nn.Module, args: tuple, output: Any) -> None:
        from .core.tensors import hookable
        from .dynamic.loss import floating_outputs

        for tensor in floating_outputs(output):
            if hookable(tensor):
                tensor.register_hook(self._saw_backward)
        if self.forwards == 1 and self._recorder is not None:
            self._uninstrumented = self._recorder.uninstrumented_note(output)
            self._recorder.remove()  # the first step's calls are the ones matched to the graph: leave the rest alone

    def _saw_backward(self, grad: torch.Tensor) -> None:
        if self._calls is not None:
            self._calls.started()

    def _call_started(self, call: BackwardCall) -> None:
        if self._step_log is not None:
            self._step_log.backward(call.index)

    @property
    def steps_seen(self) -> int:
        """Backward calls judged so far (skipped steps not counted)."""
        calls = self._calls.calls if self._calls is not None else []
        return sum(1 for call in calls if call.full and not call.skipped)

    # -- the report ----------------------------------------------------------------------------
    @property
    def report(self) -> Report:
        """The Report of the watched step; raises :class:`FxflowError` when there is none yet."""
        if self._active:
            raise FxflowError("the report is ready once the fxflow.watch block has ended",
                              hint="read w.report after the with block")
        if self._report is None:
            if self.forwards == 0:
                raise FxflowError("no forward of the watched model ran inside fxflow.watch",
                                  hint="call the model (the object you passed to watch) inside the with block")
            raise FxflowError("no backward ran inside fxflow.watch: every grad would read as missing",
                              hint="call loss.backward() inside the with block")
        return self._report

    def show(self, file: TextIO | None = None, *, color: bool | None = None) -> None:
        """Print the report on rank 0 only (rich colors on a terminal, plain text otherwise)."""
        if distributed.rank() != 0:
            return
        from .present.terminal import Terminal

        Terminal(color=True if color is None else color, file=file or sys.stdout).show(self.report)

    # -- internals -----------------------------------------------------------------------------
    def _collect(self) -> None:
        """Judge the calls watched (gathered over ranks) and build the Report as fxflow.check does."""
        from .reconcile.assemble import assemble_report
        from .dynamic.probe import gradient_result
        from .reconcile.optimizer import judge_optimizer

        calls = self._calls.calls if self._calls is not None else []
        if not any(distributed.all_gather(bool(calls), self.group)):
            return  # no backward on any rank: .report explains
        names = [name for name, _ in self.module.named_parameters()]
        tally = watched_tally(calls, distributed.all_gather(call_codes(calls, names), self.group), self.steps or 1)
        first = calls[tally.calls[0] - 1] if tally.calls else None
        paths = list(self._calls.extra) if self._calls is not None else []
        local = {name: (first.grads.get(name) if first is not None else None) or LocalGrad(False)
                 for name in [*names, *paths]}
        gathered, notes = gather_gradients(local, self.group)  # the parameters and the unregistered, in one collective
        infos = {name: gathered[name] for name in names}
        reached = {path: (tuple(self._calls.extra[path].shape), gathered[path]) for path in paths if gathered[path].present}
        measurable = not any(info.present and info.norm is None and info.finite for info in infos.values())
        result = gradient_result(infos, reached, self._recorder, measurable=measurable, notes=notes,
                                 loss=WATCHED_LOSS)
        captured, static, static_notes = self._static_analysis()
        if self._uninstrumented:
            static_notes.append(self._uninstrumented)
        if self.forwards > 1 and self.steps is None:
            static_notes.append(f"the model ran forward {self.forwards} times in the block; "
                                "static verdicts use the inputs of the first")
        judged = _judged_note(calls, max(self._calls.total, len(calls)), tally, self.steps)
        if judged:
            static_notes.append(judged)
        for name, parameter in self.module.named_parameters():  # the optimizer step after the last backward
            self._health.settle(name, parameter)
        ddp = distributed.find_ddp(self.model)
        report = assemble_report(self.module, target=self.target, captured=captured, static=static, result=result,
                                 static_notes=static_notes, vanishing=self.vanishing, allow=self.allow, steps=tally,
                                 history=self._health.history() if self.steps is not None else None, ddp=ddp,
                                 watched=True)
        apply_reached_later(report.parameters, tally)
        if self.optimizers:
            nonfinite = {call.index for call in calls if call.nonfinite}
            judge_optimizer(report, self.module, self.optimizers, self.schedulers, log=self._step_log,
                            nonfinite_steps=nonfinite, last_pending=self.last_step_pending)
        if ddp is not None:  # the same advice as the report's DDP note, as an object
            self.ddp_guidance = distributed.guidance(report.parameters, ddp, report.steps, tally.without_gradient)
        self._report = report

    def _static_analysis(self) -> tuple[Any, Any, list[str]]:
        """capture, then the static part fxflow.check runs too, on the observed inputs."""
        if not self.static:
            return None, None, ["static analysis skipped (watch(static=False))"]
        if self._inputs is None:
            return None, None, ["no forward inputs observed: static analysis skipped"]
        from .capture import capture
        from .pipeline import analyze_capture
        from .prepare import prepare
        from .prepare.signature import as_call_dict
        from .core.guard import guard

        observed = as_call_dict(self.module, self._inputs, self._kwargs) if self._kwargs else self._inputs
        if observed is None:
            return None, None, ["forward's inputs do not bind to its signature: static analysis skipped"]
        with distributed.plain_structure(self.module) as plain:
            if distributed.is_sharded(self.model) or any(p.is_meta for p in plain.parameters()):
                observed = distributed.to_meta(observed)
            prepared = prepare(plain, observed, None, infer=False)  # the call as fxflow.check makes it
            if prepared.example is None:
                return None, None, ["forward was called with keyword arguments fxflow cannot bind: static analysis skipped"]
            with guard(plain, fresh_grads=True) as kept:  # tracing runs forward's Python: leave no trace
                captured = capture(prepared.runner, prepared.example)
                static, static_notes = analyze_capture(captured, prepared.runner, prepared.example)
        return captured, static, static_notes + kept.notes


def watch(model: nn.Module, *, allow: Iterable[str] = (), vanishing: float = 1e-3, static: bool = True,
          show: bool = False, group: Any = None, steps: int | None = None, optimizer: Any = None,
          scheduler: Any = None) -> Watch:
    """Watch one real training step of ``model`` (plain, DDP, FSDP2 or compiled); see :class:`Watch`.

    ``steps=N``: put the block around a training loop; the first N backward calls are N steps,
    and each parameter's count of steps with a non-zero gradient comes with the report
    (``intermittent`` for some, a failure for none; :mod:`fxflow.dynamic.steps`).

    ``optimizer=`` (one, or a list: GANs, Lightning's) and ``scheduler=``: whether a group will
    update each trainable parameter, and, for the steps taken inside the block, which
    ``optimizer.step()`` calls were skipped (a GradScaler that found inf) and which parameters no step
    moved (:mod:`fxflow.reconcile.optimizer`).

    ``allow``: glob patterns of parameters allowed to be dry; ``vanishing``: the RMS factor below
    which a gradient is vanishing; ``static=False`` skips the trace; ``show=True`` prints the report
    (rank 0) when the block ends; ``group``: the process group for the one gather at exit.
    """
    return Watch(model, allow=allow, vanishing=vanishing, static=static, show=show, group=group, steps=steps,
                 optimizer=optimizer, scheduler=scheduler)


def _judged_note(calls: list[BackwardCall], total: int, tally: StepTally, steps: int | None) -> str | None:
    """Which backward calls the verdicts come from, which were skipped, and which settled the zeros
    (None for the one backward call of a one-step block: nothing to tell)."""
    judged = tally.calls
    if total == 1 and judged == [1] and (steps or 1) == 1:
        return None
    shown = (f"backward call {judged[0]}" if len(judged) == 1 else
             f"backward calls {_spans(judged)}") if judged else "no backward call"
    note = f"verdicts judged on {shown} of the {total} in the block"
    if steps is not None and len(judged) < steps:
        note += f" ({len(judged)} of the {steps} steps asked for)"
    skipped = [call.index for call in calls if call.skipped]
    if skipped:
        note += (f"; backward call{'s' if len(skipped) != 1 else ''} {_spans(skipped)} skipped: inf or NaN in the "
                 "gradients and no optimizer step after (a GradScaler lowering its scale)")
    if tally.zeros:
        note += (f"; {len(tally.zeros)} exactly zero gradient{'s' if len(tally.zeros) != 1 else ''} followed over "
                 f"{tally.updates_seen} optimizer step{'s' if tally.updates_seen != 1 else ''} after the first")
    return note


def _spans(numbers: list[int]) -> str:
    """1, 2, 3, 5 -> '1-3, 5'."""
    spans: list[list[int]] = []
    for number in numbers:
        if spans and number == spans[-1][-1] + 1:
            spans[-1].append(number)
        else:
            spans.append([number])
    return ", ".join(f"{span[0]}-{span[-1]}" if len(span) > 2 else ", ".join(map(str, span)) for span in spans)


def _detached(value: Any, memo: dict[int, torch.Tensor]) -> Any:
    """``value`` with every tensor detached, one detached tensor per tensor object."""
    return tree_map(lambda v: memo.setdefault(id(v), v.detach()) if isinstance(v, torch.Tensor) else v, value)
