"""Which ops of the graph draw random numbers: a verdict behind one may change with the seed.

A gate behind train-mode dropout gets an exactly zero gradient when the dropout drops it, and a
gradient when it does not: the check fails on one ``--seed`` and passes on another. The ops that
draw random numbers are the ones torch itself tags ``nondeterministic_seeded`` (dropout,
bernoulli, rand_like, randperm, multinomial...), looked up by the node's op name, so no list of
names is kept here.
"""
from __future__ import annotations

import functools
import re

import networkx as nx
import torch

_DIMENSIONS = re.compile(r"[123]d$")  # Dropout2d -> dropout: the module's functional form


@functools.lru_cache(maxsize=1024)
def draws_random_numbers(op: str) -> bool:
    """Whether an op (``dropout``, ``Dropout2d``, ``bernoulli_``) is tagged ``nondeterministic_seeded``."""
    name = op.lower().strip("_")
    for candidate in dict.fromkeys((name, _DIMENSIONS.sub("", name))):
        packet = getattr(torch.ops.aten, candidate, None)
        if packet is None or not hasattr(packet, "overloads"):
            continue
        if any(torch.Tag.nondeterministic_seeded in getattr(packet, overload).tags for overload in packet.overloads()):
            return True
    return False


def random_ops_affecting(graph: nx.DiGraph, parameter_node: str) -> list[str]:
    """``op @ file:line`` of every random op whose result meets the parameter's gradient path
    before the output: the parameter's gradient is computed from what that op drew."""
    downstream = nx.descendants(graph, parameter_node)
    meeting = {n for n in downstream if graph.nodes[n].get("kind") != "output"}
    found = []
    for name, data in sorted(graph.nodes(data=True), key=lambda item: item[1].get("order", 0)):
        if data.get("kind") in ("param", "placeholder", "output") or not draws_random_numbers(str(data.get("op", ""))):
            continue
        if name in meeting or meeting & nx.descendants(graph, name):
            found.append(f"{data['op']} @ {data.get('source') or name}")
    return list(dict.fromkeys(found))
