"""Every rule in fxflow.static.rules, checked against real autograd (never copied from a tutorial)."""
from __future__ import annotations

from typing import Callable

import pytest
import torch

from fxflow.core import derivatives
from fxflow.static import flow, rules

X = torch.randn(6, dtype=torch.float64) * 3
V = torch.tensor(0.7, dtype=torch.float64)

# grad_fn name -> f(x, v) producing a tensor with that grad_fn from leaves x (and v).
BUILDERS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "RoundBackward0": lambda x, v: torch.round(x),
    "RoundBackward1": lambda x, v: torch.round(x, decimals=1),
    "FloorBackward0": lambda x, v: torch.floor(x),
    "CeilBackward0": lambda x, v: torch.ceil(x),
    "TruncBackward0": lambda x, v: torch.trunc(x),
    "SignBackward0": lambda x, v: torch.sign(x),
    "SgnBackward0": lambda x, v: torch.sgn(x),
    "BernoulliBackward0": lambda x, v: torch.bernoulli(torch.sigmoid(x)),
    "BernoulliBackward1": lambda x, v: (x * 1).bernoulli_(torch.sigmoid(v).expand(6)),
    "BernoulliBackward2": lambda x, v: (x * 1).bernoulli_(0.5),
    "NormalBackward0": lambda x, v: (x * 1).normal_(),
    "NormalBackward1": lambda x, v: torch.normal(x, 1.0),
    "NormalBackward2": lambda x, v: torch.normal(0.0, x.abs() + v),
    "NormalBackward3": lambda x, v: torch.normal(x, (v.abs() + 1).expand(6)),
    "UniformBackward0": lambda x, v: (x * 1).uniform_(),
    "RandomBackward0": lambda x, v: (x * 1).random_(0, 3),
    "RandomBackward1": lambda x, v: (x * 1).random_(5),
    "RandomBackward2": lambda x, v: (x * 1).random_(),
    "ExponentialBackward0": lambda x, v: (x * 1).exponential_(),
    "GeometricBackward0": lambda x, v: (x * 1).geometric_(0.5),
    "CauchyBackward0": lambda x, v: (x * 1).cauchy_(),
    "LogNormalBackward0": lambda x, v: (x * 1).log_normal_(),
    "FillBackward0": lambda x, v: torch.fill(x * 1, 2.0),
    "FillBackward1": lambda x, v: torch.fill(x * 1, v),
    "FillBackward2": lambda x, v: (x * 1).fill_(2.0),
    "FillBackward3": lambda x, v: (x * 1).fill_(v),
    "ZeroBackward0": lambda x, v: (x * 1).zero_(),
    "CopysignBackward0": lambda x, v: torch.copysign(x, v),
}


# Rules read off a node's saved arguments (fxflow.core.derivatives._BY_SAVED_ARGUMENT, _ZERO_FOR_REAL_INPUT):
# (node, f(x, v) that makes it with the argument that decides, what every input then gets).
SAVED_ARGUMENT_BUILDERS = [
    ("PowBackward0", lambda x, v: x ** 0, flow.ZERO),
    ("CdistBackward0", lambda x, v: torch.cdist(x.view(2, 3), (x * v).view(2, 3), p=0), flow.ZERO),
    ("DistBackward0", lambda x, v: torch.dist(x, v.detach().expand(6), p=0), flow.NONE),
    ("LinalgVectorNormBackward0", lambda x, v: torch.linalg.vector_norm(x, ord=0), flow.NONE),
    ("SgnBackward0", lambda x, v: torch.sgn(x), flow.ZERO),
    ("AngleBackward0", lambda x, v: torch.angle(x), flow.ZERO),
    ("DivBackward2", lambda x, v: torch.div(x, v, rounding_mode="floor"), flow.ZERO),  # from torch's table
    ("DivBackward2", lambda x, v: torch.div(x, 2.0, rounding_mode="trunc"), flow.ZERO),
]
# The same nodes where the argument does not decide: an ordinary derivative.
DIFFERENTIABLE_TWINS = [
    lambda x, v: x ** 2, lambda x, v: torch.cdist(x.view(2, 3), (x * v).view(2, 3), p=1),
    lambda x, v: torch.dist(x, v.detach().expand(6), p=2), lambda x, v: torch.linalg.vector_norm(x, ord=2),
    lambda x, v: torch.sgn(torch.complex(x, v.expand(6))), lambda x, v: torch.angle(torch.complex(x, v.expand(6))),
    lambda x, v: torch.div(x, v), lambda x, v: torch.div(x, 2.0),
]


