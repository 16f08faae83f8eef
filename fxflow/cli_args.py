"""The ``fxflow`` command's arguments: subcommands, options, help texts and exit-code epilogues.

Kept apart from :mod:`fxflow.cli`, which runs a parsed command, so the two read on their own.
"""
from __future__ import annotations

import argparse
from typing import Any

from . import __version__
from .present.text import FOLD_ROWS

EXIT_CODES = """exit codes:
  0  a real backward reached every trainable parameter (or --no-backward or --device meta found nothing wrong)
  1  a parameter will not learn, or loss.backward() raises (with --baseline: a problem it does not know)
  2  the check could not run (one line on stderr says why), or no backward ran: not verified
     (--strict: also a --device meta run, which verifies the structure only)
"""
EXAMPLES = """examples:
  fxflow check examples/seed.py:Net
  fxflow check model.py:Net --input-size 16,10 --json
  fxflow check model.py:build --arg hidden=64 --input-size 2,7:long
  fxflow check model.py:Net --allow 'target_net.*'      # deliberate dryness passes CI
  fxflow check model.py:Net --all                       # every row, however many parameters
  fxflow render model.py:Net -o flow.svg

""" + EXIT_CODES


DIFF_EXAMPLES = """examples:
  fxflow check model.py:Net --json > before.json   # on the main branch
  fxflow diff before.json model.py:Net             # after the change: exit 1 if something stopped learning

exit codes:
  0  nothing stopped learning
  1  NEW has a problem OLD did not
  2  a report could not be read or a target could not be checked
"""

FORMATS = ("text", "json", "github", "sarif")
DEFAULT_BASELINE = "fxflow-baseline.json"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        raise UsageError(f"{message} (see '{self.prog} --help')")


class UsageError(Exception):
    """A command line argparse refuses: one line and exit 2, not argparse's usage block."""


# --strict in each command's own words
STRICT_HELP = {
    "check": "an --allow pattern that matches no parameter is an error; a --device meta run, which verifies "
             "structure only, exits 2 (not verified) instead of 0",
    "render": "exit codes as check (1 when a parameter will not learn); an --allow pattern that matches no "
              "parameter is an error",
    "diff": "an --allow pattern that matches no parameter is an error",
}


def _add_common(parser: argparse.ArgumentParser, command: str) -> None:
    parser.add_argument("target", help="path/to/file.py[:Name] or package.module:Name (Name found when the file has one model)")
    _add_check_options(parser, command)


def _add_check_options(parser: argparse.ArgumentParser, command: str) -> None:
    """How a target is built and checked: shared by check, render and diff (``command``: whose help)."""
    parser.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                        help="constructor argument (a Python literal); repeatable")
    parser.add_argument("--input-size", action="append", default=[], metavar="SIZES[:DTYPE]",
                        help="one per forward input, e.g. 16,10 or 2,7:long; repeatable")
    parser.add_argument("--allow", action="append", default=[], metavar="GLOB",
                        help="parameters allowed to be dry (e.g. 'target_net.*'); repeatable")
    parser.add_argument("--strict", action="store_true", help=STRICT_HELP[command])
    parser.add_argument("--seed", type=int, default=0, help="torch seed for the model and inputs (default 0)")
    parser.add_argument("--vanishing", type=float, default=1e-3, metavar="FACTOR",
                        help="gradient RMS below FACTOR x the largest is vanishing (default 1e-3)")
    parser.add_argument("--loss", metavar="FILE.py:FUNCTION",
                        help="the loss to differentiate: FUNCTION(output, inputs) returns a scalar (default: the "
                             "model's own `loss` output, else a random projection of all outputs)")
    parser.add_argument("--steps", type=int, default=1, metavar="N",
                        help="N forward/backward steps on fresh inputs (or example_batches() from the model's "
                             "file): per parameter, how many had a gradient (default 1)")
    parser.add_argument("--no-backward", action="store_true", help="static analysis only")
    parser.add_argument("--device", default=None, help="build/move the model there (cpu, cuda, meta)")
    parser.add_argument("--no-color", action="store_true", help="plain text even on a terminal")
    parser.add_argument("--quiet", "-q", action="store_true", help="print only the summary line")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fxflow", description="Which parameters will never learn, and which line of forward cut them off.",
                     epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"fxflow {__version__}")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="{check,render,diff}")
    check = commands.add_parser("check", help="table, JSON and exit code", epilog=EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common(check, "check")
    check.add_argument("--format", choices=FORMATS, default="text",
                       help="text (default), json, github (workflow annotations) or sarif (code scanning)")
    check.add_argument("--all", action="store_true", dest="all_rows",
                       help=f"list every parameter (above {FOLD_ROWS} the table lists those with a problem "
                            "and one line for the rest)")
    check.add_argument("--json", action="store_const", dest="format", const="json", help="the same as --format json")
    check.add_argument("--baseline", metavar="FILE", help="fail only on problems not recorded in FILE")
    check.add_argument("--write-baseline", action="store_true",
                       help=f"record the current problems in the --baseline FILE (default {DEFAULT_BASELINE}); exit 0, "
                            "unless loss.backward() raises, which no baseline accepts")
    diff = commands.add_parser("diff", help="what changed in gradient flow between two reports or targets",
                               epilog=DIFF_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    diff.add_argument("old", help="a JSON report (fxflow check --json) or a target")
    diff.add_argument("new", help="a JSON report or a target")
    diff.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
    _add_check_options(diff, "diff")
    _add_render(commands)
    return parser


RENDER_EXAMPLES = """examples:
  fxflow render examples/seed.py:Net -o flow.svg && xdg-open flow.svg
  fxflow render model.py:Net -o report.html         # interactive: search, zoom, table, expand modules
  fxflow render model.py:Net -o flow.png --scale 3  # a sharper PNG (default --scale 2)
  fxflow render model.py:Net -o flow.svg --focus    # only the cuts and the paths through them
  fxflow render model.py:Net -o flow.svg --depth 1  # modules below the top level as one box each
  fxflow render model.py:Net -o flow.svg --all      # also the int/bool/mask nodes hidden by default
  fxflow render model.py:Net -o flow.svg --strict   # exit 1 when a parameter will not learn, as check

exit codes:
  0  the picture is written (with --strict: as check, 1 when a parameter will not learn)
  2  the picture could not be made (one line on stderr says why)
`fxflow check` (or --strict) is the gate.
"""


def _add_render(commands: Any) -> None:
    """The ``render`` subcommand's arguments."""
    render = commands.add_parser("render", help="draw the colored gradient-flow diagram", epilog=RENDER_EXAMPLES,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common(render, "render")
    render.add_argument("-o", "--output", required=True,
                        help="file to write (.svg .png .pdf .dot .html), or - for DOT on stdout")
    render.add_argument("--format", choices=("svg", "png", "pdf", "dot", "html"), help="overrides the extension")
    render.add_argument("--depth", type=int, default=None, help="collapse modules deeper than N")
    render.add_argument("--focus", action="store_true", help="only cuts, dry parameters and their paths")
    render.add_argument("--all", action="store_true", dest="show_all",
                        help="also draw the nodes that carry no gradient (ints, bools, masks, shapes)")
    render.add_argument("--scale", type=float, default=None, help="PNG pixels per point (default 2)")
