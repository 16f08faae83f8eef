"""What to change: one line of fix per cause, from the one table every presenter reads.

The text report ends each failing group with ``fix: ...``, the CI findings carry the same line,
the SARIF rules' help is the fix of their cause, and docs/verdicts.md prints :func:`fixes_markdown`
(tests/test_fixes.py keeps it equal). A cause is chosen by what cut the gradient: the op and
the form of the cut site (a ``no_grad`` region, a cast, a comparison, an index op, ...), or, for
a group no site explains, its verdict.
"""
from __future__ import annotations

import fnmatch
import glob
import os
from dataclasses import dataclass
from typing import Iterable, Mapping

from ..verdicts import LABEL_LOSSES, CutSite, DynamicVerdict as Dynamic, StaticVerdict as Static, constant_reason, raises_reason
from .idioms import detach_idiom


@dataclass(frozen=True)
class Fix:
    """One cause and what to do about it."""

    cause: str  # the key: a cut's form, or a verdict no cut site explains
    when: str  # how docs/verdicts.md names the cause (markdown)
    text: str  # the fix, one line, said to the user
    deliberate: bool = True  # whether "for a deliberate freeze, pass --allow" applies
    accept: str = "for a deliberate freeze"  # what passing --allow means for this cause


FIXES: tuple[Fix, ...] = (
    Fix("grad-region", "`no_grad`, `inference_mode` (a region inside forward)",
        "move the call out of `torch.no_grad()` (or end the region before the layers that must learn)"),
    Fix("detach", "`detach`, `detach_`, `data`",
        "remove the detach, or use a straight-through estimator: `x + (f(x) - x).detach()`"),
    Fix("straight-through", "`detach` in `z + (q - z).detach()` (a straight-through estimator already)",
        "this line is already a straight-through estimator: its gradient goes to `{passes}`, never to `{skips}`; "
        "train what makes `{skips}` with a loss of its own (VQ-VAE's codebook loss "
        "`(({skips} - {passes}.detach()) ** 2).mean()`), or update it without gradients (EMA)"),
    Fix("numpy-round-trip", "`detach` that feeds `.numpy()`",
        "this detach is there to feed `.numpy()`: do that step with the torch op on the tensor itself "
        "(`torch.tanh(h)` for `np.tanh(h.detach().numpy())`), then drop the detach and the NumPy round trip"),
    Fix("python-data", "`item`, `tolist`, `numpy` (the tensor left torch)",
        "keep the computation in torch ops: a Python number or NumPy array carries no gradient"),
    Fix("nearest-lookup", "`argmin` (a nearest-entry lookup, as in a VQ codebook)",
        "`argmin` picks the nearest entry by its index, and an index carries no gradient back to the distances: "
        "give the entries a loss of their own (VQ-VAE's codebook loss `((q - z.detach()) ** 2).mean()`), or "
        "weight every entry by `torch.softmax(-distances / temperature, -1)` instead of picking one"),
    Fix("index", "`argmax`, `argsort`, `topk`, ... indices (routing by an index)",
        "`{op}` returns indices, which carry no gradient: for routing, weight the outputs by softmax "
        "probabilities or use `F.gumbel_softmax(logits, hard=True)` instead of selecting by the index"),
    Fix("comparison", "`gt`, `eq`, `lt`, ... (a bool mask)",
        "use a soft threshold such as `torch.sigmoid((x - t) / temperature)`, or a straight-through estimator"),
    Fix("cast", "`to_int64`, `to_bool`, ... (an integer or bool cast)",
        "keep a floating dtype on the gradient path; cast only what serves as an index"),
    Fix("hook", "a forward hook whose result has no history",
        "return the module's output from the hook without detaching it"),
    Fix("pre-hook", "a forward pre-hook that hands the module an input with no history",
        "return the module's new input from the pre-hook with its history: no `detach`, no `@torch.no_grad()` on it"),
    Fix("checkpoint", "a reentrant `checkpoint` whose inputs do not require grad",
        "pass `use_reentrant=False` to the checkpoint (`gradient_checkpointing_kwargs={{\"use_reentrant\": False}}` "
        "in transformers), or make its input require grad (`model.enable_input_require_grads()`)"),
    Fix("function", "a custom `autograd.Function` (`Name.apply`)",
        "return a gradient for this input from the Function's `backward` instead of `None`"),
    Fix("no-derivative", "an op with no derivative (`floor_divide`, `heaviside`, ...)",
        "replace the op by the smooth one it stands for (`x / d` for `x // d`), or detach its input on purpose",
        deliberate=False),
    Fix("zero-derivative", "`round`, `floor`, `sign`, ... (a derivative of exactly zero)",
        "use a straight-through estimator, `x + (x.round() - x).detach()`, or a smooth surrogate"),
    Fix("zero-by-construction", "an op its options, shapes or constants make constant in an input "
        "(`grid_sample(mode=\"nearest\")` in its grid, a softmax over a dimension of size 1, `x ** 0`, `0.0 * x`, "
        "a one-step RNN's `weight_hh`)",
        "this op's derivative is zero for the options, shapes and constants in use: change the one that makes it "
        "so (`mode=\"bilinear\"` for `grid_sample`, the `dim` of a softmax over a dimension of size 1, a factor or "
        "exponent of 0)"),
    Fix("cut", "any other cut", "give these parameters a differentiable path to the loss at this line"),
    Fix(Static.UNUSED, "`unused` (never called, or its result discarded)",
        "call the layer in forward, or delete it (unused trainable parameters also break DDP)"),
    Fix("unregistered-list", "`unregistered`, modules in a plain list or dict (`layers[0].weight`)",
        "for layers kept in a plain list, use `nn.ModuleList` (`nn.ModuleDict` for a dict)", deliberate=False),
    Fix("built-in-forward", "a layer built inside forward (`nn.Linear(...)(x)`)",
        "build the layer once in `__init__` (`self.layer = nn.Linear(...)`) and call `self.layer` in forward",
        deliberate=False),
    Fix(Static.UNREGISTERED, "`unregistered`, a tensor made with `requires_grad=True`",
        "make it an `nn.Parameter` (or `register_buffer` when it should not learn)", deliberate=False),
    Fix("frozen-holder", "`zero` held by a frozen all-zero parameter (a LoRA `B` frozen by mistake)",
        "unfreeze {holders} with `requires_grad_(True)`: an all-zero weight that no optimizer step moves holds "
        "this gradient at exactly 0 for good", deliberate=False),
    Fix(Dynamic.ZERO, "`zero` from the real backward (dead ReLU, all-zero mask, an expert no token reached)",
        "check the activations' sign, the mask and the loss weights at the named op"),
    Fix("rounding-zero", "`zero` up to rounding (a derivative zero in exact arithmetic: a softmax over one key, a "
        "normalization over one feature, a gate renormalised as `p / p`)",
        "its derivative is zero in exact arithmetic, so the loss does not change when it moves, to first order: "
        "find what makes the output independent of it at the named op (a softmax or a normalization over a "
        "dimension of size 1, a value divided by itself), or remove it", accept="to keep it as it is"),
    Fix("rounding-zero-bias", "`zero` up to rounding, biases (a key bias under softmax, a bias in front of a "
        "normalization in training)",
        "its derivative is zero in exact arithmetic, so the loss does not change when it moves, to first order: a "
        "bias the next op cancels does this (a key bias shifts every attention score of a query alike, which "
        "softmax ignores; a normalization subtracts a bias in front of it again); such a bias is redundant, so "
        "build that layer with `bias=False`", accept="to keep it as it is"),
    Fix("ignored-labels", "`zero`, or a NaN loss, at a loss given labels (`cross_entropy`, `nll_loss`)",
        "`{loss}` passes back 0 when no label of the batch counts, and its mean over none is NaN: check the labels "
        "it is given (each equal to `ignore_index`, -100 by default, or of a class whose `weight` is 0); skip such "
        "batches, or make sure each batch has a labelled target", deliberate=False),
    Fix(Dynamic.MISSING, "`missing` from the real backward", "see the cut or the static verdict named above"),
    Fix("unseen-cut", "`reachable / missing`: the graph sees a path the real run did not take",
        "find what stood in for these parameters at run time: a `state_dict()` (detached copies) fed to "
        "`torch.func.functional_call`, a `.data` or `.detach()` inside a custom Function, or a branch the trace did "
        "not take; feed the parameters themselves (`dict(module.named_parameters())`)"),
    Fix(Dynamic.NONFINITE, "`nonfinite` (NaN or inf in the gradient)",
        "guard the op where the NaN is born: clamp its input, add an epsilon, or scale the loss", deliberate=False),
    Fix(Dynamic.VANISHING, "`vanishing` (a warning)",
        "add normalization or residual connections, or use a gentler initialization", deliberate=False),
    Fix("backward-raises", "`loss.backward()` raises at an op",
        "replace the op by one with a derivative, or detach its input on purpose", deliberate=False),
)
_BY_CAUSE = {fix.cause: fix for fix in FIXES}
BUILT_IN_FORWARD = "built-in-forward"
# the causes a cut site can have (site_cause's answers, but the zero derivative's)
CUT_CAUSES = ("grad-region", "detach", "straight-through", "numpy-round-trip", "python-data", "nearest-lookup", "index",
              "comparison", "cast", "hook", "pre-hook", "checkpoint", "function", "no-derivative", "cut")
