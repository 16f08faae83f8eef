"""Find the user's own line behind a graph node: the innermost frame outside torch and fxflow."""
from __future__ import annotations

import ast
import functools
import inspect
import linecache
import os
import re
import sys
import textwrap
from types import FrameType
from typing import Iterable

import torch

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<function>\S+))?')
_LIBRARY_ROOTS = tuple(
    os.path.dirname(os.path.abspath(module.__file__)) + os.sep
    for module in (torch, sys.modules[__name__.split(".")[0]])
)
_STDLIB_ROOT = os.path.dirname(os.path.abspath(os.__file__)) + os.sep


_TYPED = ("<stdin>", "<ipython-input-")  # python - < file, an IPython cell: code the user typed
_COMMAND_LINE = "<string>"  # python -c's code; also the file of code a library makes with exec (dataclasses)


def _frame_file(filename: str, function: str | None) -> str:
    """The file a frame counts as: a dunder in ``<string>`` is code a library generated (a dataclass's
    ``__init__``, a namedtuple's ``__new__``), never the user's typed code."""
    if filename == _COMMAND_LINE and function and function.startswith("__") and function.endswith("__"):
        return "<generated>"
    return filename


@functools.lru_cache(maxsize=4096)  # called once per frame of every node: cache per file
def is_library_file(path: str) -> bool:
    """True for files of torch, fxflow or the standard library: never the user's code.

    Other installed packages (transformers, say) count as user code: a cut inside them
    is still best reported at their line.
    """
    if path.startswith("<"):  # code with no file: the user's when typed (python -c, stdin, a notebook cell)
        return not (path.startswith(_TYPED) or (path == _COMMAND_LINE and sys.argv[:1] == ["-c"]))
    path = os.path.abspath(path)
    if path.startswith(_LIBRARY_ROOTS):
        return True
    in_packages = "site-packages" in path or "dist-packages" in path
    return path.startswith(_STDLIB_ROOT) and not in_packages


@functools.lru_cache(maxsize=4096)
def display_path(path: str) -> str:
    """A path relative to the site-packages folder it is installed in (``transformers/pytorch_utils.py``,
    also from a virtual environment inside the project), else relative to the working directory
    when the file lies below it: never a path of the machine that made the report, in a report
    meant to be shared."""
    absolute = os.path.abspath(path)
    for folder in ("site-packages", "dist-packages"):
        _, found, inside = absolute.partition(os.sep + folder + os.sep)
        if found:
            return inside.replace(os.sep, "/")
    try:
        relative = os.path.relpath(absolute)
    except ValueError:  # another drive on Windows
        return absolute
    return absolute if relative.startswith("..") else relative


def pick_user_frame(frames: Iterable[tuple[str, int]]) -> str | None:
    """The innermost frame that is the user's, as ``file:line``; ``frames`` go innermost first."""
    for filename, line in frames:
        if not is_library_file(filename):
            return f"{display_path(filename)}:{line}"
    return None


@functools.lru_cache(maxsize=65536)  # a loop over blocks creates the same trace again and again
def source_of_stack_trace(stack_trace: str | None) -> str | None:
    """``file:line`` of the user's line in a ``node.meta["stack_trace"]`` string."""
    if not stack_trace:
        return None
    frames = [(_frame_file(m["file"], m["function"]), int(m["line"])) for m in _FRAME.finditer(stack_trace)]
    return pick_user_frame(reversed(frames))


@functools.lru_cache(maxsize=65536)
def user_frames(stack_trace: str | None) -> tuple[str, ...]:
    """The user's own frames in a ``node.meta["stack_trace"]`` (not torch's, fxflow's or an installed
    package's), outermost first, as
    ``function @ file:line`` (``forward @ model.py:40``, ``squash @ utils.py:12``); empty when
    the node was created in one frame of the user's, where its line says it all."""
    if not stack_trace:
        return ()
    frames = [(m["function"] or "?", f"{display_path(m['file'])}:{m['line']}")
              for m in _FRAME.finditer(stack_trace) if not is_library_file(_frame_file(m["file"], m["function"]))
              and not is_installed_file(m["file"])]
    # from the outermost forward down: the frames above it (a test, a script) only called fxflow
    start = next((i for i, (function, _) in enumerate(frames) if function == "forward"), 0)
    chain = tuple(f"{function} @ {where}" for function, where in frames[start:])
    return chain if len(chain) > 1 else ()


def stack_frames(stack_trace: str) -> list[tuple[str, int, str | None]]:
    """(file, line, function) of each frame of a ``node.meta["stack_trace"]``, outermost first."""
    return [(_frame_file(m["file"], m["function"]), int(m["line"]), m["function"]) for m in _FRAME.finditer(stack_trace)]


def is_fxflow_file(path: str) -> bool:
    return os.path.abspath(path).startswith(_FXFLOW_ROOT)


def is_installed_file(path: str) -> bool:
    """A file of an installed package (transformers, say): its line can be where a cut is, but
    its frames are not the user's way there."""
    return "site-packages" in path or "dist-packages" in path


