"""The public Python API: exports, lazy imports, check() and assert_gradients_flow()."""
import inspect
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import fxflow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
from seed import Net  # noqa: E402
from transfer_frozen import DetachedBackbone, FrozenBackbone  # noqa: E402


def test_public_names_resolve():
    for name in fxflow.__all__:
        assert getattr(fxflow, name) is not None
    assert fxflow.Report.__name__ == "Report"
    with pytest.raises(AttributeError):
        fxflow.no_such_thing


def test_importing_fxflow_does_not_import_torch():
    code = "import sys, fxflow; fxflow.__version__; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_check_signature_matches_issue_5():
    parameters = inspect.signature(fxflow.check).parameters
    for name in ("inputs", "loss_fn", "backward", "device", "allow", "vanishing"):
        assert name in parameters
    assert parameters["backward"].default is True and parameters["vanishing"].default == 1e-3


def test_check_accepts_device():
    torch.manual_seed(0)
    report = fxflow.check(Net(), torch.randn(16, 10), device="cpu")
    assert report.device == "cpu"


def test_check_reproduces_the_seed_numbers_with_the_seed_loss():
    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(16, 10), torch.randint(0, 2, (16,))
    report = fxflow.check(model, x, loss_fn=lambda out: nn.CrossEntropyLoss()(out, y))
    assert [f"{p.grad_norm:.6f}" for p in report.parameters if p.grad_norm is not None] == ["0.184076", "0.079574"]
    data = report.to_dict()
    assert data["parameters"][0]["cut_by"][0]["op"] == "detach" and data["ok"] is False


def test_assert_gradients_flow_message_names_parameters_op_and_line():
    torch.manual_seed(0)
    with pytest.raises(AssertionError) as caught:
        fxflow.assert_gradients_flow(Net(), torch.randn(16, 10))
    message = str(caught.value)
    lines = message.splitlines()
    assert lines[0] == "gradients do not reach every parameter of Net"
    assert lines[1].startswith("problem: 4 of 6 parameters will not learn: 4 cut")
    assert "  first.weight   cut/missing  cut by detach @ examples/seed.py:15" in lines
    assert "  middle.bias    cut/missing  cut by detach @ examples/seed.py:15" in lines
    assert not any(line.startswith("  last.") for line in lines)
    assert "detach() returns a tensor with no autograd history" in message


def test_assert_gradients_flow_passes_frozen_and_allowed():
    report = fxflow.assert_gradients_flow(FrozenBackbone(), torch.randn(2, 3, 32, 32))
    assert report.ok
    with pytest.raises(AssertionError, match="backbone.0.weight"):
        fxflow.assert_gradients_flow(DetachedBackbone(), torch.randn(2, 3, 32, 32))
    fxflow.assert_gradients_flow(DetachedBackbone(), torch.randn(2, 3, 32, 32), allow=["backbone.*"])


def test_assert_gradients_flow_passes_options_through():
    torch.manual_seed(0)
    with pytest.raises(AssertionError, match="zero"):
        fxflow.assert_gradients_flow(nn.Linear(3, 2), torch.randn(4, 3), loss_fn=lambda out: 0.0 * out.sum())


class _Keyword(torch.nn.Module):
    """forward(x, mask=None, gate=None): the calling convention of Hugging Face models."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(6, 6)
        self.gate_proj = torch.nn.Linear(6, 6)

    def forward(self, x, mask=None, gate=None):
        h = self.body(x)
        if gate is not None:
            h = h * torch.sigmoid(self.gate_proj(gate)).detach()  # gate_proj is cut only when gate is given
        return h if mask is None else h * mask


def test_keyword_inputs_bind_to_forward_and_match_the_real_backward():
    torch.manual_seed(0)
    model = _Keyword()
    x, gate = torch.randn(2, 6), torch.randn(2, 6)
    report = fxflow.check(model, {"x": x, "gate": gate})
    model(x, gate=gate).sum().backward()
    for name, parameter in model.named_parameters():
        assert (report.parameter(name).dynamic == "missing") == (parameter.grad is None), name
        assert (report.parameter(name).static == "cut") == (parameter.grad is None), name
    assert report.parameter("gate_proj.weight").cut_by[0].op == "detach"


def test_keyword_inputs_naming_no_argument_fail_clearly():
    with pytest.raises(fxflow.FxflowError, match="no positional argument 'hidden'"):
        fxflow.check(_Keyword(), {"x": torch.randn(2, 6), "hidden": torch.randn(2, 6)})


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_device_the_machine_lacks_is_one_clear_error_from_the_api():
    model = nn.Linear(3, 2)
    with pytest.raises(fxflow.FxflowError) as raised:
        fxflow.check(model, (torch.randn(2, 3),), device="cuda")
    assert str(raised.value).splitlines()[0].startswith("cannot move the model to 'cuda':")
    assert next(model.parameters()).device.type == "cpu"


def test_a_forward_that_raises_names_the_python_inputs_too():
    class NeedsTwo(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(3, 2)

        def forward(self, x):
            return self.linear(x)

    with pytest.raises(fxflow.FxflowError) as raised:
        fxflow.check(NeedsTwo(), (torch.randn(2, 5),))
    assert "the inputs given to fxflow.check" in str(raised.value)
