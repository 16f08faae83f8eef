"""Issues 39 (item 5) and 41: the reasons a row gives are codes the report carries (JSON ``reasons``),
put in words on the presenting side; "held" names only a zero-initialized weight's hold (an optimizer
group and a plain Python list have their own words); a model with nothing to train verifies nothing;
a batch whose labels all go uncounted gets a fix about its labels. Each compared as exact text."""
from __future__ import annotations

import json
import os

import torch
import torch.nn.functional as F
from torch import nn

import fxflow
from fxflow.present.text import render_text
from fxflow.report import Report
from fxflow.testing import failure_message
from tests.models import marker_line
from tests.test_answers_words import FrozenLoRA, NoParameters

WIDTH = 100


def _checked(model: nn.Module, *inputs: object, **options: object) -> fxflow.Report:
    torch.manual_seed(0)
    return fxflow.check(model, inputs or (torch.randn(4, 8),), **options)


class LoRA(nn.Module):
    """A healthy LoRA: B is zero at init, so A's first gradient is exactly 0 and it learns from step 2."""

    def __init__(self) -> None:
        super().__init__()
        self.base = nn.Linear(8, 8)
        self.lora_A = nn.Parameter(torch.randn(2, 8) * 0.1)
        self.lora_B = nn.Parameter(torch.zeros(8, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + x @ self.lora_A.t() @ self.lora_B.t()


def test_the_reason_is_a_code_in_the_row_and_json_and_its_words_are_made_from_it() -> None:
    report = _checked(FrozenLoRA())
    row = report.to_dict()["parameters"][[p.name for p in report.parameters].index("lora_A")]
    path, line = marker_line(FrozenLoRA, "adapter")
    assert (row["reasons"], row["later_steps"], row["held_by"]) == (["no-step-moves"], 0, ["lora_B"])
    assert (row["where"]["op"], row["where"]["source"]) == ("matmul", f"{os.path.relpath(path)}:{line}")
    assert row["diagnosis"] == (
        f"exactly 0 after `matmul` at {os.path.relpath(path)}:{line}: `lora_B` (all zeros and frozen: "
        "requires_grad=False) scales what it passes back to 0. No weight with a gradient could move what zeroes "
        "it: lora_B gets no gradient either, so it never learns")
    # the JSON read back gives the same row: the finding and the codes, the words made again from them
    back = Report.from_dict(json.loads(report.to_json()))
    assert back.parameter("lora_A").finding == report.parameter("lora_A").finding
    assert back.to_dict() == report.to_dict()


def test_a_held_row_s_words_come_from_its_code_and_real_steps_confirm_it() -> None:
    model = LoRA()
    report = _checked(model)
    row = report.parameter("lora_A")
    assert (row.dynamic, row.reasons, row.learns_from_step, row.held_by) == ("held", ["held"], 2, ["lora_B"])
    assert row.finding is None
    assert row.diagnosis == ("exactly 0 on the first step because lora_B (all zeros at init) holds it; it gets a "
                             "gradient, so it learns from step 2")
    # the truth, in plain torch: one SGD step on the same model gives lora_A a non-zero gradient
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    grads = []
    for _ in range(2):
        optimizer.zero_grad()
        model(x).square().mean().backward()
        grads.append(model.lora_A.grad.abs().max().item())
        optimizer.step()
    assert grads[0] == 0.0 and grads[1] > 0.0


class ListNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = [nn.Linear(8, 8)]  # a plain list
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers[0](x))


class TensorNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.ones(8, requires_grad=True)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x * self.scale)


def test_a_plain_list_is_kept_not_held_and_its_paragraph_says_so_once() -> None:
    report = _checked(ListNet())
    assert [p.reasons for p in report.parameters if p.static == "unregistered"] == [["in-container"]] * 2
    text = render_text(report, width=WIDTH)
    assert text.split("\n\n")[2] == """\
layers[0].weight, layers[0].bias are trained by no optimizer: its module is kept in a plain Python
list or dict, which nn.Module does not register, so model.parameters() does not list it.
fix: for layers kept in a plain list, use `nn.ModuleList` (`nn.ModuleDict` for a dict)"""
    assert "held" not in text


def test_a_plain_tensor_attribute_has_its_own_code_and_words() -> None:
    row = _checked(TensorNet()).parameter("scale")
    assert (row.static, row.reasons) == ("unregistered", ["plain-tensor"])
    assert row.diagnosis == ("a plain tensor attribute made with requires_grad=True, which nn.Module does not "
                             "register, so model.parameters() does not list it")


def test_the_pytest_message_of_an_unregistered_list_says_what_failed() -> None:
    lines = failure_message(_checked(ListNet())).splitlines()
    assert lines[0] == "not every parameter of ListNet will learn"
    assert lines[-1] == "fix: for layers kept in a plain list, use `nn.ModuleList` (`nn.ModuleDict` for a dict)"
    assert not any("allow=" in line for line in lines)  # allowing it would not register it


