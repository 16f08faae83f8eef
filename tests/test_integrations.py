"""The integrations package: lazy imports, argument checks, and the examples of docs/integrations.md run as written."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "integrations.md"
FRAMEWORKS = ("transformers", "pytorch_lightning", "lightning", "accelerate", "peft")


def doc_examples() -> dict[str, str]:
    """The ```python blocks of docs/integrations.md, by the integration module each one imports."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    return {re.search(r"from fxflow\.integrations\.(\w+) import", block).group(1): block for block in blocks}


def test_importing_fxflow_and_its_integrations_package_imports_no_framework():
    code = ("import sys, fxflow, fxflow.integrations, fxflow.integrations.first_step\n"
            f"print(sorted(m for m in {FRAMEWORKS!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


@pytest.mark.parametrize("module, callback", [("transformers", "GradientFlowCallback"),
                                              ("lightning", "GradientFlowCheck")])
def test_on_problem_must_be_raise_or_warn(module, callback):
    pytest.importorskip({"transformers": "transformers", "lightning": "pytorch_lightning"}[module])
    integration = __import__(f"fxflow.integrations.{module}", fromlist=[callback])
    with pytest.raises(ValueError, match="on_problem must be one of 'raise', 'warn', got 'ignore'"):
        getattr(integration, callback)(on_problem="ignore")


def test_the_doc_has_one_short_example_per_integration():
    examples = doc_examples()
    assert sorted(examples) == ["lightning", "transformers"]
    assert all(len(block.strip().splitlines()) <= 20 for block in examples.values())


@pytest.mark.parametrize("name, library", [("transformers", "accelerate"), ("lightning", "pytorch_lightning")])
def test_doc_example_runs_and_prints_a_healthy_report(name, library, tmp_path, monkeypatch, capsys):
    pytest.importorskip(library)
    monkeypatch.chdir(tmp_path)  # the examples write their trainer output to the working directory
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    exec(compile(doc_examples()[name], f"{DOC}:{name}", "exec"), {"__name__": "__doc_example__"})
    out = capsys.readouterr().out
    assert out.count("fxflow check ") == 1
    assert re.search(r"^ok: all \d+ trainable parameters get a gradient", out, flags=re.M), out


def test_a_kwargs_only_wrapper_is_captured_as_it_was_called():
    """PeftModel.forward(*args, **kwargs), called with keywords as a Trainer does: nothing binds to
    positions, and the static half captures the call as it was made, ``model(**inputs)``."""
    import torch
    import torch.nn as nn

    import fxflow

    peft = pytest.importorskip("peft")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.last = nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x):
            return self.last(torch.relu(self.first(x)))

    torch.manual_seed(0)
    model = peft.get_peft_model(Net(), peft.LoraConfig(r=2, target_modules=["first"]))
    with fxflow.watch(model) as watch:
        model(x=torch.randn(3, 4)).sum().backward()
    report = watch.report
    assert report.trace.method != "none", report.notes
    assert {p.name: p.static for p in report.parameters if p.static != "frozen"} == {
        "base_model.model.first.lora_A.default.weight": "reachable", "base_model.model.first.lora_B.default.weight": "reachable"}
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert {p.name for p in report.parameters if p.static != "frozen"} == trainable
    # lora_A's gradient is exactly zero behind the zero lora_B: one watched step cannot tell that from a dead unit
    assert not report.problems and report.status == "not verified"
    assert {p.name: p.dynamic for p in report.unconfirmed} == {"base_model.model.first.lora_A.default.weight": "unconfirmed"}
