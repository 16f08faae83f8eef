"""Localizing exact zeros in one pass (issue 38, item 3).

The localizer once ran one breadth-first search per parameter towards the loss (quadratic on a deep
model whose every gradient is zero); it now folds every node once (:func:`fxflow.diagnose.holders.memoized_pass`).
These tests hold the new pass to the old search: :func:`reference_zeroing` below is that search,
written out plainly, and it must name the same site on random graphs, on the models of
``test_localize.py`` and on gated (zero-initialized) models; and the pass must look at each node once.
"""
from __future__ import annotations

import random

import pytest
import torch
from torch import nn

import fxflow
from fxflow.diagnose.holders import ZeroHolders
from fxflow.diagnose.localize import Localizer, Zeroing, moves_elements
from fxflow.dynamic.backward_trace import BackwardTrace

import test_localize


def reference_zeroing(localizer: Localizer, start) -> Zeroing | None:
    """The old search: breadth first from ``start`` towards the loss, consumers in autograd's order; the
    first node that received something nonzero and passed on 0, or whose consumer passed it back 0."""
    seen, frontier = set(), [start]
    while frontier:
        node = frontier.pop(0)
        if node in seen:
            continue
        seen.add(node)
        incoming = [value for value in localizer.incoming(node) if value > 0]
        if incoming and not moves_elements(node):
            return Zeroing(node, None, len(incoming))
        for consumer, _ in localizer.graph.consumers.get(node, ()):
            if localizer.arriving(consumer) > 0 and not moves_elements(consumer):
                return Zeroing(consumer, node, 0)
            frontier.append(consumer)
    return None


def _zero_hook(grad: torch.Tensor) -> torch.Tensor:
    return grad * 0.0


def _random_program(rng: random.Random, parameters: list[torch.Tensor], gates: list[torch.Tensor],
                    steps: int) -> torch.Tensor:
    """A random forward over ``parameters``: products with zeros and zero gates, dead and saturated units,
    ops that only move elements, cancellations, gradient hooks that zero, values used several times."""
    pool = list(parameters)
    pick = lambda: pool[rng.randrange(len(pool))]  # noqa: E731
    zeros = torch.zeros(3, 4)
    for _ in range(steps):
        a, b = pick(), pick()
        op = rng.choice(["add", "mul", "zeros", "gate", "dead", "relu", "clamp", "cat", "stack", "cancel",
                         "hook", "square", "tanh"])
        if op == "add":
            value = a + b
        elif op == "mul":
            value = a * b
        elif op == "zeros":
            value = a * zeros
        elif op == "gate":
            value = a * gates[rng.randrange(len(gates))]
        elif op == "dead":
            value = torch.relu(a - 100.0)
        elif op == "relu":
            value = torch.relu(a)
        elif op == "clamp":
            value = torch.clamp(a + 50.0, -1.0, 1.0)
        elif op == "cat":
            value = torch.cat([a, b])[:3]
        elif op == "stack":
            value = torch.stack([a, b]).sum(0)
        elif op == "cancel":
            value = a - a
        elif op == "hook":
            value = a * 2.0
            value.register_hook(_zero_hook)
        elif op == "square":
            value = a * a
        else:
            value = torch.tanh(a)
        pool.append(value)
    chosen = pool[-3:] + [pick()]
    return sum(value.sum() for value in chosen)


def _localizer(trace: BackwardTrace, final: dict[int, float], parameters: list[torch.Tensor]) -> Localizer:
    names = {id(p): f"p{index}" for index, p in enumerate(parameters)}
    return Localizer(trace.graph, trace.norms, trace.origins, final, ZeroHolders(names))


