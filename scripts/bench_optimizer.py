"""What ``optimizer=`` adds (issue 32): to ``fxflow.watch(steps=N)``, and to a scheduler's look-ahead.

    python scripts/bench_optimizer.py        # prints the tables

One torch thread. The same model, data and SGD optimizer run N steps under ``watch(steps=N)`` and
under ``watch(steps=N, optimizer=...)`` (the step hooks, which copy each trainable parameter before
a step and compare it after, until it is seen to move); medians of three after a warm-up. Then the
look-ahead of a LambdaLR that keeps one group at lr 0 for all of ``LOOKAHEAD_STEPS`` steps.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any, Callable

import torch

import fxflow
from fxflow.dynamic.optimizer import LOOKAHEAD_STEPS, lr_lookahead

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_watch import STEPS, gpt2  # noqa: E402


def watched(model: torch.nn.Module, batch: Callable[[int], dict[str, Any]], with_optimizer: bool) -> float:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    started = time.perf_counter()
    with fxflow.watch(model, steps=STEPS, optimizer=optimizer if with_optimizer else None):
        for step in range(STEPS):
            optimizer.zero_grad(set_to_none=True)
            model(**batch(step)).loss.backward()
            optimizer.step()
    return time.perf_counter() - started


def main() -> int:
    torch.set_num_threads(1)
    print(f"| model | watch(steps={STEPS}) s | + optimizer= s | ratio |")
    print("|---|---:|---:|---:|")
    for name, (layers, width, sequence) in {"GPT-2 2x64, 4x32 tokens": (2, 64, 32),
                                            "GPT-2 4x256, 4x128 tokens": (4, 256, 128)}.items():
        torch.manual_seed(0)
        model, batch = gpt2(layers, width, sequence)
        watched(model, batch, False), watched(model, batch, True)  # warm-up
        plain = statistics.median(watched(model, batch, False) for _ in range(3))
        checked = statistics.median(watched(model, batch, True) for _ in range(3))
        print(f"| {name} | {plain:.3f} | {checked:.3f} | {checked / plain:.2f}x |")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    optimizer = torch.optim.AdamW([{"params": model[0].parameters()}, {"params": model[1].parameters()}])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, [lambda step: 1.0, lambda step: 0.0])
    started = time.perf_counter()
    lr_lookahead([optimizer], [scheduler])
    print(f"\nlook-ahead of a LambdaLR stuck at 0 ({LOOKAHEAD_STEPS} steps, 2 groups): "
          f"{time.perf_counter() - started:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
