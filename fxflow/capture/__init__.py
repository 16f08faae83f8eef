"""Capture the model's forward as a torch.fx graph, trying one method after another.

Every method returns a ``GraphModule`` of the same shape, so later stages never care which
one succeeded:

* one ``placeholder`` per positional forward input, in order;
* ``get_attr`` targets and ``call_module`` targets are qualified names in the *user's* model
  (``blocks.2.fc1.weight``, ``blocks.2.fc1``), so parameters map back by name;
* ``node.meta["stack_trace"]`` holds the Python stack that created the node (fx format),
  ``node.meta["nn_module_stack"]`` the modules it was created in (fx format), and
  ``node.meta["fxflow_grad_mode"]`` a :class:`GradRegion` when the node was created inside a
  no-grad or inference-mode region;
* ``node.meta["fxflow_opaque"]``, where present, says why the node's gradient behaviour can only
  be decided by a real backward (a custom ``autograd.Function``, say).

Capturing never changes the user's model: attributes that forward assigns while tracing are
put back afterwards.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.fx as fx

from ..state import preserved_module_attributes
from .grad_mode import META_KEY as GRAD_MODE_KEY, GradRegion
from .symbolic import symbolic_capture

__all__ = ["Capture", "capture", "GradRegion", "GRAD_MODE_KEY", "OPAQUE_KEY"]

OPAQUE_KEY = "fxflow_opaque"

CaptureMethod = Callable[[torch.nn.Module, Sequence[object] | None], fx.GraphModule]


def _symbolic(model: torch.nn.Module, inputs: Sequence[object] | None) -> fx.GraphModule:
    return symbolic_capture(model)


@dataclass
class Capture:
    """A captured graph and how it was obtained."""

    graph_module: fx.GraphModule | None
    method: str  # "symbolic_trace", ..., or "none" when nothing could capture the model
    notes: list[str] = field(default_factory=list)

    @property
    def node_count(self) -> int:
        return 0 if self.graph_module is None else len(self.graph_module.graph.nodes)


def _methods() -> list[tuple[str, CaptureMethod]]:
    methods: list[tuple[str, CaptureMethod]] = [("symbolic_trace", _symbolic)]
    return methods


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def capture(model: torch.nn.Module, inputs: Sequence[object] | None = None) -> Capture:
    """Capture ``model`` with the first method that works; notes say why earlier ones failed."""
    notes: list[str] = []
    for name, method in _methods():
        try:
            with preserved_module_attributes(model):
                graph_module = method(model, inputs)
        except Exception as error:  # any failure means: try the next capture
            notes.append(f"{name} failed: {_first_line(error)}")
            continue
        return Capture(graph_module, name, notes)
    notes.append("no capture worked: only the real backward was run")
    return Capture(None, "none", notes)
