"""The real backward: one forward and one backward of the user's own module, then put it all back.

The loss is the one the model is trained on (:func:`fxflow.dynamic.loss.training_loss`).
"""
from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import torch
from torch._C._functorch import is_functorch_wrapped_tensor
from torch._subclasses.fake_tensor import is_fake

from ..errors import FxflowError, describe, first_line
from ..static.flow import gradient_norm
from .gradients import GradInfo, read_gradients
from .lookahead import LookAhead
from ..prepare.fake import fake_inputs, fake_weights, new_fake_mode
from .no_derivative import StopAtMissingDerivatives, stop_at_missing_derivatives
from ..diagnose.nonfinite import NonfiniteSite
from ..prepare.state import RandomState, untouched
from .loss import LOSS_PROJECTION, TrainingLoss, floating_outputs, training_loss
from .unregistered import unregistered_tensors
from ..verdicts import CutSite

if TYPE_CHECKING:  # pragma: no cover
    from ..capture import Recorded


@dataclass
class ProbeResult:
    grads: dict[str, GradInfo]
    module_grad_norms: dict[str, list[float | None]] = field(default_factory=dict)  # per call, in call order
    measurable: bool = True  # False on meta/fake tensors: presence only
    notes: list[str] = field(default_factory=list)
    # Zero or vanishing parameters -> where their gradient died or shrank most (fxflow.diagnose.localize).
    explanations: dict[str, CutSite] = field(default_factory=dict)
    # Ops with no derivative that the gradient reached: the real backward raises there, this one stopped.
    backward_raises: list[CutSite] = field(default_factory=list)
    loss: str = LOSS_PROJECTION  # what the backward differentiated (see training_loss)
    loss_finite: bool = True  # the loss's value was finite
    # The model's own loss: its position among the output's tensors, and how many tensors there are.
    loss_output: tuple[int, int] | None = None
    # Where a NaN or inf was born, when the loss or a gradient is not finite (fxflow.diagnose.nonfinite).
    nonfinite: list[NonfiniteSite] = field(default_factory=list)
    # Tensors that require grad and received a gradient but model.parameters() does not list:
    # attribute path -> what the gradient was.
    unregistered: dict[str, GradInfo] = field(default_factory=dict)
    # Exactly zero parameters -> the all-zero trainable weights that zeroed them (fxflow.diagnose.holders).
    held_by: dict[str, list[str]] = field(default_factory=dict)
    # Which exact zeros learn once the first steps move what holds them (fxflow.dynamic.lookahead).
    look_ahead: LookAhead | None = None


class BackwardFailed(Exception):
    """The real backward itself raised (an op with no derivative written through a view, a custom
    Function's broken backward): the gradients are unknown, not missing."""


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
                if tensor.requires_grad and not tensor.is_meta and not is_functorch_wrapped_tensor(tensor):
                    tensor.register_hook(self._grad_hook(name, slot))

        return hook

    def _grad_hook(self, name: str, slot: int) -> Callable:
        def hook(grad: torch.Tensor | None) -> None:
            if grad is None:  # a custom autograd.Function's backward may return None for this output
                return
            self.norms[name][slot] = math.hypot(self.norms[name][slot] or 0.0, gradient_norm(grad))

        return hook

    def uninstrumented_note(self, outputs: Any) -> str | None:
        """Which compiled or higher-order regions of this forward ran without the hooks (None: none)."""
        regions = [f"torch.compile'd submodule `{name}`" for name in compiled_submodules(self.model)]
        regions += [f"torch.{op}" for op in higher_order_ops(outputs)]
        if not regions:
            return None
        return (f"per-module gradient norms are not recorded inside {', '.join(regions)}: fxflow leaves compiled "
                "and higher-order regions uninstrumented so they run as they would without it; the "
                "parameters' gradients are still read from the real backward")

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
    from ..diagnose.localize import autograd_nodes

    roots = [t.grad_fn for t in floating_outputs(outputs) if t.grad_fn is not None]
    names = {node.name() for node in autograd_nodes(roots)}
    return sorted({name.split("AutogradOp")[0].lower() for name in names if "AutogradOp" in name})


