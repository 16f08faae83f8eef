"""Issue 29, items 4 and 8: a zero by construction is ``zero`` statically, and a zero that the
stand-ins alone produce is not.

Item 4: an op whose derivative in an input is exactly zero for the shapes and modes in use
(``grid_sample(mode="nearest")`` in its grid, a softmax over a dimension of size 1, ``x ** 0``)
reads static ``zero`` at its own line, found by running the node's backward on random stand-ins
(fxflow/static/zero_by_construction.py); a designed zero-init (LoRA's B, adaLN-Zero's gate) zeroes
the real gradient at step one but not by construction, and stays ``reachable``. A one-step RNN's
``weight_hh`` (its own zero state multiplies it) is ``zero`` on every capture path, as real optimizer
steps show; the fix line names the option; and a healthy model runs no backward on stand-ins.

Item 8: reformer's ``_ReversibleFunction`` ran its own backward on stand-ins whose integer attention
mask was all zeros: every key masked, its queries' gradient exactly zero, where the real mask gives
them one. A stand-in zero now counts only if every draw of stand-ins gives it.

Every verdict is checked against a real backward (tests/gradtruth.py), on every capture path.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fxflow
from every_path import reports_on_every_path
from fxflow.capture import METHODS
from fxflow.present.text import render_text
from fxflow.static.zero_by_construction import ZeroByConstruction
from gradtruth import assert_agrees, line_of, real_gradients, real_grads

HERE = "tests/test_zero_by_construction.py"


@pytest.fixture(params=["meta", "real"])
def twins(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FXFLOW_TWINS", request.param)
    return request.param


def exactly_zero(model: nn.Module, inputs: torch.Tensor, name: str) -> bool:
    """The real backward gives ``name`` a gradient, and it is exactly zero."""
    grad = real_gradients(model, (inputs,))[name]
    return grad is not None and not grad.any()


def assert_zero_at(model: nn.Module, x: torch.Tensor, names: list[str], op: str, marker: str) -> None:
    """On every capture path: ``names`` read static ``zero``, cut by ``op`` at the line holding ``marker``."""
    assert all(exactly_zero(model, x, name) for name in names)
    reports = reports_on_every_path(model, x)
    assert reports
    for report in reports:
        for name in names:
            parameter = report.parameter(name)
            assert parameter.static == "zero", (report.trace.method, name, parameter.static)
            assert [site.source for site in parameter.cut_by] == [f"{HERE}:{line_of(__file__, marker)}"]
            assert parameter.cut_by[0].op.strip("_").startswith(op), report.trace.method  # aten's grid_sampler
            assert "exactly zero" in parameter.cut_by[0].reason


def not_reachable_on_every_path(model: nn.Module, inputs: torch.Tensor | dict[str, torch.Tensor]) -> dict[str, dict[str, str]]:
    """Per capture method that captures the model: the parameters whose static verdict is not ``reachable``, each report
    checked against a real backward first (a designed zero-init's dynamic verdict is ``held``, not
    the ``zero`` of step one that :func:`reports_on_every_path` compares with)."""
    args, keywords = ((), inputs) if isinstance(inputs, dict) else ((inputs,), None)
    truth = real_grads(model, args, keywords)
    found = {}
    for method in METHODS:
        report = fxflow.check(model, inputs, capture_methods=[method])
        if report.trace.method != "none":
            assert_agrees(report, truth)
            found[method] = {p.name: p.static for p in report.parameters if p.static != "reachable"}
    assert found
    return found


# -- item 4: zeros by construction --------------------------------------------------------------
class NearestSampler(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Conv2d(3, 3, 1)
        self.to_grid = nn.Linear(3, 2)  # nearest sampling has no derivative in where it samples

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        grid = torch.tanh(self.to_grid(image.flatten(2).transpose(1, 2))).view(image.shape[0], 5, 5, 2)
        return F.grid_sample(self.features(image), grid, mode="nearest", align_corners=False)  # sampled here


def test_grid_sample_nearest_is_zero_in_its_grid(twins: str) -> None:
    model, x = NearestSampler(), torch.randn(2, 3, 5, 5)
    assert_zero_at(model, x, ["to_grid.weight", "to_grid.bias"], "grid_sample", "# sampled here")


class SingleScoreAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.score = nn.Linear(8, 1)  # one score per token: a softmax over one value is 1
        self.value = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(self.score(x), dim=-1)  # size 1
        return weights * self.value(x)


def test_softmax_over_a_dimension_of_size_one_is_zero(twins: str) -> None:
    model, x = SingleScoreAttention(), torch.randn(2, 4, 8)
    assert_zero_at(model, x, ["score.weight", "score.bias"], "softmax", "# size 1")


class PowerZero(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.base, self.scale = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) ** 0 * self.scale(x)  # power zero


def test_a_power_of_zero_is_zero(twins: str) -> None:
    model, x = PowerZero(), torch.randn(3, 4)
    assert_zero_at(model, x, ["base.weight", "base.bias"], "pow", "# power zero")


class OneStepLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x.unsqueeze(0))[1][0].squeeze(0)  # one step from h0 = 0


class ZeroStateCell(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.GRUCell(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = torch.zeros(x.size(0), 4, dtype=x.dtype)  # shaped like the batch: still fixed by the code
        return self.cell(x, state)  # from the zero state


def test_a_cell_from_a_zero_state_it_makes_itself_gives_weight_hh_a_zero(twins: str) -> None:
    torch.manual_seed(0)
    assert_zero_at(ZeroStateCell(), torch.randn(3, 4), ["cell.weight_hh"], "", "# from the zero state")


def test_a_one_step_rnn_from_a_zero_state_gives_weight_hh_a_zero(twins: str) -> None:
    """h0 = 0 multiplies weight_hh: exactly zero on every step, as real optimizer steps show. The
    module makes its own ``torch.zeros`` h0 (symbolic tracing keeps ``nn.LSTM`` whole; export and
    the runtime capture inline it and its zeros): a value the code alone fixes is kept, not drawn."""
    torch.manual_seed(0)
    model = OneStepLSTM()
    trained = OneStepLSTM()
    trained.load_state_dict(model.state_dict())
    optimizer = torch.optim.Adam(trained.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        trained(torch.randn(3, 4)).pow(2).sum().backward()
        assert not trained.rnn.weight_hh_l0.grad.any() and trained.rnn.weight_ih_l0.grad.any()
        optimizer.step()
    assert_zero_at(model, torch.randn(3, 4), ["rnn.weight_hh_l0"], "", "# one step from h0 = 0")


def test_the_fix_line_names_the_option_that_makes_the_op_constant() -> None:
    torch.manual_seed(0)
    report = fxflow.check(NearestSampler(), torch.randn(2, 3, 5, 5))
    text = render_text(report)
    site = report.parameter("to_grid.weight").cut_by[0]
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{site.op} at {site.source}"))
    fix = next(i for i in range(start, len(lines)) if lines[i].startswith("fix: "))
    joined = " ".join([lines[fix]] + [line.strip() for line in lines[fix + 1:fix + 4] if line.startswith("  ")])
    assert joined == ("fix: this op's derivative is zero for the options, shapes and constants in use: change the one "
                      "that makes it so (`mode=\"bilinear\"` for `grid_sample`, the `dim` of a softmax over a dimension "
                      "of size 1, a factor or exponent of 0); for a deliberate freeze, pass --allow 'to_grid.*'")


# -- only where it can matter -------------------------------------------------------------------
class BilinearSampler(NearestSampler):
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        grid = torch.tanh(self.to_grid(image.flatten(2).transpose(1, 2))).view(image.shape[0], 5, 5, 2)
        return F.grid_sample(self.features(image), grid, mode="bilinear", align_corners=False)


def test_a_healthy_model_runs_no_backward_on_stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zero edge decides only a parameter every path of which crosses one; where the real backward
    gave every parameter a non-zero gradient there is none to find: the check runs nothing. With
    no real run (``--device meta``) every node is read."""
    reads = []
    original = ZeroByConstruction._read
    monkeypatch.setattr(ZeroByConstruction, "_read", lambda self, call, draw: reads.append(call.node.name)
                        or original(self, call, draw))
    torch.manual_seed(0)
    report = fxflow.check(BilinearSampler(), torch.randn(2, 3, 5, 5))
    assert [p.static for p in report.parameters] == ["reachable"] * 4 and reads == []
    meta = fxflow.check(NearestSampler(), torch.randn(2, 3, 5, 5), device="meta")
    assert reads and meta.parameter("to_grid.weight").static == "zero"


