"""What a ``torch.jit.script``'ed submodule's call is differentiable in, read from its TorchScript graph.

Its parameters cannot be swapped for twins (the stateless API refuses jitted modules), so the
annotation cannot run the call; the name rules (:mod:`.rules`) ask :func:`read_scripted` instead: a
walk back from the graph's result that stops at the ops whose result carries no gradient (the name
rules' own table: ``argmax``, comparisons, ``detach``; and casts TorchScript types as integer), and
names the first it meets and its line. A module that ran is never reported unused.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.scripted import is_scripted
from ..verdicts import EdgeKind

__all__ = ["ScriptedFlow", "is_scripted", "read_scripted"]

_SOURCE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_INTEGER_TYPES = ("int", "long", "bool", "short", "char", "byte")


@dataclass(frozen=True)
class ScriptedFlow:
    """What a scripted module's result is differentiable in, read from its TorchScript graph."""

    inputs: tuple[EdgeKind, ...]  # per forward argument, self excluded
    params: dict[str, EdgeKind] = field(default_factory=dict)  # the module's own parameter names
    # (op, where TorchScript says it was written: (file, line) or None) of the first op met that carries no gradient
    cut: tuple[str, tuple[str, int] | None] | None = None


def read_scripted(module: torch.jit.ScriptModule, stops: frozenset[str]) -> ScriptedFlow | None:
    """Walk ``module``'s forward graph back from its result, stopping at the ops named in ``stops``
    (None when it has no graph to read)."""
    try:
        graph = module.inlined_graph
    except (AttributeError, RuntimeError):
        return None
    return _read(graph, frozenset(name for name, _ in module.named_parameters()), stops)


def _read(graph: torch._C.Graph, parameters: frozenset[str], stops: frozenset[str]) -> ScriptedFlow:
    arguments = list(graph.inputs())
    attribute_paths: dict[Any, str] = {arguments[0]: ""}  # value -> qualified attribute name from self
    for node in graph.nodes():
        if node.kind() == "prim::GetAttr" and node.input() in attribute_paths:
            parent = attribute_paths[node.input()]
            attribute_paths[node.output()] = f"{parent}.{node.s('name')}" if parent else node.s("name")
    reached: set[Any] = set()
    cut = None
    stack = list(graph.return_node().inputs())
    while stack:
        value = stack.pop()
        if value in reached:
            continue
        reached.add(value)
        node = value.node()
        op = node.kind().partition("::")[2].rstrip("_")
        if node.kind().startswith("aten::") and (op in stops or _casts_to_integer(node)):
            cut = cut or (op, _line(node))
            continue
        stack.extend(node.inputs())
        for block in node.blocks():  # an if or a loop: what its blocks return and read
            for inner in block.nodes():
                stack.extend(inner.inputs())
            stack.extend(block.returnNode().inputs())
    kind = lambda hit: EdgeKind.DIFF if hit else EdgeKind.NONE  # noqa: E731
    return ScriptedFlow(
        inputs=tuple(kind(value in reached) for value in arguments[1:]),
        params={name: kind(any(v in reached and path == name for v, path in attribute_paths.items()))
                for name in sorted(parameters)},
        cut=cut)


def _casts_to_integer(node: torch._C.Node) -> bool:
    """``aten::to`` (or a ``.long()``-style cast) whose result TorchScript types as an integer tensor."""
    if node.kind() not in ("aten::to", "aten::type_as") and node.kind().partition("::")[2] not in _INTEGER_TYPES:
        return False
    dtype = node.output().type().scalarType() if isinstance(node.output().type(), torch._C.TensorType) else None
    return dtype is not None and dtype.lower() in _INTEGER_TYPES + ("int",)


def _line(node: torch._C.Node) -> tuple[str, int] | None:
    """(file, line) of the code that made ``node``, as TorchScript recorded it."""
    match = _SOURCE.search(node.sourceRange())
    return (match["file"], int(match["line"])) if match else None
