"""The targets of the nodes the run-time recording makes beyond torch's own functions: a tensor leaving
torch (:class:`Escape`) and coming back (:class:`Reentry`), values passed through a channel autograd
does not see (:class:`HiddenChannel`), an item assignment (:class:`SetItem`), a vmap call
(:class:`Vmapped`). :mod:`fxflow.dynamic.recorder` makes them (and re-exports them: generated code
names them there)."""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..core.functions import Constant


class Escape:
    """Node target for a tensor leaving torch: returns :class:`Escaped`, which is not a tensor."""

    __module__ = "fxflow.dynamic.recorder"

    def __init__(self, name: str) -> None:
        self.__name__ = self.__qualname__ = name.strip("_") or name

    def __call__(self, *args: Any, **kwargs: Any) -> "Escaped":
        return Escaped()


class Escaped:
    """Plain Python data made from a tensor: autograd cannot follow it."""


class Reentry(Constant):
    """Node target for data coming back into torch: returns the tensor recorded at capture time."""

    def __init__(self, name: str, value: Any) -> None:
        super().__init__(value)
        self.__name__ = self.__qualname__ = name


class HiddenChannel(Constant):
    """Node target for a tensor whose values come from another through a channel autograd does not
    see: ``param.data = value`` (inside ``torch.nn.utils.vector_to_parameters``, say) or a new
    ``nn.Parameter(value)`` (``fuse_conv_bn_weights``), both of which share the value's storage.

    Its inputs are the value's node and, for an assignment, the tensor assigned to; it returns
    that tensor (a parameter keeps its own gradient) or else the recorded one: never anything
    differentiable in the value, so what computed the value is cut here, not unused.
    """

    def __init__(self, name: str, value: torch.Tensor, cut_reason: str) -> None:
        super().__init__(value)
        self.__name__ = self.__qualname__ = name
        self.cut_reason = cut_reason

    def __call__(self, source: Any, target: Any = None) -> Any:
        return self.value if target is None else target


SET_DATA_REASON = ("`.data =` gives the tensor these values without their autograd history, so the "
                    "gradient stops here")
NEW_LEAF_REASON = ("these values are wrapped in a new tensor that shares their storage but not their "
                    "autograd history (a new nn.Parameter, say): a leaf, so the gradient stops here")


class SetItem:
    """``x[index] = value`` as a node that returns ``x`` (so the mutation has a result)."""

    __name__ = __qualname__ = "setitem"
    __module__ = "fxflow.dynamic.recorder"

    def __call__(self, tensor: torch.Tensor, index: Any, value: Any) -> torch.Tensor:
        tensor[index] = value
        return tensor


class Vmapped:
    """Node target: a ``torch.func.vmap`` call, the batched function run on the node's arguments.

    Inside vmap, forward sees batched wrappers of its tensors, which the recording cannot tell
    apart from new data: the call is one node, so what flows into it (a ``.detach()`` just before,
    a stacked parameter) stays connected to what comes out.
    """

    __name__ = __qualname__ = "vmap"
    __module__ = "fxflow.dynamic.recorder"

    def __init__(self, vmap_impl: Callable[..., Any], options: tuple) -> None:
        self.vmap_impl = vmap_impl
        self.options = options  # (func, in_dims, out_dims, randomness, chunk_size)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.vmap_impl(*self.options, *args, **kwargs)
