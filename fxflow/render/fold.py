"""Building a view's boxes: modules collapsed to one box, identical sibling boxes folded
(``blocks.0-11 x12``), runs of like ops merged. :mod:`.layout` decides what to collapse; this
module only does it.
"""
from __future__ import annotations

import re
from collections import Counter

from ..verdicts import NodeState
from .style import worst
from .view import Base, Item

FOLD_MIN = 3  # fewest identical sibling boxes that fold into one
RUN_MIN = 3  # fewest like items in a row that become one run box


def collapse_modules(bases: list[Base], depth: int | None, classes: dict[str, str], module_norms: dict[str, list[float | None]],
              collapse: set[str]) -> tuple[list[Item], dict[str, str]]:
    """Items at the given depth (None: nothing collapses) and graph node name -> item key.

    Modules in ``collapse`` collapse at any depth too (the healthy ones, in ``focus`` and in the
    automatic view).
    """
    items: dict[str, Item] = {}
    where: dict[str, str] = {}
    for base in bases:
        level = depth if depth is not None and len(base.owner) > depth else None
        if collapse:
            first = next((i for i, q in enumerate(base.owner) if q in collapse), None)
            if first is not None and (level is None or first < level):
                level = first
        if level is not None:
            depth_here = level
            module = base.owner[depth_here]
            key = "module." + module
            box = items.get(key)
            if box is None:
                box = items[key] = Item(key, "module", NodeState.INERT, base.owner[:depth_here], base.order, module=module,
                                        module_class=classes.get(module), norms=list(module_norms.get(module, [])))
            box.members.append(base)
            box.order = min(box.order, base.order)
            where[base.name] = key
        else:
            items[base.key] = Item(base.key, base.kind, base.state, base.cluster, base.order, base)
            where[base.name] = base.key
    for item in items.values():
        if item.members:
            item.state = worst({m.state for m in item.members})
    return sorted(items.values(), key=lambda i: (i.order, i.key)), where


_INDEXED = re.compile(r"^(?P<stem>.*)\.(?P<index>\d+)$")


def _signature(item: Item) -> tuple:
    ops = Counter((m.kind, str(m.attrs.get("op", "")), m.state) for m in item.members)
    return (item.cluster, item.module_class, item.state, tuple(sorted(ops.items())))


def fold_siblings(items: list[Item], where: dict[str, str]) -> list[Item]:
    """Fold runs of identical sibling boxes ``stem.i`` .. ``stem.j`` into one box."""
    groups: dict[tuple, list[tuple[int, Item]]] = {}
    for item in items:
        match = _INDEXED.match(item.module or "") if item.kind == "module" else None
        if match:
            groups.setdefault((match["stem"],) + _signature(item), []).append((int(match["index"]), item))
    replaced: dict[str, Item] = {}
    for (stem, *_), members in sorted(groups.items(), key=lambda g: (g[0][0], min(i.order for _, i in g[1]))):
        members.sort(key=lambda pair: pair[0])
        run: list[tuple[int, Item]] = []
        for index, item in members + [(-2, None)]:  # sentinel ends the last run
            if run and (item is None or index != run[-1][0] + 1):
                if len(run) >= FOLD_MIN:
                    first, last = run[0][0], run[-1][0]
                    boxes = [box for _, box in run]
                    fold = Item(f"fold.{stem}.{first}-{last}", "fold", boxes[0].state, boxes[0].cluster,
                                min(b.order for b in boxes), module=f"{stem}.{first}-{last}",
                                module_class=boxes[0].module_class, count=len(boxes),
                                members=[m for b in boxes for m in b.members], norms=[n for b in boxes for n in b.norms])
                    for box in boxes:
                        replaced[box.key] = fold
                run = []
            if item is not None:
                run.append((index, item))
    if not replaced:
        return items
    for name, key in where.items():
        if key in replaced:
            where[name] = replaced[key].key
    result = {item.key: item for item in items if item.key not in replaced}
    result.update({fold.key: fold for fold in replaced.values()})
    return sorted(result.values(), key=lambda i: (i.order, i.key))



def merge_runs(items: list[Item], where: dict[str, str]) -> list[Item]:
    """Merge items that follow each other in graph order, in the same cluster and state, into one
    box: the last resort for a flat graph (thousands of ops, no modules to collapse into).
    Inputs, outputs and the nodes that cut stay as they are."""
    merged: list[Item] = []
    run: list[Item] = []
    renamed: dict[str, str] = {}

    def close() -> None:
        if len(run) < RUN_MIN:
            merged.extend(run)
        else:
            first = run[0]
            box = Item(f"run.{first.key}", "run", first.state, first.cluster, first.order, module=f"run of {len(run)}",
                       members=[m for i in run for m in (i.members or [i.base])], count=1)
            merged.append(box)
            renamed.update((i.key, box.key) for i in run)
        run.clear()

    for item in items:
        joinable = item.kind not in ("placeholder", "output") and not (item.base and item.base.attrs.get("reason"))
        if run and (not joinable or item.cluster != run[0].cluster or item.state != run[0].state):
            close()
        if joinable:
            run.append(item)
        else:
            merged.append(item)
    close()
    for name, key in where.items():
        if key in renamed:
            where[name] = renamed[key]
    return sorted(merged, key=lambda i: (i.order, i.key))


