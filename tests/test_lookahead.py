"""Red means broken: a designed zero-init that learns from step 2 or 3 is no problem, a look-alike whose
exact zero never lifts is one, and each fails with exactly its parameters.

The truth is a few real Adam steps on a copy of the same model with the same loss, written with plain
torch, in float64 (tests/test_training_lookahead.py): the step from which each parameter gets a
gradient above round-off, or never. A conv bias before a train-mode BatchNorm gets only round-off in
float32 (the batch mean takes it away): in exact arithmetic it never learns.
"""
from __future__ import annotations

import copy

import pytest
import torch

import fxflow
from models import zero_init
from test_training_lookahead import real_first_steps, real_steps_in_float64

TRUTH_STEPS = 5  # real optimizer steps: enough for a chain of two zero-inits (learns from step 3)


def projection_loss(outputs: torch.Tensor) -> torch.Tensor:
    """A fixed random projection of the output: every output element matters, none is special."""
    weights = torch.randn(outputs.shape, generator=torch.Generator().manual_seed(1))
    return (outputs * weights).sum()


def first_steps_with_gradient(model: torch.nn.Module, inputs: tuple, steps: int = TRUTH_STEPS) -> dict[str, int | None]:
    """{trainable parameter: first real Adam step (1-based) with a non-zero gradient, or None}."""
    return real_first_steps(model, inputs, steps, loss_fn=projection_loss)


def inputs_of(model: torch.nn.Module) -> tuple:
    torch.manual_seed(0)
    return tuple(model.example_inputs()) if hasattr(model, "example_inputs") else (torch.randn(4, 8),)


DESIGNED = ["DiT", "DiTZeroFinal", "ReZero", "ZeroConv", "ZeroChain", "LoRANet", "ZeroReadout"]
LOOK_ALIKES = ["DetachedGate", "BufferGate", "AuxZero", "DeadReLU", "LoRAFrozenB", "LoRAAlpha0", "ZeroTimesZero"]


def check_against_truth(model: torch.nn.Module, inputs: tuple) -> tuple[fxflow.Report, dict[str, int | None]]:
    truth = real_steps_in_float64(model, inputs, steps=TRUTH_STEPS)
    before = copy.deepcopy(model.state_dict())
    report = fxflow.check(model, inputs, loss_fn=projection_loss)
    after = model.state_dict()
    assert all(torch.equal(before[key], after[key]) for key in before), "the check changed the model"
    for parameter in report.parameters:
        if parameter.name not in truth:
            continue
        learns = truth[parameter.name]
        if learns is None:
            assert parameter.problem, (parameter.name, parameter.dynamic, parameter.diagnosis)
        elif learns == 1:
            assert parameter.dynamic in ("ok", "vanishing"), (parameter.name, parameter.dynamic)
        else:
            assert parameter.dynamic == "held" and parameter.learns_from_step == learns, (
                parameter.name, parameter.dynamic, parameter.learns_from_step, learns)
            assert not parameter.problem
    never = {name for name, step in truth.items() if step is None}
    assert {p.name for p in report.problems} == never
    assert report.exit_code == (1 if never else 0)
    return report, truth


@pytest.mark.parametrize("name", DESIGNED)
def test_designed_zero_init_passes(name):
    torch.manual_seed(0)
    model = getattr(zero_init, name)()
    report, truth = check_against_truth(model, inputs_of(model))
    assert report.ok and any(step and step > 1 for step in truth.values())
    held = [p for p in report.parameters if p.dynamic == "held"]
    assert held and all(p.held_by for p in held if p.learns_from_step == 2)
    assert all(f"learns from step {p.learns_from_step}" in p.diagnosis for p in held)


@pytest.mark.parametrize("name", LOOK_ALIKES)
def test_look_alike_fails_with_exactly_its_parameters(name):
    torch.manual_seed(0)
    model = getattr(zero_init, name)()
    report, truth = check_against_truth(model, inputs_of(model))
    assert not report.ok and any(step is None for step in truth.values())
    for parameter in report.problems:
        if parameter.dynamic == "zero":  # never learns; a factor of 0.0 is a zero by construction, named at its line
            assert "never learns" in (parameter.diagnosis or "") or (parameter.static == "zero" and parameter.cut_by)


