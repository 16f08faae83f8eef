"""The seed tutorial's model, its fix, and its three "try it yourself" breaks (shared/seed.md)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from types import ModuleType

import pytest
import torch
import torch.nn as nn

import fxflow
from conftest import fxflow_completed
from tests.models import STATIC_PROMISE, ModelState, grad_kind, marker_line, real_grads, split_source

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The seed's printouts (torch.manual_seed(0); Net(); randn(16, 10); randint(0, 2, (16,)); CrossEntropyLoss).
SEED_NORMS = {"last.weight": 0.184076, "last.bias": 0.079574}
FIXED_NORMS = {"first.weight": 0.083987, "first.bias": 0.019576, "middle.weight": 0.142110,
               "middle.bias": 0.038178, **SEED_NORMS}


def load(name: str) -> ModuleType:
    path = os.path.join(ROOT, "examples", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"fxflow_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # inspect finds the source through sys.modules
    spec.loader.exec_module(module)
    return module


def seed_setup(example: str):
    """Exactly the seed's recipe: seed, build, draw inputs, draw targets."""
    torch.manual_seed(0)
    model = load(example).Net()
    x = torch.randn(16, 10)
    target = torch.randint(0, 2, (16,))
    return model, x, lambda out: nn.CrossEntropyLoss()(out, target)


@pytest.mark.parametrize("example, norms", [("seed", SEED_NORMS), ("seed_fixed", FIXED_NORMS)])
def test_seed_numbers_reproduced(example: str, norms: dict[str, float]) -> None:
    model, x, loss_fn = seed_setup(example)
    before = ModelState.of(model)
    report = fxflow.check(model, x, loss_fn=loss_fn)
    ModelState.of(model).assert_same(before)
    for parameter in report.parameters:
        if parameter.name in norms:
            assert parameter.dynamic == "ok"
            assert round(parameter.grad_norm, 6) == norms[parameter.name], parameter.name
        else:
            assert parameter.dynamic == "missing" and parameter.grad_norm is None
    # and the same numbers from a plain backward run here
    grads = real_grads(model, (x,), loss_fn=loss_fn)
    for name, grad in grads.items():
        assert (grad is None) == (name not in norms)
        if grad is not None:
            assert round(float(grad.norm()), 6) == norms[name]


BREAKS = {
    "seed": ({"first": "cut", "middle": "cut", "last": "reachable"}, "detach", "the bug: detach cuts the wire here"),
    "seed_fixed": ({"first": "reachable", "middle": "reachable", "last": "reachable"}, None, None),
    "break_frozen": ({"first": "frozen", "middle": "reachable", "last": "reachable"}, None, None),
    "break_threshold": ({"first": "cut", "middle": "cut", "last": "reachable"}, "gt",
                        "the break: a comparison instead of an activation"),
    "break_unused": ({"first": "reachable", "middle": "reachable", "last": "reachable", "fourth": "unused"}, None, None),
}


@pytest.mark.parametrize("example", sorted(BREAKS))
def test_example_verdicts(example: str) -> None:
    layers, op, marker = BREAKS[example]
    module = load(example)
    torch.manual_seed(0)
    model = module.Net()
    x = module.example_inputs()
    before = ModelState.of(model)
    report = fxflow.check(model, x)
    ModelState.of(model).assert_same(before)
    grads = real_grads(model, (x,))
    assert {p.name for p in report.parameters} == set(grads) == {f"{l}.{k}" for l in layers for k in ("weight", "bias")}
    for parameter in report.parameters:
        assert parameter.static == layers[parameter.name.split(".")[0]]
        assert STATIC_PROMISE[parameter.static] == grad_kind(grads[parameter.name])
        assert parameter.agree is True
        if parameter.static == "cut":
            (site,) = parameter.cut_by
            assert site.op == op
            assert split_source(site.source) == marker_line(module.Net, marker)
        else:
            assert parameter.cut_by == []
    dry = {p.name for p in report.problems}
    assert dry == {p.name for p in report.parameters if p.static in ("cut", "unused")}
    assert report.ok == (not dry)


def test_cli_json_on_seed() -> None:
    """`fxflow check examples/seed.py:Net --json` names the planted line."""
    result = fxflow_completed("check", "examples/seed.py:Net", "--json", cwd=ROOT)
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    line = marker_line(load("seed").Net, "the bug: detach cuts the wire here")[1]
    first = next(p for p in data["parameters"] if p["name"] == "first.weight")
    assert first["static"] == "cut" and first["dynamic"] == "missing" and first["agree"] is True
    assert [(c["op"], c["source"]) for c in first["cut_by"]] == [("detach", f"examples/seed.py:{line}")]
