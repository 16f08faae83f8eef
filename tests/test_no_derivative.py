"""Ops with no derivative (floor_divide, heaviside, igamma in its first argument) and ops whose
derivative is zero by a saved argument (div with a rounding mode), each against a real backward.

Three levels: the forward mode that makes the probe's backward stop at such an op instead of
raising (:mod:`fxflow.dynamic.no_derivative`); :func:`fxflow.check`, whose static verdict must name the op
and whose dynamic verdict must come from a backward that ran; and the CLI's exit code.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import fxflow
from fxflow.static import rules
from fxflow.dynamic.no_derivative import blocked_inputs, stop_at_missing_derivatives
from fxflow.verdicts import DynamicVerdict, StaticVerdict


def leaves() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return (torch.rand(5, dtype=torch.float64) + 0.5).requires_grad_(), (torch.rand(5, dtype=torch.float64) + 0.1).requires_grad_()


# name -> f(a, x); which of (a, x) get no gradient through the op.
NO_DERIVATIVE = {
    "floor_divide": (lambda a, x: torch.floor_divide(a * 3, x), {0, 1}),
    "operator //": (lambda a, x: (a * 3) // 2, {0, 1}),  # x is not an argument: nothing through the op
    "heaviside": (lambda a, x: torch.heaviside(a - 1, x), {0, 1}),
    "igamma": (lambda a, x: torch.igamma(a * 2, x * 3), {0}),
    "igammac": (lambda a, x: torch.special.gammaincc(a, x), {0}),
}


@pytest.mark.parametrize("name", sorted(NO_DERIVATIVE))
def test_plain_backward_raises_and_the_mode_stops_there(name: str) -> None:
    build, blocked = NO_DERIVATIVE[name]
    a, x = leaves()
    with pytest.raises(RuntimeError, match="not implemented"):  # the premise: autograd's own backward raises
        torch.autograd.grad((build(a, x) * x).sum(), [a, x], allow_unused=True)
    with stop_at_missing_derivatives():
        y = build(a, x)
    grads = torch.autograd.grad((y * x).sum(), [a, x], allow_unused=True)
    assert grads[0] is None if 0 in blocked else grads[0] is not None
    # x also feeds the product, so it always gets y; through the op only where the op has a derivative
    expected = y.detach()
    if 1 not in blocked:
        (through_op,) = torch.autograd.grad(build(a.detach(), x), [x], x.detach())
        expected = expected + through_op
    assert torch.allclose(grads[1], expected)


def test_an_op_with_a_derivative_is_left_alone() -> None:
    a, x = leaves()
    with stop_at_missing_derivatives():
        y = torch.sin(a) * x
    assert type(y.grad_fn).__name__ == "MulBackward0"
    assert torch.allclose(torch.autograd.grad(y.sum(), [a])[0], torch.cos(a) * x)


def test_the_result_keeps_its_identity_and_values() -> None:
    """The run-time capture knows tensors by id: the rebased result must be the object the op returned."""
    a, x = leaves()
    seen = []

    class Record(torch.overrides.TorchFunctionMode):  # an outer mode, as the run-time recorder is
        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            seen.append(result)
            return result

    with Record(), stop_at_missing_derivatives():
        y = torch.igamma(a * 2, x)
    assert [r is y for r in seen] == [False, True]  # a * 2, then igamma: the re-run and rebasing are unseen
    assert torch.equal(y.detach(), torch.igamma(a * 2, x).detach())
    assert y.requires_grad  # x still reaches it


def test_an_input_in_both_slots_loses_both() -> None:
    """igamma(x, x): x cannot be detached for one slot only, so the whole result is."""
    a, _ = leaves()
    with stop_at_missing_derivatives() as mode:
        y = torch.igamma(a, a)
    y.sum().backward()
    assert a.grad is None  # only the tripwire's term is live, and it reports the op reached
    assert [site.op for site in mode.reached()] == ["igamma"]
    outputs, inputs = [torch.igamma(a, a)], [a]
    assert blocked_inputs(outputs, inputs) == (set(), True)


class Model(nn.Module):
    """``first`` feeds only the op under test, ``second`` its other argument, ``last`` the output."""

    def __init__(self, op: str) -> None:
        super().__init__()
        self.op = op
        self.first = nn.Linear(4, 4)
        self.second = nn.Linear(4, 4)
        self.last = nn.Linear(4, 4)

    def forward(self, x):
        h, g = self.first(x), self.second(x)
        if self.op == "floor_divide":
            q = torch.floor_divide(h, 0.5) + g
        elif self.op == "heaviside":
            q = torch.heaviside(h, g)
        elif self.op == "igamma":
            q = torch.igamma(h.abs() + 0.5, g.abs() + 0.1)
        elif self.op == "div_floor":
            q = torch.div(h, g.abs() + 1, rounding_mode="floor") + g
        elif self.op == "div_trunc":
            q = torch.div(h, 0.5, rounding_mode="trunc") + g
        elif self.op == "dist_p0":  # torch's own backward of this fails with "Expected a proper Tensor"
            q = torch.dist(h, g, p=0) + g
        return self.last(x) + q


# op -> (static, dynamic, cut_by op) for first.weight and for second.weight
EXPECTED = {
    "floor_divide": (("cut", "missing", "floor_divide"), ("reachable", "ok", None)),
    "heaviside": (("cut", "missing", "heaviside"), ("cut", "missing", "heaviside")),
    "igamma": (("cut", "missing", "igamma"), ("reachable", "ok", None)),
    "div_floor": (("zero", "zero", "div"), ("reachable", "ok", None)),
    "div_trunc": (("zero", "zero", "div"), ("reachable", "ok", None)),
    "dist_p0": (("cut", "missing", "dist"), ("reachable", "ok", None)),
}


@pytest.mark.parametrize("methods", [None, ("runtime",)], ids=["default", "runtime"])
@pytest.mark.parametrize("op", sorted(EXPECTED))
def test_check_names_the_op_and_the_backward_agrees(op: str, methods) -> None:
    model = Model(op)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = fxflow.check(model, torch.randn(3, 4), capture_methods=methods)
    by_name = {p.name: p for p in report.parameters}
    for name, (static, dynamic, cut_op) in zip(("first.weight", "second.weight"), EXPECTED[op]):
        parameter = by_name[name]
        assert (parameter.static, parameter.dynamic) == (static, dynamic), (name, parameter)
        assert parameter.agree is not False
        if cut_op is None:
            assert not parameter.cut_by
            continue
        (site,) = parameter.cut_by
        assert site.op == cut_op and site.source.endswith(f"test_no_derivative.py:{_line_of(op)}")
        if static == StaticVerdict.CUT:
            assert site.reason == f"{cut_op} has no derivative for this input, so the gradient stops here"
    assert (by_name["last.weight"].static, by_name["last.weight"].dynamic) == (StaticVerdict.REACHABLE, DynamicVerdict.OK)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the model is untouched
    assert all(p.grad is None for p in model.parameters())


def _line_of(op: str) -> int:
    """The line of Model.forward that applies ``op`` (the one under its ``elif``)."""
    import inspect

    lines, start = inspect.getsourcelines(Model.forward)
    marker = f'self.op == "{op}"'
    index = next(i for i, line in enumerate(lines) if marker in line)
    return start + index + 1


def test_the_annotation_marks_the_node_that_has_no_derivative() -> None:
    """What explain reads: the node's inputs reached only through the op with no derivative."""
    from fxflow.capture import capture
    from fxflow.static.annotate import annotate

    model = Model("igamma")
    captured = capture(model, (torch.randn(3, 4),))
    graph_module = captured.graph_module if hasattr(captured, "graph_module") else captured[0]
    annotate(graph_module, model, (torch.randn(3, 4),))
    marked = {n.name: n.meta[rules.NO_DERIVATIVE_KEY] for n in graph_module.graph.nodes if rules.NO_DERIVATIVE_KEY in n.meta}
    assert list(marked) == ["igamma"] and len(marked["igamma"]) == 1


