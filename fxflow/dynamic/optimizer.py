"""The last link of "will this parameter learn?": an optimizer group that updates it.

A gradient is useless when no optimizer group holds the parameter (it was created or replaced
after the optimizer was built), or when its group's learning rate is 0 and stays 0. This module
reads the user's optimizers (and schedulers) and says, per model parameter, which groups hold it
and whether they will move it; :mod:`fxflow.reconcile.optimizer` turns that into verdicts. The
optimizers and schedulers are only read: a scheduler stepped ahead to see where the lr goes is put
back exactly as it was.

:func:`will_update` is the one-call answer other stages use (``check``'s look-ahead step moves
only what the optimizer will move).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterable

import torch
from torch import nn

from ..core.records import GroupSummary, HeldTensor
from ..errors import describe
from ..prepare.optimizers import optimizers_in, schedulers_in

# Scheduler steps looked ahead for an lr of 0 to rise (a warmup); past it, an lr of 0 "stays 0".
LOOKAHEAD_STEPS = 1000


@dataclass
class OptimizerView:
    """Which groups hold each model parameter, and the tensors they hold that are not the model's."""

    groups: list[GroupSummary]
    holders: dict[str, list[int]]  # model parameter name -> indices into groups
    foreign: list[HeldTensor]
    scheduler: bool
    looked_ahead: str = f"the next {LOOKAHEAD_STEPS} steps"  # the scheduler steps its lrs were read over, in words


def read_optimizers(model: nn.Module, optimizers: Iterable[torch.optim.Optimizer],
                    schedulers: Iterable[Any] = ()) -> OptimizerView:
    """What ``optimizers`` will do to ``model``'s parameters (read only; see the module docstring)."""
    optimizers, schedulers = list(optimizers), list(schedulers)
    peaks, looked_ahead = lr_lookahead(optimizers, schedulers) if schedulers else ({}, "")
    several = len(optimizers) > 1
    groups: list[GroupSummary] = []
    members: list[list[torch.Tensor]] = []
    for k, optimizer in enumerate(optimizers):
        for g, group in enumerate(optimizer.param_groups):
            label = (f"optimizer {k} ({type(optimizer).__name__}) group {g}" if several
                     else f"group {g} of {type(optimizer).__name__}")
            decay = group.get("weight_decay")
            peak, rises = peaks.get((k, g), (None, None))
            groups.append(GroupSummary(label, float(group["lr"]), None if decay is None else float(decay),
                                       len(group["params"]), peak, rises))
            members.append(list(group["params"]))
    named = dict(model.named_parameters())
    name_of = {id(p): name for name, p in named.items()}
    holders: dict[str, list[int]] = {}
    foreign: list[HeldTensor] = []
    for index, tensors in enumerate(members):
        for position, tensor in enumerate(tensors):
            name = name_of.get(id(tensor))
            if name is not None:
                holders.setdefault(name, []).append(index)
            else:
                foreign.append(HeldTensor(tuple(int(s) for s in tensor.shape), groups[index].label, position))
    _name_ghosts(foreign, members, groups, named, name_of, holders)
    return OptimizerView(groups, holders, foreign, bool(schedulers), looked_ahead)


def _name_ghosts(foreign: list[HeldTensor], members: list[list[torch.Tensor]], groups: list[GroupSummary],
                 named: dict[str, nn.Parameter], name_of: dict[int, str], holders: dict[str, list[int]]) -> None:
    """A held tensor is the ghost of a replaced parameter when a trainable model parameter that no
    group holds has its shape and sits where it sat: between the model positions of its nearest
    neighbours in the group that are still the model's."""
    order = {name: index for index, name in enumerate(named)}
    orphans = [name for name, p in named.items() if p.requires_grad and name not in holders]
    taken: set[str] = set()
    by_label = {group.label: index for index, group in enumerate(groups)}
    for held in foreign:
        tensors = members[by_label[held.group]]
        before = [order[name_of[id(t)]] for t in tensors[:held.position] if id(t) in name_of]
        after = [order[name_of[id(t)]] for t in tensors[held.position + 1:] if id(t) in name_of]
        low, high = (before[-1] if before else -1), (after[0] if after else len(order))
        match = next((name for name in orphans if name not in taken and low < order[name] < high
                      and tuple(named[name].shape) == held.shape), None)
        if match is not None:
            held.ghost_of = match
            taken.add(match)


