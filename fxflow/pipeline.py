"""The pipeline: capture -> probe -> annotate -> analyze -> reconcile, returning a Report.

Each arrow is one module; this one only wires them, keeps the model untouched around the
passes that run its code, and times the phases (``Report.timings``).
"""
from __future__ import annotations

import contextlib
import gc
import time
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

from .analyze import PARAM, StaticAnalysis, analyze
from .annotate import annotate, choose_twins
from .capture import capture
from .capture.unwrap import meta_inputs, unwrap
from .inputs import as_input_tuple, infer_inputs
from .probe import GradientProbe, ProbeResult, dynamic_verdicts, probe
from .report import CUT, ParameterReport, Report, TraceInfo, matches, reconcile
from .state import untouched

NO_INPUTS_NOTE = (
    "no example inputs: static analysis used name rules only and no backward ran; "
    "pass --input-size (e.g. --input-size 16,10) or define example_inputs() in the model's file"
)


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
) -> Report:
    """Find which parameters of ``model`` get no gradient, why, and confirm with a real backward.

    ``inputs`` is one tensor, a tuple of forward's positional arguments, or a dict of keyword
    arguments (``{"input_ids": ids}``); when omitted fxflow infers one from the first layer
    (Linear, Conv, Embedding). ``device="meta"`` checks without
    allocating weights or computing anything (fake tensors): the backward then tells which
    parameters get a gradient, not its size. Another device runs a copy of the model there.
    The model is left unchanged. ``capture_methods`` limits the capture chain to some of
    ``("symbolic_trace", "torch.export", "runtime")``.
    """
    clock = _PhaseClock(progress)
    step = clock.step
    notes: list[str] = []
    model, example, fake = _prepare(model, inputs, device, infer, notes)

    with untouched(model) as restore_notes:  # tracing runs forward's Python: it can change the model
        step("capturing the graph", phase="capture")
        shared = GradientProbe(model, loss_fn=loss_fn, seed=seed, vanishing=vanishing) if backward and example is not None and not fake else None
        captured = capture(model, example, probe=shared, methods=capture_methods)

        # The real backward goes first: a forward that raises is reported as the model's own
        # error, and its duration tells the analysis whether real twin tensors are cheap.
        result: ProbeResult | None = None
        if backward and example is not None:
            step("running forward and backward", phase="backward")
            if fake:
                result = probe(model, example, loss_fn=loss_fn, seed=seed, fake=True)
            else:  # the run-time capture may have run the one real forward and backward already
                result = shared.result or shared.run(example)
            notes.extend(result.notes)
            if not result.measurable:
                notes.append("meta run: the backward shows which parameters get a gradient, not its size, "
                             "so the zero, vanishing and nonfinite verdicts cannot be given")

        static: StaticAnalysis | None = None
        if captured.graph_module is not None:
            step("analysing gradient flow", phase="annotate")
            forward_seconds = shared.forward_seconds if shared is not None else None
            with _gc_paused():
                annotate(captured.graph_module, model, example, twins=choose_twins(model, example, forward_seconds))
                step("walking the graph", phase="static walk")
                static = analyze(captured.graph_module, model)
                # The collector's deferred work (mostly the annotation's allocations) runs when it
                # is switched back on: timed as its own phase, not hidden in the walk's.
                step("collecting garbage", phase="gc")
        step("restoring the model", phase="restore")
    notes.extend(note for note in restore_notes if note not in notes)

    step("reconciling", phase="reconcile")
    with _gc_paused():
        parameters = parameter_reports(model, static, result, vanishing, allow)
    if not parameters:
        notes.append("the model has no parameters: nothing to check")
    elif not any(p.requires_grad for p in model.parameters()):
        notes.append("no parameter requires grad: every parameter is frozen")
    return Report(
        target=target or type(model).__name__,
        trace=TraceInfo(captured.method, captured.node_count, captured.notes),
        parameters=parameters,
        backward=result is not None,
        device=str(_device(model)),
        notes=notes,
        graph=static.graph if static is not None else None,
        module_grad_norms=result.module_grad_norms if result is not None else {},
        timings=clock.finish(),
        module_classes={name: type(module).__name__ for name, module in model.named_modules() if name},
    )


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: the passes allocate many small objects that all stay
    alive, and with a big model in memory each full collection rescans hundreds of thousands of
    objects for nothing (on a 20,000-node graph it doubled the static walk)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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


