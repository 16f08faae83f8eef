"""No crash, anywhere: what a model's own objects raise, torch's own crashes, schedulers past their
horizon and odd input names end neither the check nor the process (issue 40)."""
from __future__ import annotations

import torch
from torch import nn

import fxflow
from fxflow.dynamic.unregistered import unregistered_tensors


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
