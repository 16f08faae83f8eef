"""Findings: a Report cut into the units that CI annotations and code-scanning results show.

One finding per op where the real backward raises; one per cutting (or zeroing) node, at the
user's line that created it; one per group of problem parameters that no node explains (unused
modules, a dead ReLU's exact zeros, NaN), at the model's class; one warning for vanishing gradients. The GitHub and SARIF presenters format these;
a baseline (:mod:`fxflow.present.baseline`) marks the ones it already knows.
"""
from __future__ import annotations

import ast
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Iterable

from ..report import ParameterReport, Report
from ..verdicts import CutSite, DynamicVerdict as Dynamic, StaticVerdict as Static
from .fixes import data_cause, fix_line, site_fix, verdict_cause
from .fresh import fresh_paragraph, fresh_tensor_sources
from .summary import allowed_problems, vanishing_size
from .text import held_cause
from .words import name_list, nonfinite_sentence, sentences, verdict_of

ERROR, WARNING, NOTE = "error", "warning", "note"  # SARIF's level words; GitHub says "notice" for note

# Rule ids that are not a verdict; every other rule id is the verdict it reports. The static zero
# has the id "zero", so the dynamic zero needs a name of its own.
ZERO_GRADIENT, BACKWARD_RAISES, NONFINITE_ORIGIN = "zero-gradient", "backward-raises", "nonfinite-origin"

# rule id -> (short description, level when it fails the check)
RULES: dict[str, tuple[str, str]] = {
    Static.CUT: ("A node of forward cuts parameters off from the output: they never get a gradient", ERROR),
    Static.ZERO: ("Every path from these parameters crosses an op whose derivative is exactly zero", ERROR),
    Static.UNUSED: ("Parameters that forward never uses, or whose results never reach an output", ERROR),
    Dynamic.MISSING: ("The real backward left no gradient in these parameters", ERROR),
    ZERO_GRADIENT: ("The real backward left an exactly zero gradient in these parameters", ERROR),
    Dynamic.NONFINITE: ("The real backward left NaN or inf in these parameters' gradients", ERROR),
    Dynamic.VANISHING: ("Gradients that are vanishingly small next to the largest in the model", WARNING),
    BACKWARD_RAISES: ("The real loss.backward() raises: training stops at its first step", ERROR),
    Static.UNREGISTERED: ("Tensors that learn but that model.parameters() never hands the optimizer", ERROR),
    NONFINITE_ORIGIN: ("Where a NaN or inf is first made from finite values", ERROR),
}


@dataclass
class Finding:
    """One annotation: what rule, how bad, what to say, where, and which parameters it is about."""

    rule: str
    level: str
    message: str
    path: str | None  # relative to the working directory when below it
    line: int | None
    parameters: list[str] = field(default_factory=list)
    known: bool = False  # every failing parameter of it is in the baseline
    fix: str = ""  # "fix: ...", from fxflow.present.fixes: the same line the text report prints


def split_source(source: str | None) -> tuple[str | None, int | None]:
    """``"model.py:15"`` -> ("model.py", 15); a path outside the working directory stays absolute."""
    if not source:
        return None, None
    path, _, line = source.rpartition(":")
    if not path or not line.isdigit():
        return source, None
    return _display(path), int(line)


def _display(path: str) -> str:
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    return absolute if relative.startswith("..") else relative


def target_location(target: str, attribute: str | None = None) -> tuple[str | None, int | None]:
    """The file and line of ``class Name`` / ``def Name`` for a ``file.py:Name`` target, when readable;
    with ``attribute``, the line of the class's ``self.<attribute> = ...``, when it has one."""
    location, _, name = target.rpartition(":")
    if not location.endswith(".py"):  # package.module:Name, imported by the check that made the report
        module = sys.modules.get(location)
        location = getattr(module, "__file__", None) or ""
    if not location.endswith(".py") or not os.path.isfile(location):
        return None, None
    try:
        tree = ast.parse(open(location, encoding="utf-8").read())
    except (OSError, SyntaxError, ValueError):
        return _display(location), None
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return _display(location), _assignment_line(node, attribute) or node.lineno
    return _display(location), None


def _assignment_line(owner: ast.AST, attribute: str | None) -> int | None:
    """The first line inside ``owner`` that assigns ``self.<attribute>``."""
    for node in ast.walk(owner) if attribute else ():
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr == attribute and \
                    isinstance(target.value, ast.Name) and target.value.id == "self":
                return node.lineno
    return None


def _finding_location(report: Report, verdict: str, parameters: list[ParameterReport],
                      target: tuple[str | None, int | None]) -> tuple[str | None, int | None]:
    """Where a finding no cut site explains points: an exact zero at the op that zeroed it, an
    unused parameter at the line that defines its attribute, the rest at the model's class."""
    if verdict == Dynamic.ZERO:
        where = parameters[0].where  # the op that zeroed it (fxflow.diagnose.localize)
        if where is not None and where.source:
            return split_source(where.source)
    if verdict in (Static.UNUSED, Static.UNREGISTERED):  # the line defining the attribute
        path, line = target_location(report.target, re.split(r"[.\[]", parameters[0].name, maxsplit=1)[0])
        if path is not None:
            return path, line
    return target


