"""torchaudio: its models (speech recognition, separation, synthesis, vocoders, self-supervised
encoders), each built small from its own constructor, on short random audio or features."""
from __future__ import annotations

import torch
from torchaudio import models as ta

from .registry import Built, specimen

FAMILY = "torchaudio"
SAMPLES = 1600  # 0.1 s at 16 kHz


def audio(batch: int = 2, samples: int = SAMPLES) -> torch.Tensor:
    return torch.randn(batch, samples)


def _wav2vec2(**extra: object) -> dict[str, object]:
    """A 2-layer wav2vec 2.0 / HuBERT-style encoder config: two conv layers, width 32."""
    return dict(extractor_mode="group_norm", extractor_conv_layer_config=[(16, 10, 5), (16, 3, 2)],
                extractor_conv_bias=False, encoder_embed_dim=32, encoder_projection_dropout=0.1,
                encoder_pos_conv_kernel=16, encoder_pos_conv_groups=4, encoder_num_layers=2,
                encoder_num_heads=2, encoder_attention_dropout=0.1, encoder_ff_interm_features=64,
                encoder_ff_interm_dropout=0.1, encoder_dropout=0.1, encoder_layer_norm_first=False,
                encoder_layer_drop=0.1, **extra)


@specimen(FAMILY, name="ta_wav2vec2")
def ta_wav2vec2() -> Built:
    return ta.wav2vec2_model(**_wav2vec2(aux_num_out=10)), (audio(),)


@specimen(FAMILY, name="ta_wavlm")
def ta_wavlm() -> Built:
    config = _wav2vec2(aux_num_out=10, encoder_num_buckets=16, encoder_max_distance=32)
    config.pop("encoder_ff_interm_features"), config.pop("encoder_layer_norm_first")
    return ta.wavlm_model(**config, encoder_ff_interm_features=64, encoder_layer_norm_first=False), (audio(),)


@specimen(FAMILY, name="ta_hubert_pretrain")
def ta_hubert_pretrain() -> Built:
    model = ta.hubert_pretrain_model(**_wav2vec2(), mask_prob=0.5, mask_selection="static", mask_other=0.0,
                                     mask_length=2, no_mask_overlap=False, mask_min_space=1, mask_channel_prob=0.0,
                                     mask_channel_selection="static", mask_channel_other=0.0, mask_channel_length=2,
                                     no_mask_channel_overlap=False, mask_channel_min_space=1, skip_masked=False,
                                     skip_nomask=False, num_classes=10, final_dim=16, feature_grad_mult=0.1)
    frames = 159  # (1600 - 10) // 5 + 1 = 319, then (319 - 3) // 2 + 1 = 159
    return model, (audio(), torch.randint(0, 10, (2, frames)))


@specimen(FAMILY, name="ta_conformer")
def ta_conformer() -> Built:
    model = ta.Conformer(input_dim=16, num_heads=2, ffn_dim=32, num_layers=2, depthwise_conv_kernel_size=3)
    return model, (torch.randn(2, 20, 16), torch.tensor([20, 15]))


@specimen(FAMILY, name="ta_emformer")
def ta_emformer() -> Built:
    model = ta.Emformer(input_dim=16, num_heads=2, ffn_dim=32, num_layers=2, segment_length=4, right_context_length=1)
    return model, (torch.randn(2, 21, 16), torch.tensor([21, 17]))


@specimen(FAMILY, name="ta_emformer_rnnt")
def ta_emformer_rnnt() -> Built:
    model = ta.emformer_rnnt_model(
        input_dim=16, encoding_dim=32, num_symbols=20, segment_length=4, right_context_length=1,
        time_reduction_input_dim=32, time_reduction_stride=2, transformer_num_heads=2, transformer_ffn_dim=32,
        transformer_num_layers=2, transformer_dropout=0.1, transformer_activation="gelu",
        transformer_left_context_length=8, transformer_max_memory_size=0, transformer_weight_init_scale_strategy=None,
        transformer_tanh_on_mem=True, symbol_embedding_dim=16, num_lstm_layers=1, lstm_layer_norm=True,
        lstm_layer_norm_epsilon=1e-5, lstm_dropout=0.1)
    targets = torch.randint(0, 20, (2, 5))
    return model, (torch.randn(2, 18, 16), torch.tensor([18, 14]), targets, torch.tensor([5, 4]))


@specimen(FAMILY, name="ta_conv_tasnet")
def ta_conv_tasnet() -> Built:
    model = ta.ConvTasNet(num_sources=2, enc_kernel_size=8, enc_num_feats=16, msk_kernel_size=3, msk_num_feats=16,
                          msk_num_hidden_feats=32, msk_num_layers=2, msk_num_stacks=1)
    return model, (torch.randn(2, 1, 400),)


@specimen(FAMILY, name="ta_hdemucs")
def ta_hdemucs() -> Built:
    model = ta.HDemucs(sources=["voice", "rest"], audio_channels=1, channels=8, growth=2, depth=2, nfft=64)
    return model, (torch.randn(1, 1, 2048),)


@specimen(FAMILY, name="ta_deepspeech")
def ta_deepspeech() -> Built:
    return ta.DeepSpeech(n_feature=16, n_hidden=32, n_class=10, dropout=0.1), (torch.randn(2, 1, 12, 16),)


@specimen(FAMILY, name="ta_wav2letter")
def ta_wav2letter() -> Built:
    return ta.Wav2Letter(num_classes=10, input_type="mfcc", num_features=13), (torch.randn(2, 13, 64),)


@specimen(FAMILY, name="ta_tacotron2")
def ta_tacotron2() -> Built:
    model = ta.Tacotron2(n_symbol=20, symbol_embedding_dim=32, n_mels=8, encoder_embedding_dim=32, encoder_n_convolution=1,
                         encoder_kernel_size=3, decoder_rnn_dim=32, decoder_max_step=20, decoder_dropout=0.1,
                         decoder_early_stopping=True, attention_rnn_dim=32, attention_hidden_dim=16,
                         attention_location_n_filter=4, attention_location_kernel_size=3, attention_dropout=0.1,
                         prenet_dim=16, postnet_n_convolution=2, postnet_kernel_size=3, postnet_embedding_dim=16,
                         gate_threshold=0.5)
    tokens = torch.randint(1, 20, (2, 6))
    return model, (tokens, torch.tensor([6, 6]), torch.randn(2, 8, 10), torch.tensor([10, 10]))


@specimen(FAMILY, name="ta_wavernn")
def ta_wavernn() -> Built:
    model = ta.WaveRNN(upsample_scales=[2, 2], n_classes=16, hop_length=4, n_res_block=1, n_rnn=16, n_fc=16,
                       kernel_size=3, n_freq=8, n_hidden=8, n_output=8)
    return model, (torch.randn(2, 1, 4 * 6), torch.randn(2, 1, 8, 8))


@specimen(FAMILY, name="ta_squim_objective")
def ta_squim_objective() -> Built:
    model = ta.squim_objective_model(feat_dim=32, win_len=16, d_model=16, nhead=2, hidden_dim=16, num_blocks=1,
                                     rnn_type="LSTM", chunk_size=8)
    return model, (torch.randn(2, 800),)
