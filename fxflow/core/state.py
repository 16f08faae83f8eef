"""The parts the guard (:mod:`fxflow.core.guard`) saves and restores: module attributes, tensor values
by copy, the global random generators; and calls with weights passed in."""
from __future__ import annotations

import contextlib
import random
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch
from torch._subclasses.fake_tensor import FakeTensor


def saved_attributes(modules: Iterable[torch.nn.Module]) -> list:
    """What :func:`put_back_attributes` needs to give ``modules`` their attributes back."""
    saved = []
    for module in modules:
        # The tables are plain dicts, except on a torch.jit.script'ed module, whose C++ tables
        # Python cannot change (and cannot copy as dicts) anyway. Most are empty (hook tables): those
        # are only emptied again if something filled them.
        filled, empty = {}, []
        for key, value in module.__dict__.items():
            if isinstance(value, _CONTAINERS):
                try:  # a subclass's own __len__ / __iter__ may refuse: its reference is still put back
                    if value:
                        filled[key] = _copy_container(value)
                    else:
                        empty.append(key)
                except Exception:  # noqa: BLE001 - the model's own object: not fxflow's to fail on
                    pass
        saved.append((module, dict(module.__dict__), filled, empty))
    return saved


def put_back_attributes(saved: list) -> None:
    """Each module's attributes as :func:`saved_attributes` found them, plain containers' contents included."""
    for module, attributes, filled, empty in saved:
        module.__dict__.clear()
        module.__dict__.update(attributes)
        for key, content in filled.items():
            with contextlib.suppress(Exception):  # read once already; a refusal now leaves it as it is
                _restore_container(attributes[key], content)
        for key in empty:
            with contextlib.suppress(Exception):
                if attributes[key]:
                    attributes[key].clear()


