"""The backward walk: one pass from the output decides every parameter's static verdict.

Reads the :class:`~fxflow.static.annotate.NodeFlow` annotations and builds a networkx graph with one
node per fx node plus one ``param:<name>`` node per parameter, each edge labelled with its kind
(``diff``, ``zero``, ``none``). Then, all parameters together:

* ``connected``  = nodes with any path to the output          (else: ``unused``)
* ``wet_any``    = nodes with a diff-or-zero path to the output (else: ``cut``)
* ``wet``        = nodes with a diff path to the output        (else: ``zero``)

Cut attribution is one reverse-topological pass over the dry nodes: the cut set of a dry node
is every ``none`` edge leaving it towards the output, plus the cut sets of the dry nodes it
feeds. A deliberate detach that leaves another path open (a straight-through estimator, a
residual) is never reported, because the parameter is wet through the other path.

Graph attributes read by the renderer (``report.graph``):

node  ``kind`` (placeholder, get_attr, call_module, call_function, call_method, output, param),
      ``op``, ``label``, ``state`` (wet, dry, cut, zero, frozen, unused, inert), ``source``,
      ``module_stack`` [(qualified name, class name), ...], ``shape``, ``dtype``, ``reason``
      (cut nodes), ``order`` (position in the graph)
edge  ``kind`` (diff, zero, none), ``state`` (wet, dry, cut, zero)
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field, replace
from typing import Callable

import networkx as nx
import torch
import torch.fx as fx

from ..core.source import user_frames
from .flow import DIFF, META_KEY, NONE, ZERO
from .explain import describe_cut, describe_raise, describe_zero, node_op, node_source, one_site_per_cause
from ..verdicts import (BACKWARD_RAN_KEY, LOSS_OUTPUT_KEY, NO_DERIVATIVE_KEY, OPAQUE_KEY, PARAM_PREFIX, PARAMETER_STATE, CutSite, NodeState,
                       StaticReason, StaticVerdict as Static)

PARAM = PARAM_PREFIX


@dataclass
class ParameterFinding:
    """The graph walk's answer for one parameter."""

    static: Static
    cut_by: list[CutSite] = field(default_factory=list)
    # why, where the verdict alone does not say, and the facts it speaks of (words: fxflow.present.reasons)
    reason: StaticReason | None = None
    facts: dict[str, str] = field(default_factory=dict)


@dataclass
class StaticAnalysis:
    graph: nx.DiGraph
    verdicts: dict[str, ParameterFinding]
    # How nodes were decided when not by running them on twins ("name rules", "stand-ins"):
    # kind -> (how many nodes, the parameters upstream of them, sorted).
    uncertain: dict[str, tuple[int, list[str]]] = field(default_factory=dict)
    # Ops with no derivative that the gradient reaches: where the real loss.backward() raises.
    raises: list[CutSite] = field(default_factory=list)


def build_graph(graph_module: fx.GraphModule) -> tuple[nx.DiGraph, str]:
    """The flow graph of an annotated GraphModule, and the name of its output node.

    A node whose result elements reach different inputs or parameters (``NodeFlow.outputs``: an
    ``nn.MultiheadAttention`` call's output and weights) gets one extra *part* node per element,
    with that element's edges; a consumer that takes one element (``getitem``) is fed by its part
    alone, so a parameter only the unused element needs stays unused. :func:`analyze` folds the
    parts back into their node once the verdicts are decided.
    """
    graph = nx.DiGraph()
    output = ""
    nodes = list(graph_module.graph.nodes)
    split = {node.name: node.meta[META_KEY].outputs for node in nodes if node.meta[META_KEY].outputs}
    for order, node in enumerate(nodes):
        flow = node.meta[META_KEY]
        attributes = dict(
            kind=node.op, op=node_op(node), label=_label(node), source=node_source(node),
            module_stack=_module_stack(node), shape=flow.shape, dtype=flow.dtype, state="",
            requires_grad=flow.requires_grad, order=order, opaque=_undecided_opaque(node),
            no_derivative=bool(node.meta.get(NO_DERIVATIVE_KEY)), ran=flow.evaluated,
        )
        graph.add_node(node.name, **attributes)
        for source, kind in flow.inputs.items():
            for origin in _origins(split, source, node):
                _add_edge(graph, origin, node.name, kind)
        for name, kind in flow.params.items():
            graph.add_node(PARAM + name, kind="param", label=name, order=order)
            _add_edge(graph, PARAM + name, node.name, kind)
        for key, part in flow.outputs.items():
            graph.add_node(_part(node.name, key), **attributes, part_of=node.name)
            if not part.inputs and not part.params:  # computed from the call's inputs, with no history
                part = replace(part, inputs=dict.fromkeys(flow.inputs, NONE), params=dict.fromkeys(flow.params, NONE))
            for source, kind in part.inputs.items():
                for origin in _origins(split, source, node):
                    _add_edge(graph, origin, _part(node.name, key), kind)
            for name, kind in part.params.items():
                _add_edge(graph, PARAM + name, _part(node.name, key), kind)
        if node.op == "output":
            output = node.name
    return graph, output


