"""Annotate every node with how gradient can pass through it, by running the graph on twin tensors.

Like ``torch.fx.passes.shape_prop`` this is an interpreter that writes its result into
``node.meta``; unlike it, autograd stays on. Each node runs on twins of the model's weights and
inputs (meta tensors: no memory, no compute; or, for small models, cheap real copies; see
:func:`choose_twins`) whose autograd history is real, and the history of its result says exactly which
inputs it is differentiable in: a comparison returns a bool tensor, ``detach`` a tensor without
history, ``zeros_like`` one that ignores its input. No list of op names is needed for any of
that; only zero derivatives come from :mod:`fxflow.rules`.

Call tree::

    annotate(graph_module, model, inputs)
      FlowInterpreter.run(*twin_inputs)        # with the model's parameters swapped for twins
        run_node(node)                         # per node, under its recorded grad mode
          placeholder / get_attr / call_* / output   (torch.fx.Interpreter)
          _walk(outputs, entries, ...)         # the result's grad_fn history back to the inputs
      _run_on_stand_ins(node)                  # data-dependent ops (.item(), masks): real stand-ins
      annotate_by_rules(node)                  # nodes that could not run at all, or no example inputs

In-place writes are seen through storage, not op names (:mod:`fxflow.aliasing`): a node that
writes into a tensor (or any view of its storage) reads the old values and is what later reads
of any of them see. A tuple or dict result whose elements reach different inputs or parameters
(``nn.MultiheadAttention``'s output and weights) also gets each element's own edges.

Result: ``node.meta["fxflow"]`` is a :class:`NodeFlow`.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Sequence

import torch
import torch.fx as fx
from torch.utils._pytree import tree_map

from . import rules
from .aliasing import StorageMap, state, storage_key, written_members
from .capture import GRAD_MODE_KEY, GradRegion
from .flow import (DIFF, META_KEY, NONE, ZERO, NodeFlow, OutputFlow, data_inputs, parameter_names,
                   resolve_attribute_of, result_elements, tensors_in)
from .rules import annotate_by_rules, in_place
from .state import swapped_weights

# A walk inside one node's autograd history never needs to be longer than this; it guards against
# tensors captured from far upstream (a module caching an earlier activation, say).
_WALK_LIMIT = 100_000


class _NotRun:
    """The value of a node that could not run on twins (nor on real stand-ins)."""


NOT_RUN = _NotRun()


def _key(tensor: torch.Tensor) -> tuple:
    """Identifies where a tensor's gradient enters autograd's graph."""
    if tensor.grad_fn is None:
        return ("leaf", id(tensor))
    return (id(tensor.grad_fn), tensor.output_nr)


def _next_key(function: Any, output_nr: int) -> tuple:
    variable = getattr(function, "variable", None)
    if variable is not None:  # AccumulateGrad: the gradient lands in a leaf
        return ("leaf", id(variable))
    return (id(function), output_nr)


class FlowInterpreter(fx.Interpreter):
    """Runs the graph on twin tensors and records a :class:`NodeFlow` per node."""

    def __init__(self, graph_module: fx.GraphModule, model: torch.nn.Module, device: torch.device, twins: str):
        super().__init__(graph_module, garbage_collect_values=False)
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
        self.known: set[tuple] = set()  # keys of every result so far: walks stop there
        self.keep_alive: list[Any] = []  # grad_fns whose ids are keys

    # -- twin state -------------------------------------------------------------------------
    def twin(self, tensor: torch.Tensor) -> torch.Tensor:
        """The twin of a real tensor, made once."""
        twin = self.twin_of.get(id(tensor))
        if twin is None:
            twin = _twin(tensor, self.twins)
            if isinstance(tensor, torch.nn.Parameter):
                self.twin_names[id(twin)] = self.names.get(id(tensor), "")
            self.twin_of[id(tensor)] = twin
            self.twin_ids.add(id(twin))
            self.keep_alive.append(tensor)
        return twin

    def is_twin(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and (id(value) in self.twin_ids or (self.twins == "meta" and value.is_meta))

    @contextlib.contextmanager
    def twin_model(self) -> Iterator[None]:
        """Swap every parameter and buffer of the model for its twin, then put the real ones back."""
        with swapped_weights(self.model, self.twin):
            yield

    # -- node kinds -------------------------------------------------------------------------
    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        value = resolve_attribute_of(self.model, self.module, target)  # parameters/buffers are twins already
        return self.twin(value) if isinstance(value, torch.Tensor) and not self.is_twin(value) else value

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        return self.model.get_submodule(target)(*args, **kwargs)

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
        reached = _walk(outputs, entries, self.known, self.twin_names) if node.op != "output" else {}
        self.storages.spread(reached, self._readers(inputs), written)
        elements = {key: _walk(tensors, entries, self.known, self.twin_names)
                    for key, tensors in result_elements(result).items()} if node.op != "output" else {}
        rerun = elements and not written and not region  # a second run must not write twice
        depends = self._element_dependencies(node, inputs, reached) if rerun else None
        node.meta[META_KEY] = self._flow(node, inputs, reached, result, region, written, elements, depends)
        self.storages.wrote(node, written)
        self.storages.register(node.name, result)
        return result

    def _by_rules(self, node: fx.Node) -> None:
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
                    add(_key(tensor), name)
        for name, tensor in members:
            if tensor.requires_grad:
                add(_key(tensor), self.storages.read_name(name))
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
                stand_in = _stand_in(value, self.device, self.keep_alive)
                stand_ins[id(value)] = (value, stand_in, state(stand_in))
            return stand_ins[id(value)][1]

        try:
            with self.device, torch.no_grad() if region else contextlib.nullcontext():
                args, kwargs = self.fetch_args_kwargs_from_env(node)
                args, kwargs = tree_map(real, (args, kwargs))
                for input_node in inputs:  # real tensors among the inputs (factories) are used as they are
                    for tensor in tensors_in(self.env[input_node]):
                        if tensor.requires_grad:
                            entries.setdefault(_key(real(tensor)), []).append(self._read(input_node).name)
                real_members = [(name, t) for name, t in members if not self.is_twin(t)]  # written in place
                states = {id(t): state(t) for _, t in real_members}
                result = getattr(self, node.op)(node.target, args, kwargs)
                changed = {id(twin): stand_in for twin, stand_in, before in stand_ins.values()
                           if state(stand_in) != before}
                written_twins = {storage_key(stand_ins[i][0]) for i in changed}  # written in their stand-ins
                written = [(name, t) for name, t in members if storage_key(t) in written_twins]
                written += written_members(real_members, states)
                outputs = tensors_in(result) + list(changed.values()) + [t for _, t in written if not self.is_twin(t)]
                reached = _walk(outputs, entries, set(), self.twin_names)
                self.storages.spread(reached, self._readers(inputs), written)
                elements = {key: _walk(tensors, entries, set(), self.twin_names)
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
                self._flow_keys(tensors_in(self.env[input_node]))
        self.storages.wrote(node, written)
        self.storages.register(node.name, result)
        return result

    def _retwin(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or self.is_twin(value):
            return value
        return _twin(value, self.twins)

    def _flow(self, node: fx.Node, inputs: list[fx.Node], reached: dict[str, str], result: Any,
              region: GradRegion | None, written: Sequence[tuple[str, torch.Tensor]] = (),
              elements: dict[Any, dict[str, str]] | None = None,
              depends: dict[Any, set[str]] | None = None) -> NodeFlow:
        """The node's edges. ``written``: values in storages the node wrote into, which it read too;
        ``elements``: what each element of a tuple/dict result reached on its own; ``depends``: the
        inputs without gradient that each element depends on (:meth:`_element_dependencies`)."""
        outputs = tensors_in(result)
        flow = NodeFlow(grad_region=region)
        if node.op == "output":
            for input_node in inputs:
                floating = any(t.is_floating_point() or t.is_complex() for t in tensors_in(self.env[input_node]))
                flow.inputs[self._read(input_node).name] = DIFF if floating else NONE
        else:
            sources = [self._read(i).name for i in inputs] + [self.storages.read_name(n) for n, _ in written]
            union = self._edges(node, sources, reached)
            flow.inputs, flow.params = union.inputs, union.params
            parts = {key: self._edges(node, sources, part).within(union, (depends or {}).get(key))
                     for key, part in (elements or {}).items()}
            if any(part != union for part in parts.values()):  # the elements reach different things
                flow.outputs = parts
        flow.is_tensor = bool(outputs)
        flow.requires_grad = any(t.requires_grad for t in outputs)
        if outputs:
            flow.dtype = rules.dtype_name(outputs[0].dtype)
            flow.shape = tuple(int(s) for s in outputs[0].shape) if _static_shape(outputs[0]) else None
        self._flow_keys(outputs + [t for _, t in written])
        return flow

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
                if name not in reached and floating and not tensor.requires_grad:
                    lifted[id(tensor)] = tensor.detach().requires_grad_(True)
                    entries.setdefault(_key(lifted[id(tensor)]), []).append(name)
        if not lifted:
            return None
        lift = lambda v: lifted.get(id(v), v) if isinstance(v, torch.Tensor) else v  # noqa: E731
        try:
            args, kwargs = tree_map(lift, self.fetch_args_kwargs_from_env(node))
            result = getattr(self, node.op)(node.target, args, kwargs)
        except Exception:  # it ran once; if not twice, keep every none edge
            return None
        return {key: set(_walk(tensors, entries, set(), {})) for key, tensors in result_elements(result).items()}

    def _edges(self, node: fx.Node, sources: list[str], reached: dict[str, str]) -> OutputFlow:
        """Edges from the node's inputs (read under these names) and parameters, given what a walk reached."""
        edges = OutputFlow()
        for source in sources:
            edges.inputs.setdefault(source, reached.get(source, NONE))
        for key, kind in reached.items():
            if key.startswith("param:"):
                edges.params[key[len("param:"):]] = kind
        for name in self._owned_parameters(node):
            edges.params.setdefault(name, NONE)
        if node.op == "get_attr" and node.target in self._own_names():
            edges.params[self._own_names()[node.target]] = DIFF
        return edges

    def _flow_keys(self, tensors: list[torch.Tensor]) -> None:
        """Walks of later nodes stop at these tensors: they are results of this node."""
        for tensor in tensors:
            if tensor.requires_grad:
                self.known.add(_key(tensor))
                self.keep_alive.append(tensor.grad_fn)

    def _own_names(self) -> dict[str, str]:
        """Attribute path -> canonical name, for every path a parameter can be read through."""
        if not hasattr(self, "_paths"):
            self._paths = {}
            for module_name, module in self.model.named_modules(remove_duplicate=False):
                for local, parameter in module._parameters.items():
                    if id(parameter) in self.twin_names:
                        path = f"{module_name}.{local}" if module_name else local
                        self._paths[path] = self.twin_names[id(parameter)]
        return self._paths

    def _owned_parameters(self, node: fx.Node) -> list[str]:
        if node.op != "call_module":
            return []
        module = self.model.get_submodule(node.target)
        return [self.twin_names[id(p)] for p in module.parameters() if id(p) in self.twin_names]


