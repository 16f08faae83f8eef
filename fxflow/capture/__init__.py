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

The chain (:func:`_methods`): ``symbolic_trace`` (fast, no inputs needed), then a capture of the
actual run on the example inputs (:mod:`.runtime`: shape- and data-dependent code, most Hugging
Face models, NumPy round trips, inference_mode, custom autograd.Functions; the check hands in the
recording of its probe's one real forward, :class:`Recorded`, so nothing runs twice), then
``torch.export`` non-strict (:mod:`.export`: ``torch.cond``, which the recording cannot follow). Wrappers
(``torch.compile``, DataParallel, DDP) are seen through first (:mod:`fxflow.prepare.unwrap`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.fx as fx

from torch.utils._pytree import tree_flatten

from ..errors import describe
from ..prepare.signature import defaulted_arguments
from ..core.guard import ATTRIBUTES_ONLY, guard, save
from ..verdicts import OPAQUE_KEY
from ..core.functions import (CheckpointGate, OpaqueFunction, checkpoint_inputs, checkpointed_call,
                        intercepted_apply, is_checkpoint, is_user_function, opaque_reason)
from ..core.grad_mode import META_KEY as GRAD_MODE_KEY, GradRegion
from ..core.scripted import as_module_calls
from ..dynamic.recorded import Recorded, RecordedValues
from ..dynamic.recording import record_run
from .symbolic import symbolic_capture
from ..prepare.unwrap import rebase, unwrap

__all__ = ["Capture", "Recorded", "RecordedValues", "capture", "GradRegion", "GRAD_MODE_KEY", "OPAQUE_KEY"]

CaptureMethod = Callable[[torch.nn.Module, Sequence[object] | None], fx.GraphModule]


def _symbolic_apply(cls: type, call: Callable[..., object], args: tuple, kwargs: dict) -> object:
    """``Function.apply`` on proxies: one opaque node for a user Function, checkpoints inlined."""
    proxies = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, fx.Proxy)]
    if not proxies:
        return call(*args, **kwargs)
    if is_checkpoint(cls):
        output = checkpointed_call(args)
        return proxies[0].tracer.create_proxy("call_function", CheckpointGate(), (output, *checkpoint_inputs(args)), {})
    if not is_user_function(cls):
        return call(*args, **kwargs)
    proxy = proxies[0].tracer.create_proxy("call_function", OpaqueFunction(cls), args, kwargs)
    proxy.node.meta[OPAQUE_KEY] = opaque_reason(cls)
    return proxy


def _symbolic(model: torch.nn.Module, inputs: Sequence[object] | None) -> fx.GraphModule:
    defaulted = defaulted_arguments(model, len(inputs) if inputs is not None else 0)
    if defaulted and inputs is not None:  # fx would trace them as inputs, not as their defaults
        shown = ", ".join(defaulted[:3]) + (f" and {len(defaulted) - 3} more" if len(defaulted) > 3 else "")
        raise TypeError(f"forward's arguments {shown} keep their defaults, which symbolic tracing would treat as inputs")
    with intercepted_apply(_symbolic_apply):
        return as_module_calls(symbolic_capture(model), model)


def _export(model: torch.nn.Module, inputs: Sequence[object] | None) -> fx.GraphModule:
    from .export import export_capture

    return export_capture(model, inputs)


def _runtime(model: torch.nn.Module, inputs: Sequence[object] | None) -> fx.GraphModule:
    return record_run(model, inputs).graph_module


@dataclass
class Capture:
    """A captured graph and how it was obtained."""

    graph_module: fx.GraphModule | None
    method: str  # "symbolic_trace", ..., or "none" when nothing could capture the model
    notes: list[str] = field(default_factory=list)
    # The recorded run's results by node name, when the graph is that recording (Recorded.values):
    # the static stage takes them, once (see fxflow.pipeline.analyze_capture).
    values: RecordedValues | None = field(default=None, repr=False)

    @property
    def node_count(self) -> int:
        return 0 if self.graph_module is None else len(self.graph_module.graph.nodes)


def _methods() -> list[tuple[str, CaptureMethod]]:
    """The capture methods, in the order they are tried: the cheap static trace first; then the
    recording of the real run, which the check makes anyway (its probe hands the recording in); then
    torch.export, which traces the whole model again and is left for what the recording cannot
    follow (``torch.cond``)."""
    return [("symbolic_trace", _symbolic), ("runtime", _runtime), ("torch.export", _export)]


METHODS = ("symbolic_trace", "runtime", "torch.export")


def capture(model: torch.nn.Module, inputs: Sequence[object] | None = None, *,
            recorded: Recorded | None = None, methods: Sequence[str] | None = None) -> Capture:
    """Capture ``model`` with the first method that works; notes say why earlier ones failed.

    ``recorded``: the run-time capture, already made by recording a real forward on ``inputs``
    (the check's probe records its own); without it the run-time capture runs forward itself.

    A wrapped model (``torch.compile``, DataParallel, DDP) is captured through its inner module;
    the graph's attribute targets still name attributes of ``model`` itself. ``methods`` restricts
    the chain to some of :data:`METHODS`, in the chain's order.

    Each attempt starts from the random state the call found, and only a run-time capture that
    ran forward itself leaves it advanced: a trace runs forward's Python, and a ``torch.rand`` it
    runs for real (LayerDrop's draw) would otherwise shift every draw of what runs after it (in
    ``fxflow.watch`` and ``fxflow.check --steps``, a real run).
    """
    unknown = set(methods or ()) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown capture method {sorted(unknown)[0]!r}; choose from {', '.join(METHODS)}")
    inner, prefix, notes = unwrap(model)
    random_state = save()  # the global generators (no model given)
    for name, method in _methods():
        if methods is not None and name not in methods:
            continue
        if method is _runtime and recorded is not None and recorded.graph_module is None:
            notes.append(f"{name} failed: {recorded.failure}")
            continue
        random_state.restore()
        values = None
        try:
            if method is _runtime:  # what each node returned comes with the graph
                if recorded is None:
                    with guard(inner, **ATTRIBUTES_ONLY):
                        recorded = record_run(inner, inputs)
                graph_module, values = recorded.graph_module, recorded.values
            else:
                with guard(inner, **ATTRIBUTES_ONLY):
                    graph_module = method(inner, inputs)
            graph_module = rebase(graph_module, model, prefix)
        except Exception as error:  # any failure means: try the next capture
            notes.append(f"{name} failed: {describe(error, limit=200)}")
            continue
        if method is not _runtime:
            random_state.restore()
        return Capture(graph_module, name, notes, values)
    notes.append("no capture worked")
    return Capture(None, "none", notes)
