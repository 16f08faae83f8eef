"""``torch.cond`` through torch.export: both branches inlined, joined by the branch the predicate picks.

Export keeps a ``cond`` with one subgraph per branch; fxflow inlines both and joins each pair of
results with ``where(pred, ...)``, whose backward is cond's own: the taken branch gets the
gradient, the other one zeros, and so does an operand the taken branch does not differentiate. Every verdict is checked against a real backward through the real
``torch.cond``, with the predicate true and false.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import fxflow
from fxflow.capture.export import cond
from gradtruth import assert_agrees, real_dynamic, real_grads


class Branchy(nn.Module):
    """A learned gate picks a branch; the false branch also detaches its result."""

    def __init__(self, gate: float) -> None:
        super().__init__()
        self.gate = nn.Parameter(torch.tensor(gate))
        self.inp = nn.Linear(4, 4)
        self.when_true = nn.Linear(4, 4)
        self.when_false = nn.Linear(4, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.inp(x)
        chosen = torch.cond(self.gate > 0, lambda h: self.when_true(h), lambda h: self.when_false(h).detach() + h,
                            (hidden,))
        return self.out(chosen)


@pytest.mark.parametrize("gate", [1.0, -1.0], ids=["true", "false"])
def test_both_branches_are_in_the_graph_and_every_verdict_matches_the_real_cond(gate: float) -> None:
    torch.manual_seed(0)
    model, inputs = Branchy(gate), (torch.randn(3, 4),)
    report = fxflow.check(model, inputs)
    assert report.trace.method == "torch.export"
    assert_agrees(report, real_grads(model, inputs))
    assert {p.name: p.dynamic for p in report.parameters} == real_dynamic(model, inputs)
    statics = {p.name: p.static for p in report.parameters}
    assert statics["gate"] == "cut"  # the predicate is a comparison: no gradient
    assert statics["when_true.weight"] == "reachable"  # some batch takes the true branch
    assert statics["when_false.weight"] == "zero"  # detached in its branch: cond's backward gives it zeros
    (site,) = report.parameter("when_false.weight").cut_by
    assert site.op == "cond" and "neither branch of torch.cond" in site.reason
    ops = [data.get("op") for _, data in report.graph.nodes(data=True)]
    assert ops.count("linear") == 4 and "cond" in ops  # inp, both branches, out; and the join


def test_the_join_has_conds_backward() -> None:
    pred = torch.tensor(False)
    if_true, if_false = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    unread = torch.ones(2, requires_grad=True)  # an operand neither result depends on
    cond(pred, if_true, if_false, unread).sum().backward()
    assert torch.equal(if_true.grad, torch.zeros(3)) and torch.equal(if_false.grad, torch.ones(3))
    assert torch.equal(unread.grad, torch.zeros(2))  # zeros, as torch.cond gives, not None
