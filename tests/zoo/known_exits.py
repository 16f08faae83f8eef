"""The exit codes of the zoo's library models (tests/zoo/libraries.py), pinned with their reasons.

Every library model exits 0 (every trainable parameter learns) unless it is listed here:

* :data:`STEP_ONE_ZEROS`: exits 1 today only because some weights start at exactly zero (a
  residual block's last BatchNorm, a zero-initialized head, LoRA's B factor, ControlNet's zero
  convolutions): the first backward leaves the parameters before them exactly zero, and a few
  real optimizer steps (tests/zoo/truth.py: ``first_learning_step``) show every one of them
  learning by step 2 or 3. Issue 27 ("Red means broken") turns these into a pass: once reports
  carry ``learns_from_step`` (:func:`expected_exit` reads that from the report itself), they must
  exit 0, and this table becomes the list of models that issue proves on.
* :data:`DRY`: exits 1 because a parameter gets no gradient in those steps either: a real problem,
  each with the reason (fxflow's site for the first failing parameter, from the sweep that wrote
  docs/tested-on.md).

:func:`assert_exit_as_pinned` checks one model against both tables *and* against the optimizer
steps, so a pin whose reason stops being true fails as loudly as a wrong exit code.
"""
from __future__ import annotations

from typing import Any

# Library models the sweep has not measured yet (on a busy machine it ran out of time): the matrix
# checks their verdicts on the default chain only, with no pinned paths or exit code, until
# `python scripts/zoo.py --libraries --pin` measures them and this set is emptied.
PENDING: frozenset[str] = frozenset()

