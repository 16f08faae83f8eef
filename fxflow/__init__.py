"""fxflow: which parameters will never learn, and which line of forward cut them off.

Public API (torch is imported lazily, so ``fxflow --help`` stays instant)::

    fxflow.check(model, inputs=None, *, loss_fn=None, backward=True, allow=(), vanishing=1e-3) -> Report
    fxflow.assert_gradients_flow(model, inputs=None, *, allow=(), **options) -> Report
    with fxflow.watch(model) as w: ...; loss.backward()      # then w.report, w.show()

The pipeline (:mod:`fxflow.pipeline` wires it; each stage is one subpackage, entered once, in order)::

    check(model, inputs)
      prepare.prepare            unwrap DDP/compile, inputs as model(**inputs) takes them, copy to --device
      dynamic.probe.run_model    the one forward + backward on the training loss (real, meta or fake), recorded
      dynamic.gradients.dynamic_verdicts  missing, zero, vanishing, nonfinite, ok
      capture.capture            fx GraphModule: symbolic_trace -> the recorded run -> torch.export
      pipeline.analyze_capture   the static stage, shared with watch:
        static.annotate.annotate   node.meta["fxflow"]: how gradient crosses each node (twin tensors)
        static.analyze.analyze     one backward walk: static verdicts, cut sites, node states
      diagnose.diagnose          where a zero, vanishing or NaN gradient died, faded or was born
      pipeline.look_ahead_of     exact zeros: small steps and the run again, while parameters come alive
      reconcile.assemble.assemble_report  static next to dynamic, agreement, diagnosis, steps, health
      -> report.Report           the one data model
    present.text / present.terminal / render   table, JSON, DOT/SVG/PNG/HTML, notebook

    watch(model): the user's own step replaces the dynamic stage; capture -> analyze_capture ->
    assemble_report as above, so the same step gives the same Report.

Shared vocabulary (verdicts, edge kinds, node states, keys): :mod:`fxflow.verdicts`, a leaf module.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .version import __version__

__all__ = [
    "check", "assert_gradients_flow", "watch", "Watch", "Report", "ParameterReport", "CutSite",
    "TraceInfo", "DDPGuidance", "FxflowError", "__version__",
]

_LAZY = {
    "check": ("pipeline", "check"),
    "assert_gradients_flow": ("testing", "assert_gradients_flow"),
    "watch": ("watching", "watch"),
    "Watch": ("watching", "Watch"),
    "Report": ("report", "Report"),
    "ParameterReport": ("report", "ParameterReport"),
    "CutSite": ("report", "CutSite"),
    "TraceInfo": ("report", "TraceInfo"),
    "DDPGuidance": ("core.distributed", "DDPGuidance"),
    "FxflowError": ("errors", "FxflowError"),
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .core.distributed import DDPGuidance
    from .errors import FxflowError
    from .pipeline import check
    from .report import CutSite, ParameterReport, Report, TraceInfo
    from .testing import assert_gradients_flow
    from .watching import Watch, watch


from . import presenters  # noqa: E402,F401 - a Report's views (report.table(), .render(), ...) are served from here


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module_name, attribute = _LAZY[name]
        value = getattr(importlib.import_module(f".{module_name}", __name__), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fxflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
