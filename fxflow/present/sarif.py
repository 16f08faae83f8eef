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

from ..version import __version__
from ..report import Report
from ..verdicts import DynamicVerdict as Dynamic, StaticVerdict as Static
from .fixes import CUT_CAUSES, ZERO_CAUSES, fix_text, fix_when
from .findings import BACKWARD_RAISES, NONFINITE_ORIGIN, RULES, ZERO_GRADIENT, Finding, findings

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"

# rule id -> readable name (one that only differs from the id by case is what SARIF1001 warns about)
RULE_NAMES: dict[str, str] = {
    Static.CUT: "ParametersCutOffFromOutput", Static.ZERO: "ExactlyZeroDerivative", Static.UNUSED: "ParametersNeverUsed",
    Dynamic.MISSING: "NoGradientInRealBackward", ZERO_GRADIENT: "ZeroGradientInRealBackward",
    Dynamic.NONFINITE: "NonfiniteGradient", Dynamic.VANISHING: "VanishingGradient",
    BACKWARD_RAISES: "LossBackwardRaises", Static.UNREGISTERED: "TensorNotRegisteredAsParameter",
    NONFINITE_ORIGIN: "NonfiniteValueBornHere",
}
# rule id -> the causes whose fixes its help lists (fxflow.present.fixes: the text report's fix lines)
RULE_CAUSES: dict[str, tuple[str, ...]] = {
    Static.CUT: CUT_CAUSES, Static.ZERO: ZERO_CAUSES, Static.UNUSED: (Static.UNUSED,),
    Dynamic.MISSING: (Dynamic.MISSING,), ZERO_GRADIENT: (Dynamic.ZERO, "ignored-labels"),
    Dynamic.NONFINITE: (Dynamic.NONFINITE,), Dynamic.VANISHING: (Dynamic.VANISHING,), BACKWARD_RAISES: ("backward-raises",),
    Static.UNREGISTERED: ("unregistered-list", Static.UNREGISTERED), NONFINITE_ORIGIN: (Dynamic.NONFINITE, "ignored-labels"),
}


def rule_help(rule: str) -> str:
    """What a dashboard shows under the alert: the fix of each cause the rule covers."""
    causes = RULE_CAUSES[rule]
    if len(causes) == 1:
        return fix_text(causes[0])
    return "The fix depends on the cause: " + " ".join(f"{fix_when(cause)}: {fix_text(cause)}" for cause in causes)


INFORMATION_URI = "https://github.com/fxflow/fxflow"


def sarif_log(report: Report, known: Iterable[str] | None = None) -> dict[str, Any]:
    """The SARIF log as a dict; ``known`` (a baseline's parameters) adds ``baselineState``."""
    rule_ids = list(RULES)
    rules = [{"id": rule, "name": RULE_NAMES[rule], "shortDescription": {"text": description},
              "fullDescription": {"text": description}, "help": {"text": rule_help(rule)},
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
                              "message": {"text": finding.message + (f"\n{finding.fix}" if finding.fix else "")}}
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

