"""The look-ahead steps what training would (issue 39, item 1).

The truth is real optimizer steps in plain torch on a copy of the model (:func:`real_first_steps`):
the user's forward, the loss, ``backward()`` and ``optimizer.step()``, with whatever the forward
writes into the model's buffers and attributes carried from step to step, as training does.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fxflow
from gradtruth import first_learning_steps

TRUTH_STEPS = 8  # real optimizer steps: a chain of k zero-inits learns from step k + 1


def projection_loss(outputs: torch.Tensor) -> torch.Tensor:
    """A fixed random projection of the output: every output element matters, none is special."""
    if outputs.is_complex():
        outputs = torch.view_as_real(outputs)
    weights = torch.randn(outputs.shape, generator=torch.Generator().manual_seed(1), dtype=outputs.dtype)
    return (outputs * weights).sum()


def inputs_of(model: torch.nn.Module) -> tuple:
    torch.manual_seed(0)
    return tuple(model.example_inputs()) if hasattr(model, "example_inputs") else (torch.randn(4, 8),)


def real_first_steps(model: torch.nn.Module, inputs: tuple, steps: int = TRUTH_STEPS,
                     loss_fn=projection_loss) -> dict[str, int | None]:
    """{trainable parameter: the first real Adam step (1-based) with a non-zero gradient, or None}."""
    model = copy.deepcopy(model)
    return first_learning_steps(model, lambda: loss_fn(model(*inputs)).backward(), steps, lr=1e-3)


def real_steps_in_float64(model: torch.nn.Module, inputs: tuple, steps: int = TRUTH_STEPS,
                          rounding: float = 1e-12) -> dict[str, int | None]:
    """As :func:`real_first_steps`, in float64, where a gradient under ``rounding`` of the largest is
    round-off (float64's is about 1e-16): the step from which each parameter learns in exact arithmetic."""
    model = copy.deepcopy(model).double()
    inputs = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)
    trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}

    def learned(names: list[str]) -> list[str]:
        rms = {name: float(p.grad.pow(2).mean().sqrt()) if p.grad is not None else 0.0 for name, p in trainable.items()}
        largest = max(rms.values())
        return [name for name in names if rms[name] > rounding * largest]
    return first_learning_steps(model, lambda: projection_loss(model(*inputs)).backward(), steps, lr=1e-3,
                                learned=learned)


# ---- the idioms: where a stand-in for training differs from training -----------------------------

class SingleKeyAttention(nn.Module):
    """SDPA over one key: the softmax is 1 whatever q and k are."""
    def __init__(self, d=8):
        super().__init__()
        self.q, self.k, self.v, self.o = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
    def forward(self, x):  # x: (batch, 1, d)
        return self.o(F.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x)))
    def example_inputs(self):
        return (torch.randn(4, 1, 8),)

class Top1Renormalised(nn.Module):
    """Top-1 routing renormalised as p / p: the gate is 1 whatever the router says."""
    def __init__(self, d=8, experts=4):
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(experts))
    def forward(self, x):
        p = self.router(x).softmax(-1)
        top, index = p.max(-1, keepdim=True)
        gate = top / top.sum(-1, keepdim=True)
        out = torch.stack([e(x) for e in self.experts], 1)
        return (out.gather(1, index[..., None].expand(-1, 1, out.shape[-1])).squeeze(1)) * gate

class SingleFeatureNorm(nn.Module):
    """LayerNorm over a single feature: its output is its bias, whatever comes in."""
    def __init__(self):
        super().__init__()
        self.inp, self.norm, self.out, self.skip = nn.Linear(8, 1), nn.LayerNorm(1), nn.Linear(1, 4), nn.Linear(8, 4)
    def forward(self, x):
        return self.out(self.norm(self.inp(x))) + self.skip(x)

class ComplexAdapter(nn.Module):
    """A zero-init complex adapter: B = 0 holds A until B moves."""
    def __init__(self):
        super().__init__()
        self.base = nn.Linear(8, 8)
        self.A = nn.Parameter(torch.randn(8, 4, dtype=torch.cfloat) * 0.1)
        self.B = nn.Parameter(torch.zeros(4, 8, dtype=torch.cfloat))
    def forward(self, x):
        return self.base(x) + ((x.to(torch.cfloat) @ self.A) @ self.B).real

class CounterFadeIn(nn.Module):
    """A branch faded in by a step counter: 0.0 on step 1, then rising."""
    def __init__(self):
        super().__init__()
        self.base, self.branch = nn.Linear(8, 4), nn.Linear(8, 4)
        self.register_buffer("step", torch.zeros(()))
    def forward(self, x):
        alpha = (self.step / 10).clamp(max=1.0)
        self.step += 1
        return self.base(x) + alpha * self.branch(x)

class AttributeFadeIn(nn.Module):
    """The same with a Python counter."""
    def __init__(self):
        super().__init__()
        self.base, self.branch = nn.Linear(8, 4), nn.Linear(8, 4)
        self.calls = 0
    def forward(self, x):
        alpha = min(self.calls / 10, 1.0)
        self.calls += 1
        return self.base(x) + alpha * self.branch(x)

