"""Capture the actual run: record every torch call forward makes on the example inputs.

The last resort of the chain, and the most faithful: forward runs for real (on the model's
own device, meta included), a part of the one forward observer (:mod:`fxflow.core.observer`) sees each torch
function, tensor method and tensor attribute read, and each becomes one fx node whose inputs
are the nodes that produced its tensor arguments. It follows the branch the inputs take, loops
unrolled, and Python data in between becomes constants.

A tensor that leaves torch (``.numpy()``, ``.item()``, ``.tolist()``) becomes an *escape* node
that returns plain data; a tensor that comes back (``torch.tensor(...)``, ``torch.from_numpy``,
any untracked tensor appearing after an escape) becomes a *re-entry* node whose inputs are the
escapes it came from. The parameter upstream is then reported ``cut`` at the escaping op rather
than ``unused``. Module hooks keep ``nn_module_stack``; custom ``autograd.Function`` calls are
single opaque nodes (see :mod:`fxflow.core.functions`). :mod:`fxflow.dynamic.recording` runs a
forward under this recorder.
"""
from __future__ import annotations

import contextlib
import enum
import operator
import sys
import threading
from typing import Any, Callable, Iterator

import torch
import torch.fx as fx
from torch._functorch import apis as functorch_apis

from ..core.observer import ForwardPart
from .recorded import tensor_state
from .leaves import leaves, map_leaves
from ..core.source import ModuleStack

from ..verdicts import OPAQUE_KEY
from ..core.functions import (CheckpointGate, Constant, OpaqueFunction, checkpoint_inputs, checkpointed_call,
                        is_checkpoint, is_user_function, opaque_reason)
from ..core.grad_mode import META_KEY as GRAD_MODE_KEY, GradModeRecorder
from ..core.patching import ThreadPatch
from .recorded_targets import (NEW_LEAF_REASON, SET_DATA_REASON, Escape, Escaped, HiddenChannel,  # noqa: F401
                               Reentry, SetItem, Vmapped)

_ESCAPES = {"numpy", "item", "tolist", "__array__", "__float__", "__int__", "__index__", "__complex__"}
_CONSTRUCTORS = {"tensor", "as_tensor", "asarray", "from_numpy", "frombuffer", "new_tensor"}


