"""One observer of the forward: a single :class:`~torch.overrides.TorchFunctionMode` with pluggable parts.

fxflow watches the user's forward for several reasons at once: recording it as an fx graph
(:mod:`fxflow.dynamic.recorder`), stopping the backward at ops with no derivative
(:mod:`fxflow.dynamic.no_derivative`), noting which call and line made each autograd node
(:mod:`fxflow.diagnose.localize`, which NaN births ride on too). Each is a :class:`ForwardPart`; while
one or more are entered on a thread, exactly one :class:`ForwardObserver` is on torch's mode stack,
and it shows every torch call to each part in the order the parts were entered, after the call ran::

    ForwardObserver.__torch_function__(func, args, kwargs)
        result = func(*args, **kwargs)
        for part in parts:              # outermost first, as nested modes would see it
            part.observe(func, args, kwargs, result)

A part's own torch calls inside ``observe`` are not observed (torch disables the mode while its
``__torch_function__`` runs), so no part sees another's bookkeeping.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import torch
from torch.overrides import TorchFunctionMode

_LOCAL = threading.local()  # .observer: the observer on this thread's mode stack, while one is


class ForwardPart:
    """One concern that watches forward's torch calls; enter it (``with part:``) around the forward."""

    # Whether the part also sees calls while dynamo traces (torch.compile, torch.cond): most must not,
    # since their bookkeeping is a side effect dynamo rejects or breaks the graph for.
    while_compiling = False

    def observe(self, func: Callable, args: tuple, kwargs: dict, result: Any) -> None:
        """See one torch call after it ran; may change ``result`` in place."""

    def __enter__(self) -> "ForwardPart":
        self._observing = observing(self)
        self._observing.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._observing.__exit__(*exc)


class ForwardObserver(TorchFunctionMode):
    """The one mode: runs each call once and shows it to every part (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[ForwardPart] = []

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        compiling = torch.compiler.is_compiling()
        for part in tuple(self.parts):
            if part.while_compiling or not compiling:
                part.observe(func, args, kwargs, result)
        return result


@contextlib.contextmanager
def observing(part: ForwardPart) -> Iterator[ForwardPart]:
    """Show ``part`` every torch call made on this thread while inside: it joins the observer already
    active here, or a new one is pushed for it."""
    observer = getattr(_LOCAL, "observer", None)
    if observer is not None:
        observer.parts.append(part)
        try:
            yield part
        finally:
            observer.parts.remove(part)
        return
    observer = _LOCAL.observer = ForwardObserver()
    observer.parts.append(part)
    try:
        with observer:
            yield part
    finally:
        _LOCAL.observer = None
