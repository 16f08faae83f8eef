"""Name the op that severs gradient flow at a node, and say why in plain words."""
from __future__ import annotations

import functools
import inspect

import torch
import torch.fx as fx

from . import rules
from .flow import META_KEY, NONE, NodeFlow
from .scripted import is_scripted, read_scripted
from ..core.source import display_path, is_library_file, source_of_stack_trace
from ..verdicts import OPAQUE_KEY, ZERO_BY_CONSTRUCTION_KEY, CutSite, constant_reason, raises_reason

_CASTS = {"to", "type", "long", "int", "short", "bool", "byte", "char", "half", "float", "double"}
_COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge", "isclose", "equal"}


def node_source(node: fx.Node) -> str | None:
    """``file:line`` of the user's line that created the node."""
    return source_of_stack_trace(node.meta.get("stack_trace"))


def node_op(node: fx.Node) -> str:
    """A short name for what the node does: ``detach``, ``gt``, ``linear``, ``Linear``."""
    if node.op == "call_module":
        return node.graph.owning_module.get_submodule(node.target).__class__.__name__ \
            if node.graph.owning_module is not None else str(node.target)
    if node.op == "call_function" and node.target is getattr and len(node.args) > 1:
        return str(node.args[1])
    if node.op in ("call_function", "call_method"):
        return rules.op_name(node.target)
    return node.op


def describe_cut(node: fx.Node) -> CutSite:
    """Why gradient does not pass through ``node`` to (some of) its inputs."""
    flow: NodeFlow = node.meta[META_KEY]
    op = node_op(node)
    source = node_source(node)
    region = flow.grad_region
    dtype = flow.dtype or _cast_dtype(node)  # a node that never ran has no dtype: read the cast
    if region is not None:  # named where the region was entered: the op's own line runs with gradients for other callers
        kind = region.kind  # set_grad_enabled(False) flips the same switch as no_grad: reported as no_grad
        at = f" ({source})" if source and source != region.source else ""
        where = f" (entered at {region.source})" if region.source else ""
        reason = f"{op}{at} runs inside torch.{kind}(){where}, so autograd records nothing for it"
        return CutSite(node.name, kind, region.source or source, reason)
    if OPAQUE_KEY in node.meta and (flow.requires_grad is False or _historyless_element(flow)):
        reason = (f"{node.meta[OPAQUE_KEY]} marks the output read here non-differentiable "
                  "(ctx.mark_non_differentiable), so the gradient stops here")
        return CutSite(node.name, f"{op}.apply", source, reason)
    if OPAQUE_KEY in node.meta:  # its own backward ran on twins and returned None for this input
        reason = f"the backward of {node.meta[OPAQUE_KEY]} returns None for this input, so the gradient stops here"
        return CutSite(node.name, f"{op}.apply", source, reason)
    scripted = _scripted_module(node)
    if scripted is not None:
        return _scripted_cut(node, scripted, source)
    if node.meta.get(rules.NO_DERIVATIVE_KEY):
        reason = f"{op} has no derivative for this input, so the gradient stops here"
    elif op in ("detach", "detach_"):
        reason = f"{op}() returns a tensor with no autograd history, so the gradient stops here"
    elif op == "data":
        reason = ".data reads the values without autograd history, so the gradient stops here"
    elif flow.is_tensor is False:
        reason = f"{op}() turns the tensor into plain Python data, which autograd cannot follow"
    elif dtype is not None and not _is_floating(dtype):
        if op in _CASTS:
            op = f"to_{dtype}"
            reason = f"casts to {dtype}; integer and boolean tensors carry no gradient"
        elif op in _COMPARISONS:
            reason = f"the comparison {op} returns {with_article(dtype)} tensor, which carries no gradient"
        else:
            reason = f"{op} returns {with_article(dtype)} tensor (indices or flags), which carries no gradient"
    elif getattr(node.target, "cut_reason", None):  # a capture's own function says why (a hidden channel)
        reason = node.target.cut_reason
    elif flow.requires_grad is False and _hooks(node, "_forward_hooks"):
        hook, where = _hooks(node, "_forward_hooks")[0]
        reason = (f"the forward hook `{hook}`{f' ({where})' if where else ''} on `{node.target}` ({op}) returns "
                  "a result with no autograd history, so the gradient stops here")
        return CutSite(node.name, f"{hook} hook", where or source, reason)
    elif NONE in flow.inputs.values() and _hooks(node, "_forward_pre_hooks"):
        hook, where = _hooks(node, "_forward_pre_hooks")[0]
        reason = (f"the forward pre-hook `{hook}`{f' ({where})' if where else ''} on `{node.target}` ({op}) "
                  "hands it an input with no autograd history, so the gradient stops here")
        return CutSite(node.name, f"{hook} pre-hook", where or source, reason)
    elif flow.requires_grad is False:
        reason = f"{op} produces a result that does not depend differentiably on its input"
    elif not flow.evaluated:
        reason = f"{op} is not differentiable"
    else:
        reason = f"{op} uses this input only for its shape, indices or mask, not as a differentiable value"
    return CutSite(node.name, op, source, reason)


def _scripted_module(node: fx.Node) -> torch.jit.ScriptModule | None:
    owner = node.graph.owning_module
    module = owner.get_submodule(node.target) if node.op == "call_module" and owner is not None else None
    return module if is_scripted(module) else None


