"""What the recorded run does not build twice (issue 38): structural checks, not timings."""
from __future__ import annotations

import torch
from torch import nn

from fxflow.dynamic.backward_trace import BackwardTrace
from fxflow.dynamic.recording import Recording


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * 2


class Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = Block(), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x)).sum()


def _origins(recorded: bool) -> tuple[list[tuple[str, str | None]], int]:
    """Each autograd node's (op -> module) as the trace saw it, and the forward pre-hooks on ``first`` while it ran."""
    torch.manual_seed(0)
    model, x = Two(), torch.randn(2, 4)
    trace, hooks = BackwardTrace(model), []
    model.first.register_forward_pre_hook(lambda module, args: hooks.append(len(module._forward_pre_hooks)))
    recording = Recording(model, (x,), copy_parameters=False) if recorded else None
    if recording is not None:
        recording.__enter__()
    try:
        with trace.forward():
            loss = model(x)
    finally:
        if recording is not None:
            recording.__exit__(None, None, None)
            recording.restore()
    return sorted((node.name(), origin.module) for node, origin in trace.origins.origins.items()), hooks[0]


def test_the_trace_reads_the_recordings_module_stack_instead_of_hooking_every_module_again():
    alone, hooks_alone = _origins(recorded=False)
    on_recording, hooks_on_recording = _origins(recorded=True)
    assert on_recording == alone
    assert {module for _, module in alone} == {"first", "first.linear", "second", None}, alone
    # the user's hook, the trace's own module stack (alone) or the recording's (both)
    assert (hooks_alone, hooks_on_recording) == (2, 2)


def test_nodes_recorded_in_one_module_call_share_one_module_stack():
    torch.manual_seed(0)
    model, x = Two(), torch.randn(2, 4)
    recording = Recording(model, (x,), copy_parameters=False)
    with recording:
        loss = model(x)
    graph = recording.finish(loss).graph
    recording.restore()
    stacks = {node.name: node.meta.get("nn_module_stack") for node in graph.nodes if node.op in ("call_function", "call_method")}
    first = [stack for stack in stacks.values() if stack == {"first": ("first", "Block")}]
    assert len(first) == 2 and first[0] is first[1], stacks  # relu and mul
    assert {"first": ("first", "Block"), "first.linear": ("first.linear", "Linear")} in stacks.values()
    assert {"second": ("second", "Linear")} in stacks.values()
