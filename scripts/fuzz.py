"""Check fxflow against autograd on many random models: ``python scripts/fuzz.py --count 10000``.

Each model is generated from its seed by tests/fuzz/generator.py into a temporary folder,
checked with fxflow, and compared with a real backward (tests/fuzz/oracle.py). Prints counts
and every disagreement with the seed that reproduces it; exit code 1 if any was found.
``--method torch.export`` (repeatable) checks each model once per capture method instead of
with the whole chain; models a method cannot capture are counted, not reported.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
warnings.filterwarnings("ignore")

from fxflow.capture import METHODS  # noqa: E402
from tests.fuzz.oracle import check_seed  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="how many models (default 1000)")
    parser.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--keep", metavar="DIR", help="write the models here instead of a temporary folder")
    parser.add_argument("--method", action="append", choices=METHODS,
                        help="capture with only this method (repeat for several); default: the whole chain")
    args = parser.parse_args(argv)
    methods: list[str | None] = args.method or [None]

    started = time.time()
    static: Counter = Counter()
    planted: Counter = Counter()
    idioms: Counter = Counter()
    uncaptured: Counter = Counter()
    failing: list[tuple[int, list[str]]] = []
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.keep or scratch
        os.makedirs(directory, exist_ok=True)
        for seed in range(args.start, args.start + args.count):
            for method in methods:
                outcome = check_seed(seed, directory, method)
                static += outcome.static
                planted += outcome.planted
                idioms += outcome.idioms
                uncaptured[method or "chain"] += not outcome.captured
                if outcome.problems:
                    failing.append((seed, [f"[{method or 'chain'}] {p}" for p in outcome.problems]))
                    print(f"seed {seed} ({method or 'chain'}): {len(outcome.problems)} disagreement(s)",
                          *outcome.problems[:5], sep="\n  ", flush=True)
            if (seed - args.start + 1) % 500 == 0:
                print(f"... {seed - args.start + 1} models, {len(failing)} failing", flush=True)
    print(f"models: {args.count}, parameters: {sum(static.values())}, failing models: {len(failing)}, "
          f"{time.time() - started:.0f} s")
    print("static verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(static.items())))
    print("planted sites: " + ", ".join(f"{k} {v}" for k, v in sorted(planted.items())))
    print("view writes and multi-output calls: " + ", ".join(f"{k} {v}" for k, v in sorted(idioms.items())))
    print("models a method could not capture: " + ", ".join(f"{k} {v}" for k, v in sorted(uncaptured.items())))
    if failing:
        print("reproduce one: python -c 'from tests.fuzz.generator import generate; print(generate(SEED).source)'")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
