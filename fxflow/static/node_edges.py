"""From what a node's history reached to its :class:`~fxflow.static.flow.NodeFlow`: the edges of one node.

An edge per input and per parameter, with its kind (``diff``, ``zero``, ``none``); per element of a
tuple result where the elements reach different things (an integer element, like ``max``'s
indices, is fed by every input without a gradient); the output node's edges from the model's
own loss alone when the backward ran on it. The strategies that run a node (recorded run, twins,
stand-ins: :mod:`fxflow.static.strategies`) all build its flow here.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.fx as fx
from torch.utils._pytree import tree_map

from . import rules
from .aliasing import Member
from .flow import DIFF, NONE, NodeFlow, OutputFlow
from ..core.tensors import result_elements, tensors_in
from .flow_state import FlowState, NodeCall
from ..core.history import entry_key, walk_history
from ..verdicts import LOSS_OUTPUT_KEY


class EdgeBuilder:
    """Turns what a node's walks reached into its :class:`NodeFlow`."""

    def __init__(self, state: FlowState) -> None:
        self.state = state
        self._paths: dict[str, str] | None = None

    def flow(self, call: NodeCall, reached: dict[str, str], result: Any, written: Sequence[Member] = (),
             elements: dict[Any, dict[str, str]] | None = None,
             depends: dict[Any, set[str]] | None = None) -> NodeFlow:
        """The node's edges. ``written``: values in storages the node wrote into, which it read too;
        ``elements``: what each element of a tuple/dict result reached on its own; ``depends``: the
        inputs without gradient that each element depends on (:meth:`element_dependencies`)."""
        state, node, inputs = self.state, call.node, call.inputs
        outputs = tensors_in(result)
        flow = NodeFlow(grad_region=call.region, cut_short=getattr(reached, "cut_short", False))
        rules.mark_no_derivative(node, reached)
        if node.op == "output":
            for input_node in self._loss_inputs(node, inputs):
                floating = any(t.is_floating_point() or t.is_complex() for t in tensors_in(state.env[input_node]))
                flow.inputs[state.read(input_node).name] = DIFF if floating else NONE
        else:
            sources = [state.read(i).name for i in inputs] + [state.storages.read_name(n) for n, _ in written]
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
        state.mark_results(node, outputs + [t for _, t in written])
        return flow

    def _loss_inputs(self, node: fx.Node, inputs: list[fx.Node]) -> list[fx.Node]:
        """The output node's inputs the loss is made of: the one that is the model's own loss, when
        the backward differentiated that (found by its position among the output's tensors)."""
        if self.state.loss_output is None:
            return inputs
        flat: list[fx.Node] = []
        fx.node.map_arg(node.args, lambda n: flat.extend([n] * len(tensors_in(self.state.env[n]))))
        index, count = self.state.loss_output
        if len(flat) != count:  # the capture returns the outputs in another shape: walk from all of them
            return inputs
        self.state.graph_module.meta[LOSS_OUTPUT_KEY] = True
        return [flat[index]]

    def element_dependencies(self, call: NodeCall, reached: dict[str, str]) -> dict[Any, set[str]] | None:
        """For a tuple result: which inputs that need no gradient each element depends on.

        Their edges are ``none`` whatever the element, so the node runs once more with those inputs
        as leaves that require grad, and each element's history says which it read (the value
        input of ``nn.MultiheadAttention`` never reaches its weights). None if that cannot run.
        """
        state = self.state
        lifted: dict[int, torch.Tensor] = {}
        entries: dict[tuple, list[str]] = {}
        for input_node in call.inputs:
            name = state.read(input_node).name
            for tensor in tensors_in(state.env[input_node]):
                floating = tensor.is_floating_point() or tensor.is_complex()
                if reached.get(name, NONE) == NONE and floating and not tensor.requires_grad:
                    lifted[id(tensor)] = tensor.detach().requires_grad_(True)
                    entries.setdefault(entry_key(lifted[id(tensor)]), []).append(name)
        if not lifted:
            return None
        lift = lambda v: lifted.get(id(v), v) if isinstance(v, torch.Tensor) else v  # noqa: E731
        try:
            args, kwargs = tree_map(lift, state.runner.arguments(call.node))
            result = state.runner.execute(call.node, args, kwargs)
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
        for key, kind in getattr(reached, "results_not_passed", {}).items():  # read other than through the arguments
            edges.inputs.setdefault(key, kind)
        for name in self._owned_parameters(node):
            edges.params.setdefault(name, NONE)
        if node.op == "get_attr" and node.target in self._own_names():
            edges.params[self._own_names()[node.target]] = DIFF
        return edges

    def _own_names(self) -> dict[str, str]:
        """Attribute path -> canonical name, for every path a parameter can be read through."""
        if self._paths is None:
            self._paths = {}
            names = self.state.names
            for module_name, module in self.state.model.named_modules(remove_duplicate=False):
                for local, parameter in module._parameters.items():
                    if id(parameter) in names:
                        path = f"{module_name}.{local}" if module_name else local
                        self._paths[path] = names[id(parameter)]
        return self._paths

    def _owned_parameters(self, node: fx.Node) -> list[str]:
        if node.op != "call_module":
            return []
        module = self.state.model.get_submodule(node.target)
        return [self.state.names[id(p)] for p in module.parameters() if id(p) in self.state.names]


def _static_shape(tensor: torch.Tensor) -> bool:
    return all(isinstance(s, int) for s in tensor.shape)
