"""Green means verified (issue 17): exit 0 only when the real loss reached every parameter the
optimizer trains; every known false green and false red, each against the real backward it is
about, on every capture path that captures the model.

Models are defined here, small and of the shape the bug reports had. ``PATHS`` are the capture
methods; each case says where a capture is expected to work, so a path that stops working
fails instead of hiding as a skip.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import pytest

import fxflow
from gradtruth import assert_agrees, line_of, real_gradients, real_grads

PATHS = ("symbolic_trace", "torch.export", "runtime")
HERE = __file__


def check(model: nn.Module, inputs, path: str | None = None, **options) -> fxflow.Report:
    return fxflow.check(model, inputs, capture_methods=[path] if path else None, **options)


# -- 1. every parameter frozen by mistake ------------------------------------------------------
class FrozenByMistake(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(10, 16)
        self.head = nn.Linear(16, 2)
        for p in self.parameters():  # meant: self.backbone.parameters()
            p.requires_grad = False

    def forward(self, x):
        return self.head(torch.relu(self.backbone(x)))


def test_every_parameter_frozen_fails_and_so_does_a_plain_backward():
    model, x = FrozenByMistake(), torch.randn(4, 10)
    with pytest.raises(RuntimeError, match="does not require grad"):
        model(x).sum().backward()
    report = check(model, x)
    assert report.everything_frozen and not report.ok and report.exit_code == 1
    assert report.summary() == "problem: nothing will learn: every parameter is frozen (loss.backward() would raise)"
    with pytest.raises(AssertionError, match="every parameter is frozen"):
        fxflow.assert_gradients_flow(model, x)


def test_a_model_without_parameters_has_nothing_to_train():
    report = check(nn.ReLU(), torch.randn(4, 10, requires_grad=True))
    assert not report.ok and not report.verified and report.exit_code == 0  # nothing was verified
    assert report.summary() == "nothing to train: the model has no parameters, so there is no gradient to verify"


# -- 2. the model's own loss --------------------------------------------------------------------
class LossOnDetachedLogits(nn.Module):
    """Returns {"loss", "logits"}; the loss is built from logits.detach(), so nothing learns."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(10, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x, labels=None):
        logits = self.head(torch.relu(self.body(x)))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits.detach(), labels)  # the planted bug
        return out


class TupleWithLoss(nn.Module):
    """Hugging Face's return_dict=False convention: (loss, logits) when labels are given."""

    def __init__(self, detach: bool):
        super().__init__()
        self.body = nn.Linear(10, 3)
        self.extra = nn.Linear(10, 3)  # only in the logits output, never in the loss
        self.detach = detach

    def forward(self, x, labels=None):
        logits = self.body(x)
        loss = F.cross_entropy(logits.detach() if self.detach else logits, labels)
        return loss, logits + self.extra(x)


LABELLED = {"x": torch.randn(4, 10), "labels": torch.tensor([0, 1, 2, 0])}


@pytest.mark.parametrize("path", PATHS)
def test_the_models_own_loss_is_what_the_backward_runs_on(path):
    model = LossOnDetachedLogits()
    truth = real_grads(model, (), LABELLED)
    assert not any(truth.values())  # the real training step trains nothing
    report = check(model, LABELLED, path)
    assert report.loss == "the model's `loss` output"
    assert_agrees(report, truth)
    assert {p.dynamic for p in report.parameters} == {"missing"} and report.exit_code == 1
    if report.trace.method != "none":
        line = line_of(HERE, "the planted bug")
        assert {s.source for p in report.parameters for s in p.cut_by} == {f"{_here()}:{line}"}


@pytest.mark.parametrize("path", PATHS)
def test_a_tuple_whose_first_element_is_the_loss_when_labels_are_given(path):
    for detach in (False, True):
        model = TupleWithLoss(detach)
        truth = real_grads(model, (), LABELLED)
        assert truth == {"body.weight": not detach, "body.bias": not detach,
                         "extra.weight": False, "extra.bias": False}
        report = check(model, LABELLED, path)
        assert report.loss == "the model's first output (its loss: labels were given)"
        assert {p.name: p.dynamic for p in report.parameters}["extra.weight"] == "missing"
        assert_agrees(report, truth)


