"""Patches of torch's global switches that only the thread that asked for them can see.

The captures must see every ``torch.no_grad()`` and every ``Function.apply`` that forward runs,
and torch offers no hook for either, so the functions are replaced while a capture runs. They are
module attributes, shared by every thread: a check running beside a training thread must not
record that thread's calls, nor change what they do. :class:`ThreadPatch` installs one
dispatcher per attribute while any thread uses it; the dispatcher sends the calls of a thread
that entered :meth:`ThreadPatch.active` to that thread's replacement, and every other call to
the original, untouched. Nested uses in one thread stack; the original comes back when the last
use in the last thread ends.

What a capture must keep quiet (torch.export's log records and warnings, a user's ``print``
during its re-trace) is swallowed the same way, for the capturing thread alone: see
:func:`quiet_thread`. What stays process-wide is listed in docs/how-it-works.md.
"""
from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
import warnings
from typing import Any, Callable, Iterator

import torch


class ThreadPatch:
    """One attribute of one object, replaced per thread (see the module docstring).

    ``install(dispatch)`` turns the dispatch function (``dispatch(*args, **kwargs)``) into what is
    assigned: itself for a module's function, :func:`as_method` for an instance method, a
    ``classmethod`` or a ``property`` for those.
    """

    def __init__(self, owner: Any, name: str, install: Callable[[Callable[..., Any]], Any] = lambda f: f) -> None:
        self.owner, self.name, self.install = owner, name, install
        self._lock = threading.Lock()
        self._by_thread: dict[int, list[Callable[..., Any]]] = {}
        self._original: Any = None

    @property
    def original(self) -> Any:
        """What the attribute is when no thread patches it."""
        return self._original if self._by_thread else self.owner.__dict__.get(self.name, getattr(self.owner, self.name))

    def _dispatch(self, *args: Any, **kwargs: Any) -> Any:
        stack = self._by_thread.get(threading.get_ident())
        if stack:
            return stack[-1](*args, **kwargs)
        return self._call_original(*args, **kwargs)

    def _call_original(self, *args: Any, **kwargs: Any) -> Any:
        original = self._original
        if isinstance(original, classmethod):
            return original.__func__(*args, **kwargs)
        if isinstance(original, property):
            return original.fget(*args, **kwargs)
        return original(*args, **kwargs)

    def current(self) -> Any:
        """This thread's replacement, or the original when it has none (only while installed, or after)."""
        stack = self._by_thread.get(threading.get_ident())
        return stack[-1] if stack else self._original  # what was there when the patch went in

    @contextlib.contextmanager
    def active(self, replacement: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
        """Inside, this thread's calls go to ``replacement``; yields the original, to call on from it."""
        thread = threading.get_ident()
        with self._lock:
            if not self._by_thread:
                self._original = self.owner.__dict__.get(self.name, getattr(self.owner, self.name))
                setattr(self.owner, self.name, self.install(self._dispatch))
            self._by_thread.setdefault(thread, []).append(replacement)
        try:
            yield self._call_original
        finally:
            with self._lock:
                stack = self._by_thread[thread]
                stack.pop()
                if not stack:
                    del self._by_thread[thread]
                if not self._by_thread:
                    setattr(self.owner, self.name, self._original)


def as_method(dispatch: Callable[..., Any]) -> Callable[..., Any]:
    """A plain function calling ``dispatch``: as a class attribute it binds the instance, which the
    dispatcher (a bound method) would not."""
    def method(*args: Any, **kwargs: Any) -> Any:
        return dispatch(*args, **kwargs)

    return method


# torch.inference_mode() builds one of these: the grad-mode recorder and torch.export's guard both watch it.
INFERENCE_MODE = ThreadPatch(torch._C, "_InferenceMode")


class _ThreadStream:
    """What ``sys.stdout``/``sys.stderr`` are while some thread swallows its output: every call goes
    to that thread's sink when it is the caller, else to the stream that was there."""

    def __init__(self, patch: ThreadPatch) -> None:
        self._patch = patch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._patch.current(), name)


def _stream_patch(name: str) -> ThreadPatch:
    patch = ThreadPatch(sys, name)
    patch.install = lambda dispatch: _ThreadStream(patch)
    return patch


_STDOUT, _STDERR = _stream_patch("stdout"), _stream_patch("stderr")
# Where a warning that passed the filters is shown (printed, or appended by catch_warnings(record=True));
# CPython's C warnings code looks it up on the module at each warning, so a patch sees them all.
_SHOW_WARNING = ThreadPatch(warnings, "_showwarnmsg")


class _Discard(io.TextIOBase):
    """A text stream that keeps nothing."""

    def write(self, text: str) -> int:
        return len(text)


class _FromThread(logging.Filter):
    """Drops the records one thread logs at ``level`` or below; every other record passes."""

    def __init__(self, thread: int, level: int) -> None:
        super().__init__()
        self.thread, self.level = thread, level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread or record.levelno > self.level


def _handlers() -> list[logging.Handler]:
    """Every handler a record can reach now: each logger's, and the one used when none is set."""
    loggers = [logging.root] + [item for item in list(logging.root.manager.loggerDict.values())
                                if isinstance(item, logging.Logger)]
    found = {id(h): h for logger in loggers for h in logger.handlers}
    if logging.lastResort is not None:
        found[id(logging.lastResort)] = logging.lastResort
    return list(found.values())


@contextlib.contextmanager
def quiet_thread(level: int = logging.WARNING) -> Iterator[None]:
    """Inside, what this thread prints, the warnings it raises and the log records it makes at
    ``level`` or below go nowhere; other threads print, warn and log as before.

    The records are dropped by a filter on the handlers: a logger's own filter sees only the
    records that logger makes, not those of its children (``torch._export.*`` loggers are made
    while exporting), and a level or ``logging.disable`` would silence every thread.
    """
    silence = _FromThread(threading.get_ident(), level)
    handlers = _handlers()
    for handler in handlers:
        handler.addFilter(silence)
    sink = _Discard()
    try:
        with _STDOUT.active(sink), _STDERR.active(sink), _SHOW_WARNING.active(lambda message: None):
            yield
    finally:
        for handler in handlers:
            handler.removeFilter(silence)
