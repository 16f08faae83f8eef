"""Sparse embedding gradients (``sparse=True``) are measured like dense ones, over the rows present."""
from __future__ import annotations

import importlib.util
import json
import math

import torch

import fxflow
from gradtruth import real_dynamic

DLRM = """
import torch
from torch import nn


class DLRM(nn.Module):
    '''Two sparse embedding tables and a dense feature tower, then a top MLP.'''

    def __init__(self):
        super().__init__()
        self.users = nn.Embedding(50, 8, sparse=True)
        self.items = nn.EmbeddingBag(40, 8, mode="sum", sparse=True)
        self.dense = nn.Linear(4, 8)
        self.top = nn.Sequential(nn.Linear(24, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, user, items, offsets, features):
        parts = [self.users(user), self.items(items, offsets), self.dense(features)]
        return self.top(torch.cat(parts, dim=1))


def example_inputs():
    generator = torch.Generator().manual_seed(0)
    users = torch.tensor([3, 7, 3, 9, 3, 7])  # repeated rows: the sparse gradient holds duplicates
    items = torch.randint(0, 40, (12,), generator=generator)
    return users, items, torch.arange(0, 12, 2), torch.randn(6, 4, generator=generator)
"""


def _load(path):
    spec = importlib.util.spec_from_file_location("dlrm_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_healthy_dlrm_passes_the_cli_and_matches_a_real_backward(tmp_path, write_model, run_fxflow) -> None:
    path = write_model(tmp_path, DLRM)
    code, out, err = run_fxflow("check", f"{path}:DLRM", "--json")
    assert code == 0, err
    report = json.loads(out)
    module = _load(path)
    truth = real_dynamic(module.DLRM(), module.example_inputs())  # healthy whatever the weights
    assert {p["name"]: p["dynamic"] for p in report["parameters"]} == truth
    assert set(truth.values()) == {"ok"}


def test_sparse_norm_is_over_the_rows_looked_up(tmp_path, write_model) -> None:
    module = _load(write_model(tmp_path, DLRM))
    torch.manual_seed(0)
    model, inputs = module.DLRM(), module.example_inputs()
    report = fxflow.check(model, inputs)
    assert model.users.weight.grad is None  # the check left no gradient behind
    model(*inputs).mul(torch.randn(6, 1, generator=torch.Generator().manual_seed(0))).sum().backward()
    grad = model.users.weight.grad.coalesce()
    assert grad.values().shape[0] == 3  # rows 3, 7 and 9; the other 47 are not part of the norm
    assert math.isclose(report.parameter("users.weight").grad_norm, float(grad.values().norm()), rel_tol=1e-5)
    assert report.parameter("users.weight").dynamic == "ok"


def test_watch_reads_sparse_gradients(tmp_path, write_model) -> None:
    module = _load(write_model(tmp_path, DLRM))
    torch.manual_seed(0)
    model, inputs = module.DLRM(), module.example_inputs()
    with fxflow.watch(model, static=False) as watched:
        model(*inputs).sum().backward()
    grad = model.users.weight.grad.coalesce()
    parameter = watched.report.parameter("users.weight")
    assert parameter.dynamic == "ok"
    assert math.isclose(parameter.grad_norm, float(grad.values().norm()), rel_tol=1e-5)
