"""Colors, shapes and CSS classes of the flow diagram, one entry per state.

States (:class:`fxflow.verdicts.NodeState`) come from :mod:`fxflow.static.analyze` (``wet dry cut
zero frozen unused inert``), plus two the renderer gives from the real run: ``failed``, a parameter
the graph reaches but whose real backward failed (its dynamic verdict is missing, zero or
nonfinite), so that the picture never paints green what the table fails, and ``nonfinite``, the op
where a NaN or inf was born. Every drawn node carries ``class="fxflow-<state> ..."`` so the SVG can
be restyled with CSS and checked by machines.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..verdicts import NodeState

FONT = "Helvetica"

WET, DRY, CUT, ZERO = NodeState.WET, NodeState.DRY, NodeState.CUT, NodeState.ZERO
FAILED = NodeState.FAILED  # render-only state: reachable in the graph, failed in the real backward
NONFINITE = NodeState.NONFINITE  # render-only state: the op where the real run first made a NaN or an inf
FROZEN, UNUSED, INERT = NodeState.FROZEN, NodeState.UNUSED, NodeState.INERT

STATES = tuple(NodeState)

# Severity: a collapsed box takes the worst state among what it hides.
SEVERITY = {CUT: 7, NONFINITE: 7, DRY: 6, FAILED: 5, ZERO: 4, UNUSED: 3, FROZEN: 2, WET: 1, INERT: 0}

# Which of two edges between the same boxes to draw: a cut wins, then flowing gradient.
EDGE_PRECEDENCE = {CUT: 6, WET: 5, FAILED: 4, ZERO: 3, DRY: 2, INERT: 1}


@dataclass(frozen=True)
class NodeStyle:
    fill: str
    border: str
    font: str = "#212121"
    style: str = "rounded,filled"
    penwidth: float = 1.2


NODE_STYLES = {
    WET: NodeStyle("#dcf2dc", "#2e7d32"),
    DRY: NodeStyle("#f1e7d6", "#a1887f", "#5d4037"),
    CUT: NodeStyle("#ffcdd2", "#c62828", "#b71c1c", penwidth=3.0),
    ZERO: NodeStyle("#ffe0b2", "#ef6c00", "#8a3b00", penwidth=1.8),
    FAILED: NodeStyle("#f8d7ee", "#ad1457", "#880e4f", penwidth=1.8),
    NONFINITE: NodeStyle("#fff59d", "#6a1b9a", "#4a148c", penwidth=3.0),
    FROZEN: NodeStyle("#e6e6e6", "#9e9e9e", "#616161"),
    UNUSED: NodeStyle("#ffffff", "#9e9e9e", "#757575", style="rounded,filled,dashed"),
    INERT: NodeStyle("#ffffff", "#b0bec5", "#455a64"),
}


@dataclass(frozen=True)
class EdgeStyle:
    color: str
    style: str = "solid"
    penwidth: float = 1.2


EDGE_STYLES = {
    WET: EdgeStyle("#2e7d32", penwidth=1.6),
    DRY: EdgeStyle("#bcaaa4"),
    CUT: EdgeStyle("#d50000", "dashed", 2.4),
    ZERO: EdgeStyle("#ef6c00", penwidth=1.4),
    FAILED: EdgeStyle("#ad1457", "dotted", 1.4),
    INERT: EdgeStyle("#cfd8dc", penwidth=0.8),
}

# Wet edges fade from dark to pale green as the gradient norm that flowed shrinks (log scale).
WET_STRONG = (0x1B, 0x5E, 0x20)
WET_FAINT = (0xA5, 0xD6, 0xA7)
MIN_WIDTH, MAX_WIDTH = 0.6, 3.2

LEGEND = (
    (WET, "wet: the gradient arrives"),
    (DRY, "dry: no gradient (before a cut)"),
    (CUT, "cut: severs the gradient"),
    (ZERO, "zero: the gradient is exactly 0"),
    (FAILED, "failed: no, zero or NaN gradient in the real backward"),
    (NONFINITE, "NaN/inf born here (first from finite values)"),
    (FROZEN, "frozen: requires_grad=False"),
    (UNUSED, "unused: does not reach the output"),
    (INERT, "inert: carries no gradient (inputs)"),
)

LEGEND_EDGES = (
    (WET, "gradient (width: log norm)"),
    (CUT, "severed"),
    (ZERO, "exact-zero gradient"),
    (FAILED, "into a failed parameter"),
    (DRY, "no gradient flows"),
    (INERT, "input, no gradient"),
)

CLUSTER_FILLS = ("#f6f8fa", "#ffffff")
CLUSTER_BORDER = "#90a4ae"
NEVER_BORDER = "#9e9e9e"


def node_class(state: str, *extra: str) -> str:
    """``fxflow-<state>`` first when it is a plain op node, ``fxflow-param fxflow-<state>`` for params."""
    if "param" in extra:
        return " ".join(["fxflow-param", f"fxflow-{state}"] + [f"fxflow-{e}" for e in extra if e != "param"])
    return " ".join([f"fxflow-{state}"] + [f"fxflow-{e}" for e in extra])


def worst(states: list[str] | set[str]) -> str:
    """The most severe state of a collection (``inert`` when empty)."""
    return max(states, key=lambda s: SEVERITY.get(s, 0), default=INERT)


DECADES = 6.0  # a norm this many powers of ten below the largest draws as the faintest wire


def edge_width_scale(norms: list[float]) -> float | None:
    """log10 of the largest positive finite norm, or None when there is none."""
    logs = [math.log10(n) for n in norms if n is not None and n > 0 and math.isfinite(n)]
    return max(logs) if logs else None


def wet_edge_look(norm: float | None, top: float | None) -> tuple[float, str]:
    """Pen width and color of a gradient-carrying edge whose measured norm is ``norm``.

    Log scale relative to the largest norm in the picture: the largest draws thickest and
    darkest, one :data:`DECADES` powers of ten smaller draws thin and pale.
    """
    if norm is None or top is None or not math.isfinite(norm):
        return EDGE_STYLES[WET].penwidth, EDGE_STYLES[WET].color
    if norm <= 0:
        return MIN_WIDTH, _hex(WET_FAINT)
    t = min(max(1.0 + (math.log10(norm) - top) / DECADES, 0.0), 1.0)
    width = MIN_WIDTH + (MAX_WIDTH - MIN_WIDTH) * t
    color = tuple(round(f + (s - f) * t) for f, s in zip(WET_FAINT, WET_STRONG))
    return round(width, 2), _hex(color)


def _hex(rgb: tuple[int, ...]) -> str:
    return "#" + "".join(f"{c:02x}" for c in rgb)