def test_every_rule_has_a_builder() -> None:
    assert set(BUILDERS) == set(derivatives.ZERO_DERIVATIVE_GRAD_FNS)
    saved = {name for name, _, _ in SAVED_ARGUMENT_BUILDERS}
    assert set(derivatives._BY_SAVED_ARGUMENT) | derivatives._ZERO_FOR_REAL_INPUT <= saved


def test_torch_derivative_table_is_read() -> None:
    """The installed torch ships derivatives.yaml, and fxflow reads the nodes it generates."""
    table = derivatives.table()
    assert derivatives.derivatives_yaml() is not None and len(table) > 500
    assert [i.kind for i in table["IgammaBackward0"].inputs] == [flow.NONE, flow.DIFF]
    assert table["DivBackward2"].zero_when_saved == "rounding_mode"


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_torch_table_agrees_with_the_hand_table(name: str) -> None:
    """The hand table (the fallback when derivatives.yaml cannot be read) says what torch's table says."""
    torch.manual_seed(0)
    y = BUILDERS[name](X.clone().requires_grad_(), V.clone().requires_grad_())
    kinds = derivatives.input_kinds(y.grad_fn)
    hand = derivatives.ZERO_DERIVATIVE_GRAD_FNS[name]
    if kinds is None or name in derivatives._ZERO_FOR_REAL_INPUT:
        pytest.skip(f"{name}: torch's table has one formula for real and complex inputs")
    assert [k == flow.ZERO for k in kinds] == [hand is None or i in hand for i in range(len(kinds))]


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_hand_table_decides_without_torch_table(name: str, monkeypatch) -> None:
    """Where derivatives.yaml cannot be read (no PyYAML), the hand table gives the same zeros."""
    torch.manual_seed(0)
    y = BUILDERS[name](X.clone().requires_grad_(), V.clone().requires_grad_())
    with_table = derivatives.zero_derivative_edges(y.grad_fn)
    monkeypatch.setattr(derivatives, "table", dict)
    assert derivatives.zero_derivative_edges(y.grad_fn) == with_table


@pytest.mark.parametrize("index", range(len(SAVED_ARGUMENT_BUILDERS)))
def test_saved_argument_rule_matches_autograd(index: int) -> None:
    """The argument that decides gives every input an exact zero (ZERO) or no gradient (NONE);
    the same node without it gives a nonzero gradient, and the rule says DIFF."""
    name, build, kind = SAVED_ARGUMENT_BUILDERS[index]
    x = X.clone().requires_grad_()
    v = V.clone().requires_grad_()
    y = build(x, v)
    assert type(y.grad_fn).__name__ == name
    assert set(derivatives.derivative_kinds(y.grad_fn)) == {kind}
    (grad,) = torch.autograd.grad(y.sum(), [x], allow_unused=True)
    assert (grad is None) if kind == flow.NONE else bool((grad == 0).all())
    y = DIFFERENTIABLE_TWINS[index](x, v)
    y = y.real + y.imag if y.is_complex() else y
    assert set(derivatives.derivative_kinds(y.grad_fn)) <= {flow.DIFF}
    (grad,) = torch.autograd.grad(y.sum(), [x])
    assert bool((grad != 0).any())


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_zero_derivative_rule_matches_autograd(name: str) -> None:
    """The named inputs get an exact zero gradient (not None); every other input a nonzero one."""
    torch.manual_seed(0)
    x = X.clone().requires_grad_()
    v = V.clone().requires_grad_()
    y = BUILDERS[name](x, v)
    assert type(y.grad_fn).__name__ == name
    zero = derivatives.zero_derivative_edges(y.grad_fn)
    assert zero is not False
    edges = [function for function, _ in y.grad_fn.next_functions]
    grads = torch.autograd.grad(y, [x, v], torch.ones_like(y), allow_unused=True)
    checked = 0
    for leaf, grad in zip((x, v), grads):
        feeding = [i for i, function in enumerate(edges) if function is not None and _reaches(function, leaf)]
        if not feeding:
            continue
        checked += 1
        live = [i for i in feeding if not (zero is None or i in zero)]
        assert grad is not None  # a zero-derivative op delivers a gradient, never None
        assert bool((grad == 0).all()) == (not live), (name, feeding, zero)
    assert checked


