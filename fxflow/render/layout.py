"""What the diagram shows: which boxes, in which clusters, joined by which wires.

Reads ``report.graph`` (attributes documented in :mod:`fxflow.analyze`) and produces a
:class:`View`, plain data that :mod:`fxflow.render.dot` turns into DOT. The choices made here:

* one item per fx node worth seeing, and one per parameter (a ``get_attr`` that only reads a
  parameter is drawn as the parameter itself);
* clusters nested as the modules nest (``module_stack``); a leaf module call is a node in its
  parent's cluster, with its parameters beside it;
* nodes that carry no gradient are hidden unless ``show_all`` (see :mod:`.inert`);
* ``depth``: modules nested deeper than ``depth`` collapse into one box each, colored by the worst
  state inside; ``focus``: only cut nodes, dry parameters and the paths between them and the
  output. Both are the user's choice and nothing overrides them;
* otherwise, above ``budget`` items, the choice is automatic (:func:`_automatic`): modules with
  nothing wrong inside collapse into one box each, so the modules that hold a dry parameter or a
  cut keep their ops; if that is still too many, dry modules with no cut inside collapse too,
  then whole depth levels, then runs of like ops; the view lists what it collapsed;
* runs of at least :data:`FOLD_MIN` sibling boxes ``name.0``, ``name.1`` ... with identical
  contents and verdicts fold into one box marked ``x12``;
* parameters of modules forward never calls go to a "never called" cluster.

Everything is sorted by graph order, then by name, so the same model gives the same view.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from ..verdicts import PARAM_PREFIX as PARAM, NodeState
from .auto import TALL_RANKS, choose_automatically, healthy_modules, ranks
from .inert import Hidden, hide_inert
from .norms import call_norms
from .style import EDGE_PRECEDENCE, worst

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

    from ..report import Report

NODE_BUDGET = 300  # above this many items the depth is chosen automatically
FOLD_MIN = 3  # fewest identical sibling boxes that fold into one

# Static verdict -> the state a parameter is drawn with when no graph was captured.
VERDICT_STATE = {"reachable": "wet", "cut": "dry", "zero": "zero", "frozen": "frozen", "unused": "unused"}
# How the state names read in labels.
STATE_WORDS = {"wet": "wet", "dry": "dry", "cut": "cut", "zero": "zero", "frozen": "frozen",
               "unused": "unused", "inert": "no grad"}


@dataclass
class Base:
    """One graph node (fx node or parameter) as the diagram sees it, before collapsing."""

    name: str  # graph node name
    key: str  # DOT id
    kind: str  # placeholder, get_attr, call_module, call_function, call_method, output, param
    state: str
    cluster: tuple[str, ...]  # qualified names of the enclosing modules, outermost first
    owner: tuple[str, ...]  # cluster, plus the module a call_module node calls: what collapses it
    order: int
    attrs: dict[str, Any]
    param: str | None = None  # qualified parameter name, for parameter nodes


@dataclass
class Item:
    """One node of the drawing: an fx node, a parameter, a collapsed module or a folded run."""

    key: str
    kind: str  # as Base.kind, "module" (collapsed), "fold" (identical modules), "run" (like ops in a row)
    state: str
    cluster: tuple[str, ...]
    order: int
    base: Base | None = None  # the drawn node, when it is a single one
    module: str | None = None  # qualified name of a box ("blocks.0-11" for a fold)
    module_class: str | None = None
    members: list[Base] = field(default_factory=list)  # what a box hides
    count: int = 1  # modules folded into this box
    norms: list[float] = field(default_factory=list)  # gradient norms measured at its output


@dataclass(frozen=True)
class Link:
    source: str
    target: str
    state: str  # wet, dry, cut, zero, inert
    norm: float | None = None


@dataclass
class NeverCalled:
    """Parameters whose module forward never calls, grouped by that module."""

    module: str
    module_class: str | None
    params: list[tuple[str, str]]  # (parameter name, state)


@dataclass
class View:
    items: list[Item]
    links: list[Link]
    classes: dict[str, str]  # module qualified name -> class name, where known
    never_called: list[NeverCalled]
    notes: list[str] = field(default_factory=list)
    depth: int | None = None
    auto_depth: bool = False
    total: int = 0  # items before collapsing and focusing
    has_graph: bool = True
    collapse_never: bool = False  # draw each never-called module as one box
    hidden: int = 0  # nodes that carry no gradient, hidden (``show_all`` draws them)
    markers: dict[str, Counter] = field(default_factory=dict)  # graph node -> its hidden inputs, by kind
    collapsed: list[str] = field(default_factory=list)  # what the automatic choice collapsed

    def count(self) -> int:
        never = len(self.never_called) if self.collapse_never else sum(len(n.params) for n in self.never_called)
        return len(self.items) + never


def owner_module(parameter: str) -> str:
    """``blocks.2.fc1.weight`` -> ``blocks.2.fc1`` (``""`` for a parameter of the root)."""
    return parameter.rsplit(".", 1)[0] if "." in parameter else ""


def _prefixes(qualname: str) -> list[str]:
    parts = qualname.split(".") if qualname else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _bases(graph: "nx.DiGraph", classes: dict[str, str]) -> tuple[list[Base], dict[str, str]]:
    """Bases for every drawn graph node, and aliases (get_attr node -> the parameter it reads)."""
    aliases: dict[str, str] = {}
    bases: list[Base] = []
    paths: dict[str, tuple[str, ...]] = {}  # cluster qualname -> its path
    called: set[str] = set()
    nodes = sorted(graph.nodes(data=True), key=lambda item: (item[1].get("order", 0), item[0]))
    for name, data in nodes:
        kind = data.get("kind", "")
        if kind == "param":
            continue
        if _bookkeeping(graph, name, data):
            continue
        if kind == "get_attr" and not data.get("reason"):
            # a read of one parameter, under its own name or a tied one (lm_head.weight is wte.weight)
            reads = [p for p in graph.predecessors(name) if p.startswith(PARAM)]
            if len(reads) == 1 and graph.in_degree(name) == 1:
                aliases[name] = reads[0]
                continue
        stack = [(str(q), str(c)) for q, c in (data.get("module_stack") or [])]
        for qualname, cls in stack:
            classes.setdefault(qualname, cls)
        path = tuple(q for q, _ in stack)
        owner = path
        if kind == "call_module":
            target = str(data.get("label"))
            called.add(target)
            classes.setdefault(target, str(data.get("op")))
            path = path[:-1] if path and path[-1] == target else path
            owner = path + (target,)
        for i in range(len(path)):
            paths.setdefault(path[i], path[: i + 1])
        bases.append(Base(name, name, kind, data.get("state") or "inert", path, owner, data.get("order", 0), data))
    for name, data in nodes:
        if data.get("kind") != "param":
            continue
        parameter = name[len(PARAM):]
        module = owner_module(parameter)
        cluster: tuple[str, ...] = ()
        for prefix in reversed(_prefixes(module)):
            if prefix in paths:
                cluster = paths[prefix]
                break
        owner = cluster + (module,) if module in called and module not in cluster else cluster
        bases.append(Base(name, "param." + parameter, "param", data.get("state") or "inert", cluster, owner,
                          data.get("order", 0), data, parameter))
    return bases, aliases


def _bookkeeping(graph: "nx.DiGraph", name: str, data: dict) -> bool:
    """A call that returns no tensor and feeds nothing (``_assert_tensor_metadata``, a print):
    it says nothing about gradient flow, so it is not drawn."""
    return (data.get("kind") in ("call_function", "call_method") and data.get("dtype") is None
            and not data.get("reason") and graph.out_degree(name) == 0)


def _parameter_bases(report: "Report") -> list[Base]:
    """Without a graph: one base per parameter, clustered by the dotted prefixes of its name."""
    bases = []
    for order, parameter in enumerate(report.parameters):
        path = tuple(_prefixes(owner_module(parameter.name)))
        bases.append(Base(PARAM + parameter.name, "param." + parameter.name, "param",
                          VERDICT_STATE.get(parameter.static, "inert"), path, path, order,
                          {"kind": "param", "label": parameter.name}, parameter.name))
    return bases


def _focus(graph: "nx.DiGraph") -> set[str]:
    """Cut nodes, dry parameters, the paths from those parameters to the cuts and from the cuts to the output."""
    cuts = {n for n, d in graph.nodes(data=True)
            if d.get("state") == NodeState.CUT or (d.get("state") == NodeState.ZERO and d.get("reason"))}
    dry = {n for n, d in graph.nodes(data=True)
           if d.get("kind") == "param" and d.get("state") in (NodeState.DRY, NodeState.ZERO)}
    outputs = {n for n, d in graph.nodes(data=True) if d.get("kind") == "output"}
    down_dry, up_cut = _reach(graph, dry, forward=True), _reach(graph, cuts, forward=False)
    down_cut, up_out = _reach(graph, cuts, forward=True), _reach(graph, outputs, forward=False)
    return dry | cuts | outputs | (down_dry & up_cut) | (down_cut & up_out)


def _reach(graph: "nx.DiGraph", starts: set[str], forward: bool) -> set[str]:
    """``starts`` and every node reachable from them (forward) or reaching them (backward)."""
    import networkx as nx

    if not starts:
        return set()
    view = graph if forward else graph.reverse(copy=False)
    return {node for layer in nx.bfs_layers(view, sorted(starts)) for node in layer}


def _collapse(bases: list[Base], depth: int | None, classes: dict[str, str], module_norms: dict[str, list[float | None]],
              collapse: set[str]) -> tuple[list[Item], dict[str, str]]:
    """Items at the given depth (None: nothing collapses) and graph node name -> item key.

    Modules in ``collapse`` collapse at any depth too (the healthy ones, in ``focus`` and in the
    automatic view).
    """
    items: dict[str, Item] = {}
    where: dict[str, str] = {}
    for base in bases:
        level = depth if depth is not None and len(base.owner) > depth else None
        if collapse:
            first = next((i for i, q in enumerate(base.owner) if q in collapse), None)
            if first is not None and (level is None or first < level):
                level = first
        if level is not None:
            depth_here = level
            module = base.owner[depth_here]
            key = "module." + module
            box = items.get(key)
            if box is None:
                box = items[key] = Item(key, "module", "inert", base.owner[:depth_here], base.order, module=module,
                                        module_class=classes.get(module), norms=list(module_norms.get(module, [])))
            box.members.append(base)
            box.order = min(box.order, base.order)
            where[base.name] = key
        else:
            items[base.key] = Item(base.key, base.kind, base.state, base.cluster, base.order, base)
            where[base.name] = base.key
    for item in items.values():
        if item.members:
            item.state = worst({m.state for m in item.members})
    return sorted(items.values(), key=lambda i: (i.order, i.key)), where


_INDEXED = re.compile(r"^(?P<stem>.*)\.(?P<index>\d+)$")


def _signature(item: Item) -> tuple:
    ops = Counter((m.kind, str(m.attrs.get("op", "")), m.state) for m in item.members)
    return (item.cluster, item.module_class, item.state, tuple(sorted(ops.items())))


def _fold(items: list[Item], where: dict[str, str]) -> list[Item]:
    """Fold runs of identical sibling boxes ``stem.i`` .. ``stem.j`` into one box."""
    groups: dict[tuple, list[tuple[int, Item]]] = {}
    for item in items:
        match = _INDEXED.match(item.module or "") if item.kind == "module" else None
        if match:
            groups.setdefault((match["stem"],) + _signature(item), []).append((int(match["index"]), item))
    replaced: dict[str, Item] = {}
    for (stem, *_), members in sorted(groups.items(), key=lambda g: (g[0][0], min(i.order for _, i in g[1]))):
        members.sort(key=lambda pair: pair[0])
        run: list[tuple[int, Item]] = []
        for index, item in members + [(-2, None)]:  # sentinel ends the last run
            if run and (item is None or index != run[-1][0] + 1):
                if len(run) >= FOLD_MIN:
                    first, last = run[0][0], run[-1][0]
                    boxes = [box for _, box in run]
                    fold = Item(f"fold.{stem}.{first}-{last}", "fold", boxes[0].state, boxes[0].cluster,
                                min(b.order for b in boxes), module=f"{stem}.{first}-{last}",
                                module_class=boxes[0].module_class, count=len(boxes),
                                members=[m for b in boxes for m in b.members], norms=[n for b in boxes for n in b.norms])
                    for box in boxes:
                        replaced[box.key] = fold
                run = []
            if item is not None:
                run.append((index, item))
    if not replaced:
        return items
    for name, key in where.items():
        if key in replaced:
            where[name] = replaced[key].key
    result = {item.key: item for item in items if item.key not in replaced}
    result.update({fold.key: fold for fold in replaced.values()})
    return sorted(result.values(), key=lambda i: (i.order, i.key))


RUN_MIN = 3  # fewest like items in a row that become one run box


def _runs(items: list[Item], where: dict[str, str]) -> list[Item]:
    """Merge items that follow each other in graph order, in the same cluster and state, into one
    box: the last resort for a flat graph (thousands of ops, no modules to collapse into).
    Inputs, outputs and the nodes that cut stay as they are."""
    merged: list[Item] = []
    run: list[Item] = []
    renamed: dict[str, str] = {}

    def close() -> None:
        if len(run) < RUN_MIN:
            merged.extend(run)
        else:
            first = run[0]
            box = Item(f"run.{first.key}", "run", first.state, first.cluster, first.order, module=f"run of {len(run)}",
                       members=[m for i in run for m in (i.members or [i.base])], count=1)
            merged.append(box)
            renamed.update((i.key, box.key) for i in run)
        run.clear()

    for item in items:
        joinable = item.kind not in ("placeholder", "output") and not (item.base and item.base.attrs.get("reason"))
        if run and (not joinable or item.cluster != run[0].cluster or item.state != run[0].state):
            close()
        if joinable:
            run.append(item)
        else:
            merged.append(item)
    close()
    for name, key in where.items():
        if key in renamed:
            where[name] = renamed[key]
    return sorted(merged, key=lambda i: (i.order, i.key))


def _edges(graph: "nx.DiGraph | None", wires: list[tuple[str, str]]) -> list[tuple[str, str, dict]]:
    """The graph's edges in graph order, then the wires through hidden nodes (sorted once per view)."""
    if graph is None:
        return []
    order = {name: data.get("order", 0) for name, data in graph.nodes(data=True)}
    edges = sorted(graph.edges(data=True), key=lambda e: (order[e[0]], e[0], order[e[1]], e[1]))
    return edges + [(a, b, {"state": NodeState.INERT}) for a, b in wires]