MODEL_FILE = """
import torch
import torch.nn as nn


class Bucketed(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(10, 8)
        self.head = nn.Linear(10, 8)

    def forward(self, x):
        buckets = torch.floor_divide(self.embed(x), 0.25)
        return self.head(x) + buckets
"""


def test_cli_exits_1_not_2(run_fxflow, write_model, tmp_path) -> None:
    path = write_model(tmp_path, MODEL_FILE)
    code, out, err = run_fxflow("check", f"{path}:Bucketed")
    assert code == 1, (out, err)
    row = next(line for line in out.splitlines() if line.startswith("embed.weight"))
    assert "cut" in row and "missing" in row and "floor_divide @ " in row
    assert "Traceback" not in err


# -- where the real backward raises ---------------------------------------------------------------
class BesideTheOp(nn.Module):
    """``first`` reaches the output both around floor_divide and through it: it learns, but the
    real loss.backward() raises at the op."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.last = nn.Linear(4, 2)

    def forward(self, x):
        h = self.first(x)
        return self.last(h + torch.floor_divide(h, 2))


class OffThePath(BesideTheOp):
    """floor_divide's result never reaches the output: the real backward never gets there."""

    def forward(self, x):
        h = self.first(x)
        self.last(torch.floor_divide(h, 2))
        return self.last(h)


class ThroughAView(BesideTheOp):
    """The op writes through a view: its history cannot be rebased, and fxflow's backward raises too."""

    def forward(self, x):
        h = self.first(x)
        h[:, 0] //= 2
        return self.last(h)


def _plain_backward_raises(model: nn.Module, x: torch.Tensor) -> bool:
    try:
        model(x).sum().backward()
    except RuntimeError as error:
        assert "not implemented" in str(error)
        return True
    finally:
        model.zero_grad(set_to_none=True)
    return False


