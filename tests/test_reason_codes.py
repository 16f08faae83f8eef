"""The words of a row are made from its codes on the presenting side (issue 39, item 5): the stages store
what they observed (reason codes and their facts), never sentences, so the JSON carries the codes, a
report read back from JSON says the same words, and the text is what it was.

Each model's verdicts are the real backward's (the suites of the models named test them against plain
torch); here the rows' codes, facts and words are checked, and that no stage below present/ builds a
sentence for a row.
"""
from __future__ import annotations

import ast
import copy
import json
from pathlib import Path

import torch
from torch import nn

import fxflow
from fxflow.present.reasons import reason_words
from test_nonfinite import LogOfANegative
from test_randomness import LayerDrop
from test_reconcile import SwitchesBranch
from test_steps import LongSequenceBranch
from test_threads import Double

PACKAGE = Path(fxflow.__file__).parent
# A row's words: stored prose in them is a sentence built too early. ``diagnosis`` and ``optimizer_reason``
# are the words of the row's codes: their setters replace the codes with words, so any value stored is words.
ROW_WORDS = {"diagnosis", "finding", "optimizer_reason"}
WORDS_OF_CODES = {"diagnosis", "optimizer_reason"}
STAGE_WORDS = {"detail"}  # the graph walk's words for a row's finding (now a StaticReason and its facts)


def _prose(node: ast.AST) -> bool:
    """An expression that builds a sentence: a string literal with a space, an f-string, or a
    concatenation / conditional / ``or`` holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and " " in node.value
    if isinstance(node, ast.JoinedStr):
        return True
    return any(_prose(child) for child in ast.iter_child_nodes(node)
               if isinstance(node, (ast.BinOp, ast.IfExp, ast.BoolOp, ast.Tuple)))


def _sentence_builders(path: Path) -> list[str]:
    """``file:line`` of each place that stores words on a row: ``x.diagnosis = ...`` or ``x.optimizer_reason
    = ...`` (whatever the value: the setter replaces the codes with prose), ``x.finding = <prose>``,
    ``finding=<prose>``, and the graph walk's ``detail=<prose>``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                values = node.value.elts if isinstance(node.value, ast.Tuple) and isinstance(target, ast.Tuple) \
                    else [node.value] * len(names)
                targets += list(zip(names, values))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            targets.append((node.target, node.value))
        for target, value in targets:
            if isinstance(target, ast.Attribute) and target.attr in ROW_WORDS:
                if target.attr in WORDS_OF_CODES or _prose(value):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
        if isinstance(node, ast.keyword) and node.arg in ROW_WORDS | STAGE_WORDS and _prose(node.value):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.value.lineno}")
    return found


def test_no_stage_below_the_presenters_stores_words_on_a_row():
    """reconcile/, dynamic/ and the rest store codes and facts; present/ (and the data model's own
    setters, kept for callers) alone turn them into words: the row's diagnosis and its optimizer reason."""
    builders = [where for path in sorted(PACKAGE.rglob("*.py"))
                if "present" not in path.relative_to(PACKAGE).parts[:1] and path.name != "report.py"
                for where in _sentence_builders(path)]
    assert builders == [], builders


def _rows(report: fxflow.Report) -> dict[str, fxflow.report.ParameterReport]:
    return {p.name: p for p in report.parameters}


def _same_after_json(report: fxflow.Report) -> None:
    """The JSON carries codes and facts; the words read back are the words written, the codes too."""
    data = json.loads(report.to_json())
    again = fxflow.Report.from_dict(data)
    for row in report.parameters:
        back = again.parameter(row.name)
        assert (back.diagnosis, back.reasons, back.facts) == (row.diagnosis, row.reasons, row.facts), row.name
        assert (back.optimizer_reason, back.optimizer_reasons) == (row.optimizer_reason, row.optimizer_reasons)
        assert back.finding == row.finding, row.name
    assert again.table() == report.table()


def test_another_draw_says_its_seed_from_codes_and_facts():
    for seed in range(6):  # a seed on which layer drop skipped a block
        torch.manual_seed(seed)
        checked = LayerDrop().train()
        report = fxflow.check(checked, torch.randn(4, 8))
        dropped = [p for p in report.parameters if p.dynamic == "intermittent"]
        if dropped:
            break
    row = dropped[0]
    assert row.reasons == ["other-draw"] and row.finding is None
    assert row.facts["first"] == "missing" and isinstance(row.facts["seed"], int)
    seed = row.facts["seed"]
    assert row.diagnosis == (
        f"no gradient with this draw of the model's random numbers (what {row.random_ops[0]} drew), a gradient "
        f"with another (the generators seeded with {seed}: `torch.manual_seed({seed})`, `random.seed({seed})` right "
        "before the forward): the model's own randomness decides, so it learns on some steps only")
    # the words' recipe replays that draw in plain torch: the skipped block gets a gradient
    x = torch.randn(4, 8)
    torch.manual_seed(seed)
    checked(x).sum().backward()  # layer drop's draws come first in the forward
    grad = dict(checked.named_parameters())[row.name].grad
    assert grad is not None and grad.any()
    assert row.diagnosis == reason_words(row)  # nothing but the codes' words
    _same_after_json(report)


