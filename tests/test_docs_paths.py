"""No path of the machine that generated them in the docs or the gallery (issue 21): sources
read relative to the project, or to the site-packages folder a library is installed in."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# a home or work folder, or an interpreter's installation: what only one machine has
MACHINE_PATH = re.compile(r"(?<![\w.])(?:/(?:home|Users)/[\w.-]+/|/root/|/work/|/opt/[\w.-]+/|/usr/(?:local/)?lib/python"
                          r"|[A-Za-z]:\\\\Users\\\\|/[\w./-]*(?:site|dist)-packages/)")


def test_no_absolute_machine_path_in_docs():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*")), *sorted((ROOT / "examples").rglob("*.md"))]
    found = []
    for path in files:
        if path.is_file() and path.suffix in (".md", ".svg", ".html", ".dot", ".txt", ".json"):
            for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                match = MACHINE_PATH.search(line)
                if match:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {match.group()}")
    assert found == []


def test_a_library_s_line_reads_relative_to_site_packages(monkeypatch):
    """Also when the working directory holds the virtual environment (a project's own ``.venv``):
    a library's line reads ``transformers/...``, not ``.venv/lib/python3.11/site-packages/...``."""
    import transformers

    from fxflow.core.source import display_path

    assert display_path(transformers.__file__) == "transformers/__init__.py"
    monkeypatch.chdir(Path(transformers.__file__).parents[4])  # the folder above lib/python3.X/site-packages
    assert display_path(transformers.__file__) == "transformers/__init__.py"