def _twin(tensor: torch.Tensor, kind: str) -> torch.Tensor:
    """A stand-alone copy of ``tensor`` (shape, dtype, requires_grad): on meta, or real values."""
    twin = tensor.detach().to("meta") if kind == "meta" else tensor.detach().clone()
    return twin.requires_grad_(tensor.requires_grad) if twin.is_floating_point() or twin.is_complex() else twin


def _stand_in(twin: torch.Tensor, device: torch.device, keep_alive: list[Any]) -> torch.Tensor:
    """A real tensor shaped like ``twin``: ones (every mask entry True), zeros for integers
    (always a valid index). Where the twin requires grad, a copy of a leaf that does (autograd
    refuses in-place writes into the leaf itself, and ``h[mask] = v`` is such a write)."""
    integer = not (twin.dtype.is_floating_point or twin.dtype.is_complex or twin.dtype == torch.bool)
    make = torch.zeros if integer else torch.ones
    tensor = make(tuple(twin.shape), dtype=twin.dtype, device=device)
    if not twin.requires_grad:
        return tensor
    leaf = tensor.requires_grad_(True)
    keep_alive.append(leaf)
    return leaf.clone()


def _static_shape(tensor: torch.Tensor) -> bool:
    return all(isinstance(s, int) for s in tensor.shape)


