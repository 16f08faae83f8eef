"""The ``fxflow`` command: runs a parsed command line (:mod:`fxflow.cli_args`), exit codes and error
lines; no analysis logic.

Exit codes: 0 nothing wrong, 1 a parameter will not learn (with ``--baseline``: a problem the
baseline does not know; for ``diff``: NEW has a problem OLD did not), 2 the check could not run.
torch is imported only once a command runs, so ``fxflow --help`` and ``--version`` are instant.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import warnings
from typing import Any, Iterator, Sequence

from .cli_args import DEFAULT_BASELINE, UsageError, build_parser
from .errors import first_line
from .verdicts import ReportStatus

def _check_output_path(path: str) -> None:
    """Fail before any work when ``-o`` cannot be written."""
    from .errors import FxflowError

    if path == "-":
        return
    if os.path.isdir(path):
        raise FxflowError(f"cannot write {path}: it is a folder", hint="give a file name such as flow.svg")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FxflowError(f"cannot write {path}: folder {os.path.dirname(path) or '.'} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise FxflowError(f"cannot write {path}: permission denied")


@contextlib.contextmanager
def _quiet_torch(debug: bool) -> Iterator[list[warnings.WarningMessage]]:
    """While the check runs: the user's prints go to stderr (stdout carries only the report),
    warnings are collected (shown after a successful check), and torch's fake-tensor logger,
    which logs a traceback for every op that fails on fake tensors, stays silent unless --debug."""
    fake_logger = logging.getLogger("torch._subclasses.fake_tensor")
    silence = _Silence()
    if not debug:  # a filter, not a level: importing torch resets the levels of its loggers
        fake_logger.addFilter(silence)
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("default")
            yield caught
    finally:
        fake_logger.removeFilter(silence)


class _Silence(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


def _emit(text: str) -> None:
    """Print the report; a closed pipe (``fxflow check ... | head``) is not an error."""
    try:
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again


def _run(options: argparse.Namespace) -> int:
    from .errors import FxflowError

    if options.command == "render":
        _check_output_path(options.output)
    if options.vanishing <= 0:
        raise FxflowError("--vanishing must be a positive factor such as 1e-3")
    if options.steps < 1:
        raise FxflowError(f"--steps must be at least 1, not {options.steps}")
    with warnings.catch_warnings():
        # torch's import-time notice when NumPy is absent says nothing about the model
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        import torch  # noqa: F401
    if options.command == "diff":
        return _diff(options)
    with _quiet_torch(options.debug) as caught:
        report, dot = _analyse(options)
    for warning in caught:
        print(f"fxflow: warning: {first_line(warning.message)}", file=sys.stderr)
    _check_allow_patterns(options, report)
    if options.command == "render":
        if dot is not None:
            _emit(dot)
        print(report.summary(), file=sys.stderr)
        return _render_exit(options, report)
    return _show_check(options, report)


def _show_check(options: argparse.Namespace, report: Any) -> int:
    """Print the check's report in the chosen format; the exit code (a baseline decides it when given)."""
    from .present import baseline

    if options.write_baseline:
        path = options.baseline or DEFAULT_BASELINE
        count = baseline.write(path, report)
        print(f"fxflow: recorded {count} problem{'s' if count != 1 else ''} of {report.target} in {path}",
              file=sys.stderr)
        comparison = baseline.compare(report, path)
    else:
        comparison = baseline.compare(report, options.baseline) if options.baseline else None
    known = comparison.known if comparison is not None else None
    if options.format == "json":
        data = report.to_dict()
        if comparison is not None:
            data["baseline"] = comparison.to_dict()
        _emit(json.dumps(data, indent=2))
    elif options.format == "github":
        from .present.github import github_annotations

        _emit(github_annotations(report, known or ()))
    elif options.format == "sarif":
        from .present.sarif import sarif_json

        _emit(sarif_json(report, known))
    else:
        from .present.terminal import Terminal

        terminal = Terminal(color=not options.no_color, quiet=options.quiet, all_rows=options.all_rows,
                            debug=options.debug)
        try:
            terminal.show(report)
            if comparison is not None:
                _emit(comparison.summary())
        except BrokenPipeError:
            _emit("")
    if comparison is not None and report.status != ReportStatus.NOT_VERIFIED:
        return 0 if comparison.ok else 1
    return _exit_code(options, report)


def _check_allow_patterns(options: argparse.Namespace, report: Any) -> None:
    """An --allow pattern that matches no parameter is most likely a typo: say so (an error with --strict)."""
    from .errors import FxflowError
    from .reconcile import matches

    for pattern in options.allow:
        if any(matches(p.name, [pattern]) for p in report.parameters):
            continue
        example = report.parameters[0].name if report.parameters else None
        hint = f"parameter names look like {example}" if example else "the model has no parameters"
        if options.strict:
            raise FxflowError(f"--allow {pattern!r} matches no parameter", hint=hint)
        print(f"fxflow: warning: --allow {pattern!r} matches no parameter ({hint})", file=sys.stderr)


