"""The terminal report: a table like the seed's printout, one paragraph per cut, a summary line.

Widths: with a width (the terminal's, or ``COLUMNS``), paragraphs wrap at it and a table wider
than it wraps its last column ("cut by") inside that column; the other columns never wrap, so
the table stays a table. Without a width nothing wraps: one line per parameter and per
paragraph (the API's default; the CLI always passes one, 100 when piped).
"""
from __future__ import annotations

import math
import textwrap
from dataclasses import replace
from typing import TYPE_CHECKING

from ..verdicts import FAILING_DYNAMIC, FAILING_STATIC, DynamicVerdict, OptimizerVerdict, ReportStatus, StaticVerdict

if TYPE_CHECKING:  # pragma: no cover - the report imports this module to present itself
    from ..diagnose.nonfinite import NonfiniteSite
    from ..report import ParameterReport, Report

COLUMNS = ("parameter", "shape", "static", "dynamic", "grad norm", "cut by")  # the table, in any presenter
_GAP = "  "
_MIN_LAST_COLUMN = 16  # narrower than this, wrapping the last column would be unreadable


def _shape(parameter: ParameterReport) -> str:
    return "x".join(str(s) for s in parameter.shape) or "scalar"


def format_norm(norm: float | None) -> str:
    """A gradient norm with its magnitude visible: ``7.038``, ``0.1841``, ``1.2e-25``; ``-`` for none.

    Four significant digits (``%.4g``), so a vanishing ``1.2e-25`` never prints as ``0.000000``,
    which would read as an exactly zero gradient.
    """
    if norm is None:
        return "-"
    if not math.isfinite(norm):
        return str(norm)  # nan, inf
    return f"{norm:.4g}"


def _cut_by(parameter: ParameterReport) -> str:
    if not parameter.cut_by and parameter.optimizer == OptimizerVerdict.NOT_OPTIMIZED:
        return "no optimizer group will update it"  # the gradient arrives; the notes say why it is not applied
    return ", ".join(f"{site.op} @ {site.source or '?'}" for site in parameter.cut_by)


def _static(parameter: ParameterReport) -> str:
    return parameter.static + (" (allowed)" if parameter.allowed else "")


def table_rows(report: Report) -> list[tuple[str, ...]]:
    """The table's cells, one tuple per parameter (shared by the plain and the rich terminal)."""
    return [
        (p.name, _shape(p), _static(p), p.dynamic or "-", format_norm(p.grad_norm),
         _cut_by(p) + ("" if p.agree is not False else "  [disagree]"))
        for p in report.parameters
    ]


