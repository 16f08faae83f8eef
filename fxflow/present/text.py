"""The terminal report: a table like the seed's printout, one paragraph per cut, a summary line."""
from __future__ import annotations

from ..report import ParameterReport, Report

_COLUMNS = ("parameter", "shape", "static", "dynamic", "grad norm", "cut by")


def _shape(parameter: ParameterReport) -> str:
    return "x".join(str(s) for s in parameter.shape) or "scalar"


def _norm(parameter: ParameterReport) -> str:
    return "-" if parameter.grad_norm is None else f"{parameter.grad_norm:.6f}"


def _cut_by(parameter: ParameterReport) -> str:
    return ", ".join(f"{site.op} @ {site.source or '?'}" for site in parameter.cut_by)


def _static(parameter: ParameterReport) -> str:
    return parameter.static + (" (allowed)" if parameter.allowed else "")


def table_rows(report: Report) -> list[tuple[str, ...]]:
    """The table's cells, one tuple per parameter (shared by the plain and the rich terminal)."""
    return [
        (p.name, _shape(p), _static(p), p.dynamic or "-", _norm(p), _cut_by(p) + ("" if p.agree is not False else "  [disagree]"))
        for p in report.parameters
    ]


def plain_table(report: Report) -> str:
    rows = [_COLUMNS] + table_rows(report)
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS) - 1)]
    lines = []
    for row in rows:
        cells = [cell.rjust(w) if i == 4 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells + [row[-1]]).rstrip())
    return "\n".join(lines)


def cut_paragraphs(report: Report) -> list[str]:
    """One plain-words paragraph per cutting (or zeroing) node, then per unused module and disagreement."""
    paragraphs = []
    for site in report.cuts:
        victims = [p for p in report.parameters if any(s.node == site.node for s in p.cut_by)]
        where = f" at {site.source}" if site.source else ""
        names = _names([p.name for p in victims])
        if victims and all(p.static == "zero" for p in victims):
            effect = f"gives {names} an exactly zero gradient"
        else:
            effect = f"cuts {names} off from the output"
        paragraphs.append(f"{site.op}{where} (node {site.node}) {effect}: {site.reason}.")
    unused: dict[str, list[str]] = {}  # one line per reason, not per parameter
    diagnosed: dict[tuple[str, str | None, str | None], list[str]] = {}
    for parameter in report.parameters:
        if parameter.static == "unused" and parameter.diagnosis:
            unused.setdefault(parameter.diagnosis, []).append(parameter.name)
        elif parameter.agree is False or (parameter.diagnosis and parameter.static not in ("cut", "frozen")
                                          and parameter.dynamic in ("zero", "nonfinite", "missing")):
            key = (parameter.static, parameter.dynamic, parameter.diagnosis)
            diagnosed.setdefault(key, []).append(parameter.name)
    for (static, dynamic, diagnosis), names in diagnosed.items():
        paragraphs.append(f"{_names(names)} ({static} / {dynamic}): {diagnosis}.")
    for diagnosis, names in unused.items():
        verb = "is" if len(names) == 1 else "are"
        paragraphs.append(f"{_names(names)} {verb} unused: {diagnosis}.")
    return paragraphs


def _names(names: list[str], limit: int = 6) -> str:
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f" and {len(names) - limit} more"


_KIND_WORDS = {"zero": "with an exactly zero gradient"}


def summary_line(report: Report) -> str:
    """One line: how many parameters are dry and why."""
    total = len(report.parameters)
    if total == 0:
        return "no parameters to check"
    problems = report.problems
    counts = report.counts()
    frozen = counts["frozen"]
    tail = f"; {frozen} frozen" if frozen else ""
    disagreements = sum(1 for p in report.parameters if p.agree is False)
    if disagreements:
        tail += f"; {disagreements} static/runtime disagreement{'s' if disagreements > 1 else ''}"
    if not problems:
        return f"ok: all {total - frozen} trainable parameters get a gradient{tail}"
    kinds = {}
    for parameter in problems:
        kind = parameter.static if parameter.static != "reachable" else parameter.dynamic
        kinds[kind] = kinds.get(kind, 0) + 1
    detail = ", ".join(f"{n} {_KIND_WORDS.get(kind, kind)}" for kind, n in sorted(kinds.items()))
    where = ""
    sites = [(p.static, s) for p in report.parameters if p.static in ("cut", "zero") for s in p.cut_by]
    if sites:  # a real cut first: it is the one that starves
        static, first = next((item for item in sites if item[0] == "cut"), sites[0])
        label = "first cut" if static == "cut" else "first zero"
        where = f" ({label}: {first.op} @ {first.source or first.node})"
    return f"problem: {len(problems)} of {total} parameters will not learn: {detail}{where}{tail}"


def render_text(report: Report, width: int = 100) -> str:
    """The whole text report."""
    parts = [f"fxflow check {report.target}  [trace: {report.trace.method}, {report.trace.nodes} nodes]", ""]
    parts.append(plain_table(report))
    paragraphs = cut_paragraphs(report)
    if paragraphs:
        parts.append("")
        parts.extend(paragraphs)
    notes = report.trace.notes + report.notes
    if notes:
        parts.append("")
        parts.extend(f"note: {note}" for note in notes)
    parts.extend(["", summary_line(report)])
    return "\n".join(parts)
