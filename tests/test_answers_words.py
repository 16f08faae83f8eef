"""Issue 41: words a newcomer can act on. A frozen zero weight named as what holds the zero, a meta run
that says what it verified, no lone table header, singular nouns, capitalized sentences, the capture's
failure notes only where they help; each compared as exact text at a fixed width."""
from __future__ import annotations

import io
import json
import os

import torch
from rich.console import Console
from torch import nn

import fxflow
from fxflow.present.terminal import rich_report
from fxflow.present.text import render_text
from fxflow.testing import failure_message
from tests.models import marker_line

WIDTH = 100


class FrozenLoRA(nn.Module):
    """A LoRA adapter whose zero-initialized B was frozen by mistake: A gets exactly 0 for good."""

    def __init__(self) -> None:
        super().__init__()
        self.base = nn.Linear(8, 8)
        self.base.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.randn(2, 8) * 0.01)
        self.lora_B = nn.Parameter(torch.zeros(8, 2))
        self.lora_B.requires_grad_(False)  # the mistake

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + x @ self.lora_A.t() @ self.lora_B.t()  # adapter


class OneLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


class Parallel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.branches = nn.ModuleList(nn.Linear(8, 8) for _ in range(21))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum(branch(x) for branch in self.branches)


class NoParameters(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _checked(model_class: type, **options: object) -> fxflow.Report:
    torch.manual_seed(0)
    return fxflow.check(model_class(), torch.randn(4, 8), **options)


def _mistake_line() -> str:
    path, line = marker_line(FrozenLoRA, "the mistake")
    return f"{os.path.relpath(path)}:{line}"


def _adapter_line() -> str:
    path, line = marker_line(FrozenLoRA, "adapter")
    return f"{os.path.relpath(path)}:{line}"


def test_a_frozen_zero_lora_b_is_named_as_what_holds_lora_a() -> None:
    report = _checked(FrozenLoRA)
    assert report.parameter("lora_A").held_by == ["lora_B"]  # JSON held_by
    console = Console(file=io.StringIO(), width=WIDTH, no_color=True, highlight=False, soft_wrap=False)
    rich_report(report, console)
    text = console.file.getvalue()
    paragraph = text.split("\n\n")[2]
    assert paragraph == f"""\
lora_A (reachable / zero): exactly 0 after `matmul` at {_adapter_line()}: `lora_B` (all
zeros and frozen: requires_grad=False) scales what it passes back to 0. No weight with a gradient
could move what zeroes it: lora_B gets no gradient either, so it never learns.
fix: unfreeze `lora_B` (frozen at {_mistake_line()}) with `requires_grad_(True)`: an
  all-zero weight that no optimizer step moves holds this gradient at exactly 0 for good"""
    assert text.endswith("problem: 1 of 4 parameters will not learn: 1 with an exactly zero gradient; 3 frozen\n")


def test_the_pytest_message_says_the_frozen_parameter_is_the_bug() -> None:
    message = failure_message(_checked(FrozenLoRA))
    assert message.splitlines()[-1] == ("the frozen all-zero lora_B holds the others at zero: unfreeze it, or allow "
                                        "deliberate dryness with allow=('pattern.*',)")
    assert "frozen parameters never fail" not in message


def test_a_meta_run_says_structure_verified_and_what_it_could_not_see() -> None:
    report = _checked(FrozenLoRA, device="meta")
    assert report.status == "structure verified" and report.exit_code == 0
    assert report.summary() == (
        "structure verified on meta: the backward reaches the one trainable parameter; not verified (a meta run "
        "has no values): exact zeros such as a frozen all-zero weight's, NaN or inf, vanishing gradients; 3 frozen")
    assert "ok" not in report.summary().split(":")[0]


def test_meta_exits_0_and_2_with_strict(run_fxflow, write_model, tmp_path) -> None:
    path = write_model(tmp_path, """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Linear(8, 8)

            def forward(self, x):
                return self.w(x)

        def example_inputs():
            return (torch.randn(2, 8),)
    """)
    code, out, err = run_fxflow("check", f"{path}:Net", "--device", "meta", "-q")
    assert (code, out) == (0, "structure verified on meta: the backward reaches all 2 trainable parameters; not "
                              "verified (a meta run has no values): exact zeros such as a frozen all-zero weight's, "
                              "NaN or inf, vanishing gradients\n"), err
    code, out, err = run_fxflow("check", f"{path}:Net", "--device", "meta", "--strict", "--json")
    assert code == 2 and json.loads(out)["status"] == "structure verified"


def test_one_parameter_is_singular() -> None:
    assert _checked(OneLayer).summary() == "ok: the one trainable parameter gets a gradient"


def test_a_model_with_no_parameter_has_no_table_and_says_what_ran() -> None:
    text = render_text(_checked(NoParameters), width=WIDTH)
    assert text.splitlines()[1:3] == ["", "loss: random projection of all outputs (the model returns no loss)"]
    assert text.endswith("\n\nnothing to train: the model has no parameters, so there is no gradient to verify")


def test_a_folded_table_with_no_problem_row_has_no_lone_header() -> None:
    torch.manual_seed(0)
    report = _checked(Parallel)  # 42 parameters: folded
    lines = render_text(report, width=WIDTH).splitlines()
    assert lines[1:4] == ["", "42 parameters, all without a problem (42 ok): --all lists every row", ""]
    assert "parameter  shape" not in render_text(report, width=WIDTH)


def test_check_help_says_what_strict_does_for_check(run_fxflow) -> None:
    code, out, err = run_fxflow("check", "--help", env={"COLUMNS": "200"})
    strict = next(line for line in out.splitlines() if line.strip().startswith("--strict"))
    assert strict.split(None, 1)[1] == ("an --allow pattern that matches no parameter is an error; a --device meta run, "
                                        "which verifies structure only, exits 2 (not verified) instead of 0")
    assert "render:" not in out


def test_why_symbolic_trace_failed_is_shown_only_with_debug_when_a_fallback_worked() -> None:
    from tests.test_answers_fixes import NumpyStep  # symbolic_trace cannot follow .numpy()

    report = _checked(NumpyStep)
    assert report.trace.method == "runtime"
    assert [note.split(":")[0] for note in report.trace.notes] == ["symbolic_trace failed"]  # JSON keeps it
    assert "symbolic_trace failed" not in render_text(report, width=WIDTH)
    assert "note: symbolic_trace failed: " in render_text(report, width=WIDTH, debug=True)


class SigmoidStack(nn.Module):
    """Twelve sigmoids in a row: the first layers' gradients vanish."""

    def __init__(self) -> None:
        super().__init__()
        self.probe = nn.Linear(8, 8)
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(12))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.probe(x)
        for block in self.blocks:
            h = torch.sigmoid(block(h))  # squash
        return h


