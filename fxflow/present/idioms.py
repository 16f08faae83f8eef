"""What the user's own line says about a cut, so that the fix line fits the code it is about.

A ``.detach()`` in ``q_st = z + (q - z).detach()`` is already a straight-through estimator: telling
its author to use one would be wrong. A ``.detach()`` that feeds ``.numpy()`` cannot simply be
removed (``.numpy()`` would raise). The cut site knows its op and its ``file:line``; the line's
text, read here, tells these idioms apart.
"""
from __future__ import annotations

import linecache
import re
from dataclasses import dataclass, field

# `a + (b - a).detach()` or `(b - a).detach() + a`: a straight-through estimator, gradient to `a` only
_OPERAND = r"[\w.\[\]]+"
_STRAIGHT_THROUGH = (
    re.compile(rf"(?P<a>{_OPERAND})\s*\+\s*\(\s*(?P<b>{_OPERAND})\s*-\s*(?P=a)\s*\)\s*\.detach\(\)"),
    re.compile(rf"\(\s*(?P<b>{_OPERAND})\s*-\s*(?P<a>{_OPERAND})\s*\)\s*\.detach\(\)\s*\+\s*(?P=a)\b"),
)
_TO_NUMPY = re.compile(r"\.detach\(\)(?:\.\w+\([^()]*\))*\.numpy\(\)")


@dataclass(frozen=True)
class Idiom:
    """A form of the cutting line that changes the fix: its name and the words the fix fills in."""

    name: str  # "straight-through", "numpy-round-trip"
    words: dict[str, str] = field(default_factory=dict)


def freeze_line(path: str, name: str) -> int | None:
    """The line of ``path`` that freezes the parameter ``name`` (``self.lora_B.requires_grad_(False)``,
    ``...lora_B.requires_grad = False``), when one line plainly does."""
    attribute = re.escape(name.rpartition(".")[2])
    pattern = re.compile(rf"\b{attribute}\b[\w.\[\]]*\.requires_grad(?:_\(\s*False\s*\)|\s*=\s*False\b)")
    for number, text in enumerate(linecache.getlines(path), 1):
        if pattern.search(text):
            return number
    return None


def source_text(source: str | None) -> str:
    """The text of ``file:line`` (empty when unreadable)."""
    if not source:
        return ""
    path, _, line = source.rpartition(":")
    return linecache.getline(path, int(line)).strip() if path and line.isdigit() else ""


def detach_idiom(source: str | None) -> Idiom | None:
    """What a ``.detach()`` at ``source`` is there for, when its line says so."""
    text = source_text(source)
    for pattern in _STRAIGHT_THROUGH:
        found = pattern.search(text)
        if found:
            return Idiom("straight-through", {"passes": found["a"], "skips": found["b"]})
    if _TO_NUMPY.search(text):
        return Idiom("numpy-round-trip")
    return None
