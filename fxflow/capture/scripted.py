"""``torch.jit.script``'ed submodules: one node per call, and their own graph read for the cut.

A scripted module runs as TorchScript: no Python hook sees inside it, the run-time recording sees
no torch call it makes, and its parameters cannot be swapped for twins (the stateless API refuses
jitted modules). So each call becomes one ``call_module`` node (:func:`as_module_calls` for a
symbolic trace, :class:`ScriptedCalls` for the run-time recording), and what the call is
differentiable in is read from its TorchScript graph (:func:`read_scripted`): a walk back from the
graph's result that stops at the ops with no gradient-carrying result (``argmax``, comparisons,
integer casts: :data:`fxflow.static.rules.NON_DIFFERENTIABLE_OPS`), which also names the op and
its line. A module that ran is never reported unused.
"""
from __future__ import annotations

import contextlib
import functools
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.fx as fx

from ..verdicts import EdgeKind
from .patching import ThreadPatch
from .source import display_path, is_library_file

_SOURCE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_INTEGER_TYPES = ("int", "long", "bool", "short", "char", "byte")


@dataclass(frozen=True)
class ScriptedFlow:
    """What a scripted module's result is differentiable in, read from its TorchScript graph."""

    inputs: tuple[EdgeKind, ...]  # per forward argument, self excluded
    params: dict[str, EdgeKind] = field(default_factory=dict)  # the module's own parameter names
    cut: tuple[str, str | None] | None = None  # (op, file:line) of the first op met that carries no gradient


def is_scripted(module: object) -> bool:
    return isinstance(module, torch.jit.ScriptModule)


def read_scripted(module: torch.jit.ScriptModule) -> ScriptedFlow | None:
    """Walk ``module``'s forward graph back from its result (None when it has none to read)."""
    try:
        graph = module.inlined_graph
    except (AttributeError, RuntimeError):
        return None
    return _read(graph, frozenset(name for name, _ in module.named_parameters()))


def _read(graph: torch._C.Graph, parameters: frozenset[str]) -> ScriptedFlow:
    from ..static.rules import NON_DIFFERENTIABLE_OPS  # the static stage's table; imported late (no cycle)

    arguments = list(graph.inputs())
    attribute_paths: dict[Any, str] = {arguments[0]: ""}  # value -> qualified attribute name from self
    for node in graph.nodes():
        if node.kind() == "prim::GetAttr" and node.input() in attribute_paths:
            parent = attribute_paths[node.input()]
            attribute_paths[node.output()] = f"{parent}.{node.s('name')}" if parent else node.s("name")
    reached: set[Any] = set()
    cut = None
    stack = list(graph.return_node().inputs())
    while stack:
        value = stack.pop()
        if value in reached:
            continue
        reached.add(value)
        node = value.node()
        op = node.kind().partition("::")[2].rstrip("_")
        if node.kind().startswith("aten::") and (op in NON_DIFFERENTIABLE_OPS or _casts_to_integer(node)):
            cut = cut or (op, _line(node))
            continue
        stack.extend(node.inputs())
        for block in node.blocks():  # an if or a loop: what its blocks return and read
            for inner in block.nodes():
                stack.extend(inner.inputs())
            stack.extend(block.returnNode().inputs())
    kind = lambda hit: EdgeKind.DIFF if hit else EdgeKind.NONE  # noqa: E731
    return ScriptedFlow(
        inputs=tuple(kind(value in reached) for value in arguments[1:]),
        params={name: kind(any(v in reached and path == name for v, path in attribute_paths.items()))
                for name in sorted(parameters)},
        cut=cut)


def _casts_to_integer(node: torch._C.Node) -> bool:
    """``aten::to`` (or a ``.long()``-style cast) whose result TorchScript types as an integer tensor."""
    if node.kind() not in ("aten::to", "aten::type_as") and node.kind().partition("::")[2] not in _INTEGER_TYPES:
        return False
    dtype = node.output().type().scalarType() if isinstance(node.output().type(), torch._C.TensorType) else None
    return dtype is not None and dtype.lower() in _INTEGER_TYPES + ("int",)


def _line(node: torch._C.Node) -> str | None:
    """``file:line`` of the user's code that made ``node`` (None for a line of torch's own)."""
    match = _SOURCE.search(node.sourceRange())
    if match is None or is_library_file(match["file"]):
        return None
    return f"{display_path(match['file'])}:{match['line']}"


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
