"""The terminal report's words: one paragraph per cut naming op, line and victims; a true summary."""
from __future__ import annotations

import torch

import fxflow
from tests.models import marker_line, real_grads
from tests.models.causes import Detach, Round, TwoCutsInParallel, Unused


def report_of(cls):
    torch.manual_seed(0)
    model = cls()
    x = torch.randn(5, 6)
    return model, x, fxflow.check(model, x)


def test_cut_paragraph_names_op_line_and_victims() -> None:
    model, x, report = report_of(Detach)
    text = report.table()
    _, line = marker_line(Detach, "plant-detach")
    missing = [n for n, g in real_grads(model, (x,)).items() if g is None]  # named_parameters order
    paragraph = next(l for l in text.splitlines() if l.startswith("detach at "))
    assert f"causes.py:{line}" in paragraph
    assert "cuts " + ", ".join(missing) + " off from the output" in paragraph
    assert paragraph.endswith(".")


def test_zero_paragraph_does_not_call_it_a_cut() -> None:
    _, _, report = report_of(Round)
    text = report.table()
    paragraph = next(l for l in text.splitlines() if l.startswith("round at "))
    assert "exactly zero gradient" in paragraph and "cuts" not in paragraph
    assert "first zero: round" in report.summary()


def test_parallel_cuts_get_a_paragraph_each_and_summary_names_first() -> None:
    _, _, report = report_of(TwoCutsInParallel)
    lines = report.table().splitlines()
    assert any(l.startswith("detach at ") for l in lines) and any(l.startswith("gt at ") for l in lines)
    _, left = marker_line(TwoCutsInParallel, "plant-left")
    assert f"first cut: detach @ tests/models/causes.py:{left}" in report.summary() or \
        report.summary().endswith(f"causes.py:{left})")


def test_unused_parameters_share_one_line_per_module() -> None:
    _, _, report = report_of(Unused)
    lines = [l for l in report.table().splitlines() if "unused:" in l]
    assert lines == ["c.weight, c.bias are unused: its module c is never called in forward."]


def test_summary_counts_match_the_report() -> None:
    for cls in (Detach, Round, Unused, TwoCutsInParallel):
        _, _, report = report_of(cls)
        problems = len(report.problems)
        assert report.summary().startswith(f"problem: {problems} of {len(report.parameters)} parameters")