ZERO_CAUSES = ("zero-derivative", "zero-by-construction")  # site_cause's answers for an exact zero

_COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge", "isclose", "equal", "logical_not", "logical_and", "logical_or"}
_INDEX_OPS = {"argmax", "argmin", "argsort", "topk", "sort", "multinomial", "searchsorted", "bucketize", "nonzero"}


def site_cause(site: CutSite, zero: bool = False) -> str:
    """The cause of a cut (or, with ``zero``, of an exact zero) from its op and form."""
    op = site.op
    if zero:
        return "zero-by-construction" if site.reason == constant_reason(op) else "zero-derivative"
    if site.reason == raises_reason(op):
        return "no-derivative"
    if op in ("no_grad", "inference_mode"):
        return "grad-region"
    if op.endswith(" hook"):
        return "hook"
    if op.endswith(" pre-hook"):
        return "pre-hook"
    if op == "checkpoint":
        return "checkpoint"
    if op.endswith(".apply"):
        return "function"
    if op in ("detach", "detach_", "data"):
        idiom = detach_idiom(site.source) if op == "detach" else None
        return idiom.name if idiom else "detach"
    if op in ("item", "tolist", "numpy") or "plain Python data" in site.reason:
        return "python-data"
    if op.startswith("to_"):
        return "cast"
    if op in _COMPARISONS or "the comparison" in site.reason:
        return "comparison"
    if op == "argmin":
        return "nearest-lookup"
    if op in _INDEX_OPS or "(indices or flags)" in site.reason:
        return "index"
    return "cut"