def _reaches(function, leaf: torch.Tensor) -> bool:
    stack, seen = [function], set()
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if getattr(current, "variable", None) is leaf:
            return True
        stack.extend(f for f, _ in current.next_functions)
    return False


@pytest.mark.parametrize("op", sorted(derivatives.ZERO_DERIVATIVE_OPS))
def test_zero_derivative_op_names_match_autograd(op: str) -> None:
    """Name-only fallback: each listed op really gives an exact zero (present, not None)."""
    x = X.clone().requires_grad_()
    base = x * 1
    function = getattr(torch, op, None) if not op.endswith("_") else None
    if op == "bernoulli":
        y = torch.bernoulli(torch.sigmoid(base))
    elif op == "random_":
        y = base.random_(0, 3)
    elif op == "fill_":
        y = base.fill_(1.5)
    elif function is not None:
        y = function(base)
    else:
        y = getattr(base, op)()
    (grad,) = torch.autograd.grad(y.sum(), [x])
    assert grad is not None and bool((grad == 0).all())


@pytest.mark.parametrize("op", sorted(derivatives.NON_DIFFERENTIABLE_OPS))
def test_non_differentiable_op_names_match_autograd(op: str) -> None:
    """Name-only fallback: each listed op returns something autograd cannot follow."""
    x = (X.clone() + 0.5).requires_grad_()
    y = x * 1
    other = torch.zeros(6, dtype=torch.float64)
    if op == "data":
        result = y.data
    elif op in ("detach_",):
        result = y.detach_()
    elif op == "item":
        result = y.sum().item()
    elif op in ("numpy",):
        pytest.skip("numpy() refuses a tensor that requires grad: forward itself would fail")
    elif op in ("eq", "ne", "lt", "le", "gt", "ge"):
        result = getattr(y, op)(other)
    elif op.startswith("logical_") and op != "logical_not":
        result = getattr(y, op)(other)
    elif op.startswith("bitwise_") or op in ("floor_divide", "heaviside"):
        integer = y.long() if op.startswith("bitwise_") and op != "bitwise_not" else y
        result = getattr(torch, op)(*([integer, integer] if op != "bitwise_not" else [y.long()])) \
            if op != "heaviside" else torch.heaviside(y, other)
        if op == "floor_divide":
            result = torch.floor_divide(y, 2.0)
    elif op in ("bucketize",):
        result = torch.bucketize(y, other)
    elif op == "searchsorted":
        result = torch.searchsorted(other, y)
    elif op == "multinomial":
        result = torch.multinomial(torch.softmax(y, 0), 2)
    elif op in ("new_zeros", "new_ones", "new_empty"):
        result = getattr(y, op)(3)
    elif op == "new_full":
        result = y.new_full((3,), 1.0)
    elif op == "full_like":
        result = torch.full_like(y, 2.0)
    elif op == "randint_like":
        result = torch.randint_like(y, 3)
    elif op.endswith("_like"):
        result = getattr(torch, op)(y)
    else:
        result = getattr(y, op)()
    if isinstance(result, torch.Tensor) and result.requires_grad:
        # floor_divide and heaviside keep a grad_fn whose backward is not implemented: no gradient can arrive
        with pytest.raises(RuntimeError, match="not implemented"):
            torch.autograd.grad(result.sum(), [x])
    else:
        assert not isinstance(result, torch.Tensor) or result.grad_fn is None


@pytest.mark.parametrize("name", sorted(flow.METADATA_ATTRIBUTES))
def test_metadata_reads_carry_no_values(name: str) -> None:
    x = X.clone().requires_grad_()
    value = getattr(x, name)
    value = value() if callable(value) else value
    assert not isinstance(value, torch.Tensor)


def test_op_name() -> None:
    import operator

    assert rules.op_name(operator.gt) == "gt"
    assert rules.op_name(torch.relu) == "relu"
    assert rules.op_name("detach") == "detach"
    assert rules.dtype_name(torch.int64) == "int64"