def test_many_steps_say_the_steps_missed_from_codes():
    torch.manual_seed(0)
    batches = [(torch.randint(0, 20, (2, length)),) for length in (6, 12, 6)]
    report = fxflow.check(LongSequenceBranch(), batches[0], steps=3, batches=batches[1:])
    row = report.parameter("long.weight")
    assert row.reasons == ["some-steps-none"] and row.finding is None
    assert row.diagnosis == ("a gradient on 1 of 3 steps; none on steps 1, 3: under DDP this needs "
                             "find_unused_parameters=True")
    _same_after_json(report)


def test_a_disagreement_is_a_code():
    report = fxflow.check(SwitchesBranch(), torch.randn(2, 3), capture_methods=["symbolic_trace"])
    rows = _rows(report)
    assert rows["a.weight"].reasons == ["gradient-off-trace"] and rows["b.weight"].reasons == ["no-gradient-at-runtime"]
    assert rows["a.weight"].diagnosis.startswith("no gradient path in the traced graph, yet the real backward")
    assert rows["b.weight"].diagnosis.startswith("statically reachable, no gradient at runtime")
    _same_after_json(report)


def test_where_a_nan_was_born_is_a_fact():
    torch.manual_seed(0)
    report = fxflow.check(LogOfANegative(), torch.randn(4, 10))
    row = report.parameter("out.weight")
    assert row.dynamic == "nonfinite" and row.reasons == ["nonfinite-born"]
    assert row.facts["born"]["op"] == "log" and row.facts["born"]["phase"] == "forward"
    assert row.diagnosis == (f"the gradient contains NaN or inf, first made by log @ {row.facts['born']['where']} "
                             "in the forward")
    _same_after_json(report)


