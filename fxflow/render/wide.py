"""Wide fan-outs: keep the default picture about one screen wide.

A mixture of experts, a multi-head block or any ``ModuleList`` used side by side puts many
boxes on one rank, and Graphviz lays a rank out in one row: sixteen open experts draw 4,000
points wide with unreadable labels. Two remedies, in order:

1. :func:`sibling_modules`: the members of a ``ModuleList``/``ModuleDict`` (``experts.0``,
   ``experts.1`` ...) collapse into one box each, and identical neighbours fold (``x16``);
2. :func:`modules_on_wide_ranks`: the modules on a rank still too wide collapse, one box each;
3. :func:`stacking`: a rank that is still wider than :data:`MAX_WIDTH_PT` is wrapped into
   several rows by invisible wires (item ``i`` above item ``i + columns``), so a fan-out grows
   down, not across.

Widths are estimated from the label lengths (Graphviz is not run here).
"""
from __future__ import annotations

import re
from collections import defaultdict

from .auto import op_order
from .view import Base, Item, View

MAX_WIDTH_PT = 1400  # the widest rank the default picture may have (1 px per pt at scale 1), legend aside
_CHAR_PT = 6.5  # about one character of an 11-point Helvetica label
_PAD_PT = 34  # a box's margins and the gap to its neighbour
_INDEXED = re.compile(r"^(?P<stem>.+)\.(?P<index>\w+)$")


def _item_width(item: Item) -> float:
    if item.kind == "param":
        words = (item.base.param or "").rsplit(".", 1)[-1] if item.base is not None else item.key
        return len(words) * _CHAR_PT * 0.8 + _PAD_PT
    if item.kind in ("module", "fold", "run"):
        words = max(len((item.module or "").rsplit(".", 1)[-1]) + len(item.module_class or "") + 5, 26)  # the counts line
    else:
        data = item.base.attrs if item.base is not None else {}
        words = max(len(str(data.get("op") or data.get("label") or item.key)), len(str(data.get("shape") or "")) + 3)
    return words * _CHAR_PT + _PAD_PT


def rank_rows(view: View) -> dict[int, list[Item]]:
    """The items on each rank (longest path from an input; a parameter sits just above its op)."""
    order = {item.key: op_order(item) for item in view.items}
    rank = {key: 0 for key in order}
    for link in sorted(view.links, key=lambda l: (order[l.source], order[l.target])):
        if order[link.source] <= order[link.target] and link.source != link.target:
            rank[link.target] = max(rank[link.target], rank[link.source] + 1)
    sources = set(rank) - {link.target for link in view.links}
    targets: dict[str, list[int]] = defaultdict(list)
    for link in view.links:
        if link.source in sources:
            targets[link.source].append(rank[link.target])
    for key in sources:  # Graphviz puts an input (a parameter) just above its first reader
        rank[key] = min(targets[key], default=1) - 1
    rows: dict[int, list[Item]] = defaultdict(list)
    for item in view.items:
        rows[rank[item.key]].append(item)
    return rows


def widest(view: View) -> float:
    """The estimated width in points of the widest rank."""
    return max((sum(_item_width(i) for i in row) for row in rank_rows(view).values()), default=0.0)


CONTAINERS = ("ModuleList", "ModuleDict")  # whose members are what fans out side by side


def sibling_modules(bases: list[Base], classes: dict[str, str]) -> set[str]:
    """The members of a ModuleList or ModuleDict (``experts.0``, ``experts.1`` ...; a container
    whose class is unknown counts when its members are numbered), outermost only."""
    stems: dict[str, set[str]] = defaultdict(set)
    for base in bases:
        for module in base.owner:
            match = _INDEXED.match(module)
            if match and (classes.get(match["stem"]) in CONTAINERS
                          or (match["stem"] not in classes and match["index"].isdigit())):
                stems[match["stem"]].add(module)
    found = {module for members in stems.values() if len(members) > 1 for module in members}
    return {m for m in found if not any(m.startswith(other + ".") for other in found)}  # the outermost


def modules_on_wide_ranks(view: View) -> set[str]:
    """The innermost module of every item on a rank wider than :data:`MAX_WIDTH_PT`: collapsed,
    each is one box instead of an op with its parameters around it."""
    found = set()
    for row in rank_rows(view).values():
        if sum(_item_width(i) for i in row) > MAX_WIDTH_PT:
            found.update(i.base.owner[-1] for i in row if i.base is not None and i.base.owner)
    return found


def stacking(view: View) -> list[tuple[str, str]]:
    """Invisible wires that wrap every rank wider than :data:`MAX_WIDTH_PT` into rows."""
    wires: list[tuple[str, str]] = []
    for row in rank_rows(view).values():
        width = sum(_item_width(i) for i in row)
        if width <= MAX_WIDTH_PT:
            continue
        row = sorted(row, key=lambda i: (op_order(i), i.key))
        columns = max(1, int(len(row) * MAX_WIDTH_PT // width))
        wires += [(row[i].key, row[i + columns].key) for i in range(len(row) - columns)]
    return wires