def findings(report: Report, known: Iterable[str] = ()) -> list[Finding]:
    """The report's findings, in a stable order; ``known``: names of problem parameters a baseline accepts."""
    known = set(known)
    failing = {p.name for p in report.problems}
    allowed = {p.name for p in allowed_problems(report)}
    result: list[Finding] = []
    target_path, target_line = target_location(report.target)
    every = [p.name for p in report.parameters]
    for site in report.backward_raises:  # about no parameter: neither --allow nor a baseline can accept it
        path, line = split_source(site.source) if site.source else (target_path, target_line)
        message = site.reason if site.source else f"loss.backward() raises {site.reason}"
        result.append(Finding(BACKWARD_RAISES, ERROR, message, path, line, fix=fix_line("backward-raises")))
    explained: set[str] = set()
    for site in report.cuts:
        victims = [p for p in report.parameters if any(s.node == site.node for s in p.cut_by)
                   and p.static != Static.FROZEN]
        if not victims:
            continue
        explained.update(p.name for p in victims)
        zero = all(p.static == Static.ZERO for p in victims)
        names = name_list([p.name for p in victims])
        effect = f"gives {names} an exactly zero gradient" if zero else f"cuts {names} off from the output"
        path, line, via = _in_checked_file(site, target_path)
        finding = Finding(Static.ZERO if zero else Static.CUT, ERROR, f"{site.op}{via} {effect}: {site.reason}", path, line,
                          [p.name for p in victims], fix=site_fix(site, [p.name for p in victims if not p.allowed], every, zero))
        result.append(_leveled(finding, failing, allowed, known))
    groups: dict[tuple[str, str | None], list[ParameterReport]] = {}
    for parameter in report.parameters:
        if parameter.name in explained or not (parameter.problem or parameter.name in allowed):
            continue
        groups.setdefault((verdict_of(parameter), parameter.diagnosis), []).append(parameter)
    for (verdict, diagnosis), parameters in groups.items():
        path, line = _finding_location(report, verdict, parameters, (target_path, target_line))
        rule = ZERO_GRADIENT if verdict == Dynamic.ZERO else str(verdict)
        rule = rule if rule in RULES else Dynamic.MISSING
        verb = "is" if len(parameters) == 1 else "are"
        message = f"{name_list([p.name for p in parameters])} {verb} {verdict}" + (f": {sentences(diagnosis)}" if diagnosis else "")
        names = [p.name for p in parameters]
        cause, words = held_cause(report, parameters, verdict_cause(verdict, names, parameters[0].static))
        unallowed = [p.name for p in parameters if not p.allowed]  # an --allow given already is not offered again
        finding = Finding(rule, ERROR, message, path, line, names, fix=fix_line(cause, unallowed, every, words=words))
        result.append(_leveled(finding, failing, allowed, known))
    for source in fresh_tensor_sources(report):  # no parameter to fail, so a warning at the line
        path, line = split_source(source)
        paragraph, _, fix = fresh_paragraph(source).partition("\n")
        result.append(Finding(Static.UNREGISTERED, WARNING, paragraph.removeprefix(f"At {source} "), path, line, fix=fix))
    for birth in report.nonfinite:  # the parameters it reached are a finding of their own (nonfinite)
        path, line = split_source(birth.source) if birth.source else (target_path, target_line)
        result.append(Finding(NONFINITE_ORIGIN, ERROR, nonfinite_sentence(birth), path, line,
                              fix=fix_line(data_cause(Dynamic.NONFINITE, birth.op), words={"loss": birth.op})))
    vanishing = [p for p in report.parameters if p.dynamic == Dynamic.VANISHING]
    if vanishing:
        path, line = target_path, target_line
        message = (f"{len(vanishing)} of {len(report.parameters)} parameters have vanishing gradients"
                   f"{vanishing_size(report)}: "
                   f"{name_list([p.name for p in vanishing])}")
        result.append(Finding(Dynamic.VANISHING, WARNING, message, path, line, [p.name for p in vanishing],
                              fix=fix_line(Dynamic.VANISHING)))
    return result


def _in_checked_file(site: CutSite, checked: str | None) -> tuple[str | None, int | None, str]:
    """Where a cut's annotation lands: its own line, or, when that lies in a helper outside the checked
    file, the line of the checked file that leads there (from the user's frames); and how to say so."""
    path, line = split_source(site.source)
    if checked is None or path == checked or not site.frames:
        return path, line, ""
    for frame in reversed(site.frames[:-1]):  # the innermost frame in the checked file
        in_file, at = split_source(frame.rpartition(" @ ")[2])
        if in_file == checked:
            chain = " -> ".join(f.partition(" @ ")[0] for f in site.frames)
            return in_file, at, f" at {site.source}, reached from this line ({chain}),"
    return path, line, ""


def _leveled(finding: Finding, failing: set[str], allowed: set[str], known: set[str]) -> Finding:
    """Error when a parameter of it fails the check and is not in the baseline; a note otherwise."""
    fails = [name for name in finding.parameters if name in failing]
    if not fails:
        finding.level = NOTE
        finding.message += " (allowed)" if any(name in allowed for name in finding.parameters) else ""
    elif all(name in known for name in fails):
        finding.level, finding.known = NOTE, True
        finding.message += " (known: in the baseline)"
    return finding
