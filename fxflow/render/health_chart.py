"""The HTML report's gradient-health chart: inline SVG in the side panel, no new runtime dependency.

Shown when the report comes from a watched training loop (``fxflow.watch(steps=N)``, the
callbacks' ``steps=N``): one bar pair per layer (mean and largest ``|grad|`` at the last step, log
scale), and below it the selected layer over the steps. Clicking a layer's bars selects it; the
first flagged layer (vanishing or exploding) is selected at first.
"""
from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..dynamic.health import LayerStep
    from ..report import Report

WIDTH, HEIGHT, MARGIN = 640, 180, 34
MEAN_COLOR, MAX_COLOR, FLAG_COLOR = "#2e7d32", "#90caf9", "#c62828"


def health_section(report: "Report") -> str:
    """The ``<section>`` with both charts, or "" when the report has no gradient history."""
    history = report.gradient_history
    if not history:
        return ""
    layers = list(history)
    flagged = {flag.layer: flag for flag in report.gradient_flags}
    selected = next(iter(flagged), layers[-1])
    values = [v for records in history.values() for r in records for v in (r.mean, r.max) if v > 0]
    low, high = (math.log10(min(values)), math.log10(max(values))) if values else (0.0, 1.0)
    bars = _bars(history, layers, flagged, low, high)
    lines = "".join(_line(layer, history[layer], low, high, layer == selected) for layer in layers)
    notes = "".join(f"<li>{html.escape(flag.layer)}: {flag.kind} since step {flag.since}</li>" for flag in flagged.values())
    return f"""<section id="fx-health">
 <h2>gradient health over {report.steps} steps</h2>
 <p class="fx-hint">mean (dark) and largest (light) |grad| per layer at the last step, log scale; click a layer to see it over the steps</p>
 {bars}
 <div id="fx-health-steps">{lines}</div>
 <ul id="fx-health-flags">{notes}</ul>
 <script>
 document.querySelectorAll("#fx-health .fx-layer").forEach(function (group) {{
   group.addEventListener("click", function () {{
     var layer = group.getAttribute("data-layer");
     document.querySelectorAll("#fx-health-steps svg").forEach(function (chart) {{
       chart.style.display = chart.getAttribute("data-layer") === layer ? "" : "none";
     }});
     document.querySelectorAll("#fx-health .fx-layer").forEach(function (other) {{
       other.classList.toggle("fx-selected", other === group);
     }});
   }});
 }});
 </script>
</section>"""


def _y(value: float, low: float, high: float) -> float:
    """Log-scale position of a positive value between the chart's top and its axis."""
    if value <= 0:
        return HEIGHT - MARGIN
    span = max(high - low, 1e-9)
    return round(MARGIN / 2 + (HEIGHT - 1.5 * MARGIN) * (1 - (math.log10(value) - low) / span), 1)


def _bars(history: dict[str, list["LayerStep"]], layers: list[str], flagged: dict, low: float, high: float) -> str:
    slot = (WIDTH - 2 * MARGIN) / max(len(layers), 1)
    parts = [f'<svg id="fx-health-bars" viewBox="0 0 {WIDTH} {HEIGHT + 40}" width="100%" role="img">',
             f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" y2="{HEIGHT - MARGIN}" stroke="#90a4ae"/>',
             f'<text x="2" y="{MARGIN / 2 + 4}" font-size="9">1e{high:.0f}</text>',
             f'<text x="2" y="{HEIGHT - MARGIN}" font-size="9">1e{low:.0f}</text>']
    for index, layer in enumerate(layers):
        last = history[layer][-1]
        x = MARGIN + index * slot
        width = max(slot / 2 - 2, 1)
        label = html.escape(layer)
        color = FLAG_COLOR if layer in flagged else "#37474f"
        parts.append(f'<g class="fx-layer" data-layer="{label}" style="cursor:pointer">'
                     f'<title>{label}: mean {last.mean:.3g}, max {last.max:.3g}</title>'
                     f'<rect x="{x:.1f}" y="0" width="{slot:.1f}" height="{HEIGHT + 40}" fill="transparent"/>')  # the click area
        for offset, value, fill in ((0, last.mean, MEAN_COLOR), (width + 1, last.max, MAX_COLOR)):
            top = _y(value, low, high)
            parts.append(f'<rect class="fx-bar" x="{x + offset:.1f}" y="{top}" width="{width:.1f}" '
                         f'height="{max(HEIGHT - MARGIN - top, 0.5):.1f}" fill="{fill}"/>')
        parts.append(f'<text x="{x + slot / 2:.1f}" y="{HEIGHT - MARGIN + 12}" font-size="9" fill="{color}" '
                     f'text-anchor="end" transform="rotate(-35 {x + slot / 2:.1f} {HEIGHT - MARGIN + 12})">{label}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _line(layer: str, records: list["LayerStep"], low: float, high: float, shown: bool) -> str:
    steps = [r.step for r in records]
    first, last = min(steps), max(steps)
    span = max(last - first, 1)

    def x(step: int) -> float:
        return round(MARGIN + (WIDTH - 2 * MARGIN) * (step - first) / span, 1)

    label = html.escape(layer)
    paths = "".join(
        f'<polyline fill="none" stroke="{color}" stroke-width="2" points="'
        + " ".join(f"{x(r.step)},{_y(getattr(r, key), low, high)}" for r in records) + '"/>'
        for key, color in (("mean", MEAN_COLOR), ("max", MAX_COLOR)))
    ticks = "".join(f'<text x="{x(s)}" y="{HEIGHT - MARGIN + 12}" font-size="9" text-anchor="middle">{s}</text>'
                    for s in steps)
    display = "" if shown else ' style="display:none"'
    return (f'<svg class="fx-health-layer" data-layer="{label}" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%"{display}>'
            f'<text class="fx-health-title" x="{MARGIN}" y="12" font-size="11">{label} over the steps</text>'
            f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" y2="{HEIGHT - MARGIN}" stroke="#90a4ae"/>'
            f"{paths}{ticks}</svg>")
