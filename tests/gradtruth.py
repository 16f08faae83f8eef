"""The ground truth every capture test compares against: one real forward and backward.

``real_grads(model, inputs)`` runs the user's module with the loss it is trained on, chosen as the
probe chooses it (its own ``loss`` output, else the same seeded projection of every output) and returns which parameters received a gradient; the model is left as found
(grads cleared back, RNG restored). ``assert_agrees(report, truth)`` checks that every static
verdict matches it: reachable/zero where a gradient arrived, dry (cut, unused, frozen) where none
did; an opaque ``autograd.Function`` on the path is the one case where the real backward decides.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from fxflow.dynamic.loss import labels_in, training_loss
from fxflow.core.state import ModelSnapshot

WET = {"reachable", "zero"}


def real_grads(model: torch.nn.Module, inputs: Sequence[Any], keywords: dict[str, Any] | None = None) -> dict[str, bool]:
    """{parameter name: a gradient arrived} from a real backward of ``model(*inputs, **keywords)``."""
    return {name: grad is not None for name, grad in real_gradients(model, inputs, keywords).items()}


def real_gradients(model: torch.nn.Module, inputs: Sequence[Any],
                   keywords: dict[str, Any] | None = None) -> dict[str, torch.Tensor | None]:
    """{parameter name: a copy of its .grad (a sparse one coalesced to the rows it holds)} from a
    real backward of ``model(*inputs, **keywords)``; the model is left as found."""
    snapshot = ModelSnapshot.save(model)
    try:
        for parameter in model.parameters():
            parameter.grad = None
        with torch.enable_grad():
            loss = training_loss(model(*inputs, **(keywords or {})), labels_given=labels_in(keywords)).tensor
            if loss is not None and loss.requires_grad:
                loss.backward()
        return {name: _stored(p.grad) for name, p in model.named_parameters()}
    finally:
        snapshot.restore()


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
