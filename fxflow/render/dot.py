"""Build the DOT source of the flow diagram from a :class:`~fxflow.render.layout.View`.

The python ``graphviz`` package writes the DOT; this module decides labels, tooltips, colors and
CSS classes. Every node gets ``class="fxflow-<state> ..."`` and a tooltip, every edge
``class="fxflow-edge fxflow-edge-<state>"``; both survive into the SVG. No object ids, no
addresses, no timestamps: the same report gives byte-identical DOT.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING

import graphviz

from ..verdicts import DynamicVerdict, NodeState, StaticVerdict
from . import style
from .labels import MARKER_COLOR, html_text, node_attrs, plain, small, tooltip_of
from .legend import legend_table
from .view import (NEVER_PER_ROW, NEVER_TITLE, SOME_STEPS_TITLE, STATE_WORDS, Base, Item, Link, NeverCalled, View,
                   box_summary, counted, steps_words)

if TYPE_CHECKING:  # pragma: no cover
    from ..report import ParameterReport, Report

NEVER_CLUSTER = "cluster_fxflow.never"
SOME_STEPS_CLUSTER = "cluster_fxflow.some_steps"
CLUSTER_FONT = "#37474f"  # a module box's title


def _norm(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def shape_text(shape: object) -> str | None:
    if shape is None:
        return None
    if isinstance(shape, (tuple, list)):
        return "x".join(str(s) for s in shape) or "scalar"
    return str(shape)


def _relative(name: str, cluster: tuple[str, ...]) -> str:
    """``blocks.0.fc1`` inside cluster ``blocks.0`` reads ``fc1``."""
    if cluster and name.startswith(cluster[-1] + "."):
        return name[len(cluster[-1]) + 1:]
    return name


def _module_title(module: str, classes: dict[str, str]) -> str:
    cls = classes.get(module)
    return f"{module} ({cls})" if cls else module


# -- nodes -----------------------------------------------------------------------------------
def _op_node(item: Item, base: Base, view: View, norms: dict[str, float]) -> tuple[str, dict[str, str]]:
    data = base.attrs
    op, kind, label = str(data.get("op", "")), base.kind, str(data.get("label", base.name))
    shape, source, reason = shape_text(data.get("shape")), data.get("source"), data.get("reason")
    if kind == "call_module":
        head = f"<b>{html_text(_relative(label, base.cluster))}</b> {html_text(op)}"
    elif kind == "placeholder":
        head = f"<b>{html_text(label)}</b> input"
    elif kind == "output":
        head = "<b>output</b>"
    else:
        head = f"<b>{html_text(op or label)}</b>"
    lines = [head]
    if reason:
        color = style.NODE_STYLES[base.state].font
        lines.append(small(source or "source unknown", color))
        lines.extend(small(part, color) for part in textwrap.wrap(str(reason), 36))
    elif shape:
        lines.append(small(shape + ("" if data.get("dtype") in (None, "float32") else f" {data.get('dtype')}")))
    hidden = view.markers.get(base.name)
    if hidden:
        lines.append(small("+ " + _marker_words(hidden), MARKER_COLOR))
    module = base.cluster[-1] if base.cluster else None
    tooltip = tooltip_of([
        f"{op or label} ({kind})", f"node {base.name}",
        f"shape {shape or '?'} {data.get('dtype') or ''}".rstrip(),
        f"source {source}" if source else "source unknown",
        f"state {base.state}" + (f": {reason}" if reason else ""),
        f"in {_module_title(module, view.classes)}" if module else None,
        f"grad norm out {_norm(norms[base.name])}" if base.name in norms else None,
        f"hidden inputs (no gradient): {_marker_words(hidden)}" if hidden else None,
    ])
    extra = {"shape": "oval"} if kind in ("placeholder", "output") else {}
    if reason:
        extra["fontsize"] = "11"
    return "<" + "<br/>".join(lines) + ">", node_attrs(base.state, style.node_class(base.state, "op"), tooltip, **extra)


def _marker_words(counts) -> str:
    """``mask, 2 index``: the hidden inputs of a drawn node, by kind."""
    return ", ".join(word if n == 1 else f"{n} {word}" for word, n in sorted(counts.items()))


def _paramtooltip(name: str, state: str, parameter: "ParameterReport | None") -> graphviz.quoting.NoHtml:
    if parameter is None:
        return tooltip_of([name, f"parameter, state {state}"])
    shape = shape_text(parameter.shape)
    cut = ", ".join(f"{s.op} @ {s.source or s.node}" for s in parameter.cut_by)
    return tooltip_of([
        name, f"parameter {shape}", f"state {state}",
        f"static {parameter.static}, dynamic {parameter.dynamic or '-'}",
        f"grad norm {_norm(parameter.grad_norm)}",
        f"cut by {cut}" if cut else None,
        parameter.diagnosis,
    ])


def _param_node(name: str, state: str, cluster: tuple[str, ...], parameter: "ParameterReport | None",
                *extra_classes: str, holds: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    words = _relative(name, cluster)
    if holds:  # a frozen all-zero weight that holds others' gradients at 0: the cause, not a bystander
        words += f" (frozen zeros: hold{'s' if len(holds) == 1 else ''} {', '.join(holds)} at 0)"
    elif parameter is not None and parameter.static == StaticVerdict.UNREGISTERED:
        words += " (unregistered)"  # reached, but in no optimizer: the table's word for it
    elif state == NodeState.FAILED and parameter is not None and parameter.dynamic:
        words += f" ({parameter.dynamic} grad)"  # which way the real backward failed it
    elif parameter is not None and parameter.dynamic == DynamicVerdict.INTERMITTENT:
        steps = parameter.steps_with_gradient or 0
        words += f" ({steps} of {counted(steps + len(parameter.missed_steps), 'step')})"  # the table's "intermittent"
    label = "<" + small(words) + ">"
    return label, node_attrs(state, style.node_class(state, "param", *extra_classes),
                              _paramtooltip(name, state, parameter), shape="box", height="0.2",
                              margin="0.06,0.02", style=style.NODE_STYLES[state].style.replace("rounded,", ""))


def _box_node(item: Item, view: View) -> tuple[str, dict[str, str]]:
    ops, params, cuts = box_summary(item.members)
    name = _relative(item.module or "", item.cluster)
    cls = f" {html_text(item.module_class)}" if item.module_class else ""
    times = f" <b>x{item.count}</b>" if item.count > 1 else ""
    per = item.count if item.count > 1 else 1
    counts = _counts(ops, per, "op")
    if params:
        counts += ", " + _counts(params, per, "param")
    lines = [f"<b>{html_text(name)}</b>{cls}{times}", small(counts + (" each" if per > 1 else ""))]
    seen = set()
    for cut in cuts:
        where = f"{cut.attrs.get('op')} @ {cut.attrs.get('source') or cut.name}"
        if where not in seen:
            seen.add(where)
            lines.append(small(f"{STATE_WORDS[cut.state]}: {where}", style.NODE_STYLES[cut.state].font))
    tooltip = tooltip_of([
        _module_title(item.module or "", view.classes) + (f" x{item.count}" if item.count > 1 else ""),
        f"collapsed: {_counts(ops, 1, 'op')}" + (f", {_counts(params, 1, 'param')}" if params else ""),
        *(f"{STATE_WORDS[c.state]} {c.attrs.get('op')} @ {c.attrs.get('source') or '?'}: {c.attrs.get('reason')}" for c in cuts[:8]),
        f"grad norm out {', '.join(_norm(n) for n in item.norms[:12])}" if item.norms else None,
    ])
    extra = {"peripheries": "2"} if item.count > 1 else {}
    kinds = ("module", "folded") if item.count > 1 else ("run",) if item.kind == "run" else ("module",)
    attrs = node_attrs(item.state, style.node_class(item.state, *kinds), tooltip, **extra)
    attrs["style"] = attrs["style"].replace("rounded,", "") + ",bold"
    return "<" + "<br/>".join(lines) + ">", attrs


def _counts(counter, per: int, noun: str) -> str:
    total = sum(counter.values()) // per
    parts = [f"{n // per} {STATE_WORDS[s]}" for s, n in sorted(counter.items(), key=lambda kv: -style.SEVERITY.get(kv[0], 0))]
    return f"{total} {noun}{'s' if total != 1 else ''}" + (f" ({', '.join(parts)})" if parts else "")


# -- clusters --------------------------------------------------------------------------------
class _Cluster:
    def __init__(self, path: tuple[str, ...]) -> None:
        self.path = path
        self.items: list[Item] = []
        self.children: dict[str, _Cluster] = {}
        self.order = 1 << 60
        self.states: set[str] = set()


def _tree(items: list[Item]) -> _Cluster:
    root = _Cluster(())
    for item in items:
        node = root
        node.order = min(node.order, item.order)
        for depth in range(len(item.cluster)):
            node = node.children.setdefault(item.cluster[depth], _Cluster(item.cluster[: depth + 1]))
            node.order = min(node.order, item.order)
            node.states.add(item.state)
        node.items.append(item)
    return root


def _emit(graph: graphviz.Digraph, cluster: _Cluster, ctx: _Context) -> None:
    view = ctx.view
    entries: list[tuple[int, str, object]] = [(i.order, i.key, i) for i in cluster.items]
    entries += [(c.order, "cluster_" + q, c) for q, c in cluster.children.items()]
    for _, _, entry in sorted(entries, key=lambda e: (e[0], e[1])):
        lone = _lone(entry) if isinstance(entry, _Cluster) else None
        if lone is not None:
            # A box around one node is no wider than the node, so any wire into it from above runs
            # through the box's title: the node carries the title itself instead.
            _emit_item(graph, lone.items[0], ctx, _module_title(lone.path[-1], view.classes))
        elif isinstance(entry, _Cluster):
            module = entry.path[-1]
            with graph.subgraph(name="cluster_" + module) as sub:
                state = style.worst(entry.states)
                fill = style.CLUSTER_FILLS[(len(entry.path) - 1) % len(style.CLUSTER_FILLS)]
                grad = view_module_norms(ctx.report, module)
                sub.attr(label=plain(_module_title(module, view.classes)), tooltip=tooltip_of([
                    _module_title(module, view.classes), f"worst state inside: {state}",
                    f"grad norm out {grad}" if grad else None]),
                    style="rounded,filled", fillcolor=fill, color=style.CLUSTER_BORDER, fontsize="10",
                    fontcolor=CLUSTER_FONT, labeljust="l", penwidth="1", **{"class": f"fxflow-cluster fxflow-{state}"})
                _emit(sub, entry, ctx)
        else:
            _emit_item(graph, entry, ctx)


def view_module_norms(report: "Report", module: str) -> str:
    values = (report.module_grad_norms or {}).get(module) or []
    return ", ".join(_norm(v) for v in values[:12])


def _lone(cluster: _Cluster) -> _Cluster | None:
    """The innermost box of ``cluster`` when all it holds, however nested, is one op or collapsed box."""
    while not cluster.items and len(cluster.children) == 1:
        (cluster,) = cluster.children.values()
    if not cluster.children and len(cluster.items) == 1 and cluster.items[0].kind != "param":
        return cluster
    return None


def _emit_item(graph: graphviz.Digraph, item: Item, ctx: _Context, title: str | None = None) -> None:
    """One node; ``title`` is the module box it stands for, written as its first line."""
    if item.kind in ("module", "fold", "run"):
        label, attrs = _box_node(item, ctx.view)
    elif item.kind == "param" and item.base is not None:
        name = item.base.param or ""
        holds = tuple(p.name for p in ctx.params.values() if name in p.held_by) if item.state == NodeState.FROZEN else ()
        label, attrs = _param_node(name, item.state, item.cluster, ctx.params.get(name), holds=holds)
    else:
        assert item.base is not None
        label, attrs = _op_node(item, item.base, ctx.view, ctx.norms)
    if title is not None:
        label = "<" + small(title, CLUSTER_FONT) + "<br/>" + label[1:]
    graph.node(item.key, label=label, **attrs)


@dataclass
class _Context:
    report: "Report"
    view: View
    params: dict[str, "ParameterReport"]
    norms: dict[str, float]  # call_module node -> gradient norm out of that call




@dataclass(frozen=True)
class _Outside:
    """A box of modules drawn beside the graph, not in it, and how it reads."""

    cluster: str  # DOT name of the box
    title: str
    kind: str  # CSS class fxflow-<kind> of the box and of what it holds
    key: str  # prefix of the DOT id of a module drawn as one box


NEVER_BOX = _Outside(NEVER_CLUSTER, NEVER_TITLE, "never-called", "never.")
SOME_STEPS_BOX = _Outside(SOME_STEPS_CLUSTER, SOME_STEPS_TITLE, "some-steps", "some-steps.")


def _outside_words(box: _Outside, group: NeverCalled, steps: int) -> str:
    """What a module of ``box`` says of itself: not called, or on how many steps it was."""
    return steps_words(group.steps_used, steps) if box is SOME_STEPS_BOX else "not called"


def _outside_summary(box: _Outside, groups: list[NeverCalled]) -> list[str]:
    params = counted(sum(len(g.params) for g in groups), "parameter")
    if box is SOME_STEPS_BOX:
        return [f"{counted(len(groups), 'module')} the checked batch did not call, called on other steps",
                f"{params} that get a gradient on some steps only"]
    return [f"{counted(len(groups), 'module')} forward never calls", f"{params} that cannot learn"]


def _emit_outside(graph: graphviz.Digraph, box: _Outside, groups: list[NeverCalled], ctx: _Context) -> None:
    view = ctx.view
    if not groups:
        return
    with graph.subgraph(name=box.cluster) as sub:
        sub.attr(label=plain(box.title), style="rounded,dashed", color=style.NEVER_BORDER,
                 fontcolor="#616161", fontsize="10", labeljust="l", penwidth="1.2",
                 tooltip=tooltip_of(_outside_summary(box, groups)), **{"class": f"fxflow-cluster fxflow-{box.kind}"})
        for group in groups:
            title = _module_title(group.module or "(root)", {**view.classes, **({group.module: group.module_class} if group.module_class else {})})
            states = [s for _, s in group.params]
            words = _outside_words(box, group, view.steps)
            if view.collapse_never:
                state = style.worst(states)
                lines = [f"<b>{html_text(title)}</b>", small(f"{counted(len(states), 'param')}: {words}")]
                attrs = node_attrs(state, style.node_class(state, "module", box.kind),
                                    tooltip_of([title, box.title, *(f"{n}: {s}" for n, s in group.params[:20])]))
                sub.node(box.key + (group.module or "(root)"), label="<" + "<br/>".join(lines) + ">", **attrs)
                continue
            label = title if box is NEVER_BOX else f"{title}: {words}"
            with sub.subgraph(name=f"{box.cluster}.{group.module}") as inner:
                inner.attr(label=plain(label), style="rounded,dashed", color=style.NEVER_BORDER, fontcolor="#616161",
                           fontsize="10", labeljust="l", tooltip=tooltip_of([label, box.title]),
                           **{"class": f"fxflow-cluster fxflow-{box.kind}"})
                cluster = (group.module,) if group.module else ()
                for name, state in group.params:
                    label, attrs = _param_node(name, state, cluster, ctx.params.get(name), box.kind)
                    inner.node("param." + name, label=label, **attrs)
        firsts = [box.key + (g.module or "(root)") if view.collapse_never else "param." + g.params[0][0]
                  for g in groups if g.params or view.collapse_never]
        for above, below in zip(firsts, firsts[NEVER_PER_ROW:]):  # rows, not one row as wide as the model
            sub.edge(above, below, style="invis", **{"class": "fxflow-stack"})


# -- edges, title, legend --------------------------------------------------------------------
def _emit_links(graph: graphviz.Digraph, links: list[Link]) -> None:
    scale = style.edge_width_scale([l.norm for l in links if l.state == NodeState.WET and l.norm is not None])
    for link in links:
        look = style.EDGE_STYLES.get(link.state, style.EDGE_STYLES[NodeState.DRY])
        width, color = look.penwidth, look.color
        if link.state == NodeState.WET and scale is not None:
            width, color = style.wet_edge_look(link.norm, scale)
        attrs = {"class": f"fxflow-edge fxflow-edge-{link.state}", "color": color, "penwidth": f"{width:g}",
                 "tooltip": tooltip_of([f"{link.source} -> {link.target}", f"state {link.state}",
                                      f"grad norm {_norm(link.norm)}" if link.norm is not None else None])}
        if link.tie:  # into the reader's side: from above, a long wire crosses the title of the reader's box
            attrs["headport"] = "e"
            attrs["class"] += " fxflow-tie"
        if look.style != "solid":
            attrs["style"] = look.style
            attrs["minlen"] = "2"  # long enough for its dashes to show: one rank's gap draws a dash as a solid stub
        graph.edge(link.source, link.target, **attrs)


def _title(report: "Report", view: View, legend_shown: bool = True) -> str:
    counts = report.counts()
    total = sum(counts.values())
    parts = [f"{n} {verdict}" for verdict, n in counts.items() if n]
    lines = [f'<font point-size="16"><b>fxflow: {html_text(report.target)}</b></font>',
             html_text(f"{counted(total, 'parameter')}: " + (", ".join(parts) if parts else "none")),
             html_text(report.summary())]
    trace = report.trace
    lines.append(small(f"trace: {trace.method}, {counted(trace.nodes, 'node')}; backward: {'yes' if report.backward else 'no'}", "#546e7a"))
    lines.extend(small(note, "#8a3b00") for note in view.notes)
    text = "<br/>".join(lines)
    legend = legend_table(view) if legend_shown else None
    if legend is None:
        return "<" + text + ">"
    return f'<<table border="0" cellspacing="0"><tr><td>{text}</td></tr><tr><td>{legend}</td></tr></table>>'



def dot_source(report: "Report", view: View, legend: bool = True) -> str:
    """The complete DOT text for ``report`` drawn as ``view``; ``legend=False`` leaves the legend out
    of the drawing (the HTML page shows it beside the drawing, where panning never hides it)."""
    graph = graphviz.Digraph("fxflow", graph_attr={
        "newrank": "true", "rankdir": "TB", "fontname": style.FONT, "labelloc": "t", "label": _title(report, view, legend),
        "nodesep": "0.2", "ranksep": "0.2", "bgcolor": "white", "compound": "false",
    }, node_attr={"fontname": style.FONT, "fontsize": "11", "shape": "box", "style": "rounded,filled",
                  "height": "0.3", "margin": "0.1,0.04"},
       edge_attr={"fontname": style.FONT, "arrowsize": "0.6"})
    ctx = _Context(report, view, {p.name: p for p in report.parameters}, node_norms(report))
    _emit(graph, _tree(view.items), ctx)
    _emit_outside(graph, NEVER_BOX, view.never_called, ctx)
    _emit_outside(graph, SOME_STEPS_BOX, view.some_steps, ctx)
    _emit_links(graph, view.links)
    for above, below in view.stacks:  # wrap a too-wide rank into rows
        graph.edge(above, below, style="invis", **{"class": "fxflow-stack"})
    return graph.source


def node_norms(report: "Report") -> dict[str, float]:
    """The gradient norm out of each graph node that ends a module call (matched when the report was assembled)."""
    return report.node_grad_norms if report.graph is not None else {}
