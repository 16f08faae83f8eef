"""Target loading and example inputs, in process: the pieces the CLI is built from."""
from __future__ import annotations

import random
import sys

import pytest
import torch
import torch.nn as nn

from fxflow.errors import FxflowError
from fxflow.prepare.inputs import check_input_count, infer_inputs, make_inputs, parse_input_size
from fxflow.prepare.load import load_target, parse_args, split_target
from fxflow.core.guard import ATTRIBUTES_ONLY, guard

from conftest import TARGETS


def test_parse_args_reads_literals_and_bare_words():
    assert parse_args(["hidden=64", "scale=0.5", "name='x'", "act=relu", "sizes=(1, 2)", "flag=True"]) == {
        "hidden": 64, "scale": 0.5, "name": "x", "act": "relu", "sizes": (1, 2), "flag": True}
    with pytest.raises(FxflowError):
        parse_args(["64"])


@pytest.mark.parametrize("target,expected", [
    ("model.py:Net", ("model.py", "Net")),
    ("pkg.models:build", ("pkg.models", "build")),
    ("C:/x/model.py:Net", ("C:/x/model.py", "Net")),
])
def test_split_target(target, expected):
    assert split_target(target) == expected


def test_split_target_without_a_name():
    assert split_target("model.py") == ("model.py", None)


@pytest.mark.parametrize("target", ["model.py:", ":Net", "C:Net"])
def test_split_target_rejects(target):
    with pytest.raises(FxflowError):
        split_target(target)


def test_parse_input_size():
    assert parse_input_size("16,10") == ((16, 10), torch.float32)
    assert parse_input_size(" 2, 7 : long") == ((2, 7), torch.int64)
    assert parse_input_size("3:bool") == ((3,), torch.bool)
    for bad in ("16x10", "", "2,7:complex999", "-1,3"):
        with pytest.raises(FxflowError):
            parse_input_size(bad)


def test_integer_inputs_are_valid_ids_for_the_smallest_embedding():
    model = nn.ModuleDict({"a": nn.Embedding(3, 4), "b": nn.Embedding(50, 4)})
    torch.manual_seed(0)
    (ids,) = make_inputs(model, ["64,64:long"])
    assert ids.dtype == torch.int64 and int(ids.min()) >= 0 and int(ids.max()) == 2


def test_inference_leaves_the_global_random_state_alone():
    model = nn.Linear(5, 2)
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    first = infer_inputs(model, seed=7)
    assert torch.equal(torch_state, torch.get_rng_state()) and python_state == random.getstate()
    assert torch.equal(first[0], infer_inputs(model, seed=7)[0])
    assert first[0].shape == (2, 5)


def test_inference_gives_up_when_forward_takes_two_inputs():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x, y):
            return self.fc(x) + y

    assert infer_inputs(Two()) is None


def test_input_count_is_checked_against_forward():
    check_input_count(nn.Linear(3, 2), (torch.zeros(1, 3),))
    with pytest.raises(FxflowError, match="forward takes 1"):
        check_input_count(nn.Linear(3, 2), (torch.zeros(1, 3), torch.zeros(1, 3)))


def test_loading_a_file_writes_no_bytecode_and_keeps_sys_path(tmp_path):
    (tmp_path / "helper.py").write_text("WIDTH = 3\n")
    (tmp_path / "model.py").write_text(
        "import torch.nn as nn\nfrom helper import WIDTH\n\n\n"
        "class Net(nn.Linear):\n    def __init__(self):\n        super().__init__(WIDTH, 1)\n")
    path_before = list(sys.path)
    loaded = load_target(f"{tmp_path}/model.py:Net")
    assert loaded.model.in_features == 3
    assert sys.path == path_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["helper.py", "model.py"]


def test_the_module_name_is_stable():
    first = load_target(f"{TARGETS}/models.py:Good").model
    second = load_target(f"{TARGETS}/models.py:Good").model
    assert type(first).__module__ == type(second).__module__


def test_preserved_attributes_restores_containers_in_place():
    model = nn.Linear(2, 2)
    history: list = [1]
    model.history = history
    model.table = {"a": 1}
    with guard(model, **ATTRIBUTES_ONLY):
        model.history.append(2)
        model.table["b"] = 2
        model.extra = "new"
        model.history = []
    assert model.history is history and history == [1]
    assert model.table == {"a": 1}
    assert not hasattr(model, "extra")


def test_the_guard_puts_back_values_grads_and_random_state():
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    model[0].weight.grad = grad = torch.ones(3, 3)
    weight, stats = model[0].weight.detach().clone(), model[1].running_mean.clone()
    rng = torch.get_rng_state()
    with guard(model, fresh_grads=True) as kept:
        model(torch.randn(4, 3)).sum().backward()
        with torch.no_grad():
            model[0].weight.add_(1)
        model.eval()
    assert kept.notes == []
    assert model[0].weight.grad is grad and torch.equal(grad, torch.ones(3, 3))
    assert torch.equal(model[0].weight, weight) and torch.equal(model[1].running_mean, stats)
    assert int(model[1].num_batches_tracked) == 0 and model.training
    assert torch.equal(rng, torch.get_rng_state())


def _write(tmp_path, source: str):
    import textwrap

    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(source))
    return str(path)


HEADER = """
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            return self.block(x)
"""


def test_name_is_picked_when_example_inputs_says_which(tmp_path):
    path = _write(tmp_path, HEADER + "\n    def example_inputs():\n        return torch.randn(2, 4)\n")
    loaded = load_target(path)
    assert loaded.target == f"{path}:Net" and type(loaded.model).__name__ == "Net"


def test_ambiguous_file_lists_the_candidates(tmp_path):
    path = _write(tmp_path, HEADER)  # no example_inputs(): Block could be meant as well
    with pytest.raises(FxflowError, match="several nn.Module subclasses: Block, Net"):
        load_target(path)
    two_roots = HEADER + "\n    class Other(nn.Module):\n        pass\n\n    def example_inputs():\n        return None\n"
    with pytest.raises(FxflowError, match="Block, Net, Other"):
        load_target(_write(tmp_path, two_roots))


def test_file_without_modules(tmp_path):
    with pytest.raises(FxflowError, match="defines no nn.Module subclass"):
        load_target(_write(tmp_path, "x = 1\n"))
