"""Capture with ``torch.export`` (non-strict), converted to fxflow's graph shape.

Non-strict export runs forward in Python on fake tensors, so it gets through code that
symbolic tracing cannot (shape-dependent branches, loops over sizes, most Hugging Face models).
Its graph differs from the capture contract, and :func:`convert` closes the gap:

* parameter, buffer and constant placeholders become ``get_attr`` nodes with the model's own
  qualified names (``graph_signature.inputs_to_parameters``); lifted constants that the model
  does not own become :class:`~fxflow.capture.functions.Constant` nodes;
* ``wrap_with_set_grad_enabled(False, subgraph, ...)`` calls are inlined, and every node of the
  subgraph gets a :class:`GradRegion` (autocast wrappers are inlined as they are);
* ATen overloads become their overload packets (``aten.detach``), so ops keep short names;
* ``nn_module_stack`` keeps (qualified name, class name) pairs, the root entry dropped.

Export silently drops ``torch.inference_mode()`` and inlines custom ``autograd.Function``
forwards, so both make this capture fail and the chain moves on to the run-time capture.
"""
from __future__ import annotations

import contextlib
import linecache
import operator
import re
from typing import Any, Iterator, Sequence

import torch
import torch.fx as fx

from ..core.functions import Constant, checkpoint_inputs, checkpointed_call, intercepted_apply, is_checkpoint, is_user_function
from ..core.grad_mode import META_KEY as GRAD_MODE_KEY, GradRegion
from ..core.patching import INFERENCE_MODE, quiet_thread
from ..core.source import is_library_file

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


class ExportUnsupported(RuntimeError):
    """Forward does something torch.export would capture wrongly."""


@contextlib.contextmanager
def _guards() -> Iterator[None]:
    """Refuse inference_mode and custom autograd.Functions; inline reentrant checkpoints (this
    thread's calls only: :mod:`fxflow.capture.patching`)."""
    def inference_mode(mode: bool) -> Any:
        if mode:
            raise ExportUnsupported("torch.inference_mode() inside forward is dropped by torch.export")
        return original_inference(mode)

    def apply(cls: type, call: Any, args: tuple, kwargs: dict) -> Any:
        if is_checkpoint(cls):
            if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in checkpoint_inputs(args)):
                raise ExportUnsupported("a reentrant checkpoint without inputs that require grad")
            return checkpointed_call(args)
        if is_user_function(cls):
            raise ExportUnsupported(f"custom autograd.Function {cls.__name__} would be inlined by torch.export")
        return call(*args, **kwargs)

    with INFERENCE_MODE.active(inference_mode) as original_inference, intercepted_apply(apply):
        yield


def export_capture(model: torch.nn.Module, inputs: Sequence[Any] | None) -> fx.GraphModule:
    """Export ``model`` non-strictly with the example inputs and convert the result."""
    if inputs is None:
        raise ExportUnsupported("torch.export needs example inputs")
    with _guards(), quiet_thread():  # a failure is one line in the report, not torch's logs
        program = torch.export.export(model, tuple(inputs), strict=False)
    return convert(program, model)


def convert(program: Any, model: torch.nn.Module) -> fx.GraphModule:
    """An ExportedProgram as a GraphModule of the capture contract, rooted at ``model``."""
    from torch.export.graph_signature import InputKind, OutputKind

    signature = program.graph_signature
    kinds = {spec.arg.name: spec for spec in signature.input_specs}
    owned = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    owned |= {name for name, _ in model.named_buffers(remove_duplicate=False)}
    graph = fx.Graph()
    env: dict[fx.Node, Any] = {}
    source = program.graph_module
    for node in source.graph.nodes:  # user inputs first, in forward's order
        if node.op == "placeholder" and kinds[node.name].kind == InputKind.USER_INPUT:
            env[node] = graph.placeholder(node.name)
    for node in source.graph.nodes:
        if node.op != "placeholder":
            continue
        spec = kinds[node.name]
        if spec.kind == InputKind.USER_INPUT:
            continue
        if spec.target in owned:
            env[node] = graph.get_attr(spec.target)
        elif spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.BUFFER) and spec.target in program.constants:
            env[node] = graph.call_function(Constant(program.constants[spec.target]), ())
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER) and spec.target in program.state_dict:
            env[node] = graph.call_function(Constant(program.state_dict[spec.target]), ())
        else:
            raise ExportUnsupported(f"exported input {spec.target} ({spec.kind.name}) is not in the model")
    user_outputs = [i for i, spec in enumerate(signature.output_specs) if spec.kind == OutputKind.USER_OUTPUT]
    outputs = _copy_nodes(source, graph, env, None)
    graph.output(tuple(outputs[i] for i in user_outputs))
    return fx.GraphModule(model, graph, model.__class__.__name__)


