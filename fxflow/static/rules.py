"""What carries no gradient, what has a zero derivative, and what has no derivative at all.

The analysis decides differentiability by running each node on fake tensors with autograd on
(see :mod:`fxflow.static.annotate`), so most cuts need no rule at all: a comparison returns a bool
tensor, ``detach`` returns a tensor without history, ``zeros_like`` ignores its input's values.
What the history alone does not say is what each autograd node's backward computes, per input:

* an identically zero derivative (``RoundBackward0``, ``div(..., rounding_mode="floor")``):
  autograd keeps the edge and delivers an exact zero, so the gradient arrives but teaches nothing;
* no derivative (``floor_divide``, ``heaviside``, ``igamma`` in its first argument): the
  backward raises when gradient reaches the edge, so nothing upstream can get a gradient.

Both come from torch's own derivative table (:mod:`fxflow.static.derivatives`), with the hand table
below as the fallback where that table cannot be read, and for the one rule it cannot express.
``tests/test_rules.py`` and ``tests/test_opdb.py`` check them against real autograd. Name rules
serve the fallback used when no example inputs exist, so nothing can run.
"""
from __future__ import annotations

import functools
import operator
from typing import Callable

import torch
import torch.fx as fx

from . import derivatives
from .scripted import ScriptedFlow, is_scripted, read_scripted
from .flow import DIFF, NONE, ZERO, NodeFlow, data_inputs, resolve_attribute_of
# node.meta[NO_DERIVATIVE_KEY]: the inputs (and "param:<name>"s) that reach this node's result only
# through an op with no derivative; set by the annotation, read by fxflow.static.explain for the reason.
from ..verdicts import GRAD_MODE_KEY, NO_DERIVATIVE_KEY, OPAQUE_KEY, EdgeKind

# Autograd nodes whose backward is identically zero, by exact class name -> which of their inputs
# (positions in ``next_functions``) get the zero; ``None`` means all of them. The fallback where
# torch's derivative table cannot be read (fxflow.static.derivatives), and the same facts: tests/test_rules.py
# checks each entry against real autograd and against that table. Exact names matter:
# ``FillBackward1``/``FillBackward3`` (fill with a *tensor* value) pass ``grad.sum()`` to the value,
# and ``CopysignBackward0`` is zero only for the sign source. Each entry is checked against real
# autograd in tests/test_rules.py.
ALL = None
ZERO_DERIVATIVE_GRAD_FNS: dict[str, frozenset[int] | None] = {
    "RoundBackward0": ALL, "RoundBackward1": ALL, "FloorBackward0": ALL, "CeilBackward0": ALL,
    "TruncBackward0": ALL, "SignBackward0": ALL, "SgnBackward0": ALL,
    # Sampling is not reparameterised in torch: the sample's gradient w.r.t. its parameters is 0.
    "BernoulliBackward0": ALL, "BernoulliBackward1": ALL, "BernoulliBackward2": ALL,
    "NormalBackward0": ALL, "NormalBackward1": ALL, "NormalBackward2": ALL, "NormalBackward3": ALL,
    "UniformBackward0": ALL, "RandomBackward0": ALL, "RandomBackward1": ALL, "RandomBackward2": ALL,
    "ExponentialBackward0": ALL, "GeometricBackward0": ALL, "CauchyBackward0": ALL,
    "LogNormalBackward0": ALL,
    # Overwriting a tensor: the old values get zero; a tensor fill value still gets grad.sum().
    "FillBackward0": ALL, "FillBackward2": ALL, "FillBackward1": frozenset({0}),
    "FillBackward3": frozenset({0}), "ZeroBackward0": ALL,
    "CopysignBackward0": frozenset({1}),  # copysign(x, s): only s, the sign source, gets zero
}

