"""GitHub Actions workflow commands: one ``::error file=...,line=...::`` annotation per finding,
so the cut shows inline on the pull request's diff, at the line that made it.

Escaping follows the workflow-command spec (actions/toolkit ``command.ts``): in the message,
``%`` ``\\r`` ``\\n`` become ``%25`` ``%0D`` ``%0A``; in property values, also ``:`` ``,`` become
``%3A`` ``%2C``. The summary line ends the output as plain text, for the job's log.
"""
from __future__ import annotations

from typing import Iterable

from ..report import Report
from .findings import ERROR, NOTE, WARNING, findings
from .summary import summary_line

_COMMANDS = {ERROR: "error", WARNING: "warning", NOTE: "notice"}


def escape_data(text: str) -> str:
    """A message for a workflow command."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A property value (file, title) for a workflow command."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(report: Report, known: Iterable[str] = ()) -> str:
    """The annotations, one per line, then the summary line; findings a baseline knows are left out."""
    lines = []
    for finding in findings(report, known):
        if finding.known:
            continue
        properties = []
        if finding.path:
            properties.append(f"file={escape_property(finding.path)}")
            if finding.line:
                properties.append(f"line={finding.line}")
        properties.append(f"title={escape_property('fxflow ' + finding.rule)}")
        lines.append(f"::{_COMMANDS[finding.level]} {','.join(properties)}::{escape_data(finding.message + (chr(10) + finding.fix if finding.fix else ''))}")
    lines.append(summary_line(report))
    return "\n".join(lines)
