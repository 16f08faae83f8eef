"""Hugging Face vision, speech and multimodal architectures from tiny random configs (the
helpers and sizes are those of :mod:`.hf`)."""
from __future__ import annotations

import torch

import transformers as T

from .hf import VOCAB, ctc, ids, image, register, vit_like
from .registry import specimen


# -- vision -----------------------------------------------------------------------------------
register("vision", vit_like, {  # name: (model class, config class, config beyond VISION)
    "vit": (T.ViTForImageClassification, T.ViTConfig, {}),
    "deit": (T.DeiTForImageClassification, T.DeiTConfig, {}),
    "beit": (T.BeitForImageClassification, T.BeitConfig, {"vocab_size": VOCAB}),
    "dinov2": (T.Dinov2ForImageClassification, T.Dinov2Config, {}),
})


@specimen("vision")
def swin():
    config = T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
                          num_labels=3)
    return image(T.SwinForImageClassification(config), 32)


@specimen("vision")
def swinv2():
    config = T.Swinv2Config(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                            window_size=4, num_labels=3)
    return image(T.Swinv2ForImageClassification(config), 32)


@specimen("vision")
def convnext():
    config = T.ConvNextConfig(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3)
    return image(T.ConvNextForImageClassification(config), 32)


@specimen("vision")
def convnextv2():
    config = T.ConvNextV2Config(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3)
    return image(T.ConvNextV2ForImageClassification(config), 32)


@specimen("vision")
def resnet():
    config = T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3)
    return image(T.ResNetForImageClassification(config), 32)


@specimen("vision")
def regnet():
    config = T.RegNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8, num_labels=3)
    return image(T.RegNetForImageClassification(config), 32)


@specimen("vision")
def mobilenet_v1():
    config = T.MobileNetV1Config(image_size=32, depth_multiplier=0.25, num_labels=3)
    return image(T.MobileNetV1ForImageClassification(config), 32)


@specimen("vision")
def mobilenet_v2():
    config = T.MobileNetV2Config(image_size=32, depth_multiplier=0.25, num_labels=3)
    return image(T.MobileNetV2ForImageClassification(config), 32)


@specimen("vision")
def efficientnet():
    config = T.EfficientNetConfig(image_size=32, width_coefficient=0.25, depth_coefficient=0.1, kernel_sizes=[3, 5],
                                  in_channels=[32, 16], out_channels=[16, 24], strides=[1, 2], num_block_repeats=[1, 1],
                                  expand_ratios=[1, 6], hidden_dim=320, num_labels=3)
    return image(T.EfficientNetForImageClassification(config), 32)


@specimen("vision")
def levit():
    config = T.LevitConfig(image_size=32, patch_size=16, hidden_sizes=[16, 32, 32], num_attention_heads=[1, 2, 2],
                           depths=[1, 1, 1], key_dim=[8, 8, 8], num_labels=3)
    return image(T.LevitForImageClassification(config), 32)


@specimen("vision")
def poolformer():
    config = T.PoolFormerConfig(hidden_sizes=[8, 16, 16, 16], depths=[1, 1, 1, 1], num_labels=3)
    return image(T.PoolFormerForImageClassification(config), 32)


@specimen("vision")
def segformer():
    config = T.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                               patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                               num_labels=3)
    return image(T.SegformerForImageClassification(config), 32)


@specimen("vision")
def mobilevit():
    config = T.MobileViTConfig(image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
                               num_attention_heads=2, num_labels=3)
    return image(T.MobileViTForImageClassification(config), 32)


@specimen("vision")
def focalnet():
    config = T.FocalNetConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_labels=3)
    return image(T.FocalNetForImageClassification(config), 32)


