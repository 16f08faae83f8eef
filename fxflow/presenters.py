"""Which presenter serves each of a Report's documented views (``report.table()``, ``.render()``, ...).

:class:`fxflow.report.Report` is plain data and imports no presenter; this module, above both, tells
it which function serves each view. Each presenter's module is imported when first used, so
``import fxflow`` stays light.
"""
from __future__ import annotations

from typing import Any

from .report import Report, register_presenter


def _table(report: Report, width: int | None = None) -> str:
    from .present.text import render_text

    return render_text(report, width=width, api=True)  # a Python face: fix lines say allow=[...]


def _summary(report: Report) -> str:
    from .present.summary import summary_line

    return summary_line(report)


def _dot(report: Report, **options: Any) -> str:
    from .render import build_dot

    return build_dot(report, **options)


def _file(report: Report, path: str, **options: Any) -> str:
    from .render import render_file

    return render_file(report, path, **options)


def _plot(report: Report, layer: str | None = None) -> Any:
    from .present.plot import plot_history

    return plot_history(report, layer)


def _svg(report: Report) -> str | None:
    from .render import to_svg_text

    return to_svg_text(report)


def _html(report: Report) -> str | None:
    from .render.html import notebook_html

    return notebook_html(report)


def _diagnosis(parameter: Any) -> str | None:
    from .present.reasons import diagnosis

    return diagnosis(parameter)


def _optimizer_reason(parameter: Any) -> str | None:
    from .present.optimizer_reasons import optimizer_words

    return optimizer_words(parameter)


for _view, _function in {"table": _table, "summary": _summary, "dot": _dot, "file": _file, "plot": _plot,
                         "svg": _svg, "html": _html, "diagnosis": _diagnosis,
                         "optimizer_reason": _optimizer_reason}.items():
    register_presenter(_view, _function)
