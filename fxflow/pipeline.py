"""The pipeline: prepare -> dynamic -> capture -> static -> diagnose -> reconcile, returning a Report.

Each arrow is one subpackage, entered once (tests/test_stage_path.py); this module only wires
them, keeps the model untouched around the passes that run its code, and times the phases
(``Report.timings``). :func:`analyze_capture`
(annotate -> analyze) is the static part that ``fxflow.check`` and ``fxflow.watch`` share.
"""
from __future__ import annotations

import functools
import inspect
import time
from typing import Any, Callable, Collection, Iterable, Sequence

import torch

from .static.analyze import StaticAnalysis, analyze
from .static.annotate import annotate
from .capture import Capture, capture
from .errors import FxflowError
from .prepare import prepare
from .dynamic.loss import labels_in
from .dynamic.probe import ModelRun, ProbeResult, run_model
from .reconcile.assemble import assemble_report
from .diagnose import diagnose
from .dynamic.lookahead import LookAhead, look_ahead
from .dynamic.rounding import SUSPECT, Relative, RoundingCheck, RunOn, relative_sizes, round_off_to_zero
from .dynamic.gradients import GradInfo
from .dynamic.gradients import dynamic_verdicts
from .report import Report
from .prepare.inputs import infer_inputs
from .core.lazy import LazyModules, materialize_lazy
from .core.guard import ATTRIBUTES_ONLY, guard as guarded, save
from .dynamic.optimizer import will_update
from .dynamic.redraw import RandomChoices, Redrawn, redraw_choices
from .dynamic.generators import ModelGenerators
from .core.observer import ForwardPart
from .core.random_ops import RandomDraws
from .dynamic.steps import StepTally
from .prepare.optimizers import optimizers_in, schedulers_in
from .prepare.unwrap import unwrap
from .reconcile.optimizer import judge_optimizer
from .verdicts import CutSite, DynamicVerdict as Dynamic


