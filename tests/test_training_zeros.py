"""Zeros by construction come only from the code (issue 39, item 4): a zero made by a buffer a hook
reads, by this batch's values against a clamp's bounds, or by labels that are all ``ignore_index``
is the state's or the data's. Such a parameter reads static ``reachable``, dynamic ``zero``, exit 1.

The truth is real Adam steps in plain torch (:func:`test_training_lookahead.real_first_steps`): the
parameter never gets a gradient, so the check fails, but not because the code makes it so.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import fxflow
from test_training_lookahead import inputs_of, projection_loss, real_first_steps


class SaturatedClamp(nn.Module):
    """A clamp to a narrow band the values lie above on this batch: random stand-ins never land in it either."""

    def __init__(self):
        super().__init__()
        self.inp, self.out, self.skip = nn.Linear(8, 8), nn.Linear(8, 4), nn.Linear(8, 4)
        with torch.no_grad():
            self.inp.weight.mul_(1e-3)
            self.inp.bias.fill_(101.0)

    def forward(self, x):
        return self.out(self.inp(x).clamp(99.9, 100.1)) + self.skip(x)


class PrunedByHook(nn.Module):
    """A pruning mask, all zeros for now, applied in a forward pre-hook: the model's state, not its code."""

    def __init__(self):
        super().__init__()
        self.main, self.side = nn.Linear(8, 4), nn.Linear(8, 4)
        self.register_buffer("mask", torch.zeros(8))
        self.side.register_forward_pre_hook(lambda module, args: (args[0] * self.mask,))

    def forward(self, x):
        return self.main(x) + self.side(x)


class AllIgnored(nn.Module):
    """Every label of the batch is ``ignore_index``: the data zeroes the loss."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 5)

    def forward(self, x, labels):
        return F.cross_entropy(self.lin(x), labels, ignore_index=-100)

    def example_inputs(self):
        return (torch.randn(4, 8), torch.full((4,), -100))


def the_loss(outputs):
    return outputs


CASES = [(SaturatedClamp, projection_loss, "this batch"), (PrunedByHook, projection_loss, "zero"),
         (AllIgnored, the_loss, "this batch")]


def test_a_zero_of_state_or_data_is_never_construction():
    for make, loss, words in CASES:
        torch.manual_seed(0)
        model = make()
        inputs = inputs_of(model)
        truth = real_first_steps(model, inputs, loss_fn=loss)
        report = fxflow.check(model, inputs, loss_fn=None if loss is the_loss else loss)
        never = {name for name, step in truth.items() if step is None}
        assert never, make.__name__
        assert {p.name for p in report.problems} == never, make.__name__
        for name in never:
            parameter = report.parameter(name)
            assert (parameter.static, parameter.dynamic) == ("reachable", "zero"), (make.__name__, name,
                                                                                   parameter.static, parameter.dynamic)
            assert words in parameter.diagnosis, (make.__name__, parameter.diagnosis)
        assert report.exit_code == 1


class Adjointish(torch.autograd.Function):
    """As torchdiffeq's ``odeint_adjoint``: the module's parameters are passed in as well, and the backward
    recomputes the module and differentiates it with respect to them."""

    @staticmethod
    def forward(ctx, func, x, *params):
        ctx.func = func
        ctx.save_for_backward(x, *params)
        with torch.no_grad():
            return func(x)

    @staticmethod
    def backward(ctx, grad):
        x, *params = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            grads = torch.autograd.grad(ctx.func(x), (x, *params), grad, allow_unused=True)
        return (None, *grads)


class AdjointODE(nn.Module):
    def __init__(self):
        super().__init__()
        self.func, self.out = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x):
        return self.out(Adjointish.apply(self.func, x, *self.func.parameters()))


def test_a_custom_function_given_the_parameters_twice_differentiates_them():
    """The stand-in run of a custom Function gives the parameters it receives and the module it runs one
    stand-in each, as the real run has one tensor: its backward reaches them (static reachable, exit 0)."""
    torch.manual_seed(0)
    model = AdjointODE()
    inputs = inputs_of(model)
    truth = real_first_steps(model, inputs)
    assert set(truth.values()) == {1}
    report = fxflow.check(model, inputs, loss_fn=projection_loss)
    assert {(p.name, p.static, p.dynamic) for p in report.parameters} == {
        (name, "reachable", "ok") for name in truth}
    assert report.exit_code == 0
