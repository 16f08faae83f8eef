"""Every example, run with the real CLI, and its verdicts checked against a plain PyTorch backward.

For each nn.Module class an example file defines, ``fxflow check FILE:Class --json`` must agree with
autograd itself: a parameter whose grad is None after a real forward and backward is exactly one
fxflow reports missing, and every static cut/unused/frozen verdict has no grad. The exit code is
0 exactly when the report is ok.
"""
import ast
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import fxflow_completed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
NOT_TARGETS = {"train_with_watch.py", "test_with_fxflow.py"}  # scripts, checked below


def _targets():
    """``examples/file.py:Class`` for every top-level nn.Module subclass defined in an example file."""
    found = []
    for filename in sorted(os.listdir(EXAMPLES)):
        if not filename.endswith(".py") or filename in NOT_TARGETS or filename.startswith("_"):
            continue
        tree = ast.parse(open(os.path.join(EXAMPLES, filename)).read())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any("Module" in ast.unparse(base) for base in node.bases) \
                    and _builds_without_arguments(node):
                found.append(f"examples/{filename}:{node.name}")
    return found


def _builds_without_arguments(node: ast.ClassDef) -> bool:
    """False for helper blocks whose __init__ needs arguments (they are parts, not targets)."""
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            arguments = item.args
            return len(arguments.args) - 1 <= len(arguments.defaults) and \
                all(default is not None for default in arguments.kw_defaults)
    return True


def _cli(*args):
    return fxflow_completed(*args, cwd=ROOT)


def _real_grads(target):
    """Build the model exactly as the CLI does (seed 0), then one plain forward and backward."""
    from fxflow.prepare.load import load_target

    torch.manual_seed(0)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        loaded = load_target(target)
    finally:
        os.chdir(cwd)
    assert loaded.inputs is not None, f"{target}: give it example_inputs()"
    output = loaded.model(*loaded.inputs)
    tensors = [t for t in torch.utils._pytree.tree_flatten(output)[0]
               if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    generator = torch.Generator().manual_seed(1)
    if tensors:  # an output that requires no grad at all leaves every grad None
        sum((t * torch.randn(t.shape, generator=generator)).sum() for t in tensors).backward()
    return {name: p.grad for name, p in loaded.model.named_parameters()}


@pytest.mark.parametrize("target", _targets())
def test_cli_verdicts_agree_with_a_real_backward(target):
    done = _cli("check", target, "--json")
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert done.returncode == (0 if report["ok"] else 1)
    grads = _real_grads(target)
    assert [p["name"] for p in report["parameters"]] == list(grads)
    for parameter in report["parameters"]:
        grad = grads[parameter["name"]]
        assert (parameter["dynamic"] == "missing") == (grad is None), parameter
        if parameter["static"] in ("cut", "unused", "frozen"):
            assert grad is None, parameter
        if parameter["static"] == "cut":
            assert parameter["cut_by"] and all(site["source"] for site in parameter["cut_by"]), parameter
        if parameter["dynamic"] == "zero":
            assert not grad.any(), parameter


def test_frozen_backbone_exits_zero_and_detached_one_needs_allow():
    frozen = _cli("check", "examples/transfer_frozen.py:FrozenBackbone", "--json")
    assert frozen.returncode == 0, frozen.stderr
    statics = {p["name"]: p["static"] for p in json.loads(frozen.stdout)["parameters"]}
    assert {v for k, v in statics.items() if k.startswith("backbone.")} == {"frozen"}
    detached = _cli("check", "examples/transfer_frozen.py:DetachedBackbone")
    assert detached.returncode == 1 and "detach @ examples/transfer_frozen.py:47" in detached.stdout
    allowed = _cli("check", "examples/transfer_frozen.py:DetachedBackbone", "--allow", "backbone.*")
    assert allowed.returncode == 0, allowed.stdout
    assert "cut (allowed)" in allowed.stdout


def test_training_script_with_watch():
    script = os.path.join(EXAMPLES, "train_with_watch.py")
    broken = subprocess.run([sys.executable, script, "--steps", "3"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert broken.returncode == 1, broken.stderr
    assert "first.weight   32x10  cut        missing" in broken.stdout
    assert "detach @ examples/train_with_watch.py:32" in broken.stdout
    fixed = subprocess.run([sys.executable, script, "--fixed", "--steps", "3"], capture_output=True, text=True,
                           cwd=ROOT, timeout=300)
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.splitlines()[-1].startswith("trained 3 steps")


def test_user_pytest_file_passes():
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/test_with_fxflow.py"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "4 passed" in done.stdout
