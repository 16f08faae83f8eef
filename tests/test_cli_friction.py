"""Friction a new user met, each fixed and held here by a real CLI run in a subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from conftest import ROOT


def test_allowed_backbone_summary_says_allowed_not_all_learn(run_fxflow):
    target = "examples/transfer_frozen.py:DetachedBackbone"
    code, out, err = run_fxflow("check", target, "--allow", "backbone.*", "-q")
    assert code == 0, err
    assert out == "ok: no unexpected problems; 4 allowed (cut)\n"
    code, out, err = run_fxflow("check", target, "--allow", "backbone.*", "--json")
    allowed = [p["name"] for p in json.loads(out)["parameters"] if p["allowed"] and p["static"] == "cut"]
    assert code == 0 and len(allowed) == 4


def test_allow_pattern_matching_nothing_warns_and_fails_under_strict(run_fxflow):
    code, out, err = run_fxflow("check", "examples/seed.py:Net", "--allow", "frist.*", "-q")
    assert code == 1  # the typo allowed nothing: the cut still fails
    assert err == "fxflow: warning: --allow 'frist.*' matches no parameter (parameter names look like first.weight)\n"
    code, out, err = run_fxflow("check", "examples/seed.py:Net", "--allow", "first.*", "--allow", "frist.*",
                                "--strict", "-q")
    assert code == 2 and out == ""
    assert err.splitlines() == ["fxflow: error: --allow 'frist.*' matches no parameter "
                                "(parameter names look like first.weight)"]


def test_empty_and_huge_input_sizes_are_one_line_errors(run_fxflow):
    code, out, err = run_fxflow("check", "examples/seed.py:Net", "--input-size", "0,10")
    assert (code, out) == (2, "") and len(err.splitlines()) == 1 and "size of 0" in err
    # 10^6 x 10^5 float32 is 373 GiB: refused before anything is allocated (this returns at once)
    code, out, err = run_fxflow("check", "examples/seed.py:Net", "--input-size", "1000000,100000")
    assert (code, out) == (2, "") and len(err.splitlines()) == 1
    assert err.startswith("fxflow: error: inputs of shape (1000000, 100000) need 373 GiB (")


def test_target_without_a_name(run_fxflow, write_model, tmp_path):
    # the only nn.Module subclass of the file
    code, out, err = run_fxflow("check", "examples/seed.py", "-q")
    assert code == 1 and "detach @ examples/seed.py:15" in out
    # several classes: the one example_inputs() is for is the one no other class builds
    write_model(tmp_path, """
        import torch
        from torch import nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)

            def forward(self, x):
                return torch.relu(self.fc(x))

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.Sequential(Block(), Block())

            def forward(self, x):
                return self.blocks(x)

        def example_inputs():
            return torch.randn(2, 4)
    """)
    code, out, err = run_fxflow("check", "model.py", "--json", cwd=tmp_path)
    assert code == 0, err
    assert json.loads(out)["target"] == "model.py:Net"


def test_failing_assert_hides_fxflows_frame(tmp_path):
    test_file = tmp_path / "test_model.py"
    test_file.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.join(str(ROOT), 'examples')!r})
        import fxflow
        from seed import Net, example_inputs

        def test_learns():
            fxflow.assert_gradients_flow(Net(), example_inputs())
    """))
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           str(test_file)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "fxflow.assert_gradients_flow(Net(), example_inputs())" in done.stdout  # the user's line
    assert "gradients do not reach every parameter of Net" in done.stdout
    assert "fxflow/testing.py" not in done.stdout and "raise AssertionError(failure_message" not in done.stdout
