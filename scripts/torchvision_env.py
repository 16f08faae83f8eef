"""Import this before transformers, timm or peft: ``import torchvision`` (which they make) then
works where the installed torchvision was built for another torch, as with CPU torch 2.13 and the
index's torchvision (tests/zoo/vision_ops.py defines its one op in Python; no gradient uses it)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from zoo.vision_ops import define_nms_if_missing  # noqa: E402

define_nms_if_missing()
