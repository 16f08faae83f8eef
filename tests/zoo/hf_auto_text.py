"""More Hugging Face text architectures: every model type transformers ships that builds tiny offline.

Each name is a transformers model type, built by :func:`.auto.build` from its default config
shrunk (2 layers, width 32-64, vocabulary 99); a :class:`.auto.Recipe` says what a type needs
beyond that.
"""
from __future__ import annotations

import torch

from .auto import Recipe, register
from .shrink import BATCH, VOCAB, boxes, ids

register("decoder", [
    "apertus", "arcee", "bigbird_pegasus", "bitnet", "cohere2", "cpmant", "cwm", "diffllama", "dory",
    "ernie4_5", "exaone", "exaone4", "glm", "glm4", "granite", "helium", "hrm_text", "hyperclovax", "internlm3",
    "iquestcoder", "jais2", "lfm3", "minicpm3", "ministral3", "modernbert-decoder", "moshi", "mvp", "nanochat",
    "olmo", "olmo3", "persimmon", "prophetnet", "seed_oss", "smollm3", "trocr", "vaultgemma", "youtu",
])

register("decoder (MoE)", [
    "afmoe", "axk2", "beam", "deepseek_v3", "deepseek_v32", "deepseek_v4", "doge", "flex_olmo", "flint",
    "gpt_oss", "granitemoeshared", "hy_v3", "hy_v4", "inkling_text", "jetmoe", "kolibri1", "laguna",
    "lara_mini", "mellum", "sarvam_mla", "sarvam_moe", "solar_open", "zaya",
])

register("state-space", [
    "jamba", "lfm2", "minimax", "recurrent_gemma",
])

register("encoder", [
    "bert-generation", "camembert", "ctrl", "data2vec-text", "dpr", "esmc", "eurobert", "evolla", "flaubert",
    "gpt-sw3", "gradium_phonon_tts", "gte", "higgs_audio_v2", "ibert", "imagegpt", "jina_embeddings_v3",
    "layoutlm", "markuplm", "megatron-bert", "modernbert", "mra", "neomme", "nomic_bert", "openai-gpt",
    "openai_privacy_filter", "pocket_tts", "rembert", "roberta-prelayernorm", "roc_bert", "splinter", "tapas",
    "ultrabert", "visual_bert", "vits", "xlm", "xlm-roberta-xl", "yoso",
])

register("encoder-decoder", [
    "fsmt", "seamless_m4t", "t5gemma2", "umt5",
])

register("encoder-decoder (MoE)", [
    "nllb-moe",
])

# -- types that need more than their shrunk defaults --------------------------------------------
register("decoder", {
    # LSH and local attention on 8 tokens: chunks of 4, 2 hash buckets, axial positions 2 x 4
    "reformer": Recipe({"is_decoder": True, "axial_pos_shape": (2, 4), "axial_pos_embds_dim": (16, 16),
                        "local_attn_chunk_length": 4, "lsh_attn_chunk_length": 4, "num_buckets": 2,
                        "attn_layers": ["local", "lsh"], "max_position_embeddings": 8}),
})
register("encoder", {
    "luke": Recipe({"entity_vocab_size": 16}),  # 500,000 entities by default: 128 million values
})
register("decoder (MoE)", {
    "deepseek_v2": Recipe({"num_experts_per_tok": 2, "n_group": 1, "topk_group": 1}),
})

