"""Traces that baked parameters into a constant are rejected, and the next capture sees the flow."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

import fxflow
from fxflow.capture.symbolic import BakedInGradient, symbolic_capture
from gradtruth import assert_agrees, real_grads

L2_MODEL = '''
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.head = nn.Linear(4, 8), nn.Linear(8, 2)
        self.prior = nn.Parameter(torch.ones(3))  # learnt only through the penalty

    def forward(self, x):
        penalty = sum(p.pow(2).sum() for p in self.parameters())  # runs once while tracing
        return self.head(torch.relu(self.encoder(x))).sum() + 0.1 * penalty


def example_inputs():
    return torch.randn(5, 4)
'''


def _load(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("fxflow_test_l2_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_l2_penalty_rejects_symbolic_trace_and_every_parameter_is_reachable(tmp_path, write_model) -> None:
    module = _load(write_model(tmp_path, L2_MODEL))
    torch.manual_seed(0)
    model, inputs = module.Net(), (module.example_inputs(),)
    with pytest.raises(BakedInGradient, match="_tensor_constant0"):
        symbolic_capture(model)
    report = fxflow.check(model, inputs)
    assert report.trace.method != "symbolic_trace"
    assert any(note.startswith("symbolic_trace failed: BakedInGradient") for note in report.trace.notes)
    assert_agrees(report, real_grads(model, inputs))
    assert {p.static for p in report.parameters} == {"reachable"} and report.ok


def test_l2_penalty_from_the_command_line_exits_0(tmp_path, write_model, run_fxflow) -> None:
    path = write_model(tmp_path, L2_MODEL)
    code, out, err = run_fxflow("check", f"{path}:Net", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["ok"] and {p["static"] for p in report["parameters"]} == {"reachable"}
    assert "the graph misses their gradient path" in " ".join(report["trace"]["notes"])


class PlainConstant(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        return self.lin(x) + torch.tensor([1.0, 2.0])  # a constant without history: nothing missed


def test_a_constant_without_autograd_history_keeps_symbolic_trace() -> None:
    graph_module = symbolic_capture(PlainConstant())
    assert any(node.op == "get_attr" and "_tensor_constant" in str(node.target) for node in graph_module.graph.nodes)
