"""Transfer learning with a deliberately frozen backbone: dryness that is not a bug.

Two ways people freeze a pretrained feature extractor, and how fxflow reads each:

    fxflow check examples/transfer_frozen.py:FrozenBackbone
        backbone parameters have requires_grad=False: verdict "frozen", exit 0.

    fxflow check examples/transfer_frozen.py:DetachedBackbone
        the backbone's output is detached in forward: its parameters are "cut", exit 1 ...
    fxflow check examples/transfer_frozen.py:DetachedBackbone --allow 'backbone.*'
        ... unless you say the dryness is deliberate: "(allowed)", exit 0.

Prefer requires_grad_(False): the optimizer then skips those parameters, DDP does not wait for
their gradients, and no --allow is needed.
"""
import torch
import torch.nn as nn


def make_backbone() -> nn.Sequential:
    """Stands in for a pretrained feature extractor (a ResNet trunk, a BERT encoder)."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten())


class FrozenBackbone(nn.Module):
    """The backbone is frozen with requires_grad_(False); only the head trains."""

    def __init__(self, classes: int = 5):
        super().__init__()
        self.backbone = make_backbone().requires_grad_(False)
        self.head = nn.Linear(16, classes)

    def forward(self, images):
        return self.head(self.backbone(images))


class DetachedBackbone(nn.Module):
    """The backbone is frozen by detaching its features: trainable flags stay on, the wire is cut."""

    def __init__(self, classes: int = 5):
        super().__init__()
        self.backbone = make_backbone()
        self.head = nn.Linear(16, classes)

    def forward(self, images):
        features = self.backbone(images).detach()  # deliberate: the backbone is not fine-tuned
        return self.head(features)


def example_inputs():
    return torch.randn(4, 3, 32, 32)
