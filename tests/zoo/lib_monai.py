"""MONAI: its medical-imaging networks (U-Nets, a residual encoder-decoder, a ViT-based UNETR, a
Swin UNETR), each built small from its own constructor, on 2D random images: 1 channel, 32 x 32
(the Swin UNETR 64 x 64)."""
from __future__ import annotations

import torch
from monai.networks import nets

from .registry import Built, specimen

FAMILY = "monai"


def image(channels: int = 1, side: int = 32) -> tuple[torch.Tensor]:
    return (torch.randn(2, channels, side, side),)


@specimen(FAMILY, name="monai_unet")
def monai_unet() -> Built:
    model = nets.UNet(spatial_dims=2, in_channels=1, out_channels=2, channels=(4, 8, 16), strides=(2, 2),
                      num_res_units=1, dropout=0.1)
    return model, image()


@specimen(FAMILY, name="monai_basic_unet")
def monai_basic_unet() -> Built:
    return nets.BasicUNet(spatial_dims=2, in_channels=1, out_channels=2, features=(4, 4, 8, 8, 16, 4)), image()


@specimen(FAMILY, name="monai_segresnet")
def monai_segresnet() -> Built:
    model = nets.SegResNet(spatial_dims=2, init_filters=8, in_channels=1, out_channels=2, blocks_down=(1, 1, 1),
                           blocks_up=(1, 1), dropout_prob=0.1)
    return model, image()


@specimen(FAMILY, name="monai_unetr")
def monai_unetr() -> Built:
    model = nets.UNETR(in_channels=1, out_channels=2, img_size=(32, 32), spatial_dims=2, feature_size=4,
                       hidden_size=32, mlp_dim=64, num_heads=2, dropout_rate=0.1)
    return model, image()


@specimen(FAMILY, name="monai_swin_unetr")
def monai_swin_unetr() -> Built:
    model = nets.SwinUNETR(in_channels=1, out_channels=2, spatial_dims=2, feature_size=12, depths=(1, 1, 1, 1),
                           num_heads=(1, 1, 2, 2), drop_rate=0.1)
    return model, image(side=64)  # its instance norms need more than one element at 1/32 of the side
