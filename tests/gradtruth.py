"""The ground truth every capture test compares against: one real forward and backward.

``real_grads(model, inputs)`` runs the user's module with the loss it is trained on (its own
``loss`` output, else a seeded random projection of every floating output) and returns which
parameters received a gradient; the model is left as found (grads, flags, values, buffers, modes,
random state). ``assert_agrees(report, truth)`` checks that every static verdict matches it:
reachable/zero where a gradient arrived, dry (cut, unused, frozen) where none did; an opaque
``autograd.Function`` on the path is the one case where the real backward decides.

The loss (:func:`plain_loss`) and the snapshot (:class:`Untouched`) are written here, without
fxflow's code, so a bug there cannot make the oracle agree with it (issue 28, item 7): the loss from
docs/verdicts.md's words, not from fxflow/dynamic/loss.py (issue 39, item 6).
"""
from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Sequence

import numpy
import torch

WET = {"reachable", "zero"}


def real_grads(model: torch.nn.Module, inputs: Sequence[Any], keywords: dict[str, Any] | None = None) -> dict[str, bool]:
    """{parameter name: a gradient arrived} from a real backward of ``model(*inputs, **keywords)``."""
    return {name: grad is not None for name, grad in real_gradients(model, inputs, keywords).items()}


def real_gradients(model: torch.nn.Module, inputs: Sequence[Any],
                   keywords: dict[str, Any] | None = None) -> dict[str, torch.Tensor | None]:
    """{parameter name: a copy of its .grad (a sparse one coalesced to the rows it holds)} from a
    real backward of ``model(*inputs, **keywords)``; the model is left as found."""
    with Untouched(model):
        for parameter in model.parameters():
            parameter.grad = None
        with torch.enable_grad():
            loss = plain_loss(model(*inputs, **(keywords or {})), labels_given=has_labels(keywords))
            if loss is not None and loss.requires_grad:
                loss.backward()
        return {name: _stored(p.grad) for name, p in model.named_parameters()}


def has_labels(inputs: Any) -> bool:
    """Keyword inputs with labels (``labels``, ``start_positions``): the model computes its own loss."""
    return isinstance(inputs, dict) and any("label" in key or key.endswith("_positions") for key in inputs)


def plain_loss(outputs: Any, labels_given: bool = False, seed: int = 0) -> torch.Tensor | None:
    """The loss a training step differentiates, as docs/verdicts.md ("The loss") states it, written from
    that text alone: the model's own loss when it returns one, else a seeded random projection of every
    floating output (None: no output a backward could run on).

    The docs' own loss: "a ``loss`` entry of a dict or a Hugging Face ``ModelOutput``" (a ModelOutput is
    a dict), "or, when labels are given, the first element of a tuple output that is one number"."""
    if isinstance(outputs, Mapping):
        own = outputs.get("loss")
    elif isinstance(outputs, (tuple, list)) and labels_given and outputs:
        own = outputs[0]
    else:
        own = None
    if isinstance(own, torch.Tensor) and own.numel() == 1 and (own.is_floating_point() or own.is_complex()):
        return own
    # "a seeded random projection of every floating output, so that no output is constant under it":
    # sum(w_i * out_i), w_i from a generator seeded seed + i, over the outputs a backward can run on
    terms = []
    for index, tensor in enumerate(t for t in _floating(outputs) if t.requires_grad):
        generator = torch.Generator(device=tensor.device).manual_seed(seed + index)
        weights = torch.randn(tensor.shape, generator=generator, device=tensor.device, dtype=tensor.dtype)
        term = (tensor * weights).sum()
        terms.append(term.real if term.is_complex() else term)
    return sum(terms[1:], terms[0]) if terms else None


def first_learning_steps(model: torch.nn.Module, backward: Callable[[], None], steps: int, lr: float,
                         learned: Callable[[list[str]], Iterable[str]] | None = None) -> dict[str, int | None]:
    """{trainable parameter: the first of ``steps`` real Adam steps (``lr``) whose ``backward()`` leaves it a
    gradient that ``learned`` accepts (``learned(names)``: those of ``names`` that learned; by default the
    ones with a non-zero ``.grad``), None: none of them}. Steps ``model`` itself: the caller copies it or
    puts it back. The one loop behind the tests' Adam truth."""
    trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}
    learned = learned or (lambda names: [name for name in names if trainable[name].grad is not None
                                         and bool(trainable[name].grad.count_nonzero())])
    first: dict[str, int | None] = dict.fromkeys(trainable)
    if not trainable:
        return first
    optimizer = torch.optim.Adam(trainable.values(), lr=lr)
    for step in range(1, steps + 1):
        optimizer.zero_grad(set_to_none=True)
        backward()
        for name in learned([name for name, found in first.items() if found is None]):
            first[name] = step
        if all(found is not None for found in first.values()):
            break
        optimizer.step()
    return first


