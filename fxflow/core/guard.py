"""The one guard: whatever a check runs inside it leaves the user's model, its inputs and the random
generators exactly as found.

:func:`guard` is a context; :func:`save` its explicit form (:meth:`Saved.restore` puts everything back,
as often as needed). Each caller says what it needs back, everything by default:

- ``weights``: parameter values (copied up front while :func:`copy_limit` in all allows; inside
  :func:`guard`, a model over it has none copied up front and each copied the first time an op writes it,
  :mod:`fxflow.core.copy_on_write`, so an in-place write is put back at any model size)
- ``buffers``: buffer values and the buffer tables' entries
- ``attributes``: every module's attributes (what forward assigns, hook tables, plain containers' contents)
- ``tensor_attributes``: values of tensors held in plain attributes (a running average kept as a tensor)
- ``grads``: ``.grad`` of the parameters and of ``grads_of`` (``fresh_grads``: None while inside)
- ``flags``: ``requires_grad`` and the modules' training flags
- ``rng``: the global generators (torch CPU and started CUDA devices, Python's, NumPy's)

and the values of the tensors in ``inputs``, which a forward may write in place. Guards nest: a run
that needs its own restore (the look-ahead's, the redraw's, one capture attempt) takes its own inside
the check's. Nothing here is process-wide: the copy-on-write mode is a thread-local dispatch mode.
"""
from __future__ import annotations

import collections
import contextlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Collection, Iterable, Iterator

import torch

from .copy_on_write import copy_on_write
from .state import (RandomState, TensorValues, changed, inputs_of, plain_tensor_attributes, put_back_attributes,
                    saved_attributes)

if TYPE_CHECKING:  # pragma: no cover
    from .lazy import LazyModules

# Tensor values are copied up front only up to this size in all (per part: weights, plain tensor
# attributes, inputs), and a quarter of the memory free now; above it, inside :func:`guard`, none of
# that part is copied up front but each when first written (the copy-on-write mode watches every op
# then anyway, and a copy made up front costs more than it: on GPT-2 small, copying 256 MiB and
# comparing it back cost about twice what watching every op of its step does); an explicit
# :func:`save` copies what fits and only detects and notes a write to the rest.
COPY_LIMIT_BYTES = 256 * 2**20
FREE_FRACTION = 4  # at most 1 / this of the memory available now is spent on copies made up front

# module attributes alone: what a trace or a call with weights passed in can leave behind
ATTRIBUTES_ONLY = dict(weights=False, buffers=False, tensor_attributes=False, grads=False, flags=False, rng=False)


@dataclass
class Saved:
    """What :func:`save` kept; :meth:`restore` puts it back. ``notes``: what could not be put back."""

    notes: list[str] = field(default_factory=list)
    random: RandomState | None = None
    attributes: list | None = None  # saved_attributes of the modules
    values: list[TensorValues] = field(default_factory=list)  # weights, plain tensor attributes
    inputs: TensorValues | None = None
    # the lists and dicts in the inputs, with their entries: a forward that adds to its input dict
    # (sentence-transformers' modules fill the features dict they are given) leaves it as given
    containers: list[tuple[Any, Any]] = field(default_factory=list)
    grads: dict[torch.Tensor, torch.Tensor | None] = field(default_factory=dict)
    requires_grad: dict[torch.Tensor, bool] = field(default_factory=dict)
    training: dict[torch.nn.Module, bool] = field(default_factory=dict)
    # (module, name) -> (the buffer, its version counter, a copy of its values)
    buffers: dict[tuple[torch.nn.Module, str], tuple[torch.Tensor, int, torch.Tensor]] = field(default_factory=dict)

    def restore(self) -> None:
        """Put everything saved back (the module attributes first: the values go into the tables they restore)."""
        if self.attributes is not None:
            put_back_attributes(self.attributes)
        notes = []
        with torch.no_grad():
            for tensor, grad in self.grads.items():
                tensor.grad = grad
            for tensor, flag in self.requires_grad.items():
                tensor.requires_grad_(flag)
            for (module, name), (original, version, value) in self.buffers.items():
                if not original.is_meta and changed(original, version, value):  # running stats, counters
                    original.copy_(value)
                module._buffers[name] = original
        for module, training in self.training.items():
            module.training = training
        for values in self.values:
            notes.extend(values.restore())
        self._note(notes)
        self.inputs_as_found()
        if self.random is not None:
            self.random.restore()

    def inputs_as_found(self) -> None:
        """Write the caller's input tensors back now, where a forward wrote them in place: each run
        of the check (the look-ahead's and the redraw's included) starts from the input as given."""
        for container, entries in self.containers:
            if isinstance(container, list):
                container[:] = entries
            else:
                container.clear()
                container.update(entries)
        if self.inputs is not None:
            self._note(self.inputs.restore())

    def uncopied(self) -> list[list]:
        """The saved values with no copy yet (``[tensor, version, None]``): copied when first written."""
        return [entry for values in [*self.values, *([self.inputs] if self.inputs else [])]
                for entry in values.tensors if entry[2] is None and values.copyable(entry[0])]

    def _note(self, notes: Iterable[str]) -> None:
        self.notes.extend(note for note in notes if note not in self.notes)


