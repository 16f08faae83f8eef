"""The legend: real node and edge samples of only what the picture draws, in rows beside it."""
from __future__ import annotations

import graphviz

from . import style
from .auto import op_order
from .labels import MARKER_COLOR, html_text, node_attrs, plain, small
from .view import View

LEGEND_KEY = "fxflow.legend"
LEGEND_ROW = 4  # entries per legend row


def _legend_entries(view: View) -> tuple[list[tuple[str, str, dict[str, str]]], list[tuple[str, str]]]:
    """The node samples (id suffix, words, attributes) and edge samples (state, words) the
    picture uses, in legend order: nothing is explained that is not drawn."""
    items = view.items
    states = {i.state for i in items} | {s for n in view.never_called for _, s in n.params}
    kinds = {i.kind for i in items}
    nodes: list[tuple[str, str, dict[str, str]]] = []
    for state, words in style.LEGEND:
        if state in states:
            nodes.append((state, html_text(words), node_attrs(state, f"fxflow-legend fxflow-{state}", plain(words))))
    neutral = style.NODE_STYLES["inert"]
    blank = {"fillcolor": "white", "color": neutral.border, "fontcolor": neutral.font, "class": "fxflow-legend"}
    if "param" in kinds or view.never_called:
        nodes.append(("param", "square: a parameter", {**blank, "style": "filled", "tooltip": plain("a parameter")}))
    if kinds & {"module", "run"} or view.collapse_never and view.never_called:
        nodes.append(("module", "bold: a collapsed module",
                      {**blank, "style": "filled,bold", "tooltip": plain("a collapsed module")}))
    if "fold" in kinds:
        nodes.append(("fold", "double, x12: identical blocks",
                      {**blank, "style": "filled,bold", "peripheries": "2", "tooltip": plain("folded blocks")}))
    if any(i.base is not None and i.base.name in view.markers for i in items):
        nodes.append(("marker", f'op<br/><font color="{MARKER_COLOR}">+ mask, index: hidden inputs</font>',
                      {**blank, "style": "rounded,filled", "tooltip": plain("inputs that carry no gradient, hidden; --all draws them")}))
    used = {link.state for link in view.links}
    edges = [(state, words) for state, words in style.LEGEND_EDGES if state in used]
    return nodes, edges


def add_legend(graph: graphviz.Digraph, view: View) -> None:
    """A legend beside the drawing, made of real node and edge samples in rows; its first row
    shares a rank with the drawing's top box, so that it takes width, which a tall model has to
    spare, not height."""
    nodes, edges = _legend_entries(view)
    entries: list[tuple[str, object]] = [("node", n) for n in nodes] + [("edge", e) for e in edges]
    if not entries:
        return
    rows = [entries[i:i + LEGEND_ROW] for i in range(0, len(entries), LEGEND_ROW)]
    firsts: list[str] = []
    with graph.subgraph(name="cluster_" + LEGEND_KEY) as legend:
        legend.attr(label="legend", fontsize="10", fontcolor="#546e7a", style="rounded", color="#b0bec5",
                    labeljust="l", penwidth="1", **{"class": "fxflow-legend"})
        for row in rows:
            with legend.subgraph() as same:
                same.attr(rank="same")
                keys = [_legend_entry(same, what, entry) for what, entry in row]
                firsts.append(keys[0])
        for above, below in zip(firsts, firsts[1:]):
            legend.edge(above, below, style="invis", **{"class": "fxflow-legend"})
    top = _top(view)
    if top is not None:
        with graph.subgraph() as same:
            same.attr(rank="same")
            same.node(top)
            same.node(firsts[0])


def _legend_entry(graph: graphviz.Digraph, what: str, entry) -> str:
    """Draw one legend sample; returns its first node's id."""
    if what == "node":
        suffix, words, attrs = entry
        key = f"{LEGEND_KEY}.{suffix}"
        graph.node(key, label='<<font point-size="9">' + words + "</font>>", height="0.25", **attrs)
        return key
    state, words = entry
    look = style.EDGE_STYLES[state]
    start, end = f"{LEGEND_KEY}.edge.{state}", f"{LEGEND_KEY}.edge.{state}.words"
    graph.node(start, label="", shape="point", width="0.05", color=look.color, tooltip=plain(words),
               **{"class": "fxflow-legend"})
    graph.node(end, label="<" + small(words) + ">", shape="plaintext", style="", tooltip=plain(words),
               **{"class": "fxflow-legend"})
    attrs = {"color": look.color, "penwidth": f"{look.penwidth:g}", "label": " " * 8,
             "class": f"fxflow-legend fxflow-edge-{state}"}
    if look.style != "solid":
        attrs["style"] = look.style
    graph.edge(start, end, **attrs)
    return start


def _top(view: View) -> str | None:
    """The first box in graph order that no cluster holds: the legend's rank-mate."""
    loose = [i for i in view.items if not i.cluster]
    return min(loose, key=op_order).key if loose else None
