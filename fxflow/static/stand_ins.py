"""Running a node on real stand-in values, and a custom Function's own backward.

Meta twins hold no values: a node whose result depends on them (``.item()``, a boolean mask, a
whole ``nn.Transformer``) runs here on real tensors of the same shapes instead (the strategy
:class:`StandInRun`), and a custom ``autograd.Function`` runs its own backward to show which inputs
it gives a gradient (:class:`CustomBackward`, after whichever strategy ran the node).
"""
from __future__ import annotations

import contextlib
from collections import ChainMap
from typing import Any, Iterator

import torch
import torch.fx as fx
from torch.nn.utils.stateless import _reparametrize_module
from torch.utils._pytree import tree_flatten, tree_map

from .aliasing import state, storage_key, written_members
from ..capture import OPAQUE_KEY
from ..core.guard import guard
from ..core.history import backward_kinds, entry_key, walk_history
from ..core.tensors import result_elements, tensors_in
from .flow import DIFF, NONE, NodeFlow
from .flow_state import FlowState, NodeCall
from .node_edges import EdgeBuilder
from .twins import StandIn, read_on_draws, real_copy, stand_in
from ..verdicts import BACKWARD_RAN_KEY, PARAM_PREFIX


class StandInRun:
    """The strategy for what twins cannot run: the node runs on real stand-in tensors."""

    def __init__(self, state: FlowState, edges: EdgeBuilder, custom: CustomBackward) -> None:
        self.state, self.edge_builder, self.custom = state, edges, custom

    def edges(self, call: NodeCall) -> NodeFlow | None:
        """Run a node meta twins cannot (its result depends on values) on real stand-in tensors.

        Each twin input becomes a real tensor of the same shape and dtype; the result's history
        back to those stand-ins gives the edges, as on twins. The result goes back to twins (leaves
        that keep ``requires_grad``) so later nodes run as usual; so does an input the node wrote
        into (``h[mask] = v``), which later reads then see. None if this fails too.
        """
        flow_state, node, inputs, members, region = self.state, call.node, call.inputs, call.members, call.region
        try:
            with stand_in_weights(flow_state) as weights, flow_state.device, \
                    torch.no_grad() if region else contextlib.nullcontext():
                names = ChainMap(weights.names, flow_state.leaf_names)
                # real tensors among the inputs (factories) are entry points as they are
                args, kwargs, entries, made = stand_in_arguments(flow_state, node, inputs, every_input=True)
                stand_ins = {key: (twin, stand, state(stand)) for key, (twin, stand) in made.items()}
                real_members = [(name, t) for name, t in members if not flow_state.is_twin(t)]  # written in place
                states = {id(t): state(t) for _, t in real_members}
                result = flow_state.runner.execute(node, args, kwargs)
                changed = {id(twin): made for twin, made, before in stand_ins.values() if state(made) != before}
                written_twins = {storage_key(stand_ins[i][0]) for i in changed}  # written in their stand-ins
                written = [(name, t) for name, t in members if storage_key(t) in written_twins]
                written += written_members(real_members, states)
                outputs = tensors_in(result) + list(changed.values()) + [t for _, t in written
                                                                         if not flow_state.is_twin(t)]
                reached = walk_history(outputs, entries, set(), names)
                flow_state.storages.spread(reached, flow_state.readers(inputs), written)
                elements = {key: walk_history(tensors, entries, set(), names)
                            for key, tensors in result_elements(result).items()}
                result = tree_map(flow_state.retwin, result)
        except Exception:  # not even real values help (.numpy() of a tensor that needs grad, ...)
            return None
        flow = self.edge_builder.flow(call, reached, result, written, elements)
        for input_node in inputs:  # the written twins are replaced: later reads see the write
            value = flow_state.env[input_node]
            if isinstance(value, torch.Tensor) and id(value) in changed:
                flow_state.env[input_node] = flow_state.retwin(changed[id(value)])
                flow_state.mark_results(flow_state.read(input_node), tensors_in(flow_state.env[input_node]))
        flow.on_stand_ins = True
        flow_state.storages.wrote(node, written)
        flow_state.storages.register(node.name, result)
        if OPAQUE_KEY in node.meta and region is None:
            self.custom.run(call, flow)
        call.value = result
        return flow


