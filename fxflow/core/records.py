"""Record types that several stages fill and the Report holds: plain data, no behaviour."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LayerStep:
    """One layer's gradients in one step."""

    step: int
    mean: float  # mean |grad| over the layer's own parameters
    max: float  # largest |grad|
    update_ratio: float | None = None  # ||Δw|| / ||w|| of the optimizer step that followed, when one did


@dataclass(frozen=True)
class HealthFlag:
    """A layer whose gradient is far from the rest of the model's, from ``since`` to the last step."""

    layer: str
    kind: str  # VANISHING or EXPLODING
    since: int  # the step where it began (and held until the last step)
    ratio: float  # its mean |grad| over the median layer's, at the last step


@dataclass(frozen=True)
class NonfiniteSite:
    """Where a non-finite value first appeared."""

    phase: str  # "forward" or "backward"
    op: str
    source: str | None  # FILE:LINE of the user's line that called the op
    module: str | None  # qualified name of the innermost module the call ran in
    reason: str  # what the op was given: "log of a negative number", "0 / 0", ...


@dataclass
class GroupSummary:
    """One parameter group as the report lists it."""

    label: str  # "group 0 of AdamW" ("optimizer 1 (SGD) group 0" when there are several)
    lr: float
    weight_decay: float | None
    tensors: int
    # With a scheduler: the largest lr it reaches within the steps looked ahead (fxflow.dynamic.optimizer.LOOKAHEAD_STEPS), and the first step it is above 0.
    lr_peak: float | None = None
    rises_at: int | None = None

    @property
    def updates(self) -> bool | None:
        """True: its tensors move; False: its lr is 0 and the scheduler keeps it 0; None: lr 0, no scheduler to tell."""
        if self.lr > 0:
            return True
        if self.lr_peak is None:
            return None
        return self.lr_peak > 0


@dataclass
class HeldTensor:
    """A tensor an optimizer steps that is not one of the model's parameters."""

    shape: tuple[int, ...]
    group: str
    position: int  # its index in the group's params
    ghost_of: str | None = None  # the model parameter that replaced it (same shape, same place)


@dataclass
class SkippedStep:
    """A backward call after which ``optimizer.step()`` did not run (watch and the callbacks)."""

    step: int  # the 1-based backward call
    reason: str


@dataclass
class OptimizerFindings:
    """The optimizer's side of the report (``Report.optimizer``)."""

    groups: list[GroupSummary] = field(default_factory=list)
    foreign: list[HeldTensor] = field(default_factory=list)  # stepped tensors that are not the model's
    scheduler: bool = False  # a scheduler was given: an lr of 0 could be followed
    steps_run: int | None = None  # optimizer.step() calls seen (watch); None when no step was watched
    skipped: list[SkippedStep] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OptimizerFindings":
        return cls(groups=[GroupSummary(**g) for g in data.get("groups", [])],
                   foreign=[HeldTensor(**{**t, "shape": tuple(t["shape"])}) for t in data.get("foreign", [])],
                   scheduler=bool(data.get("scheduler")), steps_run=data.get("steps_run"),
                   skipped=[SkippedStep(**s) for s in data.get("skipped", [])])
