"""What ``forward``'s signature says: its positional arguments, defaults and ``**kwargs``.

One place reads it, for every stage that needs to bind inputs to forward's arguments or to
name them (keyword inputs, the input-count check, the placeholders of a run-time capture, the
inputs a watched training step passed).
"""
from __future__ import annotations

import inspect
from typing import Any, Sequence

from torch import nn

from ..errors import FxflowError


def forward_parameters(module: nn.Module) -> list[inspect.Parameter] | None:
    """forward's parameters (the user's, through fxflow's keyword binding), or None when unreadable."""
    module = getattr(module, "_user_module", module)
    try:
        return list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return None


def _positional(parameters: list[inspect.Parameter]) -> list[inspect.Parameter]:
    return [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def positional_names(module: nn.Module) -> list[str]:
    """Names of forward's positional arguments, in order ([] when unreadable)."""
    return [p.name for p in _positional(forward_parameters(module) or [])]


def required_inputs(module: nn.Module) -> int | None:
    """How many positional inputs forward requires (None when unreadable or it takes ``*args``)."""
    parameters = forward_parameters(module)
    if parameters is None or any(p.kind == p.VAR_POSITIONAL for p in parameters):
        return None
    return sum(1 for p in _positional(parameters) if p.default is p.empty)


def defaulted_arguments(module: nn.Module, given: int) -> list[str]:
    """forward's arguments left at their defaults when ``given`` positional inputs are passed."""
    parameters = forward_parameters(module) or []
    return [p.name for i, p in enumerate(parameters)
            if p.default is not p.empty and (i >= given or p.kind == p.KEYWORD_ONLY)
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def bind_keywords(module: nn.Module, keywords: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Keyword inputs as forward's positional arguments, plus those it takes only through ``**kwargs``.

    ``{"input_ids": ids, "attention_mask": m}`` becomes ``((ids, m), {})`` for
    ``forward(input_ids, attention_mask=None)``; skipped arguments keep their defaults. A key that
    is no positional argument is passed on as a keyword when forward has ``**kwargs`` (as
    ``model(**inputs)`` would), else it is an error.
    """
    parameters = forward_parameters(module)
    if parameters is None:
        raise FxflowError("keyword inputs need forward's signature to bind them, and it cannot be read")
    positional = _positional(parameters)
    names = [p.name for p in positional]
    extra = {k: v for k, v in keywords.items() if k not in names}
    if extra and not any(p.kind == p.VAR_KEYWORD for p in parameters):
        keyword_only = {p.name for p in parameters if p.kind == p.KEYWORD_ONLY}
        unknown = [k for k in extra if k not in keyword_only]
        if unknown:
            raise FxflowError(f"forward has no positional argument {unknown[0]!r} to bind that input to, and no **kwargs",
                              hint="its arguments are " + (", ".join(p.name for p in parameters) or "none"))
    named = [k for k in keywords if k in names]
    last = max((names.index(k) for k in named), default=-1)
    bound = []
    for parameter in positional[: last + 1]:
        if parameter.name in keywords:
            bound.append(keywords[parameter.name])
        elif parameter.default is not parameter.empty:
            bound.append(parameter.default)
        else:
            raise FxflowError(f"forward's argument {parameter.name!r} has no default and no input was given for it")
    return tuple(bound), extra


def check_input_count(module: nn.Module, inputs: Sequence[Any]) -> None:
    """Fail clearly when forward cannot take this many positional inputs."""
    parameters = forward_parameters(module)
    if parameters is None or any(p.kind == p.VAR_POSITIONAL for p in parameters):
        return
    positional = _positional(parameters)
    required = [p for p in positional if p.default is p.empty]
    if not len(required) <= len(inputs) <= len(positional):
        names = ", ".join(p.name for p in positional)
        expected = str(len(required)) if len(required) == len(positional) else f"{len(required)} to {len(positional)}"
        raise FxflowError(f"forward takes {expected} input(s) ({names}) but {len(inputs)} were given",
                          hint="pass one --input-size per forward input")


def as_call_dict(module: nn.Module, args: tuple, kwargs: dict) -> dict[str, Any] | None:
    """A call's positional and keyword arguments as one dict of keyword arguments, as
    ``model(**inputs)`` would take them; None when the call does not bind to forward's signature
    or passes ``*args`` that have no names."""
    binding = _bind(module, args, kwargs)
    if binding is None:
        return None
    parameters, bound = binding
    inputs: dict[str, Any] = {}
    for parameter in parameters:
        if parameter.name not in bound.arguments:
            continue
        value = bound.arguments[parameter.name]
        if parameter.kind == parameter.VAR_POSITIONAL:
            if value:
                return None
        elif parameter.kind == parameter.VAR_KEYWORD:
            inputs.update(value)
        else:
            inputs[parameter.name] = value
    return inputs


def _bind(module: nn.Module, args: tuple, kwargs: dict) -> tuple[list[inspect.Parameter], inspect.BoundArguments] | None:
    """forward's parameters and a call bound to them; None when the call does not bind."""
    parameters = forward_parameters(module)
    if parameters is None:
        return None
    try:
        return parameters, inspect.Signature(parameters).bind(*args, **kwargs)
    except TypeError:
        return None
