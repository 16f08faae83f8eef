"""How the reports say things: numbers, name lists, verdict counts and sentences, for every presenter."""
from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from ..verdicts import FAILING_DYNAMIC, FAILING_STATIC, OptimizerVerdict, StaticVerdict as Static

if TYPE_CHECKING:  # pragma: no cover - the report imports the presenters to present itself
    from ..diagnose.nonfinite import NonfiniteSite
    from ..report import ParameterReport


def format_norm(norm: float | None) -> str:
    """A gradient norm with its magnitude visible: ``7.038``, ``0.1841``, ``1.2e-25``; ``-`` for none.

    Four significant digits (``%.4g``), so a vanishing ``1.2e-25`` never prints as ``0.000000``,
    which would read as an exactly zero gradient.
    """
    if norm is None:
        return "-"
    if not math.isfinite(norm):
        return str(norm)  # nan, inf
    return f"{norm:.4g}"


def name_list(names: list[str], limit: int = 6) -> str:
    """``a, b, c``; past ``limit`` names, the first ones and ``and N more``."""
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f" and {len(names) - limit} more"


def fraction(ratio: float) -> str:
    """0.0025 -> ``1/400``; 2.9e-7 -> ``1/3.4e+06``: two significant digits."""
    denominator = float(f"{1 / ratio:.2g}")
    return f"1/{denominator:.0f}" if denominator < 1e5 else f"1/{denominator:.1e}"


def verdict_of(parameter: ParameterReport) -> str:
    """The one word that says what is wrong (or right) with a parameter: the static verdict,
    unless the graph says reachable, then what the real backward found; "not optimized" when the
    gradient is fine but no optimizer group applies it."""
    word = parameter.dynamic if parameter.static == Static.REACHABLE and parameter.dynamic else parameter.static
    if parameter.optimizer == OptimizerVerdict.NOT_OPTIMIZED and word not in FAILING_STATIC | FAILING_DYNAMIC:
        return OptimizerVerdict.NOT_OPTIMIZED  # the gradient arrives; no optimizer group applies it
    return word


# How the summary's tally says a verdict where the bare word would not read: a zero, static or
# dynamic alike (the two members are the same string).
KIND_WORDS = {Static.ZERO: "with an exactly zero gradient"}


def tally(parameters: list[ParameterReport], words: dict[str, str] = KIND_WORDS) -> str:
    """``4 cut, 1 unused``: counts per verdict, in a stable order."""
    kinds: dict[str, int] = {}
    for parameter in parameters:
        kinds[verdict_of(parameter)] = kinds.get(verdict_of(parameter), 0) + 1
    return ", ".join(f"{n} {words.get(kind, kind)}" for kind, n in sorted(kinds.items()))


_SENTENCE_START = re.compile(r"(?<=\.\s)([a-z])")  # a lowercase letter that opens a sentence


def sentences(text: str) -> str:
    """Each sentence of a reason starts with a capital, as a reader expects (joined parts may not);
    text inside backticks is code and is left alone."""
    parts = text.split("`")
    parts[::2] = [_SENTENCE_START.sub(lambda found: found[1].upper(), part) for part in parts[::2]]
    return "`".join(parts)


def nonfinite_sentence(site: "NonfiniteSite") -> str:
    """Where a NaN or inf was born, in one sentence (the text report and the CI findings say it alike)."""
    where = f" @ {site.source}" if site.source else ""
    module = f" in {site.module}" if site.module else ""
    made = "in the forward" if site.phase == "forward" else "in the backward"
    return f"a non-finite value is born {made} at {site.op}{where}{module}: {site.reason}"
