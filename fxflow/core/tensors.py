"""Tensor helpers every stage shares: the tensors in a value, gradient norms, parameter names."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch.utils._pytree import SUPPORTED_NODES, tree_flatten


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor in a value: tuples, lists, dicts (ModelOutput included) and dataclasses.

    pytree alone misses plain dataclasses, and a forward returning one would look tensor-free.
    """
    # The analysis asks this of every value of every node: a tensor, None, a number and plain
    # tuples, lists and dicts are answered without pytree (the same leaves, several times faster).
    kind = type(value)
    if kind in _NO_TENSORS:
        return []
    if isinstance(value, torch.Tensor) and kind not in SUPPORTED_NODES:
        return [value]
    if kind is tuple or kind is list:
        return [t for item in value for t in tensors_in(item)]
    if kind is dict:
        return [t for item in value.values() for t in tensors_in(item)]
    found: list[torch.Tensor] = []
    for leaf in tree_flatten(value)[0]:
        if isinstance(leaf, torch.Tensor):
            found.append(leaf)
        elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            for item in dataclasses.fields(leaf):
                found.extend(tensors_in(getattr(leaf, item.name)))
        elif isinstance(leaf, dict):  # a dict subclass pytree does not know
            found.extend(tensors_in(list(leaf.values())))
    return found


_NO_TENSORS = frozenset({type(None), bool, int, float, complex, str, torch.dtype, torch.device})


def call_tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in a call's arguments or result (tuples, lists, dicts): the modes that look at
    every torch call use it, so plain loops rather than pytree, which costs several times more."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in call_tensors(item)]
    return []


def result_elements(result: Any) -> dict[Any, list[torch.Tensor]]:
    """The tensors of each element of a tuple, list or dict result holding more than one such element;
    a named tuple's elements (``max``'s ``values`` and ``indices``) go by their names."""
    if isinstance(result, tuple) and hasattr(result, "_fields"):
        items = zip(result._fields, result)
    elif isinstance(result, (tuple, list)):
        items = enumerate(result)
    elif isinstance(result, dict):
        items = result.items()
    else:
        return {}
    elements = {key: tensors_in(value) for key, value in items}
    elements = {key: tensors for key, tensors in elements.items() if tensors}
    return elements if len(elements) > 1 else {}


def parameter_names(model: torch.nn.Module) -> dict[int, str]:
    """id(parameter) -> its canonical qualified name (the first one ``named_parameters`` gives)."""
    return {id(p): name for name, p in model.named_parameters()}


def is_integer_scalar(tensor: torch.Tensor) -> bool:
    """A 0-dim tensor of integers (or bools) that holds values: a size, not a weight."""
    return tensor.dim() == 0 and not tensor.is_meta and not (tensor.is_floating_point() or tensor.is_complex())


def gradient_norm(grad: torch.Tensor) -> float:
    """The L2 norm of ``grad``'s stored values (a sparse gradient: the rows it has), as exact as float64."""
    return l2_norm(stored_values(grad.detach()))


_FLOAT32_SAFE = 1e-10  # a float32 norm at least this large lost nothing to underflow worth a digit


def l2_norm(values: torch.Tensor) -> float:
    """The L2 norm of a dense tensor, read in one pass: in float32 (twice as fast as float64 on CPU),
    and again in float64 only when float32 may have lost something: a norm below ``1e-10``, where
    squares of the entries underflow, or one that overflowed (NaN and inf come out of either)."""
    if values.is_complex():
        return float(torch.linalg.vector_norm(values, dtype=torch.complex128))
    if values.dtype != torch.float64:
        quick = float(torch.linalg.vector_norm(values, dtype=torch.float32))
        if quick >= _FLOAT32_SAFE and quick != math.inf:
            return quick
    return float(torch.linalg.vector_norm(values, dtype=torch.float64))


def stored_values(grad: torch.Tensor) -> torch.Tensor:
    """The values a gradient holds: all of a dense one; a sparse one's, duplicates summed.

    ``nn.Embedding(sparse=True)`` gives a COO gradient with one (possibly repeated) row per
    lookup: rows never looked up are not part of it, and repeated ones add up when coalesced.
    """
    if grad.layout == torch.sparse_coo:
        return grad.coalesce().values()
    if grad.layout != torch.strided:  # CSR, CSC, BSR, BSC: values() holds the stored entries
        return grad.values()
    return grad


def hookable(tensor: torch.Tensor) -> bool:
    """Whether ``tensor.register_hook`` is safe: the tensor requires grad and is not a view whose
    storage was written in place.

    A view's gradient function is remade lazily once its base (or another view of it) is written
    in place after the view was made; torch 2.13 segfaults in ``register_hook`` on such a stale
    view (``a, b = x[:, 0:1].clamp_(), x[:, 1:].relu_()``: ``b``'s write leaves ``a`` stale) and
    the process is lost. Views share their base's version counter, so a view at version 0 has seen
    no write; one above 0 may be stale, and Python cannot tell which, so none is hooked.
    """
    return tensor.requires_grad and not (tensor._is_view() and tensor._version > 0)


def magnitude_sum(magnitude: torch.Tensor) -> float:
    """The sum of a tensor of ``|values|``: in its own dtype, and again in float64 when that overflowed
    (a GradScaler's scaled gradients sit near float32's largest value); NaN stays NaN."""
    total = float(magnitude.sum())
    if total == math.inf and magnitude.dtype != torch.float64:
        total = float(magnitude.sum(dtype=torch.float64))
    return total
