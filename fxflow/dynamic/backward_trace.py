"""The one run's backward, traced for localization: what made each autograd node, and the gradient that crossed it.

A :class:`BackwardTrace` rides on the real run of ``fxflow.check`` (:class:`fxflow.dynamic.probe.ModelRun`):

* forward, a part of the one forward observer (:class:`OriginRecorder`): which torch call, user line and module
  created each autograd node, and where ``register_hook`` was called;
* backward, post-hooks on every autograd node behind the loss (:class:`GradientNorms`): the norm of the gradient
  arriving at each node and of the one it passes to each input.

:mod:`fxflow.diagnose.localize` reads it when the backward left some parameter exactly zero or vanishing: the
explanation comes from the very backward that gave the verdict, never from a second run (which costs a whole
forward and backward, may not reproduce a non-deterministic forward, and once asked autograd for a pruned
gradient that segfaults on timm's poolformerv2 with torch 2.13).
"""
from __future__ import annotations

import contextlib
import functools
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import torch

from ..core.observer import ForwardPart
from ..core.source import ModuleStack, current_user_source, source_of_stack_trace
from ..core.tensors import gradient_norm
from .leaves import leaves
from .recorder import RunRecorder, running_recorder

Node = Any  # torch.autograd.graph.Node (C++ nodes have no common Python base class to annotate with)


@dataclass(frozen=True)
class NodeOrigin:
    """What created an autograd node during forward."""

    op: str  # the torch call: relu, clamp, round, linear
    source: str | None  # file:line of the user's line
    module: str | None  # qualified name of the innermost module being called


class OriginRecorder(ForwardPart):
    """Forward: the torch call, user line and module behind each autograd node; user gradient hooks
    (a part of the one forward observer; nothing while dynamo traces: no side effects there)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.origins: dict[Node, NodeOrigin] = {}
        self.hooks: dict[Any, str | None] = {}  # grad_fn (or id of a leaf) -> line that registered a hook
        self.modules = ModuleStack(model)  # entered around the forward with this mode
        self.recording: RunRecorder | None = None  # the run-time capture entered before this, if one was

    def __enter__(self) -> "OriginRecorder":
        self.recording = running_recorder()  # entered earlier, so it sees each call first
        return super().__enter__()

    def observe(self, func: Callable, args: tuple, kwargs: dict, result: Any) -> None:
        try:
            self._record(_call_name(func), args, result)
        except Exception:  # an origin left unknown; the forward it watches must never fail for it
            pass

    def _record(self, name: str, args: tuple, result: Any) -> None:
        if name == "register_hook" and args and isinstance(args[0], torch.Tensor):
            tensor = args[0]
            self.hooks[tensor.grad_fn if tensor.grad_fn is not None else id(tensor)] = current_user_source()
            return
        for tensor in leaves(result):
            node = tensor.grad_fn if isinstance(tensor, torch.Tensor) else None
            if node is not None and node not in self.origins:
                self.origins[node] = NodeOrigin(name, self._source(result, tensor), self.modules.innermost)

    def _source(self, result: Any, tensor: torch.Tensor) -> str | None:
        """The user's line of the call that returned ``tensor``: read from the stack trace the run-time capture
        has just recorded for it, when one records this forward, else from the stack."""
        trace = self.recording.stack_trace_of(result, tensor) if self.recording is not None else None
        return source_of_stack_trace(trace) if trace is not None else current_user_source()


def _call_name(func: Callable) -> str:
    owner = getattr(func, "__self__", None)
    name = getattr(func, "__name__", "")
    if name == "__get__" and owner is not None:  # an attribute read such as ``x.T``
        return getattr(owner, "__name__", name)
    return name


class GradientNorms:
    """Backward: gradient norms at the outputs of autograd nodes and along each of their edges."""

    def __init__(self) -> None:
        self.arriving: dict[Node, float] = {}  # the gradient w.r.t. the node's forward outputs
        self.passed: dict[tuple[Node, int], float] = {}  # (node, input position) -> gradient sent there
        # edges not measured: (node, input position) -> the parameter's node the edge is the one use of,
        # whose gradient's norm is that parameter's .grad norm
        self.unread: dict[tuple[Node, int], Node] = {}
        self.handles: list[Any] = []

    def watch(self, nodes: Iterable[Node], unread: dict[tuple[Node, int], Node] | None = None) -> None:
        """Hook ``nodes``; the edges in ``unread`` are not measured (see :attr:`unread`)."""
        self.unread.update(unread or {})
        skipped: dict[Node, set[int]] = defaultdict(set)
        for node, position in self.unread:
            skipped[node].add(position)
        none: frozenset[int] = frozenset()
        for node in nodes:  # a partial, not a closure: fewer objects per node for the garbage collector
            self.handles.append(node.register_hook(functools.partial(self._hook, node, frozenset(skipped.get(node, none)))))

    def _hook(self, node: Node, skip: frozenset[int], grad_inputs: tuple, grad_outputs: tuple) -> None:
        """One post-hook per node: every gradient it received and passed on, normed together."""
        try:
            grads = [g for g in grad_outputs if g is not None]
            arrived = len(grads)
            positions = [p for p, g in enumerate(grad_inputs) if g is not None and p not in skip]
            grads += [grad_inputs[p] for p in positions]
            norms = gradient_norms(grads)
            self.arriving[node] = norms[0] if arrived == 1 else math.sqrt(sum(n * n for n in norms[:arrived]))
            for position, norm in zip(positions, norms[arrived:]):
                self.passed[(node, position)] = norm
        except Exception:  # a gradient with no norm to take (a nested tensor): that node goes unmeasured,
            pass  # and the real backward, which this hook rides on, must never fail for it

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


_WIDE = frozenset({torch.float32, torch.float64, torch.complex64, torch.complex128})  # normed in their own dtype
_NARROW = frozenset({torch.float16, torch.bfloat16, torch.float32})  # normed in float32
_FLOAT32_SAFE = 1e-10  # as in fxflow.core.tensors.l2_norm: a smaller float32 norm may have lost to underflow


def gradient_norms(grads: list[torch.Tensor]) -> list[float]:
    """:func:`~fxflow.core.tensors.gradient_norm` of each gradient (a complex one by the magnitude of its
    values, which has the same norm), read with one ``torch._foreach_norm`` call: one Python call and one
    kernel launch per autograd node, not one per gradient. A norm that may have lost something in float32
    (below ``1e-10``, where squares underflow, or inf) is read again the exact way."""
    dtypes = {g.dtype for g in grads}
    dtype = None if dtypes <= _WIDE else torch.float32 if dtypes <= _NARROW else False
    try:
        if dtype is False:
            raise TypeError("float16 beside float64")
        norms = torch._foreach_norm(grads, 2, dtype=dtype)
    except (RuntimeError, TypeError, NotImplementedError):  # sparse, nested, or mixed widths: one at a time
        return [_exact(grad) for grad in grads]
    return [value if _FLOAT32_SAFE <= (value := norm.item()) < math.inf else _exact(grad)
            for norm, grad in zip(norms, grads)]


def _exact(grad: torch.Tensor) -> float:
    return gradient_norm(grad.abs() if grad.is_complex() else grad)


class AutogradGraph:
    """The autograd graph behind a loss, with each node's consumers (its neighbours towards the loss)."""

    def __init__(self, root: Node) -> None:
        self.root = root
        self.nodes: list[Node] = []  # in the order of fxflow.core.history.autograd_nodes, each once
        self.consumers: dict[Node, list[tuple[Node, int]]] = defaultdict(list)
        self.leaves: dict[int, Node] = {}  # id(parameter) -> its AccumulateGrad node
        # autograd_nodes' walk, inlined: each node's edges are read once, for the walk and its consumers alike
        entered: set[Node] = set()
        stack = [root]
        while stack:
            node = stack.pop()
            if node in entered:
                continue
            entered.add(node)
            self.nodes.append(node)
            variable = getattr(node, "variable", None)
            if variable is not None:
                if isinstance(variable, torch.Tensor):
                    self.leaves[id(variable)] = node
                continue
            for position, (child, _) in enumerate(node.next_functions):
                if child is not None:
                    self.consumers[child].append((node, position))
                    stack.append(child)


