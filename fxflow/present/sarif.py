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
from .findings import BACKWARD_RAISES, NONFINITE_ORIGIN, RULES, ZERO_GRADIENT, Finding, findings

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"

# rule id -> (readable name, help: what to do about it). A name that only differs from the id by
# case is what SARIF1001 warns about; the help is what a code-scanning dashboard shows under the alert.
RULE_NAMES: dict[str, tuple[str, str]] = {
    Static.CUT: ("ParametersCutOffFromOutput",
            "Remove the op at this line from the path to the loss (a detach, .data, an integer cast, a "
            "comparison, a no_grad region), or freeze the parameters on purpose with requires_grad_(False)."),
    Static.ZERO: ("ExactlyZeroDerivative",
             "The op at this line has a derivative of exactly zero (round, sign, a step function): use a "
             "differentiable relaxation or a straight-through estimator."),
    Static.UNUSED: ("ParametersNeverUsed",
               "The attribute defined at this line is never called in forward, or nothing it computes reaches "
               "the output: call it, delete it, or pass --allow for deliberate extras."),
    Dynamic.MISSING: ("NoGradientInRealBackward",
                "A real loss.backward() left .grad as None: see the message for why, and fxflow check for the table."),
    ZERO_GRADIENT: ("ZeroGradientInRealBackward",
                      "A real loss.backward() left exactly zero gradients, made at this line on this batch "
                      "(a dead ReLU, an expert no token reached, a zero mask): check the initialization or routing."),
    Dynamic.NONFINITE: ("NonfiniteGradient",
                  "A real loss.backward() left NaN or inf in .grad: look for log/sqrt/division of zero in forward."),
    Dynamic.VANISHING: ("VanishingGradient",
                  "Gradients far smaller than the largest in the model: check depth, normalization and initialization."),
    BACKWARD_RAISES: ("LossBackwardRaises",
                        "loss.backward() raises at this line: the op has no derivative for an input the gradient "
                        "reaches; detach its input or replace the op."),
    Static.UNREGISTERED: ("TensorNotRegisteredAsParameter",
                     "The attribute defined at this line holds modules in a plain list or a tensor made with "
                     "requires_grad=True: use nn.ModuleList / nn.ModuleDict or nn.Parameter so the optimizer gets it."),
    NONFINITE_ORIGIN: ("NonfiniteValueBornHere",
                         "The op at this line makes the first NaN or inf from finite values (log of a negative number, "
                         "0/0, an overflow, or a derivative that is infinite at 0): guard its input."),
}
INFORMATION_URI = "https://github.com/fxflow/fxflow"


def sarif_log(report: Report, known: Iterable[str] | None = None) -> dict[str, Any]:
    """The SARIF log as a dict; ``known`` (a baseline's parameters) adds ``baselineState``."""
    rule_ids = list(RULES)
    rules = [{"id": rule, "name": RULE_NAMES[rule][0], "shortDescription": {"text": description},
              "fullDescription": {"text": description}, "help": {"text": RULE_NAMES[rule][1]},
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