def check(
    model: torch.nn.Module,
    inputs: Any = None,
    *,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    backward: bool = True,
    device: str | torch.device | None = None,
    allow: Iterable[str] = (),
    vanishing: float = 1e-3,
    seed: int = 0,
    target: str | None = None,
    progress: Callable[[str], Any] | None = None,
    infer: bool = True,
    capture_methods: Sequence[str] | None = None,
    steps: int = 1,
    batches: Iterable[Any] | None = None,
    optimizer: Any = None,
    scheduler: Any = None,
) -> Report:
    """Find which parameters of ``model`` get no gradient, why, and confirm with a real backward.

    ``inputs`` is one tensor, a tuple of forward's positional arguments, or a dict of keyword
    arguments (``{"input_ids": ids}``); when omitted fxflow infers one from the first layer
    (Linear, Conv, Embedding). ``device="meta"`` checks without
    allocating weights or computing anything (fake tensors): the backward then tells which
    parameters get a gradient, not its size. Another device runs a copy of the model there.
    The model is left unchanged. ``capture_methods`` limits the capture chain to some of
    ``("symbolic_trace", "torch.export", "runtime")``.

    ``steps=N`` runs N forward/backward steps and counts, per parameter, the steps with a non-zero
    gradient (:mod:`fxflow.dynamic.steps`): the first on ``inputs``, the others on ``batches`` (an
    iterable of inputs like ``inputs``), else on fresh inferred inputs, else on ``inputs`` again.

    ``optimizer=`` (one, or a list) and ``scheduler=``: whether a group will update each trainable
    parameter (:mod:`fxflow.reconcile.optimizer`); without a scheduler an lr of 0 is ``unknown``.
    """
    if steps < 1:
        raise FxflowError(f"steps must be at least 1, not {steps}")
    optimizers, schedulers = optimizers_in(optimizer), schedulers_in(scheduler)
    user_model = unwrap(model)[0] if isinstance(model, torch.nn.Module) else model  # what the optimizer holds
    clock = _PhaseClock(progress)
    step = clock.step
    loss_fn = with_inputs(loss_fn, inputs)
    prepared = prepare(model, inputs, device, infer)
    model, runner, example, fake, notes = (prepared.module, prepared.runner, prepared.example, prepared.fake,
                                           prepared.notes)
    lazy = LazyModules()  # lazy modules get their shapes for the check, and are lazy again after it
    if example is not None and not fake:
        lazy = materialize_lazy(runner, lambda: runner(*example), example)
    notes.extend(lazy.notes)

    # The run and the tracing run forward's Python, which can change the model: all of it is put back.
    with guarded(model, example, lazy=lazy, fresh_grads=True) as guard, \
            ModelGenerators.kept(model, example or ()) as (generators, drawn_from):  # held or passed in
        # The real forward and backward go first: a forward that raises is the model's own error,
        # and the run-time capture is the recording of this very forward.
        result: ProbeResult | None = None
        failure: CutSite | None = None  # the real backward raised: no gradient to read
        real_run: ModelRun | None = None
        recorded = None  # the run-time capture: the recording of the forward run here
        record = capture_methods is None or "runtime" in capture_methods
        if backward and example is not None:
            step("running forward and backward", phase="backward")
            run = run_model(runner, example, mode="fake" if fake else "real", loss_fn=loss_fn, seed=seed, labels_given=labels_in(inputs),
                            record=record, trace=True)
            result, failure, recorded = run.result, run.failure, run.recorded
            guard.inputs_as_found()  # a forward that wrote its input: every later stage sees it as given
            real_run = run if run.mode == "real" else None
        rounded: list[str] = []  # gradients at rounding level: exactly zero in exact arithmetic
        if real_run is not None and result is not None and result.measurable:
            rounded = round_off_to_zero(result, RoundingCheck(real_run.model, example, _run_on(real_run, drawn_from)))
        verdicts = dynamic_verdicts(result, vanishing) if result is not None else {}
        zeros = [name for name, verdict in verdicts.items() if verdict == Dynamic.ZERO]
        if zeros and real_run is not None:  # designed zero-inits learn from step 2 or 3, a dead unit never
            step("looking ahead past exact zeros", phase="look-ahead")
            moves = will_update(optimizers, schedulers, user_model) if optimizers else {}
            result.look_ahead = look_ahead_of(real_run, example, zeros, rounded=rounded,
                                              movable=(lambda name: moves.get(name) is not False) if moves else None,
                                              generators=generators, drawn_from=drawn_from,
                                              as_found=guard.inputs_as_found)

        # layer drop, dropout, random sampling: from the global generators or from the model's own
        drew = real_run is not None and (real_run.drew_random_numbers or generators.advanced(drawn_from))
        if drew:
            learned = result.look_ahead.learns_from if result.look_ahead is not None else {}
            trainable = {name for name, p in real_run.model.named_parameters() if p.requires_grad}
            dry = [name for name, verdict in verdicts.items()
                   if name in trainable and verdict in (Dynamic.MISSING, Dynamic.ZERO) and name not in learned]
            if dry:
                step("drawing the model's random numbers again", phase="redraw")
                rounding = result.look_ahead.rounding if result.look_ahead is not None else {}
                result.redraws = redraw_of(real_run, example, dry, seed, generators, rounding, guard.inputs_as_found)

        step("capturing the graph", phase="capture")
        captured = capture(runner, example, methods=capture_methods, recorded=recorded)
        if captured.graph_module is None and result is None:
            if failure is not None:
                raise FxflowError(f"nothing could be verified: no capture of forward worked and the real backward "
                                  f"raised {failure.reason}")
            raise FxflowError(_NOTHING_VERIFIED, hint=_NOTHING_VERIFIED_HINT)

        # zeros by construction are looked for only behind the exact zeros training has not explained:
        # what the look-ahead revived or another random draw reached learns, whatever the code says
        suspects = None
        if result is not None and real_run is not None:  # the first step's zeros nothing later lifted
            lifted = {**(result.look_ahead.learns_from if result.look_ahead is not None else {}), **result.redraws.found}
            suspects = [name for name in zeros if name not in lifted]
        static, static_notes = analyze_capture(captured, runner, example, step=step,
                                               loss_output=result.loss_output if result is not None else None,
                                               zero_suspects=suspects)
        if result is not None and real_run is not None:  # a live gradient that died, faded or turned NaN: where
            step("explaining the failing gradients", phase="diagnose")
            diagnose(real_run, result, verdicts)
        tally = None
        if steps > 1 and result is not None and result.measurable:
            step(f"running {steps - 1} more steps", phase="steps")
            tally = _later_steps(model, result, static, steps, batches, inputs, loss_fn, seed, device)
        step("restoring the model", phase="restore")
    step("reconciling", phase="reconcile")
    report = assemble_report(
        model, target=target or type(model).__name__, captured=captured, static=static, result=result,
        failure=failure, notes=notes, static_notes=static_notes + guard.notes, vanishing=vanishing,
        allow=allow, static_only=not backward, steps=tally, drew=drew if real_run is not None else None)
    if optimizers:
        judge_optimizer(report, user_model, optimizers, schedulers)
    report.timings = clock.finish()
    lazy.restore()  # the report is made: the user's lazy modules become lazy again
    return report


