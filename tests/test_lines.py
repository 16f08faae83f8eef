"""Every verdict points at the line a person would fix (issue 29): no-grad regions where they are
entered, hooks at the hook, hidden channels cut (not unused), torch.func inside forward, scripted
submodules. Each model is written to a file as a person would write it; each test compares
fxflow's verdicts with a real backward on the same model and asserts the exact ``file:line``.
"""
from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import fxflow
from fxflow.core.source import display_path
from gradtruth import assert_agrees, line_of, real_grads

CAPTURES = ["symbolic_trace", "runtime"]


def _load(tmp_path: Path, source: str, name: str = "model.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source).lstrip())
    spec = importlib.util.spec_from_file_location(f"fxflow_lines_{tmp_path.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path


def _check(module, captures: str | None = None, **options):
    """fxflow's report on ``module.Net()`` with ``module.example_inputs()``, after asserting that every
    static verdict agrees with a real backward of the same model on the same inputs."""
    torch.manual_seed(0)
    model, inputs = module.Net(), (module.example_inputs(),)
    methods = [captures] if captures else None
    report = fxflow.check(model, inputs, capture_methods=methods, **options)
    if methods:
        assert report.trace.method == captures, report.trace.notes
    assert_agrees(report, real_grads(model, inputs))
    return report


def _where(path: Path, marker: str) -> str:
    return f"{display_path(str(path))}:{line_of(str(path), marker)}"


def _sites(report, names: set[str]) -> dict[str, list[tuple[str, str | None]]]:
    return {name: [(s.op, s.source) for s in report.parameter(name).cut_by] for name in sorted(names)}


def _assert_cut_at(report, names: set[str], op: str, where: str) -> None:
    assert {p.name for p in report.parameters if p.static == "cut"} == names
    assert _sites(report, names) == {name: [(op, where)] for name in names}


ENCODE = """
    import torch
    import torch.nn as nn


    def encode(layer, x):
        h = layer(x)  # runs with gradients for every other caller
        return torch.relu(h)


"""

WITH_BLOCK = ENCODE + """
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(8, 8)
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            with torch.no_grad():  # the region
                h = encode(self.enc, x)
            return self.head(h)


    def example_inputs():
        return torch.randn(4, 8)
"""

DECORATED_METHOD = ENCODE + """
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(8, 8)
            self.head = nn.Linear(8, 2)

        @torch.no_grad()  # the region
        def features(self, x):
            return encode(self.enc, x)

        def forward(self, x):
            return self.head(self.features(x))


    def example_inputs():
        return torch.randn(4, 8)
"""


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("source", [WITH_BLOCK, DECORATED_METHOD], ids=["with", "decorator"])
def test_a_no_grad_region_is_named_where_it_is_entered(tmp_path: Path, source: str, capture: str) -> None:
    module, path = _load(tmp_path, source)
    report = _check(module, capture)
    _assert_cut_at(report, {"enc.weight", "enc.bias"}, "no_grad", _where(path, "# the region"))
    site = report.parameter("enc.weight").cut_by[0]
    assert f"({_where(path, 'h = layer(x)')}) runs inside torch.no_grad()" in site.reason
    # the way from forward to the region's line: the decorated method's decorator (the with line is forward's own)
    if source is DECORATED_METHOD:
        assert site.frames == (f"forward @ {_where(path, 'return self.head(self.features(x))')}",
                               f"features @ {site.source}")
    else:
        assert site.frames == ()


LIBRARY = """
    import torch


    class Embedder(torch.nn.Module):
        @torch.no_grad()
        def embed(self, encode, x):
            return encode(x)
"""

CALLS_THE_LIBRARY = """
    import torch
    import torch.nn as nn
    from tinylib import Embedder


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(8, 8)
            self.head = nn.Linear(8, 2)
            self.embedder = Embedder()

        def forward(self, x):
            h = self.embedder.embed(lambda t: torch.relu(self.enc(t)), x)  # calls into the library
            return self.head(h)


    def example_inputs():
        return torch.randn(4, 8)
"""


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_decorator_inside_a_library_is_named_at_the_users_call(tmp_path: Path, capture: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed package's ``@torch.no_grad()`` method calling back into the user's code: the user's
    line that called into the package, not the package's decorator nor the user's callback."""
    packages = tmp_path / "site-packages"
    (packages / "tinylib").mkdir(parents=True)
    (packages / "tinylib" / "__init__.py").write_text(textwrap.dedent(LIBRARY).lstrip())
    monkeypatch.syspath_prepend(str(packages))
    monkeypatch.delitem(sys.modules, "tinylib", raising=False)
    module, path = _load(tmp_path, CALLS_THE_LIBRARY)
    report = _check(module, capture)
    _assert_cut_at(report, {"enc.weight", "enc.bias"}, "no_grad", _where(path, "# calls into the library"))


MAML = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 8)
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            inner = self.head(torch.tanh(self.body(x))).pow(2).mean()
            (grad,) = torch.autograd.grad(inner, self.head.weight, create_graph=True)
            fast = self.head.weight - 0.1 * grad
            with torch.no_grad():  # the bug: the adapted step is evaluated without autograd
                return F.linear(torch.tanh(self.body(x)), fast, self.head.bias)


    def example_inputs():
        return torch.randn(4, 8)
"""


@pytest.mark.parametrize("capture", CAPTURES)
def test_an_inner_loop_step_applied_under_no_grad_is_named_at_the_region(tmp_path: Path, capture: str) -> None:
    """MAML-style: ``autograd.grad`` feeds a step applied under ``no_grad``; the region is the one
    cut (``grad``, whose result only reaches it, is not listed)."""
    module, path = _load(tmp_path, MAML)
    report = _check(module, capture)
    _assert_cut_at(report, {"body.weight", "body.bias", "head.weight", "head.bias"}, "no_grad",
                   _where(path, "with torch.no_grad()"))


HOOKS = """
    import torch
    import torch.nn as nn


    def detach_input(module, args):
        return (args[0].detach(),)  # the pre-hook's detach


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(8, 8)
            self.mid = nn.Linear(8, 8)
            self.head = nn.Linear(8, 2)
            self.mid.register_forward_pre_hook(detach_input)

        def forward(self, x):
            return self.head(torch.relu(self.mid(torch.relu(self.enc(x)))))


    def example_inputs():
        return torch.randn(4, 8)
"""


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_detaching_pre_hook_is_named_at_the_hook(tmp_path: Path, capture: str) -> None:
    """A forward pre-hook that returns a detached input: named in the hook at its detaching return (the traced
    call runs hooks only on twins: read from the hook's code; the recording sees the detach inside it), never at
    the hooked module's call with a shape-or-mask reason."""
    module, path = _load(tmp_path, HOOKS)
    report = _check(module, capture)
    pre_hook = _where(path, "# the pre-hook's detach")
    assert {p.name for p in report.parameters if p.static == "cut"} == {"enc.weight", "enc.bias"}
    assert {s.source for s in report.parameter("enc.weight").cut_by} == {pre_hook}
    assert all("shape, indices or mask" not in s.reason for s in report.parameter("enc.weight").cut_by)


NO_GRAD_HOOK = """
    import torch
    import torch.nn as nn


    @torch.no_grad()  # the hook's region
    def rescale(module, args, output):
        return output * 2


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(8, 8)
            self.head = nn.Linear(8, 2)
            self.enc.register_forward_hook(rescale)

        def forward(self, x):
            return self.head(torch.relu(self.enc(x)))


    def example_inputs():
        return torch.randn(4, 8)
"""


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_forward_hook_under_no_grad_is_named_at_its_decorator(tmp_path: Path, capture: str) -> None:
    module, path = _load(tmp_path, NO_GRAD_HOOK)
    report = _check(module, capture)
    op = "rescale hook" if capture == "symbolic_trace" else "no_grad"
    _assert_cut_at(report, {"enc.weight", "enc.bias"}, op, _where(path, "# the hook's region"))


VECTOR_TO_PARAMETERS = """
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        \"\"\"A hypernetwork writes the target's weights with vector_to_parameters (param.data = ...).\"\"\"

        def __init__(self):
            super().__init__()
            self.hyper = nn.Linear(4, 8 * 2 + 2)
            self.target = nn.Linear(8, 2)

        def forward(self, x):
            flat = self.hyper(torch.ones(4))
            torch.nn.utils.vector_to_parameters(flat, self.target.parameters())  # the channel
            return self.target(x)


    def example_inputs():
        return torch.randn(4, 8)
"""

FUSED = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.utils.fusion import fuse_conv_bn_weights


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)
            self.head = nn.Linear(4, 2)

        def forward(self, x):
            weight, bias = fuse_conv_bn_weights(  # the channel
                self.conv.weight, self.conv.bias, self.bn.running_mean, self.bn.running_var,
                self.bn.eps, self.bn.weight, self.bn.bias)
            return self.head(F.conv2d(x, weight, bias).mean((2, 3)))


    def example_inputs():
        return torch.randn(2, 3, 6, 6)
"""

MARKED = """
    import torch
    import torch.nn as nn


    class SortedScores(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            values, _ = x.sort(-1)
            ranks = values * 1.0
            ctx.mark_non_differentiable(ranks)
            return values, ranks

        @staticmethod
        def backward(ctx, grad_values, grad_ranks):
            return grad_values


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(8, 8)
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            _, ranks = SortedScores.apply(self.enc(x))  # the channel
            return self.head(ranks)


    def example_inputs():
        return torch.randn(4, 8)
"""


@pytest.mark.parametrize("device", [None, "meta"])
@pytest.mark.parametrize("source, dry, op", [
    (VECTOR_TO_PARAMETERS, {"hyper.weight", "hyper.bias"}, "data"),
    (FUSED, {"conv.weight", "conv.bias", "bn.weight", "bn.bias"}, "new_leaf"),
    (MARKED, {"enc.weight", "enc.bias"}, "SortedScores.apply"),
], ids=["vector_to_parameters", "new_parameter", "mark_non_differentiable"])
def test_data_through_a_hidden_channel_is_cut_at_the_users_call(tmp_path: Path, source: str, dry: set[str], op: str,
                                                                  device: str | None) -> None:
    """Values flow from these parameters to the output, through a channel autograd does not follow:
    ``cut`` at the user's line that called into it, never ``unused``, on CPU and on meta."""
    module, path = _load(tmp_path, source)
    report = _check(module, device=device)
    if device == "meta" and op == "new_leaf":
        # on meta the run is on fake tensors, where making the new nn.Parameter dispatches a detach of the
        # fused values: the recording sees that op, at the same line of the user's
        op = "detach"
    _assert_cut_at(report, dry, op, _where(path, "# the channel"))


TORCH_FUNC = """
    import torch
    import torch.nn as nn
    from torch.func import functional_call, grad, jacrev, vmap


    class Net(nn.Module):
        \"\"\"Forces as the gradient of a learned energy, and a Jacobian: torch.func inside forward.\"\"\"

        def __init__(self):
            super().__init__()
            self.energy = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
            self.field = nn.Linear(3, 3)

        def forward(self, positions):
            params = dict(self.energy.named_parameters())

            def energy(position):
                return functional_call(self.energy, params, (position,)).sum()

            forces = -vmap(grad(energy))(positions)
            jacobians = vmap(jacrev(self.field))(positions)
            return forces + jacobians.sum(-1)


    def example_inputs():
        return torch.randn(5, 3)
"""


def test_torch_func_inside_forward_is_checked_like_any_forward(tmp_path: Path) -> None:
    """fxflow's hooks are transparent to grad, vmap, jacrev and functional_call: the real backward
    reaches the weights the transforms differentiate, and the report says so. The last bias of the
    energy and the field's bias drop out of every derivative: no gradient, and the backward agrees."""
    module, _ = _load(tmp_path, TORCH_FUNC)
    report = _check(module)
    assert {p.name: p.dynamic for p in report.parameters} == {
        "energy.0.weight": "ok", "energy.0.bias": "ok", "energy.2.weight": "ok", "energy.2.bias": "missing",
        "field.weight": "ok", "field.bias": "missing"}
    assert [p.name for p in report.parameters if p.static == "reachable"] == [
        "energy.0.weight", "energy.0.bias", "energy.2.weight", "field.weight"]


def test_torch_func_inside_forward_exits_by_its_verdicts_on_the_command_line(tmp_path: Path, run_fxflow) -> None:
    healthy = TORCH_FUNC.replace("return forces + jacobians.sum(-1)", "return forces")
    healthy = healthy.replace("self.field = nn.Linear(3, 3)", "").replace(
        "jacobians = vmap(jacrev(self.field))(positions)", "").replace(
        "nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))", "nn.Sequential(nn.Linear(3, 16), nn.Tanh())")
    _, path = _load(tmp_path, healthy)
    code, out, err = run_fxflow("check", f"{path}:Net", "--json")
    assert code == 0, err
    assert {p["name"]: p["dynamic"] for p in json.loads(out)["parameters"]} == {
        "energy.0.weight": "ok", "energy.0.bias": "ok"}


SCRIPTED = """
    import torch
    import torch.nn as nn


    class Router(nn.Module):
        def __init__(self):
            super().__init__()
            self.score = nn.Linear(8, 4)

        def forward(self, x):
            choice = self.score(x).argmax(-1)  # the argmax
            return choice.float()


    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.gain = nn.Linear(8, 8)

        def forward(self, x):
            return torch.sigmoid(self.gain(x)) * x


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = torch.jit.script(Router())
            self.scale = torch.jit.script(Scale())
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            return self.head(self.scale(x)) * self.router(x).unsqueeze(-1)


    def example_inputs():
        return torch.randn(4, 8)
"""


@pytest.mark.parametrize("device", [None, "meta"])
@pytest.mark.parametrize("capture", CAPTURES)
def test_an_argmax_inside_a_scripted_submodule_is_named_from_its_graph(tmp_path: Path, capture: str,
                                                                        device: str | None) -> None:
    """The scripted module's TorchScript graph is read: the argmax is named at its own line; a
    healthy scripted module beside it is reachable. A module that ran is never unused."""
    module, path = _load(tmp_path, SCRIPTED)
    report = _check(module, capture, device=device)
    assert {p.name: p.static for p in report.parameters} == {
        "router.score.weight": "cut", "router.score.bias": "cut", "scale.gain.weight": "reachable",
        "scale.gain.bias": "reachable", "head.weight": "reachable", "head.bias": "reachable"}
    _assert_cut_at(report, {"router.score.weight", "router.score.bias"}, "argmax", _where(path, "# the argmax"))
