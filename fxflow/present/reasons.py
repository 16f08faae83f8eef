"""The words of the reason codes: what was observed about a row (a :class:`~fxflow.verdicts.StaticReason`,
a :class:`~fxflow.verdicts.ZeroReason`,
an :class:`~fxflow.verdicts.UnregisteredReason`, a :class:`~fxflow.verdicts.PairReason`, a
:class:`~fxflow.verdicts.DrawReason`, a :class:`~fxflow.verdicts.StepsReason`), said the same way by every
face (text, JSON's ``diagnosis``, HTML, DOT, pytest messages). Each reason says only what was seen: which
steps ran, which weights stayed zero, where the tensor is kept, which draws were made and what they picked.

The Report stores the codes and the facts they speak of (``held_by``, ``learns_from_step``,
``later_steps``, ``missed_steps``, ``random_ops``, ``facts``); no stage below this one stores a sentence
on a row. :func:`diagnosis` puts them in words after the row's ``finding``, and
:mod:`fxflow.presenters` registers it so that ``ParameterReport.diagnosis`` and the JSON read it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..verdicts import DrawReason as Draw, DynamicVerdict as Dynamic, PairReason as Pair, StepsReason as Steps
from ..verdicts import StaticReason, UnregisteredReason, ZeroReason
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
    head = [_STATIC[code](parameter) for code in codes if code in _STATIC]  # what the graph walk found comes first
    codes = [code for code in codes if code not in _STATIC]
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
        return (f"still exactly 0 when fxflow stopped at its limit, {later} step{'s' if later != 1 else ''} after "
                "the first, while the last step still gave other parameters their first gradient: a longer chain of "
                "zero-initialized weights may hold it; not verified")
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
    told = _TOLD.get(code)
    return told(parameter) if told is not None else None  # a code of a newer fxflow: its finding says what was seen


def _pair(parameter: "ParameterReport") -> str:
    static, dynamic = parameter.facts.get("static", parameter.static), parameter.facts.get("dynamic", parameter.dynamic)
    return f"static verdict {static} does not match runtime verdict {dynamic}"


def _opaque(parameter: "ParameterReport") -> str:
    return (f"its paths pass through {parameter.facts.get('opaque', '?')}, whose backward could not run during the "
            "analysis: the real backward decides, and no gradient arrived")


def _born(parameter: "ParameterReport") -> str:
    born = parameter.facts.get("born") or {}
    return (f"the gradient contains NaN or inf, first made by {born.get('op', '?')} @ {born.get('where', '?')} in the "
            f"{born.get('phase', '?')}")


def _randomness(parameter: "ParameterReport") -> str:
    """Its gradient is computed from what random ops drew; where other draws were made, what they showed."""
    ops, redraws = ", ".join(parameter.random_ops[:3]), parameter.facts.get("redraws")
    if redraws:  # other draws were seen: say what they gave, not what they might
        return (f"This depends on randomness: it is computed from what {ops} drew, yet none of {redraws} other draws "
                "of the model's random numbers gave it a non-zero gradient")
    return f"This depends on randomness: it is computed from what {ops} drew, so another seed (--seed, seed=) may " \
           "give another verdict"


def _other_draw(parameter: "ParameterReport") -> str:
    seed = parameter.facts.get("seed")
    got = "no gradient" if parameter.facts.get("first") == Dynamic.MISSING else "an exactly zero gradient"
    drawn = f" (what {', '.join(parameter.random_ops[:3])} drew)" if parameter.random_ops else ""
    # the draw is the generators seeded with ``seed`` right before the forward (fxflow.dynamic.redraw); --seed
    # and seed= seed other things first (the model's init, the redraws after it), so they do not replay it
    return (f"{got} with this draw of the model's random numbers{drawn}, a gradient with another (the generators "
            f"seeded with {seed}: `torch.manual_seed({seed})`, `random.seed({seed})` right before the forward): the "
            "model's own randomness decides, so it learns on some steps only")


def _some_steps(parameter: "ParameterReport", ddp: bool = False) -> str:
    """Which steps it missed, and what cut it there when that is known; ``ddp``: on some steps the
    gradient was None, not zero, which DDP needs to be told about."""
    missed, count = parameter.missed_steps, parameter.steps_with_gradient or 0
    shown = ", ".join(str(step) for step in missed[:8]) + (" ..." if len(missed) > 8 else "")
    reason = (f"a gradient on {count} of {count + len(missed)} steps; none on step{'s' if len(missed) != 1 else ''} "
              f"{shown}")
    if parameter.cut_by:
        site = parameter.cut_by[0]
        reason += f", where {site.op} @ {site.source or site.node} cut it ({site.reason})"
    return reason + (": under DDP this needs find_unused_parameters=True" if ddp else "")


def _later_call(parameter: "ParameterReport") -> str:
    calls = list(parameter.facts.get("calls") or [])
    judged = (f"backward call {calls[0]}" if len(calls) == 1
              else "backward calls " + ", ".join(map(str, calls)))
    return (f"no gradient on {judged}, the one{'s' if len(calls) != 1 else ''} judged; a non-zero one on backward "
            f"call {parameter.facts.get('later_call')}, later in the block")


def _unpicked_words(parameter: "ParameterReport") -> str:
    """A parameter dry on every draw made while a random choice left outcomes unpicked: what was drawn,
    what was not, and how to see more; not verified."""
    choices = list(parameter.facts.get("choices") or [])
    got = "no gradient" if parameter.facts.get("first") == Dynamic.MISSING else "an exactly zero gradient"
    draws = max((choice.get("draws", 0) for choice in choices), default=0)
    told = "; ".join(_unpicked(choice) for choice in choices[:2])
    more = f"; and {len(choices) - 2} more such choices" if len(choices) > 2 else ""
    return (f"{got} on this draw of the model's random numbers and on each of the {draws} others made, while "
            f"{told}{more}: an outcome no draw picked may reach it, so whether it learns on the steps that pick one, "
            f"or never, is not verified. {_next_draws(parameter.facts.get('next_seed'), draws)}; "
            "`fxflow.watch(steps=N)` over real training steps sees what they pick; `--allow` it (`allow=`) if it "
            "is meant to stay dry")


def _next_draws(seed: int | None, draws: int) -> str:
    """The seed whose check draws none of the outcomes this one drew (its own draws and the next ``draws``)."""
    if seed is None:
        return "A seed far from this one draws other outcomes (`--seed N`, `seed=N`)"
    return f"With `--seed {seed}` (`seed={seed}`) the other draws come from seeds none of these {draws} used"


def _unpicked(choice: dict) -> str:
    """``a random choice of 300 outcomes at randint @ model.py:12 never picked 112 of them (values 3, 7 and 110 more)``."""
    missing, count = list(choice.get("unpicked") or []), int(choice.get("count", 0))
    shown = ", ".join(map(str, missing[:6])) + (f" and {count - len(missing[:6])} more" if count > len(missing[:6]) else "")
    plural = "s" if count != 1 else ""
    kind = f"position{plural} {shown} in what it picks from" if choice.get("positions") else f"value{plural} {shown}"
    return (f"a random choice of {choice.get('outcomes')} outcomes at {choice.get('site')} never picked "
            f"{'one' if count == 1 else count} of them ({kind})")


_STATIC: "dict[str, Callable[[ParameterReport], str]]" = {  # why the graph walk said so
    StaticReason.REQUIRES_GRAD_FALSE: lambda parameter: "requires_grad is False",
    StaticReason.NEVER_CALLED: lambda parameter: f"its module {parameter.facts.get('module')} is never called in forward",
    StaticReason.NEVER_READ: lambda parameter: "forward never reads it",
    StaticReason.REACHES_NOTHING: lambda parameter: (
        "used in forward, but nothing it feeds reaches "
        + ("the model's loss" if parameter.facts.get("goal") == "loss" else "an output")),
    StaticReason.OPAQUE_NEVER_RAN: lambda parameter: (
        f"its gradient passes through {parameter.facts.get('opaque')} (node {parameter.facts.get('opaque_node')}), "
        "which never ran: only a real backward can tell whether it passes the gradient on"),
}

_FIXED = {  # the codes whose words need no fact
    Pair.NO_GRADIENT_AT_RUNTIME: ("statically reachable, no gradient at runtime: an op the tracer saw through returns "
                                  "no gradient (a custom autograd.Function, say), or forward took another branch than "
                                  "the trace"),
    Pair.GRADIENT_OFF_TRACE: ("no gradient path in the traced graph, yet the real backward delivered one: the trace "
                              "differs from what forward ran (a data-dependent branch, or code the tracer could not "
                              "see)"),
    Pair.ZERO_YET_GRADIENT: ("every traced path crosses a zero-derivative op, yet a nonzero gradient arrived: forward "
                             "ran a path the trace did not record"),
    Pair.FROZEN_YET_GRADIENT: "requires_grad is False, yet a gradient was written: something else sets .grad",
    Pair.ZERO_NOT_LOCATED: ("a gradient arrives but it is exactly zero, and where it died was not located: usually "
                            "dead ReLUs (every input negative), multiplication by an all-zero mask, or a loss term "
                            "weighted to nothing"),
    Pair.NONFINITE: "the gradient contains NaN or inf: look for log(0), division by zero, or overflow",
    Pair.VANISHING_NOT_LOCATED: ("the gradient is vanishingly small next to the largest in the model, and where it "
                                 "shrank was not located: normalisation, residual connections or a gentler depth "
                                 "help"),
}

_TOLD: "dict[str, Callable[[ParameterReport], str]]" = {
    **{code: (lambda parameter, words=words: words) for code, words in _FIXED.items()},
    Pair.OPAQUE_PATH: _opaque, Pair.MISMATCH: _pair, Pair.NONFINITE_BORN: _born,
    Draw.RANDOMNESS: _randomness, Draw.OTHER_DRAW: _other_draw, Draw.CHOICE_UNPICKED: _unpicked_words,
    Steps.SOME_STEPS: _some_steps, Steps.SOME_STEPS_NONE: lambda parameter: _some_steps(parameter, ddp=True),
    Steps.LATER_CALL: _later_call,
}


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
