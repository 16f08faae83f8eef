"""A chain of zero-inits longer than fxflow looks ahead (issue 39, item 5: a reason states only what was
observed). The summary of the rows left ``unconfirmed`` says that the steps stopped at their limit while the
last one still gave other parameters their first gradient, not that one step cannot confirm them; a one-step
watch keeps its own words.

The truth is real SGD and Adam steps in plain torch on copies of the model: the first step on which each
parameter gets a non-zero gradient.
"""
from __future__ import annotations

import copy
from pathlib import Path

import torch

import fxflow
from conftest import run_fxflow_process, write_model_file

CHAIN = """
import torch
from torch import nn


class ZeroChain5(nn.Module):
    \"\"\"Five zero-initialized weights in a chain: each holds everything before it one step more.\"\"\"

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first = nn.Linear(8, 8)
        self.chain = nn.ModuleList(nn.Linear(8, 8) for _ in range(5))
        for layer in self.chain:
            nn.init.zeros_(layer.weight)

    def forward(self, x):
        h = self.first(x)
        for layer in self.chain:
            h = layer(h)
        return h + x

    def example_inputs(self):
        torch.manual_seed(1)
        return (torch.randn(4, 8),)
"""

REVIVING = ("4 of 12 parameters were still exactly 0 when fxflow stopped at its limit, 3 steps after the first, "
            "while the last step still gave other parameters their first gradient (a longer chain of "
            "zero-initialized weights may hold them)")


def _chain(tmp_path: Path) -> tuple[Path, torch.nn.Module]:
    path = write_model_file(tmp_path, CHAIN)
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return path, namespace["ZeroChain5"]()


def _first_steps(model: torch.nn.Module, make_optimizer, steps: int = 10) -> dict[str, int | None]:
    """{parameter: the first real step (1-based) whose backward leaves it a non-zero gradient}."""
    model = copy.deepcopy(model)
    optimizer = make_optimizer(model.parameters())
    (x,) = model.example_inputs()
    projection = torch.randn(4, 8, generator=torch.Generator().manual_seed(2))
    first: dict[str, int | None] = dict.fromkeys(name for name, _ in model.named_parameters())
    for step in range(1, steps + 1):
        optimizer.zero_grad(set_to_none=True)
        (model(x) * projection).sum().backward()
        for name, parameter in model.named_parameters():
            if first[name] is None and parameter.grad is not None and parameter.grad.any():
                first[name] = step
        optimizer.step()
    return first


def test_a_chain_past_the_look_ahead_says_where_it_stopped(tmp_path):
    path, model = _chain(tmp_path)
    sgd = _first_steps(model, lambda parameters: torch.optim.SGD(parameters, lr=0.1))
    adam = _first_steps(model, lambda parameters: torch.optim.Adam(parameters, lr=1e-3))
    assert sgd == adam and sgd["first.weight"] == 6 and sgd["chain.0.weight"] == 5
    late = {name for name, step in sgd.items() if step > 4}  # after the first step and the 3 fxflow looks at
    assert late == {"first.weight", "first.bias", "chain.0.weight", "chain.0.bias"}

    report = fxflow.check(model, *model.example_inputs())
    assert {p.name for p in report.unconfirmed} == late
    for row in report.parameters:
        if row.name not in late and sgd[row.name] > 1:
            assert row.dynamic == "held" and row.learns_from_step == sgd[row.name], row.name
    assert report.summary() == f"not verified: {REVIVING}; 6 held by zero-initialized weights (learn from step 2-4)"
    assert report.exit_code == 2

    code, out, err = run_fxflow_process("check", f"{path}:ZeroChain5", cwd=tmp_path, env={"COLUMNS": "1000"})
    assert code == 2, err
    assert out.rstrip().splitlines()[-1] == report.summary()

    # one watched step: no later step was seen, and the words say so
    (x,) = model.example_inputs()
    projection = torch.randn(4, 8, generator=torch.Generator().manual_seed(2))
    with fxflow.watch(model) as watched:
        (model(x) * projection).sum().backward()
    zero = {name for name, step in sgd.items() if step > 1}
    assert {p.name for p in watched.report.unconfirmed} == zero
    assert watched.report.summary() == (
        f"not verified: {len(zero)} of 12 parameters got an exactly zero gradient that one step cannot confirm "
        "(a zero-initialized weight may hold them until step 2)")
