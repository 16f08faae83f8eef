"""The one run: a forward and a backward of the user's own module, in every mode, read out.

:func:`run_model` is the one way fxflow runs the user's model: on its real tensors, on the meta
device (a 7B config checked without allocating it), or on fake twins of its weights. The loss is
the one the model is trained on (:func:`fxflow.dynamic.loss.training_loss`). ``fxflow.check`` (the
first step, the look-ahead's and ``--steps``' runs) goes through it; ``fxflow.watch`` and the trainer
callbacks, whose forward and backward are the user's own, read their gradients the same way
(:func:`fxflow.dynamic.gradients.read_gradients`) into the same :class:`ProbeResult`.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Sequence

import torch
from torch._subclasses.fake_tensor import is_fake

from ..errors import FxflowError, describe, first_line
from .gradients import GradInfo, read_gradients
from .lookahead import LookAhead, may_look_ahead
from .writes import ForwardWrites
from .redraw import Redrawn, drew_random_numbers
from .backward_trace import BackwardTrace
from .module_norms import ModuleGradRecorder
from ..prepare.fake import FakeWeights, fake_inputs, fake_weights, new_fake_mode
from .no_derivative import StopAtMissingDerivatives, stop_at_missing_derivatives
from ..core.user_hooks import post_accumulate_hooks_paused
from ..core.observer import ForwardPart
from ..core.records import NonfiniteSite
from ..core.guard import ATTRIBUTES_ONLY, guard, save
from .loss import LOSS_PROJECTION, TrainingLoss, floating_outputs, training_loss
from .unregistered import unregistered_tensors
from ..verdicts import CutSite

if TYPE_CHECKING:  # pragma: no cover
    from .recorded import Recorded
    from .rerun import Rerun


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
    unregistered: dict[str, tuple[tuple[int, ...], GradInfo]] = field(default_factory=dict)
    # Exactly zero parameters -> the all-zero trainable weights that zeroed them (fxflow.diagnose.holders).
    held_by: dict[str, list[str]] = field(default_factory=dict)
    fed_by: dict[str, list[str]] = field(default_factory=dict)  # dead unit's zero -> learning weights feeding it
    # Which exact zeros learn once the first steps move what holds them (fxflow.dynamic.lookahead).
    look_ahead: LookAhead | None = None
    # What other draws of the model's random numbers showed (fxflow.dynamic.redraw): the dry parameters
    # one reached (the model's own randomness decides, so they learn on some steps), the calls that drew,
    # and the random choices that left outcomes unpicked.
    redraws: Redrawn = field(default_factory=Redrawn)


class BackwardFailed(Exception):
    """The real backward itself raised (an op with no derivative written through a view, a custom
    Function's broken backward): the gradients are unknown, not missing."""


Mode = Literal["real", "fake"]


def gradient_result(grads: dict[str, GradInfo], unregistered: "dict[str, tuple[tuple[int, ...], GradInfo]]",
                    recorder: ModuleGradRecorder | None, **fields: Any) -> ProbeResult:
    """The one place a :class:`ProbeResult` is built, from a backward fxflow ran (:class:`ModelRun`) or the
    user's own (``fxflow.watch``): the parameters' gradients, what reached tensors outside
    ``model.parameters()`` (by path: shape and gradient), the per-module norms; ``fields`` fill the rest."""
    return ProbeResult(grads, dict(recorder.norms) if recorder is not None else {}, unregistered=unregistered,
                       **fields)


def reached_unregistered(tensors: dict[str, torch.Tensor], group: Any = None) -> "dict[str, tuple[tuple[int, ...], GradInfo]]":
    """The tensors outside ``model.parameters()`` (by path) that the backward gave a ``.grad``."""
    reached = {path: tensor for path, tensor in tensors.items() if tensor.grad is not None}
    infos, _ = read_gradients({path: tensor.grad for path, tensor in reached.items()}, group)
    return {path: (tuple(tensor.shape), infos[path]) for path, tensor in reached.items()}


def run_model(model: torch.nn.Module, inputs: Sequence[Any], *, mode: Mode = "real",
              loss_fn: Callable[[Any], torch.Tensor] | None = None, seed: int = 0, labels_given: bool = False,
              record: bool = False, trace: bool = False, kwargs: dict[str, Any] | None = None) -> "ModelRun":
    """The one forward and backward of the user's model, in every mode; returns the run, read out.

    ``mode="real"``: the model's own tensors. ``"fake"`` (a model on the meta device, or ``device="meta"``):
    fake twins of the weights put in place for the run, under a fake mode
    (:class:`fxflow.prepare.fake.StandInFakeMode`), recorded like a real run; such a run tells which
    parameters a gradient reaches, not how large it is. With
    ``record=True`` the forward is also recorded as an fx graph (:attr:`ModelRun.recorded`); with ``trace=True``
    a real run also keeps what localization reads (:attr:`ModelRun.trace`).
    Call it inside :func:`fxflow.core.guard.guard`: the run leaves its gradients in ``.grad``.
    """
    run = ModelRun(model, mode=mode, loss_fn=loss_fn, seed=seed, labels_given=labels_given, record=record,
                   trace=trace)
    run.run(inputs, kwargs)
    return run


class ModelRun:
    """One forward and backward of the user's module, read out into one :class:`ProbeResult`.

    :meth:`run` does both (:func:`run_model` is the way in); :meth:`forward` and :meth:`backward` are
    its halves for a caller that runs forward itself. :meth:`replay` runs the same forward again with
    the same random draws (where a NaN was born: fxflow.diagnose.nonfinite), :meth:`rerun` the whole step,
    lean (the look-ahead).
    """

    def __init__(self, model: torch.nn.Module, *, mode: Mode = "real",
                 loss_fn: Callable[[Any], torch.Tensor] | None = None, seed: int = 0, labels_given: bool = False,
                 record: bool = False, trace: bool = False, watchers: Sequence[ForwardPart] = ()) -> None:
        self.model = model
        self.mode = mode
        self.watchers = tuple(watchers)  # more parts of the forward observer, entered around forward only
        self.loss_fn = loss_fn
        self.seed = seed
        self.labels_given = labels_given  # a tuple output's first element is then the model's loss
        self.record = record
        self.recorded: Recorded | None = None  # with record=True: the graph of the forward, or why none
        self._tracing = trace and mode == "real"  # only real gradients have norms to localize by
        self.trace: BackwardTrace | None = None  # with trace=True, after the backward: origins and norms
        self.result: ProbeResult | None = None
        self.failure: CutSite | None = None  # the backward raised: no result, and why
        # The gradients themselves, kept only when some is exactly zero (fxflow.dynamic.lookahead steps with them).
        self.gradients: dict[str, torch.Tensor | None] = {}
        self._weights: FakeWeights | None = None  # the fake run's twins of the weights
        self._fake_mode: Any = None
        self.drew_random_numbers = False  # the forward advanced a random generator (fxflow.dynamic.redraw)
        # what the recorded forward wrote before it was put back, kept where a look-ahead may follow
        self.writes: ForwardWrites | None = None

    def forward(self, call: Callable[[], Any]) -> Any:
        """Run ``call`` (the model's forward) with the per-module gradient hooks in place."""
        self._call = call  # replayed only to find where a non-finite value was born
        self._random_state = save()  # the global generators the forward starts from
        # the fake run's tensors have no values to take a norm of
        self._recorder = ModuleGradRecorder(self.model) if self.mode == "real" else None
        self._stops = StopAtMissingDerivatives()
        self._unregistered = unregistered_tensors(self.model) if self.mode == "real" else {}
        self._unregistered_grads = save(grads_of=list(self._unregistered.values()), fresh_grads=True, rng=False)
        self.trace = BackwardTrace(self.model) if self._tracing else None
        try:
            with torch.enable_grad(), contextlib.ExitStack() as watching:
                for watcher in self.watchers:
                    watching.enter_context(watcher)
                if self.trace is not None:
                    watching.enter_context(self.trace.forward())
                outputs = _forward(call, self._stops)
            if self.mode == "real":  # only a real run is drawn again (and fake mode cannot compare states)
                self.drew_random_numbers = drew_random_numbers(self._random_state, save())
            return outputs
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        if self._recorder is not None:
            self._recorder.remove()
        self._unregistered_grads.restore()

    def backward(self, outputs: Any) -> ProbeResult | None:
        """Differentiate the loss of ``outputs`` and read every parameter's gradient; None when the
        backward itself raised (:attr:`failure` says how)."""
        try:
            note = self._recorder.uninstrumented_note(outputs) if self._recorder is not None else None
            with torch.enable_grad(), post_accumulate_hooks_paused(self.model.parameters()):
                loss = _backward(outputs, self._training_loss, self.trace)
            self.result = gradient_result(self._read_gradients(), reached_unregistered(self._unregistered), self._recorder,
                                          notes=([note] if note else []) + self._stand_in_notes(),
                                          measurable=self.mode == "real" and not any(p.is_meta for p in self.model.parameters()),
                                          backward_raises=self._stops.reached(), loss=loss.description,
                                          loss_output=loss.output_index, loss_finite=_finite_loss(loss))
        except BackwardFailed as error:
            self.failure = CutSite(node="backward", op="backward", source=None, reason=str(error))
            self.trace = None
            return None
        finally:
            self._release()
        return self.result

    def _read_gradients(self) -> dict[str, GradInfo]:
        """Every parameter's gradient; on fake twins, whether one arrived."""
        if self._weights is not None:
            return {name: GradInfo(present=fake.grad is not None) for name, fake in self._weights.parameters.items()}
        grads, _ = read_gradients({name: p.grad for name, p in self.model.named_parameters()})
        if any(info.present and info.all_zero for info in grads.values()):  # the look-ahead steps with them
            self.gradients = {name: p.grad for name, p in self.model.named_parameters()}
        return grads

    def replay(self) -> Any:
        """The forward again, as the real run made it: the same dropout draws, the same stops at ops
        with no derivative; the random state is put back afterwards (for :mod:`fxflow.diagnose.nonfinite`)."""
        with guard():
            self._random_state.restore()
            return self._replay()

    def rerun(self) -> "Rerun":
        """This run's step again, lean, from what this run set up (the look-ahead's, the redraws' and the
        round-off recheck's runs: :class:`fxflow.dynamic.rerun.Rerun`). Call it after :meth:`run`."""
        from .rerun import Rerun

        return Rerun(self.model, self._training_loss, self._random_state, self._unregistered,
                     stops=bool(self._stops.rebased))

    def _replay(self) -> Any:
        with stop_at_missing_derivatives():  # the same history as the real run: it stops where that one did
            return self._call()

    def _training_loss(self, outputs: Any) -> TrainingLoss:
        return training_loss(outputs, self.loss_fn, self.seed, self.labels_given)

    def loss_of(self, outputs: Any) -> torch.Tensor | None:
        """The training loss of ``outputs``, chosen as for the real run."""
        return self._training_loss(outputs).tensor

    def run(self, inputs: Sequence[Any], kwargs: dict[str, Any] | None = None) -> ProbeResult | None:
        """The forward on ``inputs`` (recorded with ``record=True``), then the backward (on fakes: :meth:`_run_fake`)."""
        if self.mode == "fake":
            return self._run_fake(inputs, kwargs)
        if self.record and not kwargs:
            return self._run_recorded(inputs)
        return self.backward(self.forward(lambda: self.model(*inputs, **(kwargs or {}))))

    def _run_fake(self, inputs: Sequence[Any], kwargs: dict[str, Any] | None) -> ProbeResult | None:
        """Forward and backward on fake twins of the weights, put in place for the run (and recorded, as a
        real run is): nothing is allocated or computed, and the model's own tensors are back afterwards."""
        self._fake_mode = new_fake_mode()
        self._weights = fake_weights(self.model, self._fake_mode)
        with guard(), self._fake_mode, self._weights.in_place():
            arguments = fake_inputs(self._fake_mode, inputs)
            if self.record and not kwargs:
                result = self._run_recorded(arguments)
                if self.recorded is not None and self.recorded.values is not None:  # read back by the real names
                    values = dataclasses.replace(self.recorded.values, stood_for=self._weights.twins)
                    self.recorded = dataclasses.replace(self.recorded, values=values)
                return result
            return self.backward(self.forward(lambda: self.model(*arguments, **(kwargs or {}))))

    def _stand_in_notes(self) -> list[str]:
        """Where the fake run read a value fake tensors do not have, and ran the op on stand-ins."""
        sites = self._fake_mode.stand_ins if self._fake_mode is not None else []
        if not sites:
            return []
        return [f"meta run: {', '.join(sites)} read values fake tensors do not have, so ran on stand-in values "
                "(ones, zeros): what those values decide (a branch, a shape) may differ in a real run"]

    def _run_recorded(self, inputs: Sequence[Any]) -> ProbeResult | None:
        """The forward inside a recording of it; a recording that fails costs a second, plain forward,
        never the check (the failure is kept for the capture's notes)."""
        forward = RecordedForward(self.model, inputs)
        random_state = save()  # the global generators
        with forward:
            try:
                outputs = forward.run(self.forward, lambda: self._stops.rebased)
            except Exception:
                random_state.restore()  # the plain forward draws what the recorded one drew
                outputs = self.forward(forward.call)
            result = self.backward(outputs)
            forward.keep_writes = result is not None and may_look_ahead(result.grads)
        self.recorded, self.writes = forward.recorded, forward.writes
        return result


class RecordedForward:
    """One forward of ``model`` on ``inputs``, recorded as an fx graph for the capture stage
    (:class:`fxflow.dynamic.recording.Recording`) while the probe runs it.

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
        saved = self._stack.enter_context(guard(self.inner, **ATTRIBUTES_ONLY))
        # what forward wrote is read only for a look-ahead (keep_writes), from the attributes the guard saved anyway
        self.writes: ForwardWrites | None = ForwardWrites(saved.attributes)
        self.keep_writes = False
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if not self.keep_writes:
                self.writes = None
            else:
                self.writes.read(self._recording.snapshot if self._recording is not None else None)
            if self._recording is not None:
                self._recording.restore()
        finally:
            self._stack.close()

    def run(self, forward: Callable[[Callable[[], Any]], Any],
            rewritten: Callable[[], Iterable[torch.Tensor]] = tuple) -> Any:
        """``forward(call)`` inside the recording; returns its outputs. When it raises, the error
        goes on (the model is put back first) and :attr:`recorded` says why nothing was recorded.
        ``rewritten()``, asked after forward: results whose history forward's modes changed in place."""
        from .recorded import Recorded
        from .recording import Recording

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


def _forward(call: Callable[[], Any], stops: StopAtMissingDerivatives | None = None) -> Any:
    try:
        with stops or StopAtMissingDerivatives():  # floor_divide & co.: the backward stops there, not raises
            outputs = call()
    except Exception as error:
        raise FxflowError(f"forward raised {type(error).__name__}: {first_line(error)}",
                          hint=("check the example inputs against what forward expects (the inputs given to fxflow.check, "
                                "--input-size, or example_inputs() in the model's file)")) from error
    if not floating_outputs(outputs):
        raise FxflowError("the model's output contains no floating-point tensor, so nothing can be differentiated")
    return outputs


def _backward(outputs: Any, choose: Callable[[Any], TrainingLoss], trace: BackwardTrace | None = None) -> TrainingLoss:
    """Differentiate the training loss of ``outputs`` (a loss that needs no gradient: nothing to do),
    ``trace`` hooked on its autograd graph."""
    loss = choose(outputs)
    if isinstance(loss.tensor, torch.Tensor) and loss.tensor.requires_grad:
        try:
            if trace is not None:
                trace.watch(loss.tensor)
            loss.tensor.backward()
        except Exception as error:  # autograd's own failure, not the model's forward: report, don't crash
            raise BackwardFailed(f"{type(error).__name__}: {first_line(error)}") from error
        finally:
            if trace is not None:
                trace.finish()
    return loss


def _finite_loss(loss: TrainingLoss) -> bool:
    tensor = loss.tensor
    return not isinstance(tensor, torch.Tensor) or tensor.is_meta or is_fake(tensor) or bool(
        torch.isfinite(tensor.detach()).all())

