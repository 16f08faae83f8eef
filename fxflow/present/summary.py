"""The summary line: what a report comes to in one line (the text report's last line, ``-q``,
``report.summary()``, the pytest message's head, GitHub's last line). ``report.summary()`` keeps the
command line's words: the diagrams, drawn from either face, show it."""
from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import TYPE_CHECKING

from ..verdicts import DrawReason, DynamicVerdict as Dynamic, ReportStatus, StaticVerdict as Static, ZeroReason
from .fresh import fresh_tensor_sources
from .words import format_norm, fraction, tally, verdict_of

if TYPE_CHECKING:  # pragma: no cover
    from ..report import ParameterReport, Report


def _largest_norm(report: Report) -> float:
    return max((p.grad_norm for p in report.parameters if p.grad_norm is not None and math.isfinite(p.grad_norm)),
               default=0.0)


def _smallest_vanishing(parameters: list[ParameterReport]) -> float | None:
    return min((p.grad_norm for p in parameters if p.dynamic == Dynamic.VANISHING and p.grad_norm is not None),
               default=None)


def vanishing_size(report: Report) -> str:
    """`` (smallest norm 0.1511, 1/400 of the largest's 60.4)``: how small the smallest vanishing
    gradient is, next to the largest in the model (what "vanishing" is measured against)."""
    smallest = _smallest_vanishing(report.parameters)
    if smallest is None:
        return ""
    largest = _largest_norm(report)
    if smallest <= 0 or largest <= smallest:
        return f" (smallest norm {format_norm(smallest)})"
    return f" (smallest norm {format_norm(smallest)}, {fraction(smallest / largest)} of the largest's {format_norm(largest)})"


def group_size(report: Report, group: list[ParameterReport]) -> str:
    """``its gradient norm is 1/6100 of the largest's (0.0099 vs 60.4)``: a vanishing group's size, in
    the summary's own measure, so the paragraph and the summary give one ratio."""
    smallest, largest = _smallest_vanishing(group), _largest_norm(report)
    if smallest is None or smallest <= 0 or largest <= smallest:
        return "its gradient is vanishingly small next to the largest in the model"
    noun = "its gradient norm is" if len(group) == 1 else "the smallest of their gradient norms is"
    return f"{noun} {fraction(smallest / largest)} of the largest's ({format_norm(smallest)} vs {format_norm(largest)})"


def allowed_problems(report: Report) -> list[ParameterReport]:
    """Parameters that would fail the check (or leave it not verified) but match an ``--allow`` pattern."""
    return [p for p in report.parameters
            if p.allowed and (replace(p, allowed=False).problem or p.dynamic == Dynamic.UNCONFIRMED)]


def summary_line(report: Report, api: bool = False) -> str:
    """One line: how many parameters are dry and why; what was allowed; what is vanishing. ``api``: the
    Python API's words (``fxflow.check(model, inputs)``, ``backward=False``), not the command line's."""
    total = len(report.parameters)
    if total == 0:
        return "nothing to train: the model has no parameters, so there is no gradient to verify"
    if report.everything_frozen:
        return f"problem: {NOTHING_LEARNS}"
    problems = report.problems
    frozen = report.counts()[Static.FROZEN]
    tail = ""
    allowed = allowed_problems(report)
    if allowed:
        kinds = {verdict_of(p) for p in allowed}  # "4 allowed (cut)", "5 allowed (4 cut, 1 unused)"
        tail += f"; {len(allowed)} allowed ({kinds.pop() if len(kinds) == 1 else tally(allowed, words={})})"
    if frozen:
        tail += f"; {frozen} frozen"
    vanishing = [p for p in report.parameters if p.dynamic == Dynamic.VANISHING]
    if vanishing:
        tail += f"; {len(vanishing)} vanishing{vanishing_size(report)}"
    unknown = sum(1 for p in report.parameters if p.static == Static.UNKNOWN)
    if unknown:  # the backward alone spoke for these: say so next to any "ok"
        why = "nothing captured" if report.trace.method == "none" else "an op that never ran decides them"
        tail += f"; {unknown} static verdict{'s' if unknown > 1 else ''} unknown ({why})"
    fresh = fresh_tensor_sources(report)
    if fresh:  # not a parameter, so no row: the summary still names the line
        tail += f"; {len(fresh)} layer{'s' if len(fresh) > 1 else ''} built inside forward (at {fresh[0]})"
    disagreements = sum(1 for p in report.parameters if p.agree is False)
    if disagreements:
        tail += f"; {disagreements} static/runtime disagreement{'s' if disagreements > 1 else ''}"
    if report.nonfinite:  # where the NaN came from, next to the parameters it reached
        first = report.nonfinite[0]
        tail += f"; first non-finite value from {first.op} @ {first.source or first.module or '?'} ({first.phase})"
    if report.backward_raises:  # training stops at the first step, whatever the verdicts
        first = report.backward_raises[0]
        raises = f"loss.backward() raises at {first.op} @ {first.source}" if first.source else \
            f"loss.backward() raises {first.reason}"
        if not problems:
            return f"problem: {raises}{tail}"
        tail = f"; {raises}{tail}"
    held = [p for p in report.parameters if p.dynamic == Dynamic.HELD]
    if held:  # not a problem, but a reader of the table should know why those rows start at zero
        latest = max(p.learns_from_step or 2 for p in held)
        tail += f"; {len(held)} held by zero-initialized weights (learn from step {'2' if latest == 2 else f'2-{latest}'})"
    unconfirmed = report.unconfirmed
    if report.status == ReportStatus.NOT_VERIFIED and unconfirmed:
        return f"not verified: {_unconfirmed(unconfirmed, total)}{tail}"
    if report.status == ReportStatus.NOT_VERIFIED:
        return f"{not_verified(report, api)}{tail}"
    if not report.verified and not report.static_only:
        tail += f"; {not_verified(report, api)}"
    if not problems and report.static_only:
        return (f"static only ({'backward=False' if api else '--no-backward'}): {_every_trainable(total - frozen, 'has', 'have')} a differentiable "
                f"path to the output; no backward ran to confirm it{tail}")
    if not problems and report.status == ReportStatus.STRUCTURE_VERIFIED:
        reached = "no unexpected problems" if allowed else \
            f"the backward reaches {_every_trainable(total - frozen, '', '').rstrip()}"
        return f"structure verified on meta: {reached}; {STRUCTURE_UNSEEN}{tail}"
    if not problems:
        if allowed:
            return f"ok: no unexpected problems{tail}"
        return f"ok: {_every_trainable(total - frozen, 'gets', 'get')} a gradient{tail}"
    where = ""
    sites = [(p.static, s) for p in problems if p.static in (Static.CUT, Static.ZERO) for s in p.cut_by]
    if sites:  # a real cut first: it is the one that starves
        static, first = next((item for item in sites if item[0] == Static.CUT), sites[0])
        label = "first cut" if static == Static.CUT else "first zero"
        where = f" ({label}: {first.op} @ {first.source or first.node})"
    return f"problem: {len(problems)} of {total} parameters will not learn: {tally(problems)}{where}{tail}"


