"""Issue 41: the line is in the user's file. A cut made inside an installed package (transformers'
reentrant gradient checkpointing) is named at the user's line that leads there, the package's line
beside it; a global hook that detaches is one finding at its `return`; a `state_dict()` fed to
`torch.func.functional_call` is named at the `state_dict()` call; code typed at `python -c` keeps its
lines; the note for a model without inputs speaks to the Python API too. Each compared as exact text,
each failure checked against a real backward in plain torch where it is about gradients."""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import fxflow
from fxflow.present.text import render_text
from tests.models import marker_line
from tests.test_answers_fixes import StateDictCall  # state_dict() fed to functional_call

WIDTH = 100
ROOT = Path(__file__).resolve().parent.parent


def _rel(obj: object, marker: str) -> str:
    path, line = marker_line(obj, marker)
    return f"{os.path.relpath(path)}:{line}"


def _paragraphs(text: str) -> list[str]:
    """The report's paragraphs between the table and the loss line, as lines."""
    return text.split("\n\n")[2].splitlines()


def _no_gradient(model: nn.Module, *inputs: torch.Tensor) -> set[str]:
    """Plain torch: the trainable parameters a real backward leaves without a gradient."""
    model.zero_grad(set_to_none=True)
    output = model(*inputs)
    output = output.last_hidden_state if hasattr(output, "last_hidden_state") else output
    output.float().pow(2).mean().backward()
    missing = {name for name, p in model.named_parameters() if p.requires_grad and p.grad is None}
    model.zero_grad(set_to_none=True)
    return missing


# -- a cut made inside an installed package --------------------------------------------------------------------


def _vit() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                                    image_size=16, patch_size=8)
    model = transformers.ViTModel(config, add_pooling_layer=False)
    model.embeddings.requires_grad_(False)  # frozen embeddings: the checkpointed layers' inputs need no grad
    return model


class FrozenStemViT(nn.Module):
    """A user's model around a transformers ViT whose layers run under reentrant gradient checkpointing."""

    def __init__(self) -> None:
        super().__init__()
        self.vit = _vit()
        self.vit.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        self.head = nn.Linear(16, 2)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        hidden = self.vit(pixel_values=pixels).last_hidden_state  # the user's call
        return self.head(hidden[:, 0])


_CHECKPOINT_REASON = ("a reentrant checkpoint (use_reentrant=True) whose inputs do not require grad returns a result "
                      "with no autograd history, so the parameters inside it get no gradient "
                      "(transformers/modeling_layers.py:{line}, in an installed package, {how} {where})")


def _library_line() -> int:
    """The line of transformers' own checkpoint call (its version decides it)."""
    from transformers import modeling_layers

    with open(modeling_layers.__file__, encoding="utf-8") as handle:
        return next(number for number, text in enumerate(handle, 1) if "return self._gradient_checkpointing_func(" in text)


def test_a_checkpoint_cut_inside_transformers_is_named_at_the_user_s_call() -> None:
    model = FrozenStemViT()
    model.train()
    pixels = torch.randn(2, 3, 16, 16)
    layers = {name for name, p in model.named_parameters() if name.startswith("vit.layers.")}
    assert _no_gradient(model, pixels) == layers  # plain torch: every checkpointed layer is dry
    report = fxflow.check(model, pixels)
    call = _rel(FrozenStemViT, "the user's call")
    assert {s.source for name in layers for s in report.parameter(name).cut_by} == {call}
    paragraph = report.parameter("vit.layers.0.mlp.fc1.weight").cut_by[0]
    assert paragraph.reason == _CHECKPOINT_REASON.format(line=_library_line(), how="called at", where=call)
    text = render_text(report, width=None)
    assert _paragraphs(text)[0].startswith(f"checkpoint at {call} (node checkpoint) cuts vit.layers.0.attention")
    assert len([line for line in _paragraphs(text) if line.startswith("checkpoint at")]) == 1  # both layers, one finding
    fix = next(line.strip() for line in text.splitlines() if line.strip().startswith("fix: pass `use_reentrant"))
    assert fix.startswith('fix: pass `use_reentrant=False` to the checkpoint (`gradient_checkpointing_kwargs={"use_reentrant": '
                          'False}` in transformers), or make its input require grad (`model.enable_input_require_grads()`)')


def test_a_checkpoint_cut_in_a_library_model_is_named_where_the_user_turned_it_on() -> None:
    model = _vit()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})  # turned on
    model.train()
    pixels = torch.randn(2, 3, 16, 16)
    layers = {name for name, p in model.named_parameters() if name.startswith("layers.")}
    assert _no_gradient(model, pixels) == layers
    report = fxflow.check(model, pixels)
    where = _rel(test_a_checkpoint_cut_in_a_library_model_is_named_where_the_user_turned_it_on, "turned on")
    assert {s.source for name in layers for s in report.parameter(name).cut_by} == {where}
    assert report.parameter("layers.1.mlp.fc2.bias").cut_by[0].reason == _CHECKPOINT_REASON.format(
        line=_library_line(), how="set up by `gradient_checkpointing_enable` at", where=where)
    assert report.summary().endswith(f"32 cut (first cut: checkpoint @ {where}); 4 frozen")