def _alive_after(run: ModelRun, example: tuple[Any, ...], same_draws: bool = True,
                 watchers: Sequence[ForwardPart] = (),
                 before: Callable[[], None] | None = None,
                 as_found: Callable[[], None] | None = None) -> Callable[[], Relative | None]:
    """``run``'s forward and backward again, as a function: each parameter's gradient RMS over the
    largest (0.0: none, exactly zero or not finite; None: it raised). ``before()`` runs first each
    time: it sets the generators the model holds (:mod:`fxflow.dynamic.generators`); ``as_found``
    puts the inputs back after each rerun (a forward that writes its input in place)."""
    again = run.rerun()  # one forward and backward each, reusing what the first run set up

    def rerun() -> Relative | None:
        if before is not None:
            before()
        try:
            grads = again(example, same_draws=same_draws, watchers=watchers)
        finally:
            if as_found is not None:
                as_found()
        return relative_sizes(grads) if grads is not None else None
    return rerun


def _run_on(run: ModelRun, drawn_from: list[Any]) -> RunOn:
    """``run``'s forward and backward on another model (its float64 copy) from the same random draws
    (``drawn_from``: the states the generators the model holds started the run from)."""
    def run_on(model: torch.nn.Module, inputs: Sequence[Any]) -> dict[str, GradInfo] | None:
        with guarded():  # the global generators: the redraws go on from them as the first run left them
            ModelGenerators.of(model, inputs).restore(drawn_from)  # the copy's own, found in the same order
            return run.rerun()(inputs, model=model)
    return run_on


def redraw_of(run: ModelRun, example: tuple[Any, ...], dry: list[str], seed: int,
              generators: ModelGenerators | None = None,
              rounded: Collection[str] = (),
              as_found: Callable[[], None] | None = None) -> Redrawn:
    """:func:`fxflow.dynamic.redraw.redraw` on the model of ``run``: ``dry`` parameters that other draws
    of its random numbers reach (the global generators' and ``generators``, those the model holds or is
    given), and ``op @ file:line`` of the calls that drew; the model's buffers, grads and random state are
    put back afterwards (the generators it holds by the caller). Another draw reaches a dry parameter only
    with a gradient above round-off's size (:data:`fxflow.dynamic.rounding.SUSPECT` of the largest): a
    layer a layer drop skipped on the first draw whose key bias gets round-off when it runs never learns,
    and each draw would need a float64 copy of its own to tell a smaller real gradient apart (``rounded``,
    the parameters the first draw's float64 rerun found round-off, are kept for the callers' sake).
    ``as_found`` puts the inputs back after each rerun."""
    snapshot = save(run.model, weights=False, attributes=False)  # nothing moves the weights here
    dry_names = {*dry, *rounded}
    draws_made = iter(range(seed + 1, seed + 1 + 10**6))  # redraw reruns once per seed, seed + 1 first

    def reseed() -> None:  # the model's own generators take the draw's seed, as the global ones do
        if generators:
            generators.seed(next(draws_made))
    try:
        draws, choices = RandomDraws(), RandomChoices()  # where the forward draws, and what each choice picked
        again = _alive_after(run, example, same_draws=False, watchers=[draws, choices], before=reseed,
                             as_found=as_found)

        def rerun() -> Relative | None:  # round-off again is no gradient (fxflow.dynamic.rounding)
            with choices.python(generators.generators if generators else []):
                relative = again()
            return relative if relative is None else {
                name: 0.0 if name in dry_names and size < SUSPECT else size for name, size in relative.items()}
        redrawn = redraw_choices(dry, rerun, seed, choices)
        redrawn.draws = draws.found
        return redrawn
    finally:
        snapshot.restore()


