"""What holds an exact zero: the zero-valued trainable weights across the op that zeroed a gradient.

When a live gradient becomes exactly 0 at a product (``gate * branch``, ``lora_B(lora_A(x))``, a
BatchNorm whose weight is 0), the factor that zeroed it comes in through the op's other inputs. If
that factor is computed from a trainable parameter that is all zeros (LoRA's ``B``, adaLN-Zero's
modulation, a zero convolution, ReZero's α), the first optimizer step moves it and the zero lifts:
that parameter *holds* the gradient. If no such parameter is there, the zero comes from something
no step changes (a constant, a buffer, a frozen or detached parameter, the batch). A frozen all-zero
parameter (a LoRA ``B`` frozen by mistake) has no node in the autograd graph: the one the module
calling the product owns is named, a holder that no step will ever move.

Also home of :func:`memoized_pass`, the one walk of autograd's graph that localization runs (here
towards the leaves, in :mod:`fxflow.diagnose.localize` towards the loss): each node is folded once
from its neighbours' values, so explaining every parameter costs one pass over the graph, not one
walk per parameter.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, Iterable, TypeVar

import torch

Node = Any  # torch.autograd.graph.Node
Value = TypeVar("Value")


def memoized_pass(start: Node, neighbours: Callable[[Node], Iterable[Node]],
                  fold: Callable[[Node, list[Value]], Value], memo: dict[Hashable, Value]) -> Value:
    """``fold(node, [value of each neighbour, in order])`` for ``start`` and every node it needs, each
    node once across calls sharing ``memo``. The graph must be acyclic (autograd's is). Iterative, not
    recursive: a 1,600-layer model is deeper than Python's recursion limit."""
    stack = [start]
    expanded: set[Node] = set()
    while stack:
        node = stack[-1]
        if node in memo:
            stack.pop()
            continue
        following = list(neighbours(node))
        if node not in expanded:  # first visit: its neighbours first (they sit above it on the stack)
            expanded.add(node)
            waiting = [n for n in following if n not in memo]
            if waiting:
                stack.extend(reversed(waiting))
                continue
        stack.pop()
        memo[node] = fold(node, [memo[n] for n in following])
    return memo[start]


def _inputs(node: Node) -> Iterable[Node]:
    """The nodes a node passes gradient to; none below a leaf's AccumulateGrad."""
    if isinstance(getattr(node, "variable", None), torch.Tensor):
        return ()
    return [child for child, _ in node.next_functions if child is not None]


class ZeroHolders:
    """Finds the holders of zeros in one autograd graph (memoized across the parameters explained)."""

    def __init__(self, names: dict[int, str], parameters: Iterable[torch.Tensor] = ()) -> None:
        self.names = names  # id(parameter) -> qualified name
        self._zero: dict[int, bool] = {}
        self._below: dict[Node, frozenset[str]] = {}  # node -> the all-zero trainable parameters behind it
        self._feeding: dict[Node, frozenset[str]] = {}  # node -> every trainable parameter behind it
        self.frozen = sorted(names[id(p)] for p in parameters if id(p) in names and not p.requires_grad
                             and not p.is_meta and p.numel() and not bool(torch.count_nonzero(p.detach())))

    def frozen_in(self, module: str | None) -> list[str]:
        """The frozen all-zero parameters that ``module`` (a qualified name; None or "" the model) owns itself."""
        return [name for name in self.frozen if name.rpartition(".")[0] == (module or "")]

    def across(self, death: Node, came_from: Node) -> list[str]:
        """The all-zero trainable parameters behind ``death``'s inputs other than ``came_from``, sorted."""
        starts = [child for child, _ in death.next_functions if child is not None and child is not came_from]
        held: set[str] = set()
        for start in starts:
            held |= memoized_pass(start, _inputs, self._fold, self._below)
        return sorted(held)

    def feeding(self, death: Node) -> list[str]:
        """Every trainable parameter behind ``death``'s inputs, sorted: what computes what reaches it."""
        fed: set[str] = set()
        for start in (child for child, _ in death.next_functions if child is not None):
            fed |= memoized_pass(start, _inputs, self._fold_every, self._feeding)
        return sorted(fed)

    def _fold(self, node: Node, below: list[frozenset[str]]) -> frozenset[str]:
        return self._gather(node, below, self._all_zero)

    def _fold_every(self, node: Node, below: list[frozenset[str]]) -> frozenset[str]:
        return self._gather(node, below, lambda parameter: parameter.requires_grad)

    def _gather(self, node: Node, below: list[frozenset[str]], chosen: Callable[[torch.Tensor], bool]) -> frozenset[str]:
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            own = id(variable) in self.names and chosen(variable)
            return frozenset((self.names[id(variable)],)) if own else frozenset()
        if len(below) == 1:  # a chain shares its set: no copy per node
            return below[0]
        return frozenset().union(*below)

    def _all_zero(self, parameter: torch.Tensor) -> bool:
        key = id(parameter)
        if key not in self._zero:
            self._zero[key] = not parameter.is_meta and parameter.requires_grad and not bool(
                torch.count_nonzero(parameter.detach()))
        return self._zero[key]
