"""GradientFlowCheck in a real PyTorch Lightning Trainer: CPU, 2 steps, no logger, no checkpoints.

Verdicts are checked against a real forward/backward of an identical copy on the same first batch.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn

pl = pytest.importorskip("pytorch_lightning")

from fxflow.integrations.lightning import GradientFlowCheck, GradientFlowError, GradientFlowWarning  # noqa: E402
from gradtruth import line_of  # noqa: E402

CUT_LINE = line_of(__file__, "hidden = hidden." + "detach()")  # split: not this line
BATCH = 4


class Classifier(pl.LightningModule):
    """first -> relu -> last; ``cut`` plants a detach, ``zero_last`` zero-initializes the last layer."""

    def __init__(self, cut: bool = False, zero_last: bool = False, call_self: bool = True) -> None:
        super().__init__()
        self.first = nn.Linear(10, 8)
        self.last = nn.Linear(8, 2)
        self.cut, self.call_self = cut, call_self
        if zero_last:
            nn.init.zeros_(self.last.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.first(x))
        if self.cut:
            hidden = hidden.detach()
        return self.last(hidden)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x) if self.call_self else self.last(torch.relu(self.first(x)))
        return nn.functional.cross_entropy(logits, y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.fixture(scope="module")
def loader() -> torch.utils.data.DataLoader:
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(2 * BATCH, 10, generator=generator),
                                          torch.randint(0, 2, (2 * BATCH,), generator=generator))
    return torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=False)


def make(**options) -> Classifier:
    torch.manual_seed(0)
    return Classifier(**options)


def fit(module, loader, tmp_path, callback, max_steps: int = 2, **options) -> pl.Trainer:
    trainer = pl.Trainer(max_steps=max_steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=[callback], **options)
    trainer.fit(module, loader)
    return trainer


def real_grad_norms(module: Classifier, loader) -> dict[str, float | None]:
    """A plain backward of a copy on the first batch: {name: grad norm, None when no grad}."""
    twin = copy.deepcopy(module)
    twin.training_step(next(iter(loader)), 0).backward()
    return {name: None if p.grad is None else p.grad.norm().item() for name, p in twin.named_parameters()}


def test_healthy_run_reports_the_real_gradients_once(loader, tmp_path, capsys):
    module = make()
    truth = real_grad_norms(module, loader)
    callback = GradientFlowCheck()
    trainer = fit(module, loader, tmp_path, callback)
    report = callback.report
    assert trainer.global_step == 2 and report.ok and report.trace.method != "none"
    assert {p.name: p.grad_norm for p in report.parameters} == pytest.approx(truth, rel=1e-5)
    assert capsys.readouterr().out.count("fxflow check Classifier") == 1


def test_planted_cut_raises_before_the_optimizer_step(loader, tmp_path, capsys):
    module = make(cut=True)
    truth = real_grad_norms(module, loader)
    before = {name: p.detach().clone() for name, p in module.named_parameters()}
    callback = GradientFlowCheck(on_problem="raise")
    with pytest.raises(GradientFlowError, match="gradients do not reach every parameter of Classifier") as raised:
        fit(module, loader, tmp_path, callback)
    report = raised.value.report
    assert {p.name for p in report.problems} == {name for name, norm in truth.items() if norm is None} \
        == {"first.weight", "first.bias"}
    assert {(s.op, s.source) for p in report.problems for s in p.cut_by} == \
        {("detach", f"tests/test_integrations_lightning.py:{CUT_LINE}")}
    assert all(torch.equal(before[name], p) for name, p in module.named_parameters())  # optimizer never stepped
    assert module._forward_pre_hooks == {} and module._forward_hooks == {}  # hooks gone after the failure
    assert capsys.readouterr().out.count("fxflow check Classifier") == 1


def test_warn_warns_once_and_training_goes_on(loader, tmp_path):
    callback = GradientFlowCheck(on_problem="warn", show=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(make(cut=True), loader, tmp_path, callback)
    ours = [str(w.message) for w in caught if issubclass(w.category, GradientFlowWarning)]
    assert ours == [f"fxflow: problem: 2 of 4 parameters will not learn: 2 cut "
                    f"(first cut: detach @ tests/test_integrations_lightning.py:{CUT_LINE})"]
    assert trainer.global_step == 2


def test_zero_from_a_zero_initialized_layer_is_confirmed_on_the_second_step(loader, tmp_path):
    module = make(zero_last=True)
    assert real_grad_norms(module, loader)["first.weight"] == 0.0  # the real first step: exactly zero
    callback = GradientFlowCheck(show=False)
    fit(module, loader, tmp_path, callback)
    report = callback.report
    assert report.ok and report.parameter("first.weight").grad_norm > 0
    assert any(note.startswith("this is step 2: the first gave 2 parameter(s) an exactly zero gradient "
                               "(first.bias, first.weight)") for note in report.notes)
    assert all(report.parameter(name).dynamic == "held" and report.parameter(name).learns_from_step == 2
               for name in ("first.weight", "first.bias"))


def test_zero_unconfirmed_when_training_ends_after_one_step(loader, tmp_path):
    callback = GradientFlowCheck(on_problem="warn", show=False)
    with pytest.warns(GradientFlowWarning, match="not verified: 2 of 4 parameters got an exactly zero gradient"):
        fit(make(zero_last=True), loader, tmp_path, callback, max_steps=1)
    report = callback.report
    assert {p.name: p.dynamic for p in report.unconfirmed} == {"first.weight": "unconfirmed", "first.bias": "unconfirmed"}
    assert not report.problems
    assert "training ended before a later step could confirm the exactly zero gradients" in report.notes


def test_training_step_without_self_call_gets_the_real_backward_only(loader, tmp_path):
    module = make(call_self=False, cut=True)  # the cut lives in forward, which training_step bypasses
    truth = real_grad_norms(module, loader)
    callback = GradientFlowCheck(show=False)
    fit(module, loader, tmp_path, callback)
    report = callback.report
    assert report.ok and report.trace.method == "none"
    assert "no forward inputs observed: static analysis skipped" in report.notes
    assert {p.name: p.grad_norm for p in report.parameters} == pytest.approx(truth, rel=1e-5)


def test_accumulated_batches_make_one_checked_step(loader, tmp_path):
    module = make()
    twin = copy.deepcopy(module)
    # Lightning scales each micro-batch's loss by 1/2; the report judges the first backward call
    # (the first micro-batch), with the gradients it produced, not the sum .grad holds afterwards
    (twin.training_step(next(iter(loader)), 0) / 2).backward()
    callback = GradientFlowCheck(show=False)
    fit(module, loader, tmp_path, callback, max_steps=1, accumulate_grad_batches=2)
    report = callback.report
    assert {p.name: p.grad_norm for p in report.parameters} == \
        pytest.approx({name: p.grad.norm().item() for name, p in twin.named_parameters()}, rel=1e-5)
    assert "verdicts judged on backward call 1 of the 2 in the block" in report.notes
    assert "the model ran forward 2 times in the block; static verdicts use the inputs of the first" in report.notes


class AuxFromSecondBatch(Classifier):
    """An auxiliary head trained only from the second batch on (a curriculum)."""

    def __init__(self) -> None:
        super().__init__()
        self.aux = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = torch.relu(self.first(x))
        return self.last(hidden), self.aux(hidden)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits, aux = self(x)
        loss = nn.functional.cross_entropy(logits, y)
        return loss + aux.pow(2).mean() if batch_idx >= 1 else loss


def test_steps_counts_each_parameters_steps_with_a_gradient(loader, tmp_path):
    torch.manual_seed(0)
    module = AuxFromSecondBatch()
    twin = copy.deepcopy(module)
    counts = {name: 0 for name, _ in twin.named_parameters()}
    for index, batch in enumerate(loader):  # plain backwards, step by step (no optimizer: presence only)
        twin.zero_grad(set_to_none=True)
        twin.training_step(batch, index).backward()
        for name, p in twin.named_parameters():
            counts[name] += p.grad is not None and bool(p.grad.ne(0).any())
    callback = GradientFlowCheck(steps=2, show=False)
    fit(module, loader, tmp_path, callback, max_steps=2)
    report = callback.report
    assert report is not None and report.steps == 2
    assert {p.name: p.steps_with_gradient for p in report.parameters} == counts == {
        "first.weight": 2, "first.bias": 2, "last.weight": 2, "last.bias": 2, "aux.weight": 1, "aux.bias": 1}
    assert report.parameter("aux.weight").dynamic == "intermittent" and report.ok


def test_steps_log_the_per_layer_norms_to_the_trainers_logger(loader, tmp_path):
    """With a logger configured, the watched steps' per-layer gradient norms land in it."""
    import csv

    from pytorch_lightning.loggers import CSVLogger

    torch.manual_seed(0)
    module = AuxFromSecondBatch()
    callback = GradientFlowCheck(steps=2, show=False)
    logger = CSVLogger(str(tmp_path), name="fxflow")
    trainer = pl.Trainer(max_steps=2, accelerator="cpu", logger=logger, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=[callback])
    trainer.fit(module, loader)
    logger.save()
    rows = list(csv.DictReader(open(f"{logger.log_dir}/metrics.csv")))
    logged = [row for row in rows if row.get("fxflow/grad_mean/first")]
    assert [int(row["step"]) for row in logged] == [0, 1]
    history = callback.report.gradient_history["first"]
    assert [float(row["fxflow/grad_mean/first"]) for row in logged] == pytest.approx([r.mean for r in history])
    assert float(logged[1]["fxflow/grad_max/aux"]) > 0 and not logged[0].get("fxflow/grad_max/aux")