def _every_trainable(count: int, singular: str, plural: str) -> str:
    """``all 6 trainable parameters get``; ``the one trainable parameter gets``."""
    return f"the one trainable parameter {singular}" if count == 1 else f"all {count} trainable parameters {plural}"




STRUCTURE_UNSEEN = ("not verified (a meta run has no values): exact zeros such as a frozen all-zero weight's, NaN or "
                    "inf, vanishing gradients")


NOTHING_LEARNS = "nothing will learn: every parameter is frozen (loss.backward() would raise)"


NOT_VERIFIED = "not verified: no backward ran (give --input-size or example_inputs())"
GIVE_INPUTS = {False: "give --input-size or example_inputs()", True: "pass inputs: fxflow.check(model, inputs)"}


_NO_INPUTS_FOR = re.compile(r"no example inputs for (forward\(.*?\)):")  # fxflow.prepare.inputs.no_inputs_note


def not_verified(report: Report, api: bool = False) -> str:
    """Why nothing is verified, naming forward's arguments when a note has them (what to give inputs
    for); ``api``: how to give them in Python rather than on the command line."""
    for_what = ""
    for note in report.trace.notes + report.notes:
        found = _NO_INPUTS_FOR.match(note)
        if found:
            for_what = f" for {found[1]}"
            break
    return f"not verified: no backward ran{for_what} ({GIVE_INPUTS[api]})"


def _unconfirmed(unconfirmed: list[ParameterReport], total: int) -> str:
    """What leaves the unconfirmed rows open, as their codes say: an exact zero on the one step watched,
    a zero the steps had not lifted when they stopped at their limit while still reviving others, or
    the outcomes a random choice never picked."""
    drawn = sum(1 for p in unconfirmed if DrawReason.CHOICE_UNPICKED in p.reasons)
    reviving = [p for p in unconfirmed if ZeroReason.STILL_REVIVING in p.reasons]
    told = []
    if reviving:
        later = max(p.later_steps or 0 for p in reviving)
        told.append(f"{len(reviving)} of {total} parameters were still exactly 0 when fxflow stopped at its limit, "
                    f"{later} step{'s' if later != 1 else ''} after the first, while the last step still gave other "
                    "parameters their first gradient (a longer chain of zero-initialized weights may hold them)")
    if len(unconfirmed) > drawn + len(reviving):
        told.append(f"{len(unconfirmed) - drawn - len(reviving)} of {total} parameters got an exactly zero gradient "
                    "that one step cannot confirm (a zero-initialized weight may hold them until step 2)")
    if drawn:
        told.append(f"{drawn} of {total} parameters got no non-zero gradient on any draw of the model's random "
                    "numbers made, while a random choice left outcomes no draw picked, which may reach them")
    return "; ".join(told)
