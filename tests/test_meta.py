"""Models too big for memory: the meta device gives the full static analysis and gradient presence."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers")

import fxflow  # noqa: E402
from fxflow.prepare.unwrap import meta_copy, meta_inputs  # noqa: E402
from gradtruth import real_grads  # noqa: E402


def _llama_config(**overrides):
    base = dict(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=2, max_position_embeddings=16)
    base.update(overrides)
    return transformers.LlamaConfig(**base)


def _planted():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "hf_planted_cut.py"
    spec = importlib.util.spec_from_file_location("fxflow_example_hf_planted_cut_meta", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_meta_model_gives_the_same_static_verdicts_and_gradient_presence() -> None:
    module = _planted()
    torch.manual_seed(0)
    model, inputs = module.FrozenEmbeddingsLlama(), (module.example_inputs(),)
    truth = real_grads(model, inputs)
    on_cpu = fxflow.check(model, inputs)
    on_meta = fxflow.check(meta_copy(model), meta_inputs(inputs))
    assert [(p.name, p.static, [s.source for s in p.cut_by]) for p in on_meta.parameters] == \
        [(p.name, p.static, [s.source for s in p.cut_by]) for p in on_cpu.parameters]
    assert {p.name: p.dynamic for p in on_meta.parameters} == {
        name: ("present" if arrived else "missing") for name, arrived in truth.items()}
    assert all(p.agree for p in on_meta.parameters)
    assert any("cannot" in note for note in on_meta.notes)  # says which verdicts a meta run cannot give


def test_model_built_on_meta_allocates_nothing() -> None:
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(_llama_config(num_hidden_layers=3))
    ids = torch.randint(0, 99, (1, 8)).to("meta")
    report = fxflow.check(model, ids)
    assert all(p.is_meta for p in model.parameters())
    assert report.trace.method != "none"
    assert {(p.static, p.dynamic) for p in report.parameters} == {("reachable", "present")}


def test_cli_device_meta_names_the_planted_cut(run_fxflow) -> None:
    code, out, err = run_fxflow("check", "examples/hf_planted_cut.py:FrozenEmbeddingsLlama", "--device", "meta",
                                "--json", env={"HF_HUB_OFFLINE": "1"})
    assert code == 1, err
    import json

    report = json.loads(out)
    cut = [p for p in report["parameters"] if p["static"] == "cut"]
    assert [p["name"] for p in cut] == ["model.embed_tokens.weight"]
    assert cut[0]["dynamic"] == "missing" and cut[0]["cut_by"][0]["op"] == "no_grad"
    assert cut[0]["cut_by"][0]["source"].startswith("examples/hf_planted_cut.py:")


@pytest.mark.skipif(os.environ.get("FXFLOW_BIG") != "1", reason="7B-sized meta check: set FXFLOW_BIG=1")
def test_llama_7b_sized_config_on_meta() -> None:
    config = _llama_config(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                           num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=2048)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    report = fxflow.check(model, torch.randint(0, 32000, (1, 16)).to("meta"))
    assert len(report.parameters) == 291
    assert {(p.static, p.dynamic, p.agree) for p in report.parameters} == {("reachable", "present", True)}



_FORWARDS: list[str] = []  # outside the module: the check puts the module's own attributes back


class _Counted(torch.nn.Module):
    """Two layers with a detach between them; notes each forward call. ``layer_drop`` draws a
    number on the CPU, as a layer drop does, and branches on it."""

    def __init__(self, layer_drop: bool = False) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        self.layer_drop = layer_drop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _FORWARDS.append("forward")
        if self.layer_drop and torch.rand([]) > 2.0:  # never true: the layer always runs
            return self.b(x)
        return self.b(self.a(x).detach())


def test_a_model_on_meta_runs_forward_once_and_its_gradients_are_the_real_backwards() -> None:
    """The recorded meta forward is differentiated itself: no second forward on fake tensors."""
    torch.manual_seed(0)
    model = _Counted()
    truth = real_grads(model, (torch.randn(2, 4),))
    _FORWARDS.clear()
    report = fxflow.check(meta_copy(model), torch.randn(2, 4).to("meta"), capture_methods=["runtime"])
    assert len(_FORWARDS) == 1
    assert {p.name: p.dynamic for p in report.parameters} == {
        name: ("present" if arrived else "missing") for name, arrived in truth.items()}
    assert {p.name: p.static for p in report.parameters} == {
        "a.weight": "cut", "a.bias": "cut", "b.weight": "reachable", "b.bias": "reachable"}


def test_a_meta_forward_that_branches_on_a_scalar_it_draws_follows_the_real_branch() -> None:
    """``torch.rand([])`` (a layer drop) under the fake mode holds its real value, as a scalar forward
    makes from nothing: the branch on it is the real run's, decided in the one recorded forward."""
    torch.manual_seed(0)
    model = _Counted(layer_drop=True)
    truth = real_grads(model, (torch.randn(2, 4),))
    _FORWARDS.clear()
    report = fxflow.check(meta_copy(model), torch.randn(2, 4).to("meta"), capture_methods=["runtime"])
    assert len(_FORWARDS) == 1
    assert {p.name: p.dynamic for p in report.parameters} == {
        name: ("present" if arrived else "missing") for name, arrived in truth.items()}
    assert not any("stand-in" in note for note in report.notes)