# -- designed zeros, and stand-ins that could fake one: reachable ------------------------------------
class LoRA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.base = nn.Linear(6, 6)
        self.down, self.up = nn.Linear(6, 2, bias=False), nn.Linear(2, 6, bias=False)
        nn.init.zeros_(self.up.weight)  # B = 0: the update starts at zero, and down learns once up moves

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.up(self.down(x))


class AdaLNZero(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.condition = nn.Linear(6, 6)
        nn.init.zeros_(self.condition.weight)
        nn.init.zeros_(self.condition.bias)  # the gate starts closed
        self.mlp = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.condition(x.mean(0, keepdim=True))
        return x + gate * self.mlp(x)


@pytest.mark.parametrize("model_class, held", [(LoRA, "down.weight"), (AdaLNZero, "mlp.weight")])
def test_a_designed_zero_init_stays_reachable(twins: str, model_class: type, held: str) -> None:
    model, x = model_class(), torch.randn(3, 6)
    assert exactly_zero(model, x, held)  # zero at step one, by the weights' values
    assert {method: found for method, found in not_reachable_on_every_path(model, x).items() if found} == {}


class ClampedScale(nn.Module):
    """A scalar through a clamp and a relu: random stand-ins beyond the bounds read zero on one draw."""

    def __init__(self) -> None:
        super().__init__()
        self.scale, self.shift = nn.Parameter(torch.tensor(0.5)), nn.Parameter(torch.tensor(0.2))
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * torch.clamp(self.scale, 0.0, 1.0) + torch.relu(self.shift)


def test_a_clamped_scalar_is_not_a_zero_by_construction(twins: str) -> None:
    model, x = ClampedScale(), torch.randn(3, 4)
    assert {method: found for method, found in not_reachable_on_every_path(model, x).items() if found} == {}


class IntegerMask(nn.Module):
    """An integer mask multiplies the values: a stand-in mask of zeros alone would zero them."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * mask.unsqueeze(-1)


def test_an_integer_mask_is_not_a_zero_by_construction(twins: str) -> None:
    inputs = {"x": torch.randn(2, 3, 4), "mask": torch.ones(2, 3, dtype=torch.long)}
    assert {method: found for method, found in not_reachable_on_every_path(IntegerMask(), inputs).items() if found} == {}


class DropPath(nn.Module):
    """Stochastic depth as timm and transformers write it: the block's output times a 0-or-1 mask drawn
    in forward; ``c`` feeds a dead relu, so the real backward leaves it exactly zero (a suspect)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.b(self.a(x)) + torch.relu(self.c(x) - 100.0)
        keep = torch.floor(torch.rand((x.shape[0], 1), dtype=x.dtype) + 0.5)
        return x + hidden / 0.5 * keep


def test_a_drop_path_mask_is_the_models_randomness_not_a_zero_by_construction(twins: str) -> None:
    """The mask's ``rand`` has no input, like a code-fixed ``torch.zeros`` state, but computing it again
    draws another mask: where that one dropped the block and the real run's kept it, its weights read
    static ``zero`` while they learned (maskformer's Swin blocks on torch.export). On every seed and
    path, a static zero must be a gradient the check's own real run left zero."""
    kept = 0
    for seed in range(8):
        for method in METHODS:
            torch.manual_seed(seed)
            model, x = DropPath().train(), torch.randn(1, 4)
            report = fxflow.check(model, x, capture_methods=[method])
            if report.trace.method == "none":
                continue
            assert report.parameter("c.weight").dynamic == "zero"
            for parameter in report.parameters:
                assert parameter.static != "zero" or parameter.dynamic in ("zero", "intermittent"), \
                    (seed, method, parameter.name, parameter.dynamic)
            kept += report.parameter("a.weight").dynamic == "ok"
    assert kept  # some seeds kept the block: the case that read a false zero


# -- item 8: reformer's reversible layers ---------------------------------------------------------
def tiny_reformer(use_cache: bool) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.ReformerConfig(
        vocab_size=99, hidden_size=32, num_attention_heads=2, attention_head_size=16, feed_forward_size=64,
        is_decoder=True, axial_pos_shape=(2, 4), axial_pos_embds_dim=(16, 16), local_attn_chunk_length=4,
        lsh_attn_chunk_length=4, num_buckets=2, attn_layers=["local", "lsh"], max_position_embeddings=8,
        use_cache=use_cache)
    return transformers.ReformerModelWithLMHead(config).train()


@pytest.mark.parametrize("use_cache", [False, True])
def test_reformer_agrees_with_its_real_backward(use_cache: bool) -> None:
    """The reversible layers' own backward, run on stand-ins, gives their queries a gradient (an
    attention mask of ones lets them attend); with ``use_cache`` the layers' parameters are
    inputs of the Function although its backward cannot run again (the cache holds the real run)."""
    model = tiny_reformer(use_cache)
    ids = torch.randint(3, 99, (2, 8))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    gradients = real_gradients(model, (), inputs)
    truth = {name: grad is not None for name, grad in gradients.items()}
    for methods in (None, ["runtime"]):
        report = fxflow.check(model, inputs, **({"capture_methods": methods} if methods else {}))
        assert report.trace.method == "runtime", report.trace.notes
        assert_agrees(report, truth)
        static_zero = [p.name for p in report.parameters if p.static == "zero"]
        assert [name for name in static_zero if gradients[name].any()] == []
        assert report.parameter("reformer.encoder.layers.0.attention.self_attention.query.weight").static == "reachable"
    assert real_grads(model, (), inputs) == truth  # left as found
