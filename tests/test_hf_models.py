"""Real Hugging Face architectures (tiny configs, random weights, no downloads) against a real backward.

Every parameter's static verdict must agree with the real backward, then planted bugs must be
named: the right parameters, the right op, the right line.
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

transformers = pytest.importorskip("transformers")

import fxflow  # noqa: E402
from fxflow.core.source import display_path  # noqa: E402
from gradtruth import assert_agrees, line_of, real_grads  # noqa: E402

T = transformers
SMALL = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64)


def _ids() -> torch.Tensor:
    return torch.randint(0, 99, (2, 8))


def gpt2():
    return T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=99, n_positions=16,
                                          bos_token_id=0, eos_token_id=0)), (_ids(),)


def bert():
    return T.BertForSequenceClassification(T.BertConfig(vocab_size=99, max_position_embeddings=16, **SMALL)), (_ids(),)


def llama():
    config = T.LlamaConfig(vocab_size=99, num_key_value_heads=2, max_position_embeddings=16, **SMALL)
    return T.LlamaForCausalLM(config), (_ids(),)


def t5():
    config = T.T5Config(vocab_size=99, d_model=32, d_ff=64, d_kv=16, num_layers=2, num_heads=2, decoder_start_token_id=0)
    ids = _ids()
    return T.T5ForConditionalGeneration(config), (ids, None, ids)


def vit():
    config = T.ViTConfig(image_size=16, patch_size=8, num_channels=3, num_labels=3, **SMALL)
    return T.ViTForImageClassification(config), (torch.randn(2, 3, 16, 16),)


def clip():
    config = T.CLIPConfig(text_config=dict(vocab_size=99, max_position_embeddings=16, **SMALL),
                          vision_config=dict(image_size=16, patch_size=8, **SMALL), projection_dim=16)
    return T.CLIPModel(config), (_ids(), torch.randn(2, 3, 16, 16))


def whisper():
    config = T.WhisperConfig(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                             decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8,
                             max_source_positions=8, max_target_positions=16, pad_token_id=1, bos_token_id=2,
                             eos_token_id=2, decoder_start_token_id=2, suppress_tokens=None, begin_suppress_tokens=None)
    return T.WhisperForConditionalGeneration(config), (torch.randn(2, 8, 16), None, _ids())


def resnet():
    config = T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3)
    return T.ResNetForImageClassification(config), (torch.randn(2, 3, 32, 32),)


MODELS = [gpt2, bert, llama, t5, vit, clip, whisper, resnet]


@pytest.mark.parametrize("build", MODELS, ids=[m.__name__ for m in MODELS])
def test_every_static_verdict_agrees_with_the_real_backward(build) -> None:
    torch.manual_seed(0)
    model, inputs = build()
    report = fxflow.check(model, inputs)
    assert report.trace.method != "none", report.trace.notes
    assert_agrees(report, real_grads(model, inputs))


def test_frozen_block_is_frozen_not_cut() -> None:
    torch.manual_seed(0)
    model, inputs = bert()
    model.bert.encoder.layer[0].requires_grad_(False)
    report = fxflow.check(model, inputs)
    assert_agrees(report, real_grads(model, inputs))
    frozen = {p.name for p in report.parameters if p.static == "frozen"}
    assert frozen == {n for n, _ in model.bert.encoder.layer[0].named_parameters(prefix="bert.encoder.layer.0")}
    # frozen parameters are deliberate and never fail; what fails is the trainable layer's key bias: adding
    # q.b_k to every score of a query leaves the softmax unchanged, so its gradient is zero in exact
    # arithmetic (round-off in float32, docs/verdicts.md) and it never learns
    assert {p.name for p in report.problems} == {"bert.encoder.layer.1.attention.self.key.bias"}
    assert report.parameter("bert.encoder.layer.1.attention.self.key.bias").dynamic == "zero"


class DetachedHead(nn.Module):
    """A GPT-2 backbone whose hidden states are detached before the head."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = gpt2()[0].transformer
        self.head = nn.Linear(32, 3)

    def forward(self, input_ids):
        hidden = self.backbone(input_ids, use_cache=False).last_hidden_state
        hidden = hidden.detach()  # planted: the backbone never learns
        return self.head(hidden[:, -1])


def test_detached_hidden_states_cut_the_whole_backbone() -> None:
    torch.manual_seed(0)
    model, inputs = DetachedHead(), (_ids(),)
    report = fxflow.check(model, inputs)
    assert_agrees(report, real_grads(model, inputs))
    backbone = [p for p in report.parameters if p.name.startswith("backbone.")]
    where = f"{display_path(__file__)}:{line_of(__file__, 'hidden = hidden.detach()')}"
    assert backbone and all(p.static == "cut" and [(s.op, s.source) for s in p.cut_by] == [("detach", where)]
                            for p in backbone)
    assert {p.name for p in report.parameters if p.static == "reachable"} == {"head.weight", "head.bias"}


class ViTWithAuxHead(T.ViTForImageClassification):
    """A second head is built but forward never calls it."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self.aux_head = nn.Linear(config.hidden_size, 5)


def test_head_never_called_is_unused() -> None:
    torch.manual_seed(0)
    config = vit()[0].config
    model, inputs = ViTWithAuxHead(config), (torch.randn(2, 3, 16, 16),)
    report = fxflow.check(model, inputs)
    assert_agrees(report, real_grads(model, inputs))
    assert {p.name for p in report.parameters if p.static != "reachable"} == {"aux_head.weight", "aux_head.bias"}
    assert {p.static for p in report.parameters if p.name.startswith("aux_head")} == {"unused"}


def test_no_grad_around_embeddings_in_a_subclass() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "hf_planted_cut.py"
    spec = importlib.util.spec_from_file_location("fxflow_example_hf_planted_cut", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model, inputs = module.FrozenEmbeddingsLlama(), (module.example_inputs(),)
    report = fxflow.check(model, inputs)
    assert_agrees(report, real_grads(model, inputs))
    embed = report.parameter("model.embed_tokens.weight")
    where = f"{display_path(str(path))}:{line_of(str(path), 'with torch.no_grad()')}"  # where the region is entered
    assert (embed.static, [(s.op, s.source) for s in embed.cut_by]) == ("cut", [("no_grad", where)])
    op_line = f"{display_path(str(path))}:{line_of(str(path), 'embeds = self.model.embed_tokens')}"
    assert f"({op_line}) runs inside torch.no_grad()" in embed.cut_by[0].reason
    assert [p.name for p in report.parameters if p.static != "reachable"] == ["model.embed_tokens.weight"]
