"""``assert_gradients_flow``: one line in a pytest suite keeps a detach from ever landing again.

::

    def test_every_layer_learns():
        fxflow.assert_gradients_flow(MyNet(), torch.randn(4, 10))

On failure the ``AssertionError`` message is the readable diagnosis: which parameters will not
learn, which op cut them, at which line of forward, and why.
"""
from __future__ import annotations

from typing import Any, Iterable

from .report import Report
from .verdicts import OptimizerVerdict, ReportStatus, StaticVerdict as Static


def assert_gradients_flow(model: Any, inputs: Any = None, *, allow: Iterable[str] = (), **options: Any) -> Report:
    """Raise ``AssertionError`` unless a real backward reached every trainable parameter of ``model``
    (:attr:`Report.ok`): a check that could not run a backward, or a model whose parameters are all
    frozen, fails too.

    ``allow``: glob patterns of parameters allowed to be dry (a frozen backbone is never a failure).
    ``options`` go to :func:`fxflow.check` (``loss_fn``, ``backward``, ``vanishing``, ...). Returns the
    Report when the check passes, so a test can assert more.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this frame
    from .pipeline import check

    report = check(model, inputs, allow=tuple(allow), **options)
    if not report.ok and report.status != ReportStatus.NOTHING_TO_TRAIN:  # no parameter: nothing can fail
        raise AssertionError(failure_message(report))
    return report


def failure_message(report: Report) -> str:
    """The diagnosis: summary line, the dry parameters with their cut sites, then the plain paragraphs."""
    from .present.summary import summary_line
    from .present.text import cut_paragraphs, frozen_holders
    from .present.words import verdict_of

    lines = [_headline(report), summary_line(report, api=True), ""]
    width = max((len(p.name) for p in report.problems), default=0)
    for parameter in report.problems:
        verdict = verdict_of(parameter)
        if parameter.dynamic and parameter.dynamic != verdict:
            verdict += f"/{parameter.dynamic}"
        where = "; ".join(f"{s.op} @ {s.source or s.node}" for s in parameter.cut_by)
        lines.append(f"  {parameter.name.ljust(width)}  {verdict}" + (f"  cut by {where}" if where else ""))
    paragraphs = cut_paragraphs(report, api=True)
    if paragraphs:
        lines.append("")
        lines.extend(paragraphs)
    lines.append("")
    holders = frozen_holders(report, report.problems)
    if holders:  # the bug is a frozen parameter: never say frozen ones cannot fail
        one = len(holders) == 1
        lines.append(f"the frozen all-zero {', '.join(holders)} hold{'s' if one else ''} the others at zero: "
                     f"unfreeze {'it' if one else 'them'}, or allow deliberate dryness with allow=('pattern.*',)")
    elif any(verdict_of(p) != Static.UNREGISTERED for p in report.problems):  # allow= can accept a deliberate one
        lines.append("allow deliberate dryness with allow=('pattern.*',); frozen parameters never fail")
    return "\n".join(lines).rstrip("\n")


def _headline(report: Report) -> str:
    """What failed, in the words that fit it: no gradient, no optimizer, or nothing verified."""
    from .present.words import verdict_of

    if report.status == ReportStatus.NOT_VERIFIED:
        return f"fxflow could not verify that gradients reach every parameter of {report.target}"
    kinds = {verdict_of(p) for p in report.problems}
    if kinds and kinds <= {Static.UNREGISTERED, OptimizerVerdict.NOT_OPTIMIZED}:  # the gradient arrives
        return f"not every parameter of {report.target} will learn"
    return f"gradients do not reach every parameter of {report.target}"