def _diff(options: argparse.Namespace) -> int:
    from .present.diff import diff_reports, load_report, render_diff

    def check_target(target: str) -> Any:
        with _quiet_torch(options.debug) as caught:
            report = _check_target(target, options, lambda message: None)
        for warning in caught:
            print(f"fxflow: warning: {first_line(warning.message)}", file=sys.stderr)
        return report

    result = diff_reports(load_report(options.old, check_target), load_report(options.new, check_target))
    _emit(json.dumps(result.to_dict(), indent=2) if options.format == "json" else render_diff(result))
    return 1 if result.worse else 0


def _check_target(target: str, options: argparse.Namespace, step: Any) -> Any:
    """Load one target and check it with the command line's options; returns the Report."""
    import torch

    from .core.package_way import entry_files
    from .prepare.inputs import check_input_count
    from .prepare.load import load_function, load_target
    from .pipeline import check

    loss_fn = load_function(options.loss) if options.loss else None
    torch.manual_seed(options.seed)
    step("loading the target")
    loaded = load_target(target, args=options.arg, input_sizes=options.input_size,
                         device=options.device, seed=options.seed)
    if isinstance(loaded.inputs, tuple):
        check_input_count(loaded.model, loaded.inputs)
    with entry_files(loaded.file):  # a factory that set a package's cut up is not on the stack at the cut
        report = check(loaded.model, loaded.inputs, loss_fn=loss_fn, backward=not options.no_backward,
                       allow=options.allow, steps=options.steps,
                       batches=loaded.batches if options.steps > 1 else None, vanishing=options.vanishing,
                       seed=options.seed, target=loaded.target or target, progress=step, infer=False)
    report.notes[:0] = loaded.notes
    return report


def _analyse(options: argparse.Namespace) -> tuple[Any, str | None]:
    """Load the target, run the check, and render when asked; returns the report and DOT for ``-o -``."""
    from .present.terminal import Terminal

    dot = None
    with Terminal(quiet=options.quiet).progress() as step:
        report = _check_target(options.target, options, step)
        if options.command == "render":
            step("rendering")
            dot = _render(options, report)
    return report, dot


def _render(options: argparse.Namespace, report: Any) -> str | None:
    """Draw the picture ``render`` asks for; returns the DOT when it goes to stdout."""
    choices = dict(depth=options.depth, focus=options.focus, show_all=options.show_all, announce=not options.quiet)
    if options.output == "-" and options.format in (None, "dot"):
        return report.to_dot(**choices)
    report.render(options.output, format=options.format, scale=options.scale, **choices)
    return None


def _render_exit(options: argparse.Namespace, report: Any) -> int:
    """0 once the picture is written; with --strict, check's exit code (and 2 for structure only)."""
    return _exit_code(options, report) if options.strict else 0


def _exit_code(options: argparse.Namespace, report: Any) -> int:
    """The report's exit code; with --strict, a meta run's "structure verified" is not enough (2)."""
    if options.strict and report.status == ReportStatus.STRUCTURE_VERIFIED:
        return 2
    return report.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        options = parser.parse_args(argv)
        if options.command is None:
            parser.print_help()
            return 2
        return _run(options)
    except UsageError as error:
        print(f"fxflow: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fxflow: interrupted", file=sys.stderr)
        return 2
    except Exception as error:
        if debug:  # --debug only adds the traceback: the exit code stays 2, "the check could not run"
            import traceback

            traceback.print_exc()
        from .errors import FxflowError

        if isinstance(error, FxflowError):
            hint = f" ({error.hint})" if error.hint else ""
            print(f"fxflow: error: {_completed(first_line(error.message), error.__cause__)}{hint}", file=sys.stderr)
        else:
            print(f"fxflow: error: {_error_text(error)} (rerun with --debug for the traceback)", file=sys.stderr)
        return 2


def _error_text(error: BaseException) -> str:
    """``Type: message`` for an error fxflow did not word itself."""
    return _completed(f"{type(error).__name__}: {first_line(error)}", error)


def _completed(line: str, cause: BaseException | None) -> str:
    """``line``, unless it ends where the cause's empty message should be (``raise NotImplementedError``
    words to ``"NotImplementedError: "``): then it says where the cause was raised instead."""
    import traceback

    if not line.rstrip().endswith(":") or cause is None or first_line(cause):
        return line
    frames = traceback.extract_tb(cause.__traceback__)
    where = f", in {frames[-1].name} at {_short_path(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    return f"{line.rstrip().rstrip(':')} with no message{where}"


def _short_path(filename: str) -> str:
    """Relative to the working folder when under it, else as it is."""
    with contextlib.suppress(ValueError):  # another drive on Windows
        relative = os.path.relpath(filename)
        if not relative.startswith(".."):
            return relative
    return filename


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