def test_a_parameter_no_group_steps_is_in_no_group_not_held() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    report = _checked(model, optimizer=torch.optim.SGD(model[0].parameters(), lr=0.1))
    assert report.parameter("1.weight").optimizer_reason == (
        "in no parameter group (the optimizer has group 0 of SGD: 2 tensors, lr 0.1): module 1 (Linear) was "
        "created or replaced after the optimizer was built, or left out of it")


def test_a_model_with_no_parameter_verifies_nothing(run_fxflow, write_model, tmp_path) -> None:
    report = _checked(NoParameters())
    data = report.to_dict()
    assert (data["verified"], data["ok"], data["status"], report.exit_code) == (False, False, "nothing to train", 0)
    text = render_text(report, width=WIDTH)
    assert text.endswith("\n\nnothing to train: the model has no parameters, so there is no gradient to verify")
    assert "verified` means" not in text
    fxflow.assert_gradients_flow(NoParameters(), torch.randn(4, 8))  # nothing that could fail
    path = write_model(tmp_path, """
        import torch
        from torch import nn

        class Net(nn.Module):
            def forward(self, x):
                return x * 2

        def example_inputs():
            return (torch.randn(2, 8),)
    """)
    code, out, err = run_fxflow("check", f"{path}:Net", "--json")
    assert code == 0, err
    assert {key: json.loads(out)[key] for key in ("verified", "ok", "status")} == {
        "verified": False, "ok": False, "status": "nothing to train"}


def test_every_parameter_frozen_verifies_nothing_either() -> None:
    model = nn.Linear(8, 8).requires_grad_(False)
    data = _checked(model).to_dict()
    assert (data["verified"], data["status"]) == (False, "problem")
    # with no inputs as with inputs: the status agrees with the summary (it said "problem", and exited 2)
    report = fxflow.check(NeedsThree().requires_grad_(False))
    assert (report.status, report.exit_code) == ("problem", 1)
    assert report.summary() == "problem: nothing will learn: every parameter is frozen (loss.backward() would raise)"


class AllIgnored(nn.Module):
    """Every label of the batch is ``ignore_index``: the data zeroes the loss (and its mean is 0 / 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.lin(x), labels, ignore_index=-100)  # the loss


def test_a_batch_whose_labels_are_all_ignored_gets_a_fix_about_its_labels() -> None:
    model = AllIgnored()
    report = _checked(model, torch.randn(4, 8), torch.full((4,), -100))
    # the truth, in plain torch: the gradient is exactly 0 and the loss NaN
    torch.manual_seed(0)
    loss = model(torch.randn(4, 8), torch.full((4,), -100))
    loss.backward()
    assert torch.isnan(loss) and model.lin.weight.grad.abs().max().item() == 0.0
    assert report.parameter("lin.weight").dynamic == "zero" and report.exit_code == 1
    path, line = marker_line(AllIgnored, "the loss")
    text = render_text(report, width=None)
    fix = ("fix: `cross_entropy` passes back 0 when no label of the batch counts, and its mean over none is NaN: "
           "check the labels it is given (each equal to `ignore_index`, -100 by default, or of a class whose "
           "`weight` is 0); skip such batches, or make sure each batch has a labelled target")
    paragraphs = text.split("\n\n")[2].split("\n")
    assert paragraphs[0].startswith(f"A non-finite value is born in the forward at cross_entropy @ "
                                    f"{os.path.relpath(path)}:{line}")
    assert paragraphs[1] == fix
    assert paragraphs[2].startswith(f"lin.weight, lin.bias (reachable / zero): exactly 0 after `cross_entropy` at "
                                    f"{os.path.relpath(path)}:{line}")
    assert paragraphs[3] == fix
    assert paragraphs[2].endswith(  # the reason names the data (issue "Training, not a stand-in", item 4)
        "The batch's labels make it so: no label of it counts (each is `ignore_index`, or of a class whose `weight` "
        "is 0), so this batch teaches the model nothing, whatever the weights; a batch with a label that counts "
        "gives it a gradient.")
    model.zero_grad()
    model(torch.randn(4, 8), torch.tensor([-100, -100, -100, 2])).backward()  # plain torch: one label counts
    assert model.lin.weight.grad.abs().max().item() > 0
    assert "grid_sample" not in text and "softmax" not in text and "clamp its input" not in text


class NeedsThree(nn.Module):
    """forward takes three inputs and none was given: no backward can run."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))

    def forward(self, q: torch.Tensor, k: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return (q * self.w).sum()


def test_the_pytest_message_of_a_check_with_no_backward_says_nothing_was_verified() -> None:
    assert failure_message(fxflow.check(NeedsThree())) == (
        "fxflow could not verify that gradients reach every parameter of NeedsThree\n"
        "not verified: no backward ran for forward(q, k, lengths) (pass inputs: fxflow.check(model, inputs))")
