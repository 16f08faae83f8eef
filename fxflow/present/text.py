"""The terminal report: a table like the seed's printout, one paragraph per cut, a summary line.

Widths: with a width (the terminal's, or ``COLUMNS``), paragraphs wrap at it and a table wider
than it wraps its last column ("cut by") inside that column; the other columns never wrap, so
the table stays a table. Without a width nothing wraps: one line per parameter and per
paragraph (the API's default; the CLI always passes one, 100 when piped).
"""
from __future__ import annotations

import math
import re
import textwrap
from dataclasses import replace
from typing import TYPE_CHECKING

from ..verdicts import (FAILING_DYNAMIC, FAILING_STATIC, DynamicVerdict as Dynamic, OptimizerVerdict, ReportStatus,
                        StaticVerdict as Static)
from .fixes import fix_line, site_cause, site_words, verdict_cause
from .fresh import fresh_paragraph, fresh_tensor_sources

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


FOLD_ROWS = 40  # above this many parameters the table shows the ones with a problem and one line for the rest


def shown_parameters(report: Report, all_rows: bool = False) -> tuple[list[ParameterReport], str | None]:
    """The parameters the table lists, and the line that stands for the others: above
    :data:`FOLD_ROWS` rows (unless ``all_rows``), only those that fail the check (or would, but for
    ``--allow``) or where the graph and the backward disagree are listed."""
    parameters = report.parameters
    if all_rows or len(parameters) <= FOLD_ROWS:
        return parameters, None
    shown = [p for p in parameters if p.problem or p.allowed or p.agree is False]
    rest = [p for p in parameters if p not in shown]
    if not rest:
        return parameters, None
    noun = "parameter" if len(rest) == 1 else "parameters"
    more = "... " + f"{len(rest)} more {noun}" if shown else f"{len(rest)} {noun}, all"
    return shown, f"{more} without a problem ({_tally(rest, words={})}): --all lists every row"


def table_rows(report: Report, parameters: list[ParameterReport] | None = None) -> list[tuple[str, ...]]:
    """The table's cells, one tuple per parameter (shared by the plain and the rich terminal)."""
    return [
        (p.name, _shape(p), _static(p), p.dynamic or "-", format_norm(p.grad_norm),
         _cut_by(p) + ("" if p.agree is not False else "  [disagree]"))
        for p in (report.parameters if parameters is None else parameters)
    ]


