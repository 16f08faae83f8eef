"""GradientFlowCallback in a real Hugging Face Trainer run: tiny random GPT-2, in-memory data, CPU, 2 steps.

Every verdict is checked against a real forward/backward of an identical copy of the model on the
same batch; the planted cut must be named at its line, before the optimizer moves any weight.
"""
from __future__ import annotations

import copy
import os
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments  # noqa: E402
from transformers.modeling_outputs import CausalLMOutput  # noqa: E402

from fxflow.integrations.transformers import GradientFlowCallback, GradientFlowError, GradientFlowWarning  # noqa: E402
from gradtruth import line_of  # noqa: E402

EXAMPLES = 4  # one batch of all of them: the first step sees the whole data set, in any order
CUT_LINE = line_of(__file__, "self.lm_head(" + "hidden.detach())")  # split: not this line


class DetachedHead(GPT2LMHeadModel):
    """The planted bug: the head reads detached hidden states, so the transformer never learns."""

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        hidden = self.transformer(input_ids, attention_mask=attention_mask).last_hidden_state
        logits = self.lm_head(hidden.detach())
        loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size)
        return CausalLMOutput(loss=loss, logits=logits)


@pytest.fixture(scope="module")
def config() -> GPT2Config:
    # no dropout: the copy's backward must see the same function as the Trainer's
    return GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0, eos_token_id=0,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


@pytest.fixture(scope="module")
def data() -> list[dict[str, torch.Tensor]]:
    ids = torch.randint(0, 64, (EXAMPLES, 8), generator=torch.Generator().manual_seed(0))
    return [{"input_ids": row, "labels": row} for row in ids]


def make(cls: type, config: GPT2Config) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return cls(config)


def train(model, data, tmp_path, callback, max_steps: int = 2, max_grad_norm: float = 0.0) -> Trainer:
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=max_steps, per_device_train_batch_size=EXAMPLES,
                             max_grad_norm=max_grad_norm, report_to=[], use_cpu=True, save_strategy="no",
                             logging_strategy="no", disable_tqdm=True, learning_rate=1e-2)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    trainer.train()
    return trainer


def real_grad_norms(model, data) -> dict[str, float | None]:
    """One plain forward/backward of a copy on the whole data set: {name: grad norm, None when no grad}."""
    twin = copy.deepcopy(model).train()
    batch = torch.stack([example["input_ids"] for example in data])
    # the Trainer's loss: summed token losses over the number of labels in the batch
    twin(input_ids=batch, labels=batch, num_items_in_batch=torch.tensor(batch.numel())).loss.backward()
    return {name: None if p.grad is None else p.grad.norm().item() for name, p in twin.named_parameters()}


def test_healthy_run_reports_the_real_gradients_once(config, data, tmp_path, capsys):
    model = make(GPT2LMHeadModel, config)
    truth = real_grad_norms(model, data)
    callback = GradientFlowCallback()
    trainer = train(model, data, tmp_path, callback)
    report = callback.report
    assert trainer.state.global_step == 2 and report.ok
    assert [p.name for p in report.parameters] == [name for name, _ in model.named_parameters()]
    assert {p.name: p.grad_norm for p in report.parameters} == pytest.approx(truth, rel=1e-4)
    assert {p.static for p in report.parameters} == {"reachable"} and report.trace.method != "none"
    assert capsys.readouterr().out.count("fxflow check GPT2LMHeadModel") == 1


