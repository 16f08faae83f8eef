"""Patches of torch's global switches that only the thread that asked for them can see.

The captures must see every ``torch.no_grad()`` and every ``Function.apply`` that forward runs,
and torch offers no hook for either, so the functions are replaced while a capture runs. They are
module attributes, shared by every thread: a check running beside a training thread must not
record that thread's calls, nor change what they do. :class:`ThreadPatch` installs one
dispatcher per attribute while any thread uses it; the dispatcher sends the calls of a thread
that entered :meth:`ThreadPatch.active` to that thread's replacement, and every other call to
the original, untouched. Nested uses in one thread stack; the original comes back when the last
use in the last thread ends.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator


class ThreadPatch:
    """One attribute of one object, replaced per thread (see the module docstring).

    ``install(dispatch)`` turns the dispatch function (``dispatch(*args, **kwargs)``) into what is
    assigned: itself for a plain function, a ``classmethod`` for a class's method.
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
        return original.__func__(*args, **kwargs) if isinstance(original, classmethod) else original(*args, **kwargs)

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
