"""The zoo's full matrix: every model on every capture path, each path's availability pinned.

    python -m pytest -q -n auto tests/zoo_matrix.py     # not part of the default run (see README)

For each (model, path): fxflow restricted to that capture method, its twin tensors pinned, must
give every parameter a verdict that the real gradient confirms (tests/zoo/truth.py), exactly as
tests/test_zoo.py does for the default chain. Whether the path captures the model at all is
pinned in tests/zoo/availability.py (``python scripts/zoo.py --pin`` writes it): a path that
stops working fails here, and so does one that starts working while still pinned as failing.
The models tests/test_zoo.py leaves to the matrix for time (``known.left_to_matrix``: the slowest
transformers models, and every library model but one per library) are checked on the default
chain here as well, and so are the exit codes of every library model (``known_exits``).
"""
from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from zoo import known  # noqa: E402
from zoo.registry import DEFAULT_CHAIN, PATHS, Path  # noqa: E402
from zoo.known_exits import PENDING, assert_exit_as_pinned  # noqa: E402
from zoo.libraries import LIBRARIES  # noqa: E402
from zoo.run import SPECIMENS, built, check_path, learning  # noqa: E402


def _cases() -> list:
    """Every model on every path, and on the default chain the models the suite leaves to the matrix."""
    return [pytest.param(name, path, id=f"{name}-{path.name}", marks=[*known.marks(name, path.name), *_library(name)])
            for name, specimen in SPECIMENS.items() for path in _paths(name, specimen.family)]


def _library(name: str) -> list:
    """``-m library`` selects the models of the libraries beyond transformers (``-m "not library"`` the rest):
    their availability was pinned on another torch build than CI's, so CI runs them apart (README)."""
    return [pytest.mark.library] if SPECIMENS[name].family in LIBRARIES else []


def _paths(name: str, family: str) -> tuple[Path, ...]:
    if name in PENDING:  # not measured yet: its verdicts on the default chain, nothing pinned
        return (DEFAULT_CHAIN,)
    return (DEFAULT_CHAIN, *PATHS) if known.left_to_matrix(name, family) else PATHS


@pytest.mark.parametrize("name, path", _cases())
def test_every_path_captures_as_pinned_and_agrees(name: str, path: Path) -> None:
    model, inputs, truth = built(name)
    result = check_path(model, inputs, truth, path)
    pinned = known.UNAVAILABLE.get(name, {}).get(path.name)
    if pinned is not None:  # pinned as failing: it must still fail, with the same exception
        assert not result.available, f"{path.name} now captures {name}: drop its pin in tests/zoo/availability.py"
        assert result.why_unavailable.split(":")[0] == pinned, result.why_unavailable
        return
    assert result.available, f"{path.name} no longer captures {name}: {result.why_unavailable}"
    assert not result.error, result.error
    assert [str(d) for d in result.disagreements] == []
    if path is DEFAULT_CHAIN and SPECIMENS[name].family in LIBRARIES and name not in PENDING:  # the exit code, pinned
        assert_exit_as_pinned(name, result, learning(name))


@pytest.mark.parametrize("name", [pytest.param(name, marks=[*_library(name), *known.edge_marks(name)])
                                  for name in SPECIMENS])
def test_recorded_edges_are_the_edges_real_twins_rebuild(name: str) -> None:
    """The check annotates a recorded run from its own results (twins ``recorded``): node by node, the
    same edges as running the graph again on real twins (tests/recorded_flows.py). A model whose
    forward changes a tensor after making it cannot be read back (tests/zoo/writes.py pins which):
    the check uses twins for it, which the paths above check."""
    from recorded_flows import flow_differences
    from zoo.writes import WRITES_IN_FORWARD

    model, inputs, _ = built(name)
    differences = flow_differences(model, inputs, ("real",))
    if name in WRITES_IN_FORWARD:
        assert differences is None, f"{name} no longer changes a tensor in forward: unpin it (python tests/zoo/writes.py)"
        return
    assert differences is not None, f"{name} now changes a tensor in forward: pin it (python tests/zoo/writes.py)"
    assert differences == []
