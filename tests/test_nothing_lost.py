"""Nothing lost: after fxflow.check (and the DOT of its report) the user's model is exactly as it was.

Checked on every model class in examples/ and on a set of tricky models: parameters and buffers
bit-identical, the same ``.grad`` tensor objects, requires_grad and train/eval flags, attributes
forward assigns, containers forward appends to, hooks (and no fxflow hook left), the global RNG
of torch, Python and NumPy, and no Proxy or fake tensor left on any module. The CLI writes no
file except the one ``-o`` names.
"""
from __future__ import annotations

import glob
import inspect
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.fx
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensor

import fxflow
from fxflow.errors import FxflowError
from fxflow.prepare.load import import_location

from conftest import ROOT, TARGETS

EXAMPLES = sorted(glob.glob(str(ROOT / "examples" / "*.py")))


# -- fingerprint ---------------------------------------------------------------------------------
def _bits(tensor: torch.Tensor) -> tuple:
    """Exact content (NaN-safe): dtype, shape and the raw bytes."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return tensor.dtype, tuple(tensor.shape), bytes(flat.view(torch.uint8).numpy()) if flat.numel() else b""


def _hook_tables(owner: Any) -> dict[str, tuple]:
    """Every hook dict on a module or tensor: keys and hook identities."""
    tables = {}
    for key, value in vars(owner).items() if not isinstance(owner, torch.Tensor) else ():
        if "hook" in key and isinstance(value, dict):
            tables[key] = tuple((k, id(v)) for k, v in value.items())
    if isinstance(owner, torch.Tensor) and owner._backward_hooks is not None:
        tables["_backward_hooks"] = tuple((k, id(v)) for k, v in owner._backward_hooks.items())
    return tables


def _attribute(value: Any) -> Any:
    """Identity of a plain attribute; for containers, the identities of what they hold."""
    if isinstance(value, (list, tuple)):
        return type(value).__name__, id(value), tuple(id(v) for v in value)
    if isinstance(value, dict):
        return "dict", id(value), tuple((k, id(v)) for k, v in value.items())
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    return id(value)


def _leftovers(value: Any, depth: int = 0) -> list[str]:
    """Proxies or fake tensors reachable from an attribute value."""
    if isinstance(value, (torch.fx.Proxy, FakeTensor)):
        return [type(value).__name__]
    if depth < 3 and isinstance(value, (list, tuple, set)):
        return [found for v in value for found in _leftovers(v, depth + 1)]
    if depth < 3 and isinstance(value, dict):
        return [found for v in value.values() for found in _leftovers(v, depth + 1)]
    return []


def fingerprint(model: nn.Module) -> dict[str, Any]:
    """Everything a check could disturb, in comparable form."""
    print_ = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        print_[f"param {name}"] = (id(p), _bits(p), p.requires_grad, _hook_tables(p))
        print_[f"grad {name}"] = None if p.grad is None else (id(p.grad), _bits(p.grad))
    for name, b in model.named_buffers(remove_duplicate=False):
        print_[f"buffer {name}"] = (id(b), _bits(b))
    for name, module in model.named_modules(remove_duplicate=False):
        print_[f"training {name}"] = module.training
        print_[f"hooks {name}"] = _hook_tables(module)
        print_[f"attributes {name}"] = {k: _attribute(v) for k, v in vars(module).items()
                                        if k not in ("_parameters", "_buffers", "_modules") and "hook" not in k}
        print_[f"tables {name}"] = (tuple(module._parameters), tuple(module._buffers), tuple(module._modules))
        leftovers = [k for k, v in vars(module).items() if _leftovers(v)]
        assert not leftovers, f"{name or 'model'} holds a Proxy or fake tensor in {leftovers}"
    print_["global hooks"] = tuple(len(getattr(torch.nn.modules.module, table)) for table in
                                   ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks"))
    print_["rng torch"] = _bits(torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        print_["rng cuda"] = tuple(_bits(s) for s in torch.cuda.get_rng_state_all())
    print_["rng python"] = random.getstate()
    state = np.random.get_state()
    print_["rng numpy"] = (state[0], state[1].tobytes(), *state[2:])
    return print_


def assert_unchanged(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before.keys() == after.keys(), set(before) ^ set(after)
    changed = [key for key in before if before[key] != after[key]]
    assert not changed, f"changed by fxflow: {changed}"


def run_all_checks(model: nn.Module, inputs: Any) -> None:
    """fxflow.check with and without backward, and the report's DOT when the renderer exists."""
    for backward in (True, False):
        try:
            report = fxflow.check(model, inputs, backward=backward)
        except FxflowError:
            continue  # a check that cannot run must still leave the model alone
        try:
            report.to_dot()
        except ImportError:
            pass


# -- examples ------------------------------------------------------------------------------------
def _example_models() -> list[tuple[str, str]]:
    found = []
    for path in EXAMPLES:
        module = import_location(path)
        for name, value in sorted(vars(module).items()):
            if inspect.isclass(value) and issubclass(value, nn.Module) and value.__module__ == module.__name__:
                found.append((os.path.relpath(path, ROOT), name))
    return found


@pytest.mark.parametrize("path,name", _example_models())
def test_examples_leave_their_model_unchanged(path, name):
    module = import_location(str(ROOT / path))
    cls = getattr(module, name)
    try:
        torch.manual_seed(0)
        model = cls()
    except TypeError:
        pytest.skip(f"{name} needs constructor arguments")
    inputs = module.example_inputs() if callable(getattr(module, "example_inputs", None)) else None
    before = fingerprint(model)
    run_all_checks(model, inputs)
    assert_unchanged(before, fingerprint(model))


