"""No crash, anywhere: what a model's own objects raise, torch's own crashes, schedulers past their
horizon and odd input names end neither the check nor the process (issue 40)."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import warnings

import torch
from torch import nn

import fxflow
from fxflow.dynamic.unregistered import unregistered_tensors

from conftest import ROOT


class RefusesLength(tuple):
    """Like e3nn's ``o3.Irrep``: a tuple that raises ``NotImplementedError`` from ``__len__`` on purpose."""

    def __new__(cls, degree: int, parity: int) -> "RefusesLength":
        return super().__new__(cls, (degree, parity))

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self):
        raise NotImplementedError


class HoldsIrrep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.irrep = RefusesLength(1, -1)
        self.mixed = [RefusesLength(0, 1), nn.Linear(3, 3)]  # the Linear beside it is still found

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) + self.mixed[1](x)


def test_attribute_that_refuses_len_is_skipped_and_its_siblings_still_read():
    found = unregistered_tensors(HoldsIrrep())
    assert sorted(found) == ["mixed[1].bias", "mixed[1].weight"]


def test_check_of_a_model_holding_an_irrep_like_attribute_runs():
    report = fxflow.check(HoldsIrrep(), torch.randn(2, 3))
    verdicts = {p.name: p.dynamic for p in report.parameters}
    assert verdicts["lin.weight"] == "ok"
    assert "mixed[1].weight" in verdicts  # the unregistered Linear beside the irrep is still reported


class RefusingList(list):
    def __len__(self) -> int:
        raise NotImplementedError

    def __bool__(self) -> bool:
        raise NotImplementedError

    def __iter__(self):
        raise NotImplementedError


class RefusingDict(dict):
    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self):
        raise NotImplementedError


class HoldsRefusingContainers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.shapes = RefusingList([1, 2])
        self.table = RefusingDict(a=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def test_containers_that_refuse_to_be_looked_into_do_not_end_the_check():
    model = HoldsRefusingContainers()
    report = fxflow.check(model, torch.randn(2, 3))
    assert {p.name: str(p.dynamic.value) for p in report.parameters} == {"lin.weight": "ok", "lin.bias": "ok"}
    assert type(model.shapes) is RefusingList and type(model.table) is RefusingDict  # put back as found


# -- an error line always carries its text ------------------------------------------------------

SILENT_ERRORS = """
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            raise NotImplementedError

    class Build(torch.nn.Module):
        def __init__(self):
            super().__init__()
            raise NotImplementedError
"""


def _error_line(result: tuple[int, str, str]) -> str:
    code, out, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, out, err)
    return lines[0]


def test_forward_raising_without_message_names_where(run_fxflow, write_model, tmp_path):
    path = write_model(tmp_path, SILENT_ERRORS)
    line = _error_line(run_fxflow("check", f"{path}:Net", "--input-size", "2,3", cwd=tmp_path))
    assert "NotImplementedError with no message, in forward at model.py:9" in line, line
    assert not line.rstrip().endswith(":") and "NotImplementedError:" not in line, line


def test_constructor_raising_without_message_names_where(run_fxflow, write_model, tmp_path):
    path = write_model(tmp_path, SILENT_ERRORS)
    line = _error_line(run_fxflow("check", f"{path}:Build", "--input-size", "2,3", cwd=tmp_path))
    assert "NotImplementedError with no message, in __init__ at model.py:14" in line, line


def test_unworded_error_without_message_names_where():
    from fxflow.cli import _error_text

    def refuses() -> None:
        raise NotImplementedError

    try:
        refuses()
    except NotImplementedError as error:
        text = _error_text(error)
    assert text.startswith("NotImplementedError with no message, in refuses at "), text
    assert _error_text(ValueError("bad lr")) == "ValueError: bad lr"


# -- no hook where torch cannot survive it ------------------------------------------------------

SLICES_WRITTEN_IN_PLACE = """
import torch
from torch import nn
import fxflow

class Split(nn.Module):  # as in a matting network: b's write leaves the view a stale
    def forward(self, x):
        return x[:, 0:1].clamp_(0, 1), x[:, 1:].relu_()

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.split = Split()
        self.head = nn.Conv2d(3, 2, 1)

    def forward(self, x):
        alpha, features = self.split(self.conv(x))
        return alpha * self.head(features)

torch.manual_seed(0)
report = fxflow.check(Net(), torch.randn(1, 3, 4, 4))
print("verdicts", sorted((p.name, str(p.dynamic.value)) for p in report.parameters))
print("notes", report.notes)
"""


