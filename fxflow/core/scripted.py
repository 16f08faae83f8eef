"""``torch.jit.script``'ed submodules: one ``call_module`` node per call, on every capture.

A scripted module runs as TorchScript: no Python hook sees inside it, the run-time recording sees
no torch call it makes, and a symbolic trace calls its ``_c.forward``. So each call becomes one
``call_module`` node (:func:`as_module_calls` for a symbolic trace, :class:`ScriptedCalls` for the
run-time recording), whose parameters belong to it; the static stage reads what the call is
differentiable in from its TorchScript graph (:mod:`fxflow.static.scripted`).
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import torch
import torch.fx as fx

from .patching import ThreadPatch


def is_scripted(module: object) -> bool:
    """A ``torch.jit.script``'ed (or traced) module: TorchScript runs it, not Python."""
    return isinstance(module, torch.jit.ScriptModule)


def as_module_calls(graph_module: fx.GraphModule, model: torch.nn.Module) -> fx.GraphModule:
    """A symbolic trace of ``model`` calls a scripted submodule as ``getattr(self.inner, "_c").forward(x)``:
    make each such call the ``call_module`` node it is, so its parameters belong to it."""
    changed = False
    for node in list(graph_module.graph.nodes):
        owner = node.args[0] if node.op == "call_method" and node.target == "forward" and node.args else None
        if not (isinstance(owner, fx.Node) and owner.op == "get_attr" and str(owner.target).endswith("._c")):
            continue
        target = str(owner.target)[:-len("._c")]
        try:
            module = model.get_submodule(target)
        except AttributeError:
            continue
        if not is_scripted(module):
            continue
        graph_module.add_submodule(target, module)  # the trace kept only its `_c`
        with graph_module.graph.inserting_before(node):
            call = graph_module.graph.call_module(target, node.args[1:], dict(node.kwargs))
        call.meta = dict(node.meta)
        node.replace_all_uses_with(call)
        graph_module.graph.erase_node(node)
        if not owner.users:
            graph_module.graph.erase_node(owner)
        changed = True
    if changed:
        graph_module.recompile()
    return graph_module


class ScriptedCalls:
    """While :meth:`recording`, each call of a scripted submodule of ``model`` made by this thread
    goes to ``record(qualified name, call, args, kwargs)``, which runs it (``call()``) and records it."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.names = {id(module): name for name, module in model.named_modules() if name and is_scripted(module)}

    @contextlib.contextmanager
    def recording(self, record: Callable[[str, Callable[[], Any], tuple, dict], Any]) -> Iterator[None]:
        if not self.names:
            yield
            return

        def call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            name = self.names.get(id(module))
            run = functools.partial(original, module, *args, **kwargs)
            return run() if name is None else record(name, run, args, kwargs)

        with _SCRIPTED_CALL.active(call) as original:
            yield


# a plain function as the class's __call__, so the call's module comes in as its first argument
_SCRIPTED_CALL = ThreadPatch(torch.jit.ScriptModule, "__call__",
                             install=lambda dispatch: lambda *args, **kwargs: dispatch(*args, **kwargs))
