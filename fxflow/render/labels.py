"""DOT attribute and label helpers shared by the drawing (:mod:`.dot`) and its legend (:mod:`.legend`)."""
from __future__ import annotations

import html
from typing import Iterable

import graphviz

from ..verdicts import NodeState
from . import style

NL = "&#10;"  # a newline inside a tooltip, for dot and graphviz-pure alike
MARKER_COLOR = "#78909c"  # the "+ mask, index" line under an op whose inputs without gradient are hidden


def html_text(value: str) -> str:
    """Escape for an HTML-like label."""
    return html.escape(value, quote=False)


def plain(value: str) -> graphviz.quoting.NoHtml:
    """A non-HTML attribute value (tooltips, cluster labels), with DOT's backslash escapes defused."""
    return graphviz.nohtml(value.replace("\\", "\\\\"))


def tooltip_of(lines: Iterable[str | None]) -> graphviz.quoting.NoHtml:
    """Tooltip lines, the empty ones left out."""
    return plain(NL.join(line for line in lines if line))


def small(words: str, color: str | None = None) -> str:
    """Nine-point text for an HTML-like label, tinted when ``color`` is given."""
    tint = f' color="{color}"' if color else ""
    return f'<font point-size="9"{tint}>{html_text(words)}</font>'


def node_attrs(state: str, classes: str, tooltip: graphviz.quoting.NoHtml, **extra: str) -> dict[str, str]:
    """The look of a node in ``state`` (fill, border, font, pen) plus ``extra``."""
    look = style.NODE_STYLES.get(state, style.NODE_STYLES[NodeState.INERT])
    attrs = {"class": classes, "tooltip": tooltip, "fillcolor": look.fill, "color": look.border,
             "fontcolor": look.font, "style": look.style, "penwidth": f"{look.penwidth:g}"}
    attrs.update(extra)
    return attrs
