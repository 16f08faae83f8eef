"""What a node's result owes to its inputs: walks of its autograd history, and one backward through it.

The annotation (:mod:`fxflow.static.annotate`) runs each node on twin tensors and asks two questions of
the result's history, which this module answers without knowing anything of fx:

* :func:`walk_history`: which of the node's inputs (and which parameter leaves) the history
  reaches, and over which kind of edge (differentiable, identically zero, no derivative), reading
  torch's own derivative table through :func:`fxflow.core.derivatives.derivative_kinds`;
* :func:`backward_kinds`: the same from one real backward of seeded random cotangents, for what
  only running the backward tells (a custom ``autograd.Function``'s own backward).

Inputs are known by :func:`entry_key`: where a tensor's gradient enters autograd's graph.
:func:`reach` is fxflow's one walk of autograd's graph: the walks here, the probe's tripwires
(:mod:`fxflow.dynamic.no_derivative`) and localization (:mod:`fxflow.diagnose.localize`) all run it.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Container, Iterable, Mapping

import torch

from . import derivatives
from .tensors import tensors_in
from ..verdicts import EdgeKind

DIFF, ZERO, NONE = EdgeKind.DIFF, EdgeKind.ZERO, EdgeKind.NONE

# A walk inside one node's autograd history never needs to be longer than this; it guards against
# tensors captured from far upstream (a module caching an earlier activation, say).
_WALK_LIMIT = 100_000


def entry_key(tensor: torch.Tensor) -> tuple:
    """Identifies where a tensor's gradient enters autograd's graph."""
    if tensor.grad_fn is None:
        return ("leaf", id(tensor))
    return (id(tensor.grad_fn), tensor.output_nr)


def node_key(function: Any, output_nr: int) -> tuple:
    """The :func:`entry_key` of the tensor whose gradient arrives at ``function``'s ``output_nr``."""
    variable = getattr(function, "variable", None)
    if variable is not None:  # AccumulateGrad: the gradient lands in a leaf
        return ("leaf", id(variable))
    return (id(function), output_nr)


EVERY_KIND = frozenset({DIFF, ZERO, NONE})


@dataclass
class WalkRecord:
    """What one walk of autograd's graph (:func:`reach`) saw."""

    stopped: list[tuple] = field(default_factory=list)  # the stop keys it arrived at, in order
    leaves: list[torch.Tensor] = field(default_factory=list)  # leaves (AccumulateGrad) not among the stops
    nodes: list[Any] = field(default_factory=list)  # every node it entered, each once, in order
    skipped: set[str] = field(default_factory=set)  # kinds of edge it met and did not cross
    cut_short: bool = False  # it stopped at ``limit`` with graph left to see


def reach(roots: Iterable[tuple[Any, int]], stops: Container[tuple] = (), crossable: Collection[str] = EVERY_KIND,
          kinds: Callable[[Any], Iterable[str]] | None = None, limit: float = math.inf) -> WalkRecord:
    """Walk autograd's graph from ``roots`` ((node, output number) pairs) towards the leaves.

    A key (:func:`node_key`) in ``stops`` is recorded and not walked past; an edge is crossed when
    its kind (``kinds(node)``, one per ``next_functions`` entry; torch's derivative table by
    default) is in ``crossable``. Each node is entered once; after ``limit`` nodes the walk stops.
    """
    kinds = kinds or derivatives.derivative_kinds
    found = WalkRecord()
    entered: set[int] = set()
    stack = list(roots)
    while stack and len(entered) < limit:
        function, output_nr = stack.pop()
        key = node_key(function, output_nr)
        if key in stops:
            found.stopped.append(key)
            continue
        if id(function) in entered:
            continue
        entered.add(id(function))
        found.nodes.append(function)
        variable = getattr(function, "variable", None)
        if variable is not None:
            found.leaves.append(variable)
            continue
        for kind, (next_function, number) in zip(kinds(function), function.next_functions):
            if next_function is None:
                continue
            if kind not in crossable:
                found.skipped.add(kind)
                continue
            stack.append((next_function, number))
    found.cut_short = bool(stack)
    return found


_STRENGTH = {NONE: 0, ZERO: 1, DIFF: 2}


def backward_kinds(result: Any, arguments: list[torch.Tensor], entries: dict[tuple, list[str]]) -> dict[str, str]:
    """``{input node: NONE|ZERO|DIFF}`` from one backward through ``result`` to ``arguments``.

    The cotangents are seeded random values, not ones: a backward of ones through a softmax (or
    any normalization) is exactly zero, which the real loss's backward is not. A gradient that a
    custom backward accumulates into an argument's ``.grad`` itself (it runs ``backward`` inside)
    counts as well.
    """
    outputs = [t for t in tensors_in(result) if t.requires_grad]
    sources = list({id(t): t for t in arguments if t.requires_grad and entry_key(t) in entries}.values())
    if not outputs or not sources:
        return {}
    generators: dict[torch.device, torch.Generator] = {}
    grads = torch.autograd.grad(outputs, sources, grad_outputs=[_cotangent(t, generators) for t in outputs],
                                allow_unused=True, retain_graph=True)
    kinds: dict[str, str] = {}
    for source, grad in zip(sources, grads):
        kind = stronger(grad_kind(grad), grad_kind(source.grad) if source.is_leaf else NONE)
        for name in entries[entry_key(source)]:
            kinds[name] = stronger(kind, kinds.get(name, NONE))
    return kinds