@pytest.mark.parametrize("model_class, raises", [(BesideTheOp, True), (OffThePath, False), (ThroughAView, True)])
def test_a_backward_that_raises_is_a_problem_even_when_every_parameter_learns(model_class, raises) -> None:
    torch.manual_seed(0)
    model, x = model_class(), torch.randn(3, 4)
    assert _plain_backward_raises(model, x) == raises  # the premise, from autograd itself
    report = fxflow.check(model, (x,))
    assert bool(report.backward_raises) == raises and report.ok == (not raises)
    assert {p.static for p in report.parameters} == {StaticVerdict.REACHABLE}
    if model_class is BesideTheOp:  # rebased: the rest of the backward ran, and names the line
        (site,) = report.backward_raises
        assert site.op == "floor_divide" and site.source.endswith(f"test_no_derivative.py:{_line_with('return self.last(h + torch.floor_divide')}")
        assert {p.dynamic for p in report.parameters} == {DynamicVerdict.OK}
        assert report.summary() == f"problem: loss.backward() raises at floor_divide @ {site.source}"
        assert report.graph.nodes[site.node]["state"] == "cut"  # drawn as the node that severs
        static_only = fxflow.check(model, (x,), backward=False)  # the graph alone names it too
        assert static_only.backward_raises == [site] and not static_only.ok
    if model_class is ThroughAView:  # autograd's own error, and no gradient read: unknown, not missing
        assert "floor_divide_ is not implemented" in report.backward_raises[0].reason
        assert {p.dynamic for p in report.parameters} == {None}
    assert report.to_dict()["backward_raises"] == [dict(vars(site)) for site in report.backward_raises]


def _line_with(text: str) -> int:
    """The line of this file that holds ``text``."""
    return next(i for i, line in enumerate(open(__file__).read().splitlines(), 1) if text in line)


def test_cli_says_where_the_real_backward_raises(run_fxflow, write_model, tmp_path) -> None:
    import inspect
    import textwrap

    source = "import torch\nimport torch.nn as nn\n\n\n" + textwrap.dedent(inspect.getsource(BesideTheOp)) + \
        "\n\ndef example_inputs():\n    return (torch.randn(3, 4),)\n"
    path = write_model(tmp_path, source)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "floor_divide(h, 2)" in text)
    code, out, err = run_fxflow("check", f"{path}:BesideTheOp", cwd=tmp_path)
    assert code == 1, err
    assert out.splitlines()[-1] == f"problem: loss.backward() raises at floor_divide @ model.py:{line}"
    code, out, _ = run_fxflow("check", f"{path}:BesideTheOp", "--format", "github", cwd=tmp_path)
    assert code == 1 and out.startswith(
        f"::error file=model.py,line={line},title=fxflow backward-raises::floor_divide has no derivative")


def test_neither_a_baseline_nor_a_diff_lets_a_raising_backward_through(run_fxflow, write_model, tmp_path) -> None:
    """A backward that raises is not deliberate dryness: no baseline accepts it, and a diff that
    introduces it is worse, though no parameter changed its verdict."""
    import inspect
    import textwrap

    header = "import torch\nimport torch.nn as nn\n\n\n"
    inputs = "\n\ndef example_inputs():\n    return (torch.randn(3, 4),)\n"
    raising = write_model(tmp_path, header + textwrap.dedent(inspect.getsource(BesideTheOp)) + inputs, "raising.py")
    healthy = write_model(tmp_path, header + textwrap.dedent(inspect.getsource(BesideTheOp)).replace(
        "torch.floor_divide(h, 2)", "torch.div(h, 2)") + inputs, "healthy.py")
    code, out, err = run_fxflow("check", f"{raising}:BesideTheOp", "--baseline", "base.json", "--write-baseline",
                                cwd=tmp_path)
    assert code == 1 and "recorded 0 problems" in err  # written, and still failing
    code, out, err = run_fxflow("check", f"{raising}:BesideTheOp", "--baseline", "base.json", cwd=tmp_path)
    assert code == 1, err
    assert "loss.backward() raises at floor_divide @ raising.py:" in out + err
    code, out, err = run_fxflow("diff", f"{healthy}:BesideTheOp", f"{raising}:BesideTheOp", cwd=tmp_path)
    assert code == 1, err
    assert "no parameter changed its verdict" in out
    assert out.splitlines()[-1].startswith("worse:") and out.splitlines()[-1].endswith(
        "; loss.backward() raises at 1 new op")


@pytest.mark.parametrize("model_class, raises", [(BesideTheOp, True), (OffThePath, False)])
@pytest.mark.parametrize("where", ["meta device", "built on meta"])
def test_the_same_backward_raises_on_meta(model_class, raises, where) -> None:
    """The meta twin of the test above: a model checked on (or built on) the meta device has no values,
    but the same stops: the backward raises at the same op, with the same line, and fails the same way."""
    torch.manual_seed(0)
    model, x = model_class(), torch.randn(3, 4)
    on_cpu = fxflow.check(model, (x,))
    if where == "meta device":
        report = fxflow.check(model, (x,), device="meta")
    else:
        with torch.device("meta"):
            meta_model = model_class()
        report = fxflow.check(meta_model, (x.to("meta"),))
    assert report.backward_raises == on_cpu.backward_raises and bool(report.backward_raises) == raises
    assert report.ok == (not raises) and report.exit_code == on_cpu.exit_code
    assert {p.name: p.dynamic for p in report.parameters} == {p.name: "present" for p in on_cpu.parameters}