def probe(model: torch.nn.Module, inputs: Sequence[Any], *, loss_fn: Callable[[Any], torch.Tensor] | None = None,
          seed: int = 0, kwargs: dict[str, Any] | None = None, fake: bool = False,
          labels_given: bool = False) -> ProbeResult:
    """Run one forward and backward on ``model`` and read every parameter's gradient.

    With ``fake=True`` the run uses fake tensors (no weights allocated, nothing computed): it
    tells which parameters get a gradient, not how large. The model is left exactly as found:
    grads, flags, buffers, attributes, RNG state.
    """
    if fake:
        try:
            return _probe_fake(model, inputs, loss_fn=loss_fn, kwargs=kwargs, labels_given=labels_given)
        except BackwardFailed as error:
            raise FxflowError(f"the backward on fake tensors raised {error}") from error
    with untouched(model) as notes:
        result = measure_gradients(model, inputs, loss_fn=loss_fn, seed=seed, kwargs=kwargs, labels_given=labels_given)
    result.notes.extend(notes)
    return result


class GradientProbe:
    """One real forward and backward, read out: what :func:`measure_gradients` does, in two halves.

    :meth:`run` does both; with ``record=True`` the forward is also recorded as an fx graph
    (:class:`fxflow.capture.recording.Recording`), so the capture stage gets the run-time capture
    without a forward of its own: :attr:`recorded`. Use inside :func:`fxflow.prepare.state.untouched`.
    """

    def __init__(self, model: torch.nn.Module, *, loss_fn: Callable[[Any], torch.Tensor] | None = None,
                 seed: int = 0, labels_given: bool = False, record: bool = False) -> None:
        self.model = model
        self.loss_fn = loss_fn
        self.seed = seed
        self.labels_given = labels_given  # a tuple output's first element is then the model's loss
        self.record = record
        self.recorded: Recorded | None = None  # with record=True: the graph of the forward, or why none
        self.result: ProbeResult | None = None
        self.failure: CutSite | None = None  # the backward raised: no result, and why
        # The gradients themselves, kept only when some is exactly zero (fxflow.dynamic.lookahead steps with them).
        self.gradients: dict[str, torch.Tensor | None] = {}

    def forward(self, call: Callable[[], Any]) -> Any:
        """Run ``call`` (the model's forward) with the per-module gradient hooks in place."""
        self._call = call  # replayed only to explain a zero, vanishing or non-finite gradient
        self._random_state = RandomState.save()
        self._recorder = ModuleGradRecorder(self.model)
        self._stops = StopAtMissingDerivatives()
        self._unregistered = Stashed(unregistered_tensors(self.model))
        try:
            with torch.enable_grad():
                return _forward(call, self._stops)
        except BaseException:
            self._recorder.remove()
            self._unregistered.restore()
            raise

    def backward(self, outputs: Any) -> ProbeResult | None:
        """Differentiate the loss of ``outputs`` and read every parameter's gradient; None when the
        backward itself raised (:attr:`failure` says how)."""
        try:
            note = self._recorder.uninstrumented_note(outputs)
            with torch.enable_grad():
                loss = _backward(outputs, self._training_loss)
            measurable = not any(p.is_meta for p in self.model.parameters())
            grads, _ = read_gradients({name: p.grad for name, p in self.model.named_parameters()})
            if any(info.present and info.all_zero for info in grads.values()):  # the look-ahead steps with them
                self.gradients = {name: p.grad for name, p in self.model.named_parameters()}
            reached = {path: tensor for path, tensor in self._unregistered.tensors.items() if tensor.grad is not None}
            infos, _ = read_gradients({path: tensor.grad for path, tensor in reached.items()})
            unregistered = {path: (tuple(tensor.shape), infos[path]) for path, tensor in reached.items()}
        except BackwardFailed as error:
            self.failure = CutSite(node="backward", op="backward", source=None, reason=str(error))
            return None
        finally:
            self._recorder.remove()
            self._unregistered.restore()
        self.result = ProbeResult(grads, dict(self._recorder.norms), measurable, [note] if note else [],
                                  backward_raises=self._stops.reached(), loss=loss.description,
                                  loss_output=loss.output_index, unregistered=unregistered,
                                  loss_finite=_finite_loss(loss))
        return self.result

    def replay(self) -> Any:
        """The forward again, as the real run made it: the same dropout draws, the same stops at ops
        with no derivative; the random state is put back afterwards (for :mod:`fxflow.diagnose`)."""
        after = RandomState.save()
        self._random_state.restore()
        try:
            return self._replay()
        finally:
            after.restore()

    def again(self, inputs: Sequence[Any]) -> "tuple[GradientProbe, ProbeResult | None]":
        """Forward and backward once more on ``inputs``, from the random draws this run started with
        (the look-ahead's runs); not recorded. Returns the new probe and its result (None: it raised)."""
        self._random_state.restore()
        probe = GradientProbe(self.model, loss_fn=self.loss_fn, seed=self.seed, labels_given=self.labels_given)
        try:
            return probe, probe.run(inputs)
        except FxflowError:
            return probe, None

    def _replay(self) -> Any:
        with stop_at_missing_derivatives():  # the same history as the real run: it stops where that one did
            return self._call()

    def _training_loss(self, outputs: Any) -> TrainingLoss:
        return training_loss(outputs, self.loss_fn, self.seed, self.labels_given)

    def loss_of(self, outputs: Any) -> torch.Tensor | None:
        """The training loss of ``outputs``, chosen as for the real run."""
        return self._training_loss(outputs).tensor

    def run(self, inputs: Sequence[Any], kwargs: dict[str, Any] | None = None) -> ProbeResult | None:
        """The forward on ``inputs`` (recorded with ``record=True``), then the backward."""
        if self.record and not kwargs:
            return self._run_recorded(inputs)
        return self.backward(self.forward(lambda: self.model(*inputs, **(kwargs or {}))))

    def _run_recorded(self, inputs: Sequence[Any]) -> ProbeResult | None:
        """The forward inside a recording of it; a recording that fails costs a second, plain forward,
        never the check (the failure is kept for the capture's notes)."""
        forward = RecordedForward(self.model, inputs)
        random_state = RandomState.save()
        with forward:
            try:
                outputs = forward.run(self.forward, lambda: self._stops.rebased)
            except Exception:
                random_state.restore()  # the plain forward draws what the recorded one drew
                outputs = self.forward(forward.call)
            result = self.backward(outputs)
        self.recorded = forward.recorded
        return result


