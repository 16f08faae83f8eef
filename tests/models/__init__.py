"""Fixture models and the independent checks the tests compare fxflow against.

Nothing here imports fxflow's analysis: the reference is always a real forward and backward
of the model (on a deep copy, so the model under test is never touched by the reference).
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import os
import random
from typing import Any, Callable, Sequence

import torch


def floating_tensors(value: Any) -> list[torch.Tensor]:
    """Every floating tensor in an output: tuples, lists, dicts, dataclasses."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, dict):
        return [t for item in value.values() for t in floating_tensors(item)]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in floating_tensors(item)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [t for f in dataclasses.fields(value) for t in floating_tensors(getattr(value, f.name))]
    return []


def real_grads(model: torch.nn.Module, inputs: Sequence[Any],
               loss_fn: Callable[[Any], torch.Tensor] | None = None) -> dict[str, torch.Tensor | None]:
    """Each parameter's ``.grad`` after one real forward and backward of a deep copy of ``model``.

    The loss is a random projection of every floating output (generator seeded here, independent
    of fxflow's), so no output is constant under it.
    """
    clone = copy.deepcopy(model)
    for p in clone.parameters():
        p.grad = None
    with torch.enable_grad():
        outputs = clone(*inputs)
        if loss_fn is not None:
            loss = loss_fn(outputs)
        else:
            generator = torch.Generator().manual_seed(1234)
            terms = [(t * torch.randn(t.shape, generator=generator, dtype=t.dtype)).sum()
                     for t in floating_tensors(outputs) if t.requires_grad]
            loss = sum(terms) if terms else None
        if loss is not None and loss.requires_grad:
            loss.backward()
    return {name: (None if p.grad is None else p.grad.detach().clone()) for name, p in clone.named_parameters()}


def grad_kind(grad: torch.Tensor | None) -> str:
    """missing / zero / present, from a real gradient."""
    if grad is None:
        return "missing"
    return "zero" if bool((grad == 0).all()) else "present"


def projection(outputs) -> torch.Tensor:
    """The test's own loss: a fixed random projection of every floating output."""
    generator = torch.Generator().manual_seed(99)
    terms = [(t * torch.randn(t.shape, generator=generator)).sum() for t in floating_tensors(outputs) if t.requires_grad]
    return sum(terms) if terms else torch.zeros(())


# docs/verdicts.md, "A gradient at rounding level is zero": a gradient under ROUND_OFF_SUSPECT of the largest
# gradient's RMS whose size relative to the largest falls by more than ROUND_OFF_COLLAPSE when the same step
# runs in float64 is round-off: zero in exact arithmetic.
ROUND_OFF_SUSPECT, ROUND_OFF_COLLAPSE = 1e-5, 1e-3


def _rms(grads: dict[str, torch.Tensor | None]) -> dict[str, float]:
    return {n: float(g.double().norm()) / math.sqrt(max(g.numel(), 1)) for n, g in grads.items()
            if g is not None and bool(torch.isfinite(g).all())}


def reference_dynamic(grads: dict[str, torch.Tensor | None], factor: float = 1e-3,
                      wide: Callable[[], dict[str, torch.Tensor | None]] | None = None) -> dict[str, str]:
    """missing / zero / nonfinite / vanishing / ok, computed from real gradients; ``wide()``: the same step's
    gradients in float64 (asked for only when some gradient is that small), which tell round-off (zero in
    exact arithmetic) from a small real gradient."""
    rms = _rms(grads)
    largest = max(rms.values(), default=0.0)
    suspect = any(0 < value < ROUND_OFF_SUSPECT * largest for value in rms.values())
    wide_rms = _rms(wide()) if wide is not None and suspect else {}
    wide_largest = max(wide_rms.values(), default=0.0)
    result = {}
    for name, grad in grads.items():
        if grad is None:
            result[name] = "missing"
        elif not bool(torch.isfinite(grad).all()):
            result[name] = "nonfinite"
        elif bool((grad == 0).all()):
            result[name] = "zero"
        elif (name in wide_rms and wide_largest > 0 and rms[name] < ROUND_OFF_SUSPECT * largest
              and wide_rms[name] / wide_largest < ROUND_OFF_COLLAPSE * rms[name] / largest):
            result[name] = "zero"  # round-off
        elif rms[name] < factor * largest:
            result[name] = "vanishing"
        else:
            result[name] = "ok"
    return result


def float64_grads(model: torch.nn.Module, inputs: Sequence[Any],
                  loss_fn: Callable[[Any], torch.Tensor] | None = None) -> dict[str, torch.Tensor | None]:
    """:func:`real_grads` of the same step on a float64 copy of ``model`` and its floating inputs."""
    wide = copy.deepcopy(model).double()
    widened = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    return real_grads(wide, widened, loss_fn)


# What each static verdict promises about the real gradient.
STATIC_PROMISE = {"frozen": "missing", "unused": "missing", "cut": "missing", "zero": "zero", "reachable": "present"}


def marker_line(obj: Any, marker: str) -> tuple[str, int]:
    """(absolute file, line) of the line in ``obj``'s source file that carries ``# <marker>``."""
    path = os.path.abspath(inspect.getsourcefile(obj))
    with open(path) as handle:
        hits = [number for number, text in enumerate(handle, 1) if text.rstrip().endswith(f"# {marker}")]
    if len(hits) != 1:
        raise AssertionError(f"marker {marker!r} found {len(hits)} times in {path}")
    return path, hits[0]


def split_source(source: str | None) -> tuple[str, int] | None:
    """``"examples/seed.py:15"`` -> (absolute path, 15)."""
    if not source:
        return None
    path, _, line = source.rpartition(":")
    return os.path.abspath(path), int(line)


@dataclasses.dataclass
class ModelState:
    """Everything a check must leave as it was, captured by value."""

    tensors: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor | None]
    flags: dict[str, bool]
    training: dict[str, bool]
    attributes: dict[str, list[str]]
    rng: torch.Tensor
    python_rng: Any

    @classmethod
    def of(cls, model: torch.nn.Module) -> "ModelState":
        return cls(
            tensors={k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()},
            grads={n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()},
            flags={n: p.requires_grad for n, p in model.named_parameters()},
            training={n: m.training for n, m in model.named_modules()},
            attributes={n: sorted(m.__dict__) for n, m in model.named_modules()},
            rng=torch.get_rng_state(),
            python_rng=random.getstate(),
        )

    def assert_same(self, other: "ModelState") -> None:
        assert self.tensors.keys() == other.tensors.keys()
        for key in self.tensors:
            assert torch.equal(self.tensors[key], other.tensors[key]), key
        for key, grad in self.grads.items():
            assert (grad is None) == (other.grads[key] is None), key
            if grad is not None:
                assert torch.equal(grad, other.grads[key]), key
        assert self.flags == other.flags
        assert self.training == other.training
        assert self.attributes == other.attributes
        assert torch.equal(self.rng, other.rng)
        assert self.python_rng == other.python_rng
