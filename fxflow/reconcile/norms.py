"""Match the real backward's per-module gradient norms to the graph nodes that carry them.

Part of reconciling the real run with the graph: :func:`fxflow.assemble.assemble_report` stores
the result in ``Report.node_grad_norms``, which the renderer reads (edge widths) like any other
field of the Report."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ..verdicts import PARAM_PREFIX as PARAM

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx


def call_norms(graph: "nx.DiGraph", module_norms: dict[str, list[float]]) -> dict[str, float]:
    """Node -> the gradient norm that flowed out of the module call it ends (i-th call, i-th norm).

    A ``call_module`` node is a whole call. Graphs that inline modules (torch.export, run-time
    capture) mark them through ``module_stack`` instead: each consecutive run of nodes inside a
    module is one call, and the run's single node read from outside it is the call's output.
    """
    nodes = sorted(graph.nodes(data=True), key=lambda item: (item[1].get("order", 0), item[0]))
    calls: Counter[str] = Counter()
    found: dict[str, float] = {}
    for name, data in nodes:
        if data.get("kind") == "call_module":
            target = str(data.get("label"))
            norms = module_norms.get(target) or []
            if calls[target] < len(norms) and norms[calls[target]] is not None:
                found[name] = norms[calls[target]]
            calls[target] += 1
    for module, run in _module_runs(nodes):
        if module in calls:  # already counted through its call_module nodes
            continue
        members = set(run)
        exits = [n for n in run if any(s not in members and not s.startswith(PARAM) for s in graph.successors(n))]
        norms = module_norms.get(module) or []
        index = calls[module]
        calls[module] += 1
        if len(exits) == 1 and index < len(norms) and norms[index] is not None:
            found.setdefault(exits[0], norms[index])
    return found


def _module_runs(nodes: list[tuple[str, dict]]) -> list[tuple[str, list[str]]]:
    """(module, its nodes) for every consecutive run of graph nodes created inside a module."""
    runs: list[tuple[str, list[str]]] = []
    open_runs: dict[str, list[str]] = {}
    for name, data in nodes:
        if data.get("kind") == "param":
            continue
        scopes = {str(q) for q, _ in (data.get("module_stack") or [])}
        for module in [m for m in open_runs if m not in scopes]:
            runs.append((module, open_runs.pop(module)))
        for module in scopes:
            open_runs.setdefault(module, []).append(name)
    runs.extend(open_runs.items())
    return runs  # the runs of one module stay in call order
