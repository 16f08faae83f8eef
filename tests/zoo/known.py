"""THE table of disagreements known today: (model, path) -> failure class from issue 10.

Each entry makes that zoo case ``xfail(strict=True)``: the suite stays green while the fix is
pending, and the case fails as XPASS the moment it starts agreeing, so the entry is dropped
then. Nothing else in the zoo excuses a disagreement.

The text before the first ":" must be one of :data:`FAILURE_CLASSES`; the rest is the symptom
(the verdict fxflow gives against the real gradient, and the ``cut_by`` op it names).
"""
from __future__ import annotations

import pytest

VIEW_WRITES = "1. in-place writes through views are lost"
TWINS = "2. verdicts depend on the twins"
MULTI_OUTPUT = "3. multi-output leaf modules"
FAILURE_CLASSES = (VIEW_WRITES, TWINS, MULTI_OUTPUT)


# Empty: every (model, path) of the zoo agrees with the real backward. The 35 entries this table
# held (view writes in Longformer/LED, SpecAugment in wav2vec2-style encoders, in-place dropout in
# MobileNet, Funnel, RWKV, LongT5, GroupViT; nn.Transformer on meta twins; MultiheadAttention's
# weights alone) were fixed by issue 10 and are regression tests now.
KNOWN_DISAGREEMENTS: dict[tuple[str, str], str] = {}


def marks(name: str, path: str) -> list[pytest.MarkDecorator]:
    """The strict xfail of a known (model, path) disagreement, else nothing."""
    reason = KNOWN_DISAGREEMENTS.get((name, path))
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
