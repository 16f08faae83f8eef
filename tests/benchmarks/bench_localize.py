"""What localizing zero and vanishing gradients costs (fxflow.diagnose.localize), per model.

    python tests/benchmarks/bench_localize.py                 # seed, gpt2, bert, synthetic-20k
    python tests/benchmarks/bench_localize.py --models gpt2

For each model: the real forward+backward alone (ModelRun with its trace switched off), the same run
traced as ``fxflow.check`` runs it (origins recorded in forward, hooks on every autograd node in
backward), the trace read to localize every parameter as if its gradient were vanishing (the worst
case), and how many parameters a default check flags. Not collected by pytest.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]

import torch  # noqa: E402

from fxflow.diagnose.localize import localize  # noqa: E402
from fxflow.dynamic.probe import ModelRun  # noqa: E402
from fxflow.dynamic.gradients import dynamic_verdicts  # noqa: E402
from fxflow.core.guard import guard  # noqa: E402
from models import MODELS  # noqa: E402


def best_of(repeats: int, action) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(name: str, repeats: int) -> dict[str, float]:
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    named = dict(model.named_parameters())

    def plain() -> None:
        with guard(model, fresh_grads=True):
            ModelRun(model).run(inputs)  # the probe alone: localizing is a stage of its own (fxflow.diagnose)

    def traced() -> None:
        with guard(model, fresh_grads=True):
            ModelRun(model, trace=True).run(inputs)

    with guard(model, fresh_grads=True):
        run = ModelRun(model, trace=True)
        result = run.run(inputs)
    norms = {name: info.norm or 0.0 for name, info in result.grads.items()}
    started = time.perf_counter()
    localize(model, run.trace, norms, {}, named)
    reading = time.perf_counter() - started
    flagged = sum(v in ("zero", "vanishing") for v in dynamic_verdicts(result, 1e-3).values())
    return {"probe": best_of(repeats, plain), "traced": best_of(repeats, traced), "reading": reading,
            "parameters": len(named), "flagged": flagged}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="seed,gpt2,bert,synthetic-20k")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| model | parameters | zero/vanishing by default | forward+backward | traced | ratio "
          "| reading the trace for every parameter |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in args.models.split(","):
        row = measure(name, args.repeats)
        print(f"| {name} | {row['parameters']} | {row['flagged']} | {row['probe']:.3f} s | {row['traced']:.3f} s "
              f"| {row['traced'] / row['probe']:.2f}x | {row['reading']:.3f} s |")


if __name__ == "__main__":
    main()
