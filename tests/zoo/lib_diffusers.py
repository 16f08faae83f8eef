"""diffusers: its denoisers (UNets, DiT, SD3, Flux, the video UNet), autoencoders and ControlNet,
each from a tiny config of its own class (1 layer per block, widths 16-32, 16x16 latents), called
with the inputs a training step passes: noisy latents, a timestep, text embeddings."""
from __future__ import annotations

import diffusers as D
import torch

from .registry import Built, specimen

FAMILY = "diffusers"
TEXT = 16  # width of the text embeddings (cross_attention_dim)


def latents(channels: int = 4, side: int = 16, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, channels, side, side)


def steps(batch: int = 2) -> torch.Tensor:
    return torch.tensor([10, 500][:batch])


def text(batch: int = 2, tokens: int = 5) -> torch.Tensor:
    return torch.randn(batch, tokens, TEXT)


CROSS_BLOCKS = dict(down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), block_out_channels=(16, 32),
                    layers_per_block=1, norm_num_groups=8, cross_attention_dim=TEXT, attention_head_dim=8)


@specimen(FAMILY, name="diffusers_unet2d")
def diffusers_unet2d() -> Built:
    model = D.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(16, 32),
                          norm_num_groups=8, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                          up_block_types=("AttnUpBlock2D", "UpBlock2D"), attention_head_dim=8)
    return model, {"sample": latents(3), "timestep": steps()}


@specimen(FAMILY, name="diffusers_unet2d_condition")
def diffusers_unet2d_condition() -> Built:
    model = D.UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4,
                                   up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), **CROSS_BLOCKS)
    return model, {"sample": latents(), "timestep": steps(), "encoder_hidden_states": text()}


@specimen(FAMILY, name="diffusers_unet3d_condition")
def diffusers_unet3d_condition() -> Built:
    model = D.UNet3DConditionModel(sample_size=16, in_channels=4, out_channels=4, block_out_channels=(16, 32),
                                   layers_per_block=1, norm_num_groups=8, cross_attention_dim=TEXT,
                                   attention_head_dim=8, down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
                                   up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"))
    return model, {"sample": torch.randn(1, 4, 2, 16, 16), "timestep": steps(1), "encoder_hidden_states": text(1)}


@specimen(FAMILY, name="diffusers_controlnet")
def diffusers_controlnet() -> Built:
    model = D.ControlNetModel(in_channels=4, conditioning_embedding_out_channels=(8, 16), **CROSS_BLOCKS)
    return model, {"sample": latents(), "timestep": steps(), "encoder_hidden_states": text(),
                   "controlnet_cond": torch.randn(2, 3, 32, 32)}


@specimen(FAMILY, name="diffusers_autoencoder_kl")
def diffusers_autoencoder_kl() -> Built:
    model = D.AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                            up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(16, 32), latent_channels=4,
                            norm_num_groups=8, layers_per_block=1)
    return model, {"sample": latents(3, 32), "sample_posterior": True}


@specimen(FAMILY, name="diffusers_autoencoder_tiny")
def diffusers_autoencoder_tiny() -> Built:
    model = D.AutoencoderTiny(in_channels=3, out_channels=3, encoder_block_out_channels=(16, 16),
                              decoder_block_out_channels=(16, 16), num_encoder_blocks=(1, 1),
                              num_decoder_blocks=(1, 1), latent_channels=4, upsampling_scaling_factor=2)
    return model, {"sample": latents(3, 32)}


@specimen(FAMILY, name="diffusers_vq")
def diffusers_vq() -> Built:
    model = D.VQModel(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                      up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(16, 32), latent_channels=4,
                      norm_num_groups=8, layers_per_block=1, num_vq_embeddings=16, vq_embed_dim=4)
    return model, {"sample": latents(3, 32)}


@specimen(FAMILY, name="diffusers_dit")
def diffusers_dit() -> Built:
    model = D.DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8,
                                    num_layers=2, sample_size=8, patch_size=2, num_embeds_ada_norm=1000)
    return model, {"hidden_states": latents(4, 8), "timestep": steps(), "class_labels": torch.tensor([0, 3])}


@specimen(FAMILY, name="diffusers_pixart")
def diffusers_pixart() -> Built:
    model = D.PixArtTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8,
                                       num_layers=2, sample_size=8, patch_size=2, cross_attention_dim=16,
                                       caption_channels=TEXT)
    return model, {"hidden_states": latents(4, 8), "timestep": steps(), "encoder_hidden_states": text(),
                   "added_cond_kwargs": {"resolution": None, "aspect_ratio": None}}


@specimen(FAMILY, name="diffusers_sd3")
def diffusers_sd3() -> Built:
    model = D.SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8,
                                    num_attention_heads=2, joint_attention_dim=TEXT, caption_projection_dim=16,
                                    pooled_projection_dim=TEXT, out_channels=4, pos_embed_max_size=16)
    return model, {"hidden_states": latents(4, 8), "encoder_hidden_states": text(),
                   "pooled_projections": torch.randn(2, TEXT), "timestep": steps()}


@specimen(FAMILY, name="diffusers_flux")
def diffusers_flux() -> Built:
    model = D.FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                                     attention_head_dim=16, num_attention_heads=2, joint_attention_dim=TEXT,
                                     pooled_projection_dim=TEXT, axes_dims_rope=(4, 4, 8))
    tokens, patches = 5, 16
    return model, {"hidden_states": torch.randn(1, patches, 4), "encoder_hidden_states": text(1, tokens),
                   "pooled_projections": torch.randn(1, TEXT), "timestep": torch.tensor([0.5]),
                   "img_ids": torch.randn(patches, 3), "txt_ids": torch.zeros(tokens, 3)}


@specimen(FAMILY, name="diffusers_unet_spatio_temporal")
def diffusers_unet_spatio_temporal() -> Built:
    """Stable Video Diffusion's UNet: 2 frames of 16x16 latents, conditioned on an image embedding."""
    model = D.UNetSpatioTemporalConditionModel(
        sample_size=16, in_channels=8, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
        down_block_types=("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
        up_block_types=("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"), cross_attention_dim=TEXT,
        num_attention_heads=(2, 4), addition_time_embed_dim=4, projection_class_embeddings_input_dim=12)
    return model, {"sample": torch.randn(1, 2, 8, 16, 16), "timestep": steps(1),
                   "encoder_hidden_states": text(1, 1), "added_time_ids": torch.randn(1, 3)}