def lr_lookahead(optimizers: list[torch.optim.Optimizer], schedulers: list[Any],
                 horizon: int = LOOKAHEAD_STEPS) -> tuple[dict[tuple[int, int], tuple[float, int | None]], str]:
    """Per (optimizer, group): the largest lr the schedulers reach within ``horizon`` steps, and the
    first step it is above 0; and the steps read, in words. The schedulers are stepped ahead, then
    put back as they were.

    Every call into a scheduler is the user's code: one that raises past its horizon (``OneCycleLR``
    beyond ``total_steps``) or wants arguments (``step(epoch)``) ends the look-ahead there, and what
    the steps before it showed is kept; one whose state cannot be saved is not stepped at all.
    """
    lrs = {(k, g): float(group["lr"]) for k, o in enumerate(optimizers) for g, group in enumerate(o.param_groups)}
    peaks = {key: (lr, 0 if lr > 0 else None) for key, lr in lrs.items()}
    steppable = [s for s in schedulers if not isinstance(s, torch.optim.lr_scheduler.ReduceLROnPlateau)]
    looked_ahead = f"the next {horizon} steps"
    if not steppable or all(rises is not None for _, rises in peaks.values()):
        return peaks, looked_ahead
    try:  # a plateau scheduler only lowers: never stepped
        saved = [copy.deepcopy(s.state_dict()) for s in steppable]
        counts = [_first_step_counts(s) for s in steppable]
    except Exception as error:  # noqa: BLE001 - a scheduler that cannot be put back is not stepped
        return peaks, f"no step (saving the scheduler's state raised {describe(error, 80)})"
    saved_groups = [[{key: copy.deepcopy(value) for key, value in group.items() if key != "params"}
                     for group in optimizer.param_groups] for optimizer in optimizers]
    try:
        for scheduler in steppable:
            _past_first_step(scheduler)
        for step in range(1, horizon + 1):
            if all(rises is not None for _, rises in peaks.values()):
                break
            try:
                for scheduler in steppable:
                    scheduler.step()
                current = {(k, g): float(group["lr"])
                           for k, o in enumerate(optimizers) for g, group in enumerate(o.param_groups)}
            except Exception as error:  # noqa: BLE001 - past the scheduler's horizon: what was seen stands
                looked_ahead = f"the {step - 1} steps it takes (step {step} raises {describe(error, 80)})"
                break
            for key, lr in current.items():
                peak, rises = peaks[key]
                peaks[key] = (max(peak, lr), rises if rises is not None or lr <= 0 else step)
    finally:
        for scheduler, state, count in zip(steppable, saved, counts):
            scheduler.load_state_dict(state)
            for owner, value in count:
                owner._step_count = value
        for optimizer, groups in zip(optimizers, saved_groups):
            for group, values in zip(optimizer.param_groups, groups):
                for key, value in values.items():
                    if isinstance(group.get(key), torch.Tensor) and isinstance(value, torch.Tensor):
                        group[key].copy_(value)  # a tensor lr (capturable Adam) keeps its identity
                    else:
                        group[key] = value
    return peaks, looked_ahead


def _first_step_counts(scheduler: Any) -> list[tuple[Any, int]]:
    """``(scheduler, _step_count)`` for it and the schedulers it chains (SequentialLR, ChainedScheduler)."""
    found = [(scheduler, scheduler._step_count)] if isinstance(getattr(scheduler, "_step_count", None), int) else []
    for inner in getattr(scheduler, "_schedulers", None) or []:
        found.extend(_first_step_counts(inner))
    return found


def _past_first_step(scheduler: Any) -> None:
    """Step counts moved past 1, put back afterwards: torch warns "lr_scheduler.step() before
    optimizer.step()" only on a scheduler's first step, and the look-ahead means it. Moving the
    count spares a warning filter, which is process-wide (``warnings.catch_warnings`` swaps the
    module's filter list and ``showwarning`` for every thread)."""
    for owner, count in _first_step_counts(scheduler):
        if count == 1:
            owner._step_count = 2


def will_update(optimizers: Any, scheduler: Any, model: nn.Module) -> dict[str, bool | None]:
    """Per parameter name of ``model``: True when some group holds it and its lr is above 0 (now, or
    within the scheduler's next steps), False when no group holds it or every group that does keeps
    its lr at 0, None when its lr is 0 now and no scheduler tells whether it rises. Frozen
    parameters are answered like the others (a group may hold them; nothing moves them without a grad)."""
    view = read_optimizers(model, optimizers_in(optimizers), schedulers_in(scheduler))
    answers: dict[str, bool | None] = {}
    for name, _ in model.named_parameters():
        states = [view.groups[index].updates for index in view.holders.get(name, [])]
        answers[name] = True if True in states else None if None in states else False
    return answers
