"""More Hugging Face text architectures: every model type transformers ships that builds tiny offline.

Each name is a transformers model type, built by :func:`.auto.build` from its default config
shrunk (2 layers, width 32-64, vocabulary 99); a :class:`.auto.Recipe` says what a type needs
beyond that.
"""
from __future__ import annotations

from .auto import Recipe, register

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
