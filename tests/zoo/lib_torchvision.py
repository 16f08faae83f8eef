"""torchvision: one model per architecture of classification, segmentation, detection (train mode,
with targets, as it trains), video and optical flow; no weights, small inputs. ssd300_vgg16 (which
resizes every image to 300 x 300: 94 s for the truth alone; ssdlite is its architecture) and the
MViTs and S3D (16 x 224 x 224 clips only) are left out for time."""
from __future__ import annotations

from typing import Any

import torch

from .registry import Built, specimen
from .vision_ops import define_nms_if_missing, extension_loads

define_nms_if_missing()
import torchvision.models as tv  # noqa: E402
from torchvision.models import detection, optical_flow, segmentation, video  # noqa: E402

FAMILY = "torchvision"
CLASSES = 4


def images(size: int = 64, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, size, size)


# name -> (constructor keywords, image side): the smallest model of each architecture
CLASSIFIERS: dict[str, tuple[dict[str, Any], int]] = {
    "alexnet": ({}, 64), "convnext_tiny": ({}, 64), "densenet121": ({}, 64), "efficientnet_b0": ({}, 64),
    "efficientnet_v2_s": ({}, 64), "googlenet": ({"aux_logits": False, "init_weights": True}, 64),
    "inception_v3": ({"aux_logits": False, "init_weights": True}, 80), "maxvit_t": ({}, 224),
    "mnasnet0_5": ({}, 64), "mobilenet_v2": ({}, 64), "mobilenet_v3_small": ({}, 64),
    "regnet_x_400mf": ({}, 64), "regnet_y_400mf": ({}, 64), "resnet18": ({}, 64), "resnext50_32x4d": ({}, 64),
    "shufflenet_v2_x0_5": ({}, 64), "squeezenet1_1": ({}, 64), "swin_t": ({}, 64), "swin_v2_t": ({}, 64),
    "vgg11_bn": ({}, 32), "vit_b_32": ({"image_size": 64}, 64), "wide_resnet50_2": ({}, 64),
}


def _classifier(name: str, keywords: dict[str, Any], side: int) -> Built:
    return tv.get_model(name, weights=None, num_classes=CLASSES, **keywords), (images(side),)


for _name, (_keywords, _side) in CLASSIFIERS.items():
    specimen(FAMILY, name=f"tv_{_name}")(lambda n=_name, k=_keywords, s=_side: _classifier(n, k, s))


@specimen(FAMILY, name="tv_deeplabv3_mobilenet_v3_large")
def tv_deeplabv3() -> Built:
    model = segmentation.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=CLASSES)
    return model, (images(64),)


@specimen(FAMILY, name="tv_fcn_resnet50")
def tv_fcn() -> Built:
    return segmentation.fcn_resnet50(weights=None, weights_backbone=None, num_classes=CLASSES, aux_loss=True), (images(64),)


@specimen(FAMILY, name="tv_lraspp_mobilenet_v3_large")
def tv_lraspp() -> Built:
    return segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=CLASSES), (images(64),)


def targets(count: int = 2, side: int = 128, masks: bool = False, keypoints: bool = False) -> list[dict[str, Any]]:
    """One target per image: two boxes each, with masks or keypoints when the model trains on them."""
    found = []
    for _ in range(count):
        corner = torch.rand(2, 2) * side / 2
        boxes = torch.cat([corner, corner + side / 4 + torch.rand(2, 2) * side / 4], dim=1)
        target: dict[str, Any] = {"boxes": boxes, "labels": torch.tensor([1, 2])}
        if masks:
            target["masks"] = (torch.rand(2, side, side) > 0.5).to(torch.uint8)
        if keypoints:
            target["keypoints"] = torch.cat([boxes[:, None, :2] + 4, torch.ones(2, 1, 1)], dim=2).repeat(1, 17, 1)
        found.append(target)
    return found


DETECTORS: dict[str, dict[str, bool]] = {
    "fasterrcnn_mobilenet_v3_large_fpn": {}, "fasterrcnn_resnet50_fpn": {}, "fcos_resnet50_fpn": {},
    "retinanet_resnet50_fpn": {}, "ssdlite320_mobilenet_v3_large": {},
    "maskrcnn_resnet50_fpn": {"masks": True}, "keypointrcnn_resnet50_fpn": {"keypoints": True},
}


def _detector(name: str, extra: dict[str, bool]) -> Built:
    side = 128
    keywords: dict[str, Any] = {"weights": None, "weights_backbone": None, "num_classes": CLASSES}
    if name.startswith(("faster", "mask", "keypoint", "fcos", "retina")):
        keywords.update(min_size=side, max_size=side)
    if name.startswith(("faster", "mask", "keypoint")):  # a few proposals: the heads' cost, not the sampling's
        keywords.update(rpn_pre_nms_top_n_train=64, rpn_post_nms_top_n_train=32, rpn_batch_size_per_image=32,
                        box_batch_size_per_image=16)
    if name.startswith("keypoint"):
        keywords["num_classes"] = 2
    model = detection.__dict__[name](**keywords)
    batch = [torch.rand(3, side, side) for _ in range(2)]
    labels = targets(2, side, **extra)
    if name.startswith("keypoint"):
        for target in labels:
            target["labels"] = torch.tensor([1, 1])
    return model, (batch, labels)


# Detection runs torchvision's compiled ops (nms behind ``_assert_has_ops``, roi_align): with an
# extension that does not load, the detectors are not in the zoo, and this says why.
NOT_BUILT_HERE: dict[str, str] = {}
for _name, _extra in DETECTORS.items():
    if extension_loads():
        specimen(FAMILY, name=f"tv_{_name}")(lambda n=_name, e=_extra: _detector(n, e))
    else:
        NOT_BUILT_HERE[f"tv_{_name}"] = "torchvision's C++ extension does not load into this torch"


# mvit_v1_b, mvit_v2_s and s3d take only 16 x 224 x 224 clips (mvit: 220 s for the truth alone): left out
VIDEO = ("r3d_18", "mc3_18", "r2plus1d_18", "swin3d_t")


def _video(name: str) -> Built:
    return video.__dict__[name](weights=None, num_classes=CLASSES), (torch.randn(2, 3, 8, 32, 32),)


for _name in VIDEO:
    specimen(FAMILY, name=f"tv_{_name}")(lambda n=_name: _video(n))


@specimen(FAMILY, name="tv_raft_small")
def tv_raft_small() -> Built:
    model = optical_flow.raft_small(weights=None)
    return model, {"image1": torch.randn(1, 3, 128, 128), "image2": torch.randn(1, 3, 128, 128), "num_flow_updates": 2}
