"""The one exception fxflow raises for bad input: the CLI prints it as one line and exits 2."""
from __future__ import annotations


class FxflowError(Exception):
    """A check that cannot run, with a message a user can act on."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


def first_line(text: object, limit: int | None = None) -> str:
    """The first non-empty line of a message (an error shown to a user must stay one line)."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    line = lines[0] if lines else ""
    return line if limit is None or len(line) <= limit else line[: limit - 3] + "..."


def describe(error: BaseException, limit: int | None = None) -> str:
    """``TypeName: first line of the message``, for one-line notes about a failure."""
    return first_line(f"{type(error).__name__}: {first_line(error)}".rstrip(": "), limit)
