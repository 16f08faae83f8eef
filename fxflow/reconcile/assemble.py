"""The one place a Report is put together from the stages' results.

``fxflow.check`` (whose backward is fxflow's own), ``fxflow.watch`` and the trainer integrations
(whose backward is the user's training step) differ only in where the gradients come from; all of
them hand what the stages returned to :func:`assemble_report`, so the same model and step give
the same Report whichever way it was checked.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

import torch

from ..core.records import LayerStep
from ..dynamic.health import flags as health_flags, layer_of
from .norms import call_norms
from . import backward_raises, parameter_reports, uncertainty, uncertainty_notes, unregistered_reports
from ..report import ParameterReport, Report, TraceInfo
from ..dynamic.steps import StepTally
from .evidence import Evidence, settle
from ..core.distributed import guidance as ddp_guidance
from ..prepare.inputs import device_of
from ..verdicts import CutSite, DynamicVerdict as Dynamic, PairReason as Pair

if TYPE_CHECKING:  # pragma: no cover
    from ..static.analyze import StaticAnalysis
    from ..capture import Capture
    from ..dynamic.probe import ProbeResult

# symbolic_trace's own words for a module held in a plain list: the unregistered rows say it better.
_UNREGISTERED_MODULE = "symbolic_trace failed: forward calls a module that is not registered (see the unregistered rows)"


def assemble_report(model: torch.nn.Module, *, target: str, captured: "Capture | None",
                    static: "StaticAnalysis | None", result: "ProbeResult | None", failure: CutSite | None = None,
                    notes: Sequence[str] = (), static_notes: Sequence[str] = (), vanishing: float = 1e-3,
                    allow: Iterable[str] = (), static_only: bool = False,
                    timings: dict[str, float] | None = None, steps: StepTally | None = None,
                    history: dict[str, list[LayerStep]] | None = None, ddp: torch.nn.Module | None = None,
                    watched: bool = False, drew: bool | None = None) -> Report:
    """The Report of one checked step: the static analysis (None when nothing was captured) and the
    real backward's result (None when none ran; ``failure`` when it raised), reconciled.

    ``notes`` come first (how the model and inputs were prepared), then what the backward noted,
    then ``static_notes`` (the capture and the analysis), then what the verdicts leave unsure.
    ``steps``: the gradients of more steps than the first (:mod:`fxflow.dynamic.steps`); ``history``: per
    layer and step, the gradient statistics of a watched training loop (:mod:`fxflow.dynamic.health`);
    ``ddp``: the DistributedDataParallel wrapper of a watched model; ``watched``: the gradients are the
    user's own step's (no look-ahead could run); ``drew``: whether the real run drew random numbers
    (None: not known). One DDP note comes from both:
    the steps' counts when there are many, the wrapper's setting when there is one.
    """
    notes = list(notes)
    if failure is not None:
        notes.append(f"the real backward raised {failure.reason}: no gradient could be read, "
                     "so the dynamic verdicts are unknown")
    if result is not None:
        notes.extend(result.notes)
        if not result.measurable:
            notes.append("meta run: the backward shows which parameters get a gradient, not its size, "
                         "so the zero, vanishing and nonfinite verdicts cannot be given")
    notes.extend(note for note in static_notes if note not in notes)
    if static is None:
        notes.append("nothing could be captured, so no static verdict could be given (unknown)")
    uncertain = uncertainty(static)
    notes.extend(uncertainty_notes(uncertain))

    parameters = parameter_reports(model, static, result, vanishing, allow, drew)
    unregistered = unregistered_reports(result, vanishing) if result is not None else []
    parameters.extend(unregistered)
    if result is not None and result.nonfinite:  # the generic advice gives way to where the NaN was born
        born = result.nonfinite[0]
        for parameter in parameters:
            if parameter.dynamic == Dynamic.NONFINITE:  # words: fxflow.present.reasons
                parameter.finding, parameter.reasons = None, [Pair.NONFINITE_BORN]
                parameter.facts["born"] = {"op": born.op, "where": born.source or born.module or "?",
                                           "phase": born.phase}
    counted = steps.steps if steps is not None else 1
    notes.extend(settle(parameters, Evidence.of(result, steps, watched)))  # what came after the first backward
    guidance = ddp_guidance(parameters, ddp, counted, steps.without_gradient if steps is not None else None)
    # The one DDP note, from the many steps' counts when there are some: in a watched loop only under
    # DDP; check(steps=N) gives it always (a model is checked before it is wrapped, often for DDP's error).
    if ddp is not None or (counted > 1 and not watched):
        notes.append(guidance.message())
    trace = TraceInfo("none", 0, [])
    if captured is not None:
        trace = TraceInfo(captured.method, captured.node_count,
                          [_UNREGISTERED_MODULE if unregistered and "not installed as a submodule" in note else note
                           for note in captured.notes])
    return Report(
        target=target,
        trace=trace,
        parameters=parameters,
        backward=result is not None,
        device=str(device_of(model)),
        notes=notes,
        graph=static.graph if static is not None else None,
        module_grad_norms=result.module_grad_norms if result is not None else {},
        node_grad_norms=call_norms(static.graph, result.module_grad_norms) if static and result else {},
        timings=dict(timings or {}),
        module_classes={name: type(module).__name__ for name, module in model.named_modules() if name},
        uncertain=uncertain,
        backward_raises=backward_raises(static, result, failure),
        loss=result.loss if result is not None else None,
        nonfinite=list(result.nonfinite) if result is not None else [],
        static_only=static_only,
        steps=steps.steps if steps is not None and steps.steps else 1,
        gradient_history=history or {},
        gradient_flags=health_flags(history, vanishing, _held_until(parameters)) if history else [],
    )


def _held_until(parameters: Iterable[ParameterReport]) -> dict[str, int]:
    """Per layer, the last step on which a zero-init weight still held one of its parameters."""
    until: dict[str, int] = {}
    for parameter in parameters:
        if parameter.dynamic == Dynamic.HELD and parameter.learns_from_step:
            layer = layer_of(parameter.name)
            until[layer] = max(until.get(layer, 0), parameter.learns_from_step - 1)
    return until
