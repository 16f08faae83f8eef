"""Node by node: the edges the annotation reads from a recorded run against the edges twins rebuild.

``flow_differences(model, inputs)`` runs the check's own probe (one real forward, recorded, and the
backward that frees its saved tensors), then annotates the recorded graph three times: from the
results the run computed (twins ``recorded``), and by running it again on ``meta`` and on ``real``
twins. It returns every node whose flow differs, or None when the run cannot be read back (forward
wrote into a tensor after making it: then the twins are what the check uses). A shape is compared
only where both sides have one: meta twins leave some unknown, and stand-ins are ones and zeros.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from fxflow.dynamic.loss import labels_in
from fxflow.dynamic.probe import ModelRun
from fxflow.prepare import prepare
from fxflow.core.guard import guard
from fxflow.static.annotate import annotate
from fxflow.static.flow import META_KEY, NodeFlow


def recorded_run(model: torch.nn.Module, inputs: Any) -> tuple[Any, Any, Any]:
    """The probe's recording of one real forward and backward: (recorded, runner, example inputs).
    Call inside ``guard(model, fresh_grads=True)``."""
    prepared = prepare(model, inputs, None, infer=False)
    probe = ModelRun(prepared.runner, record=True, labels_given=labels_in(inputs))
    probe.run(prepared.example)
    return probe.recorded, prepared.runner, prepared.example


def flow_differences(model: torch.nn.Module, inputs: Any, kinds: tuple[str, ...] = ("meta", "real"),
                     ) -> list[str] | None:
    """``node: twins kind: what differs`` for every node whose recorded flow differs from a twin
    kind's; None when there are no recorded values to read."""
    with guard(model, fresh_grads=True):
        recorded, runner, example = recorded_run(model, inputs)
        assert recorded is not None and recorded.graph_module is not None, recorded
        if recorded.values is None:
            return None
        graph_module = recorded.graph_module
        read = _flows(graph_module, runner, example, twins="recorded", recorded=recorded.values)
        differences = []
        for kind in kinds:
            rebuilt = _flows(graph_module, runner, example, twins=kind)
            differences += [f"{name}: {kind}: {_difference(read[name], rebuilt[name])}"
                            for name in read if not _same(read[name], rebuilt[name])]
    return differences


def _flows(graph_module: torch.fx.GraphModule, runner: torch.nn.Module, example: Any, **how: Any) -> dict[str, NodeFlow]:
    annotate(graph_module, runner, example, **how)
    return {node.name: node.meta[META_KEY] for node in graph_module.graph.nodes}


def _comparable(flow: NodeFlow, other: NodeFlow) -> NodeFlow:
    unknown = flow.shape is None or other.shape is None or flow.on_stand_ins or other.on_stand_ins
    return dataclasses.replace(flow, on_stand_ins=False, shape=None if unknown else flow.shape)


def _same(read: NodeFlow, rebuilt: NodeFlow) -> bool:
    return _comparable(read, rebuilt) == _comparable(rebuilt, read)


def _difference(read: NodeFlow, rebuilt: NodeFlow) -> str:
    left, right = dataclasses.asdict(_comparable(read, rebuilt)), dataclasses.asdict(_comparable(rebuilt, read))
    return "; ".join(f"{key} {left[key]!r} read, {right[key]!r} rebuilt" for key in left if left[key] != right[key])
