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
from .shrink import BATCH, boxes, ids, two_towers, video, with_image_tokens

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
SWIN = {"depths": [1, 1], "num_heads": [2, 2], "window_size": 4}  # 3, 6, 12, 24 heads do not divide 32
register("vision", {
    **dict.fromkeys(["donut-swin", "maskformer-swin", "swin2sr"], Recipe(SWIN)),
    "mgp-str": Recipe(inputs=lambda model: {"pixel_values": torch.randn(BATCH, 3, *model.config.image_size)}),
    **dict.fromkeys(["videomae", "vivit", "timesformer"], Recipe({"num_frames": 4}, inputs=video)),
})
register("speech", {
    **dict.fromkeys(["canary", "lasr_ctc"],  # 80 mel bins, as the inputs have, and 16 subsampling channels
                    Recipe({"encoder_config.num_mel_bins": 80, "encoder_config.subsampling_conv_channels": 16})),
    "nemotron3_5_transcribe_audio": Recipe({"asr_config.num_mel_bins": 80, "diarization_config.audio_config.num_mel_bins": 80,
                                            "diarization_config.head_config.audio_hidden_size": 32}),
    "nemotron3_diarization": Recipe({"audio_config.num_mel_bins": 80, "head_config.audio_hidden_size": 32}),
    "wav2vec2-bert": Recipe({"mask_time_length": 2, "mask_time_prob": 0.0, "mask_feature_prob": 0.0},
                            inputs=lambda model: {"input_features": torch.randn(BATCH, 16, model.config.feature_projection_input_dim)}),
})
register("multimodal", {
    "step3p7": Recipe({"image_token_id": 5, "text_config.sliding_window": 4, "text_config.share_expert_dim": 64,
                       "text_config.num_sliding_attention_heads": 2, "text_config.layer_types": ["full_attention"] * 2,
                       "text_config.mlp_layer_types": ["dense", "sparse"]}),
    # patches of 4 x 4 pixels, 2 x 2 of them, as Siglip2's processor gives them
    "siglip2": Recipe({"vision_config.patch_size": 4, "vision_config.num_patches": 4},
                      inputs=lambda model: {"input_ids": ids(), "pixel_values": torch.randn(BATCH, 4, 48),
                                            "pixel_attention_mask": torch.ones(BATCH, 4, dtype=torch.long),
                                            "spatial_shapes": torch.tensor([[2, 2]] * BATCH)}),
    "lxmert": Recipe({"visual_feat_dim": 16}, inputs=lambda model: {"input_ids": ids(), "visual_feats": torch.randn(BATCH, 3, 16),
                                                                    "visual_pos": boxes(3)}),
    # 4 query tokens, their placeholders in the text
    "blip-2": Recipe({"num_query_tokens": 4, "image_token_index": 5},
                     inputs=lambda model: with_image_tokens(5, 4, pixel_values=torch.randn(BATCH, 3, 32, 32))),
    "instructblip": Recipe({"num_query_tokens": 4, "image_token_index": 5},
                           inputs=lambda model: {**with_image_tokens(5, 4, pixel_values=torch.randn(BATCH, 3, 32, 32)),
                                                 "qformer_input_ids": ids()}),
    "instructblipvideo": Recipe({"num_query_tokens": 4, "video_token_index": 5},  # 4 frames x 4 queries
                                inputs=lambda model: {**with_image_tokens(5, 16, pixel_values=torch.randn(BATCH, 4, 3, 32, 32)),
                                                      "qformer_input_ids": ids()}),
})


def _mrope(sections: list[int]) -> dict:
    """Multimodal rotary sections that fit the shrunk head (the defaults split 64 or 128 dims)."""
    return {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": sections}


SWIN_BACKBONE = {"backbone_config.num_heads": [2, 2, 2, 2], "backbone_config.depths": [1, 1, 1, 1], "backbone_config.embed_dim": 16}
register("vision", {
    "vjepa2": Recipe({"frames_per_clip": 4, "crop_size": 32, "pred_hidden_size": 32, "pred_num_hidden_layers": 1,
                      "pred_num_attention_heads": 2, "pred_mlp_ratio": 2.0},
                     inputs=lambda model: video(model, "pixel_values_videos")),
    "mobilevitv2": Recipe({"image_size": 64, "n_attn_blocks": [1, 1, 1], "base_attn_unit_dims": [16, 24, 32],
                           "width_multiplier": 0.25, "aspp_out_channels": 32}),  # 32 x 32 pools to nothing
    # the prompt and the input stacked: 16 x 16 each, 32 x 16 together
    "seggpt": Recipe({"image_size": [32, 16], "patch_size": 4},
                     inputs=lambda model: {key: torch.randn(BATCH, 3, 16, 16)
                                           for key in ("pixel_values", "prompt_pixel_values", "prompt_masks")}),
})
register("speech", {
    # 64 samples: two downsamplings by 2, 2 codebooks of 16 codes
    "dac": Recipe({"decoder_hidden_size": 32, "codebook_size": 16, "downsampling_ratios": [2, 2], "upsampling_ratios": [2, 2],
                   "hop_length": 4, "n_codebooks": 2, "encoder_hidden_size": 8, "hidden_size": 32},
                  inputs=lambda model: {"input_values": torch.randn(BATCH, 1, 64)}),
    "speecht5": Recipe({"mask_time_prob": 0.0, "mask_time_length": 2, "conv_dim": [32] * 7, "speech_decoder_prenet_units": 32,
                        "speaker_embedding_dim": 16, "speech_decoder_postnet_units": 32}, model_class="SpeechT5ForSpeechToText",
                       inputs=lambda model: {"input_values": torch.randn(BATCH, 1600), "decoder_input_ids": ids(model.config.vocab_size)}),
})
register("multimodal", {
    "videoprism": Recipe({"vision_config.tubelet_size": [1, 8, 8], "vision_config.num_frames": 4},
                         inputs=lambda model: {"input_ids": ids(), **video(model, "pixel_values_videos")}),
    "xclip": Recipe({"vision_config.mit_hidden_size": 32, "vision_config.mit_intermediate_size": 64, "vision_config.num_frames": 4,
                     "prompt_layers": 1}, inputs=lambda model: {"input_ids": ids(), **video(model)}),
    **dict.fromkeys(["grounding-dino", "mm-grounding-dino"],
                    Recipe(SWIN_BACKBONE, inputs=lambda model: {"input_ids": ids(), "pixel_values": torch.randn(BATCH, 3, 32, 32)})),
    **dict.fromkeys(["glm4v", "glm46v", "glmga"],
                    Recipe({"text_config.rope_parameters": _mrope([2, 3, 3]), "vision_config.out_hidden_size": 32})),
    "paddleocr_vl": Recipe({"text_config.rope_parameters": _mrope([2, 3, 3])}),
})


def _kosmos2(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The image's latent queries in the text, and the mask that says where they are."""
    count = model.config.latent_query_num
    inputs = with_image_tokens(5, count, pixel_values=torch.randn(BATCH, 3, 32, 32))
    where = torch.zeros_like(inputs["input_ids"])
    where[:, 1:1 + count] = 1
    return {**inputs, "image_embeds_position_mask": where}


register("multimodal", {
    "kosmos-2": Recipe({"latent_query_num": 4}, inputs=_kosmos2),
})
