"""The look-ahead's step is Adam's first update, ε included (issue 39, item 1 and the zoo's failure class 5).

peft's LiLY mixes zero-initialized experts by the mean of a router's softmax weights: each expert's
gradient is the same tensor times its (positive) weight. A pure sign step moves every expert by the
same amount, so they stay equal, the mixture no longer depends on the weights and the router's
gradient is zero in exact arithmetic (round-off in float32): fxflow read the router dead, exit 1.
Adam does not keep that symmetry: its first update is ``g / (|g| + ε)``, not ``sign(g)``, and its
later ones average the gradients of several steps, whose weights differ once the router's input
has moved. The truth is real Adam steps in plain torch: in float32, as the model trains, the router
learns from step 2 (the float32 arithmetic of Adam's first update already leaves the experts apart);
in float64 (:func:`test_training_lookahead.real_steps_in_float64`), exact arithmetic, from step 4.
The look-ahead now takes Adam's updates, moments and ε included, and agrees with the first.
"""
from __future__ import annotations

import torch
import torch.nn as nn

import fxflow
from test_training_lookahead import inputs_of, projection_loss, real_first_steps, real_steps_in_float64


class MixedZeroExperts(nn.Module):
    """LiLY's adapter (peft/tuners/lily/layer.py): ``h @ Σ_e p̄_e B_e``, ``B`` zero-initialized."""

    def __init__(self, d: int = 8, rank: int = 4, experts: int = 2):
        super().__init__()
        self.experts = experts
        self.base = nn.Linear(d, d)
        self.A = nn.Linear(d, rank, bias=False)
        self.router = nn.Linear(rank, experts, bias=False)
        self.B = nn.Parameter(torch.zeros(experts, rank, d))

    def forward(self, x):
        hidden = self.A(x)
        weights = self.router(hidden).softmax(-1).reshape(-1, self.experts).mean(0)
        return self.base(x) + hidden @ torch.einsum("e,eio->io", weights, self.B)


def test_experts_mixed_by_a_router_learn_as_adam_moves_them():
    torch.manual_seed(0)
    model = MixedZeroExperts()
    inputs = inputs_of(model)
    real = real_first_steps(model, inputs)  # real Adam in float32, as the model trains
    exact = real_steps_in_float64(model, inputs)
    # in exact arithmetic too: A from step 2, the router once Adam's moments have moved the experts apart
    assert exact["A.weight"] == 2 and exact["router.weight"] == 4, exact
    report = fxflow.check(model, inputs, loss_fn=projection_loss)
    assert report.exit_code == 0, [(p.name, p.dynamic, p.diagnosis) for p in report.problems]
    for name in ("router.weight", "A.weight"):
        parameter = report.parameter(name)
        assert (parameter.dynamic, parameter.learns_from_step) == ("held", real[name]), (name, parameter.diagnosis)

