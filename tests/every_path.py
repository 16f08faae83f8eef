"""One model checked on every capture method that captures it, each report against a real plain
backward of the same model (shared by the tests of the zoo's failure classes and of the run-time
capture's backward)."""
from __future__ import annotations

from typing import Any

import torch

import fxflow
from fxflow.capture import METHODS
from gradtruth import assert_agrees, real_dynamic, real_grads


def reports_on_every_path(model: torch.nn.Module, inputs: torch.Tensor | dict[str, Any]) -> list[fxflow.Report]:
    """The report of each capture method that captures ``model`` on ``inputs`` (one tensor, or a
    dict passed as ``model(**inputs)``). Each must agree with a plain backward: static verdicts,
    and for one tensor the dynamic verdicts too, read straight from ``.grad``."""
    args, keywords = ((), inputs) if isinstance(inputs, dict) else ((inputs,), None)
    truth = real_grads(model, args, keywords)
    dynamic = None if keywords else real_dynamic(model, args)
    reports = []
    for method in METHODS:
        report = fxflow.check(model, inputs, capture_methods=[method])
        if report.trace.method == "none":
            continue
        assert_agrees(report, truth)
        if dynamic is not None:
            assert {p.name: p.dynamic for p in report.parameters} == dynamic, method
        reports.append(report)
    return reports