def stand_in_arguments(flow_state: FlowState, node: fx.Node, inputs: list[fx.Node], make: StandIn | None = None,
                       every_input: bool = False, fresh: bool = False,
                       ) -> tuple[tuple, dict, dict[tuple, list[str]], dict[int, tuple[torch.Tensor, torch.Tensor]]]:
    """The node's arguments with every twin replaced by a real stand-in (one per twin, made by
    ``make``); the entry points of those stand-ins keyed as in the walk (of every input that
    requires grad with ``every_input``); and ``{id(twin): (twin, its stand-in)}``. ``fresh``:
    every floating tensor becomes a stand-in, the results of earlier nodes that real twins
    computed too, so that a backward read on the stand-ins owes nothing to the model's values
    (a zero-initialized weight upstream would zero it)."""
    stand_ins: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    make = make or (lambda twin, device: stand_in(twin, device, flow_state.keep_alive))
    is_twin = flow_state.is_twin

    def replaced(value: Any) -> bool:
        return is_twin(value) or (fresh and isinstance(value, torch.Tensor)
                                  and (value.is_floating_point() or value.is_complex()))

    def real(value: Any) -> Any:
        if not replaced(value):
            return value
        if id(value) not in stand_ins:
            stand_ins[id(value)] = (value, make(value, flow_state.device))
        return stand_ins[id(value)][1]

    args, kwargs = tree_map(real, flow_state.runner.arguments(node))
    entries: dict[tuple, list[str]] = {}
    for input_node in inputs:
        for tensor in tensors_in(flow_state.env[input_node]):
            if tensor.requires_grad and (every_input or replaced(tensor)):
                entries.setdefault(entry_key(real(tensor)), []).append(flow_state.read(input_node).name)
    return args, kwargs, entries, stand_ins


class WeightCopies(dict):
    """``{parameter name: its copy}`` for the module calls on stand-ins, and ``names``: ``{id(copy):
    parameter name}``, which the walk reads leaves by."""

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[int, str] = {}


@contextlib.contextmanager
def stand_in_weights(flow_state: FlowState, make: StandIn | None = None) -> Iterator[WeightCopies]:
    """Module calls inside get real copies of their weights (ones of the same shape for weights
    on meta) instead of twins; with ``make``, trainable parameters get its stand-ins instead
    (random values: a zero-initialized weight must not read as a zero by construction). Yields
    the copies of parameters, filled as the calls read them."""
    copies: dict[int, torch.Tensor] = {}
    named = WeightCopies()

    def copy_of(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) not in copies:
            name = flow_state.names.get(id(tensor))
            trainable = make is not None and name is not None and tensor.requires_grad
            copies[id(tensor)] = make(tensor, flow_state.device) if trainable else real_copy(tensor, flow_state.device)
            if name is not None:
                named[name] = copies[id(tensor)]
                named.names[id(copies[id(tensor)])] = name
        return copies[id(tensor)]

    flow_state.weight_twin = copy_of
    try:
        yield named
    finally:
        flow_state.weight_twin = flow_state.twin


