"""Annotate every node with how gradient can pass through it, by running the graph on twin tensors.

Like ``torch.fx.passes.shape_prop`` this is an interpreter that writes its result into
``node.meta``; unlike it, autograd stays on. Each node runs on twins of the model's weights and
inputs (meta tensors: no memory, no compute; or, for small models, cheap real copies; see
:func:`choose_twins`) whose autograd history is real, and the history of its result says exactly which
inputs it is differentiable in: a comparison returns a bool tensor, ``detach`` a tensor without
history, ``zeros_like`` one that ignores its input. No list of op names is needed for any of
that; only zero derivatives come from :mod:`fxflow.static.rules`.

The user's weights are never swapped: ``get_attr`` returns a weight's twin, and ``call_module``
passes twins to the module for that one call (``torch.func.functional_call``), so an analysis
that fails midway leaves the model as it was.

Twins ``recorded``: the graph is the recording of a real forward and its results are at hand
(:class:`fxflow.capture.RecordedValues`: meta snapshots that keep the real tensors' histories), so a
``call_*`` node does not run; its result is the recorded one, and the walk starts from the history
the real run gave it. What cannot be read that way runs again on the snapshots, as on meta twins: a
history that reads a saved tensor the real backward freed, a result the probe's tripwire rebased.

Call tree::

    annotate(graph_module, model, inputs)
      FlowInterpreter.run(*twin_inputs)
        run_node(node)                         # per node: a NodeCall, then the strategies in order
          RecordedRun.edges(call)              # twins "recorded": the recorded result's own history
          TwinRun.edges(call)                  # the op on twins (torch.fx.Interpreter's node kinds;
                                               # call_module: twins passed in), its result's history
          StandInRun.edges(call)               # what twins cannot run (.item(), masks, a whole
                                               # nn.Transformer): real stand-ins  (fxflow/static/stand_ins.py)
          NameRules.edges(call)                # nothing could run it, or no example inputs
        each walks the result's grad_fn history back to the inputs (fxflow/core/history.py), builds
        the edges (fxflow/static/node_edges.py) and runs a custom autograd.Function's own backward
          ZeroByConstruction.check(call, flow) # diff edges a suspect reaches whose backward on random
                                               # stand-ins is exactly zero: zero (fxflow/static/zero_by_construction.py)

The strategies (fxflow/static/strategies.py) share one :class:`~fxflow.static.flow_state.FlowState`.
Result: ``node.meta["fxflow"]`` is a :class:`NodeFlow`.
"""
from __future__ import annotations

import types
from typing import Any, Collection, Sequence

import torch
import torch.fx as fx
from torch.utils._device import _device_constructors

from .aliasing import state as storage_state
from ..capture import GRAD_MODE_KEY, RecordedValues
from ..core.tensors import parameter_names
from .flow import META_KEY, data_inputs, resolve_attribute_of
from .flow_state import META_TWINS, NOT_RUN, UNRECORDED, FlowState, NodeCall
from .node_edges import EdgeBuilder
from .rules import annotate_by_rules, in_place
from ..prepare.inputs import device_of
from ..core.state import call_with_weights, weights_of
from .stand_ins import CustomBackward, StandInRun
from .strategies import NameRules, RecordedRun, TwinRun
from .twins import choose_twins
from .zero_by_construction import ZeroByConstruction


class FlowInterpreter(fx.Interpreter):
    """Runs the graph on twin tensors and records a :class:`NodeFlow` per node: for each node, the
    first of its edge strategies that can decide (see :mod:`fxflow.static.strategies`)."""

    def __init__(self, graph_module: fx.GraphModule, model: torch.nn.Module, device: torch.device, twins: str,
                 loss_output: tuple[int, int] | None = None, recorded: RecordedValues | None = None,
                 zero_suspects: Collection[str] | None = None):
        super().__init__(graph_module, garbage_collect_values=False)
        self.state = FlowState(graph_module, model, device, twins, self, loss_output, recorded)
        builder, custom = EdgeBuilder(self.state), CustomBackward(self.state)
        self.recorded_run = RecordedRun(self.state, builder, custom)
        self.name_rules = NameRules(self.state)
        self.zero_by_construction = ZeroByConstruction(self.state, zero_suspects)
        self.strategies = (self.recorded_run, TwinRun(self.state, builder, custom),
                           StandInRun(self.state, builder, custom), self.name_rules)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Run the graph; its values land in the state's ``env``, which the strategies read."""
        return super().run(*args, initial_env=self.state.env, **kwargs)

    # -- NodeRunner: what the strategies ask of the interpreter -------------------------------
    def arguments(self, node: fx.Node) -> tuple[tuple, dict]:
        return self.fetch_args_kwargs_from_env(node)

    def execute(self, node: fx.Node, args: tuple, kwargs: dict) -> Any:
        return getattr(self, node.op)(node.target, args, kwargs)

    # -- node kinds: the user's weights are never swapped, their twins are passed in ------------
    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        value = resolve_attribute_of(self.state.model, self.module, target)
        return self.state.twin(value) if isinstance(value, torch.Tensor) and not self.state.is_twin(value) else value

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        module = self.state.model.get_submodule(target)
        return call_with_weights(module, weights_of(module, self.state.weight_twin), args, kwargs)

    # -- per node ---------------------------------------------------------------------------
    def run_node(self, node: fx.Node) -> Any:
        if self.state.twins in META_TWINS and needs_default_device(node):  # factories inside land on meta
            with torch.device("meta"):
                return self._decide(node)
        return self._decide(node)

    def _decide(self, node: fx.Node) -> Any:
        """The node's flow from the first strategy that decides it; returns the value later nodes read."""
        call = self._call(node)
        if call is None:  # it reads the result of a node nothing ran: only name rules can tell
            call = NodeCall(node, [], [], {}, None, UNRECORDED)
            node.meta[META_KEY] = self.name_rules.edges(call)
            return NOT_RUN
        for strategy in self.strategies:
            flow = strategy.edges(call)
            if flow is not None:
                self.zero_by_construction.check(call, flow)
                node.meta[META_KEY] = flow
                break
        return self.recorded_run.adopt(call)

    def _call(self, node: fx.Node) -> NodeCall | None:
        """The node as the strategies see it; None when one of its inputs could not run."""
        state = self.state
        inputs = data_inputs(node)
        if any(state.env[state.read(i)] is NOT_RUN for i in inputs):
            return None
        # A write through any view of an input changes every value in its storage: watch them all.
        members = state.storages.sharing([state.env[i] for i in inputs]) if node.op != "output" else []
        recorded = UNRECORDED
        if state.recorded is not None and node.op in ("call_function", "call_method"):
            recorded = state.recorded.results.get(node.name, UNRECORDED)
        return NodeCall(node, inputs, members, {id(t): storage_state(t) for _, t in members},
                        node.meta.get(GRAD_MODE_KEY), recorded)


