"""The interactive report: one self-contained HTML file (``fxflow render ... -o report.html``).

No network and no server: the page carries its JavaScript and CSS inline (:mod:`.html_assets`),
and every view it can show is laid out here by Graphviz beforehand, because a browser cannot run
Graphviz. The views: the one asked for (the automatic view by default), ``--focus``, one per
``--depth`` level and the whole graph (when it is small enough to lay out). Expanding a
collapsed module switches to the shallowest view that draws it open; collapsing a cluster, to
the view that draws it as one box.

Beside the SVG the page holds, as JSON: per view, what each drawn node is (op, module,
``file:line``, reason, shape, dtype, gradient norm, the graph nodes and parameters it stands for)
and its wires, so that search, the side panel and "highlight this parameter's path" need no
Graphviz in the page; and the parameter table.
"""
from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..verdicts import FAILING_DYNAMIC, PARAMETER_STATE, NodeState
from . import style
from .dot import shape_text
from .health_chart import health_section
from .layout import NODE_BUDGET, build_view, painted
from .legend import legend_items
from .view import STATE_WORDS, Item, View, box_summary

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report

FULL_VIEW_LIMIT = NODE_BUDGET  # views with more boxes than this are not pre-rendered (GPT-2's whole graph: 1.2 MB)
NOTEBOOK_HEIGHT_PX = 640
# The page's views (SVG and their JSON) stop at this many bytes, but for the asked-for view and the
# focus: a 4-layer GPT-2's seven views weigh 1.05 MB, most of it the deepest two.
PAGE_BUDGET_BYTES = 500_000
ALWAYS_KEPT = ("main", "focus")


@dataclass
class PageView:
    """One pre-rendered view: its id, the words on its button, and the view itself."""

    id: str
    title: str
    view: View


def page_views(report: "Report", *, depth: int | None, focus: bool, show_all: bool, budget: int,
               announce: bool) -> tuple[list[PageView], dict[str, str]]:
    """The views the page can switch between, the asked-for one first, and for each view dropped
    as a duplicate, the id of the view that draws the same."""
    from .view_options import checked_view

    asked = checked_view(report, depth=depth, focus=focus, budget=budget, show_all=show_all, announce=announce)
    views = [PageView("main", "as asked" if depth is not None or focus else "default", asked)]
    if report.graph is None:
        return views, {}
    if not focus and report.problems:
        views.append(PageView("focus", "focus", build_view(report, focus=True, show_all=show_all)))
    whole = build_view(report, show_all=show_all, automatic=False)
    deepest = max((len(m.owner) for i in whole.items for m in (i.members or [i.base]) if m is not None), default=0)
    for level in range(deepest):
        views.append(PageView(f"depth{level}", f"depth {level}", build_view(report, depth=level, show_all=show_all)))
    views.append(PageView("full", "everything", whole))
    # a view too big to lay out in seconds is left out (the asked-for one never is)
    views = [page for page in views if page.id == "main" or page.view.count() <= FULL_VIEW_LIMIT]
    unique: list[PageView] = []
    seen: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    for page in views:
        signature = (tuple(i.key for i in page.view.items), len(page.view.links))
        if signature in seen:
            aliases[page.id] = seen[signature]
        else:
            seen[signature] = page.id
            unique.append(page)
    return unique, aliases


def _item_info(item: Item, norms: dict[str, float], parameters: dict) -> dict[str, Any]:
    """What the side panel, the search box and the path highlighter know of one drawn node."""
    info: dict[str, Any] = {"kind": item.kind, "state": item.state}
    members = item.members or ([item.base] if item.base is not None else [])
    info["names"] = sorted({m.param or m.name for m in members} | {str(m.attrs.get("label", "")) for m in members if m.kind != "param"} - {""})
    info["params"] = sorted(m.param for m in members if m.param)
    if item.kind in ("module", "fold", "run"):
        ops, params, cuts = box_summary(members)
        info.update(title=item.module, module=item.module, cls=item.module_class, count=item.count, level=len(item.cluster),
                    ops={STATE_WORDS[s]: n for s, n in ops.items()}, param_states={STATE_WORDS[s]: n for s, n in params.items()},
                    cuts=[{"op": c.attrs.get("op"), "source": c.attrs.get("source"), "reason": c.attrs.get("reason")} for c in cuts],
                    norm=max((n for n in item.norms if n is not None), default=None))
        return info
    base = item.base
    assert base is not None
    data = base.attrs
    if item.kind == "param":
        parameter = parameters.get(base.param)
        info.update(title=base.param, module=base.cluster[-1] if base.cluster else None, op="parameter")
        if parameter is not None:
            info.update(shape=shape_text(parameter.shape), static=str(parameter.static), dynamic=parameter.dynamic,
                        norm=parameter.grad_norm, diagnosis=parameter.diagnosis,
                        cut_by=[f"{s.op} @ {s.source or s.node}" for s in parameter.cut_by])
        return info
    info.update(title=str(data.get("op") or data.get("label") or base.name), op=str(data.get("op") or ""),
                node=base.name, module=base.cluster[-1] if base.cluster else None, source=data.get("source"),
                reason=data.get("reason"), shape=shape_text(data.get("shape")),
                dtype=str(data.get("dtype")) if data.get("dtype") is not None else None, norm=norms.get(base.name))
    return info


def _view_data(page: PageView, norms: dict[str, float], parameters: dict) -> dict[str, Any]:
    view = page.view
    nodes = {item.key: _item_info(item, norms, parameters) for item in view.items}
    # cluster -> how many modules enclose it: the --depth at which it becomes one box
    clusters = {q: index for item in view.items for index, q in enumerate(item.cluster)}
    return {"id": page.id, "title": page.title, "nodes": nodes, "clusters": clusters,
            "edges": [[link.source, link.target, link.state] for link in view.links],
            "notes": view.notes, "count": view.count(), "legend": legend_items(view)}


