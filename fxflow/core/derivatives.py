"""Torch's own derivative table: which input of which autograd node gets a zero, or no gradient.

PyTorch generates every ``...Backward<N>`` autograd node from ``derivatives.yaml``, which ships
inside the torch wheel as ``torchgen/packaged/autograd/derivatives.yaml``. Its formulas say,
per input, what the backward computes; three shapes of formula matter here:

* ``zeros_like(grad)``, ``at::zeros_symint(...)``, ... alone: the input gets an exact zero
  (``round``, ``sign``, sampling ops, ``fill_``);
* ``not_implemented("...")``: the backward raises for that input (``igamma`` in its first
  argument), and ``Tensor()``: it returns no gradient at all. Ops without any entry get the node
  ``NotImplemented`` (``floor_divide``, ``heaviside``), whose backward raises for every input;
* a forward formula ``"<arg>.has_value() ? <zeros> : ..."``: the derivative is zero whenever
  that argument was given, which the node keeps as ``_saved_<arg>`` (``div(..., rounding_mode=)``).

The file is read once, lazily. Node names follow torchgen's rule: the op's base name
in CamelCase, ``Backward``, and a counter over the definitions sharing that prefix, in file
order. A node whose inputs do not line up with its entry (another torch version) is unknown and
treated as differentiable. ``tests/test_opdb.py`` checks the result against real autograd over
torch's operator database.

Why not torchgen's own loader (``torchgen.packaged.autograd.load_derivatives``), which ships in
the same wheel and loads offline: it builds the full codegen model, parsing
``native_functions.yaml`` too, over ten times the cost of this reading. A check pays this once per
process and is held to about the cost of one training step; what this module needs is three
formula shapes per input, which the test above verifies.
"""
from __future__ import annotations

import functools
import importlib.util
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..verdicts import EdgeKind

DIFF, ZERO, NONE = EdgeKind.DIFF, EdgeKind.ZERO, EdgeKind.NONE

# The node autograd attaches to an op with no derivative formula at all; its backward raises.
NOT_IMPLEMENTED_NODE = "NotImplemented"

_ZERO_CALLS = ("zeros_like", "zeros", "zeros_symint", "new_zeros", "new_zeros_symint")
_CONDITIONAL_ZERO = re.compile(r"^(\w+)\.has_value\(\)\s*\?\s*(.*?)\s*:")


@dataclass(frozen=True)
class Input:
    """One differentiable input of an autograd node, in ``next_functions`` order."""

    name: str
    is_list: bool  # a Tensor[] argument: one ``next_functions`` entry per tensor
    kind: EdgeKind  # DIFF, ZERO (exact zero) or NONE (no derivative)


@dataclass(frozen=True)
class Formulas:
    """What torch's derivative table says about one autograd node class."""

    inputs: tuple[Input, ...]
    zero_when_saved: str | None = None  # every derivative is zero when ``_saved_<this>`` is not None


def derivatives_yaml() -> Path | None:
    """Where the installed torch keeps its derivative table (None: not shipped)."""
    spec = importlib.util.find_spec("torchgen")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "packaged" / "autograd" / "derivatives.yaml"
        if path.is_file():
            return path
    return None


@functools.cache
def table() -> dict[str, Formulas]:
    """Autograd node class name -> its formulas, from the installed torch (empty if unavailable)."""
    path = derivatives_yaml()
    try:
        import yaml
    except ImportError:  # PyYAML is not a torch dependency: fall back to fxflow.static.rules' hand table
        return {}
    if path is None:
        return {}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    definitions = yaml.load(path.read_text(), Loader=loader)
    return parse_definitions(definitions)


def parse_definitions(definitions: list[dict[str, Any]]) -> dict[str, Formulas]:
    """Node class name -> formulas, for the entries of ``derivatives.yaml`` (torchgen's naming)."""
    counter: Counter[str] = Counter()
    result: dict[str, Formulas] = {}
    for definition in definitions:
        specification = definition["name"]
        arguments = _arguments(specification)
        base = specification.split("(", 1)[0].split(".", 1)[0]
        dispatch = definition.get("dispatch") or {"Default": definition}
        for key, formulas in dispatch.items():
            inputs, zero_when = _inputs(formulas, arguments)
            if not inputs:  # torchgen names a node only for ops with a differentiable input
                continue
            prefix = _op_prefix(base) + ("" if key == "Default" else key)
            result[f"{prefix}{counter[prefix]}"] = Formulas(inputs, zero_when)
            counter[prefix] += 1
    return result


def input_kinds(grad_fn: Any) -> tuple[EdgeKind, ...] | None:
    """Per ``next_functions`` entry of this autograd node: DIFF, ZERO or NONE (no derivative).

    None when torch's table does not describe the node (a custom Function, an unknown version).
    """
    name = type(grad_fn).__name__
    count = len(grad_fn.next_functions)
    if name == NOT_IMPLEMENTED_NODE:
        return (NONE,) * count
    formulas = table().get(name)
    if formulas is None:
        return None
    if formulas.zero_when_saved and getattr(grad_fn, f"_saved_{formulas.zero_when_saved}", None) is not None:
        return (ZERO,) * count
    lists = [i for i in formulas.inputs if i.is_list]
    spare = count - (len(formulas.inputs) - len(lists))
    if len(lists) > 1 or (lists and spare < 0) or (not lists and spare != 0):
        return None  # the node's inputs do not line up with the entry: say nothing
    kinds: list[EdgeKind] = []
    for item in formulas.inputs:
        kinds.extend([item.kind] * (spare if item.is_list else 1))
    return tuple(kinds)