STEP_ONE_ZEROS: dict[str, str] = {'diffusers_controlnet': '110 zero at step 1, all learn by step 3; first: conv_in.weight: reachable/zero: exactly '
                         '0 after `conv2d` at diffusers/models/controlnets/controlnet.py:773',
 'diffusers_unet3d_condition': '112 zero at step 1, all learn by step 2; first: '
                               'down_blocks.0.temp_convs.0.conv1.0.weight: reachable/zero: exactly 0 after '
                               '`conv3d` at diffusers/models/resnet.py:536',
 'peft_adaption_prompt': '1 zero at step 1, all learn by step 2; first: '
                         'base_model.model.model.layers.1.self_attn.adaption_prompt: reachable/zero: exactly 0 '
                         'after `bmm` at peft/tuners/adaption_prompt/layer.py:212',
 'peft_delora': '12 zero at step 1, all learn by step 2; first: '
                'base_model.model.model.layers.0.self_attn.q_proj.delora_A.default: reachable/zero: exactly 0 '
                'after `mm` at peft/tuners/delora/layer.py:260',
 'peft_dora': '6 zero at step 1, all learn by step 2; first: '
              'base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight: reachable/zero: exactly 0 '
              'after `mm` at peft/tuners/lora/dora.py:155',
 'peft_glora': '12 zero at step 1, all learn by step 2; first: '
               'base_model.model.model.layers.0.self_attn.q_proj.glora_A.default.Xu: reachable/zero: exactly 0 '
               'after `matmul` at peft/tuners/glora/layer.py:52',
 'peft_gralora': '6 zero at step 1, all learn by step 2; first: '
                 'base_model.model.model.layers.0.self_attn.q_proj.gralora_A.default: reachable/zero: exactly 0 '
                 'after `bmm` at peft/tuners/gralora/layer.py:362',
 'peft_hira': '6 zero at step 1, all learn by step 2; first: '
              'base_model.model.model.layers.0.self_attn.q_proj.hira_A.default: reachable/zero: exactly 0 after '
              '`mm` at peft/tuners/hira/layer.py:262',
 'peft_lily': '12 zero at step 1, all learn by step 2; first: '
              'base_model.model.model.layers.0.self_attn.q_proj.lily_A.default.weight: reachable/zero: exactly 0 '
              'after `mm` at peft/tuners/lily/layer.py:176',
 'peft_loha': '18 zero at step 1, all learn by step 2; first: '
              'base_model.model.model.layers.0.self_attn.q_proj.hada_w1_a.default: reachable/zero: exactly 0 after '
              '`hadaweight` at peft/tuners/loha/layer.py:207',
 'peft_lokr': '6 zero at step 1, all learn by step 2; first: '
              'base_model.model.model.layers.0.self_attn.q_proj.lokr_w2.default: reachable/zero: exactly 0 after '
              '`mul` at peft/tuners/lokr/layer.py:501',
 'peft_lora': '6 zero at step 1, all learn by step 2; first: '
              'base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight: reachable/zero: exactly 0 '
              'after `mm` at peft/tuners/lora/layer.py:1102',
 'peft_peanut': '6 zero at step 1, all learn by step 2; first: '
                'base_model.model.model.layers.0.self_attn.q_proj.peanut_A.default.weight: reachable/zero: exactly '
                '0 after `linear` at peft/tuners/peanut/layer.py:160',
 'peft_poly': '12 zero at step 1, all learn by step 2; first: '
              'base_model.model.model.layers.0.self_attn.q_proj.poly_router.default.module_logits: reachable/zero: '
              'exactly 0 after `bmm` at peft/tuners/poly/layer.py:152',
 'peft_pvera': '6 zero at step 1, all learn by step 2; first: '
               'base_model.model.model.layers.0.self_attn.q_proj.pvera_lambda_d.default: reachable/zero: exactly 0 '
               'after `mul` at peft/tuners/pvera/layer.py:317',
 'peft_randlora': '6 zero at step 1, all learn by step 2; first: '
                  'base_model.model.model.layers.0.self_attn.q_proj.randlora_gamma.default: reachable/zero: '
                  'exactly 0 after `uniquebasegrad` at peft/tuners/randlora/layer.py:303',
 'peft_supertuning': '6 zero at step 1, all learn by step 2; first: '
                     'base_model.model.model.layers.0.self_attn.q_proj.supertuning_lora_A.default.weight: '
                     'reachable/zero: exactly 0 after `mm` at peft/tuners/supertuning/layer.py:302',
 'peft_vera': '6 zero at step 1, all learn by step 2; first: '
              'base_model.model.model.layers.0.self_attn.q_proj.vera_lambda_d.default: reachable/zero: exactly 0 '
              'after `mul` at peft/tuners/vera/layer.py:285',
 'timm_byoanet': '190 zero at step 1, all learn by step 2; first: stages.0.0.conv1_1x1.conv.weight: '
                 'reachable/zero: exactly 0 after `batch_norm` at timm/layers/norm_act.py:136',
 'timm_byobnet': '35 zero at step 1, all learn by step 2; first: stages.0.0.conv1_kxk.conv.weight: reachable/zero: '
                 'exactly 0 after `batch_norm` at timm/layers/norm_act.py:136',
 'timm_csatv2': '56 zero at step 1, all learn by step 2; first: stages.0.0.attn.attn.pos_embed.proj.weight: '
                'reachable/zero: exactly 0 after `conv2d` at timm/models/csatv2.py:552',
 'timm_cspnet': '36 zero at step 1, all learn by step 2; first: stages.0.blocks.0.conv1.conv.weight: '
                'reachable/zero: exactly 0 after `batch_norm` at timm/layers/norm_act.py:136',
 'timm_hiera': '155 zero at step 1, all learn by step 2; first: pos_embed: reachable/zero: exactly 0 after '
               '`linear` at timm/layers/classifier.py:373',
 'timm_hieradet_sam2': '156 zero at step 1, all learn by step 2; first: pos_embed: reachable/zero: exactly 0 after '
                       '`linear` at timm/layers/classifier.py:373',
 'timm_mlp_mixer': '304 zero at step 1, all learn by step 2; first: stem.proj.weight: reachable/zero: exactly 0 '
                   'after `linear` at timm/models/mlp_mixer.py:520',
 'timm_mobilevit': '21 zero at step 1, all learn by step 2; first: stages.0.0.conv1_1x1.conv.weight: '
                   'reachable/zero: exactly 0 after `batch_norm` at timm/layers/norm_act.py:136',
 'timm_nfnet': '56 zero at step 1, all learn by step 2; first: stages.0.0.conv1.weight: reachable/zero: exactly 0 '
               'after `conv2d` at timm/layers/std_conv.py:169',
 'timm_regnet': '91 zero at step 1, all learn by step 2; first: s1.b1.conv1.conv.weight: reachable/zero: exactly 0 '
                'after `batch_norm` at timm/layers/norm_act.py:136',
 'timm_repvit': '104 zero at step 1, all learn by step 2; first: stages.0.blocks.0.channel_mixer.conv1.c.weight: '
                'reachable/zero: exactly 0 after `batch_norm` at timm/models/repvit.py:186',
 'timm_res2net': '208 zero at step 1, all learn by step 2; first: layer1.0.conv1.weight: reachable/zero: exactly 0 '
                 'after `batch_norm` at timm/models/res2net.py:124',
 'timm_resnest': '52 zero at step 1, all learn by step 2; first: layer1.0.conv1.weight: reachable/zero: exactly 0 '
                 'after `batch_norm` at timm/models/resnest.py:134',
 'timm_resnet': '19 zero at step 1, all learn by step 2; first: layer1.0.conv1.weight: reachable/zero: exactly 0 '
                'after `batch_norm` at timm/models/resnet.py:153',
 'timm_sequencer': '478 zero at step 1, all learn by step 2; first: stem.proj.weight: reachable/zero: exactly 0 '
                   'after `linear` at timm/layers/classifier.py:167',
 'timm_swin_transformer_v2': '156 zero at step 1, all learn by step 2; first: layers.0.blocks.0.attn.logit_scale: '
                             'reachable/zero: exactly 0 after `layer_norm` at '
                             'timm/models/swin_transformer_v2.py:541',
 'timm_swin_transformer_v2_cr': '156 zero at step 1, all learn by step 2; first: '
                                'stages.0.blocks.0.attn.logit_scale: reachable/zero: exactly 0 after `layer_norm` '
                                'at timm/models/swin_transformer_v2_cr.py:491',
 'timm_tiny_vit': '14 zero at step 1, all learn by step 2; first: stages.0.blocks.0.conv1.conv.weight: '
                  'reachable/zero: exactly 0 after `batch_norm` at timm/models/tiny_vit.py:116',
 'timm_tresnet': '198 zero at step 1, all learn by step 2; first: body.layer1.0.conv1.conv.weight: reachable/zero: '
                 'exactly 0 after `batch_norm` at timm/layers/norm_act.py:136',
 'tv_vit_b_32': '150 zero at step 1, all learn by step 2; first: class_token: reachable/zero: exactly 0 after '
                '`linear` at torchvision/models/vision_transformer.py:303'}
