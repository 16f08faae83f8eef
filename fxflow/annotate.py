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
from .capture import GRAD_MODE_KEY, GradRegion
from .flow import (DIFF, META_KEY, NONE, ZERO, NodeFlow, data_inputs, parameter_names, resolve_attribute_of,
                   tensors_in)
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
        self.aliases: dict[str, str] = {}  # node mutated in place -> the node that mutated it
        self.by_name = {n.name: n for n in graph_module.graph.nodes}
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
        entries = self._entry_points(inputs)
        states = {id(t): _state(t) for i in inputs for t in tensors_in(self.env[self._read(i)])}
        region = node.meta.get(GRAD_MODE_KEY)
        try:
            with torch.no_grad() if region else contextlib.nullcontext():
                args, kwargs = self.fetch_args_kwargs_from_env(node)
                result = getattr(self, node.op)(node.target, args, kwargs)
        except Exception:  # a data-dependent op (.item(), a boolean mask): retry on real stand-ins
            return self._run_on_stand_ins(node, inputs, region)
        reached = _walk(tensors_in(result), entries, self.known, self.twin_names) if node.op != "output" else {}
        node.meta[META_KEY] = self._flow(node, inputs, reached, result, region)
        if isinstance(result, torch.Tensor) and id(result) in states and _state(result) != states[id(result)]:
            self._note_in_place(node, inputs, result)
        return result

    def _by_rules(self, node: fx.Node) -> None:
        node.meta[META_KEY] = annotate_by_rules(node, self.model, self.names, lambda n: self._read(n).name)
        if in_place(node):
            self.aliases[self._read(node.args[0]).name] = node.name
            self.aliases[node.args[0].name] = node.name

    def _read(self, node: fx.Node) -> fx.Node:
        """The node whose value a read of ``node`` sees: the last in-place op on it, if any."""
        name = self.aliases.get(node.name)
        return self.by_name[name] if name else node

    def _entry_points(self, inputs: list[fx.Node]) -> dict[tuple, list[str]]:
        """Where each input tensor's gradient would enter autograd, keyed as in the walk."""
        entries: dict[tuple, list[str]] = {}
        for input_node in inputs:
            source = self._read(input_node)
            for tensor in tensors_in(self.env[source]):
                if tensor.requires_grad:
                    entries.setdefault(_key(tensor), []).append(source.name)
        return entries

    def _run_on_stand_ins(self, node: fx.Node, inputs: list[fx.Node], region: GradRegion | None) -> Any:
        """Run a node meta twins cannot (its result depends on values) on real stand-in tensors.

        Each twin input becomes a real leaf of the same shape and dtype; the result's history
        back to those leaves gives the edges, as on twins. The result goes back to twins (leaves
        that keep ``requires_grad``) so later nodes run as usual. Only if this fails too is the
        node decided by name rules.
        """
        stand_ins: dict[int, torch.Tensor] = {}
        entries: dict[tuple, list[str]] = {}

        def real(value: Any) -> Any:
            if not self.is_twin(value):
                return value
            if id(value) not in stand_ins:
                stand_ins[id(value)] = _stand_in(value, self.device)
            return stand_ins[id(value)]

        try:
            with self.device, torch.no_grad() if region else contextlib.nullcontext():
                args, kwargs = self.fetch_args_kwargs_from_env(node)
                args, kwargs = tree_map(real, (args, kwargs))
                for input_node in inputs:
                    for tensor in tensors_in(self.env[input_node]):
                        if self.is_twin(tensor) and tensor.requires_grad:
                            entries.setdefault(_key(real(tensor)), []).append(self._read(input_node).name)
                result = getattr(self, node.op)(node.target, args, kwargs)
                reached = _walk(tensors_in(result), entries, set(), self.twin_names)
                result = tree_map(self._retwin, result)
        except Exception:  # not even real values help (.numpy() of a tensor that needs grad, ...)
            self._by_rules(node)
            return NOT_RUN
        node.meta[META_KEY] = self._flow(node, inputs, reached, result, region)
        node.meta[META_KEY].on_stand_ins = True
        return result

    def _retwin(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or self.is_twin(value):
            return value
        return _twin(value, self.twins)

    def _flow(self, node: fx.Node, inputs: list[fx.Node], reached: dict[str, str],
              result: Any, region: GradRegion | None) -> NodeFlow:
        outputs = tensors_in(result)
        flow = NodeFlow(grad_region=region)
        for input_node in inputs:
            source = self._read(input_node)
            if node.op == "output":
                floating = any(t.is_floating_point() or t.is_complex() for t in tensors_in(self.env[source]))
                flow.inputs[source.name] = DIFF if floating else NONE
            else:
                flow.inputs[source.name] = reached.get(source.name, NONE)
        for key, kind in reached.items():
            if key.startswith("param:"):
                flow.params[key[len("param:"):]] = kind
        for name in self._owned_parameters(node):
            flow.params.setdefault(name, NONE)
        if node.op == "get_attr" and node.target in self._own_names():
            flow.params[self._own_names()[node.target]] = DIFF
        flow.is_tensor = bool(outputs)
        flow.requires_grad = any(t.requires_grad for t in outputs)
        if outputs:
            flow.dtype = rules.dtype_name(outputs[0].dtype)
            flow.shape = tuple(int(s) for s in outputs[0].shape) if _static_shape(outputs[0]) else None
        for tensor in outputs:
            if tensor.requires_grad:
                self.known.add(_key(tensor))
                self.keep_alive.append(tensor.grad_fn)
        return flow

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

    def _note_in_place(self, node: fx.Node, inputs: list[fx.Node], result: torch.Tensor) -> None:
        """An op that changed one of its inputs in place: later reads of that input see this node."""
        for input_node in inputs:
            source = self._read(input_node)
            value = self.env[source]
            if isinstance(value, torch.Tensor) and result is value:
                self.aliases[input_node.name] = node.name
                self.aliases[source.name] = node.name


def _twin(tensor: torch.Tensor, kind: str) -> torch.Tensor:
    """A stand-alone copy of ``tensor`` (shape, dtype, requires_grad): on meta, or real values."""
    twin = tensor.detach().to("meta") if kind == "meta" else tensor.detach().clone()
    return twin.requires_grad_(tensor.requires_grad) if twin.is_floating_point() or twin.is_complex() else twin


def _stand_in(twin: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A real tensor shaped like ``twin``: ones (every mask entry True), zeros for integers
    (always a valid index); a leaf that requires grad when the twin does."""
    integer = not (twin.dtype.is_floating_point or twin.dtype.is_complex or twin.dtype == torch.bool)
    make = torch.zeros if integer else torch.ones
    tensor = make(tuple(twin.shape), dtype=twin.dtype, device=device)
    return tensor.requires_grad_(twin.requires_grad)


def _state(tensor: torch.Tensor) -> tuple:
    """What an in-place op changes: data version, autograd history, requires_grad."""
    return (tensor._version, id(tensor.grad_fn), tensor.requires_grad)


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