def test_without_labels_every_output_counts_and_the_report_says_so():
    model = LossOnDetachedLogits()
    report = check(model, {"x": torch.randn(4, 10)})
    assert report.loss == "random projection of all outputs (the model returns no loss)"
    assert report.ok


def test_a_hugging_face_model_output_loss_is_used():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 50, (2, 8))
    report = check(model, {"input_ids": ids, "labels": ids})
    assert report.loss == "the model's `loss` output" and report.ok
    assert report.to_dict()["loss"] == "the model's `loss` output"


def test_a_loss_function_of_outputs_and_inputs(run_fxflow, write_model, tmp_path):
    path = write_model(tmp_path, """
        import torch
        import torch.nn.functional as F
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(10, 3)
                self.unused_by_the_loss = nn.Linear(10, 3)

            def forward(self, x, labels):
                return {"logits": self.body(x), "aux": self.unused_by_the_loss(x)}

        def example_inputs():
            return {"x": torch.randn(4, 10), "labels": torch.tensor([0, 1, 2, 0])}

        def loss(output, inputs):
            return F.cross_entropy(output["logits"], inputs["labels"])

        def not_a_scalar(output, inputs):
            return output["logits"]
    """)
    code, out, err = run_fxflow("check", f"{path}:Net", "--loss", f"{path}:loss")
    assert code == 1, err
    assert "loss: the given loss function `loss`" in out
    assert "unused_by_the_loss.weight" in out and "missing" in out
    code, out, err = run_fxflow("check", f"{path}:Net")  # no --loss: the projection trains both
    assert code == 0, err
    code, out, err = run_fxflow("check", f"{path}:Net", "--loss", f"{path}:not_a_scalar")
    assert code == 2 and err.strip().count("\n") == 0
    assert "the loss function must return a scalar tensor, not a tensor of shape (4, 3)" in err
    code, out, err = run_fxflow("check", f"{path}:Net", "--loss", f"{path}:nowhere")
    assert code == 2 and "defines no 'nowhere'" in err


# -- 3. parameters the optimizer never sees -----------------------------------------------------
class Unregistered(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(10, 16), nn.Linear(16, 16)]  # a plain list: not registered
        self.scale = torch.ones(16, requires_grad=True)  # not an nn.Parameter
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x * self.scale)


@pytest.mark.parametrize("path", PATHS)
def test_tensors_the_optimizer_never_sees_are_unregistered(path):
    model, x = Unregistered(), torch.randn(4, 10)
    registered = {id(p) for p in model.parameters()}
    model(x).sum().backward()  # the real backward fills their .grad, yet no optimizer has them
    assert model.scale.grad is not None and id(model.scale) not in registered
    assert model.layers[0].weight.grad is not None and id(model.layers[0].weight) not in registered
    model.zero_grad(set_to_none=True)
    model.scale.grad = None
    for layer in model.layers:
        layer.zero_grad(set_to_none=True)

    report = check(model, x, path)
    found = {p.name: p for p in report.parameters if p.static == "unregistered"}
    assert list(found) == ["layers[0].weight", "layers[0].bias", "layers[1].weight", "layers[1].bias", "scale"]
    assert found["layers[0].weight"].reasons == ["in-container"]  # the fix line says nn.ModuleList
    assert "kept in a plain Python list" in found["layers[0].weight"].diagnosis
    assert found["scale"].reasons == ["plain-tensor"] and "plain tensor attribute" in found["scale"].diagnosis
    assert found["scale"].shape == (16,)
    assert report.exit_code == 1 and "5 unregistered" in report.summary()
    assert model.scale.grad is None and model.layers[0].weight.grad is None  # left as found
    assert not any("not installed as a submodule" in note for note in report.trace.notes)


# -- 4. no backward ran -------------------------------------------------------------------------
class Halve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x / 2

    @staticmethod
    def backward(ctx, grad):
        return None  # gives nothing back: only running it shows that


class ThreeInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)

    def forward(self, q, k, lengths):
        return self.fc(Halve.apply(self.norm(q))) + k


