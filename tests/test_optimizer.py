"""The optimizer check (fxflow.reconcile.optimizer) with real optimizers, schedulers and a real GradScaler.

Every verdict is compared with what the real ``optimizer.step()`` did: the parameters' values are
read before and after real steps on the same model, and "not optimized" must be exactly the
parameters that had a gradient and did not move.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn

import fxflow
from fxflow.dynamic.optimizer import will_update
from fxflow.errors import FxflowError
from fxflow.report import Report

STEPS = 3


class Net(nn.Module):
    """backbone -> relu -> head: the head is what scripts replace after building the optimizer."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Linear(6, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.backbone(x)))


def make() -> tuple[Net, torch.Tensor]:
    torch.manual_seed(0)
    return Net(), torch.randn(5, 6)


def loss_of(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).pow(2).mean()


def real_moves(model: nn.Module, x: torch.Tensor, optimizer: torch.optim.Optimizer, scheduler=None,
               scaler=None, steps: int = STEPS, scale: float = 1.0) -> dict[str, bool]:
    """Real training steps on copies of everything: {name: the optimizer moved it}, for the
    parameters that got a gradient. The originals are left as they are."""
    model_copy, optimizer_copy = copy.deepcopy((model, optimizer)) if scheduler is None else (None, None)
    if scheduler is not None:  # the scheduler holds the optimizer: copy the three together
        model_copy, optimizer_copy, scheduler = copy.deepcopy((model, optimizer, scheduler))
    before = {name: p.detach().clone() for name, p in model_copy.named_parameters()}
    got_gradient = set()
    for _ in range(steps):
        optimizer_copy.zero_grad()
        loss = loss_of(model_copy, x) * scale
        (scaler.scale(loss) if scaler else loss).backward()
        got_gradient |= {n for n, p in model_copy.named_parameters() if p.grad is not None and p.grad.any()}
        if scaler:
            scaler.step(optimizer_copy)
            scaler.update()
        else:
            optimizer_copy.step()
        if scheduler is not None:
            with warnings.catch_warnings():  # the copied optimizer's step is not the one the scheduler wrapped
                warnings.simplefilter("ignore")
                scheduler.step()
    return {name: not torch.equal(before[name], p) for name, p in model_copy.named_parameters() if name in got_gradient}


def not_optimized(report: Report) -> set[str]:
    return {p.name for p in report.parameters if p.optimizer == "not optimized"}


def test_a_head_replaced_after_the_optimizer_is_not_optimized_and_its_ghost_is_named():
    model, x = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.head = nn.Linear(8, 3)  # the bug: the optimizer still holds the old head
    moved = real_moves(model, x, optimizer)
    report = fxflow.check(model, x, optimizer=optimizer)
    assert not_optimized(report) == {name for name, did in moved.items() if not did} == {"head.weight", "head.bias"}
    assert report.exit_code == 1 and report.summary().startswith("problem: 2 of 4 parameters will not learn: 2 not optimized")
    assert {p.name: p.optimizer for p in report.parameters if p.name.startswith("backbone")} == \
        {"backbone.weight": "updated", "backbone.bias": "updated"}
    reason = report.parameter("head.weight").optimizer_reason
    assert "in no parameter group" in reason and "group 0 of AdamW: 4 tensors, lr 0.01" in reason
    assert "module head (Linear) was replaced" in reason
    ghosts = {(t.shape, t.ghost_of) for t in report.optimizer.foreign}
    assert ghosts == {((3, 8), "head.weight"), ((3,), "head.bias")}
    assert any("the ghost of head.weight" in note for note in report.notes)


def test_a_module_left_out_of_the_optimizer_is_named_with_the_groups_that_exist():
    model, x = make()
    optimizer = torch.optim.SGD(model.backbone.parameters(), lr=0.1)
    moved = real_moves(model, x, optimizer)
    report = fxflow.check(model, x, optimizer=optimizer)
    assert not_optimized(report) == {name for name, did in moved.items() if not did} == {"head.weight", "head.bias"}
    assert report.optimizer.foreign == []  # nothing held that is not the model's: no ghost
    assert "left out of it" in report.parameter("head.bias").optimizer_reason


def test_a_group_whose_scheduler_keeps_lr_at_zero_fails_and_the_scheduler_is_put_back():
    model, x = make()
    optimizer = torch.optim.SGD([{"params": model.backbone.parameters()},
                                 {"params": model.head.parameters(), "weight_decay": 0.1}], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, [lambda step: 1.0, lambda step: 0.0])
    state, lrs = copy.deepcopy(scheduler.state_dict()), [g["lr"] for g in optimizer.param_groups]
    moved = real_moves(model, x, optimizer, scheduler)
    report = fxflow.check(model, x, optimizer=optimizer, scheduler=scheduler)
    assert not_optimized(report) == {name for name, did in moved.items() if not did} == {"head.weight", "head.bias"}
    assert "lr 0 in group 1 of SGD, and the scheduler keeps it at 0" in report.parameter("head.weight").optimizer_reason
    assert scheduler.state_dict() == state and [g["lr"] for g in optimizer.param_groups] == lrs


