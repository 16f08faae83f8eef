"""Tensors that would learn, except that the optimizer never sees them.

Layers kept in a plain Python list (``self.layers = [nn.Linear(...)]``) or a tensor made with
``requires_grad=True`` instead of an ``nn.Parameter``: forward uses them and the backward even
fills their ``.grad``, but ``model.parameters()`` never lists them, so no optimizer built from it
ever updates them. :func:`unregistered_tensors` finds such tensors by their attribute path; the
probe lets the real backward say which of them the loss reaches.
"""
from __future__ import annotations

from typing import Any

import torch

_MAX_DEPTH = 3  # lists of lists of modules: deeper nesting holds data, not layers
_MAX_ITEMS = 1000  # a long list in an attribute is a cache or a dataset, not a layer list


def unregistered_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``{attribute path: tensor}`` for every leaf tensor that requires grad, is held by one of the
    model's modules outside its parameter table, and is not among ``model.parameters()``:
    plain tensor attributes (``scale``) and the parameters of modules in plain lists, tuples and
    dicts (``layers[0].weight``)."""
    registered = {id(p) for p in model.parameters()}
    found: dict[str, torch.Tensor] = {}
    for prefix, module in model.named_modules():
        for key, value in vars(module).items():
            if key.startswith("_"):  # the module's own tables and private state
                continue
            path = f"{prefix}.{key}" if prefix else key
            for name, tensor in _leaves(path, value, 0):
                if id(tensor) not in registered and name not in found:
                    found[name] = tensor
    return found


def _leaves(path: str, value: Any, depth: int) -> list[tuple[str, torch.Tensor]]:
    """The trainable leaf tensors in one attribute's value; nothing where the value's own code raises.

    The value is the model's object, not fxflow's: its ``__len__``, ``__iter__``, ``items`` or
    ``named_parameters`` may refuse on purpose (e3nn's ``o3.Irrep`` is a tuple whose ``__len__``
    raises ``NotImplementedError``). Such an object holds no layer the optimizer should see, so it
    is skipped (its siblings in a list are still looked at) rather than allowed to end the check.
    """
    try:
        if isinstance(value, torch.Tensor):
            return [(path, value)] if value.requires_grad and value.is_leaf else []
        if isinstance(value, torch.nn.Module):  # held outside _modules: none of its parameters is registered
            return [(f"{path}.{name}", parameter) for name, parameter in value.named_parameters()]
        if depth >= _MAX_DEPTH:
            return []
        if isinstance(value, (list, tuple)) and len(value) <= _MAX_ITEMS:
            items = [(f"{path}[{index}]", item) for index, item in enumerate(value)]
        elif isinstance(value, dict) and len(value) <= _MAX_ITEMS:
            items = [(f"{path}[{key!r}]", item) for key, item in value.items()]
        else:
            return []
    except Exception:  # noqa: BLE001 - any error of the model's own object: skip it
        return []
    return [leaf for item_path, item in items for leaf in _leaves(item_path, item, depth + 1)]
