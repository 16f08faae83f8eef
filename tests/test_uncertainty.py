"""Honest uncertainty: what fxflow could not verify is reported as unknown, never as ok.

Each case is checked against what really happened: which capture ran, whether a backward ran,
and the real gradients of the same model.
"""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import fxflow
from fxflow.errors import FxflowError

TWO_INPUTS_AND_A_BRANCH = """
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x, y):
            h = self.a(x).detach()  # the cut no capture can see without inputs
            if h.sum() > y.sum():  # data-dependent: symbolic tracing cannot follow it
                return self.b(h)
            return self.b(h) * 2
"""


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(self.frozen(x))
        if h.sum() > -1e9:  # symbolic tracing cannot follow this
            return self.b(h)
        return self.c(h)


def test_nothing_verified_exits_2_with_what_to_supply(run_fxflow, write_model, tmp_path):
    path = write_model(tmp_path, TWO_INPUTS_AND_A_BRANCH)
    code, out, err = run_fxflow("check", f"{path}:Net")
    assert code == 2, out + err
    assert "ok" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "nothing could be verified" in lines[0], err
    assert "--input-size" in lines[0] and "example_inputs()" in lines[0]
    assert "Traceback" not in err


def test_nothing_verified_raises_in_the_api():
    with pytest.raises(FxflowError, match="nothing could be verified"):
        fxflow.check(Branchy(), None, infer=False)


def test_no_capture_gives_unknown_static_verdicts_and_real_dynamic_ones():
    model = Branchy()
    x = torch.randn(3, 4)
    report = fxflow.check(model, x, capture_methods=["symbolic_trace"])  # it cannot follow the branch
    assert report.trace.method == "none"
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    for parameter in report.parameters:
        real = dict(model.named_parameters())[parameter.name]
        if real.requires_grad:
            assert parameter.static == "unknown"
            assert parameter.agree is None  # nothing to agree with
        else:
            assert parameter.static == "frozen"
        assert parameter.dynamic == ("missing" if real.grad is None else "ok")
    assert report.counts()["unknown"] == 6
    assert report.ok is False  # c.weight/c.bias get no gradient: the backward says so
    assert {p.name for p in report.problems} == {"c.weight", "c.bias"}
    notes = " ".join(report.notes + report.trace.notes)
    assert "no backward ran" not in notes and "only the real backward" not in notes
    assert "no static verdict" in notes
    assert "6 static verdicts unknown (nothing captured)" in report.summary()
    data = json.loads(report.to_json())
    assert {p["static"] for p in data["parameters"]} == {"unknown", "frozen"}


def test_no_capture_and_a_healthy_backward_is_not_called_verified(run_fxflow, write_model, tmp_path):
    path = write_model(tmp_path, """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(4, 2)

            def forward(self, x):
                h = self.a(x)
                return h if h.sum() > -1e9 else -h

        def example_inputs():
            return (torch.randn(2, 4),)
    """)
    code, out, err = run_fxflow("check", f"{path}:Net", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["trace"]["method"] != "none"  # export or the run-time capture follows it
    assert all(p["static"] == "reachable" and p["agree"] for p in data["parameters"])


def test_stand_in_decisions_are_counted_and_name_their_parameters(monkeypatch):
    monkeypatch.setenv("FXFLOW_TWINS", "meta")  # meta twins cannot run a boolean mask: stand-ins do
    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.a(x)
            picked = h[h > 0]  # a boolean mask: its size depends on values
            return self.b(h) + picked.sum()

    report = fxflow.check(Masked(), torch.randn(3, 4), capture_methods=["symbolic_trace"])
    assert report.trace.method == "symbolic_trace"
    uncertain = report.uncertain
    assert uncertain["stand-ins"]["nodes"] >= 1
    assert uncertain["stand-ins"]["parameters"] == ["a.bias", "a.weight"]  # upstream of the mask only
    assert any("stand-in values" in note and "a.weight" in note for note in report.notes)
    assert json.loads(report.to_json())["uncertain"] == uncertain


def test_agree_is_never_forced_by_a_custom_function_downstream():
    class PassThrough(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)
            self.unused_by_backward = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(PassThrough.apply(self.a(x)))

    report = fxflow.check(Net(), torch.randn(2, 4))
    for parameter in report.parameters:
        if parameter.agree:
            expected = {"reachable": {"ok", "vanishing", "zero", "nonfinite", "present"}, "zero": {"zero", "present"},
                        "cut": {"missing"}, "frozen": {"missing"}, "unused": {"missing"}}[parameter.static]
            assert parameter.dynamic in expected, parameter


def test_a_walk_cut_short_is_counted(monkeypatch):
    import fxflow.core.history

    monkeypatch.setattr(fxflow.core.history, "_WALK_LIMIT", 3)  # MultiheadAttention's history is longer than that

    class Attends(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
            self.head = nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out, _ = self.attention(x, x, x)
            return self.head(out)

    report = fxflow.check(Attends(), torch.randn(2, 3, 8), capture_methods=["symbolic_trace"])
    found = report.uncertain["cut-short walk"]
    assert found["nodes"] >= 1
    assert "attention.in_proj_weight" in found["parameters"]  # the call owns it: a missed edge would be its
    assert any("walk limit" in note for note in report.notes)
