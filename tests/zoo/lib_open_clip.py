"""open_clip: contrastive image-text models (a ViT CLIP, a ResNet CLIP, a CLIP with SigLIP's logit
bias, CoCa), each built from its own config classes, small and with no weights: width 32, 2 layers,
vocabulary 99, 2 images of 32 x 32 and 2 x 8 tokens. The loss is open_clip's own (contrastive, and
CoCa's captioning term)."""
from __future__ import annotations

import torch
from torch import nn

from .registry import Built, specimen
from .vision_ops import define_nms_if_missing

define_nms_if_missing()  # open_clip imports timm, which imports torchvision
import open_clip  # noqa: E402
from open_clip.coca_model import MultimodalCfg  # noqa: E402
from open_clip.loss import CoCaLoss, SigLipLoss  # noqa: E402
from open_clip.model import CLIPTextCfg, CLIPVisionCfg  # noqa: E402

FAMILY = "open_clip"
TOKENS, VOCABULARY = 8, 99
TEXT = dict(context_length=TOKENS, vocab_size=VOCABULARY, width=32, heads=2, layers=2)


class WithLoss(nn.Module):
    """The model and open_clip's loss for it, as its training loop calls them: the loss of one batch."""

    def __init__(self, model: nn.Module, loss: nn.Module) -> None:
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, images: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        out = self.model(images, text)
        if isinstance(out, dict):  # CoCa: the loss takes its captioning logits and labels too
            return sum(self.loss(**out, output_dict=True).values())
        return self.loss(*out)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(2, 3, 32, 32), torch.randint(1, VOCABULARY, (2, TOKENS))


def vit(**extra: object) -> CLIPVisionCfg:
    return CLIPVisionCfg(layers=2, width=32, head_width=16, patch_size=8, image_size=32, **extra)


@specimen(FAMILY, name="openclip_vit")
def openclip_vit() -> Built:
    return WithLoss(open_clip.CLIP(32, vit(), CLIPTextCfg(**TEXT)), open_clip.ClipLoss()), batch()


@specimen(FAMILY, name="openclip_resnet")
def openclip_resnet() -> Built:
    vision = CLIPVisionCfg(layers=(1, 1, 1, 1), width=8, head_width=8, image_size=32)
    return WithLoss(open_clip.CLIP(32, vision, CLIPTextCfg(**TEXT)), open_clip.ClipLoss()), batch()


@specimen(FAMILY, name="openclip_siglip")
def openclip_siglip() -> Built:
    model = open_clip.CLIP(32, vit(), CLIPTextCfg(**TEXT), init_logit_bias=-10.0)
    return WithLoss(model, SigLipLoss()), batch()


@specimen(FAMILY, name="openclip_coca")
def openclip_coca() -> Built:
    model = open_clip.CoCa(32, MultimodalCfg(**TEXT), CLIPTextCfg(**TEXT, embed_cls=True, output_tokens=True),
                           vit(attentional_pool=True, attn_pooler_heads=2, output_tokens=True))
    return WithLoss(model, CoCaLoss(caption_loss_weight=1.0, clip_loss_weight=1.0)), batch()
