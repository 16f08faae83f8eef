"""``fxflow.watch`` around every training loop people write, judged against the same loop in plain torch.

Each loop style runs twice on identical copies of a model: once plainly, where tensor hooks on the
parameters (plain torch, no fxflow) note which parameters each backward call gave a non-zero
gradient, and once inside ``fxflow.watch``. A healthy model must read ``ok``; the same model with a
planted ``.detach()`` must fail exactly the parameters the plain loop never gave a gradient; and the
verdicts must be those ``fxflow.check(..., loss_fn=<the loop's loss>, optimizer=...)`` gives.
Leaving the block leaves ``.grad`` exactly as the loop left it.
"""
from __future__ import annotations

import copy
from typing import Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fxflow

BATCHES = 4


class Net(nn.Module):
    def __init__(self, cut: bool = False) -> None:
        super().__init__()
        self.cut = cut
        self.first = nn.Linear(6, 16)
        self.middle = nn.Linear(16, 16)
        self.last = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.middle(torch.relu(self.first(x))))
        if self.cut:
            h = h.detach()  # the planted cut: first and middle never learn
        return self.last(h)


def data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)
    return torch.randn(8, 6, generator=generator), torch.randint(0, 3, (8,), generator=generator)


def loss_of(model: nn.Module, step: int) -> torch.Tensor:
    x, y = data(step)
    return F.cross_entropy(model(x), y)


# -- the loop styles: each takes (model, optimizer) and trains BATCHES batches ---------------------------

def tutorial(model, optimizer):
    for step in range(BATCHES):
        loss_of(model, step).backward()
        optimizer.step()
        optimizer.zero_grad()


def zero_grad_first(model, optimizer):
    for step in range(BATCHES):
        optimizer.zero_grad()
        loss_of(model, step).backward()
        optimizer.step()


def keep_zeros(model, optimizer):
    for step in range(BATCHES):
        loss_of(model, step).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)


def model_zero_grad(model, optimizer):
    for step in range(BATCHES):
        loss_of(model, step).backward()
        optimizer.step()
        model.zero_grad()


def grads_none_by_hand(model, optimizer):
    for step in range(BATCHES):
        loss_of(model, step).backward()
        optimizer.step()
        for parameter in model.parameters():
            parameter.grad = None


def accumulation(model, optimizer):
    for step in range(BATCHES):
        (loss_of(model, step) / 2).backward()  # two micro-batches feed each optimizer step
        if step % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()


def clipped(model, optimizer):
    for step in range(BATCHES):
        loss_of(model, step).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
        optimizer.step()
        optimizer.zero_grad()


def grad_scaler(model, optimizer):
    # an initial scale that overflows float32 gradients: the first steps are skipped, as a GradScaler's
    # calibration steps are, until the scale has come down
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 127, growth_interval=1000)
    for step in range(BATCHES + 10):
        scaler.scale(loss_of(model, step) * 100).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def lbfgs_closure(model, optimizer):
    for step in range(BATCHES):
        def closure():
            optimizer.zero_grad()
            loss = loss_of(model, step)
            loss.backward()
            return loss

        optimizer.step(closure)


def manual_sgd(model, optimizer):
    for step in range(BATCHES):
        loss_of(model, step).backward()
        with torch.no_grad():
            for parameter in model.parameters():
                if parameter.grad is not None:
                    parameter -= 0.1 * parameter.grad
                    parameter.grad = None


LOOPS: dict[str, Callable] = {loop.__name__: loop for loop in (
    tutorial, zero_grad_first, keep_zeros, model_zero_grad, grads_none_by_hand, accumulation, clipped,
    grad_scaler, lbfgs_closure, manual_sgd)}


def optimizer_for(loop: str, model: nn.Module) -> torch.optim.Optimizer:
    if loop == "lbfgs_closure":
        return torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=2)
    return torch.optim.SGD(model.parameters(), lr=0.1)


def plain_truth(model: nn.Module, loop: str) -> list[set[str]]:
    """Per backward call of the plain loop, the parameters it gave a non-zero finite gradient."""
    calls: list[set[str]] = []
    task: list[int] = []

    def hook(name):
        def noted(grad):
            current = torch._C._current_graph_task_id()
            if not task or task[-1] != current:
                task.append(current)
                calls.append(set())
            if bool(grad.ne(0).any()) and bool(torch.isfinite(grad).all()):
                calls[-1].add(name)
        return noted

    handles = [p.register_hook(hook(name)) for name, p in model.named_parameters()]
    LOOPS[loop](model, optimizer_for(loop, model))
    for handle in handles:
        handle.remove()
    return calls