def test_holder_is_named():
    torch.manual_seed(0)
    report = fxflow.check(zero_init.ReZero(), (torch.randn(4, 8),))
    parameter = report.parameter("f.0.weight")
    assert parameter.held_by == ["alpha"] and parameter.learns_from_step == 2
    assert "alpha (all zeros at init) holds it" in parameter.diagnosis
    data = report.to_dict()["parameters"]
    row = next(p for p in data if p["name"] == "f.0.weight")
    assert row["dynamic"] == "held" and row["learns_from_step"] == 2 and row["held_by"] == ["alpha"]


def test_a_dead_unit_is_named_as_one():
    torch.manual_seed(0)
    report = fxflow.check(zero_init.DeadReLU(), (torch.randn(4, 8),))
    diagnosis = report.parameter("a.weight").diagnosis
    assert report.parameter("a.weight").dynamic == "zero" and "a dead unit" in diagnosis and "never learns" in diagnosis


def test_constant_zero_is_not_blamed_on_the_batch():
    torch.manual_seed(0)
    report = fxflow.check(zero_init.BufferGate(), (torch.randn(4, 8),))
    diagnosis = report.parameter("f.weight").diagnosis
    assert "on this batch" not in diagnosis and "no optimizer step changes" in diagnosis


def test_cli_exit_codes(run_fxflow):
    code, out, _ = run_fxflow("check", "tests/models/zero_init.py:ReZero")
    assert code == 0, out
    assert "held" in out
    code, out, _ = run_fxflow("check", "tests/models/zero_init.py:BufferGate")
    assert code == 1, out


def test_assert_gradients_flow_passes_lora():
    torch.manual_seed(0)
    fxflow.assert_gradients_flow(zero_init.LoRANet(), torch.randn(4, 8))
    with pytest.raises(AssertionError):
        fxflow.assert_gradients_flow(zero_init.LoRAFrozenB(), torch.randn(4, 8))


def test_peft_lora_on_gpt2():
    """Real peft LoRA on a tiny GPT-2: every lora_A gets exactly 0 on step 1, and learns from step 2."""
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    base = transformers.GPT2LMHeadModel(config)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules=["c_attn"], lora_dropout=0.0,
                                                       fan_in_fan_out=True))
    ids = torch.randint(0, 64, (2, 8))
    report = fxflow.check(model, {"input_ids": ids, "labels": ids})
    assert report.exit_code == 0, report.table()
    lora_a = [p for p in report.parameters if "lora_A" in p.name]
    assert lora_a and all(p.dynamic == "held" and p.learns_from_step == 2 for p in lora_a)
    assert all(any("lora_B" in h for h in p.held_by) for p in lora_a)
    # the truth: two real optimizer steps of the same model and loss
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-3)
    for step in (1, 2):
        optimizer.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        zero = [name for name, p in model.named_parameters() if "lora_A" in name and not p.grad.count_nonzero()]
        assert bool(zero) == (step == 1)
        optimizer.step()


def test_watch_one_step_is_unconfirmed_and_two_steps_held():
    torch.manual_seed(0)
    model = zero_init.LoRANet()
    x = torch.randn(4, 8)
    with fxflow.watch(model) as w:
        projection_loss(model(x)).backward()
    assert {p.name for p in w.report.parameters if p.dynamic == "unconfirmed"} == {"l1.A", "l2.A"}
    assert not w.report.ok and not w.report.problems and w.report.status == "not verified"
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    with fxflow.watch(model, steps=3) as w:
        for _ in range(3):
            optimizer.zero_grad()
            projection_loss(model(x)).backward()
            optimizer.step()
    report = w.report
    assert report.ok, report.table()
    assert all(report.parameter(n).dynamic == "held" and report.parameter(n).learns_from_step == 2
               for n in ("l1.A", "l2.A"))
    assert not any("find_unused_parameters=True" in note for note in report.notes)  # DDP reduces zeros too