# -- issue 22, second sweep: recipes for types whose shrunk defaults do not fit ----------------------
def _musicgen(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Text ids, and decoder ids for each of the audio codebooks (batch x codebooks rows)."""
    return {"input_ids": ids(), "decoder_input_ids": ids().repeat_interleave(model.config.decoder.num_codebooks, 0)}


def _dia(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Text ids, and one decoder id per audio channel and step."""
    return {"input_ids": ids(), "decoder_input_ids": torch.randint(3, VOCAB, (BATCH, 8, model.config.decoder_config.num_channels))}


MAMBA2 = {"mamba_n_heads": 4, "mamba_d_head": 16, "mamba_d_state": 16, "mamba_chunk_size": 8}  # 4 x 16 = 2 x width
register("decoder", {
    "nemotron": Recipe({"num_key_value_heads": 2}),  # None by default
    "dbrx": Recipe({"attn_config.rope_theta": 10000.0, "attn_config.clip_qkv": 8.0}),
    "chameleon": Recipe({"vocabulary_map": {"<image>": 98}}, model_class="ChameleonForConditionalGeneration"),
    "qwen4_exp": Recipe(model_class="Qwen4ExpForConditionalGeneration"),  # the causal LM takes the text config
    "xmod": Recipe({"default_language": "en_XX"}),
    **dict.fromkeys(["hunyuan_v1_dense", "ministral"], Recipe()),  # head_dim None by default: set by the shrinker
    "mistral4": Recipe({"qk_nope_head_dim": 8, "qk_rope_head_dim": 8}),  # their sum is the shrunk head width
})
register("decoder (MoE)", {
    "hunyuan_v1_moe": Recipe(),
    "axk1": Recipe({"n_group": 1, "topk_group": 1, "mlp_layer_types": ["dense", "sparse"]}),
    "dots1": Recipe({"n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
                     "layer_types": ["full_attention"] * 2}),
    "kimi_linear": Recipe({"num_experts_per_token": 2, "linear_head_dim": 16, "linear_num_heads": 2,
                           "layer_types": ["linear_attention", "full_attention"], "mlp_layer_types": ["dense", "sparse"]}),
})
register("state-space", {
    "bamba": Recipe(MAMBA2),
    "zamba2": Recipe({"attention_hidden_size": 64, "mamba_headdim": 16, "n_mamba_heads": 4, "adapter_rank": 8, "chunk_size": 8,
                      "mamba_d_state": 16, "hybrid_layer_ids": [1], "layers_block_type": ["linear_attention", "hybrid"],
                      "num_query_groups": 2, "attention_head_dim": 32, "use_mamba_kernels": False}),
    "xlstm": Recipe({"embedding_dim": 32, "chunk_size": 4, "ffn_round_up_to_multiple_of": 16}),
})
register("decoder (MoE)", {
    "longcat_flash": Recipe({"qk_head_dim": 32, "zero_expert_num": 2, "expert_ffn_hidden_size": 64}),  # 16 + 16
})
register("decoder (MoE)", {
    # sliding-window layers double the 1 kv head: 4 query heads; 48 wide so a third of it rotates evenly
    "mimo_v2_flash": Recipe({"layer_types": ["full_attention", "sliding_attention"], "mlp_layer_types": ["dense", "sparse"],
                             "sliding_window": 4, "head_dim": 48, "num_attention_heads": 4, "num_key_value_heads": 1}),
})
register("encoder", {
    "perceiver": Recipe({"num_latents": 8, "max_position_embeddings": 8}, model_class="PerceiverForMaskedLM",
                        inputs=lambda model: {"input_ids": ids()}),
    # 64 wide: the box embeddings are a quarter of it, split over the 8 coordinates
    "bros": Recipe({"hidden_size": 64, "dim_bbox_sinusoid_emb_2d": 16, "dim_bbox_sinusoid_emb_1d": 2, "dim_bbox_projection": 32},
                   inputs=lambda model: {"input_ids": ids(), "bbox": boxes()}),
    "lilt": Recipe({"hidden_size": 48},  # six box embeddings of width / 6 make the width
                   inputs=lambda model: {"input_ids": ids(), "bbox": (boxes() * 1000).long()}),
})
register("state-space", {
    "granitemoehybrid": Recipe({**MAMBA2, "shared_intermediate_size": 64}),
    "zamba": Recipe({"attention_hidden_size": 64, "mamba_dt_rank": 4, "layers_block_type": ["hybrid", "hybrid"],
                     "use_mamba_kernels": False}),
})
register("encoder", {
    "layoutlmv3": Recipe({"coordinate_size": 4, "shape_size": 8, "input_size": 32},  # 4 x 4 + 2 x 8 = width
                         inputs=lambda model: {"input_ids": ids(), "bbox": (boxes() * 1000).long(),
                                               "pixel_values": torch.randn(BATCH, 3, 32, 32)}),
})
register("encoder-decoder", {
    "t5gemma": Recipe({"decoder.cross_attention_hidden_size": 32, "encoder.sliding_window": 4, "decoder.sliding_window": 4}),
    "udop": Recipe(inputs=lambda model: {"input_ids": ids(), "bbox": boxes(), "decoder_input_ids": ids()}),
})
register("time series", {
    # trajectories of 4 steps: states, actions, rewards, returns to go
    "decision_transformer": Recipe(inputs=lambda model: {
        "states": torch.randn(BATCH, 4, model.config.state_dim), "actions": torch.randn(BATCH, 4, model.config.act_dim),
        "rewards": torch.randn(BATCH, 4, 1), "returns_to_go": torch.randn(BATCH, 4, 1),
        "timesteps": torch.arange(4).repeat(BATCH, 1), "attention_mask": torch.ones(BATCH, 4, dtype=torch.long)}),
    # a list of series, one frequency each, as TimesFM's users pass them
    "timesfm": Recipe({"context_length": 32, "horizon_length": 8, "patch_length": 8}, model_class="TimesFmModelForPrediction",
                      inputs=lambda model: {"past_values": [torch.randn(32), torch.randn(32)], "freq": [0, 0]}),
    "timesfm2_5": Recipe(inputs=lambda model: {"past_values": torch.randn(BATCH, 64)}),
})
register("encoder-decoder", {
    "musicgen": Recipe(model_class="MusicgenForConditionalGeneration", inputs=_musicgen),
    "dia": Recipe({"decoder_config.cross_hidden_size": 32, "decoder_config.cross_num_attention_heads": 2,
                   "decoder_config.cross_head_dim": 16, "decoder_config.cross_num_key_value_heads": 2}, inputs=_dia),
})
