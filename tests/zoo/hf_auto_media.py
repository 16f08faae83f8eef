"""More Hugging Face vision, speech and multimodal architectures, built like :mod:`.hf_auto_text`.

Each name is a transformers model type, built by :func:`.auto.build` from its default config
shrunk (2 layers, width 32-64, vocabulary 99); a :class:`.auto.Recipe` says what a type needs
beyond that. A multimodal type without a recipe gets its main input only (token ids): its image or
audio tower does not run, gets no gradient in the plain backward, and must be reported dry; the
recipes below (fuyu, gemma3, the CLIP-style two-tower models) run the image path too.
"""
from __future__ import annotations

import torch

from .auto import Recipe, register
from .shrink import BATCH, two_towers, with_image_tokens

register("vision", [
    "bit", "cvt", "d_fine", "data2vec-vision", "deimv2", "dinov3_convnext", "dinov3_vit", "dpt", "glpn",
    "hgnet_v2", "hiera", "ijepa", "maskformer", "mlcd", "pixio", "pixtral", "pp_doclayout_v3",
    "pp_doclayout_v4", "pvt", "radio", "rt_detr", "swiftformer", "textnet", "vitdet", "yolos",
])

register("speech", [
    "moonshine", "nemotron3_5_asr", "nemotron3_5_transcribe_asr_audio", "parakeet_ctc", "parakeet_rnnt",
    "parakeet_tdt", "univnet",
])

register("multimodal", [
    "aria", "audioflamingo3", "aya_vision", "cosmos3_edge", "cosmos3_omni", "deepseek_vl",
    "flava", "florence2", "fun_asr_nano", "git", "glmasr", "got_ocr2",
    "idefics2", "idefics3", "inkling2", "internvl", "janus", "kimi_k25", "kosmos-2.5", "lighton_ocr", "llava",
    "metaclip_2", "minicpm_ocr", "minicpmv4_6", "minicpmv4_7", "mistral3", "mllama", "modernvbert",
    "moss_transcribe_diarize", "muse_glimmer", "muse_spark", "musicflamingo", "omniasr",
    "ovis2", "paligemma", "phi4_multimodal", "qianfan_ocr", "smolvlm", "tipsv2", "ultravbert", "unlimited_ocr",
    "video_llama_3", "video_llava", "vipllava", "voxtral",
])

# -- types that need more than their shrunk defaults --------------------------------------------
register("multimodal", {
    # the image path runs: image placeholders in the text, as the processors put them there
    "fuyu": Recipe({"image_token_id": 5, "patch_size": 4},  # image patches: 4 x 4 pixels x 3 channels
                   inputs=lambda model: with_image_tokens(5, 4, image_patches=torch.randn(BATCH, 4, 48))),
    "gemma3": Recipe({"image_token_index": 5, "boi_token_index": 3, "eoi_token_index": 4, "mm_tokens_per_image": 4},
                     inputs=lambda model: _gemma3_inputs()),
    **dict.fromkeys(["altclip", "chinese_clip", "clipseg", "owlv2", "aimv2"],
                    Recipe(inputs=two_towers)),
})


def _gemma3_inputs() -> dict[str, torch.Tensor]:
    inputs = with_image_tokens(5, 4, pixel_values=torch.randn(BATCH, 3, 32, 32))
    return {**inputs, "token_type_ids": (inputs["input_ids"] == 5).long()}


def _series(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A time-series transformer's past (context plus the largest lag) and future, one time feature."""
    config = model.config
    past, future = config.context_length + max(config.lags_sequence), config.prediction_length
    return {"past_values": torch.randn(BATCH, past), "past_time_features": torch.randn(BATCH, past, 1),
            "past_observed_mask": torch.ones(BATCH, past), "future_values": torch.randn(BATCH, future),
            "future_time_features": torch.randn(BATCH, future, 1)}


SERIES = {"prediction_length": 4, "context_length": 8, "lags_sequence": [1, 2, 3], "num_time_features": 1,
          "moving_average": 3,
          "feature_size": 6}  # 3 lags of 1 value, 1 time feature, and the scaler's loc and scale
register("time series", {
    "autoformer": Recipe({**SERIES, "label_length": 4}, inputs=_series),
    "informer": Recipe(SERIES, inputs=_series),
    "time_series_transformer": Recipe(SERIES, inputs=_series),
    **dict.fromkeys(["patchtst", "patchtsmixer"],
                    Recipe(inputs=lambda model: {"past_values": torch.randn(BATCH, model.config.context_length,
                                                                            model.config.num_input_channels)})),
})

register("speech", {
    # 4 frames from 1600 samples: SpecAugment's default span of 10 frames does not fit
    **dict.fromkeys(["unispeech-sat", "wav2vec2-conformer", "sew-d"],
                    Recipe({"mask_time_length": 2, "mask_time_prob": 0.0, "mask_feature_prob": 0.0})),
    "encodec": Recipe({"codebook_dim": 32}, inputs=lambda model: {"input_values": torch.randn(BATCH, 1, 1600)}),
})

# -- issue 22, second sweep: recipes for types whose shrunk defaults do not fit ----------------------
register("multimodal", {
    "bridgetower": Recipe({"vision_config.hidden_size": 64}, inputs=two_towers),  # 64 wide: one vision head
})
