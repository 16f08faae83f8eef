"""The flow diagram: DOT built with the python ``graphviz`` package, drawn by Graphviz.

* :func:`build_dot` — the DOT text (deterministic: same report, same bytes);
* :func:`render_file` — write ``.svg``, ``.png``, ``.pdf`` or ``.dot`` (format from the extension);
* :func:`to_svg_text` — the SVG as text, for notebooks (``Report._repr_svg_``).

Modules: :mod:`.layout` decides what is drawn (clusters, ``depth``, ``focus``, the node budget,
folding), :mod:`.dot` how it looks, :mod:`.engine` which executable draws it.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from ..errors import FxflowError
from .layout import NODE_BUDGET, View, build_view

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report

__all__ = ["build_dot", "render_file", "to_svg_text", "build_view", "NODE_BUDGET", "FORMATS"]

FORMATS = ("svg", "png", "pdf", "dot")
_EXTENSIONS = {".svg": "svg", ".png": "png", ".pdf": "pdf", ".dot": "dot", ".gv": "dot"}


def build_dot(report: "Report", *, depth: int | None = None, focus: bool = False, budget: int = NODE_BUDGET,
              fold: bool = True, announce: bool = True, **_: Any) -> str:
    """The DOT source of ``report``'s flow diagram.

    ``depth`` collapses modules nested deeper than it; ``focus`` keeps only cuts, dry parameters
    and their paths to the output; above ``budget`` nodes the depth is picked automatically and,
    with ``announce``, a note goes to stderr.
    """
    from .dot import dot_source

    if depth is not None and depth < 0:
        raise FxflowError(f"--depth must be 0 or more, not {depth}")
    view = build_view(report, depth=depth, focus=focus, budget=budget, fold=fold)
    if announce:
        _announce(view)
    return dot_source(report, view)


def _announce(view: View) -> None:
    """Say on stderr when the picture is not what was asked for: collapsed over the budget."""
    for note in view.notes:
        if "over the budget" in note:
            print(f"fxflow: note: {note}", file=sys.stderr)


def format_of(path: str, format: str | None = None) -> str:
    """The output format: ``format`` when given, else from the file extension."""
    if format:
        chosen = format.lower().lstrip(".")
        if chosen not in FORMATS:
            raise FxflowError(f"unknown format {format!r}", hint="use svg, png, pdf or dot")
        return chosen
    extension = os.path.splitext(path)[1].lower()
    if extension not in _EXTENSIONS:
        raise FxflowError(f"cannot tell the format of {path!r} from its extension",
                          hint="name it .svg, .png, .pdf or .dot, or pass --format")
    return _EXTENSIONS[extension]


def render_file(report: "Report", path: str, *, format: str | None = None, depth: int | None = None,
                focus: bool = False, **options: Any) -> str:
    """Write the diagram to ``path`` (``-`` writes DOT to stdout); returns the path."""
    chosen = "dot" if path == "-" and format is None else format_of(path, format)
    source = build_dot(report, depth=depth, focus=focus, **options)
    if chosen == "dot":
        if path == "-":
            sys.stdout.write(source)
        else:
            with open(path, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(source)
        return path
    from .engine import run

    data = run(source, chosen)
    if path == "-":
        sys.stdout.buffer.write(data)
        return path
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def to_svg_text(report: "Report", **options: Any) -> str:
    """The diagram as SVG text (what a notebook shows)."""
    from .engine import run

    options.setdefault("announce", False)
    return run(build_dot(report, **options), "svg").decode("utf-8")
