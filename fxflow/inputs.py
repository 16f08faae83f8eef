"""Example inputs: parse ``--input-size``, or infer them from the model's first layer."""
from __future__ import annotations

import re
from typing import Any, Sequence

import torch
from torch import nn

from .errors import FxflowError
from .signature import bind_keywords, check_input_count, required_inputs  # noqa: F401 (check_input_count: re-exported for the CLI)

_DTYPES = {
    "float": torch.float32, "float32": torch.float32, "float64": torch.float64, "double": torch.float64,
    "float16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16,
    "long": torch.long, "int64": torch.long, "int": torch.int32, "int32": torch.int32, "bool": torch.bool,
}
_SPEC = re.compile(r"^\s*\d+(\s*,\s*\d+)*\s*(:\s*[a-z0-9]+\s*)?$")


def parse_input_size(spec: str) -> tuple[tuple[int, ...], torch.dtype]:
    """``"16,10"`` -> ((16, 10), float32); ``"2,7:long"`` -> ((2, 7), int64)."""
    if not _SPEC.match(spec):
        raise FxflowError(f"--input-size {spec!r} is malformed",
                          hint="use comma-separated sizes such as 16,10 or 2,7:long")
    sizes, _, dtype_name = spec.partition(":")
    dtype_name = dtype_name.strip() or "float32"
    if dtype_name not in _DTYPES:
        raise FxflowError(f"--input-size {spec!r}: unknown dtype {dtype_name!r}",
                          hint="use one of " + ", ".join(sorted(_DTYPES)))
    return tuple(int(s) for s in sizes.split(",")), _DTYPES[dtype_name]


def integer_bound(model: nn.Module) -> int:
    """An exclusive upper bound valid for every embedding in the model (token ids)."""
    sizes = [m.num_embeddings for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag))]
    return min(sizes) if sizes else 2


def make_inputs(model: nn.Module, specs: Sequence[str], device: torch.device | str | None = None) -> tuple[torch.Tensor, ...]:
    """Random inputs from ``--input-size`` specs; integer inputs are valid token ids for the model."""
    device = device if device is not None else _model_device(model)
    tensors = []
    for spec in specs:
        shape, dtype = parse_input_size(spec)
        if dtype == torch.bool:
            tensors.append(torch.rand(shape, device="cpu") > 0.5)
        elif not dtype.is_floating_point:
            tensors.append(torch.randint(0, integer_bound(model), shape, dtype=dtype))
        else:
            tensors.append(torch.randn(shape, dtype=dtype))
    return tuple(t.to(device) for t in tensors)


def _model_device(model: nn.Module) -> torch.device:
    for tensor in list(model.parameters()) + list(model.buffers()):
        return tensor.device
    return torch.device("cpu")


def first_layer(model: nn.Module) -> nn.Module | None:
    """The first leaf module in registration order, if it has parameters."""
    for module in model.modules():
        if not list(module.children()):
            return module
    return None


def infer_inputs(model: nn.Module, batch: int = 2, seed: int = 0) -> tuple[torch.Tensor, ...] | None:
    """One input shaped for the first layer when that layer says it unambiguously.

    Unambiguous: forward needs exactly one input and the first leaf module is a Linear, Conv1d/2d/3d
    or Embedding. Values come from a private generator seeded with ``seed``, so inferring inputs
    leaves the global random state alone.
    """
    if required_inputs(model) not in (None, 1):
        return None
    layer = first_layer(model)
    device = _model_device(model)
    generator = torch.Generator().manual_seed(seed)
    shape: tuple[int, ...] | None = None
    if isinstance(layer, nn.Linear):
        shape = (batch, layer.in_features)
    elif isinstance(layer, nn.Conv1d):
        shape = (batch, layer.in_channels, 32)
    elif isinstance(layer, nn.Conv2d):
        shape = (batch, layer.in_channels, 32, 32)
    elif isinstance(layer, nn.Conv3d):
        shape = (batch, layer.in_channels, 8, 16, 16)
    elif isinstance(layer, nn.Embedding):
        return (torch.randint(0, layer.num_embeddings, (batch, 8), generator=generator).to(device),)
    if shape is None:
        return None
    dtype = layer.weight.dtype if layer.weight.is_floating_point() else torch.float32
    return (torch.randn(shape, generator=generator).to(device=device, dtype=dtype),)


def as_call_inputs(inputs: Any, model: nn.Module) -> tuple[tuple[Any, ...] | None, dict[str, Any]]:
    """Normalise what a user passes as inputs into forward's positional inputs and keyword-only rest.

    One tensor, a tuple/list, None, or a dict of keyword arguments: those naming positional
    arguments are bound to their positions (skipped ones at their defaults), the others are
    passed on as keywords when forward takes ``**kwargs``, as ``model(**inputs)`` would.
    """
    if inputs is None:
        return None, {}
    if isinstance(inputs, dict):
        return bind_keywords(model, inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


def as_input_tuple(inputs: Any, model: nn.Module) -> tuple[Any, ...] | None:
    """Positional inputs only: like :func:`as_call_inputs`, for callers that cannot pass keywords."""
    args, keywords = as_call_inputs(inputs, model)
    if keywords:
        raise FxflowError(f"input {next(iter(keywords))!r} can only be passed to forward as a keyword",
                          hint="pass the inputs as a dict to fxflow.check")
    return args
