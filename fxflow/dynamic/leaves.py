"""Pytree's walks over a torch call's arguments and results, fast where they are plain containers.

Every torch call a recorded forward makes passes through the recorder, and every recorded result
through its snapshot (:mod:`fxflow.dynamic.recorder`, :mod:`fxflow.dynamic.recorded`).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._pytree import SUPPORTED_NODES, tree_flatten, tree_map


# Every torch call forward makes passes through the recorder: its arguments and results are walked
# with plain loops where they are plain tuples, lists and dicts of tensors and numbers (pytree cost
# about a tenth of a second per GPT-2 forward); anything else (a named tuple, a ModelOutput, any
# registered pytree node) goes to pytree itself, so the leaves are exactly pytree's.
_PLAIN_LEAVES = (torch.Tensor, int, float, bool, str, type(None), torch.dtype, torch.device)


def leaves(value: Any) -> list[Any]:
    """``tree_flatten(value)[0]``, fast where ``value`` is a tensor or plain containers of them."""
    kind = type(value)
    if kind is tuple or kind is list:
        return [leaf for item in value for leaf in leaves(item)]
    if kind is dict:
        return [leaf for item in value.values() for leaf in leaves(item)]
    if isinstance(value, _PLAIN_LEAVES) and kind not in SUPPORTED_NODES:
        return [value]
    return tree_flatten(value)[0]


def map_leaves(function: Callable[[Any], Any], value: Any) -> Any:
    """``tree_map(function, value)``."""
    kind = type(value)
    if kind is tuple:
        return tuple(map_leaves(function, item) for item in value)
    if kind is list:
        return [map_leaves(function, item) for item in value]
    if kind is dict:
        return {key: map_leaves(function, item) for key, item in value.items()}
    if isinstance(value, _PLAIN_LEAVES) and kind not in SUPPORTED_NODES:
        return function(value)
    return tree_map(function, value)
