"""segmentation_models_pytorch: its decoders (U-Net, FPN, DeepLabV3+, LinkNet) on a small timm
encoder ("tu-" encoders: timm's ``features_only`` models), no weights, 2 classes, on 2 random
64 x 64 images."""
from __future__ import annotations

import torch

from .registry import Built, specimen
from .vision_ops import define_nms_if_missing

define_nms_if_missing()  # smp imports timm, which imports torchvision
import segmentation_models_pytorch as smp  # noqa: E402

FAMILY = "segmentation_models_pytorch"
ENCODER = dict(encoder_name="tu-test_resnet", encoder_weights=None, in_channels=3, classes=2)


def image() -> tuple[torch.Tensor]:
    return (torch.randn(2, 3, 64, 64),)


@specimen(FAMILY, name="smp_unet")
def smp_unet() -> Built:
    return smp.Unet(**ENCODER, encoder_depth=3, decoder_channels=(16, 8, 4)), image()


@specimen(FAMILY, name="smp_fpn")
def smp_fpn() -> Built:
    return smp.FPN(**ENCODER, decoder_pyramid_channels=32, decoder_segmentation_channels=32), image()


@specimen(FAMILY, name="smp_deeplabv3plus")
def smp_deeplabv3plus() -> Built:
    return smp.DeepLabV3Plus(**ENCODER, decoder_channels=16), image()


@specimen(FAMILY, name="smp_linknet")
def smp_linknet() -> Built:
    return smp.Linknet(**ENCODER), image()