def data_cause(cause: str, op: str | None) -> str:
    """``cause``, made ``ignored-labels`` when its zero or NaN was made at a loss given labels: the batch's
    labels decide there, not the weights."""
    return "ignored-labels" if cause in (Dynamic.ZERO, Dynamic.NONFINITE) and op in LABEL_LOSSES else cause


def verdict_cause(verdict: str, names: Iterable[str] = (), static: str | None = None) -> str:
    """The cause of a group no cut site explains, from its verdict (and, for unregistered rows,
    the form of their names: ``layers[0].weight`` is a module kept in a plain list; for a
    ``missing`` gradient the graph calls ``reachable``, a cut the graph could not see)."""
    if verdict == Static.UNREGISTERED and any("[" in name for name in names):
        return "unregistered-list"
    if verdict == Dynamic.MISSING and static == Static.REACHABLE:
        return "unseen-cut"
    return verdict if verdict in _BY_CAUSE else Dynamic.MISSING


# What a fix says where it has no line to fill its words from (the docs' table, SARIF's rule help).
_GENERIC_WORDS = {"op": "argmax", "passes": "z", "skips": "q", "holders": "`lora_B`", "loss": "cross_entropy"}


def site_words(site: CutSite) -> dict[str, str]:
    """The words a cut site's fix fills in: its op, and what a straight-through line passes and skips."""
    idiom = detach_idiom(site.source) if site.op == "detach" else None
    return {"op": site.op, **(idiom.words if idiom else {})}


