"""Baselines: accept the problems a codebase already has, fail only on new ones.

``fxflow check TARGET --write-baseline`` records the current problems in ``fxflow-baseline.json``
(or the ``--baseline`` path); ``fxflow check TARGET --baseline fxflow-baseline.json`` then exits 1
only for problems that are not in it. One file holds the baselines of many targets.

A problem's fingerprint is its parameter's qualified name, its verdict (``cut``, ``unused``,
``zero``, or the runtime ``missing``/``zero``/``nonfinite`` of a reachable parameter) and the
sites that cut it as ``op @ file``, without the line number: an edit that moves the cut keeps its
fingerprint; a new cut, another op, another file or another verdict makes a new problem.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import FxflowError
from .findings import split_source
from .words import verdict_of
from ..report import ParameterReport, Report
from ..verdicts import CutSite

FORMAT_VERSION = 1


def fingerprint(parameter: ParameterReport) -> dict[str, Any]:
    """The stable identity of one problem (see the module docstring)."""
    sites = sorted({f"{site.op} @ {split_source(site.source)[0] or '?'}" for site in parameter.cut_by})
    return {"parameter": parameter.name, "verdict": str(verdict_of(parameter)), "cut_by": sites}


def _key(entry: dict[str, Any]) -> str:
    return json.dumps([entry.get("parameter"), entry.get("verdict"), sorted(entry.get("cut_by", []))])


def read_json(path: str, what: str, hint: str | None = None) -> Any:
    """The JSON content of ``path``; a missing or unreadable file is one clear error naming ``what``."""
    if not os.path.isfile(path):
        raise FxflowError(f"{what} {path} does not exist", hint=hint)
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as error:
        raise FxflowError(f"{what} {path} is not readable JSON: {error}") from error


def read(path: str) -> dict[str, Any]:
    """The baseline file's content; a missing or malformed file is a clear error."""
    hint = "record one with --write-baseline"
    data = read_json(path, "baseline", hint)
    if not isinstance(data, dict) or data.get("fxflow_baseline") != FORMAT_VERSION or not isinstance(data.get("targets"), dict):
        raise FxflowError(f"baseline {path} is not an fxflow baseline (version {FORMAT_VERSION})", hint=hint)
    return data


def write(path: str, report: Report) -> int:
    """Record the report's problems under its target (other targets in the file are kept); returns the count."""
    data = read(path) if os.path.exists(path) else {"fxflow_baseline": FORMAT_VERSION, "targets": {}}
    problems = sorted((fingerprint(p) for p in report.problems), key=_key)
    data["targets"][report.target] = problems
    data["targets"] = dict(sorted(data["targets"].items()))
    try:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")
    except OSError as error:
        raise FxflowError(f"cannot write baseline {path}: {error.strerror}") from error
    return len(problems)


@dataclass
class Comparison:
    """The report's problems against a baseline."""

    path: str
    known: list[str] = field(default_factory=list)  # problem parameters the baseline accepts
    new: list[ParameterReport] = field(default_factory=list)  # problems it does not know: these fail
    fixed: list[dict[str, Any]] = field(default_factory=list)  # baseline entries no longer found
    raises: list[CutSite] = field(default_factory=list)  # where loss.backward() raises: no baseline accepts it

    @property
    def ok(self) -> bool:
        return not self.new and not self.raises

    def summary(self) -> str:
        """One line: the baseline's verdict, which decides the exit code."""
        head = f"baseline {self.path}: {len(self.known)} known problem{'s' if len(self.known) != 1 else ''}"
        if self.new:
            names = ", ".join(f"{p.name} ({verdict_of(p)})" for p in self.new[:6])
            more = f" and {len(self.new) - 6} more" if len(self.new) > 6 else ""
            head += f", {len(self.new)} new: {names}{more}"
        else:
            head += ", none new"
        if self.fixed:
            head += f"; {len(self.fixed)} fixed (--write-baseline drops them)"
        if self.raises:  # training stops at its first step: not a deliberate dryness to record
            first = self.raises[0]
            head += f"; loss.backward() raises at {first.op} @ {first.source or first.node}"
        return head

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "known": self.known, "new": [p.name for p in self.new],
                "fixed": [entry.get("parameter") for entry in self.fixed], "ok": self.ok}


def compare(report: Report, path: str) -> Comparison:
    """Split the report's problems into known and new against the baseline at ``path``."""
    entries = read(path)["targets"].get(report.target, [])
    accepted = {_key(entry) for entry in entries}
    comparison = Comparison(path, raises=list(report.backward_raises))
    found = set()
    for parameter in report.problems:
        key = _key(fingerprint(parameter))
        found.add(key)
        if key in accepted:
            comparison.known.append(parameter.name)
        else:
            comparison.new.append(parameter)
    comparison.fixed = [entry for entry in entries if _key(entry) not in found]
    return comparison