def _traced(seed: int) -> tuple[BackwardTrace, dict[int, float], list[torch.Tensor]]:
    """A random program's real backward, traced as the check traces its run."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    holder = nn.Module()
    holder.weights = nn.ParameterList(nn.Parameter(torch.randn(3, 4)) for _ in range(4))
    holder.gates = nn.ParameterList(nn.Parameter(torch.zeros(3, 4)) for _ in range(2))
    trace = BackwardTrace(holder)
    with trace.forward():
        loss = _random_program(rng, list(holder.weights), list(holder.gates), steps=rng.randrange(4, 18))
    if loss.grad_fn is None:
        return trace, {}, []
    trace.watch(loss)
    loss.backward()
    trace.finish()
    parameters = list(holder.parameters())
    final = {id(p): float(p.grad.norm()) if p.grad is not None else 0.0 for p in parameters}
    return trace, final, parameters


@pytest.mark.parametrize("seed", range(80))
def test_the_one_pass_names_what_the_search_names_on_random_graphs(seed: int) -> None:
    trace, final, parameters = _traced(seed)
    if trace.graph is None:
        pytest.skip("the random program made nothing to differentiate")
    graph = trace.graph
    localizer, reference = _localizer(trace, final, parameters), _localizer(trace, final, parameters)
    # every node, not only the parameters': each is the start of some search; shuffled, so the memo
    # is filled in an order unlike any single search's
    nodes = list(graph.nodes)
    random.Random(seed).shuffle(nodes)
    for node in nodes:
        assert localizer.nearest_zeroing(node) == reference_zeroing(reference, node), node.name()
    # and the words: the site and the holders of each parameter, asked in either order
    fresh = _localizer(trace, final, parameters)
    leaves = [graph.leaves[id(p)] for p in parameters if id(p) in graph.leaves]
    first = {leaf: localizer.explain_zero(leaf) for leaf in leaves}
    second = {leaf: fresh.explain_zero(leaf) for leaf in reversed(leaves)}
    assert first == second and localizer.held_by == fresh.held_by


def test_random_graphs_meet_every_kind_of_zeroing() -> None:
    """The random graphs above are worth their time: they hold zeros made at a node (a zeroing hook,
    a cancellation) and zeros passed back by a consumer, with and without a zero gate holding them."""
    kinds = set()
    for seed in range(80):
        trace, final, parameters = _traced(seed)
        if trace.graph is None:
            continue
        localizer = _localizer(trace, final, parameters)
        for node in trace.graph.nodes:
            found = localizer.nearest_zeroing(node)
            if found is not None:
                kinds.add("at the node" if found.came_from is None else "by a consumer")
        for p in parameters:
            if id(p) in trace.graph.leaves and localizer.explain_zero(trace.graph.leaves[id(p)]) is not None:
                kinds.add("parameter explained")
        if any(localizer.held_by.values()):
            kinds.add("held")
    assert kinds == {"at the node", "by a consumer", "parameter explained", "held"}


class Gated(nn.Module):
    """Zero-initialized gates (ReZero, LoRA's B): the branches' parameters are held by them."""

    def __init__(self, depth: int = 6) -> None:
        super().__init__()
        self.branches = nn.ModuleList(nn.Linear(4, 4) for _ in range(depth))
        self.gates = nn.ParameterList(nn.Parameter(torch.zeros(1)) for _ in range(depth))
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for branch, gate in zip(self.branches, self.gates):
            x = x + gate * torch.relu(branch(x))
        return self.head(x)


class ZeroedChain(nn.Module):
    """Every gradient exactly zero (a dead relu on top, which only the run can tell), all explained there."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return torch.relu(x - 100.0)


MODELS = {
    "dead relu": (test_localize.DeadRelu, 4),
    "zeroing hook": (test_localize.ZeroingHook, 4),
    "saturated": (test_localize.Saturated, 4),
    "rounded": (test_localize.Rounded, 4),
    "floor divided": (test_localize.FloorDivided, 4),
    "gated": (Gated, 4),
    "zeroed chain": (lambda: ZeroedChain(12), 4),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_check_names_what_the_search_named(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    build, width = MODELS[name]

    def report() -> dict[str, tuple]:
        torch.manual_seed(0)
        model = build()
        found = fxflow.check(model, torch.randn(3, width))
        return {p.name: (p.dynamic, p.diagnosis, tuple(p.held_by)) for p in found.parameters}

    now = report()
    monkeypatch.setattr(Localizer, "nearest_zeroing", reference_zeroing)
    before = report()
    assert now == before
    assert any(diagnosis for _, diagnosis, _ in now.values())  # something was explained


def test_each_node_is_looked_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a deep model whose every gradient is zero, a search per parameter looked at the nodes above
    each one again (quadratic: about 20,000 looks at 100 layers); one pass looks at each node once."""
    looked = []
    incoming = Localizer.incoming
    monkeypatch.setattr(Localizer, "incoming", lambda self, node: looked.append(node) or incoming(self, node))
    torch.manual_seed(0)
    report = fxflow.check(ZeroedChain(100), torch.randn(3, 4), capture_methods=("symbolic_trace",))
    assert all(p.diagnosis for p in report.parameters)
    assert len(looked) == len(set(looked)) and len(looked) < 600  # 100 layers: 5 nodes each and the top
