"""Values that share memory, so that a write through one is seen by later reads of all of them.

``out = x.new_zeros(n, 4); out[:, :2] = y`` writes ``y`` into a view of ``out``; the graph's
later nodes read ``out``, never the write. Autograd keeps the truth on the tensors themselves:
views share their base's storage and version counter, and a write through a view gives the
base a new history (``CopySlices``). :class:`StorageMap` uses exactly that, for every op and
every capture method alike (no list of in-place ops):

* every value the interpreter computes is registered under its storage (and a view's hidden
  base, e.g. the ``bmm`` inside an ``einsum``, under the view's node);
* a node that moved the version counter of a storage wrote into all values living in it; one
  that changed a value's history without writing data (``detach_``) rewrote that value alone;
* the writing node reads the old values it overwrote (edges from each), and later reads of any
  of them (the base, the view written through, another view) read the writing node.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from ..core.tensors import tensors_in
from .flow import DIFF, ZERO

Member = tuple[str, torch.Tensor]  # (name of the node whose value it is, the tensor)


def storage_key(tensor: torch.Tensor) -> int:
    """Identifies the memory a tensor lives in: a base and all its views share it (meta ones too)."""
    try:
        return tensor.untyped_storage()._cdata
    except Exception:  # a tensor without storage (sparse, some subclasses): it aliases nothing
        return -id(tensor)


def state(tensor: torch.Tensor) -> tuple:
    """What an in-place op changes: data version, autograd history, requires_grad."""
    return (tensor._version, id(tensor.grad_fn), tensor.requires_grad)


def written_members(members: list[Member], before: dict[int, tuple]) -> list[Member]:
    """The members a node changed: every value in a storage whose data it wrote (the version counter,
    shared by a base and its views, moved), and any value whose history alone changed (``detach_``)."""
    written = {storage_key(t) for _, t in members if t._version != before[id(t)][0]}
    return [(name, t) for name, t in members if storage_key(t) in written or state(t) != before[id(t)]]


class StorageMap:
    """Which node's values live in which storage, and which node a read of each value sees."""

    def __init__(self, by_name: dict[str, fx.Node]) -> None:
        self.by_name = by_name
        self.members: dict[int, list[Member]] = {}
        self.aliases: dict[str, str] = {}  # node written in place -> the node that wrote it last

    def read(self, node: fx.Node) -> fx.Node:
        """The node whose value a read of ``node`` sees: the last write into its storage, if any."""
        name = self.aliases.get(node.name)
        return self.by_name[name] if name else node

    def read_name(self, name: str) -> str:
        return self.read(self.by_name[name]).name

    def register(self, name: str, value: Any) -> None:
        """Remember every tensor of a node's value under its storage.

        A view whose base no node produced (``einsum`` returns a view of an inner ``bmm``) brings
        its base along under its own name: a later write through the view rewrites that base.
        """
        for tensor in tensors_in(value):
            members = self.members.setdefault(storage_key(tensor), [])
            base = tensor._base
            if base is not None and not any(t is base for _, t in members):
                members.append((name, base))
            members.append((name, tensor))

    def sharing(self, values: list[Any]) -> list[Member]:
        """Every registered value that shares storage with a tensor in ``values``."""
        keys = {storage_key(t) for value in values for t in tensors_in(value)}
        return [member for key in keys for member in self.members.get(key, ())]

    def spread(self, reached: dict[str, str], readers: list[Member], written: list[Member]) -> None:
        """A write through a view reads the view's old value as part of its base's: autograd routes
        the gradient to the base (``CopySlices``), past the view, yet the view's value did flow in.
        ``readers``: (name read, tensor) of the node's inputs."""
        by_storage: dict[int, str] = {}
        for name, tensor in written:
            kind = reached.get(self.read_name(name))
            key = storage_key(tensor)
            if kind == DIFF or (kind == ZERO and by_storage.get(key) != DIFF):
                by_storage[key] = kind
        for name, tensor in readers + [(self.read_name(n), t) for n, t in written]:
            kind = by_storage.get(storage_key(tensor))
            if kind is not None and reached.get(name) != DIFF:
                reached[name] = kind

    def wrote(self, node: fx.Node, written: list[Member]) -> None:
        """``node`` wrote into these values: later reads of any of them see ``node``."""
        if not written:
            return
        previous = {self.read_name(name) for name, _ in written}
        for name, _ in written:
            self.aliases[name] = node.name
        for key, target in list(self.aliases.items()):
            if target in previous:
                self.aliases[key] = node.name