class RecordedForward:
    """One forward of ``model`` on ``inputs``, recorded as an fx graph for the capture stage
    (:class:`fxflow.capture.recording.Recording`) while the probe runs it.

    Use as a context around the forward and the backward: on leaving, what the run changed in the
    model (buffers, attributes forward assigns) is put back, so later stages see it as found.
    :attr:`recorded` is the graph, or why there is none.
    """

    def __init__(self, model: torch.nn.Module, inputs: Sequence[Any]) -> None:
        from ..prepare.unwrap import unwrap

        self.inner = unwrap(model)[0]  # what the capture stage would record itself
        self.inputs = inputs
        self.recorded: Recorded | None = None
        self._recording: Any = None
        self._stack = contextlib.ExitStack()

    def call(self) -> Any:
        """The plain forward call."""
        return self.inner(*self.inputs)

    def __enter__(self) -> "RecordedForward":
        from ..prepare.state import preserved_module_attributes

        self._stack.enter_context(preserved_module_attributes(self.inner))
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._recording is not None:
                self._recording.restore()
        finally:
            self._stack.close()

    def run(self, forward: Callable[[Callable[[], Any]], Any],
            rewritten: Callable[[], Iterable[torch.Tensor]] = tuple) -> Any:
        """``forward(call)`` inside the recording; returns its outputs. When it raises, the error
        goes on (the model is put back first) and :attr:`recorded` says why nothing was recorded.
        ``rewritten()``, asked after forward: results whose history forward's modes changed in place."""
        from ..capture import Recorded
        from ..capture.recording import Recording

        try:
            self._recording = Recording(self.inner, self.inputs, copy_parameters=False)
            with self._recording:
                outputs = forward(self.call)
        except Exception as error:
            if self._recording is not None:
                self._recording.restore()
                self._recording = None
            self.recorded = Recorded(None, describe(error, limit=200))
            raise
        try:
            self.recorded = Recorded(self._recording.finish(outputs), values=self._recording.values(rewritten()))
        except Exception as error:  # forward ran; only its graph could not be built
            self.recorded = Recorded(None, describe(error, limit=200))
        return outputs


