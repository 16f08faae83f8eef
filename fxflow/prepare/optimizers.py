"""The optimizers and schedulers a check is given (``optimizer=``, ``scheduler=``), as plain lists.

Read as the inputs are, before anything runs, so a wrong value is one clear error up front. What
the optimizers will do to the model is :mod:`fxflow.dynamic.optimizer`'s business.
"""
from __future__ import annotations

from typing import Any

import torch

from ..errors import FxflowError


def optimizers_in(value: Any) -> list[torch.optim.Optimizer]:
    """The plain torch optimizers in ``value``: one, a list/tuple/dict of them, or a framework's
    wrapper (accelerate's ``AcceleratedOptimizer``, Lightning's ``LightningOptimizer``)."""
    if value is None:
        return []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return list(dict.fromkeys(opt for item in value for opt in optimizers_in(item)))
    inner = getattr(value, "optimizer", None) or getattr(value, "_optimizer", None)
    if inner is not None and inner is not value and _is_optimizer(inner):
        return optimizers_in(inner)  # the wrapper's own step calls the inner one's, whose hooks fire
    if _is_optimizer(value):
        return [value]
    raise FxflowError(f"optimizer= takes a torch.optim.Optimizer or a list of them, not {type(value).__name__}")


def schedulers_in(value: Any) -> list[Any]:
    """The lr schedulers in ``value``: one or a list (Lightning's configs hold theirs in ``.scheduler``)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [s for item in value for s in schedulers_in(item)]
    value = getattr(value, "scheduler", value)  # a Lightning LRSchedulerConfig
    if not hasattr(value, "step") or not hasattr(value, "state_dict"):
        raise FxflowError(f"scheduler= takes a torch.optim.lr_scheduler scheduler or a list of them, "
                          f"not {type(value).__name__}")
    return [value]


def _is_optimizer(value: Any) -> bool:
    return isinstance(value, torch.optim.Optimizer) and isinstance(getattr(value, "param_groups", None), list)