def _copy_nodes(module: fx.GraphModule, graph: fx.Graph, env: dict[fx.Node, Any],
                region: GradRegion | None) -> list[Any]:
    """Copy the non-placeholder nodes of ``module`` into ``graph``; returns the output values."""
    for node in module.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            return list(fx.map_arg(node.args[0], lambda n: env[n]))
        if node.op == "get_attr":
            env[node] = getattr(module, str(node.target))  # a subgraph, used by a HOP below
            continue
        if node.op != "call_function":
            raise ExportUnsupported(f"unexpected {node.op} node in the exported graph")
        name = getattr(node.target, "__name__", "")
        if name in ("wrap_with_set_grad_enabled", "wrap_with_autocast"):
            env[node] = _inline(node, module, graph, env, region)
            continue
        if node.target is torch.ops.higher_order.cond:
            env[node] = _inline_cond(node, graph, env, region)
            continue
        if isinstance(node.target, torch._ops.HigherOrderOperator):
            raise ExportUnsupported(f"torch.export produced {name}, which fxflow cannot inline")
        if node.target is operator.getitem and isinstance(env.get(node.args[0]), tuple):
            element = env[node.args[0]][node.args[1]]  # one result of an inlined region
            if isinstance(element, fx.Node) and "stack_trace" not in element.meta:
                _copy_meta(node, element, region)  # subgraph nodes may lack it; the getitem has it
            env[node] = element
            continue
        args, kwargs = fx.map_arg((node.args, node.kwargs), lambda n: env[n])
        target = node.target.overloadpacket if isinstance(node.target, torch._ops.OpOverload) else node.target
        new = graph.call_function(target, tuple(args), dict(kwargs))
        _copy_meta(node, new, region)
        env[node] = new
    return []


def _inline(node: fx.Node, module: fx.GraphModule, graph: fx.Graph, env: dict[fx.Node, Any],
            region: GradRegion | None) -> tuple:
    """Inline a ``wrap_with_set_grad_enabled``/``wrap_with_autocast`` call; its results as a tuple."""
    name = node.target.__name__
    if name == "wrap_with_set_grad_enabled":
        enabled, subgraph_node, *operands = node.args
        if not enabled and region is None:
            region = GradRegion("no_grad", _region_source(module, subgraph_node))
        elif enabled:
            region = None
    else:  # wrap_with_autocast(device, dtype, enabled, cache, subgraph, *operands)
        subgraph_node, operands = node.args[4], list(node.args[5:])
    return _inline_subgraph(getattr(module, str(subgraph_node.target)), operands, graph, env, region)


def _inline_subgraph(subgraph: fx.GraphModule, operands: Sequence[Any], graph: fx.Graph, env: dict[fx.Node, Any],
                     region: GradRegion | None) -> tuple:
    """Copy ``subgraph``'s nodes into ``graph`` with its placeholders bound to ``operands``; its results."""
    inner_env: dict[fx.Node, Any] = {}
    placeholders = [n for n in subgraph.graph.nodes if n.op == "placeholder"]
    for placeholder, operand in zip(placeholders, operands):
        inner_env[placeholder] = fx.map_arg(operand, lambda n: env[n])
    return tuple(_copy_nodes(subgraph, graph, inner_env, region))


