"""The loss one training step differentiates: a user's ``loss_fn``, the model's own, or a projection.

:func:`training_loss` picks it from a forward's outputs: a user's ``loss_fn``, else the model's own
``loss`` output, else a seeded random projection of every floating output (``sum(w_i * out_i)``),
so no output is constant under it: a plain ``.sum()`` of softmax probabilities would be exactly
constant and give every parameter a zero gradient. The probe, the meta probe and the tests' plain
backwards all differentiate this same loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch._subclasses.fake_tensor import is_fake

from ..errors import FxflowError, first_line
from ..core.tensors import tensors_in

LOSS_GIVEN = "the given loss function"
LOSS_OUTPUT = "the model's `loss` output"
LOSS_FIRST_OUTPUT = "the model's first output (its loss: labels were given)"
LOSS_PROJECTION = "random projection of all outputs (the model returns no loss)"
LOSS_SCALAR_OUTPUT = "the model's output (a single number, used as the loss)"


def floating_outputs(value: Any) -> list[torch.Tensor]:
    """Every floating-point tensor in a forward's result: tuples, lists, dicts, dataclasses."""
    return [t for t in tensors_in(value) if t.is_floating_point() or t.is_complex()]


@dataclass(frozen=True)
class TrainingLoss:
    """What one training step differentiates, in words, and where it sits among the outputs."""

    tensor: torch.Tensor | None
    description: str
    output_index: tuple[int, int] | None = None  # the model's own loss: (position, count) in tensors_in(outputs)


def training_loss(outputs: Any, loss_fn: Callable[[Any], torch.Tensor] | None = None, seed: int = 0,
                  labels_given: bool = False) -> TrainingLoss:
    """The loss the model is trained on: ``loss_fn``'s, else the model's own, else a projection.

    The model's own loss is a ``loss`` entry or attribute of the output (a dict, a Hugging Face
    ``ModelOutput``), or, when labels were given, the first element of a tuple output that is a
    single number (Hugging Face's ``return_dict=False`` convention). Otherwise every output counts:
    :func:`projection_loss`.
    """
    if loss_fn is not None:
        try:
            value = loss_fn(outputs)
        except Exception as error:
            raise FxflowError(f"the loss function raised {type(error).__name__}: {first_line(error)}") from error
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            shape = f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
            raise FxflowError(f"the loss function must return a scalar tensor, not {shape}")
        name = getattr(loss_fn, "__name__", "")
        return TrainingLoss(value, f"{LOSS_GIVEN} `{name}`" if name and name != "<lambda>" else LOSS_GIVEN)
    own, description = _own_loss(outputs, labels_given)
    if own is not None:
        tensors = tensors_in(outputs)
        index = next(i for i, t in enumerate(tensors) if t is own)
        return TrainingLoss(own, description, (index, len(tensors)))
    return TrainingLoss(projection_loss(outputs, seed), LOSS_PROJECTION)


def _own_loss(outputs: Any, labels_given: bool) -> tuple[torch.Tensor | None, str]:
    if isinstance(outputs, dict):
        candidate, description = outputs.get("loss"), LOSS_OUTPUT
    elif isinstance(outputs, (tuple, list)):
        candidate, description = (outputs[0] if outputs and labels_given else None), LOSS_FIRST_OUTPUT
    elif not isinstance(outputs, torch.Tensor):
        candidate, description = getattr(outputs, "loss", None), LOSS_OUTPUT
    else:  # a forward that returns one number returns its loss
        candidate, description = outputs, LOSS_SCALAR_OUTPUT
    scalar = isinstance(candidate, torch.Tensor) and candidate.numel() == 1 and (
        candidate.is_floating_point() or candidate.is_complex())
    return (candidate, description) if scalar else (None, "")


def labels_in(inputs: Any) -> bool:
    """Whether keyword inputs carry labels (``labels``, ``start_positions``...): the model then computes its loss."""
    return isinstance(inputs, dict) and any("label" in key or key.endswith("_positions") for key in inputs)


def projection_loss(outputs: Any, seed: int = 0) -> torch.Tensor | None:
    """A seeded random projection of every floating output that requires grad (None if none does)."""
    total = None
    for index, tensor in enumerate(t for t in floating_outputs(outputs) if t.requires_grad):
        if tensor.is_meta or is_fake(tensor):  # values do not exist: any weights will do
            weights = torch.ones_like(tensor)
        else:
            generator = torch.Generator(device=tensor.device).manual_seed(seed + index)
            weights = torch.randn(tensor.shape, generator=generator, device=tensor.device, dtype=tensor.dtype)
        term = (tensor * weights).sum()
        term = term.real if term.is_complex() else term
        total = term if total is None else total + term
    return total
