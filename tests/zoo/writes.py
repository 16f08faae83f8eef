"""Zoo models whose forward changes a tensor after making it (an in-place op, ``detach_``, a
``requires_grad`` flip, a slice assignment): their recorded run cannot be read back, so the check
annotates them on twins (fxflow.dynamic.recording.Recording.values). Pinned, so that
tests/zoo_matrix.py fails when a model joins or leaves the list. Regenerate with

    python tests/zoo/writes.py
"""
from __future__ import annotations

WRITES_IN_FORWARD: frozenset[str] = frozenset({
    'falcon', 'mixtral', 'qwen2_moe', 'olmoe', 'granitemoe', 'qwen3_moe', 'phimoe', 'switch_transformers',
    'rwkv', 'mpnet', 'convbert', 'nystromformer', 'big_bird', 'longformer', 'canine', 'funnel', 'fnet', 't5',
    'mt5', 'longt5', 'led', 'd_fine', 'deimv2', 'dinov3_vit', 'maskformer', 'pixtral', 'pp_doclayout_v3',
    'pp_doclayout_v4', 'rt_detr', 'nemotron3_5_asr', 'aria', 'cosmos3_edge', 'cosmos3_omni', 'flava', 'git',
    'inkling2', 'kimi_k25', 'kosmos_2.5', 'minicpm_ocr', 'minicpmv4_6', 'minicpmv4_7', 'muse_glimmer',
    'muse_spark', 'paligemma', 'unlimited_ocr', 'chinese_clip', 'autoformer', 'informer', 'unispeech_sat',
    'wav2vec2_conformer', 'sew_d', 'swin2sr', 'nemotron3_5_transcribe_audio', 'step3p7', 'siglip2', 'vjepa2',
    'dac', 'speecht5', 'grounding_dino', 'mm_grounding_dino', 'kosmos_2', 'cpmant', 'minicpm3', 'youtu',
    'afmoe', 'axk2', 'deepseek_v3', 'deepseek_v32', 'deepseek_v4', 'flex_olmo', 'gpt_oss', 'granitemoeshared',
    'hy_v3', 'hy_v4', 'inkling_text', 'kolibri1', 'laguna', 'lara_mini', 'mellum', 'sarvam_mla', 'sarvam_moe',
    'solar_open', 'zaya', 'jamba', 'minimax', 'recurrent_gemma', 'ctrl', 'flaubert', 'higgs_audio_v2',
    'megatron_bert', 'mra', 'openai_privacy_filter', 'rembert', 'roc_bert', 'splinter', 'tapas',
    'visual_bert', 'vits', 'xlm', 'yoso', 'fsmt', 't5gemma2', 'umt5', 'deepseek_v2', 'dbrx', 'chameleon',
    'qwen4_exp', 'xmod', 'mistral4', 'hunyuan_v1_moe', 'axk1', 'dots1', 'kimi_linear', 'xlstm',
    'longcat_flash', 'mimo_v2_flash', 'bros', 'lilt', 'granitemoehybrid', 'layoutlmv3', 'udop', 'timesfm',
    'musicgen', 'swinv2', 'resnet', 'regnet', 'mobilenet_v1', 'mobilenet_v2', 'mobilevit', 'wav2vec2',
    'hubert', 'wavlm', 'data2vec_audio', 'unispeech', 'sew', 'blip', 'groupvit', 'vilt', 'timm_byoanet',
    'timm_byobnet', 'timm_convit', 'timm_csatv2', 'timm_cspnet', 'timm_cspnext', 'timm_densenet', 'timm_dla',
    'timm_dpn', 'timm_efficientnet', 'timm_efficientvim', 'timm_efficientvit_mit', 'timm_efficientvit_msra',
    'timm_fastvit', 'timm_focalnet', 'timm_ghostnet', 'timm_hardcorenas', 'timm_hrnet', 'timm_inception_v3',
    'timm_lcnetv2', 'timm_maxxvit', 'timm_mobilenetv3', 'timm_mobilevit', 'timm_mvitv2', 'timm_naflexvit',
    'timm_nest', 'timm_nextvit', 'timm_nfnet', 'timm_regnet', 'timm_repghost', 'timm_repvit', 'timm_res2net',
    'timm_resnest', 'timm_resnet', 'timm_resnetv2', 'timm_rexnet', 'timm_selecsls', 'timm_senet',
    'timm_shvit', 'timm_sknet', 'timm_swin_transformer', 'timm_swin_transformer_v2', 'timm_tiny_vit',
    'timm_tresnet', 'timm_twins', 'timm_visformer', 'timm_vision_transformer_hybrid', 'timm_volo',
    'timm_vovnet', 'timm_xception', 'timm_xception_aligned', 'tv_alexnet', 'tv_convnext_tiny',
    'tv_densenet121', 'tv_efficientnet_b0', 'tv_efficientnet_v2_s', 'tv_googlenet', 'tv_inception_v3',
    'tv_maxvit_t', 'tv_mnasnet0_5', 'tv_mobilenet_v2', 'tv_mobilenet_v3_small', 'tv_regnet_x_400mf',
    'tv_regnet_y_400mf', 'tv_resnet18', 'tv_resnext50_32x4d', 'tv_shufflenet_v2_x0_5', 'tv_squeezenet1_1',
    'tv_swin_t', 'tv_swin_v2_t', 'tv_vgg11_bn', 'tv_wide_resnet50_2', 'tv_deeplabv3_mobilenet_v3_large',
    'tv_fcn_resnet50', 'tv_lraspp_mobilenet_v3_large', 'tv_r3d_18', 'tv_mc3_18', 'tv_r2plus1d_18',
    'tv_swin3d_t', 'tv_raft_small', 'diffusers_autoencoder_tiny', 'peft_multitask_prompt_tuning',
    'peft_adalora', 'peft_oft', 'peft_poly', 'peft_frod', 'peft_fourierft', 'peft_cpt', 'peft_shira',
    'peft_c3a', 'peft_waveft', 'peft_delora', 'peft_gralora', 'pyg_gcn_conv', 'pyg_sage_conv', 'pyg_gat_conv',
    'pyg_gatv2_conv', 'pyg_gin_conv', 'pyg_gine_conv', 'pyg_graph_conv', 'pyg_cheb_conv',
    'pyg_transformer_conv', 'pyg_edge_conv', 'pyg_nn_conv', 'pyg_gated_graph_conv', 'pyg_tag_conv',
    'pyg_sg_conv', 'pyg_arma_conv', 'pyg_gen_conv', 'pyg_general_conv', 'pyg_res_gated_graph_conv', 'pyg_gcn',
    'pyg_graphsage', 'pyg_gin', 'pyg_gat', 'pyg_edgecnn', 'pyg_pna', 'pyg_graph_classifier',
    'peft_lokr', 'peft_peanut',
    'monai_basic_unet', 'monai_segresnet', 'monai_unetr', 'monai_swin_unetr', 'smp_unet', 'smp_fpn',
    'smp_deeplabv3plus', 'smp_linknet', 'openclip_resnet', 'openclip_siglip', 'openclip_coca',
    'e3nn_gated_block', 'e3nn_point_convolution', 'vq_vector_quantize', 'vq_residual_vq', 'ode_rk4',
    'ode_dopri5', 'ode_latent', 'kornia_augmented_cnn', 'gp_exact', 'gp_variational', 'gp_deep_kernel',
})