def _prepare(model: torch.nn.Module, inputs: Any, device: str | torch.device | None, infer: bool,
             notes: list[str]) -> tuple[torch.nn.Module, tuple[Any, ...] | None, bool]:
    """The module to check (unwrapped, on its device), its example inputs, and whether the run is fake."""
    model, _, unwrap_notes = unwrap(model)  # DDP / DataParallel / torch.compile: check the user's module
    notes.extend(unwrap_notes)
    example = as_input_tuple(inputs, model)
    on_meta = any(p.is_meta for p in model.parameters())
    fake = str(device) == "meta" or on_meta
    if on_meta and example is not None:
        example = meta_inputs(example)
    if device is not None and not fake:
        model, example = _on_device(model, example, torch.device(device), notes)
    if example is None and infer:
        example = infer_inputs(model)
        if example is not None:
            shape = ",".join(str(s) for s in example[0].shape)
            notes.append(f"inputs inferred from the first layer: one tensor of shape ({shape})")
    if example is None:
        notes.append(NO_INPUTS_NOTE)
    return model, example, fake


def _on_device(model: torch.nn.Module, example: tuple[Any, ...] | None, device: torch.device,
               notes: list[str]) -> tuple[torch.nn.Module, tuple[Any, ...] | None]:
    """A copy of the model (and the inputs) on ``device``; the user's model stays where it is."""
    if all(p.device == device for p in model.parameters()):
        return model, example
    import copy

    notes.append(f"checked a copy of the model on {device}")
    moved = copy.deepcopy(model).to(device)
    if example is not None:
        example = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in example)
    return moved, example


def _device(model: torch.nn.Module) -> torch.device:
    for tensor in model.parameters():
        return tensor.device
    return torch.device("cpu")


def parameter_reports(model: torch.nn.Module, static: StaticAnalysis | None, result: ProbeResult | None,
                      vanishing: float, allow: Iterable[str]) -> list[ParameterReport]:
    """One reconciled record per parameter from the static analysis and the real backward."""
    allow = list(allow)
    dynamic = dynamic_verdicts(result, vanishing) if result is not None else {}
    reports = []
    for name, parameter in model.named_parameters():
        verdict = static.verdicts[name] if static is not None else None
        report = ParameterReport(
            name=name,
            shape=tuple(int(s) for s in parameter.shape),
            static=verdict.static if verdict else ("frozen" if not parameter.requires_grad else "reachable"),
            dynamic=dynamic.get(name),
            grad_norm=result.grads[name].norm if result is not None and name in result.grads else None,
            cut_by=list(verdict.cut_by) if verdict else [],
            diagnosis=(verdict.detail if verdict else None) or _localized(result, name, verdict),
            allowed=matches(name, allow),
        )
        opaque = None
        if static is not None and report.static == "reachable" and report.dynamic == "missing":
            opaque = _opaque_on_path(static, name)  # only a disagreement needs the (costly) search
        reconcile(report, opaque)
        reports.append(report)
    return reports


def _localized(result: ProbeResult | None, name: str, verdict: Any) -> str | None:
    """Where the real backward's zero or vanishing gradient of ``name`` died or shrank (fxflow.localize),
    unless a static cut site already names that line."""
    site = result.explanations.get(name) if result is not None else None
    if site is None or (verdict is not None and any(s.source == site.source for s in verdict.cut_by)):
        return None
    return site.reason


def _opaque_on_path(static: StaticAnalysis, name: str) -> str | None:
    """An opaque op (custom autograd.Function) downstream of the parameter, if any."""
    import networkx as nx

    graph = static.graph
    key = PARAM + name
    if key not in graph or static.verdicts[name].static == CUT:
        return None
    for node in sorted(nx.descendants(graph, key), key=lambda n: graph.nodes[n]["order"]):
        if graph.nodes[node].get("opaque"):
            return graph.nodes[node]["opaque"]
    return None