def weights_of(module: torch.nn.Module, twin_of: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
    """``{local name: twin_of(tensor)}`` for every parameter and buffer of ``module``, under every
    name it is reachable by (tied tensors share one twin as long as ``twin_of`` returns the same
    twin for the same tensor). What :func:`call_with_weights` takes."""
    weights: dict[str, torch.Tensor] = {}
    for name, tensor in module.named_parameters(remove_duplicate=False):
        weights[name] = twin_of(tensor)
    for name, tensor in module.named_buffers(remove_duplicate=False):
        weights[name] = twin_of(tensor)
    return weights


def call_with_weights(module: torch.nn.Module, weights: dict[str, torch.Tensor], args: tuple,
                      kwargs: dict[str, Any] | None = None) -> Any:
    """Call ``module`` with ``weights`` standing in for its parameters and buffers.

    ``torch.func.functional_call``: the weights are passed in for the duration of the call only
    and the module's own tensors are back when it returns or raises, so an analysis that fails
    midway cannot leave the user's model altered; modules outside the call are never touched.
    Attributes the call assigns (``spectral_norm``'s hook sets ``module.weight`` from the
    passed-in ``weight_orig``) are put back too, so no twin stays behind.
    """
    from torch.func import functional_call

    saved = saved_attributes(module.modules())  # the guard's attribute part (fxflow.core.guard), alone
    try:
        return functional_call(module, weights, tuple(args), kwargs or {}, tie_weights=True, strict=False)
    finally:
        put_back_attributes(saved)


_CONTAINERS = (list, dict, set)  # attributes whose contents are put back too


def _copy_container(value: Any) -> Any:
    return list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else set(value)


def _restore_container(container: Any, content: Any) -> None:
    """Give ``container`` back exactly ``content`` (same object), touching it only if it changed.

    Compared by identity: ``==`` on tensors is elementwise and on Proxies builds a graph node.
    """
    if isinstance(container, dict):
        same = len(container) == len(content) and all(
            a is b and container[a] is content[b] for a, b in zip(container, content))
        if not same:
            container.clear()
            container.update(content)
    elif isinstance(container, list):
        if len(container) != len(content) or any(a is not b for a, b in zip(container, content)):
            container[:] = content
    elif {id(x) for x in container} != {id(x) for x in content}:
        container.clear()
        container.update(content)


def inputs_of(inputs: Any) -> list[torch.Tensor]:
    """The tensors in a call's inputs (a tensor, or tuples, lists and dicts of them), each once."""
    from .tensors import tensors_in

    return list({id(t): t for t in tensors_in(inputs)}.values())


@dataclass
class TensorValues:
    """Copies of some tensors' values, written back into the same tensors where they changed.

    Dense tensors are copied while ``limit`` bytes in all allow; the others are copied later, the first
    time an op writes them (:mod:`fxflow.core.copy_on_write`, inside the guard), or, for sparse, nested,
    quantized or wrapper-subclass tensors and outside a guard, a change is only detected (version
    counter) and noted.
    """

    what: str  # "an input tensor": the notes' words
    tensors: list[list] = field(default_factory=list)  # [tensor, version, copy or None]

    @classmethod
    def save(cls, tensors: list[torch.Tensor], what: str, limit: int = 256 * 2**20) -> "TensorValues":
        saved, budget = cls(what), limit
        with torch.no_grad():
            for tensor in tensors:
                if tensor.is_meta or type(tensor).__name__ == "FakeTensor":  # no values to keep
                    continue
                size = tensor.numel() * tensor.element_size() if _dense(tensor) else None
                copy = size is not None and size <= budget
                budget -= size if copy else 0
                with contextlib.suppress(Exception):  # an inference tensor has no version counter to watch
                    saved.tensors.append([tensor, tensor._version, tensor.detach().clone() if copy else None])
        return saved

    @staticmethod
    def copyable(tensor: torch.Tensor) -> bool:
        """Whether a copy of ``tensor`` can be kept and compared bit for bit."""
        return _dense(tensor)

    def restore(self) -> list[str]:
        """Write back what changed; notes about changes that had no copy to come back from."""
        notes = []
        with torch.no_grad():
            for tensor, version, copy in self.tensors:
                if copy is None:
                    if tensor._version != version:
                        notes.append(f"forward changed {self.what} in place; no copy of it was kept to put back "
                                     "(too large, or not a plain dense tensor)")
                elif changed(tensor, version, copy):
                    tensor.copy_(copy)
        return sorted(set(notes))


def _dense(tensor: torch.Tensor) -> bool:
    """A plain dense tensor holding values (a Parameter subclass too, not a wrapper like DTensor):
    what is copied and compared bit for bit."""
    return (type(tensor).__torch_dispatch__ is torch.Tensor.__torch_dispatch__ and tensor.layout == torch.strided
            and not tensor.is_meta and not tensor.is_nested and not tensor.is_quantized)


def plain_tensor_attributes(model: torch.nn.Module) -> list[torch.Tensor]:
    """Tensors the model's modules hold outside their parameter and buffer tables: attributes
    (``self.ema = torch.zeros(3)``) and the items of plain lists, tuples and dicts in them, each once.
    An attribute whose own code raises on being looked into is skipped."""
    owned = {id(t) for t in model.parameters()} | {id(t) for t in model.buffers()}
    found: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for key, value in vars(module).items():
            if key in _TABLES:
                continue
            try:
                if isinstance(value, (list, tuple, dict)) and len(value) > _MAX_ITEMS:
                    continue  # a cache or a dataset: too long to look through at every save
                items = list(value.values()) if isinstance(value, dict) else list(value) if isinstance(
                    value, (list, tuple)) else [value]
            except Exception:  # noqa: BLE001 - the model's own object refused: skip it
                continue
            for item in items:
                if isinstance(item, torch.Tensor) and id(item) not in owned:
                    found.setdefault(id(item), item)
    return list(found.values())


_TABLES = frozenset({"_parameters", "_buffers", "_modules"})
_MAX_ITEMS = 1000


@dataclass
class RandomState:
    """The global random generators fxflow may advance: torch (CPU, CUDA, and the other accelerators
    ``fork_rng`` covers: MPS, XPU), Python, NumPy."""

    torch_cpu: torch.Tensor
    torch_cuda: list[torch.Tensor] | None
    python: Any
    numpy: Any = None
    others: dict[str, Any] = field(default_factory=dict)  # accelerator module name -> its generators' states

    @classmethod
    def save(cls) -> "RandomState":
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        numpy = sys.modules.get("numpy")  # not imported yet: nothing can have touched it
        numpy_state = numpy.random.get_state() if numpy is not None else None
        return cls(torch.get_rng_state(), cuda, random.getstate(), numpy_state, _accelerator_states())

    def restore(self) -> None:
        torch.set_rng_state(self.torch_cpu)
        if self.torch_cuda is not None:
            torch.cuda.set_rng_state_all(self.torch_cuda)
        random.setstate(self.python)
        if self.numpy is not None:
            sys.modules["numpy"].random.set_state(self.numpy)
        for name, states in self.others.items():
            if name == "xpu":
                torch.xpu.set_rng_state_all(states)
            else:
                torch.mps.set_rng_state(states)


def _accelerator_states() -> dict[str, Any]:
    """The generators of the accelerators besides CUDA that are in use (none on a CPU-only machine)."""
    states: dict[str, Any] = {}
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        states["mps"] = torch.mps.get_rng_state()
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available() and xpu.is_initialized():
        states["xpu"] = xpu.get_rng_state_all()
    return states


def changed(tensor: torch.Tensor, version: int, copy: torch.Tensor) -> bool:
    """Whether ``tensor`` differs from its saved copy.

    The version counter alone is not enough: batch norm kernels update running statistics in
    place without bumping it. Values are compared bit for bit (NaN equals NaN).
    """
    if tensor._version != version or tensor.shape != copy.shape or tensor.dtype != copy.dtype:
        return True
    if not tensor.numel() or isinstance(tensor, FakeTensor):  # a fake (the meta run's) has no values to compare
        return False
    return not torch.equal(_bits(tensor.detach()), _bits(copy))


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as the widest integers they divide into: ``torch.equal`` on int64 compares
    bit for bit at several times the speed of the same bytes as uint8."""
    raw = tensor.reshape(-1).contiguous().view(torch.uint8)  # a strided view (a column) reshapes to stride > 1
    for dtype, size in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2)):
        if raw.numel() % size == 0 and raw.data_ptr() % size == 0:
            return raw.view(dtype)
    return raw