# Where torch's table hides the answer inside a helper function (``_cdist_backward``,
# ``pow_backward``), the node's saved arguments decide. Checked in tests/test_rules.py.
# sgn and angle of a real tensor are piecewise constant; of a complex one they are not.
_ZERO_FOR_REAL_INPUT = frozenset({"SgnBackward0", "AngleBackward0"})
# node -> (saved argument, the value that decides, what every input then gets)
_BY_SAVED_ARGUMENT: dict[str, tuple[str, float, EdgeKind]] = {
    "PowBackward0": ("exponent", 0, ZERO),  # x ** 0 is constant
    "CdistBackward0": ("p", 0, ZERO),  # the 0-"norm" counts nonzero entries: piecewise constant,
    "DistBackward0": ("p", 0, NONE),  # and these two backwards return no gradient for it at all
    "LinalgVectorNormBackward0": ("ord", 0, NONE),
}

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


_OPERATOR_NAMES = {getattr(operator, name): name for name in dir(operator) if not name.startswith("_")}


def derivative_kinds(grad_fn: object) -> tuple[EdgeKind, ...]:
    """Per ``next_functions`` entry of an autograd node: DIFF, ZERO (derivative identically zero)
    or NONE (no derivative: the backward raises or returns nothing for that input)."""
    count = len(grad_fn.next_functions)
    name = type(grad_fn).__name__
    if name in _BY_SAVED_ARGUMENT:
        argument, value, kind = _BY_SAVED_ARGUMENT[name]
        if getattr(grad_fn, f"_saved_{argument}", None) == value:
            return (kind,) * count
    if name in _ZERO_FOR_REAL_INPUT and not getattr(grad_fn, "_saved_self").is_complex():
        return (ZERO,) * count
    kinds = derivatives.input_kinds(grad_fn) or (DIFF,) * count
    zero = ZERO_DERIVATIVE_GRAD_FNS.get(name, False) if not derivatives.table() else False
    if zero is False:
        return kinds
    return tuple(ZERO if kind == DIFF and (zero is ALL or index in zero) else kind for index, kind in enumerate(kinds))


def may_lack_derivative(grad_fn: object) -> bool:
    """A cheap pre-check: False when no input of this node can be NONE in :func:`derivative_kinds`."""
    return type(grad_fn).__name__ in _lacking_names()


@functools.cache
def _lacking_names() -> frozenset[str]:
    table = derivatives.table()
    names = {name for name, formulas in table.items() if any(i.kind == NONE for i in formulas.inputs)}
    names |= {name for name, (_, _, kind) in _BY_SAVED_ARGUMENT.items() if kind == NONE}
    return frozenset(names | {derivatives.NOT_IMPLEMENTED_NODE})


def zero_derivative_edges(grad_fn: object) -> frozenset[int] | None | bool:
    """Which inputs of this autograd node get an identically zero gradient.

    ``False``: none of them; ``None``: all of them; a set: those positions in ``next_functions``.
    """
    kinds = derivative_kinds(grad_fn)
    zero = frozenset(index for index, kind in enumerate(kinds) if kind == ZERO)
    return False if not zero else ALL if len(zero) == len(kinds) else zero


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
        scripted = read_scripted(module, NON_DIFFERENTIABLE_OPS) if is_scripted(module) and region is None else None
        if scripted is not None:  # its own TorchScript graph says what the result is differentiable in
            _apply_scripted(flow, node, module, names, scripted, read)
        elif is_scripted(module) and region is None:  # the name rule cannot see inside: only the backward can tell
            node.meta.setdefault(OPAQUE_KEY, f"scripted module {node.target}, whose TorchScript graph could not be read")
    elif node.op == "get_attr":
        value = resolve_attribute_of(model, node.graph.owning_module, node.target)
        if id(value) in names:
            flow.params = {names[id(value)]: DIFF}
    return flow


def _apply_scripted(flow: NodeFlow, node: fx.Node, module: torch.nn.Module, names: dict[int, str],
                    scripted: ScriptedFlow, read: Callable[[fx.Node], str]) -> None:
    """A scripted module's call: the edges its TorchScript graph gives (forward's arguments by position)."""
    for position, argument in enumerate(node.args):
        if isinstance(argument, fx.Node) and position < len(scripted.inputs):
            flow.inputs[read(argument)] = scripted.inputs[position]
    for local, parameter in module.named_parameters():
        if id(parameter) in names and parameter.requires_grad:
            flow.params[names[id(parameter)]] = scripted.params.get(local, NONE)


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
