"""What the look-ahead past exact zeros costs: ``fxflow.check`` on a LoRA'd GPT-2 small.

    python scripts/bench_lookahead.py            # GPT-2 small (12 layers, width 768), sequence 128
    python scripts/bench_lookahead.py --tiny     # 2 layers, width 64: a quick run

peft's LoRA (r=8 on ``c_attn``, B zero at init) gives every ``lora_A`` an exactly zero first
gradient, so the check takes one look-ahead step. One torch thread; after a warm-up, the median of
REPEATS runs each of: a plain training step (forward + backward of the model's own loss), the check,
and the check's ``look-ahead`` phase alone (``Report.timings``). The same check on the model before
LoRA is wrapped in (no exact zero, no look-ahead) is the reference.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torchvision_env  # noqa: E402,F401  (before transformers, timm, peft)

REPEATS = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true")
    options = parser.parse_args()
    import torch
    import warnings

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    import peft
    from transformers import GPT2Config, GPT2LMHeadModel

    import fxflow

    layers, width, sequence = (2, 64, 32) if options.tiny else (12, 768, 128)
    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=max(width // 64, 1), n_positions=max(sequence, 16),
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    base = GPT2LMHeadModel(config)
    ids = torch.randint(0, 1000, (1, sequence))
    inputs = {"input_ids": ids, "labels": ids}
    plain = median(lambda: base(**inputs).loss.backward(), zero=base)
    unwrapped = median(lambda: fxflow.check(base, inputs))
    model = peft.get_peft_model(base, peft.LoraConfig(r=8, target_modules=["c_attn"], lora_dropout=0.0))
    lora_plain = median(lambda: model(**inputs).loss.backward(), zero=model)
    phases: list[float] = []

    def checked() -> None:
        report = fxflow.check(model, inputs)
        assert report.ok and any(p.dynamic == "held" for p in report.parameters), report.summary()
        phases.append(report.timings.get("look-ahead", 0.0))

    lora_check = median(checked)
    look = statistics.median(phases[-REPEATS:])
    load = os.getloadavg()[0]
    print(f"GPT-2 {layers}x{width}, sequence {sequence}, one torch thread, load {load:.1f}")
    print("| run | median s |\n|---|---|")
    print(f"| plain step (base model) | {plain:.3f} |")
    print(f"| fxflow.check (base model: no exact zero) | {unwrapped:.3f} |")
    print(f"| plain step (LoRA) | {lora_plain:.3f} |")
    print(f"| fxflow.check (LoRA) | {lora_check:.3f} |")
    print(f"| its look-ahead phase | {look:.3f} |")
    print(f"look-ahead: {look / lora_plain:.2f} plain LoRA steps; check / plain step (LoRA): {lora_check / lora_plain:.2f}x")


def median(run, zero=None) -> float:
    times = []
    for index in range(REPEATS + 1):  # the first is a warm-up
        if zero is not None:
            zero.zero_grad(set_to_none=True)
        started = time.perf_counter()
        run()
        if index:
            times.append(time.perf_counter() - started)
    if zero is not None:
        zero.zero_grad(set_to_none=True)
    return statistics.median(times)


if __name__ == "__main__":
    sys.exit(main())
