"""Zero by construction: a node whose derivative in some input is exactly zero for any values.

Torch's derivative table names the ops whose formula is a zero tensor (``round``, ``sign``), but
not the ones whose zero follows from the shapes and modes in use: ``grid_sample(mode="nearest")``
in its grid, a softmax over a dimension of size 1 (its result is 1 whatever the input), ``x ** 0``.
Those are found here by running the node's backward on stand-ins: after a strategy decided the
node's edges (:mod:`fxflow.static.strategies`), every input it is differentiable in (``diff``)
gets a seeded random gradient back from the node's outputs, with the node run on random stand-in
values. An input whose gradient is exactly zero on every draw of stand-ins
(:func:`~fxflow.static.twins.stand_in_draws`: random values at three scales, each with its mirror)
is a ``zero`` edge, and ``node.meta[ZERO_BY_CONSTRUCTION_KEY]`` names it for the reason
(:func:`fxflow.static.explain.describe_zero`).

Every floating argument and every trainable weight is a random stand-in, never the model's value:
a designed zero-init (LoRA's ``B = 0``, adaLN-Zero's gate) zeroes the real gradient at step one but
not by construction, and stays ``reachable``. A node whose backward cannot run on stand-ins keeps
its edges.
"""
from __future__ import annotations

import torch

from ..core.history import DIFF, ZERO, backward_kinds, entry_key
from ..core.tensors import tensors_in
from .flow import NodeFlow
from .flow_state import NOT_RUN, FlowState, NodeCall
from .stand_ins import random_state_kept, stand_in_arguments, stand_in_weights
from .twins import StandIn, read_on_draws
from ..verdicts import OPAQUE_KEY, PARAM_PREFIX, ZERO_BY_CONSTRUCTION_KEY

# A node whose stand-ins (arguments and weights) hold more values than this is not checked: the
# check runs its forward and backward once more on real tensors, and a whole block of a large
# model on meta twins would cost as much as the model's own step.
CHECKED_VALUES_LIMIT = 2**22


class ZeroByConstruction:
    """Marks the ``diff`` edges of a node whose backward, on random stand-ins, is exactly zero."""

    def __init__(self, state: FlowState) -> None:
        self.state = state

    def check(self, call: NodeCall, flow: NodeFlow) -> None:
        """Turn each ``diff`` edge of ``flow`` that every draw reads as zero into a ``zero`` edge."""
        if not self._checkable(call, flow):
            return
        try:
            with torch.enable_grad(), self.state.device, random_state_kept(self.state.device):
                kinds = read_on_draws(lambda draw: self._read(call, draw))
        except Exception:  # the op needs values stand-ins do not have: its edges stay as decided
            return
        zeros = sorted(name for name, kind in (kinds or {}).items() if kind == ZERO)
        marked = []
        for name in zeros:
            edges, key = (flow.params, name[len(PARAM_PREFIX):]) if name.startswith(PARAM_PREFIX) else (flow.inputs, name)
            if edges.get(key) != DIFF:
                continue
            marked.append(name)
            for part in (flow, *flow.outputs.values()):
                table = part.params if edges is flow.params else part.inputs
                if table.get(key) == DIFF:
                    table[key] = ZERO
        if marked:
            call.node.meta[ZERO_BY_CONSTRUCTION_KEY] = marked

    def _checkable(self, call: NodeCall, flow: NodeFlow) -> bool:
        """An op that ran, outside a no-grad region, with a ``diff`` edge, small enough to run again.
        A custom Function's own backward is read by :class:`~fxflow.static.stand_ins.CustomBackward`."""
        node = call.node
        if node.op not in ("call_function", "call_method", "call_module") or call.region is not None:
            return False
        if OPAQUE_KEY in node.meta or call.value is NOT_RUN or not flow.evaluated:
            return False
        if DIFF not in (*flow.inputs.values(), *flow.params.values()):
            return False
        values = sum(t.numel() for t in tensors_in(self.state.runner.arguments(node)))
        if node.op == "call_module":
            module = self.state.model.get_submodule(node.target)
            values += sum(t.numel() for t in (*module.parameters(), *module.buffers()))
        return values <= CHECKED_VALUES_LIMIT

    def _read(self, call: NodeCall, draw: StandIn) -> dict[str, str]:
        """``{input name or "param:<name>": kind}`` from one backward of the node on ``draw``'s stand-ins."""
        state = self.state
        with stand_in_weights(state, draw) as weights:
            args, kwargs, entries, _ = stand_in_arguments(state, call.node, call.inputs, draw, fresh=True)
            result = state.runner.execute(call.node, args, kwargs)
            trainable = {name: copy for name, copy in weights.items() if copy.requires_grad}
            entries.update({entry_key(copy): [PARAM_PREFIX + name] for name, copy in trainable.items()})
            return backward_kinds(result, tensors_in((args, kwargs)) + list(trainable.values()), entries)
