"""Name the op that severs gradient flow at a node, and say why in plain words."""
from __future__ import annotations

import functools
import inspect
from dataclasses import replace
from typing import Iterable, Mapping

import torch
import torch.fx as fx

from . import rules
from .flow import META_KEY, NONE, NodeFlow
from .scripted import is_scripted, read_scripted
from ..core.functions import CheckpointGate
from ..core.package_way import only_torch_in_forward, package_way
from ..core.source import display_path, hook_line, is_library_file, source_of_stack_trace
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
    """Why gradient does not pass through ``node`` to (some of) its inputs, at the user's line."""
    return _at_users_line(_describe_cut(node), node)


def _at_users_line(site: CutSite, node: fx.Node) -> CutSite:
    """A cut made inside an installed package (transformers' reentrant checkpoint, an adapter's
    ``no_grad``) is named at the user's line that leads there (:func:`~fxflow.core.source.package_way`),
    with the package's line beside it in the reason."""
    way = package_way(node.meta.get("stack_trace"), site.op) if site.source else None
    if way is None or site.source not in way.package_lines:  # named at the user's line already
        return site
    return replace(site, source=way.line,
                   reason=f"{site.reason} ({site.source}, in an installed package, {way.how} {way.line})")


def _describe_cut(node: fx.Node) -> CutSite:
    flow: NodeFlow = node.meta[META_KEY]
    op = node_op(node)
    source = node_source(node)
    region = flow.grad_region
    dtype = flow.dtype or _cast_dtype(node)  # a node that never ran has no dtype: read the cast
    if region is not None:  # named where the region was entered: the op's own line runs with gradients for other callers
        kind = region.kind  # set_grad_enabled(False) flips the same switch as no_grad: reported as no_grad
        at = f" ({source})" if source and source != region.source else ""
        where = f" (entered at {region.source})" if region.source else ""
        way = package_way(node.meta.get("stack_trace"), kind)
        if way is not None and source in way.package_lines and region.source == way.line:  # entered in the package
            where = f", entered in an installed package ({way.how} {way.line})"
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
    elif isinstance(node.target, CheckpointGate):
        reason = ("a reentrant checkpoint (use_reentrant=True) whose inputs do not require grad returns a result with "
                  "no autograd history, so the parameters inside it get no gradient")
    elif getattr(node.target, "cut_reason", None):  # a capture's own function says why (a hidden channel)
        reason = node.target.cut_reason
    elif flow.requires_grad is False and _hooks(node, "_forward_hooks"):
        hook, where = _hooks(node, "_forward_hooks")[0]
        return CutSite(node.name, f"{hook} hook", where or source, _hook_reason(f"{hook} hook", where, [node]))
    elif NONE in flow.inputs.values() and _hooks(node, "_forward_pre_hooks"):
        hook, where = _hooks(node, "_forward_pre_hooks")[0]
        return CutSite(node.name, f"{hook} pre-hook", where or source, _hook_reason(f"{hook} pre-hook", where, [node]))
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
    """(name, ``file:line``) of each hook of a ``call_module`` node's module in its ``kind`` table
    (``_forward_hooks``, ``_forward_pre_hooks``): a hook that detaches, or runs under ``no_grad``,
    is where such a call loses its history, and the module's own line is not. The line is where the
    hook hands back what cuts (:func:`~fxflow.core.source.hook_line`: its ``@torch.no_grad()``, else
    its ``return``); a lambda's, the line that registered it. Global hooks
    (``register_module_forward_hook``) run on every module: theirs too."""
    owner = node.graph.owning_module
    if node.op != "call_module" or owner is None:
        return []
    hooks = []
    every = getattr(torch.nn.modules.module, f"_global{kind}", {})  # _global_forward_hooks, ..._pre_hooks
    for hook in [*getattr(owner.get_submodule(node.target), kind).values(), *every.values()]:
        function = inspect.unwrap(hook.func if isinstance(hook, functools.partial) else hook)
        hooks.append((getattr(function, "__name__", type(function).__name__), hook_line(function)))
    return hooks


_HOOK_KINDS = {"hook": ("forward hook", "returns a result with no autograd history"),
               "pre-hook": ("forward pre-hook", "hands {it} an input with no autograd history")}


def _hook_reason(op: str, where: str | None, nodes: list[fx.Node]) -> str:
    """Why a hook (``op``: ``"name hook"``, ``"name pre-hook"``) cuts at the calls ``nodes`` of the modules it runs on."""
    hook, _, kind = op.rpartition(" ")
    words, effect = _HOOK_KINDS[kind]
    modules = list(dict.fromkeys(f"`{n.target}` ({node_op(n)})" for n in nodes))
    effect = effect.format(it="it" if len(modules) == 1 else "each")
    on = ", ".join(modules[:-1]) + " and " + modules[-1] if len(modules) > 1 else modules[0]
    return (f"the {words} `{hook}`{f' ({where})' if where else ''} on {on} {effect}, "
            "so the gradient stops here")


def one_site_per_cause(sites: Iterable[CutSite], nodes: Mapping[str, fx.Node]) -> dict[str, CutSite]:
    """``{node name: its site}`` for the cuts that one line away from the nodes' own makes at several
    calls, so that line is one finding, not one per call: a hook's (a global hook runs on every module,
    one function may hook many; the reason lists the modules), or the user's line behind a package's
    cut (each checkpointed layer of a model). Named at the first call; ``nodes``: the graph's, in order."""
    groups: dict[tuple[str, ...], dict[str, CutSite]] = {}
    for site in sites:
        node = nodes.get(site.node)
        if node is None or not site.source or site.source == node_source(node):
            continue
        hook = site.op.endswith((" hook", " pre-hook"))
        groups.setdefault((site.op, site.source) if hook else (site.op, site.source, site.reason), {})[site.node] = site
    order = {name: index for index, name in enumerate(nodes)}
    merged: dict[str, CutSite] = {}
    for key, group in groups.items():
        if len(group) < 2:
            continue
        calls = sorted(group, key=order.__getitem__)
        site = group[calls[0]]
        if len(key) == 2:  # a hook's: on every module it cut at
            site = replace(site, reason=_hook_reason(site.op, site.source, [nodes[name] for name in calls]))
        merged.update(dict.fromkeys(calls, site))
    return merged


def describe_raise(node: fx.Node) -> CutSite:
    """A node with no derivative for an input, which the gradient reaches: the real backward raises there."""
    op = _shown_op(node)
    return CutSite(node.name, op, node_source(node), raises_reason(op))


def _shown_op(node: fx.Node) -> str:
    """:func:`node_op`, but an op that torch's own module ran with no line of the user's in forward
    (``rnn_relu`` when the checked model is an ``nn.RNN``) is named after that module (``RNN``), as a
    traced call of it is: the user's nearest line is then the one that called fxflow, and the op's name
    is torch's inner one."""
    if node.op not in ("call_function", "call_method") or not only_torch_in_forward(node.meta.get("stack_trace")):
        return node_op(node)
    modules = list((node.meta.get("nn_module_stack") or {}).values())
    inner = modules[-1] if modules else None
    if isinstance(inner, tuple) and len(inner) == 2 and isinstance(inner[1], str):
        return inner[1].rpartition(".")[2]
    owner = node.graph.owning_module
    return type(owner).__name__ if owner is not None else node_op(node)


def describe_zero(node: fx.Node) -> CutSite:
    """Why gradient through ``node`` arrives as an exact zero."""
    op = _shown_op(node)
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
