"""The zoo's registry: one :class:`Specimen` per architecture, built on demand.

A builder returns the model and the inputs it is checked on (a dict of keyword arguments, as a
Hugging Face user would pass them, or a tuple of positional ones). It must be cheap: tiny
configs (1-2 layers, width 16-32, vocabulary 99, 8 tokens, 16x16 images, short audio).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402


@dataclass(frozen=True)
class Path:
    """One way fxflow can check a model: a capture method, and the twin tensors its analysis
    re-runs forward's ops on (``meta``, what models of real size get, or ``real`` copies, what a
    small model gets). Both are pinned (``FXFLOW_TWINS``): a tiny zoo model would otherwise only
    ever be checked on real twins."""

    name: str
    capture: str | None  # None: the whole chain, as a user gets it
    twins: str | None  # None: the twins fxflow picks for the model's size


# What `fxflow.check(model, inputs)` does with no options: the suite checks every model this way.
DEFAULT_CHAIN = Path("default chain", None, None)
# Each capture method alone: the matrix (tests/zoo_matrix) checks every model on every one.
PATHS = (
    Path("symbolic_trace", "symbolic_trace", "meta"),
    Path("torch.export", "torch.export", "meta"),
    Path("runtime", "runtime", "meta"),
    Path("runtime/real twins", "runtime", "real"),
)
PATH_NAMES = tuple(path.name for path in PATHS)

Built = tuple[torch.nn.Module, Any]


@dataclass(frozen=True)
class Specimen:
    """One architecture of the zoo."""

    name: str
    family: str
    build: Callable[[], Built]

    def make(self, seed: int = 0) -> Built:
        """The model and its inputs, from a fixed seed, in train() mode as it is while training:
        dropout, drop-path and SpecAugment run."""
        torch.manual_seed(seed)
        model, inputs = self.build()
        return model.train(), inputs


SPECIMENS: dict[str, Specimen] = {}


def specimen(family: str, *, name: str | None = None) -> Callable:
    """Register a builder as a zoo specimen under ``name`` (the function's name by default)."""
    def register(build: Callable[[], Built]) -> Callable[[], Built]:
        key = name or build.__name__
        assert key not in SPECIMENS, key
        SPECIMENS[key] = Specimen(key, family, build)
        return build
    return register