class BackwardTrace:
    """One forward's node origins and one backward's gradient norms (see the module docstring).

    Enter :meth:`forward` around the forward, call :meth:`watch` with the loss just before its backward and
    :meth:`finish` after it; then :attr:`graph`, :attr:`norms` and :attr:`origins` hold what localization reads.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.origins = OriginRecorder(model)
        self.norms = GradientNorms()
        self.graph: AutogradGraph | None = None  # set by watch()

    @contextlib.contextmanager
    def forward(self) -> Iterator[None]:
        """Record the origins of the autograd nodes the forward inside creates. The run-time capture's
        module stack, when it records this forward of the same model, is read instead of keeping a second
        one (two hooks fewer per module call)."""
        recording = running_recorder()
        if recording is not None and recording.modules.model is self.origins.model:
            self.origins.modules = recording.modules
            with self.origins:
                yield
            return
        with self.origins.modules, self.origins:
            yield

    def watch(self, loss: torch.Tensor) -> None:
        """Hook every autograd node behind ``loss`` before its backward runs."""
        if loss.grad_fn is None:
            return
        self.graph = AutogradGraph(loss.grad_fn)
        # A parameter's own node (AccumulateGrad) is not hooked, nor the one edge into a parameter used once:
        # what arrives there is its .grad, whose norm the run reads anyway (most of the values a backward makes).
        sole_uses = {uses[0]: leaf for leaf in self.graph.leaves.values() if len(uses := self.graph.consumers[leaf]) == 1}
        self.norms.watch((node for node in self.graph.nodes if not hasattr(node, "variable")), sole_uses)

    def finish(self) -> None:
        """After the backward: remove the hooks; forget the origins of nodes the loss does not depend on,
        which would keep their saved tensors alive."""
        self.norms.remove()
        nodes = set(self.graph.nodes) if self.graph is not None else set()
        self.origins.origins = {node: origin for node, origin in self.origins.origins.items() if node in nodes}
