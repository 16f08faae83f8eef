"""Terminal output: a rich colored table on a terminal, the plain text of :mod:`fxflow.present.text` otherwise.

Plain text wraps at ``COLUMNS``, else the terminal's width, else (piped) at :data:`PIPED_WIDTH`,
so that what a pipe, a log and the README show is what a terminal shows.
Color is used only when stdout is a terminal, ``--no-color`` was not given and ``NO_COLOR`` is
unset or empty (https://no-color.org). The words never change with the color: the cells come
from :func:`fxflow.present.text.table_rows`, the paragraphs from :func:`fxflow.present.text.cut_paragraphs`,
the last line from :func:`fxflow.present.summary.summary_line`. Progress goes to stderr, only when stderr
is a terminal and ``--quiet`` was not given, and disappears when the step is done.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
from typing import TYPE_CHECKING, Callable, Iterator, TextIO

from ..verdicts import DynamicVerdict as Dynamic, ReportStatus, StaticVerdict as Static
from .summary import summary_line
from .text import COLUMNS, cut_paragraphs, render_text, shown_notes, shown_parameters, table_rows, wrap_paragraph

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from ..report import Report

# Verdict -> rich style. Wet is green, dry red, zero orange, frozen/unused dim, disagreement magenta.
# Static.ZERO is Dynamic.ZERO (the same string): one entry colors both columns.
STYLES = {
    Static.REACHABLE: "green", Dynamic.OK: "green", Dynamic.PRESENT: "green",
    Static.CUT: "bold red", Dynamic.MISSING: "red", Dynamic.NONFINITE: "bold red",
    Static.ZERO: "dark_orange", Dynamic.VANISHING: "yellow",
    Static.UNUSED: "red dim", Static.FROZEN: "dim",
}
# The summary line's color by the report's status (yellow for not verified).
STATUS_STYLES = {ReportStatus.OK: "bold green", ReportStatus.PROBLEM: "bold red"}


def color_wanted(stream: TextIO, requested: bool = True) -> bool:
    """Color only on a terminal, and never with ``--no-color`` or a non-empty ``NO_COLOR``."""
    if not requested or os.environ.get("NO_COLOR"):
        return False
    return _isatty(stream)


def _style(cell: str) -> str:
    return STYLES.get(cell.split(" ", 1)[0], "")


def rich_report(report: "Report", console: "Console", all_rows: bool = False, debug: bool = False) -> None:
    """Print the report on a rich console: colored verdicts, the same words as the plain text."""
    from rich.table import Table
    from rich.text import Text

    console.print(Text.assemble(("fxflow check ", "bold"), (report.target, "bold cyan"),
                                f"  [trace: {report.trace.method}, {report.trace.nodes} nodes]"))
    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    parameters, folded = shown_parameters(report, all_rows)
    if parameters or folded:
        console.print()
    rows = table_rows(report, parameters)
    longest_site = max((len(site) for row in rows for site in row[-1].split(", ")), default=0)
    for index, column in enumerate(COLUMNS):  # a cut-by cell wraps between its sites, never inside one
        table.add_column(column, justify="right" if index == 4 else "left", no_wrap=index < 5,
                         min_width=longest_site if index == 5 else None)
    for row in rows:
        name, shape, static, dynamic, norm, cut = row
        cut_text = Text(cut)
        if cut.endswith("[disagree]"):
            cut_text.stylize("bold magenta", len(cut) - len("[disagree]"))
        table.add_row(name, shape, Text(static, _style(static)), Text(dynamic, _style(dynamic)), norm, cut_text)
    if parameters:  # no header over no rows
        console.print(table)
    if folded:
        console.print(Text(folded, "dim"), highlight=False)
    paragraphs = cut_paragraphs(report)
    if paragraphs:
        console.print()
        for paragraph in paragraphs:  # wrapped as the plain text wraps: the fix line's own indent
            text = Text(wrap_paragraph(paragraph, console.width))
            fix = text.plain.find("\nfix: ")
            if fix >= 0:
                text.stylize("bold green", fix + 1, fix + 5)
            console.print(text, highlight=False)
    notes = shown_notes(report, debug)
    if notes or report.loss:
        console.print()
        if report.loss:
            console.print(Text.assemble(("loss: ", "dim"), report.loss), highlight=False)
        for note in notes:
            console.print(Text.assemble(("note: ", "dim"), note), highlight=False)
    console.print()
    summary = summary_line(report)
    console.print(Text(summary, STATUS_STYLES.get(report.status, "bold yellow")),
                  highlight=False)


class Terminal:
    """Where ``fxflow check`` writes: rich on a terminal; plain when piped, ``--no-color`` or ``NO_COLOR``."""

    def __init__(self, color: bool = True, quiet: bool = False, file: TextIO | None = None,
                 err: TextIO | None = None, all_rows: bool = False, debug: bool = False) -> None:
        self.all_rows = all_rows  # --all: every parameter's row, however many
        self.debug = debug  # --debug: every note, why each failed capture failed too
        self.file = file if file is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.quiet = quiet
        self.color = color_wanted(self.file, color)

    def console(self, width: int | None = None) -> "Console":
        """A rich console writing to this terminal's stdout."""
        from rich.console import Console

        return Console(file=self.file, force_terminal=self.color, no_color=not self.color,
                       width=width, highlight=False, soft_wrap=False)

    @contextlib.contextmanager
    def progress(self) -> Iterator[Callable[[str], None]]:
        """A step reporter: on an interactive stderr, a transient spinner names the current step."""
        if self.quiet or not _isatty(self.err):
            yield lambda message: None
            return
        from rich.console import Console

        console = Console(file=self.err, stderr=True, no_color=bool(os.environ.get("NO_COLOR")))
        status = console.status("starting", spinner="dots")
        status.start()

        def step(message: str) -> None:
            status.update(f"{message}...")

        try:
            yield step
        finally:
            status.stop()

    def show(self, report: "Report") -> None:
        """The report: one summary line with ``--quiet``; the table, paragraphs and summary otherwise."""
        if self.quiet:
            print(summary_line(report), file=self.file)
        elif self.color:
            rich_report(report, self.console(), self.all_rows, self.debug)
        else:
            print(render_text(report, width=plain_width(self.file), all_rows=self.all_rows, debug=self.debug),
                  file=self.file)


PIPED_WIDTH = 100  # the width plain text wraps at when piped with no COLUMNS (the README's samples)


def plain_width(stream: TextIO) -> int:
    """The width plain text wraps at: ``COLUMNS`` when set, else the terminal's, else :data:`PIPED_WIDTH`."""
    columns = os.environ.get("COLUMNS", "")
    if columns.strip().isdigit() and int(columns) > 0:
        return int(columns)
    if _isatty(stream):
        return shutil.get_terminal_size().columns
    return PIPED_WIDTH


def _isatty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
