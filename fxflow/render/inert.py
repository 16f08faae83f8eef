"""Which graph nodes the default picture hides: those that carry no gradient.

Integer, boolean and index computations, shape arithmetic, mask building and position ids crowd
out everything else in a real model's graph (half of a LLaMA's nodes), and no gradient can pass
through them. By default they are hidden:

* a hidden node's consumer gets a small input marker instead (``mask``, ``index``, ``const`` or
  ``shape``, from the dtypes along the hidden chain that feeds it);
* a visible input (a placeholder such as ``input_ids``) that reaches a drawn op only through
  hidden tensors (``input_ids.view(...)`` into the embedding) keeps a wire to that op; shape
  arithmetic (values with no dtype) does not make such wires, or every attention mask built from
  ``input_ids.shape`` would wire the input to every layer;
* a node that makes a cut (an ``argmax`` feeding a lookup) is never hidden: it is the point of
  the picture.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..verdicts import NodeState

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

    from .view import Base

ALWAYS_SHOWN = ("placeholder", "output", "param")
DIFFERENTIABLE = ("float", "bfloat", "half", "complex", "double")

# The word a marker shows, most telling first: a boolean anywhere in the chain makes a mask.
MARKER_WORDS = ("mask", "index", "const", "shape")


def differentiable(dtype: object) -> bool:
    """True for a floating or complex dtype (``float32``, ``torch.bfloat16``...)."""
    text = str(dtype or "").removeprefix("torch.")
    return any(text.startswith(prefix) for prefix in DIFFERENTIABLE)


def hideable(data: dict) -> bool:
    """A node the default view hides: it carries no gradient and makes no cut."""
    if data.get("kind") in ALWAYS_SHOWN or data.get("reason") or data.get("state") == NodeState.CUT:
        return False
    if data.get("kind") == "get_attr" and data.get("state") == NodeState.UNUSED:
        return True  # a buffer read for nothing that reaches the output (parameters are drawn as themselves)
    if data.get("state") == NodeState.UNUSED and data.get("requires_grad") is False:
        return True  # made and dropped, with no gradient to carry (torch.empty inside nn.Linear(...) in forward)
    return data.get("state") == NodeState.INERT or not differentiable(data.get("dtype"))


def _word(dtype: object) -> str:
    text = str(dtype or "").removeprefix("torch.")
    if text == "bool":
        return "mask"
    if text.startswith(("int", "uint", "long")):
        return "index"
    if differentiable(text):
        return "const"
    return "shape"


@dataclass
class Hidden:
    """What hiding removed, and what the drawn nodes carry instead."""

    names: set[str] = field(default_factory=set)  # hidden graph nodes
    markers: dict[str, Counter] = field(default_factory=dict)  # drawn node -> marker word -> hidden inputs
    wires: list[tuple[str, str]] = field(default_factory=list)  # (drawn input, drawn op) joined through hidden nodes


def hide_inert(graph: "nx.DiGraph", bases: list["Base"], aliases: dict[str, str]) -> tuple[list["Base"], Hidden]:
    """The bases left once the nodes that carry no gradient are hidden, and the markers and wires."""
    hidden = Hidden({b.name for b in bases if b.kind != "param" and hideable(b.attrs)})
    if not hidden.names:
        return bases, hidden
    kept = [b for b in bases if b.name not in hidden.names]
    drawn = {b.name for b in kept} | set(aliases)
    words: dict[str, str] = {}
    sources: dict[str, frozenset[str]] = {}
    for name in sorted(hidden.names, key=lambda n: (graph.nodes[n].get("order", 0), n)):  # inputs before users
        data = graph.nodes[name]
        word = _word(data.get("dtype"))
        reached: set[str] = set()
        for source in graph.predecessors(name):
            if source in hidden.names:
                word = min(word, words.get(source, "shape"), key=MARKER_WORDS.index)
                reached |= sources.get(source, frozenset())
            elif source in drawn and not source.startswith("param:"):
                reached.add(source)
        words[name] = word
        # a value with no dtype is shape arithmetic: it does not carry the input forward
        sources[name] = frozenset(reached) if data.get("dtype") is not None else frozenset()
    wires: set[tuple[str, str]] = set()
    for base in kept:
        for source in graph.predecessors(base.name):
            if source not in hidden.names:
                continue
            if sources[source]:
                wires.update((origin, base.name) for origin in sources[source])
            else:
                hidden.markers.setdefault(base.name, Counter())[words[source]] += 1
    hidden.wires = sorted(wires)
    return kept, hidden