def _python(source: str) -> subprocess.CompletedProcess:
    """``source`` in a process of its own: a segfault fails the test instead of ending pytest."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, env=env, timeout=300)


def test_module_returning_slices_written_in_place_does_not_crash_the_process():
    done = _python(SLICES_WRITTEN_IN_PLACE)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # -11 before: SIGSEGV in register_hook
    assert "('conv.weight', 'ok')" in done.stdout and "('head.weight', 'ok')" in done.stdout, done.stdout
    assert "views written in place" in done.stdout  # the skipped norm is said, not shown as "no gradient"


HOOKS_WHERE_HOOKABLE = """
import torch
from fxflow.core.tensors import hookable

w = torch.randn(4, 4, requires_grad=True)
cases = {}
def made(name, tensor, base):
    cases[name] = (hookable(tensor), tensor, base)

y = torch.randn(2, 4) @ w; made("result", y, y)
y = torch.randn(2, 4) @ w; made("fresh view", y[:, 0:1], y)
y = torch.randn(2, 4) @ w; a = y[:, 0:1]; y.mul_(2); made("view, then base written", a, y)
y = torch.randn(2, 4) @ w; a = y[:, 0:1].clamp_(0, 1); y[:, 1:].relu_(); made("two slices written", a, y)
y = torch.randn(2, 4) @ w; made("no grad", y.detach(), y)
print(sorted((name, answer) for name, (answer, _, _) in cases.items()), flush=True)
for name, (answer, tensor, base) in cases.items():
    if answer:  # hookable says yes: registering and running backward must survive
        tensor.register_hook(lambda grad: None)
        base.sum().backward()
print("survived", flush=True)
"""


def test_hookable_refuses_stale_views_and_what_it_allows_survives():
    done = _python(HOOKS_WHERE_HOOKABLE)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.splitlines()[0] == str(sorted([
        ("fresh view", True), ("no grad", False), ("result", True),
        ("two slices written", False), ("view, then base written", False)])), done.stdout


# -- every scheduler call is guarded; no warning filter for the look-ahead ----------------------


def _two_groups() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    optimizer = torch.optim.SGD([{"params": model[0].parameters()}, {"params": model[1].parameters()}], lr=0.1)
    return model, optimizer


def test_scheduler_raising_past_its_horizon_ends_the_look_ahead_not_the_check():
    model, optimizer = _two_groups()
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=[0.1, 0.0], total_steps=100)
    before = copy.deepcopy(scheduler.state_dict()), [group["lr"] for group in optimizer.param_groups]
    report = fxflow.check(model, torch.randn(2, 3), optimizer=optimizer, scheduler=scheduler)
    verdicts = {p.name: (str(p.optimizer.value), p.optimizer_reason) for p in report.parameters}
    assert verdicts["0.weight"][0] == "updated"
    verdict, reason = verdicts["1.weight"]  # what the 100 steps showed is kept: group 1 never rises
    assert verdict == "not optimized"
    assert "for the 100 steps it takes (step 101 raises ValueError" in reason, reason
    assert (scheduler.state_dict(), [group["lr"] for group in optimizer.param_groups]) == before


class WantsEpoch(torch.optim.lr_scheduler.LambdaLR):
    """Like timm's schedulers: ``step`` needs an argument, so a plain ``step()`` raises TypeError."""

    def step(self, *epoch: int) -> None:  # type: ignore[override]
        if not epoch and self.last_epoch >= 0:  # the constructor's own first step passes
            raise TypeError("step() missing 1 required positional argument: 'epoch'")
        super().step()


def test_scheduler_whose_step_raises_leaves_the_lr_unknown_beyond_now():
    model, optimizer = _two_groups()
    optimizer.param_groups[1]["lr"] = 0.0
    scheduler = WantsEpoch(optimizer, lambda step: 1.0)
    report = fxflow.check(model, torch.randn(2, 3), optimizer=optimizer, scheduler=scheduler)
    reason = {p.name: p.optimizer_reason for p in report.parameters}["1.weight"]
    assert "for the 0 steps it takes (step 1 raises TypeError" in reason, reason


def test_look_ahead_sets_no_warning_filter_and_warns_nothing():
    """A warning filter is process-wide: a second thread would lose its own warnings meanwhile."""
    model, optimizer = _two_groups()
    optimizer.param_groups[1]["lr"] = 0.0
    outside = (list(warnings.filters), warnings.showwarning)
    seen = []

    def warmup(step: int) -> float:  # the scheduler's own code, run inside the look-ahead
        seen.append((list(warnings.filters), warnings.showwarning))
        return min(1.0, step / 10)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup)
    seen.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outside = (list(warnings.filters), warnings.showwarning)
        fxflow.check(model, torch.randn(2, 3), optimizer=optimizer, scheduler=scheduler)
    assert seen and all(state == outside for state in seen)
    assert not [w for w in caught if "lr_scheduler" in str(w.message)], [str(w.message) for w in caught]
    assert scheduler._step_count == 1 and scheduler.last_epoch == 0  # put back, the first-step warning kept


