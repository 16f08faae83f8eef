"""Look ahead when a gradient is exactly zero: does a parameter learn once the first steps move the
zero-initialized weights that hold it?

LoRA's ``B``, adaLN-Zero's modulation, ControlNet's zero convolutions, ReZero's α, a ResNet's zero
last BatchNorm and μP's zero readout all start at zero by design: everything they multiply gets an
exactly zero gradient on the first step, and a real one from the second (or, for two zero-inits in a
chain, the third). A dead ReLU, a 0.0 loss weight or a zero buffer give the same exact zero on step 1
and on every step after it. The only way to tell them apart is to take the step.

:func:`look_ahead` takes a few small optimizer steps on the parameters that did get a gradient and
runs forward and backward again after each, while new parameters come alive. The rule is fixed and
documented (docs/verdicts.md): the steps are Adam's (:class:`AdamSteps`: torch's default betas and ε,
its moments kept from step to step), each tensor at a learning rate of its own: :data:`STEP_RELATIVE`
of the RMS it starts from, at least :data:`STEP_FLOOR` (torch's default Adam learning rate), computed
in fp32 (complex64 for a complex tensor, along the phase of its gradient). Adam's first update is
``g / (|g| + ε)``, a sign step where the gradient is well above ε; its later ones average several
gradients. A pure sign step on every step would keep symmetries training breaks (experts mixed by a
router's softmax weights, moved identically forever); a rate that grows with the weight moves a
half-precision weight in the thousands, and one no smaller than Adam's default lr moves a small weight
as far as training's first steps do (a BatchNorm fed values the batch barely varies revives at
Adam's 1e-3 and not at 1e-4: docs/verdicts.md). Each tensor is replaced for the look-ahead and the
original object put back afterwards, so the user's weights are restored bit for bit (the model's
buffers, grads and random state are restored by :func:`fxflow.core.guard.guard` around the check).

A gradient at rounding level is no gradient (:mod:`fxflow.dynamic.rounding`): a zero that a step
turns into round-off (a LayerNorm over one feature, once the nudge has moved its neighbours) is
still zero, and a gradient that is round-off does not move its tensor. The look-ahead stops when a
step revives nothing new; at :data:`MAX_STEPS` a parameter that is still zero while the last step
was reviving others is not known to stay zero (:attr:`LookAhead.exhausted`): ``unconfirmed``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable

import torch

from ..core.tensors import l2_norm
from .gradients import GradInfo
from .rounding import Relative, relative_sizes, suspects

STEP_RELATIVE = 1e-2  # each tensor's learning rate: this fraction of its RMS ...
STEP_FLOOR = 1e-3  # ... or torch's default Adam learning rate where that is larger (an all-zero tensor)
BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # torch.optim.Adam's and AdamW's defaults
MAX_STEPS = 3  # look-ahead steps at most: learning from step 4 is the latest that is told apart

# forward + backward again: each parameter's gradient RMS over the largest (0.0: zero or none); None: it raised
Rerun = Callable[[], "Relative | None"]
# which of the names (sized as given) are round-off, on the model as it is now (fxflow.dynamic.rounding)
Rounding = Callable[["Relative", Collection[str]], "set[str]"]


@dataclass
class LookAhead:
    """What the look-ahead found for the parameters whose first gradient was exactly zero."""

    zeros: list[str]  # exactly zero on step 1 (round-off included)
    learns_from: dict[str, int] = field(default_factory=dict)  # name -> first step with a non-zero gradient
    steps: int = 1  # steps seen, the first included
    note: str | None = None  # why the look-ahead stopped early (a rerun failed)
    # name -> the step on which its gradient was round-off, counted as exactly zero (the first: 1)
    rounding: dict[str, int] = field(default_factory=dict)
    exhausted: bool = False  # it stopped at MAX_STEPS while the last step was still reviving parameters

    @property
    def still_zero(self) -> list[str]:
        return [name for name in self.zeros if name not in self.learns_from]


def may_look_ahead(grads: dict[str, GradInfo]) -> bool:
    """Whether a first step with these gradients may be looked ahead of: one is exactly zero, or small
    enough to be round-off (which counts as zero). A model with neither builds nothing for it."""
    return any(info.present and info.all_zero for info in grads.values()) or bool(suspects(relative_sizes(grads)))


def look_ahead(parameters: dict[str, torch.nn.Parameter], zeros: Iterable[str], rerun: Rerun, *,
               movable: Callable[[str], bool] | None = None, max_steps: int = MAX_STEPS,
               rounding: Rounding | None = None, rounded: Collection[str] = ()) -> LookAhead:
    """Step, rerun, repeat while new parameters come alive; the weights are put back on return.

    ``parameters``: the model's, with the first backward's gradients in ``.grad``. ``rerun()`` runs
    forward and backward again (same inputs and random draws), leaves the new gradients in ``.grad``
    and returns, per parameter, its gradient's size relative to the largest (None: it could not run).
    ``movable(name)``: whether the optimizer moves it (all trainable parameters when not given).
    ``rounding``: which small revived gradients are round-off; ``rounded``: the first step's round-off,
    part of ``zeros``. Which zero-initialized weights held each zero is the diagnose stage's
    (:mod:`fxflow.diagnose.holders`).
    """
    found = LookAhead(zeros=sorted(zeros), rounding=dict.fromkeys(rounded, 1))
    remaining = set(found.zeros)
    originals: dict[str, torch.Tensor] = {}
    adam = AdamSteps(movable)
    try:
        for step in range(2, max_steps + 2):
            _silence(parameters, found.rounding)
            if not adam(parameters, originals):
                break  # nothing had a gradient to move it: every later step is the first one again
            for parameter in parameters.values():
                parameter.grad = None
            relative = rerun()
            if relative is None:
                found.note = f"the look-ahead's run after step {step - 1} failed: its zeros are judged as found"
                break
            found.steps = step
            revived = {name for name in remaining if relative.get(name, 0.0) > 0.0}
            small = suspects(relative, among=revived)
            for name in rounding(relative, small) if rounding is not None and small else ():
                revived.discard(name)
                found.rounding[name] = step
            for name in revived:
                found.learns_from[name] = step
            remaining.difference_update(revived)
            if not remaining or not revived:
                break
            found.exhausted = step == max_steps + 1
    finally:
        for name, original in originals.items():
            parameters[name].data = original
    return found


def _silence(parameters: dict[str, torch.nn.Parameter], rounding: dict[str, int]) -> None:
    """Round-off is no gradient: the tensors whose gradient is round-off are not moved by it."""
    for name in rounding:
        if parameters[name].grad is not None:
            parameters[name].grad = torch.zeros_like(parameters[name].grad)


class AdamSteps:
    """Adam's updates (torch's defaults: betas 0.9 and 0.999, ε 1e-8, bias-corrected) with a learning rate
    of its own per tensor, :data:`STEP_RELATIVE` of the RMS it starts from and at least :data:`STEP_FLOOR`,
    computed in fp32 (complex64) and cast back. The first update is ``g / (|g| + ε)``: a
    sign step where ``|g|`` is well above ε. A sign step on every step would keep symmetries Adam breaks:
    experts mixed by softmax weights get the same gradient times a positive weight each, so sign steps
    move them identically forever, and the router that weighs them reads dead; Adam's ε (on its first
    update) and its moments (once the weights change between steps) move them apart."""

    def __init__(self, movable: Callable[[str], bool] | None) -> None:
        self.movable = movable
        self.state: dict[str, tuple[torch.Tensor, torch.Tensor, int, float]] = {}  # name -> m, v, steps, lr

    def __call__(self, parameters: dict[str, torch.nn.Parameter], originals: dict[str, torch.Tensor]) -> bool:
        """Move every movable parameter that has a gradient (its momentum too); False when none moved."""
        moved = False
        with torch.no_grad():
            for name, parameter in parameters.items():
                grad = parameter.grad
                if grad is None or not parameter.requires_grad or parameter.is_meta:
                    continue
                if not (parameter.is_floating_point() or parameter.is_complex()):
                    continue
                if self.movable is not None and not self.movable(name):
                    continue
                if grad.layout != torch.strided:  # sparse (Embedding(sparse=True))
                    grad = grad.to_dense()
                wide = torch.complex64 if parameter.is_complex() else torch.float32
                direction = self._direction(name, parameter, torch.nan_to_num(grad.to(wide), nan=0.0, posinf=0.0,
                                                                              neginf=0.0))
                if not bool(direction.any()):
                    continue
                originals.setdefault(name, parameter.data)
                lr = self.state[name][3]
                parameter.data = (parameter.detach().to(wide) - lr * direction).to(parameter.dtype)
                moved = True
        return moved

    def _direction(self, name: str, parameter: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """Adam's ``m̂ / (√v̂ + ε)`` after this gradient, its moments kept per tensor."""
        if name not in self.state:
            current = parameter.detach().to(grad.dtype)
            rms = l2_norm(current) / max(current.numel(), 1) ** 0.5
            zero = torch.zeros(grad.shape, dtype=torch.float32, device=grad.device)
            self.state[name] = (torch.zeros_like(grad), zero, 0, max(STEP_RELATIVE * rms, STEP_FLOOR))
        m, v, steps, lr = self.state[name]
        steps += 1
        m = BETAS[0] * m + (1 - BETAS[0]) * grad
        v = BETAS[1] * v + (1 - BETAS[1]) * grad.abs().square()
        self.state[name] = (m, v, steps, lr)
        corrected_m = m / (1 - BETAS[0] ** steps)
        corrected_v = v / (1 - BETAS[1] ** steps)
        return corrected_m / (corrected_v.sqrt() + ADAM_EPS)
