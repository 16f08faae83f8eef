"""What the look-ahead past exact zeros costs: ``fxflow.check`` on a LoRA'd GPT-2, next to one plain step.

    python scripts/bench_lookahead.py                      # GPT-2 small (12 layers, width 768), sequence 128
    python scripts/bench_lookahead.py --model gpt2-4x256   # 4 layers, width 256
    python scripts/bench_lookahead.py --tiny               # 2 layers, width 64: a quick run

peft's LoRA (r=8 on ``c_attn``, B zero at init) gives every ``lora_A`` an exactly zero first
gradient, so the check takes one look-ahead step. One torch thread; after a warm-up, the median of
REPEATS runs each of: a plain training step (forward + backward of the model's own loss), the check,
and the check's phases (``Report.timings``), on the model before LoRA is wrapped in (no exact zero,
no look-ahead) and after. The headline is each check over one plain step of the same model.
The models are :func:`bench_step.build_gpt2`'s, so both scripts measure the same thing.

``--rerun``: one look-ahead rerun alone (:class:`fxflow.dynamic.rerun.Rerun`), against a plain LoRA step
and against a whole new ``ModelRun`` on the same inputs (what each rerun was before issue 38: its module
hooks, its search for unregistered tensors, its replay state), alternated, by CPU time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torchvision_env  # noqa: E402,F401  (before transformers, timm, peft)
from bench_step import GPT2, LORA, build_gpt2

REPEATS = 5


def main() -> None:
    global REPEATS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2-small", choices=sorted(GPT2))
    parser.add_argument("--tiny", action="store_true", help="--model tiny")
    parser.add_argument("--rerun", action="store_true", help="one look-ahead rerun against a plain step (CPU time)")
    parser.add_argument("--repeats", type=int, default=5, help="measured runs of each (default 5)")
    options = parser.parse_args()
    REPEATS = options.repeats
    import torch
    import warnings

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)

    import fxflow

    name = "tiny" if options.tiny else options.model
    if options.rerun:
        return rerun_alone(name)
    base, inputs = build_gpt2(name)
    base_phases: list[dict[str, float]] = []
    plain, unwrapped = alternated(base, lambda: base(**inputs).loss.backward(),
                                  lambda: base_phases.append(fxflow.check(base, inputs).timings))
    model, inputs = build_gpt2(name + LORA)
    phases: list[dict[str, float]] = []

    def checked() -> None:
        report = fxflow.check(model, inputs)
        assert report.ok and any(p.dynamic == "held" for p in report.parameters), report.summary()
        phases.append(report.timings)

    lora_plain, lora_check = alternated(model, lambda: model(**inputs).loss.backward(), checked)
    layers, width, sequence = GPT2[name]
    print(f"GPT-2 {layers}x{width}, sequence {sequence}, one torch thread, load average at the end "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| model | check / plain step | plain step s | fxflow.check s | the check's phases s (medians) |")
    print("|---|---:|---:|---:|---|")
    for label, step, check, timings in (("base (no exact zero)", plain, unwrapped, base_phases),
                                        ("LoRA r=8 on c_attn", lora_plain, lora_check, phases)):
        print(f"| {label} | **{check / step:.2f}x** | {step:.3f} | {check:.3f} | {phase_medians(timings)} |")
    look = statistics.median(t.get("look-ahead", 0.0) for t in phases[-REPEATS:])
    print(f"LoRA: the look-ahead phase alone is {look / lora_plain:.2f} plain LoRA steps; the whole check "
          f"{lora_check / lora_plain:.2f}.")


def rerun_alone(name: str) -> None:
    """One look-ahead rerun, a whole new ModelRun (the rerun before issue 38) and a plain LoRA step, alternated
    REPEATS times after a warm-up, timed by CPU time (steadier than the wall clock on a shared machine)."""
    from fxflow.dynamic.probe import ModelRun, run_model
    from fxflow.prepare import prepare

    model, inputs = build_gpt2(name + LORA)
    prepared = prepare(model, inputs, None, True)
    first = run_model(prepared.runner, prepared.example, labels_given=True, record=True, trace=True)
    lean = first.rerun()

    def whole_run() -> None:
        lean.random_state.restore()
        ModelRun(first.model, mode=first.mode, loss_fn=first.loss_fn, seed=first.seed,
                 labels_given=first.labels_given).run(prepared.example)

    actions = {"plain step": lambda: model(**inputs).loss.backward(), "lean rerun": lambda: lean(prepared.example),
               "whole new ModelRun": whole_run}
    times: dict[str, list[float]] = {label: [] for label in actions}
    for index in range(REPEATS + 1):  # the first round is a warm-up
        for label, action in actions.items():
            model.zero_grad(set_to_none=True)
            started = time.process_time()
            action()
            if index:
                times[label].append(time.process_time() - started)
    model.zero_grad(set_to_none=True)
    step = statistics.median(times["plain step"])
    print(f"GPT-2 {'x'.join(map(str, GPT2[name][:2]))} + LoRA, CPU time, medians of {REPEATS}, load average at the end "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for label, measured in times.items():
        print(f"  {label}: {statistics.median(measured):.4f} s, {statistics.median(measured) / step:.2f} plain LoRA steps")


def phase_medians(timings: list[dict[str, float]]) -> str:
    """``backward 0.95, look-ahead 0.75, ...``: each phase's median over the measured runs (not the warm-up)."""
    measured = timings[-REPEATS:]
    names = [phase for phase in measured[0]] if measured else []
    medians = {phase: statistics.median(t.get(phase, 0.0) for t in measured) for phase in names}
    return ", ".join(f"{phase} {seconds:.2f}" for phase, seconds in medians.items() if seconds >= 0.01)


def alternated(model, step, check) -> tuple[float, float]:
    """Medians of a plain ``step`` and of ``check``, alternated REPEATS times after a warm-up of each,
    so a neighbour's load falls on both alike."""
    steps, checks = [], []
    for index in range(REPEATS + 1):  # the first round is a warm-up
        for action, times in ((step, steps), (check, checks)):
            model.zero_grad(set_to_none=True)
            started = time.perf_counter()
            action()
            if index:
                times.append(time.perf_counter() - started)
    model.zero_grad(set_to_none=True)
    return statistics.median(steps), statistics.median(checks)


if __name__ == "__main__":
    sys.exit(main())