def site_fix(site: CutSite, names: Iterable[str], every: Iterable[str], zero: bool = False, api: bool = False) -> str:
    """The fix line for the parameters ``names`` that a cut site (or, with ``zero``, a zeroing op) dries."""
    return fix_line(site_cause(site, zero), names, every, api=api, words=site_words(site))


def fix_line(cause: str, names: Iterable[str] = (), every: Iterable[str] = (), api: bool = False,
             words: Mapping[str, str] | None = None) -> str:
    """``fix: ...`` for a cause; where dryness may be meant, how to accept ``names`` (and no other of
    ``every``, the model's parameter names): ``--allow 'x.*'`` on the command line, ``allow=["x.*"]``
    with ``api`` (a message of the Python API)."""
    fix = _BY_CAUSE[cause]
    patterns = allow_patterns(list(names), list(every)) if fix.deliberate else []
    if api:
        allow = "`allow=[" + ", ".join(f'"{pattern}"' for pattern in patterns) + "]`" if patterns else ""
    else:
        allow = " ".join(f"--allow '{pattern}'" for pattern in patterns)
    return f"fix: {_filled(fix.text, words)}" + (f"; {fix.accept}, pass {allow}" if allow else "")


def _filled(text: str, words: Mapping[str, str] | None) -> str:
    return text.format_map({**_GENERIC_WORDS, **(words or {})})


def fix_when(cause: str) -> str:
    """How the docs name a cause, in markdown."""
    return _BY_CAUSE[cause].when


def fix_text(cause: str) -> str:
    """The fix alone, as a sentence (SARIF's rule help), in its generic words."""
    text = _filled(_BY_CAUSE[cause].text, None)
    return text[0].upper() + text[1:] + "."


_MAX_PATTERNS = 2  # more --allow flags than this would not fit the line


def allow_patterns(names: list[str], every: list[str]) -> list[str]:
    """The fewest ``--allow`` globs that match ``names`` and no other of ``every``: their modules
    (``module.*``), the names' common ending (``*.key.bias``) or the names themselves; none when that takes
    more than two."""
    if not names:
        return []
    chosen = set(names)
    others = [name for name in every if name not in chosen]

    def exact(prefix: str) -> bool:
        return not any(name.startswith(prefix + ".") for name in others)

    owners = sorted({name.rpartition(".")[0] or name for name in names})
    common = ".".join(os.path.commonprefix([owner.split(".") for owner in owners]))
    if common and common not in chosen and exact(common):
        return [f"{glob.escape(common)}.*"]
    if len(owners) <= _MAX_PATTERNS and all(exact(owner) for owner in owners):
        return [glob.escape(owner) if owner in chosen else f"{glob.escape(owner)}.*" for owner in owners]
    # the same parameter of every layer (each layer's key bias): one glob of the names' common ending
    ending = os.path.commonprefix([name.split(".")[::-1] for name in names])[::-1]
    suffix = f"*.{glob.escape('.'.join(ending))}" if ending else None
    if suffix and len(names) > 1 and {name for name in every if fnmatch.fnmatchcase(name, suffix)} == chosen:
        return [suffix]
    return [glob.escape(name) for name in sorted(names)] if len(names) <= _MAX_PATTERNS else []


def fixes_markdown() -> str:
    """The table docs/verdicts.md shows under "The fix line"."""
    lines = ["| cause | the report's fix line |", "|---|---|"]
    lines += [f"| {fix.when} | {_filled(fix.text, None)} |" for fix in FIXES]
    return "\n".join(lines)
