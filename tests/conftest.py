"""Shared test helpers.

Fixtures:

* ``run_fxflow(*args, cwd=None, env=None, module=True)`` runs the real command in a process of its
  own (``python -m fxflow ARGS``, forked from a :class:`Zygote` that imported torch already; or the
  ``fxflow`` console script in a fresh interpreter with ``module=False``) and returns
  ``(exit code, stdout, stderr)``.
* ``write_model(tmp_path, source, name="model.py")`` writes a model file (source is dedented) and
  returns its path; use ``f"{path}:Net"`` as the CLI target.
* ``TARGETS`` is the folder of small model files used as CLI targets (``tests/targets``).
"""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Callable

import pytest

# A pytest-xdist worker is one process per core: torch's own thread pool on top of that
# oversubscribes the cores, and OpenMP's spinning threads then burn more CPU than the tests do
# (vision models took ten times as long). OpenMP reads this once, when torch is first imported:
# so it is set before any import below that imports torch. Runs forked or started from here
# inherit it.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import cli_client  # noqa: E402
from zoo.vision_ops import define_nms_if_missing  # noqa: E402

# torchvision's wheel may be built for another torch than the one installed (CPU torch 2.13 with
# the index's CUDA torchvision): its C extension then fails to load and every `import torchvision`,
# which transformers and timm make, fails. One op in Python lets it import (tests only).
define_nms_if_missing()

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


# Variables the interpreter reads only as it starts: runs that set one get a zygote of their own,
# and PYTHONPROFILEIMPORTTIME (which times the imports a zygote did long ago) a fresh interpreter.
STARTUP_ENV = frozenset({"PYTHONHASHSEED", "PYTHONPATH", "PYTHONWARNINGS", "PYTHONUNBUFFERED",
                         "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES"})
FRESH_ENV = frozenset({"PYTHONPROFILEIMPORTTIME"})
# FXFLOW_TESTS_FORK=0 runs every CLI test in a fresh interpreter, as before the zygotes
FORK = os.name == "posix" and os.environ.get("FXFLOW_TESTS_FORK", "1") != "0"


class Zygote:
    """A ``tests/cli_zygote.py`` of this test process: ``python -m fxflow`` runs forked from it pay
    for ``import torch`` once per zygote instead of once per run. ``startup`` is its environment."""

    def __init__(self, startup: dict[str, str]) -> None:
        self.folder = tempfile.mkdtemp(prefix="fxflow-zygote-")
        self.socket = os.path.join(self.folder, "socket")
        with open(os.path.join(self.folder, "log"), "w") as log:
            self.process = subprocess.Popen([sys.executable, str(Path(__file__).with_name("cli_zygote.py")), self.socket],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                            cwd=ROOT, env=startup)
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"tests/cli_zygote.py did not start: see {self.folder}/log")

    def run(self, args: tuple[str, ...], cwd: Path, env: dict[str, str], timeout: float) -> Result:
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
                open(os.devnull) as nothing:
            try:
                _, code = cli_client.run(self.socket, list(args), str(cwd), env,
                                         [nothing.fileno(), out.fileno(), err.fileno()], timeout)
            except TimeoutError:
                raise subprocess.TimeoutExpired(["fxflow", *args], timeout) from None
            out.seek(0)
            err.seek(0)
            return code, out.read(), err.read()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)


_zygotes: dict[frozenset, Zygote] = {}


def zygote(startup: dict[str, str]) -> Zygote:
    """The zygote of this test process for the startup variables in ``startup``."""
    key = frozenset((k, v) for k, v in startup.items() if k in STARTUP_ENV)
    if key not in _zygotes:
        _zygotes[key] = Zygote(startup)
        atexit.register(_zygotes[key].close)
    return _zygotes[key]


def run_fxflow_process(*args: str, cwd: str | os.PathLike | None = None,
                       env: dict[str, str | None] | None = None, module: bool = True,
                       timeout: float = 600) -> Result:
    """Run fxflow in a process of its own; ``env`` entries set to None are removed from the environment.

    ``python -m fxflow`` runs are forked from a :class:`Zygote` that has imported torch already (on
    POSIX); ``module=False`` runs the installed ``fxflow`` console script in a fresh interpreter."""
    full_env = _env(env)
    if module and FORK and not set(env or ()) & FRESH_ENV:
        return zygote(full_env).run(args, Path(cwd or ROOT).resolve(), full_env, timeout)
    if module:
        command = [sys.executable, "-m", "fxflow", *args]
    else:
        script = shutil.which("fxflow")
        if script is None:
            pytest.skip("the fxflow console script is not installed")
        command = [script, *args]
    done = subprocess.run(command, cwd=cwd or ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout)
    return done.returncode, done.stdout, done.stderr


def fxflow_completed(*args: str, cwd: str | os.PathLike | None = None,
                     env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess:
    """:func:`run_fxflow_process`, answered as ``subprocess.run`` answers."""
    code, out, err = run_fxflow_process(*args, cwd=cwd, env=env)
    return subprocess.CompletedProcess(["fxflow", *args], code, out, err)


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


# A skip can hide a regression (a capture path that stopped working, a renderer that cannot run):
# the suite fails when more tests skip than tests/skip_budget.txt allows. Lower the number when
# skips go away; raise it only with a reason in that file.
SKIP_BUDGET = Path(__file__).resolve().parent / "skip_budget.txt"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller counts for all
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter is not None else 0
    budget = int(SKIP_BUDGET.read_text().split()[0])
    if skipped > budget:
        reporter.write_line("")
        reporter.write_line(f"fxflow: {skipped} tests skipped, more than the {budget} that {SKIP_BUDGET.name} "
                            "allows: a skip can hide a regression (run with -rs to see why each skipped)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
