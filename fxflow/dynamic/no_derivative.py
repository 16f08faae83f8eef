"""A forward whose backward stops where an op has no derivative, instead of raising.

``torch.floor_divide(x, 2)``, ``torch.heaviside(x, v)`` and ``torch.igamma(a, x)`` (in ``a``)
have no derivative: autograd records them anyway, and the backward raises
``NotImplementedError`` when the gradient reaches them. For the probe that would end the check
with a crash, though the answer is plain: nothing upstream of that input gets a gradient.

:func:`stop_at_missing_derivatives` runs forward with a part of the one forward observer that looks
at the history each torch call adds. Where an input reaches the result only through an edge with
no derivative (per :func:`fxflow.core.derivatives.derivative_kinds`, the table the static analysis uses),
the result is rebased in place, keeping the same tensor object (the run-time capture knows
tensors by identity): with no differentiable input left it is detached; otherwise the call runs
again with the blocked inputs detached and the result takes that history. The backward then
treats the op as if the blocked inputs had no history: parameters upstream read ``missing``.

The real backward would raise where this one stops: each rebased result also gets a tripwire, a
zero-valued term ``0 * marker`` added in place, so that :meth:`StopAtMissingDerivatives.reached`
can tell after the backward which of those ops the gradient reached (an op whose result never
reaches the loss raises nothing, in the real run either).

Limits: an input fed to the op both through a no-derivative slot and a differentiable one
(``igamma(x, x)``) cannot be split this way, nor can an in-place op be re-run, so there the
whole result is detached (the other inputs lose their gradient through it too); a result that
is a view (``h[:, 0] //= 2``) cannot be detached in place and keeps its raising history.
"""
from __future__ import annotations

import contextlib
import itertools
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ..core.observer import ForwardPart
from ..core import derivatives
from ..core.history import EVERY_KIND, entry_key, reach
from ..core.source import current_user_source
from ..core.tensors import call_tensors
from ..verdicts import CutSite, EdgeKind, raises_reason

_ALL_DIFF = itertools.repeat(EdgeKind.DIFF)

# How many autograd nodes one call's history may hold before the mode stops looking (a function
# closing over an old activation would otherwise send every call's walk through all of forward).
_WALK_LIMIT = 10_000


def blocked_inputs(outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]) -> tuple[set[int], bool]:
    """Which ``inputs`` reach ``outputs`` only through an edge with no derivative.

    Returns the positions of those inputs, and whether any such edge lies in the outputs'
    history back to the inputs at all (it can, with no input blocked: ``igamma(x, x)``).
    """
    stops = {entry_key(t): index for index, t in enumerate(inputs)}
    roots = [(t.grad_fn, t.output_nr) for t in outputs]
    past_zero = reach(roots, stops, (EdgeKind.DIFF, EdgeKind.ZERO), kinds=_kinds, limit=_WALK_LIMIT)
    if EdgeKind.NONE not in past_zero.skipped:  # the second walk only where the first met such an edge
        return set(), False
    past_none = reach(roots, stops, EVERY_KIND, kinds=_kinds, limit=_WALK_LIMIT)
    return {stops[key] for key in past_none.stopped} - {stops[key] for key in past_zero.stopped}, True


def _kinds(function: Any) -> Iterable[str]:
    """Torch's derivative table only for the few ops that may lack a derivative: the rest are all DIFF here."""
    return derivatives.derivative_kinds(function) if derivatives.may_lack_derivative(function) else _ALL_DIFF


class StopAtMissingDerivatives(ForwardPart):
    """Rebases each torch call's result so its backward skips inputs with no derivative (a part of the
    one forward observer; not while dynamo traces, where reading grad_fn would break its graph)."""

    def __init__(self) -> None:
        self._tripwires: list[tuple[CutSite, torch.Tensor]] = []  # (the op, its marker)
        self._rebased: list[torch.Tensor] = []

    def observe(self, func: Callable, args: tuple, kwargs: dict, result: Any) -> None:
        with torch._C.DisableTorchFunction():  # what follows is ours: no user mode sees or records it
            outputs = [t for t in call_tensors(result) if t.grad_fn is not None]
            if outputs:
                inputs = [t for t in call_tensors((args, kwargs)) if t.requires_grad]
                blocked, found = blocked_inputs(outputs, inputs)
                if found:
                    rebased = _rebase(func, args, kwargs, result, {id(inputs[i]) for i in blocked}, whole=not blocked)
                    self._lay_tripwires(func, rebased)

    def _lay_tripwires(self, func: Callable, rebased: list[torch.Tensor]) -> None:
        """Add ``0 * marker`` to each rebased tensor in place: a gradient that reaches the tensor
        lands in the marker, as in the real run it would have reached the op and raised."""
        name = getattr(func, "__name__", str(func)).strip("_")
        site = CutSite(node=name, op=name, source=current_user_source(), reason=raises_reason(name))
        self._rebased.extend(rebased)
        for tensor in rebased:
            marker = torch.zeros((), dtype=tensor.dtype, device=tensor.device, requires_grad=True)
            with torch.enable_grad():
                tensor.add_(marker * 0)
            self._tripwires.append((site, marker))

    @property
    def rebased(self) -> list[torch.Tensor]:
        """The results rebased so far: their history is not the one their op made."""
        return list(self._rebased)

    def reached(self) -> list[CutSite]:
        """The ops whose rebased results the backward reached: where the real backward raises."""
        return list(dict.fromkeys(site for site, marker in self._tripwires if marker.grad is not None))


def _rebase(func: Callable, args: tuple, kwargs: dict, result: Any, blocked: set[int], whole: bool) -> list[torch.Tensor]:
    """Give ``result``'s tensors, in place, the history of the call with ``blocked`` inputs detached;
    returns the tensors rebased (a view keeps its raising history: it cannot be detached in place)."""
    inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    in_place = any(t is i for t in tree_flatten(result)[0] for i in inputs)
    live = [t for t in inputs if t.requires_grad and id(t) not in blocked]
    again = None
    if live and not whole and not in_place:  # re-running an in-place op would apply it twice
        detach = lambda v: v.detach() if isinstance(v, torch.Tensor) and id(v) in blocked else v  # noqa: E731
        again_args, again_kwargs = tree_map(detach, (args, kwargs))
        again = tree_flatten(func(*again_args, **again_kwargs))[0]
    rebased = []
    for position, tensor in enumerate(tree_flatten(result)[0]):
        if not isinstance(tensor, torch.Tensor) or tensor.grad_fn is None or tensor._is_view():
            continue
        tensor.detach_()
        if again is not None and isinstance(again[position], torch.Tensor) and again[position].requires_grad:
            tensor.copy_(again[position])
        rebased.append(tensor)
    return rebased


@contextlib.contextmanager
def stop_at_missing_derivatives() -> Iterator[StopAtMissingDerivatives]:
    """Inside, forward builds a history whose backward stops at ops with no derivative; after the
    backward, the mode's :meth:`~StopAtMissingDerivatives.reached` names where the real one raises."""
    with StopAtMissingDerivatives() as mode:
        yield mode
