"""Gradient health over training: per layer and per step, how large the gradients are.

Under ``fxflow.watch(steps=N)`` (and the trainer callbacks with ``steps=N``) every parameter's
gradient passes through :meth:`HealthRecorder.record` once per step. Per layer (the module that
owns the parameters) it keeps the mean and the largest ``|grad|``, and, when an optimizer step
followed, the update-to-weight ratio ``||w_after - w_before|| / ||w_before||``. :func:`flags`
then names the layers whose gradient is vanishing or exploding next to the rest of the model,
and the step where that began: the bar chart people paste into notebooks by hand, computed.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import torch

from ..core.records import HealthFlag, LayerStep
from ..core.tensors import magnitude_sum
from ..verdicts import DynamicVerdict

ROOT = "(root)"  # the layer name of parameters the model holds itself
_MEDIAN_OF = 3  # layers an exploding one is compared with, at least
VANISHING = DynamicVerdict.VANISHING  # the verdict's own rule, applied to layers
EXPLODING = "exploding"  # not a verdict: a layer far above the rest


def layer_of(parameter: str) -> str:
    """The layer a parameter belongs to: its module's qualified name."""
    owner = parameter.rpartition(".")[0]
    return owner or ROOT


@dataclass
class HealthRecorder:
    """Collects per-layer gradient statistics step by step (see the module docstring)."""

    sums: dict[tuple[int, str], list[float]] = field(default_factory=dict)  # (step, layer) -> [sum|g|, count, max]
    # parameter -> (step, its value then, its norm then); the value's buffer is reused step after step
    before: dict[str, tuple[int, torch.Tensor, float]] = field(default_factory=dict)
    updates: dict[tuple[int, str], list[float]] = field(default_factory=dict)  # (step, layer) -> [Σ|Δw|², Σ|w|²]
    order: list[str] = field(default_factory=list)  # the layers in the model's order (history lists them so)
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)

    def record(self, step: int, name: str, parameter: torch.Tensor, grad: torch.Tensor) -> float:
        """One parameter's gradient in ``step``; also closes the update of its previous step.
        Returns the gradient's sum of ``|grad|`` (0: exactly zero; not finite: NaN or inf in it)."""
        self.settle(name, parameter)
        values = grad.detach()
        if values.is_sparse:
            values = values.coalesce().values()
        value = parameter.detach()
        buffer = self.buffers.get(name)
        if buffer is None or buffer.shape != value.shape or buffer.dtype != value.dtype:
            buffer = self.buffers[name] = torch.empty_like(value)
        # |g| goes through the same buffer the parameter's value is then copied into: a model-sized
        # allocation per step would cost more than the reductions themselves
        magnitude = torch.abs(values, out=buffer) if _fits(values, buffer) else values.abs()
        total, largest = (magnitude_sum(magnitude), float(magnitude.max())) if values.numel() else (0.0, 0.0)
        entry = self.sums.setdefault((step, layer_of(name)), [0.0, 0, 0.0])
        entry[0] += total  # the sum of |g|: exact about zero (no squares to underflow), NaN and inf kept
        entry[1] += values.numel()
        entry[2] = max(entry[2], largest)
        buffer.copy_(value)
        self.before[name] = (step, buffer, float(torch.linalg.vector_norm(value)))
        return total

    def settle(self, name: str, parameter: torch.Tensor) -> None:
        """What the optimizer did to ``name`` since its last recorded step (nothing: no entry)."""
        if name not in self.before:
            return
        step, old, size = self.before.pop(name)
        change = float(torch.linalg.vector_norm(old.sub_(parameter.detach()))) ** 2  # in place: the buffer is ours
        if change == 0.0:
            return  # no optimizer step between: no update to speak of
        entry = self.updates.setdefault((step, layer_of(name)), [0.0, 0.0])
        entry[0] += change
        entry[1] += size ** 2

    def rescale(self, step: int, scale: float) -> None:
        """``step``'s gradients carried a loss scale (a GradScaler's): divide it out."""
        for (recorded, _), entry in self.sums.items():
            if recorded == step:
                entry[0] /= scale
                entry[2] /= scale

    def drop(self, step: int) -> None:
        """Forget ``step`` (a skipped step: its gradients were never used)."""
        for table in (self.sums, self.updates):
            for key in [key for key in table if key[0] == step]:
                del table[key]

    def history(self) -> dict[str, list[LayerStep]]:
        """Per layer, its steps in order, numbered 1, 2, ... over the steps kept."""
        rank = {layer: index for index, layer in enumerate(self.order)}
        number = {step: index for index, step in enumerate(sorted({step for step, _ in self.sums}), start=1)}
        layers: dict[str, list[LayerStep]] = {}
        for (step, layer), (total, count, largest) in sorted(
                self.sums.items(), key=lambda item: (rank.get(item[0][1], len(rank)), item[0][1], item[0][0])):
            update = self.updates.get((step, layer))
            ratio = math.sqrt(update[0] / update[1]) if update and update[1] > 0 else None
            layers.setdefault(layer, []).append(LayerStep(number[step], total / max(count, 1), largest, ratio))
        return layers