def _part(name: str, key: object) -> str:
    return f"{name}[{key!r}]"  # fx names never hold brackets


def _origins(split: dict[str, dict], source: str, consumer: fx.Node) -> list[str]:
    """The graph nodes a read of ``source`` by ``consumer`` comes from: the one element it takes, if
    ``source`` is split and ``consumer`` takes one element (``x[1]``, ``x.attn``), else all of them."""
    parts = split.get(source)
    if not parts:
        return [source]
    key: object = None
    if consumer.op == "call_function" and consumer.target in (operator.getitem, getattr) and len(consumer.args) > 1:
        key = consumer.args[1]
    if isinstance(key, (int, str)) and key in parts:
        return [_part(source, key)]
    names = list(parts)
    if isinstance(key, int) and 0 <= key < len(names) and all(isinstance(k, str) for k in names):
        return [_part(source, names[key])]  # x[1] of a named tuple whose elements go by name
    return [_part(source, k) for k in parts]


def _fold_parts(graph: nx.DiGraph, sets: list[set[str]]) -> None:
    """After the walk: each node is in a set when one of its parts is, and takes over the parts' consumers."""
    parts = [(name, data["part_of"]) for name, data in graph.nodes(data=True) if "part_of" in data]
    for name, whole in parts:
        for members in sets:
            if name in members:
                members.add(whole)