def current_user_source() -> str | None:
    """``file:line`` of the innermost user frame on the live Python stack."""
    frame = sys._getframe(1)
    while frame is not None:  # innermost first, up to the first of the user's: rarely more than a few frames
        if not is_library_file(_frame_file(frame.f_code.co_filename, frame.f_code.co_name)):
            return f"{display_path(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


_FXFLOW_ROOT = _LIBRARY_ROOTS[1]
_CONTEXT_DECORATOR = os.path.join(_LIBRARY_ROOTS[0], "utils", "_contextlib.py")


def entered_region_source() -> str | None:
    """``file:line`` where the grad-mode region being entered right now (a ``no_grad``,
    ``inference_mode`` or ``set_grad_enabled(False)``) was opened, for a cut to point at:

    * the ``with`` line or the ``set_grad_enabled(False)`` call;
    * for a function, method or hook decorated with ``@torch.no_grad()``, the decorator's line;
    * where that line lies in an installed package (a decorator inside transformers), the innermost
      line of the user's own code that called into it; a package's line only when forward has none.
    """
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_FXFLOW_ROOT):  # the recorder's own frames
        frame = frame.f_back
    package_line = None
    while frame is not None and not frame.f_code.co_filename.startswith(_FXFLOW_ROOT):  # up to fxflow's call
        filename = frame.f_code.co_filename
        if filename == _CONTEXT_DECORATOR and frame.f_code.co_name == "decorate_context":
            decorated = decorator_line(frame.f_locals.get("func"))
            if decorated is not None:
                return decorated
        elif not is_library_file(_frame_file(filename, frame.f_code.co_name)):
            if not is_installed_file(filename):
                return f"{display_path(filename)}:{frame.f_lineno}"
            package_line = package_line or f"{display_path(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return package_line


def decorator_line(function: object) -> str | None:
    """``file:line`` of the grad-mode decorator of the user's own ``function`` (the first decorator
    when no line of them names the grad mode); None for a function of torch or an installed package."""
    code = getattr(inspect.unwrap(function), "__code__", None) if callable(function) else None
    if code is None or is_library_file(code.co_filename) or is_installed_file(code.co_filename):
        return None
    line = code.co_firstlineno  # a decorated function's first line is its first decorator's
    for number in range(code.co_firstlineno, code.co_firstlineno + 16):
        text = linecache.getline(code.co_filename, number).strip()
        if not text.startswith("@"):
            break
        if _names_grad_mode(text):
            line = number
            break
    return f"{display_path(code.co_filename)}:{line}"


def _names_grad_mode(text: str) -> bool:
    return "grad" in text or "inference" in text


def hook_line(function: object) -> str | None:
    """``file:line`` where a hook ``function`` hands back what cuts: its grad-mode decorator
    (``@torch.no_grad()``) when it has one, else its one ``return`` of a value (the one that
    detaches, where several return one), else its ``def`` line; a lambda's own line."""
    function = inspect.unwrap(function)
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    where = f"{display_path(code.co_filename)}:{code.co_firstlineno}"
    decorated = decorator_line(function)
    text = linecache.getline(code.co_filename, int(decorated.rpartition(":")[2])).strip() if decorated else ""
    if text.startswith("@") and _names_grad_mode(text):
        return decorated
    line = _cutting_return(function)
    return f"{display_path(code.co_filename)}:{line}" if line is not None else where


def _cutting_return(function: object) -> int | None:
    """The line of the ``return`` of a value in ``function``'s own body (not a nested one's): the
    only one, or the only one of them that detaches (``.detach()``, ``.data``)."""
    try:
        lines, start = inspect.getsourcelines(function)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, ValueError):
        return None
    definition = tree.body[0] if tree.body else None
    if not isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None  # a lambda: its line is the registration's
    found, stack = [], list(definition.body)
    while stack:
        statement = stack.pop()
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(statement, ast.Return) and statement.value is not None and \
                not (isinstance(statement.value, ast.Constant) and statement.value.value is None):
            found.append(statement)
        stack.extend(ast.iter_child_nodes(statement))
    detaching = [r for r in found if any(isinstance(n, ast.Attribute) and n.attr in ("detach", "detach_", "data")
                                         for n in ast.walk(r.value))]
    chosen = found if len(found) == 1 else detaching
    return start + chosen[0].lineno - 1 if len(chosen) == 1 else None


