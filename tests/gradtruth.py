"""The ground truth every capture test compares against: one real forward and backward.

``real_grads(model, inputs)`` runs the user's module with the same seeded projection loss the
probe uses and returns which parameters received a gradient; the model is left as found
(grads cleared back, RNG restored). ``assert_agrees(report, truth)`` checks that every static
verdict matches it: reachable/zero where a gradient arrived, dry (cut, unused, frozen) where none
did; an opaque ``autograd.Function`` on the path is the one case where the real backward decides.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from fxflow.probe import projection_loss
from fxflow.state import ModelSnapshot

WET = {"reachable", "zero"}


def real_grads(model: torch.nn.Module, inputs: Sequence[Any], keywords: dict[str, Any] | None = None) -> dict[str, bool]:
    """{parameter name: a gradient arrived} from a real backward of ``model(*inputs, **keywords)``."""
    snapshot = ModelSnapshot.save(model)
    try:
        for parameter in model.parameters():
            parameter.grad = None
        with torch.enable_grad():
            loss = projection_loss(model(*inputs, **(keywords or {})), 0)
            if loss is not None and loss.requires_grad:
                loss.backward()
        return {name: p.grad is not None for name, p in model.named_parameters()}
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