def test_without_a_backward_nothing_is_ok_and_a_function_that_never_ran_decides_nothing():
    report = check(ThreeInputs(), None)
    assert not report.verified and not report.ok and report.status == "not verified" and report.exit_code == 2
    verdicts = {p.name: p.static for p in report.parameters}
    assert verdicts == {"norm.weight": "unknown", "norm.bias": "unknown", "fc.weight": "reachable", "fc.bias": "reachable"}
    assert report.summary().startswith("not verified: no backward ran for forward(q, k, lengths) "
                                       "(give --input-size or example_inputs())")
    assert any("forward(q, k, lengths)" in note for note in report.notes)
    with pytest.raises(AssertionError, match="not verified"):
        fxflow.assert_gradients_flow(ThreeInputs())
    # with inputs, the real backward shows what the Function does: no gradient for the norm
    inputs = (torch.randn(2, 8), torch.randn(2, 8), torch.tensor([8, 8]))
    truth = real_grads(ThreeInputs(), inputs)
    assert truth == {"norm.weight": False, "norm.bias": False, "fc.weight": True, "fc.bias": True}
    checked = check(ThreeInputs(), inputs)
    assert_agrees(checked, truth)


def test_no_backward_asked_for_keeps_its_own_wording():
    model = nn.Sequential(nn.Linear(10, 4), nn.ReLU(), nn.Linear(4, 2))
    report = check(model, torch.randn(2, 10), backward=False)
    assert report.static_only and report.exit_code == 0 and not report.verified
    assert not report.ok and report.status == "static only" and report.to_dict()["ok"] is False  # never "ok" unverified
    assert report.summary().startswith("static only (--no-backward): all 4 trainable parameters")
    assert "ok" not in report.summary().split(":")[0]


# -- 5. inputs inferred where they can be -------------------------------------------------------
def _first_layers() -> dict[str, nn.Module]:
    from torch.nn.utils import parametrizations

    class AttentionFirst(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
            self.out = nn.Linear(8, 2)

        def forward(self, x):
            return self.out(self.attn(x, x, x)[0])

    return {
        "weight_norm": nn.Sequential(parametrizations.weight_norm(nn.Linear(10, 8)), nn.Linear(8, 2)),
        "spectral_norm": nn.Sequential(parametrizations.spectral_norm(nn.Linear(10, 8)), nn.Linear(8, 2)),
        "orthogonal": nn.Sequential(parametrizations.orthogonal(nn.Linear(8, 8)), nn.Linear(8, 2)),
        "layer_norm": nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 2)),
        "multihead_attention": AttentionFirst(),
    }


@pytest.mark.parametrize("kind", ["weight_norm", "spectral_norm", "orthogonal", "layer_norm", "multihead_attention"])
def test_inputs_are_inferred_for_first_layers_that_say_their_shape(kind):
    model = _first_layers()[kind]
    report = check(model, None)
    assert report.verified, report.notes
    assert report.ok, report.table()
    assert any(note.startswith("inputs inferred from the first layer") for note in report.notes)


# -- 6. dropout decides the verdict -------------------------------------------------------------
class DropoutGate(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(10, 1)
        self.body = nn.Linear(10, 2)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        gate = self.drop(torch.sigmoid(self.gate(x[:1])))  # one unit: dropped on half the seeds
        return self.body(x) * gate.sum()


def test_a_gate_dropout_zeroed_learns_on_other_draws_and_names_the_dropout():
    model, x = DropoutGate(), torch.randn(4, 10)
    line = f"{_here()}:{line_of(HERE, 'one unit: dropped')}"
    outcomes = set()
    for seed in range(8):
        torch.manual_seed(seed)
        real = real_gradients(model, (x,))
        dropped = float(real["gate.weight"].abs().sum()) == 0.0
        torch.manual_seed(seed)
        report = check(model, x)
        gate = report.parameter("gate.weight")
        # dropped on this draw, kept on others: it learns on some steps, so the check passes
        assert (gate.dynamic == "intermittent") == dropped and report.ok, report.table()
        if dropped:
            assert gate.random_ops == [f"Dropout @ {line}"] and "the model's own randomness decides" in gate.diagnosis
        else:
            assert gate.random_ops == [] and gate.dynamic == "ok"
        outcomes.add(dropped)
    assert outcomes == {True, False}


# -- 7. autograd.grad(create_graph=True) inside forward ------------------------------------------
class GradientPenalty(nn.Module):
    """R1/WGAN-GP: the penalty on the critic's input gradient is differentiable in the critic."""

    def __init__(self, create_graph: bool = True, with_score: bool = False):
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 1))
        self.create_graph = create_graph
        self.with_score = with_score

    def forward(self, x):
        x = x.detach().requires_grad_(True)
        score = self.critic(x)
        grad, = torch.autograd.grad(score, x, grad_outputs=torch.ones_like(score), create_graph=self.create_graph,
                                    retain_graph=True)  # score.mean() is differentiated too
        penalty = (grad.norm(2, dim=1) - 1).pow(2).mean()
        return penalty + score.mean() if self.with_score else penalty + 0 * x.sum()


