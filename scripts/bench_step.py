"""What a check costs next to one training step, in process and in whole processes (issues 18, 38).

    python scripts/bench_step.py                 # every model, LoRA included, prints the tables
    python scripts/bench_step.py --models tiny   # a subset
    python scripts/bench_step.py --models gpt2-small+lora,gpt2-4x256+lora --no-whole --no-meta   # LoRA only
    python scripts/bench_step.py --trace-cost    # the backward trace's cost per autograd node

The headline, in process, with one torch thread: ``fxflow.check(model, inputs)`` over one plain
``model(**inputs).loss.backward()`` step of the same model (alternated in one process, medians after a
warm-up of each), on Hugging Face GPT-2 built from a config (nothing downloaded), and with peft's LoRA
(r=8 on ``c_attn``, ``lora_B`` zero at init, so every ``lora_A`` has an exactly zero first gradient and
the check looks ahead); the check's own phase timings (medians, also in plain steps); the peers' own capture of the same healthy model
(torchview's graph, TorchLens's trace), where installed. Secondary, whole processes (interpreter start,
imports and building the model included): ``fxflow check`` of a model file against a floor that builds
the same model and runs one forward and backward with no capture at all (medians of three runs
each, alternated). The 7B LLaMA config runs
on the meta device (fake tensors): ``fxflow check --device meta`` against a meta floor.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT2 = {  # name -> (layers, width, sequence)
    "tiny": (2, 64, 32),
    "gpt2-4x256": (4, 256, 128),
    "gpt2-small": (12, 768, 128),
}
LORA = "+lora"  # a model name ending so: the same GPT-2 with peft's LoRA (r=8 on c_attn)
REPEATS = {"tiny": 15, "gpt2-4x256": 7, "gpt2-small": 5}
MODELS = (*GPT2, *(name + LORA for name in ("gpt2-4x256", "gpt2-small")))
WHOLE_REPEATS = 3  # whole-process runs of the floor and of the check each: their medians

MODEL_FILE = '''
import sys
sys.path.insert(0, {scripts!r})
import torchvision_env  # noqa: F401  (before transformers)
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

LAYERS, WIDTH, SEQUENCE = {layers}, {width}, {sequence}


class Logits(torch.nn.Module):
    """The 7B config as issue 28 describes it: forward returns ``.logits``, no labels."""

    def __init__(self):
        super().__init__()
        self.model = LlamaForCausalLM(LlamaConfig())  # 32 layers, width 4096

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).logits


def build():
    if LAYERS == 0:  # the 7B config
        return Logits()
    config = GPT2Config(n_layer=LAYERS, n_embd=WIDTH, n_head=max(WIDTH // 64, 1), n_positions=max(SEQUENCE, 16),
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config)


def example_inputs():
    ids = torch.randint(0, 1000, (1, SEQUENCE))
    return {{"input_ids": ids}} if LAYERS == 0 else {{"input_ids": ids, "labels": ids}}
'''

FLOOR = '''
import sys, time
started = time.perf_counter()
import torch
sys.path.insert(0, {folder!r})
from model import build, example_inputs
torch.manual_seed(0)
device = {device!r}
if device == "meta":
    with torch.device("meta"):
        model = build()
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    from torch.func import functional_call
    with mode:
        weights = {{name: mode.from_tensor(t) for name, t in model.state_dict(keep_vars=True).items()}}
        inputs = {{k: mode.from_tensor(v.to("meta")) for k, v in example_inputs().items()}}
        logits = functional_call(model, weights, (), inputs)
        (logits * torch.randn_like(logits)).sum().backward()  # a random projection, as the check's loss
else:
    model = build()
    model(**example_inputs()).loss.backward()
print(time.perf_counter() - started)
'''


def build_gpt2(name: str) -> tuple[Any, dict[str, Any]]:
    """GPT-2 ``name`` (a key of GPT2, ``+lora`` for peft's LoRA r=8 on ``c_attn``) from a config, random
    weights, no dropout; and its inputs, labels given so the plain step and the check differentiate the
    model's own loss."""
    import torch
    import torchvision_env  # noqa: F401  (before transformers)
    import transformers

    layers, width, sequence = GPT2[name.removesuffix(LORA)]
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=max(width // 64, 1),
                                     n_positions=max(sequence, 16), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    if name.endswith(LORA):
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=["c_attn"], lora_dropout=0.0))
    ids = torch.randint(0, 1000, (1, sequence))
    return model, {"input_ids": ids, "labels": ids}


