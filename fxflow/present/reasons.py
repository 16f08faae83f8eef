"""The words of the reason codes: what was observed about a row (a :class:`~fxflow.verdicts.ZeroReason`,
an :class:`~fxflow.verdicts.UnregisteredReason`), said the same way by every face (text, JSON's
``diagnosis``, HTML, DOT, pytest messages). Each reason says only what was seen: which steps ran,
which weights stayed zero, where the tensor is kept.

The Report stores the codes and the facts they speak of (``held_by``, ``learns_from_step``,
``later_steps``); :func:`diagnosis` puts them in words after the row's ``finding``, and
:mod:`fxflow.presenters` registers it so that ``ParameterReport.diagnosis`` and the JSON read it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..verdicts import UnregisteredReason, ZeroReason
from .words import sentences

if TYPE_CHECKING:  # pragma: no cover - the report imports the presenters to present itself
    from ..report import ParameterReport

ROUNDED = ("zero up to rounding: its gradient is round-off, tiny next to the largest and collapsing by orders "
           "of magnitude when the same step runs in float64, so it is zero in exact arithmetic")


def diagnosis(parameter: "ParameterReport") -> str | None:
    """The row's words: its finding, then what its reason codes say, each sentence opening with a capital
    (the first is left as it is: the text report puts it after the row's name)."""
    words = reason_words(parameter)
    return sentences(". ".join(part for part in (parameter.finding, words) if part)) or None


def reason_words(parameter: "ParameterReport") -> str | None:
    """The words of ``parameter.reasons`` alone (None when it has none)."""
    codes = list(parameter.reasons)
    if not codes:
        return None
    head = []
    if ZeroReason.ROUNDING in codes:  # what the gradient was, before what the later steps showed
        codes.remove(ZeroReason.ROUNDING)
        head.append(ROUNDED)
    tail = [_words(code, parameter) for code in codes]
    return ". ".join(head + [words for words in tail if words]) or None


def _words(code: str, parameter: "ParameterReport") -> str | None:
    holders, later = list(parameter.held_by), parameter.later_steps or 0
    if code == ZeroReason.HELD:
        return held_words(holders, parameter.learns_from_step or 2)
    if code == ZeroReason.ONE_STEP:
        return _one_step(holders)
    if code == ZeroReason.STILL_REVIVING:
        return (f"still exactly 0 after the look-ahead's {later} step{'s' if later != 1 else ''}, while its last "
                "step was still reviving other zero-initialized weights: a longer chain may hold it; not verified")
    if code in (ZeroReason.STAYS_ZERO, ZeroReason.NO_STEP_MOVES, ZeroReason.DEAD_UNIT):
        return _stays_zero(holders, later, dead=code == ZeroReason.DEAD_UNIT)
    if code == ZeroReason.LABELS:
        return ("the batch's labels make it so: no label of it counts (each is `ignore_index`, or of a class whose "
                "`weight` is 0), so this batch teaches the model nothing, whatever the weights; a batch with a "
                "label that counts gives it a gradient")
    if code == ZeroReason.DEAD_INPUT_MOVES:
        return _dead_input_moves(list(parameter.fed_by), later)
    if code == UnregisteredReason.IN_CONTAINER:
        return ("its module is kept in a plain Python list or dict, which nn.Module does not register, so "
                "model.parameters() does not list it")
    if code == UnregisteredReason.PLAIN_TENSOR:
        return ("a plain tensor attribute made with requires_grad=True, which nn.Module does not register, so "
                "model.parameters() does not list it")
    return None  # a code of a newer fxflow: its finding still says what was seen


def held_words(holders: list[str], step: int) -> str:
    """Why an exactly zero first gradient is no problem: a zero-initialized weight holds it until a step moves it."""
    if holders:
        return (f"exactly 0 on the first step{'s' if step > 2 else ''} because {listed(holders)} (all zeros at "
                f"init) hold{'s' if len(holders) == 1 else ''} it; {'it gets' if len(holders) == 1 else 'they get'} a "
                f"gradient, so it learns from step {step}")
    return (f"exactly 0 on the first step{'s' if step > 2 else ''}, as behind a zero-initialized weight; "
            f"non-zero once the optimizer has moved that weight, so it learns from step {step}")


def _one_step(holders: list[str]) -> str:
    if holders:
        return (f"{listed(holders)} (all zeros now) may hold it until the first optimizer step moves them; one "
                "watched step cannot tell: watch two steps (watch(steps=2)) or run fxflow.check")
    return ("exactly 0 on the one step watched: a zero-initialized weight downstream may hold it until the first "
            "optimizer step, or it may never learn; watch two steps (watch(steps=2)) or run fxflow.check")


def _stays_zero(holders: list[str], later: int, dead: bool) -> str:
    """A zero the later steps did not lift; ``holders``: the all-zero weights that stayed zero with it."""
    if later:
        seen = f"still exactly 0 after {later} step{'s' if later > 1 else ''} that moved every weight with a gradient"
    else:
        seen = "no weight with a gradient could move what zeroes it"
    if holders:
        return f"{seen}: {listed(holders)} get{'s' if len(holders) == 1 else ''} no gradient either, so it never learns"
    if dead:
        return (f"{seen}: a dead unit, and the weights that feed it get exactly 0 too, so no step revives it and it "
                "never learns")
    return f"{seen}: the zero comes from something no optimizer step changes, so it never learns"


def _dead_input_moves(feeders: list[str], later: int) -> str:
    """A dead unit whose input weights that learn compute: what was seen, and no more."""
    seen = (f"still exactly 0 after {later} step{'s' if later > 1 else ''} that moved every weight with a gradient"
            if later else "exactly 0 on the first step")
    return (f"{seen}; {listed(feeders)}, which compute{'s' if len(feeders) == 1 else ''} its input, "
            f"{'gets' if len(feeders) == 1 else 'get'} a gradient, so training moves that input too: the unit may "
            "come back once they have moved further than these small steps, or stay dead")


def listed(names: list[str], keep: int = 3) -> str:
    """``a, b, c and 2 more``."""
    shown = ", ".join(names[:keep])
    return shown + (f" and {len(names) - keep} more" if len(names) > keep else "")
