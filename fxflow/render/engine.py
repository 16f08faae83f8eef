"""Turn DOT text into SVG/PNG/PDF bytes with a Graphviz executable.

Which executable, in this order:

1. ``FXFLOW_DOT``: a path or a command name (``dot``, ``graphviz-pure``); used as given, an error
   when it cannot be found;
2. a system ``dot`` on ``PATH`` (the real Graphviz; the only one that makes PDF);
3. ``graphviz-pure`` (PyPI's self-contained Rust port, a dependency of fxflow) on ``PATH``, or in
   the running interpreter's scripts folder, since a virtual environment's ``bin`` is not always
   on ``PATH``.

The DOT goes in on stdin and the picture comes back on stdout, so a non-zero exit is a failure
whatever the executable left behind. PNG output is capped in size and resolution: unscaled, a
2,000-node graph makes a 72,000-pixel-wide image.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass

from ..errors import FxflowError, first_line

ENV_VAR = "FXFLOW_DOT"
TIMEOUT_ENV_VAR = "FXFLOW_RENDER_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
PURE_NAME = "graphviz-pure"

# PNG: ``scale`` 1 is one pixel per point, as the SVG measures the drawing (72 dpi); never more
# than PNG_MAX_PIXELS on a side: Graphviz scales a bigger drawing down to fit (a 20,000-node
# graph would otherwise make a gigapixel file) and leaves a smaller one alone.
POINTS_PER_INCH = 72
DEFAULT_SCALE = 2.0
PNG_MAX_PIXELS = 8000

FORMATS = ("svg", "png", "pdf")

PDF_FIX = ("install Graphviz (apt install graphviz, brew install graphviz, conda install graphviz) "
           f"or point {ENV_VAR} at its dot, or write .svg or .png instead")


@dataclass(frozen=True)
class Engine:
    """A Graphviz executable fxflow can run."""

    path: str
    system_dot: bool  # the real Graphviz (does PDF); False for graphviz-pure

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def _scripts_dirs() -> list[str]:
    folders = []
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        if folder and folder not in folders:
            folders.append(folder)
    return folders


def _is_system_dot(path: str) -> bool:
    stem = os.path.splitext(os.path.basename(path))[0].lower()
    return stem == "dot"


def _which_pure() -> str | None:
    found = shutil.which(PURE_NAME)
    if found:
        return found
    for folder in _scripts_dirs():
        for name in (PURE_NAME, PURE_NAME + ".exe"):
            candidate = os.path.join(folder, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return None


def find_engine() -> Engine:
    """The executable to render with (see the module docstring for the order)."""
    override = os.environ.get(ENV_VAR, "").strip()
    if override:
        found = shutil.which(override) or (override if os.path.isfile(override) and os.access(override, os.X_OK) else None)
        if found is None and os.path.basename(override) == PURE_NAME:
            found = _which_pure()
        if found is None:
            raise FxflowError(f"{ENV_VAR}={override} is not an executable",
                              hint=f"unset {ENV_VAR} or point it at Graphviz's dot or {PURE_NAME}")
        return Engine(found, _is_system_dot(found))
    dot = shutil.which("dot")
    if dot:
        return Engine(dot, True)
    pure = _which_pure()
    if pure:
        return Engine(pure, False)
    raise FxflowError("no Graphviz renderer found: neither dot nor graphviz-pure is installed",
                      hint="pip install graphviz-pure, or install Graphviz; `-o file.dot` needs neither")


def _timeout() -> float:
    try:
        return float(os.environ.get(TIMEOUT_ENV_VAR, DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def command(engine: Engine, format: str, scale: float = DEFAULT_SCALE) -> list[str]:
    """The command line that renders DOT on stdin to ``format`` on stdout."""
    arguments = [engine.path, f"-T{format}"]
    if format == "png":
        dpi = POINTS_PER_INCH * scale
        inches = PNG_MAX_PIXELS / dpi
        arguments += [f"-Gdpi={dpi:g}", f"-Gsize={inches:.4f},{inches:.4f}"]
    return arguments


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height in pixels of PNG bytes (from the IHDR chunk)."""
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def run(dot_source: str, format: str, engine: Engine | None = None, scale: float = DEFAULT_SCALE) -> bytes:
    """Render DOT text to ``format`` (svg, png, pdf) and return the bytes; ``scale`` sizes a PNG."""
    if not (0 < scale <= 16):
        raise FxflowError(f"--scale must be above 0 and at most 16, not {scale:g}")
    if format not in FORMATS:
        raise FxflowError(f"cannot render format {format!r}", hint="use svg, png, pdf or dot")
    engine = engine or find_engine()
    if format == "pdf" and not engine.system_dot:
        raise FxflowError(f"PDF needs Graphviz's dot, and only {engine.name} is installed", hint=PDF_FIX)
    try:
        completed = subprocess.run(command(engine, format, scale), input=dot_source.encode("utf-8"),
                                   capture_output=True, timeout=_timeout(), check=False)
    except subprocess.TimeoutExpired as error:
        raise FxflowError(f"{engine.name} took longer than {error.timeout:.0f}s to draw the graph",
                          hint=f"use --depth or --focus for a smaller picture, or raise {TIMEOUT_ENV_VAR}") from error
    except OSError as error:
        raise FxflowError(f"cannot run {engine.path}: {error.strerror or error}") from error
    if completed.returncode != 0:
        message = first_line(completed.stderr.decode("utf-8", "replace"))
        raise FxflowError(f"{engine.name} failed (exit {completed.returncode}) drawing {format}: {message or 'no message'}")
    if not completed.stdout:
        raise FxflowError(f"{engine.name} produced no {format} output")
    return completed.stdout

