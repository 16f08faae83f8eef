"""The package's shape: the pipeline's stages import each other in one direction only.

Imports are read from the source (module level and inside functions alike, since a lazy import
is still a dependency; ``if TYPE_CHECKING:`` blocks never run and do not count). Importing ``fxflow.a.b`` imports the package ``fxflow.a`` first, so that
counts as an edge too. The only edges allowed to point back up are the Report's convenience
delegations to its presenters (``Report.table()``, ``Report.render()``, ``_repr_svg_``...).
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parent.parent / "fxflow"

# Report -> presenters, for notebook users: the one sanctioned way back up.
DELEGATIONS = {("fxflow.report", "fxflow.present"), ("fxflow.report", "fxflow.render")}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    for block in ast.walk(tree):  # imports for type checkers only never run
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test):
            block.body = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            while target and target != "fxflow":  # importing a.b.c runs a/__init__ and a/b/__init__ first
                found.add(target)
                target = target.rpartition(".")[0]
    # A module's own packages were imported before it ran: those are no dependency of its own.
    return {t for t in found if t != name and not name.startswith(t + ".")}


def import_graph() -> nx.DiGraph:
    files = {(_module_name(path)): path for path in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, path in files.items():
        for target in _imports(path, name, set(files)):
            graph.add_edge(name, target)
    return graph


def _allowed(source: str, target: str) -> bool:
    return any(source == a and (target == b or target.startswith(b + ".")) for a, b in DELEGATIONS)


def test_no_import_cycle_but_the_reports_delegations():
    graph = import_graph()
    assert graph.number_of_nodes() > 20
    pruned = nx.subgraph_view(graph, filter_edge=lambda a, b: not _allowed(a, b))
    cycles = [sorted(c) for c in nx.strongly_connected_components(pruned) if len(c) > 1]
    assert cycles == []


def test_the_vocabulary_is_a_leaf():
    assert [t for t in import_graph().successors("fxflow.verdicts")] == []


def test_no_verdict_is_spelled_as_a_string_outside_the_vocabulary():
    """Verdict words appear as code only in fxflow/verdicts.py; elsewhere they come from its enums."""
    words = {"frozen", "unused", "cut", "reachable", "unknown", "missing", "vanishing", "nonfinite"}
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "verdicts.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for value in [node.left, *node.comparators]:
                    if isinstance(value, ast.Constant) and value.value in words:
                        offenders.append(f"{path.relative_to(PACKAGE)}:{value.lineno} {value.value!r}")
    assert offenders == []


STAGES = ["fxflow.prepare", "fxflow.capture", "fxflow.dynamic.probe", "fxflow.static.annotate", "fxflow.static.analyze",
          "fxflow.reconcile", "fxflow.pipeline"]


def _stage(module: str) -> int | None:
    for index, stage in enumerate(STAGES):
        if module == stage or module.startswith(stage + "."):
            return index
    return None


def test_no_stage_imports_a_later_one():
    """The walk through check enters each stage once and never climbs back up."""
    climbs = []
    for source, target in import_graph().edges():
        here, there = _stage(source), _stage(target)
        if here is not None and there is not None and there > here:
            climbs.append(f"{source} -> {target}")
    assert climbs == []
