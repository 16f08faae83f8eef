"""Record types that several stages fill and the Report holds: plain data, no behaviour."""
from __future__ import annotations

from dataclasses import dataclass


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