def formula_kind(formula: str) -> EdgeKind:
    """ZERO for a formula that is only a zero tensor, NONE for one with no derivative, else DIFF."""
    text = str(formula).strip().strip("'\"").strip()
    if text.startswith("not_implemented(") or text == "Tensor()":
        return NONE
    return ZERO if _is_zero_call(text) else DIFF


def _is_zero_call(text: str) -> bool:
    """``zeros_like(grad)``, ``at::zeros_symint(mean.sym_sizes(), ...)``: one call making zeros."""
    head, paren, _ = text.partition("(")
    if not paren or head.rsplit("::", 1)[-1].rsplit(".", 1)[-1] not in _ZERO_CALLS:
        return False
    depth = 0
    for position, character in enumerate(text):
        depth += {"(": 1, ")": -1}.get(character, 0)
        if depth == 0 and character == ")":
            return position == len(text) - 1  # the call is the whole formula
    return False


def _inputs(formulas: dict[str, Any], arguments: list[tuple[str, bool]]) -> tuple[tuple[Input, ...], str | None]:
    names = {name for name, _ in arguments}
    kinds: dict[str, EdgeKind] = {}
    zero_when = None
    for raw, formula in formulas.items():
        if raw in ("name", "dispatch", "output_differentiability"):
            continue
        targets = [part.strip() for part in raw.split(",")]
        if targets[0] not in names:  # a forward-mode formula (``result: ...``)
            match = _CONDITIONAL_ZERO.match(str(formula).strip())
            if match and match.group(1) in names and _is_zero_call(match.group(2)):
                zero_when = match.group(1)
            continue
        if str(formula).strip().lower() == "non_differentiable":
            continue
        for target in targets:
            kinds[target] = formula_kind(formula)
    return tuple(Input(name, is_list, kinds[name]) for name, is_list in arguments if name in kinds), zero_when


def _arguments(specification: str) -> list[tuple[str, bool]]:
    """``(name, is a tensor list)`` for each argument of a schema, in order."""
    inside = specification[specification.index("(") + 1: specification.rindex(") ->")]
    parts, depth, current = [], 0, ""
    for character in inside:
        depth += {"[": 1, "(": 1, "]": -1, ")": -1}.get(character, 0)
        if character == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += character
    parts.append(current)
    result = []
    for part in (p.strip() for p in parts):
        if not part or part == "*":
            continue
        declaration = part.split("=", 1)[0].split()
        kind, name = declaration[0], declaration[-1]
        result.append((name, kind.startswith("Tensor") and "[]" in kind))
    return result


def _op_prefix(name: str) -> str:
    """torchgen's class-name prefix: ``add`` -> ``AddBackward``, ``bernoulli_`` -> ``BernoulliBackward``."""
    camel = "".join(part.title() for part in name.split("_"))
    return (camel + "Backward").replace("ForwardBackward", "Backward")


# -- per autograd node: which inputs get a gradient (used by the walk, the stops, localization) --
# Autograd nodes whose backward is identically zero, by exact class name -> which of their inputs
# (positions in ``next_functions``) get the zero; ``None`` means all of them. The fallback where
# torch's derivative table cannot be read (above), and the same facts: tests/test_rules.py
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
    kinds = input_kinds(grad_fn) or (DIFF,) * count
    zero = ZERO_DERIVATIVE_GRAD_FNS.get(name, False) if not table() else False
    if zero is False:
        return kinds
    return tuple(ZERO if kind == DIFF and (zero is ALL or index in zero) else kind for index, kind in enumerate(kinds))


def may_lack_derivative(grad_fn: object) -> bool:
    """A cheap pre-check: False when no input of this node can be NONE in :func:`derivative_kinds`."""
    return type(grad_fn).__name__ in _lacking_names()


@functools.cache
def _lacking_names() -> frozenset[str]:
    names = {name for name, formulas in table().items() if any(i.kind == NONE for i in formulas.inputs)}
    names |= {name for name, (_, _, kind) in _BY_SAVED_ARGUMENT.items() if kind == NONE}
    return frozenset(names | {NOT_IMPLEMENTED_NODE})


def zero_derivative_edges(grad_fn: object) -> frozenset[int] | None | bool:
    """Which inputs of this autograd node get an identically zero gradient.

    ``False``: none of them; ``None``: all of them; a set: those positions in ``next_functions``.
    """
    kinds = derivative_kinds(grad_fn)
    zero = frozenset(index for index, kind in enumerate(kinds) if kind == ZERO)
    return False if not zero else ALL if len(zero) == len(kinds) else zero
