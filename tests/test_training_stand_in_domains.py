"""Stand-ins respect an op's domain (issue 39, item 4): a zero by construction is one that holds
whatever the values, so it must hold where the op changes regime, not only around 0.

Random stand-ins are drawn around 0 at three scales (1e-2, 1, 100). An op whose derivative is 0 on one
side of a number it is given (``F.threshold(h, 500, 0)``, ``clamp_min(h, 500)``, ``hardshrink`` with
``lambd=500``, ``torch.maximum(h, torch.tensor(500.))``) saw every draw on the flat side and read
"zero whatever the values", while the model's values cross 500. The truth is the real backward in
plain torch (:func:`_reached`), and for a unit the batch leaves dead, real optimizer steps.

The other domains (a causal mask made in forward, ``padding_idx``, indices, ``sqrt``/``log`` of
stand-ins below 0, ``-inf`` masks before a softmax, ``one_hot``, a two-sided clamp) read right before
this change too: they are guards here, each against the real backward.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fxflow
from test_training_lookahead import projection_loss

BOUNDED = {
    "threshold": lambda h: F.threshold(h, 500.0, 0.0),
    "threshold module": nn.Threshold(500.0, 0.0),
    "hardshrink": lambda h: F.hardshrink(h, 500.0),
    "softshrink": lambda h: F.softshrink(h, 500.0),
    "clamp_min": lambda h: h.clamp_min(500.0),
    "clamp_max": lambda h: h.clamp_max(-500.0),
    "maximum with a constant": lambda h: torch.maximum(h, torch.tensor(500.0)),
    "minimum with a constant": lambda h: torch.minimum(h, torch.tensor(-500.0)),
}


class Bounded(nn.Module):
    """A residual beside ``op(scale * lin(x))``: what reaches ``lin`` crosses the op's bound or not."""

    def __init__(self, op, scale: float):
        super().__init__()
        self.lin, self.skip, self.op, self.scale = nn.Linear(8, 8), nn.Linear(8, 8), op, scale

    def forward(self, x):
        return self.skip(x) + self.op(self.lin(x) * self.scale)


@pytest.mark.parametrize("capture", ["runtime", "torch.export", "symbolic_trace"])
@pytest.mark.parametrize("op", sorted(BOUNDED))
def test_a_bound_beyond_the_random_draws_is_no_zero_by_construction(op, capture):
    """Values that cross the bound (``lin`` times 1000): the real backward reaches ``lin``; the static
    analysis alone (no real backward: every node's zeros read on stand-ins) must not call it zero."""
    torch.manual_seed(0)
    model, x = Bounded(BOUNDED[op], scale=1000.0), torch.randn(16, 8)
    assert _reached(model, x)["lin.weight"], "the real values cross the bound: lin gets a gradient"
    report = fxflow.check(model, (x,), loss_fn=projection_loss, backward=False, capture_methods=[capture])
    assert report.trace.method == capture
    assert report.parameter("lin.weight").static == "reachable", report.parameter("lin.weight").diagnosis


def test_a_unit_this_batch_leaves_below_the_bound_is_the_datas_zero():
    """``clamp_min(h, 500)`` with every ``h`` of this batch under 500: the real gradient is 0, and real
    SGD steps keep it 0 (nothing moves ``h``), but the code does not make it so: data crossing 500 would
    reach ``lin``. It reads static ``reachable`` (the batch's zero), dynamic ``zero``."""
    torch.manual_seed(0)
    model, x = Bounded(BOUNDED["clamp_min"], scale=1.0), torch.randn(16, 8)
    assert not _reached(model, x)["lin.weight"]
    assert _reached(model, x * 1000.0)["lin.weight"]  # other data: the same code gives a gradient
    report = fxflow.check(model, (x,), loss_fn=projection_loss)
    lin = report.parameter("lin.weight")
    assert (lin.static, lin.dynamic) == ("reachable", "zero"), (lin.static, lin.dynamic, lin.diagnosis)
    assert report.exit_code == 1


def _reached(model: nn.Module, x: torch.Tensor) -> dict[str, bool]:
    """{parameter: a non-zero gradient} from one real backward of the projection loss (plain torch)."""
    model = copy.deepcopy(model)
    projection_loss(model(x)).backward()
    return {name: p.grad is not None and bool(p.grad.count_nonzero()) for name, p in model.named_parameters()}


# ---- guards: domains the stand-ins already respected (each checked against the real backward) ----

class CausalSelfAttention(nn.Module):
    """A causal mask made in forward from a constant (``triu(ones).bool()``), ``-inf`` then softmax."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t), diagonal=1).bool()
        scores = (self.q(x) @ self.k(x).transpose(1, 2)).masked_fill(mask, float("-inf"))
        return scores.softmax(-1) @ self.v(x)


class OwnTokenOnly(nn.Module):
    """Each query sees only its own key (an arange comparison): the softmax is 1 whatever q and k are."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        t = torch.arange(x.shape[1])
        scores = (self.q(x) @ self.k(x).transpose(1, 2)).masked_fill(t[:, None] != t[None, :], float("-inf"))
        return scores.softmax(-1) @ self.v(x)


class PaddedEmbedding(nn.Module):
    """``padding_idx``, ``gather`` with indices the data gives, ``one_hot`` of them."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8, padding_idx=0)
        self.table = nn.Parameter(torch.randn(10, 8))
        self.head = nn.Linear(8, 8)

    def forward(self, ids):
        picked = self.table.gather(0, ids[:, :1].expand(-1, 8))
        counted = F.one_hot(ids, 10).float() @ self.table
        return self.head(self.embed(ids).mean(1) + picked) + counted.mean(1)


class SignedDomains(nn.Module):
    """``sqrt`` and ``log`` of positive values (stand-ins may be negative), a two-sided clamp, ``erfinv``."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return (self.a(x).square() + 1).sqrt() + (self.b(x).exp() + 1).log() + \
            torch.special.erfinv(self.c(x).tanh() * 0.9).clamp(-0.5, 0.5)


GUARDS = {
    "causal mask": (CausalSelfAttention, lambda: torch.randn(2, 5, 8)),
    "own token only": (OwnTokenOnly, lambda: torch.randn(2, 5, 8)),
    "padding and indices": (PaddedEmbedding, lambda: torch.randint(0, 10, (4, 6))),
    "signed domains": (SignedDomains, lambda: torch.randn(4, 8)),
}


@pytest.mark.parametrize("backward", [True, False])
@pytest.mark.parametrize("guard", sorted(GUARDS))
def test_static_verdicts_agree_with_the_real_backward_on_masks_and_domains(guard, backward):
    make, inputs = GUARDS[guard]
    torch.manual_seed(0)
    model, x = make(), inputs()
    reached = _reached(model, x)
    report = fxflow.check(model, (x,), loss_fn=projection_loss, backward=backward)
    for parameter in report.parameters:
        # a non-zero real gradient: never zero by construction; an exact zero (q and k of a query that sees
        # one key) may read either, since the static analysis does not follow a zero two ops make
        if reached[parameter.name]:
            assert parameter.static == "reachable", (parameter.name, parameter.static, parameter.diagnosis)
        else:
            assert parameter.static in ("reachable", "zero"), (parameter.name, parameter.static)
            assert not backward or parameter.dynamic == "zero", (parameter.name, parameter.dynamic)
