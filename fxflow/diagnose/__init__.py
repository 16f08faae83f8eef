"""Diagnose: where a live gradient died, faded or turned non-finite.

A stage after the dynamic verdicts (:func:`fxflow.dynamic.gradients.dynamic_verdicts`): it needs to know
which gradients are exactly zero, vanishing or not finite. :mod:`fxflow.diagnose.localize` names where a
zero or vanishing gradient died or shrank, from the trace the real run (:class:`fxflow.dynamic.probe.ModelRun`)
kept of its own forward and backward; :mod:`fxflow.diagnose.nonfinite`, where a NaN or inf was born, from
the forward run once more with the same random draws (looking at every value costs too much to do on every
run). Both are extras: one that fails leaves a note, never a failed check.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import first_line
from ..verdicts import DynamicVerdict

if TYPE_CHECKING:  # pragma: no cover
    from ..dynamic.probe import ModelRun, ProbeResult


def diagnose(run: "ModelRun", result: "ProbeResult", verdicts: dict[str, DynamicVerdict]) -> None:
    """Fill ``result.explanations`` (zero and vanishing parameters, and missing ones that forward read
    only through detached copies) and ``result.nonfinite``."""
    trace, run.trace = run.trace, None  # the autograd graph it holds is not needed after this
    if not result.measurable:
        return
    named = dict(run.model.named_parameters())
    zero = {name: named[name] for name, verdict in verdicts.items() if verdict == DynamicVerdict.ZERO}
    vanishing = {name: named[name] for name, verdict in verdicts.items() if verdict == DynamicVerdict.VANISHING}
    if (zero or vanishing) and trace is not None:
        from .localize import localize

        gradient_norms = {name: info.norm or 0.0 for name, info in result.grads.items()}
        try:
            result.explanations = localize(run.model, trace, gradient_norms, zero, vanishing, result.held_by)
        except Exception as error:
            result.notes.append(f"could not localize the zero or vanishing gradients: {type(error).__name__}: "
                                f"{first_line(error)}")
    missing = {name for name, verdict in verdicts.items() if verdict == DynamicVerdict.MISSING}
    recorded = getattr(run.recorded, "graph_module", None)
    if missing and recorded is not None:  # read only through a detached copy: where the copy was made
        from .stand_ins import stand_in_sources

        try:
            result.explanations.update(stand_in_sources(recorded, missing))
        except Exception as error:
            result.notes.append(f"could not find what stood in for the parameters without a gradient: "
                                f"{type(error).__name__}: {first_line(error)}")
    if not result.loss_finite or DynamicVerdict.NONFINITE in verdicts.values():
        from .nonfinite import nonfinite_origins

        try:
            result.nonfinite = nonfinite_origins(run.model, run.replay, run.loss_of)
        except Exception as error:
            result.notes.append(f"could not find where the non-finite values were born: {type(error).__name__}: "
                                f"{first_line(error)}")
