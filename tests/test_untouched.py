"""Never touch: a check leaves the model, its inputs and the process as it found them (issue 40).

Byte-for-byte comparisons of what a check could change, and the process-wide state a second
thread would see (queued CUDA seeds, warning filters, the garbage collector).
"""
from __future__ import annotations

import warnings
from types import SimpleNamespace

import torch
from torch import nn

import fxflow


class DropsABlock(nn.Module):
    """Layer drop: ``b`` is used on half the draws, so the check redraws the model's random numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        if torch.rand(()) < 0.5:
            y = y + self.b(x)
        return y


def test_redraw_keeps_a_queued_cuda_seed():
    """``torch.manual_seed`` before CUDA starts queues a CUDA seed: the check's redraw must not
    replace it (readable without a GPU: the queue is torch's ``_lazy_seed_tracker``)."""
    model = DropsABlock()
    torch.manual_seed(1)  # the first draw drops b: its parameters are dry, and redrawn
    tracker = torch.cuda._lazy_seed_tracker
    queued = tracker.manual_seed_all_cb
    x = torch.randn(2, 3)
    cpu = torch.get_rng_state()
    report = fxflow.check(model, x)
    assert {p.name: str(p.dynamic.value) for p in report.parameters}["b.weight"] == "intermittent"  # it redrew
    assert tracker.manual_seed_all_cb is queued
    assert torch.equal(torch.get_rng_state(), cpu)  # and the global generator is back where it was


class WritesEverything(nn.Module):
    """A forward that writes what it can in place: a running average and a call counter kept as plain
    tensors, a buffer, and its own input; its output layer starts at zero, so the check looks ahead."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.out = nn.Linear(3, 4), nn.Linear(4, 2)
        nn.init.zeros_(self.out.weight)  # the hidden layer's first gradient is exactly zero: a look-ahead
        self.ema = torch.zeros(4)  # plain tensor attributes, not buffers
        self.calls = torch.zeros((), dtype=torch.long)
        self.cache = {"last": torch.zeros(4)}
        self.register_buffer("seen", torch.zeros(()))
        self.log = SimpleNamespace(inputs=[])  # not a plain list attribute: the check puts those back

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(x, torch.Tensor):  # not the symbolic trace's Proxy
            self.log.inputs.append(x.detach().clone())
        with torch.no_grad():
            x.mul_(0.5)  # the caller's input, written before use
        h = torch.tanh(self.hidden(x))
        with torch.no_grad():
            self.ema.mul_(0.9).add_(h.mean(0), alpha=0.1)
            self.calls += 1
            self.cache["last"].copy_(h[0])
            self.seen += 1
        return self.out(h)


def _bytes(tensors: dict[str, torch.Tensor]) -> dict[str, bytes]:
    return {name: t.detach().reshape(-1).view(torch.uint8).numpy().tobytes() for name, t in tensors.items()}


def _model_and_input(model: WritesEverything, x: torch.Tensor) -> dict[str, bytes]:
    """The state dict, the plain tensor attributes and the input, as bytes."""
    return _bytes({**model.state_dict(), "ema": model.ema, "calls": model.calls, "cache": model.cache["last"], "x": x})


def test_model_and_inputs_are_byte_identical_after_a_check():
    torch.manual_seed(0)
    model, x = WritesEverything(), torch.randn(5, 3)
    before = _model_and_input(model, x)
    report = fxflow.check(model, x)
    assert len(model.log.inputs) >= 2  # the real run and the look-ahead's rerun ran forward
    assert _model_and_input(model, x) == before
    assert not [note for note in report.notes if "in place" in note], report.notes


def test_every_run_of_the_check_sees_the_input_as_given():
    torch.manual_seed(0)
    model, x = WritesEverything(), torch.randn(5, 3)
    given = x.clone()
    fxflow.check(model, x)
    seen = model.log.inputs
    assert len(seen) >= 2 and all(torch.equal(s, given) for s in seen), [float((s - given).abs().max()) for s in seen]


# -- the check's run is the user's run ----------------------------------------------------------


class PairBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = pair
        return self.lin(x) + y


class CheckpointsAPair(nn.Module):
    """A reentrant checkpoint whose inputs sit in one tuple: ``Function.apply`` sees no tensor that
    requires grad, so the block's result has no history and the stem and block get no gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.block, self.head = nn.Linear(3, 3), PairBlock(), nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        h = self.stem(x)
        return self.head(checkpoint(self.block, (h, h), use_reentrant=True))


def test_reentrant_checkpoint_of_a_tuple_gets_what_a_plain_backward_gets():
    torch.manual_seed(0)
    model, x = CheckpointsAPair(), torch.randn(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "None of the inputs have requires_grad=True": the point of the test
        model(x).sum().backward()
    plain = {name: p.grad is not None for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    assert plain == {"stem.weight": False, "stem.bias": False, "block.lin.weight": False, "block.lin.bias": False,
                     "head.weight": True, "head.bias": True}
    report = fxflow.check(model, x)
    assert {p.name: str(p.dynamic.value) == "ok" for p in report.parameters} == plain
    assert report.exit_code == 1


class LazyWithEma(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.norm, self.out = nn.LazyLinear(4), nn.LazyBatchNorm1d(), nn.Linear(4, 2)
        self.ema = torch.zeros(())  # a plain tensor the initializing forward writes too

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.ema.add_(x.mean())
        return self.out(torch.relu(self.norm(self.fc(x))))


def _lazy_state(model: nn.Module) -> list:
    return [(name, type(module).__name__, sorted((k, type(v).__name__) for k, v in
             [*module._parameters.items(), *module._buffers.items()]),
             len(module._forward_pre_hooks), len(module._load_state_dict_pre_hooks))
            for name, module in model.named_modules()]


def test_lazy_modules_come_back_lazy():
    torch.manual_seed(0)
    model, x = LazyWithEma(), torch.randn(6, 3)
    before = _lazy_state(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    report = fxflow.check(model, x, optimizer=optimizer)
    assert {p.name: str(p.dynamic.value) for p in report.parameters}["fc.weight"] == "ok"
    assert any("lazy again" in note for note in report.notes)
    assert _lazy_state(model) == before  # LazyLinear, UninitializedParameter, the initializing hooks
    assert float(model.ema) == 0.0
    model(x)  # and the user's first step still initializes them, the optimizer's parameters included
    assert type(model.fc) is nn.Linear and optimizer.param_groups[0]["params"][0] is model.fc.weight


class LazyThatRefusesToTrain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.LazyLinear(3)
        self.calls = 0  # a plain int the initializing forward counts too

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if torch.is_grad_enabled():  # the check's real run raises; the initializing forward does not
            raise RuntimeError("refuses")
        return self.fc(x)


def test_lazy_modules_come_back_lazy_when_the_check_raises():
    model = LazyThatRefusesToTrain()
    try:
        fxflow.check(model, torch.randn(2, 4))
    except fxflow.FxflowError as error:
        assert "refuses" in str(error)
    assert type(model.fc) is nn.LazyLinear and isinstance(model.fc.weight, nn.parameter.UninitializedParameter)
    assert model.calls == 0


def test_values_too_large_to_copy_are_noted_and_the_others_still_restored():
    from fxflow.core.state import TensorValues

    large, small = torch.zeros(1000), torch.zeros(10)
    saved = TensorValues.save([large, small], "a plain tensor attribute", limit=100)
    large.add_(1)
    small.add_(1)
    notes = saved.restore()
    assert float(small.abs().sum()) == 0.0  # it fitted: put back
    assert float(large.sum()) == 1000.0 and notes == [
        "forward changed a plain tensor attribute in place; no copy of it was kept to put back "
        "(too large, or not a plain dense tensor)"]
