"""Example inputs: parse ``--input-size``, or infer them from the model's first layer."""
from __future__ import annotations

import itertools
import os
import re
from typing import Any, Sequence

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from ..errors import FxflowError
from .signature import bind_keywords, check_input_count, positional_names, required_inputs  # noqa: F401 (check_input_count: re-exported for the CLI)

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
    shape = tuple(int(s) for s in sizes.split(","))
    if 0 in shape:
        raise FxflowError(f"--input-size {spec!r} has a size of 0: an empty input carries no gradient to check",
                          hint="every size must be at least 1, e.g. 16,10")
    return shape, _DTYPES[dtype_name]


def input_bytes(shapes: Sequence[tuple[tuple[int, ...], torch.dtype]]) -> int:
    """Bytes the inputs of these shapes and dtypes occupy."""
    total = 0
    for shape, dtype in shapes:
        count = 1
        for size in shape:
            count *= size
        total += count * (torch.empty((), dtype=dtype).element_size())
    return total


def _gib(count: int) -> str:
    gib = count / 2**30
    return f"{gib:.0f} GiB" if gib >= 10 else f"{gib:.1f} GiB"


def _free_bytes(device: torch.device) -> int | None:
    """Memory free on ``device`` now, or None when unknown (meta needs none)."""
    if device.type == "meta":
        return None
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _describe(shapes: Sequence[tuple[tuple[int, ...], torch.dtype]]) -> str:
    return ", ".join("(" + ", ".join(str(s) for s in shape) + ")" for shape, _ in shapes)


def integer_bound(model: nn.Module) -> int:
    """An exclusive upper bound valid for every embedding in the model (token ids)."""
    sizes = [m.num_embeddings for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag))]
    return min(sizes) if sizes else 2


def make_inputs(model: nn.Module, specs: Sequence[str], device: torch.device | str | None = None) -> tuple[torch.Tensor, ...]:
    """Random inputs from ``--input-size`` specs; integer inputs are valid token ids for the model."""
    device = torch.device(device if device is not None else device_of(model))
    shapes = [parse_input_size(spec) for spec in specs]
    needed, free = input_bytes(shapes), _free_bytes(device)
    too_big = f"inputs of shape {_describe(shapes)} need {_gib(needed)}"
    # The inputs are drawn on the CPU first: refuse before allocating what cannot fit.
    cpu_free = free if device.type == "cpu" else _free_bytes(torch.device("cpu"))
    for available in (free, cpu_free):
        if available is not None and needed > available:
            raise FxflowError(too_big, hint=f"{_gib(available)} is free; give smaller --input-size values")
    if free is not None and needed * _ACTIVATION_GUARD > free:  # inputs this big: can the run itself fit?
        activations = activation_bytes(model, shapes, device)
        if activations is not None and needed + activations > free:
            raise FxflowError(
                f"a forward and backward on inputs of shape {_describe(shapes)} need about "
                f"{_gib(needed + activations)} (the inputs, and the activations autograd keeps for the backward)",
                hint=f"{_gib(free)} is free; give smaller --input-size values")
    tensors = []
    try:
        for shape, dtype in shapes:
            if dtype == torch.bool:
                tensors.append(torch.rand(shape, device="cpu") > 0.5)
            elif not dtype.is_floating_point:
                tensors.append(torch.randint(0, integer_bound(model), shape, dtype=dtype))
            else:
                tensors.append(torch.randn(shape, dtype=dtype))
        return tuple(t.to(device) for t in tensors)
    except (RuntimeError, MemoryError) as error:  # the allocator's own words are not for users
        if isinstance(error, MemoryError) or "alloc" in str(error) or "out of memory" in str(error):
            raise FxflowError(too_big, hint="give smaller --input-size values") from error
        raise


_ACTIVATION_GUARD = 8  # inputs over 1/8 of free memory get their activations estimated first


def activation_bytes(model: nn.Module, shapes: Sequence[tuple[tuple[int, ...], torch.dtype]],
                     device: torch.device) -> int | None:
    """Bytes of every tensor a forward on inputs of these shapes creates (what autograd may keep
    for the backward), from one forward on fake tensors: nothing is allocated or computed.
    None when the fake forward cannot run."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from .fake import fake_weights, new_fake_mode

    class CountBytes(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            result = func(*args, **(kwargs or {}))
            for tensor in tree_flatten(result)[0]:
                if isinstance(tensor, torch.Tensor):
                    CountBytes.total += tensor.numel() * tensor.element_size()
            return result

    mode = new_fake_mode()
    try:
        weights = fake_weights(model, mode)
        with mode:
            inputs = [torch.zeros(shape, dtype=dtype, device=device) for shape, dtype in shapes]
            with torch.enable_grad(), CountBytes():
                weights(*inputs)
    except Exception:  # the estimate is a guard: a model fake tensors cannot run is simply not guarded
        return None
    return CountBytes.total


def device_of(module: nn.Module) -> torch.device:
    """Where a module's weights live: its first parameter's device, else its first buffer's, else CPU."""
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        return tensor.device
    return torch.device("cpu")


_SHAPED_LAYERS = (nn.Linear, nn.Bilinear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Embedding, nn.EmbeddingBag,
                  nn.LayerNorm, nn.MultiheadAttention, nn.RMSNorm)


def first_layer(model: nn.Module) -> nn.Module | None:
    """The first module in registration order that is a layer (a leaf, or a layer whose only
    children are its parametrizations or its own projections, like weight_norm's Linear or
    MultiheadAttention)."""
    for module in model.modules():
        if isinstance(module, _SHAPED_LAYERS):
            return module
        if module is not model and not isinstance(module, torch.nn.utils.parametrize.ParametrizationList) \
                and not list(module.children()):
            return module  # a leaf of another kind: its input shape is not known
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
    device = device_of(model)
    generator = torch.Generator().manual_seed(seed)
    shape: tuple[int, ...] | None = None
    if isinstance(layer, nn.Linear):
        shape = (batch, layer.in_features)
    elif isinstance(layer, (nn.LayerNorm, nn.RMSNorm)) and layer.normalized_shape:
        shape = (batch, *layer.normalized_shape)
    elif isinstance(layer, nn.MultiheadAttention):  # (batch, seq, embed); with batch_first off, seq comes first
        shape = (batch, 8, layer.embed_dim)
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
    weight = next(layer.parameters(), None)
    dtype = weight.dtype if weight is not None and weight.is_floating_point() else torch.float32
    return (torch.randn(shape, generator=generator).to(device=device, dtype=dtype),)


def no_inputs_note(model: nn.Module) -> str:
    """Why nothing ran, naming forward's arguments so the user knows what to give."""
    names = positional_names(model)
    call = f"forward({', '.join(names)})" if names else "forward"
    given = names[0] if len(names) == 1 else f"({', '.join(names)})" if names else "inputs"
    # said to both: the note does not know whether the Python API or the command line asked
    return (f"no example inputs for {call}: none were given and they could not be inferred from the first "
            f"layer, so no backward ran; give them: `fxflow.check(model, {given})` in Python, one --input-size "
            "per input on the command line (e.g. --input-size 16,10), or example_inputs() in the model's file")


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
