"""See through wrappers (``torch.compile``, DataParallel, DDP), rebase graphs, copy models to meta.

A wrapper holds the user's module as an attribute (``_orig_mod`` or ``module``); capturing the
wrapper itself either fails or captures the wrapper's machinery. The captures trace the inner
module, and :func:`rebase` then prefixes every ``get_attr``/``call_module`` target so that the
graph names attributes of the object the caller passed, as the capture contract requires.
"""
from __future__ import annotations

import copy
from typing import Any, Sequence

import torch
import torch.fx as fx


def _wrapped(module: torch.nn.Module) -> tuple[torch.nn.Module, str, str] | None:
    """(inner module, attribute name, what wrapped it) for one layer of wrapping, else None."""
    inner = getattr(module, "_orig_mod", None)
    if isinstance(inner, torch.nn.Module) and type(module).__name__ == "OptimizedModule":
        return inner, "_orig_mod", "torch.compile"
    parallel = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)
    if isinstance(module, parallel) and isinstance(getattr(module, "module", None), torch.nn.Module):
        return module.module, "module", type(module).__name__
    return None


def unwrap(model: torch.nn.Module) -> tuple[torch.nn.Module, str, list[str]]:
    """The user's own module inside any wrappers, the attribute-path prefix to it, and notes."""
    prefix = ""
    notes: list[str] = []
    while (found := _wrapped(model)) is not None:
        model, attribute, wrapper = found
        prefix += attribute + "."
        notes.append(f"unwrapped {wrapper}: analysed the module at .{prefix.rstrip('.')}")
    return model, prefix, notes


def rebase(graph_module: fx.GraphModule, root: torch.nn.Module, prefix: str) -> fx.GraphModule:
    """The same graph with attribute targets (and module-stack names) relative to ``root``."""
    if not prefix:
        return graph_module
    graph = graph_module.graph
    for node in graph.nodes:
        if node.op in ("get_attr", "call_module"):
            node.target = prefix + str(node.target)
        stack = node.meta.get("nn_module_stack")
        if stack:
            node.meta["nn_module_stack"] = {
                prefix + str(key): (prefix + qualname, cls) for key, (qualname, cls) in stack.items()
            }
    return fx.GraphModule(root, graph, graph_module.__class__.__name__)


def meta_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` whose parameters and buffers live on the meta device (no memory).

    Tied parameters stay tied and ``requires_grad`` flags are kept; the original is untouched.
    """
    memo: dict[int, Any] = {}
    for module in model.modules():
        for name, parameter in module._parameters.items():
            if parameter is not None and id(parameter) not in memo:
                meta = torch.nn.Parameter(parameter.detach().to("meta"), requires_grad=parameter.requires_grad)
                memo[id(parameter)] = meta
        for name, buffer in module._buffers.items():
            if buffer is not None and id(buffer) not in memo:
                memo[id(buffer)] = buffer.detach().to("meta")
    return copy.deepcopy(model, memo)


def meta_inputs(inputs: Sequence[Any] | None) -> tuple[Any, ...] | None:
    """Example inputs moved to the meta device (non-tensors unchanged)."""
    if inputs is None:
        return None
    return tuple(x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs)
