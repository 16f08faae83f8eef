"""Shared test helpers.

Fixtures:

* ``run_fxflow(*args, cwd=None, env=None, module=True)`` runs the real command in a subprocess
  (``python -m fxflow ARGS``, or the ``fxflow`` console script with ``module=False``) and returns
  ``(exit code, stdout, stderr)``.
* ``write_model(tmp_path, source, name="model.py")`` writes a model file (source is dedented) and
  returns its path; use ``f"{path}:Net"`` as the CLI target.
* ``TARGETS`` is the folder of small model files used as CLI targets (``tests/targets``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable

import pytest

# pytest-xdist workers export COLUMNS=80 (and LINES): a model's text report must not wrap
# differently under -n than in a plain run, so tests start from no width at all.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

ROOT = Path(__file__).resolve().parent.parent
TARGETS = Path(__file__).resolve().parent / "targets"

Result = tuple[int, str, str]


def _env(extra: dict[str, str | None] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"NO_COLOR": "1", "COLUMNS": "200"})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_fxflow_process(*args: str, cwd: str | os.PathLike | None = None,
                       env: dict[str, str | None] | None = None, module: bool = True,
                       timeout: float = 600) -> Result:
    """Run fxflow in a subprocess; ``env`` entries set to None are removed from the environment."""
    if module:
        command = [sys.executable, "-m", "fxflow", *args]
    else:
        script = shutil.which("fxflow")
        if script is None:
            pytest.skip("the fxflow console script is not installed")
        command = [script, *args]
    done = subprocess.run(command, cwd=cwd or ROOT, env=_env(env), capture_output=True, text=True,
                          timeout=timeout)
    return done.returncode, done.stdout, done.stderr


def write_model_file(tmp_path: Path, source: str, name: str = "model.py") -> Path:
    """Write ``source`` (dedented) to ``tmp_path / name`` and return the path."""
    path = Path(tmp_path) / name
    path.write_text(textwrap.dedent(source).lstrip())
    return path


@pytest.fixture
def run_fxflow() -> Callable[..., Result]:
    return run_fxflow_process


@pytest.fixture
def write_model() -> Callable[..., Path]:
    return write_model_file
