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
        run_node(node)                         # per node, under its recorded grad mode
          _recorded_result(node)               # twins "recorded": the recorded result, not run again
          placeholder / get_attr / call_* / output   (torch.fx.Interpreter; call_module: twins passed in)
          walk_history(outputs, entries, ...)         # the result's grad_fn history back to the inputs
          _flow(node, ...)                     # the node's edges          (fxflow/static/node_edges.py)
          _run_custom_backward(node)           # a custom autograd.Function: its own backward decides
        _run_on_stand_ins(node)                # what meta twins cannot run (.item(), masks, a whole
                                               # nn.Transformer): real stand-ins, modules' real weights
                                               #                           (fxflow/static/stand_ins.py)
        annotate_by_rules(node)                # nodes that could not run at all, or no example inputs

Result: ``node.meta["fxflow"]`` is a :class:`NodeFlow`.
"""
from __future__ import annotations

import contextlib
import types
from collections import ChainMap
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch.utils._device import _device_constructors

from .aliasing import StorageMap, state, written_members
from ..capture import GRAD_MODE_KEY, OPAQUE_KEY, RecordedValues
from ..dynamic.recorded import History, history_of
from ..core.tensors import parameter_names, result_elements, tensors_in
from .flow import META_KEY, data_inputs, resolve_attribute_of
from ..core.history import entry_key as _own_key, walk_history
from .rules import annotate_by_rules, in_place
from ..core.state import call_with_weights, weights_of
from .node_edges import EdgeBuilding
from .stand_ins import NOT_RUN, StandInRuns
from .twins import choose_twins, make_twin

_META = ("meta", "recorded")  # twin kinds that run nodes on meta tensors (recorded: where a node runs again)


class _Unrecorded:
    """No recorded result for a node: it runs."""


_UNRECORDED = _Unrecorded()


class FlowInterpreter(StandInRuns, EdgeBuilding, fx.Interpreter):
    """Runs the graph on twin tensors and records a :class:`NodeFlow` per node."""

    def __init__(self, graph_module: fx.GraphModule, model: torch.nn.Module, device: torch.device, twins: str,
                 loss_output: tuple[int, int] | None = None, recorded: RecordedValues | None = None):
        super().__init__(graph_module, garbage_collect_values=False)
        self.recorded = recorded  # with twins="recorded": what each node returned in the recorded run
        # id(snapshot or twin) -> the history of the real tensor it stands for (fxflow.dynamic.recorded)
        self.histories: dict[int, History] = dict(recorded.histories) if recorded is not None else {}
        self.loss_output = loss_output  # (index, count): the output tensor that is the model's loss
        self.model = model
        self.device = device  # where the model really lives: stand-ins are made there
        self.twins = twins  # "meta", "real" or "recorded": see annotate() and choose_twins()
        self.names = parameter_names(model)
        self.twin_of: dict[int, torch.Tensor] = {}  # id(real tensor) -> its twin
        self.twin_ids: set[int] = set()
        self.twin_names: dict[int, str] = {}  # id(twin of a parameter) -> parameter name
        self.by_name = {n.name: n for n in graph_module.graph.nodes}
        self.storages = StorageMap(self.by_name)  # bases and views: a write through one reaches all
        self.aliases = self.storages.aliases  # node written in place -> the node that wrote it last
        self.known: dict[tuple, str] = {}  # keys of every result so far -> its node: walks stop there
        self.keep_alive: list[Any] = []  # grad_fns whose ids are keys
        self.weight_twin = self.twin  # what a module call gets for its weights (see _stand_in_weights)
        self.leaf_names = ChainMap(self.twin_names, self.names)  # leaf tensor id -> parameter name
        self.by_rules: list[fx.Node] = []  # nodes nothing could run: decided by name rules

    # -- twin state -------------------------------------------------------------------------
    def twin(self, tensor: torch.Tensor) -> torch.Tensor:
        """The twin of a real tensor, made once."""
        twin = self.twin_of.get(id(tensor))
        if twin is None:
            twin = make_twin(tensor, self.twins)
            if self.recorded is not None:  # recorded results' histories lead to the real tensor
                self.histories[id(twin)] = history_of(tensor)
            if isinstance(tensor, torch.nn.Parameter):
                self.twin_names[id(twin)] = self.names.get(id(tensor), "")
            self.twin_of[id(tensor)] = twin
            self.twin_ids.add(id(twin))
            self.keep_alive.append(tensor)
        return twin

    def is_twin(self, value: Any) -> bool:
        if not isinstance(value, torch.Tensor):
            return False
        return id(value) in self.twin_ids or (self.twins in _META and value.is_meta)

    # -- node kinds: the user's weights are never swapped, their twins are passed in ------------
    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        value = resolve_attribute_of(self.model, self.module, target)
        return self.twin(value) if isinstance(value, torch.Tensor) and not self.is_twin(value) else value

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        module = self.model.get_submodule(target)
        return call_with_weights(module, weights_of(module, self.weight_twin), args, kwargs)

    # -- per node ---------------------------------------------------------------------------
    def run_node(self, node: fx.Node) -> Any:
        if self.twins in _META and needs_default_device(node):  # factories inside land on meta
            with torch.device("meta"):
                return self._run_node(node)
        return self._run_node(node)

    def _run_node(self, node: fx.Node) -> Any:
        inputs = data_inputs(node)
        if any(self.env[self._read(i)] is NOT_RUN for i in inputs):
            self._by_rules(node)
            return NOT_RUN
        # A write through any view of an input changes every value in its storage: watch them all.
        members = self.storages.sharing([self.env[i] for i in inputs]) if node.op != "output" else []
        entries = self._entry_points(inputs, members)
        states = {id(t): state(t) for _, t in members}
        region = node.meta.get(GRAD_MODE_KEY)
        recorded = self._recorded_result(node)
        if recorded is not _UNRECORDED:
            if node.name not in self.recorded.rewritten:
                try:  # the history autograd built for this very call in the real run
                    return self._annotate_result(node, inputs, members, entries, states, region, recorded, True)
                except RuntimeError:  # it reads a saved tensor the real backward freed (sgn: the input's dtype)
                    pass  # so the call runs again, on the snapshots: as on meta twins
            entries = self._entry_points(inputs, members, own=True)
        try:
            with torch.no_grad() if region else contextlib.nullcontext():
                args, kwargs = self.fetch_args_kwargs_from_env(node)
                result = getattr(self, node.op)(node.target, args, kwargs)
        except Exception:  # a data-dependent op (.item(), a boolean mask): retry on real stand-ins
            result = self._run_on_stand_ins(node, inputs, members, region)
        else:
            result = self._annotate_result(node, inputs, members, entries, states, region, result)
        if recorded is _UNRECORDED or result is NOT_RUN:
            return result
        # Later nodes' recorded results were made from the recorded one: they must find it.
        self._flow_keys(node, tensors_in(recorded))
        self.storages.register(node.name, recorded)
        return recorded

    def _recorded_result(self, node: fx.Node) -> Any:
        """What the node returned in the recorded run, when the graph is that run (else _UNRECORDED)."""
        if self.recorded is None or node.op not in ("call_function", "call_method"):
            return _UNRECORDED
        return self.recorded.results.get(node.name, _UNRECORDED)

    def _annotate_result(self, node: fx.Node, inputs: list[fx.Node], members: list[tuple[str, torch.Tensor]],
                         entries: dict[tuple, list[str]], states: dict[int, tuple], region: Any, result: Any,
                         recorded: bool = False) -> Any:
        """Write the node's flow, given its ``result`` (``recorded``: the recorded run's, whose walks
        start from the real tensors' histories); the walks come first, so an error there leaves
        everything as it was."""
        written = written_members(members, states)
        outputs = tensors_in(result) + [t for _, t in written]
        histories = self.histories if recorded else None
        reached = walk_history(outputs, entries, self.known, self.leaf_names, histories) if node.op != "output" else {}
        elements = {key: walk_history(tensors, entries, self.known, self.leaf_names, histories)
                    for key, tensors in result_elements(result).items()} if node.op != "output" else {}
        self.storages.spread(reached, self._readers(inputs), written)
        rerun = elements and not written and not region  # a second run must not write twice
        depends = self._element_dependencies(node, inputs, reached) if rerun else None
        node.meta[META_KEY] = self._flow(node, inputs, reached, result, region, written, elements, depends)
        if OPAQUE_KEY in node.meta and region is None:
            self._run_custom_backward(node, inputs, result)
        self.storages.wrote(node, written)
        self.storages.register(node.name, result)
        return result

    def key(self, tensor: torch.Tensor) -> tuple:
        """:func:`entry_key` of a tensor, or of the recorded tensor a snapshot stands for."""
        history = self.histories.get(id(tensor))
        return history.key if history is not None else _own_key(tensor)

    def _by_rules(self, node: fx.Node) -> None:
        self.by_rules.append(node)
        node.meta[META_KEY] = annotate_by_rules(node, self.model, self.names, lambda n: self._read(n).name)
        if in_place(node):
            self.aliases[self._read(node.args[0]).name] = node.name
            self.aliases[node.args[0].name] = node.name

    def _read(self, node: fx.Node) -> fx.Node:
        """The node whose value a read of ``node`` sees: the last in-place write into it, if any."""
        return self.storages.read(node)

    def _readers(self, inputs: list[fx.Node]) -> list[tuple[str, torch.Tensor]]:
        """(name read, tensor) for every tensor the node is called with."""
        return [(self._read(i).name, t) for i in inputs for t in tensors_in(self.env[i])]

    def _entry_points(self, inputs: list[fx.Node], members: Sequence[tuple[str, torch.Tensor]] = (),
                      own: bool = False) -> dict[tuple, list[str]]:
        """Where each input tensor's gradient would enter autograd, keyed as in the walk.

        The tensors are the ones the node is called with (``env[input]``); the name is the node a
        read of that input sees (the last write into its storage). ``members`` (values sharing
        storage with an input) are entries too: a write through a view reads its base. A snapshot
        is keyed by its recorded tensor's history, unless ``own`` (the node runs again on it).
        """
        entries: dict[tuple, list[str]] = {}
        entry_key = _own_key if own else self.key

        def add(key: tuple, name: str) -> None:
            names = entries.setdefault(key, [])
            if name not in names:
                names.append(name)

        for input_node in inputs:
            name = self._read(input_node).name
            for tensor in tensors_in(self.env[input_node]):
                if tensor.requires_grad:
                    add(entry_key(tensor), name)
        for name, tensor in members:
            if tensor.requires_grad:
                add(entry_key(tensor), self.storages.read_name(name))
        return entries

def annotate(graph_module: fx.GraphModule, model: torch.nn.Module,
             inputs: Sequence[Any] | None, twins: str | None = None,
             loss_output: tuple[int, int] | None = None, recorded: RecordedValues | None = None) -> list[str]:
    """Write a :class:`NodeFlow` into ``node.meta["fxflow"]`` for every node of the graph.

    With example inputs every node runs on twin tensors; without, edges come from name rules.
    The model's own tensors are never replaced: twins are passed to each module call. Returns
    notes for the report (module calls whose parameters only a name rule could decide).
    """
    names = parameter_names(model)
    if inputs is None:
        aliases: dict[str, str] = {}  # input mutated in place -> the in-place node
        for node in graph_module.graph.nodes:
            node.meta[META_KEY] = annotate_by_rules(node, model, names, lambda n: aliases.get(n.name, n.name))
            if in_place(node):  # later reads of the tensor see this node (h.detach_() cuts them)
                aliases[node.args[0].name] = node.name
        return []
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    twins = twins or choose_twins(model, inputs, recorded=recorded is not None)
    interpreter = FlowInterpreter(graph_module, model, device, twins, loss_output,
                                  recorded if twins == "recorded" else None)
    twin_inputs = [interpreter.twin(x) if isinstance(x, torch.Tensor) else x for x in inputs]
    interpreter.run(*twin_inputs)
    return _rule_notes(interpreter.by_rules)


def needs_default_device(node: fx.Node) -> bool:
    """Whether running ``node`` on meta twins needs meta as the default device: a factory
    (``torch.zeros(n)``) or Python code (a module, a user function) that may call one.

    A torch op implemented in C that is not a factory takes its device from its tensor arguments,
    and the meta kernels it runs pass theirs explicitly; under ``torch.device("meta")`` every
    torch call inside those kernels went through the device mode's Python handler (65 per node on
    GPT-2), a quarter of the annotation's time.
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
