"""What the analysis passes write on each node, and small helpers every pass shares."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten

from ..verdicts import FLOW_KEY, EdgeKind, GradRegion

META_KEY = FLOW_KEY  # node.meta[META_KEY] is the node's NodeFlow

DIFF, ZERO, NONE = EdgeKind.DIFF, EdgeKind.ZERO, EdgeKind.NONE  # gradient passes, passes as exact zero, stops

# Reading one of these takes only a tensor's metadata: no data flows through such an edge.
METADATA_ATTRIBUTES = frozenset({
    "shape", "dtype", "device", "ndim", "is_cuda", "layout", "requires_grad", "is_leaf",
    "size", "dim", "numel", "stride", "is_contiguous", "element_size", "nelement", "get_device",
    "is_floating_point", "is_complex", "storage_offset", "data_ptr",
})


@dataclass
class OutputFlow:
    """The edges of one element of a node's tuple (or dict) result: what that element alone reaches."""

    inputs: dict[str, str] = field(default_factory=dict)  # input node name -> DIFF/ZERO/NONE
    params: dict[str, str] = field(default_factory=dict)  # parameter name -> DIFF/ZERO/NONE

    def within(self, union: "OutputFlow", depends: set[str] | None = None) -> "OutputFlow":
        """These edges without those only other elements use: a parameter that feeds just a discarded
        element is unused by this one, not cut. A ``none`` edge stays where the call as a whole has
        no gradient for it (under no_grad, an input that needs none), unless ``depends`` (the inputs
        this element was seen to depend on) leaves that input out."""
        def keep(edges: dict[str, str], whole: dict[str, str], known: set[str] | None) -> dict[str, str]:
            return {k: v for k, v in edges.items()
                    if v != NONE or (whole[k] == NONE and (known is None or k in known))}

        return OutputFlow(keep(self.inputs, union.inputs, depends), keep(self.params, union.params, None))


@dataclass
class NodeFlow:
    """How gradient passes through one node (``node.meta["fxflow"]``)."""

    inputs: dict[str, str] = field(default_factory=dict)  # input node name -> DIFF/ZERO/NONE
    params: dict[str, str] = field(default_factory=dict)  # parameter name -> DIFF/ZERO/NONE
    requires_grad: bool | None = None  # the result carries autograd history (None: not run)
    is_tensor: bool | None = None  # the result holds at least one tensor
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    grad_region: GradRegion | None = None
    evaluated: bool = True  # False: decided by name rules, not by running the node
    on_stand_ins: bool = False  # run on stand-in values (ones, zeros), not on twins of the real ones
    cut_short: bool = False  # the walk of its history stopped at the limit: an input may be missed
    # Per element of a tuple/dict result (``nn.MultiheadAttention`` -> (output, weights)), only where
    # the elements reach different inputs or parameters; ``inputs``/``params`` are their union.
    outputs: dict[Any, OutputFlow] = field(default_factory=dict)


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor in a value: tuples, lists, dicts (ModelOutput included) and dataclasses.

    pytree alone misses plain dataclasses, and a forward returning one would look tensor-free.
    """
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


def resolve_attribute(model: torch.nn.Module, target: str) -> Any:
    """The object at a dotted attribute path of the model."""
    value: Any = model
    for part in target.split("."):
        value = getattr(value, part)
    return value


def resolve_attribute_of(model: torch.nn.Module, graph_module: torch.nn.Module, target: str) -> Any:
    """A get_attr target: the user's model first, else the graph module (``_tensor_constant0``:
    a tensor forward built from constants, which the tracer stores on the graph module)."""
    try:
        return resolve_attribute(model, target)
    except AttributeError:
        return resolve_attribute(graph_module, target)


def is_metadata_read(node: fx.Node) -> bool:
    """Reads only shape/dtype/device of its input: no data flows from the input."""
    if node.op == "call_method":
        return node.target in METADATA_ATTRIBUTES
    if node.op == "call_function" and node.target is getattr and len(node.args) > 1:
        return node.args[1] in METADATA_ATTRIBUTES
    return False


def data_inputs(node: fx.Node) -> list[fx.Node]:
    """The nodes whose values flow into this node's result."""
    return [] if is_metadata_read(node) else list(node.all_input_nodes)


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