@pytest.mark.parametrize("path", ["symbolic_trace", "runtime"])
@pytest.mark.parametrize("with_score", [False, True])
def test_a_gradient_penalty_is_differentiable_in_what_the_derivative_reads(path, with_score):
    model, x = GradientPenalty(with_score=with_score), torch.randn(4, 10)
    truth = real_grads(model, (x,))
    # d score / dx reads the first layer and the last weight, never the last bias
    assert truth == {"critic.0.weight": True, "critic.0.bias": True, "critic.2.weight": True,
                     "critic.2.bias": with_score}
    report = check(model, x, path)
    assert report.trace.method == path
    assert_agrees(report, truth)
    assert report.exit_code == (0 if with_score else 1)
    assert not any(s.op == "ones_like" for p in report.parameters for s in p.cut_by)


@pytest.mark.parametrize("path", ["symbolic_trace", "runtime"])
def test_without_create_graph_the_gradient_is_a_cut(path):
    model, x = GradientPenalty(create_graph=False, with_score=True), torch.randn(4, 10)
    report = check(model, x, path)
    assert_agrees(report, real_grads(model, (x,)))


# -- 8. the index output of a multi-output op ----------------------------------------------------
class RouteByArgmaxIndex(nn.Module):
    def __init__(self, how: str):
        super().__init__()
        self.scorer = nn.Linear(10, 4)
        self.table = nn.Embedding(4, 6)
        self.how = how

    def forward(self, x):
        scores = self.scorer(x)
        if self.how == "max":
            _, index = torch.max(scores, -1)  # only the indices are used
        elif self.how == "max.indices":
            index = scores.max(-1).indices  # the named field of max's result
        elif self.how == "topk":
            _, index = torch.topk(scores, 2)
        else:
            _, index = torch.sort(scores, -1)
        return self.table(index)


@pytest.mark.parametrize("how", ["max", "max.indices", "topk", "sort"])
@pytest.mark.parametrize("path", PATHS)
def test_the_index_output_cuts_at_its_line(path, how):
    model, x = RouteByArgmaxIndex(how), torch.randn(4, 10)
    truth = real_grads(model, (x,))
    assert truth == {"scorer.weight": False, "scorer.bias": False, "table.weight": True}
    report = check(model, x, path)
    assert_agrees(report, truth)
    marker = {"max": "only the indices", "max.indices": "the named field of max"}.get(how, f"torch.{how}(scores")
    line = f"{_here()}:{line_of(HERE, marker)}"
    for name in ("scorer.weight", "scorer.bias"):
        parameter = report.parameter(name)
        assert parameter.static == "cut", (name, parameter.static, parameter.diagnosis)
        assert [s.source for s in parameter.cut_by] == [line]


# -- 10. lazy modules and torch.jit.script'ed submodules ------------------------------------------
class Lazy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.LazyLinear(8)
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        return self.out(torch.relu(self.fc(x)))


