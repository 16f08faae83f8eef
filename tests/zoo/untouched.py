"""A model and its inputs, byte for byte, before and after a check (issue 40: "left exactly as found").

:func:`as_bytes` reads everything a check could leave changed: the mode of every module, every
parameter and buffer (non-persistent ones too, which ``state_dict`` leaves out) with its
``requires_grad`` and whether it has a ``.grad``, every tensor held in a plain attribute (or a plain
list, tuple or dict attribute) of a module, and every tensor among the inputs. :func:`differences`
names what differs. Bytes, not values: a NaN is equal to itself, -0.0 is not 0.0.
"""
from __future__ import annotations

from typing import Any

import torch

from fxflow.core.tensors import tensors_in

State = dict[str, Any]


def as_bytes(model: torch.nn.Module, inputs: Any) -> State:
    """What a check must leave as it found, keyed by where it lives."""
    state: State = {}
    for name, module in model.named_modules(remove_duplicate=False):
        state[f"{name or 'model'} (training)"] = module.training
    for name, parameter in model.named_parameters(remove_duplicate=False):
        state[name] = (_raw(parameter), parameter.requires_grad, parameter.grad is not None)
    for name, buffer in model.named_buffers(remove_duplicate=False):
        state[name] = _raw(buffer)
    owned = {id(t) for t in model.parameters()} | {id(t) for t in model.buffers()}
    for prefix, module in model.named_modules():
        for key, value in vars(module).items():
            try:  # a container's items (a long one is a cache or a data set); a model's own type may refuse
                items = list(value.items() if isinstance(value, dict) else enumerate(value)) if isinstance(
                    value, (dict, list, tuple)) and len(value) < 1000 else [(None, value)]
            except Exception:  # noqa: BLE001 - e3nn's Irrep raises from __len__ on purpose
                items = []
            for index, item in items:
                if isinstance(item, torch.Tensor) and id(item) not in owned:
                    state[f"{prefix or 'model'}.{key}" + ("" if index is None else f"[{index!r}]")] = _raw(item)
    for index, tensor in enumerate(tensors_in(inputs)):
        state[f"input {index}"] = _raw(tensor)
    return state


def differences(before: State, after: State) -> str:
    """What differs between two readings (empty when nothing does), the first three named."""
    different = [key for key in {**before, **after} if key not in before or key not in after or before[key] != after[key]]
    return ", ".join(different[:3]) + (f" and {len(different) - 3} more" if len(different) > 3 else "")


def _raw(tensor: torch.Tensor) -> Any:
    """The tensor's dtype, shape and bytes (what it holds where it has no plain bytes: meta, sparse...)."""
    tensor = tensor.detach()
    head = (str(tensor.dtype), tuple(tensor.shape), str(tensor.device))
    if tensor.is_meta or tensor.layout != torch.strided or type(tensor).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__:
        return head
    if tensor.is_quantized:
        tensor = tensor.int_repr()
    return head + (tensor.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes(),)