def _links(graph: "nx.DiGraph | None", edges: list[tuple[str, str, dict]], where: dict[str, str],
           aliases: dict[str, str], items: dict[str, Item], report: "Report", node_norms: dict[str, float]) -> list[Link]:
    """One link per pair of drawn items that some edge of ``edges`` joins; the most telling state wins."""
    if graph is None:
        return []
    grad = {PARAM + p.name: p.grad_norm for p in report.parameters}
    best: dict[tuple[str, str], Link] = {}
    for source, target, data in edges:
        head, tail = where.get(aliases.get(source, source)), where.get(aliases.get(target, target))
        if head is None or tail is None or head == tail:
            continue
        state = data.get("state") or "dry"
        if state == "dry" and graph.nodes[source].get("state") in ("inert", "frozen"):
            state = "inert"
        norm = node_norms.get(source, grad.get(source))
        box = items[head]
        measured = [n for n in box.norms if n is not None]  # a call no gradient reached has no norm
        if box.kind in ("module", "fold") and measured:
            norm = max(measured)
        old = best.get((head, tail))
        if old is not None:
            if EDGE_PRECEDENCE.get(old.state, 0) >= EDGE_PRECEDENCE.get(state, 0):
                state = old.state
            norms = [n for n in (old.norm, norm) if n is not None]
            norm = max(norms) if norms else None
        best[(head, tail)] = Link(head, tail, state, norm)
    order = {key: (item.order, key) for key, item in items.items()}
    return sorted(best.values(), key=lambda l: (order[l.source], order[l.target]))


