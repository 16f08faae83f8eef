"""Zero and vanishing gradients are explained where they happen (fxflow.diagnose.localize).

Each model's dynamic verdicts are checked against a plain forward/backward first, then the
diagnosis must name the op (and the line of this file) where the real gradient died or shrank.
"""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.utils.parametrize as parametrize
from torch import nn

import fxflow
from gradtruth import line_of, real_dynamic


class DeadRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.out = nn.Linear(8, 2)
        with torch.no_grad():
            self.inp.bias.fill_(-100.0)  # every pre-activation negative

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.inp(x))  # marker: dead relu
        return self.out(hidden)  # marker: dead product


class ZeroingHook(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.a(x)
        hidden.register_hook(lambda grad: torch.zeros_like(grad))  # marker: zeroing hook
        return self.b(hidden)


class Saturated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)
        with torch.no_grad():
            self.a.bias.fill_(50.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.clamp(self.a(x), -1.0, 1.0))  # marker: saturated clamp


class SigmoidBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.lin(x))  # marker: sigmoid


class DeepSigmoid(nn.Module):
    def __init__(self, depth: int = 24) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[SigmoidBlock() for _ in range(depth)])
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


class RoundWeights(nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.round()  # marker: round


class Rounded(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        parametrize.register_parametrization(self.a, "weight", RoundWeights())
        self.b = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def checked(model: nn.Module, width: int, methods: tuple[str, ...] | None = None) -> fxflow.Report:
    """fxflow's report on ``model``, after asserting its dynamic verdicts match a real backward."""
    torch.manual_seed(0)
    inputs = (torch.randn(3, width),)
    truth = real_dynamic(model, inputs)
    before = {name: value.clone() for name, value in model.state_dict().items()}
    report = fxflow.check(model, inputs, capture_methods=methods)
    assert {p.name: p.dynamic for p in report.parameters} == truth
    # the check leaves the model as found
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    return report


def here(marker: str) -> str:
    return f"test_localize.py:{line_of(__file__, 'marker: ' + marker)}"


def test_dead_relu_is_named_at_its_line() -> None:
    torch.manual_seed(0)
    report = checked(DeadRelu(), 4)
    for name in ("inp.weight", "inp.bias"):
        diagnosis = report.parameter(name).diagnosis
        assert diagnosis.startswith("exactly 0 after `relu` at ") and here("dead relu") in diagnosis
        assert "every unit is inactive on this batch" in diagnosis
    # out.weight multiplies the dead activations: its gradient is 0 because its input is
    product = report.parameter("out.weight").diagnosis
    assert "`linear`" in product and here("dead product") in product and "all zeros" in product
    assert report.parameter("out.bias").diagnosis is None


def test_a_hook_that_returns_zeros_is_named() -> None:
    torch.manual_seed(0)
    # the run-time capture: its one real forward is the probe's, and the replay follows it
    report = checked(ZeroingHook(), 4, methods=("runtime",))
    assert report.trace.method == "runtime"
    for name in ("a.weight", "a.bias"):
        diagnosis = report.parameter(name).diagnosis
        assert "a gradient hook at line" in diagnosis and "returns zeros" in diagnosis
        assert here("zeroing hook") in diagnosis


def test_a_saturated_clamp_is_named() -> None:
    torch.manual_seed(0)
    report = checked(Saturated(), 4)
    for name in ("a.weight", "a.bias"):
        diagnosis = report.parameter(name).diagnosis
        assert diagnosis.startswith("`clamp` at ") and "is saturated" in diagnosis
        assert here("saturated clamp") in diagnosis


def test_a_vanishing_sigmoid_stack_names_the_stretch_and_the_factor() -> None:
    torch.manual_seed(0)
    model = DeepSigmoid()
    report = checked(model, 8)
    first = report.parameter("blocks.0.lin.weight")
    assert first.dynamic == "vanishing"
    match = re.fullmatch(r"the gradient shrinks 10\^(\d+) across `blocks\.0`–`blocks\.23` \(`sigmoid` at (.+)\)",
                         first.diagnosis)
    assert match, first.diagnosis
    assert here("sigmoid") == match.group(2).split("/")[-1]
    # the factor is the real one: the gradient at the stack's output over the one blocks.0 gets
    exponent = int(match.group(1))
    assert exponent >= 6
    deeper = report.parameter("blocks.1.lin.weight").diagnosis
    assert int(re.search(r"10\^(\d+)", deeper).group(1)) <= exponent


def test_round_inside_a_parametrization_is_named_not_the_linear() -> None:
    torch.manual_seed(0)
    report = checked(Rounded(), 4)
    parameter = report.parameter("a.parametrizations.weight.original")
    assert parameter.dynamic == "zero"
    assert parameter.diagnosis.startswith("`round` at ") and here("round") in parameter.diagnosis
    assert "Linear" not in parameter.diagnosis
    # the static verdict sees the zero inside the module call and names the parametrization
    [site] = parameter.cut_by
    assert "its parametrization `RoundWeights` of `weight`" in site.reason


# 1e-4: vanishing, yet above the size at which a float64 run rechecks it for round-off (fxflow.dynamic.rounding)
@pytest.mark.parametrize("fade", [1.0, 1e-4], ids=["healthy", "vanishing"])
def test_explaining_a_gradient_runs_no_second_forward(fade: float) -> None:
    """Healthy or not, the check runs the model's forward once for its gradients (and once more for
    the symbolic trace): the explanation of a vanishing gradient is read from that same run's trace."""
    calls = []  # a closure, not an attribute: what the check runs sees it whatever it copies

    class Counting(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls.append(1)
            return self.b(self.a(x) * fade)  # marker: fade

    torch.manual_seed(0)
    report = fxflow.check(Counting(), torch.randn(3, 4), capture_methods=("symbolic_trace",))
    assert len(calls) == 2  # the trace and the real run; no replay
    if fade == 1.0:
        assert report.ok
    else:
        faded = report.parameter("a.weight")
        assert faded.dynamic == "vanishing" and here("fade") in faded.diagnosis, faded.diagnosis


class FloorDivided(nn.Module):
    """``a`` feeds an op with no derivative (floor_divide) and a dead relu: its gradient is exactly 0."""

    def __init__(self, stop: bool = False) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.c = nn.Linear(4, 2)
        self.stop = stop  # detach what floor_divide returns: the reference for "the backward stops there"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.a(x)
        divided = torch.floor_divide(hidden, 2.0)
        return self.c((divided.detach() if self.stop else divided) + torch.relu(hidden - 100.0))  # marker: two paths


def test_the_replay_stops_where_the_real_backward_stopped() -> None:
    """A plain backward raises at floor_divide; fxflow's stops there, and so must its replay."""
    torch.manual_seed(0)
    model, x = FloorDivided(), torch.randn(3, 4)
    reference = FloorDivided(stop=True)
    reference.load_state_dict(model.state_dict())
    truth = real_dynamic(reference, (x,))
    assert truth["a.weight"] == "zero"
    report = fxflow.check(model, x)
    assert {p.name: p.dynamic for p in report.parameters} == truth
    diagnosis = report.parameter("a.weight").diagnosis
    assert diagnosis.startswith("exactly 0 after `relu` at ") and here("two paths") in diagnosis


def test_one_norm_call_per_node_reads_each_gradient_as_gradient_norm_does() -> None:
    """The trace norms all of a node's gradients in one ``torch._foreach_norm`` call; each value is the one
    :func:`gradient_norm` reads alone: float32 where that loses nothing, exact where squares underflow
    (1e-30 entries) or overflow, float32 for half precision, complex by magnitude, sparse by its values."""
    from fxflow.core.tensors import gradient_norm
    from fxflow.dynamic.backward_trace import gradient_norms

    torch.manual_seed(0)
    dense = torch.randn(5, 7)
    cases = {
        "float32": [dense, torch.randn(3)],
        "underflow and overflow": [torch.full((100,), 1e-30), torch.full((4,), 1e30), torch.zeros(6), dense],
        "half precision": [dense.bfloat16(), dense.half()],
        "wide": [dense.double(), torch.randn(4, dtype=torch.complex64), dense],
        "half beside double": [dense.half(), dense.double()],
        "sparse": [dense.to_sparse(), dense],
        "one": [torch.tensor(3.0)],
    }
    for name, grads in cases.items():
        expected = [gradient_norm(g.abs() if g.is_complex() else g) for g in grads]
        assert gradient_norms(grads) == pytest.approx(expected, rel=1e-6, abs=0.0), name
    assert gradient_norms([torch.full((100,), 1e-30)])[0] > 0.0  # not lost to underflow
    assert gradient_norms([torch.zeros(3)]) == [0.0]


def _helper(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * 2.0  # marker: helper line


class Lines(nn.Module):
    """Calls made on the user's lines, inside a helper function, inside library modules, on tuples."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.norm = nn.LayerNorm(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.norm(self.a(x))  # marker: library modules
        first, second = hidden.split(3, dim=-1)  # marker: tuple result
        return _helper(first) + second.relu()  # marker: two calls


def test_origins_read_from_the_recording_are_the_lines_the_stack_gives() -> None:
    """With the run-time recording running (the check's real run), the trace reads each node's user line
    from the stack trace the recording just made for that call; without it, from the stack. Same lines."""
    from fxflow.dynamic.backward_trace import BackwardTrace
    from fxflow.dynamic.recording import Recording

    torch.manual_seed(0)
    model, x = Lines(), torch.randn(2, 4)

    def origins(recorded: bool) -> list:
        trace = BackwardTrace(model)
        recording = Recording(model, (x,)) if recorded else None
        if recording is not None:
            recording.__enter__()
        try:
            with trace.forward():
                model(x)
        finally:
            if recording is not None:
                recording.__exit__(None, None, None)
                recording.restore()
        return list(trace.origins.origins.values())

    alone, on_recording = origins(False), origins(True)
    assert on_recording == alone
    lines = {origin.source for origin in alone}
    assert {here(m) for m in ("helper line", "library modules", "tuple result", "two calls")} <= {
        source.split("/")[-1] for source in lines if source}
