"""The shape of the package (issue 19): no module imports a private name of another module.

Read from the source with ``ast``, imports inside functions included.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "fxflow"


def _imports(path: Path) -> list[tuple[str, int]]:
    """(name, line) of every name imported from fxflow's own modules in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("fxflow")):
            found.extend((alias.name, node.lineno) for alias in node.names)
    return found


def test_no_module_imports_a_private_name_of_another():
    private = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}"
               for path in sorted(PACKAGE.rglob("*.py")) for name, line in _imports(path)
               if name.startswith("_") and not name.startswith("__")]
    assert private == []


def import_graph() -> "dict[str, set[str]]":
    """Module -> the fxflow modules it imports, at import time or inside a function alike; imports
    under ``if TYPE_CHECKING:`` are for type checkers only and do not count."""
    modules = {_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        checking = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _type_checking(block.test)
                    for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in checking or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(node, name, path.name == "__init__.py"):
                if target in modules and target != name and target != "fxflow":
                    graph[name].add(target)
    return graph


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level:
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    # ``from . import style`` imports the module style, ``from .dot import x`` the module dot; a
    # submodule's parent package is imported first either way, which is no cycle
    modules = {_name(path) for path in PACKAGE.rglob("*.py")}
    submodules = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in modules]
    names = [alias.name for alias in node.names if f"{target}.{alias.name}" not in modules]
    return submodules + ([target] if names else [])


def cycles() -> list[list[str]]:
    import networkx as nx

    graph = nx.DiGraph([(a, b) for a, targets in import_graph().items() for b in targets])
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def test_no_import_cycle_lazy_imports_included():
    assert cycles() == []
