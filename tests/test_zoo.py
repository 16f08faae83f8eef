"""The zoo: real architectures (Hugging Face from tiny random configs, and torch.nn models),
every parameter's verdicts against a plain forward/backward.

Each model is checked once here, the way a user checks it: ``fxflow.check(model, inputs)`` with
no options, on whichever capture the chain picks (the few models of ``known.MATRIX_ONLY``, whose
check alone takes many seconds, run in the matrix). It must be captured (no path failing through to
nothing) and every parameter must get a static and dynamic verdict that the real gradient
confirms (see tests/zoo/truth.py). Disagreements known today are the xfails of
tests/zoo/known.py. Every capture path for every model, with its availability pinned, is the
matrix: ``python -m pytest -q -n auto tests/zoo_matrix.py`` (run by .ci/run).

Models are checked in train() mode, as they are while training: dropout, drop-path and
SpecAugment run. ``scripts/zoo.py`` runs the same checks and writes docs/tested-on.md.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from zoo import known  # noqa: E402
from zoo.libraries import not_built_here  # noqa: E402
from zoo.registry import DEFAULT_CHAIN, PATH_NAMES, PATHS  # noqa: E402
from zoo.run import SPECIMENS, built, check_path, default_chain_agrees  # noqa: E402
from zoo.truth import Truth, real_gradients  # noqa: E402
from zoo.unbuildable import UNBUILDABLE  # noqa: E402

HF_FAMILIES = {"decoder", "decoder (MoE)", "state-space", "encoder", "encoder-decoder", "vision", "speech",
               "multimodal", "time series"}


@pytest.mark.parametrize("name", [pytest.param(name, marks=known.marks(name, DEFAULT_CHAIN.name))
                                  for name, specimen in SPECIMENS.items()
                                  if not known.left_to_matrix(name, specimen.family)])
def test_every_verdict_agrees_with_the_real_backward(name: str) -> None:
    default_chain_agrees(name)


def test_the_zoo_covers_the_bar() -> None:
    """About 300 architectures: the Hugging Face ones over every family, plus the torch.nn models."""
    hf = [s for s in SPECIMENS.values() if s.family in HF_FAMILIES]
    assert len(hf) >= 290, len(hf)
    assert {s.family for s in hf} >= HF_FAMILIES
    assert {"nn_transformer", "nn_transformer_encoder", "nn_lstm", "nn_gru", "nn_multihead_attention"} <= set(SPECIMENS)


def test_no_model_type_is_both_built_and_listed_as_unbuildable() -> None:
    assert not {name.replace("-", "_") for name in UNBUILDABLE} & set(SPECIMENS)


def test_every_known_disagreement_names_a_model_a_path_and_a_class() -> None:
    for (name, path), reason in known.KNOWN_DISAGREEMENTS.items():
        assert name in SPECIMENS and path in (*PATH_NAMES, DEFAULT_CHAIN.name), (name, path)
        assert reason.split(":")[0] in known.FAILURE_CLASSES, reason


def test_the_models_left_to_the_matrix_are_few_and_in_the_zoo() -> None:
    assert set(known.MATRIX_ONLY) <= set(SPECIMENS) and len(known.MATRIX_ONLY) <= 25


def test_every_pinned_unavailable_path_names_a_model_and_a_path() -> None:
    for name, paths in known.UNAVAILABLE.items():
        assert (name in SPECIMENS or not_built_here(name)) and set(paths) <= set(PATH_NAMES), (name, paths)


def test_experts_the_batch_never_routes_to_need_no_exception() -> None:
    """Data-dependent routing: on a one-token batch Switch Transformers' top-1 router skips three
    of its four experts, whose real gradient is None. The run-time capture sees the routing of
    this batch, so those experts are dry there too and every verdict still agrees: the zoo needs
    no exception for routing (the fused-expert MoEs, Mixtral and the like, keep one tensor for all
    experts, which a skipped expert leaves with zeros in it, not None)."""
    model, _, _ = built("switch_transformers")
    inputs = {"input_ids": torch.tensor([[5]]), "decoder_input_ids": torch.tensor([[7]])}
    truth = real_gradients(model, inputs)
    skipped = {name for name, real in truth.items() if ".experts." in name and real is Truth.NONE}
    assert len(skipped) == 2 * 2 * 3, sorted(skipped)  # wi and wo of 3 experts in 2 sparse layers
    checked = 0
    for path in PATHS:
        result = check_path(model, inputs, truth, path)
        assert not result.error and [str(d) for d in result.disagreements] == [], path.name
        checked += result.available
    assert checked >= 1
