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

STEP_ONE_ZEROS: dict[str, str] = {'diffusers_controlnet': '110 zero at step 1, all learn by step 3; first: conv_in.weight: reachable/zero: exactly 0 '
                         'after `conv2d` at diffusers/models/controlnets/controlnet.py:773',
 'diffusers_unet3d_condition': '112 zero at step 1, all learn by step 2; first: '
                               'down_blocks.0.temp_convs.0.conv1.0.weight: reachable/zero: exactly 0 after `conv3d` '
                               'at diffusers/models/resnet.py:536',
 'peft_adaption_prompt': '1 zero at step 1, all learn by step 2; first: '
                         'base_model.model.model.layers.1.self_attn.adaption_prompt: reachable/zero: exactly 0 after '
                         '`bmm` at peft/tuners/adaption_prompt/layer.py:212',
 'peft_delora': '12 zero at step 1, all learn by step 2; first: '
                'base_model.model.model.layers.0.self_attn.q_proj.delora_A.default: reachable/zero: exactly 0 after '
                '`mm` at peft/tuners/delora/layer.py:260',
 'peft_dora': '6 zero at step 1, all learn by step 2; first: '
              'base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight: reachable/zero: exactly 0 '
              'after `mm` at peft/tuners/lora/dora.py:155',
 'peft_glora': '12 zero at step 1, all learn by step 2; first: '
               'base_model.model.model.layers.0.self_attn.q_proj.glora_A.default.Xu: reachable/zero: exactly 0 after '
               '`matmul` at peft/tuners/glora/layer.py:52',
 'peft_gralora': '6 zero at step 1, all learn by step 2; first: '
                 'base_model.model.model.layers.0.self_attn.q_proj.gralora_A.default: reachable/zero: exactly 0 '
                 'after `bmm` at peft/tuners/gralora/layer.py:362',
 'peft_hira': '6 zero at step 1, all learn by step 2; first: '
              'base_model.model.model.layers.0.self_attn.q_proj.hira_A.default: reachable/zero: exactly 0 after `mm` '
              'at peft/tuners/hira/layer.py:262',
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
                'base_model.model.model.layers.0.self_attn.q_proj.peanut_A.default.weight: reachable/zero: exactly 0 '
                'after `linear` at peft/tuners/peanut/layer.py:160',
 'peft_poly': '12 zero at step 1, all learn by step 2; first: '
              'base_model.model.model.layers.0.self_attn.q_proj.poly_router.default.module_logits: reachable/zero: '
              'exactly 0 after `bmm` at peft/tuners/poly/layer.py:152',
 'peft_pvera': '6 zero at step 1, all learn by step 2; first: '
               'base_model.model.model.layers.0.self_attn.q_proj.pvera_lambda_d.default: reachable/zero: exactly 0 '
               'after `mul` at peft/tuners/pvera/layer.py:317',
 'peft_randlora': '6 zero at step 1, all learn by step 2; first: '
                  'base_model.model.model.layers.0.self_attn.q_proj.randlora_gamma.default: reachable/zero: exactly '
                  '0 after `uniquebasegrad` at peft/tuners/randlora/layer.py:303',
 'peft_supertuning': '6 zero at step 1, all learn by step 2; first: '
                     'base_model.model.model.layers.0.self_attn.q_proj.supertuning_lora_A.default.weight: '
                     'reachable/zero: exactly 0 after `mm` at peft/tuners/supertuning/layer.py:302',
 'peft_vera': '6 zero at step 1, all learn by step 2; first: '
              'base_model.model.model.layers.0.self_attn.q_proj.vera_lambda_d.default: reachable/zero: exactly 0 '
              'after `mul` at peft/tuners/vera/layer.py:285',
 'timm_byoanet': '190 zero at step 1, all learn by step 2; first: stages.0.0.conv1_1x1.conv.weight: reachable/zero: '
                 'exactly 0 after `batch_norm` at timm/layers/norm_act.py:136',
 'timm_byobnet': '35 zero at step 1, all learn by step 2; first: stages.0.0.conv1_kxk.conv.weight: reachable/zero: '
                 'exactly 0 after `batch_norm` at timm/layers/norm_act.py:136',
 'timm_cspnet': '36 zero at step 1, all learn by step 2; first: stages.0.blocks.0.conv1.conv.weight: reachable/zero: '
                'exactly 0 after `batch_norm` at timm/layers/norm_act.py:136',
 'timm_hiera': '155 zero at step 1, all learn by step 2; first: pos_embed: reachable/zero: exactly 0 after `linear` '
               'at timm/layers/classifier.py:373',
 'timm_hieradet_sam2': '156 zero at step 1, all learn by step 2; first: pos_embed: reachable/zero: exactly 0 after '
                       '`linear` at timm/layers/classifier.py:373',
 'timm_mlp_mixer': '304 zero at step 1, all learn by step 2; first: stem.proj.weight: reachable/zero: exactly 0 '
                   'after `linear` at timm/models/mlp_mixer.py:520',
 'timm_nfnet': '56 zero at step 1, all learn by step 2; first: stages.0.0.conv1.weight: reachable/zero: exactly 0 '
               'after `conv2d` at timm/layers/std_conv.py:169',
 'timm_regnet': '91 zero at step 1, all learn by step 2; first: s1.b1.conv1.conv.weight: reachable/zero: exactly 0 '
                'after `batch_norm` at timm/layers/norm_act.py:136',
 'timm_res2net': '208 zero at step 1, all learn by step 2; first: layer1.0.conv1.weight: reachable/zero: exactly 0 '
                 'after `batch_norm` at timm/models/res2net.py:124',
 'timm_resnet': '19 zero at step 1, all learn by step 2; first: layer1.0.conv1.weight: reachable/zero: exactly 0 '
                'after `batch_norm` at timm/models/resnet.py:153',
 'timm_sequencer': '478 zero at step 1, all learn by step 2; first: stem.proj.weight: reachable/zero: exactly 0 '
                   'after `linear` at timm/layers/classifier.py:167',
 'timm_swin_transformer_v2': '156 zero at step 1, all learn by step 2; first: layers.0.blocks.0.attn.logit_scale: '
                             'reachable/zero: exactly 0 after `layer_norm` at timm/models/swin_transformer_v2.py:541',
 'timm_tresnet': '198 zero at step 1, all learn by step 2; first: body.layer1.0.conv1.conv.weight: reachable/zero: '
                 'exactly 0 after `batch_norm` at timm/layers/norm_act.py:136',
 'tv_vit_b_32': '150 zero at step 1, all learn by step 2; first: class_token: reachable/zero: exactly 0 after '
                '`linear` at torchvision/models/vision_transformer.py:303'}
