"""The terminal report: a table like the seed's printout, one paragraph per cut, a summary line
(:mod:`fxflow.present.summary`), in the words of :mod:`fxflow.present.words`.

Widths: with a width (the terminal's, or ``COLUMNS``), paragraphs wrap at it and a table wider
than it wraps its last column ("cut by") inside that column; the other columns never wrap, so
the table stays a table. Without a width nothing wraps: one line per parameter and per
paragraph (the API's default; the CLI always passes one, 100 when piped).
"""
from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING

from ..verdicts import DrawReason, DynamicVerdict as Dynamic, OptimizerVerdict, StaticVerdict as Static, ZeroReason
from .fixes import data_cause, fix_line, site_cause, site_words, verdict_cause
from .fresh import fresh_paragraph, fresh_tensor_sources
from .idioms import freeze_line
from .summary import allowed_problems, group_size, summary_line, vanishing_size  # noqa: F401 - this module's face
from .words import format_norm, name_list, nonfinite_sentence, sentences, tally, verdict_of  # noqa: F401

if TYPE_CHECKING:  # pragma: no cover - the report imports this module to present itself
    from ..report import ParameterReport, Report

COLUMNS = ("parameter", "shape", "static", "dynamic", "grad norm", "cut by")  # the table, in any presenter
_GAP = "  "
_MIN_LAST_COLUMN = 16  # narrower than this, wrapping the last column would be unreadable


def _shape(parameter: ParameterReport) -> str:
    return "x".join(str(s) for s in parameter.shape) or "scalar"


def _cut_by(parameter: ParameterReport) -> str:
    if not parameter.cut_by and parameter.optimizer == OptimizerVerdict.NOT_OPTIMIZED:
        return "no optimizer group will update it"  # the gradient arrives; the notes say why it is not applied
    return ", ".join(f"{site.op} @ {site.source or '?'}" for site in parameter.cut_by)


def _static(parameter: ParameterReport) -> str:
    return parameter.static + (" (allowed)" if parameter.allowed else "")


FOLD_ROWS = 40  # above this many parameters the table shows the ones with a problem and one line for the rest


# Where the rest is, in each face's words: the command line's flags, or the Python API's
_EVERY_ROW = {False: "--all lists every row", True: "report.to_json() has every row"}
_JSON = {False: "--json", True: "report.to_json()"}


def shown_parameters(report: Report, all_rows: bool = False, api: bool = False) -> tuple[list[ParameterReport], str | None]:
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
    return shown, f"{more} without a problem ({tally(rest, words={})}): {_EVERY_ROW[api]}"


def table_rows(report: Report, parameters: list[ParameterReport] | None = None) -> list[tuple[str, ...]]:
    """The table's cells, one tuple per parameter (shared by the plain and the rich terminal)."""
    return [
        (p.name, _shape(p), _static(p), p.dynamic or "-", format_norm(p.grad_norm),
         _cut_by(p) + ("" if p.agree is not False else "  [disagree]"))
        for p in (report.parameters if parameters is None else parameters)
    ]


def plain_table(report: Report, width: int | None = None, all_rows: bool = False, api: bool = False) -> str:
    """The aligned table; at ``width``, the last column wraps inside itself between its sites (a
    site, ``op @ file:line``, never splits); above FOLD_ROWS rows, one line for those without a problem."""
    parameters, folded = shown_parameters(report, all_rows, api)
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
    paragraphs += [f"A{nonfinite_sentence(site)[1:]}.\n{fix_line(data_cause(Dynamic.NONFINITE, site.op), words={'loss': site.op})}"
                   for site in report.nonfinite]
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
        unpicked = DrawReason.CHOICE_UNPICKED in parameter.reasons  # a random choice's unpicked outcomes: not verified
        if (parameter.static in _GROUPED or unpicked) and parameter.diagnosis:
            # over many steps (or draws) the dynamic word is the truer one
            word = Dynamic.INTERMITTENT if parameter.dynamic == Dynamic.INTERMITTENT else \
                Dynamic.UNCONFIRMED if unpicked else parameter.static
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
                                                               else static, names, static))
        if dynamic == Dynamic.VANISHING:  # the summary's measure first, then where the gradient falls most
            diagnosis = f"{group_size(report, group)}; where it falls most: {diagnosis}"
        paragraphs.append(f"{name_list(names)} ({static} / {dynamic}): {sentences(diagnosis)}."
                          + _fix_for(group, cause, every, api, words))
    if shown_vanishing > _VANISHING_PARAGRAPHS:
        hidden = shown_vanishing - _VANISHING_PARAGRAPHS
        paragraphs.append(f"{hidden} more place{'s' if hidden != 1 else ''} where a gradient vanishes: see {_JSON[api]}.")
    shown: dict[str, list[ParameterReport]] = {}  # per verdict, the groups past the first few, merged
    for (static, diagnosis), group in grouped.items():
        names = [p.name for p in group]
        verb = "is" if len(names) == 1 else "are"
        if sum(1 for key in grouped if key[0] == static) > _GROUP_PARAGRAPHS and \
                [key for key in grouped if key[0] == static].index((static, diagnosis)) >= _GROUP_PARAGRAPHS - 1:
            shown.setdefault(static, []).extend(group)
            continue
        paragraphs.append(f"{name_list(names)} {verb} {_GROUPED[static]}: {sentences(diagnosis)}."
                          + _fix_for(group, verdict_cause(static, names), every, api))
    for static, group in shown.items():  # eight experts no token reached: one paragraph, not eight
        names = [p.name for p in group]
        paragraphs.append(f"{name_list(names)} are {_GROUPED[static]} too, each for its own module's reason "
                          f"({_JSON[api]} has every one)." + _fix_for(group, verdict_cause(static, names), every, api))
    return paragraphs


