"""Where a NaN or an inf is born: the first op that made one from finite values.

``torch.autograd.detect_anomaly`` stops at the first *backward* node whose output is not finite,
which is often an op that only carried a NaN the forward made (and it names the forward op by a
traceback from the anomaly run, not by the op that went wrong). Here the real forward is replayed
under a :class:`BirthRecorder`, which looks at every torch call:

* a call whose inputs are all finite and whose result is not is a **birth**, with the reason read
  from the values it saw (``log`` of a negative number, ``0 / 0``, an overflow);
* a call that takes a non-finite value and returns one **carries** it: the result inherits the
  births behind its inputs; a call that returns finite values **heals** it (``softmax`` over a
  ``-inf`` attention mask), and those births are forgotten.

Only births that reach the loss are reported, so an intentional ``masked_fill(mask, -inf)``
before a softmax is not. When the forward is finite and the backward is not, every recorded
call's backward node gets a hook: the first one whose incoming gradients are finite and whose
outgoing ones are not is where the backward made the NaN (``sqrt`` at 0, the norm of a zero
vector, a fractional power of 0), named by its forward op and line.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from ..core.records import NonfiniteSite
from ..core.source import current_user_source
from ..dynamic.backward_trace import OriginRecorder
from ..core.tensors import call_tensors

_MAX_SITES = 3  # births reported per phase: the first few explain the rest


def _floating(value: Any) -> list[torch.Tensor]:
    return [t for t in call_tensors(value) if (t.is_floating_point() or t.is_complex()) and not t.is_meta]


def _finite(tensor: torch.Tensor) -> bool:
    return bool(torch.isfinite(tensor).all()) if tensor.numel() else True


def _kind(tensors: Sequence[torch.Tensor]) -> str:
    return "a NaN" if any(bool(torch.isnan(t).any()) for t in tensors) else "an inf"


class BirthRecorder(OriginRecorder):
    """Records, for one forward, where non-finite values are born and which calls carry them; the
    call, line and module behind each autograd node are localization's (:class:`OriginRecorder`),
    for the backward births."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__(model)
        self.carried: dict[int, frozenset[int]] = {}  # id(non-finite tensor) -> the births behind it
        self.births: list[NonfiniteSite] = []
        self.keep_alive: list[Any] = []

    def observe(self, func: Callable, args: tuple, kwargs: dict, result: Any) -> None:
        super().observe(func, args, kwargs, result)
        self._look(func, args, kwargs, result)

    def _look(self, func: Callable, args: tuple, kwargs: dict, result: Any) -> None:
        outputs = _floating(result)
        bad = [t for t in outputs if not _finite(t)]
        if not bad:
            return
        inputs = _floating((args, kwargs))
        carried = frozenset().union(*(self.carried.get(id(t), frozenset()) for t in inputs))
        if not carried and all(_finite(t) for t in inputs):
            origin = next((self.origins[t.grad_fn] for t in outputs if t.grad_fn in self.origins), None)
            source, module = (origin.source, origin.module) if origin else (current_user_source(), self.modules.innermost)
            op = _op(getattr(func, "__name__", str(func)))
            self.births.append(NonfiniteSite("forward", op, source, module, forward_reason(op, inputs, bad)))
            carried = frozenset({len(self.births) - 1})
        for tensor in bad:
            self.carried[id(tensor)] = carried
            self.keep_alive.append(tensor)

    def reaching(self, tensors: Sequence[torch.Tensor]) -> list[NonfiniteSite]:
        """The births behind these (non-finite) tensors, in the order they happened."""
        found = sorted(set().union(*(self.carried.get(id(t), frozenset()) for t in tensors)))
        return [self.births[i] for i in found[:_MAX_SITES]]


def forward_reason(op: str, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> str:
    """What the op was given that made it non-finite, read from the values."""
    made = _kind(outputs)
    values = [t.detach() for t in inputs if t.numel()]
    has_negative = any(bool((t.real < 0).any()) for t in values)
    has_zero = any(bool((t == 0).any()) for t in values)
    name = op.lower()
    if name.startswith("log") and has_negative:
        return f"{op} of a negative number gives {made}"
    if name.startswith("log") and has_zero:
        return f"{op} of 0 gives -inf"
    if name in ("sqrt", "rsqrt", "pow", "acos", "asin", "acosh", "atanh") and has_negative:
        return f"{op} of a value outside its domain (a negative number) gives {made}"
    if name in ("div", "true_divide", "truediv", "rtruediv", "reciprocal", "rsqrt") and has_zero:
        return "0 / 0 gives a NaN" if made == "a NaN" else "division by 0 gives an inf"
    if made == "an inf":
        return f"{op} overflowed: its result is too large for {outputs[0].dtype} and became inf"
    return f"{op} gives a NaN from finite values"


def backward_reason(op: str) -> str:
    return (f"the backward of {op} turned finite gradients into non-finite ones: its derivative is not finite "
            "at the values it saw (sqrt or a fractional power at 0, the norm of a zero vector, ...)")


def nonfinite_origins(model: torch.nn.Module, call: Callable[[], Any],
                      loss_of: Callable[[Any], torch.Tensor | None]) -> list[NonfiniteSite]:
    """Replay one forward and backward (``call`` then ``loss_of``) and name where non-finite values
    were born: forward births that reach the loss, else the first backward nodes that made one."""
    recorder = BirthRecorder(model)
    with recorder.modules, torch.enable_grad(), recorder:
        outputs = call()
        loss = loss_of(outputs)
    if not isinstance(loss, torch.Tensor):
        return []
    if not _finite(loss.detach()):
        return recorder.reaching([loss] + _floating(outputs))
    if not loss.requires_grad:
        return []
    return _backward_births(loss, recorder)


def _backward_births(loss: torch.Tensor, recorder: BirthRecorder) -> list[NonfiniteSite]:
    births: list[NonfiniteSite] = []
    handles = []

    def hook_for(site: tuple[str, str | None, str | None]) -> Callable:
        def hook(grad_inputs: tuple, grad_outputs: tuple) -> None:
            incoming = [g for g in grad_outputs if isinstance(g, torch.Tensor)]
            outgoing = [g for g in grad_inputs if isinstance(g, torch.Tensor)]
            if all(_finite(g) for g in incoming) and not all(_finite(g) for g in outgoing):
                op, source, module = site
                births.append(NonfiniteSite("backward", op, source, module, backward_reason(op)))

        return hook

    for node, origin in recorder.origins.items():
        handles.append(node.register_hook(hook_for((_op(origin.op), origin.source, origin.module))))
    try:
        loss.backward()
    except RuntimeError:  # a backward that raises is reported elsewhere (backward_raises)
        pass
    finally:
        for handle in handles:
            handle.remove()
    return list(dict.fromkeys(births))[:_MAX_SITES]


def _op(name: str) -> str:
    """A call's name as the reasons read it: ``__truediv__`` is ``truediv``."""
    return name.strip("_")