def watched(model: nn.Module, loop: str, **options):
    optimizer = optimizer_for(loop, model)
    if options.pop("give_optimizer", False):
        options["optimizer"] = optimizer
    with fxflow.watch(model, static=False, **options) as w:
        LOOPS[loop](model, optimizer)
    return w


@pytest.mark.parametrize("options", [{}, {"steps": 3}, {"give_optimizer": True},
                                     {"steps": 3, "give_optimizer": True}],
                         ids=["plain", "steps", "optimizer", "steps+optimizer"])
@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize("cut", [False, True], ids=["healthy", "cut"])
def test_every_loop_style_is_judged_as_the_plain_loop_saw_it(loop, cut, options):
    torch.manual_seed(0)
    model = Net(cut=cut)
    twin = copy.deepcopy(model)
    truth = plain_truth(twin, loop)
    never = {name for name, _ in model.named_parameters()} - set().union(*truth)
    assert never == ({"first.weight", "first.bias", "middle.weight", "middle.bias"} if cut else set())

    w = watched(model, loop, **options)
    report = w.report
    failing = {p.name for p in report.problems}
    assert failing == never, report.notes
    assert report.ok == (not cut)
    for parameter in report.parameters:
        assert parameter.dynamic == ("missing" if parameter.name in never else "ok"), (parameter.name, report.notes)
    # the watched model trained exactly as the plain one did
    for (name, trained), (_, plain) in zip(model.named_parameters(), twin.named_parameters()):
        assert torch.equal(trained, plain), name


@pytest.mark.parametrize("loop", ["tutorial", "keep_zeros", "accumulation"])
def test_leaving_the_block_leaves_grad_as_the_loop_left_it(loop):
    torch.manual_seed(0)
    model = Net()
    twin = copy.deepcopy(model)
    for parameter, other in zip(model.parameters(), twin.parameters()):  # gradients from before the block
        parameter.grad = torch.ones_like(parameter)
        other.grad = torch.ones_like(other)
    LOOPS[loop](twin, optimizer_for(loop, twin))
    watched(model, loop)
    for parameter, other in zip(model.parameters(), twin.parameters()):
        assert (parameter.grad is None) == (other.grad is None)
        if parameter.grad is not None:
            assert torch.equal(parameter.grad, other.grad)


@pytest.mark.parametrize("loop", ["tutorial", "accumulation", "grad_scaler"])
def test_the_report_has_the_norms_of_the_first_backward_and_names_it(loop):
    torch.manual_seed(0)
    model = Net()
    twin = copy.deepcopy(model)
    norms: dict[str, float] = {}
    handles = [p.register_hook(lambda g, n=n: norms.setdefault(n, float(g.norm())) and None)
               for n, p in twin.named_parameters()]
    loss = loss_of(twin, 0) / (2 if loop == "accumulation" else 1)
    loss.backward()
    for handle in handles:
        handle.remove()
    report = watched(model, loop).report
    first_judged = 1
    if loop == "grad_scaler":  # the calibration steps are skipped steps, then the first real one is judged
        skipped = [note for note in report.notes if "skipped" in note]
        assert skipped, report.notes
        first_judged = None
    for parameter in report.parameters:
        if first_judged == 1:
            assert parameter.grad_norm == pytest.approx(norms[parameter.name], rel=1e-5)
        else:  # unscaled: a gradient's size, not 2**140 times it
            assert 1e-4 < parameter.grad_norm < 1e5
    assert any("backward call" in note and "judged" in note for note in report.notes), report.notes