class MissesLast(Classifier):
    """configure_optimizers hands the optimizer ``first`` alone, or a scheduler that keeps the lr at 0."""

    def __init__(self, stuck_lr: bool = False) -> None:
        super().__init__()
        self.stuck_lr = stuck_lr

    def configure_optimizers(self):
        if self.stuck_lr:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": optimizer,
                    "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.0),
                                     "interval": "step"}}
        return torch.optim.SGD(self.first.parameters(), lr=0.1)


def moved_by_a_plain_fit(module, loader, tmp_path) -> dict[str, bool]:
    """Fit a copy two steps without fxflow: {name: the optimizer moved it}."""
    twin = copy.deepcopy(module)
    before = {name: p.detach().clone() for name, p in twin.named_parameters()}
    trainer = pl.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(twin, loader)
    return {name: not torch.equal(before[name], p) for name, p in twin.named_parameters()}


@pytest.mark.parametrize("stuck_lr", [False, True], ids=["left out", "lr stays 0"])
def test_what_configure_optimizers_will_not_update_raises_before_the_step(loader, tmp_path, stuck_lr):
    torch.manual_seed(0)
    module = MissesLast(stuck_lr)
    moved = moved_by_a_plain_fit(module, loader, tmp_path / "plain")
    before = {name: p.detach().clone() for name, p in module.named_parameters()}
    callback = GradientFlowCheck(show=False)
    with pytest.raises(GradientFlowError) as raised:
        fit(module, loader, tmp_path, callback)
    report = raised.value.report
    not_optimized = {p.name for p in report.parameters if p.optimizer == "not optimized"}
    assert not_optimized == {name for name, did in moved.items() if not did} == \
        ({"first.weight", "first.bias", "last.weight", "last.bias"} if stuck_lr else {"last.weight", "last.bias"})
    assert {p.name for p in report.problems} == not_optimized
    reason = report.parameter("last.weight").optimizer_reason
    assert ("the scheduler keeps it at 0" in reason) if stuck_lr else ("group 0 of SGD: 2 tensors, lr 0.1" in reason)
    assert all(torch.equal(before[name], p) for name, p in module.named_parameters())  # raised before the step
