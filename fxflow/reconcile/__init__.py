"""Reconcile: what the real backward measured, what the graph walk concluded, and whether they agree.

Two steps, in order, for every parameter:

1. :func:`parameter_reports`: the static verdict (from :mod:`fxflow.static.analyze`) and the dynamic one
   (:func:`fxflow.dynamic.gradients.dynamic_verdicts`) side by side in one :class:`~fxflow.report.ParameterReport`.
2. :func:`judge`: ``agree`` and the code of what the pair says. A disagreement is never hidden by
   trusting one side: both verdicts stay, and the code (put in words by :mod:`fxflow.present.reasons`)
   says what the mismatch most likely means.

And, for the report as a whole, :func:`uncertainty`: which nodes the walk decided without running
them on twins, and the parameters upstream of them.

Nothing here looks at torch.fx: it reads the static analysis's verdicts and graph attributes.
:func:`~fxflow.reconcile.assemble.assemble_report` ends the stage: the one Report builder.
"""
from __future__ import annotations

import fnmatch
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterable

import torch

from ..dynamic.gradients import dynamic_verdicts
from ..report import ParameterReport
from ..verdicts import PARAM_PREFIX, CutSite, DrawReason as Draw, DynamicVerdict as Dynamic, PairReason as Pair
from ..verdicts import StaticVerdict as Static, UnregisteredReason
from ..verdicts import agreement

if TYPE_CHECKING:  # pragma: no cover
    from ..static.analyze import StaticAnalysis
    from ..dynamic.probe import ProbeResult



