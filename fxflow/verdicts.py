"""The shared vocabulary: verdicts, edge kinds, node states, cut sites and the keys every stage
reads. A leaf module: it imports nothing of fxflow, so every other module can import it.

The enums are ``StrEnum``: a member *is* its string (``StaticVerdict.CUT == "cut"``), so the JSON
report and the DOT classes read exactly as before.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class StaticVerdict(StrEnum):
    """What the graph walk says of a parameter, in precedence order."""

    FROZEN = "frozen"  # requires_grad is False
    UNUSED = "unused"  # forward never reads it, or nothing it feeds reaches an output
    CUT = "cut"  # every path to the output crosses an edge that carries no gradient
    ZERO = "zero"  # every path crosses an op whose derivative is exactly zero
    REACHABLE = "reachable"  # a differentiable path reaches the output
    UNKNOWN = "unknown"  # nothing was captured, or an op that never ran decides it
    # Not a parameter at all: a tensor that requires grad and feeds the loss, but is held in a plain
    # attribute or list, so model.parameters() never hands it to the optimizer.
    UNREGISTERED = "unregistered"


class DynamicVerdict(StrEnum):
    """What the real backward left in a parameter's ``.grad``."""

    MISSING = "missing"  # .grad is None
    ZERO = "zero"  # every entry is exactly zero
    VANISHING = "vanishing"  # tiny next to the largest gradient in the model
    NONFINITE = "nonfinite"  # NaN or inf
    OK = "ok"
    PRESENT = "present"  # a meta/fake backward saw a gradient but cannot measure it
    INTERMITTENT = "intermittent"  # over many steps: a gradient on some, none on others (fxflow.dynamic.steps)
    # Exactly zero on the first step only because a zero-initialized weight holds it (LoRA's B, adaLN-Zero's
    # gate, a zero convolution): the first optimizer steps move that weight and it learns from a later step
    # (fxflow.dynamic.lookahead). Not a problem.
    HELD = "held"
    # Exactly zero on the one step watched, where no look-ahead could run: a zero-initialized weight may
    # hold it (then it learns from step 2) or it may never learn. Neither ok nor a problem: not verified.
    UNCONFIRMED = "unconfirmed"


class ZeroReason(StrEnum):
    """Why an exact zero got its verdict: what was observed, as a code the presenting side puts in words
    (fxflow.reconcile.zeros)."""

    HELD = "held"  # a later step (look-ahead or real) gave it a gradient: held by a zero-initialized weight
    STAYS_ZERO = "stays-zero"  # the later steps moved every weight with a gradient and it stayed zero
    NO_STEP_MOVES = "no-step-moves"  # no weight had a gradient to move: every later step is the first again
    STILL_REVIVING = "still-reviving"  # the look-ahead stopped at its limit while still reviving others
    ONE_STEP = "one-step"  # one watched step: nothing later was seen
    ROUNDING = "rounding"  # round-off, zero in exact arithmetic (fxflow.dynamic.rounding)
    # it stays zero, and the weights that feed it get exactly 0 too: a dead unit no step revives
    DEAD_UNIT = "dead-unit"
    # it stays zero at a dead unit whose input trainable weights compute: they got a gradient and moved,
    # and it stayed dead over the steps seen; larger steps may move its input across the threshold
    DEAD_INPUT_MOVES = "dead-input-moves"
    # made at a loss given labels, by this batch's labels (none counts): the data, not the weights
    LABELS = "labels"


class StaticReason(StrEnum):
    """Why the graph walk gave its verdict, where the verdict alone does not say (fxflow.static.analyze): a
    code the presenting side puts in words; its facts are the row's ``facts``."""

    REQUIRES_GRAD_FALSE = "requires-grad-false"  # frozen
    NEVER_CALLED = "never-called"  # unused: its module (``module``) is never called in forward
    NEVER_READ = "never-read"  # unused: forward never reads it (a parameter of the model itself)
    REACHES_NOTHING = "reaches-nothing"  # unused: read, but nothing it feeds reaches ``goal`` (``loss``, ``output``)
    # unknown: its gradient passes through ``opaque`` (at node ``opaque_node``), whose backward never ran
    OPAQUE_NEVER_RAN = "opaque-never-ran"


