"""Every cause of a missing gradient from issue 2, checked against a real backward.

For each fixture model: the static verdict of every parameter must match what a real backward
(run here, independently, on a copy) leaves in ``.grad``; the cut must be named by the right op
at the planted line; dynamic verdicts must match ones computed here from the same loss; and
the check must leave the model exactly as it was.
"""
from __future__ import annotations

import pytest
import torch

import fxflow
from tests.models import (STATIC_PROMISE, ModelState, grad_kind, marker_line, projection, real_grads,
                          reference_dynamic, split_source)
from tests.models.causes import ALL_CASES, Case


def run_case(case: Case):
    torch.manual_seed(0)
    model = case.model()
    inputs = case.inputs()
    before = ModelState.of(model)
    report = fxflow.check(model, inputs, loss_fn=projection)
    ModelState.of(model).assert_same(before)
    return model, inputs, report


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda case: case.name)
def test_static_verdicts_match_real_backward(case: Case) -> None:
    model, inputs, report = run_case(case)
    assert report.trace.method != "none", report.trace.notes
    grads = real_grads(model, inputs, loss_fn=projection)
    assert [p.name for p in report.parameters] == list(grads)
    for parameter in report.parameters:
        assert STATIC_PROMISE[parameter.static] == grad_kind(grads[parameter.name]), parameter
        assert parameter.agree is True, parameter
        if parameter.name.startswith(case.prefix):
            assert parameter.static == case.a_verdict, parameter
        else:
            assert parameter.static == "reachable", parameter


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda case: case.name)
def test_dynamic_verdicts_and_norms_match_reference(case: Case) -> None:
    model, inputs, report = run_case(case)
    grads = real_grads(model, inputs, loss_fn=projection)
    expected = reference_dynamic(grads)
    for parameter in report.parameters:
        assert parameter.dynamic == expected[parameter.name], parameter.name
        grad = grads[parameter.name]
        if grad is None:
            assert parameter.grad_norm is None
        else:
            assert parameter.grad_norm == pytest.approx(float(grad.double().norm()), rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("case", [c for c in ALL_CASES if c.ops], ids=lambda case: case.name)
def test_cut_names_op_and_planted_line(case: Case) -> None:
    _, _, report = run_case(case)
    expected_lines = {marker_line(case.model, marker) for marker in case.markers}
    victims = [p for p in report.parameters if p.name.startswith(case.prefix)]
    assert victims
    for parameter in victims:
        assert {site.op for site in parameter.cut_by} == set(case.ops), parameter.cut_by
        assert {split_source(site.source) for site in parameter.cut_by} == expected_lines, parameter.cut_by
        for site in parameter.cut_by:
            assert len(site.reason.split()) >= 6, site.reason  # a sentence, not a code


@pytest.mark.parametrize("case", [c for c in ALL_CASES if not c.ops], ids=lambda case: case.name)
def test_healthy_or_dry_without_cut_names_no_site(case: Case) -> None:
    _, _, report = run_case(case)
    assert all(not p.cut_by for p in report.parameters)


def test_no_grad_reason_names_the_with_statement() -> None:
    from tests.models.causes import NoGrad

    _, _, report = run_case(Case(NoGrad, "cut"))
    site = report.parameter("a.weight").cut_by[0]
    path, line = marker_line(NoGrad, "plant-no_grad")
    assert site.source.endswith(f":{line}") and f":{line})" in site.reason  # "(entered at FILE:LINE)": the `with` line


def test_unused_says_never_called_and_discarded_says_discarded() -> None:
    from tests.models.causes import Discarded, Unused

    _, _, unused = run_case(Case(Unused, "unused"))
    _, _, discarded = run_case(Case(Discarded, "unused"))
    assert "never" in unused.parameter("c.weight").diagnosis
    assert "reaches an output" in discarded.parameter("a.weight").diagnosis
