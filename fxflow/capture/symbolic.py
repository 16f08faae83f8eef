"""Capture with ``torch.fx.symbolic_trace``, keeping the user's lines and the no-grad regions."""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import torch
import torch.fx as fx

from ..core.grad_mode import META_KEY, GradModeRecorder
from ..core.patching import ThreadPatch, as_method, quiet_thread
from ..core.source import python_stack_trace

# Tensor factories that read their data argument's *values* in C++ (``torch.tensor(h.tolist())``,
# ``torch.tensor(h.sum().item())``): handed a Proxy they fail with an unrelated error instead of
# being traced. While tracing they are recorded as graph calls whenever a Proxy is among their
# arguments, so the round trip through Python data shows up in the graph as the cut it is.
_VALUE_FACTORIES = ("tensor", "as_tensor", "from_numpy", "asarray", "scalar_tensor")


def _find_proxy(value: Any) -> fx.Proxy | None:
    found: list[fx.Proxy] = []
    fx.node.map_aggregate(value, lambda item: found.append(item) if isinstance(item, fx.Proxy) else None)
    return found[0] if found else None


@contextlib.contextmanager
def _traceable_factories() -> Iterator[None]:
    """Inside, this thread's value factories record a graph call when handed a Proxy."""
    with contextlib.ExitStack() as stack:
        for patch in _FACTORIES:
            stack.enter_context(patch.active(_traced(patch.original)))
        yield


def _traced(original: Callable[..., Any]) -> Callable[..., Any]:
    def factory(*args: Any, **kwargs: Any) -> Any:
        proxy = _find_proxy((args, kwargs))
        if proxy is None:
            return original(*args, **kwargs)
        return proxy.tracer.create_proxy("call_function", original, args, kwargs)

    return factory


_FACTORIES = [ThreadPatch(torch, name) for name in _VALUE_FACTORIES if hasattr(torch, name)]


@contextlib.contextmanager
def _attributes_keep_their_line(recorder: GradModeRecorder) -> Iterator[None]:
    """Give ``h.data``-style attribute nodes the line (and grad region) where they were read.

    fx creates an attribute's node lazily, when the attribute is first *used* (most attributes
    are methods about to be called), so ``h = x.data`` on one line and ``b(h)`` on the next would
    blame the second line. The origin is remembered when the attribute is read and written onto
    the node when it materialises (in this thread's traces only).
    """
    def init(self: Any, root: fx.Proxy, attr: str) -> None:
        original_init(self, root, attr)
        self._fxflow_origin = (python_stack_trace(), recorder.current())

    def node(self: Any) -> fx.Node:
        fresh = self._node is None
        result = original_node(self)
        origin = getattr(self, "_fxflow_origin", None)
        if fresh and origin is not None:
            result.meta["stack_trace"], region = origin
            if region is None:
                result.meta.pop(META_KEY, None)
            else:
                result.meta[META_KEY] = region
        return result

    with _ATTRIBUTE_INIT.active(init) as original_init, _ATTRIBUTE_NODE.active(node) as original_node:
        yield


@contextlib.contextmanager
def _no_warning_filters() -> Iterator[None]:
    """Each Proxy's ``__torch_function__`` asks ``torch.overrides.is_tensor_method_or_property``, which
    torch wraps in ``warnings.catch_warnings`` and a filter: a change of the process-wide filter list at
    every traced op, which another thread filtering its own warnings sees (and can lose its own filter
    to). The filter is for warnings of the table's first build only; here this thread asks the same
    table, built with its warnings kept to this thread (:func:`quiet_thread`); other threads' calls are
    untouched."""
    methods = _tensor_methods()
    if methods is None:  # another torch: its own function, as it is
        yield
        return
    with _TENSOR_METHOD.active(lambda func: func in methods or func.__name__ == "__get__"):
        yield


