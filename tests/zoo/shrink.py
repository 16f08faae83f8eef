"""A general builder for the zoo: any transformers model type, its config's defaults shrunk.

:func:`tiny_config` takes a model type's default config and shrinks every size it knows by name
(layers to 2, widths to 32-64, heads to 2, vocabulary to 99, images to 32x32, experts to 4),
sub-configs too (``text_config``, ``vision_config``, ...). :func:`tiny_inputs` makes the keyword
inputs a user would pass, from forward's signature and the model's ``main_input_name``. Model
types whose defaults need more than that have a row in :mod:`.auto`'s overrides.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers import PretrainedConfig

VOCAB, TOKENS, BATCH = 99, 8, 2
IMAGE = 32

# attribute name -> the most it may be; a default that is smaller stays as it is
CEILINGS: dict[str, int] = {
    **dict.fromkeys(("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
                     "num_decoder_layers", "num_encoder_layers", "text_layers", "vision_layers", "num_blocks",
                     "num_self_attends_per_block", "num_text_layers", "num_vision_layers", "depth",
                     "num_cross_layers", "cross_layers", "num_qformer_layers", "encoder_depth", "decoder_depth",
                     "num_mixer_layers"), 2),
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "hidden_dim", "word_embed_proj_dim",
                     "embedding_size", "projection_dim", "text_hidden_size", "vision_hidden_size", "d_latents",
                     "encoder_hidden_size", "n_embed", "model_dim", "emb_dim", "projection_size"), 32),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "d_inner",
                     "n_inner", "feed_forward_size", "moe_intermediate_size", "shared_expert_intermediate_size",
                     "intermediate_size_mlp", "expert_intermediate_size", "mlp_dim", "ffn_hidden_size"), 64),
    **dict.fromkeys(("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads",
                     "num_heads", "num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num"), 2),
    **dict.fromkeys(("head_dim", "attention_head_size", "d_kv", "kv_channels", "qk_nope_head_dim", "qk_rope_head_dim",
                     "v_head_dim", "qk_head_dim"), 16),
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank"), 16),
    **dict.fromkeys(("vocab_size", "text_vocab_size"), VOCAB),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"), 4),
    **dict.fromkeys(("num_experts_per_tok", "moe_topk", "top_k"), 2),
    **dict.fromkeys(("image_size", "img_size"), IMAGE),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "max_seq_len", "n_ctx"), 64),
    "num_channels_in_first_layer": 8,
    "num_queries": 8,
}
# default ids that must stay below the vocabulary
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
             "cls_token_id", "mask_token_id", "unk_token_id")


def _shrink_value(name: str, value: Any) -> Any:
    ceiling = CEILINGS.get(name)
    if ceiling is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return min(value, ceiling)
    return value


def shrink(config: PretrainedConfig) -> PretrainedConfig:
    """``config`` with every size it names shrunk in place (sub-configs too); returns it."""
    for name, value in list(vars(config).items()):
        if isinstance(value, PretrainedConfig):
            shrink(value)
        elif isinstance(value, dict) and name.endswith("_config"):
            for key, item in value.items():
                value[key] = _shrink_value(key, item)
        else:
            shrunk = _shrink_value(name, value)
            if shrunk is not value:
                setattr(config, name, shrunk)
    # ids above the shrunk vocabulary (a default pad of 50256) would index out of range
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int):
        for name in TOKEN_IDS:
            value = getattr(config, name, None)
            if isinstance(value, int) and value >= vocab:
                setattr(config, name, min(2, vocab - 1))
    if hasattr(config, "head_dim") and getattr(config, "hidden_size", None):  # None too: forward divides by it
        heads = getattr(config, "num_attention_heads", 2)
        if isinstance(heads, int) and heads and config.hidden_size % heads == 0:
            config.head_dim = config.hidden_size // heads
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return config


def ids(high: int = VOCAB, tokens: int = TOKENS) -> torch.Tensor:
    """Token ids above the special ones (0-2) and below ``high``."""
    return torch.randint(3, high, (BATCH, tokens))


def _image_size(config: PretrainedConfig) -> int:
    for source in (config, getattr(config, "vision_config", None)):
        size = getattr(source, "image_size", None)
        if isinstance(size, int):
            return size
        if isinstance(size, (list, tuple)) and size:
            return int(size[0])
    return IMAGE


def _channels(config: PretrainedConfig) -> int:
    for source in (config, getattr(config, "vision_config", None)):
        channels = getattr(source, "num_channels", None)
        if isinstance(channels, int):
            return channels
    return 3


def tiny_inputs(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The keyword inputs a user would pass: the main input, and decoder ids for an encoder-decoder."""
    config = model.config
    accepted = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    vocab = getattr(config, "vocab_size", None) or getattr(getattr(config, "text_config", None), "vocab_size", VOCAB)
    inputs: dict[str, torch.Tensor] = {}
    if main in ("input_ids", "decoder_input_ids") or main not in accepted:
        inputs["input_ids"] = ids(min(vocab, VOCAB))
    elif main == "pixel_values":
        size = _image_size(config)
        inputs["pixel_values"] = torch.randn(BATCH, _channels(config), size, size)
    elif main == "input_values":
        inputs["input_values"] = torch.randn(BATCH, 1600)
    elif main == "input_features":
        bins = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", 80)
        inputs["input_features"] = torch.randn(BATCH, 16, bins)
    else:
        raise NotImplementedError(f"no tiny input for main input {main!r}")
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in accepted:
        inputs["decoder_input_ids"] = ids(min(getattr(config, "vocab_size", None) or VOCAB, VOCAB))
    return inputs


def boxes(count: int = TOKENS) -> torch.Tensor:
    """One box per token, (x0, y0, x1, y1) in [0, 1] with x0 <= x1 and y0 <= y1, as layout models take them."""
    corner = torch.rand(BATCH, count, 2) * 0.5
    return torch.cat([corner, corner + torch.rand(BATCH, count, 2) * 0.4], -1)


def video(model: torch.nn.Module, key: str = "pixel_values", frames: int = 4) -> dict[str, torch.Tensor]:
    """``frames`` frames of the model's image size: (batch, frames, channels, height, width)."""
    size = _image_size(model.config)
    return {key: torch.randn(BATCH, frames, _channels(model.config), size, size)}


def with_image_tokens(token_id: int, count: int, **tensors: torch.Tensor) -> dict[str, torch.Tensor]:
    """Token ids with ``count`` image placeholders (``token_id``) after the first token, plus ``tensors``:
    what a multimodal processor gives, so the image path runs."""
    tokens = ids(tokens=max(TOKENS, count + 2))
    tokens[tokens == token_id] = token_id + 1
    tokens[:, 1:1 + count] = token_id
    return {"input_ids": tokens, **tensors}


def two_towers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A CLIP-style model's text and image inputs."""
    config = model.config
    size = _image_size(config)
    return {"input_ids": ids(), "pixel_values": torch.randn(BATCH, _channels(config), size, size)}
