"""A check beside another thread (issue 19): the captures' patches of ``torch.no_grad`` and
``Function.apply`` are seen by the checking thread only. The other thread's calls run as they
would without fxflow, and the check's verdicts are the same as when it runs alone."""
from __future__ import annotations

import threading

import torch
from torch import nn

import fxflow


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class WithRegions(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 2)

    def forward(self, x):
        h = Double.apply(self.a(x))
        with torch.no_grad():
            h = h + 1
        return self.b(h)


def test_the_patches_are_invisible_to_another_thread():
    model, x = WithRegions(), torch.randn(3, 6)
    alone = [fxflow.check(model, x, capture_methods=[m]).to_dict() for m in ("symbolic_trace", "runtime")]
    stop = threading.Event()
    seen: list[str] = []

    def train() -> None:  # another thread: custom Functions and grad-mode switches, all the time
        try:
            while not stop.is_set():
                w = torch.ones(4, requires_grad=True)
                y = Double.apply(w)  # must run the real Function, not a capture's handler
                with torch.no_grad():
                    assert not torch.is_grad_enabled()
                assert torch.is_grad_enabled()
                y.sum().backward()
                assert torch.equal(w.grad, torch.full((4,), 2.0))
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            seen.append(repr(error))

    worker = threading.Thread(target=train)
    worker.start()
    try:
        for _ in range(5):
            together = [fxflow.check(model, x, capture_methods=[m]).to_dict() for m in ("symbolic_trace", "runtime")]
            assert together == alone
    finally:
        stop.set()
        worker.join()
    assert seen == []
    # and once no thread captures, torch's own functions are back
    assert torch.autograd.function.Function.__dict__["apply"].__func__.__qualname__ == "Function.apply"
