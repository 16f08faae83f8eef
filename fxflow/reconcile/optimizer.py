"""The optimizer's verdict: will some parameter group update each trainable parameter?

One function, :func:`judge_optimizer`, for ``check`` (the optimizer's groups and lrs, the
scheduler looked ahead) and for ``watch`` and the trainer callbacks (also what each
``optimizer.step()`` did, :class:`~fxflow.dynamic.optimizer_steps.StepLog`). Per trainable
parameter ``ParameterReport.optimizer`` is:

* ``updated``: a group holds it and its lr is above 0, now or within the scheduler's next steps;
* ``not optimized`` (fails the check): no group holds it, every group that does keeps its lr at 0,
  or the watched steps never moved it (every step skipped, or left it exactly unchanged);
* ``unknown``: its lr is 0 now and no scheduler was given, so a warmup cannot be told from an lr
  that stays 0; not a problem.

Tensors an optimizer steps that are not the model's are listed (a learnable loss temperature is
legitimate); one in the place of a replaced parameter, with its shape, is named its ghost.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from torch import nn

from ..dynamic.optimizer_steps import NONFINITE_SKIP
from ..core.records import OptimizerFindings
from ..dynamic.optimizer import OptimizerView, read_optimizers
from ..verdicts import DynamicVerdict as Dynamic, OptimizerReason, OptimizerVerdict, StaticVerdict as Static

if TYPE_CHECKING:  # pragma: no cover
    from ..dynamic.optimizer_steps import StepLog
    from ..report import Report

_SHOWN = 4  # groups or tensors named in one sentence; the JSON has all


def judge_optimizer(report: "Report", model: nn.Module, optimizers: list[Any], schedulers: list[Any] = (), *,
                    log: "StepLog | None" = None, nonfinite_steps: Iterable[int] = (),
                    last_pending: bool = False) -> None:
    """Give every trainable parameter of ``report`` its optimizer verdict and the codes of what was observed
    (``optimizer_reasons``, their facts in ``facts["optimizer"]``; words: :mod:`fxflow.present`), and the
    report its :class:`OptimizerFindings` and notes. ``log``: the steps watched; ``nonfinite_steps`` and
    ``last_pending``: see :meth:`StepLog.skipped`."""
    view = read_optimizers(model, optimizers, schedulers)
    findings = OptimizerFindings(groups=view.groups, foreign=view.foreign, scheduler=view.scheduler)
    if log is not None:
        findings.steps_run = log.steps_run
        findings.skipped = log.skipped(nonfinite_steps, last_pending=last_pending)
    named = dict(model.named_parameters())
    modules = dict(model.named_modules())
    replaced = {held.ghost_of for held in view.foreign if held.ghost_of}
    for parameter in report.parameters:
        tensor = named.get(parameter.name)
        if tensor is None or not tensor.requires_grad or parameter.static == Static.FROZEN:
            continue
        owner = parameter.name.rpartition(".")[0]
        where = ({"module": owner, "module_class": type(modules[owner]).__name__} if owner in modules
                 else {"module": None})
        facts: dict[str, Any] = {}
        verdict, codes = _held(view, parameter.name, facts, where, parameter.name in replaced)
        if log is not None and parameter.name in view.holders:  # in no group: no step can move it
            verdict, codes = _observed(verdict, codes, facts, log, parameter, findings)
        parameter.optimizer, parameter.optimizer_reasons = verdict, codes
        if codes:
            parameter.facts["optimizer"] = facts
    report.notes.extend(_notes(report, findings))
    report.optimizer = findings


def _held(view: OptimizerView, name: str, facts: dict[str, Any], where: dict[str, Any],
          replaced: bool) -> tuple[str, list[str]]:
    """The verdict from the groups alone: who holds ``name``, at what lr, and where the lr goes; its
    codes, their facts put in ``facts``. ``where``: its module (name and class); ``replaced``: the
    optimizer still steps the tensor it replaced."""
    holders = [view.groups[index] for index in view.holders.get(name, [])]
    if not holders:
        facts.update(groups=[{"label": g.label, "tensors": g.tensors, "lr": g.lr} for g in view.groups],
                     replaced=replaced, **where)
        return OptimizerVerdict.NOT_OPTIMIZED, [OptimizerReason.IN_NO_GROUP]
    states = [group.updates for group in holders]
    if True in states:
        rising = [g for g in holders if g.lr == 0 and g.rises_at]
        if rising and not any(g.lr > 0 for g in holders):
            facts.update(group=rising[0].label, rises_at=rising[0].rises_at)
            return OptimizerVerdict.UPDATED, [OptimizerReason.LR_RISES]
        return OptimizerVerdict.UPDATED, []
    if None in states:
        facts.update(at_zero=[g.label for g in holders if g.updates is None])
        return OptimizerVerdict.UNKNOWN, [OptimizerReason.LR_ZERO_NO_SCHEDULER]
    facts.update(at_zero=[g.label for g in holders], looked_ahead=view.looked_ahead)
    return OptimizerVerdict.NOT_OPTIMIZED, [OptimizerReason.LR_STAYS_ZERO]


def _observed(verdict: str, codes: list[str], facts: dict[str, Any], log: "StepLog", parameter: Any,
              findings: OptimizerFindings) -> tuple[str, list[str]]:
    """The verdict once the watched steps are known: a parameter they moved is updated; one they
    never moved though it had a gradient is not, and the codes say what fxflow saw."""
    if parameter.name in log.moved:
        facts.clear()
        return OptimizerVerdict.UPDATED, []
    unmoved = log.unmoved(parameter.name)
    if unmoved is not None:
        code, steps = unmoved
        if code == OptimizerReason.ZERO_LR_STEPS:
            facts["steps"] = steps
            return verdict, [code, *codes]  # the lr's verdict stands
        facts.clear()
        facts["steps"] = steps
        return OptimizerVerdict.NOT_OPTIMIZED, [code]
    got_gradient = parameter.dynamic in (Dynamic.OK, Dynamic.VANISHING, Dynamic.NONFINITE, Dynamic.INTERMITTENT)
    if log.steps_run == 0 and findings.skipped and got_gradient and all(
            skipped.reason == NONFINITE_SKIP for skipped in findings.skipped):  # a GradScaler skipped every step
        facts.clear()
        facts["skipped"] = len(findings.skipped)
        return OptimizerVerdict.NOT_OPTIMIZED, [OptimizerReason.STEPS_SKIPPED]
    return verdict, codes


def _notes(report: "Report", findings: OptimizerFindings) -> list[str]:
    """One note per reason a group of parameters is not optimized or unknown, then the held
    tensors that are not the model's, then the skipped steps."""
    by_reason: dict[tuple[str, str], list[str]] = {}
    for parameter in report.parameters:
        if parameter.optimizer in (OptimizerVerdict.NOT_OPTIMIZED, OptimizerVerdict.UNKNOWN) and parameter.optimizer_reason:
            by_reason.setdefault((parameter.optimizer, parameter.optimizer_reason), []).append(parameter.name)
    notes = [f"{verdict}: {_names(names)}: {reason}" for (verdict, reason), names in by_reason.items()]
    if findings.foreign:
        described = [f"shape {_shape(t.shape)} in {t.group}" + (f" (the ghost of {t.ghost_of}, which replaced it)"
                                                                 if t.ghost_of else "")
                     for t in findings.foreign]
        count = len(findings.foreign)
        notes.append(f"the optimizer also steps {count} tensor{'s' if count != 1 else ''} that "
                     f"{'is' if count == 1 else 'are'} not the model's: {_shortened(described)}")
    by_skip: dict[str, list[int]] = {}
    for skipped in findings.skipped:
        by_skip.setdefault(skipped.reason, []).append(skipped.step)
    for reason, steps in by_skip.items():
        shown = ", ".join(map(str, steps[:8])) + (" ..." if len(steps) > 8 else "")
        notes.append(f"optimizer.step() did not run after backward call{'s' if len(steps) != 1 else ''} {shown}: "
                     f"{reason}")
    return notes


def _shortened(items: list[str]) -> str:
    return "; ".join(items[:_SHOWN]) + (f"; and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def _names(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
