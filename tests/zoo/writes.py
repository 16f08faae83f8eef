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
    'hubert', 'wavlm', 'data2vec_audio', 'unispeech', 'sew', 'blip', 'groupvit', 'vilt',
})


def _find() -> list[str]:
    import os
    import sys
    import warnings

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    warnings.filterwarnings("ignore")
    from fxflow.core.state import untouched
    from recorded_flows import recorded_run
    from zoo.run import SPECIMENS

    found = []
    for name, specimen in SPECIMENS.items():
        model, inputs = specimen.make()
        with untouched(model):
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
