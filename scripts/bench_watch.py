"""What ``fxflow.watch(steps=N)`` costs over the plain N training steps (issue 20: at most 1.2x).

    python scripts/bench_watch.py            # prints the table

One torch thread. The same model, data and optimizer run N steps plainly and under
``watch(steps=N)`` (its per-step hooks, the per-layer statistics and the one static analysis at
the end included); each is the median of a few repetitions after a warm-up.
"""
from __future__ import annotations

import statistics
import sys
import time
from typing import Any, Callable

import torchvision_env  # noqa: E402,F401  (before transformers, timm, peft)

import torch

import fxflow

STEPS = 20


def gpt2(layers: int, width: int, sequence: int) -> tuple[torch.nn.Module, Callable[[int], dict[str, Any]]]:
    import transformers

    config = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=max(width // 64, 1), n_positions=sequence,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)

    def batch(step: int) -> dict[str, Any]:
        ids = torch.randint(0, 1000, (4, sequence), generator=torch.Generator().manual_seed(step))
        return {"input_ids": ids, "labels": ids}

    return model, batch


def train(model: torch.nn.Module, batch: Callable[[int], dict[str, Any]], watched: bool) -> float:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    started = time.perf_counter()

    def loop() -> None:
        for step in range(STEPS):
            optimizer.zero_grad(set_to_none=True)
            model(**batch(step)).loss.backward()
            optimizer.step()

    if watched:
        with fxflow.watch(model, steps=STEPS):
            loop()
    else:
        loop()
    return time.perf_counter() - started


def main() -> int:
    torch.set_num_threads(1)
    print(f"| model | plain {STEPS} steps s | watch(steps={STEPS}) s | ratio |")
    print("|---|---:|---:|---:|")
    for name, (layers, width, sequence) in {"GPT-2 2x64, 4x32 tokens": (2, 64, 32),
                                            "GPT-2 4x256, 4x128 tokens": (4, 256, 128)}.items():
        torch.manual_seed(0)
        model, batch = gpt2(layers, width, sequence)
        train(model, batch, False), train(model, batch, True)  # warm-up
        plain = statistics.median(train(model, batch, False) for _ in range(3))
        watched = statistics.median(train(model, batch, True) for _ in range(3))
        print(f"| {name} | {plain:.3f} | {watched:.3f} | {watched / plain:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