class RunRecorder(ForwardPart):
    """Builds an fx graph of one real forward; see the module docstring. A part of the one forward
    observer (:mod:`fxflow.core.observer`) that also sees the calls dynamo traces."""

    while_compiling = True

    def __init__(self, model: torch.nn.Module, grad_modes: GradModeRecorder) -> None:
        self.graph = fx.Graph()
        self.grad_modes = grad_modes
        self.nodes: dict[int, fx.Node] = {}  # id(tensor) -> the node that produced it
        self.alive: list[Any] = []  # every tensor in `nodes`, so ids stay unique
        self.attributes: dict[int, str] = {}
        for name, tensor in list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers(remove_duplicate=False)):
            self.attributes.setdefault(id(tensor), name)
        self.modules = ModuleStack(model)  # entered with the recording
        self.escapes: list[tuple[fx.Node, Any]] = []
        self.scalars: dict[int, tuple[fx.Node, Any]] = {}  # id(float an escape returned) -> (escape, float)
        self.linked: set[fx.Node] = set()
        self.paused = 0
        # What each node returned, and each tensor's state when it was returned: unchanged at the end,
        # the results' own histories are what running the graph again would build (Recording.values).
        self.values: dict[fx.Node, Any] = {}
        self.states: list[tuple[torch.Tensor, tuple | None]] = []
        self.storages: dict[tuple[str, int], torch.Tensor] = {}  # storage -> the last recorded tensor in it
        self.indexed = 0  # how many of `alive` are in `storages`: indexed when first needed
        self.latest: Any = None  # what the last call recorded returned

    # -- graph building ---------------------------------------------------------------------
    def bind(self, value: Any, node: fx.Node) -> None:
        """Remember ``node`` as the producer of every tensor in ``value``."""
        self.values[node] = value
        if isinstance(value, torch.Tensor):
            self.nodes[id(value)] = node
            self.alive.append(value)
            self.states.append((value, tensor_state(value)))
        elif isinstance(value, (tuple, list)):
            for index, item in enumerate(value):
                if _has_tensor(item):
                    self.bind(item, self.add("call_function", operator.getitem, (node, index), {}))

    def add(self, op: str, target: Any, args: tuple, kwargs: dict) -> fx.Node:
        node = self.graph.create_node(op, target, args, kwargs)
        node.meta["stack_trace"] = self.modules.stack_trace(sys._getframe())
        if self.modules.entries:
            node.meta["nn_module_stack"] = self.modules.as_meta()
        region = self.grad_modes.current()
        if region is not None:
            node.meta[GRAD_MODE_KEY] = region
        return node

    def node_of(self, tensor: torch.Tensor) -> fx.Node:
        """The node that produced ``tensor``: recorded, a model attribute, re-entered data or a constant."""
        node = self.nodes.get(id(tensor))
        if node is not None:
            return node
        if id(tensor) in self.attributes:
            node = self.graph.get_attr(self.attributes[id(tensor)])
        else:
            node = (self._sharing_storage(tensor) or self._reentry("tensor", tensor, None)
                    or self.add("call_function", Constant(tensor), (), {}))
        self.bind(tensor, node)
        return node

    def _sharing_storage(self, tensor: torch.Tensor) -> fx.Node | None:
        """A node for an untracked tensor that shares its storage with a recorded one (a new
        ``nn.Parameter`` of it), linked to that one's node; None when it shares none."""
        key = _storage_key(tensor) if tensor.grad_fn is None else None  # a history of its own: not hidden
        if key is None:
            return None
        for value in self.alive[self.indexed:]:
            found = _storage_key(value)
            if found is not None:
                self.storages[found] = value
        self.indexed = len(self.alive)
        source = self.storages.get(key)
        if source is None:
            return None
        origin = self.nodes[id(source)]
        node = self.graph.create_node("call_function", HiddenChannel("new_leaf", tensor, NEW_LEAF_REASON), (origin,), {})
        node.meta.update({key: origin.meta[key] for key in ("stack_trace", "nn_module_stack", GRAD_MODE_KEY) if key in origin.meta})
        return node

    def _set_data(self, target: torch.Tensor, value: torch.Tensor) -> None:
        """``target.data = value``: later reads of ``target`` see ``value``'s data, not its history."""
        node = self.add("call_function", HiddenChannel("set_data", target, SET_DATA_REASON),
                        (self.node_of(value), self.node_of(target)), {})
        self.bind(target, node)

    def _reentry(self, name: str, result: Any, data: Any) -> fx.Node | None:
        """A node for data that came back from an escape, linked to it (None if nothing escaped)."""
        sources = [node for node, value in self.escapes if _same_data(value, data)]
        sources = sources or [node for node, _ in self.escapes if node not in self.linked]
        if not sources:
            return None
        self.linked.update(sources)
        return self.add("call_function", Reentry(name, result), tuple(sources), {})

    def _convert(self, value: Any) -> Any:
        return map_leaves(self._argument, value)

    def _argument(self, value: Any) -> Any:
        """A torch call's argument as graph data: a tensor's node; a float that an escape returned
        (``x * h.mean().item()``) becomes a re-entry node linked to that escape; else the value."""
        if isinstance(value, torch.Tensor):
            return self.node_of(value)
        escaped = self.scalars.get(id(value)) if isinstance(value, (float, complex)) else None
        if escaped is not None and escaped[1] is value:
            return self.add("call_function", Reentry("scalar", value), (escaped[0],), {})
        if not _is_literal(value):  # an nn.ModuleList, a class: fx would write its repr into the code
            return self.add("call_function", Constant(value), (), {})
        return value

    # -- interception -----------------------------------------------------------------------
    def observe(self, func: Callable, args: tuple, kwargs: dict, result: Any) -> None:
        self.latest = None
        if self.paused:
            return
        name = getattr(func, "__name__", "")
        if name in _ESCAPES and args and isinstance(args[0], torch.Tensor):
            node = self.add("call_function", Escape(name), (self.node_of(args[0]),), {})
            self.escapes.append((node, result))
            for scalar in (result if isinstance(result, list) else [result]):  # floats, not (cached) ints
                if isinstance(scalar, (float, complex)):
                    self.scalars[id(scalar)] = (node, scalar)
            return
        if name == "__set__" and getattr(getattr(func, "__self__", None), "__name__", "") == "data" \
                and len(args) == 2 and isinstance(args[1], torch.Tensor) and self._tracked(args, kwargs):
            self._set_data(*args)
            return
        if not _has_tensor(result) and name != "__setitem__":
            return  # metadata reads and Python data: used as constants later
        if name in _CONSTRUCTORS and not self._tracked(args, kwargs):
            data = args[0] if args else kwargs.get("data")
            node = self._reentry(name, result, data)
            if node is not None:
                self.bind(result, node)
                self.latest = result
                return
        self.bind(result if name != "__setitem__" else args[0], self._record(func, name, args, kwargs))
        self.latest = result

    def _tracked(self, args: tuple, kwargs: dict) -> bool:
        """Whether a call's arguments hold a tensor recorded or of the model."""
        return any(isinstance(t, torch.Tensor) and (id(t) in self.nodes or id(t) in self.attributes)
                   for t in leaves((args, kwargs)))

    def stack_trace_of(self, result: Any, tensor: torch.Tensor) -> str | None:
        """The stack trace recorded for ``tensor`` (in ``result``) if the last call seen returned ``result``
        and was recorded, else None: later parts of the observer read the user's line from it."""
        node = self.nodes.get(id(tensor)) if result is self.latest else None
        return node.meta.get("stack_trace") if node is not None else None

    def __enter__(self) -> "RunRecorder":
        self._outer, _RUNNING.recorder = running_recorder(), self
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        _RUNNING.recorder = self._outer
        super().__exit__(*exc)

    def _record(self, func: Callable, name: str, args: tuple, kwargs: dict) -> fx.Node:
        node_args, node_kwargs = self._convert(args), self._convert(kwargs)
        if name == "__setitem__":
            return self.add("call_function", SetItem(), node_args, node_kwargs)
        owner = getattr(func, "__self__", None)
        if name == "__get__" and owner is not None and hasattr(owner, "__name__"):
            return self.add("call_function", getattr, (node_args[0], owner.__name__), {})
        if args and isinstance(args[0], torch.Tensor) and getattr(torch.Tensor, name, None) is func:
            return self.add("call_method", name, node_args, node_kwargs)
        return self.add("call_function", func, node_args, node_kwargs)

    def apply_function(self, cls: type, call: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """``Function.apply``: inline reentrant checkpoints, record user Functions as one opaque node."""
        if self.paused:
            return call(*args, **kwargs)
        if is_checkpoint(cls):  # recorded inline, returned as the checkpoint returns it
            inline = checkpointed_call(args)
            gate = self._record(CheckpointGate(), "checkpoint", (inline, *checkpoint_inputs(args)), {})
            # Without an input that requires grad, the real checkpoint's result has no history, so a
            # plain backward gives the block's parameters nothing: the backward riding on this run must not.
            output = CheckpointGate()(inline, *checkpoint_inputs(args))
            self.bind(output, gate)
            return output
        if not is_user_function(cls):
            return call(*args, **kwargs)
        self.paused += 1
        try:
            result = call(*args, **kwargs)
        finally:
            self.paused -= 1
        node = self._record(OpaqueFunction(cls), cls.__name__, args, kwargs)
        node.meta[OPAQUE_KEY] = opaque_reason(cls)
        self.bind(result, node)
        return result

    def scripted_call(self, name: str, call: Callable[[], Any], args: tuple, kwargs: dict) -> Any:
        """A ``torch.jit.script``'ed submodule's call: one ``call_module`` node (nothing inside is seen)."""
        if self.paused:
            return call()
        self.paused += 1
        try:
            result = call()
        finally:
            self.paused -= 1
        self.bind(result, self.add("call_module", name, self._convert(args), self._convert(kwargs)))
        return result

    @contextlib.contextmanager
    def recording_vmap(self) -> Iterator[None]:
        """Record each ``torch.func.vmap`` call of this thread as one :class:`Vmapped` node while inside."""
        def vmap_impl(*options_and_args: Any, **kwargs: Any) -> Any:
            if self.paused:
                return original(*options_and_args, **kwargs)
            options, args = options_and_args[:5], options_and_args[5:]
            self.paused += 1
            try:
                result = original(*options, *args, **kwargs)
            finally:
                self.paused -= 1
            self.bind(result, self._record(Vmapped(original, options), "vmap", args, kwargs))
            return result

        with _VMAP.active(vmap_impl) as original:
            yield



_RUNNING = threading.local()  # .recorder: the RunRecorder recording on this thread


def running_recorder() -> RunRecorder | None:
    """The :class:`RunRecorder` recording the forward running on this thread, if one is."""
    return getattr(_RUNNING, "recorder", None)


# torch.func.vmap's wrapper looks up apis.vmap_impl at each call: replaced for the recording thread only
_VMAP = ThreadPatch(functorch_apis, "vmap_impl")

# Values fx writes into generated code as valid Python; any other object becomes a graph constant.
_LITERALS = (type(None), bool, int, float, complex, str, bytes, slice, range, type(Ellipsis), torch.dtype,
             torch.device, torch.layout, torch.memory_format, torch.Size, enum.Enum)


def _is_literal(value: Any) -> bool:
    if isinstance(value, slice):
        return all(_is_literal(part) for part in (value.start, value.stop, value.step))
    return isinstance(value, _LITERALS)


def _has_tensor(value: Any) -> bool:
    return any(isinstance(leaf, torch.Tensor) for leaf in leaves(value))


def _storage_key(tensor: torch.Tensor) -> tuple[str, int] | None:
    """The storage ``tensor`` lives in (meta and fake tensors have one too); None for a tensor
    without one (a wrapper subclass). The recording keeps every tensor it saw alive, so no other
    storage can take the key while it runs."""
    try:
        return str(tensor.device), tensor.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        return None


def _same_data(escaped: Any, data: Any) -> bool:
    """``data`` is the escaped object itself or a NumPy view of it."""
    while data is not None:
        if data is escaped:
            return True
        data = getattr(data, "base", None)
    return False
