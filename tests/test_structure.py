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


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_a_private_name_of_another():
    private = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}"
               for path in sorted(PACKAGE.rglob("*.py")) for name, line in _imports(path) if _private(name)]
    assert private == []


def _module_aliases(path: Path) -> set[str]:
    """Names ``path`` binds to fxflow modules: ``from . import style``, ``import fxflow.render.dot as dot``."""
    modules = {_name(p) for p in PACKAGE.rglob("*.py")}
    module = _name(path)
    aliases = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            aliases.update(alias.asname for alias in node.names if alias.asname and alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            target = _from(node, module, path.name == "__init__.py")
            aliases.update(alias.asname or alias.name for alias in node.names if f"{target}.{alias.name}" in modules)
    return aliases


def test_no_module_reads_a_private_name_of_another_through_its_module():
    private = []
    for path in sorted(PACKAGE.rglob("*.py")):
        aliases = _module_aliases(path)
        private += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} reads {node.value.id}.{node.attr}"
                    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and _private(node.attr)]
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


def _from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module ``from X import ...`` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    target = _from(node, module, is_package)
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


# -- verdict words live in fxflow.verdicts alone ---------------------------------------------------
def _vocabulary() -> set[str]:
    """Every verdict, edge kind, node state and report status, as the strings they are."""
    from fxflow import verdicts

    enums = (verdicts.StaticVerdict, verdicts.DynamicVerdict, verdicts.EdgeKind, verdicts.NodeState,
             verdicts.ReportStatus)
    return {str(member) for enum in enums for member in enum}


# Attributes whose values come from vocabularies of their own that share a word with the verdicts:
# a capture method ("none": nothing was captured) and a CLI subcommand ("diff").
_OTHER_VOCABULARIES = {"method", "command"}


def _strings(node: ast.AST) -> list[ast.Constant]:
    """The string constants ``node`` is, or holds as a tuple, list or set literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [constant for element in node.elts for constant in _strings(element)]
    return []


def _table(node: ast.expr) -> bool:
    """A module constant (``STYLES``, ``style.NODE_STYLES``): a table, looked up by its keys."""
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name.isupper()


def spelled_words(tree: ast.AST, words: set[str]) -> list[tuple[int, str]]:
    """(line, word) of every verdict word spelled as a string literal where it acts as a verdict:

    * a key of a dict literal most of whose string keys are words: a table by verdict (the
      others are records whose fields happen to be named ``ok``, ``nonfinite`` or ``problem``,
      like the JSON report);
    * an operand of ``==``, ``!=``, ``in``, ``not in`` (or an element of a literal operand), unless
      the other side is an attribute of another vocabulary (:data:`_OTHER_VOCABULARIES`);
    * a key looked up in a module constant (``STYLES["cut"]``, ``NODE_STYLES.get("inert")``);
    * an element of a tuple, list or set literal whose strings, two or more, are all words
      (a list of states: ``("wet", "dry", FAILED)``);
    * a ``case`` pattern.

    Prose never equals a bare word, so messages and docstrings pass.
    """
    found: list[ast.Constant] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = [c for key in node.keys if key is not None for c in _strings(key)]
            if 2 * sum(c.value in words for c in keys) > len(keys):
                found += keys
        elif isinstance(node, ast.Compare) and all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            sides = [node.left, *node.comparators]
            if not any(isinstance(side, ast.Attribute) and side.attr in _OTHER_VOCABULARIES for side in sides):
                found += [c for side in sides for c in _strings(side)]
        elif isinstance(node, ast.Subscript) and _table(node.value):
            found += _strings(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and _table(node.func.value) and node.args:
            found += _strings(node.args[0])
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            strings = _strings(node)
            if len(strings) >= 2 and all(c.value in words for c in strings):
                found += strings
        elif isinstance(node, ast.MatchValue):
            found += _strings(node.value)
    return sorted({(c.lineno, c.value) for c in found if c.value in words})


def test_verdict_words_are_spelled_only_in_verdicts():
    words = _vocabulary()
    spelled = [f"{path.relative_to(PACKAGE.parent)}:{line} spells {word!r}: use the member of fxflow.verdicts"
               for path in sorted(PACKAGE.rglob("*.py")) if path != PACKAGE / "verdicts.py"
               for line, word in spelled_words(ast.parse(path.read_text(encoding="utf-8")), words)]
    assert spelled == []


def test_the_word_rule_finds_tables_and_comparisons_and_passes_prose_and_records():
    source = '''
STYLES = {"cut": "red", "missing": "red", "zero-gradient": "orange"}
STATES = ("wet", "dry", FAILED)
look = NODE_STYLES.get(state, NODE_STYLES["inert"])
if parameter.static == "unused" or state in ("frozen", NodeState.INERT):
    pass
match status:
    case "not verified":
        pass
record = {"schema": 1, "target": t, "nonfinite": [], "ok": True}
if trace.method == "none" or options.command == "diff":
    message = "cut"
    raise ValueError("every parameter is cut off from the output")
'''
    found = spelled_words(ast.parse(source), _vocabulary())
    assert found == [(2, "cut"), (2, "missing"), (3, "dry"), (3, "wet"), (4, "inert"), (5, "frozen"),
                     (5, "unused"), (8, "not verified")]


def test_stages_import_only_the_floor_and_the_stages_before_them():
    """The layering contract in pyproject.toml ([tool.importlinter]): cli and integrations on top,
    then testing, watching and the pipeline, the presenters, each stage in pipeline order, the
    Report, the floor (fxflow.core) and the vocabulary. A backward import breaks it, lazy ones too."""
    import subprocess
    import sys

    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=PACKAGE.parent, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 kept, 0 broken" in result.stdout