def test_steps_on_lora_give_no_ddp_advice():
    torch.manual_seed(0)
    report = fxflow.check(zero_init.LoRANet(), torch.randn(4, 8), steps=3)
    assert report.ok, report.table()
    ddp = [note for note in report.notes if note.startswith("DDP")]
    assert ddp and all("find_unused_parameters=True" not in note for note in ddp), ddp


def test_diffusers_controlnet_learns_from_step_three():
    """diffusers' ControlNet: zero convolutions behind the control branch, and a zero ``conv_out`` in the
    conditioning embedding behind them: parameters learn from steps 1, 2 and 3, none never."""
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    model = diffusers.ControlNetModel(
        block_out_channels=(8, 16), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), layers_per_block=1,
        cross_attention_dim=8, attention_head_dim=2, norm_num_groups=4, conditioning_embedding_out_channels=(4, 8),
        in_channels=4)
    inputs = dict(sample=torch.randn(1, 4, 16, 16), timestep=torch.tensor([10]),
                  encoder_hidden_states=torch.randn(1, 3, 8), controlnet_cond=torch.randn(1, 3, 32, 32))

    def residual_loss(outputs) -> torch.Tensor:
        residuals = [*outputs.down_block_res_samples, outputs.mid_block_res_sample]
        return sum(projection_loss(r) for r in residuals)

    first: dict[str, int | None] = {}
    twin = copy.deepcopy(model)
    optimizer = torch.optim.Adam(twin.parameters(), lr=1e-3)
    for step in (1, 2, 3):
        optimizer.zero_grad(set_to_none=True)
        residual_loss(twin(**inputs)).backward()
        for name, parameter in twin.named_parameters():
            if name not in first or first[name] is None:
                first[name] = step if parameter.grad is not None and bool(parameter.grad.count_nonzero()) else None
        optimizer.step()
    report = fxflow.check(model, inputs, loss_fn=residual_loss)
    assert report.exit_code == 0, report.summary()
    assert set(first.values()) == {1, 2, 3}
    for parameter in report.parameters:
        if first[parameter.name] == 1:
            assert parameter.dynamic in ("ok", "vanishing"), parameter.name
        else:
            assert (parameter.dynamic, parameter.learns_from_step) == ("held", first[parameter.name]), parameter.name
    conv_out = report.parameter("controlnet_cond_embedding.conv_out.weight")
    assert conv_out.learns_from_step == 2 and any("controlnet_down_blocks" in h for h in conv_out.held_by)


def test_with_an_optimizer_only_what_it_moves_is_stepped():
    """ReZero's α holds its branch at zero; an optimizer that leaves α out never moves it, so the branch
    never learns: the look-ahead must not step α either (the real SGD steps agree)."""
    model, x = zero_init.ReZero(), torch.randn(4, 8)
    branch = [name for name, _ in model.named_parameters() if name.startswith("f.")]
    assert fxflow.check(model, x).ok  # with every parameter optimized, the branch learns from step 2
    optimizer = torch.optim.SGD([p for name, p in model.named_parameters() if name != "alpha"], lr=0.1)
    report = fxflow.check(model, x, optimizer=optimizer)
    assert {p.name for p in report.problems} == {"alpha", *branch}
    assert all(report.parameter(name).dynamic == "zero" for name in branch)
    trained = copy.deepcopy(model)  # the truth: real steps of that optimizer leave the branch's gradient 0
    steps = torch.optim.SGD([p for name, p in trained.named_parameters() if name != "alpha"], lr=0.1)
    for _ in range(3):
        steps.zero_grad()
        trained(x).pow(2).mean().backward()
        steps.step()
    assert all(not p.grad.any() for name, p in trained.named_parameters() if name.startswith("f."))


def test_bn_zero_holds_and_its_biases_before_batch_norm_never_learn():
    """zero_init_residual: the zero BN weight holds the block, which learns from step 2; the conv biases
    before train-mode BatchNorm get round-off alone (zero in exact arithmetic), so they never learn."""
    torch.manual_seed(0)
    model = zero_init.BNZero()
    report, truth = check_against_truth(model, inputs_of(model))
    assert {name for name, step in truth.items() if step is None} == {"c1.bias", "c2.bias"}
    assert all("zero up to rounding" in p.diagnosis for p in report.problems)
