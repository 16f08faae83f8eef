"""What the diagram shows: which boxes, in which clusters, joined by which wires.

Reads ``report.graph`` (attributes documented in :mod:`fxflow.static.analyze`) and produces a
:class:`~.view.View`, plain data (:mod:`.view`) that :mod:`fxflow.render.dot` turns into DOT. The choices made here:

* one item per fx node worth seeing, and one per parameter (a ``get_attr`` that only reads a
  parameter is drawn as the parameter itself);
* clusters nested as the modules nest (``module_stack``); a leaf module call is a node in its
  parent's cluster, with its parameters beside it;
* nodes that carry no gradient are hidden unless ``show_all`` (see :mod:`.inert`);
* a parameter the real backward fails while the graph reaches it (a dead ReLU's exact zeros) is
  drawn ``failed``, never wet: the picture never contradicts the table;
* ``depth``: modules nested deeper than ``depth`` collapse into one box each, colored by the worst
  state inside; the user's choice, which nothing overrides;
* ``focus``: only cut nodes, dry and failed parameters and the paths between them and the
  output, within the same budget as the default view (the automatic choice below applies to
  what it keeps);
* a view wider than one screen folds its ModuleList members and wraps wide ranks (:mod:`.wide`);
* otherwise, above ``budget`` items, the choice is automatic (:mod:`.auto`): modules with
  nothing wrong inside collapse into one box each, so the modules that hold a dry parameter or a
  cut keep their ops; if that is still too many, dry modules with no cut inside collapse too,
  then whole depth levels, then runs of like ops; the view lists what it collapsed;
* (built by :mod:`.fold`) runs of at least :data:`.fold.FOLD_MIN` sibling boxes ``name.0``, ``name.1`` ... with identical
  contents and verdicts fold into one box marked ``x12``;
* parameters of modules forward never calls go to a "never called" cluster; those of modules the
  checked batch did not call but other steps did (``--steps N``) to a "used on some steps" one.

Everything is sorted by graph order, then by name, so the same model gives the same view.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..verdicts import PARAM_PREFIX as PARAM, PARAMETER_STATE, DynamicVerdict, NodeState, StaticVerdict
from .auto import TALL_RANKS, Make, choose_automatically, healthy_modules, ranks
from .fold import collapse_modules, fold_siblings, merge_runs
from .inert import Hidden, hide_inert
from .style import EDGE_PRECEDENCE
from .view import NEVER_PER_ROW, Base, Item, Link, NeverCalled, View, counted, owner_module
from .wide import MAX_WIDTH_PT, modules_on_wide_ranks, sibling_modules, stacking, widest

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

    from ..report import ParameterReport, Report

NODE_BUDGET = 300  # above this many items the depth is chosen automatically


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
        bases.append(Base(name, name, kind, data.get("state") or NodeState.INERT, path, owner, data.get("order", 0), data))
    for name, data in nodes:
        if data.get("kind") != "param" or never_read(graph, name):
            continue
        parameter = name[len(PARAM):]
        module = owner_module(parameter)
        cluster: tuple[str, ...] = ()
        for prefix in reversed(_prefixes(module)):
            if prefix in paths:
                cluster = paths[prefix]
                break
        owner = cluster + (module,) if module in called and module not in cluster else cluster
        bases.append(Base(name, "param." + parameter, "param", data.get("state") or NodeState.INERT, cluster, owner,
                          data.get("order", 0), data, parameter))
    return bases, aliases


def never_read(graph: "nx.DiGraph", name: str) -> bool:
    """A parameter node that no op reads: torch.export lifts the parameters of modules forward
    never calls into attribute reads that nothing uses; they belong in "never called"."""
    return all(graph.nodes[n].get("kind") in ("get_attr", "placeholder") and graph.out_degree(n) == 0
               for n in graph.successors(name))


def _name_unregistered(graph: "nx.DiGraph", bases: list[Base], report: "Report") -> None:
    """Draw a tensor the recording read from outside the parameter table (a layer kept in a plain
    list) as the unregistered row it is: a parameter box under its attribute path, called, and wet
    when the backward reached it. Rows are matched to the recorded tensors by shape, in order."""
    rows: dict[tuple[int, ...], list["ParameterReport"]] = {}
    for parameter in report.parameters:
        if parameter.static == StaticVerdict.UNREGISTERED:
            rows.setdefault(tuple(parameter.shape), []).append(parameter)
    for base in bases if rows else ():
        data = base.attrs
        shape = tuple(data.get("shape") or ())
        if (base.kind == "call_function" and data.get("op") == "constant" and data.get("requires_grad") is True
                and graph.in_degree(base.name) == 0 and rows.get(shape)):
            parameter = rows[shape].pop(0)
            base.kind, base.param, base.key = "param", parameter.name, "param." + parameter.name
            base.unregistered = True
            base.state = NodeState.DRY if parameter.dynamic == DynamicVerdict.MISSING else NodeState.WET


def painted(state: str, parameter: "ParameterReport | None") -> str:
    """The state a parameter is drawn with: its graph state, unless the table fails it while the
    graph says the gradient arrives (a dead ReLU's exact zeros, an expert no token reached). An
    unregistered tensor the gradient reaches fails for its optimizer: failed too, never wet."""
    if parameter is not None and parameter.static == StaticVerdict.UNREGISTERED:
        reached = parameter.dynamic not in (None, DynamicVerdict.MISSING)
        return NodeState.FAILED if reached else state
    if parameter is not None and parameter.problem and state in (NodeState.WET, NodeState.INERT):
        return NodeState.FAILED
    return state


def _paint_failures(bases: list[Base], report: "Report") -> set[str]:
    """Repaint the parameter bases the real backward failed; returns their graph node names."""
    parameters = {p.name: p for p in report.parameters}
    failed = set()
    for base in bases:
        if base.kind == "param":
            base.state = painted(base.state, parameters.get(base.param or ""))
            if base.state == NodeState.FAILED:
                failed.add(base.name)
    return failed


def _paint_births(bases: list[Base], report: "Report") -> None:
    """Mark the op nodes where the real run first made a NaN or an inf (by op and line)."""
    births = {(site.op, site.source) for site in report.nonfinite if site.source}
    ops = [b for b in bases if b.kind != "param"]
    exact = [b for b in ops if (str(b.attrs.get("op", "")), b.attrs.get("source")) in births]
    found = {b.attrs.get("source") for b in exact}
    # an op the capture names otherwise (a method, an operator): every node of that line
    for base in exact + [b for b in ops if b.attrs.get("source") in {s for _, s in births} - found]:
        base.state = NodeState.NONFINITE


def _bookkeeping(graph: "nx.DiGraph", name: str, data: dict) -> bool:
    """A call that returns no tensor and feeds nothing (``_assert_tensor_metadata``, a print):
    it says nothing about gradient flow, so it is not drawn."""
    return (data.get("kind") in ("call_function", "call_method") and data.get("dtype") is None
            and not data.get("reason") and graph.out_degree(name) == 0)


def _parameter_bases(report: "Report") -> list[Base]:
    """Without a graph: one base per parameter, clustered by the dotted prefixes of its name and
    drawn in the state its static verdict gives."""
    bases = []
    for order, parameter in enumerate(report.parameters):
        path = tuple(_prefixes(owner_module(parameter.name)))
        bases.append(Base(PARAM + parameter.name, "param." + parameter.name, "param",
                          painted(PARAMETER_STATE.get(parameter.static, NodeState.INERT), parameter), path, path, order,
                          {"kind": "param", "label": parameter.name}, parameter.name))
    return bases


def _focus(graph: "nx.DiGraph", failed: set[str]) -> set[str]:
    """Cut nodes, dry and ``failed`` parameters (with the ops that read the failed ones), the paths
    from the dry parameters to the cuts and from the cuts to the output."""
    cuts = {n for n, d in graph.nodes(data=True)
            if d.get("state") == NodeState.CUT or (d.get("state") == NodeState.ZERO and d.get("reason"))}
    dry = {n for n, d in graph.nodes(data=True)
           if d.get("kind") == "param" and d.get("state") in (NodeState.DRY, NodeState.ZERO)}
    outputs = {n for n, d in graph.nodes(data=True) if d.get("kind") == "output"}
    down_dry, up_cut = _reach(graph, dry, forward=True), _reach(graph, cuts, forward=False)
    down_cut, up_out = _reach(graph, cuts, forward=True), _reach(graph, outputs, forward=False)
    readers = {n for p in failed for n in graph.successors(p)}
    return dry | cuts | outputs | failed | readers | (down_dry & up_cut) | (down_cut & up_out)


def _reach(graph: "nx.DiGraph", starts: set[str], forward: bool) -> set[str]:
    """``starts`` and every node reachable from them (forward) or reaching them (backward)."""
    import networkx as nx

    if not starts:
        return set()
    view = graph if forward else graph.reverse(copy=False)
    return {node for layer in nx.bfs_layers(view, sorted(starts)) for node in layer}


def _edges(graph: "nx.DiGraph | None", wires: list[tuple[str, str]]) -> list[tuple[str, str, dict]]:
    """The graph's edges in graph order, then the wires through hidden nodes (sorted once per view)."""
    if graph is None:
        return []
    order = {name: data.get("order", 0) for name, data in graph.nodes(data=True)}
    edges = sorted(graph.edges(data=True), key=lambda e: (order[e[0]], e[0], order[e[1]], e[1]))
    return edges + [(a, b, {"state": NodeState.INERT}) for a, b in wires]


def _links(graph: "nx.DiGraph | None", edges: list[tuple[str, str, dict]], where: dict[str, str],
           aliases: dict[str, str], items: dict[str, Item], report: "Report", node_norms: dict[str, float],
           failed: set[str]) -> list[Link]:
    """One link per pair of drawn items that some edge of ``edges`` joins; the most telling state
    wins; a wire out of a ``failed`` parameter is drawn failed."""
    if graph is None:
        return []
    grad = {PARAM + p.name: p.grad_norm for p in report.parameters}
    best: dict[tuple[str, str], Link] = {}
    for source, target, data in edges:
        head, tail = where.get(aliases.get(source, source)), where.get(aliases.get(target, target))
        if head is None or tail is None or head == tail:
            continue
        state = data.get("state") or NodeState.DRY
        if state == NodeState.DRY and graph.nodes[source].get("state") in (NodeState.INERT, NodeState.FROZEN):
            state = NodeState.INERT
        elif aliases.get(source, source) in failed:
            state = NodeState.FAILED
        norm = node_norms.get(source, grad.get(source))
        box = items[head]
        measured = [n for n in box.norms if n is not None]  # a call no gradient reached has no norm
        if box.kind in ("module", "fold") and measured:
            norm = max(measured)
        tie = _borrowed(aliases.get(source, source), items[tail])
        old = best.get((head, tail))
        if old is not None:
            if EDGE_PRECEDENCE.get(old.state, 0) >= EDGE_PRECEDENCE.get(state, 0):
                state = old.state
            norms = [n for n in (old.norm, norm) if n is not None]
            norm = max(norms) if norms else None
            tie = tie or old.tie
        best[(head, tail)] = Link(head, tail, state, norm, tie)
    order = {key: (item.order, key) for key, item in items.items()}
    return sorted(best.values(), key=lambda l: (order[l.source], order[l.target]))


def _borrowed(source: str, reader: Item) -> bool:
    """Whether graph node ``source`` is a parameter that ``reader`` reads from another module than
    the parameter's own: a tied weight (lm_head reads transformer.wte.weight)."""
    if not source.startswith(PARAM):
        return False
    module = owner_module(source[len(PARAM):])
    readers = set(reader.cluster) | set(reader.base.owner if reader.base is not None else ()) | {reader.module or ""}
    return bool(module) and module not in readers


def _never_called(report: "Report", graph: "nx.DiGraph | None",
                  classes: dict[str, str]) -> tuple[list[NeverCalled], list[NeverCalled]]:
    """Parameters absent from the graph (their module does not run in forward on the checked
    batch), by module: those never called, and those whose module other steps called (their
    parameters got a gradient on some of the ``--steps``, so they are not "never called")."""
    if graph is None:
        return [], []
    groups: dict[str, list[tuple[str, str]]] = {}
    used: dict[str, int] = {}
    for parameter in report.parameters:
        if parameter.static == StaticVerdict.UNREGISTERED and parameter.dynamic != DynamicVerdict.MISSING:
            continue  # called, and reached: drawn where the recording read it (_name_unregistered)
        if PARAM + parameter.name not in graph or never_read(graph, PARAM + parameter.name):
            state = painted(PARAMETER_STATE.get(parameter.static, NodeState.UNUSED), parameter)
            module = owner_module(parameter.name)
            groups.setdefault(module, []).append((parameter.name, state))
            used[module] = max(used.get(module, 0), parameter.steps_with_gradient or 0)
    found = [NeverCalled(module, classes.get(module), sorted(params), used[module])
             for module, params in sorted(groups.items())]
    return [g for g in found if not g.steps_used], [g for g in found if g.steps_used]


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
        _name_unregistered(graph, bases, report)
        failed = _paint_failures(bases, report)
        _paint_births(bases, report)
        total = len(bases)
        if not show_all:
            bases, hidden = hide_inert(graph, bases, aliases)
    else:
        bases, aliases, failed = _parameter_bases(report), {}, set()
        total = len(bases)
        notes.append("no graph was captured: parameters only, grouped by name")
    if hidden.names:
        notes.append(f"{counted(len(hidden.names), 'node')} that carry no gradient (int, bool, index, shape, mask) hidden; "
                     "--all shows them")
    if focus and graph is not None:
        keep = _focus(graph, failed)
        bases = [b for b in bases if b.name in keep]
        notes.append(f"focus: {len(bases)} of {total} nodes (cuts, dry parameters, the paths to the output); "
                     "modules with nothing wrong inside are collapsed")
    never, some_steps = _never_called(report, graph, classes)
    node_norms = report.node_grad_norms
    edges = _edges(graph, hidden.wires)

    def make(level: int | None, collapse: set[str], runs: bool = False) -> View:
        items, where = collapse_modules(bases, level, classes, module_norms, collapse)
        if fold and (level is not None or collapse):
            items = fold_siblings(items, where)
        if runs:
            items = merge_runs(items, where)
        by_key = {item.key: item for item in items}
        links = _links(graph, edges, where, aliases, by_key, report, node_norms, failed)
        return View(items, links, classes, never, list(notes), level, False, total,
                    collapse_never=level is not None or bool(collapse) or len(never + some_steps) > NEVER_PER_ROW,
                    hidden=len(hidden.names), markers=hidden.markers, some_steps=some_steps, steps=report.steps)

    view = make(depth, healthy_modules(bases) if focus else set())
    if depth is not None:
        view.notes.append(f"modules deeper than {depth} collapsed (--depth {depth})")
    if depth is not None or not automatic:
        return view  # what was asked for
    if view.count() > budget:
        why = f"{counted(view.count(), 'node')}, over the budget of {budget}"
    elif ranks(view) > TALL_RANKS:
        why = f"{ranks(view)} nodes from input to output, too tall to read"
    else:
        return _narrow(view, bases, classes, make)  # small enough to draw whole, once wide fan-outs are folded
    # --focus keeps the default view's budget too: the modules that hold the cut keep their ops
    hint = "pass --depth to choose" if focus else "pass --depth or --focus to choose"
    return _narrow(choose_automatically(why, budget, bases, make, hint=hint), bases, classes, make)


def _narrow(view: View, bases: list[Base], classes: dict[str, str], make: Make) -> View:
    """A view whose widest rank fits the screen: ModuleList members side by side collapse and
    fold; then the modules on a rank still too wide collapse to one box each; ranks still too
    wide wrap into rows (see :mod:`.wide`)."""
    for widen in (lambda: sibling_modules(bases, classes), lambda: modules_on_wide_ranks(view)):
        if widest(view) <= MAX_WIDTH_PT:
            break
        collapse = {m for item in view.items if item.kind in ("module", "fold") for m in _collapsed(item)}
        more = widen() - collapse
        if more:
            narrowed = make(None, collapse | more)
            narrowed.notes = view.notes + [f"{counted(len(more), 'side-by-side module')} collapsed to fit the width"]
            narrowed.auto_depth, narrowed.collapsed = view.auto_depth, view.collapsed
            view = narrowed
    view.stacks = stacking(view)
    return view


def _collapsed(item: Item) -> set[str]:
    """The modules a box stands for (each of a fold's)."""
    if item.kind == "module":
        return {item.module or ""}
    return {m.owner[len(item.cluster)] for m in item.members if len(m.owner) > len(item.cluster)}


