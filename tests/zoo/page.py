"""docs/tested-on.md's section on the libraries beyond transformers, written by
``python scripts/zoo.py --libraries --pin``: per library, each model's class balance (how many
parameters the plain backward left None, exactly zero, nonzero), the paths that agree, the exit
code of ``fxflow check`` on the default chain, and for an exit 1 whether the failing parameters
start learning within a few real optimizer steps (a weight that starts at zero) or stay dry."""
from __future__ import annotations

from collections import Counter
from typing import Any

from .truth import STEPS, Truth

START, END = "<!-- libraries: written by scripts/zoo.py --libraries -->", "<!-- /libraries -->"
DEFAULT = "default chain"


TORCHVISION = """\
**torchvision's compiled ops.** A torchvision wheel is built against one torch; with another (the
CUDA-built wheel a package index serves, on CPU torch) its C++ extension does not load and
`import torchvision`, and so `import timm`, fails where it registers `torchvision::nms`. The tests
define that one op in plain Python before the import (tests/zoo/vision_ops.py; no gradient flows
through NMS, which returns indices), never in fxflow. For a user this means: fxflow itself needs
no torchvision, and checks classification, segmentation and video models the same either way;
detection models call torchvision's compiled ops (`nms` behind `_assert_has_ops`, `roi_align`)
and need a torchvision built for the installed torch, so without one the zoo leaves them out
(`NOT_BUILT_HERE` in tests/zoo/lib_torchvision.py says so)."""


def replace_section(page: str, section: str) -> str:
    """``page`` with the text between the markers replaced by ``section`` (appended when absent)."""
    block = f"{START}\n{section}\n{END}"
    if START in page and END in page:
        return page[:page.index(START)] + block + page[page.index(END) + len(END):]
    return page.rstrip("\n") + "\n\n" + block + "\n"


def exit_kind(result: Any) -> str:
    """``ok``; ``steps``: every failing parameter learns within the optimizer steps; ``dry``: one does not."""
    default = result.paths[DEFAULT]
    if default.exit_code == 0:
        return "ok"
    late = [name for name in default.problems if result.learning.get(name) not in (None, 1)]
    return "steps" if default.problems and len(late) == len(default.problems) else "dry"


def dry_parameters(result: Any) -> list[str]:
    """The failing parameters that get no nonzero gradient in any of the optimizer steps either."""
    return [name for name in result.paths[DEFAULT].problems if result.learning.get(name) is None]


def _balance(results: list[Any]) -> Counter:
    return Counter(truth for result in results for truth in result.truth.values())


def _row(result: Any) -> str:
    balance = _balance([result])
    default = result.paths[DEFAULT]
    agree = sum(path.outcome == "agree" for path in result.paths.values())
    available = sum(path.available for path in result.paths.values())
    kind = exit_kind(result)
    if kind == "steps":
        why = (f"{len(default.problems)} parameters start at zero and learn by step "
               f"{max(result.learning[name] for name in default.problems)}")
    else:
        why = f"stays dry: {', '.join(f'`{n}`' for n in dry_parameters(result)[:2])}; first failing: " \
              f"{default.why_exit.replace('|', '/')[:200]}" if kind == "dry" else ""
    return (f"| {result.name} | {result.parameters:,} | {balance[Truth.NONE]} | {balance[Truth.ZERO]} | "
            f"{balance[Truth.NONZERO]} | {agree} of {available} | {default.exit_code} | {why} |")


def _pending(swept: set[str]) -> list[str]:
    """The library models no run measured (tests/zoo/known_exits.py: ``PENDING``)."""
    from .libraries import LIBRARIES
    from .registry import SPECIMENS

    pending = [name for name, specimen in SPECIMENS.items() if specimen.family in LIBRARIES and name not in swept]
    return [f"- Not measured yet ({len(pending)} models: the sweep ran out of time on a busy machine; the matrix "
            f"checks their verdicts on the default chain only): {', '.join(pending)}."] if pending else []


def _randomness(results: list[Any], kept: list[str]) -> list[str]:
    """The models whose own randomness decides which parameters get a gradient (truth under seeds 0, 1, 2):
    this run's, and the ``kept`` lines of the libraries it did not sweep."""
    lines = sorted(kept + [f"- {result.name}: {len(result.seeded)} parameters (`{result.seeded[0]}`"
                           f"{', ...' if len(result.seeded) > 1 else ''})" for result in results if result.seeded])
    if not lines:
        return []
    return ["**Verdicts that depend on the model's randomness.** Under seeds 0, 1 and 2 (same weights, same "
            "inputs) the plain backward gives these models' parameters different classes (None, zero, nonzero): "
            "layer drop, stochastic depth that drops a whole block, detection's random proposal sampling. A "
            "check's verdict on them holds for its seed only.", "", *lines, ""]


