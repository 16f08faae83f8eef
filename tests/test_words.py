"""The words name what made the problem (issue 21, "Words"): each model here once had a
diagnosis that named the wrong thing; each test runs the real backward it is compared with."""
from __future__ import annotations

import torch

from fxflow.pipeline import check

STACK_MASK = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        outs = torch.stack([e(x) for e in self.experts], dim=0)
        mask = torch.tensor([1.0, 1.0, 0.0]).view(3, 1, 1)
        return (outs * mask).sum(0)

def example_inputs():
    return torch.randn(5, 4)
"""

HOOK_DETACH = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.last = nn.Linear(4, 2)
        self.first.register_forward_hook(lambda module, args, out: out.detach())

    def forward(self, x):
        return self.last(torch.relu(self.first(x)))

def example_inputs():
    return torch.randn(5, 4)
"""


def _load(tmp_path, source: str) -> dict:
    path = tmp_path / "model.py"
    path.write_text(source.lstrip("\n"))
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace


def _plain_backward(model: torch.nn.Module, inputs: torch.Tensor) -> dict[str, torch.Tensor | None]:
    model(inputs).sum().backward()
    return {name: p.grad for name, p in model.named_parameters()}


def test_a_mask_multiply_after_a_stack_is_blamed_not_the_stack(tmp_path, run_fxflow):
    namespace = _load(tmp_path, STACK_MASK)
    torch.manual_seed(0)
    model, inputs = namespace["Net"](), namespace["example_inputs"]()
    grads = _plain_backward(model, inputs)
    assert grads["experts.2.weight"].abs().sum() == 0 and grads["experts.0.weight"].abs().sum() > 0
    model.zero_grad(set_to_none=True)
    report = check(model, (inputs,), seed=0)
    diagnosis = report.parameter("experts.2.weight").diagnosis
    assert "`mul`" in diagnosis and "model.py:12" in diagnosis and "stack" not in diagnosis, diagnosis
    code, out, _ = run_fxflow("check", "model.py:Net", cwd=tmp_path)
    assert code == 1 and "exactly 0 after `mul` at model.py:12" in " ".join(out.split())


def test_a_forward_hook_that_detaches_is_named_with_its_line(tmp_path, run_fxflow):
    namespace = _load(tmp_path, HOOK_DETACH)
    torch.manual_seed(0)
    model, inputs = namespace["Net"](), namespace["example_inputs"]()
    grads = _plain_backward(model, inputs)
    assert grads["first.weight"] is None and grads["last.weight"] is not None
    code, out, _ = run_fxflow("check", "model.py:Net", cwd=tmp_path)
    words = " ".join(out.split())
    assert code == 1 and "<lambda> hook @ model.py:9" in words  # the line that registered it
    assert "the forward hook `<lambda>` (model.py:9) on `first` (Linear)" in words
    assert "produces a result that does not depend differentiably" not in words


def test_debug_only_adds_the_traceback(run_fxflow):
    code, _, err = run_fxflow("check", "tests/targets/forward_raises.py")
    assert code == 2 and "Traceback" not in err
    debug_code, _, debug_err = run_fxflow("check", "tests/targets/forward_raises.py", "--debug")
    assert debug_code == 2  # was 1, "a parameter will not learn", for a check that could not run
    assert "Traceback (most recent call last)" in debug_err
    assert debug_err.rstrip().splitlines()[-1] == err.rstrip().splitlines()[-1]  # the same one-line error last


def test_an_op_with_no_recorded_name_is_named_from_its_backward_never_empty():
    """A zero made by a call the recorder could not name (no ``__name__``) once read "exactly 0
    after ``": it is named from its backward node. (The model that showed it was not kept; this
    records such a call by hand on a real backward, and one the recorder never saw.)"""
    from fxflow.diagnose.localize import Localizer
    from fxflow.dynamic.backward_trace import AutogradGraph, GradientNorms, NodeOrigin, OriginRecorder

    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 4)
    loss = (layer(torch.randn(3, 4)) * torch.zeros(3, 4)).sum()  # made with no recorder running
    graph, norms = AutogradGraph(loss.grad_fn), GradientNorms()
    norms.watch(graph.nodes)
    loss.backward()
    norms.remove()
    assert layer.weight.grad.abs().sum() == 0  # what the real backward gives
    for named in (False, True):
        recorder = OriginRecorder(layer)
        if named:
            recorder.origins[loss.grad_fn.next_functions[0][0]] = NodeOrigin("", "model.py:3", None)
        localizer = Localizer(graph, norms, recorder, {id(layer.weight): 0.0})
        site = localizer.explain_zero(graph.leaves[id(layer.weight)])
        assert site is not None and "`mul`" in site.reason and "``" not in site.reason, site
