"""The drawing's contents as plain data: :class:`View` and what it is made of.

:mod:`.layout` chooses a view, :mod:`.fold` builds its boxes, :mod:`.dot` draws it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..verdicts import NodeState

# How the state names read in labels: the state's own word, but for these two.
STATE_WORDS = {**{state: str(state) for state in NodeState}, NodeState.NONFINITE: "NaN born", NodeState.INERT: "no grad"}


@dataclass
class Base:
    """One graph node (fx node or parameter) as the diagram sees it, before collapsing."""

    name: str  # graph node name
    key: str  # DOT id
    kind: str  # placeholder, get_attr, call_module, call_function, call_method, output, param
    state: str
    cluster: tuple[str, ...]  # qualified names of the enclosing modules, outermost first
    owner: tuple[str, ...]  # cluster, plus the module a call_module node calls: what collapses it
    order: int
    attrs: dict[str, Any]
    param: str | None = None  # qualified parameter name, for parameter nodes
    unregistered: bool = False  # a tensor the backward reached that model.parameters() does not list


@dataclass
class Item:
    """One node of the drawing: an fx node, a parameter, a collapsed module or a folded run."""

    key: str
    kind: str  # as Base.kind, "module" (collapsed), "fold" (identical modules), "run" (like ops in a row)
    state: str
    cluster: tuple[str, ...]
    order: int
    base: Base | None = None  # the drawn node, when it is a single one
    module: str | None = None  # qualified name of a box ("blocks.0-11" for a fold)
    module_class: str | None = None
    members: list[Base] = field(default_factory=list)  # what a box hides
    count: int = 1  # modules folded into this box
    norms: list[float] = field(default_factory=list)  # gradient norms measured at its output


@dataclass(frozen=True)
class Link:
    source: str
    target: str
    state: str  # wet, dry, cut, zero, inert
    norm: float | None = None
    # A parameter read by another module than its own (lm_head reading the tied wte.weight): a wire
    # that runs across the picture into a module's box, and must not cross that box's title.
    tie: bool = False


NEVER_PER_ROW = 4  # modules per row of the "not called" box; past this many, each is one box
# One run shows what this batch called: an expert no token reached is not called now, yet may be later.
NEVER_TITLE = "not called in forward on the checked batch"
# Over many steps (check --steps N) a module the checked batch did not call may be called on other
# steps: its parameters are "intermittent", "used on some steps only" in the table's words.
SOME_STEPS_TITLE = "used on some steps only: not called on the checked batch"


@dataclass
class NeverCalled:
    """Parameters whose module forward does not call on the checked batch, grouped by that module."""

    module: str
    module_class: str | None
    params: list[tuple[str, str]]  # (parameter name, state)
    steps_used: int = 0  # steps (of View.steps) on which its parameters got a gradient: 0 for never


def steps_words(used: int, steps: int) -> str:
    """``used on 2 of 4 steps``: how a module of the some-steps box is labelled."""
    return f"used on {used} of {counted(steps, 'step')}"


@dataclass
class View:
    items: list[Item]
    links: list[Link]
    classes: dict[str, str]  # module qualified name -> class name, where known
    never_called: list[NeverCalled]
    notes: list[str] = field(default_factory=list)
    depth: int | None = None
    auto_depth: bool = False
    total: int = 0  # items before collapsing and focusing
    collapse_never: bool = False  # draw each never-called module as one box
    hidden: int = 0  # nodes that carry no gradient, hidden (``show_all`` draws them)
    markers: dict[str, Counter] = field(default_factory=dict)  # graph node -> its hidden inputs, by kind
    collapsed: list[str] = field(default_factory=list)  # what the automatic choice collapsed
    stacks: list[tuple[str, str]] = field(default_factory=list)  # invisible wires that wrap a wide rank into rows
    # Modules the checked batch did not call whose parameters got a gradient on other steps (--steps N).
    some_steps: list[NeverCalled] = field(default_factory=list)
    steps: int = 1  # the steps the verdicts come from

    def uncalled(self) -> list[NeverCalled]:
        """Every module drawn outside the graph: never called, and called on other steps only."""
        return self.never_called + self.some_steps

    def count(self) -> int:
        uncalled = self.uncalled()
        return len(self.items) + (len(uncalled) if self.collapse_never else sum(len(n.params) for n in uncalled))


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``1 node``, ``2 nodes``, ``3 boxes``: a count with its noun in the right number."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def owner_module(parameter: str) -> str:
    """``blocks.2.fc1.weight`` -> ``blocks.2.fc1`` (``""`` for a parameter of the root)."""
    return parameter.rsplit(".", 1)[0] if "." in parameter else ""



def box_summary(members: Iterable[Base]) -> tuple[Counter, Counter, list[Base]]:
    """Operation states, parameter states, and the cutting nodes among a box's members."""
    ops: Counter[str] = Counter()
    params: Counter[str] = Counter()
    cuts: list[Base] = []
    for member in members:
        if member.kind == "param":
            params[member.state] += 1
        else:
            ops[member.state] += 1
            if member.attrs.get("reason"):
                cuts.append(member)
    return ops, params, cuts
