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
