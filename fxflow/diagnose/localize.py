"""Where a gradient died or faded: the autograd node, the user's line, and why.

Read from the real run's :class:`~fxflow.dynamic.backward_trace.BackwardTrace`: which torch call, user line
and module created each autograd node in the forward, and the norms of the gradients that crossed each
node in the backward that gave the verdicts. An exact zero is traced from the parameter towards the
loss to the node that received a nonzero gradient and passed back 0 (an op) or where a gradient hook
turned it into 0. A vanishing gradient is followed up its largest contributions to the loss, and the
stretch where its norm fell most is named. No second forward or backward runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core import derivatives
from ..dynamic.backward_trace import AutogradGraph, BackwardTrace, GradientNorms, Node, NodeOrigin, OriginRecorder
from ..verdicts import CutSite
from .holders import ZeroHolders, memoized_pass

# Ops whose zero gradient depends on the batch: the words say what state the data is in.
_GATES = {"relu": "every unit is inactive on this batch", "relu_": "every unit is inactive on this batch",
          "threshold": "every unit is below the threshold on this batch"}
_SATURATING = frozenset({"clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_max", "hardtanh", "hardtanh_",
                         "relu6"})

def passes_nothing_back(op: str) -> bool:
    """An op that passes back 0 where its units are inactive or saturated (ReLU, clamp): a dead unit."""
    return op in _GATES or op in _SATURATING


# Products: the gradient one operand gets is the other operand times the incoming gradient.
_PRODUCTS = frozenset({"linear", "matmul", "mm", "bmm", "mul", "mul_", "__mul__", "__rmul__", "__matmul__",
                       "einsum", "conv1d", "conv2d", "conv3d", "bilinear", "addmm", "baddbmm", "outer"})
# Ops that only move elements (stack, cat, views, indexing): each input gets its slice of what
# arrived, so a zero slice was made further on (a mask multiply after a stack), never by them.
_ROUTING = frozenset({"stack", "cat", "unbind", "split", "splitwithsizes", "chunk", "view", "reshape", "unsafeview",
                      "select", "slice", "transpose", "t", "permute", "expand", "squeeze", "unsqueeze", "clone",
                      "narrow", "index", "gather", "flatten", "unflatten", "alias", "tobackward", "copyslices"})


def moves_elements(node: Node) -> bool:
    """An op that only moves elements: a zero slice through it was made by a consumer."""
    return _node_op(node) in _ROUTING


class Localizer:
    """Reads a traced run and explains one parameter's zero or vanishing gradient."""

    def __init__(self, graph: AutogradGraph, norms: GradientNorms, origins: OriginRecorder,
                 final: dict[int, float], holders: ZeroHolders | None = None,
                 modules: dict[str, torch.nn.Module] | None = None) -> None:
        self.graph, self.norms, self.origins = graph, norms, origins
        self.final = final  # id(parameter) -> norm of the gradient the real backward gave it
        self._main: dict[Node, Node | None] = {}
        self._falls: dict[Node, tuple[Node, tuple[Node, Node, float]]] = {}
        self._stretches: dict[tuple[Node, Node], _Stretch] = {}
        self._borrowed: dict[Node, NodeOrigin] = {}
        self.holders = holders
        self.modules = modules or {}  # qualified name -> module ("" the model)
        self.held_by: dict[Node, list[str]] = {}  # parameter leaf -> the zero-valued weights that zeroed it
        self.fed_by: dict[Node, list[str]] = {}  # dead unit's parameter leaf -> the weights feeding it that learn
        self._learning: set[str] | None = None
        self._own: dict[Node, Zeroing | None] = {}  # node -> the zeroing seen at the node itself
        self._zeroings: dict[Node, tuple[int, Zeroing] | None] = {}  # node -> (steps to, nearest zeroing)
        self._sites: dict[Zeroing, tuple[CutSite, list[str] | None]] = {}  # with the holders, where any were asked

    def arriving(self, node: Node) -> float:
        if node is self.graph.root:
            return max(self.norms.arriving.get(node, 1.0), 1.0)  # the loss receives 1
        if hasattr(node, "variable"):
            return self.final.get(id(node.variable), 0.0)
        return self.norms.arriving.get(node, 0.0)  # a node that never ran received nothing

    def incoming(self, node: Node) -> list[float]:
        return [self.passed(edge) for edge in self.graph.consumers.get(node, ())]

    def passed(self, edge: tuple[Node, int]) -> float:
        """The norm of the gradient sent along ``edge``; the one use of a parameter sends it its whole gradient."""
        if edge in self.norms.unread:
            return self.final.get(id(self.norms.unread[edge].variable), 0.0)
        return self.norms.passed.get(edge, 0.0)

    # -- exact zero -----------------------------------------------------------------------
    def explain_zero(self, leaf: Node) -> CutSite | None:
        """The node closest to the parameter where a nonzero gradient became exactly 0."""
        found = self.nearest_zeroing(leaf)
        if found is None:
            return None
        if found not in self._sites:  # parameters behind one zeroing share its words
            if found.came_from is None:
                self._sites[found] = (self._zeroed_at(found.node, found.nonzero_inputs), None)
            else:
                holders = self.holders.across(found.node, found.came_from) if self.holders is not None else []
                if not holders and self.holders is not None and self.origin(found.node).op in _PRODUCTS:
                    holders = self.holders.frozen_in(self.origin(found.node).module)  # no step moves these
                self._sites[found] = (self._zero_after(found.node, holders), holders)
        site, holders = self._sites[found]
        if holders is not None:
            self.held_by[leaf] = list(holders)
        if self.holders is not None and passes_nothing_back(site.op):  # a dead unit: do its inputs move?
            mine = id(leaf.variable)
            self.fed_by[leaf] = [name for name in self.holders.feeding(found.node)
                                 if self.holders.names.get(mine) != name and self._learns(name)]
        return site

    def _learns(self, name: str) -> bool:
        """Whether the real backward gave parameter ``name`` a non-zero gradient (an optimizer moves it)."""
        if self._learning is None:
            self._learning = {known for key, known in self.holders.names.items() if self.final.get(key, 0.0) > 0.0}
        return name in self._learning

    def nearest_zeroing(self, node: Node) -> "Zeroing | None":
        """Where the gradient on the way from ``node`` to the loss became exactly 0, nearest ``node``.

        Nearest as a breadth-first search from ``node`` towards the loss meets it: fewest steps, then the
        first consumer in autograd's order at each step. One memoized pass (:func:`memoized_pass`) answers
        every node together, so explaining every parameter of a model costs one walk of its graph.
        """
        found = memoized_pass(node, self._onwards, self._nearest, self._zeroings)
        return found[1] if found is not None else None

    def _onwards(self, node: Node) -> list[Node]:
        """The consumers the search goes on to from ``node``: none where ``node`` itself shows a zeroing."""
        if node not in self._own:
            self._own[node] = self._zeroing_at(node)
        return [] if self._own[node] is not None else [consumer for consumer, _ in self.graph.consumers.get(node, ())]

    def _nearest(self, node: Node, onwards: list[tuple[int, Zeroing] | None]) -> tuple[int, Zeroing] | None:
        own = self._own[node]
        if own is not None:
            return 0, own
        best = None
        for found in onwards:  # strictly nearer only: a tie goes to the consumer met first
            if found is not None and (best is None or found[0] + 1 < best[0]):
                best = (found[0] + 1, found[1])
        return best

    def _zeroing_at(self, node: Node) -> "Zeroing | None":
        """A zeroing seen at ``node`` itself: something nonzero arrived and its hooks (or a sum) made it 0;
        else the first consumer that received a nonzero gradient and passed ``node`` back 0."""
        incoming = [value for value in self.incoming(node) if value > 0]
        if incoming and not moves_elements(node):
            return Zeroing(node, None, len(incoming))
        for consumer, _ in self.graph.consumers.get(node, ()):
            if self.arriving(consumer) > 0 and not moves_elements(consumer):
                return Zeroing(consumer, node, 0)
        return None

    def _zero_after(self, node: Node, holders: list[str]) -> CutSite:
        origin = self.origin(node)
        op, where = origin.op or _node_op(node), _at(origin.source)  # a call with no __name__: its backward's
        where = self._inside(origin.module) + where  # an op with no Python line of its own: the module that ran it
        if op == "cond":
            reason = f"exactly 0 after `torch.cond`{where}: the branch that uses it was not taken on this batch"
        elif derivatives.zero_derivative_edges(node) is not False:
            reason = f"`{op}`{where} has a derivative of exactly 0 everywhere, so nothing passes back through it"
        elif holders:
            frozen = self.holders is not None and all(name in self.holders.frozen for name in holders)
            kind = "all zeros and frozen: requires_grad=False" if frozen else "all zeros"
            reason = (f"exactly 0 after `{op}`{where}: {_listed(holders)} ({kind}) "
                      f"scale{'s' if len(holders) == 1 else ''} what it passes back to 0")
        elif op in _GATES:
            reason = f"exactly 0 after `{op}`{where}: {_GATES[op]}"
        elif op in _PRODUCTS:
            reason = (f"exactly 0 after `{op}`{where}: what it multiplies the parameter with is all zeros, and no "
                      "trainable weight makes it so: a constant (a 0.0 weight, a zero buffer, a frozen or detached "
                      "zero parameter) or zeros in the input")
        elif op in _SATURATING:
            reason = f"`{op}`{where} is saturated: every element lies outside its range on this batch, so it passes back 0"
        else:
            reason = f"exactly 0 after `{op}`{where}: it passes back 0 for every element on this batch"
        return CutSite(node.name(), op, origin.source, reason)

    def _inside(self, module: str | None) -> str:
        """`` inside `rnn` (nn.RNN)`` where torch's own module ran the op in C++ (a recurrent layer's
        ``rnn_relu``): the user sees neither the op nor a line of it, only the module they called."""
        found = self.modules.get(module or "")
        if not isinstance(found, torch.nn.RNNBase):
            return ""
        kind = f"nn.{type(found).__name__}"
        return f" inside `{module}` ({kind}), called" if module else f" inside the checked model itself ({kind}), called"

    def _zeroed_at(self, node: Node, nonzero_inputs: int) -> CutSite:
        key = id(node.variable) if hasattr(node, "variable") else node
        origin = self.origin(node)
        if key in self.origins.hooks:
            source = self.origins.hooks[key]
            where = f" at line {source.rsplit(':', 1)[1]}" if source else ""
            reason = f"a gradient hook{where} ({source}) returns zeros" if source else "a gradient hook returns zeros"
            return CutSite(node.name(), "hook", source, reason)
        if hasattr(node, "variable") and getattr(node.variable, "_backward_hooks", None):
            return CutSite(node.name(), "hook", None, "a gradient hook on the parameter returns zeros")
        if nonzero_inputs > 1:
            reason = f"the gradients reaching `{origin.op}`{_at(origin.source)} along different paths cancel exactly"
            return CutSite(node.name(), origin.op, origin.source, reason)
        reason = f"a backward hook on `{origin.op}`{_at(origin.source)} returns zeros"
        return CutSite(node.name(), "hook", origin.source, reason)

    # -- vanishing --------------------------------------------------------------------------
    def explain_vanishing(self, leaf: Node) -> CutSite | None:
        """The stretch of the largest-gradient path from the loss to the parameter where it fell most."""
        start, end, factor = self._fall(leaf)[1]
        if factor <= 1.0:
            return None
        stretch = self._stretch(end, start)
        worst, node = stretch.worst
        origin = self.origin(node)
        if worst >= 0.9 * math.log(factor):  # one op does (nearly) all of it
            reason = f"`{origin.op}`{_at(origin.source)} shrinks the gradient {_power(factor)}"
            return CutSite(node.name(), origin.op, origin.source, reason)
        op = max(stretch.ops, key=lambda name: stretch.ops[name][0])
        _, nearest, farthest = stretch.ops[op]  # forward order: the parameter's side runs first
        span = _span([m for m in (nearest.module, farthest.module) if m])
        reason = f"the gradient shrinks {_power(factor)}{f' across {span}' if span else ''} (`{op}`{_at(nearest.source)})"
        return CutSite(node.name(), op, nearest.source, reason)

    def _up(self, node: Node) -> Node | None:
        """The consumer that sent ``node`` the most gradient: the next step of its main path to the loss."""
        if node not in self._main:
            edges = self.graph.consumers.get(node)
            self._main[node] = max(edges, key=self.passed)[0] if edges else None
        return self._main[node]

    def _fall(self, node: Node) -> tuple[Node, tuple[Node, Node, float]]:
        """On the main path from the loss down to ``node``: (the node with the largest gradient so far,
        (i, j, arriving(i) / arriving(j)) for the deepest fall). Memoized: paths share their top."""
        chain = []
        while node not in self._falls and self._up(node) is not None:
            chain.append(node)
            node = self._up(node)
        state = self._falls.setdefault(node, (node, (node, node, 1.0)))
        for member in reversed(chain):
            peak, best = state
            ratio = self.arriving(peak) / max(self.arriving(member), _TINY)
            if ratio > best[2]:
                best = (peak, member, ratio)
            state = (member if self.arriving(member) > self.arriving(peak) else peak, best)
            self._falls[member] = state
        return state

    def _stretch(self, node: Node, stop: Node) -> "_Stretch":
        """What the main path from ``node`` up to ``stop`` did to the gradient (memoized per stop)."""
        chain = []
        while node is not stop and (node, stop) not in self._stretches:
            chain.append(node)
            node = self._up(node)
        stretch = self._stretches.get((node, stop), _Stretch({}, (0.0, stop)))
        for child in reversed(chain):
            parent = self._up(child)
            shrink = math.log(max(self.arriving(parent), _TINY) / max(self.arriving(child), _TINY))
            stretch = stretch.plus(parent, self.origin(parent), shrink)
            self._stretches[(child, stop)] = stretch
        return stretch

    def origin(self, node: Node) -> NodeOrigin:
        """Where ``node`` came from; an unrecorded one (inside a composite call) borrows from a consumer."""
        unresolved = []
        found = self.origins.origins.get(node) or self._borrowed.get(node)
        while found is None:
            unresolved.append(node)
            node = self._up(node)
            found = NodeOrigin(_node_op(unresolved[0]), None, None) if node is None else (  # never an empty name
                self.origins.origins.get(node) or self._borrowed.get(node))
        for member in unresolved:
            self._borrowed[member] = NodeOrigin(_node_op(member), found.source, found.module)
        return self._borrowed[unresolved[0]] if unresolved else found