class CustomBackward:
    """A custom ``autograd.Function``'s own backward, run to see which inputs it gives a gradient."""

    def __init__(self, state: FlowState) -> None:
        self.state = state

    def run(self, call: NodeCall, flow: NodeFlow) -> None:
        """Run a custom ``autograd.Function``'s own backward to see which inputs it gives a gradient.

        The walk sees a Function's autograd node linked to every input, but its backward (the
        user's code, which the real backward runs anyway) may return ``None`` for one: that edge
        carries nothing, as after ``detach``. The node runs again on stand-ins (random values: ones
        could zero a value-dependent backward) and seeded random gradients flow back from every
        output that requires grad. ``None`` -> NONE, all zeros -> ZERO, else DIFF; a zero counts only
        if every draw of stand-ins gives it (:func:`~fxflow.static.twins.read_on_draws`): reformer's
        attention mask, an integer stand-in of zeros on the first draw, masks every key and zeroes
        its queries' gradient, which the real mask does not. If the backward cannot run on them, or
        its zero cannot be confirmed, the node stays opaque (no BACKWARD_RAN_KEY): the real
        backward decides.

        A module passed to the Function (reversible layers run inside it as an ``nn.ModuleList``)
        has its parameters used where autograd cannot see them: its forward runs without grad, and
        its backward recomputes them and runs ``backward`` itself. They are inputs of the node too:
        the node runs again with stand-ins of them swapped in, and what reaches each (through the
        graph or accumulated into its ``.grad``) is that parameter's edge.
        """
        node = call.node
        modules = [value for value in tree_flatten(self.state.runner.arguments(node))[0]
                   if isinstance(value, torch.nn.Module)]
        try:
            with torch.enable_grad(), self.state.device, random_state_kept():
                kinds = read_on_draws(lambda draw: self._read(call, modules, draw))
        except Exception:
            kinds = None
        if kinds is None:
            self._undecided(flow, modules)
            return
        flow.inputs.update({name: kind for name, kind in kinds.items() if not name.startswith(PARAM_PREFIX)})
        for part in (flow, *flow.outputs.values()):
            part.params.update({name[len(PARAM_PREFIX):]: kind for name, kind in kinds.items()
                                if name.startswith(PARAM_PREFIX)})
        node.meta[BACKWARD_RAN_KEY] = True

    def _read(self, call: NodeCall, modules: list[torch.nn.Module], draw: StandIn) -> dict[str, str]:
        """``{input name or "param:<name>": kind}`` from one backward of the node on ``draw``'s stand-ins."""
        flow_state = self.state
        with self._parameter_copies(modules, draw) as copies:
            def make(twin: torch.Tensor, device: torch.device) -> torch.Tensor:
                # a parameter passed in as well as used by a module passed in (torchdiffeq's odeint_adjoint
                # hands the backward its function's parameters to differentiate): one stand-in for both,
                # as the real run has one tensor, so the backward differentiates what it really differentiates
                name = flow_state.leaf_names.get(id(twin))
                return copies[name] if name in copies else draw(twin, device)

            args, kwargs, entries, _ = stand_in_arguments(flow_state, call.node, call.inputs, make, fresh=True)
            result = flow_state.runner.execute(call.node, args, kwargs)
            entries.update({entry_key(copy): [PARAM_PREFIX + name] for name, copy in copies.items()})
            kinds = backward_kinds(result, tensors_in((args, kwargs)) + list(copies.values()), entries)
        return {**{PARAM_PREFIX + name: NONE for name in copies}, **kinds}

    def _undecided(self, flow: NodeFlow, modules: list[torch.nn.Module]) -> None:
        """The backward did not run: the parameters of the modules passed in are inputs all the
        same (edges the real backward decides, as the walk's to every input), never unused."""
        for module in modules:
            for parameter in module.parameters():
                name = self.state.names.get(id(parameter))
                if name is not None and parameter.requires_grad:
                    for part in (flow, *flow.outputs.values()):
                        part.params.setdefault(name, DIFF)

    @contextlib.contextmanager
    def _parameter_copies(self, modules: list[torch.nn.Module], make: StandIn) -> Iterator[dict[str, torch.Tensor]]:
        """Stand-ins of the parameters of ``modules`` swapped in for them while inside (``make``'s
        for trainable ones, real copies of the others; the user's own are back on leaving);
        yields ``{parameter name: stand-in}``."""
        copies: dict[str, torch.Tensor] = {}
        by_id: dict[int, torch.Tensor] = {}
        with contextlib.ExitStack() as stack:
            for module in modules:
                swapped = {}
                for local, parameter in module.named_parameters(remove_duplicate=False):
                    name = self.state.names.get(id(parameter))
                    if name is None:
                        continue
                    if id(parameter) not in by_id:
                        by_id[id(parameter)] = (make(parameter, self.state.device) if parameter.requires_grad
                                                else real_copy(parameter, self.state.device))
                        copies[name] = by_id[id(parameter)]
                    swapped[local] = by_id[id(parameter)]
                if swapped:
                    stack.enter_context(_reparametrize_module(module, swapped))
            yield copies


def random_state_kept() -> contextlib.AbstractContextManager:
    """The global random state as found on leaving: reruns on stand-ins draw (dropout) and may
    reseed (reformer's backward calls ``torch.manual_seed``)."""
    return guard()  # no model: the global generators alone