def _scripted_cut(node: fx.Node, module: torch.jit.ScriptModule, source: str | None) -> CutSite:
    """A cut inside a scripted submodule, named from its TorchScript graph: the op and its line."""
    read = read_scripted(module, rules.NON_DIFFERENTIABLE_OPS)
    if read is None or read.cut is None:
        reason = (f"the scripted `{node.target}` returns a result that does not depend differentiably on "
                  "this input (read from its TorchScript graph), so the gradient stops here")
        return CutSite(node.name, node_op(node), source, reason)
    op, written = read.cut
    line = f"{display_path(written[0])}:{written[1]}" if written and not is_library_file(written[0]) else None
    reason = (f"{op}, inside the scripted `{node.target}` (called at {source}), returns a result that carries "
              "no gradient (read from its TorchScript graph), so the gradient stops here")
    return CutSite(node.name, op, line or source, reason)


def _historyless_element(flow: NodeFlow) -> bool:
    """One element of the node's result depends on nothing differentiably (a custom Function's
    output marked non-differentiable), while the whole call's inputs are read."""
    return bool(flow.inputs) and any(not part.inputs and not part.params for part in flow.outputs.values())


def _hooks(node: fx.Node, kind: str) -> list[tuple[str, str | None]]:
    """(name, ``file:line`` where it is defined) of each hook of a ``call_module`` node's module in
    its ``kind`` table (``_forward_hooks``, ``_forward_pre_hooks``): a hook that detaches, or runs
    under ``no_grad``, is where such a call loses its history, and the module's own line is not.
    A decorated hook's line is its first decorator's (``@torch.no_grad()``); a lambda's, the line
    that registered it. Global hooks (``register_module_forward_hook``) run on every module: theirs too."""
    owner = node.graph.owning_module
    if node.op != "call_module" or owner is None:
        return []
    hooks = []
    every = getattr(torch.nn.modules.module, f"_global{kind}", {})  # _global_forward_hooks, ..._pre_hooks
    for hook in [*getattr(owner.get_submodule(node.target), kind).values(), *every.values()]:
        function = inspect.unwrap(hook.func if isinstance(hook, functools.partial) else hook)
        code = getattr(function, "__code__", None)
        where = f"{display_path(code.co_filename)}:{code.co_firstlineno}" if code is not None else None
        hooks.append((getattr(function, "__name__", type(function).__name__), where))
    return hooks


def describe_raise(node: fx.Node) -> CutSite:
    """A node with no derivative for an input, which the gradient reaches: the real backward raises there."""
    op = node_op(node)
    return CutSite(node.name, op, node_source(node), raises_reason(op))


def describe_zero(node: fx.Node) -> CutSite:
    """Why gradient through ``node`` arrives as an exact zero."""
    op = node_op(node)
    if node.meta.get(ZERO_BY_CONSTRUCTION_KEY):  # its backward on random stand-ins gave exact zeros
        reason = constant_reason(op)
    elif node.op == "call_module":  # the zero is somewhere inside the call, not the module itself
        inside = _parametrizations(node)
        what = f"its parametrization {inside}" if inside else "an op inside it"
        reason = f"inside `{node.target}` ({op}), {what} has a derivative of exactly zero everywhere, " \
                 "so the gradient arrives as 0"
    elif getattr(node.target, "zero_reason", None):  # a capture's own function says why (an inlined torch.cond)
        reason = node.target.zero_reason
    else:
        reason = f"{op} has a derivative of exactly zero everywhere, so the gradient arrives as 0"
    return CutSite(node.name, op, node_source(node), reason)


def _parametrizations(node: fx.Node) -> str | None:
    """``RoundWeights of `weight``` for a module registered with torch.nn.utils.parametrize."""
    owner = node.graph.owning_module
    module = owner.get_submodule(node.target) if owner is not None else None
    tables = getattr(module, "parametrizations", None)
    if not isinstance(tables, torch.nn.ModuleDict):
        return None
    return ", ".join(f"{'+'.join(f'`{type(p).__name__}`' for p in chain)} of `{name}`" for name, chain in tables.items())


_METHOD_DTYPES = {"long": "int64", "int": "int32", "short": "int16", "char": "int8", "byte": "uint8",
                  "bool": "bool", "half": "float16", "float": "float32", "double": "float64"}


def _cast_dtype(node: fx.Node) -> str | None:
    """The dtype a cast node produces, read from the call itself (for nodes that never ran)."""
    if node.op != "call_method" or not isinstance(node.target, str):
        return None
    if node.target in _METHOD_DTYPES:
        return _METHOD_DTYPES[node.target]
    if node.target in ("to", "type"):
        for value in list(node.args[1:]) + list(node.kwargs.values()):
            if isinstance(value, torch.dtype):
                return rules.dtype_name(value)
    return None


def with_article(word: str) -> str:
    """``"an int64"``, ``"a bool"``, ``"a uint8"``: "an" before a vowel sound; a leading "u" in a
    dtype name sounds like "you" ("a uint8"), so only a, e, i, o take "an"."""
    return f"{'an' if word[:1].lower() in 'aeio' else 'a'} {word}"


def _is_floating(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat", "complex"))
