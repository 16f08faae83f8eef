"""Beyond the first step (issue 20): per parameter, in how many of N steps a non-zero gradient
arrived, against plain backwards run step by step; ``intermittent`` for some, a failure for none,
and DDP's ``find_unused_parameters`` advice from the counts."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fxflow
from gradtruth import real_gradients


class Router(nn.Module):
    """Top-1 routing over three experts: expert 2 is never picked, expert 1 only for tokens whose
    first feature is positive, expert 0 for the others."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(4, 3)
        self.experts = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        with torch.no_grad():
            self.gate.weight.zero_()
            self.gate.weight[1, 0] = 10.0
            self.gate.bias.copy_(torch.tensor([0.0, 0.0, -100.0]))

    def forward(self, x):
        probs = torch.softmax(self.gate(x), -1)
        choice = probs.argmax(-1)
        out = torch.zeros_like(x)
        for k, expert in enumerate(self.experts):
            picked = choice == k
            if picked.any():
                out[picked] = expert(x[picked]) * probs[picked, k:k + 1]
        return out


def router_batches() -> list[tuple[torch.Tensor]]:
    """Four batches: expert 1 gets tokens in batches 2 and 4 only."""
    torch.manual_seed(0)
    batches = []
    for step in range(4):
        x = torch.randn(6, 4)
        x[:, 0] = -x[:, 0].abs() - 0.1  # every token to expert 0 ...
        if step in (1, 3):
            x[0, 0] = 1.0  # ... but one, to expert 1
        batches.append((x,))
    return batches


class LongSequenceBranch(nn.Module):
    """A branch taken only for sequences longer than 8."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.long = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, ids):
        h = self.embed(ids)
        if ids.shape[1] > 8:
            h = h + self.long(h)
        return self.head(h)


def truth_counts(model: nn.Module, batches) -> dict[str, int]:
    """Per parameter, the steps in which a plain backward gave a non-zero gradient."""
    counts = {name: 0 for name, _ in model.named_parameters()}
    for batch in batches:
        for name, grad in real_gradients(model, batch).items():
            counts[name] += grad is not None and bool(grad.ne(0).any())
    return counts


def test_a_router_that_never_picks_one_expert_and_another_only_sometimes():
    model, batches = Router(), router_batches()
    truth = truth_counts(model, batches)
    assert truth["experts.2.weight"] == 0 and truth["experts.1.weight"] == 2 and truth["experts.0.weight"] == 4
    report = fxflow.check(model, batches[0], steps=4, batches=batches[1:])
    assert report.steps == 4 and report.to_dict()["steps"] == 4
    counts = {p.name: p.steps_with_gradient for p in report.parameters}
    assert counts == truth
    expert1 = report.parameter("experts.1.weight")
    assert expert1.dynamic == "intermittent" and expert1.missed_steps == [1, 3] and not expert1.problem
    assert report.parameter("experts.2.weight").problem  # dead on every step
    assert report.exit_code == 1
    advice = next(note for note in report.notes if note.startswith("DDP:"))
    assert "find_unused_parameters=True is required" in advice and "experts.2.weight" in advice
    data = report.to_dict()["parameters"]
    assert {p["name"]: p["steps_with_gradient"] for p in data} == truth


def test_a_branch_taken_only_for_long_sequences():
    model = LongSequenceBranch()
    torch.manual_seed(0)
    batches = [(torch.randint(0, 20, (2, length)),) for length in (6, 12, 6)]
    truth = truth_counts(model, batches)
    assert truth["long.weight"] == 1 and truth["head.weight"] == 3
    report = fxflow.check(model, batches[0], steps=3, batches=batches[1:])
    assert {p.name: p.steps_with_gradient for p in report.parameters} == truth
    long = report.parameter("long.weight")
    assert long.dynamic == "intermittent" and long.missed_steps == [1, 3]
    assert report.ok  # intermittent does not fail the check


def test_every_step_reaching_everything_says_ddp_needs_no_unused_search():
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    report = fxflow.check(model, torch.randn(3, 4), steps=3)
    assert report.ok and {p.steps_with_gradient for p in report.parameters} == {3}
    assert "DDP: every trainable parameter got a gradient on every step: find_unused_parameters=False is safe" in report.notes


class Curriculum(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.aux = nn.Linear(4, 1)

    def forward(self, x):
        h = torch.relu(self.body(x))
        return h, self.aux(h)


def test_watch_counts_the_steps_of_a_training_loop_with_a_loss_term_switched_on_at_step_3():
    torch.manual_seed(0)
    model = Curriculum()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [torch.randn(5, 4) for _ in range(5)]
    plain = {name: 0 for name, _ in model.named_parameters()}
    reference = Curriculum()
    reference.load_state_dict(model.state_dict())
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.01)

    def step(net, opt, x, index, counts=None):
        opt.zero_grad()
        h, aux = net(x)
        loss = h.pow(2).mean() + (aux.pow(2).mean() if index >= 2 else 0)  # the aux term from step 3 on
        loss.backward()
        if counts is not None:
            for name, p in net.named_parameters():
                counts[name] += p.grad is not None and bool(p.grad.ne(0).any())
        opt.step()

    for index, x in enumerate(data):
        step(reference, reference_optimizer, x, index, plain)
    with fxflow.watch(model, steps=5) as watched:
        for index, x in enumerate(data):
            step(model, optimizer, x, index)
    report = watched.report
    assert report.steps == 5
    assert {p.name: p.steps_with_gradient for p in report.parameters} == plain == {
        "body.weight": 5, "body.bias": 5, "aux.weight": 3, "aux.bias": 3}
    assert report.parameter("aux.weight").missed_steps == [1, 2]
    assert report.parameter("aux.weight").dynamic == "intermittent"
    for p, q in zip(model.parameters(), reference.parameters()):  # training went on exactly as without fxflow
        assert torch.equal(p, q)


def test_check_steps_from_the_command_line_with_example_batches(run_fxflow, write_model, tmp_path):
    path = write_model(tmp_path, """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(20, 8)
                self.long = nn.Linear(8, 8)
                self.head = nn.Linear(8, 2)

            def forward(self, ids):
                h = self.embed(ids)
                if ids.shape[1] > 8:
                    h = h + self.long(h)
                return self.head(h)

        def example_batches():
            for length in (6, 12, 6):
                yield (torch.randint(0, 20, (2, length)),)
    """)
    code, out, err = run_fxflow("check", f"{path}:Net", "--steps", "3", "--json")
    assert code == 0, err
    import json

    report = json.loads(out)
    assert report["steps"] == 3
    assert {p["name"]: p["steps_with_gradient"] for p in report["parameters"]}["long.weight"] == 1
    code, out, err = run_fxflow("check", f"{path}:Net", "--steps", "0")
    assert code == 2 and "--steps must be at least 1" in err


def test_intermittent_words_agree_with_the_table(run_fxflow):
    """Experts skipped on some steps: the paragraph says what the table says (intermittent), not the
    first step's "unused"; the DDP advice is hypothetical when no DDP wrapper is in use."""
    code, out, _ = run_fxflow("check", "tests/models/skipping_moe.py:MoE", "--steps", "6", "--input-size", "3,8")
    assert code == 1
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith("experts.")}
    intermittent = sorted(name for name, cells in rows.items() if "intermittent" in cells)
    assert intermittent
    text = out.replace("\n", " ")
    assert "are used on some steps only: a gradient on" in text
    assert "are unused: a gradient on" not in text
    assert "buckets" not in out and "under DDP without find_unused_parameters=True" in out.replace("\n", " ")
