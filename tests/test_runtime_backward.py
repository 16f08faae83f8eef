"""The run-time capture must not change what the backward does (issue 17, item 9).

Its recording is the run whose backward gives the dynamic verdicts, so that run must be the
user's: whatever it records, the tensors it hands back must carry the autograd history a plain
run gives them. Each case is checked on every capture path that captures it, against a real
plain ``loss.backward()`` of the same model.
"""
from __future__ import annotations

import copy

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from every_path import reports_on_every_path
from gradtruth import line_of


class FrozenInputCheckpoint(nn.Module):
    """A reentrant checkpoint whose only input does not require grad: its block gets no gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = checkpoint(self.block, x, use_reentrant=True)  # the block's result comes back without history
        return self.head(hidden)


def test_a_reentrant_checkpoint_without_grad_inputs_leaves_its_block_dry_on_every_path() -> None:
    model = FrozenInputCheckpoint()
    reports = reports_on_every_path(model, torch.randn(2, 4))
    assert "runtime" in {report.trace.method for report in reports}
    line = line_of(__file__, "hidden = checkpoint(")
    for report in reports:
        block = report.parameter("block.weight")
        assert (block.static, block.dynamic) == ("cut", "missing"), report.trace.method
        assert [site.source for site in block.cut_by] == [f"tests/test_runtime_backward.py:{line}"], block.cut_by


class Ensemble(nn.Module):
    """Three linear members stacked with ``torch.func.stack_module_state`` and run under vmap; the
    weights are detached on the way in, so only the biases learn."""

    def __init__(self) -> None:
        super().__init__()
        members = [nn.Linear(4, 4) for _ in range(3)]
        stacked, _ = torch.func.stack_module_state(members)
        self.weight = nn.Parameter(stacked["weight"])
        self.bias = nn.Parameter(stacked["bias"])
        self.__dict__["base"] = copy.deepcopy(members[0]).to("meta")  # structure only, not registered
        self.head = nn.Linear(4, 2)

    def member(self, weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(self.base, {"weight": weight, "bias": bias}, (x,))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frozen = self.weight.detach()
        outputs = torch.func.vmap(self.member, in_dims=(0, 0, None))(frozen, self.bias, x)
        return self.head(outputs.mean(0))


def test_a_detach_before_vmap_is_the_cut_on_every_path() -> None:
    model = Ensemble()
    reports = reports_on_every_path(model, torch.randn(2, 4))
    assert "runtime" in {report.trace.method for report in reports}
    line = line_of(__file__, "frozen = self.weight.detach()")
    for report in reports:
        weight = report.parameter("weight")
        assert (weight.static, weight.dynamic) == ("cut", "missing"), report.trace.method
        assert [(site.op, site.source) for site in weight.cut_by] == [("detach", f"tests/test_runtime_backward.py:{line}")]
        assert report.parameter("bias").static == "reachable"