def _whole_sites(graph: nx.DiGraph, sites: dict[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """Cut (or zero) sites with each part named by its node: a cut at a part is a cut at the node."""
    return {name: frozenset(graph.nodes[s].get("part_of", s) for s in found) for name, found in sites.items()}


def _remove_parts(graph: nx.DiGraph) -> None:
    """Fold each part node into its node: the part's outgoing edges leave from the node itself."""
    parts = [(name, data["part_of"]) for name, data in graph.nodes(data=True) if "part_of" in data]
    for name, whole in parts:
        for _, target, data in list(graph.out_edges(name, data=True)):
            if not graph.has_edge(whole, target) or _STRENGTH[graph[whole][target]["kind"]] < _STRENGTH[data["kind"]]:
                graph.add_edge(whole, target, **data)
        graph.remove_node(name)


_STRENGTH = {NONE: 0, ZERO: 1, DIFF: 2}


def _undecided_opaque(node: fx.Node) -> str | None:
    """Why only the real backward can decide the node; None once its own backward ran on twins."""
    return None if node.meta.get(BACKWARD_RAN_KEY) else node.meta.get(OPAQUE_KEY)


def _add_edge(graph: nx.DiGraph, source: str, target: str, kind: str) -> None:
    if graph.has_edge(source, target) and _STRENGTH[graph[source][target]["kind"]] >= _STRENGTH[kind]:
        return
    graph.add_edge(source, target, kind=kind)


def _label(node: fx.Node) -> str:
    if node.op in ("call_module", "get_attr"):
        return str(node.target)
    return node.name


def _module_stack(node: fx.Node) -> list[tuple[str, str]]:
    stack = node.meta.get("nn_module_stack") or {}
    result = []
    for value in stack.values():
        qualname, cls = value
        result.append((qualname, cls if isinstance(cls, str) else cls.__name__))
    return result


def _ancestors_over(graph: nx.DiGraph, target: str, kinds: set[str], avoiding: frozenset[str] = frozenset()) -> set[str]:
    """Nodes with a path to ``target`` using only edges of the given kinds (``target`` included),
    and none into a node of ``avoiding``."""
    view = nx.subgraph_view(graph, filter_edge=lambda source, node: graph[source][node]["kind"] in kinds
                            and node not in avoiding)
    return nx.ancestors(view, target) | {target}


def _never_ran_opaque(graph: nx.DiGraph) -> frozenset[str]:
    """Opaque nodes (a custom autograd.Function) that never ran: only a name rule says they pass gradient."""
    return frozenset(name for name, data in graph.nodes(data=True)
                     if data.get("opaque") and not data.get("ran", True))


def _stop_sites(graph: nx.DiGraph, region: set[str], stop_kind: str, targets: set[str]) -> dict[str, frozenset[str]]:
    """For each node of ``region``: the nodes where its paths meet an edge of ``stop_kind``.

    One pass in reverse topological order; ``targets`` are the nodes such an edge must lead to.
    """
    sites: dict[str, frozenset[str]] = {}
    for node in reversed(list(nx.topological_sort(graph.subgraph(region)))):
        found: set[str] = set()
        for successor in graph.successors(node):
            kind = graph[node][successor]["kind"]
            if kind == stop_kind and successor in targets:
                found.add(successor)
            elif kind != NONE and successor in sites:
                found |= sites[successor]
        sites[node] = frozenset(found)
    return sites


def never_read(graph: nx.DiGraph, key: str) -> bool:
    """True when no op reads the parameter node ``key``: only placeholders or attribute reads that
    nothing uses follow it (torch.export lifts the parameters of modules forward never calls)."""
    # A search that stops at the first op: the parameter's first successor usually is one, where
    # the set of all its descendants (most of the graph) cost a walk per parameter.
    seen, stack = {key}, [key]
    while stack:
        for successor in graph.successors(stack.pop()):
            if successor in seen:
                continue
            if graph.nodes[successor].get("kind") not in ("get_attr", "placeholder"):
                return False
            seen.add(successor)
            stack.append(successor)
    return True


def analyze(graph_module: fx.GraphModule, model: torch.nn.Module) -> StaticAnalysis:
    """Static verdicts for every parameter of ``model`` from its annotated graph."""
    graph, output = build_graph(graph_module)
    connected = nx.ancestors(graph, output) | {output}
    wet_any = _ancestors_over(graph, output, {DIFF, ZERO})
    wet = _ancestors_over(graph, output, {DIFF})
    opaque = _never_ran_opaque(graph)  # what reaches the output only through these is not known to be wet
    certain = _ancestors_over(graph, output, {DIFF}, opaque) if opaque else wet
    _fold_parts(graph, [connected, wet_any, wet, certain])
    cut_sites = _stop_sites(graph, connected - wet_any, NONE, connected)
    zero_sites = _stop_sites(graph, wet_any - wet, ZERO, wet_any)
    passed = _whole_sites(graph, _reached_differentiably(graph, connected - wet_any, cut_sites))
    cut_sites, zero_sites = _whole_sites(graph, cut_sites), _whole_sites(graph, zero_sites)
    nodes = {node.name: node for node in graph_module.graph.nodes}

    parts: dict[str, list[str]] = {}  # node -> its element nodes (build_graph)
    for name, data in graph.nodes(data=True):
        if "part_of" in data:
            parts.setdefault(data["part_of"], []).append(name)
    verdicts: dict[str, ParameterFinding] = {}
    goal = "loss" if graph_module.meta.get(LOSS_OUTPUT_KEY) else "output"
    for name, parameter in model.named_parameters():
        key = PARAM + name
        if not parameter.requires_grad:
            verdict = ParameterFinding(Static.FROZEN, reason=StaticReason.REQUIRES_GRAD_FALSE)
        elif key not in graph or never_read(graph, key):  # torch.export lifts every parameter, called or not
            owner = name.rpartition(".")[0]
            verdict = (ParameterFinding(Static.UNUSED, reason=StaticReason.NEVER_CALLED, facts={"module": owner})
                       if owner else ParameterFinding(Static.UNUSED, reason=StaticReason.NEVER_READ))
        elif key not in connected:
            verdict = ParameterFinding(Static.UNUSED, reason=StaticReason.REACHES_NOTHING, facts={"goal": goal})
        elif key in wet and key not in certain:
            through = sorted((n for n in opaque if n in nx.descendants(graph, key)), key=_order(graph))
            verdict = ParameterFinding(Static.UNKNOWN, reason=StaticReason.OPAQUE_NEVER_RAN,
                                       facts={"opaque": graph.nodes[through[0]]["opaque"], "opaque_node": through[0]})
        elif key in wet:
            verdict = ParameterFinding(Static.REACHABLE)
        elif key in wet_any:
            verdict = ParameterFinding(Static.ZERO, [_site(describe_zero, nodes[s]) for s in sorted(zero_sites[key], key=_order(graph))])
        else:
            sites = _outermost(graph, cut_sites[key], parts)
            sites = (sites - passed.get(key, frozenset())) or sites
            verdict = ParameterFinding(Static.CUT, _distinct([_site(describe_cut, nodes[s]) for s in sorted(sites, key=_order(graph))]))
        verdicts[name] = verdict

    # The engine runs the backward of every node the gradient reaches: one with no derivative raises.
    raising = sorted((name for name, data in graph.nodes(data=True)
                      if data.get("no_derivative") and name in wet_any and "part_of" not in data), key=_order(graph))
    raises = [_site(describe_raise, nodes[name]) for name in raising]
    _paint(graph, connected, wet_any, wet, verdicts, raises)
    merged = one_site_per_cause((site for v in verdicts.values() for site in v.cut_by), nodes)  # painted per call
    for verdict in verdicts.values():
        verdict.cut_by = _distinct([merged.get(site.node, site) for site in verdict.cut_by])
    uncertain = _uncertain(graph_module, graph)
    _remove_parts(graph)
    return StaticAnalysis(graph, verdicts, uncertain, raises)


def _outermost(graph: nx.DiGraph, sites: frozenset[str], parts: dict[str, list[str]]) -> frozenset[str]:
    """The cut sites without those that only feed another one: ``torch.ones_like(score)`` passed
    to ``torch.autograd.grad(score, ...)`` is cut there, but so is everything else ``grad`` takes."""
    def feeds(site: str) -> set[str]:  # what the site's result, or one element of it, goes to
        return {t for n in [site, *parts.get(site, [])] for t in graph.successors(n)}

    kept = frozenset(s for s in sites if not feeds(s) & sites)
    return kept or sites


def _reached_differentiably(graph: nx.DiGraph, region: set[str], sites: dict[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """For each node of ``region``: the cut sites of ``sites`` its value reaches along a path of
    ``diff`` or ``zero`` edges. Such a site also has a ``none`` edge from it, but the value arrives
    anyway: it is not where the flow stops (``torch.autograd.grad(inner, w, create_graph=True)``
    reads ``inner`` only for its graph, and is differentiable in what ``inner`` was made of)."""
    candidates = {s for found in sites.values() for s in found}
    reached: dict[str, frozenset[str]] = {}
    for node in reversed(list(nx.topological_sort(graph.subgraph(region)))):
        found: set[str] = set()
        for successor in graph.successors(node):
            if graph[node][successor]["kind"] == NONE:
                continue
            if successor in candidates:
                found.add(successor)
            found |= reached.get(successor, frozenset())
        reached[node] = frozenset(found)
    return reached


def _site(describe: Callable[[fx.Node], CutSite], node: fx.Node) -> CutSite:
    """The cut site ``describe`` gives, with the user's frames from forward down to its line."""
    site = describe(node)
    frames = user_frames(node.meta.get("stack_trace"))
    if frames and site.source != node_source(node):
        frames = _frames_to(frames, site.source)
    return replace(site, frames=frames) if frames else site


def _frames_to(frames: tuple[str, ...], source: str | None) -> tuple[str, ...]:
    """The way from forward to ``source`` (where a no-grad region was entered) along the node's
    ``frames``: down to the innermost frame in the same file at or below that line (a ``with`` or
    a decorator comes before the lines it covers), which then points at it; () if none is."""
    file, _, line = (source or "").rpartition(":")
    for index in range(len(frames) - 1, -1, -1):
        function, _, where = frames[index].partition(" @ ")
        frame_file, _, frame_line = where.rpartition(":")
        if frame_file == file and line.isdigit() and frame_line.isdigit() and int(line) <= int(frame_line):
            chain = (*frames[:index], f"{function} @ {source}")
            return chain if len(chain) > 1 else ()
    return ()


def _distinct(sites: list[CutSite]) -> list[CutSite]:
    """One site per op and line: the ops of one no-grad region are all named where it was entered."""
    seen: set[tuple[str, str | None]] = set()
    return [site for site in sites if (site.op, site.source) not in seen and not seen.add((site.op, site.source))]


def _uncertain(graph_module: fx.GraphModule, graph: nx.DiGraph) -> dict[str, tuple[int, list[str]]]:
    """Nodes decided other than by running them on twins, and the parameters upstream of them."""
    kinds: dict[str, list[str]] = {}
    for node in graph_module.graph.nodes:
        flow = node.meta[META_KEY]
        if not flow.evaluated:
            kinds.setdefault("name rules", []).append(node.name)
        elif flow.on_stand_ins:
            kinds.setdefault("stand-ins", []).append(node.name)
        if flow.cut_short:
            kinds.setdefault("cut-short walk", []).append(node.name)
    found = {}
    for kind, nodes in sorted(kinds.items()):
        upstream = {n for layer in nx.bfs_layers(graph.reverse(copy=False), nodes) for n in layer}
        found[kind] = (len(nodes), sorted(n[len(PARAM):] for n in upstream if n.startswith(PARAM)))
    return found


def _order(graph: nx.DiGraph):
    return lambda name: graph.nodes[name]["order"]


def _paint(graph: nx.DiGraph, connected: set[str], wet_any: set[str], wet: set[str],
           verdicts: dict[str, ParameterFinding], raises: list[CutSite]) -> None:
    """Give every node and edge the state the diagram colours it by (a node where the backward
    raises is drawn as a cut: it is one, for the inputs it has no derivative for)."""
    cutting = {site.node: site for site in raises}
    cutting.update({site.node: site for v in verdicts.values() if v.static == Static.CUT for site in v.cut_by})
    zeroing = {site.node: site for v in verdicts.values() if v.static == Static.ZERO for site in v.cut_by}
    for name, data in graph.nodes(data=True):
        if data["kind"] == "param":
            data["state"] = PARAMETER_STATE[verdicts[name[len(PARAM):]].static]
        elif name in cutting or name in zeroing:
            data["state"] = NodeState.CUT if name in cutting else NodeState.ZERO
            data["reason"] = (cutting.get(name) or zeroing[name]).reason
        elif name not in connected:
            data["state"] = NodeState.UNUSED
        elif name in wet and data.get("requires_grad") is not False:
            data["state"] = NodeState.WET
        elif name in wet_any and data.get("requires_grad") is not False:
            data["state"] = NodeState.ZERO
        elif data.get("requires_grad"):
            data["state"] = NodeState.DRY
        else:
            data["state"] = NodeState.INERT
    for source, target, data in graph.edges(data=True):
        source_state = graph.nodes[source]["state"]
        if data["kind"] == NONE and graph.nodes[target]["state"] == NodeState.CUT and source_state in (NodeState.DRY, NodeState.FROZEN, NodeState.WET):
            data["state"] = NodeState.CUT
        elif data["kind"] == DIFF and source in wet and target in wet and source_state != NodeState.INERT:
            # gradient flows back along it, out of a zeroing or raising node too (it stops further up)
            data["state"] = NodeState.WET
        elif data["kind"] == ZERO or source_state == NodeState.ZERO:
            data["state"] = NodeState.ZERO
        else:
            data["state"] = NodeState.DRY