def plain_table(report: Report, width: int | None = None, all_rows: bool = False) -> str:
    """The aligned table; at ``width``, the last column wraps inside itself between its sites (a
    site, ``op @ file:line``, never splits); above FOLD_ROWS rows, one line for those without a problem."""
    parameters, folded = shown_parameters(report, all_rows)
    if not parameters:  # no row to head: the fold line alone, or nothing
        return folded or ""
    rows = [COLUMNS] + table_rows(report, parameters)
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    indent = sum(widths) + len(_GAP) * len(widths)
    room = None if width is None else max(width - indent, _MIN_LAST_COLUMN)
    lines = []
    for row in rows:
        cells = [cell.rjust(w) if i == 4 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        last = [row[-1]] if room is None or len(row[-1]) <= room else _wrap_cell(row[-1], room)
        lines.append(_GAP.join(cells + [last[0]]).rstrip())
        lines.extend(" " * indent + piece for piece in last[1:])
    if folded:
        lines.append(folded)
    return "\n".join(lines)


def _wrap_cell(cell: str, room: int) -> list[str]:
    """Wrap one "cut by" cell between its sites; a site longer than ``room`` keeps its one line,
    so ``op @ file:line`` stays whole for a reader and for grep."""
    pieces: list[str] = []
    for index, site in enumerate(cell.split(", ")):
        text = site + ("," if index < cell.count(", ") else "")
        if pieces and len(pieces[-1]) + 1 + len(text) <= room:
            pieces[-1] += " " + text
        else:
            pieces.append(text)
    return pieces


def cut_paragraphs(report: Report, api: bool = False) -> list[str]:
    """One plain-words paragraph per cutting (or zeroing) node, then per unused module and disagreement;
    with ``api``, fix lines say ``allow=[...]`` (the Python API's argument), not ``--allow``."""
    # where the real backward raises (one with no line of its own is a note already)
    every = [p.name for p in report.parameters]
    paragraphs = [f"At {site.source}: {site.reason}.\n{fix_line('backward-raises')}"
                  for site in report.backward_raises if site.source]
    paragraphs += [f"A{nonfinite_sentence(site)[1:]}.\n{fix_line(Dynamic.NONFINITE)}" for site in report.nonfinite]
    paragraphs += [fresh_paragraph(source) for source in fresh_tensor_sources(report)]
    paragraphs += [f"The gradient of {flag.layer} is {flag.kind} next to the rest of the model since step {flag.since}: "
                   f"its mean |grad| is {format_norm(flag.ratio)}x the median layer's at the last step."
                   for flag in report.gradient_flags]
    for site in report.cuts:
        victims = [p for p in report.parameters if any(s.node == site.node for s in p.cut_by)]
        where = f" at {site.source}" if site.source else ""
        if site.frames:  # the line lies in a helper: the way there from forward
            where += f" (reached by {' -> '.join(site.frames)})"
        names = [p.name for p in victims]
        zero = bool(victims) and all(p.static == Static.ZERO for p in victims)
        effect = f"gives {name_list(names)} an exactly zero gradient" if zero else f"cuts {name_list(names)} off from the output"
        paragraphs.append(f"{site.op}{where} (node {site.node}) {effect}: {site.reason}."
                          + _fix_for(victims, site_cause(site, zero), every, api, site_words(site)))
    grouped: dict[tuple[str, str], list[ParameterReport]] = {}  # one line per verdict and reason, not per parameter
    diagnosed: dict[tuple[str, str | None, str | None], list[ParameterReport]] = {}
    dry_dynamic = (Dynamic.ZERO, Dynamic.NONFINITE, Dynamic.MISSING, Dynamic.VANISHING)
    for parameter in report.parameters:
        if parameter.static in _GROUPED and parameter.diagnosis:  # over many steps the dynamic word is the truer one
            word = Dynamic.INTERMITTENT if parameter.dynamic == Dynamic.INTERMITTENT else parameter.static
            grouped.setdefault((word, parameter.diagnosis), []).append(parameter)
        elif parameter.agree is False or (parameter.diagnosis
                                          and parameter.static not in (Static.CUT, Static.FROZEN)
                                          and parameter.dynamic in dry_dynamic):
            key = (parameter.static, parameter.dynamic, parameter.diagnosis)
            diagnosed.setdefault(key, []).append(parameter)
    shown_vanishing = 0
    for (static, dynamic, diagnosis), group in diagnosed.items():
        if dynamic == Dynamic.VANISHING:  # one shrink factor per parameter: show the first few places
            shown_vanishing += 1
            if shown_vanishing > _VANISHING_PARAGRAPHS:
                continue
        names = [p.name for p in group]
        cause, words = held_cause(report, group, verdict_cause(dynamic if static == Static.REACHABLE and dynamic
                                                               else static, names))
        if dynamic == Dynamic.VANISHING:  # the summary's measure first, then where the gradient falls most
            diagnosis = f"{group_size(report, group)}; where it falls most: {diagnosis}"
        paragraphs.append(f"{name_list(names)} ({static} / {dynamic}): {sentences(diagnosis)}."
                          + _fix_for(group, cause, every, api, words))
    if shown_vanishing > _VANISHING_PARAGRAPHS:
        hidden = shown_vanishing - _VANISHING_PARAGRAPHS
        paragraphs.append(f"{hidden} more place{'s' if hidden != 1 else ''} where a gradient vanishes: see --json.")
    shown: dict[str, list[ParameterReport]] = {}  # per verdict, the groups past the first few, merged
    for (static, diagnosis), group in grouped.items():
        names = [p.name for p in group]
        verb = "is" if len(names) == 1 else "are"
        if sum(1 for key in grouped if key[0] == static) > _GROUP_PARAGRAPHS and \
                [key for key in grouped if key[0] == static].index((static, diagnosis)) >= _GROUP_PARAGRAPHS - 1:
            shown.setdefault(static, []).extend(group)
            continue
        paragraphs.append(f"{name_list(names)} {verb} {_GROUPED[static]}: {diagnosis}."
                          + _fix_for(group, verdict_cause(static, names), every, api))
    for static, group in shown.items():  # eight experts no token reached: one paragraph, not eight
        names = [p.name for p in group]
        paragraphs.append(f"{name_list(names)} are {_GROUPED[static]} too, each for its own module's reason "
                          "(--json has every one)." + _fix_for(group, verdict_cause(static, names), every, api))
    return paragraphs


def frozen_holders(report: Report, group: list[ParameterReport]) -> list[str]:
    """The frozen parameters that hold ``group``'s gradients at exactly zero (their ``held_by``), when
    every holder is frozen: the zero is then for good, and unfreezing them is the fix."""
    frozen = {p.name for p in report.parameters if p.static == Static.FROZEN}
    held = sorted({name for parameter in group for name in parameter.held_by})
    return held if held and all(name in frozen for name in held) else []


def held_cause(report: Report, group: list[ParameterReport], cause: str) -> tuple[str, dict[str, str] | None]:
    """A zero group's cause, made ``frozen-holder`` (with the holders' names) when frozen weights hold it."""
    holders = frozen_holders(report, group) if cause == Dynamic.ZERO else []
    if not holders:
        return cause, None
    return "frozen-holder", {"holders": ", ".join(f"`{name}`" for name in holders)}


_SENTENCE_START = re.compile(r"(?<=\.\s)([a-z])")  # a lowercase letter that opens a sentence


def sentences(text: str) -> str:
    """Each sentence of a reason starts with a capital, as a reader expects (joined parts may not);
    text inside backticks is code and is left alone."""
    parts = text.split("`")
    parts[::2] = [_SENTENCE_START.sub(lambda found: found[1].upper(), part) for part in parts[::2]]
    return "`".join(parts)


def _fix_for(group: list[ParameterReport], cause: str, every: list[str], api: bool = False,
             words: dict[str, str] | None = None) -> str:
    """The fix line that ends a group's paragraph: only for a group that fails the check (or would,
    but for --allow)."""
    failing = [p for p in group if p.problem or p.allowed]
    if not failing:
        return ""
    return "\n" + fix_line(cause, [p.name for p in failing], every, api=api, words=words)


# Verdicts whose parameters share one paragraph per reason: how the paragraph calls them.
_GROUPED = {Static.UNUSED: "unused", Static.UNKNOWN: "unknown",
            Static.UNREGISTERED: "trained by no optimizer",
            Dynamic.INTERMITTENT: "used on some steps only"}


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
_KIND_WORDS = {Static.ZERO: "with an exactly zero gradient"}
_VANISHING_PARAGRAPHS = 3  # vanishing explanations shown in the text; the JSON has all
_GROUP_PARAGRAPHS = 3  # paragraphs per grouped verdict (unused, ...); past it, the rest share one


def _largest_norm(report: Report) -> float:
    return max((p.grad_norm for p in report.parameters if p.grad_norm is not None and math.isfinite(p.grad_norm)),
               default=0.0)


def _smallest_vanishing(parameters: list[ParameterReport]) -> float | None:
    return min((p.grad_norm for p in parameters if p.dynamic == Dynamic.VANISHING and p.grad_norm is not None),
               default=None)


def vanishing_size(report: Report) -> str:
    """`` (smallest norm 0.1511, 1/400 of the largest's 60.4)``: how small the smallest vanishing
    gradient is, next to the largest in the model (what "vanishing" is measured against)."""
    smallest = _smallest_vanishing(report.parameters)
    if smallest is None:
        return ""
    largest = _largest_norm(report)
    if smallest <= 0 or largest <= smallest:
        return f" (smallest norm {format_norm(smallest)})"
    return f" (smallest norm {format_norm(smallest)}, {_fraction(smallest / largest)} of the largest's {format_norm(largest)})"


def group_size(report: Report, group: list[ParameterReport]) -> str:
    """``its gradient norm is 1/6100 of the largest's (0.0099 vs 60.4)``: a vanishing group's size, in
    the summary's own measure, so the paragraph and the summary give one ratio."""
    smallest, largest = _smallest_vanishing(group), _largest_norm(report)
    if smallest is None or smallest <= 0 or largest <= smallest:
        return "its gradient is vanishingly small next to the largest in the model"
    noun = "its gradient norm is" if len(group) == 1 else "the smallest of their gradient norms is"
    return f"{noun} {_fraction(smallest / largest)} of the largest's ({format_norm(smallest)} vs {format_norm(largest)})"


def _fraction(ratio: float) -> str:
    """0.0025 -> ``1/400``; 2.9e-7 -> ``1/3.4e+06``: two significant digits."""
    denominator = float(f"{1 / ratio:.2g}")
    return f"1/{denominator:.0f}" if denominator < 1e5 else f"1/{denominator:.1e}"


def verdict_of(parameter: ParameterReport) -> str:
    """The one word that says what is wrong (or right) with a parameter: the static verdict,
    unless the graph says reachable, then what the real backward found; "not optimized" when the
    gradient is fine but no optimizer group applies it."""
    word = parameter.dynamic if parameter.static == Static.REACHABLE and parameter.dynamic else parameter.static
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
        return f"nothing to train: the model has no parameters ({NO_PARAMETERS_VERIFIED})"
    if report.everything_frozen:
        return f"problem: {NOTHING_LEARNS}"
    problems = report.problems
    frozen = report.counts()[Static.FROZEN]
    tail = ""
    allowed = allowed_problems(report)
    if allowed:
        kinds = {verdict_of(p) for p in allowed}  # "4 allowed (cut)", "5 allowed (4 cut, 1 unused)"
        tail += f"; {len(allowed)} allowed ({kinds.pop() if len(kinds) == 1 else _tally(allowed, words={})})"
    if frozen:
        tail += f"; {frozen} frozen"
    vanishing = [p for p in report.parameters if p.dynamic == Dynamic.VANISHING]
    if vanishing:
        tail += f"; {len(vanishing)} vanishing{vanishing_size(report)}"
    unknown = sum(1 for p in report.parameters if p.static == Static.UNKNOWN)
    if unknown:  # the backward alone spoke for these: say so next to any "ok"
        why = "nothing captured" if report.trace.method == "none" else "an op that never ran decides them"
        tail += f"; {unknown} static verdict{'s' if unknown > 1 else ''} unknown ({why})"
    fresh = fresh_tensor_sources(report)
    if fresh:  # not a parameter, so no row: the summary still names the line
        tail += f"; {len(fresh)} layer{'s' if len(fresh) > 1 else ''} built inside forward (at {fresh[0]})"
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
    held = [p for p in report.parameters if p.dynamic == Dynamic.HELD]
    if held:  # not a problem, but a reader of the table should know why those rows start at zero
        latest = max(p.learns_from_step or 2 for p in held)
        tail += f"; {len(held)} held by zero-initialized weights (learn from step {'2' if latest == 2 else f'2-{latest}'})"
    unconfirmed = report.unconfirmed
    if report.status == ReportStatus.NOT_VERIFIED and unconfirmed:
        return (f"not verified: {len(unconfirmed)} of {total} parameters got an exactly zero gradient that one step "
                f"cannot confirm (a zero-initialized weight may hold them until step 2){tail}")
    if report.status == ReportStatus.NOT_VERIFIED:
        return f"{not_verified(report)}{tail}"
    if not report.verified and not report.static_only:
        tail += f"; {not_verified(report)}"
    if not problems and report.static_only:
        return (f"static only (--no-backward): {_every_trainable(total - frozen, 'has', 'have')} a differentiable "
                f"path to the output; no backward ran to confirm it{tail}")
    if not problems and report.status == ReportStatus.STRUCTURE_VERIFIED:
        reached = "no unexpected problems" if allowed else \
            f"the backward reaches {_every_trainable(total - frozen, '', '').rstrip()}"
        return f"structure verified on meta: {reached}; {STRUCTURE_UNSEEN}{tail}"
    if not problems:
        if allowed:
            return f"ok: no unexpected problems{tail}"
        return f"ok: {_every_trainable(total - frozen, 'gets', 'get')} a gradient{tail}"
    where = ""
    sites = [(p.static, s) for p in problems if p.static in (Static.CUT, Static.ZERO) for s in p.cut_by]
    if sites:  # a real cut first: it is the one that starves
        static, first = next((item for item in sites if item[0] == Static.CUT), sites[0])
        label = "first cut" if static == Static.CUT else "first zero"
        where = f" ({label}: {first.op} @ {first.source or first.node})"
    return f"problem: {len(problems)} of {total} parameters will not learn: {_tally(problems)}{where}{tail}"


def _every_trainable(count: int, singular: str, plural: str) -> str:
    """``all 6 trainable parameters get``; ``the one trainable parameter gets``."""
    return f"the one trainable parameter {singular}" if count == 1 else f"all {count} trainable parameters {plural}"


NO_PARAMETERS_VERIFIED = "its forward ran; with no parameter there is no gradient to verify"
STRUCTURE_UNSEEN = ("not verified (a meta run has no values): exact zeros such as a frozen all-zero weight's, NaN or "
                    "inf, vanishing gradients")
NOTHING_LEARNS = "nothing will learn: every parameter is frozen (loss.backward() would raise)"
NOT_VERIFIED = "not verified: no backward ran (give --input-size or example_inputs())"
_NO_INPUTS_FOR = re.compile(r"no example inputs for (forward\(.*?\)):")  # fxflow.prepare.inputs.no_inputs_note


def not_verified(report: Report) -> str:
    """Why nothing is verified, naming forward's arguments when a note has them (what to give inputs for)."""
    for note in report.trace.notes + report.notes:
        found = _NO_INPUTS_FOR.match(note)
        if found:
            return f"not verified: no backward ran for {found[1]} (give --input-size or example_inputs())"
    return NOT_VERIFIED


_CAPTURE_FAILED = re.compile(r"^(symbolic_trace|runtime|torch\.export) failed: ")  # fxflow.capture's notes


def shown_notes(report: Report, debug: bool = False) -> list[str]:
    """The notes a reader is shown: why an earlier capture failed matters only when none worked
    (``--debug`` and the JSON keep it whenever one failed)."""
    notes = report.trace.notes + report.notes
    if debug or report.trace.method == "none":
        return notes
    return [note for note in notes if not _CAPTURE_FAILED.match(note)]


def render_text(report: Report, width: int | None = None, all_rows: bool = False, api: bool = False,
                debug: bool = False) -> str:
    """The whole text report; ``width`` wraps paragraphs and the table's last column (None: no wrap);
    ``all_rows`` lists every parameter even above FOLD_ROWS; ``api``: fix lines speak the Python API;
    ``debug``: every note, why each failed capture failed too."""
    parts = [f"fxflow check {report.target}  [trace: {report.trace.method}, {report.trace.nodes} nodes]"]
    table = plain_table(report, width, all_rows)
    if table:
        parts.extend(["", table])
    paragraphs = cut_paragraphs(report, api)
    notes = ([f"loss: {report.loss}"] if report.loss else []) + [f"note: {note}" for note in shown_notes(report, debug)]
    for block in (paragraphs, notes):
        if block:
            parts.append("")
            parts.extend(wrap_paragraph(text, width) for text in block)
    parts.extend(["", wrap_paragraph(summary_line(report), width)])
    return "\n".join(parts)


def wrap_paragraph(text: str, width: int | None, indent: str = "") -> str:
    """``text`` wrapped at ``width``; ``op @ file:line`` never splits, so a log grep still finds it."""
    if "\n" in text:  # a paragraph and its fix line: each wraps on its own, the fix's lines indented
        first, _, rest = text.partition("\n")
        return wrap_paragraph(first, width) + "\n" + wrap_paragraph(rest, width, indent="  ")
    if width is None or len(text) <= width:
        return text
    # textwrap never breaks at a no-break space: not inside `op @ file:line`, nor inside `code`
    joined = re.sub(r"`[^`]*`", lambda code: code[0].replace(" ", "\u00a0"), text.replace(" @ ", "\u00a0@\u00a0").replace("--allow '", "--allow\u00a0'"))
    return textwrap.fill(joined, width, break_long_words=False, break_on_hyphens=False,
                         subsequent_indent=indent).replace("\u00a0", " ")
