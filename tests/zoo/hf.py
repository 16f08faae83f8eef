"""Hugging Face architectures from tiny random configs (no downloads: ``HF_HUB_OFFLINE=1``).

Each builder returns the model with a task head (so the head's parameters are checked too) and
the keyword inputs a user would pass. Batch 2, 8 tokens, vocabulary 99, 16x16 or 32x32 images,
400 audio samples.
"""
from __future__ import annotations

import torch

import transformers as T

from .registry import specimen

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


# -- decoders ---------------------------------------------------------------------------------
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
def llama():
    return text(T.LlamaForCausalLM(T.LlamaConfig(**DECODER)))


@specimen("decoder")
def mistral():
    return text(T.MistralForCausalLM(T.MistralConfig(**DECODER, sliding_window=4)))


@specimen("decoder")
def qwen2():
    return text(T.Qwen2ForCausalLM(T.Qwen2Config(**DECODER)))


@specimen("decoder")
def qwen3():
    return text(T.Qwen3ForCausalLM(T.Qwen3Config(**DECODER, head_dim=16)))


@specimen("decoder")
def phi():
    return text(T.PhiForCausalLM(T.PhiConfig(**DECODER)))


@specimen("decoder")
def phi3():
    return text(T.Phi3ForCausalLM(T.Phi3Config(**DECODER)))


@specimen("decoder")
def gemma():
    return text(T.GemmaForCausalLM(T.GemmaConfig(**DECODER, head_dim=16)))


@specimen("decoder")
def gemma2():
    return text(T.Gemma2ForCausalLM(T.Gemma2Config(**DECODER, head_dim=16, sliding_window=4)))


@specimen("decoder")
def falcon():
    return text(T.FalconForCausalLM(T.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                   num_attention_heads=2, use_cache=False)))


@specimen("decoder")
def codegen():
    return text(T.CodeGenForCausalLM(T.CodeGenConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, rotary_dim=8,
                                                     n_positions=32, n_ctx=32, use_cache=False)))


@specimen("decoder")
def starcoder2():
    return text(T.Starcoder2ForCausalLM(T.Starcoder2Config(**DECODER)))


@specimen("decoder")
def stablelm():
    return text(T.StableLmForCausalLM(T.StableLmConfig(**DECODER)))


@specimen("decoder")
def olmo2():
    return text(T.Olmo2ForCausalLM(T.Olmo2Config(**DECODER)))


@specimen("decoder")
def cohere():
    return text(T.CohereForCausalLM(T.CohereConfig(**DECODER)))


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
def classifier(model_class: type, config_class: type, **config: object):
    return text(model_class(config_class(**{**TEXT, "num_labels": 3, **config})))


@specimen("encoder")
def bert():
    return classifier(T.BertForSequenceClassification, T.BertConfig)


@specimen("encoder")
def roberta():
    return classifier(T.RobertaForSequenceClassification, T.RobertaConfig, pad_token_id=1)


@specimen("encoder")
def distilbert():
    config = T.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                max_position_embeddings=32, num_labels=3)
    return text(T.DistilBertForSequenceClassification(config))


@specimen("encoder")
def albert():
    return classifier(T.AlbertForSequenceClassification, T.AlbertConfig, embedding_size=16)


@specimen("encoder")
def electra():
    return classifier(T.ElectraForSequenceClassification, T.ElectraConfig, embedding_size=16)


@specimen("encoder")
def deberta():
    return classifier(T.DebertaForSequenceClassification, T.DebertaConfig)


@specimen("encoder")
def deberta_v2():
    return classifier(T.DebertaV2ForSequenceClassification, T.DebertaV2Config)


@specimen("encoder")
def xlm_roberta():
    return classifier(T.XLMRobertaForSequenceClassification, T.XLMRobertaConfig, pad_token_id=1)


@specimen("encoder")
def mpnet():
    return classifier(T.MPNetForSequenceClassification, T.MPNetConfig)


@specimen("encoder")
def convbert():
    return classifier(T.ConvBertForSequenceClassification, T.ConvBertConfig, embedding_size=32)


@specimen("encoder")
def roformer():
    return classifier(T.RoFormerForSequenceClassification, T.RoFormerConfig, embedding_size=32)


@specimen("encoder")
def squeezebert():
    return classifier(T.SqueezeBertForSequenceClassification, T.SqueezeBertConfig, embedding_size=32)


