"""Check one zoo specimen on every capture path against one plain forward/backward.

The model is built once and shared by its paths (fxflow leaves it as found). A path whose capture
fails gives a report with ``trace.method == "none"``: that path is *not available* for the model,
which is not a disagreement.
"""
from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field
from typing import Any, Sequence
from unittest.mock import patch

import torch

import fxflow
from fxflow.errors import FxflowError

from . import untouched
from . import hf, hf_auto_media, hf_auto_text, hf_media, libraries, torch_nn  # noqa: F401 (importing them registers their specimens)
from .registry import DEFAULT_CHAIN, PATHS, SPECIMENS, Path, Specimen
from .truth import (HELD_STEPS, Disagreement, Truth, disagreements, first_learning_step, reached_on_other_draws,
                    real_gradients, seed_dependent, seed_everything)


@dataclass
class PathResult:
    """One capture path on one model."""

    path: str
    available: bool
    disagreements: list[Disagreement] = field(default_factory=list)
    error: str = ""  # the check itself refused or crashed (a disagreement: nothing was verified)
    seconds: float = 0.0  # CPU time of the check (this process): steadier than wall time on a busy machine
    why_unavailable: str = ""  # the capture's note when it failed
    method: str = ""  # the capture method that gave the graph (the default chain's first that worked)
    exit_code: int | None = None  # what `fxflow check` exits with on this report (None: no report)
    problems: tuple[str, ...] = ()  # the parameters that count against the exit code
    # Whether an exact zero at step 1 that a zero-initialized weight holds fails the check: no longer
    # (issue 27's look-ahead makes it `held`, checked against real optimizer steps in `disagreements`).
    # Fixed here, not read off the report: known_exits' STEP_ONE_ZEROS pins then fail when such a model exits 1.
    step_zeros_fail: bool = False
    why_exit: str = ""  # the report's first problem: parameter, verdicts, and where and why fxflow says it fails

    @property
    def outcome(self) -> str:
        if not self.available:
            return "not available"
        return "disagree" if self.disagreements or self.error else "agree"


@dataclass
class ZooResult:
    """One model on its capture paths."""

    name: str
    family: str
    parameters: int
    truth: dict[str, Truth]
    paths: dict[str, PathResult]
    build_seconds: float
    learning: dict[str, int | None] = field(default_factory=dict)  # first_learning_step (library models)
    seeded: list[str] = field(default_factory=list)  # seed_dependent: truths the model's own randomness decides

    @property
    def check_seconds(self) -> float:
        return sum(result.seconds for result in self.paths.values())


def check_path(model: torch.nn.Module, inputs: Any, truth: dict[str, Truth], path: Path) -> PathResult:
    """fxflow restricted to one capture path, compared with the plain backward; a model the check
    does not leave, byte for byte, as it found it (tests/zoo/untouched.py) is an error."""
    before = untouched.as_bytes(model, inputs)
    seed_everything()
    started = time.process_time()
    pinned = {"FXFLOW_TWINS": path.twins} if path.twins else {}  # whatever the machine's load
    try:
        with patch.dict(os.environ, pinned):
            report = fxflow.check(model, inputs, capture_methods=[path.capture] if path.capture else None)
    except FxflowError as error:  # fxflow's own refusal: the check did not run at all
        return PathResult(path.name, True, error=f"fxflow.check raised: {error}", seconds=time.process_time() - started)
    seconds = time.process_time() - started
    changed = untouched.differences(before, untouched.as_bytes(model, inputs))
    if changed:
        return PathResult(path.name, True, error=f"fxflow.check left the model changed: {changed}", seconds=seconds)
    if report.trace.method == "none":
        return PathResult(path.name, False, seconds=seconds, why_unavailable=_failure(report.trace.notes, path.capture))
    assert path.capture in (None, report.trace.method), (report.trace.method, path.capture)
    steps = functools.cache(lambda: first_learning_step(model, inputs, steps=HELD_STEPS))  # only if some is held
    draws = functools.cache(lambda names: reached_on_other_draws(model, inputs, names))  # only if intermittent
    return PathResult(path.name, True, disagreements(report, truth, steps, draws), seconds=seconds,
                      method=report.trace.method, exit_code=report.exit_code,
                      problems=tuple(p.name for p in report.problems), why_exit=_why(report.problems))


def _why(problems: Sequence[Any]) -> str:
    """The first problem in words: its verdicts, and the site fxflow names (cut or localized), else its diagnosis."""
    if not problems:
        return ""
    first = problems[0]
    site = next(iter(first.cut_by), None)
    where = f"{site.reason} ({site.op} @ {site.source})" if site is not None else (first.diagnosis or "")
    return f"{first.name}: {first.static}/{first.dynamic}: {where}"


def _failure(notes: Sequence[str], capture: str | None) -> str:
    if capture is None:  # the whole chain failed: every method's reason
        return "; ".join(notes)
    prefix = f"{capture} failed: "
    return next((note.removeprefix(prefix) for note in notes if note.startswith(prefix)), "")


def check_specimen(specimen: Specimen | str, paths: Sequence[Path] = PATHS, learning: bool = False) -> ZooResult:
    """Build the model once, take the real backward's truth, then check it on each path; with
    ``learning``, also when each parameter first learns in a few real optimizer steps, and which
    parameters' truth the model's own randomness decides."""
    specimen = SPECIMENS[specimen] if isinstance(specimen, str) else specimen
    started = time.process_time()
    model, inputs = specimen.make()
    build_seconds = time.process_time() - started
    truth = real_gradients(model, inputs)
    results = {path.name: check_path(model, inputs, truth, path) for path in paths}
    steps = first_learning_step(model, inputs) if learning else {}
    seeded = seed_dependent(model, inputs) if learning else []
    return ZooResult(specimen.name, specimen.family, sum(p.numel() for p in model.parameters()), truth, results,
                     build_seconds, steps, seeded)


@functools.lru_cache(maxsize=8)  # a model's paths run one after another; 300 models kept would be GBs
def built(name: str) -> tuple[torch.nn.Module, Any, dict[str, Truth]]:
    """The model, its inputs and the plain backward's truth, shared by the paths that check it."""
    model, inputs = SPECIMENS[name].make()
    return model, inputs, real_gradients(model, inputs)


def learning(name: str) -> dict[str, int | None]:
    """When each parameter of ``name`` first learns in a few real optimizer steps (the model as built)."""
    model, inputs, _ = built(name)
    return first_learning_step(model, inputs)


def default_chain_agrees(name: str) -> PathResult:
    """``name`` checked as a user checks it (the default chain): it must be captured, the check must run,
    and every verdict must agree with the plain backward; the result, for further checks."""
    model, inputs, truth = built(name)
    result = check_path(model, inputs, truth, DEFAULT_CHAIN)
    assert result.available, f"nothing captured {name}: {result.why_unavailable}"
    assert not result.error, result.error
    assert [str(d) for d in result.disagreements] == []
    return result
