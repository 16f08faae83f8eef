"""The one guard (fxflow/core/guard.py): in-place writes put back at any model size, each caller's parts,
and nothing process-wide that another thread would see while a check runs (issue 40)."""
from __future__ import annotations

import gc
import random
import threading
import warnings

import numpy as np
import torch
from torch import nn

import fxflow
from fxflow.core.guard import COPY_LIMIT_BYTES, guard


class RenormsAFrozenTable(nn.Module):
    """A frozen embedding table over the guard's copy limit, with ``max_norm``: every forward renormalizes
    the rows it looks up in place (``embedding_renorm_``), as the user's real step would."""

    ROWS = 17_600_000  # x 4 float32 = 281.6 MB, over 256 MiB

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(self.ROWS, 4, max_norm=1.0, _weight=torch.full((self.ROWS, 4), 2.0))
        self.table.weight.requires_grad_(False)
        self.head = nn.Linear(4, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.table(ids)).sum()


def test_a_weight_written_in_place_is_put_back_on_a_model_over_the_copy_limit():
    torch.manual_seed(0)
    model, ids = RenormsAFrozenTable(), torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert model.table.weight.numel() * 4 > COPY_LIMIT_BYTES  # the real size, not a lowered limit
    model.table(ids)  # what a plain forward does to the rows it reads: they are written in place
    assert float(model.table.weight[1].norm()) <= 1.0 + 1e-6
    model.table.weight[1:7] = 2.0
    head = {name: p.detach().clone() for name, p in model.head.named_parameters()}
    report = fxflow.check(model, ids)
    assert {p.name: str(p.dynamic.value) for p in report.parameters}["head.weight"] == "ok"
    assert bool((model.table.weight[:8] == 2.0).all()), model.table.weight[:8]  # rows 1..6 back as found
    assert all(torch.equal(p, head[name]) for name, p in model.head.named_parameters())
    assert not [note for note in report.notes if "in place" in note], report.notes


def test_each_caller_names_the_parts_it_needs_back():
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    model[0].weight.grad = grad = torch.ones(3, 3)
    weight = model[0].weight.detach().clone()
    with guard(model, weights=False, fresh_grads=True) as outer:
        assert model[0].weight.grad is None  # fresh grads inside
        with guard(model):  # nested: this one puts the weights back itself
            with torch.no_grad():
                model[0].weight.add_(1)
        assert torch.equal(model[0].weight, weight)
        with torch.no_grad():
            model[0].weight.add_(1)  # the outer guard was told not to keep the weights
        model(torch.randn(4, 3)).sum().backward()
        model.eval()
    assert outer.notes == [] and model.training and model[0].weight.grad is grad
    assert torch.equal(model[0].weight, weight + 1) and int(model[1].num_batches_tracked) == 0


class Slow(nn.Module):
    """Dropout in front of a dead branch: the check runs its redraws, which set the global generators."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.gate, self.out = nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.stem(x))
        if torch.rand(()) < 0.5:
            h = h + self.gate(nn.functional.dropout(h, 0.5))
        return self.out(h)


def _generators() -> tuple:
    """Generators of a thread's own, seeded the same way each time."""
    return torch.Generator().manual_seed(7), random.Random(7), np.random.default_rng(7)


def _draw(generators: tuple) -> tuple:
    torch_generator, python, numpy = generators
    return torch.rand(3, generator=torch_generator).tolist(), python.random(), float(numpy.random())