class PairReason(StrEnum):
    """What the two verdicts of one parameter say side by side (fxflow.reconcile.judge): why they disagree,
    or, where they agree on a failing gradient whose place was not located, its usual causes. A code the
    presenting side puts in words."""

    OPAQUE_PATH = "opaque-path"  # reachable, no gradient, and its paths cross an op whose backward never ran
    NO_GRADIENT_AT_RUNTIME = "no-gradient-at-runtime"  # reachable in the graph, no gradient at runtime
    GRADIENT_OFF_TRACE = "gradient-off-trace"  # cut or unused in the graph, yet a gradient arrived
    ZERO_YET_GRADIENT = "zero-yet-gradient"  # every traced path crosses a zero derivative, yet a gradient arrived
    FROZEN_YET_GRADIENT = "frozen-yet-gradient"  # requires_grad is False, yet .grad was written
    MISMATCH = "mismatch"  # another unexpected pair
    ZERO_NOT_LOCATED = "zero-not-located"  # exactly zero, where it died not located
    NONFINITE = "nonfinite"  # NaN or inf, where it was born not found
    VANISHING_NOT_LOCATED = "vanishing-not-located"  # vanishing, where it shrank not located
    NONFINITE_BORN = "nonfinite-born"  # NaN or inf, first made at the op the row's facts name (``born``)


class DrawReason(StrEnum):
    """What the model's own random draws showed of a failing parameter (a code put in words by the
    presenting side; the facts are the row's ``random_ops`` and ``facts``)."""

    RANDOMNESS = "randomness"  # its gradient is computed from what a random op drew: another seed may differ
    OTHER_DRAW = "other-draw"  # dry on this draw, a gradient on another (``facts``: ``seed``, ``first``)
    # dry on every draw made, while a random choice of n outcomes never picked some of them within the
    # draws made (``facts["choices"]``): it may be reached by those outcomes; not verified
    CHOICE_UNPICKED = "choice-unpicked"


class StepsReason(StrEnum):
    """What many steps showed of a parameter (fxflow.dynamic.steps), put in words by the presenting side."""

    SOME_STEPS = "some-steps"  # a non-zero gradient on some steps (``steps_with_gradient``, ``missed_steps``)
    SOME_STEPS_NONE = "some-steps-none"  # the same, with no gradient at all (None) on some: DDP must be told
    LATER_CALL = "later-call"  # none on the judged calls, one on a later call (``facts``: ``calls``, ``later_call``)


# Losses given class labels: a batch whose labels all go uncounted (ignore_index, a zero class weight)
# makes their gradient exactly 0, and their mean a NaN: the data decides there, not the weights.
LABEL_LOSSES = frozenset({"cross_entropy", "nll_loss"})


class UnregisteredReason(StrEnum):
    """Where a tensor that learns but is no parameter is kept (fxflow.dynamic.unregistered): a code the
    presenting side puts in words, with the way to register it."""

    IN_CONTAINER = "in-container"  # a module's parameter, the module kept in a plain Python list or dict
    PLAIN_TENSOR = "plain-tensor"  # a bare tensor attribute made with requires_grad=True


