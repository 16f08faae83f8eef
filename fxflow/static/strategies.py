"""The ways a node's edges are decided, in the order :class:`~fxflow.static.annotate.FlowInterpreter` tries them.

1. :class:`RecordedRun`: the graph is the recording of a real forward and the node's result is at
   hand; its edges come from the history the real run gave it, and the node does not run again.
2. :class:`TwinRun`: the node runs on twin tensors (meta, or real copies; for a recorded node
   whose history cannot be read, on the recorded snapshots) and the history of its result says
   which inputs it is differentiable in.
3. :class:`~fxflow.static.stand_ins.StandInRun`: what twins cannot run (``.item()``, a mask read in
   Python) runs on real stand-in tensors of the same shapes.
4. :class:`NameRules`: nothing could run it, or it takes the result of a node nothing ran: its
   edges come from the op's name (:func:`fxflow.static.rules.annotate_by_rules`).

Each is an object with ``edges(call) -> NodeFlow | None``; None passes the node to the next one.
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from ..capture import OPAQUE_KEY
from ..core.history import walk_history
from ..core.tensors import result_elements, tensors_in
from .aliasing import written_members
from .flow import NodeFlow
from .flow_state import NOT_RUN, UNRECORDED, FlowState, NodeCall
from .node_edges import EdgeBuilder
from .rules import annotate_by_rules, in_place
from .stand_ins import CustomBackward


def flow_of_result(state: FlowState, builder: EdgeBuilder, custom: CustomBackward, call: NodeCall,
                   entries: dict[tuple, list[str]], result: Any, recorded: bool = False) -> NodeFlow:
    """The node's flow, given its ``result`` (``recorded``: the recorded run's, whose walks start
    from the real tensors' histories); the walks come first, so an error there leaves everything
    as it was."""
    node, inputs, region = call.node, call.inputs, call.region
    written = written_members(call.members, call.states)
    histories = state.histories if recorded else None
    reached, elements = {}, {}
    if node.op != "output":
        outputs = tensors_in(result) + [t for _, t in written]
        reached = walk_history(outputs, entries, state.known, state.leaf_names, histories)
        elements = {key: walk_history(tensors, entries, state.known, state.leaf_names, histories)
                    for key, tensors in result_elements(result).items()}
    state.storages.spread(reached, state.readers(inputs), written)
    rerun = elements and not written and not region  # a second run must not write twice
    depends = builder.element_dependencies(call, reached) if rerun else None
    flow = builder.flow(call, reached, result, written, elements, depends)
    if OPAQUE_KEY in node.meta and region is None:
        custom.run(call, flow)
    state.storages.wrote(node, written)
    state.storages.register(node.name, result)
    call.value = result
    return flow


class RecordedRun:
    """The strategy for a node of a recorded run: its edges from the recorded result's own history."""

    def __init__(self, state: FlowState, builder: EdgeBuilder, custom: CustomBackward) -> None:
        self.state, self.builder, self.custom = state, builder, custom

    def edges(self, call: NodeCall) -> NodeFlow | None:
        """None where the node has no recorded result, its result was rewritten after the run (the
        probe's tripwire), or its history reads a saved tensor the real backward freed (``sgn``
        reads the input's dtype): the node then runs again on the snapshots."""
        if call.recorded is UNRECORDED or call.node.name in self.state.recorded.rewritten:
            return None
        entries = self.state.entry_points(call.inputs, call.members)
        try:
            return flow_of_result(self.state, self.builder, self.custom, call, entries, call.recorded, recorded=True)
        except RuntimeError:
            return None

    def adopt(self, call: NodeCall) -> Any:
        """The value later nodes see: the recorded result when another strategy ran the node again
        (later nodes' recorded results were made from it, and their walks must find it)."""
        if call.recorded is UNRECORDED or call.value is NOT_RUN or call.value is call.recorded:
            return call.value
        self.state.mark_results(call.node, tensors_in(call.recorded))
        self.state.storages.register(call.node.name, call.recorded)
        return call.recorded


class TwinRun:
    """The strategy that runs the node's op on twins (the node-kind methods of the interpreter)."""

    def __init__(self, state: FlowState, builder: EdgeBuilder, custom: CustomBackward) -> None:
        self.state, self.builder, self.custom = state, builder, custom

    def edges(self, call: NodeCall) -> NodeFlow | None:
        """None when the op raises on twins (a data-dependent op: ``.item()``, a boolean mask)."""
        # A recorded node that runs again runs on its snapshots: they are keyed as themselves.
        entries = self.state.entry_points(call.inputs, call.members, own=call.recorded is not UNRECORDED)
        runner = self.state.runner
        try:
            with torch.no_grad() if call.region else contextlib.nullcontext():
                args, kwargs = runner.arguments(call.node)
                result = runner.execute(call.node, args, kwargs)
        except Exception:
            return None
        return flow_of_result(self.state, self.builder, self.custom, call, entries, result)


class NameRules:
    """The last strategy: the node's edges from its op's name; it always decides."""

    def __init__(self, state: FlowState) -> None:
        self.state = state

    def edges(self, call: NodeCall) -> NodeFlow:
        state, node = self.state, call.node
        state.by_rules.append(node)
        flow = annotate_by_rules(node, state.model, state.names, lambda n: state.read(n).name)
        if in_place(node):
            state.storages.aliases[state.read(node.args[0]).name] = node.name
            state.storages.aliases[node.args[0].name] = node.name
        call.value = NOT_RUN
        return flow