def _walk(outputs: list[torch.Tensor], entries: dict[tuple, list[str]], known: set[tuple],
          parameter_names: dict[int, str]) -> dict[str, str]:
    """Which inputs (and parameters) the outputs' history reaches, and whether only through zeros.

    Returns ``{input node name: DIFF|ZERO}`` plus ``{"param:<name>": DIFF|ZERO}`` entries for leaves
    that are parameters (a module call's own weights).
    """
    roots = [(t.grad_fn, t.output_nr) for t in outputs if t.grad_fn is not None]
    leaves = [("leaf", id(t)) for t in outputs if t.requires_grad and t.grad_fn is None]
    reached: dict[str, str] = {}
    for crossing_zero in (False, True):
        seen: set[tuple] = set()
        stack = list(roots)
        for key in leaves:
            for name in entries.get(key, ()):
                reached[name] = DIFF
        while stack and len(seen) < _WALK_LIMIT:
            function, output_nr = stack.pop()
            key = _next_key(function, output_nr)
            if key in seen:
                continue
            seen.add(key)
            if key in entries:
                for name in entries[key]:
                    reached.setdefault(name, ZERO if crossing_zero else DIFF)
                continue
            variable = getattr(function, "variable", None)
            if variable is not None:
                name = parameter_names.get(id(variable))
                if name:
                    reached.setdefault("param:" + name, ZERO if crossing_zero else DIFF)
                continue
            if key in known:  # the result of an earlier node that is not an input here
                continue
            zero_edges = rules.zero_derivative_edges(function)
            for index, (next_function, number) in enumerate(function.next_functions):
                if next_function is None:
                    continue
                if not crossing_zero and zero_edges is not False and (zero_edges is None or index in zero_edges):
                    continue  # gradient arrives here as an exact zero: only the second pass crosses
                stack.append((next_function, number))
    return reached


