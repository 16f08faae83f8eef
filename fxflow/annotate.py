"""Annotate every node with how gradient can pass through it, by running the graph on twin tensors.

Like ``torch.fx.passes.shape_prop`` this is an interpreter that writes its result into
``node.meta``; unlike it, autograd stays on. Each node runs on twins of the model's weights and
inputs (meta tensors: no memory, no compute; or, for small models, cheap real copies; see
:func:`choose_twins`) whose autograd history is real, and the history of its result says exactly which
inputs it is differentiable in: a comparison returns a bool tensor, ``detach`` a tensor without
history, ``zeros_like`` one that ignores its input. No list of op names is needed for any of
that; only zero derivatives come from :mod:`fxflow.rules`.

The user's weights are never swapped: ``get_attr`` returns a weight's twin, and ``call_module``
passes twins to the module for that one call (``torch.func.functional_call``), so an analysis
that fails midway leaves the model as it was.

Call tree::

    annotate(graph_module, model, inputs)
      FlowInterpreter.run(*twin_inputs)
        run_node(node)                         # per node, under its recorded grad mode
          placeholder / get_attr / call_* / output   (torch.fx.Interpreter; call_module: twins passed in)
          walk_history(outputs, entries, ...)         # the result's grad_fn history back to the inputs
          _run_custom_backward(node)           # a custom autograd.Function: its own backward decides
        _run_on_stand_ins(node)                # what meta twins cannot run (.item(), masks, a whole
                                               # nn.Transformer): real stand-ins, modules' real weights
        annotate_by_rules(node)                # nodes that could not run at all, or no example inputs

Result: ``node.meta["fxflow"]`` is a :class:`NodeFlow`.
"""
from __future__ import annotations

import contextlib
from collections import ChainMap
from typing import Any, Iterator, Sequence

import torch
import torch.fx as fx
from torch.utils._pytree import tree_map

from . import rules
from .aliasing import StorageMap, state, storage_key, written_members
from .capture import GRAD_MODE_KEY, OPAQUE_KEY, GradRegion
from .verdicts import BACKWARD_RAN_KEY, LOSS_OUTPUT_KEY
from .flow import (DIFF, META_KEY, NONE, ZERO, NodeFlow, OutputFlow, data_inputs, parameter_names,
                   resolve_attribute_of, result_elements, tensors_in)
from .history import backward_kinds, entry_key, walk_history
from .rules import annotate_by_rules, in_place
from .state import call_with_weights, weights_of
from .twins import StandIn, choose_twins, make_twin, random_stand_in_maker, real_copy, stand_in

class _NotRun:
    """The value of a node that could not run on twins (nor on real stand-ins)."""


NOT_RUN = _NotRun()


