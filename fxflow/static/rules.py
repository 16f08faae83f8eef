"""What carries no gradient, what has a zero derivative, and what has no derivative at all.

The analysis decides differentiability by running each node on fake tensors with autograd on
(see :mod:`fxflow.static.annotate`), so most cuts need no rule at all: a comparison returns a bool
tensor, ``detach`` returns a tensor without history, ``zeros_like`` ignores its input's values.
What the history alone does not say is what each autograd node's backward computes, per input:

* an identically zero derivative (``RoundBackward0``, ``div(..., rounding_mode="floor")``):
  autograd keeps the edge and delivers an exact zero, so the gradient arrives but teaches nothing;
* no derivative (``floor_divide``, ``heaviside``, ``igamma`` in its first argument): the
  backward raises when gradient reaches the edge, so nothing upstream can get a gradient.

Both come from torch's own derivative table (:mod:`fxflow.core.derivatives`), with the hand table
below as the fallback where that table cannot be read, and for the one rule it cannot express.
``tests/test_rules.py`` and ``tests/test_opdb.py`` check them against real autograd. Name rules
serve the fallback used when no example inputs exist, so nothing can run.
"""
from __future__ import annotations

import operator
from typing import Callable

import torch
import torch.fx as fx

from ..core.derivatives import NON_DIFFERENTIABLE_OPS, ZERO_DERIVATIVE_OPS
from .flow import DIFF, NONE, ZERO, NodeFlow, data_inputs, resolve_attribute_of
# node.meta[NO_DERIVATIVE_KEY]: the inputs (and "param:<name>"s) that reach this node's result only
# through an op with no derivative; set by the annotation, read by fxflow.static.explain for the reason.
from ..verdicts import GRAD_MODE_KEY, NO_DERIVATIVE_KEY

_OPERATOR_NAMES = {getattr(operator, name): name for name in dir(operator) if not name.startswith("_")}


def mark_no_derivative(node: fx.Node, reached: dict[str, str]) -> None:
    """Record on ``node`` which inputs its walk reached only through an op with no derivative."""
    blocked = sorted(name for name, kind in reached.items() if kind == NONE)
    if blocked:
        node.meta[NO_DERIVATIVE_KEY] = blocked


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


def annotate_by_rules(node: fx.Node, model: torch.nn.Module, names: dict[int, str],
                      read: Callable[[fx.Node], str] = lambda n: n.name) -> NodeFlow:
    """Decide a node's edges from its op name alone (no example inputs, or it could not run).

    ``read`` names the node a read of an input sees (the last in-place op on it).
    """
    region = node.meta.get(GRAD_MODE_KEY)
    op = op_name(node.target) if node.op in ("call_function", "call_method") else ""
    if node.op == "call_function" and node.target is getattr and len(node.args) > 1:
        op = str(node.args[1])
    if region is not None or op in NON_DIFFERENTIABLE_OPS or _casts_to_integer(node) or _index_element(node):
        kind = NONE
    elif op in ZERO_DERIVATIVE_OPS:
        kind = ZERO
    else:
        kind = DIFF
    flow = NodeFlow(inputs={read(i): kind for i in data_inputs(node)}, grad_region=region, evaluated=False)
    if kind == ZERO:  # only the tensor being rounded/overwritten gets the zero (x.fill_(v): v gets grad)
        flow.inputs.update({read(i): DIFF for i in data_inputs(node)[1:]})
        flow.inputs[read(data_inputs(node)[0])] = ZERO
    if node.op == "call_module":
        module = model.get_submodule(node.target)
        flow.params = {names[id(p)]: (kind if p.requires_grad else NONE) for p in module.parameters() if id(p) in names}
    elif node.op == "get_attr":
        value = resolve_attribute_of(model, node.graph.owning_module, node.target)
        if id(value) in names:
            flow.params = {names[id(value)]: DIFF}
    return flow


def in_place(node: fx.Node) -> bool:
    """A method that mutates its tensor, by PyTorch's naming convention (``detach_``, ``fill_``)."""
    return (node.op == "call_method" and isinstance(node.target, str) and node.target.endswith("_")
            and not node.target.endswith("__") and bool(node.args) and isinstance(node.args[0], fx.Node))


# ops whose result is (values, indices): the indices are integers, never differentiable
_WITH_INDICES = frozenset({"max", "min", "topk", "sort", "kthvalue", "mode", "median", "nanmedian", "cummax",
                           "cummin", "max_pool1d_with_indices", "max_pool2d_with_indices",
                           "max_pool3d_with_indices", "adaptive_max_pool1d", "adaptive_max_pool2d"})


def _index_element(node: fx.Node) -> bool:
    """``max(x, dim)[1]`` or ``.indices``: the integer element of an op that returns indices."""
    if node.op != "call_function" or node.target not in (operator.getitem, getattr) or len(node.args) < 2:
        return False
    source, key = node.args[0], node.args[1]
    if not isinstance(source, fx.Node) or source.op not in ("call_function", "call_method"):
        return False
    return op_name(source.target) in _WITH_INDICES and key in (1, "indices")


def _casts_to_integer(node: fx.Node) -> bool:
    if node.op != "call_method" or node.target not in ("to", "type"):
        return False
    values = list(node.args[1:]) + list(node.kwargs.values())
    return any(isinstance(v, torch.dtype) and not (v.is_floating_point or v.is_complex) for v in values)
