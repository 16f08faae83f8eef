"""The exit codes of the zoo's library models (tests/zoo/libraries.py), pinned with their reasons.

Every library model exits 0 (every trainable parameter learns) unless it is listed here:

* :data:`STEP_ONE_ZEROS`: exits 1 today only because some weights start at exactly zero (a
  residual block's last BatchNorm, a zero-initialized head, LoRA's B factor, ControlNet's zero
  convolutions): the first backward leaves the parameters before them exactly zero, and a few
  real optimizer steps (tests/zoo/truth.py: ``first_learning_step``) show every one of them
  learning by step 2 or 3. Issue 27 ("Red means broken") turns these into a pass: once reports
  carry ``learns_from_step`` (:func:`expected_exit` reads that from the report itself), they must
  exit 0, and this table becomes the list of models that issue proves on.
* :data:`DRY`: exits 1 because a parameter gets no gradient in those steps either: a real problem,
  each with the reason (fxflow's site for the first failing parameter, from the sweep that wrote
  docs/tested-on.md).

:func:`assert_exit_as_pinned` checks one model against both tables *and* against the optimizer
steps, so a pin whose reason stops being true fails as loudly as a wrong exit code.
"""
from __future__ import annotations

from typing import Any

STEP_ONE_ZEROS: dict[str, str] = {}
DRY: dict[str, str] = {}


def expected_exit(name: str, step_zeros_fail: bool) -> int:
    """The exit code ``name`` must give: 1 when dry, 1 for step-one zeros until reports carry
    ``learns_from_step`` (issue 27), else 0."""
    if name in DRY:
        return 1
    return 1 if name in STEP_ONE_ZEROS and step_zeros_fail else 0


def assert_exit_as_pinned(name: str, result: Any, learning: dict[str, int | None]) -> None:
    """``result`` (the default chain's :class:`~zoo.run.PathResult`) exits as pinned, and the pin's class
    is what the optimizer steps show: every failing parameter of a step-one model learns by step 3,
    some failing parameter of a dry model never does."""
    late = [p for p in result.problems if learning.get(p) not in (None, 1)]
    if name in STEP_ONE_ZEROS:
        assert result.problems or not result.step_zeros_fail, f"{name} exits 0: drop it from STEP_ONE_ZEROS"
        assert len(late) == len(result.problems), (
            f"{name}: these fail and do not learn within the steps: {sorted(set(result.problems) - set(late))[:3]}")
    elif name in DRY:
        assert result.problems and len(late) < len(result.problems), f"{name}: nothing stays dry now ({late[:3]})"
    else:
        assert not result.problems, (f"{name} exits {result.exit_code}, pinned 0: {result.why_exit}; "
                                     f"learn within the steps: {len(late)} of {len(result.problems)}")
    assert result.exit_code == expected_exit(name, result.step_zeros_fail), result.why_exit