DRY: dict[str, str] = {'diffusers_autoencoder_tiny': 'stays dry: encoder.layers.0.weight, encoder.layers.0.bias (17); first failing: '
                               'encoder.layers.0.weight: cut/missing: casts to uint8; integer and boolean tensors '
                               'carry no gradient (to_uint8 @ diffusers/models/autoencoders/autoencoder_tiny.p',
 'diffusers_sd3': 'stays dry: transformer_blocks.1.attn.add_q_proj.weight, '
                  'transformer_blocks.1.attn.add_q_proj.bias (2); first failing: '
                  'transformer_blocks.1.attn.add_q_proj.weight: reachable/zero: exactly 0 after '
                  '`scaled_dot_product_attention` at diffusers/models/attention_processor.py:1484',
 'peft_cpt': 'stays dry: prompt_encoder.default.delta_embedding.weight (1); first failing: '
             'prompt_encoder.default.delta_embedding.weight: reachable/zero: exactly 0 after `mean` at '
             'peft/tuners/cpt/model.py:199',
 'timm_efficientvim': 'stays dry: stages.2.blocks.0.mixer.A, stages.2.blocks.1.mixer.A (2); first failing: '
                      'stages.2.blocks.0.mixer.A: reachable/zero: exactly 0 after `softmax` at '
                      'timm/models/efficientvim.py:321',
 'timm_efficientvit_msra': 'stays dry: stages.2.blocks.0.mixer.m.attn.attention_biases, '
                           'stages.2.blocks.0.mixer.m.attn.dws.0.conv.weight (39); first failing: '
                           'stages.0.blocks.0.dw0.m.conv.weight: reachable/zero: exactly 0 after `batch_norm` at '
                           'timm/models/efficientvit_msra.py:141',
 'timm_levit': 'stays dry: stages.2.blocks.0.attn.attention_biases, stages.2.blocks.1.attn.attention_biases (4); '
               'first failing: stages.0.blocks.0.attn.attention_biases: reachable/zero: exactly 0 after '
               '`batch_norm` at timm/models/levit.py:110',
 'timm_rexnet': 'stays dry: features.4.se.fc1.bias, features.5.se.fc1.bias (9); first failing: '
                'features.3.se.fc1.bias: reachable/zero: exactly 0 after `conv2d` at '
                'timm/layers/squeeze_excite.py:60',
 'timm_shvit': 'stays dry: stages.2.blocks.0.mixer.m.pre_norm.bias, stages.2.blocks.1.mixer.m.pre_norm.bias (5); '
               'first failing: stages.0.blocks.0.conv.m.c.weight: reachable/zero: exactly 0 after `batch_norm` at '
               'timm/models/shvit.py:38',
 'tv_maskrcnn_resnet50_fpn': 'stays dry: backbone.fpn.layer_blocks.3.0.weight, backbone.fpn.layer_blocks.3.0.bias '
                             '(2); first failing: backbone.fpn.layer_blocks.3.0.weight: reachable/zero: exactly 0 '
                             'after `indexput` at torchvision/models/detection/roi_heads.py:816',
 'tv_ssdlite320_mobilenet_v3_large': 'stays dry: backbone.extra.1.0.0.weight, backbone.extra.1.0.1.weight (57); '
                                     'first failing: backbone.extra.1.0.0.weight: reachable/zero: exactly 0 after '
                                     '`logsoftmax` at torchvision/models/detection/ssd.py:306'}


