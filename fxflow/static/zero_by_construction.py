"""Zero by construction: a node whose derivative in some input is exactly zero for any values.

Torch's derivative table names the ops whose formula is a zero tensor (``round``, ``sign``), but
not the ones whose zero follows from the shapes and modes in use: ``grid_sample(mode="nearest")``
in its grid, a softmax over a dimension of size 1 (its result is 1 whatever the input), ``x ** 0``,
``weight_hh`` of a one-step RNN from a zero state. Those are found here by running the node's
backward on stand-ins: after a strategy decided the node's edges (:mod:`fxflow.static.strategies`),
every input it is differentiable in (``diff``) gets a seeded random gradient back from the node's
outputs, with the node run on random stand-in values. An input whose gradient is exactly zero on
every draw of stand-ins (:func:`~fxflow.static.twins.stand_in_draws`: random values at three
scales, each with its mirror) is a ``zero`` edge, and ``node.meta[ZERO_BY_CONSTRUCTION_KEY]``
names it for the reason (:func:`fxflow.static.explain.describe_zero`).

Every floating argument and every trainable weight is a random stand-in, never the model's value:
a designed zero-init (LoRA's ``B = 0``, adaLN-Zero's gate) zeroes the real gradient at step one but
not by construction, and stays ``reachable``. A node whose backward cannot run on stand-ins keeps
its edges; so does one with an empty tensor among its arguments or results (an expert no token
was routed to): the gradient of nothing is vacuously zero and says nothing of the op.

An input the node's other input computes (``x - x.mean(dim)``, ``x - x.max(dim, keepdim=True)[0]``: the
mean through ops that read nothing else, no weight) is computed again from that input's stand-in, not
drawn apart from it: the node's derivative in ``x`` is then the one it really has through both paths,
zero where the group is of one element (``x - x`` whatever its values). Both edges read zero then: the
computed input's gradient reaches nothing but ``x``.

What the code alone fixes stays as it is: a value computed from no input and no parameter (the
``torch.zeros`` initial state an RNN makes for itself) is part of the construction, so the check
runs on its real value (computed again on the model's device where the twins are meta), not on a
random one. Otherwise ``weight_hh`` of a one-step RNN would read zero where the capture keeps
``nn.LSTM`` whole and non-zero where it inlines the module and its ``zeros`` into the graph. An op
that draws random numbers (a drop-path mask's ``rand``) also takes no input, but what it makes is the
model's randomness: computed again it is another draw, so it is a stand-in like any other value.

Only where it can matter: a zero edge changes the verdict of a parameter only when every path
from it crosses one, and a real backward that gave the parameter a non-zero gradient already
says none does. ``suspects`` are the parameters the real backward left exactly zero (None when
there was no real run with values: ``--device meta``, no backward); only the edges a suspect
reaches through non-``none`` edges are read, so a healthy model runs no backward here at all.
"""
from __future__ import annotations

import math
from typing import Any, Collection

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten, tree_map

from ..core.history import DIFF, NONE, ZERO, backward_kinds, entry_key, stronger
from ..core.random_ops import target_draws_random_numbers
from ..core.tensors import is_integer_scalar, tensors_in
from .flow import METADATA_ATTRIBUTES, NodeFlow
from .flow_state import NOT_RUN, FlowState, NodeCall
from .stand_ins import random_state_kept, stand_in_arguments, stand_in_weights
from .twins import StandIn, random_stand_in_maker, read_on_draws
from ..verdicts import OPAQUE_KEY, PARAM_PREFIX, ZERO_BY_CONSTRUCTION_KEY

# A node whose stand-ins (arguments and weights) hold more values than this is not checked: the
# check runs its forward and backward once more on real tensors, and a whole block of a large
# model on meta twins would cost as much as the model's own step.
CHECKED_VALUES_LIMIT = 2**22
# Without a real run every node is read: each read then costs a real forward and backward where the
# analysis itself runs on meta (GPT-2 small on --device meta: 11 s with the limit above, 1 s with
# this one, which skips its weight matrices and keeps the ops on activations of a short sequence).
EVERY_NODE_VALUES_LIMIT = 2**16
# A zero edge is confirmed around the numbers the node is given too (ZeroByConstruction._at_bounds): the
# stand-ins spread this fraction of the number's size (at least this much) around it, once each way.
BOUND_SPREAD = 1e-2
BOUND_SEED = 7
BOUNDS_CHECKED = 4  # numbers at most per node (a clamp's two bounds, a threshold and its value)


