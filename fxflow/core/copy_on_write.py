"""Copy on write: a tensor too large to copy up front is copied the moment an op is about to write it.

The guard (:mod:`fxflow.core.guard`) keeps copies of the values it must put back; above its size
limit (a model of several GiB) it copies none up front. :class:`CopyOnWrite` watches every op while
the guard is entered and, before an op whose schema marks an argument as written (``add_``,
``embedding_renorm_``, ``copy_``, ``out=``, an optimizer's ``_foreach_*_``) runs on the storage of such a
tensor, through the tensor or any view of it, copies that tensor once. Only what a run writes costs
memory. A dispatch mode is thread-local: another thread's ops are not watched.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class CopyOnWrite(TorchDispatchMode):
    """Fills ``entry[2]`` (``[tensor, version, None]`` entries of :class:`fxflow.core.state.TensorValues`)
    with a copy of ``entry[0]`` before the first op that writes its storage."""

    def __init__(self, entries: list[list]) -> None:
        super().__init__()
        self.by_storage: dict[tuple[str, int], list[list]] = {}
        for entry in entries:
            key = _storage(entry[0])
            if key is not None:
                self.by_storage.setdefault(key, []).append(entry)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.by_storage:
            for position, name in _written(func):
                value = args[position] if position < len(args) else kwargs.get(name)
                for tensor in value if isinstance(value, (list, tuple)) else (value,):
                    if isinstance(tensor, torch.Tensor):
                        self._copy(tensor)
        return func(*args, **kwargs)

    def _copy(self, written: torch.Tensor) -> None:
        entries = self.by_storage.pop(_storage(written), None)
        for entry in entries or ():
            if entry[2] is None:
                with torch.no_grad():
                    entry[2] = entry[0].detach().clone()


@contextlib.contextmanager
def copy_on_write(entries: list[list]) -> Iterator[None]:
    """Inside, each of ``entries`` is copied before its first in-place write; no mode when there are none."""
    if not entries:
        yield
        return
    with CopyOnWrite(entries):
        yield


_WRITTEN: dict[Any, tuple[tuple[int, str], ...]] = {}


def _written(func: Any) -> tuple[tuple[int, str], ...]:
    """(position, name) of each argument ``func``'s schema marks as written (``Tensor(a!)``)."""
    found = _WRITTEN.get(func)
    if found is None:
        try:
            found = tuple((i, a.name) for i, a in enumerate(func._schema.arguments)
                          if a.alias_info is not None and a.alias_info.is_write)
        except Exception:  # noqa: BLE001 - an op with no schema to read writes nothing we can see
            found = ()
        _WRITTEN[func] = found
    return found


def _storage(tensor: torch.Tensor) -> tuple[str, int] | None:
    """Where ``tensor``'s values live (views share it); None for a tensor with no values of its own."""
    try:
        if tensor.is_meta or type(tensor).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__:
            return None
        pointer = tensor.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - sparse, nested: no plain storage
        return None
    return (str(tensor.device), pointer) if pointer else None