def _find() -> list[str]:
    import os
    import sys
    import warnings

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    warnings.filterwarnings("ignore")
    from zoo.vision_ops import define_nms_if_missing

    define_nms_if_missing()  # before transformers, timm or torchvision import torchvision (tests/conftest.py)
    from fxflow.core.guard import guard
    from recorded_flows import recorded_run
    from zoo.run import SPECIMENS

    found = []
    for name, specimen in SPECIMENS.items():
        model, inputs = specimen.make()
        with guard(model, fresh_grads=True):
            try:
                recorded, _, _ = recorded_run(model, inputs)
            except Exception:  # noqa: BLE001 - no recording at all: nothing to pin
                continue
        if recorded is not None and recorded.graph_module is not None and recorded.values is None:
            found.append(name)
    return found


if __name__ == "__main__":
    import pathlib
    import textwrap

    names = _find()
    path = pathlib.Path(__file__)
    body = textwrap.fill(", ".join(repr(n) for n in names), 110, initial_indent="    ", subsequent_indent="    ")
    text = path.read_text().split("WRITES_IN_FORWARD")[0]
    path.write_text(text + "WRITES_IN_FORWARD: frozenset[str] = frozenset({\n" + body + ",\n})\n"
                    + "\n\ndef _find" + path.read_text().split("\n\ndef _find", 1)[1])
    print(f"{len(names)} models pinned in {path}")
