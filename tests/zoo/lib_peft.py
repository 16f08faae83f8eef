"""peft: every adapter type, each on the same tiny Llama causal LM trained on its own loss.

:func:`adapter_config` builds one type's config from its config class: the attention and MLP
projections as target modules, 4 virtual tokens for the prompt methods, small ranks, and the
few values a type needs beyond that (:data:`EXTRA`). The types that still do not build on this
model are :data:`UNBUILT`, each with the error it fails with (written from a run, like the pins).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
import transformers as T

from .registry import Built, specimen

FAMILY = "peft"
TARGETS = ["q_proj", "v_proj", "up_proj"]


def base_model() -> T.PreTrainedModel:
    config = T.LlamaConfig(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    return T.LlamaForCausalLM(config)


# What a type needs beyond the shared defaults of adapter_config.
EXTRA: dict[str, dict[str, Any]] = {
    "LORA": {"r": 4},
    "DORA": {"r": 4, "use_dora": True},
    "ADALORA": {"init_r": 4, "target_r": 2, "total_step": 10},
    "ADAPTION_PROMPT": {"adapter_len": 4, "adapter_layers": 1, "target_modules": "self_attn"},
    "ROAD": {"group_size": 8}, "C3A": {"block_size": 8}, "WAVEFT": {"n_frequency": 16},
    "BOFT": {"boft_block_size": 4},
    "OFT": {"r": 0, "oft_block_size": 4},
    "VERA": {"r": 4},
    "VBLORA": {"r": 4, "num_vectors": 16, "vector_length": 16},
    "FOURIERFT": {"n_frequency": 16},
    "HRA": {"r": 4},
    "LOHA": {"r": 4}, "LOKR": {"r": 4},
    "IA3": {"target_modules": ["k_proj", "v_proj", "down_proj"], "feedforward_modules": ["down_proj"]},
    "LN_TUNING": {"target_modules": ["input_layernorm", "post_attention_layernorm"]},
    "TRAINABLE_TOKENS": {"target_modules": ["embed_tokens"], "token_indices": [1, 2, 3]},
}
PROMPT_METHODS = {"PROMPT_TUNING", "P_TUNING", "PREFIX_TUNING", "MULTITASK_PROMPT_TUNING", "CPT", "CARTRIDGE"}
TASK_IDS = {"MULTITASK_PROMPT_TUNING", "POLY"}  # one adapter per task: the batch says which
# Types that do not build here, with the error they fail with (peft 0.21).
UNBUILT: dict[str, str] = {
    "ADAMSS": "ImportError: scikit-learn is required for AdaMSS (not a test dependency)",
    "XLORA": "ValueError: `use_cache` must be False (X-LoRA wraps trained LoRA adapters it loads from disk)",
    "SHADOW": "AttributeError: 'ShadowCarrier' object has no attribute 'view'",
}


def adapter_config(kind: str) -> Any:
    """The peft config of adapter type ``kind`` (a ``PeftType`` name, or DORA: LoRA with ``use_dora``)."""
    import peft

    cls = peft.PEFT_TYPE_TO_CONFIG_MAPPING[peft.PeftType["LORA" if kind == "DORA" else kind]]
    fields = {field.name for field in dataclasses.fields(cls)}
    values: dict[str, Any] = {"task_type": "CAUSAL_LM"}
    if kind in PROMPT_METHODS:
        values.update(num_virtual_tokens=4, token_dim=32, num_attention_heads=4, num_layers=2)
    elif "target_modules" in fields:
        values["target_modules"] = TARGETS
    for key, value in {"r": 4, "encoder_hidden_size": 32, "num_tasks": 2, "n_tasks": 2, **EXTRA.get(kind, {})}.items():
        if key in fields:
            values[key] = value
    return cls(**{key: value for key, value in values.items() if key in fields})


def build(kind: str) -> Built:
    import peft

    model = peft.get_peft_model(base_model(), adapter_config(kind))
    tokens = torch.randint(3, 99, (2, 8))
    inputs = {"input_ids": tokens, "labels": tokens}
    if kind in TASK_IDS:
        inputs["task_ids"] = torch.tensor([0, 1])
    return model, inputs


def kinds() -> list[str]:
    import peft

    return ["DORA", *(kind.name for kind in peft.PeftType if kind.name not in UNBUILT)]


for _kind in kinds():
    specimen(FAMILY, name=f"peft_{_kind.lower()}")(lambda k=_kind: build(k))
