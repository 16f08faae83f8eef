"""The user's line that leads into an installed package: where a node made inside transformers, say,
comes from in the user's own code (their call in forward, or the call that set the package's cut up),
and where forward ran torch's code alone."""
from __future__ import annotations

import ast
import contextlib
import functools
import linecache
from contextvars import ContextVar
from typing import Iterator, NamedTuple

import torch

from .source import display_path, is_fxflow_file, is_installed_file, is_library_file, stack_frames


class PackageWay(NamedTuple):
    """The user's line that leads to a node made inside an installed package."""

    line: str  # file:line of the user's
    how: str  # "called at", or "set up by `method` at"
    package_lines: frozenset[str]  # the package's own lines on the node's stack (file:line as displayed)


# The files the user named as the entry (the CLI's target file): where a factory in them set a package's cut
# up (``make()`` calling ``gradient_checkpointing_enable``), no frame of theirs is on the stack at the cut.
_ENTRY_FILES: ContextVar[tuple[str, ...]] = ContextVar("fxflow_entry_files", default=())


@contextlib.contextmanager
def entry_files(*files: str | None) -> Iterator[None]:
    """Within the block, :func:`package_way` also looks for the call that set a package's cut up in ``files``."""
    token = _ENTRY_FILES.set(tuple(file for file in files if file))
    try:
        yield
    finally:
        _ENTRY_FILES.reset(token)


def package_way(stack_trace: str | None, name: str) -> PackageWay | None:
    """:func:`_package_way`, also in the entry files the block of :func:`entry_files` names."""
    return _package_way(stack_trace, name, _ENTRY_FILES.get())


@functools.lru_cache(maxsize=4096)
def _package_way(stack_trace: str | None, name: str, entries: tuple[str, ...] = ()) -> PackageWay | None:
    """For a node made inside an installed package (a ``node.meta["stack_trace"]`` whose innermost
    frame outside torch and fxflow is a package's): the user's line that leads there. It is the
    innermost frame of the user's own files in the model's forward (their call of the package's
    module); where forward has none (the checked model is the package's own), the last call before
    fxflow was called, in the user's files on the stack, of a method named after the op ``name``
    (``gradient_checkpointing_enable`` for a ``checkpoint``), else the last such call in ``entries``
    (the file the CLI's target names). None when the node's line is the user's already, or no such
    line exists."""
    if not stack_trace:
        return None
    frames = [(f, n) for f, n, _ in stack_frames(stack_trace)]  # outermost first
    inner = next((f for f, _ in reversed(frames) if not is_library_file(f)), None)
    if inner is None or not is_installed_file(inner):
        return None
    package = frozenset(f"{display_path(f)}:{n}" for f, n in frames if not is_library_file(f) and is_installed_file(f))
    inside, outside = _forward_frames(frames)
    for filename, line in reversed(inside):
        if not is_library_file(filename) and not is_installed_file(filename):
            return PackageWay(f"{display_path(filename)}:{line}", "called at", package)
    for filename, line in reversed(outside):
        if not is_library_file(filename) and not is_installed_file(filename):
            way = _set_up_at(filename, name, line, package)
            if way is not None:
                return way
    for filename in entries:  # anywhere in the file: the factory ran before the check
        way = _set_up_at(filename, name, 1 << 30, package)
        if way is not None:
            return way
    return None


def _set_up_at(filename: str, name: str, before: int, package: frozenset[str]) -> PackageWay | None:
    """The last call before line ``before`` of ``filename`` that set the package's cut ``name`` up."""
    found = _last_call_named(filename, name, before)
    return None if found is None else PackageWay(f"{display_path(filename)}:{found[0]}",
                                                 f"set up by `{found[1]}` at", package)


def _forward_frames(frames: list[tuple[str, int]]) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """``frames`` (outermost first) split into (the model's forward, the frames that called fxflow):
    what follows fxflow's outermost run of frames (``check``'s call of the model), or, where nothing
    does (``watch`` inside the user's own loop), every frame before fxflow's hooks and nothing outside."""
    first = next((i for i, (f, _) in enumerate(frames) if is_fxflow_file(f)), len(frames))
    end = first
    while end < len(frames) and is_fxflow_file(frames[end][0]):
        end += 1
    return (frames[end:], frames[:first]) if end < len(frames) else (frames[:first], [])


@functools.lru_cache(maxsize=65536)
def only_torch_in_forward(stack_trace: str | None) -> bool:
    """Whether a node was made in forward by torch's own code alone (the checked model is an
    ``nn.RNN``): no frame of the user's or of an installed package between fxflow's call of the
    model and the op, so the user's nearest line is the one that called fxflow."""
    if not stack_trace:
        return False
    inside, _ = _forward_frames([(f, n) for f, n, _ in stack_frames(stack_trace)])
    return bool(inside) and all(is_library_file(f) for f, _ in inside)  # an installed package's file is not one


def user_call(stack_trace: str | None) -> tuple[str, str | None] | None:
    """(``file:line`` of the user's innermost line, the function of torch's it called there, if any:
    ``("model.py:11", "state_dict")`` for a tensor made inside ``module.state_dict()``)."""
    if not stack_trace:
        return None
    found = stack_frames(stack_trace)
    for index in range(len(found) - 1, -1, -1):
        filename, line, _ = found[index]
        if not is_library_file(filename) and not is_installed_file(filename):
            callee = found[index + 1] if index + 1 < len(found) else None
            called = callee[2] if callee and not is_fxflow_file(callee[0]) else None
            return f"{display_path(filename)}:{line}", called
    return None


@functools.lru_cache(maxsize=256)
def _calls_in(filename: str) -> tuple[tuple[int, str], ...]:
    """(line, method name) of each ``x.method(...)`` call in a source file; () when unreadable."""
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return ()
    return tuple(sorted((node.lineno, node.func.attr) for node in ast.walk(tree)
                        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)))


def _last_call_named(filename: str, name: str, before: int) -> tuple[int, str] | None:
    """(line, method) of the last call before line ``before`` of a method that sets something up
    named ``name``: its name holds ``name`` and more (``gradient_checkpointing_enable`` for
    ``checkpoint``), and is no tensor method (``x.detach()`` sets nothing up) and no ``disable``."""
    word = name.lower().strip("_")
    calls = [(line, method) for line, method in _calls_in(filename)
             if line < before and word and word in method.lower() and method.lower() != word
             and "disable" not in method.lower() and not hasattr(torch.Tensor, method)]
    return calls[-1] if calls else None