@specimen("encoder")
def mobilebert():
    return classifier(T.MobileBertForSequenceClassification, T.MobileBertConfig, embedding_size=16,
                      intra_bottleneck_size=16, num_feedforward_networks=1)


@specimen("encoder")
def ernie():
    return classifier(T.ErnieForSequenceClassification, T.ErnieConfig)


@specimen("encoder")
def nystromformer():
    return classifier(T.NystromformerForSequenceClassification, T.NystromformerConfig, num_landmarks=4,
                      segment_means_seq_len=TOKENS)


@specimen("encoder")
def big_bird():
    return classifier(T.BigBirdForSequenceClassification, T.BigBirdConfig, attention_type="original_full")


@specimen("encoder")
def esm():
    return classifier(T.EsmForSequenceClassification, T.EsmConfig, pad_token_id=1)


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
def longformer():
    return classifier(T.LongformerForSequenceClassification, T.LongformerConfig, attention_window=4, pad_token_id=1)


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
def bart():
    return seq2seq(T.BartForConditionalGeneration(T.BartConfig(**BART)))


@specimen("encoder-decoder")
def mbart():
    return seq2seq(T.MBartForConditionalGeneration(T.MBartConfig(**BART)))


@specimen("encoder-decoder")
def marian():
    return seq2seq(T.MarianMTModel(T.MarianConfig(**BART)))


@specimen("encoder-decoder")
def pegasus():
    return seq2seq(T.PegasusForConditionalGeneration(T.PegasusConfig(**BART)))


@specimen("encoder-decoder")
def blenderbot():
    return seq2seq(T.BlenderbotForConditionalGeneration(T.BlenderbotConfig(**BART)))


@specimen("encoder-decoder")
def blenderbot_small():
    return seq2seq(T.BlenderbotSmallForConditionalGeneration(T.BlenderbotSmallConfig(**BART)))


@specimen("encoder-decoder")
def plbart():
    return seq2seq(T.PLBartForConditionalGeneration(T.PLBartConfig(**BART)))


@specimen("encoder-decoder")
def m2m_100():
    return seq2seq(T.M2M100ForConditionalGeneration(T.M2M100Config(**BART)))


@specimen("encoder-decoder")
def led():
    config = T.LEDConfig(**{**BART, "max_position_embeddings": None}, max_encoder_position_embeddings=32,
                         max_decoder_position_embeddings=32, attention_window=4)
    return seq2seq(T.LEDForConditionalGeneration(config))


# -- vision -----------------------------------------------------------------------------------
@specimen("vision")
def vit():
    return image(T.ViTForImageClassification(T.ViTConfig(**VISION, num_labels=3)))


@specimen("vision")
def deit():
    return image(T.DeiTForImageClassification(T.DeiTConfig(**VISION, num_labels=3)))


@specimen("vision")
def beit():
    return image(T.BeitForImageClassification(T.BeitConfig(**VISION, vocab_size=VOCAB, num_labels=3)))


@specimen("vision")
def dinov2():
    return image(T.Dinov2ForImageClassification(T.Dinov2Config(**VISION, num_labels=3)))


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
@specimen("speech")
def whisper():
    config = T.WhisperConfig(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1,
                             encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                             decoder_ffn_dim=64, num_mel_bins=8, max_source_positions=8, max_target_positions=16,
                             pad_token_id=1, bos_token_id=2, eos_token_id=2, decoder_start_token_id=2,
                             suppress_tokens=None, begin_suppress_tokens=None, use_cache=False)
    return T.WhisperForConditionalGeneration(config), {"input_features": torch.randn(2, 8, 16), "decoder_input_ids": ids()}


@specimen("speech")
def wav2vec2():
    return audio(T.Wav2Vec2ForCTC(T.Wav2Vec2Config(**AUDIO)))


@specimen("speech")
def hubert():
    return audio(T.HubertForCTC(T.HubertConfig(**AUDIO)))


@specimen("speech")
def wavlm():
    return audio(T.WavLMForCTC(T.WavLMConfig(**AUDIO, num_buckets=16, max_bucket_distance=32)))


@specimen("speech")
def data2vec_audio():
    return audio(T.Data2VecAudioForCTC(T.Data2VecAudioConfig(**AUDIO)))


@specimen("speech")
def unispeech():
    return audio(T.UniSpeechForCTC(T.UniSpeechConfig(**AUDIO)))


@specimen("speech")
def sew():
    return audio(T.SEWForCTC(T.SEWConfig(**AUDIO, squeeze_factor=2)))


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
