"""kornia: its learned local-feature networks (patch descriptors HardNet, TFeat, SOSNet, the
orientation net OriNet), no weights, on 2 random 32 x 32 grey patches, and a small CNN trained
behind kornia's differentiable augmentations (random affine, colour jitter, crop) on 2 images of
3 x 32 x 32."""
from __future__ import annotations

import torch
from torch import nn

import kornia.augmentation as K
import kornia.feature as KF

from .registry import Built, specimen

FAMILY = "kornia"


def patches() -> tuple[torch.Tensor]:
    return (torch.rand(2, 1, 32, 32),)


# the learned patch networks, each from its own constructor with no weights
PATCH_NETWORKS = {"kornia_hardnet": KF.HardNet, "kornia_tfeat": KF.TFeat, "kornia_sosnet": KF.SOSNet,
                  "kornia_orinet": KF.OriNet}
for _name, _network in PATCH_NETWORKS.items():
    specimen(FAMILY, name=_name)(lambda network=_network: (network(pretrained=False), patches()))


@specimen(FAMILY, name="kornia_augmented_cnn")
def kornia_augmented_cnn() -> Built:
    model = nn.Sequential(
        K.RandomAffine(degrees=15.0, translate=(0.1, 0.1), p=1.0), K.ColorJitter(0.2, 0.2, 0.2, 0.1, p=1.0),
        K.RandomResizedCrop((24, 24)), nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    return model, (torch.rand(2, 3, 32, 32),)