def in_process(name: str, cpu_time: bool = False) -> dict[str, float]:
    """Medians of a plain step and of fxflow.check on the same model, one torch thread; ``cpu_time``:
    timed by the process's CPU time instead of the wall clock (the phases stay wall-clock)."""
    clock = time.process_time if cpu_time else time.perf_counter
    import warnings

    import torch

    import fxflow

    warnings.filterwarnings("ignore")  # peft's and transformers' notices, once per process
    torch.set_num_threads(1)
    model, inputs = build_gpt2(name)

    def plain() -> None:
        model(**inputs).loss.backward()
        model.zero_grad(set_to_none=True)

    def check() -> Any:
        return fxflow.check(model, inputs)

    def median(action: Any, repeats: int) -> float:
        action()  # warm-up
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            action()
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    repeats = REPEATS[name.removesuffix(LORA)]
    plain(), check()  # warm-up
    steps, checks, timings = [], [], []
    for _ in range(repeats):  # alternated, so a neighbour's load falls on both alike
        for action, times in ((plain, steps), (check, checks)):
            started = clock()
            report = action()
            times.append(clock() - started)
        timings.append(report.timings)
    step, checked = statistics.median(steps), statistics.median(checks)
    phases = {phase: statistics.median(t.get(phase, 0.0) for t in timings) for phase in timings[-1]}
    peers = {}
    for peer, run in (_peers(model, inputs) if not name.endswith(LORA) else {}).items():
        try:
            peers[peer] = median(run, max(repeats // 2, 1))
        except Exception as error:  # noqa: BLE001 - a peer that cannot run this model is reported as such
            peers[peer] = f"{type(error).__name__}"
    return {"step": step, "check": checked, "ratio": checked / step, "capture": report.trace.method,
            "summary": report.summary(), "peers": peers, "phases": phases, "cpu": cpu_time}


def _peers(model: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """The peers' own capture of the same model, where installed: torchview's graph (built, not
    drawn) and TorchLens's trace of the forward."""
    runs = {}
    try:
        from torchview import draw_graph

        runs["torchview"] = lambda: draw_graph(model, input_data=dict(inputs), depth=3)
    except ImportError:
        pass
    try:
        import torchlens

        runs["torchlens"] = lambda: torchlens.trace(model, input_kwargs=dict(inputs))
    except ImportError:
        pass
    return runs


class _TinyNodes:
    """A model of ``blocks`` x ``per`` x 2 tiny autograd nodes (a multiply by a parameter, a tanh), inside
    ``blocks`` modules: what the trace costs per node, with no arithmetic to hide it."""

    def __new__(cls, blocks: int = 100, per: int = 100) -> Any:
        import torch

        class Block(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w = torch.nn.Parameter(torch.ones(4))

            def forward(self, x: Any) -> Any:
                for _ in range(per):
                    x = torch.tanh(x * self.w)
                return x

        class Tiny(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.blocks = torch.nn.ModuleList(Block() for _ in range(blocks))

            def forward(self, x: Any) -> Any:
                for block in self.blocks:
                    x = block(x)
                return x.sum()

        return Tiny()


def trace_cost(rounds: int = 9) -> dict[str, float]:
    """Microseconds per autograd node of the backward trace (fxflow.dynamic.backward_trace), in its parts:
    origins (forward), watch (hooking the graph), hooks (backward), finish; alone and on the run-time
    recording, as the check runs it. Median over ``rounds`` alternated rounds; collector paused, as in
    the check."""
    import gc

    import torch

    from fxflow.dynamic.backward_trace import BackwardTrace
    from fxflow.dynamic.recording import Recording

    torch.set_num_threads(1)
    model, x = _TinyNodes(), torch.randn(4)

    def once(traced: bool, recorded: bool) -> dict[str, float]:
        times, trace = {}, BackwardTrace(model) if traced else None
        recording = Recording(model, (x,), copy_parameters=False) if recorded else None
        started = time.perf_counter()
        if recording is not None:
            recording.__enter__()
        if trace is not None:
            with trace.forward():
                loss = model(x)
        else:
            loss = model(x)
        if recording is not None:
            recording.__exit__(None, None, None)
        times["forward"] = time.perf_counter() - started
        started = time.perf_counter()
        if trace is not None:
            trace.watch(loss)
        times["watch"] = time.perf_counter() - started
        started = time.perf_counter()
        loss.backward()
        times["backward"] = time.perf_counter() - started
        started = time.perf_counter()
        if trace is not None:
            trace.finish()
        times["finish"] = time.perf_counter() - started
        model.zero_grad(set_to_none=True)
        return times

    nodes = _count_nodes(model, x)
    kinds = [(False, False), (True, False), (False, True), (True, True)]
    rows: dict[tuple[bool, bool], list[dict[str, float]]] = {kind: [] for kind in kinds}
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):  # alternated, so a neighbour's load falls on all alike
            for kind in kinds:
                rows[kind].append(once(*kind))
    finally:
        gc.enable()
    median = {kind: {part: statistics.median(r[part] for r in rows[kind]) for part in rows[kind][0]} for kind in kinds}
    per_node = {"nodes": nodes}
    for recorded, label in ((False, "alone"), (True, "on the recording")):
        plain, traced = median[(False, recorded)], median[(True, recorded)]
        parts = {"origins": traced["forward"] - plain["forward"], "watch": traced["watch"],
                 "hooks": traced["backward"] - plain["backward"], "finish": traced["finish"]}
        for part, seconds in parts.items():
            per_node[f"{part} ({label})"] = seconds / nodes * 1e6
        per_node[f"total ({label})"] = sum(parts.values()) / nodes * 1e6
    return per_node


def _count_nodes(model: Any, x: Any) -> int:
    from fxflow.core.history import autograd_nodes

    return len(autograd_nodes([model(x).grad_fn]))


def whole_process(name: str, device: str | None) -> dict[str, float]:
    """Seconds of `fxflow check` and of the no-capture floor, each in a fresh interpreter, and peak RSS."""
    layers, width, sequence = GPT2.get(name, (0, 0, 16))  # the 7B config: input_ids of shape (1, 16)
    folder = tempfile.mkdtemp(prefix="fxflow-bench-")
    with open(os.path.join(folder, "model.py"), "w") as handle:
        handle.write(MODEL_FILE.format(layers=layers, width=width, sequence=sequence, scripts=os.path.join(ROOT, "scripts")))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}

    def timed(command: list[str]) -> tuple[float, float]:
        started = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-f", "%M", *command], capture_output=True, text=True, env=env)
        seconds = time.perf_counter() - started
        rss = int(done.stderr.strip().splitlines()[-1]) / 1024
        return seconds, rss

    floor_command = [sys.executable, "-c", FLOOR.format(folder=folder, device=device)]
    check = [sys.executable, "-m", "fxflow", "check", os.path.join(folder, "model.py:build"), "--quiet"]
    check += ["--device", device] if device else []
    floors, checks = [], []
    for _ in range(WHOLE_REPEATS):  # alternated, so a neighbour's load falls on both alike
        floors.append(timed(floor_command))
        checks.append(timed(check))
    floor = (statistics.median(f[0] for f in floors), max(f[1] for f in floors))
    checked = (statistics.median(c[0] for c in checks), max(c[1] for c in checks))
    return {"floor": floor[0], "check": checked[0], "ratio": checked[0] / floor[0],
            "floor MiB": floor[1], "check MiB": checked[1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--no-meta", action="store_true", help="skip the 7B meta config")
    parser.add_argument("--no-whole", action="store_true", help="skip the whole-process GPT-2 small row")
    parser.add_argument("--one", nargs=1, help=argparse.SUPPRESS)
    parser.add_argument("--cpu-time", action="store_true",
                        help="time the in-process rows by CPU time, not the wall clock: on a shared, loaded machine "
                             "a one-thread step's CPU time moves less with the neighbours' load (phases stay wall)")
    parser.add_argument("--trace-cost", action="store_true", help="the backward trace's cost per autograd node")
    options = parser.parse_args()
    if options.trace_cost:
        found = trace_cost()
        print(f"{found.pop('nodes')} autograd nodes; microseconds per node, medians of 9 alternated rounds:")
        for part, value in found.items():
            print(f"  {part}: {value:.1f}")
        print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return 0
    if options.one:  # a child: one in-process measurement, JSON on stdout
        print(json.dumps(in_process(options.one[0], options.cpu_time)))
        return 0
    print(f"load average (1, 5, 15 min) at the start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}"
          f"{'; in-process rows timed by CPU time' if options.cpu_time else ''}")
    rows, whole = [], None
    for name in filter(None, options.models.split(",")):  # --models "" : the 7B meta row only
        child = subprocess.run([sys.executable, __file__, "--one", name, *(["--cpu-time"] if options.cpu_time else [])],
                               capture_output=True, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
        if child.returncode != 0:
            print(child.stderr[-2000:], file=sys.stderr)
            return 1
        rows.append((name, json.loads(child.stdout.strip().splitlines()[-1])))
        if name == "gpt2-small" and not options.no_whole:
            whole = whole_process(name, None)
    meta = None if options.no_meta else whole_process("llama-7b", "meta")
    print(table(rows))
    if whole or meta:
        print()
        print(whole_table(whole, meta))
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def table(rows: list) -> str:
    """The headline: the check over one plain step of the same model, in process."""
    lines = ["| model (in process, one torch thread) | check / plain step | plain step s | fxflow.check s | "
             "the check's phases s (in plain steps), medians | capture | torchview s | TorchLens s |",
             "|---|---:|---:|---:|---|---|---:|---:|"]
    for name, inside in rows:
        peers = [inside["peers"].get(peer, "-") for peer in ("torchview", "torchlens")]
        peers = [f"{p:.4f}" if isinstance(p, float) else p for p in peers]
        steps = (lambda seconds: "") if inside.get("cpu") else (lambda seconds: f" ({seconds / inside['step']:.2f})")
        phases = ", ".join(f"{phase} {seconds:.2f}{steps(seconds)}"
                           for phase, seconds in inside["phases"].items() if seconds >= 0.01)
        lines.append(f"| {name} | **{inside['ratio']:.2f}x** | {inside['step']:.4f} | {inside['check']:.4f} | "
                     f"{phases} | {inside['capture']} | {peers[0]} | {peers[1]} |")
    return "\n".join(lines)


def whole_table(whole: dict | None, meta: dict | None) -> str:
    """Secondary: whole processes, where interpreter start, imports and building the model are most of the floor."""
    lines = ["| whole processes (secondary) | floor s | fxflow check s | ratio | peak MiB (floor) |",
             "|---|---:|---:|---:|---|"]
    for label, found in (("GPT-2 small", whole), ("LLaMA-7B config, --device meta", meta)):
        if found:
            lines.append(f"| {label} | {found['floor']:.2f} | {found['check']:.2f} | {found['ratio']:.2f}x | "
                         f"{found['check MiB']:.0f} ({found['floor MiB']:.0f}) |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