def test_lr_zero_without_a_scheduler_is_unknown_not_a_problem():
    model, x = make()
    optimizer = torch.optim.SGD([{"params": model.backbone.parameters()},
                                 {"params": model.head.parameters(), "lr": 0.0}], lr=0.1)
    report = fxflow.check(model, x, optimizer=optimizer)
    assert {p.name: p.optimizer for p in report.parameters} == {
        "backbone.weight": "updated", "backbone.bias": "updated", "head.weight": "unknown", "head.bias": "unknown"}
    assert report.ok and report.exit_code == 0
    assert any(note.startswith("unknown: head.weight, head.bias: lr 0 now in group 1 of SGD") for note in report.notes)


def test_a_warmup_from_zero_is_healthy():
    model, x = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, step / 10))
    assert optimizer.param_groups[0]["lr"] == 0.0
    assert not any(real_moves(model, x, optimizer, scheduler, steps=1).values())  # step 1 runs at lr 0
    assert all(real_moves(model, x, optimizer, scheduler, steps=2).values())  # the warmup moves them
    report = fxflow.check(model, x, optimizer=optimizer, scheduler=scheduler)
    assert report.ok and {p.optimizer for p in report.parameters} == {"updated"}
    assert "the scheduler raises it at step 1" in report.parameter("head.weight").optimizer_reason
    assert scheduler.last_epoch == 0 and optimizer.param_groups[0]["lr"] == 0.0


def test_groups_with_their_own_lr_and_weight_decay_pass():
    model, x = make()
    optimizer = torch.optim.AdamW([{"params": [model.backbone.weight, model.head.weight], "weight_decay": 0.01},
                                   {"params": [model.backbone.bias, model.head.bias], "weight_decay": 0.0,
                                    "lr": 3e-3}], lr=1e-2)
    assert all(real_moves(model, x, optimizer).values())
    report = fxflow.check(model, x, optimizer=optimizer)
    assert report.ok and {p.optimizer for p in report.parameters} == {"updated"}
    assert [(g.label, g.lr, g.weight_decay) for g in report.optimizer.groups] == \
        [("group 0 of AdamW", 1e-2, 0.01), ("group 1 of AdamW", 3e-3, 0.0)]


def test_a_frozen_backbone_left_out_of_the_optimizer_passes():
    model, x = make()
    model.backbone.requires_grad_(False)
    optimizer = torch.optim.SGD(model.head.parameters(), lr=0.1)
    assert set(real_moves(model, x, optimizer)) == {"head.weight", "head.bias"}
    report = fxflow.check(model, x, optimizer=optimizer)
    assert report.ok
    assert {p.name: p.optimizer for p in report.parameters} == {
        "backbone.weight": None, "backbone.bias": None, "head.weight": "updated", "head.bias": "updated"}


def test_lora_with_only_the_adapters_in_the_optimizer_passes():
    peft = pytest.importorskip("peft")
    model, x = make()
    # B starts random, not zero: a zero B gives A an exactly zero first gradient (another check's business)
    model = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["backbone"], lora_dropout=0.0,
                                                       init_lora_weights=False))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    moved = real_moves(model, x, optimizer)
    report = fxflow.check(model, x, optimizer=optimizer)
    assert all(moved.values())
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    assert {p.name for p in report.parameters if p.optimizer == "updated"} == trainable
    assert report.ok and not not_optimized(report)


def test_a_learnable_temperature_held_by_the_optimizer_is_listed_not_failed():
    model, x = make()
    temperature = nn.Parameter(torch.ones(()))
    optimizer = torch.optim.SGD([{"params": model.parameters()}, {"params": [temperature], "lr": 1e-3}], lr=0.1)
    report = fxflow.check(model, x, optimizer=optimizer)
    assert report.ok
    assert [(t.shape, t.group, t.ghost_of) for t in report.optimizer.foreign] == [((), "group 1 of SGD", None)]


def test_several_optimizers_one_missing_a_module():
    model, x = make()
    optimizers = [torch.optim.SGD(model.backbone.parameters(), lr=0.1), torch.optim.Adam([model.head.weight])]
    report = fxflow.check(model, x, optimizer=optimizers)
    assert not_optimized(report) == {"head.bias"}
    assert "optimizer 0 (SGD) group 0: 2 tensors" in report.parameter("head.bias").optimizer_reason
    assert will_update(optimizers, None, model) == {
        "backbone.weight": True, "backbone.bias": True, "head.weight": True, "head.bias": False}