def grad_kind(grad: torch.Tensor | None) -> str:
    """NONE for no gradient, ZERO for one of exact zeros, else DIFF."""
    return NONE if grad is None else DIFF if grad.is_meta or bool(grad.any()) else ZERO


def stronger(kind: str, other: str) -> str:
    """The kind that carries more: DIFF over ZERO over NONE."""
    return kind if _STRENGTH[kind] >= _STRENGTH[other] else other


def _cotangent(tensor: torch.Tensor, generators: dict[torch.device, torch.Generator]) -> torch.Tensor:
    if tensor.is_meta:
        return torch.ones_like(tensor)
    generator = generators.setdefault(tensor.device, torch.Generator(tensor.device).manual_seed(0))
    return torch.randn(tuple(tensor.shape), dtype=tensor.dtype, device=tensor.device, generator=generator)


class Reached(dict):
    """What a walk reached (``{name: edge kind}``); ``cut_short`` when it stopped at the walk limit
    with history left to see, so an input it did not reach may still feed the result."""

    cut_short = False

    @property
    def results_not_passed(self) -> dict[str, str]:
        """Results of earlier nodes the walk reached that the node was not passed as inputs
        (see :func:`walk_history`): ``{node name: edge kind}``."""
        return self.__dict__.setdefault("_results_not_passed", {})


def walk_history(outputs: list[torch.Tensor], entries: dict[tuple, list[str]], known: Mapping[tuple, str] | set[tuple],
          parameter_names: dict[int, str], histories: Mapping[int, Any] | None = None) -> Reached:
    """Which inputs (and parameters) the outputs' history reaches, and whether only through zeros.

    Returns ``{input node name: DIFF|ZERO|NONE}`` plus ``{"param:<name>": ...}`` entries for leaves
    that are parameters (a module call's own weights). ``known`` holds the results of earlier
    nodes, where the walk stops; when it maps them to their node's name, one reached other than
    through an input counts too (``torch.autograd.grad(y, x, create_graph=True)`` is
    differentiable in everything ``y``'s derivative reads, which the call is not given). NONE: reached only through an op with no
    derivative for it (``floor_divide``): its backward raises, so no gradient gets there. Each pass
    crosses one more kind of edge (see :func:`fxflow.core.derivatives.derivative_kinds`); a pass runs only
    if the one before skipped such an edge. ``histories``: where an output is a snapshot of a recorded
    tensor (:mod:`fxflow.capture.recorded`), the walk starts from that tensor's history.
    """
    recorded = [histories.get(id(t)) if histories else None for t in outputs]
    starts = [(h.grad_fn, h.output_nr, h.key) if h else (t.grad_fn, t.output_nr, ("leaf", id(t)))
              for t, h in zip(outputs, recorded)]
    roots = [(grad_fn, number) for grad_fn, number, _ in starts if grad_fn is not None]
    leaves = [key for t, (grad_fn, _, key) in zip(outputs, starts) if t.requires_grad and grad_fn is None]
    reached = Reached()
    for key in leaves:
        for name in entries.get(key, ()):
            reached[name] = DIFF
    stops = _StopKeys(entries, known)
    skipped: set[str] = {DIFF}
    for crossing in (DIFF, ZERO, NONE):  # edges of this kind and the ones before it are crossed
        if crossing not in skipped:
            continue
        walk = reach(roots, stops, _CROSSABLE[crossing], limit=_WALK_LIMIT)
        skipped |= walk.skipped
        for key in walk.stopped:
            if key in entries:
                for name in entries[key]:
                    reached.setdefault(name, crossing)
            elif isinstance(known, Mapping):  # the result of an earlier node that is not an input here
                reached.results_not_passed.setdefault(known[key], crossing)
        for variable in walk.leaves:
            name = parameter_names.get(id(variable))
            if name:
                reached.setdefault("param:" + name, crossing)
        reached.cut_short = reached.cut_short or walk.cut_short
    return reached


class _StopKeys:
    """Where a walk stops: the inputs' keys, and the earlier results' keys except leaves (a
    parameter reached is named as a parameter, not as the earlier node that read it)."""

    def __init__(self, inputs: Container[tuple], earlier_results: Container[tuple]) -> None:
        self.inputs, self.earlier_results = inputs, earlier_results

    def __contains__(self, key: object) -> bool:
        return key in self.inputs or (key[0] != "leaf" and key in self.earlier_results)


_CROSSABLE = {DIFF: {DIFF}, ZERO: {DIFF, ZERO}, NONE: {DIFF, ZERO, NONE}}


def autograd_nodes(roots: Iterable[Any]) -> list[Any]:
    """Every autograd node reachable from ``roots`` through ``next_functions``, each once."""
    return reach([(root, 0) for root in roots if root is not None], kinds=_every_edge).nodes


def _every_edge(function: Any) -> Iterable[str]:
    return itertools.repeat(EdgeKind.DIFF)
