"""Per-module gradient norms: how much gradient flowed out of every module call in a backward.

The diagram's edge widths and the report's per-call norms come from these hooks; ``fxflow.check``'s
run and ``fxflow.watch`` install them alike.
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable

import torch
from torch._C._functorch import is_functorch_wrapped_tensor

from ..core.tensors import gradient_norm, hookable
from .loss import floating_outputs


class ModuleGradRecorder:
    """Records the gradient norm that flows out of every module call during backward.

    Inside a ``torch.compile``'d submodule or a higher-order op (``torch.cond``), dynamo traces the
    hooks: writing Python state there is a side effect it rejects (cond) or breaks the graph for
    (compile). The hooks therefore do nothing while dynamo traces, those calls stay uninstrumented
    and the model runs as it would without fxflow; :meth:`notes` says which regions were skipped.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.norms: dict[str, list[float | None]] = {}  # None: no gradient flowed out of that call
        self.unhooked: set[str] = set()  # modules with an output torch cannot take a hook on
        self.handles = [  # a torch.jit.script'ed module takes no Python hook: its calls stay unrecorded
            module.register_forward_hook(self._hook(name))
            for name, module in model.named_modules() if name and not isinstance(module, torch.jit.ScriptModule)
        ]

    def _hook(self, name: str) -> Callable:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            if torch.compiler.is_compiling():  # a constant True under dynamo: the hook traces to nothing
                return
            slot = len(self.norms.setdefault(name, []))
            self.norms[name].append(None)
            for tensor in floating_outputs(output):
                # inside torch.func (grad, vmap, jacrev) the gradient is the transform's own, not the step's
                if not tensor.requires_grad or tensor.is_meta or is_functorch_wrapped_tensor(tensor):
                    continue
                if hookable(tensor):
                    tensor.register_hook(self._grad_hook(name, slot))
                else:  # a view written in place: torch can crash the process on its hook (core/tensors.py)
                    self.unhooked.add(name)

        return hook

    def _grad_hook(self, name: str, slot: int) -> Callable:
        def hook(grad: torch.Tensor | None) -> None:
            if grad is None:  # a custom autograd.Function's backward may return None for this output
                return
            self.norms[name][slot] = math.hypot(self.norms[name][slot] or 0.0, gradient_norm(grad))

        return hook

    def uninstrumented_note(self, outputs: Any) -> str | None:
        """Which compiled or higher-order regions of this forward ran without the hooks, and which module
        outputs could not be hooked (None: none)."""
        regions = [f"torch.compile'd submodule `{name}`" for name in compiled_submodules(self.model)]
        regions += [f"torch.{op}" for op in higher_order_ops(outputs)]
        notes = []
        if regions:
            notes.append(f"per-module gradient norms are not recorded inside {', '.join(regions)}: fxflow leaves "
                         "compiled and higher-order regions uninstrumented so they run as they would without it")
        if self.unhooked:
            names = ", ".join(f"`{name}`" for name in sorted(self.unhooked))
            notes.append(f"the gradient norms out of {names} leave out outputs that are views written in place "
                         "(torch can crash on a hook there)")
        if not notes:
            return None
        return "; ".join(notes) + "; the parameters' gradients are still read from the real backward"

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def compiled_submodules(model: torch.nn.Module) -> list[str]:
    """Qualified names of the submodules ``torch.compile`` wraps (outermost only)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")  # not imported: nothing was compiled
    found: list[str] = []
    for name, module in model.named_modules():
        compiled = getattr(module, "_compiled_call_impl", None) is not None or (
            eval_frame is not None and isinstance(module, eval_frame.OptimizedModule))
        if name and compiled and not any(name.startswith(outer + ".") for outer in found):
            found.append(name)
    return found


def higher_order_ops(outputs: Any) -> list[str]:
    """The higher-order ops (``torch.cond``, ``map``, ...) in the autograd graph behind ``outputs``.

    Their backward nodes are autograd Functions named ``<Op>AutogradOp``; they need dynamo, so
    without it loaded none can have run and the graph is not walked.
    """
    if "torch._dynamo" not in sys.modules:
        return []
    from ..core.history import autograd_nodes

    roots = [t.grad_fn for t in floating_outputs(outputs) if t.grad_fn is not None]
    names = {node.name() for node in autograd_nodes(roots)}
    return sorted({name.split("AutogradOp")[0].lower() for name in names if "AutogradOp" in name})