# Which dynamic verdicts each static verdict predicts. UNKNOWN predicts nothing: no agreement is claimed.
EXPECTED: dict[StaticVerdict, set[DynamicVerdict]] = {
    StaticVerdict.REACHABLE: {DynamicVerdict.OK, DynamicVerdict.VANISHING, DynamicVerdict.ZERO, DynamicVerdict.NONFINITE,
                              DynamicVerdict.PRESENT, DynamicVerdict.HELD, DynamicVerdict.UNCONFIRMED,
                              DynamicVerdict.INTERMITTENT},
    # one step's graph cuts it and other steps (or draws) reach it: intermittent agrees with either; so
    # does unconfirmed, where a random choice's unpicked outcomes were not seen (the trace is one draw's)
    StaticVerdict.ZERO: {DynamicVerdict.ZERO, DynamicVerdict.PRESENT, DynamicVerdict.UNCONFIRMED},
    StaticVerdict.CUT: {DynamicVerdict.MISSING, DynamicVerdict.INTERMITTENT, DynamicVerdict.UNCONFIRMED},
    StaticVerdict.FROZEN: {DynamicVerdict.MISSING},
    StaticVerdict.UNUSED: {DynamicVerdict.MISSING, DynamicVerdict.INTERMITTENT, DynamicVerdict.UNCONFIRMED},
}


def agreement(static: StaticVerdict, dynamic: DynamicVerdict | None) -> bool | None:
    """Whether a dynamic verdict is one the static verdict predicts (None: nothing to compare)."""
    if dynamic is None or static == StaticVerdict.UNKNOWN:
        return None
    return dynamic in EXPECTED.get(static, set())


class OptimizerVerdict(StrEnum):
    """Whether an optimizer group will update a trainable parameter (fxflow.reconcile.optimizer)."""

    UPDATED = "updated"  # a group holds it with an lr above 0, now or once the scheduler raises it
    NOT_OPTIMIZED = "not optimized"  # no group holds it, or its lr stays 0, or no watched step moved it: fails
    UNKNOWN = "unknown"  # its lr is 0 now and no scheduler tells whether it rises


class OptimizerReason(StrEnum):
    """What was observed of a parameter's optimizer groups and steps (fxflow.reconcile.optimizer), as a code
    the presenting side puts in words; its facts are the row's ``facts["optimizer"]``."""

    IN_NO_GROUP = "in-no-group"  # no group holds it (``groups``, ``module``, ``module_class``, ``replaced``)
    LR_RISES = "lr-rises"  # lr 0 now; the scheduler raises it (``group``, ``rises_at``)
    LR_ZERO_NO_SCHEDULER = "lr-zero-no-scheduler"  # lr 0 now and no scheduler given (``at_zero``)
    LR_STAYS_ZERO = "lr-stays-zero"  # the scheduler keeps its lr at 0 (``at_zero``, ``looked_ahead``)
    ZERO_LR_STEPS = "zero-lr-steps"  # watched steps ran with its group's lr 0 on each (``steps``)
    UNCHANGED = "unchanged"  # watched steps ran with a gradient on it and left it exactly unchanged (``steps``)
    STEPS_SKIPPED = "steps-skipped"  # a GradScaler skipped every watched step (``skipped``)


# The verdicts that fail the check (unless the parameter is frozen, allowed or intermittent).
FAILING_STATIC = frozenset({StaticVerdict.UNUSED, StaticVerdict.CUT, StaticVerdict.ZERO, StaticVerdict.UNREGISTERED})
FAILING_DYNAMIC = frozenset({DynamicVerdict.MISSING, DynamicVerdict.ZERO, DynamicVerdict.NONFINITE})


class EdgeKind(StrEnum):
    """How gradient crosses one edge of the graph."""

    DIFF = "diff"  # it passes
    ZERO = "zero"  # it passes as an exact zero
    NONE = "none"  # it stops


class NodeState(StrEnum):
    """How the diagram colours a node or edge (set by the analysis, read by the renderer), in the
    order the legend lists them."""

    WET = "wet"
    DRY = "dry"
    CUT = "cut"
    ZERO = "zero"
    # The two the renderer alone gives, from the real run: a parameter the graph reaches whose real
    # backward failed (missing, zero or nonfinite gradient), and the op where a NaN or inf was born.
    FAILED = "failed"
    NONFINITE = "nonfinite"
    FROZEN = "frozen"
    UNUSED = "unused"
    INERT = "inert"


