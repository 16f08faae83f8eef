"""The words of a row's optimizer codes (:class:`~fxflow.verdicts.OptimizerReason`): why its optimizer
verdict is ``not optimized`` or ``unknown``, or, for a warmup, when its lr rises. Every face says them
alike (``ParameterReport.optimizer_reason``, the JSON's ``optimizer_reason``, the report's notes).

The stages store the codes (``optimizer_reasons``) and what they speak of (``facts["optimizer"]``: the
groups and their lrs, the module, the steps watched); :mod:`fxflow.presenters` registers
:func:`optimizer_words` so that the data model reads it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..dynamic.optimizer_steps import NONFINITE_SKIP
from ..verdicts import OptimizerReason as Reason

if TYPE_CHECKING:  # pragma: no cover - the report imports the presenters to present itself
    from ..report import ParameterReport

_SHOWN = 4  # groups named in one sentence; the JSON's ``optimizer.groups`` has all


def optimizer_words(parameter: "ParameterReport") -> str | None:
    """The words of ``parameter.optimizer_reasons``, in their order, joined by ``; `` (None without codes;
    a code of a newer fxflow says nothing here)."""
    facts = parameter.facts.get("optimizer") or {}
    words = [_WORDS[code](facts) for code in parameter.optimizer_reasons if code in _WORDS]
    return "; ".join(words) or None


def _runs(facts: dict[str, Any]) -> str:
    steps = facts.get("steps", 0)
    return f"{steps} optimizer step{'s' if steps != 1 else ''}"


_WORDS: "dict[str, Callable[[dict[str, Any]], str]]" = {
    Reason.IN_NO_GROUP: lambda facts: (f"in no parameter group (the optimizer has {_groups(facts.get('groups') or [])})"
                                       f": {_how(facts)}"),
    Reason.LR_RISES: lambda facts: (f"lr 0 now in {facts.get('group')}; the scheduler raises it at step "
                                    f"{facts.get('rises_at')}"),
    Reason.LR_ZERO_NO_SCHEDULER: lambda facts: (f"lr 0 now in {', '.join(facts.get('at_zero') or [])}; without "
                                                "scheduler= fxflow cannot tell a warmup from an lr that stays 0"),
    Reason.LR_STAYS_ZERO: lambda facts: (f"lr 0 in {', '.join(facts.get('at_zero') or [])}, and the scheduler keeps "
                                         f"it at 0 for {facts.get('looked_ahead')}"),
    Reason.ZERO_LR_STEPS: lambda facts: (f"its update stayed exactly zero over {_runs(facts)}: its group's lr was 0 "
                                         "on each"),
    Reason.UNCHANGED: lambda facts: (f"optimizer.step() ran {_runs(facts)} with a non-zero gradient on it and left "
                                     "it exactly unchanged"),
    Reason.STEPS_SKIPPED: lambda facts: (f"optimizer.step() never ran: each of the {facts.get('skipped')} watched "
                                         f"steps was skipped: {NONFINITE_SKIP}"),
}


def _how(facts: dict[str, Any]) -> str:
    """``module head (Linear) was created or replaced after the optimizer was built, or left out of it``."""
    owner = (f"module {facts['module']} ({facts.get('module_class')})" if facts.get("module") is not None
             else "the model itself")
    how = ("was replaced after the optimizer was built (the optimizer still steps the old one)" if facts.get("replaced")
           else "was created or replaced after the optimizer was built, or left out of it")
    return f"{owner} {how}"


def _groups(groups: list[dict[str, Any]]) -> str:
    """``group 0 of SGD: 2 tensors, lr 0.1; ...`` (the first few, then how many more)."""
    described = [f"{g['label']}: {g['tensors']} tensor{'s' if g['tensors'] != 1 else ''}, lr {g['lr']:g}"
                 for g in groups]
    if not described:
        return "no groups"
    return "; ".join(described[:_SHOWN]) + (f"; and {len(described) - _SHOWN} more" if len(described) > _SHOWN else "")