class Scripted(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.jit.script(nn.Sequential(nn.Linear(10, 8), nn.ReLU()))
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        return self.out(self.block(x))


@pytest.mark.parametrize("path", PATHS)
def test_a_lazy_module_is_initialized_then_checked(path):
    model, x = Lazy(), torch.randn(4, 10)
    report = check(model, x, path)
    assert report.ok, report.table()
    assert any("lazy parameters" in note for note in report.notes)
    assert type(model.fc) is nn.LazyLinear and isinstance(model.fc.weight, nn.parameter.UninitializedParameter)
    model(x)  # lazy again, as found: the user's own first step initializes it
    assert_agrees(report, real_grads(model, (x,)))


@pytest.mark.parametrize("path", PATHS)
def test_a_jit_scripted_submodule_checks_normally(path):
    model, x = Scripted(), torch.randn(4, 10)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    report = check(model, x, path)
    assert report.ok, report.table()
    if path == "torch.export":  # export refuses a ScriptModule: the backward alone speaks
        assert report.trace.method == "none" and {p.static for p in report.parameters} == {"unknown"}
    else:
        assert_agrees(report, real_grads(model, (x,)))
    assert all(torch.equal(before[name], p) and p.grad is None for name, p in model.named_parameters())


# -- 11. a cut inside a helper ---------------------------------------------------------------------
def _squash(h):
    with torch.no_grad():  # the region the helper enters
        return h * 2  # the helper's line


class CutInAHelper(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(10, 8)
        self.b = nn.Linear(8, 2)

    def forward(self, x):
        return self.b(_squash(self.a(x)))  # forward's line


@pytest.mark.parametrize("path", ["symbolic_trace", "runtime"])
def test_a_cut_in_a_helper_names_the_way_there_from_forward(path):
    model, x = CutInAHelper(), torch.randn(4, 10)
    report = check(model, x, path)
    assert_agrees(report, real_grads(model, (x,)))
    site = report.parameter("a.weight").cut_by[0]
    here = _here()
    assert site.source == f"{here}:{line_of(HERE, 'the region the helper enters')}"  # where to fix it
    assert site.frames == (f"forward @ {here}:{line_of(HERE, 'forward' + chr(39) + 's line')}",
                           f"_squash @ {site.source}")
    assert f"({here}:{line_of(HERE, 'the helper' + chr(39) + 's line')}) runs inside torch.no_grad()" in site.reason


# -- 12. inputs that cannot fit ----------------------------------------------------------------------
def test_inputs_whose_activations_cannot_fit_are_refused_before_the_run(run_fxflow, write_model, tmp_path):
    from fxflow.prepare.inputs import _free_bytes

    free = _free_bytes(torch.device("cpu"))
    width = 4096
    batch = max(int(free * 0.5) // (width * 4), 1)  # the input fits; input + activations do not
    path = write_model(tmp_path, f"""
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear({width}, {width})

            def forward(self, x):
                return self.fc(x).relu()
    """)
    code, out, err = run_fxflow("check", f"{path}:Net", "--input-size", f"{batch},{width}")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    # on a machine whose free memory halved meanwhile, the inputs alone are refused: the same line
    assert "(the inputs, and the activations autograd keeps for the backward)" in err or "inputs of shape" in err
    assert "is free; give smaller --input-size values" in err


def _here() -> str:
    from fxflow.core.source import display_path

    return display_path(HERE)


def test_ci_annotations_land_on_the_checked_files_line_that_leads_to_a_cut_in_a_helper(run_fxflow, write_model,
                                                                                      tmp_path):
    write_model(tmp_path, """
        import torch

        def squash(h):
            with torch.no_grad():
                return h * 2
    """, name="helpers.py")
    path = write_model(tmp_path, """
        import torch
        from torch import nn
        from helpers import squash

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(10, 8)
                self.b = nn.Linear(8, 2)
                self.scale = torch.ones(8, requires_grad=True)

            def forward(self, x):
                h = squash(self.a(x))
                return self.b(h * self.scale)

        def example_inputs():
            return (torch.randn(4, 10),)
    """)
    code, out, err = run_fxflow("check", f"{path}:Net", "--format", "github", cwd=str(tmp_path))
    assert code == 1, err
    lines = out.splitlines()
    cut = next(line for line in lines if "title=fxflow cut" in line)
    assert cut.startswith("::error file=model.py,line=13,")  # forward's line, in the checked file
    assert "no_grad at helpers.py:4, reached from this line (forward -> squash)" in cut  # the with line
    unregistered = next(line for line in lines if "title=fxflow unregistered" in line)
    assert unregistered.startswith("::error file=model.py,line=10,")  # where self.scale is assigned
