"""What the analysis passes write on each node, and small fx helpers every pass shares
(the tensor helpers every stage shares are in :mod:`fxflow.core.tensors`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

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
