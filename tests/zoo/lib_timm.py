"""timm: one model per architecture family (a module of ``timm.models``), the family's smallest
registered variant, no weights, 4 classes, on 2 random images (64 x 64 where the model takes them,
else its own input size).

:data:`FAMILIES` was chosen by a sweep that built every registered model on the meta device and kept
the one with the fewest parameters per module, then tried ``img_size=64``, plain 64 x 64 images and
the model's own input size, in that order. :data:`LEFT_OUT` are the families whose smallest model is
too large for a CPU test, with its size.
"""
from __future__ import annotations

from typing import Any

import torch

from .registry import Built, specimen
from .vision_ops import define_nms_if_missing

define_nms_if_missing()  # timm imports torchvision
import timm  # noqa: E402

FAMILY = "timm"
CLASSES = 4

# module of timm.models -> (model name, image side, constructor keywords)
FAMILIES: dict[str, tuple[str, int, dict[str, Any]]] = {'beit': ('beit_base_patch16_224', 64, {'depth': 2, 'img_size': 64}),
 'byoanet': ('halonet_h1', 256, {}),
 'byobnet': ('test_byobnet', 64, {'img_size': 64}),
 'cait': ('cait_xxs24_224', 64, {'img_size': 64}),
 'coat': ('coat_tiny', 64, {'img_size': 64}),
 'convit': ('convit_tiny', 64, {'img_size': 64}),
 'convmixer': ('convmixer_768_32', 64, {}),
 'convnext': ('test_convnext', 64, {}),
 'cpubone': ('cpubone_nano', 64, {}),
 'crossvit': ('crossvit_tiny_240', 64, {}),
 'csatv2': ('csatv2', 64, {}),
 'cspnet': ('cs3darknet_focus_s', 64, {}),
 'cspnext': ('cspnext_tiny', 64, {}),
 'davit': ('davit_tiny', 64, {}),
 'deit': ('deit_tiny_patch16_224', 64, {'img_size': 64}),
 'densenet': ('densenet121', 64, {}),
 'dla': ('dla46x_c', 64, {}),
 'dpn': ('dpn48b', 64, {}),
 'edgenext': ('edgenext_xx_small', 64, {}),
 'efficientformer': ('efficientformer_l1', 224, {}),
 'efficientformer_v2': ('efficientformerv2_s0', 64, {'img_size': 64}),
 'efficientnet': ('test_efficientnet', 64, {}),
 'efficientvim': ('efficientvim_m1', 64, {}),
 'efficientvit_mit': ('efficientvit_b0', 64, {}),
 'efficientvit_msra': ('efficientvit_m0', 64, {'img_size': 64}),
 'eva': ('vit_tiny_patch16_dinov3_qkvb', 64, {'img_size': 64}),
 'fasternet': ('fasternet_t0', 64, {}),
 'fastvit': ('fastvit_t8', 64, {}),
 'focalnet': ('focalnet_tiny_srf', 64, {}),
 'gcvit': ('gcvit_xxtiny', 64, {'img_size': 64}),
 'ghostnet': ('ghostnet_050', 64, {}),
 'hardcorenas': ('hardcorenas_b', 64, {}),
 'hgnet': ('hgnetv2_b0', 64, {}),
 'hiera': ('hiera_tiny_224', 64, {'img_size': 64}),
 'hieradet_sam2': ('sam2_hiera_tiny', 64, {}),
 'hrnet': ('hrnet_w18_small', 64, {}),
 'iformer': ('iformer_t', 64, {}),
 'inception_next': ('inception_next_atto', 64, {}),
 'inception_v3': ('adv_inception_v3', 299, {}),
 'lcnetv2': ('lcnetv2_small', 64, {}),
 'levit': ('levit_128s', 64, {'img_size': 64}),
 'lowformer': ('lowformer_b0', 64, {}),
 'mambaout': ('test_mambaout', 64, {}),
 'maxxvit': ('test_coatnet', 64, {'img_size': 64}),
 'metaformer': ('poolformerv2_s12', 64, {}),
 'mlp_mixer': ('gmlp_ti16_224', 64, {'img_size': 64}),
 'mobilenetv3': ('mobilenetv3_small_050', 64, {}),
 'mobilevit': ('mobilevit_xxs', 64, {'img_size': 64}),
 'mvitv2': ('mvitv2_tiny', 64, {'img_size': 64}),
 'naflexvit': ('naflexvit_base_patch16_parfac_gap', 64, {'depth': 2, 'img_size': 64}),
 'nest': ('jx_nest_tiny', 64, {'img_size': 64}),
 'nextvit': ('nextvit_small', 64, {}),
 'nfnet': ('test_nfnet', 64, {}),
 'pit': ('pit_ti_224', 64, {'img_size': 64}),
 'pvt_v2': ('pvt_v2_b0', 64, {}),
 'rdnet': ('rdnet_tiny', 64, {}),
 'regnet': ('regnetx_002', 64, {}),
 'repghost': ('repghostnet_050', 64, {}),
 'repvit': ('repvit_m1', 64, {'img_size': 64}),
 'res2net': ('res2next50', 64, {}),
 'resnest': ('resnest14d', 64, {}),
 'resnet': ('test_resnet', 64, {}),
 'resnetv2': ('resnetv2_18', 64, {}),
 'rexnet': ('rexnet_100', 64, {}),
 'selecsls': ('selecsls42', 64, {}),
 'senet': ('legacy_seresnet18', 64, {}),
 'sequencer': ('sequencer2d_s', 64, {'img_size': 64}),
 'shvit': ('shvit_s1', 64, {}),
 'sknet': ('skresnet18', 64, {}),
 'starnet': ('starnet_s050', 64, {}),
 'swiftformer': ('swiftformer_xs', 64, {'img_size': 64}),
 'swin_transformer': ('swin_tiny_patch4_window7_224', 64, {'img_size': 64}),
 'swin_transformer_v2': ('swinv2_tiny_window16_256', 64, {'img_size': 64}),
 'swin_transformer_v2_cr': ('swinv2_cr_tiny_224', 64, {'img_size': 64}),
 'tiny_vit': ('tiny_vit_5m_224', 64, {}),
 'tnt': ('tnt_s_legacy_patch16_224', 64, {'img_size': 64}),
 'tresnet': ('tresnet_m', 64, {}),
 'twins': ('twins_svt_small', 64, {'img_size': 64}),
 'visformer': ('visformer_tiny', 64, {'img_size': 64}),
 'vision_transformer': ('test_vit', 64, {'img_size': 64}),
 'vision_transformer_hybrid': ('vit_tiny_r_s16_p8_224', 64, {'img_size': 64}),
 'vision_transformer_relpos': ('test_vit_relpos', 64, {'img_size': 64}),
 'vision_transformer_sam': ('samvit_base_patch16_224', 64, {'depth': 2, 'img_size': 64}),
 'vitamin': ('vitamin_small_224', 64, {'img_size': 64}),
 'volo': ('volo_d1_224', 64, {'img_size': 64}),
 'vovnet': ('ese_vovnet19b_slim_dw', 64, {}),
 'xception': ('legacy_xception', 64, {}),
 'xception_aligned': ('xception41p', 64, {}),
 'xcit': ('xcit_nano_12_p8_224', 64, {'img_size': 64})}

LEFT_OUT: dict[str, str] = {'deepseek_vit': 'deepseek_vit_412m: smallest variant 412M parameters',
 'gemma4_vit': 'gemma4_vit_167m: smallest variant 167M parameters',
 'inception_resnet_v2': 'ens_adv_inception_resnet_v2: smallest variant 56M parameters',
 'inception_v4': 'inception_v4: takes 299 x 299 images only: 13 s for one forward and backward',
 'mobilenetv5': 'mobilenetv5_base: smallest variant 83M parameters',
 'nasnet': 'nasnetalarge: smallest variant 89M parameters',
 'pnasnet': 'pnasnet5large: smallest variant 86M parameters',
 'qwen3_vit': 'qwen3_vit_88m: smallest variant 87M parameters',
 'vgg': 'vgg11: smallest variant 133M parameters'}


def build(model: str, side: int, keywords: dict[str, Any]) -> Built:
    return timm.create_model(model, pretrained=False, num_classes=CLASSES, **keywords), (torch.randn(2, 3, side, side),)


for _module, (_model, _side, _keywords) in FAMILIES.items():
    specimen(FAMILY, name=f"timm_{_module}")(lambda m=_model, s=_side, k=_keywords: build(m, s, k))
