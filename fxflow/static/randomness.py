"""Which ops of the graph draw random numbers: a verdict behind one may change with the seed.

A gate behind train-mode dropout gets an exactly zero gradient when the dropout drops it, and a
gradient when it does not: the check fails on one ``--seed`` and passes on another. The ops that
draw random numbers are the ones torch itself tags ``nondeterministic_seeded``
(:func:`fxflow.core.random_ops.draws_random_numbers`).
"""
from __future__ import annotations

import networkx as nx

from ..core.random_ops import draws_random_numbers


def random_ops_affecting(graph: nx.DiGraph, parameter_node: str) -> list[str]:
    """``op @ file:line`` of every random op whose result meets the parameter's gradient path
    before the output: the parameter's gradient is computed from what that op drew."""
    downstream = nx.descendants(graph, parameter_node)
    meeting = {n for n in downstream if graph.nodes[n].get("kind") != "output"}
    found = [label for name, label in _random_nodes(graph) if name in meeting or meeting & nx.descendants(graph, name)]
    return list(dict.fromkeys(found))


def _random_nodes(graph: nx.DiGraph) -> list[tuple[str, str]]:
    """(node, ``op @ file:line``) of the graph's ops that draw random numbers, in forward order."""
    return [(name, f"{data['op']} @ {data.get('source') or name}")
            for name, data in sorted(graph.nodes(data=True), key=lambda item: item[1].get("order", 0))
            if data.get("kind") not in ("param", "placeholder", "output") and draws_random_numbers(str(data.get("op", "")))]
