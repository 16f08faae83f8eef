"""Calls with several outputs (issue 10, class 3): flow is tracked per output, not per call.

``nn.MultiheadAttention`` returns ``(output, weights)``; a model that reads only the weights
never gives ``out_proj`` (nor the value projection) a gradient. Each element of a tuple result
gets its own edges (``NodeFlow.outputs``) and a ``getitem`` of one element is fed by that
element alone. Checked against a real backward on every capture path.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import fxflow
from fxflow.capture import METHODS
from fxflow.verdicts import StaticVerdict
from gradtruth import assert_agrees, real_grads


class AttentionWeightsOnly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.v = nn.Linear(4, 8), nn.Linear(4, 8)
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.q(x)
        output, weights = self.mha(q, q, self.v(x))
        return self.head(weights)


class AttentionOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mha, self.head = nn.MultiheadAttention(4, 2, batch_first=True), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.mha(x, x, x)[0])


class LastHiddenOnly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm, self.head = nn.LSTM(4, 8, num_layers=2, batch_first=True), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output, (h_n, c_n) = self.lstm(x)
        return self.head(h_n[-1])


class TwoHeads(nn.Module):
    """A tuple built by a function (``torch.max``): values carry gradient, indices none."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values, indices = torch.max(self.a(x), dim=-1)
        return self.b(x) * indices.unsqueeze(-1) + values.unsqueeze(-1)


MODELS = [AttentionWeightsOnly, AttentionOutput, LastHiddenOnly, TwoHeads]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("build", MODELS, ids=[m.__name__ for m in MODELS])
def test_each_output_of_a_call_has_its_own_flow(build: type, method: str) -> None:
    torch.manual_seed(0)
    model, inputs = build(), (torch.randn(2, 6, 4),)
    report = fxflow.check(model, inputs, capture_methods=[method])
    assert report.trace.method == method, report.trace.notes
    assert_agrees(report, real_grads(model, inputs))


@pytest.mark.parametrize("method", ["symbolic_trace", "runtime"])
def test_attention_weights_only_leaves_out_proj_unused_and_the_call_wet(method: str) -> None:
    model, inputs = AttentionWeightsOnly(), (torch.randn(2, 6, 4),)
    report = fxflow.check(model, inputs, capture_methods=[method])
    verdicts = {p.name: p.static for p in report.parameters}
    for name in ("mha.out_proj.weight", "mha.out_proj.bias", "v.weight", "v.bias"):
        assert verdicts[name] == StaticVerdict.UNUSED, (name, verdicts[name])
    assert verdicts["mha.in_proj_weight"] == verdicts["q.weight"] == StaticVerdict.REACHABLE
    graph = report.graph
    assert not [n for n in graph if "[" in n]  # the per-output parts are folded back into their call
    assert graph.nodes["param:mha.out_proj.weight"]["state"] == "unused"
    if method == "symbolic_trace":  # the attention call is one node: painted wet, as its weights are
        call = next(n for n, data in graph.nodes(data=True) if data["kind"] == "call_module" and data["label"] == "mha")
        assert graph.nodes[call]["state"] == "wet"
