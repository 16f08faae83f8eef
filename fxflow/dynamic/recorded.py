"""A recorded run as the later stages get it: its graph, and its results without their data.

:class:`Recorded` is what the recording of a real forward hands on (:mod:`fxflow.dynamic.recording`):
the graph, or why there is none, and :class:`RecordedValues`. The annotation reads a recorded
forward's results after the backward (:mod:`fxflow.static.annotate`, twins ``recorded``): their
autograd history, shapes and dtypes, never their values. Holding the tensors themselves through the backward kept every activation
alive while the backward allocated the gradients, which then could not reuse that memory: 0.04 s
of fresh pages on GPT-2 small, and a higher peak. So when forward returns, each result becomes a
*snapshot*: a meta tensor of the same shape, strides, dtype and ``requires_grad``, plus its
:class:`History` (the autograd node the real tensor's gradient enters through). The real tensors
are then let go; the backward frees them as a plain step does, and the autograd nodes the
histories hold keep only their structure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import is_fake, unset_fake_temporarily

from ..core.history import entry_key
from .leaves import map_leaves
from ..core.tensors import is_integer_scalar


class History(NamedTuple):
    """Where a recorded tensor's gradient entered autograd's graph."""

    grad_fn: Any  # its autograd node, or None for a leaf
    output_nr: int
    key: tuple  # its entry key (fxflow.core.history.entry_key) when it was recorded


def history_of(tensor: torch.Tensor) -> History:
    """The :class:`History` of a live tensor."""
    return History(tensor.grad_fn, tensor.output_nr, entry_key(tensor))


def tensor_state(tensor: torch.Tensor) -> tuple | None:
    """What a write changes in a tensor: its data version (moved by a write through any view), its
    history and its ``requires_grad``; None where there is no version to read (an inference tensor).
    The autograd node itself, not its id as :func:`fxflow.static.aliasing.state` has it: a node
    replaced during forward may be freed, and a new one take its address."""
    try:
        return tensor._version, tensor.grad_fn, tensor.requires_grad
    except RuntimeError:
        return None


class Unsupported(Exception):
    """A recorded value no meta snapshot can stand for (sparse, a tensor subclass)."""


class Snapshots:
    """Meta snapshots of recorded values, one per tensor object, and their histories by ``id``."""

    def __init__(self) -> None:
        self.histories: dict[int, History] = {}
        self._made: dict[int, torch.Tensor] = {}  # id(real tensor) -> its snapshot

    def of(self, value: Any) -> Any:
        """``value`` with every tensor in it replaced by its snapshot; raises :class:`Unsupported`."""
        return self.of_each({None: value})[None]

    def of_each(self, values: dict[Any, Any]) -> dict[Any, Any]:
        """:meth:`of` each of ``values`` (a dict), in one pass."""
        with unset_fake_temporarily():  # plain meta tensors, also when the run was a fake one (device="meta")
            return {key: map_leaves(self._leaf, value) for key, value in values.items()}

    def _leaf(self, leaf: Any) -> Any:
        return self._snapshot(leaf) if isinstance(leaf, torch.Tensor) else leaf

    def _snapshot(self, tensor: torch.Tensor) -> torch.Tensor:
        made = self._made.get(id(tensor))
        if made is not None:
            return made
        fake = is_fake(tensor)  # the meta run's: shapes and history, no values (a constant's excepted)
        if (type(tensor) not in (torch.Tensor, torch.nn.Parameter) and not fake) or tensor.layout != torch.strided:
            raise Unsupported(type(tensor).__name__)
        if fake and is_integer_scalar(tensor) and tensor.constant is not None:
            snapshot = tensor.constant.detach().clone()
        elif is_integer_scalar(tensor) and not fake:  # a size or a count: later shapes need its value (as twins keep it)
            snapshot = tensor.detach().clone()
        else:
            snapshot = torch.empty_strided(tuple(tensor.shape), tuple(tensor.stride()), dtype=tensor.dtype,
                                           device="meta")
            if tensor.requires_grad:
                snapshot.requires_grad_(True)
        self._made[id(tensor)] = snapshot
        self.histories[id(snapshot)] = history_of(tensor)
        return snapshot


@dataclass(frozen=True)
class RecordedValues:
    """What each node of a recorded run returned, by node name: the annotation reads these results'
    autograd histories instead of running the graph again (:mod:`fxflow.static.annotate`). The
    results are snapshots (meta tensors and the histories of the real ones), so the real tensors
    are freed as the backward goes, as in a plain step.

    ``rewritten``: nodes whose results had their history changed in place after the call returned
    (the probe's tripwires rebase the result of an op with no derivative): their own edges come from
    running them again, while later nodes still read the recorded results.
    """

    results: dict[str, Any]  # node name -> its result, each tensor a meta snapshot
    rewritten: frozenset[str] = frozenset()
    histories: dict[int, History] = field(default_factory=dict)  # id(snapshot) -> the real tensor's history
    # A fake run's (``device="meta"``): id(the model's own weight) -> the fake that stood for it in the run,
    # whose history the recorded results lead to.
    stood_for: dict[int, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class Recorded:
    """A recording of a real forward: its graph (or why there is none) and what its nodes returned."""

    graph_module: fx.GraphModule | None
    failure: str | None = None
    values: RecordedValues | None = field(default=None, repr=False)