class StackTexts:
    """The live Python stack as ``node.meta["stack_trace"]`` text (fx's format, outermost frame first),
    built one frame at a time and shared.

    A stack is a *chain*: the chain of the frames above, plus one frame (its code and current line).
    Each chain is numbered once and its text made once from its parent's, so a model's layers, which
    run the same lines, reuse the texts of the first; and a caller that knows the chain of the frames
    above some frame of the stack (:class:`ModuleStack` does, for the running module) walks only the
    frames below it. Code objects are keyed by identity and kept alive with the table, so no other
    code object can take their ids.
    """

    def __init__(self) -> None:
        self._chains: dict[tuple[int, int, int], int] = {}  # (chain above, id(code), line) -> chain
        self._texts: list[str] = [""]  # chain -> its text; chain 0 is the empty stack
        self._codes: list[object] = []

    def chain(self, frame: FrameType | None, last: FrameType | None = None, above: int = 0) -> int:
        """The chain of the stack from ``frame`` outwards: up to and including ``last``, on top of
        ``above`` (the chain of the frames beyond ``last``); the whole stack if ``last`` is not on it."""
        frames = []
        while frame is not None:
            frames.append(frame)
            if frame is last:
                break
            frame = frame.f_back
        else:
            above = 0  # `last` is not on this stack (another thread's module): every frame was walked
        chain = above
        for frame in reversed(frames):
            code, line = frame.f_code, frame.f_lineno
            key = (chain, id(code), line)
            found = self._chains.get(key)
            if found is None:
                found = self._chains[key] = len(self._texts)
                text = f'  File "{code.co_filename}", line {line}, in {code.co_name}'
                self._texts.append(f"{self._texts[chain]}\n{text}" if chain else text)
                self._codes.append(code)
            chain = found
        return chain

    def text(self, chain: int) -> str:
        return self._texts[chain]

    def __len__(self) -> int:
        return len(self._texts)


def python_stack_trace() -> str:
    """The live Python stack in ``node.meta["stack_trace"]`` format, outermost frame first."""
    global _TEXTS
    if len(_TEXTS) > _TEXTS_KEPT:
        _TEXTS = StackTexts()
    return _TEXTS.text(_TEXTS.chain(sys._getframe(1)))


_TEXTS = StackTexts()
_TEXTS_KEPT = 65536


class ModuleStack:
    """The submodules whose forward is running now, outermost first: ``(qualified name, class name)``.

    Kept by a forward pre-hook and an always-called forward hook on every submodule (the root is
    not an entry; a ``torch.jit.script``'ed module takes no Python hook), installed for the
    duration of a ``with`` block. The one module tracker of the recordings that say which module
    made a value: the run-time capture's ``nn_module_stack``, localization's and the NaN births'
    module. Inside ``torch.compile`` the hooks do nothing (a side effect there breaks the graph).
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.entries: list[tuple[str, str]] = []
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._texts = StackTexts()
        # Per running submodule: the frame that called its forward (torch's `Module._call_impl`),
        # alive while it runs, and the chain of the frames above that one (see stack_trace).
        self._frames: list[tuple[FrameType, int]] = []
        self._as_meta: dict[str, tuple[str, str]] | None = None  # entries in fx's format, while they stay the same

    def as_meta(self) -> dict[str, tuple[str, str]]:
        """The entries as fx's ``node.meta["nn_module_stack"]``: one dict, shared by every node recorded
        while the same modules run (read, never changed in place)."""
        if self._as_meta is None:
            self._as_meta = {name: (name, cls) for name, cls in self.entries}
        return self._as_meta

    @property
    def innermost(self) -> str | None:
        """The qualified name of the innermost running submodule (None: only the root runs)."""
        return self.entries[-1][0] if self.entries else None

    def stack_trace(self, frame: FrameType) -> str:
        """The stack from ``frame`` outwards as ``node.meta["stack_trace"]`` text
        (:func:`python_stack_trace`'s), walking only the frames inside the running submodule."""
        last, above = self._frames[-1] if self._frames else (None, 0)
        return self._texts.text(self._texts.chain(frame, last, above))

    def __enter__(self) -> "ModuleStack":
        # one bound method of each kind for every module, the entry looked up by the module: no
        # per-module callables (fewer objects for the garbage collector to walk while a check runs)
        self._entry_of: dict[int, tuple[str, str]] = {}
        enter, leave = self._enter_module, self._leave_module
        for name, module in self.model.named_modules():
            if name and not isinstance(module, torch.jit.ScriptModule):
                self._entry_of[id(module)] = (name, type(module).__name__)
                self._handles.append(module.register_forward_pre_hook(enter))
                self._handles.append(module.register_forward_hook(leave, always_call=True))
        return self

    def _enter_module(self, module: torch.nn.Module, *_: object) -> None:
        if torch.compiler.is_compiling():  # first: dynamo traces nothing more of the hook then
            return
        entry = self._entry_of.get(id(module))
        if entry is not None:
            self._enter(entry, sys._getframe(1))  # the module's _call_impl: the hooks are called from it

    def _leave_module(self, module: torch.nn.Module, *_: object) -> None:
        if torch.compiler.is_compiling():
            return
        entry = self._entry_of.get(id(module))
        if entry is not None:
            self._leave(entry)

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _enter(self, entry: tuple[str, str], caller: FrameType) -> None:
        if not torch.compiler.is_compiling():
            self.entries.append(entry)
            self._as_meta = None
            last, above = self._frames[-1] if self._frames else (None, 0)
            self._frames.append((caller, self._texts.chain(caller.f_back, last, above)))

    def _leave(self, entry: tuple[str, str]) -> None:
        if not torch.compiler.is_compiling() and self.entries and self.entries[-1] == entry:
            self.entries.pop()
            self._frames.pop()
            self._as_meta = None
