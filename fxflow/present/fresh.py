"""Layers built inside forward: tensors that require grad and that forward makes anew on every call.

``nn.Linear(8, 8)(h)`` in forward makes a fresh, untrained weight each call: the backward reaches
it, but no optimizer ever holds it, and it is a different tensor next step. In the captured graph
such a weight is a node that requires grad while nothing it comes from does (no input, no
parameter) and that an op of forward writes in place, as ``nn.init`` does while a layer is built.
The report says so at the line that builds it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .fixes import BUILT_IN_FORWARD, fix_line

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report

_ROOTS = ("placeholder", "get_attr", "param")  # where every learned value of a sound forward comes from


def fresh_tensor_sources(report: "Report") -> list[str]:
    """``file:line`` of each line of forward that makes a new tensor requiring grad, in graph order."""
    graph: Any = report.graph
    if graph is None or not hasattr(graph, "nodes"):
        return []
    fresh: set[str] = set()
    rooted: set[str] = set()
    sources: list[str] = []
    for node, data in sorted(graph.nodes(data=True), key=lambda item: _order(item[1])):
        inputs = list(graph.predecessors(node))
        if data.get("kind") in _ROOTS or any(name in rooted for name in inputs):
            rooted.add(node)
            continue
        if data.get("requires_grad") is True and data.get("kind") == "call_function":
            fresh.add(node)
            source = data.get("source")
            # written in place while nothing learned reaches it: nn.init filling a new layer's weight
            # (a tensor merely read, such as one held in a plain list, is the unregistered rows' case)
            if source and source not in sources and str(data.get("op", "")).endswith("_"):
                sources.append(source)
    return sources


def _order(data: dict[str, Any]) -> int:
    order = data.get("order")
    return order if isinstance(order, int) else 0


def fresh_paragraph(source: str) -> str:
    """What is happening at a line that builds a layer in forward, and its fix line."""
    return (f"At {source} forward builds a new layer (a tensor that requires grad) on every call: it starts "
            "untrained each time, and no optimizer built from model.parameters() holds it.\n" + fix_line(BUILT_IN_FORWARD))
