"""SARIF 2.1.0 for code-scanning dashboards (GitHub code scanning, Azure DevOps, ...).

One run, tool ``fxflow`` with one rule per finding kind; one result per finding with its level,
message, location (the user's line, or the model's class) and a ``partialFingerprints`` entry
that ignores line numbers, so a dashboard tracks a cut across edits that move it. With a
baseline, ``baselineState`` says ``unchanged`` for known problems and ``new`` for the rest.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

from .. import __version__
from ..report import Report
from .findings import RULES, Finding, findings

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/fxflow/fxflow"


def sarif_log(report: Report, known: Iterable[str] | None = None) -> dict[str, Any]:
    """The SARIF log as a dict; ``known`` (a baseline's parameters) adds ``baselineState``."""
    rule_ids = list(RULES)
    rules = [{"id": rule, "name": _camel(rule), "shortDescription": {"text": description},
              "defaultConfiguration": {"level": level}}
             for rule, (description, level) in RULES.items()]
    results = [_result(finding, rule_ids.index(finding.rule), report.target, known is not None)
               for finding in findings(report, known or ())]
    run = {"tool": {"driver": {"name": "fxflow", "version": __version__, "informationUri": INFORMATION_URI,
                               "rules": rules}},
           "automationDetails": {"id": f"fxflow/{report.target}/"},
           "results": results}
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}


def sarif_json(report: Report, known: Iterable[str] | None = None) -> str:
    return json.dumps(sarif_log(report, known), indent=2)


def _result(finding: Finding, rule_index: int, target: str, with_baseline: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"ruleId": finding.rule, "ruleIndex": rule_index, "level": finding.level,
                              "message": {"text": finding.message}}
    if finding.path:
        location: dict[str, Any] = {"artifactLocation": {"uri": finding.path.replace("\\", "/")}}
        if finding.line:
            location["region"] = {"startLine": finding.line}
        result["locations"] = [{"physicalLocation": location}]
    key = "\n".join([target, finding.rule, finding.path or "", *sorted(finding.parameters)])
    result["partialFingerprints"] = {"fxflowFinding/v1": hashlib.sha256(key.encode()).hexdigest()[:32]}
    if with_baseline:
        result["baselineState"] = "unchanged" if finding.known else "new"
    return result


def _camel(rule: str) -> str:
    return "".join(part.capitalize() for part in rule.split("-"))