def test_will_update_says_none_for_an_lr_of_zero_without_a_scheduler():
    model, _ = make()
    optimizer = torch.optim.SGD([{"params": model.backbone.parameters(), "lr": 0.0},
                                 {"params": model.head.parameters()}], lr=0.1)
    assert will_update(optimizer, None, model) == {
        "backbone.weight": None, "backbone.bias": None, "head.weight": True, "head.bias": True}
    stuck = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.0 if step < 5000 else 1.0)
    assert will_update(optimizer, stuck, model)["backbone.weight"] is False  # stuck past the look-ahead


def test_the_optimizer_verdict_survives_the_json_round_trip():
    model, x = make()
    optimizer = torch.optim.AdamW(model.parameters())
    model.head = nn.Linear(8, 3)
    report = fxflow.check(model, x, optimizer=optimizer)
    data = report.to_dict()
    assert data["optimizer"]["foreign"][0]["ghost_of"] == "head.weight"
    assert [p["optimizer"] for p in data["parameters"]] == ["updated", "updated", "not optimized", "not optimized"]
    again = Report.from_dict(data)
    assert again.to_dict() == data and again.exit_code == 1


def test_bad_optimizer_input_is_one_clear_error():
    model, x = make()
    with pytest.raises(FxflowError, match="optimizer= takes a torch.optim.Optimizer or a list of them, not str"):
        fxflow.check(model, x, optimizer="adam")
    with pytest.raises(FxflowError, match="scheduler= takes"):
        fxflow.watch(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), scheduler=3)


# -- watch: the steps the training loop really took ---------------------------------------------
def train(model, x, optimizer, scaler=None, steps: int = STEPS, scale: float = 1.0) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_of(model, x) * scale
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()


def test_watch_catches_the_replaced_head_and_the_loop_agrees():
    model, x = make()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.head = nn.Linear(8, 3)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with fxflow.watch(model, optimizer=optimizer, steps=STEPS) as w:
        train(model, x, optimizer)
    unmoved = {name for name, p in model.named_parameters() if torch.equal(before[name], p)}
    assert not_optimized(w.report) == unmoved == {"head.weight", "head.bias"}
    assert w.report.optimizer.steps_run == STEPS and w.report.optimizer.skipped == []
    assert w.report.exit_code == 1


def test_watch_names_steps_a_grad_scaler_always_skips():
    model, x = make()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with fxflow.watch(model, optimizer=optimizer, steps=STEPS) as w:
        train(model, x, optimizer, scaler, scale=float("inf"))  # inf on every step: every step is skipped
    assert all(torch.equal(before[name], p) for name, p in model.named_parameters())  # the real loop never moved them
    findings = w.report.optimizer
    assert findings.steps_run == 0 and [s.step for s in findings.skipped] == [1, 2, 3]
    assert "GradScaler skips optimizer.step()" in findings.skipped[0].reason
    assert not_optimized(w.report) == set(before)
    assert "optimizer.step() never ran" in w.report.parameter("head.bias").optimizer_reason


def test_watch_names_the_one_step_a_grad_scaler_skipped_and_passes_the_rest():
    model, x = make()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with fxflow.watch(model, optimizer=optimizer, steps=STEPS) as w:
        train(model, x, optimizer, scaler, steps=1, scale=float("inf"))
        train(model, x, optimizer, scaler, steps=STEPS - 1)
    assert not any(torch.equal(before[name], p) for name, p in model.named_parameters())
    findings = w.report.optimizer
    assert findings.steps_run == STEPS - 1 and [s.step for s in findings.skipped] == [1]
    assert {p.optimizer for p in w.report.parameters} == {"updated"}


def test_watch_reports_an_lr_of_zero_as_the_cause_of_an_update_that_stays_zero():
    model, x = make()
    optimizer = torch.optim.SGD([{"params": model.backbone.parameters()},
                                 {"params": model.head.parameters(), "lr": 0.0}], lr=0.1)
    moved = real_moves(model, x, optimizer)
    with fxflow.watch(model, optimizer=optimizer, steps=2) as w:
        train(model, x, optimizer, steps=2)
    assert {p.name for p in w.report.parameters if p.optimizer == "unknown"} == \
        {name for name, did in moved.items() if not did} == {"head.weight", "head.bias"}
    assert w.report.parameter("head.weight").optimizer_reason.startswith(
        "its update stayed exactly zero over 2 optimizer steps: its group's lr was 0 on each")
    assert w.report.ok  # no scheduler given: an lr of 0 may be a warmup
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, [lambda step: 1.0, lambda step: 0.0])
    with fxflow.watch(model, optimizer=optimizer, scheduler=scheduler, steps=2) as w:
        train(model, x, optimizer, steps=2)
    assert not_optimized(w.report) == {"head.weight", "head.bias"} and w.report.exit_code == 1


def test_watch_takes_its_hooks_off_the_optimizer():
    model, x = make()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with fxflow.watch(model, optimizer=optimizer, steps=1):
        train(model, x, optimizer, steps=1)
    assert not optimizer._optimizer_step_pre_hooks and not optimizer._optimizer_step_post_hooks