_ADAPTERS = """
import torch
from torch import nn


class NoGradAdapter(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.down = nn.Linear(dim, 4)
        self.up = nn.Linear(4, dim)

    def forward(self, x):
        with torch.no_grad():
            h = self.down(x)  # the package's no_grad
        return x + self.up(h)


class DetachingAdapter(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(x).detach() + x  # the package's detach
"""


def _marked(text: str, what: str) -> int:
    """The line number in ``text`` of the line ending ``# the package's <what>``."""
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.endswith(f"# the package's {what}"))


class AdaptedModel(nn.Module):
    def __init__(self, adapters: object) -> None:
        super().__init__()
        self.stem = nn.Linear(8, 8)
        self.adapter = adapters.NoGradAdapter(8)
        self.other = adapters.DetachingAdapter(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.adapter(self.stem(x))  # the user's adapter call
        return self.other(h)  # the user's other call


@pytest.mark.parametrize("capture", ["symbolic_trace", "runtime"])
def test_a_package_s_no_grad_and_detach_are_named_at_the_user_s_calls(tmp_path: Path, monkeypatch, capture) -> None:
    """An adapter package (installed: it lies in site-packages) that cuts inside its own forward."""
    package = tmp_path / "site-packages" / "lines41_adapters"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(_ADAPTERS)
    monkeypatch.syspath_prepend(str(package.parent))
    import lines41_adapters

    torch.manual_seed(0)
    model, x = AdaptedModel(lines41_adapters), torch.randn(2, 8)
    cut = {"adapter.down.weight", "adapter.down.bias", "other.proj.weight", "other.proj.bias"}
    assert _no_gradient(model, x) == cut
    report = fxflow.check(model, x, capture_methods=[capture])
    no_grad, detach = report.parameter("adapter.down.weight").cut_by[0], report.parameter("other.proj.bias").cut_by[0]
    call, other = _rel(AdaptedModel, "the user's adapter call"), _rel(AdaptedModel, "the user's other call")
    op = "Linear" if capture == "symbolic_trace" else "linear"
    inner, detached = (f"lines41_adapters/__init__.py:{_marked(_ADAPTERS, m)}" for m in ("no_grad", "detach"))
    assert (no_grad.op, no_grad.source, no_grad.reason) == (
        "no_grad", call, f"{op} ({inner}) runs inside torch.no_grad(), entered in an installed package (called at "
        f"{call}), so autograd records nothing for it")
    assert (detach.op, detach.source, detach.reason) == (
        "detach", other, "detach() returns a tensor with no autograd history, so the gradient stops here "
        f"({detached}, in an installed package, called at {other})")


# -- a global forward hook -------------------------------------------------------------------------------------------


def _detach_eights(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor | None:
    if isinstance(module, nn.Linear) and module.out_features == 8:
        return output.detach()  # the hook's return
    return None


class ThreeLinears(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.c = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.c(self.a(self.a(x))))


def test_a_global_hook_that_detaches_is_one_finding_at_its_return() -> None:
    torch.manual_seed(0)
    model, x = ThreeLinears(), torch.randn(4, 8)
    handle = torch.nn.modules.module.register_module_forward_hook(_detach_eights)
    try:
        assert _no_gradient(model, x) == {"a.weight", "a.bias", "c.weight", "c.bias"}
        report = fxflow.check(model, x)
    finally:
        handle.remove()
    hook = _rel(ThreeLinears, "the hook's return")
    assert _paragraphs(render_text(report, width=WIDTH)) == [
        f"_detach_eights hook at {hook} (node a_1) cuts a.weight, a.bias, c.weight,",
        f"c.bias off from the output: the forward hook `_detach_eights` ({hook}) on",
        "`a` (Linear) and `c` (Linear) returns a result with no autograd history, so the gradient stops here.",
        "fix: return the module's output from the hook without detaching it; for a deliberate freeze, pass",
        "  --allow 'a.*' --allow 'c.*'"]


def test_the_picture_still_marks_every_call_the_hook_cuts() -> None:
    from fxflow.render import to_svg_text
    from render_helpers import parse_svg

    torch.manual_seed(0)
    handle = torch.nn.modules.module.register_module_forward_hook(_detach_eights)
    try:
        report = fxflow.check(ThreeLinears(), torch.randn(4, 8))
    finally:
        handle.remove()
    nodes, _, _ = parse_svg(to_svg_text(report))
    assert "fxflow-cut" in nodes["a_1"].classes and "fxflow-cut" in nodes["c"].classes


# -- a state_dict() fed to functional_call ---------------------------------------------------------------------------


def test_a_state_dict_fed_to_functional_call_is_named_at_the_state_dict_call() -> None:
    torch.manual_seed(0)
    model, x = StateDictCall(), torch.randn(4, 8)
    assert _no_gradient(model, x) == {"inner.weight", "inner.bias"}
    report = fxflow.check(model, x)
    lines, start = inspect.getsourcelines(StateDictCall.forward)
    number = start + next(i for i, text in enumerate(lines) if ".state_dict()" in text)
    line = f"{os.path.relpath(inspect.getsourcefile(StateDictCall))}:{number}"
    assert _paragraphs(render_text(report, width=WIDTH))[:4] == [
        f"inner.weight, inner.bias (reachable / missing): `state_dict()` at {line}",
        "hands forward detached copies (tensors with no autograd history), and forward computes with the",
        "copies (as `torch.func.functional_call` does with a `state_dict()`), so no gradient reaches the",
        "parameter itself."]


# -- code typed at python -c ------------------------------------------------------------------------------------------

_TYPED = """
import torch, fxflow
from torch import nn
class DeadRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(4, 8, nonlinearity='relu', batch_first=True)
        with torch.no_grad():
            self.rnn.bias_ih_l0.fill_(-100.0)
    def forward(self, x):
        out, _ = self.rnn(x)
        return out[:, -1]
torch.manual_seed(0)
print(fxflow.check(DeadRNN(), torch.randn(2, 5, 4)).parameter('rnn.weight_ih_l0').diagnosis.split(':')[0])
one_step = fxflow.check(nn.RNN(4, 8, nonlinearity='relu'), torch.randn(1, 2, 4))
print(one_step.summary())
print([(s.op, s.source) for s in one_step.parameter('weight_hh_l0').cut_by])
"""


def test_an_rnn_under_python_c_names_the_module_and_the_typed_line() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-c", _TYPED], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "exactly 0 after `relu` inside `rnn` (nn.RNN), called at <string>",
        "problem: 1 of 4 parameters will not learn: 1 with an exactly zero gradient (first zero: RNN @ <string>:15)",
        "[('RNN', '<string>:15')]"]


def test_a_one_step_rnn_as_the_whole_model_is_named_as_the_rnn_in_a_file() -> None:
    torch.manual_seed(0)
    report = fxflow.check(nn.RNN(4, 8, nonlinearity="relu"), torch.randn(1, 2, 4))  # the check's call
    (site,) = report.parameter("weight_hh_l0").cut_by
    here = _rel(test_a_one_step_rnn_as_the_whole_model_is_named_as_the_rnn_in_a_file, "the check's call")
    assert (site.op, site.source) == ("RNN", here)
    assert site.reason.startswith("RNN's result does not change when this input changes")


# -- the Python API's note for a model with no inputs -----------------------------------------------------------------


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.scale * x + y


def test_the_no_inputs_note_says_how_to_pass_inputs_in_python() -> None:
    report = fxflow.check(TwoInputs())
    assert report.notes[-1] == (
        "no example inputs for forward(x, y): none were given and they could not be inferred from the first layer, "
        "so no backward ran; give them: `fxflow.check(model, (x, y))` in Python, one --input-size per input on the "
        "command line (e.g. --input-size 16,10), or example_inputs() in the model's file")


_FACTORY = '''import torch
import transformers


def make():
    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                    intermediate_size=32, image_size=16, patch_size=8)
    model = transformers.ViTModel(config, add_pooling_layer=False)
    model.embeddings.requires_grad_(False)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})  # the factory turns it on
    model.train()
    return model


def example_inputs():
    return torch.randn(2, 3, 16, 16)
'''


def test_a_checkpoint_a_factory_turned_on_is_named_at_its_line_from_the_cli(tmp_path: Path, run_fxflow) -> None:
    pytest.importorskip("transformers")
    (tmp_path / "factory.py").write_text(_FACTORY)
    sys.path.insert(0, str(tmp_path))
    try:
        import factory
        model, pixels = factory.make(), factory.example_inputs()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("factory", None)
    layers = {name for name, p in model.named_parameters() if name.startswith("layers.")}
    assert _no_gradient(model, pixels) == layers  # plain torch: every checkpointed layer is dry
    code, out, err = run_fxflow("check", "factory.py:make", "--json", cwd=tmp_path)  # the make() is not on the stack
    assert code == 1, err
    rows = {row["name"]: row for row in json.loads(out)["parameters"]}
    line = _FACTORY.splitlines().index(next(t for t in _FACTORY.splitlines() if t.endswith("# the factory turns it on"))) + 1
    sites = {(site["op"], site["source"]) for name in layers for site in rows[name]["cut_by"]}
    assert sites == {("checkpoint", f"factory.py:{line}")}
    assert "set up by `gradient_checkpointing_enable` at factory.py:" in rows["layers.0.mlp.fc1.weight"]["cut_by"][0]["reason"]