# -- dict inputs keyed by what no Python parameter can be named ---------------------------------


class TakesAnyKeys(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, **keywords: torch.Tensor) -> torch.Tensor:
        return self.a(keywords["from"]) + self.b(keywords["input-ids"]) + self.c(x)


def test_dict_keyed_by_a_keyword_or_a_non_identifier_is_checked_on_every_capture():
    torch.manual_seed(0)
    inputs = {"from": torch.randn(2, 3), "input-ids": torch.randn(2, 3), "x": torch.randn(2, 3)}
    for method in ("symbolic_trace", "torch.export", "runtime"):
        report = fxflow.check(TakesAnyKeys(), inputs, capture_methods=[method])
        assert report.trace.method == method
        assert {(p.name, str(p.static.value), str(p.dynamic.value)) for p in report.parameters} == {
            (f"{layer}.{kind}", "reachable", "ok") for layer in "abc" for kind in ("weight", "bias")}, method


def test_dict_keyed_by_self_fails_as_the_users_own_call_does():
    """``model(**{"self": x})`` raises TypeError in the user's hands too: fxflow says so, no SyntaxError."""
    inputs = {"from": torch.randn(2, 3), "input-ids": torch.randn(2, 3), "self": torch.randn(2, 3)}
    model = TakesAnyKeys()
    try:
        model(**inputs)
    except TypeError as error:
        own = str(error)
    try:
        fxflow.check(model, inputs)
    except fxflow.FxflowError as error:
        assert own in str(error) and "SyntaxError" not in str(error)
    else:
        raise AssertionError("a call the user cannot make was checked")


def test_argument_names_are_valid_distinct_and_keep_usable_keys():
    from fxflow.prepare import argument_names

    keys = ["from", "from_", "self", "input-ids", "1st", "x", "class"]
    names = argument_names(keys)
    assert names[1] == "from_" and names[5] == "x"  # usable keys are kept as they are
    assert len(set(names)) == len(names)
    source = f"def forward(self, {', '.join(names)}):\n    pass\n"
    compile(source, "<forward>", "exec")  # a SyntaxError here is what the check raised before


# -- tensors fxflow cannot copy are watched, not a reason to fail --------------------------------


class HoldsOddTensors(nn.Module):
    """A graph model's sparse adjacency as a plain attribute, and other tensors a bitwise copy cannot read."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        edges = torch.tensor([[0, 1, 2], [1, 2, 0]])
        self.adjacency = torch.sparse_coo_tensor(edges, torch.ones(3), (3, 3))
        self.compressed = self.adjacency.to_sparse_csr()
        self.quantized = torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.qint8)

    def forward(self, x: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.adjacency, self.lin(x)) + torch.sparse.mm(extra, x)


def test_sparse_and_quantized_attributes_and_inputs_do_not_end_the_check():
    edges = torch.tensor([[0, 1, 2], [1, 2, 0]])
    report = fxflow.check(HoldsOddTensors(), (torch.randn(3, 3), torch.sparse_coo_tensor(edges, torch.ones(3), (3, 3))))
    assert {p.name: str(p.dynamic.value) for p in report.parameters} == {"lin.weight": "ok", "lin.bias": "ok"}


def test_dict_keyed_by_a_non_string_says_so():
    """``model(**{0: x})`` raises TypeError in Python itself: the check says why, not AttributeError."""
    try:
        fxflow.check(TakesAnyKeys(), {0: torch.randn(2, 3)})
    except fxflow.FxflowError as error:
        assert "keys must be strings: not 0" in str(error)
    else:
        raise AssertionError("a call Python refuses was checked")


# -- a plain tensor attribute that is a strided view ---------------------------------------------


class HoldsAColumn(nn.Module):
    """A plain tensor attribute that is one column of a larger tensor (stride 4, not 1), as a
    forecasting model's positional table kept as a slice: the guard compares it bit for bit."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.table = torch.randn(3, 4)
        self.column = self.table[:, 1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.column


def test_a_strided_view_held_as_an_attribute_is_compared_not_a_reason_to_fail():
    model = HoldsAColumn()
    column = model.column.clone()
    report = fxflow.check(model, (torch.randn(2, 3),))
    assert {p.name: str(p.dynamic.value) for p in report.parameters} == {"lin.weight": "ok", "lin.bias": "ok"}
    assert torch.equal(model.column, column) and model.column.stride() == (4,)