# -- speech -----------------------------------------------------------------------------------
register("speech", ctc, {  # name: (model class, config class, config beyond AUDIO)
    "wav2vec2": (T.Wav2Vec2ForCTC, T.Wav2Vec2Config, {}),
    "hubert": (T.HubertForCTC, T.HubertConfig, {}),
    "wavlm": (T.WavLMForCTC, T.WavLMConfig, {"num_buckets": 16, "max_bucket_distance": 32}),
    "data2vec_audio": (T.Data2VecAudioForCTC, T.Data2VecAudioConfig, {}),
    "unispeech": (T.UniSpeechForCTC, T.UniSpeechConfig, {}),
    "sew": (T.SEWForCTC, T.SEWConfig, {"squeeze_factor": 2}),
})


@specimen("speech")
def whisper():
    config = T.WhisperConfig(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1,
                             encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                             decoder_ffn_dim=64, num_mel_bins=8, max_source_positions=8, max_target_positions=16,
                             pad_token_id=1, bos_token_id=2, eos_token_id=2, decoder_start_token_id=2,
                             suppress_tokens=None, begin_suppress_tokens=None, use_cache=False)
    return T.WhisperForConditionalGeneration(config), {"input_features": torch.randn(2, 8, 16), "decoder_input_ids": ids()}


@specimen("speech")
def speech_to_text():
    config = T.Speech2TextConfig(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1,
                                 encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                 decoder_ffn_dim=64, input_feat_per_channel=8, num_conv_layers=1,
                                 conv_kernel_sizes=[5], conv_channels=16, max_source_positions=32,
                                 max_target_positions=32, use_cache=False)
    model = T.Speech2TextForConditionalGeneration(config)
    return model, {"input_features": torch.randn(2, 16, 8), "decoder_input_ids": ids()}


@specimen("speech")
def audio_spectrogram_transformer():
    config = T.ASTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         patch_size=8, frequency_stride=8, time_stride=8, max_length=32, num_mel_bins=16, num_labels=3)
    return T.ASTForAudioClassification(config), {"input_values": torch.randn(2, 32, 16)}


# -- multimodal -------------------------------------------------------------------------------
TOWER_TEXT = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                  max_position_embeddings=32)
TOWER_VISION = dict(image_size=16, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64)


def two_towers(model: torch.nn.Module) -> tuple[torch.nn.Module, dict]:
    return model, {"input_ids": ids(), "pixel_values": torch.randn(2, 3, 16, 16)}


@specimen("multimodal")
def clip():
    config = T.CLIPConfig(text_config=TOWER_TEXT, vision_config=TOWER_VISION, projection_dim=16)
    return two_towers(T.CLIPModel(config))


@specimen("multimodal")
def siglip():
    return two_towers(T.SiglipModel(T.SiglipConfig(text_config=TOWER_TEXT, vision_config=TOWER_VISION)))


@specimen("multimodal")
def blip():
    config = T.BlipConfig(text_config=dict(TOWER_TEXT, encoder_hidden_size=32), vision_config=TOWER_VISION,
                          projection_dim=16)
    return two_towers(T.BlipModel(config))


@specimen("multimodal")
def owlvit():
    config = T.OwlViTConfig(text_config=TOWER_TEXT, vision_config=TOWER_VISION, projection_dim=16)
    return two_towers(T.OwlViTModel(config))


@specimen("multimodal")
def groupvit():
    config = T.GroupViTConfig(text_config=TOWER_TEXT,
                              vision_config=dict(image_size=16, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                                 depths=[1, 1], num_group_tokens=[4, 0], num_output_groups=[4, 4],
                                                 num_attention_heads=2, intermediate_size=64),
                              projection_dim=16, projection_intermediate_dim=32)
    return two_towers(T.GroupViTModel(config))


@specimen("multimodal")
def vilt():
    config = T.ViltConfig(**{**TOWER_TEXT, "num_hidden_layers": 2}, image_size=16, patch_size=8, max_image_length=8)
    model = T.ViltModel(config)
    return model, {"input_ids": ids(), "pixel_values": torch.randn(2, 3, 16, 16)}
