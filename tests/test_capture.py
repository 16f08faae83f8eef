"""The capture chain: symbolic_trace -> torch.export -> run-time capture, each checked against a real backward."""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn as nn

import fxflow
from fxflow.static.analyze import analyze
from fxflow.static.annotate import annotate
from fxflow.capture import OPAQUE_KEY, _methods, capture
from fxflow.prepare.unwrap import meta_copy, unwrap
from fxflow.core.guard import ATTRIBUTES_ONLY, guard
from gradtruth import assert_agrees, real_grads, static_disagreements

METHODS = dict(_methods())


class Branchy(nn.Module):
    """Data-dependent control flow: only the run-time capture follows it."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if h.sum() > -1e9:
            return self.b(h)
        return self.c(h)


class KeywordArgs(nn.Module):
    """Forward with keyword-only arguments left at their defaults."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, *, scale: float = 2.0, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.a(x) * scale
        if mask is not None:
            h = h * mask
        return self.b(h)


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: torch.Tensor


class DataclassOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.unused = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> Output:
        h = torch.relu(self.a(x))
        return Output(self.b(h), h)


class ToList(nn.Module):
    """A tensor leaves torch and comes back: the escape, not the re-entry, is the cut."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = self.a(x).tolist()
        return self.b(torch.tensor(values))


class NumpyTrip(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        array = self.a(x).detach().numpy() * 2.0
        return self.b(torch.from_numpy(array)) + self.b(x)


class BatchNormNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.bn, self.b = nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(nn.functional.dropout(self.bn(self.a(x)), 0.5, self.training))


CASES = [Branchy, KeywordArgs, DataclassOut, ToList, NumpyTrip, BatchNormNet]


def _captured(method: str, model: nn.Module, inputs: tuple) -> dict[str, str] | None:
    """Static verdicts from one capture method alone (None when that method cannot capture it)."""
    try:
        with guard(model, **ATTRIBUTES_ONLY):
            graph_module = METHODS[method](model, inputs)
    except Exception:
        return None
    annotate(graph_module, model, inputs)
    return {name: v.static for name, v in analyze(graph_module, model).verdicts.items()}


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_every_capture_agrees_with_the_real_backward(case: type, method: str) -> None:
    torch.manual_seed(0)
    model, inputs = case(), (torch.randn(3, 4),)
    verdicts = _captured(method, model, inputs)
    if verdicts is None:
        assert method != "runtime", "the run-time capture must capture anything that runs"
        pytest.skip(f"{method} cannot capture {case.__name__}")
    assert static_disagreements(verdicts, real_grads(model, inputs)) == {}


@pytest.mark.parametrize("case, method, failed", [
    (DataclassOut, "symbolic_trace", []),
    (KeywordArgs, "runtime", ["symbolic_trace"]),  # the recording comes before export (issue 18)
    (Branchy, "runtime", ["symbolic_trace"]),
])
def test_chain_names_the_method_and_why_earlier_ones_failed(case: type, method: str, failed: list[str]) -> None:
    torch.manual_seed(0)
    model, inputs = case(), (torch.randn(3, 4),)
    report = fxflow.check(model, inputs)
    assert report.trace.method == method
    assert [note.split(" failed: ")[0] for note in report.trace.notes] == failed
    assert all("\n" not in note and len(note) <= 220 for note in report.trace.notes)
    assert_agrees(report, real_grads(model, inputs))


def test_escape_is_the_cut_not_unused() -> None:
    torch.manual_seed(0)
    model, inputs = ToList(), (torch.randn(3, 4),)
    line = f"test_capture.py:{ToList.forward.__code__.co_firstlineno + 1}"
    report = fxflow.check(model, inputs)
    weight = report.parameter("a.weight")
    assert (weight.static, weight.dynamic) == ("cut", "missing")
    assert [(site.op, site.source.endswith(line)) for site in weight.cut_by] == [("tolist", True)]
    graph_module = METHODS["runtime"](model, inputs)  # the run-time capture links the re-entry too
    annotate(graph_module, model, inputs)
    verdict = analyze(graph_module, model).verdicts["a.weight"]
    assert verdict.static == "cut"
    assert [(site.op, site.source.endswith(line)) for site in verdict.cut_by] == [("tolist", True)]


def test_nothing_captures_then_each_failure_is_named() -> None:
    captured = capture(Branchy(), None)  # no inputs: export and the run-time capture cannot run
    assert captured.method == "none" and captured.graph_module is None
    assert [n.split(" failed")[0] for n in captured.notes[:3]] == ["symbolic_trace", "runtime", "torch.export"]
    assert captured.notes[-1] == "no capture worked"  # whether a backward ran is the pipeline's to say


def test_runtime_capture_leaves_the_model_as_found() -> None:
    torch.manual_seed(0)
    model = BatchNormNet().train()
    inputs = (torch.randn(3, 4),)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    graph_module = METHODS["runtime"](model, inputs)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(rng, torch.get_rng_state())
    assert model.training and all(p.grad is None for p in model.parameters())
    targets = {n.target for n in graph_module.graph.nodes if n.op == "get_attr"}
    assert {"a.weight", "bn.weight", "bn.running_mean", "b.weight"} <= targets


def test_runtime_nodes_carry_source_and_module_stack() -> None:
    model = DataclassOut()
    graph_module = METHODS["runtime"](model, (torch.randn(3, 4),))
    linear = [n for n in graph_module.graph.nodes if n.op == "call_function" and getattr(n.target, "__name__", "") == "linear"]
    assert [list(n.meta["nn_module_stack"])[-1] for n in linear] == ["a", "b"]
    assert "test_capture.py" in linear[0].meta["stack_trace"]


class Wrapped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.last = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(torch.relu(self.first(x).detach()))


@pytest.mark.parametrize("wrap", [
    lambda m: torch.nn.DataParallel(m),
    lambda m: torch.compile(m, backend="eager"),
], ids=["DataParallel", "torch.compile"])
def test_wrapped_models_are_unwrapped_and_named_as_the_user_knows(wrap) -> None:
    torch.manual_seed(0)
    inner, inputs = Wrapped(), (torch.randn(3, 4),)
    wrapped = wrap(inner)
    model, prefix, notes = unwrap(wrapped)
    assert model is inner and prefix and notes
    _check_wrapped(wrapped, inner, inputs)


def _check_wrapped(wrapped: torch.nn.Module, inner: torch.nn.Module, inputs: tuple) -> None:
    """Reported under the user's own names (no ``module.``/``_orig_mod.``), verdicts as autograd says."""
    report = fxflow.check(wrapped, inputs)
    truth = real_grads(inner, inputs)
    names = {p.name: p for p in report.parameters}
    assert set(names) == set(truth)
    assert {n: p.static for n, p in names.items()} == {
        "first.weight": "cut", "first.bias": "cut", "last.weight": "reachable", "last.bias": "reachable"}
    assert all(p.agree for p in report.parameters)