def test_a_second_thread_sees_no_change_while_a_check_runs():
    """The thread keeps drawing from its own generators, reads the warning filters and whether the
    collector runs, and makes cyclic garbage, for as long as checks run beside it."""
    reference = _generators()
    expected = [_draw(reference) for _ in range(200)]
    filters = list(warnings.filters)
    done, seen = threading.Event(), {"enabled": [], "filters": [], "draws": None, "collected": 0}

    def other_thread() -> None:
        draws, generators = [], _generators()
        while not done.is_set() or len(draws) < 200:
            seen["enabled"].append(gc.isenabled())
            seen["filters"].append(list(warnings.filters) == filters)
            for _ in range(50):  # cycles only the collector frees
                cycle = []
                cycle.append(cycle)
            if len(draws) < 200:
                draws.append(_draw(generators))
        seen["draws"] = draws

    def count(phase: str, info: dict) -> None:
        if phase == "stop" and threading.current_thread() is worker:
            seen["collected"] += info["collected"]

    worker = threading.Thread(target=other_thread)
    gc.callbacks.append(count)
    try:
        torch.manual_seed(3)
        worker.start()
        for _ in range(3):
            fxflow.check(Slow(), torch.randn(8, 64))
    finally:
        done.set()
        worker.join()
        gc.callbacks.remove(count)
    assert all(seen["enabled"]) and all(seen["filters"]), (seen["enabled"].count(False), seen["filters"].count(False))
    assert seen["draws"] == expected
    assert seen["collected"] > 0  # the thread's garbage was collected automatically while the checks ran


def test_copy_on_write_sees_a_write_through_a_view_an_out_argument_and_a_tensor_list():
    """The schema's written arguments, whatever form they take (limit 0: nothing copied up front)."""
    from fxflow.core.copy_on_write import copy_on_write
    from fxflow.core.state import TensorValues

    a, b, c, untouched = torch.zeros(4), torch.zeros(4), torch.zeros(4), torch.zeros(4)
    values = TensorValues.save([a, b, c, untouched], "a tensor", limit=0)
    assert all(copy is None for _, _, copy in values.tensors)
    with copy_on_write(values.tensors):
        a[1:3].add_(1)  # through a view of it
        torch.add(b, 1, out=b)  # an out= argument
        torch._foreach_add_([c], 1)  # one of a list of written tensors (an optimizer's foreach step)
        untouched + 1  # read only: no copy
    assert [copy is not None for _, _, copy in values.tensors] == [True, True, True, False]
    assert values.restore() == [] and all(float(t.abs().sum()) == 0 for t in (a, b, c, untouched))


class FillsItsInputDict(nn.Module):
    """As sentence-transformers' modules do: forward adds its results to the features dict it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, features: dict) -> dict:
        features["embedding"] = self.linear(features["x"])
        features.setdefault("calls", []).append(1)
        return features["embedding"]


def test_an_input_dict_forward_fills_is_left_as_given():
    features = {"x": torch.randn(2, 4)}
    given = dict(features)
    report = fxflow.check(FillsItsInputDict(), (features,))
    assert report.verified and report.status == "ok"
    assert features.keys() == given.keys() and features["x"] is given["x"]  # no key added, same tensor


def test_inside_the_guard_a_model_over_the_copy_limit_has_nothing_copied_up_front(monkeypatch):
    """Over the limit every op is watched for writes anyway: a copy made up front would only cost more
    (issue 38). Under it everything is copied up front. Either way a write in place is put back."""
    from fxflow.core import guard as guard_module

    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 2))  # 4,290 float32 values: 17,160 bytes
    weights = [p.detach().clone() for p in model.parameters()]
    for limit, copied in ((17_160, True), (16_640, False)):  # the first Linear alone fits in 16,640 bytes
        monkeypatch.setattr(guard_module, "COPY_LIMIT_BYTES", limit)
        with guard(model) as saved:
            assert [copy is not None for _, _, copy in saved.values[0].tensors] == [copied] * 4, limit
            with torch.no_grad():
                model[0].weight.add_(1)
        assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights))


def test_the_copy_limit_is_at_most_a_quarter_of_the_memory_available_now():
    from fxflow.core.guard import available_memory, copy_limit

    with open("/proc/meminfo") as handle:
        free = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("MemAvailable:"))
    assert abs(available_memory() - free) < 256 * 2**20  # the system's own figure, read a moment apart
    assert copy_limit() <= min(COPY_LIMIT_BYTES, available_memory() // 4)
