"""What localizing zero and vanishing gradients costs (fxflow.diagnose.localize), per model.

    python tests/benchmarks/bench_localize.py                 # seed, gpt2, bert, synthetic-20k
    python tests/benchmarks/bench_localize.py --models gpt2

For each model: the real forward+backward alone (ModelRun with localizing switched off),
the same with the replay that localizes every parameter as if its gradient were vanishing (the
worst case: hooks on every autograd node between the loss and every parameter), and how many
parameters a default check would actually replay for. Not collected by pytest.
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
from fxflow.dynamic.loss import projection_loss  # noqa: E402
from fxflow.dynamic.probe import ModelRun  # noqa: E402
from fxflow.dynamic.gradients import dynamic_verdicts  # noqa: E402
from fxflow.core.state import untouched  # noqa: E402
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
        with untouched(model):
            ModelRun(model).run(inputs)  # the probe alone: localizing is a stage of its own (fxflow.diagnose)

    def replay_all() -> None:
        with untouched(model):
            localize(model, lambda: model(*inputs), projection_loss, {}, named)

    with untouched(model):
        result = ModelRun(model).run(inputs)
    flagged = sum(v in ("zero", "vanishing") for v in dynamic_verdicts(result, 1e-3).values())
    return {"probe": best_of(repeats, plain), "replay": best_of(repeats, replay_all),
            "parameters": len(named), "flagged": flagged}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="seed,gpt2,bert,synthetic-20k")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| model | parameters | zero/vanishing by default | forward+backward | worst-case replay | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.models.split(","):
        row = measure(name, args.repeats)
        print(f"| {name} | {row['parameters']} | {row['flagged']} | {row['probe']:.3f} s | {row['replay']:.3f} s "
              f"| {row['replay'] / row['probe']:.1f}x |")


if __name__ == "__main__":
    main()
