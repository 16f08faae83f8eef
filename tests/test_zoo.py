"""The zoo: real architectures (Hugging Face from tiny random configs, and torch.nn models) on
every capture path, every parameter's verdicts against a plain forward/backward.

For each (model, path): fxflow restricted to that capture method, its twin tensors pinned, must
give every parameter a static and dynamic verdict that the real gradient confirms (see
tests/zoo/truth.py). A path whose capture fails for the model is *not available* (skipped with
the capture's reason), not a disagreement. Disagreements known today are the xfails of
tests/zoo/known.py, each with its failure class from issue 10.

Models are checked in train() mode, as they are while training: dropout, drop-path and
SpecAugment run. Each model is built once per worker and shared by its paths (fxflow leaves it
as found). ``scripts/zoo.py`` runs the same checks and writes docs/tested-on.md.
"""
from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from zoo import known  # noqa: E402
from zoo.registry import PATH_NAMES, PATHS, Path  # noqa: E402
from zoo.run import SPECIMENS, check_path  # noqa: E402
from zoo.truth import Truth, real_gradients  # noqa: E402

HF_FAMILIES = {"decoder", "decoder (MoE)", "state-space", "encoder", "encoder-decoder", "vision", "speech",
               "multimodal"}


@functools.lru_cache(maxsize=None)
def built(name: str) -> tuple[Any, Any, dict[str, Truth]]:
    """The model, its inputs and the plain backward's truth: once per worker, shared by the paths."""
    model, inputs = SPECIMENS[name].make()
    return model, inputs, real_gradients(model, inputs)


def _cases() -> list:
    return [pytest.param(name, path, id=f"{name}-{path.name}", marks=known.marks(name, path.name))
            for name in SPECIMENS for path in PATHS]


@pytest.mark.parametrize("name, path", _cases())
def test_every_verdict_agrees_with_the_real_backward(name: str, path: Path) -> None:
    model, inputs, truth = built(name)
    result = check_path(model, inputs, truth, path)
    if not result.available:
        pytest.skip(f"{path.name} is not available for {name}: {result.why_unavailable}")
    assert not result.error, result.error
    assert [str(d) for d in result.disagreements] == []


def test_the_zoo_covers_the_bar() -> None:
    """At least 60 Hugging Face architectures over every family, plus the torch.nn models."""
    hf = [s for s in SPECIMENS.values() if s.family != "torch.nn"]
    assert len(hf) >= 60, len(hf)
    assert {s.family for s in hf} >= HF_FAMILIES
    assert {"nn_transformer", "nn_transformer_encoder", "nn_lstm", "nn_gru", "nn_multihead_attention"} <= set(SPECIMENS)


def test_every_known_disagreement_names_a_model_a_path_and_a_class() -> None:
    for (name, path), reason in known.KNOWN_DISAGREEMENTS.items():
        assert name in SPECIMENS and path in PATH_NAMES, (name, path)
        assert reason.split(":")[0] in known.FAILURE_CLASSES, reason



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