class ReportStatus(StrEnum):
    """The one word a whole report comes to (``Report.status``, the JSON's ``status``)."""

    OK = "ok"  # a real backward reached every trainable parameter
    PROBLEM = "problem"  # something will not learn, or the backward raises
    NOT_VERIFIED = "not verified"  # no backward ran and the graph alone found nothing wrong
    STATIC_ONLY = "static only"  # --no-backward was asked for and the graph alone found nothing wrong
    # a backward with no values (--device meta) reached every trainable parameter: the structure is
    # sound; exact zeros, NaN and vanishing gradients could not be seen
    STRUCTURE_VERIFIED = "structure verified"
    # the model has no parameter at all: there is no gradient to verify, and nothing that would not learn
    NOTHING_TO_TRAIN = "nothing to train"


# A parameter's state in the diagram follows from its static verdict.
PARAMETER_STATE: dict[StaticVerdict, NodeState] = {
    StaticVerdict.REACHABLE: NodeState.WET,
    StaticVerdict.CUT: NodeState.DRY,
    StaticVerdict.ZERO: NodeState.ZERO,
    StaticVerdict.FROZEN: NodeState.FROZEN,
    StaticVerdict.UNUSED: NodeState.UNUSED,
    StaticVerdict.UNKNOWN: NodeState.INERT,
    StaticVerdict.UNREGISTERED: NodeState.DRY,
}

PARAM_PREFIX = "param:"  # flow-graph node of a parameter: PARAM_PREFIX + qualified name
FLOW_KEY = "fxflow"  # node.meta[FLOW_KEY]: the node's NodeFlow annotation
GRAD_MODE_KEY = "fxflow_grad_mode"  # node.meta[GRAD_MODE_KEY]: the GradRegion it was created in
OPAQUE_KEY = "fxflow_opaque"  # node.meta[OPAQUE_KEY]: why only a real backward can decide the node
BACKWARD_RAN_KEY = "fxflow_backward_ran"  # a custom Function whose own backward ran during the analysis
NO_DERIVATIVE_KEY = "fxflow_no_derivative"  # inputs reached only through an op with no derivative
# inputs (and "param:<name>"s) whose derivative the node's backward, run on random stand-ins, gave as exact zeros
ZERO_BY_CONSTRUCTION_KEY = "fxflow_zero_by_construction"
LOSS_OUTPUT_KEY = "fxflow_loss_output"  # graph_module.meta: the walk starts at the model's own loss alone


@dataclass(frozen=True)
class CutSite:
    """A node that severs gradient flow."""

    node: str  # fx node name
    op: str  # short op name: detach, data, gt, argmax, to_int64, no_grad, round, ...
    source: str | None  # FILE:LINE of the user's line that created the node
    reason: str  # one sentence in plain words
    # The user's frames from forward down to that line, when it lies in a helper forward calls:
    # ("forward @ model.py:40", "squash @ utils.py:12"); empty when forward holds the line itself.
    frames: tuple[str, ...] = ()


def raises_reason(op: str) -> str:
    """Why the real backward raises at an op with no derivative (the static and the dynamic side say it alike)."""
    return f"{op} has no derivative, so the real loss.backward() raises NotImplementedError here"


def constant_reason(op: str) -> str:
    """Why the gradient through an op that its options and shapes make constant in an input is zero
    (the static side says it, the fix line is chosen by it)."""
    return f"{op}'s result does not change when this input changes (for the shapes and options used here, " \
           "its derivative is exactly zero whatever the values), so the gradient arrives as 0"


@dataclass(frozen=True)
class GradRegion:
    """A stretch of forward that autograd does not record."""

    kind: str  # "no_grad" or "inference_mode"
    source: str | None  # file:line of the ``with`` statement (or decorator call)
