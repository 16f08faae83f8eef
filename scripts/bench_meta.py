"""``fxflow check --device meta`` on the LLaMA-7B config against its meta floor (issue 38, item 4).

    OMP_NUM_THREADS=1 python scripts/bench_meta.py            # 3 alternated runs of each, medians
    OMP_NUM_THREADS=1 python scripts/bench_meta.py --runs 5 --layers 2   # a smaller config

The model: transformers' ``LlamaForCausalLM(LlamaConfig(use_cache=False))`` (32 layers, width 4096),
in a model file whose ``build()`` returns it and whose ``example_inputs()`` gives ``input_ids`` of
shape (1, 16). The floor, as the issue states it: one process that builds the model and its example
inputs inside ``FakeTensorMode(allow_non_fake_inputs=True)`` and runs forward and backward there
(the loss a random projection of the logits, as the check's), with no capture at all. The check:
``python -m fxflow check model.py:build --device meta --json`` in its own process. Each process is
timed whole (interpreter start, imports, building the model included), and its peak RSS read from
the kernel's account of the child (``os.wait4``); floor and check alternate, so a neighbour's
load falls on both alike. The check's report must say the run was recorded (capture ``runtime``):
otherwise the numbers are not those of this path, and the script says so and exits 1.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODEL_FILE = '''
import sys
sys.path.insert(0, {scripts!r})
import torchvision_env  # noqa: F401  (before transformers)
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def build():
    config = LlamaConfig(use_cache=False) if {layers} == 32 else LlamaConfig(use_cache=False, num_hidden_layers={layers})
    return LlamaForCausalLM(config)


def example_inputs():
    return {{"input_ids": torch.randint(0, 32000, (1, 16))}}
'''

FLOOR = '''
import sys
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
sys.path.insert(0, {folder!r})
from model import build, example_inputs
torch.manual_seed(0)
with FakeTensorMode(allow_non_fake_inputs=True):
    model = build()
    inputs = example_inputs()
    logits = model(**inputs).logits
    (logits * torch.randn_like(logits)).sum().backward()  # a random projection, as the check's loss
'''


def measured(command: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """Wall seconds of the whole process, its CPU seconds (user + system), its peak RSS in MiB, and its stdout."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True, cwd=ROOT)
    out, err = child.communicate()
    seconds = time.perf_counter() - started
    # communicate() reaped it: the kernel's account of the waited-for children is this child's alone, as each
    # run is measured from a fresh helper process (``--one``) whose only child it is
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if child.returncode not in (0, 1):  # 1: the check found a problem, still a complete run
        raise SystemExit(f"{' '.join(command[:4])} ... exited {child.returncode}:\n{err[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def one(kind: str, folder: str) -> dict[str, float | str]:
    """One run of ``kind`` (floor or check), measured from this (fresh) process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    if kind == "floor":
        command = [sys.executable, "-c", FLOOR.format(folder=folder)]
    else:
        command = [sys.executable, "-m", "fxflow", "check", os.path.join(folder, "model.py:build"), "--device", "meta",
                   "--json"]
    seconds, cpu, peak, out = measured(command, env)
    found: dict[str, float | str] = {"seconds": seconds, "cpu": cpu, "MiB": peak}
    if kind == "check":
        report = json.loads(out)
        found["capture"] = report["trace"]["method"]
        found["status"] = report["status"]
        found["runtime failed"] = "; ".join(n for n in report["trace"]["notes"] if n.startswith("runtime"))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--one", nargs=2, metavar=("KIND", "FOLDER"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:  # a helper: one measured child, JSON on stdout (its RUSAGE_CHILDREN holds that child alone)
        print(json.dumps(one(*options.one)))
        return 0
    folder = tempfile.mkdtemp(prefix="fxflow-bench-meta-")
    with open(os.path.join(folder, "model.py"), "w") as handle:
        handle.write(MODEL_FILE.format(scripts=os.path.join(ROOT, "scripts"), layers=options.layers))
    print(f"load average (1, 5, 15 min) at the start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    runs: dict[str, list[dict]] = {"floor": [], "check": []}
    for _ in range(options.runs):
        for kind in runs:  # alternated
            helper = subprocess.run([sys.executable, __file__, "--one", kind, folder], capture_output=True, text=True)
            if helper.returncode != 0:
                print(helper.stderr[-3000:], file=sys.stderr)
                return 1
            runs[kind].append(json.loads(helper.stdout.strip().splitlines()[-1]))
    median = lambda kind, key: statistics.median(r[key] for r in runs[kind])  # noqa: E731
    floor, check = median("floor", "seconds"), median("check", "seconds")
    floor_cpu, check_cpu = median("floor", "cpu"), median("check", "cpu")
    floor_mib = max(r["MiB"] for r in runs["floor"])
    check_mib = max(r["MiB"] for r in runs["check"])
    print(f"| LLaMA config, {options.layers} layers, medians of {options.runs} | floor | fxflow check --device meta | "
          "ratio |")
    print("|---|---:|---:|---:|")
    print(f"| wall s | {floor:.2f} | {check:.2f} | {check / floor:.2f}x |")
    print(f"| CPU s (user + system) | {floor_cpu:.2f} | {check_cpu:.2f} | {check_cpu / floor_cpu:.2f}x |")
    print(f"| peak RSS MiB (largest) | {floor_mib:.0f} | {check_mib:.0f} | {check_mib / floor_mib:.2f}x |")
    captures = sorted({str(r["capture"]) for r in runs["check"]})
    print(f"the check's capture: {', '.join(captures)}; status: {', '.join(sorted({str(r['status']) for r in runs['check']}))}")
    for key in ("seconds", "cpu"):
        print(f"all runs, {key}: floor " + ", ".join(f"{r[key]:.2f}" for r in runs["floor"])
              + "; check " + ", ".join(f"{r[key]:.2f}" for r in runs["check"]))
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if captures != ["runtime"]:
        failed = {str(r["runtime failed"]) for r in runs["check"]}
        print(f"the check did not record its run: {captures}; {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
