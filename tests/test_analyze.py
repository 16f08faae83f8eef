"""The analysis without example inputs (name rules only), and cut attribution in graph order."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import fxflow
from fxflow.static.analyze import analyze
from fxflow.static.annotate import annotate
from fxflow.capture.symbolic import symbolic_capture
from tests.models import STATIC_PROMISE, grad_kind, marker_line, real_grads, split_source
from tests.models.causes import ALL_CASES, Case


def rules_only(model: nn.Module):
    """Static verdicts with no example inputs: nothing runs, every edge comes from name rules."""
    graph_module = symbolic_capture(model)
    annotate(graph_module, model, None)
    return analyze(graph_module, model).verdicts


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda case: case.name)
def test_rules_only_verdicts_match_real_backward(case: Case) -> None:
    """Without inputs fxflow falls back to op names; those verdicts must still match autograd."""
    torch.manual_seed(0)
    model = case.model()
    verdicts = rules_only(model)
    grads = real_grads(model, case.inputs())
    for name, verdict in verdicts.items():
        assert STATIC_PROMISE[verdict.static] == grad_kind(grads[name]), (name, verdict)
        if case.ops and name.startswith(case.prefix):
            assert {site.op for site in verdict.cut_by} == set(case.ops)


class Series(nn.Module):
    """Two cuts one after another: only the first is named (the second cuts nothing live)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.c = nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x).detach()  # first
        h = self.b(h) + self.c(x)
        g = (h > 0).float()  # second
        return self.c(g) + self.c(x)


def test_cut_attribution_names_first_cut_on_each_path_in_order() -> None:
    model = Series()
    report = fxflow.check(model, torch.randn(3, 4))
    grads = real_grads(model, (torch.randn(3, 4),))
    assert grads["a.weight"] is None and grads["b.weight"] is None and grads["c.weight"] is not None
    first, second = marker_line(Series, "first"), marker_line(Series, "second")
    assert [split_source(s.source) for s in report.parameter("a.weight").cut_by] == [first]
    assert [split_source(s.source) for s in report.parameter("b.weight").cut_by] == [second]
    assert [s.op for s in report.cuts] == ["detach", "gt"]  # graph order, stable


class ZeroThenCut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        h = torch.round(self.a(x))  # zero
        keep = torch.where(h > 0, self.b(x), x)  # cut
        return keep + h.detach() * 0 + self.a(x).detach()  # later


def test_every_first_cut_is_named_even_past_a_zero() -> None:
    """a's paths: round then gt; the detach of a(x); round then detach. Each path's first cut."""
    model = ZeroThenCut()
    x = torch.randn(3, 4)
    report = fxflow.check(model, x)
    assert real_grads(model, (x,))["a.weight"] is None
    sites = {split_source(s.source) for s in report.parameter("a.weight").cut_by}
    assert sites == {marker_line(ZeroThenCut, "cut"), marker_line(ZeroThenCut, "later")}
    assert {s.op for s in report.parameter("a.weight").cut_by} == {"gt", "detach"}


@pytest.mark.parametrize("name", ["Item", "Tolist", "BoolIndex"])
def test_data_dependent_ops_run_on_stand_ins_not_name_rules(name: str) -> None:
    """.item(), .tolist() and boolean masks cannot run on fake tensors; they run on real stand-ins,
    so every later node is still decided by autograd, not by op names."""
    from fxflow.static.flow import META_KEY
    from tests.models import causes

    model = getattr(causes, name)()
    graph_module = symbolic_capture(model)
    annotate(graph_module, model, causes.float_input())
    assert all(node.meta[META_KEY].evaluated for node in graph_module.graph.nodes)
