"""Issue 41: the fix line fits the code it is about. Each model here is a newcomer's own idiom; each
test renders the report at a fixed width and compares the exact words a reader gets."""
from __future__ import annotations

import os

import numpy as np
import torch
from torch import nn

import fxflow
from fxflow.present.text import render_text
from fxflow.testing import failure_message
from tests.models import marker_line

WIDTH = 100


def _at(marker: str) -> str:
    """``file:line`` of the line marked ``# marker`` in this file, as the report prints it."""
    path, line = marker_line(VectorQuantizer, marker)
    return f"{os.path.relpath(path)}:{line}"


def _paragraphs(text: str) -> str:
    """The report's paragraphs: from the first line after the table to the loss line."""
    blocks = text.split("\n\n")
    return blocks[2]


class VectorQuantizer(nn.Module):
    """A VQ-VAE's quantizer with neither a codebook loss nor EMA updates: the codebook never learns."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(8, 4)
        self.codebook = nn.Parameter(torch.randn(16, 4))
        self.dec = nn.Linear(4, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.enc(x)
        q = self.codebook[torch.cdist(z, self.codebook).argmin(-1)]  # lookup
        q_st = z + (q - z).detach()  # straight-through
        return self.dec(q_st)


class NumpyStep(nn.Module):
    """A step done in NumPy: the detach is there so that .numpy() does not raise."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x).detach().numpy()  # numpy
        return self.b(torch.from_numpy(np.tanh(h)))


class ReturnsItsLoss(nn.Module):
    """forward returns a scalar: that is the loss the model trains on."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x).detach()).pow(2).mean()  # scalar


def _check(model_class: type) -> fxflow.Report:
    torch.manual_seed(0)
    return fxflow.check(model_class(), torch.randn(4, 8))


def test_a_straight_through_estimator_and_an_argmin_lookup_get_fixes_of_their_own() -> None:
    text = render_text(_check(VectorQuantizer), width=WIDTH)
    lookup, st = _at("lookup"), _at("straight-through")
    assert _paragraphs(text) == f"""\
argmin at {lookup} (node argmin) cuts codebook off from the output: argmin
returns an int64 tensor (indices or flags), which carries no gradient.
fix: `argmin` picks the nearest entry by its index, and an index carries no gradient back to the
  distances: give the entries a loss of their own (VQ-VAE's codebook loss
  `((q - z.detach()) ** 2).mean()`), or weight every entry by
  `torch.softmax(-distances / temperature, -1)` instead of picking one; for a deliberate freeze,
  pass --allow 'codebook'
detach at {st} (node detach) cuts codebook off from the output: detach()
returns a tensor with no autograd history, so the gradient stops here.
fix: this line is already a straight-through estimator: its gradient goes to `z`, never to `q`;
  train what makes `q` with a loss of its own (VQ-VAE's codebook loss
  `((q - z.detach()) ** 2).mean()`), or update it without gradients (EMA); for a deliberate freeze,
  pass --allow 'codebook'"""
    assert "argmax" not in text and "use a straight-through estimator" not in text


def test_a_detach_that_feeds_numpy_is_told_to_use_the_torch_op() -> None:
    text = render_text(_check(NumpyStep), width=WIDTH)
    assert _paragraphs(text) == f"""\
detach at {_at("numpy")} (node detach) cuts a.weight, a.bias off from the output:
detach() returns a tensor with no autograd history, so the gradient stops here.
fix: this detach is there to feed `.numpy()`: do that step with the torch op on the tensor itself
  (`torch.tanh(h)` for `np.tanh(h.detach().numpy())`), then drop the detach and the NumPy round
  trip; for a deliberate freeze, pass --allow 'a.*'"""


def test_a_forward_that_returns_a_scalar_is_trained_on_it() -> None:
    report = _check(ReturnsItsLoss)
    assert report.loss == "the model's output (a single number, used as the loss)"
    assert "loss: the model's output (a single number, used as the loss)\n" in render_text(report, width=WIDTH)
    torch.manual_seed(0)
    model = ReturnsItsLoss()
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    report = fxflow.check(model, x)
    model(x).backward()  # the user's own step: the norms are this loss's, not a projection's
    assert abs(report.parameter("b.weight").grad_norm - float(model.b.weight.grad.norm())) < 1e-5


def test_the_python_api_says_allow_equals_and_the_cli_says_dash_dash_allow() -> None:
    report = _check(NumpyStep)
    api_fix = [line for line in report.table(width=WIDTH).splitlines() if "deliberate freeze" in line]
    assert api_fix == ["  trip; for a deliberate freeze, pass `allow=[\"a.*\"]`"]
    assert "--allow" not in str(report) and "--allow" not in failure_message(report)
    assert "pass `allow=[\"a.*\"]`" in failure_message(report)
    assert "pass --allow 'a.*'" in render_text(report, width=WIDTH)  # the CLI's text keeps its flag


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.a(x) + y


def test_the_python_api_s_text_names_no_command_line_flag() -> None:
    report = fxflow.check(TwoInputs())  # no inputs: nothing verified
    assert report.table().splitlines()[-1] == ("not verified: no backward ran for forward(x, y) (pass inputs: "
                                               "fxflow.check(model, inputs))")
    assert report.summary().endswith("(give --input-size or example_inputs())")  # the CLI's words, also in diagrams
    torch.manual_seed(0)
    wide = fxflow.check(nn.Sequential(*[nn.Linear(4, 4) for _ in range(21)]), torch.randn(2, 4))
    folded = next(line for line in wide.table().splitlines() if "without a problem" in line)
    assert folded.endswith(": report.to_json() has every row") and "--all" not in wide.table()


@torch.no_grad()
def _doubled(module: nn.Module, args: tuple) -> tuple:
    return (args[0] * 2,)


class PreHooked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)
        self.b.register_forward_pre_hook(_doubled)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def test_a_no_grad_pre_hook_gets_the_pre_hook_s_fix() -> None:
    text = render_text(_check(PreHooked), width=WIDTH)
    assert _paragraphs(text).splitlines()[-2:] == [
        "fix: return the module's new input from the pre-hook with its history: no `detach`, no",
        "  `@torch.no_grad()` on it; for a deliberate freeze, pass --allow 'a.*'"]


class StateDictCall(nn.Module):
    """state_dict() hands functional_call detached copies: the inner layer never learns."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.func.functional_call(self.inner, self.inner.state_dict(), (x,))
        return self.head(h)


def test_a_path_the_graph_sees_and_the_run_does_not_take_gets_a_fix_that_points_somewhere() -> None:
    text = render_text(_check(StateDictCall), width=WIDTH)
    assert "see the cut or the static verdict named above" not in text  # there is none above
    assert _paragraphs(text).splitlines()[-4:] == [
        "fix: find what stood in for these parameters at run time: a `state_dict()` (detached copies) fed to",
        "  `torch.func.functional_call`, a `.data` or `.detach()` inside a custom Function, or a branch the",
        "  trace did not take; feed the parameters themselves (`dict(module.named_parameters())`); for a",
        "  deliberate freeze, pass --allow 'inner.*'"]
