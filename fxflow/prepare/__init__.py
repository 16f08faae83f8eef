"""Prepare: the module to check, what to call it with, and the example inputs.

The first stage of the pipeline. It unwraps DDP / DataParallel / torch.compile (the user's own
module is what gets checked and named), normalises the inputs (one tensor, a tuple, or a dict of
keyword arguments as ``model(**inputs)`` would take them), moves a *copy* to another device when
asked, and infers an input from the first layer when none was given.
"""
from __future__ import annotations

import copy
import keyword
import re
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import FxflowError
from .unwrap import meta_inputs, unwrap
from .inputs import as_call_inputs, infer_inputs, no_inputs_note


@dataclass
class Prepared:
    """What the later stages work on."""

    module: nn.Module  # the user's module (unwrapped; a copy when moved to another device)
    runner: nn.Module  # what capture and probe call: ``module`` itself, or it with keyword inputs bound
    example: tuple[Any, ...] | None  # positional inputs for ``runner``; None when there are none
    fake: bool  # meta run: fake tensors, nothing computed
    notes: list[str] = field(default_factory=list)


def prepare(model: nn.Module, inputs: Any, device: str | torch.device | None, infer: bool) -> Prepared:
    """The module to check (unwrapped, on its device), its example inputs, and whether the run is fake."""
    model, _, notes = unwrap(model)
    if isinstance(inputs, dict) and not all(isinstance(key, str) for key in inputs):
        key = next(key for key in inputs if not isinstance(key, str))
        raise FxflowError(f"dict inputs are passed as model(**inputs), whose keys must be strings: not {key!r}",
                          hint="pass positional inputs as a tuple")
    example, keywords = as_call_inputs(inputs, model)  # validates a dict's keys against forward
    if isinstance(inputs, dict):  # called as model(**inputs): the tensors are the capture's inputs
        names, example, keywords = split_keywords(inputs)
    on_meta = any(p.is_meta for p in model.parameters())
    fake = str(device) == "meta" or on_meta
    if on_meta and example is not None:
        example = meta_inputs(example)
        keywords = dict(zip(keywords, meta_inputs(tuple(keywords.values()))))
    if device is not None and not fake:
        model, example, keywords = _on_device(model, example, keywords, torch.device(device), notes)
    if example is None and infer:
        example = infer_inputs(model)
        if example is not None:
            shape = ",".join(str(s) for s in example[0].shape)
            notes.append(f"inputs inferred from the first layer: one tensor of shape ({shape})")
    if example is None:
        notes.append(no_inputs_note(model))
    if isinstance(inputs, dict):
        runner = keyword_call(model, names, keywords)
    else:
        runner = model
    return Prepared(model, runner, example, fake, notes)


def split_keywords(inputs: dict[str, Any]) -> tuple[list[str], tuple[Any, ...], dict[str, Any]]:
    """Keyword inputs as the names and values of their tensors, and the other values by name."""
    names = [key for key, value in inputs.items() if isinstance(value, torch.Tensor)]
    return names, tuple(inputs[key] for key in names), {k: v for k, v in inputs.items() if k not in names}


class TableSharingModule(nn.Module):
    """A module that shares ``model``'s parameter, buffer and submodule tables, so every qualified
    name in it is the user's own; ``model`` itself is kept unregistered under ``attribute``."""

    def __init__(self, model: nn.Module, attribute: str) -> None:
        super().__init__()
        self._parameters = model._parameters
        self._buffers = model._buffers
        self._modules = model._modules
        self.training = model.training
        object.__setattr__(self, attribute, model)  # not registered: names stay the user's


class KeywordCall(TableSharingModule):
    """``model(**inputs)``, exactly as its user calls it, for inputs given as a dict.

    The dict's tensors are this module's positional inputs (so every capture sees them as
    inputs, named by their keys); its other values are bound. Forward then calls the model
    itself with every input as a keyword: decorators that rename deprecated keywords or read
    ``**kwargs``, and the model's own hooks, see the user's call (symbolic tracing calls forward
    itself, decorators included, without the root's hooks). Made by :func:`keyword_call`, whose
    subclass gives forward one named argument per tensor.
    """

    def __init__(self, model: nn.Module, names: list[str], constants: dict[str, Any]) -> None:
        super().__init__(model, "_keyword_model")
        object.__setattr__(self, "_names", names)
        object.__setattr__(self, "_constants", constants)

    def call(self, *tensors: Any) -> Any:
        """The user's call: the model with the dict's tensors and its other values, all as keywords."""
        keywords = {**dict(zip(self._names, tensors)), **self._constants}
        if torch.fx._symbolic_trace.is_fx_symbolic_tracing():
            # fx traces a module call only into registered submodules: forward itself, decorators included
            return type(self._keyword_model).forward(self._keyword_model, **keywords)
        return self._keyword_model(**keywords)


def keyword_call(model: nn.Module, names: list[str], constants: dict[str, Any]) -> KeywordCall:
    """A :class:`KeywordCall` whose forward takes ``names`` as named arguments.

    Captures read forward's own signature (fx makes one placeholder per argument, and cannot
    take ``*args``), so the subclass gets a forward written for these names.
    """
    arguments = ", ".join(argument_names(names))  # the call maps them back to the keys by position
    namespace: dict[str, Any] = {}
    source = f"def forward(self, {arguments}):\n    return self.call({arguments})\n"
    exec(compile(source, "<fxflow: model(**inputs)>", "exec"), namespace)  # noqa: S102 (a file name of its own: never python -c's code)
    namespace["forward"].__doc__ = "The user's ``model(**inputs)`` (see :meth:`KeywordCall.call`)."
    cls = type(KeywordCall.__name__, (KeywordCall,), {"forward": namespace["forward"], "__module__": __name__})
    return cls(model, names, constants)


def argument_names(keys: list[str]) -> list[str]:
    """One valid, distinct Python parameter name per key, the key itself where it is one.

    The generated forward is Python source: a key that is a keyword (``"from"``), ``self`` (taken by
    forward's own first argument) or no identifier at all (``"input-ids"``) cannot name a parameter
    of it, while ``model(**inputs)`` takes any of them. Such a key gets a mangled name.
    """
    taken = {key for key in keys if _usable(key)}
    names = []
    for key in keys:
        name = key
        if not _usable(key):
            name = re.sub(r"\W", "_", key)
            name = name if name and not name[0].isdigit() else f"_{name}"
            while not _usable(name) or name in taken:
                name += "_"
            taken.add(name)
        names.append(name)
    return names


def _usable(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and name != "self"


def _on_device(model: nn.Module, example: tuple[Any, ...] | None, keywords: dict[str, Any], device: torch.device,
               notes: list[str]) -> tuple[nn.Module, tuple[Any, ...] | None, dict[str, Any]]:
    """A copy of the model (and the inputs) on ``device``; the user's model stays where it is."""
    if all(p.device == device for p in model.parameters()):
        return model, example, keywords
    notes.append(f"checked a copy of the model on {device}")
    moved = copy.deepcopy(model).to(device)

    def to(value: Any) -> Any:
        return value.to(device) if isinstance(value, torch.Tensor) else value

    if example is not None:
        example = tuple(to(x) for x in example)
    return moved, example, {key: to(value) for key, value in keywords.items()}