def save(model: torch.nn.Module | None = None, inputs: Any = (), *, weights: bool = True, buffers: bool = True,
         attributes: bool = True, tensor_attributes: bool = True, grads: bool = True, flags: bool = True,
         rng: bool = True, fresh_grads: bool = False, grads_of: Collection[torch.Tensor] = (),
         keep: Collection[torch.nn.Module] = (), on_write: bool = False) -> Saved:
    """Save what :func:`guard` puts back (see the module's docstring for each part). ``keep``: modules
    whose own attributes are left as the run leaves them (lazy modules being initialized);
    uninitialized (lazy) tensors have no values to keep. ``on_write``: what is not copied up front
    will be copied when first written (:func:`guard`), so a part over the limit is copied not at all."""
    saved = Saved(random=RandomState.save() if rng else None)
    limit = copy_limit()

    def values(tensors: list[torch.Tensor], what: str) -> TensorValues:
        size = sum(t.numel() * t.element_size() for t in tensors if TensorValues.copyable(t))
        return TensorValues.save(tensors, what, -1 if on_write and size > limit else limit)

    if inputs is not None:
        saved.inputs = values(inputs_of(inputs), "an input tensor")
        saved.containers = _containers(inputs)
    grad_tensors = list(grads_of)
    if model is not None:
        modules = list(model.modules())
        parameters = [p for p in dict.fromkeys(model.parameters()) if not _uninitialized(p)]
        if attributes:
            kept = {id(m) for m in keep}
            saved.attributes = saved_attributes(m for m in modules if id(m) not in kept)
        if weights:
            saved.values.append(values(parameters, "a parameter"))
        if tensor_attributes:
            saved.values.append(values(plain_tensor_attributes(model), "a plain tensor attribute"))
        if grads:
            grad_tensors = parameters + grad_tensors
        if flags:
            saved.requires_grad = {p: p.requires_grad for p in parameters}
            saved.training = {m: m.training for m in modules}
        if buffers:
            for module in modules:
                for name, buffer in module._buffers.items():
                    if buffer is not None and not _uninitialized(buffer):
                        saved.buffers[(module, name)] = (buffer, buffer._version, buffer.detach().clone())
    saved.grads = {t: t.grad for t in grad_tensors}
    if fresh_grads:  # a backward inside must not add into the user's grads
        for tensor in saved.grads:
            tensor.grad = None
    return saved


@contextlib.contextmanager
def guard(model: torch.nn.Module | None = None, inputs: Any = (), *, lazy: "LazyModules | None" = None,
          **what: Any) -> Iterator[Saved]:
    """Whatever runs inside leaves what :func:`save` saves (``what``: its keywords) exactly as found.

    Values too large to copy up front are copied the first time an op writes them in place.
    ``lazy``: made lazy again if what runs inside raises (otherwise the caller does, once it no
    longer needs the shapes).
    """
    saved = save(model, inputs, on_write=True, **what)
    try:
        with copy_on_write(saved.uncopied()):
            yield saved
    except BaseException:
        saved.restore()
        if lazy is not None:
            lazy.restore()
        raise
    saved.restore()


def copy_limit() -> int:
    """Bytes of tensor values a part may copy up front: :data:`COPY_LIMIT_BYTES`, and no more than
    1 / :data:`FREE_FRACTION` of the memory available now (where the system says)."""
    return min(COPY_LIMIT_BYTES, available_memory() // FREE_FRACTION)


def available_memory() -> int:
    """Bytes of memory available to this process now: Linux's ``MemAvailable``, else the free
    physical pages, else no limit known (a very large number)."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return 2**62


def _containers(value: Any, found: list[tuple[Any, Any]] | None = None) -> list[tuple[Any, Any]]:
    """Each list and dict (a ``UserDict``'s ``data`` too) in ``value``, once, with a shallow copy of its entries."""
    found = [] if found is None else found
    container = value.data if isinstance(value, collections.UserDict) else value
    if isinstance(container, (list, dict)):
        if any(seen is container for seen, _ in found):
            return found
        found.append((container, list(container) if isinstance(container, list) else dict(container)))
    if isinstance(container, (list, tuple, dict)):
        for item in (container.values() if isinstance(container, dict) else container):
            _containers(item, found)
    return found


def _uninitialized(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, torch.nn.parameter.UninitializedTensorMixin)