def _svg(report: "Report", view: View) -> str:
    """The view as inline SVG: Graphviz's document without its XML prolog and fixed size."""
    from .dot import dot_source
    from .engine import run

    text = run(dot_source(report, view, legend=False), "svg").decode("utf-8")  # the page shows the legend
    text = text[text.index("<svg"):]
    text = re.sub(r"<!--.*?-->\n?", "", text, flags=re.S)  # Graphviz's comments repeat each node's id
    text = _GEOMETRY.sub(lambda m: _COORDINATE.sub(r"\1", m[0]), text)  # a tenth of a point is finer than any screen shows
    return re.sub(r'<svg width="[^"]*" height="[^"]*"', '<svg class="fxflow-svg"', text, count=1)


_COORDINATE = re.compile(r"(-?\d+\.\d)\d+")
_GEOMETRY = re.compile(r' (?:points|d|x|y|cx|cy|rx|ry|transform)="[^"]*"')  # attributes, never the words


def _parameter_rows(report: "Report") -> list[dict[str, Any]]:
    rows = []
    for parameter in report.parameters:
        state = painted(PARAMETER_STATE.get(parameter.static, NodeState.INERT), parameter)  # StrEnum keys match plain strings
        rows.append({"name": parameter.name, "shape": shape_text(parameter.shape), "static": str(parameter.static),
                     "dynamic": parameter.dynamic, "norm": parameter.grad_norm, "state": str(state),
                     "problem": parameter.problem,
                     "dynamic_fails": bool(parameter.problem and parameter.dynamic in FAILING_DYNAMIC),
                     "cut_by": [f"{s.op} @ {s.source or s.node}" for s in parameter.cut_by]})
    return rows


def _json(value: Any) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).replace("</", "<\\/")


def build_html(report: "Report", *, depth: int | None = None, focus: bool = False, show_all: bool = False,
               budget: int = NODE_BUDGET, announce: bool = True, **_: Any) -> str:
    """The whole report page as one HTML string (see the module docstring)."""
    from .dot import node_norms
    from .html_assets import CSS, SCRIPT

    pages, aliases = page_views(report, depth=depth, focus=focus, show_all=show_all, budget=budget, announce=announce)
    norms = node_norms(report)
    parameters = {p.name: p for p in report.parameters}
    kept: list[tuple[PageView, str, dict[str, Any]]] = []
    used = 0
    for page in pages:  # the views in order of depth: past the byte budget, the deeper ones are left out
        svg, view_data = _svg(report, page.view), _view_data(page, norms, parameters)
        size = len(svg) + len(_json(view_data))
        if page.id not in ALWAYS_KEPT and used + size > PAGE_BUDGET_BYTES:
            break
        used += size
        kept.append((page, svg, view_data))
    ids = {page.id for page, _, _ in kept}
    data = {
        "target": report.target, "summary": report.summary(), "views": [view_data for _, _, view_data in kept],
        "nodes": report.trace.nodes,
        "parameters": _parameter_rows(report), "aliases": {k: v for k, v in aliases.items() if v in ids},
        "colors": {state: {"fill": look.fill, "border": look.border, "font": look.font} for state, look in style.NODE_STYLES.items()},
    }
    svgs = "\n".join(f'<script type="text/x-fxflow-svg" id="fxflow-svg-{page.id}">{svg}</script>' for page, svg, _ in kept)
    title = html.escape(f"fxflow: {report.target}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{CSS}</style></head>
<body>
<header><h1>{title}</h1><p id="fx-summary">{html.escape(report.summary())}</p>
<p id="fx-trace">{html.escape(trace_line(report))}</p></header>
<div id="fx-toolbar">
 <input id="fx-search" type="search" placeholder="search parameter, module or op" aria-label="search">
 <span id="fx-search-count"></span>
 <button id="fx-fit" type="button">fit to screen</button>
 <button id="fx-goto-cut" type="button">go to cut</button>
 <button id="fx-toggle-side" type="button">hide table</button>
 <label>view <select id="fx-view"></select></label>
 <span id="fx-notes"></span>
</div>
<main>
 <section id="fx-diagram" tabindex="0"></section>
 <div id="fx-legend" aria-label="legend"></div>
 <aside id="fx-side">
  {health_section(report)}
  <div id="fx-panel"><p class="fx-hint">Click a node for its details; click a table row to light up its path.</p></div>
  <table id="fx-table"><thead><tr>
   <th data-key="name">parameter</th><th data-key="shape">shape</th><th data-key="static">static</th>
   <th data-key="dynamic">dynamic</th><th data-key="norm">grad norm</th><th data-key="cut_by">cut by</th></tr></thead>
   <tbody></tbody></table>
 </aside>
</main>
<script type="application/json" id="fxflow-data">{_json(data)}</script>
{svgs}
<script>{SCRIPT}</script>
</body></html>
"""


def trace_line(report: "Report") -> str:
    """How the graph was captured, in the words of the CLI's first line (its node count included)."""
    trace = report.trace
    return f"trace: {trace.method}, {trace.nodes} node{'' if trace.nodes == 1 else 's'}"


def notebook_html(report: "Report") -> str:
    """The report for a Jupyter cell: the page in an iframe, so its styles and ids stay its own."""
    page = build_html(report, announce=False)
    return (f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:{NOTEBOOK_HEIGHT_PX}px;'
            'border:1px solid #cfd8dc" sandbox="allow-scripts"></iframe>')
