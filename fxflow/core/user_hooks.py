"""The user's own hooks that must not run during fxflow's backward.

An optimizer fused into backward (torchtune's ``optimizer_in_bwd``, the PyTorch tutorial's
"optimizer step in backward") registers a ``register_post_accumulate_grad_hook`` on each parameter
that steps the parameter and frees its ``.grad``. Run during ``fxflow.check``'s backward, it would
advance the user's optimizer and move the weights, and leave no ``.grad`` to read (every parameter
``missing``). :func:`post_accumulate_hooks_paused` takes those hooks off the parameters for the
duration and puts the same hook tables back (their removable handles stay valid).
"""
from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager
from typing import Iterable, Iterator

import torch


@contextmanager
def post_accumulate_hooks_paused(tensors: Iterable[torch.Tensor]) -> Iterator[int]:
    """No post-accumulate-grad hook of ``tensors`` runs inside; yields how many tensors had some."""
    saved = [(tensor, tensor._post_accumulate_grad_hooks) for tensor in tensors
             if getattr(tensor, "_post_accumulate_grad_hooks", None)]
    for tensor, _ in saved:
        tensor._post_accumulate_grad_hooks = OrderedDict()  # an empty table: autograd calls nothing
    try:
        yield len(saved)
    finally:
        for tensor, hooks in saved:
            tensor._post_accumulate_grad_hooks = hooks