def matches(name: str, patterns: Iterable[str]) -> bool:
    """True when ``name`` matches one of the glob patterns."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def parameter_reports(model: torch.nn.Module, static: "StaticAnalysis | None", result: "ProbeResult | None",
                      vanishing: float, allow: Iterable[str], drew: bool | None = None) -> list[ParameterReport]:
    """One reconciled record per parameter from the static analysis and the real backward.

    Without a static analysis (nothing could be captured) a trainable parameter's static verdict
    is ``unknown``, never ``reachable``. ``drew``: whether the real run drew random numbers (None:
    not known); a run that drew none has no verdict that depends on randomness, whatever its ops are
    tagged (an ``nn.LSTM`` with ``dropout=0``, or in eval mode, draws nothing).
    """
    allow = list(allow)
    dynamic = dynamic_verdicts(result, vanishing) if result is not None else {}
    reports = []
    for name, parameter in model.named_parameters():
        verdict = static.verdicts[name] if static is not None else None
        where = _localized(result, name, verdict)
        if verdict is not None:
            static_verdict = verdict.static
        else:
            static_verdict = Static.UNKNOWN if parameter.requires_grad else Static.FROZEN
        report = ParameterReport(
            name=name,
            shape=tuple(int(s) for s in parameter.shape),
            static=static_verdict,
            dynamic=dynamic.get(name),
            grad_norm=result.grads[name].norm if result is not None and name in result.grads else None,
            cut_by=list(verdict.cut_by) if verdict else [],
            # why the graph walk said so, as a code (words: fxflow.present.reasons); else where diagnose placed it
            reasons=[verdict.reason] if verdict is not None and verdict.reason else [],
            facts=dict(verdict.facts) if verdict is not None else {},
            finding=None if verdict is not None and verdict.reason else (where.reason if where else None),
            allowed=matches(name, allow),
            where=where,
        )
        opaque = None
        if static is not None and report.static == Static.REACHABLE and report.dynamic == Dynamic.MISSING:
            opaque = _opaque_on_path(static, name)  # only a disagreement needs the (costly) search
        judge(report, opaque)
        if static is not None and report.problem and report.static in (Static.REACHABLE, Static.UNKNOWN) \
                and drew is not False:
            _note_randomness(report, static)
        reports.append(report)
    return reports


def _note_randomness(report: ParameterReport, static: "StaticAnalysis") -> None:
    """A failure of values (not of the graph) behind a random op may not hold on another seed: say so."""
    from ..static.randomness import random_ops_affecting

    key = PARAM_PREFIX + report.name
    if key not in static.graph:
        return
    report.random_ops = random_ops_affecting(static.graph, key)
    if report.random_ops:  # said after what was found (words: fxflow.present.reasons)
        report.reasons.append(Draw.RANDOMNESS)


def unregistered_reports(result: "ProbeResult", vanishing: float) -> list[ParameterReport]:
    """One record per tensor that the real backward reached but ``model.parameters()`` does not list:
    it gets a gradient that no optimizer built from the model will ever apply."""
    if not result.unregistered:
        return []
    grads = {**result.grads, **{path: info for path, (_, info) in result.unregistered.items()}}
    judged = dynamic_verdicts(replace(result, grads=grads), vanishing)
    return [ParameterReport(name=path, shape=shape, static=Static.UNREGISTERED, dynamic=judged[path],
                            grad_norm=info.norm, reasons=[_kept(path)])
            for path, (shape, info) in result.unregistered.items()]


def _kept(path: str) -> UnregisteredReason:
    """Where an unregistered tensor is kept: a module's parameter in a plain list or dict (its path
    indexes one: ``layers[0].weight``), or a bare tensor attribute."""
    return UnregisteredReason.IN_CONTAINER if "[" in path else UnregisteredReason.PLAIN_TENSOR


def _localized(result: "ProbeResult | None", name: str, verdict: object) -> CutSite | None:
    """Where the real backward's zero or vanishing gradient of ``name`` died or shrank (fxflow.diagnose.localize),
    unless a static cut site already names that line."""
    site = result.explanations.get(name) if result is not None else None
    if site is None or (verdict is not None and any(s.source == site.source for s in verdict.cut_by)):
        return None
    return site


def judge(parameter: ParameterReport, opaque_path: str | None = None) -> None:
    """Compare the static and dynamic verdicts of one parameter; fill ``agree`` and the code of what the
    pair says (a :class:`~fxflow.verdicts.PairReason`: words by :mod:`fxflow.present.reasons`)."""
    static, dynamic = parameter.static, parameter.dynamic
    if dynamic is None or static == Static.UNKNOWN:
        return  # nothing to compare against: agree stays None
    parameter.agree = agreement(static, dynamic)
    if parameter.agree:
        usual = _AGREEING.get((static, dynamic))
        if usual is not None and not parameter.finding:  # where it was made, when located, says more
            parameter.reasons.append(usual)
        return
    if static == Static.REACHABLE and dynamic == Dynamic.MISSING:
        if opaque_path:  # agree stays False: an opaque op explains the mismatch, it does not remove it
            _told(parameter, Pair.OPAQUE_PATH, opaque=opaque_path)
        elif not parameter.finding:  # where diagnose found the copy that stood in for it says more
            parameter.reasons.append(Pair.NO_GRADIENT_AT_RUNTIME)
        return
    if static in (Static.CUT, Static.UNUSED) and dynamic != Dynamic.MISSING:
        _told(parameter, Pair.GRADIENT_OFF_TRACE)
    elif static == Static.ZERO:
        _told(parameter, Pair.ZERO_YET_GRADIENT)
    elif static == Static.FROZEN:
        _told(parameter, Pair.FROZEN_YET_GRADIENT)
    else:
        _told(parameter, Pair.MISMATCH, static=str(static), dynamic=str(dynamic))


def _told(parameter: ParameterReport, code: str, **facts: Any) -> None:
    """``code`` (with ``facts``) is the whole of what the row says: earlier findings and codes give way."""
    parameter.finding, parameter.reasons = None, [code]
    parameter.facts.update(facts)


# When the place was not located (fxflow.diagnose.localize explains it from a replayed run;
# fxflow.watch cannot replay the user's step, and a replay can fail): the usual causes are told.
_AGREEING = {
    (Static.REACHABLE, Dynamic.ZERO): Pair.ZERO_NOT_LOCATED,
    (Static.REACHABLE, Dynamic.NONFINITE): Pair.NONFINITE,
    (Static.REACHABLE, Dynamic.VANISHING): Pair.VANISHING_NOT_LOCATED,
}


def _opaque_on_path(static: "StaticAnalysis", name: str) -> str | None:
    """The first opaque op (custom autograd.Function) downstream of the parameter, if any."""
    import networkx as nx

    graph = static.graph
    key = PARAM_PREFIX + name
    if key not in graph:
        return None
    for node in sorted(nx.descendants(graph, key), key=lambda n: graph.nodes[n]["order"]):
        if graph.nodes[node].get("opaque"):
            return graph.nodes[node]["opaque"]
    return None


def backward_raises(static: "StaticAnalysis | None", result: "ProbeResult | None",
                    failure: CutSite | None) -> list[CutSite]:
    """Where the real loss.backward() raises. The backward that ran decides (its tripwires, or its
    own error); the static analysis names the nodes, with their lines, and speaks alone when no
    backward ran."""
    found = static.raises if static is not None else []
    if result is not None:  # each op the gradient reached, as the graph names it when it can
        by_source = {site.source: site for site in found if site.source}
        return list(dict.fromkeys(by_source.get(site.source, site) for site in result.backward_raises))
    if failure is not None:  # autograd's own error: the graph may know which line it came from
        return found or [failure]
    return list(found)


def uncertainty(static: "StaticAnalysis | None") -> dict[str, dict[str, Any]]:
    """The Report's ``uncertain`` field: nodes decided without running them on twins, per kind."""
    if static is None:
        return {}
    return {kind: {"nodes": count, "parameters": names} for kind, (count, names) in static.uncertain.items()}


def uncertainty_notes(uncertain: dict[str, dict[str, Any]]) -> list[str]:
    """One note per kind of node decided without running it, naming the parameters it touches."""
    notes = []
    for kind, found in uncertain.items():
        if kind == "name rules":  # the annotation's own note names the parameters such calls hold
            continue
        names = found["parameters"]
        touched = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        nodes = found["nodes"]
        notes.append(f"{nodes} node{'s' if nodes != 1 else ''} {_HOW_DECIDED[kind]}"
                     + (f"; upstream parameters: {touched}" if names else ""))
    return notes


_HOW_DECIDED = {
    "stand-ins": "decided on stand-in values (ones/zeros), not on twins of the real ones",
    "cut-short walk": "decided by a walk of its autograd history that stopped at the walk limit (an input may be missed)",
}