class ZeroChain4(nn.Module):
    """Four zero-inits in a chain: the first learns from step 5."""
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.chain = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
        for layer in self.chain:
            nn.init.zeros_(layer.weight)
    def forward(self, x):
        h = self.first(x)
        for layer in self.chain:
            h = layer(h)
        return h + x


def checked(model: torch.nn.Module) -> tuple[fxflow.Report, dict[str, int | None]]:
    """fxflow's report and the real Adam steps' truth; the check leaves the model as it found it."""
    inputs = inputs_of(model)
    truth = real_first_steps(model, inputs)
    before = {key: value.clone() for key, value in model.state_dict().items()}
    attributes = dict(vars(model))
    report = fxflow.check(model, inputs, loss_fn=projection_loss)
    assert all(torch.equal(before[key], value) for key, value in model.state_dict().items()), "the check changed the model"
    assert {key: value for key, value in vars(model).items() if not key.startswith("_")} == \
        {key: value for key, value in attributes.items() if not key.startswith("_")}
    return report, truth


def held_as_truth(report: fxflow.Report, truth: dict[str, int | None]) -> None:
    for parameter in report.parameters:
        if parameter.name not in truth:
            continue
        step = truth[parameter.name]
        if step == 1:
            assert parameter.dynamic in ("ok", "vanishing"), (parameter.name, parameter.dynamic)
        elif step is not None:
            assert parameter.dynamic == "held" and parameter.learns_from_step == step, (
                parameter.name, parameter.dynamic, parameter.learns_from_step, step, parameter.diagnosis)


@pytest.mark.parametrize("name", ["ComplexAdapter", "CounterFadeIn", "AttributeFadeIn"])
def test_look_ahead_steps_what_training_steps(name):
    """A complex zero-init learns from step 2, and so does a branch a counter fades in: the look-ahead
    steps complex weights and starts from what the first forward wrote (then puts it back)."""
    torch.manual_seed(0)
    report, truth = checked(globals()[name]())
    assert any(step and step > 1 for step in truth.values()) and None not in truth.values()
    held_as_truth(report, truth)
    assert report.ok and report.exit_code == 0


def test_still_reviving_at_the_limit_is_unconfirmed():
    """Four zero-inits in a chain: the first layer learns from step 5, past the look-ahead's limit;
    it is not verified (exit 2), never ``zero``."""
    torch.manual_seed(0)
    report, truth = checked(ZeroChain4())
    assert truth["first.weight"] == 5
    late = {name for name, step in truth.items() if step and step > 4}
    for parameter in report.parameters:
        if parameter.name in late:
            assert parameter.dynamic == "unconfirmed" and not parameter.problem, (parameter.name, parameter.dynamic)
            assert "not verified" in parameter.diagnosis
    held_as_truth(report, {name: step for name, step in truth.items() if name not in late})
    assert not report.problems and report.exit_code == 2


def test_nudge_does_not_revive_an_exact_zero():
    """A LayerNorm over a single feature passes back nothing in exact arithmetic: what feeds it never
    learns (float64 Adam steps), though float32 round-off lifts its gradient from exactly 0 after a step."""
    torch.manual_seed(0)
    model = SingleFeatureNorm()
    inputs = inputs_of(model)
    exact = real_steps_in_float64(model, inputs)
    report = fxflow.check(model, inputs, loss_fn=projection_loss)
    dead = {name for name, step in exact.items() if step is None}
    assert {"inp.weight", "inp.bias", "norm.weight"} <= dead
    assert {p.name for p in report.problems} == dead
    for parameter in report.parameters:
        if parameter.name in dead:
            assert parameter.dynamic == "zero", (parameter.name, parameter.dynamic)
        elif exact[parameter.name] > 1:
            assert parameter.dynamic == "held" and parameter.learns_from_step == exact[parameter.name]
    assert report.exit_code == 1


def test_trainer_callbacks_leave_a_chain_still_reviving_unconfirmed():
    """The trainer callbacks wait at most four real steps: a first layer that a chain of four zero-inits
    holds until step 5 is not verified when the wait ends, never ``zero``."""
    from fxflow.integrations.first_step import FirstStepCheck

    torch.manual_seed(0)
    model = ZeroChain4()
    inputs = inputs_of(model)
    truth = real_first_steps(model, inputs)
    callback = FirstStepCheck(on_problem="warn", show=False)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(TRUTH_STEPS):
        if callback.done:
            break
        callback.begin(model, optimizer)
        optimizer.zero_grad(set_to_none=True)
        projection_loss(model(*inputs)).backward()
        callback.end()
        optimizer.step()
    report = callback.report
    assert truth["first.weight"] == 5 and truth["chain.0.weight"] == 4
    assert report.parameter("first.weight").dynamic == "unconfirmed"
    assert report.parameter("chain.0.weight").dynamic == "held"
    assert report.parameter("chain.0.weight").learns_from_step == 4
    assert not report.problems
