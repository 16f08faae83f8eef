"""The flow diagram: DOT built with the python ``graphviz`` package, drawn by Graphviz.

* :func:`build_dot` — the DOT text (deterministic: same report, same bytes);
* :func:`render_file` — write ``.svg``, ``.png``, ``.pdf`` or ``.dot`` (format from the extension);
* :func:`to_svg_text` — the SVG as text, for notebooks (``Report._repr_svg_``);
* ``.html`` — the interactive report (:mod:`.html`), also what ``Report._repr_html_`` shows.

Modules: :mod:`.layout` decides what is drawn (clusters, ``depth``, ``focus``, the node budget;
:mod:`.auto` the automatic view, :mod:`.wide` wide fan-outs), :mod:`.fold` builds the boxes,
:mod:`.view` is the plain data between them, :mod:`.view_options` checks the options and
announces an automatic view; :mod:`.dot` decides how it looks (with
:mod:`.labels`, and :mod:`.legend` under the title), :mod:`.engine` which executable draws it.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from ..errors import FxflowError
from .view_options import checked_view
from .layout import NODE_BUDGET, build_view

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report

__all__ = ["build_dot", "render_file", "to_svg_text", "build_view", "checked_view", "NODE_BUDGET", "FORMATS"]

FORMATS = ("svg", "png", "pdf", "dot", "html")
_EXTENSIONS = {".svg": "svg", ".png": "png", ".pdf": "pdf", ".dot": "dot", ".gv": "dot", ".html": "html", ".htm": "html"}


def build_dot(report: "Report", *, depth: int | None = None, focus: bool = False, budget: int = NODE_BUDGET,
              fold: bool = True, announce: bool = True, show_all: bool = False, automatic: bool = True, **_: Any) -> str:
    """The DOT source of ``report``'s flow diagram.

    ``depth`` collapses modules nested deeper than it; ``focus`` keeps only cuts, dry parameters
    and their paths to the output; ``show_all`` draws the nodes that carry no gradient too. With
    neither ``depth`` nor ``focus``, above ``budget`` nodes the view is chosen automatically and,
    with ``announce``, one stderr line lists what was collapsed.
    """
    from .dot import dot_source

    return dot_source(report, checked_view(report, depth=depth, focus=focus, budget=budget, fold=fold,
                                           announce=announce, show_all=show_all, automatic=automatic))


def format_of(path: str, format: str | None = None) -> str:
    """The output format: ``format`` when given, else from the file extension."""
    if format:
        chosen = format.lower().lstrip(".")
        if chosen not in FORMATS:
            raise FxflowError(f"unknown format {format!r}", hint="use svg, png, pdf, dot or html")
        return chosen
    extension = os.path.splitext(path)[1].lower()
    if extension not in _EXTENSIONS:
        raise FxflowError(f"cannot tell the format of {path!r} from its extension",
                          hint="name it .svg, .png, .pdf, .dot or .html, or pass --format")
    return _EXTENSIONS[extension]


def render_file(report: "Report", path: str, *, format: str | None = None, depth: int | None = None,
                focus: bool = False, scale: float | None = None, **options: Any) -> str:
    """Write the diagram to ``path`` (``-`` writes DOT to stdout; ``.html`` the interactive
    report); returns the path. ``scale`` sizes a PNG (default 2: two pixels per point)."""
    chosen = "dot" if path == "-" and format is None else format_of(path, format)
    if chosen == "html":
        from .html import build_html

        return _write_text(path, build_html(report, depth=depth, focus=focus, **options))
    source = build_dot(report, depth=depth, focus=focus, **options)
    if chosen == "dot":
        return _write_text(path, source)
    from .engine import DEFAULT_SCALE, PNG_MAX_PIXELS, png_size, run

    data = run(source, chosen, scale=DEFAULT_SCALE if scale is None else scale)
    if chosen == "png" and max(png_size(data)) >= PNG_MAX_PIXELS - 1:
        width, height = png_size(data)
        also = "" if focus else ", or use --focus"
        print(f"fxflow: note: the PNG was scaled down to {width}x{height} pixels, the cap of {PNG_MAX_PIXELS} "
              f"a side; write .svg or .html for every detail{also}", file=sys.stderr)
    if path == "-":
        sys.stdout.buffer.write(data)
        return path
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def _write_text(path: str, text: str) -> str:
    """Write ``text`` to ``path`` (``-``: stdout); returns the path."""
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
    return path


def to_svg_text(report: "Report", **options: Any) -> str:
    """The diagram as SVG text (what a notebook shows)."""
    from .engine import run

    options.setdefault("announce", False)
    return run(build_dot(report, **options), "svg").decode("utf-8")