def _never_called(report: "Report", graph: "nx.DiGraph | None", classes: dict[str, str]) -> list[NeverCalled]:
    """Parameters absent from the graph (their module never runs in forward), by module."""
    if graph is None:
        return []
    groups: dict[str, list[tuple[str, str]]] = {}
    for parameter in report.parameters:
        if PARAM + parameter.name not in graph:
            state = VERDICT_STATE.get(parameter.static, "unused")
            groups.setdefault(owner_module(parameter.name), []).append((parameter.name, state))
    return [NeverCalled(module, classes.get(module), sorted(params)) for module, params in sorted(groups.items())]


def build_view(report: "Report", *, depth: int | None = None, focus: bool = False,
               budget: int = NODE_BUDGET, fold: bool = True, show_all: bool = False, automatic: bool = True) -> View:
    """The drawing's contents for ``report`` (see the module docstring for every option;
    ``automatic=False`` draws every module open, however big)."""
    graph = report.graph
    classes: dict[str, str] = {str(k): str(v) for k, v in (getattr(report, "module_classes", None) or {}).items()}
    module_norms = report.module_grad_norms or {}
    notes: list[str] = []
    hidden = Hidden()
    if graph is not None:
        bases, aliases = _bases(graph, classes)
        total = len(bases)
        if not show_all:
            bases, hidden = hide_inert(graph, bases, aliases)
    else:
        bases, aliases = _parameter_bases(report), {}
        total = len(bases)
        notes.append("no graph was captured: parameters only, grouped by name")
    if hidden.names:
        notes.append(f"{len(hidden.names)} nodes that carry no gradient (int, bool, index, shape, mask) hidden; "
                     "--all shows them")
    if focus and graph is not None:
        keep = _focus(graph)
        bases = [b for b in bases if b.name in keep]
        notes.append(f"focus: {len(bases)} of {total} nodes (cuts, dry parameters, the paths to the output); "
                     "modules with nothing wrong inside are collapsed")
    never = _never_called(report, graph, classes)
    node_norms = call_norms(graph, module_norms) if graph is not None else {}
    edges = _edges(graph, hidden.wires)

    def make(level: int | None, collapse: set[str], runs: bool = False) -> View:
        items, where = _collapse(bases, level, classes, module_norms, collapse)
        if fold and (level is not None or collapse):
            items = _fold(items, where)
        if runs:
            items = _runs(items, where)
        by_key = {item.key: item for item in items}
        links = _links(graph, edges, where, aliases, by_key, report, node_norms)
        return View(items, links, classes, never, list(notes), level, False, total, graph is not None,
                    collapse_never=level is not None or bool(collapse), hidden=len(hidden.names),
                    markers=hidden.markers)

    view = make(depth, healthy_modules(bases) if focus else set())
    if depth is not None:
        view.notes.append(f"modules deeper than {depth} collapsed (--depth {depth})")
    if focus or depth is not None or not automatic:
        return view  # what was asked for
    if view.count() > budget:
        why = f"{view.count()} nodes, over the budget of {budget}"
    elif ranks(view) > TALL_RANKS:
        why = f"{ranks(view)} nodes from input to output, too tall to read"
    else:
        return view  # small enough to draw whole
    return choose_automatically(why, budget, bases, make)


def box_summary(members: Iterable[Base]) -> tuple[Counter, Counter, list[Base]]:
    """Operation states, parameter states, and the cutting nodes among a box's members."""
    ops: Counter[str] = Counter()
    params: Counter[str] = Counter()
    cuts: list[Base] = []
    for member in members:
        if member.kind == "param":
            params[member.state] += 1
        else:
            ops[member.state] += 1
            if member.attrs.get("reason"):
                cuts.append(member)
    return ops, params, cuts
