"""THE tables of what is known today about each (model, path) of the zoo.

``KNOWN_DISAGREEMENTS``: (model, path) -> failure class. Each entry makes that zoo case
``xfail(strict=True)``: the suite stays green while the fix is pending, and the case fails as
XPASS the moment it starts agreeing, so the entry is dropped then. Nothing else in the zoo
excuses a disagreement. The text before the first ":" must be one of :data:`FAILURE_CLASSES`;
the rest is the symptom (the verdict fxflow gives against the real gradient, and the op it names).

``UNAVAILABLE`` (:mod:`.availability`, written by ``python scripts/zoo.py --pin``): the
(model, capture path) pairs whose capture fails today, with the failure. The matrix
(tests/zoo_matrix) expects exactly these to fail: a path that stops working fails the suite,
and so does one that starts working until its pin is removed.
"""
from __future__ import annotations

import pytest

from .availability import UNAVAILABLE  # noqa: F401 (re-exported: the one place the zoo's tables are read from)

VIEW_WRITES = "1. in-place writes through views are lost"
TWINS = "2. verdicts depend on the twins"
MULTI_OUTPUT = "3. multi-output leaf modules"
OPAQUE = "4. custom autograd.Functions the twins cannot see through"
FAILURE_CLASSES = (VIEW_WRITES, TWINS, MULTI_OUTPUT, OPAQUE)

_REFORMER = (f"{OPAQUE}: the reversible layers run inside _ReversibleFunction, which takes them as an nn.ModuleList "
             "argument; their parameters are static unused, real grad nonzero")
_SEW_D = f"{OPAQUE}: attention parameters static zero cut by XSoftmax, real grad nonzero"
_ENCODEC = (f"{TWINS}: on meta twins the encoder is static reachable through the quantizer's argmin, "
            "real grad none (real twins agree)")

# The 35 entries this table held for issue 10 (view writes in Longformer/LED, SpecAugment in
# wav2vec2-style encoders, in-place dropout, nn.Transformer on meta twins, MultiheadAttention's
# weights alone) were fixed and are regression tests now.
KNOWN_DISAGREEMENTS: dict[tuple[str, str], str] = {
    ("reformer", "default chain"): _REFORMER,
    ("reformer", "runtime"): _REFORMER,
    ("reformer", "runtime/real twins"): _REFORMER,
    ("sew_d", "default chain"): _SEW_D,

    ("sew_d", "runtime/real twins"): _SEW_D,
    ("encodec", "default chain"): _ENCODEC,
    ("encodec", "runtime"): _ENCODEC,
}


# Models whose default-chain test alone takes 3 to 10 times the median (seconds of one suite run
# on the shared 2-core machine, 3 other suites beside it; the median model took 2 s there, the
# sweep's default-chain CPU seconds in brackets): the suite's 5-minute budget leaves them to the
# matrix, which checks them on the default chain too. Their recipes could shrink them further.
MATRIX_ONLY: dict[str, str] = {
    "d_fine": "37 s (4.7)",
    "minicpm_ocr": "34 s (3.7)",
    "maskformer": "28 s (5.6)",
    "pp_doclayout_v3": "24 s (4.0)",
    "minicpmv4_6": "21 s (4.6)",
    "minicpmv4_7": "17 s (3.7)",
    "kosmos_2.5": "16 s (2.3)",
    "pp_doclayout_v4": "15 s (3.2)",
    "hrm_text": "(14)",
    "deimv2": "14 s (4.5)",
    "rt_detr": "13 s (3.5)",
    "vits": "(7.9)",
    "textnet": "(8.0)",
}


def marks(name: str, path: str) -> list[pytest.MarkDecorator]:
    """The strict xfail of a known (model, path) disagreement, else nothing."""
    reason = KNOWN_DISAGREEMENTS.get((name, path))
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
