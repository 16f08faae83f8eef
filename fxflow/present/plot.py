"""``Report.plot()``: the per-layer gradient chart of a watched training loop, with matplotlib."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import FxflowError

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report


def plot_history(report: "Report", layer: str | None = None) -> Any:
    """Left: mean and largest |grad| per layer at the last step (log scale); right: ``layer`` over the steps."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        from matplotlib.figure import Figure
    except ImportError as error:
        raise FxflowError("Report.plot() needs matplotlib", hint="pip install 'fxflow[plot]'") from error
    history = report.gradient_history
    if not history:
        raise FxflowError("no gradient history: it is recorded by fxflow.watch(steps=N) and the callbacks' steps=N")
    layers = list(history)
    chosen = layer or (report.gradient_flags[0].layer if report.gradient_flags else layers[-1])
    if chosen not in history:
        raise FxflowError(f"no layer {chosen!r} in the gradient history", hint=f"layers look like {layers[0]}")
    figure = Figure(figsize=(max(6.0, 0.4 * len(layers) + 4), 4), layout="constrained")
    bars, steps = figure.subplots(1, 2, width_ratios=[3, 2])
    last = [history[name][-1] for name in layers]
    positions = range(len(layers))
    bars.bar([p - 0.2 for p in positions], [r.mean for r in last], width=0.4, label="mean |grad|")
    bars.bar([p + 0.2 for p in positions], [r.max for r in last], width=0.4, label="max |grad|")
    bars.set_yscale("log")
    bars.set_xticks(list(positions), layers, rotation=60, ha="right", fontsize=7)
    bars.set_title(f"per layer, step {last[0].step if last else '?'}")
    bars.legend(fontsize=7)
    records = history[chosen]
    steps.plot([r.step for r in records], [r.mean for r in records], marker="o", label="mean |grad|")
    steps.plot([r.step for r in records], [r.max for r in records], marker="o", label="max |grad|")
    steps.set_yscale("log")
    steps.set_xlabel("step")
    steps.set_title(chosen)
    steps.legend(fontsize=7)
    return figure