def look_ahead_of(run: ModelRun, example: tuple[Any, ...], zeros: list[str],
                  movable: Callable[[str], bool] | None = None, rounded: Sequence[str] = (),
                  generators: ModelGenerators | None = None, drawn_from: list[Any] | None = None,
                  as_found: Callable[[], None] | None = None) -> LookAhead:
    """:func:`fxflow.dynamic.lookahead.look_ahead` on the model of ``run``, whose first backward left
    ``zeros`` exactly zero (``rounded``: those that were round-off): each rerun is ``run``'s forward and
    backward again, from the same random draws (the generators the model holds, ``generators``, are put
    back to ``drawn_from`` each time) and from the state the model would have on that step
    (what the first forward wrote into its buffers and attributes, then what each rerun writes);
    the model's buffers, attributes, grads and random state are put back afterwards."""
    parameters = dict(run.model.named_parameters())
    first = run.gradients or {name: parameter.grad for name, parameter in parameters.items()}
    drawn_from = drawn_from if drawn_from is not None else []
    rerun = _alive_after(run, example, before=(lambda: generators.restore(drawn_from)) if generators else None,
                         as_found=as_found)
    snapshot = save(run.model, weights=False, attributes=False)  # the look-ahead puts its weights back itself
    try:
        with guarded(run.model, **ATTRIBUTES_ONLY):
            if run.writes is not None:  # the next real step starts from what this one's forward wrote
                run.writes.apply()
            for name, parameter in parameters.items():  # the first step's gradients give the first step's direction
                parameter.grad = first.get(name)
            rounding = RoundingCheck(run.model, example, _run_on(run, drawn_from))
            found = look_ahead(parameters, zeros, rerun, movable=movable, rounding=rounding, rounded=rounded)
            found.note = found.note or rounding.note
            return found
    finally:
        snapshot.restore()


def _later_steps(model: torch.nn.Module, first: ProbeResult, static: StaticAnalysis | None, steps: int,
                 batches: Iterable[Any] | None, inputs: Any, loss_fn: Callable[[Any], torch.Tensor] | None, seed: int,
                 device: str | torch.device | None) -> StepTally:
    """Steps 2..N: one real forward and backward each, on the next batch; what each left in the grads.

    A parameter the first step reached but a later one did not gets the cut sites of that step's
    own graph (a router's argmax, a data-dependent branch): captured for that batch only.
    """
    tally = StepTally()
    tally.add(first.grads)
    supply = iter(batches) if batches is not None else None
    for index in range(1, steps):
        batch = next(supply, None) if supply is not None else None
        if supply is not None and batch is None:
            break  # the batches ran out: fewer steps than asked (the report's `steps` says how many)
        if batch is None:
            batch = infer_inputs(model, seed=seed + index) if inputs is None else inputs
        prepared = prepare(model, batch, device, infer=False)
        with guarded(prepared.module, fresh_grads=True):
            later = run_model(prepared.runner, prepared.example, loss_fn=loss_fn, seed=seed,
                              labels_given=labels_in(batch))
        if later.result is None:
            raise FxflowError(f"the real backward of step {index + 1} raised {later.failure.reason}")
        result = later.result
        tally.add(result.grads)
        missed = [name for name, info in result.grads.items()
                  if name not in tally.later_cuts and first.grads[name].present and not first.grads[name].all_zero
                  and not (info.present and not info.all_zero)]
        if missed:
            tally.later_cuts.update(_cuts_on(prepared, missed))
    return tally