@functools.cache
def _tensor_methods() -> frozenset | None:
    """What ``is_tensor_method_or_property`` looks in: the overridable methods of ``torch.Tensor``."""
    table = getattr(torch.overrides, "_get_overridable_functions", None)
    if table is None:
        return None
    with contextlib.ExitStack() as stack:  # the lists it reads, without their wrappers' filters
        stack.enter_context(quiet_thread())
        for patch in _FILTERED_LISTS:
            stack.enter_context(patch.active(functools.cache(_unwrapped(patch.original))))
        return frozenset(table()[0][torch.Tensor])


def _unwrapped(function: Callable[..., Any]) -> Callable[..., Any]:
    while hasattr(function, "__wrapped__"):  # torch's cache, then its warning filter
        function = function.__wrapped__
    return function


_FILTERED_LISTS = [ThreadPatch(torch.overrides, name) for name in ("get_ignored_functions", "get_testing_overrides")
                   if hasattr(torch.overrides, name)]


_TENSOR_METHOD = ThreadPatch(torch.overrides, "is_tensor_method_or_property")
_ATTRIBUTE_INIT = ThreadPatch(fx.proxy.Attribute, "__init__", as_method)
_ATTRIBUTE_NODE = ThreadPatch(fx.proxy.Attribute, "node", property)


class FlowTracer(fx.Tracer):
    """A symbolic tracer that records stack traces and the grad-mode region of every node.

    fx's own ``record_stack_traces`` symbolizes through the profiler, which imports
    torch._dynamo; walking the Python frames directly costs next to nothing.
    """

    def __init__(self, recorder: GradModeRecorder) -> None:
        super().__init__()
        self._recorder = recorder

    def create_node(self, *args: Any, **kwargs: Any) -> fx.Node:
        node = super().create_node(*args, **kwargs)
        if node.op not in ("placeholder", "output"):  # created by fx itself, not by a line of forward
            node.stack_trace = python_stack_trace()
        region = self._recorder.current()
        if region is not None:
            node.meta[META_KEY] = region
        return node


def symbolic_capture(model: torch.nn.Module) -> fx.GraphModule:
    """Trace ``model`` symbolically; its get_attr and call_module targets name the model's own attributes.

    Raises :class:`BakedInGradient` when the trace froze autograd history into a constant.
    """
    recorder = GradModeRecorder()
    with recorder.recording(), _traceable_factories(), _attributes_keep_their_line(recorder), _no_warning_filters():
        graph = FlowTracer(recorder).trace(model)
    graph_module = fx.GraphModule(model, graph, model.__class__.__name__)
    reject_baked_in_gradients(graph_module, model)
    return graph_module


class BakedInGradient(RuntimeError):
    """A traced constant carries autograd history: the graph misses data flow to parameters."""


def reject_baked_in_gradients(graph_module: fx.GraphModule, model: torch.nn.Module) -> None:
    """Refuse a graph whose constant tensors carry autograd history.

    symbolic_trace runs forward's Python; what it computes without a Proxy (an L2 penalty
    ``sum(p.pow(2).sum() for p in self.parameters())``) is stored as a ``_tensor_constant``: a
    real tensor whose history leads into the parameters, frozen in place of the graph path the
    real backward takes. Any attribute the graph reads that has a ``grad_fn``, or that requires
    grad without being one of the model's own tensors, means the trace missed data flow.
    """
    for node in graph_module.graph.nodes:
        if node.op != "get_attr":
            continue
        value = _attribute(graph_module, str(node.target))
        if not isinstance(value, torch.Tensor) or isinstance(value, torch.nn.Parameter):
            continue
        made_by_trace = _attribute(model, str(node.target)) is not value
        if value.grad_fn is not None or (value.requires_grad and made_by_trace):
            raise BakedInGradient(
                f"{node.target} was computed from parameters outside the graph (forward code the trace "
                "ran once), so the graph misses their gradient path")


def _attribute(root: Any, target: str) -> Any:
    value = root
    for part in target.split("."):
        value = getattr(value, part, None)
    return value