def annotate(graph_module: fx.GraphModule, model: torch.nn.Module,
             inputs: Sequence[Any] | None, twins: str | None = None) -> None:
    """Write a :class:`NodeFlow` into ``node.meta["fxflow"]`` for every node of the graph.

    With example inputs every node runs on twin tensors; without, edges come from name rules.
    """
    names = parameter_names(model)
    if inputs is None:
        aliases: dict[str, str] = {}  # input mutated in place -> the in-place node
        for node in graph_module.graph.nodes:
            node.meta[META_KEY] = annotate_by_rules(node, model, names, lambda n: aliases.get(n.name, n.name))
            if in_place(node):  # later reads of the tensor see this node (h.detach_() cuts them)
                aliases[node.args[0].name] = node.name
        return
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    interpreter = FlowInterpreter(graph_module, model, device, twins or choose_twins(model, inputs))
    twin_inputs = [interpreter.twin(x) if isinstance(x, torch.Tensor) else x for x in inputs]
    # Factories inside forward land on meta through the default device.
    with interpreter.twin_model(), torch.device("meta") if interpreter.twins == "meta" else contextlib.nullcontext():
        interpreter.run(*twin_inputs)


def choose_twins(model: torch.nn.Module, inputs: Sequence[Any] | None = None,
                 forward_seconds: float | None = None) -> str:
    """``real`` when re-running forward's ops is cheap, else ``meta`` (``FXFLOW_TWINS`` overrides).

    Autograd builds the same history on meta tensors as on real ones, so the edges come out the
    same; the choice is cost. A meta op costs ~0.1 ms whatever its size, and the first one imports
    torch._dynamo (a second of start-up); a small model's real ops cost microseconds. Real twins
    copy the weights and compute forward's ops once more, so they are used only for small weights
    and a forward measured (or, unmeasured, expected from the input size) to be quick.
    """
    forced = os.environ.get("FXFLOW_TWINS")
    if forced in ("meta", "real"):
        return forced
    tensors = list(model.parameters()) + list(model.buffers())
    if any(t.is_meta for t in tensors):
        return "meta"
    if sum(t.numel() * t.element_size() for t in tensors) > _REAL_TWIN_LIMIT_BYTES:
        return "meta"
    if forward_seconds is not None:
        return "real" if forward_seconds <= _REAL_TWIN_LIMIT_SECONDS else "meta"
    elements = sum(x.numel() for x in inputs or () if isinstance(x, torch.Tensor))
    return "real" if elements <= _REAL_TWIN_LIMIT_ELEMENTS else "meta"


# Real twins only below all of these (see choose_twins).
_REAL_TWIN_LIMIT_BYTES = 16 * 2**20
_REAL_TWIN_LIMIT_SECONDS = 0.05
_REAL_TWIN_LIMIT_ELEMENTS = 2**20
