"""The automatic view: what to collapse when the whole graph is too big or too tall to read.

:func:`choose_automatically` tries, in order, until the picture fits (:data:`SCREEN_RANKS` boxes from input
to output, at most the node budget):

1. collapse every module with nothing wrong inside (one box each, with wet/dry counts; identical
   blocks then fold ``x N``), and every module holding neither the cut nor a parameter that will
   not learn, so the modules on the path from a dry parameter to its cut keep their ops; the
   collapsed modules are then opened again one nesting level at a time while the picture still fits;
2. also collapse dry modules with no cut inside;
3. whole depth levels, deepest first;
4. runs of like ops in a row (a flat graph with no modules to collapse into).

The view it returns lists what it collapsed (``View.collapsed``) and says why in its notes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..errors import FxflowError
from ..verdicts import NodeState
from .view import counted

if TYPE_CHECKING:  # pragma: no cover
    from .view import Base, Item, View

DRAWABLE_LIMIT = 2500  # above this many boxes even after collapsing, layout takes minutes

# make(depth, modules to collapse, runs=False) -> View: layout's view builder for one choice
Make = Callable[..., "View"]

PROBLEM_STATES = frozenset({NodeState.DRY, NodeState.CUT, NodeState.ZERO, NodeState.UNUSED, NodeState.FAILED})


def _modules_free_of(bases: list["Base"], wrong: Callable[["Base"], bool]) -> set[str]:
    """Modules none of whose nodes is ``wrong``."""
    every: set[str] = set()
    holding: set[str] = set()
    for base in bases:
        every.update(base.owner)
        if wrong(base):
            holding.update(base.owner)
    return every - holding


def healthy_modules(bases: list["Base"]) -> set[str]:
    """Modules with nothing dry, cut, zero or unused anywhere inside."""
    return _modules_free_of(bases, lambda base: base.state in PROBLEM_STATES)


def open_levels(view: "View", collapse: set[str], openable: set[str], bases: list["Base"], budget: int, make: Make) -> "View":
    """Open the ``openable`` collapsed modules one nesting level at a time while the picture still
    fits the screen: a model shows its blocks, not one box, and a stack whose every block is dry
    shows ``h.0-11 x12`` rather than one box."""
    nesting = {q: i for base in bases for i, q in enumerate(base.owner)}
    for level in range(1, max(nesting.values(), default=0) + 2):
        opened = make(None, (collapse - openable) | {q for q in openable if nesting[q] >= level})
        if opened.count() > budget or ranks(opened) > SCREEN_RANKS:
            break
        view = opened
    return view


def _modules_without(bases: list["Base"], *, problem_params: bool) -> set[str]:
    """Modules with no cutting node inside and, with ``problem_params``, no parameter that will
    not learn either: what the automatic view may collapse."""
    def wrong(base: "Base") -> bool:
        cutting = bool(base.attrs.get("reason")) or base.state == NodeState.CUT
        return cutting or (problem_params and base.kind == "param" and base.state in PROBLEM_STATES)

    return _modules_free_of(bases, wrong)


SCREEN_RANKS = 24  # the automatic view aims at no more boxes than this from input to output
TALL_RANKS = 2 * SCREEN_RANKS  # a whole graph taller than this is collapsed automatically


def ranks(view: "View") -> int:
    """The most boxes on one path through the view (wires against graph order are ignored):
    about how tall the drawing is."""
    order = {item.key: op_order(item) for item in view.items}
    longest = {key: 1 for key in order}
    for link in sorted(view.links, key=lambda l: (order[l.source], order[l.target])):
        if order[link.source] < order[link.target]:
            longest[link.target] = max(longest[link.target], longest[link.source] + 1)
    return max(longest.values(), default=0)


def op_order(item: "Item") -> int:
    """An item's place in graph order, by its ops (a parameter's place is where it is first read,
    which torch.export puts at the top of the graph)."""
    ops = [m.order for m in item.members if m.kind != "param"]
    return min(ops) if ops else item.order


def choose_automatically(why: str, budget: int, bases: list["Base"], make: Make,
                         hint: str = "pass --depth or --focus to choose") -> "View":
    """Over the budget: collapse healthy modules, then dry ones with no cut inside, then by depth,
    then runs of like ops, until the picture fits; the view says what was collapsed."""
    healthy = healthy_modules(bases)
    # modules that hold a parameter that will not learn, or the cut, keep their ops; then only the cut's
    plain = healthy | _modules_without(bases, problem_params=True)
    quiet = healthy | _modules_without(bases, problem_params=False)
    deepest = max((len(b.owner) for b in bases), default=0)
    stages = [(None, plain), (None, quiet)] + [(level, quiet) for level in range(deepest - 1, -1, -1)]
    if sum(1 for b in bases if not b.owner) > budget:
        stages = []  # more top-level ops than the budget: no collapsing of modules can be enough
    view = None
    fitting: "View | None" = None  # the first that fits the budget, should none fit the screen
    for level, collapse in stages:
        view = make(level, collapse)
        if view.count() <= budget:
            fitting = fitting or view
            if ranks(view) <= SCREEN_RANKS:
                view = open_levels(view, collapse, collapse, bases, budget, make) if level is None else view
                break
    else:
        view = fitting
    if view is None or view.count() > budget:
        view = make(0 if deepest else None, quiet, runs=True)
    view.auto_depth = True
    boxes = [i for i in view.items if i.kind in ("module", "fold", "run")]
    view.collapsed = [(i.module or i.key) + (f" x{i.count}" if i.count > 1 else "") for i in boxes]
    view.notes.append(f"{why}: {counted(len(boxes), 'box', 'boxes')} collapsed automatically ({view.count()} drawn); {hint}")
    if view.count() > DRAWABLE_LIMIT:
        return too_big_to_draw(view, focused="--focus" not in hint)
    return view


def too_big_to_draw(view: "View", focused: bool = False) -> "View":
    """Refuse, in one line, a drawing that collapsing could not shrink: its layout would take minutes."""
    raise FxflowError(f"the graph has {counted(view.count(), 'box', 'boxes')} even collapsed (no modules group its ops), too many to draw",
                      hint="use fxflow check for the table" if focused else "use --focus, or fxflow check for the table")