class Adapter(nn.Module):
    """A LoRA-style adapter: ``B`` starts at zero, so ``A`` gets exactly zero until a step moves ``B``;
    ``gated`` multiplies the adapter by a zero buffer, so neither ever learns."""

    def __init__(self, gated: bool = False) -> None:
        super().__init__()
        self.base = nn.Linear(6, 3)
        self.A = nn.Linear(6, 4, bias=False)
        self.B = nn.Linear(4, 3, bias=False)
        nn.init.zeros_(self.B.weight)
        self.register_buffer("gate", torch.tensor(0.0 if gated else 1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.gate * self.B(self.A(x))


def first_nonzero_step(model: nn.Module, loop: str) -> dict[str, int | None]:
    """Plain torch: per parameter, the optimizer step (1-based) of the first backward call that gave it a
    non-zero finite gradient, counting the real steps that changed the parameters; None: never."""
    first: dict[str, int | None] = {name: None for name, _ in model.named_parameters()}
    values = [p.detach().clone() for p in model.parameters()]
    state = {"step": 1, "values": values}

    def hook(name):
        def noted(grad):
            now = [p.detach() for p in model.parameters()]
            if any(not torch.equal(a, b) for a, b in zip(state["values"], now)):  # an update since the last call
                state["step"] += 1
                state["values"] = [p.clone() for p in now]
            if first[name] is None and bool(grad.ne(0).any()) and bool(torch.isfinite(grad).all()):
                first[name] = state["step"]
        return noted

    handles = [p.register_hook(hook(name)) for name, p in model.named_parameters()]
    LOOPS[loop](model, optimizer_for(loop, model))
    for handle in handles:
        handle.remove()
    return first


@pytest.mark.parametrize("loop", ["tutorial", "zero_grad_first", "accumulation", "grad_scaler", "manual_sgd"])
@pytest.mark.parametrize("gated", [False, True], ids=["zero-init", "dead"])
def test_a_zero_init_is_held_and_a_dead_adapter_is_zero_as_real_steps_show(loop, gated):
    torch.manual_seed(0)
    model = Adapter(gated)
    truth = first_nonzero_step(copy.deepcopy(model), loop)
    report = watched(model, loop).report
    for parameter in report.parameters:
        learns = truth[parameter.name]
        if learns is None:
            assert parameter.dynamic == "zero" and parameter.problem, (parameter.name, report.notes)
        elif learns > 1 or parameter.name == "A.weight" and not gated:
            assert parameter.dynamic == "held" and parameter.learns_from_step == learns, (parameter.name, report.notes)
            assert not parameter.problem
        else:
            assert parameter.dynamic == "ok"
    assert {p.name for p in report.problems} == {name for name, step in truth.items() if step is None}


def test_held_agrees_with_fxflow_check_on_the_same_model_and_loss():
    torch.manual_seed(0)
    model = Adapter()
    twin = copy.deepcopy(model)
    x, y = data(0)
    checked = fxflow.check(twin, x, loss_fn=lambda out: F.cross_entropy(out, y),
                           optimizer=torch.optim.SGD(twin.parameters(), lr=0.1))
    watched_report = watched(model, "tutorial").report
    for parameter in watched_report.parameters:
        assert parameter.dynamic == checked.parameter(parameter.name).dynamic, parameter.name
    assert watched_report.parameter("A.weight").dynamic == "held"


def test_one_step_in_the_block_leaves_an_exact_zero_unconfirmed():
    torch.manual_seed(0)
    model = Adapter()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with fxflow.watch(model, static=False) as w:  # one backward, no optimizer step after it in the block
        loss_of(model, 0).backward()
    optimizer.step()
    assert w.report.parameter("A.weight").dynamic == "unconfirmed"
    assert w.report.status == "not verified"


def fuse_optimizer_into_backward(model: nn.Module) -> dict[nn.Parameter, torch.optim.Optimizer]:
    """The PyTorch tutorial's "optimizer step in backward" (torchtune's optimizer_in_bwd): each
    parameter is stepped, and its .grad freed, as soon as its gradient is accumulated."""
    optimizers = {p: torch.optim.Adam([p], lr=0.01) for p in model.parameters()}

    def step(parameter: torch.Tensor) -> None:
        optimizers[parameter].step()
        optimizers[parameter].zero_grad()

    for parameter in model.parameters():
        parameter.register_post_accumulate_grad_hook(step)
    return optimizers


@pytest.mark.parametrize("cut", [False, True], ids=["healthy", "cut"])
def test_an_optimizer_fused_into_backward_is_watched_as_it_trains(cut):
    torch.manual_seed(0)
    model = Net(cut=cut)
    twin = copy.deepcopy(model)
    fuse_optimizer_into_backward(twin)
    for step in range(3):
        loss_of(twin, step).backward()
    fuse_optimizer_into_backward(model)
    with fxflow.watch(model, static=False, steps=3) as w:
        for step in range(3):
            loss_of(model, step).backward()
    dry = {"first.weight", "first.bias", "middle.weight", "middle.bias"} if cut else set()
    assert {p.name for p in w.report.problems} == dry
    assert all(p.steps_with_gradient == (0 if p.name in dry else 3) for p in w.report.parameters)
    for (name, trained), (_, plain) in zip(model.named_parameters(), twin.named_parameters()):
        assert torch.equal(trained, plain), name  # trained exactly as without fxflow


def test_check_neither_steps_nor_misreads_an_optimizer_fused_into_backward():
    torch.manual_seed(0)
    model = Net()
    optimizers = fuse_optimizer_into_backward(model)
    before = copy.deepcopy(model.state_dict())
    report = fxflow.check(model, data(0)[0])
    assert report.ok and all(p.dynamic == "ok" for p in report.parameters)
    assert all(not optimizer.state for optimizer in optimizers.values())  # no optimizer state advanced
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    loss_of(model, 0).backward()  # the user's hooks still step after the check
    assert all(optimizer.state for optimizer in optimizers.values())


@pytest.mark.parametrize("cut", [False, True], ids=["healthy", "cut"])
def test_accelerates_prepare_and_backward(cut):
    accelerate = pytest.importorskip("accelerate")
    torch.manual_seed(0)
    accelerator = accelerate.Accelerator(cpu=True)
    model = Net(cut=cut)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with fxflow.watch(model, static=False, steps=3, optimizer=optimizer) as w:
        for step in range(3):
            accelerator.backward(loss_of(model, step))
            optimizer.step()
            optimizer.zero_grad()
    dry = {"first.weight", "first.bias", "middle.weight", "middle.bias"} if cut else set()
    assert {p.name for p in w.report.problems} == dry
    assert all(p.dynamic == ("missing" if p.name in dry else "ok") for p in w.report.parameters)
    assert all(p.optimizer == "updated" for p in w.report.parameters if p.name not in dry)


class FadedAttention(nn.Module):
    """Self-attention whose output is scaled down 1e6 times: its in-projection (owned by the attention
    module) and its out-projection (a child module) both vanish next to the head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(6, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x).unsqueeze(1)
        h = h + 1e-6 * self.attn(h, h, h, need_weights=False)[0]
        return self.head(h.squeeze(1))


def test_one_flag_per_fading_module_and_none_on_what_a_zero_init_explains():
    torch.manual_seed(0)
    model = FadedAttention()
    report = watched(model, "tutorial", steps=3).report
    flagged = [(flag.layer, flag.kind) for flag in report.gradient_flags]
    assert flagged == [("attn", "vanishing")]  # the healthy layers are not "exploding" next to the faded ones

    torch.manual_seed(0)
    adapter = Adapter()
    report = watched(adapter, "tutorial", steps=3).report
    assert report.parameter("A.weight").dynamic == "held"
    assert not [flag for flag in report.gradient_flags if flag.layer == "A" and flag.since == 1], report.gradient_flags


class GAN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.generator = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6))
        self.discriminator = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)


def test_a_gan_with_two_optimizers_learns_on_alternate_backward_calls():
    """The discriminator's backward (on a detached fake) comes first and reaches no generator weight;
    the generator's comes second. Plain torch: both learn every iteration. fxflow: nothing fails."""
    torch.manual_seed(0)
    gan = GAN()
    g_opt = torch.optim.Adam(gan.generator.parameters(), lr=1e-3)
    d_opt = torch.optim.Adam(gan.discriminator.parameters(), lr=1e-3)
    real = torch.randn(8, 6)
    with fxflow.watch(gan, static=False, optimizer=[g_opt, d_opt]) as w:
        for _ in range(2):
            fake = gan(torch.randn(8, 4))
            d_loss = F.softplus(-gan.discriminator(real)).mean() + F.softplus(gan.discriminator(fake.detach())).mean()
            d_loss.backward()
            d_opt.step()
            d_opt.zero_grad()
            g_loss = F.softplus(-gan.discriminator(fake)).mean()
            g_loss.backward()
            g_opt.step()
            g_opt.zero_grad()
            d_opt.zero_grad()
    report = w.report
    assert report.ok, [(p.name, p.dynamic) for p in report.parameters]
    assert {p.name for p in report.parameters if p.dynamic == "intermittent"} == \
        {name for name, _ in gan.generator.named_parameters(prefix="generator")}


@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize("cut", [False, True], ids=["healthy", "cut"])
def test_every_loop_style_gives_the_verdicts_check_gives(loop, cut):
    torch.manual_seed(0)
    model = Net(cut=cut)
    twin = copy.deepcopy(model)
    x, y = data(0)
    checked = fxflow.check(twin, x, loss_fn=lambda out: F.cross_entropy(out, y), optimizer=optimizer_for(loop, twin))
    report = watched(model, loop).report
    assert {p.name: p.dynamic for p in report.parameters} == {p.name: p.dynamic for p in checked.parameters}
    assert report.ok == checked.ok