def frozen_holders(report: Report, group: list[ParameterReport]) -> list[str]:
    """The frozen parameters that hold ``group``'s gradients at exactly zero (their ``held_by``), when
    every holder is frozen: the zero is then for good, and unfreezing them is the fix."""
    frozen = {p.name for p in report.parameters if p.static == Static.FROZEN}
    held = sorted({name for parameter in group for name in parameter.held_by})
    return held if held and all(name in frozen for name in held) else []


def held_cause(report: Report, group: list[ParameterReport], cause: str) -> tuple[str, dict[str, str] | None]:
    """A zero group's cause, made ``frozen-holder`` (with the holders' names) when frozen weights hold it,
    ``rounding-zero`` when every one is zero up to rounding (``-bias`` when each is a bias), ``ignored-labels`` when it was made at a loss
    given labels."""
    where = group[0].where  # where the zero was made: its file is most likely the model's own
    holders = frozen_holders(report, group) if cause == Dynamic.ZERO else []
    if not holders:
        op = where.op if where else None
        if cause == Dynamic.ZERO and all(ZeroReason.ROUNDING in p.reasons for p in group):
            return "rounding-zero-bias" if all(p.name.endswith("bias") for p in group) else "rounding-zero", None
        return data_cause(cause, op), ({"loss": op} if op else None)
    path = where.source.rpartition(":")[0] if where and where.source else None
    named = []
    for name in holders:
        line = freeze_line(path, name) if path else None
        named.append(f"`{name}`" + (f" (frozen at {path}:{line})" if line else ""))
    return "frozen-holder", {"holders": ", ".join(named)}


def _fix_for(group: list[ParameterReport], cause: str, every: list[str], api: bool = False,
             words: dict[str, str] | None = None) -> str:
    """The fix line that ends a group's paragraph: only for a group that fails the check (or would,
    but for --allow)."""
    failing = [p for p in group if p.problem or p.allowed]
    if not failing:
        return ""
    unallowed = [p.name for p in failing if not p.allowed]  # never offer an --allow that was given already
    return "\n" + fix_line(cause, unallowed, every, api=api, words=words)


# Verdicts whose parameters share one paragraph per reason: how the paragraph calls them.
_GROUPED = {Static.UNUSED: "unused", Static.UNKNOWN: "unknown",
            Static.UNREGISTERED: "trained by no optimizer",
            Dynamic.INTERMITTENT: "used on some steps only", Dynamic.UNCONFIRMED: "not verified"}


_VANISHING_PARAGRAPHS = 3  # vanishing explanations shown in the text; the JSON has all
_GROUP_PARAGRAPHS = 3  # paragraphs per grouped verdict (unused, ...); past it, the rest share one


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
    table = plain_table(report, width, all_rows, api)
    if table:
        parts.extend(["", table])
    paragraphs = cut_paragraphs(report, api)
    notes = ([f"loss: {report.loss}"] if report.loss else []) + [f"note: {note}" for note in shown_notes(report, debug)]
    for block in (paragraphs, notes):
        if block:
            parts.append("")
            parts.extend(wrap_paragraph(text, width) for text in block)
    parts.extend(["", wrap_paragraph(summary_line(report, api), width)])
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
