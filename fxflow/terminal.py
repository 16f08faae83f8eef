"""Terminal output: the report as text (colored when stdout is a terminal), progress on stderr."""
from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Callable, Iterator

from .report import Report
from .text import render_text, summary_line


class Terminal:
    """Where ``fxflow check`` writes: plain when piped, ``--no-color`` or ``NO_COLOR``."""

    def __init__(self, color: bool = True, quiet: bool = False) -> None:
        self.quiet = quiet
        self.color = color and sys.stdout.isatty() and "NO_COLOR" not in os.environ

    @contextlib.contextmanager
    def progress(self) -> Iterator[Callable[[str], None]]:
        """A step reporter: on a terminal, each step that takes a moment shows on stderr."""
        interactive = sys.stderr.isatty() and not self.quiet
        started = time.perf_counter()

        def step(message: str) -> None:
            if interactive:
                sys.stderr.write(f"\r\033[K{message}...")
                sys.stderr.flush()

        try:
            yield step
        finally:
            if interactive:
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()
            del started

    def show(self, report: Report) -> None:
        if self.quiet:
            print(summary_line(report))
        else:
            print(render_text(report))