def test_examples_were_found():
    assert any(name == "Net" and path.endswith("seed.py") for path, name in _example_models())


# -- tricky models -------------------------------------------------------------------------------
class BatchNormNet(nn.Module):
    """BatchNorm in train mode: running stats and num_batches_tracked move in a real forward."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 8)
        self.bn = nn.BatchNorm1d(8)
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        return self.out(torch.relu(self.bn(self.fc(x))))


class DropoutNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 8)
        self.drop = nn.Dropout(0.5)
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        return self.out(self.drop(self.fc(x)))


class StatefulNet(nn.Module):
    """forward assigns attributes, appends to a list, registers a buffer and edits a parameter."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 8)
        self.out = nn.Linear(8, 2)
        self.scale = nn.Parameter(torch.ones(1))
        self.history: list = []
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        h = self.fc(x)
        self.last_h = h
        self.fc.seen = True
        self.history.append(h)
        self.steps += 1
        if not hasattr(self, "first_mean"):
            self.register_buffer("first_mean", torch.zeros(8))
        with torch.no_grad():
            self.scale.mul_(1.5)
        return self.out(h) * self.scale


class RandomNet(nn.Module):
    """Draws from torch, Python's random and NumPy inside forward."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 2)

    def forward(self, x):
        noise = torch.randn_like(x) * random.random() * float(np.random.rand())
        return self.fc(x + noise)


class FrozenNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(10, 8)
        self.backbone.requires_grad_(False)
        self.head = nn.Linear(8, 2)
        self.tied = self.head  # the same module twice

    def forward(self, x):
        return self.tied(torch.relu(self.backbone(x)))


def _with_grads(model: nn.Module, inputs: torch.Tensor) -> nn.Module:
    """Accumulate real gradients into the model, then drop one so None and tensors mix."""
    model(inputs).sum().backward()
    first = next(p for p in model.parameters() if p.requires_grad)
    first.grad = None
    return model


def _with_hooks(model: nn.Module) -> nn.Module:
    calls: list[str] = []
    model.register_forward_hook(lambda m, i, o: calls.append("forward"))
    model.register_forward_pre_hook(lambda m, i: calls.append("pre"))
    next(iter(model.children())).register_full_backward_hook(lambda m, gi, go: None)
    next(model.parameters()).register_hook(lambda g: None)
    return model


def _tricky() -> dict[str, Any]:
    x = torch.randn(6, 10)
    return {
        "batchnorm-train": lambda: (BatchNormNet().train(), x),
        "batchnorm-eval": lambda: (BatchNormNet().eval(), x),
        "mixed-train-eval": lambda: (_mixed(BatchNormNet()), x),
        "dropout-train": lambda: (DropoutNet().train(), x),
        "stateful": lambda: (StatefulNet(), x),
        "random": lambda: (RandomNet(), x),
        "frozen-tied": lambda: (FrozenNet(), x),
        "preexisting-grads": lambda: (_with_grads(BatchNormNet(), x), x),
        "hooks": lambda: (_with_hooks(DropoutNet()), x),
        "inferred-inputs": lambda: (DropoutNet(), None),
    }


def _mixed(model: nn.Module) -> nn.Module:
    model.train()
    model.bn.eval()
    return model


@pytest.mark.parametrize("case", sorted(_tricky()))
def test_tricky_models_are_left_unchanged(case):
    torch.manual_seed(1)
    model, inputs = _tricky()[case]()
    before = fingerprint(model)
    run_all_checks(model, inputs)
    assert_unchanged(before, fingerprint(model))


def test_the_fingerprint_sees_what_a_forward_changes():
    """The comparison above can fail: a plain forward and backward changes what it records."""
    model = StatefulNet()
    before = fingerprint(model)
    model(torch.randn(4, 10)).sum().backward()
    with pytest.raises(AssertionError):
        assert_unchanged(before, fingerprint(model))


def test_check_that_fails_leaves_the_model_unchanged():
    model = BatchNormNet().train()
    wrong = torch.randn(6, 7)  # forward raises: shape mismatch
    before = fingerprint(model)
    with pytest.raises(FxflowError):
        fxflow.check(model, wrong)
    assert_unchanged(before, fingerprint(model))


# -- files ---------------------------------------------------------------------------------------
def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_cli_writes_no_file(run_fxflow, tmp_path):
    """Only -o's file appears: no __pycache__ next to the target, nothing in cwd, HOME or TMPDIR."""
    work, home, temp = tmp_path / "work", tmp_path / "home", tmp_path / "tmp"
    for folder in (work, home, temp):
        folder.mkdir()
    (work / "model.py").write_text((TARGETS / "models.py").read_text())
    env = {"PYTHONDONTWRITEBYTECODE": None, "HOME": str(home), "TMPDIR": str(temp), "XDG_CACHE_HOME": None}
    before = _listing(tmp_path)
    code, out, err = run_fxflow("check", "model.py:Cut", "--json", cwd=work, env=env)
    assert code == 1, err
    code, out, err = run_fxflow("check", "model.py:Nope", cwd=work, env=env)
    assert code == 2, err
    assert _listing(tmp_path) == before
    code, out, err = run_fxflow("render", "model.py:Cut", "-o", "flow.dot", cwd=work, env=env)
    assert code in (0, 1), err  # graphviz-pure is a dependency: a render that cannot run is a regression
    assert _listing(tmp_path) == sorted(before + ["work/flow.dot"])
