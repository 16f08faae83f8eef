"""Hugging Face text architectures from tiny random configs (no downloads: ``HF_HUB_OFFLINE=1``),
and the sizes and helpers :mod:`.hf_media` shares (vision, speech, multimodal).

Each builder returns the model with a task head (so the head's parameters are checked too) and
the keyword inputs a user would pass. Batch 2, 8 tokens, vocabulary 99, 16x16 or 32x32 images,
400 audio samples.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch

import transformers as T

from .registry import Built, specimen

VOCAB, TOKENS = 99, 8
# The usual width for a text model: 2 layers of width 32, 2 heads.
TEXT = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=32)
DECODER = dict(TEXT, num_key_value_heads=2, use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# Encoder-decoders in the BART style.
BART = dict(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32,
            use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=2)
VISION = dict(image_size=16, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=64)
AUDIO = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
             conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4), num_conv_pos_embeddings=8,
             num_conv_pos_embedding_groups=2, num_feat_extract_layers=2,
             # SpecAugment (train mode only) on 19 frames: always masks some, so masked_spec_embed learns
             mask_time_prob=0.5, mask_time_length=2, mask_time_min_masks=1)


def ids(high: int = VOCAB, tokens: int = TOKENS) -> torch.Tensor:
    return torch.randint(3, high, (2, tokens))


def text(model: torch.nn.Module, **extra: torch.Tensor) -> tuple[torch.nn.Module, dict]:
    return model, {"input_ids": ids(), **extra}


def seq2seq(model: torch.nn.Module) -> tuple[torch.nn.Module, dict]:
    return model, {"input_ids": ids(), "decoder_input_ids": ids()}


def image(model: torch.nn.Module, size: int = 16) -> tuple[torch.nn.Module, dict]:
    return model, {"pixel_values": torch.randn(2, 3, size, size)}


def audio(model: torch.nn.Module, samples: int = 400) -> tuple[torch.nn.Module, dict]:
    return model, {"input_values": torch.randn(2, samples)}


def register(family: str, shape: Callable[[type, type, dict], Built], table: dict[str, tuple[type, type, dict]]) -> None:
    """One specimen per row of ``table`` (name: model class, config class, config), built by ``shape``."""
    for name, (model_class, config_class, config) in table.items():
        specimen(family, name=name)(functools.partial(shape, model_class, config_class, config))


def causal_lm(model_class: type, config_class: type, config: dict) -> Built:
    return text(model_class(config_class(**{**DECODER, **config})))


def classifier(model_class: type, config_class: type, config: dict) -> Built:
    return text(model_class(config_class(**{**TEXT, "num_labels": 3, **config})))


def bart_like(model_class: type, config_class: type, config: dict) -> Built:
    return seq2seq(model_class(config_class(**{**BART, **config})))


def ctc(model_class: type, config_class: type, config: dict) -> Built:
    return audio(model_class(config_class(**{**AUDIO, **config})))


def vit_like(model_class: type, config_class: type, config: dict) -> Built:
    return image(model_class(config_class(**{**VISION, "num_labels": 3, **config})))


# -- decoders ---------------------------------------------------------------------------------
register("decoder", causal_lm, {  # name: (model class, config class, config beyond DECODER)
    "llama": (T.LlamaForCausalLM, T.LlamaConfig, {}),
    "mistral": (T.MistralForCausalLM, T.MistralConfig, {"sliding_window": 4}),
    "qwen2": (T.Qwen2ForCausalLM, T.Qwen2Config, {}),
    "qwen3": (T.Qwen3ForCausalLM, T.Qwen3Config, {"head_dim": 16}),
    "phi": (T.PhiForCausalLM, T.PhiConfig, {}),
    "phi3": (T.Phi3ForCausalLM, T.Phi3Config, {}),
    "gemma": (T.GemmaForCausalLM, T.GemmaConfig, {"head_dim": 16}),
    "gemma2": (T.Gemma2ForCausalLM, T.Gemma2Config, {"head_dim": 16, "sliding_window": 4}),
    "starcoder2": (T.Starcoder2ForCausalLM, T.Starcoder2Config, {}),
    "stablelm": (T.StableLmForCausalLM, T.StableLmConfig, {}),
    "olmo2": (T.Olmo2ForCausalLM, T.Olmo2Config, {}),
    "cohere": (T.CohereForCausalLM, T.CohereConfig, {}),
})


@specimen("decoder")
def gpt2():
    return text(T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=32,
                                               use_cache=False)))


@specimen("decoder")
def gpt_neo():
    return text(T.GPTNeoForCausalLM(T.GPTNeoConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=2,
                                                   attention_types=[[["global", "local"], 1]], window_size=4,
                                                   max_position_embeddings=32, use_cache=False)))


@specimen("decoder")
def gptj():
    return text(T.GPTJForCausalLM(T.GPTJConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, rotary_dim=8,
                                               n_positions=32, use_cache=False)))


@specimen("decoder")
def gpt_neox():
    return text(T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**TEXT, use_cache=False)))


@specimen("decoder")
def gpt_bigcode():
    return text(T.GPTBigCodeForCausalLM(T.GPTBigCodeConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2,
                                                           n_positions=32, use_cache=False)))


@specimen("decoder")
def opt():
    return text(T.OPTForCausalLM(T.OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, ffn_dim=64,
                                             num_attention_heads=2, word_embed_proj_dim=32, max_position_embeddings=32,
                                             use_cache=False, pad_token_id=0)))


@specimen("decoder")
def bloom():
    return text(T.BloomForCausalLM(T.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=2,
                                                 use_cache=False)))


@specimen("decoder")
def falcon():
    return text(T.FalconForCausalLM(T.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                   num_attention_heads=2, use_cache=False)))


@specimen("decoder")
def codegen():
    return text(T.CodeGenForCausalLM(T.CodeGenConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, rotary_dim=8,
                                                     n_positions=32, n_ctx=32, use_cache=False)))


@specimen("decoder")
def xglm():
    return text(T.XGLMForCausalLM(T.XGLMConfig(vocab_size=VOCAB, d_model=32, num_layers=2, attention_heads=2,
                                               ffn_dim=64, max_position_embeddings=32, use_cache=False)))


@specimen("decoder")
def biogpt():
    return text(T.BioGptForCausalLM(T.BioGptConfig(**TEXT, use_cache=False)))


@specimen("decoder")
def mpt():
    return text(T.MptForCausalLM(T.MptConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=2, max_seq_len=32,
                                             use_cache=False)))


# -- mixture of experts (4 experts, top-2 over 16 tokens: every expert gets tokens on this batch) -----
MOE = dict(DECODER, num_local_experts=4, num_experts_per_tok=2)


@specimen("decoder (MoE)")
def mixtral():
    return text(T.MixtralForCausalLM(T.MixtralConfig(**MOE)))


@specimen("decoder (MoE)")
def qwen2_moe():
    config = T.Qwen2MoeConfig(**DECODER, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                              shared_expert_intermediate_size=32)
    return text(T.Qwen2MoeForCausalLM(config))


@specimen("decoder (MoE)")
def olmoe():
    return text(T.OlmoeForCausalLM(T.OlmoeConfig(**DECODER, num_experts=4, num_experts_per_tok=2)))


@specimen("decoder (MoE)")
def granitemoe():
    return text(T.GraniteMoeForCausalLM(T.GraniteMoeConfig(**MOE)))


@specimen("decoder (MoE)")
def qwen3_moe():
    config = T.Qwen3MoeConfig(**DECODER, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    return text(T.Qwen3MoeForCausalLM(config))


@specimen("decoder (MoE)")
def phimoe():
    return text(T.PhimoeForCausalLM(T.PhimoeConfig(**MOE)))


@specimen("encoder-decoder (MoE)")
def switch_transformers():
    config = T.SwitchTransformersConfig(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                                        num_decoder_layers=2, num_heads=2, num_experts=4, expert_capacity=16,
                                        num_sparse_encoder_layers=1, num_sparse_decoder_layers=1,
                                        decoder_start_token_id=0, use_cache=False)
    return seq2seq(T.SwitchTransformersForConditionalGeneration(config))


# -- state-space and recurrent decoders ------------------------------------------------------
@specimen("state-space")
def mamba():
    config = T.MambaConfig(vocab_size=VOCAB, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2,
                           conv_kernel=4, use_cache=False)
    return text(T.MambaForCausalLM(config))


@specimen("state-space")
def mamba2():
    config = T.Mamba2Config(vocab_size=VOCAB, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2,
                            conv_kernel=4, num_heads=4, head_dim=16, n_groups=1, chunk_size=4, use_cache=False)
    return text(T.Mamba2ForCausalLM(config))


@specimen("state-space")
def falcon_mamba():
    config = T.FalconMambaConfig(vocab_size=VOCAB, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2,
                                 conv_kernel=4, use_cache=False)
    return text(T.FalconMambaForCausalLM(config))


@specimen("state-space")
def rwkv():
    config = T.RwkvConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, attention_hidden_size=32,
                          intermediate_size=64, context_length=32, use_cache=False)
    return text(T.RwkvForCausalLM(config))


# -- encoders ---------------------------------------------------------------------------------
register("encoder", classifier, {  # name: (model class, config class, config beyond TEXT)
    "bert": (T.BertForSequenceClassification, T.BertConfig, {}),
    "roberta": (T.RobertaForSequenceClassification, T.RobertaConfig, {"pad_token_id": 1}),
    "albert": (T.AlbertForSequenceClassification, T.AlbertConfig, {"embedding_size": 16}),
    "electra": (T.ElectraForSequenceClassification, T.ElectraConfig, {"embedding_size": 16}),
    "deberta": (T.DebertaForSequenceClassification, T.DebertaConfig, {}),
    "deberta_v2": (T.DebertaV2ForSequenceClassification, T.DebertaV2Config, {}),
    "xlm_roberta": (T.XLMRobertaForSequenceClassification, T.XLMRobertaConfig, {"pad_token_id": 1}),
    "mpnet": (T.MPNetForSequenceClassification, T.MPNetConfig, {}),
    "convbert": (T.ConvBertForSequenceClassification, T.ConvBertConfig, {"embedding_size": 32}),
    "roformer": (T.RoFormerForSequenceClassification, T.RoFormerConfig, {"embedding_size": 32}),
    "squeezebert": (T.SqueezeBertForSequenceClassification, T.SqueezeBertConfig, {"embedding_size": 32}),
    "mobilebert": (T.MobileBertForSequenceClassification, T.MobileBertConfig,
                   {"embedding_size": 16, "intra_bottleneck_size": 16, "num_feedforward_networks": 1}),
    "ernie": (T.ErnieForSequenceClassification, T.ErnieConfig, {}),
    "nystromformer": (T.NystromformerForSequenceClassification, T.NystromformerConfig,
                      {"num_landmarks": 4, "segment_means_seq_len": TOKENS}),
    "big_bird": (T.BigBirdForSequenceClassification, T.BigBirdConfig, {"attention_type": "original_full"}),
    "esm": (T.EsmForSequenceClassification, T.EsmConfig, {"pad_token_id": 1}),
    "longformer": (T.LongformerForSequenceClassification, T.LongformerConfig,
                   {"attention_window": 4, "pad_token_id": 1}),
})


@specimen("encoder")
def distilbert():
    config = T.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                max_position_embeddings=32, num_labels=3)
    return text(T.DistilBertForSequenceClassification(config))


@specimen("encoder")
def xlnet():
    config = T.XLNetConfig(vocab_size=VOCAB, d_model=32, n_layer=2, n_head=2, d_inner=64, num_labels=3,
                           use_mems_train=False)
    return text(T.XLNetForSequenceClassification(config))


@specimen("encoder")
def canine():
    config = T.CanineConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                            num_hash_functions=2, num_hash_buckets=64, downsampling_rate=2, num_labels=3)
    return text(T.CanineForSequenceClassification(config))


@specimen("encoder")
def funnel():
    config = T.FunnelConfig(vocab_size=VOCAB, d_model=32, n_head=2, d_head=16, d_inner=64, block_sizes=[1, 1],
                            num_decoder_layers=1, num_labels=3)
    return text(T.FunnelForSequenceClassification(config))


@specimen("encoder")
def fnet():
    config = T.FNetConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                          max_position_embeddings=32, num_labels=3)
    # the tokenizer's keys: FNet's forward takes attention_mask only through **kwargs
    return text(T.FNetForSequenceClassification(config), attention_mask=torch.ones(2, TOKENS, dtype=torch.long))


# -- encoder-decoders -------------------------------------------------------------------------
register("encoder-decoder", bart_like, {  # name: (model class, config class, config beyond BART)
    "bart": (T.BartForConditionalGeneration, T.BartConfig, {}),
    "mbart": (T.MBartForConditionalGeneration, T.MBartConfig, {}),
    "marian": (T.MarianMTModel, T.MarianConfig, {}),
    "pegasus": (T.PegasusForConditionalGeneration, T.PegasusConfig, {}),
    "blenderbot": (T.BlenderbotForConditionalGeneration, T.BlenderbotConfig, {}),
    "blenderbot_small": (T.BlenderbotSmallForConditionalGeneration, T.BlenderbotSmallConfig, {}),
    "plbart": (T.PLBartForConditionalGeneration, T.PLBartConfig, {}),
    "m2m_100": (T.M2M100ForConditionalGeneration, T.M2M100Config, {}),
})


@specimen("encoder-decoder")
def t5():
    config = T.T5Config(vocab_size=VOCAB, d_model=32, d_ff=64, d_kv=16, num_layers=1, num_heads=2,
                        decoder_start_token_id=0, use_cache=False)
    return seq2seq(T.T5ForConditionalGeneration(config))


@specimen("encoder-decoder")
def mt5():
    config = T.MT5Config(vocab_size=VOCAB, d_model=32, d_ff=64, d_kv=16, num_layers=1, num_heads=2,
                         decoder_start_token_id=0, use_cache=False)
    return seq2seq(T.MT5ForConditionalGeneration(config))


@specimen("encoder-decoder")
def longt5():
    config = T.LongT5Config(vocab_size=VOCAB, d_model=32, d_ff=64, d_kv=16, num_layers=1, num_heads=2,
                            local_radius=2, decoder_start_token_id=0, use_cache=False)
    return seq2seq(T.LongT5ForConditionalGeneration(config))


@specimen("encoder-decoder")
def led():
    config = T.LEDConfig(**{**BART, "max_position_embeddings": None}, max_encoder_position_embeddings=32,
                         max_decoder_position_embeddings=32, attention_window=4)
    return seq2seq(T.LEDForConditionalGeneration(config))
