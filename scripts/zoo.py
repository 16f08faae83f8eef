"""Run the zoo (tests/zoo) and write docs/tested-on.md: which real architectures fxflow's verdicts
were checked on, per capture path, against a plain forward/backward.

    python scripts/zoo.py --jobs 2        # from the repository root; rewrites docs/tested-on.md
    python scripts/zoo.py --pin           # also rewrites tests/zoo/availability.py from this run
    python scripts/zoo.py bert nn_lstm    # some models only, table printed, page left alone
    python scripts/zoo.py --pin bert      # some models only, their pins rewritten, the others' kept
    python scripts/zoo.py --libraries --pin --jobs 2   # the models beyond transformers: their section
                                                      # of the page (exit codes, optimizer steps), their pins
    python scripts/zoo.py --libraries --only monai,kornia --pin   # those libraries' models only: their
                                                      # tables rewritten, the other libraries' kept

The checks are exactly those of tests/test_zoo.py. A disagreement listed in tests/zoo/known.py
(the xfails) is shown as a disagreement with its failure class; one that is not is marked NEW.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import pprint
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One thread per process, as the suite's workers have (tests/conftest.py): several processes on
# a few cores with OpenMP's spinning threads each take several times as long. OpenMP reads it when
# torch is first imported, which the next import does.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torchvision_env  # noqa: E402,F401  (before transformers, timm, peft)
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from zoo.known import KNOWN_DISAGREEMENTS  # noqa: E402
from zoo.registry import DEFAULT_CHAIN, PATHS  # noqa: E402
from zoo.libraries import LIBRARIES, MISSING, not_built_here  # noqa: E402
from zoo.run import SPECIMENS, PathResult, ZooResult, check_specimen  # noqa: E402
from zoo.page import libraries_section, replace_section  # noqa: E402
from zoo.unbuildable import UNBUILDABLE  # noqa: E402

PAGE = ROOT / "docs" / "tested-on.md"
PINS = ROOT / "tests" / "zoo" / "availability.py"
CHECKED = (DEFAULT_CHAIN, *PATHS)
PATH_NAMES = tuple(path.name for path in CHECKED)
SHOWN_PARAMETERS = 3  # per disagreement in the details


def cell(result: ZooResult, path: PathResult) -> str:
    if not path.available:
        return "not available"
    if path.outcome == "agree":
        return "agree"
    reason = KNOWN_DISAGREEMENTS.get((result.name, path.path))
    return f"**disagree** ({reason.split('.')[0]})" if reason else "**disagree** (NEW)"


def table(results: list[ZooResult]) -> list[str]:
    names = PATH_NAMES
    lines = ["| model | family | parameters | values | " + " | ".join(names) + " | check CPU s |",
             "|---|---|---:|---:|" + "---|" * len(names) + "---:|"]
    for result in results:
        cells = " | ".join(cell(result, result.paths[name]) for name in names)
        lines.append(f"| {result.name} | {result.family} | {len(result.truth)} | {result.parameters:,} | {cells} | "
                     f"{result.check_seconds:.1f} |")
    return lines


def summary(results: list[ZooResult], seconds: float) -> list[str]:
    hf = [r for r in results if r.family != "torch.nn" and r.family not in LIBRARIES]
    outcomes = {name: Counter(r.paths[name].outcome for r in results) for name in PATH_NAMES}
    disagreeing = [r for r in results if any(p.outcome == "disagree" for p in r.paths.values())]
    new = [(r.name, p.path) for r in results for p in r.paths.values()
           if p.outcome == "disagree" and (r.name, p.path) not in KNOWN_DISAGREEMENTS]
    others = len([r for r in results if r.family in LIBRARIES])
    lines = [f"- **{len(results)} models**: {len(hf)} Hugging Face architectures in "
             f"{len({r.family for r in hf})} families, {len(results) - len(hf) - others} torch.nn models and "
             f"{others} from other libraries (their own section below); "
             f"{sum(len(r.truth) for r in results):,} parameters ({sum(r.parameters for r in results):,} values) "
             "in all, each with a verdict checked on every available path.",
             f"- **Agree on every available path: {len(results) - len(disagreeing)} of {len(results)} models.** "
             f"Disagreeing: {', '.join(r.name for r in disagreeing) or 'none'}."]
    for name, counts in outcomes.items():
        lines.append(f"- `{name}`: {counts['agree']} agree, {counts['disagree']} disagree, "
                     f"{counts['not available']} not available.")
    lines.append(f"- Disagreements not in the known table: {', '.join(f'{m} ({p})' for m, p in new) or 'none'}.")
    balance = Counter(str(truth) for r in results for truth in r.truth.values())  # what the verdicts were tested on
    lines.append(f"- Class balance of the truth: {balance['none']:,} parameters with a None gradient, "
                 f"{balance['zero']:,} exactly zero, {balance['nonzero']:,} nonzero.")
    slowest = sorted(results, key=lambda r: r.check_seconds, reverse=True)[:5]
    lines.append(f"- Checks took {sum(r.check_seconds for r in results):.0f} CPU seconds in all "
                 f"({seconds:.0f} s of wall time for the whole run, building and the plain backward included); "
                 "slowest: " + ", ".join(f"{r.name} {r.check_seconds:.1f} s" for r in slowest) + ".")
    return lines


def details(results: list[ZooResult]) -> list[str]:
    lines = []
    for result in results:
        for path in result.paths.values():
            if path.outcome != "disagree":
                continue
            reason = KNOWN_DISAGREEMENTS.get((result.name, path.path), "NEW: not in tests/zoo/known.py")
            lines.append(f"- **{result.name}**, `{path.path}`: {reason}.")
            if path.error:
                lines.append(f"  - {path.error}")
            for disagreement in path.disagreements[:SHOWN_PARAMETERS]:
                lines.append(f"  - `{disagreement}`")
            if len(path.disagreements) > SHOWN_PARAMETERS:
                lines.append(f"  - {len(path.disagreements)} of the model's {len(result.truth)} parameters in all")
    return lines


def families(results: list[ZooResult]) -> list[str]:
    counts = Counter(r.family for r in results)
    return [f"- {family}: {count}" for family, count in sorted(counts.items())]


def unbuildable() -> list[str]:
    """The model types transformers ships that the zoo does not build, each with its reason."""
    return ["| model type | why it is not in the zoo |", "|---|---|",
            *(f"| {model_type} | {reason.replace('|', '/')} |" for model_type, reason in sorted(UNBUILDABLE.items()))]


def pins(results: list[ZooResult], kept: dict[str, dict[str, str]] | None = None) -> str:
    """tests/zoo/availability.py: every (model, capture path) whose capture failed in this run, and
    the pins in ``kept`` of the models this run did not check: a run of some models only, or models
    that cannot be built here (``not_built_here``: their pins stand until a machine that builds them
    runs them)."""
    checked = {r.name for r in results}
    table = {name: paths for name, paths in (kept or {}).items()
             if name not in checked and (name in SPECIMENS or not_built_here(name))}
    table.update({r.name: {p.path: p.why_unavailable.split(":")[0] or "no reason given"
                           for p in r.paths.values() if not p.available and p.path != DEFAULT_CHAIN.name}
                  for r in results})
    table = {name: paths for name, paths in sorted(table.items()) if paths}
    return ('"""Written by `python scripts/zoo.py --pin`: the zoo\'s (model, capture path) pairs whose capture\n'
            'fails today, with the exception it fails with. tests/zoo_matrix expects exactly these to fail."""\n\n'
            f"UNAVAILABLE: dict[str, dict[str, str]] = {pprint.pformat(table, width=116, sort_dicts=True)}\n")