def test_planted_cut_raises_before_the_optimizer_step(config, data, tmp_path, capsys):
    model = make(DetachedHead, config)
    truth = real_grad_norms(model, data)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    callback = GradientFlowCallback(on_problem="raise")
    with pytest.raises(GradientFlowError, match="gradients do not reach every parameter of DetachedHead") as raised:
        train(model, data, tmp_path, callback, max_grad_norm=1.0)
    report = raised.value.report
    assert report is callback.report
    assert {p.name for p in report.problems} == {name for name, norm in truth.items() if norm is None}
    assert "transformer.h.0.attn.c_attn.weight" in {p.name for p in report.problems}
    assert report.parameter("transformer.wte.weight").dynamic == "ok"  # tied to the head: still learns
    assert {(s.op, s.source) for p in report.problems for s in p.cut_by} == \
        {("detach", f"tests/test_integrations_transformers.py:{CUT_LINE}")}
    assert any("max_grad_norm=1.0" in note for note in report.notes)
    assert all(torch.equal(before[name], p) for name, p in model.named_parameters())  # optimizer never stepped
    assert model.transformer.h[0].attn.c_attn._forward_pre_hooks == {} and model._forward_pre_hooks == {}
    assert capsys.readouterr().out.count("fxflow check DetachedHead") == 1


def test_warn_warns_once_and_training_goes_on(config, data, tmp_path, capsys):
    callback = GradientFlowCallback(on_problem="warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = train(make(DetachedHead, config), data, tmp_path, callback)
    ours = [w for w in caught if issubclass(w.category, GradientFlowWarning)]
    # everything but the embedding tied to the head
    assert len(ours) == 1 and "problem: 15 of 16 parameters will not learn: 15 cut" in str(ours[0].message)
    assert trainer.state.global_step == 2 and not callback.report.ok
    assert capsys.readouterr().out.count("fxflow check DetachedHead") == 1


# -- PEFT / LoRA: frozen base, trainable adapters --------------------------------------------
def lora(model: GPT2LMHeadModel, *targets: str):
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=2, target_modules=list(targets), task_type="CAUSAL_LM", fan_in_fan_out=True)
    return peft.get_peft_model(model, config)


def test_lora_names_are_the_peft_models_and_the_zero_lora_a_is_confirmed_on_step_two(config, data, tmp_path):
    model = lora(make(GPT2LMHeadModel, config), "c_attn")
    callback = GradientFlowCallback()
    train(model, data, tmp_path, callback)
    report = callback.report
    assert report.ok, report.table()
    assert [p.name for p in report.parameters] == [name for name, _ in model.named_parameters()]
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == {p.name for p in report.parameters if p.static != "frozen"}
    assert {p.name.rsplit(".", 3)[1] for p in report.parameters if p.name in trainable} == {"lora_A", "lora_B"}
    # the first step gave lora_A an exactly zero gradient (B starts at zero); the second step is reported
    note = next(note for note in report.notes if note.startswith("this is step 2"))
    assert "c_attn.lora_A.default.weight" in note
    lora_a = [p for p in report.parameters if "lora_A" in p.name]
    assert all(p.dynamic == "held" and p.learns_from_step == 2 for p in lora_a)
    assert all(p.grad_norm > 0 for p in report.parameters if p.name in trainable)


def test_lora_cut_fails_only_trainable_adapters(config, data, tmp_path):
    model = lora(make(DetachedHead, config), "c_attn", "lm_head")
    callback = GradientFlowCallback(on_problem="warn", show=False)
    with pytest.warns(GradientFlowWarning):
        train(model, data, tmp_path, callback)
    report = callback.report
    assert {p.name for p in report.problems} == {
        "base_model.model.transformer.h.0.attn.c_attn.lora_A.default.weight",
        "base_model.model.transformer.h.0.attn.c_attn.lora_B.default.weight"}
    assert {p.static for p in report.problems} == {"cut"}
    frozen = [p for p in report.parameters if p.static == "frozen"]
    assert frozen and all(p.dynamic == "missing" and not p.problem for p in frozen)