def measure_gradients(model: torch.nn.Module, inputs: Sequence[Any], *,
                      loss_fn: Callable[[Any], torch.Tensor] | None = None, seed: int = 0,
                      kwargs: dict[str, Any] | None = None, labels_given: bool = False) -> ProbeResult:
    """The real forward and backward, reading every gradient; the caller restores the model.

    Call it inside :func:`fxflow.prepare.state.untouched`, which starts every ``.grad`` at None.
    """
    probe = GradientProbe(model, loss_fn=loss_fn, seed=seed, labels_given=labels_given)
    result = probe.run(inputs, kwargs)
    if result is None:
        raise FxflowError(f"the real backward raised {probe.failure.reason}")
    return result


def _forward(call: Callable[[], Any], stops: StopAtMissingDerivatives | None = None) -> Any:
    try:
        with stops or StopAtMissingDerivatives():  # floor_divide & co.: the backward stops there, not raises
            outputs = call()
    except Exception as error:
        raise FxflowError(f"forward raised {type(error).__name__}: {first_line(error)}",
                          hint="check --input-size (or example_inputs()) against what forward expects") from error
    if not floating_outputs(outputs):
        raise FxflowError("the model's output contains no floating-point tensor, so nothing can be differentiated")
    return outputs


def _backward(outputs: Any, choose: Callable[[Any], TrainingLoss]) -> TrainingLoss:
    """Differentiate the training loss of ``outputs`` (a loss that needs no gradient: nothing to do)."""
    loss = choose(outputs)
    if isinstance(loss.tensor, torch.Tensor) and loss.tensor.requires_grad:
        try:
            loss.tensor.backward()
        except Exception as error:  # autograd's own failure, not the model's forward: report, don't crash
            raise BackwardFailed(f"{type(error).__name__}: {first_line(error)}") from error
    return loss


def _finite_loss(loss: TrainingLoss) -> bool:
    tensor = loss.tensor
    return not isinstance(tensor, torch.Tensor) or tensor.is_meta or is_fake(tensor) or bool(
        torch.isfinite(tensor.detach()).all())


class Stashed:
    """Tensors whose ``.grad`` the probe's backward may fill: cleared for it, then put back."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.tensors = tensors
        self.grads = {path: tensor.grad for path, tensor in tensors.items()}
        for tensor in tensors.values():
            tensor.grad = None

    def restore(self) -> None:
        for path, tensor in self.tensors.items():
            tensor.grad = self.grads[path]


def _probe_fake(model: torch.nn.Module, inputs: Sequence[Any], *, loss_fn: Callable[[Any], torch.Tensor] | None,
                kwargs: dict[str, Any] | None, labels_given: bool = False) -> ProbeResult:
    """Forward and backward on fake twins of the weights: which parameters a gradient reaches."""
    mode = new_fake_mode()
    random_state = RandomState.save()
    try:
        weights = fake_weights(model, mode)  # passed in per call: the model's own tensors stay in place
        with mode, torch.enable_grad():
            outputs = _forward(lambda: weights(*fake_inputs(mode, inputs), **(kwargs or {})))
            loss = _backward(outputs, lambda out: training_loss(out, loss_fn, 0, labels_given))
            grads = {name: GradInfo(present=fake.grad is not None) for name, fake in weights.parameters.items()}
    finally:
        random_state.restore()
    return ProbeResult(grads, measurable=False, loss=loss.description, loss_output=loss.output_index)