def test_ddp_wrapped_model_is_unwrapped(tmp_path) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        inner = Wrapped()
        _check_wrapped(torch.nn.parallel.DistributedDataParallel(inner), inner, (torch.randn(3, 4),))
    finally:
        dist.destroy_process_group()


def test_meta_copy_allocates_nothing_and_keeps_ties() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    model[1].weight = model[0].weight
    model[0].bias.requires_grad_(False)
    copy = meta_copy(model)
    assert all(p.is_meta for p in copy.parameters()) and not any(p.is_meta for p in model.parameters())
    assert copy[1].weight is copy[0].weight and not copy[0].bias.requires_grad


def test_opaque_function_is_one_node_in_every_capture() -> None:
    class Halve(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x / 2

        @staticmethod
        def backward(ctx, grad):
            return grad / 2

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)

        def forward(self, x):
            return Halve.apply(self.a(x))

    model, inputs = Net(), (torch.randn(3, 4),)
    for method in ("symbolic_trace", "runtime"):
        graph_module = METHODS[method](model, inputs)
        opaque = [n.meta[OPAQUE_KEY] for n in graph_module.graph.nodes if OPAQUE_KEY in n.meta]
        assert opaque == ["custom autograd.Function Halve"], method
    with pytest.raises(Exception, match="Halve"):
        METHODS["torch.export"](model, inputs)