def unavailable(results: list[ZooResult]) -> list[str]:
    """Models whose capture failed, grouped by path and exception type, with the first message."""
    reasons: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for result in results:
        for path in result.paths.values():
            if not path.available:
                kind = path.why_unavailable.split(":")[0] or "no reason given"
                reasons.setdefault((path.path, kind), []).append((result.name, path.why_unavailable))
    return [f"- `{path}`, {kind} (\"{failures[0][1].split(': ', 1)[-1][:100]}\" on {failures[0][0]}): "
            + ", ".join(name for name, _ in failures) for (path, kind), failures in sorted(reasons.items())]


INTRODUCTION = """\
# Tested on

fxflow's verdicts, checked against a plain forward and backward on real architectures that nobody
here wrote. This page is written by `python scripts/zoo.py --jobs 2`; the same checks run in the
test suite (`tests/test_zoo.py`: each model on the default chain; `tests/zoo_matrix.py`: every
model on every capture path), models in `tests/zoo/`.

**How each model is checked.** Every model is built from a tiny random config (2 layers, width
32-64, vocabulary 99, 2 x 8 tokens, 16x16 or 32x32 images, 400-1600 audio samples; no downloads),
seeded, with its usual task head, and put in `train()` mode as it is while training: dropout,
drop-path and SpecAugment run. The Hugging Face models beyond the first hundred are built by one
general builder (`tests/zoo/auto.py`): each model type's default config with every size it names
shrunk, the inputs its user passes (`model(**inputs)`), and a recipe where the defaults need more.
One plain forward and backward gives the truth for every parameter, with the loss a training
step differentiates (the model's own, else a seeded random projection of every floating output),
written in tests/gradtruth.py without fxflow's code, as is the snapshot that puts the model back. Then `fxflow.check(model, inputs)` runs
once with no options (the *default chain*), and once per capture path with
`capture_methods=[path]`, and every parameter must agree:

| real gradient | static verdict | dynamic verdict |
|---|---|---|
| nonzero | `reachable` | `ok`, `vanishing` or `nonfinite` |
| exactly zero | `reachable` or `zero` | `zero` |
| None | `cut`, `unused` or `frozen` | `missing` |

The paths are the three capture methods on meta twin tensors (what models of real size get), and
the run-time capture again on real twin tensors (what a small model gets); the twins are pinned
(`FXFLOW_TWINS`), since these tiny models would otherwise only ever get real ones. *Not available*
means that capture failed for the model; which paths fail is pinned in
`tests/zoo/availability.py` (`--pin` rewrites it from a run), so a path that stops or starts
working fails the matrix. The default chain must capture every model. *Parameters* counts the
parameter tensors (each gets a verdict), *values* their elements. *Check CPU s* is the CPU time of
the model's checks on all five columns.

A disagreement marked with a number is a known failure class (1-3 of issue 10: in-place writes
through views, verdicts that depend on the twins, multi-output modules; 4: custom
autograd.Functions the twins cannot see through), listed in `tests/zoo/known.py` as a strict
xfail; NEW marks one that is not.
"""


