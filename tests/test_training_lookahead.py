"""The look-ahead steps what training would (issue 39, item 1).

The truth is real optimizer steps in plain torch on a copy of the model (:func:`real_first_steps`):
the user's forward, the loss, ``backward()`` and ``optimizer.step()``, with whatever the forward
writes into the model's buffers and attributes carried from step to step, as training does.
"""
from __future__ import annotations

import copy

import torch

TRUTH_STEPS = 8  # real optimizer steps: a chain of k zero-inits learns from step k + 1


def projection_loss(outputs: torch.Tensor) -> torch.Tensor:
    """A fixed random projection of the output: every output element matters, none is special."""
    if outputs.is_complex():
        outputs = torch.view_as_real(outputs)
    weights = torch.randn(outputs.shape, generator=torch.Generator().manual_seed(1), dtype=outputs.dtype)
    return (outputs * weights).sum()


def inputs_of(model: torch.nn.Module) -> tuple:
    torch.manual_seed(0)
    return tuple(model.example_inputs()) if hasattr(model, "example_inputs") else (torch.randn(4, 8),)


def real_first_steps(model: torch.nn.Module, inputs: tuple, steps: int = TRUTH_STEPS,
                     loss_fn=projection_loss) -> dict[str, int | None]:
    """{trainable parameter: the first real Adam step (1-based) with a non-zero gradient, or None}."""
    model = copy.deepcopy(model)
    trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}
    optimizer = torch.optim.Adam(trainable.values(), lr=1e-3)
    first: dict[str, int | None] = dict.fromkeys(trainable)
    for step in range(1, steps + 1):
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(*inputs)).backward()
        for name, parameter in trainable.items():
            if first[name] is None and parameter.grad is not None and bool(parameter.grad.count_nonzero()):
                first[name] = step
        optimizer.step()
    return first