@dataclass(frozen=True)
class Zeroing:
    """Where a gradient became exactly 0: at ``node`` itself (``came_from`` None: it received
    ``nonzero_inputs`` nonzero gradients and passed on 0), or at its consumer ``node``, which
    received a nonzero gradient and passed 0 back to ``came_from``."""

    node: Node
    came_from: Node | None
    nonzero_inputs: int


@dataclass(frozen=True)
class _Stretch:
    """A stretch of a main path: log-shrink per op with its members nearest to and farthest from the
    parameter, and the single node that shrank the gradient most."""

    ops: dict[str, tuple[float, NodeOrigin, NodeOrigin]]
    worst: tuple[float, Node]

    def plus(self, node: Node, origin: NodeOrigin, shrink: float) -> "_Stretch":
        """This stretch extended by ``node``, one step nearer the parameter."""
        if shrink <= 0.0:
            return self
        ops = dict(self.ops)
        total, _, farthest = ops.get(origin.op, (0.0, origin, origin))
        ops[origin.op] = (total + shrink, origin, farthest)
        return _Stretch(ops, max(self.worst, (shrink, node), key=lambda item: item[0]))


_TINY = 1e-300


def _node_op(node: Node) -> str:
    """``ReluBackward0`` -> ``relu``; ``torch::autograd::AccumulateGrad`` -> ``AccumulateGrad``."""
    name = node.name().rsplit("::", 1)[-1]
    if "AutogradOp" in name:  # a higher-order op's backward: CondAutogradOpBackward -> cond
        return name.split("AutogradOp")[0].lower()
    stem = name.split("Backward")[0] if "Backward" in name else name
    return stem.lower() if "Backward" in name else stem


