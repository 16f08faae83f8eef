"""ultralytics: YOLO models (v8 and 11 detection, v8 classification and segmentation), each built
from the model YAML the package ships with a tiny width scale (1/16 of the channels, a third of the
depth), no weights, 2 classes, on 2 random 64 x 64 images; the outputs are the raw head maps a
training step takes its loss from."""
from __future__ import annotations

import torch

from .registry import Built, specimen
from .vision_ops import define_nms_if_missing

define_nms_if_missing()  # ultralytics imports torchvision
from ultralytics.nn.tasks import (ClassificationModel, DetectionModel, SegmentationModel,  # noqa: E402
                                  yaml_model_load)

FAMILY = "ultralytics"
SCALE = [0.33, 0.0625, 1024]  # depth, width, maximum channels


def build(task: type, config: str) -> Built:
    layout = yaml_model_load(config)
    layout["scales"], layout["scale"] = {"n": SCALE}, "n"
    return task(layout, nc=2, verbose=False), (torch.randn(2, 3, 64, 64),)


# specimen -> (model class, the YAML ultralytics ships)
MODELS = {"yolo_v8_detect": (DetectionModel, "yolov8n.yaml"), "yolo_11_detect": (DetectionModel, "yolo11n.yaml"),
          "yolo_v8_classify": (ClassificationModel, "yolov8n-cls.yaml"),
          "yolo_v8_segment": (SegmentationModel, "yolov8n-seg.yaml")}
for _name, (_task, _config) in MODELS.items():
    specimen(FAMILY, name=_name)(lambda task=_task, config=_config: build(task, config))
