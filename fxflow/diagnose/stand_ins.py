"""Where a parameter's stand-in came from: a parameter the real backward left without a gradient, that
forward read only through detached copies of it.

``module.state_dict()`` hands out the parameters' values without autograd history (``keep_vars=False``);
fed to ``torch.func.functional_call``, the copies are what forward computes with, and the parameters get
no gradient. A trace that follows the call (symbolic tracing sees a ``functional_call`` as the module's
own call) reads them reachable; the recording of the real run (:mod:`fxflow.dynamic.recorder`) holds each
copy's ``detach`` with the stack that made it: the user's line, and the call of torch's it made there.
"""
from __future__ import annotations

from typing import Collection

import torch.fx as fx

from ..core.package_way import user_call
from ..verdicts import CutSite

_DETACHING = frozenset({"detach", "detach_", "data"})


def stand_in_sources(graph_module: fx.GraphModule, missing: Collection[str]) -> dict[str, CutSite]:
    """``{parameter name: where its detached copy was made}`` for each parameter of ``missing`` that
    the recorded run read only through detached copies (every use of it is a ``detach``)."""
    found: dict[str, CutSite] = {}
    for node in graph_module.graph.nodes:
        if node.op != "get_attr" or node.target not in missing or not node.users:
            continue
        if not all(user.op in ("call_method", "call_function") and _name(user) in _DETACHING for user in node.users):
            continue
        first = next(iter(node.users))
        where = user_call(first.meta.get("stack_trace"))
        if where is None:
            continue
        line, called = where
        found[node.target] = _site(first, line, called)
    return found


def _name(node: fx.Node) -> str:
    return node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")


def _site(node: fx.Node, line: str, called: str | None) -> CutSite:
    if called is None or called in _DETACHING:  # the user's line detaches itself
        reason = (f"forward uses only copies made by `{_name(node)}` at {line}, which have no autograd history, "
                  "so no gradient reaches the parameter")
        return CutSite(node.name, _name(node), line, reason)
    reason = (f"`{called}()` at {line} hands forward detached copies (tensors with no autograd history), and "
              "forward computes with the copies (as `torch.func.functional_call` does with a `state_dict()`), so no "
              "gradient reaches the parameter itself")
    return CutSite(node.name, called, line, reason)
