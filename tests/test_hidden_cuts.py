"""Cuts that tracing hides, and look-alikes that must not be reported: each against a real backward."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.parametrizations import weight_norm
from torch.utils.checkpoint import checkpoint

import fxflow
from gradtruth import assert_agrees, line_of, real_grads

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _example(name: str):
    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"fxflow_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, str(path)


# example, the cut op, the marker on the line that creates the cut node, dry parameters
HIDDEN = [
    ("hidden_no_grad", "no_grad", "h = torch.relu(self.proj(x))", {"encoder.proj.weight", "encoder.proj.bias"}),
    ("hidden_inference_mode", "inference_mode", "h = torch.relu(self.features(x))", {"features.weight", "features.bias"}),
    ("hidden_detach_inplace", "detach_", "h.detach_()", {"first.weight", "first.bias"}),
    ("hidden_numpy", "tolist", "values = h.tolist()", {"first.weight", "first.bias"}),
    ("hidden_checkpoint", "checkpoint", "h = checkpoint(", {"block.0.weight", "block.0.bias"}),
    ("hidden_autograd_function", "ScaleGrad.apply", "h = ScaleGrad.apply(", {"first.weight", "first.bias"}),
]


@pytest.mark.parametrize("name, op, marker, dry", HIDDEN, ids=[h[0] for h in HIDDEN])
def test_hidden_cut_is_named_at_the_users_line(name: str, op: str, marker: str, dry: set[str]) -> None:
    module, path = _example(name)
    torch.manual_seed(0)
    model, inputs = module.Net(), (module.example_inputs(),)
    report = fxflow.check(model, inputs)
    assert_agrees(report, real_grads(model, inputs))
    assert {p.name for p in report.parameters if p.static == "cut"} == dry
    line = line_of(path, marker)
    for name_ in dry:
        sites = report.parameter(name_).cut_by
        assert [(s.op, s.source) for s in sites] == [(op, f"{path_display(path)}:{line}")], sites


def path_display(path: str) -> str:
    from fxflow.core.source import display_path

    return display_path(path)


@pytest.mark.parametrize("name, parameter, marker", [
    ("hidden_no_grad", "encoder.proj.weight", "torch.set_grad_enabled(False)"),
    ("hidden_inference_mode", "features.weight", "with torch.inference_mode()"),
])
def test_no_grad_region_names_where_it_began(name: str, parameter: str, marker: str) -> None:
    module, path = _example(name)
    report = fxflow.check(module.Net(), (module.example_inputs(),))
    reason = report.parameter(parameter).cut_by[0].reason
    assert f"entered at {path_display(path)}:{line_of(path, marker)}" in reason


def test_custom_function_backward_returning_none_is_explained_once() -> None:
    """The Function's own backward ran on twins: the cut is static, and the reader learns why."""
    module, path = _example("hidden_autograd_function")
    torch.manual_seed(0)
    model, inputs = module.Net(), (module.example_inputs(),)
    report = fxflow.check(model, inputs)
    first = report.parameter("first.weight")
    assert (first.static, first.dynamic, first.agree) == ("cut", "missing", True) and not report.ok
    where = f"{path_display(path)}:{line_of(path, 'h = ScaleGrad.apply(')}"
    assert [line for line in report.table().splitlines() if "backward of" in line] == [
        f"ScaleGrad.apply at {where} (node scale_grad) cuts first.weight, first.bias off from the output: "
        "the backward of custom autograd.Function ScaleGrad returns None for this input, so the gradient "
        "stops here."]


def test_checkpoint_fixed_by_non_reentrant() -> None:
    module, _ = _example("hidden_checkpoint")
    model, inputs = module.Net(use_reentrant=False), (module.example_inputs(),)
    report = fxflow.check(model, inputs)
    assert report.ok
    assert_agrees(report, real_grads(model, inputs))


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 8, num_layers=2, batch_first=True)
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        out, _ = self.lstm(x)
        attended, _ = self.attention(out, out, out)
        return self.head(attended[:, -1])


class Parametrized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(6, 6, bias=False)
        self.body = weight_norm(nn.Linear(6, 6))
        self.unembed = nn.Linear(6, 6, bias=False)
        self.unembed.weight = self.embed.weight  # tied

    def forward(self, x):
        return self.unembed(torch.tanh(self.body(self.embed(x))))


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 8)
        self.block = nn.Sequential(nn.Linear(8, 8), nn.GELU())
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.stem(x)  # requires grad, so even the reentrant checkpoint passes gradient
        h = checkpoint(self.block, h, use_reentrant=True) + checkpoint(self.block, h, use_reentrant=False)
        return self.head(h)


class StraightThrough(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder, self.decoder = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x, *, temperature: float = 1.0):
        z = self.encoder(x) / temperature
        q = torch.round(z)
        return {"logits": self.decoder(z + (q - z).detach()), "codes": q.long()}


NO_FALSE_CUTS = [
    (Recurrent, (2, 3, 4)), (Parametrized, (3, 6)), (Checkpointed, (3, 4)), (StraightThrough, (3, 4)),
]


@pytest.mark.parametrize("case, shape", NO_FALSE_CUTS, ids=[c[0].__name__ for c in NO_FALSE_CUTS])
def test_no_false_cuts(case: type, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model, inputs = case(), (torch.randn(*shape),)
    report = fxflow.check(model, inputs)
    assert_agrees(report, real_grads(model, inputs))
    assert all(p.static == "reachable" for p in report.parameters), [(p.name, p.static) for p in report.parameters]


@pytest.mark.parametrize("wrap", [nn.DataParallel, lambda m: torch.compile(m, backend="eager")],
                         ids=["DataParallel", "torch.compile"])
def test_wrapped_models_have_no_false_cuts(wrap) -> None:
    torch.manual_seed(0)
    inner, inputs = Parametrized(), (torch.randn(3, 6),)
    report = fxflow.check(wrap(inner), inputs)
    assert all(p.static == "reachable" and p.agree for p in report.parameters)
    assert len(report.parameters) == len(list(inner.parameters()))