def cond(pred: torch.Tensor, if_true: torch.Tensor, if_false: torch.Tensor, *operands: Any) -> torch.Tensor:
    """One result of an inlined ``torch.cond``: the branch ``pred`` picks, with the backward
    ``torch.cond`` has. The taken branch gets the gradient, the other one zeros, and so does every
    operand the taken branch does not differentiate: cond fills those in with zeros, never None.
    A term with an identically zero derivative (``sign``) says the latter to the analysis."""
    result = torch.where(pred, if_true, if_false)
    live = [o for o in operands if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
    if live and result.requires_grad:  # only the operands neither branch differentiates need the term
        grads = torch.autograd.grad(result, live, torch.ones_like(result), allow_unused=True, retain_graph=True)
        live = [operand for operand, grad in zip(live, grads) if grad is None]
    for operand in live:
        result = result + torch.nan_to_num(operand.sign()).sum() * 0
    return result


cond.zero_reason = ("neither branch of torch.cond differentiates it (the branch that reads it detaches or ignores it), "
                    "and cond's backward fills in zeros")


def _inline_cond(node: fx.Node, graph: fx.Graph, env: dict[fx.Node, Any], region: GradRegion | None) -> tuple:
    """Inline both branches of a ``torch.cond`` and join each pair of results with :func:`cond`: the
    graph shows every op either branch may run, and which parameters a batch can reach."""
    pred, true_node, false_node, operands = node.args
    branches = [_inline_subgraph(env[branch], operands, graph, env, region) for branch in (true_node, false_node)]
    results = []
    for if_true, if_false in zip(*branches):
        joined = graph.call_function(cond, (env[pred], if_true, if_false, *fx.map_arg(tuple(operands), lambda n: env[n])))
        _copy_meta(node, joined, region)
        results.append(joined)
    return tuple(results)


def _copy_meta(old: fx.Node, new: fx.Node, region: GradRegion | None) -> None:
    if "stack_trace" in old.meta:
        new.meta["stack_trace"] = old.meta["stack_trace"]
    stack = old.meta.get("nn_module_stack")
    if stack:
        new.meta["nn_module_stack"] = {
            key: (qualname, _class_name(cls)) for key, (qualname, cls) in stack.items() if qualname
        }
    if region is not None:
        new.meta[GRAD_MODE_KEY] = region
    if "val" in old.meta:
        new.meta["val"] = old.meta["val"]


def _class_name(cls: Any) -> str:
    return cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1]


def _region_source(module: fx.GraphModule, subgraph_node: fx.Node) -> str | None:
    """The user's ``with`` line that opened a no-grad region, found from its first node's stack."""
    from ..core.source import display_path

    subgraph = getattr(module, str(subgraph_node.target))
    for node in subgraph.graph.nodes:
        frames = [(m["file"], int(m["line"])) for m in _FRAME.finditer(node.meta.get("stack_trace") or "")]
        user = [(f, line) for f, line in frames if not is_library_file(f)]
        if user:
            filename, line = user[-1]
            return f"{display_path(filename)}:{_enclosing_with(filename, line)}"
    return None


def _enclosing_with(filename: str, line: int) -> int:
    """The nearest ``with`` (or decorator) line above ``line`` that encloses it, else ``line``."""
    text = linecache.getline(filename, line)
    indent = len(text) - len(text.lstrip())
    after_def = False
    for number in range(line - 1, max(line - 200, 0), -1):
        above = linecache.getline(filename, number)
        stripped = above.strip()
        if not stripped or stripped.startswith("#"):
            continue
        depth = len(above) - len(above.lstrip())
        if after_def:  # only decorators of that def remain
            return number if stripped.startswith("@") and _switches_grad(stripped) else line
        if depth < indent:
            if stripped.startswith("with ") and _switches_grad(stripped):
                return number
            if stripped.startswith(("def ", "async def ")):
                after_def = True
                continue
            return line
    return line


def _switches_grad(text: str) -> bool:
    return "grad" in text or "inference" in text
