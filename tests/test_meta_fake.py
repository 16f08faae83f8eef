"""``device="meta"`` records the run (issue 38, item 4): forward and backward under a fake mode, on fake
twins of the weights, recorded as a real run is; the verdicts on structure are a real check's."""
from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers")

import fxflow  # noqa: E402
from gradtruth import real_grads  # noqa: E402


def _config() -> "transformers.LlamaConfig":
    return transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=4, use_cache=False)


_FORWARDS: list[str] = []  # the input's type, per forward call (outside the model: the check puts its attributes back)


class Planted(torch.nn.Module):
    """LLaMA with three planted faults: the embeddings' output detached (``embed_tokens`` cut), one
    frozen projection, and a layer never called (unused). Notes what each forward call was given."""

    def __init__(self) -> None:
        super().__init__()
        self.llama = transformers.LlamaForCausalLM(_config())
        self.llama.model.layers[0].mlp.up_proj.weight.requires_grad_(False)
        self.spare = torch.nn.Linear(64, 64)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        _FORWARDS.append(type(input_ids).__name__)
        embeds = self.llama.model.embed_tokens(input_ids).detach()  # planted: the embeddings learn nothing
        return self.llama(inputs_embeds=embeds).logits


def _ids() -> torch.Tensor:
    return torch.randint(0, 128, (1, 16), generator=torch.Generator().manual_seed(0))


def _recorded(report) -> None:
    """The report's capture is the recording of the meta run itself, not the export fallback."""
    assert report.trace.method == "runtime", report.trace.notes
    assert report.trace.nodes > 100
    assert not any(note.startswith("runtime failed") for note in report.trace.notes), report.trace.notes


def test_a_llama_built_on_meta_is_checked_on_its_recorded_run() -> None:
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(_config())
    report = fxflow.check(model, {"input_ids": _ids()}, device="meta")
    _recorded(report)
    assert report.status == "structure verified" and report.exit_code == 0
    assert {(p.static, p.dynamic) for p in report.parameters} == {("reachable", "present")}
    assert all(p.is_meta for p in model.parameters())  # still on meta: nothing was allocated for it
    assert any("cannot be given" in note for note in report.notes)  # says what a meta run cannot see


def test_structure_verdicts_on_meta_are_the_real_checks_and_the_model_is_left_byte_identical() -> None:
    torch.manual_seed(0)
    model = Planted()
    ids = _ids()
    truth = real_grads(model, (ids,))
    before = {name: (t.detach().clone(), t.requires_grad, t.grad) for name, t in model.state_dict(keep_vars=True).items()}
    objects = [id(t) for t in model.state_dict(keep_vars=True).values()]

    real = fxflow.check(model, ids)
    _FORWARDS.clear()
    meta = fxflow.check(model, ids, device="meta")

    _recorded(meta)
    # one run, on fakes, and the capture is its recording: no forward on the real weights (symbolic tracing,
    # which fails on LLaMA's control flow, sees proxies)
    assert _FORWARDS.count("FakeTensor") == 1 and "Tensor" not in _FORWARDS, _FORWARDS
    structure = lambda report: [(p.name, p.static, [(s.op, s.source) for s in p.cut_by])  # noqa: E731
                                for p in report.parameters]
    assert structure(meta) == structure(real)
    verdicts = {p.name: p.static for p in meta.parameters}
    assert verdicts["llama.model.embed_tokens.weight"] == "cut"
    assert verdicts["llama.model.layers.0.mlp.up_proj.weight"] == "frozen"
    assert verdicts["spare.weight"] == verdicts["spare.bias"] == "unused"
    # gradient presence is the plain torch backward's, parameter by parameter
    assert {p.name: p.dynamic for p in meta.parameters} == {
        name: "present" if arrived else "missing" for name, arrived in truth.items()}
    assert all(p.agree for p in meta.parameters)
    assert not any("stand-in" in note for note in meta.notes)  # LLaMA reads no value a fake lacks
    # the user's model: the same tensor objects, values, flags, no gradient left behind
    after = model.state_dict(keep_vars=True)
    assert [id(t) for t in after.values()] == objects
    for name, (value, requires_grad, grad) in before.items():
        assert torch.equal(after[name].detach(), value) and after[name].requires_grad == requires_grad
        assert after[name].grad is grad is None
    assert not any(type(t) is not torch.nn.Parameter for t in model.parameters())


class ReadsAValue(torch.nn.Module):
    """Branches on a value computed from its weights: fake tensors have no such value."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if h.abs().sum() > 0:  # the read: true on real values (and on the stand-ins)
            h = self.b(h)
        return h


def test_an_op_fakes_cannot_answer_runs_on_stand_ins_and_the_report_says_where() -> None:
    torch.manual_seed(0)
    model, x = ReadsAValue(), torch.randn(2, 4)
    report = fxflow.check(model, (x,), device="meta", capture_methods=["runtime"])
    assert report.trace.method == "runtime", report.trace.notes
    assert {p.name: p.dynamic for p in report.parameters} == {
        name: "present" if arrived else "missing" for name, arrived in real_grads(model, (x,)).items()}
    stand_in = [note for note in report.notes if "stand-in" in note]
    assert len(stand_in) == 1 and "test_meta_fake.py:" in stand_in[0]  # the line that read the value


MODEL_FILE = '''
import torch
import transformers


class Planted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=4, use_cache=False)
        self.llama = transformers.LlamaForCausalLM(config)

    def forward(self, input_ids):
        embeds = self.llama.model.embed_tokens(input_ids).detach()  # planted
        return self.llama(inputs_embeds=embeds).logits


def example_inputs():
    return {"input_ids": torch.randint(0, 128, (1, 16))}
'''


def test_cli_device_meta_records_the_run_and_names_the_cut(run_fxflow, write_model, tmp_path) -> None:
    path = write_model(tmp_path, MODEL_FILE)
    code, out, err = run_fxflow("check", f"{path}:Planted", "--device", "meta", "--json", env={"HF_HUB_OFFLINE": "1"})
    assert code == 1, err
    report = json.loads(out)
    assert report["trace"]["method"] == "runtime", report["trace"]["notes"]
    assert not any(note.startswith("runtime failed") for note in report["trace"]["notes"])
    cut = [p for p in report["parameters"] if p["static"] == "cut"]
    assert [p["name"] for p in cut] == ["llama.model.embed_tokens.weight"]
    assert cut[0]["dynamic"] == "missing" and cut[0]["cut_by"][0]["op"] == "detach"
    assert cut[0]["cut_by"][0]["source"].endswith("model.py:13")
