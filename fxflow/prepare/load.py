"""TARGET spec -> model instance and example inputs.

``path/to/file.py:Name`` or ``package.module:Name``. Name is an ``nn.Module`` subclass (built
with no arguments, or with ``--arg key=value``) or a function returning a module. Loading a file
executes it, exactly like ``python file.py`` would.
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import itertools
import inspect
import os
import re
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Sequence

from ..errors import FxflowError


@dataclass
class Loaded:
    model: Any  # torch.nn.Module
    inputs: tuple[Any, ...] | dict[str, Any] | None  # a dict: keyword inputs, as model(**inputs)
    notes: list[str] = field(default_factory=list)
    target: str = ""  # the target with its name, also when the user left ``:Name`` out
    # Inputs for the steps after the first (--steps): example_batches(), or fresh draws like ``inputs``.
    batches: Any = None
    file: str | None = None  # the target's source file: the user's, where a package's cut was set up


def parse_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``["hidden=64", "name='x'"]`` -> {"hidden": 64, "name": "x"}; values are Python literals."""
    result: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise FxflowError(f"--arg {pair!r} is malformed", hint="use --arg key=value, e.g. --arg hidden=64")
        try:
            result[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            result[key.strip()] = value.strip()  # a bare word is taken as a string
    return result


_DRIVE = re.compile(r"[A-Za-z]:[\\/]")  # a Windows drive at the start of a path


def split_target(target: str) -> tuple[str, str | None]:
    """``"file.py:Net"`` -> ("file.py", "Net"); ``"file.py"`` -> ("file.py", None): the name is found later."""
    drive = _DRIVE.match(target)  # C:\proj\model.py[:Name]: the drive's colon names nothing
    if drive:
        location, name = split_target(target[2:])
        return target[:2] + location, name
    location, sep, name = target.rpartition(":")
    if not sep and target.strip() and ":" not in target:
        return target, None
    if not location or not name or (len(location) == 1 and location.isalpha()):
        raise FxflowError(f"target {target!r} must look like path/to/file.py:Name or package.module:Name")
    return location, name


def import_location(location: str) -> ModuleType:
    """Import a file path or a dotted module name, turning every failure into one clear line."""
    is_file = location.endswith(".py") or os.sep in location or "/" in location or "\\" in location
    if is_file:
        if not os.path.isfile(location):
            raise FxflowError(f"file not found: {location}")
        return _import_file(location)
    added = os.getcwd() not in sys.path and "" not in sys.path
    if added:  # like `python -m`: a module in the working directory imports
        sys.path.insert(0, os.getcwd())
    write_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # fxflow writes no file
    try:
        return importlib.import_module(location)
    except ModuleNotFoundError as error:
        if not error.name:  # raised by the module's own code (a lazy import), not a missing package
            raise FxflowError(f"importing {location} raised ModuleNotFoundError: {error}") from error
        if location.startswith(error.name):
            raise FxflowError(f"no module named {location!r}", hint="give a file path or an importable module") from error
        raise FxflowError(f"importing {location} failed: no module named {error.name!r}",
                          hint=f"pip install the package that provides {error.name!r}") from error
    except SyntaxError as error:
        raise FxflowError(f"syntax error in {error.filename}:{error.lineno}: {error.msg}") from error
    except Exception as error:
        raise FxflowError(f"importing {location} raised {type(error).__name__}: {error}") from error
    finally:
        sys.dont_write_bytecode = write_bytecode
        if added and sys.path and sys.path[0] == os.getcwd():
            sys.path.pop(0)


def _module_name(path: str) -> str:
    """A stable module name for a target file (the same on every run: output must not vary)."""
    stem = "".join(c if c.isalnum() else "_" for c in os.path.splitext(os.path.basename(path))[0])
    digest = hashlib.sha1(path.encode()).hexdigest()[:8]
    return f"fxflow_target_{stem}_{digest}"


def _import_file(path: str) -> ModuleType:
    """Run the file like ``python file.py`` would (its folder first on sys.path), writing no bytecode."""
    path = os.path.abspath(path)
    module_name = _module_name(path)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise FxflowError(f"cannot import {_relative(path)}", hint="the target file must be a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look the module up by name
    directory = os.path.dirname(path)
    sys.path.insert(0, directory)  # the file's siblings import as they would under `python file.py`
    write_bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # `python file.py` leaves no __pycache__ next to the file; neither do we
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        raise FxflowError(f"syntax error in {_relative(error.filename or path)}:{error.lineno}: {error.msg}") from error
    except ModuleNotFoundError as error:
        if not error.name:  # raised by the file's own code (a lazy import), not a missing package
            raise FxflowError(f"running {_relative(path)} raised ModuleNotFoundError: {error}") from error
        raise FxflowError(f"importing {_relative(path)} failed: no module named {error.name!r}",
                          hint=f"pip install the package that provides {error.name!r}") from error
    except SystemExit as error:  # argparse or sys.exit() at the top level of the file
        raise FxflowError(f"running {_relative(path)} called sys.exit({error.code!r})",
                          hint="guard script code with if __name__ == '__main__':") from error
    except Exception as error:
        raise FxflowError(f"running {_relative(path)} raised {type(error).__name__}: {error}") from error
    finally:
        sys.dont_write_bytecode = write_bytecode
        if sys.path and sys.path[0] == directory:
            sys.path.pop(0)
    return module


def _relative(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _candidates(module: ModuleType) -> list[str]:
    import torch

    names = []
    for name, value in vars(module).items():
        if inspect.isclass(value) and issubclass(value, torch.nn.Module) and value.__module__ == module.__name__:
            names.append(name)
    return sorted(names)


def pick_model_name(module: ModuleType, location: str) -> str:
    """The model a target without ``:Name`` means: the only ``nn.Module`` subclass the file defines,
    or, when the file defines ``example_inputs()``, the one class no other class of the file uses
    (the outermost model, the one those inputs are for). Anything else is ambiguous."""
    found = _candidates(module)
    if len(found) == 1:
        return found[0]
    if not found:
        raise FxflowError(f"{location} defines no nn.Module subclass", hint=f"name a model or factory: {location}:Name")
    if callable(getattr(module, "example_inputs", None)):
        outermost = [name for name in found if not _used_by_other_classes(module, name, found)]
        if len(outermost) == 1:
            return outermost[0]
    raise FxflowError(f"{location} defines several nn.Module subclasses: {', '.join(found)}",
                      hint=f"name one, e.g. {location}:{found[-1]}")


def _used_by_other_classes(module: ModuleType, name: str, classes: list[str]) -> bool:
    """Whether another of ``classes`` mentions ``name`` (builds it, or subclasses it)."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return False
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in classes and node.name != name:
            if any(isinstance(child, ast.Name) and child.id == name for child in ast.walk(node)):
                return True
    return False


def build_model(module: ModuleType, location: str, name: str, kwargs: dict[str, Any]) -> Any:
    """Instantiate (or call) ``name`` from the imported module."""
    import torch

    if not hasattr(module, name):
        found = _candidates(module)
        listing = ", ".join(found) if found else "none"
        raise FxflowError(f"{location} has no {name!r}; modules defined there: {listing}")
    factory = getattr(module, name)
    if not callable(factory) or (inspect.isclass(factory) and not issubclass(factory, torch.nn.Module)):
        raise FxflowError(f"{name} is not an nn.Module subclass or a function that returns one")
    _check_signature(factory, name, kwargs)
    try:
        model = factory(**kwargs)
    except Exception as error:
        raise FxflowError(f"building {name} raised {type(error).__name__}: {error}") from error
    if not isinstance(model, torch.nn.Module):
        raise FxflowError(f"{name}() returned {type(model).__name__}, not an nn.Module")
    return model


def _check_signature(factory: Any, name: str, kwargs: dict[str, Any]) -> None:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return
    missing = [
        p.name for p in signature.parameters.values()
        if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.name not in kwargs
    ]
    if missing:
        example = " ".join(f"--arg {m}=..." for m in missing)
        raise FxflowError(f"{name} needs constructor arguments: {', '.join(missing)}", hint=f"pass {example}")
    accepts_any = any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values())
    unknown = [k for k in kwargs if k not in signature.parameters and not accepts_any]
    if unknown:
        raise FxflowError(f"{name} takes no argument {unknown[0]!r}; it takes: "
                          + (", ".join(signature.parameters) or "nothing"))


def load_function(spec: str, option: str = "--loss") -> Any:
    """``file.py:fn`` or ``package.module:fn`` -> the function (for ``--loss``)."""
    location, name = split_target(spec)
    if name is None:
        raise FxflowError(f"{option} {spec!r} must name a function: path/to/file.py:function")
    function = getattr(import_location(location), name, None)
    if function is None:
        raise FxflowError(f"{option} {spec!r}: {location} defines no {name!r}")
    if not callable(function):
        raise FxflowError(f"{option} {spec!r}: {name} is not a function")
    return function


def load_target(target: str, *, args: Sequence[str] = (), input_sizes: Sequence[str] = (),
                device: str | None = None, seed: int = 0) -> Loaded:
    """Import the target, build the model and pick example inputs (flags, example_inputs(), first layer)."""
    import torch

    from .inputs import infer_inputs, make_inputs

    location, name = split_target(target)
    module = import_location(location)
    if name is None:
        name = pick_model_name(module, location)
        target = f"{location}:{name}"
    kwargs = parse_args(args)
    if device == "meta":
        with torch.device("meta"):
            model = build_model(module, location, name, kwargs)
    else:
        model = build_model(module, location, name, kwargs)
        if device is not None:
            model = move_model(model, device)
    notes: list[str] = []
    batches = None
    if input_sizes:
        inputs = make_inputs(model, input_sizes, device)
        batches = (make_inputs(model, input_sizes, device) for _ in itertools.repeat(None))  # fresh draws
    elif callable(getattr(module, "example_batches", None)):
        batches = iter(_call_user(module.example_batches, "example_batches()"))
        inputs = _batch(next(batches, None), model, device)
        if inputs is None:
            raise FxflowError("example_batches() yielded no batch")
        batches = (_batch(batch, model, device) for batch in batches)
        notes.append("inputs from example_batches()")
    elif callable(getattr(module, "example_inputs", None)):
        inputs = _batch(_call_user(module.example_inputs, "example_inputs()"), model, device)
        notes.append("inputs from example_inputs()")
        batches = (_batch(_call_user(module.example_inputs, "example_inputs()"), model, device) for _ in itertools.repeat(None))
    else:
        inputs = infer_inputs(model, seed=seed)
        if inputs is not None:
            notes.append("inputs inferred from the first layer: one tensor of shape "
                         f"({','.join(str(s) for s in inputs[0].shape)})")
    return Loaded(model, inputs, notes, target, batches, getattr(module, "__file__", None))


def _call_user(function: Any, name: str) -> Any:
    try:
        return function()
    except Exception as error:
        raise FxflowError(f"{name} raised {type(error).__name__}: {error}") from error


def _batch(inputs: Any, model: Any, device: str | None) -> Any:
    """One batch as check takes it: a dict stays one (bound as model(**inputs)), else a tuple, on ``device``."""
    import torch

    from .inputs import as_input_tuple

    if inputs is None:
        return None
    if not isinstance(inputs, dict):
        inputs = as_input_tuple(inputs, model)
    if device is not None:
        move = lambda x: x.to(device) if isinstance(x, torch.Tensor) else x  # noqa: E731
        inputs = {k: move(v) for k, v in inputs.items()} if isinstance(inputs, dict) else tuple(map(move, inputs))
    return inputs


def move_model(model: Any, device: str) -> Any:
    """``model.to(device)``; a device this machine does not have is one clear error, not torch's assertion."""
    try:
        return model.to(device)
    except (RuntimeError, AssertionError, ValueError) as error:
        raise FxflowError(f"cannot move the model to {device!r}: {error}",
                          hint="check on cpu (--device cpu, device=\"cpu\"), or on a device this machine has") from error