def test_a_vanishing_paragraph_gives_the_summary_s_ratio() -> None:
    report = _checked(SigmoidStack)
    path, line = marker_line(SigmoidStack, "squash")
    text = render_text(report, width=WIDTH)
    assert text.split("\n\n")[2].splitlines()[:3] == [
        "probe.weight, probe.bias (reachable / vanishing): the smallest of their gradient norms is 1/2.0e+10",
        "of the largest's (1.187e-10 vs 2.36); where it falls most: the gradient shrinks 10^11 (`sigmoid` at",
        f"{os.path.relpath(path)}:{line}).",
    ]
    assert text.endswith("19 vanishing (smallest norm 1.187e-10, 1/2.0e+10 of\nthe largest's 2.36)")


class DeadRNN(nn.Module):
    """An nn.RNN whose ReLU units are all dead: torch runs `rnn_relu` in C++, with no Python line."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.RNN(4, 8, nonlinearity="relu", batch_first=True)
        with torch.no_grad():
            self.rnn.bias_ih_l0.fill_(-100.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)  # the user's call
        return out[:, -1]


def test_a_zero_inside_a_recurrent_layer_names_the_layer_and_the_user_s_call() -> None:
    torch.manual_seed(0)
    report = fxflow.check(DeadRNN(), torch.randn(2, 5, 4))
    path, line = marker_line(DeadRNN, "the user's call")
    assert report.parameter("rnn.weight_ih_l0").diagnosis.startswith(
        f"exactly 0 after `relu` inside `rnn` (nn.RNN), called at {os.path.relpath(path)}:{line}: every unit is "
        "inactive on this batch.")


def _stop_eights(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor | None:
    if isinstance(module, nn.Linear) and module.out_features == 8:
        return output.detach()  # the global hook
    return None


class TwoLinears(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def test_a_global_forward_hook_that_detaches_is_named() -> None:
    handle = torch.nn.modules.module.register_module_forward_hook(_stop_eights)
    try:
        report = _checked(TwoLinears)
    finally:
        handle.remove()
    (site,) = report.parameter("a.weight").cut_by
    path, line = marker_line(TwoLinears, "the global hook")
    where = f"{os.path.relpath(path)}:{line}"  # the hook's return that detaches
    assert (site.op, site.source) == ("_stop_eights hook", where)
    assert site.reason == (f"the forward hook `_stop_eights` ({where}) on `a` (Linear) returns a result with no "
                           "autograd history, so the gradient stops here")


def test_the_picture_marks_the_frozen_zero_weight_as_what_holds_the_zero() -> None:
    from fxflow.render import to_svg_text
    from render_helpers import parse_svg

    nodes, _, _ = parse_svg(to_svg_text(_checked(FrozenLoRA)))
    assert nodes["param.lora_B"].text == "lora_B (frozen zeros: holds lora_A at 0)"
    assert "fxflow-frozen" in nodes["param.lora_B"].classes