DRY: dict[str, str] = {'st_cosent': 'stays dry: model.0.model.encoder.layer.0.attention.self.key.bias and 1 more (the BERT key '
              'biases); first failing: model.0.model.encoder.layer.0.attention.self.key.bias: reachable/zero: '
              'zero up to rounding',
 'st_ranking': 'stays dry: model.0.model.encoder.layer.0.attention.self.key.bias and 1 more (the BERT key '
               'biases); first failing: model.0.model.encoder.layer.0.attention.self.key.bias: reachable/zero: '
               'zero up to rounding',
 'diffusers_autoencoder_kl': 'stays dry: encoder.mid_block.attentions.0.to_k.bias, '
                             'decoder.mid_block.attentions.0.to_k.bias; first failing: '
                             'encoder.mid_block.attentions.0.to_k.bias: reachable/zero: zero up to rounding: its '
                             'gradient is round-off, tiny next to the largest and collapsing by orders of magnitude '
                             'when the same step runs in floa',
 'diffusers_autoencoder_tiny': 'stays dry: encoder.layers.0.weight, encoder.layers.0.bias; first failing: '
                               'encoder.layers.0.weight: cut/missing: casts to uint8; integer and boolean tensors '
                               'carry no gradient (to_uint8 @ diffusers/models/autoencoders/autoencoder_tiny.py:310)',
 'diffusers_dit': 'stays dry: transformer_blocks.0.attn1.to_k.bias, transformer_blocks.1.attn1.to_k.bias; first '
                  'failing: transformer_blocks.0.attn1.to_k.bias: reachable/zero: zero up to rounding: its gradient '
                  'is round-off, tiny next to the largest and collapsing by orders of magnitude when the same step '
                  'runs in float64,',
 'diffusers_pixart': 'stays dry: transformer_blocks.0.attn1.to_k.bias, transformer_blocks.0.attn2.to_k.bias; first '
                     'failing: transformer_blocks.0.attn1.to_k.bias: reachable/zero: zero up to rounding: its '
                     'gradient is round-off, tiny next to the largest and collapsing by orders of magnitude when the '
                     'same step runs in float64,',
 'diffusers_sd3': 'stays dry: transformer_blocks.1.attn.add_q_proj.weight, '
                  'transformer_blocks.1.attn.add_q_proj.bias; first failing: '
                  'transformer_blocks.1.attn.add_q_proj.weight: reachable/zero: exactly 0 after '
                  'scaled_dot_product_attention at diffusers/models/attention_processor.py:1484: it passes back 0 '
                  'for every element on this',
 'diffusers_unet2d': 'stays dry: down_blocks.1.attentions.0.to_k.bias, up_blocks.0.attentions.0.to_k.bias; first '
                     'failing: down_blocks.1.attentions.0.to_k.bias: reachable/zero: zero up to rounding: its '
                     'gradient is round-off, tiny next to the largest and collapsing by orders of magnitude when the '
                     'same step runs in float64,',
 'diffusers_unet_spatio_temporal': 'stays dry: down_blocks.0.attentions.0.transformer_blocks.0.norm2.weight, '
                                   'down_blocks.0.attentions.0.transformer_blocks.0.norm2.bias; first failing: '
                                   'down_blocks.0.attentions.0.transformer_blocks.0.norm2.weight: reachable/zero: '
                                   'zero up to rounding: its gradient is round-off, tiny next to the largest and '
                                   'collapsing by orders of magnitude when the sa',
 'diffusers_vq': 'stays dry: encoder.mid_block.attentions.0.to_k.bias, decoder.mid_block.attentions.0.to_k.bias; '
                 'first failing: encoder.mid_block.attentions.0.to_k.bias: reachable/zero: zero up to rounding: its '
                 'gradient is round-off, tiny next to the largest and collapsing by orders of magnitude when the '
                 'same step runs in floa',
 'pyg_transformer_conv': 'stays dry: first.lin_key.bias, second.lin_key.bias; first failing: first.lin_key.bias: '
                         'reachable/zero: zero up to rounding: its gradient is round-off, tiny next to the largest '
                         'and collapsing by orders of magnitude when the same step runs in float64, so it is zero in',
 'timm_cait': 'stays dry: blocks.0.attn.proj_l.bias, blocks.1.attn.proj_l.bias; first failing: '
              'blocks.0.attn.proj_l.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny next '
              'to the largest and collapsing by orders of magnitude when the same step runs in float64, so it is z',
 'timm_convit': 'stays dry: blocks.0.attn.pos_proj.bias, blocks.1.attn.pos_proj.bias; first failing: '
                'blocks.0.attn.pos_proj.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny '
                'next to the largest and collapsing by orders of magnitude when the same step runs in float64, so it '
                'is',
 'timm_cpubone': 'stays dry: stages.2.1.total.0.0.main.0.bias, stages.2.1.total.1.main.spatial_conv.conv.1.bias; '
                 'first failing: stages.2.1.total.0.0.main.0.bias: reachable/zero: zero up to rounding: its gradient '
                 'is round-off, tiny next to the largest and collapsing by orders of magnitude when the same step '
                 'runs in float64, so',
 'timm_crossvit': 'stays dry: blocks.0.fusion.0.attn.wk.bias, blocks.0.fusion.1.attn.wk.bias; first failing: '
                  'blocks.0.fusion.0.attn.wk.bias: reachable/zero: zero up to rounding: its gradient is round-off, '
                  'tiny next to the largest and collapsing by orders of magnitude when the same step runs in '
                  'float64, so it',
 'timm_csatv2': 'stays dry: stages.0.0.attn.attn.norm1.weight, stages.0.0.attn.attn.norm2.weight; first failing: '
                'stages.0.0.attn.attn.norm1.weight: reachable/zero: zero up to rounding: its gradient is round-off, '
                'tiny next to the largest and collapsing by orders of magnitude when the same step runs in float64, '
                'so',
 'timm_efficientformer': 'stays dry: stem.conv1.bias, stem.conv2.bias; first failing: stem.conv1.bias: '
                         'reachable/zero: zero up to rounding: its gradient is round-off, tiny next to the largest '
                         'and collapsing by orders of magnitude when the same step runs in float64, so it is zero in '
                         'exa',
 'timm_efficientformer_v2': 'stays dry: stem.conv1.conv.bias, stem.conv2.conv.bias; first failing: '
                            'stem.conv1.conv.bias: reachable/zero: zero up to rounding: its gradient is round-off, '
                            'tiny next to the largest and collapsing by orders of magnitude when the same step runs '
                            'in float64, so it is zero i',
 'timm_efficientnet': 'stays dry: blocks.2.0.bn2.bias, blocks.3.0.bn3.bias; first failing: blocks.2.0.bn2.bias: '
                      'reachable/zero: zero up to rounding: its gradient is round-off, tiny next to the largest and '
                      'collapsing by orders of magnitude when the same step runs in float64, so it is zero in',
 'timm_efficientvim': 'stays dry: stages.0.blocks.0.mixer.A, stages.0.blocks.1.mixer.A; first failing: '
                      'stages.0.blocks.0.mixer.A: reachable/zero: zero up to rounding: its gradient is round-off, '
                      'tiny next to the largest and collapsing by orders of magnitude when the same step runs in '
                      'float64, so it is z',
 'timm_efficientvit_mit': 'stays dry: stem.res0.main.point_conv.norm.bias, '
                          'stages.0.blocks.0.main.point_conv.norm.bias; first failing: '
                          'stem.res0.main.point_conv.norm.bias: reachable/zero: zero up to rounding: its gradient is '
                          'round-off, tiny next to the largest and collapsing by orders of magnitude when the same '
                          'step runs in float64,',
 'timm_efficientvit_msra': 'stays dry: stages.1.downsample.res1.0.m.bn.bias, '
                           'stages.1.downsample.res1.1.m.pw2.bn.bias; first failing: '
                           'stages.1.downsample.res1.0.m.bn.bias: reachable/zero: zero up to rounding: its gradient '
                           'is round-off, tiny next to the largest and collapsing by orders of magnitude when the '
                           'same step runs in float64,',
 'timm_fastvit': 'stays dry: stages.1.downsample.proj.0.large_conv.bn.bias, '
                 'stages.1.downsample.proj.0.small_conv.bn.bias; first failing: '
                 'stages.1.downsample.proj.0.large_conv.bn.bias: reachable/zero: zero up to rounding: its gradient '
                 'is round-off, tiny next to the largest and collapsing by orders of magnitude when the same step '
                 'runs in',
 'timm_ghostnet': 'stays dry: blocks.1.0.bn_dw.bias, blocks.1.0.shortcut.1.bias; first failing: '
                  'blocks.1.0.bn_dw.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny next '
                  'to the largest and collapsing by orders of magnitude when the same step runs in float64, so it is '
                  'zero',
 'timm_hardcorenas': 'stays dry: blocks.0.0.bn2.bias, blocks.1.0.bn3.bias; first failing: blocks.0.0.bn2.bias: '
                     'reachable/zero: zero up to rounding: its gradient is round-off, tiny next to the largest and '
                     'collapsing by orders of magnitude when the same step runs in float64, so it is zero in',
 'timm_hgnet': 'stays dry: stem.stem3.lab.bias, stages.0.blocks.0.layers.2.lab.bias; first failing: '
               'stem.stem3.lab.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny next to '
               'the largest and collapsing by orders of magnitude when the same step runs in float64, so it is zero '
               'in',
 'timm_hrnet': 'stays dry: downsamp_modules.0.0.bias, downsamp_modules.1.0.bias; first failing: '
               'downsamp_modules.0.0.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny next '
               'to the largest and collapsing by orders of magnitude when the same step runs in float64, so it is z',
 'timm_iformer': 'stays dry: stages.0.blocks.0.mixer.module.0.bn.bias, stages.0.blocks.1.mixer.module.0.bn.bias; '
                 'first failing: stages.0.blocks.0.mixer.module.0.bn.bias: reachable/zero: zero up to rounding: its '
                 'gradient is round-off, tiny next to the largest and collapsing by orders of magnitude when the '
                 'same step runs in floa',
 'timm_inception_next': 'stays dry: stem.0.bias, stages.0.blocks.0.token_mixer.dwconv_hw.bias; first failing: '
                        'stem.0.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny next to '
                        'the largest and collapsing by orders of magnitude when the same step runs in float64, so it '
                        'is zero in exact a',
 'timm_levit': 'stays dry: stem.conv4.bn.bias, stages.0.blocks.0.attn.proj.ln.bn.bias; first failing: '
               'stem.conv4.bn.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny next to the '
               'largest and collapsing by orders of magnitude when the same step runs in float64, so it is zero in',
 'timm_lowformer': 'stays dry: stages.2.1.local.main.spatial_conv.conv.bias, '
                   'stages.2.2.local.main.spatial_conv.conv.bias; first failing: '
                   'stages.2.1.local.main.spatial_conv.conv.bias: reachable/zero: zero up to rounding: its gradient '
                   'is round-off, tiny next to the largest and collapsing by orders of magnitude when the same step '
                   'runs in',
 'timm_maxxvit': 'stays dry: stages.0.blocks.0.pre_norm.bias, stages.1.blocks.0.pre_norm.bias; first failing: '
                 'stages.0.blocks.0.pre_norm.bias: reachable/zero: zero up to rounding: its gradient is round-off, '
                 'tiny next to the largest and collapsing by orders of magnitude when the same step runs in float64, '
                 'so i',
 'timm_mobilenetv3': 'stays dry: blocks.0.0.bn2.bias, blocks.1.0.bn3.bias; first failing: blocks.0.0.bn2.bias: '
                     'reachable/zero: zero up to rounding: its gradient is round-off, tiny next to the largest and '
                     'collapsing by orders of magnitude when the same step runs in float64, so it is zero in',
 'timm_mobilevit': 'stays dry: stages.0.0.conv3_1x1.bn.bias, stages.1.0.conv3_1x1.bn.bias; first failing: '
                   'stages.0.0.conv3_1x1.bn.bias: reachable/zero: zero up to rounding: its gradient is round-off, '
                   'tiny next to the largest and collapsing by orders of magnitude when the same step runs in '
                   'float64, so it i',
 'timm_mvitv2': 'stays dry: stages.0.blocks.0.attn.norm_k.bias, stages.1.blocks.0.attn.norm_k.bias; first failing: '
                'stages.0.blocks.0.attn.norm_k.bias: reachable/zero: zero up to rounding: its gradient is round-off, '
                'tiny next to the largest and collapsing by orders of magnitude when the same step runs in float64, '
                's',
 'timm_nextvit': 'stays dry: stages.0.blocks.2.mlp.fc2.bias, stages.1.blocks.2.mlp.fc2.bias; first failing: '
                 'stages.0.blocks.2.mlp.fc2.bias: reachable/zero: zero up to rounding: its gradient is round-off, '
                 'tiny next to the largest and collapsing by orders of magnitude when the same step runs in float64, '
                 'so it',
 'timm_repghost': 'stays dry: blocks.1.0.bn_dw.bias, blocks.1.0.shortcut.1.bias; first failing: '
                  'blocks.1.0.bn_dw.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny next '
                  'to the largest and collapsing by orders of magnitude when the same step runs in float64, so it is '
                  'zero',
 'timm_repvit': 'stays dry: stages.1.downsample.spatial_downsample.bn.bias, '
                'stages.2.downsample.spatial_downsample.bn.bias; first failing: '
                'stages.1.downsample.spatial_downsample.bn.bias: reachable/zero: zero up to rounding: its gradient '
                'is round-off, tiny next to the largest and collapsing by orders of magnitude when the same step '
                'runs i',
 'timm_resnest': 'stays dry: layer1.0.conv2.fc1.bias, layer2.0.conv2.fc1.bias; first failing: '
                 'layer1.0.conv2.fc1.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny next '
                 'to the largest and collapsing by orders of magnitude when the same step runs in float64, so it is '
                 'zer',
 'timm_rexnet': 'stays dry: features.0.conv_pwl.bn.bias, features.1.conv_pwl.bn.bias; first failing: '
                'features.0.conv_pwl.bn.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny '
                'next to the largest and collapsing by orders of magnitude when the same step runs in float64, so it '
                'is',
 'timm_shvit': 'stays dry: stages.1.downsample.0.m.bn.bias, stages.1.downsample.1.m.pw2.bn.bias; first failing: '
               'stages.1.downsample.0.m.bn.bias: reachable/zero: zero up to rounding: its gradient is round-off, '
               'tiny next to the largest and collapsing by orders of magnitude when the same step runs in float64, '
               'so i',
 'timm_starnet': 'stays dry: stem.0.conv.bias, stages.0.0.conv.bias; first failing: stem.0.conv.bias: '
                 'reachable/zero: zero up to rounding: its gradient is round-off, tiny next to the largest and '
                 'collapsing by orders of magnitude when the same step runs in float64, so it is zero in ex',
 'timm_swiftformer': 'stays dry: stem.0.bias, stem.3.bias; first failing: stem.0.bias: reachable/zero: zero up to '
                     'rounding: its gradient is round-off, tiny next to the largest and collapsing by orders of '
                     'magnitude when the same step runs in float64, so it is zero in exact a',
 'timm_swin_transformer_v2_cr': 'stays dry: stages.0.blocks.0.attn.meta_mlp.fc2.bias, '
                                'stages.0.blocks.1.attn.meta_mlp.fc2.bias; first failing: '
                                'stages.0.blocks.0.attn.meta_mlp.fc2.bias: reachable/zero: zero up to rounding: its '
                                'gradient is round-off, tiny next to the largest and collapsing by orders of '
                                'magnitude when the same step runs in floa',
 'timm_tiny_vit': 'stays dry: stages.1.blocks.1.mlp.fc2.bias, stages.2.blocks.5.mlp.fc2.bias; first failing: '
                  'stages.1.blocks.1.mlp.fc2.bias: reachable/zero: zero up to rounding: its gradient is round-off, '
                  'tiny next to the largest and collapsing by orders of magnitude when the same step runs in '
                  'float64, so it',
 'timm_visformer': 'stays dry: patch_embed1.proj.bias, patch_embed1.norm.bias; first failing: '
                   'patch_embed1.proj.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny '
                   'next to the largest and collapsing by orders of magnitude when the same step runs in float64, so '
                   'it is zero',
 'timm_vision_transformer_relpos': 'stays dry: blocks.0.attn.rel_pos.mlp.fc2.bias, '
                                   'blocks.1.attn.rel_pos.mlp.fc2.bias; first failing: '
                                   'blocks.0.attn.rel_pos.mlp.fc2.bias: reachable/zero: zero up to rounding: its '
                                   'gradient is round-off, tiny next to the largest and collapsing by orders of '
                                   'magnitude when the same step runs in float64, s',
 'timm_xcit': 'stays dry: cls_attn_blocks.0.attn.k.bias, cls_attn_blocks.1.attn.k.bias; first failing: '
              'cls_attn_blocks.0.attn.k.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny '
              'next to the largest and collapsing by orders of magnitude when the same step runs in float64, so it',
 'tv_deeplabv3_mobilenet_v3_large': 'stays dry: backbone.1.block.1.1.bias, backbone.2.block.2.1.bias; first failing: '
                                    'backbone.1.block.1.1.bias: reachable/zero: zero up to rounding: its gradient is '
                                    'round-off, tiny next to the largest and collapsing by orders of magnitude when '
                                    'the same step runs in float64, so it is z',
 'tv_efficientnet_b0': 'stays dry: features.1.0.block.2.1.bias, features.2.0.block.3.1.bias; first failing: '
                       'features.1.0.block.2.1.bias: reachable/zero: zero up to rounding: its gradient is round-off, '
                       'tiny next to the largest and collapsing by orders of magnitude when the same step runs in '
                       'float64, so it is',
 'tv_efficientnet_v2_s': 'stays dry: features.4.0.block.3.1.bias, features.5.0.block.3.1.bias; first failing: '
                         'features.4.0.block.3.1.bias: reachable/zero: zero up to rounding: its gradient is '
                         'round-off, tiny next to the largest and collapsing by orders of magnitude when the same '
                         'step runs in float64, so it is',
 'tv_lraspp_mobilenet_v3_large': 'stays dry: backbone.1.block.1.1.bias, backbone.2.block.2.1.bias; first failing: '
                                 'backbone.1.block.1.1.bias: reachable/zero: zero up to rounding: its gradient is '
                                 'round-off, tiny next to the largest and collapsing by orders of magnitude when the '
                                 'same step runs in float64, so it is z',
 'tv_maskrcnn_resnet50_fpn': 'stays dry: backbone.fpn.layer_blocks.3.0.weight, backbone.fpn.layer_blocks.3.0.bias '
                             '(2); first failing: backbone.fpn.layer_blocks.3.0.weight: reachable/zero: exactly 0 '
                             'after `indexput` at torchvision/models/detection/roi_heads.py:816',
 'tv_maxvit_t': 'stays dry: blocks.0.layers.0.layers.MBconv.layers.pre_norm.bias, '
                'blocks.0.layers.1.layers.MBconv.layers.pre_norm.bias; first failing: '
                'blocks.0.layers.0.layers.MBconv.layers.pre_norm.bias: reachable/zero: zero up to rounding: its '
                'gradient is round-off, tiny next to the largest and collapsing by orders of magnitude when the same '
                'step',
 'tv_mnasnet0_5': 'stays dry: layers.7.bias, layers.8.0.layers.7.bias; first failing: layers.7.bias: reachable/zero: '
                  'zero up to rounding: its gradient is round-off, tiny next to the largest and collapsing by orders '
                  'of magnitude when the same step runs in float64, so it is zero in exact',
 'tv_mobilenet_v2': 'stays dry: features.1.conv.2.bias, features.2.conv.3.bias; first failing: '
                    'features.1.conv.2.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny '
                    'next to the largest and collapsing by orders of magnitude when the same step runs in float64, '
                    'so it is zero',
 'tv_mobilenet_v3_small': 'stays dry: features.1.block.2.1.bias, features.2.block.2.1.bias; first failing: '
                          'features.1.block.2.1.bias: reachable/zero: zero up to rounding: its gradient is '
                          'round-off, tiny next to the largest and collapsing by orders of magnitude when the same '
                          'step runs in float64, so it is z',
 'tv_shufflenet_v2_x0_5': 'stays dry: stage2.0.branch1.1.bias, stage2.0.branch2.4.bias; first failing: '
                          'stage2.0.branch1.1.bias: reachable/zero: zero up to rounding: its gradient is round-off, '
                          'tiny next to the largest and collapsing by orders of magnitude when the same step runs in '
                          'float64, so it is zer',
 'tv_ssdlite320_mobilenet_v3_large': 'stays dry: backbone.extra.1.0.0.weight, backbone.extra.1.0.1.weight (57); '
                                     'first failing: backbone.extra.1.0.0.weight: reachable/zero: exactly 0 after '
                                     '`logsoftmax` at torchvision/models/detection/ssd.py:306',
 'tv_vgg11_bn': 'stays dry: features.0.bias, features.4.bias; first failing: features.0.bias: reachable/zero: zero '
                'up to rounding: its gradient is round-off, tiny next to the largest and collapsing by orders of '
                'magnitude when the same step runs in float64, so it is zero in exa',
 # the libraries of issue 40 (scripts/zoo.py --libraries --only ...)
 'gp_deep_kernel': 'stays dry: mll.model.features.2.bias; first failing: mll.model.features.2.bias: '
                   'reachable/zero: zero up to rounding: its gradient is round-off, tiny next to the largest and '
                   'collapsing by orders of magnitude when the same step runs in float64, so it is z',
 'kornia_augmented_cnn': 'stays dry: 3.bias; first failing: 3.bias: reachable/zero: zero up to rounding: its '
                         'gradient is round-off, tiny next to the largest and collapsing by orders of magnitude '
                         'when the same step runs in float64, so it is zero in exact arithm',
 'monai_basic_unet': 'stays dry: conv_0.conv_0.conv.bias, conv_0.conv_1.conv.bias; first failing: '
                     'conv_0.conv_0.conv.bias: reachable/zero: zero up to rounding: its gradient is round-off, '
                     'tiny next to the largest and collapsing by orders of magnitude when the same step runs in '
                     'float64, so it is zer',
 'monai_unet': 'stays dry: model.0.conv.unit0.conv.bias, model.1.submodule.0.conv.unit0.conv.bias; first failing: '
               'model.0.conv.unit0.conv.bias: reachable/zero: zero up to rounding: its gradient is round-off, tiny '
               'next to the largest and collapsing by orders of magnitude when the same step runs in float64, so '
               'it i',
 'monai_unetr': 'stays dry: vit.blocks.0.norm_cross_attn.weight, vit.blocks.0.norm_cross_attn.bias; first failing: '
                'vit.blocks.0.norm_cross_attn.weight: unused/missing: its module vit.blocks.0.norm_cross_attn is '
                'never called in forward',
 'nf_patchtst': 'stays dry: model.model.backbone.encoder.layers.0.self_attn.W_K.bias, '
                'model.model.backbone.encoder.layers.1.self_attn.W_K.bias; first failing: '
                'model.model.backbone.encoder.layers.0.self_attn.W_K.bias: reachable/zero: zero up to rounding: '
                'its gradient is round-off, tiny next to the largest and collapsing by orders of magnitude when '
                'the same s',
 'openclip_resnet': 'stays dry: model.visual.attnpool.k_proj.bias; first failing: '
                    'model.visual.attnpool.k_proj.bias: reachable/zero: zero up to rounding: its gradient is '
                    'round-off, tiny next to the largest and collapsing by orders of magnitude when the same step '
                    'runs in float64, so',
 'smp_linknet': 'stays dry: decoder.blocks.0.block.1.0.bias, decoder.blocks.1.block.1.0.bias; first failing: '
                'decoder.blocks.0.block.1.0.bias: reachable/zero: zero up to rounding: its gradient is round-off, '
                'tiny next to the largest and collapsing by orders of magnitude when the same step runs in '
                'float64, so i',
 'yolo_11_detect': 'stays dry: model.10.m.0.attn.proj.bn.bias, model.10.m.0.attn.pe.bn.bias; first failing: '
                   'model.10.m.0.attn.proj.bn.bias: reachable/zero: zero up to rounding: its gradient is '
                   'round-off, tiny next to the largest and collapsing by orders of magnitude when the same step '
                   'runs in float64, so it'}


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
