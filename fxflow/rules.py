"""What carries no gradient and what has a zero derivative.

The analysis decides differentiability by running each node on fake tensors with autograd on
(see :mod:`fxflow.annotate`), so most cuts need no rule at all: a comparison returns a bool
tensor, ``detach`` returns a tensor without history, ``zeros_like`` ignores its input's values.
Two things cannot be read off fake tensors, and live here, each checked against real autograd
by ``tests/test_rules.py``:

* autograd nodes whose derivative is identically zero (``RoundBackward0`` ...): autograd keeps
  the edge and delivers an exact zero, so the gradient arrives but never teaches anything;
* name rules for the fallback used when no example inputs exist, so nothing can run.
"""
from __future__ import annotations

import operator
import re

import torch

# Autograd nodes whose backward returns zeros for every input (checked in tests/test_rules.py).
ZERO_DERIVATIVE_GRAD_FNS = frozenset({
    "RoundBackward", "FloorBackward", "CeilBackward", "TruncBackward", "SignBackward",
    "SgnBackward", "BernoulliBackward", "UniformBackward", "NormalBackward", "FillBackward",
    "ZeroBackward", "RandomBackward", "ExponentialBackward",
})

# Op names with a zero derivative, for the name-only fallback (same ops as above).
ZERO_DERIVATIVE_OPS = frozenset({
    "round", "floor", "ceil", "trunc", "fix", "sign", "sgn", "bernoulli", "round_", "floor_",
    "ceil_", "trunc_", "sign_", "uniform_", "normal_", "fill_", "zero_", "random_", "exponential_",
})

# Ops that return no gradient-carrying result, for the name-only fallback.
NON_DIFFERENTIABLE_OPS = frozenset({
    "detach", "detach_", "data", "item", "tolist", "numpy", "argmax", "argmin", "argsort",
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "logical_xor",
    "isnan", "isinf", "isfinite", "signbit", "nonzero", "bucketize", "searchsorted", "multinomial",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like",
    "new_zeros", "new_ones", "new_empty", "new_full", "long", "int", "short", "bool", "byte", "char",
    "floor_divide", "bitwise_and", "bitwise_or", "bitwise_not", "bitwise_xor", "heaviside",
})

# Reading one of these takes only a tensor's metadata: no data flows through such an edge.
METADATA_ATTRIBUTES = frozenset({
    "shape", "dtype", "device", "ndim", "is_cuda", "layout", "requires_grad", "is_leaf",
    "size", "dim", "numel", "stride", "is_contiguous", "element_size", "nelement", "get_device",
    "is_floating_point", "is_complex", "storage_offset", "data_ptr",
})

_OPERATOR_NAMES = {getattr(operator, name): name for name in dir(operator) if not name.startswith("_")}


def is_zero_derivative_grad_fn(grad_fn: object) -> bool:
    """True when this autograd node's backward is identically zero."""
    return re.sub(r"\d+$", "", type(grad_fn).__name__) in ZERO_DERIVATIVE_GRAD_FNS


def op_name(target: object) -> str:
    """A short name for a node's target: ``detach``, ``gt``, ``relu``, ``linear``."""
    if isinstance(target, str):
        return target.rsplit(".", 1)[-1]
    if target in _OPERATOR_NAMES:
        return _OPERATOR_NAMES[target]
    name = getattr(target, "__name__", None) or type(target).__name__
    return name.rsplit(".", 1)[-1]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.int64`` -> ``int64``."""
    return str(dtype).replace("torch.", "")
