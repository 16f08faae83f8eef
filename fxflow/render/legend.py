"""The legend: a compact key under the title, listing only what the picture draws.

It is one HTML-like table inside the graph's label, not a cluster of sample nodes beside the
drawing: it takes no rank and no column of the layout, so on a small model it stays a strip a
few lines tall instead of half the picture's width. Each entry is a swatch with the fill, border
and line style the drawing uses for that state, and its words. It is never wider than the
drawing: as many columns as the drawing's estimated width holds (one, on a small model), and
smaller type when even one entry is wider than the drawing. A tall drawing has room for a wider
legend (half its height): one column there would only make the picture taller than a screen.
"""
from __future__ import annotations

import re

from ..verdicts import NodeState
from . import style
from .labels import MARKER_COLOR, html_text
from .auto import ranks
from .view import View
from .wide import widest

LEGEND_COLUMNS = 2  # entries per legend row, at most
LEGEND_FONT = 9  # points
MIN_LEGEND_FONT = 7  # points: the smallest type a narrow drawing's legend gets
RANK_PT = 44  # about one rank of the drawing, box and gap, in points

# Edge samples: the characters that draw a wire's line style in text.
_LINES = {"solid": "\u2014\u2014", "dashed": "- - -", "dotted": "\u00b7 \u00b7 \u00b7"}


UNREGISTERED_WORDS = "unregistered: reached, but not in model.parameters(), so no optimizer gets it"


def legend_entries(view: View, font: int = LEGEND_FONT) -> list[tuple[str, str]]:
    """(swatch cell, words) for every state, shape and wire the picture uses, in legend order:
    nothing is explained that is not drawn."""
    items = view.items
    uncalled = view.uncalled()
    unregistered = [i for i in items if i.base is not None and i.base.unregistered]
    states = {i.state for i in items if i not in unregistered} | {s for n in uncalled for _, s in n.params}
    kinds = {i.kind for i in items}
    entries = [(_swatch(state), words) for state, words in style.LEGEND if state in states]
    entries += [(_swatch(state), UNREGISTERED_WORDS) for state in sorted({i.state for i in unregistered})]
    if "param" in kinds or (uncalled and not view.collapse_never):
        entries.append((_swatch(NodeState.INERT, shape="param"), "square: a parameter"))
    if kinds & {"module", "run"} or (view.collapse_never and uncalled):
        entries.append((_swatch(NodeState.INERT, shape="module"), "bold: a collapsed module"))
    if "fold" in kinds:
        counts = sorted({i.count for i in items if i.kind == "fold"})  # the counts the drawing shows
        entries.append((_swatch(NodeState.INERT, shape="fold"), f"double, {'/'.join(f'x{n}' for n in counts)}: identical blocks"))
    if any(i.base is not None and i.base.name in view.markers for i in items):
        entries.append((f'<td width="18"><font point-size="{font}" color="{MARKER_COLOR}">+ mask</font></td>',
                        "inputs without gradient, hidden"))
    used = {link.state for link in view.links}
    for state, words in style.LEGEND_EDGES:
        if state in used:
            look = style.EDGE_STYLES[state]
            line = _LINES.get(look.style, _LINES["solid"])
            entries.append((f'<td width="18"><font point-size="{font}" color="{look.color}"><b>{line}</b></font></td>',
                            f"wire: {words}"))
    return entries


_COLOR = re.compile(r'\b(bgcolor|color)="([^"]*)"')


def legend_items(view: View) -> list[dict[str, str]]:
    """The legend as plain data for the HTML page: each entry's words and its swatch's colors
    (``fill`` and ``border`` for a box, ``color`` for a wire) and ``line`` (dashed, double, ...)."""
    items = []
    for swatch, words in legend_entries(view):
        colors = {("fill" if key == "bgcolor" else "border"): value for key, value in _COLOR.findall(swatch)}
        if "fill" not in colors:  # a wire sample (or the mask marker): its text color
            colors = {"color": colors.get("border", "#455a64"), "sample": re.sub(r"<[^>]*>", "", swatch)}
        colors["words"] = words
        colors["line"] = "dashed" if 'style="dashed"' in swatch else "double" if 'border="3"' in swatch else \
            "bold" if 'border="2"' in swatch else "solid"
        items.append(colors)
    return items


def _swatch(state: str, shape: str = "state") -> str:
    """A small box cell drawn like a node in ``state``."""
    look = style.NODE_STYLES.get(state, style.NODE_STYLES[NodeState.INERT])
    border = {"module": 2, "fold": 3}.get(shape, 1)
    width = 10 if shape == "param" else 18
    dashed = ' style="dashed"' if "dashed" in look.style else ""
    return (f'<td border="{border}" bgcolor="{look.fill}" color="{look.border}"{dashed} '
            f'width="{width}" height="10" fixedsize="true"></td>')


_CHAR_EM = 0.6  # about one Helvetica character, in its point size, generously
_SWATCH_PT = 30  # the swatch and the gap before the words


def _entry_width(words: str, font: float) -> int:
    return round(_SWATCH_PT + _CHAR_EM * font * len(words))


def legend_shape(words: list[str], room: float) -> tuple[int, int]:
    """(columns, font size) of a legend of entries ``words`` under a drawing ``room`` points wide:
    the most columns, up to :data:`LEGEND_COLUMNS`, whose rows fit the room; a room narrower
    than the widest entry shrinks the type, down to :data:`MIN_LEGEND_FONT`."""
    widest_entry = max(_entry_width(w, LEGEND_FONT) for w in words)
    columns = max(1, min(LEGEND_COLUMNS, len(words), int(room // widest_entry)))
    if columns > 1 or widest_entry <= room:
        return columns, LEGEND_FONT
    longest = max(len(w) for w in words)
    return 1, max(MIN_LEGEND_FONT, int((room - _SWATCH_PT) / (_CHAR_EM * longest)))


def _entry(swatch: str, words: str, font: int, width: int) -> str:
    """One entry: its swatch and words in a table of fixed size, as wide as the widest of its column,
    so that the column lines up and a wide title does not spread the entries apart (Graphviz
    stretches the cells of a table to fill its cell otherwise)."""
    # One point between cells: with two, the cells and their spacing outgrow the fixed size and
    # Graphviz warns "table size too small".
    return (f'<td align="left"><table border="0" cellspacing="1" cellpadding="0" fixedsize="true" '
            f'width="{width}" height="{font + 5}"><tr>{swatch}<td align="left" width="{width - _SWATCH_PT + 8}">'
            f'<font point-size="{font}">{html_text(words)}</font></td></tr></table></td>')


def legend_table(view: View) -> str | None:
    """The legend as an HTML-like table for the graph label, or None when nothing is drawn."""
    entries = legend_entries(view)
    if not entries:
        return None
    room = max(widest(view), ranks(view) * RANK_PT / 2)
    columns, font = legend_shape([words for _, words in entries], room)
    if font != LEGEND_FONT:
        entries = legend_entries(view, font)
    widths = [max(_entry_width(words, font) for _, words in entries[column::columns]) for column in range(columns)]
    rows = []
    for start in range(0, len(entries), columns):
        rows.append("<tr>" + "".join(_entry(swatch, words, font, widths[column])
                                     for column, (swatch, words) in enumerate(entries[start:start + columns])) + "</tr>")
    return ('<table border="0" cellborder="0" cellspacing="1" cellpadding="0">'
            + "".join(rows) + "</table>")
