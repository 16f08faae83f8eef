"""One real forward, recorded as it runs: the run-time capture's entry points.

:class:`Recording` wraps a forward (the check's probe runs its one real forward inside one, so the
recording costs no forward of its own); :func:`record_run` runs forward itself. Either way the
result is the fx graph that :class:`~fxflow.dynamic.recorder.RunRecorder` built, and the results of
its nodes as snapshots (:mod:`fxflow.dynamic.recorded`).
"""
from __future__ import annotations

import contextlib
import operator
from typing import Any, Iterable, Sequence

import torch
import torch.fx as fx

from ..prepare.signature import positional_names
from ..core.guard import save
from ..core.tensors import tensors_in
from ..core.functions import intercepted_apply
from ..core.grad_mode import GradModeRecorder
from .recorded import Recorded, RecordedValues, Snapshots, Unsupported, tensor_state
from ..core.scripted import ScriptedCalls
from .recorder import RunRecorder


def _input_names(model: torch.nn.Module, count: int) -> list[str]:
    """Forward's own argument names for the placeholders (``input_<i>`` where it has none)."""
    names = positional_names(model)
    return [names[i] if i < len(names) else f"input_{i}" for i in range(count)]


class Recording:
    """One real forward, recorded as it runs: run it inside ``with recording:``, hand its outputs
    to :meth:`finish`, and :attr:`graph_module` is the capture.

    The check's probe runs its one real forward this way (:mod:`fxflow.dynamic.probe`), so the
    recording costs no forward of its own; :func:`record_run` does the same with a plain call.
    The run changes buffers (running statistics) and may change parameters in place:
    :meth:`restore` puts them back. Parameter values are copied when ``copy_parameters`` (the
    check's own snapshot copies them otherwise).
    """

    def __init__(self, model: torch.nn.Module, inputs: Sequence[Any] | None, copy_parameters: bool = True) -> None:
        if inputs is None:
            raise RuntimeError("run-time capture needs example inputs")
        self.model = model
        self.grad_modes = GradModeRecorder()
        self.recorder = RunRecorder(model, self.grad_modes)
        for name, value in zip(_input_names(model, len(inputs)), inputs):
            node = self.recorder.graph.placeholder(name)
            if isinstance(value, torch.Tensor):
                self.recorder.bind(value, node)
        self.snapshot = save(model, weights=copy_parameters, attributes=False)
        self.graph_module: fx.GraphModule | None = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "Recording":
        for context in (self.recorder.modules, torch.enable_grad(), self.grad_modes.recording(), intercepted_apply(self.recorder.apply_function),
                        self.recorder.recording_vmap(), ScriptedCalls(self.model).recording(self.recorder.scripted_call),
                        self.recorder):
            self._stack.enter_context(context)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def finish(self, outputs: Any) -> fx.GraphModule:
        """The graph of the recorded forward, whose result was ``outputs``."""
        result = tuple(self.recorder.node_of(t) for t in tensors_in(outputs))
        self.recorder.graph.output(result)
        self.graph_module = _graph_module(self.model, self.recorder.graph, self.model.__class__.__name__)
        return self.graph_module

    def values(self, rewritten: Iterable[torch.Tensor] = ()) -> RecordedValues | None:
        """What each node returned in the recorded run, as snapshots; the recording then lets go of the
        real tensors. None when forward changed a tensor after it was made (a write, ``detach_``, a
        ``requires_grad`` flip): its result then no longer shows what later nodes read.
        ``rewritten``: tensors changed on purpose after their call returned."""
        recorder = self.recorder
        try:
            rewritten = list(rewritten)
            skip = {id(t) for t in rewritten}
            if any(state is None or tensor_state(t) != state for t, state in recorder.states if id(t) not in skip):
                return None
            made = [recorder.nodes[id(t)] for t in rewritten if id(t) in recorder.nodes]
            calls = [node.args[0] if node.target is operator.getitem else node for node in made]  # an element: its call
            snapshots = Snapshots()
            try:
                results = snapshots.of_each({node.name: value for node, value in recorder.values.items()})
            except Unsupported:
                return None
            return RecordedValues(results, frozenset(node.name for node in calls), snapshots.histories)
        finally:  # the backward frees the activations as it goes, as in a plain step
            recorder.nodes, recorder.alive, recorder.values, recorder.states = {}, [], {}, []

    def restore(self) -> None:
        """Put back what the run changed in the model (buffers; parameters when copied)."""
        self.snapshot.restore()


def record_run(model: torch.nn.Module, inputs: Sequence[Any] | None) -> Recorded:
    """Run ``model`` once on ``inputs``, recorded: the graph of what it did and what each node returned."""
    recording = Recording(model, inputs)
    try:
        with recording:
            outputs = model(*inputs)
        return Recorded(recording.finish(outputs), values=recording.values())
    finally:
        recording.restore()


def _graph_module(root: torch.nn.Module, graph: fx.Graph, name: str) -> fx.GraphModule:
    """A GraphModule that writes its Python code when first called or read, not now: the analysis
    reads the graph alone, and generating code grows with the nodes on every check."""
    try:
        from torch.fx._lazy_graph_module import _LazyGraphModule
    except ImportError:  # an older torch: the code is generated at once
        return fx.GraphModule(root, graph, name)
    return _LazyGraphModule(root, graph, name)