class FlowInterpreter(fx.Interpreter):
    """Runs the graph on twin tensors and records a :class:`NodeFlow` per node."""

    def __init__(self, graph_module: fx.GraphModule, model: torch.nn.Module, device: torch.device, twins: str,
                 loss_output: tuple[int, int] | None = None):
        super().__init__(graph_module, garbage_collect_values=False)
        self.loss_output = loss_output  # (index, count): the output tensor that is the model's loss
        self.model = model
        self.device = device  # where the model really lives: stand-ins are made there
        self.twins = twins  # "meta" or "real": see annotate()
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
            if isinstance(tensor, torch.nn.Parameter):
                self.twin_names[id(twin)] = self.names.get(id(tensor), "")
            self.twin_of[id(tensor)] = twin
            self.twin_ids.add(id(twin))
            self.keep_alive.append(tensor)
        return twin

    def is_twin(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and (id(value) in self.twin_ids or (self.twins == "meta" and value.is_meta))

    # -- node kinds: the user's weights are never swapped, their twins are passed in ------------
    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        value = resolve_attribute_of(self.model, self.module, target)
        return self.twin(value) if isinstance(value, torch.Tensor) and not self.is_twin(value) else value

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        module = self.model.get_submodule(target)
        return call_with_weights(module, weights_of(module, self.weight_twin), args, kwargs)

    # -- per node ---------------------------------------------------------------------------
    def run_node(self, node: fx.Node) -> Any:
        inputs = data_inputs(node)
        if any(self.env[self._read(i)] is NOT_RUN for i in inputs):
            self._by_rules(node)
            return NOT_RUN
        # A write through any view of an input changes every value in its storage: watch them all.
        members = self.storages.sharing([self.env[i] for i in inputs]) if node.op != "output" else []
        entries = self._entry_points(inputs, members)
        states = {id(t): state(t) for _, t in members}
        region = node.meta.get(GRAD_MODE_KEY)
        try:
            with torch.no_grad() if region else contextlib.nullcontext():
                args, kwargs = self.fetch_args_kwargs_from_env(node)
                result = getattr(self, node.op)(node.target, args, kwargs)
        except Exception:  # a data-dependent op (.item(), a boolean mask): retry on real stand-ins
            return self._run_on_stand_ins(node, inputs, members, region)
        written = written_members(members, states)
        outputs = tensors_in(result) + [t for _, t in written]
        reached = walk_history(outputs, entries, self.known, self.leaf_names) if node.op != "output" else {}
        self.storages.spread(reached, self._readers(inputs), written)
        elements = {key: walk_history(tensors, entries, self.known, self.leaf_names)
                    for key, tensors in result_elements(result).items()} if node.op != "output" else {}
        rerun = elements and not written and not region  # a second run must not write twice
        depends = self._element_dependencies(node, inputs, reached) if rerun else None
        node.meta[META_KEY] = self._flow(node, inputs, reached, result, region, written, elements, depends)
        if OPAQUE_KEY in node.meta and region is None:
            self._run_custom_backward(node, inputs, result)
        self.storages.wrote(node, written)
        self.storages.register(node.name, result)
        return result

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

    def _entry_points(self, inputs: list[fx.Node],
                      members: Sequence[tuple[str, torch.Tensor]] = ()) -> dict[tuple, list[str]]:
        """Where each input tensor's gradient would enter autograd, keyed as in the walk.

        The tensors are the ones the node is called with (``env[input]``); the name is the node a
        read of that input sees (the last write into its storage). ``members`` (values sharing
        storage with an input) are entries too: a write through a view reads its base.
        """
        entries: dict[tuple, list[str]] = {}

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

    def _run_on_stand_ins(self, node: fx.Node, inputs: list[fx.Node], members: list[tuple[str, torch.Tensor]],
                          region: GradRegion | None) -> Any:
        """Run a node meta twins cannot (its result depends on values) on real stand-in tensors.

        Each twin input becomes a real tensor of the same shape and dtype; the result's history
        back to those stand-ins gives the edges, as on twins. The result goes back to twins (leaves
        that keep ``requires_grad``) so later nodes run as usual; so does an input the node wrote
        into (``h[mask] = v``), which later reads then see. Only if this fails too is the node
        decided by name rules.
        """
        stand_ins: dict[int, tuple[torch.Tensor, torch.Tensor, tuple]] = {}  # id(twin) -> twin, stand-in, state
        entries: dict[tuple, list[str]] = {}

        def real(value: Any) -> Any:
            if not self.is_twin(value):
                return value
            if id(value) not in stand_ins:
                made = stand_in(value, self.device, self.keep_alive)
                stand_ins[id(value)] = (value, made, state(made))
            return stand_ins[id(value)][1]

        try:
            with self._stand_in_weights() as weight_names, self.device, \
                    torch.no_grad() if region else contextlib.nullcontext():
                names = ChainMap(weight_names, self.leaf_names)
                args, kwargs = self.fetch_args_kwargs_from_env(node)
                args, kwargs = tree_map(real, (args, kwargs))
                for input_node in inputs:  # real tensors among the inputs (factories) are used as they are
                    for tensor in tensors_in(self.env[input_node]):
                        if tensor.requires_grad:
                            entries.setdefault(entry_key(real(tensor)), []).append(self._read(input_node).name)
                real_members = [(name, t) for name, t in members if not self.is_twin(t)]  # written in place
                states = {id(t): state(t) for _, t in real_members}
                result = getattr(self, node.op)(node.target, args, kwargs)
                changed = {id(twin): made for twin, made, before in stand_ins.values() if state(made) != before}
                written_twins = {storage_key(stand_ins[i][0]) for i in changed}  # written in their stand-ins
                written = [(name, t) for name, t in members if storage_key(t) in written_twins]
                written += written_members(real_members, states)
                outputs = tensors_in(result) + list(changed.values()) + [t for _, t in written if not self.is_twin(t)]
                reached = walk_history(outputs, entries, set(), names)
                self.storages.spread(reached, self._readers(inputs), written)
                elements = {key: walk_history(tensors, entries, set(), names)
                            for key, tensors in result_elements(result).items()}
                result = tree_map(self._retwin, result)
        except Exception:  # not even real values help (.numpy() of a tensor that needs grad, ...)
            self._by_rules(node)
            return NOT_RUN
        node.meta[META_KEY] = self._flow(node, inputs, reached, result, region, written, elements)
        for input_node in inputs:  # the written twins are replaced: later reads see the write
            value = self.env[input_node]
            if isinstance(value, torch.Tensor) and id(value) in changed:
                self.env[input_node] = self._retwin(changed[id(value)])
                self._flow_keys(self._read(input_node), tensors_in(self.env[input_node]))
        node.meta[META_KEY].on_stand_ins = True
        self.storages.wrote(node, written)
        self.storages.register(node.name, result)
        if OPAQUE_KEY in node.meta and region is None:
            self._run_custom_backward(node, inputs, None)
        return result

    def _stand_in_arguments(self, node: fx.Node, inputs: list[fx.Node], make: StandIn | None = None,
                            ) -> tuple[tuple, dict, dict[tuple, list[str]]]:
        """The node's arguments with every twin replaced by a real stand-in (one per twin, made by
        ``make``), and the entry points of those stand-ins keyed as in the walk."""
        stand_ins: dict[int, torch.Tensor] = {}
        make = make or (lambda twin, device: stand_in(twin, device, self.keep_alive))

        def real(value: Any) -> Any:
            if not self.is_twin(value):
                return value
            if id(value) not in stand_ins:
                stand_ins[id(value)] = make(value, self.device)
            return stand_ins[id(value)]

        args, kwargs = tree_map(real, self.fetch_args_kwargs_from_env(node))
        entries: dict[tuple, list[str]] = {}
        for input_node in inputs:
            for tensor in tensors_in(self.env[input_node]):
                if self.is_twin(tensor) and tensor.requires_grad:
                    entries.setdefault(entry_key(real(tensor)), []).append(self._read(input_node).name)
        return args, kwargs, entries

    @contextlib.contextmanager
    def _stand_in_weights(self) -> Iterator[dict[int, str]]:
        """Module calls inside get real copies of their weights (ones of the same shape for weights
        on meta) instead of twins. Yields ``{id(copy of a parameter): its name}`` for the walk."""
        copies: dict[int, torch.Tensor] = {}
        names: dict[int, str] = {}

        def copy_of(tensor: torch.Tensor) -> torch.Tensor:
            if id(tensor) not in copies:
                copies[id(tensor)] = real_copy(tensor, self.device)
                if id(tensor) in self.names:
                    names[id(copies[id(tensor)])] = self.names[id(tensor)]
            return copies[id(tensor)]

        self.weight_twin = copy_of
        try:
            yield names
        finally:
            self.weight_twin = self.twin

    def _run_custom_backward(self, node: fx.Node, inputs: list[fx.Node], result: Any | None) -> None:
        """Run a custom ``autograd.Function``'s own backward to see which inputs it gives a gradient.

        The walk sees a Function's autograd node linked to every input, but its backward (the
        user's code, which the real backward runs anyway) may return ``None`` for one: that edge
        carries nothing, as after ``detach``. Gradients of ones flow back from every output that
        requires grad, on real tensors: the twins' ``result`` when they are real, else the node runs
        again on stand-ins (random values: ones could zero a value-dependent backward). ``None``
        -> NONE, all zeros -> ZERO, else DIFF. If the backward cannot run on them, the node stays
        opaque (no BACKWARD_RAN_KEY) and the real backward decides.
        """
        try:
            with torch.enable_grad(), self.device:
                if self.twins == "meta" or result is None:
                    args, kwargs, entries = self._stand_in_arguments(node, inputs, random_stand_in_maker())
                    result = self.call_function(node.target, args, kwargs)
                else:
                    entries = self._entry_points(inputs)
                    args, kwargs = self.fetch_args_kwargs_from_env(node)
                kinds = backward_kinds(result, tensors_in((args, kwargs)), entries)
        except Exception:
            return
        node.meta[META_KEY].inputs.update(kinds)
        node.meta[BACKWARD_RAN_KEY] = True

    def _retwin(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or self.is_twin(value):
            return value
        return make_twin(value, self.twins)

    def _flow(self, node: fx.Node, inputs: list[fx.Node], reached: dict[str, str], result: Any,
              region: GradRegion | None, written: Sequence[tuple[str, torch.Tensor]] = (),
              elements: dict[Any, dict[str, str]] | None = None,
              depends: dict[Any, set[str]] | None = None) -> NodeFlow:
        """The node's edges. ``written``: values in storages the node wrote into, which it read too;
        ``elements``: what each element of a tuple/dict result reached on its own; ``depends``: the
        inputs without gradient that each element depends on (:meth:`_element_dependencies`)."""
        outputs = tensors_in(result)
        flow = NodeFlow(grad_region=region, cut_short=getattr(reached, "cut_short", False))
        rules.mark_no_derivative(node, reached)
        if node.op == "output":
            for input_node in self._loss_inputs(node, inputs):
                floating = any(t.is_floating_point() or t.is_complex() for t in tensors_in(self.env[input_node]))
                flow.inputs[self._read(input_node).name] = DIFF if floating else NONE
        else:
            sources = [self._read(i).name for i in inputs] + [self.storages.read_name(n) for n, _ in written]
            union = self._edges(node, sources, reached)
            flow.inputs, flow.params = union.inputs, union.params
            integral = {key for key, tensors in result_elements(result).items() if tensors and not any(
                t.is_floating_point() or t.is_complex() for t in tensors)}
            # An integer element (max's indices) has no history to ask, yet it is computed from the
            # inputs: every input feeds it, without a gradient.
            parts = {key: self._edges(node, sources, {}) if key in integral
                     else self._edges(node, sources, part).within(union, (depends or {}).get(key))
                     for key, part in (elements or {}).items()}
            if any(part != union for part in parts.values()):  # the elements reach different things
                flow.outputs = parts
        flow.is_tensor = bool(outputs)
        flow.requires_grad = any(t.requires_grad for t in outputs)
        if outputs:
            flow.dtype = rules.dtype_name(outputs[0].dtype)
            flow.shape = tuple(int(s) for s in outputs[0].shape) if _static_shape(outputs[0]) else None
        self._flow_keys(node, outputs + [t for _, t in written])
        return flow

    def _loss_inputs(self, node: fx.Node, inputs: list[fx.Node]) -> list[fx.Node]:
        """The output node's inputs the loss is made of: the one that is the model's own loss, when
        the backward differentiated that (found by its position among the output's tensors)."""
        if self.loss_output is None:
            return inputs
        flat: list[fx.Node] = []
        fx.node.map_arg(node.args, lambda n: flat.extend([n] * len(tensors_in(self.env[n]))))
        index, count = self.loss_output
        if len(flat) != count:  # the capture returns the outputs in another shape: walk from all of them
            return inputs
        self.module.meta[LOSS_OUTPUT_KEY] = True
        return [flat[index]]

    def _element_dependencies(self, node: fx.Node, inputs: list[fx.Node],
                              reached: dict[str, str]) -> dict[Any, set[str]] | None:
        """For a tuple result: which inputs that need no gradient each element depends on.

        Their edges are ``none`` whatever the element, so the node runs once more with those inputs
        as leaves that require grad, and each element's history says which it read (the value
        input of ``nn.MultiheadAttention`` never reaches its weights). None if that cannot run.
        """
        lifted: dict[int, torch.Tensor] = {}
        entries: dict[tuple, list[str]] = {}
        for input_node in inputs:
            name = self._read(input_node).name
            for tensor in tensors_in(self.env[input_node]):
                floating = tensor.is_floating_point() or tensor.is_complex()
                if reached.get(name, NONE) == NONE and floating and not tensor.requires_grad:
                    lifted[id(tensor)] = tensor.detach().requires_grad_(True)
                    entries.setdefault(entry_key(lifted[id(tensor)]), []).append(name)
        if not lifted:
            return None
        lift = lambda v: lifted.get(id(v), v) if isinstance(v, torch.Tensor) else v  # noqa: E731
        try:
            args, kwargs = tree_map(lift, self.fetch_args_kwargs_from_env(node))
            result = getattr(self, node.op)(node.target, args, kwargs)
        except Exception:  # it ran once; if not twice, keep every none edge
            return None
        return {key: set(walk_history(tensors, entries, set(), {})) for key, tensors in result_elements(result).items()}

    def _edges(self, node: fx.Node, sources: list[str], reached: dict[str, str]) -> OutputFlow:
        """Edges from the node's inputs (read under these names) and parameters, given what a walk reached."""
        edges = OutputFlow()
        for source in sources:
            edges.inputs.setdefault(source, reached.get(source, NONE))
        for key, kind in reached.items():
            if key.startswith("param:"):
                edges.params[key[len("param:"):]] = kind
        for key, kind in getattr(reached, "earlier", {}).items():  # read other than through the arguments
            edges.inputs.setdefault(key, kind)
        for name in self._owned_parameters(node):
            edges.params.setdefault(name, NONE)
        if node.op == "get_attr" and node.target in self._own_names():
            edges.params[self._own_names()[node.target]] = DIFF
        return edges

    def _flow_keys(self, node: fx.Node, tensors: list[torch.Tensor]) -> None:
        """Walks of later nodes stop at these tensors: they are results of ``node``."""
        for tensor in tensors:
            if tensor.requires_grad:
                self.known[entry_key(tensor)] = node.name
                self.keep_alive.append(tensor.grad_fn)

    def _own_names(self) -> dict[str, str]:
        """Attribute path -> canonical name, for every path a parameter can be read through."""
        if not hasattr(self, "_paths"):
            self._paths = {}
            for module_name, module in self.model.named_modules(remove_duplicate=False):
                for local, parameter in module._parameters.items():
                    if id(parameter) in self.names:
                        path = f"{module_name}.{local}" if module_name else local
                        self._paths[path] = self.names[id(parameter)]
        return self._paths

    def _owned_parameters(self, node: fx.Node) -> list[str]:
        if node.op != "call_module":
            return []
        module = self.model.get_submodule(node.target)
        return [self.names[id(p)] for p in module.parameters() if id(p) in self.names]


def _static_shape(tensor: torch.Tensor) -> bool:
    return all(isinstance(s, int) for s in tensor.shape)


def annotate(graph_module: fx.GraphModule, model: torch.nn.Module,
             inputs: Sequence[Any] | None, twins: str | None = None,
             loss_output: tuple[int, int] | None = None) -> list[str]:
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
    interpreter = FlowInterpreter(graph_module, model, device, twins or choose_twins(model, inputs), loss_output)
    twin_inputs = [interpreter.twin(x) if isinstance(x, torch.Tensor) else x for x in inputs]
    # Factories inside forward land on meta through the default device.
    with torch.device("meta") if interpreter.twins == "meta" else contextlib.nullcontext():
        interpreter.run(*twin_inputs)
    return _rule_notes(interpreter.by_rules)


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