def _block(library: str, members: list[Any]) -> str:
    """One library's table."""
    counts = _balance(members)
    return "\n".join([f"### {library} ({len(members)} models; gradients: {counts[Truth.NONE]} None, "
                      f"{counts[Truth.ZERO]} zero, {counts[Truth.NONZERO]} nonzero)", "",
                      "| model | values | None (frozen too) | zero | nonzero | paths agree | exit | why exit 1 |",
                      "|---|---:|---:|---:|---:|---|---:|---|", *(_row(result) for result in members), ""])


def kept_blocks(page: str, swept: set[str]) -> tuple[dict[str, str], list[str]]:
    """From the section now on ``page``: the tables of the libraries not in ``swept`` (a run of some
    libraries only keeps the others' rows as their last sweep wrote them), and their randomness lines."""
    if START not in page or END not in page:
        return {}, []
    section = page[page.index(START):page.index(END)]
    blocks = {}
    for block in section.split("\n### ")[1:]:
        library = block.split(" ", 1)[0]
        if library not in swept:
            blocks[library] = "### " + block.rstrip("\n") + "\n"
    names = {row[0] for block in blocks.values() for row in _cells(block)}
    kept = [line for line in section.splitlines() if line.startswith("- ") and line[2:].split(":")[0] in names]
    return blocks, kept


def _cells(block: str) -> list[list[str]]:
    """The rows of a library's table, each as its cells (model, values, None, zero, nonzero, paths agree, exit, why)."""
    rows = [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("| model ")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def libraries_section(results: list[Any], missing: dict[str, str], page: str = "") -> str:
    """The section: a summary over every library, then each library's table; the libraries this run did
    not sweep keep their tables from ``page`` (the page as it is now)."""
    by_library: dict[str, list[Any]] = {}
    for result in results:
        by_library.setdefault(result.family, []).append(result)
    blocks, kept = kept_blocks(page, set(by_library))
    blocks.update({library: _block(library, members) for library, members in by_library.items()})
    rows = [cells for block in blocks.values() for cells in _cells(block)]
    dry = sum(row[6] == "1" and row[7].startswith("stays dry") for row in rows)
    ones = sum(row[6] == "1" for row in rows)
    agree = sum(row[5].split(" of ")[0] == row[5].split(" of ")[1] for row in rows)
    none, zero, nonzero = (sum(int(row[column]) for row in rows) for column in (2, 3, 4))
    lines = ["## Beyond transformers", "",
             f"{len(rows)} models from {len(blocks)} more libraries, each built tiny and random from its "
             "own constructor (tests/zoo/lib_*.py), checked exactly as the transformers models are, on the default "
             f"chain and on every capture path. The exit code is `fxflow check`'s on the default chain. For an "
             f"exit 1, the model is trained {STEPS} real Adam steps (plain torch, tests/zoo/truth.py): *learn by "
             "step N* would mean every failing parameter merely starts at zero, which the check's look-ahead "
             "passes (exit 0, `learns_from_step`), so an exit 1 here is a parameter that stays dry, named with "
             "fxflow's reason for the first one. `python scripts/zoo.py --libraries --only LIBRARY,...` sweeps "
             "some libraries and keeps the others' tables.", "",
             f"- **Verdicts: {agree} of {len(rows)} models agree with a plain backward on every parameter and every "
             "available path.**",
             f"- **Exit codes: {len(rows) - ones} exit 0, {ones} exit 1**: {ones - dry} only "
             f"because weights start at zero (they learn within {STEPS} steps), {dry} with a parameter "
             "that stays dry.",
             f"- Class balance (parameters, all libraries): {none:,} None, {zero:,} exactly zero, {nonzero:,} nonzero "
             "gradients.",
             *(f"- {library} is not installed here: {why}" for library, why in sorted(missing.items())),
             *_not_in_zoo(),
             *_not_built(),
             *_pending({row[0] for row in rows}), "",
             *_randomness(results, kept), TORCHVISION, ""]
    for library in sorted(blocks):
        lines.append(blocks[library])
    return "\n".join(lines)


def _not_in_zoo() -> list[str]:
    """The lines naming the libraries the zoo has no models of, with the reason."""
    from .libraries import NOT_IN_ZOO

    return [f"- {library} has no models in the zoo: {why}." for library, why in sorted(NOT_IN_ZOO.items())]


def _not_built() -> list[str]:
    """The line naming the library models this machine cannot build (their pins are kept as they were)."""
    from .lib_torchvision import NOT_BUILT_HERE

    if not NOT_BUILT_HERE:
        return []
    reasons = sorted(set(NOT_BUILT_HERE.values()))
    return [f"- Not built here ({'; '.join(reasons)}): " + ", ".join(f"`{name}`" for name in sorted(NOT_BUILT_HERE))
            + "; their capture pins are kept from the last machine that built them."]

