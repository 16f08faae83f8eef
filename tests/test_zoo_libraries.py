"""The zoo beyond transformers (tests/zoo/libraries.py): timm, torchvision, diffusers, peft,
torch_geometric, torchaudio and the thirteen libraries of issue 40's models, one per library in this
suite (the matrix checks them all).

Each sampled model's verdicts must agree with a plain backward on every parameter, and its exit
code must be the pinned one (tests/zoo/known_exits.py), whose class (weights that start at zero
vs. a parameter that stays dry) a few real optimizer steps confirm. Also here: the
never-crash check of issue 30 on timm's poolformerv2, and the Python ``torchvision::nms``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from gradtruth import real_gradients  # noqa: E402
from zoo import known  # noqa: E402
from zoo.known_exits import DRY, PENDING, STEP_ONE_ZEROS, assert_exit_as_pinned  # noqa: E402
from zoo.libraries import LIBRARIES, MISSING, OUTSIDE_TEST_EXTRA, PREFIXES, not_built_here  # noqa: E402
from zoo.run import SPECIMENS, default_chain_agrees, learning  # noqa: E402
from zoo.vision_ops import extension_loads, greedy_nms  # noqa: E402


def test_every_library_of_the_test_extra_is_in_the_zoo() -> None:
    assert set(MISSING) <= set(OUTSIDE_TEST_EXTRA), MISSING
    rebound = [name for name, value in vars(torch).items()  # torch_geometric rebinds torch.index_select
               if callable(value) and getattr(value, "__module__", "").split(".")[0] in LIBRARIES]
    assert rebound == [], "a library's import changed torch itself for every later test: undo it in zoo/libraries.py"
    families = {specimen.family for specimen in SPECIMENS.values()}
    present = set(LIBRARIES) - set(MISSING)
    assert families >= present
    assert all(name.startswith(PREFIXES[specimen.family]) for name, specimen in SPECIMENS.items()
               if specimen.family in LIBRARIES)
    assert {library: SPECIMENS[name].family for library, name in known.SUITE_SAMPLE.items() if library in present} == {
        library: library for library in present}
    assert all(name in SPECIMENS or not_built_here(name) for name in set(STEP_ONE_ZEROS) | set(DRY) | PENDING) and not set(STEP_ONE_ZEROS) & set(DRY)
    assert not PENDING & set(known.SUITE_SAMPLE.values())


@pytest.mark.parametrize("name", sorted(name for library, name in known.SUITE_SAMPLE.items() if library not in MISSING))
def test_one_model_per_library_agrees_and_exits_as_pinned(name: str) -> None:
    assert_exit_as_pinned(name, default_chain_agrees(name), learning(name))


POOLFORMER = '''
import timm
import torch
from timm.models.metaformer import GroupNorm1NoBias, MetaFormer


def poolformerv2(**sizes):
    """timm's poolformerv2 (pooling token mixer, StarReLU, GroupNorm without bias), one block per stage."""
    return MetaFormer(norm_layers=GroupNorm1NoBias, use_mlp_head=False, num_classes=10, **sizes)


class PoolFormer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = poolformerv2(depths=(1, 1, 1, 1), dims=(8, 16, 32, 64))

    def forward(self, images):
        return self.net(images)


def example_inputs():
    return torch.randn(2, 3, 32, 32)
'''


def test_a_check_on_the_metaformer_family_never_takes_the_process_down(tmp_path, write_model, run_fxflow) -> None:
    """Issue 30: localize explained poolformerv2's vanishing norms with a pruned ``autograd.grad``
    that segfaulted on torch 2.13 (this small one has vanishing norms and MLP weights too). The
    check must finish (exit 0 or 1, never a signal), its verdicts must agree with a plain backward
    of the same seeded model, and the vanishing parameters must still be explained (localize ran,
    from a plain ``loss.backward()``)."""
    pytest.importorskip("timm")
    # the check's own process imports torchvision (timm does) as the test's did: the same Python op
    path = write_model(tmp_path, f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                                 "from zoo.vision_ops import define_nms_if_missing\ndefine_nms_if_missing()\n"
                                 + POOLFORMER)
    code, out, err = run_fxflow("check", f"{path}:PoolFormer", "--json")
    assert code in (0, 1), (code, err[-2000:])
    report = json.loads(out)
    namespace: dict = {}
    exec(compile(POOLFORMER, str(path), "exec"), namespace)
    torch.manual_seed(0)  # the CLI's --seed default: the same weights and inputs
    model = namespace["PoolFormer"]().net.train()
    truth = real_gradients(model, (torch.randn(2, 3, 32, 32),))
    verdicts = {p["name"].removeprefix("net."): p for p in report["parameters"]}
    assert set(verdicts) == set(truth)
    for name, grad in truth.items():
        wet = grad is not None and bool(grad.any())
        assert (verdicts[name]["dynamic"] in ("ok", "vanishing")) == wet, (name, verdicts[name]["dynamic"])
    explained = [p for p in verdicts.values() if p["dynamic"] in ("vanishing", "zero")]
    assert explained and all(p["diagnosis"] for p in explained), explained[:2]


def test_torchvision_nms_is_the_kernels_or_the_python_one_that_keeps_the_same_boxes() -> None:
    """Where torchvision's extension loads, the zoo's Python NMS must keep exactly the boxes its
    kernel keeps; where it does not, ``torchvision::nms`` must be that Python op (the zoo imported it)."""
    import torchvision

    reference = torchvision.ops.nms if extension_loads() else torch.ops.torchvision.nms
    for seed in range(10):
        generator = torch.Generator().manual_seed(seed)
        boxes = torch.rand(40, 4, generator=generator) * 50
        boxes[:, 2:] += boxes[:, :2] + torch.rand(40, 2, generator=generator) * 30
        scores = torch.rand(40, generator=generator)
        for threshold in (0.3, 0.7):
            assert torch.equal(greedy_nms(boxes, scores, threshold), reference(boxes, scores, threshold))


def test_a_test_worker_runs_torch_on_the_threads_it_was_given() -> None:
    """tests/conftest.py gives each pytest-xdist worker one OpenMP thread; OpenMP reads the setting
    only when torch is first imported, so an import of torch above that line (one did) quietly
    leaves every worker on all cores, and the convolution-heavy zoo models took ten times as long."""
    given = os.environ.get("OMP_NUM_THREADS")
    if given is not None:  # the README's command runs under pytest-xdist, which gives one
        assert torch.get_num_threads() == int(given)
