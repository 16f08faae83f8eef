"""What holds an exact zero: the zero-valued trainable weights across the op that zeroed a gradient.

When a live gradient becomes exactly 0 at a product (``gate * branch``, ``lora_B(lora_A(x))``, a
BatchNorm whose weight is 0), the factor that zeroed it comes in through the op's other inputs. If
that factor is computed from a trainable parameter that is all zeros (LoRA's ``B``, adaLN-Zero's
modulation, a zero convolution, ReZero's α), the first optimizer step moves it and the zero lifts:
that parameter *holds* the gradient. If no such parameter is there, the zero comes from something
no step changes (a constant, a buffer, a frozen or detached parameter, the batch). A frozen all-zero
parameter (a LoRA ``B`` frozen by mistake) has no node in the autograd graph: the one the module
calling the product owns is named, a holder that no step will ever move.
"""
from __future__ import annotations

from typing import Any, Iterable

import torch

Node = Any  # torch.autograd.graph.Node


class ZeroHolders:
    """Finds the holders of zeros in one autograd graph (memoized across the parameters explained)."""

    def __init__(self, names: dict[int, str], parameters: Iterable[torch.Tensor] = ()) -> None:
        self.names = names  # id(parameter) -> qualified name
        self._zero: dict[int, bool] = {}
        self.frozen = sorted(names[id(p)] for p in parameters if id(p) in names and not p.requires_grad
                             and not p.is_meta and p.numel() and not bool(torch.count_nonzero(p.detach())))

    def frozen_in(self, module: str | None) -> list[str]:
        """The frozen all-zero parameters that ``module`` (a qualified name; None or "" the model) owns itself."""
        return [name for name in self.frozen if name.rpartition(".")[0] == (module or "")]

    def across(self, death: Node, came_from: Node) -> list[str]:
        """The all-zero trainable parameters behind ``death``'s inputs other than ``came_from``, sorted."""
        starts = [child for child, _ in death.next_functions if child is not None and child is not came_from]
        return sorted(self.names[id(leaf)] for leaf in self._leaves(starts) if self._all_zero(leaf))

    def _leaves(self, starts: Iterable[Node]) -> list[torch.Tensor]:
        found: list[torch.Tensor] = []
        seen: set[Node] = set()
        stack = list(starts)
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            variable = getattr(node, "variable", None)
            if isinstance(variable, torch.Tensor):
                if id(variable) in self.names:
                    found.append(variable)
                continue
            stack.extend(child for child, _ in node.next_functions if child is not None)
        return found

    def _all_zero(self, parameter: torch.Tensor) -> bool:
        key = id(parameter)
        if key not in self._zero:
            self._zero[key] = not parameter.is_meta and parameter.requires_grad and not bool(
                torch.count_nonzero(parameter.detach()))
        return self._zero[key]
