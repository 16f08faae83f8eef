"""A check beside another thread: the captures' patches (``torch.no_grad``, ``Function.apply``,
``inference_mode``, the streams, warnings and log records torch.export's re-trace keeps quiet) are
seen by the checking thread only. The other thread's calls run as they would without fxflow, and
the check's verdicts are the same as when it runs alone."""
from __future__ import annotations

import logging
import queue
import threading
import time

import torch
from torch import nn

import fxflow
from torch._subclasses.fake_tensor import is_fake


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
        h = Double.apply(self.a(x)) * (x.shape[0] / x.size(0))  # x.shape: an attribute the symbolic trace records
        with torch.no_grad():
            h = h + 1
        return self.b(h)


def patched_globals() -> dict[str, object]:
    """What the captures patch while they run, as it is now."""
    import sys
    import warnings

    import torch.fx as fx

    places = [(torch.autograd.function.Function, "apply"), (torch._C, "_InferenceMode"), (torch._C, "_set_grad_enabled"),
              (torch, "tensor"), (fx.proxy.Attribute, "__init__"), (fx.proxy.Attribute, "node"),
              (sys, "stdout"), (sys, "stderr"), (warnings, "_showwarnmsg")]
    return {f"{getattr(owner, '__name__', owner)}.{name}": vars(owner)[name] for owner, name in places}


def test_the_patches_are_invisible_to_another_thread():
    before = patched_globals()
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
    assert patched_globals() == before  # once no thread captures, torch's own functions are back


class Handshake:
    """Forward waits, each time it runs, until the other thread has gone once round its loop: so that
    thread's inference_mode, print and log record happen while the check is inside forward."""

    def __init__(self) -> None:
        self.waiting: queue.Queue[threading.Event] = queue.Queue()
        self.enabled = False
        self.exported = 0  # forward's runs under torch.export

    def inside_forward(self) -> None:
        if self.enabled:
            done = threading.Event()
            self.waiting.put(done)
            assert done.wait(30), "the other thread stopped going round"

    def went_round(self) -> None:
        while not self.waiting.empty():
            self.waiting.get().set()


class Printing(nn.Module):
    """Prints in forward; under torch.export (fake tensors) it waits there for the other thread."""

    def __init__(self, handshake: Handshake):
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 2)
        self.handshake = handshake  # counts the runs under export too (the check puts back the model's own attributes)

    def forward(self, x):
        if is_fake(x):
            self.handshake.exported += 1
            print("forward ran under export")
            self.handshake.inside_forward()
        else:
            print("forward ran")
        return self.b(torch.relu(self.a(x)).detach() + x[:, :6])


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_export_keeps_quiet_for_its_own_thread_only(capsys):
    """While a check runs torch.export, another thread enters inference_mode, prints and logs
    warnings: it sees none of the export's guards, and every line and record it makes arrives."""
    before = patched_globals()
    handshake = Handshake()
    model, x = Printing(handshake), torch.randn(3, 6)
    alone = fxflow.check(model, x, capture_methods=["torch.export"])
    assert alone.trace.method == "torch.export"
    assert alone.parameter("a.weight").static == "cut"  # the detach: export's graph was analysed
    logger, records = logging.getLogger("fxflow.tests.other_thread"), Records()
    logger.addHandler(records)
    stop = threading.Event()
    errors: list[str] = []
    rounds = 0

    def other() -> None:
        nonlocal rounds
        try:
            while not stop.is_set():
                with torch.inference_mode():  # export's guard refuses inference_mode: not for this thread
                    y = torch.ones(2) * 2
                assert y.is_inference()
                rounds += 1
                print(f"other thread round {rounds}")
                logger.warning("other thread round %d", rounds)
                handshake.went_round()
                time.sleep(0.01)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(repr(error))

    capsys.readouterr()
    worker = threading.Thread(target=other)
    worker.start()
    handshake.enabled = True
    try:
        together = fxflow.check(model, x, capture_methods=["torch.export"])
    finally:
        handshake.enabled = False
        stop.set()
        worker.join()
        logger.removeHandler(records)
    assert errors == []
    assert together.to_dict() == alone.to_dict()
    printed = capsys.readouterr().out.splitlines()
    # every round of the other thread printed and logged, including those during export's re-trace
    assert [line for line in printed if line.startswith("other thread")] == [
        f"other thread round {n}" for n in range(1, rounds + 1)]
    assert records.messages == [f"other thread round {n}" for n in range(1, rounds + 1)]
    # the check's real forward printed; export's re-trace (it ran, and waited for a round) printed nothing
    assert handshake.exported >= 2 and "forward ran" in printed and "forward ran under export" not in printed
    assert patched_globals() == before