class DeadBesideDropout(nn.Module):
    """A layer whose every ReLU unit is off (bias -100), its output beside a dropout: the graph ties its
    gradient to what dropout drew, and no other draw changes it."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)
        with torch.no_grad():
            self.a.bias.fill_(-100.0)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) + nn.functional.dropout(self.b(x), 0.1)


def test_the_randomness_sentence_says_what_the_other_draws_showed():
    """The first step's zero is computed from what dropout drew; the other draws made gave it none either:
    the reason says so, not that another seed may give another verdict."""
    torch.manual_seed(0)
    model, x = DeadBesideDropout().train(), torch.randn(2, 3)
    for seed in range(8):  # the truth: no draw of dropout gives the dead layer a gradient
        torch.manual_seed(seed)
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()
        assert not model.a.weight.grad.any()
    torch.manual_seed(0)
    report = fxflow.check(model, x)
    row = report.parameter("a.weight")
    assert row.dynamic == "zero" and row.reasons[0] == "randomness" and row.facts["redraws"] >= 4
    assert (f"yet none of {row.facts['redraws']} other draws of the model's random numbers gave it a non-zero "
            "gradient") in row.diagnosis
    assert "may give another verdict" not in row.diagnosis
    _same_after_json(report)


def _moved_by_real_steps(model: nn.Module, x: torch.Tensor, optimizer: torch.optim.Optimizer, steps: int = 2) -> set[str]:
    """Real steps in plain torch on copies: the parameters ``optimizer.step()`` moved."""
    model, optimizer = copy.deepcopy((model, optimizer))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    for _ in range(steps):
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()
    return {name for name, p in model.named_parameters() if not torch.equal(before[name], p)}


def test_a_parameter_in_no_group_is_a_code_with_its_facts():
    """The optimizer's reason is a code and facts on the row; the words are made from them, the same as
    before, and survive the JSON; a JSON of words alone (an older fxflow's) reads back as those words."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)), torch.randn(4, 8)
    optimizer = torch.optim.SGD(model[0].parameters(), lr=0.1)
    assert _moved_by_real_steps(model, x, optimizer) == {"0.weight", "0.bias"}
    report = fxflow.check(model, x, optimizer=optimizer)
    row = report.parameter("2.weight")
    assert row.optimizer == "not optimized" and row.optimizer_reasons == ["in-no-group"]
    assert row.facts["optimizer"] == {"groups": [{"label": "group 0 of SGD", "tensors": 2, "lr": 0.1}],
                                      "replaced": False, "module": "2", "module_class": "Linear"}
    words = ("in no parameter group (the optimizer has group 0 of SGD: 2 tensors, lr 0.1): module 2 (Linear) was "
             "created or replaced after the optimizer was built, or left out of it")
    assert row.optimizer_reason == words
    assert f"not optimized: 2.weight, 2.bias: {words}" in report.notes
    data = json.loads(report.to_json())["parameters"][2]
    assert (data["optimizer_reason"], data["optimizer_reasons"]) == (words, ["in-no-group"])
    assert "optimizer_words" not in data
    _same_after_json(report)
    older = json.loads(report.to_json())
    for row_data in older["parameters"]:
        row_data.pop("optimizer_reasons")
        row_data["facts"].pop("optimizer", None)
    again = fxflow.Report.from_dict(older).parameter("2.weight")
    assert (again.optimizer_reason, again.optimizer_reasons) == (words, [])


def test_steps_that_left_a_parameter_unmoved_are_codes():
    """watch: the head's group ran at lr 0 (its update stayed zero: the lr's verdict stands, unknown without
    a scheduler) and real steps in plain torch leave it unchanged."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)), torch.randn(4, 8)
    optimizer = torch.optim.SGD([{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.0}],
                                lr=0.1)
    assert _moved_by_real_steps(model, x, optimizer) == {"0.weight", "0.bias"}
    with fxflow.watch(model, optimizer=optimizer, steps=2) as watched:
        for _ in range(2):
            optimizer.zero_grad()
            model(x).pow(2).mean().backward()
            optimizer.step()
    row = watched.report.parameter("2.weight")
    assert row.optimizer == "unknown" and row.optimizer_reasons == ["zero-lr-steps", "lr-zero-no-scheduler"]
    assert row.facts["optimizer"] == {"steps": 2, "at_zero": ["group 1 of SGD"]}
    assert row.optimizer_reason == ("its update stayed exactly zero over 2 optimizer steps: its group's lr was 0 on "
                                    "each; lr 0 now in group 1 of SGD; without scheduler= fxflow cannot tell a warmup "
                                    "from an lr that stays 0")
    _same_after_json(watched.report)


class Unreached(nn.Module):
    """A frozen bias, a module forward never calls, one whose result nothing uses, and a parameter of the
    model itself that forward never reads."""

    def __init__(self):
        super().__init__()
        self.used, self.skipped, self.discarded = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3)
        self.scale = nn.Parameter(torch.ones(3))
        self.used.bias.requires_grad_(False)

    def forward(self, x):
        self.discarded(x)
        return self.used(x)


def test_the_graph_walks_reasons_are_codes():
    """Why the graph walk said frozen or unused is a code with its facts; the words are what they were. The
    truth: a real backward in plain torch leaves each of them without a gradient."""
    torch.manual_seed(0)
    model, x = Unreached(), torch.randn(2, 3)
    model(x).sum().backward()
    assert {name for name, p in model.named_parameters() if p.grad is None} == {
        "used.bias", "skipped.weight", "skipped.bias", "discarded.weight", "discarded.bias", "scale"}
    model.zero_grad(set_to_none=True)
    report = fxflow.check(model, x)
    told = {p.name: (p.static, p.reasons, p.facts, p.finding, p.diagnosis) for p in report.parameters}
    assert told == {
        "used.weight": ("reachable", [], {}, None, None),
        "used.bias": ("frozen", ["requires-grad-false"], {}, None, "requires_grad is False"),
        "skipped.weight": ("unused", ["never-called"], {"module": "skipped"}, None,
                           "its module skipped is never called in forward"),
        "skipped.bias": ("unused", ["never-called"], {"module": "skipped"}, None,
                         "its module skipped is never called in forward"),
        "discarded.weight": ("unused", ["reaches-nothing"], {"goal": "output"}, None,
                             "used in forward, but nothing it feeds reaches an output"),
        "discarded.bias": ("unused", ["reaches-nothing"], {"goal": "output"}, None,
                           "used in forward, but nothing it feeds reaches an output"),
        "scale": ("unused", ["never-read"], {}, None, "forward never reads it"),
    }
    _same_after_json(report)


class ThroughAFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x):
        return self.b(x) + Double.apply(self.a(x))


def test_a_function_that_never_ran_is_a_code_with_the_op_and_node():
    """No inputs, no backward: the custom Function never ran, so the graph walk cannot tell whether its
    backward passes the gradient on (``unknown``); the code names the op and its node as facts."""
    report = fxflow.check(ThroughAFunction(), None, backward=False, infer=False)
    row = report.parameter("a.weight")
    assert (row.static, row.reasons, row.finding) == ("unknown", ["opaque-never-ran"], None)
    assert row.facts == {"opaque": "custom autograd.Function Double", "opaque_node": "double"}
    assert row.diagnosis == ("its gradient passes through custom autograd.Function Double (node double), which never "
                             "ran: only a real backward can tell whether it passes the gradient on")
    assert report.parameter("b.weight").reasons == []
    _same_after_json(report)