def _listed(names: list[str], keep: int = 3) -> str:
    shown = ", ".join(f"`{name}`" for name in names[:keep])
    return shown + (f" and {len(names) - keep} more" if len(names) > keep else "")


def _at(source: str | None) -> str:
    return f" at {source}" if source else ""


def _power(factor: float) -> str:
    exponent = round(math.log10(factor))
    return f"10^{exponent}" if exponent >= 2 else f"{factor:.3g}x"


def _span(modules: list[str]) -> str | None:
    """```blocks.3``–``blocks.27``` for the first and last module of a stretch (forward order), at the
    first level where they differ."""
    if not modules:
        return None
    parts = [m.split(".") for m in modules]
    common = 0
    while all(len(p) > common for p in parts) and len({p[common] for p in parts}) == 1:
        common += 1
    depth = min(common + 1, min(len(p) for p in parts))
    first, last = (".".join(p[:depth]) for p in (parts[0], parts[-1]))
    return f"`{first}`" if first == last else f"`{first}`–`{last}`"


def localize(model: torch.nn.Module, trace: BackwardTrace, gradient_norms: dict[str, float],
             zero: dict[str, torch.nn.Parameter], vanishing: dict[str, torch.nn.Parameter],
             held_by: dict[str, list[str]] | None = None,
             fed_by: dict[str, list[str]] | None = None) -> dict[str, CutSite]:
    """Explain each listed parameter's gradient from the traced real run.

    ``zero`` and ``vanishing`` map names to the parameters the real backward left exactly zero or
    vanishing; ``gradient_norms``, every parameter's gradient norm from that backward. ``held_by``, when
    given, receives for each zero parameter the all-zero trainable weights that zeroed it
    (:mod:`fxflow.diagnose.holders`); ``fed_by``, for each zero made by a dead unit, the weights computing
    its input that the backward gave a gradient (the optimizer moves its input: it may revive).
    """
    graph = trace.graph
    if graph is None:
        return {}
    targets = {name: p for name, p in {**zero, **vanishing}.items() if id(p) in graph.leaves}
    if not targets:
        return {}
    names = {id(p): name for name, p in model.named_parameters()}
    final = {key: gradient_norms.get(name, 0.0) for key, name in names.items()}
    localizer = Localizer(graph, trace.norms, trace.origins, final, ZeroHolders(names, model.parameters()),
                          dict(model.named_modules()))
    found: dict[str, CutSite] = {}
    for name, parameter in targets.items():
        leaf = graph.leaves[id(parameter)]
        site = localizer.explain_zero(leaf) if name in zero else localizer.explain_vanishing(leaf)
        if site is not None:
            found[name] = site
        if held_by is not None and leaf in localizer.held_by:
            held_by[name] = localizer.held_by[leaf]
        if fed_by is not None and localizer.fed_by.get(leaf):
            fed_by[name] = localizer.fed_by[leaf]
    return found