def expected_exit(name: str, step_zeros_fail: bool) -> int:
    """The exit code ``name`` must give: 1 when dry, 1 for step-one zeros until reports carry
    ``learns_from_step`` (issue 27), else 0."""
    if name in DRY:
        return 1
    return 1 if name in STEP_ONE_ZEROS and step_zeros_fail else 0


def assert_exit_as_pinned(name: str, result: Any, learning: dict[str, int | None]) -> None:
    """``result`` (the default chain's :class:`~zoo.run.PathResult`) exits as pinned, and the pin's class
    is what the optimizer steps show: every failing parameter of a step-one model learns by step 3,
    some failing parameter of a dry model never does."""
    late = [p for p in result.problems if learning.get(p) not in (None, 1)]
    if name in STEP_ONE_ZEROS:
        assert result.problems or not result.step_zeros_fail, f"{name} exits 0: drop it from STEP_ONE_ZEROS"
        assert len(late) == len(result.problems), (
            f"{name}: these fail and do not learn within the steps: {sorted(set(result.problems) - set(late))[:3]}")
    elif name in DRY:
        assert result.problems and len(late) < len(result.problems), f"{name}: nothing stays dry now ({late[:3]})"
    else:
        assert not result.problems, (f"{name} exits {result.exit_code}, pinned 0: {result.why_exit}; "
                                     f"learn within the steps: {len(late)} of {len(result.problems)}")
    assert result.exit_code == expected_exit(name, result.step_zeros_fail), result.why_exit
