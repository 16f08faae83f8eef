"""fxflow.watch on a real training step, single process (the 2-rank job is tests/test_distributed.py)."""
import os
import sys

import pytest
import torch
import torch.nn as nn

import fxflow
from fxflow.errors import FxflowError

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
sys.path.insert(0, EXAMPLES)
from seed import Net  # noqa: E402
from transfer_frozen import FrozenBackbone  # noqa: E402

DRY = ["first.weight", "first.bias", "middle.weight", "middle.bias"]


def seed_batch():
    torch.manual_seed(0)
    model = Net()
    return model, torch.randn(16, 10), torch.randint(0, 2, (16,))


def test_watch_reports_the_seed_numbers_with_the_real_loss():
    model, x, y = seed_batch()
    with fxflow.watch(model) as w:
        nn.CrossEntropyLoss()(model(x), y).backward()
    report = w.report
    assert {p.name: p.static for p in report.parameters} == {**{n: "cut" for n in DRY}, "last.weight": "reachable",
                                                             "last.bias": "reachable"}
    assert [p.dynamic for p in report.parameters] == ["missing"] * 4 + ["ok", "ok"]
    # the seed tutorial's printout, to six places
    assert f"{report.parameter('last.weight').grad_norm:.6f}" == "0.184076"
    assert f"{report.parameter('last.bias').grad_norm:.6f}" == "0.079574"
    assert [(s.op, s.source) for s in report.parameter("first.weight").cut_by] == [("detach", "examples/seed.py:15")]
    assert not report.ok and report.target == "Net"


def test_static_verdicts_match_fxflow_check():
    model, x, y = seed_batch()
    with fxflow.watch(model) as w:
        nn.CrossEntropyLoss()(model(x), y).backward()
    checked = fxflow.check(model, x)
    assert [(p.name, p.static, p.cut_by) for p in w.report.parameters] == \
        [(p.name, p.static, p.cut_by) for p in checked.parameters]


def test_stale_grads_are_not_mistaken_for_this_step_and_come_back_summed():
    model, x, y = seed_batch()
    nn.CrossEntropyLoss()(model(x), y).backward()  # history: every layer but first/middle has a grad
    model.first.weight.grad = torch.full_like(model.first.weight, 3.0)  # stale grad on a dry layer
    stale = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    with fxflow.watch(model) as w:
        nn.CrossEntropyLoss()(model(x), y).backward()
    assert w.report.parameter("first.weight").dynamic == "missing"  # the stale 3.0 is not this step's flow
    assert w.report.parameter("last.weight").grad_norm == pytest.approx(0.184076, abs=1e-6)
    # afterwards: exactly what plain autograd accumulation would have left
    assert torch.equal(model.first.weight.grad, stale["first.weight"])
    assert model.first.bias.grad is None
    assert torch.allclose(model.last.weight.grad, 2 * stale["last.weight"])


def test_no_backward_is_refused_with_a_clear_error():
    model, x, _ = seed_batch()
    with fxflow.watch(model) as w:
        model(x)
    with pytest.raises(FxflowError, match=r"no backward ran inside fxflow.watch.*loss.backward\(\)"):
        w.report
    with fxflow.watch(model) as w:
        pass
    with pytest.raises(FxflowError, match="no forward of the watched model"):
        w.report


def test_report_inside_the_block_is_refused():
    model, x, _ = seed_batch()
    with fxflow.watch(model) as w:
        model(x).sum().backward()
        with pytest.raises(FxflowError, match="once the fxflow.watch block has ended"):
            w.report


def test_everything_is_restored_even_when_the_step_raises():
    model, x, _ = seed_batch()
    model.last.bias.grad = torch.ones(2)
    model.eval()
    with pytest.raises(ValueError, match="boom"):
        with fxflow.watch(model):
            model(x).sum().backward()
            raise ValueError("boom")
    assert not model._forward_pre_hooks and not model._forward_hooks
    assert all(not m._forward_hooks for m in model.modules())
    assert not model.training
    assert model.first.weight.grad is None and model.last.bias.grad is not None


def test_frozen_backbone_is_frozen_not_missing_and_allow_works():
    torch.manual_seed(0)
    model = FrozenBackbone()
    with fxflow.watch(model) as w:
        model(torch.randn(2, 3, 32, 32)).sum().backward()
    assert w.report.ok
    assert {p.static for p in w.report.parameters if p.name.startswith("backbone.")} == {"frozen"}

    model, x, _ = seed_batch()
    with fxflow.watch(model, allow=["first.*", "middle.*"]) as w:
        model(x).sum().backward()
    assert w.report.ok and all(w.report.parameter(n).allowed for n in DRY)


def test_zero_weighted_loss_reads_zero_not_missing():
    model, x, _ = seed_batch()
    with fxflow.watch(model) as w:
        (0.0 * model(x).sum()).backward()
    # one watched step cannot tell a loss weighted to nothing from a zero-init that learns from step 2
    assert w.report.parameter("last.weight").dynamic == "unconfirmed"
    assert "weighted to nothing" in w.report.parameter("last.weight").diagnosis
    assert not w.report.ok


class KeywordNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.proj = nn.Linear(8, 3)

    def forward(self, input_ids, scale=1.0):
        return self.proj(self.embed(input_ids).detach()) * scale


def test_keyword_arguments_of_the_first_forward_feed_the_static_analysis():
    torch.manual_seed(0)
    model = KeywordNet()
    with fxflow.watch(model) as w:
        model(input_ids=torch.randint(0, 10, (2, 5)), scale=2.0).sum().backward()
        model(input_ids=torch.randint(0, 10, (2, 5))).sum().backward()
    report = w.report
    assert report.parameter("embed.weight").static == "cut"
    assert report.parameter("embed.weight").dynamic == "missing"
    assert any("forward 2 times" in note for note in report.notes)
