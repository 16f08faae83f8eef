"""What explaining exact zeros costs on deep models whose every gradient is exactly zero (issue 38, item 3).

    python scripts/bench_diagnose.py                   # 400, 800 and 1,600 layers
    python scripts/bench_diagnose.py --layers 100,200  # other depths
    python scripts/bench_diagnose.py --width 16 --batch 4  # tiny layers: the backward costs next to nothing

The model is a chain of ``Linear(width, width)`` + ``tanh`` layers (width 256, batch 64 by default) whose output is multiplied by 0.0: every
parameter's gradient is exactly 0, and every one of them is explained at that one multiply, as far from
the first layers as the model is deep (the worst case for a search per parameter). One torch thread.
Per depth, alternated REPEATS times (medians): the plain backward of the model's loss, and fxflow's
diagnose stage on the check's own traced run (:func:`fxflow.diagnose.diagnose`, which localizes every
zero parameter). To compare with older code, run the same script with ``PYTHONPATH`` pointing at it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from fxflow.diagnose import diagnose
from fxflow.dynamic.gradients import dynamic_verdicts
from fxflow.dynamic.probe import run_model

REPEATS = 3


class ZeroedChain(torch.nn.Module):
    """``layers`` Linear+tanh layers; the output times 0.0, so every gradient is exactly zero."""

    def __init__(self, layers: int, width: int = 16) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x * 0.0


def measure(layers: int, width: int, batch: int) -> dict[str, float]:
    """Medians of the plain backward and of the diagnose stage at one depth."""
    torch.manual_seed(0)
    model, x = ZeroedChain(layers, width), torch.randn(batch, width)
    backwards, diagnoses = [], []
    for _ in range(REPEATS):  # alternated, so a neighbour's load falls on both alike
        loss = model(x).sum()
        started = time.perf_counter()
        loss.backward()
        backwards.append(time.perf_counter() - started)
        model.zero_grad(set_to_none=True)

        run = run_model(model, (x,), trace=True)
        verdicts = dynamic_verdicts(run.result, 1e-7)
        started = time.perf_counter()
        diagnose(run, run.result, verdicts)
        diagnoses.append(time.perf_counter() - started)
        explained = len(run.result.explanations)
        model.zero_grad(set_to_none=True)
    assert explained == 2 * layers, f"{explained} of {2 * layers} parameters explained"
    return {"backward": statistics.median(backwards), "diagnose": statistics.median(diagnoses)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", default="400,800,1600")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    options = parser.parse_args()
    torch.set_num_threads(1)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))  # older code walked recursively elsewhere
    print(f"Linear({options.width}, {options.width}) + tanh layers, batch {options.batch}, one torch thread")
    print("| layers | plain backward s | diagnose s | diagnose / backward |\n|---:|---:|---:|---:|")
    for layers in (int(n) for n in options.layers.split(",")):
        found = measure(layers, options.width, options.batch)
        print(f"| {layers} | {found['backward']:.3f} | {found['diagnose']:.3f} | "
              f"{found['diagnose'] / found['backward']:.2f}x |", flush=True)
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