def test_steps_log_the_per_layer_norms_to_the_trainers_tensorboard(config, data, tmp_path, monkeypatch):
    """With ``report_to=["tensorboard"]``, the watched steps' per-layer gradient norms land in the
    Trainer's own TensorBoard run, one point per watched step at its global step."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logs = tmp_path / "runs"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(logs))
    model = make(GPT2LMHeadModel, config)
    callback = GradientFlowCallback(steps=3, show=False)
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=EXAMPLES,
                             report_to=["tensorboard"], use_cpu=True, save_strategy="no", logging_strategy="steps",
                             logging_steps=1, disable_tqdm=True, learning_rate=1e-2)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[callback]).train()
    events = EventAccumulator(str(logs))
    events.Reload()
    history = callback.report.gradient_history
    assert callback.report.steps == 3 and "transformer.h.0.attn.c_attn" in history
    for layer, records in history.items():
        logged = events.Scalars(f"train/fxflow/grad_mean/{layer}")
        assert [point.step for point in logged] == [1, 2, 3]
        assert [point.value for point in logged] == pytest.approx([r.mean for r in records], rel=1e-5)
        assert [p.value for p in events.Scalars(f"train/fxflow/grad_max/{layer}")] == pytest.approx(
            [r.max for r in records], rel=1e-5)
    # the optimizer moved the weights after steps 1 and 2; the report is made before it moves them after 3
    assert [p.step for p in events.Scalars("train/fxflow/update_ratio/transformer.h.0.attn.c_attn")] == [1, 2]
    assert [p.step for p in events.Scalars("train/loss")] == [1, 2, 3, 4]  # the Trainer's own log is untouched


class ReplaceHead(TrainerCallback):
    """A callback that replaces the head once the Trainer has built its optimizer (on_train_begin)."""

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        torch.manual_seed(1)
        model.lm_head = torch.nn.Linear(model.config.n_embd, model.config.vocab_size, bias=False)


class HeadBeforeTheStep(TrainerCallback):
    """Keeps the values of the (replaced) head and the embedding as the first step begins."""

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        self.value, self.wte = model.lm_head.weight.detach().clone(), model.transformer.wte.weight.detach().clone()


def test_a_head_replaced_after_the_trainer_built_its_optimizer_raises_before_the_step(config, data, tmp_path):
    plain = make(GPT2LMHeadModel, config)
    model = copy.deepcopy(plain)
    plain_trainer = Trainer(model=plain, args=TrainingArguments(
        output_dir=str(tmp_path / "plain"), max_steps=1, per_device_train_batch_size=EXAMPLES, report_to=[],
        use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True, learning_rate=1e-2),
        train_dataset=data, callbacks=[ReplaceHead()])
    head = HeadBeforeTheStep()
    plain_trainer.add_callback(head)
    plain_trainer.train()
    assert torch.equal(head.value, plain.lm_head.weight)  # the real step did not move the new head
    assert not torch.equal(head.wte, plain.transformer.wte.weight)  # ... and did move the rest
    callback = GradientFlowCallback(show=False)
    trainer = Trainer(model=model, args=TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=EXAMPLES, report_to=[], use_cpu=True,
        save_strategy="no", logging_strategy="no", disable_tqdm=True, learning_rate=1e-2),
        train_dataset=data, callbacks=[ReplaceHead(), callback])
    with pytest.raises(GradientFlowError) as raised:
        trainer.train()
    report = raised.value.report
    assert {p.name for p in report.problems} == {"lm_head.weight"}
    assert report.parameter("lm_head.weight").optimizer == "not optimized"
    reason = report.parameter("lm_head.weight").optimizer_reason
    assert "module lm_head (Linear) was created or replaced after the optimizer was built" in reason
    assert "group 0 of AdamW" in reason and "group 1 of AdamW" in reason  # the Trainer's decay / no-decay groups
    assert {p.optimizer for p in report.parameters if p.name != "lm_head.weight"} == {"updated"}


def test_a_healthy_trainer_run_checks_the_trainers_optimizer(config, data, tmp_path):
    callback = GradientFlowCallback(show=False)
    train(make(GPT2LMHeadModel, config), data, tmp_path, callback, max_steps=1)
    report = callback.report
    assert report.ok and {p.optimizer for p in report.parameters} == {"updated"}
    assert [g.weight_decay for g in report.optimizer.groups] == [0.0, 0.0] and report.optimizer.foreign == []