def flags(history: dict[str, list[LayerStep]], factor: float = 1e-3,
          explained: dict[str, int] | None = None) -> list[HealthFlag]:
    """Layers whose gradient stays far from the rest of the model's up to the last step, and the
    step where that began: vanishing when its mean |grad| is below ``factor`` times the largest
    other layer's (the rule of the ``vanishing`` verdict), exploding when it is above ``1/factor``
    times the median of the others (with at least three others: two small ones are no "rest").

    ``explained``: per layer, the step up to which its gradient is already explained (a zero-init
    weight holds its parameters until then: their verdict says so); a flag that began by then is
    not raised. A layer flagged like one of its parents is covered by the parent's flag."""
    return _outermost([flag for flag in _flags(history, factor)
                       if flag.since > (explained or {}).get(flag.layer, 0)])


def _outermost(found: list[HealthFlag]) -> list[HealthFlag]:
    """Each flag once: a submodule's flag of the same kind as an ancestor's is that flag again."""
    kinds = {(flag.layer, flag.kind) for flag in found}

    def covered(flag: HealthFlag) -> bool:
        parts = flag.layer.split(".")
        return any((".".join(parts[:end]), flag.kind) in kinds for end in range(1, len(parts)))

    return [flag for flag in found if flag.layer == ROOT or not covered(flag)]


def _flags(history: dict[str, list[LayerStep]], factor: float) -> list[HealthFlag]:
    steps = sorted({record.step for records in history.values() for record in records})
    means = {step: {layer: r.mean for layer, records in history.items() for r in records if r.step == step}
             for step in steps}
    faded = {step: {name for name, m in layer_means.items()
                    if m < factor * max((o for other, o in layer_means.items() if other != name), default=0.0)}
             for step, layer_means in means.items()}
    found = []
    for layer in history:
        for kind in (VANISHING, EXPLODING):
            since, ratio = None, 0.0
            for step in steps:
                mine = means[step].get(layer)
                # exploding is measured against the layers that are not vanishing themselves: a few
                # faded layers must not make the median, and the healthy rest "exploding"
                others = [m for name, m in means[step].items() if name != layer and m > 0
                          and (kind == VANISHING or name not in faded[step])]
                reference = (max(others, default=0.0) if kind == VANISHING
                             else statistics.median(others) if len(others) >= _MEDIAN_OF else 0.0)
                off = mine is not None and reference > 0 and (
                    mine < factor * reference if kind == VANISHING else mine > reference / factor)
                since = (since or step) if off else None
                ratio = mine / reference if off else ratio
            if since is not None:
                found.append(HealthFlag(layer, kind, since, ratio))
    return found



def _fits(values: torch.Tensor, buffer: torch.Tensor) -> bool:
    """Whether ``|values|`` can be written into ``buffer`` (a real gradient of the parameter's own shape)."""
    return values.shape == buffer.shape and values.dtype == buffer.dtype and not values.is_complex()