class ZeroByConstruction:
    """Marks the ``diff`` edges of a node whose backward, on random stand-ins, is exactly zero."""

    def __init__(self, state: FlowState, suspects: Collection[str] | None = None) -> None:
        self.state = state
        self.suspects = None if suspects is None else frozenset(suspects)
        self.reached: set[str] = set()  # nodes whose value a suspect feeds (forward, through non-none edges)
        self.constants = Constants(state)
        self.limit = EVERY_NODE_VALUES_LIMIT if suspects is None else CHECKED_VALUES_LIMIT

    def check(self, call: NodeCall, flow: NodeFlow) -> None:
        """Turn each ``diff`` edge of ``flow`` that every draw reads as zero into a ``zero`` edge."""
        self.constants.note(call)
        candidates = self._candidates(call, flow)
        if not candidates or not flow.evaluated or not self._checkable(call):
            return
        derived = self._derived(call)
        try:
            with torch.enable_grad(), self.state.device, random_state_kept():
                kinds = read_on_draws(lambda draw: self._read(call, draw))
                if kinds:
                    kinds = self._at_bounds(call, kinds)
        except Exception:  # the op needs values stand-ins do not have: its edges stay as decided
            return
        zeros = {name for name, kind in (kinds or {}).items() if kind == ZERO}
        zeros |= {node.name for node, (source, _) in derived.items() if source.name in zeros}  # its one way back
        marked = sorted(name for name in zeros if name in candidates or name in (node.name for node in derived))
        for name in marked:
            is_param = name.startswith(PARAM_PREFIX)
            key = name[len(PARAM_PREFIX):] if is_param else name
            for part in (flow, *flow.outputs.values()):
                table = part.params if is_param else part.inputs
                if table.get(key) == DIFF:
                    table[key] = ZERO
        if marked:
            call.node.meta[ZERO_BY_CONSTRUCTION_KEY] = marked

    def _candidates(self, call: NodeCall, flow: NodeFlow) -> set[str]:
        """The ``diff`` edges whose zero could decide a verdict (input names, ``param:<name>``s);
        notes the node as reached when a suspect feeds it."""
        params = {PARAM_PREFIX + name for name, kind in flow.params.items() if kind == DIFF}
        inputs = {name for name, kind in flow.inputs.items() if kind == DIFF}
        if self.suspects is None:
            return params | inputs
        fed = {name for name, kind in flow.params.items() if kind != NONE and name in self.suspects}
        fed |= {name for name, kind in flow.inputs.items() if kind != NONE and name in self.reached}
        if fed:
            self.reached.add(call.node.name)
        return {name for name in params if name[len(PARAM_PREFIX):] in self.suspects} | (inputs & self.reached)

    def _checkable(self, call: NodeCall) -> bool:
        """An op that ran, outside a no-grad region, on non-empty tensors, small enough to run again.
        A custom Function's own backward is read by :class:`~fxflow.static.stand_ins.CustomBackward`."""
        node = call.node
        if node.op not in ("call_function", "call_method", "call_module") or call.region is not None:
            return False
        if OPAQUE_KEY in node.meta or call.value is NOT_RUN:
            return False
        module = self.state.model.get_submodule(node.target) if node.op == "call_module" else None
        if _bounded(node, module) or module is not None and _hooked(module):
            return False
        # a boolean the data or a weight decides (a learned gate's branch, a mask) picks where the
        # gradient goes: a zero it gives belongs to this batch, not to the op's construction
        if any(t.dtype == torch.bool for i in call.inputs if self.constants.value(i) is None
               for t in tensors_in(self.state.env[i])):
            return False
        tensors = tensors_in(self.state.runner.arguments(node))
        if any(t.numel() == 0 for t in tensors + tensors_in(call.value) if t.is_floating_point() or t.is_complex()):
            return False
        values = sum(t.numel() for t in tensors)
        if node.op == "call_module":
            module = self.state.model.get_submodule(node.target)
            values += sum(t.numel() for t in (*module.parameters(), *module.buffers()))
        return values <= self.limit

    def _derived(self, call: NodeCall) -> dict[fx.Node, tuple[fx.Node, list[fx.Node]]]:
        """``{input: (another input of the node, the ops from it to this one)}`` for each input computed
        from another by at most 3 ops that read no other node (no weight, no buffer), run with grad."""
        inputs, derived = set(call.inputs), {}
        for start in call.inputs:
            chain, current = [], start
            while len(chain) < 3 and current.op in ("call_function", "call_method") \
                    and not target_draws_random_numbers(current.target) and len(current.all_input_nodes) == 1:
                chain.insert(0, current)
                current = current.all_input_nodes[0]
                if current in inputs:
                    if self.constants.value(start) is None and self.constants.value(current) is None and \
                            any(t.requires_grad for t in tensors_in(self.state.env[start])):
                        derived[start] = (current, chain)
                    break
        return derived

    def _read(self, call: NodeCall, draw: StandIn) -> dict[str, str]:
        """``{input name or "param:<name>": kind}`` from one backward of the node on ``draw``'s stand-ins;
        an input another computes (:meth:`_derived`) is computed again from that one's stand-in."""
        state, derived = self.state, self._derived(call)
        kept = {id(state.env[i]): value for i in call.inputs if (value := self.constants.value(i)) is not None}
        made: dict[int, torch.Tensor] = {}
        recomputed = {id(state.env[node]): (node, source, chain) for node, (source, chain) in derived.items()}

        def make(twin: torch.Tensor, device: torch.device) -> torch.Tensor:
            if id(twin) in kept:
                return kept[id(twin)]
            if id(twin) not in made:
                if id(twin) in recomputed:
                    made[id(twin)] = self._recompute(*recomputed[id(twin)], make, device)
                else:
                    made[id(twin)] = draw(twin, device)
            return made[id(twin)]

        with stand_in_weights(state, draw) as weights:
            args, kwargs, entries, _ = stand_in_arguments(state, call.node, call.inputs, make, fresh=True)
            result = state.runner.execute(call.node, args, kwargs)
            trainable = {name: copy for name, copy in weights.items() if copy.requires_grad}
            entries.update({entry_key(copy): [PARAM_PREFIX + name] for name, copy in trainable.items()})
            return backward_kinds(result, tensors_in((args, kwargs)) + list(trainable.values()), entries)


    def _at_bounds(self, call: NodeCall, kinds: dict[str, str]) -> dict[str, str]:
        """``kinds`` with each ZERO kept only if it holds on stand-ins centred on every number the node
        is given (:func:`_bounds`) too: a threshold at 500 (``F.threshold``, ``clamp_min``, ``hardshrink``,
        ``torch.maximum`` with a constant) is beyond every random draw around 0, which all land on the
        side where the derivative is 0, while the model's values may well cross it."""
        for centre in self._bounds(call):
            for mirrored in (False, True):
                zeros = [name for name, kind in kinds.items() if kind == ZERO]
                if not zeros:
                    return kinds
                spread = BOUND_SPREAD * max(abs(centre), 1.0)
                again = self._read(call, _centred(random_stand_in_maker(BOUND_SEED, spread, mirrored, mixed=True),
                                                  centre))
                for name in zeros:
                    kinds[name] = stronger(ZERO, again.get(name, NONE))
        return kinds

    def _bounds(self, call: NodeCall) -> list[float]:
        """The finite non-zero numbers the node is given, where an op's regime may change: its scalar
        arguments, its one-element constant tensors (``torch.tensor(500.)``), a module's number attributes
        (``nn.Threshold``'s threshold); at most :data:`BOUNDS_CHECKED`. Zero is the random draws' own centre."""
        node = call.node
        values = list(tree_flatten(self.state.runner.arguments(node))[0])
        if node.op == "call_module":
            values += list(vars(self.state.model.get_submodule(node.target)).values())
        values += [self.constants.value(i) for i in call.inputs]
        numbers: list[float] = []
        for value in values:
            if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point() \
                    and not value.is_meta:
                value = float(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
                    and value != 0 and float(value) not in numbers:
                numbers.append(float(value))
        return numbers[:BOUNDS_CHECKED]

    def _recompute(self, node: fx.Node, source: fx.Node, chain: list[fx.Node], make: StandIn,
                   device: torch.device) -> torch.Tensor:
        """``node``'s value computed again along ``chain`` from ``source``'s stand-in (``make``'s)."""
        values: dict[fx.Node, Any] = {source: tree_map(lambda t: make(t, device) if isinstance(t, torch.Tensor)
                                                       and (t.is_floating_point() or t.is_complex()) else t,
                                                       self.state.env[source])}
        for step in chain:
            args, kwargs = fx.node.map_arg((step.args, step.kwargs), lambda n: values[n])
            values[step] = self.state.runner.execute(step, args, kwargs)
        return values[node]


def _centred(make: StandIn, centre: float) -> StandIn:
    """``make``'s stand-ins with every floating one moved by ``centre`` (a size or count keeps its value)."""
    def shifted(twin: torch.Tensor, device: torch.device) -> torch.Tensor:
        value = make(twin, device)
        if not value.is_floating_point() or is_integer_scalar(twin):
            return value
        return (value.detach() + centre).requires_grad_(value.requires_grad)
    return shifted


class Constants:
    """The nodes whose value the code alone fixes (a factory's result, and ops on such results only:
    no input, parameter, buffer or gradient reaches them), and their real values."""

    def __init__(self, state: FlowState) -> None:
        self.state = state
        self.names: set[str] = set()
        self.values: dict[str, Any] = {}

    def note(self, call: NodeCall) -> None:
        """Note ``call``'s node as constant when it is one: sizes, dtypes and devices read off any
        tensor are (a zero state shaped like the batch), and so is an op on constants alone."""
        node, state = call.node, self.state
        if node.op not in ("call_function", "call_method") or call.region is not None or call.value is NOT_RUN:
            return
        if target_draws_random_numbers(node.target):  # the model's randomness (a drop-path mask), not its
            return  # construction: computed again it is another draw, which may drop what the real run kept
        # a value computed from a trainable weight is the weight's (a learned gate's ``gate > 0``), never
        # the code's, even when the result itself carries no gradient
        if _reads_metadata(node) and not tensors_in(call.value) or \
                not any(t.requires_grad for t in tensors_in((call.value, state.runner.arguments(node)))) \
                and all(state.read(i).name in self.names for i in call.inputs):
            self.names.add(node.name)

    def value(self, node: fx.Node) -> Any | None:
        """The real value of a constant ``node`` (None for any other, or where it cannot be had)."""
        if self.state.read(node).name not in self.names:
            return None
        if node.name not in self.values:
            self.values[node.name] = self._compute(node)
        return self.values[node.name]

    def _compute(self, node: fx.Node) -> Any | None:
        value = self.state.env[node]
        if not any(t.is_meta for t in tensors_in(value)):  # real twins: the value itself
            return value
        inputs = {id(self.state.env[i]): self.value(i) for i in node.all_input_nodes}
        if any(v is None for v in inputs.values()):
            return None
        device = self.state.device

        def real(argument: Any) -> Any:  # the meta twins' device, read off a tensor, is the model's here
            if isinstance(argument, torch.device) and argument.type == "meta":
                return device
            return inputs.get(id(argument), argument)

        args, kwargs = tree_map(real, self.state.runner.arguments(node))
        try:
            with torch.no_grad(), device:
                result = self.state.runner.execute(node, args, kwargs)
        except Exception:  # a value stand-ins stand for all the same: drawn at random
            return None
        return None if any(t.is_meta for t in tensors_in(result)) else result


def _reads_metadata(node: fx.Node) -> bool:
    """``x.size(0)``, ``x.shape``, ``x.dtype``: a read of a tensor's metadata alone."""
    if node.op == "call_method":
        return node.target in METADATA_ATTRIBUTES
    return node.target is getattr and len(node.args) > 1 and node.args[1] in METADATA_ATTRIBUTES


# Ops whose derivative is 1 between two bounds: zero on stand-ins that all land outside a narrow band,
# never zero by construction while the band is not empty (a zero they give is the values', this batch's).
_BOUNDED_FUNCTIONS = ("clamp", "clip", "clamp_", "clip_", "hardtanh", "hardtanh_", "relu6")


def _bounded(node: fx.Node, module: torch.nn.Module | None) -> bool:
    """A clamp-like op (``x.clamp(lo, hi)``, ``F.hardtanh``, ``relu6``, ``nn.Hardtanh``, ``nn.ReLU6``): its
    stand-ins would have to land between its bounds, which random values of three scales need not do."""
    if module is not None:
        return isinstance(module, torch.nn.Hardtanh)  # nn.ReLU6 is one
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return name in _BOUNDED_FUNCTIONS


def _hooked(module: torch.nn.Module) -> bool:
    """A module whose forward hooks run with its call (a pruning mask applied in a pre-hook): the hooks read
    state the node's inputs do not show (a buffer, a counter), which is the model's state, not its code."""
    from torch.nn.modules import module as module_globals

    return any((module._forward_pre_hooks, module._forward_hooks, module_globals._global_forward_pre_hooks,
                module_globals._global_forward_hooks))