def _floating(value: Any) -> list[torch.Tensor]:
    """Every floating tensor in an output, depth first: dicts (a ModelOutput is one), sequences, dataclasses."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() or value.is_complex() else []
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (tuple, list)):
        items = list(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [getattr(value, field.name) for field in dataclasses.fields(value)]
    else:
        return []
    return [tensor for item in items for tensor in _floating(item)]


class Untouched:
    """What a forward and backward may change on a model, put back on exit: ``.grad``, ``requires_grad``,
    parameter and buffer values, every module's train/eval mode, torch's, Python's and NumPy's random state."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def __enter__(self) -> "Untouched":
        parameters = list(dict.fromkeys(self.model.parameters()))
        self.parameters = [(p, p.grad, p.requires_grad, p.detach().clone()) for p in parameters]
        self.buffers = [(module, name, buffer, buffer.detach().clone()) for module in self.model.modules()
                        for name, buffer in module._buffers.items() if buffer is not None]
        self.modes = [(module, module.training) for module in self.model.modules()]
        self.random = (torch.get_rng_state(), random.getstate(), numpy.random.get_state())
        return self

    def __exit__(self, *exc: Any) -> None:
        with torch.no_grad():
            for parameter, grad, requires_grad, value in self.parameters:
                parameter.copy_(value)
                parameter.grad = grad
                parameter.requires_grad_(requires_grad)
            for module, name, buffer, value in self.buffers:  # the same tensor, even if forward swapped it
                buffer.copy_(value)
                module._buffers[name] = buffer
        for module, training in self.modes:
            module.training = training
        torch.set_rng_state(self.random[0])
        random.setstate(self.random[1])
        numpy.random.set_state(self.random[2])


def static_disagreements(verdicts: dict[str, str], truth: dict[str, bool],
                         opaque_ok: bool = False) -> dict[str, tuple[str, bool]]:
    """Parameters whose static verdict contradicts the real backward."""
    bad = {}
    for name, has_grad in truth.items():
        static = verdicts[name]
        if (static in WET) != has_grad and not (opaque_ok and static in WET and not has_grad):
            bad[name] = (static, has_grad)
    return bad


def assert_agrees(report: Any, truth: dict[str, bool], opaque_ok: bool = False) -> None:
    """Every parameter of the report agrees with the real backward (and with its own probe)."""
    verdicts = {p.name: p.static for p in report.parameters}
    assert set(verdicts) == set(truth), (sorted(verdicts), sorted(truth))
    assert static_disagreements(verdicts, truth, opaque_ok) == {}
    assert [p.name for p in report.parameters if p.agree is False] == []


def line_of(path: str, marker: str) -> int:
    """The 1-based number of the first line of ``path`` that contains ``marker``."""
    with open(path) as handle:
        for number, text in enumerate(handle, 1):
            if marker in text:
                return number
    raise AssertionError(f"{marker!r} not in {path}")


def real_dynamic(model: torch.nn.Module, inputs: Sequence[Any], vanishing: float = 1e-3) -> dict[str, str]:
    """{parameter name: missing / zero / vanishing / ok} from a real backward of ``model`` on ``inputs``,
    read straight from the ``.grad`` tensors, independently of fxflow's own statistics."""
    grads = real_gradients(model, inputs)
    rms = {name: float(g.double().pow(2).mean().sqrt()) for name, g in grads.items() if g is not None}
    largest = max(rms.values(), default=0.0)
    verdicts = {}
    for name, grad in grads.items():
        if grad is None:
            verdicts[name] = "missing"
        elif not bool((grad != 0).any()):
            verdicts[name] = "zero"
        else:
            verdicts[name] = "vanishing" if rms[name] < vanishing * largest else "ok"
    return verdicts


def _stored(grad: torch.Tensor | None) -> torch.Tensor | None:
    if grad is None:
        return None
    return grad.coalesce().values().detach().clone() if grad.is_sparse else grad.detach().clone()