def plain_table(report: Report, width: int | None = None) -> str:
    """The aligned table; at ``width``, the last column wraps inside itself (at ``, `` and spaces)."""
    rows = [COLUMNS] + table_rows(report)
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    indent = sum(widths) + len(_GAP) * len(widths)
    room = None if width is None else max(width - indent, _MIN_LAST_COLUMN)
    lines = []
    for row in rows:
        cells = [cell.rjust(w) if i == 4 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        last = [row[-1]] if room is None or len(row[-1]) <= room else _wrap_cell(row[-1], room)
        lines.append(_GAP.join(cells + [last[0]]).rstrip())
        lines.extend(" " * indent + piece for piece in last[1:])
    return "\n".join(lines)


def _wrap_cell(cell: str, room: int) -> list[str]:
    """Wrap one "cut by" cell: between sites first, then inside a site at its spaces."""
    pieces: list[str] = []
    for index, site in enumerate(cell.split(", ")):
        text = site + ("," if index < cell.count(", ") else "")
        if pieces and len(pieces[-1]) + 1 + len(text) <= room:
            pieces[-1] += " " + text
        else:
            pieces.extend(textwrap.wrap(text, room, break_long_words=False, break_on_hyphens=False) or [text])
    return pieces


def cut_paragraphs(report: Report) -> list[str]:
    """One plain-words paragraph per cutting (or zeroing) node, then per unused module and disagreement."""
    # where the real backward raises (one with no line of its own is a note already)
    paragraphs = [f"At {site.source}: {site.reason}." for site in report.backward_raises if site.source]
    paragraphs += [f"A{nonfinite_sentence(site)[1:]}." for site in report.nonfinite]
    paragraphs += [f"The gradient of {flag.layer} is {flag.kind} next to the rest of the model since step {flag.since}: "
                   f"its mean |grad| is {format_norm(flag.ratio)}x the median layer's at the last step."
                   for flag in report.gradient_flags]
    for site in report.cuts:
        victims = [p for p in report.parameters if any(s.node == site.node for s in p.cut_by)]
        where = f" at {site.source}" if site.source else ""
        if site.frames:  # the line lies in a helper: the way there from forward
            where += f" (reached by {' -> '.join(site.frames)})"
        names = name_list([p.name for p in victims])
        if victims and all(p.static == StaticVerdict.ZERO for p in victims):
            effect = f"gives {names} an exactly zero gradient"
        else:
            effect = f"cuts {names} off from the output"
        paragraphs.append(f"{site.op}{where} (node {site.node}) {effect}: {site.reason}.")
    grouped: dict[tuple[str, str], list[str]] = {}  # one line per verdict and reason, not per parameter
    diagnosed: dict[tuple[str, str | None, str | None], list[str]] = {}
    dry_dynamic = (DynamicVerdict.ZERO, DynamicVerdict.NONFINITE, DynamicVerdict.MISSING, DynamicVerdict.VANISHING)
    for parameter in report.parameters:
        if parameter.static in _GROUPED and parameter.diagnosis:
            grouped.setdefault((parameter.static, parameter.diagnosis), []).append(parameter.name)
        elif parameter.agree is False or (parameter.diagnosis
                                          and parameter.static not in (StaticVerdict.CUT, StaticVerdict.FROZEN)
                                          and parameter.dynamic in dry_dynamic):
            key = (parameter.static, parameter.dynamic, parameter.diagnosis)
            diagnosed.setdefault(key, []).append(parameter.name)
    shown_vanishing = 0
    for (static, dynamic, diagnosis), names in diagnosed.items():
        if dynamic == DynamicVerdict.VANISHING:  # one shrink factor per parameter: show the first few places
            shown_vanishing += 1
            if shown_vanishing > _VANISHING_PARAGRAPHS:
                continue
        paragraphs.append(f"{name_list(names)} ({static} / {dynamic}): {diagnosis}.")
    if shown_vanishing > _VANISHING_PARAGRAPHS:
        hidden = shown_vanishing - _VANISHING_PARAGRAPHS
        paragraphs.append(f"{hidden} more place{'s' if hidden != 1 else ''} where a gradient vanishes: see --json.")
    for (static, diagnosis), names in grouped.items():
        verb = "is" if len(names) == 1 else "are"
        paragraphs.append(f"{name_list(names)} {verb} {_GROUPED[static]}: {diagnosis}.")
    return paragraphs


# Verdicts whose parameters share one paragraph per reason: how the paragraph calls them.
_GROUPED = {StaticVerdict.UNUSED: "unused", StaticVerdict.UNKNOWN: "unknown",
            StaticVerdict.UNREGISTERED: "trained by no optimizer"}


def nonfinite_sentence(site: "NonfiniteSite") -> str:
    """Where a NaN or inf was born, in one sentence (the text report and the CI findings say it alike)."""
    where = f" @ {site.source}" if site.source else ""
    module = f" in {site.module}" if site.module else ""
    made = "in the forward" if site.phase == "forward" else "in the backward"
    return f"a non-finite value is born {made} at {site.op}{where}{module}: {site.reason}"


def name_list(names: list[str], limit: int = 6) -> str:
    """``a, b, c``; past ``limit`` names, the first ones and ``and N more``."""
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f" and {len(names) - limit} more"


# How the summary's tally says a verdict where the bare word would not read: a zero, static or
# dynamic alike (the two members are the same string).
_KIND_WORDS = {StaticVerdict.ZERO: "with an exactly zero gradient"}
_VANISHING_PARAGRAPHS = 3  # vanishing explanations shown in the text; the JSON has all


def verdict_of(parameter: ParameterReport) -> str:
    """The one word that says what is wrong (or right) with a parameter: the static verdict,
    unless the graph says reachable, then what the real backward found; "not optimized" when the
    gradient is fine but no optimizer group applies it."""
    word = parameter.dynamic if parameter.static == StaticVerdict.REACHABLE and parameter.dynamic else parameter.static
    if parameter.optimizer == OptimizerVerdict.NOT_OPTIMIZED and word not in FAILING_STATIC | FAILING_DYNAMIC:
        return OptimizerVerdict.NOT_OPTIMIZED  # the gradient arrives; no optimizer group applies it
    return word


def _tally(parameters: list[ParameterReport], words: dict[str, str] = _KIND_WORDS) -> str:
    """``4 cut, 1 unused``: counts per verdict, in a stable order."""
    kinds: dict[str, int] = {}
    for parameter in parameters:
        kinds[verdict_of(parameter)] = kinds.get(verdict_of(parameter), 0) + 1
    return ", ".join(f"{n} {words.get(kind, kind)}" for kind, n in sorted(kinds.items()))


def allowed_problems(report: Report) -> list[ParameterReport]:
    """Parameters that would fail the check but match an ``--allow`` pattern."""
    return [p for p in report.parameters if p.allowed and replace(p, allowed=False).problem]


def summary_line(report: Report) -> str:
    """One line: how many parameters are dry and why; what was allowed; what is vanishing."""
    total = len(report.parameters)
    if total == 0:
        return "nothing to train: the model has no parameters"
    if report.everything_frozen:
        return f"problem: {NOTHING_LEARNS}"
    problems = report.problems
    frozen = report.counts()[StaticVerdict.FROZEN]
    tail = ""
    allowed = allowed_problems(report)
    if allowed:
        kinds = {verdict_of(p) for p in allowed}  # "4 allowed (cut)", "5 allowed (4 cut, 1 unused)"
        tail += f"; {len(allowed)} allowed ({kinds.pop() if len(kinds) == 1 else _tally(allowed, words={})})"
    if frozen:
        tail += f"; {frozen} frozen"
    vanishing = [p for p in report.parameters if p.dynamic == DynamicVerdict.VANISHING]
    if vanishing:
        smallest = min((p.grad_norm for p in vanishing if p.grad_norm is not None), default=None)
        tail += f"; {len(vanishing)} vanishing" + (f" (smallest norm {format_norm(smallest)})" if smallest is not None else "")
    unknown = sum(1 for p in report.parameters if p.static == StaticVerdict.UNKNOWN)
    if unknown:  # the backward alone spoke for these: say so next to any "ok"
        why = "nothing captured" if report.trace.method == "none" else "an op that never ran decides them"
        tail += f"; {unknown} static verdict{'s' if unknown > 1 else ''} unknown ({why})"
    disagreements = sum(1 for p in report.parameters if p.agree is False)
    if disagreements:
        tail += f"; {disagreements} static/runtime disagreement{'s' if disagreements > 1 else ''}"
    if report.nonfinite:  # where the NaN came from, next to the parameters it reached
        first = report.nonfinite[0]
        tail += f"; first non-finite value from {first.op} @ {first.source or first.module or '?'} ({first.phase})"
    if report.backward_raises:  # training stops at the first step, whatever the verdicts
        first = report.backward_raises[0]
        raises = f"loss.backward() raises at {first.op} @ {first.source}" if first.source else \
            f"loss.backward() raises {first.reason}"
        if not problems:
            return f"problem: {raises}{tail}"
        tail = f"; {raises}{tail}"
    if report.status == ReportStatus.NOT_VERIFIED:
        return f"{NOT_VERIFIED}{tail}"
    if not report.verified and not report.static_only:
        tail += f"; {NOT_VERIFIED}"
    if not problems and report.static_only:
        return (f"static only (--no-backward): all {total - frozen} trainable parameters have a differentiable "
                f"path to the output; no backward ran to confirm it{tail}")
    if not problems:
        if allowed:
            return f"ok: no unexpected problems{tail}"
        return f"ok: all {total - frozen} trainable parameters get a gradient{tail}"
    where = ""
    sites = [(p.static, s) for p in problems if p.static in (StaticVerdict.CUT, StaticVerdict.ZERO) for s in p.cut_by]
    if sites:  # a real cut first: it is the one that starves
        static, first = next((item for item in sites if item[0] == StaticVerdict.CUT), sites[0])
        label = "first cut" if static == StaticVerdict.CUT else "first zero"
        where = f" ({label}: {first.op} @ {first.source or first.node})"
    return f"problem: {len(problems)} of {total} parameters will not learn: {_tally(problems)}{where}{tail}"


NOTHING_LEARNS = "nothing will learn: every parameter is frozen (loss.backward() would raise)"
NOT_VERIFIED = "not verified: no backward ran (give --input-size or example_inputs())"


def render_text(report: Report, width: int | None = None) -> str:
    """The whole text report; ``width`` wraps paragraphs and the table's last column (None: no wrap)."""
    parts = [f"fxflow check {report.target}  [trace: {report.trace.method}, {report.trace.nodes} nodes]", ""]
    parts.append(plain_table(report, width))
    paragraphs = cut_paragraphs(report)
    notes = ([f"loss: {report.loss}"] if report.loss else []) + [f"note: {note}" for note in report.trace.notes + report.notes]
    for block in (paragraphs, notes):
        if block:
            parts.append("")
            parts.extend(_wrap(text, width) for text in block)
    parts.extend(["", _wrap(summary_line(report), width)])
    return "\n".join(parts)


def _wrap(text: str, width: int | None) -> str:
    """``text`` wrapped at ``width``; ``op @ file:line`` never splits, so a log grep still finds it."""
    if width is None or len(text) <= width:
        return text
    joined = text.replace(" @ ", "\u00a0@\u00a0")  # textwrap never breaks at a no-break space
    return textwrap.fill(joined, width, break_long_words=False, break_on_hyphens=False).replace("\u00a0", " ")