UNBUILT_INTRODUCTION = """\
Every model type of transformers 5.x with a PyTorch model class was tried with the zoo's general
builder (`tests/zoo/auto.py`: its default config shrunk, the inputs a user passes). These did not
build or run there (listed in `tests/zoo/unbuildable.py`); sub-models of a type the zoo has (a
`*_text` or `*_vision` config of a multimodal type) are not counted.
"""


def page(results: list[ZooResult], seconds: float) -> str:
    parts = [INTRODUCTION, "## Summary\n", *summary(results, seconds), "", "### Models per family\n",
             *families(results), "", "## Agreement\n", *table(results),
             "", "## Disagreements\n", *(details(results) or ["None."]), "",
             "## Why a path was not available\n", *unavailable(results), "",
             "## Model types not built, and why\n", UNBUILT_INTRODUCTION, *unbuildable(), ""]
    return "\n".join(parts)


def _check(name: str) -> ZooResult:
    return check_specimen(name, CHECKED, learning=SPECIMENS[name].family in LIBRARIES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="check only these (the page is then not written)")
    parser.add_argument("--jobs", type=int, default=1, help="models checked at once, one process each")
    parser.add_argument("--pin", action="store_true", help="also write tests/zoo/availability.py from this run "
                        "(with models named: theirs only, the other pins kept)")
    parser.add_argument("--libraries", action="store_true", help="the models beyond transformers only: rewrite "
                        "their section of the page")
    parser.add_argument("--only", default="", help="with --libraries: these libraries only (comma-separated, "
                        "as tests/zoo/libraries.py names them); the others' tables on the page are kept")
    args = parser.parse_args(argv)
    only = [library for library in args.only.split(",") if library]
    if only and not args.libraries or set(only) - set(LIBRARIES):
        print(f"zoo.py: --only takes libraries of tests/zoo/libraries.py, with --libraries: {sorted(LIBRARIES)}",
              file=sys.stderr)
        return 2
    if args.libraries:
        args.models = [name for name, specimen in SPECIMENS.items()
                       if specimen.family in LIBRARIES and (not only or specimen.family in only)]
    unknown = [name for name in args.models if name not in SPECIMENS]
    if unknown:
        print(f"zoo.py: no model {unknown[0]!r} in the zoo", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results = []
    names = args.models or list(SPECIMENS)
    with multiprocessing.get_context("spawn").Pool(args.jobs, maxtasksperchild=20) as pool:
        for result in pool.imap(_check, names):
            results.append(result)
            print(f"{result.name}: " + ", ".join(f"{p.path} {p.outcome}" for p in result.paths.values()),
                  file=sys.stderr, flush=True)
    text = page(results, time.perf_counter() - started)
    if args.pin:
        from zoo.availability import UNAVAILABLE
        PINS.write_text(pins(results, UNAVAILABLE))
        print(f"wrote {PINS.relative_to(ROOT)}", file=sys.stderr)
    if args.libraries:
        PAGE.write_text(replace_section(PAGE.read_text(), libraries_section(results, MISSING, PAGE.read_text())))
        print(f"wrote the libraries' section of {PAGE.relative_to(ROOT)}", file=sys.stderr)
    elif args.models:
        print(text)
    else:
        PAGE.write_text(text)
        print(f"wrote {PAGE.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
