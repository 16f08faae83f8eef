"""A dead unit's reason says only what was seen (issue "Training, not a stand-in for it", Reasons).

A ReLU whose units are all inactive passes back exactly 0. Whether it can come back depends on what
computes its input: when nothing feeding it learns (its own weights and those before it get exactly 0
too) no optimizer step revives it, and fxflow says it never learns; when weights that feed it learn
through another path (a residual, the other direction of a bidirectional RNN), training moves its
input and may revive it, which a bidirectional ReLU ``nn.RNN`` trained with plain SGD shows on step 3.
fxflow names those weights (``fed_by``) and does not claim "never learns" there. Truth: plain torch.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn

import fxflow
from fxflow.verdicts import ZeroReason
from models.dead_relu import DeadRelu
from models.zero_init import DeadReLU
from test_training_lookahead import projection_loss


class BidirectionalDeadRNN(nn.Module):
    """Layer 1's forward direction starts dead (bias -1.6); its reverse direction is alive."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.RNN(4, 6, num_layers=2, nonlinearity="relu", bidirectional=True, batch_first=True)
        with torch.no_grad():
            self.rnn.bias_ih_l1.fill_(-1.6)
        self.head = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0])


def _first_gradients(model: nn.Module, x: torch.Tensor) -> dict[str, bool]:
    model = copy.deepcopy(model)
    projection_loss(model(x)).backward()
    return {name: p.grad is not None and bool(p.grad.any()) for name, p in model.named_parameters()}


def _sgd_steps_with_gradient(model: nn.Module, x: torch.Tensor, name: str, steps: int = 6) -> list[int]:
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    seen = []
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        projection_loss(model(x)).backward()
        if dict(model.named_parameters())[name].grad.any():
            seen.append(step)
        optimizer.step()
    return seen


def test_a_dead_unit_whose_input_learns_names_what_feeds_it_and_never_says_never() -> None:
    torch.manual_seed(0)
    model, x = DeadRelu(), torch.randn(16, 4)
    grads = _first_gradients(model, x)
    assert not grads["dead.weight"] and grads["first.weight"] and grads["first.bias"]  # plain torch
    row = fxflow.check(model, (x,), loss_fn=projection_loss).parameter("dead.weight")
    assert row.dynamic == "zero" and row.reasons == [ZeroReason.DEAD_INPUT_MOVES]
    assert row.fed_by == ["first.bias", "first.weight"]
    assert "never learns" not in row.diagnosis
    assert row.diagnosis.endswith("first.bias, first.weight, which compute its input, get a gradient, so training "
                                  "moves that input too: the unit may come back once they have moved further than "
                                  "these small steps, or stay dead")


def test_a_dead_unit_nothing_feeding_learns_never_learns() -> None:
    torch.manual_seed(0)
    model, x = DeadReLU(), torch.randn(16, 8)
    grads = _first_gradients(model, x)
    assert not grads["b.weight"] and not grads["a.weight"]  # what feeds it is dead too
    assert _sgd_steps_with_gradient(model, x, "b.weight") == []
    row = fxflow.check(model, (x,), loss_fn=projection_loss).parameter("b.weight")
    assert row.dynamic == "zero" and row.reasons == [ZeroReason.DEAD_UNIT] and row.fed_by == []
    assert row.diagnosis.endswith("so no step revives it and it never learns")


def test_a_bidirectional_relu_rnn_s_dead_direction_is_not_said_to_never_learn() -> None:
    torch.manual_seed(0)
    model, x = BidirectionalDeadRNN(), torch.randn(2, 5, 4)
    assert _sgd_steps_with_gradient(model, x, "rnn.weight_ih_l1")[:1] == [3]  # real SGD revives it on step 3
    row = fxflow.check(model, (x,), loss_fn=projection_loss).parameter("rnn.weight_ih_l1")
    assert row.dynamic == "zero" and row.reasons == [ZeroReason.DEAD_INPUT_MOVES]
    assert "rnn.weight_ih_l0" in row.fed_by and "rnn.weight_ih_l1" not in row.fed_by
    assert "never learns" not in row.diagnosis
