"""fxflow's gradient recording does not change how the user's model runs.

``torch.cond`` with a parameter-dependent predicate (dynamo rejects side effects in its branches)
and a ``torch.compile``d submodule (side effects there break the graph) are checked for real:
the verdicts must match a plain backward, and dynamo must report no graph break.
"""
from __future__ import annotations

import logging
import warnings

import pytest
import torch
from torch import nn

import fxflow
from fxflow.dynamic.probe import ModelRun
from gradtruth import real_dynamic, real_grads

dynamo = pytest.importorskip("torch._dynamo")


class Gated(nn.Module):
    """A learned gate picks one of two branches with ``torch.cond``."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Parameter(torch.tensor(1.0))
        self.inp = nn.Linear(4, 4)
        self.taken = nn.Linear(4, 4)
        self.skipped = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.inp(x)
        return torch.cond(self.gate.sum() > 0, lambda h: self.taken(h), lambda h: self.skipped(h), (hidden,))


class PartlyCompiled(nn.Module):
    """A model whose middle block the user compiled; one branch is detached."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.core = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.Tanh()), backend="eager")
        self.side = nn.Linear(4, 8)
        self.out = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.core(self.inp(x)) + self.side(x).detach())


class DynamoLog(logging.Handler):
    """Collects what torch._dynamo logs (graph breaks are logged there)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


def test_torch_cond_with_a_parameter_predicate_matches_a_real_backward() -> None:
    torch.manual_seed(0)
    model, inputs = Gated(), (torch.randn(3, 4),)
    truth = real_dynamic(model, inputs)
    assert truth["gate"] == "missing" and truth["skipped.weight"] == "zero"  # what autograd says
    dynamo.reset()  # cond's branches are traced again, now with fxflow's hooks in place
    report = fxflow.check(model, inputs, capture_methods=("symbolic_trace",))  # it fails fast: the probe alone runs
    assert {p.name: p.dynamic for p in report.parameters} == truth
    assert any("torch.cond" in note and "uninstrumented" in note for note in report.notes)
    assert report.module_grad_norms["inp"][0] > 0  # outside the cond the norms are still recorded
    skipped = report.parameter("skipped.weight").diagnosis
    assert "torch.cond" in skipped and "not taken" in skipped


def test_a_compiled_submodule_runs_without_graph_breaks_and_matches_a_real_backward() -> None:
    torch.manual_seed(0)
    model, inputs = PartlyCompiled(), (torch.randn(3, 4),)
    dynamo.reset()  # compiled first under fxflow's hooks, the case that used to break the graph
    dynamo.utils.counters.clear()
    log = DynamoLog()
    logger = logging.getLogger("torch._dynamo")
    logger.addHandler(log)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = fxflow.check(model, inputs, capture_methods=("torch.export",))
    finally:
        logger.removeHandler(log)
    assert not dynamo.utils.counters["graph_break"], dict(dynamo.utils.counters["graph_break"])
    assert not [r for r in log.records if "graph break" in r.lower()]
    assert not [w for w in caught if "fxflow" in str(w.filename) or "fxflow" in str(w.message)]
    truth_present = real_grads(model, inputs)
    truth = real_dynamic(model, inputs)
    assert {p.name: p.dynamic for p in report.parameters} == truth
    assert {p.name: p.static in ("reachable", "zero") for p in report.parameters} == truth_present
    assert report.parameter("side.weight").static == "cut"
    assert any("torch.compile'd submodule `core`" in note for note in report.notes)


def test_the_recorder_leaves_no_hooks_and_records_eager_calls() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    probe = ModelRun(model)
    result = probe.run((torch.randn(2, 4),))
    assert set(result.module_grad_norms) == {"0", "1", "2"}
    assert all(norms[0] > 0 for norms in result.module_grad_norms.values())
    assert all(not m._forward_hooks for m in model.modules())
    assert result.notes == []