def annotate(graph_module: fx.GraphModule, model: torch.nn.Module,
             inputs: Sequence[Any] | None, twins: str | None = None,
             loss_output: tuple[int, int] | None = None, recorded: RecordedValues | None = None,
             zero_suspects: Collection[str] | None = None) -> list[str]:
    """Write a :class:`NodeFlow` into ``node.meta["fxflow"]`` for every node of the graph.

    With example inputs every node runs on twin tensors; without, edges come from name rules.
    The model's own tensors are never replaced: twins are passed to each module call. Returns
    notes for the report (module calls whose parameters only a name rule could decide).
    ``zero_suspects``: the parameters whose zero by construction is looked for (those a real
    backward left exactly zero; None, every one: see :mod:`fxflow.static.zero_by_construction`).
    """
    names = parameter_names(model)
    if inputs is None:
        aliases: dict[str, str] = {}  # input mutated in place -> the in-place node
        for node in graph_module.graph.nodes:
            node.meta[META_KEY] = annotate_by_rules(node, model, names, lambda n: aliases.get(n.name, n.name))
            if in_place(node):  # later reads of the tensor see this node (h.detach_() cuts them)
                aliases[node.args[0].name] = node.name
        return []
    twins = twins or choose_twins(model, inputs, recorded=recorded is not None)
    interpreter = FlowInterpreter(graph_module, model, device_of(model), twins, loss_output,
                                  recorded if twins == "recorded" else None, zero_suspects)
    twin_inputs = [interpreter.state.twin(x) if isinstance(x, torch.Tensor) else x for x in inputs]
    interpreter.run(*twin_inputs)
    return _rule_notes(interpreter.state.by_rules)


def needs_default_device(node: fx.Node) -> bool:
    """Whether running ``node`` on meta twins needs meta as the default device: a factory
    (``torch.zeros(n)``) or Python code (a module, a user function) that may call one.

    A torch op implemented in C that is not a factory takes its device from its tensor arguments,
    and the meta kernels it runs pass theirs explicitly; under ``torch.device("meta")`` every
    torch call inside those kernels would go through the device mode's Python handler, dozens per
    node, for nothing.
    """
    if node.op == "call_module":
        return True
    if node.op == "call_method":
        return not isinstance(getattr(torch.Tensor, node.target, None), _C_METHODS)
    if node.op == "call_function":
        return not isinstance(node.target, types.BuiltinFunctionType) or node.target in _device_constructors()
    return False


_C_METHODS = (types.MethodDescriptorType, types.WrapperDescriptorType, types.BuiltinFunctionType,
              types.MethodWrapperType)


def _rule_notes(nodes: list[fx.Node]) -> list[str]:
    """A note counting the parameters whose edges only a name rule could decide (nodes nothing ran)."""
    carrying = [node for node in nodes if node.meta[META_KEY].params]
    parameters = sorted({name for node in carrying for name in node.meta[META_KEY].params})
    if not parameters:
        return []
    shown = ", ".join(parameters[:4]) + (f" and {len(parameters) - 4} more" if len(parameters) > 4 else "")
    calls = ", ".join(node.name for node in carrying[:3]) + (" ..." if len(carrying) > 3 else "")
    return [f"{len(parameters)} parameter{'s' if len(parameters) != 1 else ''} ({shown}) had their gradient "
            f"edges decided by a name rule at {calls}: nodes that could not run on twin or stand-in tensors, "
            "or that take the result of one"]
