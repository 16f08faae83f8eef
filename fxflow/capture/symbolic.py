"""Capture with ``torch.fx.symbolic_trace``, keeping the user's lines and the no-grad regions."""
from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from .grad_mode import META_KEY, GradModeRecorder


class FlowTracer(fx.Tracer):
    """A symbolic tracer that records stack traces and the grad-mode region of every node."""

    record_stack_traces = True

    def __init__(self, recorder: GradModeRecorder) -> None:
        super().__init__()
        self._recorder = recorder

    def create_node(self, *args: Any, **kwargs: Any) -> fx.Node:
        node = super().create_node(*args, **kwargs)
        region = self._recorder.current()
        if region is not None:
            node.meta[META_KEY] = region
        return node


def symbolic_capture(model: torch.nn.Module) -> fx.GraphModule:
    """Trace ``model`` symbolically; its get_attr and call_module targets name the model's own attributes."""
    recorder = GradModeRecorder()
    with recorder.recording():
        graph = FlowTracer(recorder).trace(model)
    return fx.GraphModule(model, graph, model.__class__.__name__)