def _cuts_on(prepared: Any, names: list[str]) -> dict[str, list[CutSite]]:
    """The static cut sites of ``names`` in the graph of one batch (empty where it finds none)."""
    with guarded(prepared.module, fresh_grads=True):
        captured = capture(prepared.runner, prepared.example)
        static, _ = analyze_capture(captured, prepared.runner, prepared.example, zero_suspects=names)
    if static is None:
        return {}
    return {name: list(static.verdicts[name].cut_by) for name in names if name in static.verdicts}


def with_inputs(loss_fn: Callable[..., torch.Tensor] | None, inputs: Any) -> Callable[[Any], torch.Tensor] | None:
    """``loss_fn(outputs)``, also for a loss function that takes the inputs too: ``fn(outputs, inputs)``."""
    if loss_fn is None:
        return None
    try:
        parameters = inspect.signature(loss_fn).parameters.values()
    except (TypeError, ValueError):  # a builtin: called with the outputs alone
        return loss_fn
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len([p for p in positional if p.default is p.empty]) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in parameters):
        @functools.wraps(loss_fn)
        def with_the_inputs(outputs: Any) -> torch.Tensor:
            return loss_fn(outputs, inputs)

        return with_the_inputs
    return loss_fn


_NOTHING_VERIFIED = "nothing could be verified: no capture of forward worked and no backward ran"
_NOTHING_VERIFIED_HINT = ("give example inputs: fxflow.check(model, (x, y)) in Python, one --input-size per input on the command "
                          "line (e.g. --input-size 16,10), or example_inputs() in the model's file")


def analyze_capture(captured: Capture, model: torch.nn.Module, example: tuple[Any, ...] | None, *,
                    step: Callable[..., None] | None = None,
                    loss_output: tuple[int, int] | None = None,
                    zero_suspects: Collection[str] | None = None) -> tuple[StaticAnalysis | None, list[str]]:
    """The static part: annotate the captured graph, then walk it; (None, []) when nothing was captured.

    Shared by ``fxflow.check`` and ``fxflow.watch``. Returns the analysis and the annotation's
    notes. Annotating runs forward's ops on twins passed in per call: the model is only read.
    ``loss_output``: the backward differentiated the model's own loss, tensor ``index`` of the
    ``count`` in its output; the walk then starts there alone. ``zero_suspects``: the parameters
    whose zero by construction is looked for (None: every one; see fxflow/static/zero_by_construction.py).
    """
    if captured.graph_module is None:
        return None, []
    step = step or (lambda *args, **kwargs: None)
    step("analysing gradient flow", phase="annotate")
    values, captured.values = captured.values, None  # the recorded run's results: read once, then let go
    notes = annotate(captured.graph_module, model, example, loss_output=loss_output, recorded=values,
                     zero_suspects=zero_suspects)
    step("walking the graph", phase="static walk")
    static = analyze(captured.graph_module, model)
    return static, list(notes or [])


class _PhaseClock:
    """Reports each step to the progress callback and times the phases (``Report.timings``)."""

    def __init__(self, progress: Callable[[str], Any] | None) -> None:
        self.progress = progress
        self.timings: dict[str, float] = {}
        self.current: str | None = None
        self.started = time.perf_counter()

    def step(self, message: str, phase: str | None = None) -> None:
        self._close()
        self.current = phase
        if self.progress is not None:
            self.progress(message)

    def _close(self) -> None:
        now = time.perf_counter()
        if self.current is not None:
            self.timings[self.current] = self.timings.get(self.current, 0.0) + now - self.started
        self.current, self.started = None, now

    def finish(self) -> dict[str, float]:
        self._close()
        return self.timings
