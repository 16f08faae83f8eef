"""torchvision's one C++ op the zoo's models need, in Python when its C extension cannot load.

The torchvision wheel a package index serves is built against one torch build (often CUDA); on
another (CPU torch) its ``_C`` extension fails to load and ``import torchvision`` fails where it
registers the meta kernel of ``torchvision::nms``. :func:`define_nms_if_missing`, called before
torchvision (or timm, which imports it) is imported, defines that op with a plain-Python greedy
NMS so the import succeeds. No gradient flows through NMS (it returns indices), so the zoo's
truth and fxflow's verdicts are unaffected. This lives in the tests only, never in fxflow: a user
whose torchvision does not load has the same fix to make (a torchvision built for their torch).
"""
from __future__ import annotations

import glob
import importlib.util
import os

import torch

NMS_SCHEMA = "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
# torchvision 0.28 also registers a fake kernel for its quantized twin at import
QNMS_SCHEMA = "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
_library: torch.library.Library | None = None  # kept alive: the op lives as long as this object


def extension_loads() -> bool:
    """Whether torchvision's compiled ops load into this torch (True when torchvision is absent)."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return True
    built = glob.glob(os.path.join(os.path.dirname(spec.origin), "_C*.so"))
    try:
        torch.ops.load_library(built[0])
    except (IndexError, OSError, RuntimeError):
        return False
    return True


def define_nms_if_missing() -> bool:
    """Define ``torchvision::nms`` in Python when torchvision's extension does not load; True if defined."""
    global _library
    if _library is not None or extension_loads():
        return False
    _library = torch.library.Library("torchvision", "DEF")
    _library.define(NMS_SCHEMA)
    _library.impl("nms", greedy_nms, "CompositeExplicitAutograd")
    _library.define(QNMS_SCHEMA)
    _library.impl("qnms", greedy_nms, "CompositeExplicitAutograd")
    return True


def greedy_nms(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Indices of the boxes kept, highest score first: each box drops the later ones it overlaps by more
    than ``iou_threshold`` (intersection over union), as torchvision's kernel does."""
    order = scores.argsort(descending=True)
    boxes = dets[order]
    area = (boxes[:, 2] - boxes[:, 0]).clamp(min=0) * (boxes[:, 3] - boxes[:, 1]).clamp(min=0)
    suppressed = torch.zeros(len(order), dtype=torch.bool, device=dets.device)
    keep = []
    for i in range(len(order)):
        if suppressed[i]:
            continue
        keep.append(i)
        top_left = torch.maximum(boxes[i, :2], boxes[i + 1:, :2])
        bottom_right = torch.minimum(boxes[i, 2:], boxes[i + 1:, 2:])
        overlap = (bottom_right - top_left).clamp(min=0).prod(dim=1)
        suppressed[i + 1:] |= overlap / (area[i] + area[i + 1:] - overlap) > iou_threshold
    return order[torch.tensor(keep, dtype=torch.long, device=dets.device)]
