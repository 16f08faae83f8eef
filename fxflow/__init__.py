"""fxflow: which parameters will never learn, and which line of forward cut them off."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["check", "Report", "ParameterReport", "CutSite", "FxflowError", "__version__"]


def __getattr__(name: str):  # torch is imported lazily so `fxflow --help` stays instant
    if name == "check":
        from .pipeline import check

        return check
    if name in ("Report", "ParameterReport", "CutSite"):
        from . import report

        return getattr(report, name)
    if name == "FxflowError":
        from .errors import FxflowError

        return FxflowError
    raise AttributeError(f"module 'fxflow' has no attribute {name!r}")
