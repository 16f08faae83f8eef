"""The Report: fxflow's one data model (plain dataclasses; :mod:`fxflow.reconcile` builds it).

Every presenter (text table, JSON, DOT, notebook) reads a :class:`Report` and nothing else. The
JSON form (:meth:`Report.to_dict`) is a public contract documented in ``docs/json.md``.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from .core.records import HealthFlag, LayerStep, NonfiniteSite
from .errors import FxflowError
from .verdicts import FAILING_DYNAMIC, FAILING_STATIC, CutSite, DynamicVerdict, ReportStatus, StaticVerdict
from .verdicts import OptimizerVerdict
from .core.records import OptimizerFindings

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

SCHEMA_VERSION = 1

# Short names for the verdicts (members of the StrEnums in fxflow.verdicts).
FROZEN, UNUSED, CUT, ZERO, REACHABLE, UNKNOWN = (StaticVerdict.FROZEN, StaticVerdict.UNUSED, StaticVerdict.CUT,
                                                 StaticVerdict.ZERO, StaticVerdict.REACHABLE, StaticVerdict.UNKNOWN)
UNREGISTERED = StaticVerdict.UNREGISTERED
MISSING, VANISHING, NONFINITE, OK, PRESENT = (DynamicVerdict.MISSING, DynamicVerdict.VANISHING,
                                              DynamicVerdict.NONFINITE, DynamicVerdict.OK, DynamicVerdict.PRESENT)
INTERMITTENT, HELD, UNCONFIRMED = DynamicVerdict.INTERMITTENT, DynamicVerdict.HELD, DynamicVerdict.UNCONFIRMED
STATIC_VERDICTS = (FROZEN, UNUSED, CUT, ZERO, REACHABLE)  # always counted; UNKNOWN only when it occurs


@dataclass
class ParameterReport:
    """Everything fxflow knows about one parameter."""

    name: str
    shape: tuple[int, ...]
    static: str
    dynamic: str | None = None  # None when no backward ran
    grad_norm: float | None = None
    cut_by: list[CutSite] = field(default_factory=list)
    agree: bool | None = None  # None when no backward ran
    # Words a stage before presenting found: where diagnose placed a zero or a shrink (``where.reason``).
    # The report's words are ``diagnosis``: this, then the words of ``reasons``.
    finding: str | None = None
    allowed: bool = False  # matched an --allow pattern: dryness is deliberate
    # Random ops (dropout...) that the failing gradient was computed from: ``op @ file:line``.
    # The verdict may change with the seed.
    random_ops: list[str] = field(default_factory=list)
    # Over many steps (check --steps, watch(steps=N)): how many had a non-zero gradient, and which did not.
    steps_with_gradient: int | None = None
    missed_steps: list[int] = field(default_factory=list)
    # Exactly zero at first, held by zero-initialized weights (``held``): the 1-based step from which it
    # gets a non-zero gradient, and the zero-initialized parameters that held it until then.
    learns_from_step: int | None = None
    held_by: list[str] = field(default_factory=list)
    # A zero a dead unit made (``zero``): the trainable weights that compute its input and got a gradient
    # (an optimizer moves its input, so it may come back; empty when nothing feeding it learns).
    fed_by: list[str] = field(default_factory=list)
    # With optimizer= (check, watch, the trainer callbacks): whether a group will update it (an
    # OptimizerVerdict; None when no optimizer was given, or it is frozen), and the codes of what was
    # observed when there is something to say (fxflow.verdicts.OptimizerReason; their facts are
    # ``facts["optimizer"]``). The words are ``optimizer_reason``, made by the presenting side.
    optimizer: str | None = None
    optimizer_reasons: list[str] = field(default_factory=list)
    # ``optimizer_reason``'s words where no code stands for them (read from another fxflow's JSON)
    optimizer_words: str | None = field(default=None, repr=False)
    # What was observed, as codes (the *Reason enums of fxflow.verdicts), in the order they are
    # told; the presenting side puts them in words (fxflow.present.reasons). ``later_steps``: the
    # optimizer steps seen after the first (the look-ahead's or the loop's own) that they speak of.
    reasons: list[str] = field(default_factory=list)
    later_steps: int | None = None
    # The facts the reasons speak of that no field above holds, plain JSON values keyed by name:
    # ``opaque``, ``seed``, ``first``, ``born``, ``calls``, ``later_call``, ``choices`` (docs/json.md).
    facts: dict[str, Any] = field(default_factory=dict)
    # Where the real backward's gradient became exactly 0 (``zero``) or shrank most (``vanishing``), when
    # fxflow.diagnose.localize placed it: the op decides the fix line that fits it.
    where: CutSite | None = None

    @property
    def diagnosis(self) -> str | None:
        """The plain-words explanation: :attr:`finding`, then the words of :attr:`reasons` (made by the
        presenting side, which the package registers when it is imported; the data model imports none)."""
        if not self.reasons or "diagnosis" not in _PRESENTERS:
            return self.finding
        return presenter("diagnosis")(self)

    @diagnosis.setter
    def diagnosis(self, words: str | None) -> None:
        """Words a later kind of evidence made replace the explanation, codes included."""
        self.finding, self.reasons = words, []

    @property
    def optimizer_reason(self) -> str | None:
        """Why the optimizer verdict is what it is, in words (None when there is nothing to say): made from
        :attr:`optimizer_reasons` and their facts by the presenting side, as :attr:`diagnosis` is."""
        if not self.optimizer_reasons or "optimizer_reason" not in _PRESENTERS:
            return self.optimizer_words
        return presenter("optimizer_reason")(self)

    @optimizer_reason.setter
    def optimizer_reason(self, words: str | None) -> None:
        """Words replace the codes."""
        self.optimizer_words, self.optimizer_reasons = words, []

    @property
    def problem(self) -> bool:
        """Counts against the exit code: dry, zero, broken or not optimized, and neither frozen nor allowed."""
        if self.static == FROZEN or self.allowed:
            return False
        if self.optimizer == OptimizerVerdict.NOT_OPTIMIZED:
            return True
        if self.dynamic in (INTERMITTENT, UNCONFIRMED):  # learns on some steps; not verified either way
            return False
        return self.static in FAILING_STATIC or self.dynamic in FAILING_DYNAMIC


@dataclass
class TraceInfo:
    """How the graph was captured."""

    method: str
    nodes: int
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    """The answer to "which parameters will never learn, and which line cut them off?"."""

    target: str
    trace: TraceInfo
    parameters: list[ParameterReport]
    backward: bool = True  # a real backward ran
    device: str | None = None
    notes: list[str] = field(default_factory=list)
    graph: "nx.DiGraph | None" = field(default=None, repr=False, compare=False)
    # Gradient norm that flowed out of each module call in the real backward, by qualified name,
    # one entry per call in call order (call_module nodes of the same target, in graph order).
    module_grad_norms: dict[str, list[float | None]] = field(default_factory=dict, repr=False, compare=False)
    # The same norms matched to the graph nodes that end each call (fxflow.reconcile.norms): what edge widths show.
    node_grad_norms: dict[str, float] = field(default_factory=dict, repr=False, compare=False)
    timings: dict[str, float] = field(default_factory=dict, repr=False, compare=False)  # seconds per phase
    module_classes: dict[str, str] = field(default_factory=dict, repr=False, compare=False)  # qualname -> class
    # Nodes the analysis decided without running them on twins, by how ("name rules", "stand-ins"):
    # kind -> {"nodes": count, "parameters": the parameters upstream of them}.
    uncertain: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Where the real loss.backward() raises (an op with no derivative that the gradient reaches):
    # training stops there, whatever the parameters' verdicts. fxflow's own backward stopped there.
    backward_raises: list[CutSite] = field(default_factory=list)
    # Where a NaN or an inf was born: the first ops that made one from finite values (fxflow.diagnose.nonfinite).
    nonfinite: list[NonfiniteSite] = field(default_factory=list)
    # What the backward differentiated: the model's own loss output, the user's loss function, or a
    # random projection of every output (None when no backward ran).
    loss: str | None = None
    # The user asked for the static analysis alone (--no-backward): no backward was meant to run.
    static_only: bool = False
    steps: int = 1  # forward/backward steps the dynamic verdicts come from (check --steps, watch(steps=N))
    # Watched training loops (watch(steps=N), the callbacks): per layer, per step, |grad| and updates;
    # and the layers whose gradient vanishes or explodes next to the rest (fxflow.dynamic.health).
    gradient_history: dict[str, list[LayerStep]] = field(default_factory=dict, repr=False)
    gradient_flags: list[HealthFlag] = field(default_factory=list)
    # With optimizer=: its groups, the tensors it steps that are not the model's, the skipped steps.
    optimizer: OptimizerFindings | None = None

    # -- queries ----------------------------------------------------------------------------
    @property
    def verified(self) -> bool:
        """A real backward ran and reached something trainable: the dynamic verdicts say what training's
        first step would do. False where no parameter requires grad (none at all, or all frozen): no
        backward of the parameters could run, so nothing was verified."""
        return self.backward and any(p.static != FROZEN for p in self.parameters)

    @property
    def everything_frozen(self) -> bool:
        """The model has parameters and none of them requires grad: nothing can learn."""
        registered = [p for p in self.parameters if p.static != UNREGISTERED]
        return bool(registered) and all(p.static == FROZEN for p in registered)

    @property
    def ok(self) -> bool:
        """True only when a real backward of the loss reached every parameter the optimizer gets
        (no parameter is a problem, see :attr:`ParameterReport.problem`), the backward runs
        (:attr:`backward_raises` is empty) and something is trainable. Without a backward it is
        never True, not even when the static analysis alone was asked for (:attr:`static_only`)."""
        return self.verified and self._clean()

    def _clean(self) -> bool:
        """No parameter is a problem, the backward (or the graph) raises nowhere, something trains."""
        return (not self.everything_frozen and not any(p.problem for p in self.parameters) and not self.backward_raises
                and not self.unconfirmed)

    @property
    def unconfirmed(self) -> list[ParameterReport]:
        """Parameters whose exact zero one watched step could neither confirm nor clear."""
        return [p for p in self.parameters if p.dynamic == UNCONFIRMED and not p.allowed]

    @property
    def status(self) -> ReportStatus:
        """``ok``, ``problem`` (something will not learn, or every parameter is frozen), ``nothing to train``
        (the model has no parameter: nothing to verify), ``static only`` (``--no-backward`` was asked
        for and the graph found nothing wrong) or ``not verified`` (no backward ran, none was
        declined, and the graph alone found nothing wrong); ``structure verified`` where ``ok`` comes
        from a backward with no values (the meta device): it sees which parameters a gradient reaches,
        not whether it is zero, NaN or vanishing."""
        if self.ok:
            measured = not any(p.dynamic == PRESENT for p in self.parameters)
            return ReportStatus.OK if measured else ReportStatus.STRUCTURE_VERIFIED
        if not self.parameters and not self.backward_raises:
            return ReportStatus.NOTHING_TO_TRAIN
        if self.everything_frozen:
            return ReportStatus.PROBLEM
        if self.static_only and self._clean():
            return ReportStatus.STATIC_ONLY
        if not (self.verified or self.static_only) and not self.problems and not self.backward_raises:
            return ReportStatus.NOT_VERIFIED
        if self.unconfirmed and not self.problems and not self.backward_raises and not self.everything_frozen:
            return ReportStatus.NOT_VERIFIED
        return ReportStatus.PROBLEM

    @property
    def exit_code(self) -> int:
        """The CLI's exit code for this report: 0 ok (and, as documented, a clean static-only check and a
        model with nothing to train), 1 a problem, 2 not verified."""
        return _EXIT_CODES[self.status]

    @property
    def problems(self) -> list[ParameterReport]:
        return [p for p in self.parameters if p.problem]

    @property
    def cuts(self) -> list[CutSite]:
        """Every distinct node that severs some parameter, in a stable order."""
        seen: dict[str, CutSite] = {}
        for parameter in self.parameters:
            for site in parameter.cut_by:
                seen.setdefault(site.node, site)
        return list(seen.values())

    def parameter(self, name: str) -> ParameterReport:
        for parameter in self.parameters:
            if parameter.name == name:
                return parameter
        raise KeyError(name)

    def counts(self) -> dict[str, int]:
        """Parameters per static verdict."""
        counts = {str(verdict): 0 for verdict in STATIC_VERDICTS}  # unknown, unregistered: when they occur
        for parameter in self.parameters:
            counts[str(parameter.static)] = counts.get(str(parameter.static), 0) + 1
        return counts

    # -- serialisation ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON report (schema in docs/json.md)."""
        return {
            "schema": SCHEMA_VERSION,
            "target": self.target,
            "trace": asdict(self.trace),
            "backward": self.backward,
            "device": self.device,
            "parameters": [_parameter_dict(p) for p in self.parameters],
            "counts": self.counts(),
            "notes": list(self.notes),
            "uncertain": self.uncertain,
            "backward_raises": [asdict(site) for site in self.backward_raises],
            "nonfinite": [asdict(site) for site in self.nonfinite],
            "loss": self.loss,
            "verified": self.verified,
            "static_only": self.static_only,
            "steps": self.steps,
            "gradient_history": {layer: [asdict(r) for r in records] for layer, records in self.gradient_history.items()},
            "gradient_flags": [asdict(flag) for flag in self.gradient_flags],
            "status": self.status,
            "ok": self.ok,
            "optimizer": asdict(self.optimizer) if self.optimizer is not None else None,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Report":
        """The Report a JSON report (:meth:`to_dict`) was written from, less what the JSON leaves out
        (the graph, the per-call norms, the timings); a malformed one is an :class:`FxflowError`.
        Fields a report of an older fxflow lacks take their defaults."""
        try:
            return cls(
                target=data["target"], trace=TraceInfo(**data["trace"]),
                parameters=[_parameter_from_dict(p) for p in data["parameters"]],
                backward=data.get("backward", True), device=data.get("device"), notes=list(data.get("notes", [])),
                uncertain=dict(data.get("uncertain", {})),
                backward_raises=[_site_from_dict(site) for site in data.get("backward_raises", [])],
                nonfinite=[NonfiniteSite(**site) for site in data.get("nonfinite", [])],
                loss=data.get("loss"), static_only=bool(data.get("static_only")), steps=data.get("steps", 1),
                gradient_history={layer: [LayerStep(**record) for record in records]
                                  for layer, records in data.get("gradient_history", {}).items()},
                gradient_flags=[HealthFlag(**flag) for flag in data.get("gradient_flags", [])],
                optimizer=OptimizerFindings.from_dict(data["optimizer"]) if data.get("optimizer") else None)
        except (KeyError, TypeError, AttributeError) as error:
            raise FxflowError(f"not an fxflow JSON report: missing or malformed {error}") from error

    # -- presenters (each lives in its own module; fxflow.presenters registers them) -------------
    def table(self, width: int | None = None) -> str:
        """The text ``fxflow check`` prints: table, one paragraph per cut, summary; ``width`` wraps
        it at that many columns (None: one line per row and paragraph, like piped output)."""
        return presenter("table")(self, width=width)

    def summary(self) -> str:
        """One line: what is dry and why."""
        return presenter("summary")(self)

    def to_dot(self, **options: Any) -> str:
        """The Graphviz DOT source of the flow diagram."""
        return presenter("dot")(self, **options)

    def render(self, path: str, *, format: str | None = None, **options: Any) -> str:
        """Write the diagram to ``path`` (.svg, .png, .pdf or .dot); returns the path."""
        return presenter("file")(self, path, format=format, **options)

    def plot(self, layer: str | None = None) -> Any:
        """The per-layer gradient chart of a watched training loop (matplotlib, ``pip install fxflow[plot]``):
        mean and largest |grad| per layer at the last step, and ``layer`` (default: the first flagged,
        else the last layer) over the steps. Returns the matplotlib Figure."""
        return presenter("plot")(self, layer)

    def _repr_svg_(self) -> str | None:
        try:
            return presenter("svg")(self)
        except Exception:  # no renderer: the notebook falls back to the text repr
            return None

    def _repr_html_(self) -> str | None:
        try:
            return presenter("html")(self)
        except Exception:  # no renderer: the notebook falls back to the SVG or text repr
            return None

    def __str__(self) -> str:
        return self.table()


# The documented views of a Report, served by presenters that live above it: the data model imports
# none of them. fxflow.presenters fills this table when the package is imported.
_PRESENTERS: dict[str, Callable[..., Any]] = {}


def register_presenter(view: str, function: Callable[..., Any]) -> None:
    """Serve ``view`` (``table``, ``summary``, ``dot``, ``file``, ``plot``, ``svg``, ``html``; ``diagnosis``,
    ``optimizer_reason``: a row's words, from its codes) with ``function``."""
    _PRESENTERS[view] = function


def presenter(view: str) -> Callable[..., Any]:
    """The function that serves ``view`` (the package registers them all when it is imported)."""
    return _PRESENTERS[view]


_EXIT_CODES = {ReportStatus.OK: 0, ReportStatus.STATIC_ONLY: 0, ReportStatus.STRUCTURE_VERIFIED: 0,
               ReportStatus.NOTHING_TO_TRAIN: 0, ReportStatus.PROBLEM: 1, ReportStatus.NOT_VERIFIED: 2}


def _parameter_dict(parameter: ParameterReport) -> dict[str, Any]:
    """The JSON of one row: ``diagnosis`` (the words, made from the codes) in the place of ``finding``, and
    ``optimizer_reason`` (the words of ``optimizer_reasons``) before those codes."""
    data: dict[str, Any] = {}
    for key, value in asdict(parameter).items():
        if key == "optimizer_reasons":
            data["optimizer_reason"] = parameter.optimizer_reason
        if key != "optimizer_words":
            data["diagnosis" if key == "finding" else key] = value
    data["diagnosis"] = parameter.diagnosis
    data["shape"] = list(parameter.shape)
    return data


def _finding_of(diagnosis: str | None, reasons: list[str], row: ParameterReport) -> tuple[str | None, list[str]]:
    """The finding a JSON ``diagnosis`` was made from: the words, less the ``reasons``' own words at its
    end (the codes stay); words that do not end so (another fxflow's) are kept whole, without codes."""
    if not reasons or diagnosis is None or "diagnosis" not in _PRESENTERS:
        return diagnosis, reasons
    row.finding, row.reasons = None, reasons
    words = row.diagnosis or ""
    if diagnosis == words:
        return None, reasons
    if diagnosis.endswith(". " + words[:1].upper() + words[1:]):  # the words open a sentence of their own
        return diagnosis[:-len(words) - 2], reasons
    return diagnosis, []


def _parameter_from_dict(data: dict[str, Any]) -> ParameterReport:
    row = ParameterReport(
        name=data["name"], shape=tuple(data["shape"]), static=data["static"], dynamic=data.get("dynamic"),
        grad_norm=data.get("grad_norm"), cut_by=[_site_from_dict(site) for site in data.get("cut_by", [])],
        agree=data.get("agree"), allowed=bool(data.get("allowed")),
        random_ops=list(data.get("random_ops", [])), steps_with_gradient=data.get("steps_with_gradient"),
        missed_steps=list(data.get("missed_steps", [])), learns_from_step=data.get("learns_from_step"),
        held_by=list(data.get("held_by", [])), fed_by=list(data.get("fed_by", [])), optimizer=data.get("optimizer"),
        later_steps=data.get("later_steps"),
        facts=dict(data.get("facts") or {}),
        where=_site_from_dict(data["where"]) if data.get("where") else None)
    row.finding, row.reasons = _finding_of(data.get("diagnosis"), list(data.get("reasons", [])), row)
    row.optimizer_reasons = list(data.get("optimizer_reasons") or [])
    words = data.get("optimizer_reason")
    if row.optimizer_reason != words:  # words that are not these codes' (another fxflow's): kept whole
        row.optimizer_reason = words
    return row


def _site_from_dict(data: dict[str, Any]) -> CutSite:
    return CutSite(**{**data, "frames": tuple(data.get("frames", ()))})
