"""Custom ``torch.autograd.Function`` calls as opaque graph nodes, and small node targets.

A tracer that runs ``Function.apply`` sees only the function's forward, so a backward that
returns ``None`` for an input is invisible to it. While a capture runs,
:func:`intercepted_apply` reroutes every ``Function.apply`` to a handler: the captures record
one call of an :class:`OpaqueFunction` instead of the ops inside, and mark the node with
``node.meta["fxflow_opaque"]`` so the report says the real backward decides.

``torch.utils.checkpoint``'s reentrant ``CheckpointFunction`` is the exception: it runs its
function under ``no_grad`` only to recompute it in backward, so the captures call the
checkpointed function directly (see :func:`checkpointed_call`) and see the real flow, then pass
the result through a :class:`CheckpointGate`: like the real thing, it lets no gradient through
when none of the checkpoint's tensor inputs requires grad (a classic silent cut).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch

from .patching import ThreadPatch


# handler(function_class, original_apply, args, kwargs) -> result
ApplyHandler = Callable[[type, Callable[..., Any], tuple, dict], Any]


class OpaqueFunction:
    """Graph-node target that calls ``function_class.apply``; named after the class."""

    def __init__(self, function_class: type) -> None:
        self.function_class = function_class
        self.__name__ = function_class.__name__
        self.__qualname__ = function_class.__name__
        self.__module__ = __name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function_class.apply(*args, **kwargs)

    def __repr__(self) -> str:
        return f"OpaqueFunction({self.__name__})"


class Constant:
    """Graph-node target that returns a value recorded at capture time (takes no inputs)."""

    __name__ = "constant"
    __qualname__ = "constant"
    __module__ = "fxflow.core.functions"

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, *ignored: Any) -> Any:
        return self.value

    def __repr__(self) -> str:
        return "constant"


def opaque_reason(function_class: type) -> str:
    """What ``node.meta["fxflow_opaque"]`` says for a custom Function."""
    return f"custom autograd.Function {function_class.__name__}"


def is_checkpoint(function_class: type) -> bool:
    """The reentrant ``torch.utils.checkpoint`` function (transparent, not opaque)."""
    from torch.utils import checkpoint

    return function_class is getattr(checkpoint, "CheckpointFunction", None)


def is_user_function(function_class: type) -> bool:
    """A Function defined outside torch: its backward is the user's and may drop inputs."""
    return not (getattr(function_class, "__module__", "") or "").startswith("torch.")


def checkpointed_call(args: tuple) -> Any:
    """Run what ``CheckpointFunction.apply(run_function, preserve_rng_state, *args)`` runs."""
    run_function, _preserve_rng_state, *inputs = args
    return run_function(*inputs)


def checkpoint_inputs(args: tuple) -> tuple:
    """The checkpointed function's own inputs in ``CheckpointFunction.apply``'s arguments."""
    return tuple(args[2:])


class CheckpointGate:
    """Node target: ``output`` as it leaves a reentrant checkpoint, given the checkpoint's inputs.

    Reentrant checkpointing returns a result without autograd history when no tensor input
    requires grad, so the parameters inside it get no gradient: the gate detaches then. Like
    ``Function.apply``, it looks at the inputs themselves only: tensors inside a tuple argument
    (``checkpoint(block, (x, y))``) do not count.
    """

    __name__ = __qualname__ = "checkpoint"
    __module__ = "fxflow.core.functions"

    def __call__(self, output: Any, *inputs: Any) -> Any:
        from torch.utils._pytree import tree_map

        if any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
            return output
        return tree_map(lambda v: v.detach() if isinstance(v, torch.Tensor) else v, output)


_APPLY = ThreadPatch(torch.autograd.function.Function, "apply", classmethod)


@contextlib.contextmanager
def intercepted_apply(handler: ApplyHandler) -> Iterator[None]:
    """Route every ``torch.autograd.Function.apply`` call this thread makes to ``handler`` while
    inside; other threads' calls run as they would (:mod:`fxflow.core.patching`)."""

    def apply(cls: type, *args: Any, **kwargs: Any) -> Any:
        def call_original(*a: Any, **k: Any) -> Any:
            return original(cls, *a, **k)

        return handler(cls, call_original, args, kwargs)

    with _APPLY.active(apply) as original:
        yield
