"""The view options every output format goes through: :func:`checked_view` checks them, builds the
view and prints the one stderr line that says what an automatic choice left out."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..errors import FxflowError
from .layout import NODE_BUDGET, View, build_view
from .view import counted

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report


def checked_view(report: "Report", *, depth: int | None = None, focus: bool = False, budget: int = NODE_BUDGET,
                 fold: bool = True, announce: bool = True, show_all: bool = False, automatic: bool = True) -> View:
    """:func:`build_view` after checking the options, announcing an automatic choice on stderr."""
    if depth is not None and depth < 0:
        raise FxflowError(f"--depth must be 0 or more, not {depth}")
    view = build_view(report, depth=depth, focus=focus, budget=budget, fold=fold, show_all=show_all,
                      automatic=automatic)
    if announce:
        _announce(view, focus)
    return view


ANNOUNCED = 12  # collapsed boxes named on the stderr line; the rest are counted


def _announce(view: View, focus: bool) -> None:
    """One stderr line when the picture is not all there was: what was collapsed automatically
    (suggesting only the options not already given)."""
    if not view.auto_depth:
        return
    named = ", ".join(view.collapsed[:ANNOUNCED])
    more = f" and {len(view.collapsed) - ANNOUNCED} more" if len(view.collapsed) > ANNOUNCED else ""
    print(f"fxflow: note: {counted(view.total, 'node')}: collapsed automatically to {counted(view.count(), 'box', 'boxes')}: "
          f"{named or 'runs of like ops'}{more} ({'pass --depth N' if focus else 'pass --depth N or --focus'} to choose)",
          file=sys.stderr)
