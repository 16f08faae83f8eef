"""What the annotation's edge strategies share, declared in one place.

:class:`~fxflow.static.annotate.FlowInterpreter` runs the graph node by node and asks its edge
strategies in turn for each node's :class:`~fxflow.static.flow.NodeFlow` (recorded run, twins,
stand-ins, name rules: see :mod:`fxflow.static.strategies`). They all read and write one
:class:`FlowState`: the twins made so far, the storages values share, the results later walks stop
at. A :class:`NodeCall` is one node as they see it, and carries the value the deciding one computed.
"""
from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import torch
import torch.fx as fx

from .aliasing import Member, StorageMap
from ..core.history import entry_key
from ..core.tensors import parameter_names, tensors_in
from ..dynamic.recorded import History, RecordedValues, history_of
from .flow import NodeFlow
from .twins import make_twin
from ..verdicts import GradRegion

META_TWINS = ("meta", "recorded")  # twin kinds that run nodes on meta tensors (recorded: where a node runs again)


class _NotRun:
    """The value of a node that could not run on twins (nor on real stand-ins)."""


NOT_RUN = _NotRun()


class _Unrecorded:
    """No recorded result for a node: it runs."""


UNRECORDED = _Unrecorded()


class NodeRunner(Protocol):
    """What the strategies ask of the interpreter: a node's arguments, and one run of its op."""

    def arguments(self, node: fx.Node) -> tuple[tuple, dict]:
        """The node's arguments, read from the values computed so far."""

    def execute(self, node: fx.Node, args: tuple, kwargs: dict) -> Any:
        """Run the node's op on these arguments (a module call gets ``weight_twin``'s weights)."""


@dataclass(eq=False)
class NodeCall:
    """One node as the strategies see it: what it reads, and what it is run under."""

    node: fx.Node
    inputs: list[fx.Node]  # the nodes whose values flow into it
    members: list[Member]  # values sharing storage with an input: a write through one reaches all
    states: dict[int, tuple]  # id(member) -> its state before the node ran (aliasing.state)
    region: GradRegion | None  # the no-grad region it ran in, if any
    recorded: Any  # what it returned in the recorded run, or UNRECORDED
    value: Any = NOT_RUN  # its result, set by the strategy that decided its edges


@dataclass(eq=False)
class FlowState:
    """Everything the strategies share while one graph is annotated."""

    graph_module: fx.GraphModule
    model: torch.nn.Module
    device: torch.device  # where the model really lives: stand-ins are made there
    twins: str  # "meta", "real" or "recorded": see annotate() and choose_twins()
    runner: NodeRunner
    loss_output: tuple[int, int] | None = None  # (index, count): the output tensor that is the model's loss
    recorded: RecordedValues | None = None  # with twins "recorded": what each node returned in the recorded run
    env: dict[fx.Node, Any] = field(default_factory=dict)  # node -> its value (the interpreter's env)
    names: dict[int, str] = field(init=False)  # id(parameter) -> its name
    # id(snapshot or twin) -> the history of the real tensor it stands for (fxflow.dynamic.recorded)
    histories: dict[int, History] = field(init=False)
    twin_of: dict[int, torch.Tensor] = field(default_factory=dict)  # id(real tensor) -> its twin
    twin_ids: set[int] = field(default_factory=set)
    twin_names: dict[int, str] = field(default_factory=dict)  # id(twin of a parameter) -> parameter name
    leaf_names: ChainMap = field(init=False)  # leaf tensor id -> parameter name, twins included
    storages: StorageMap = field(init=False)  # bases and views: a write through one reaches all
    known: dict[tuple, str] = field(default_factory=dict)  # keys of every result so far -> its node: walks stop there
    keep_alive: list[Any] = field(default_factory=list)  # tensors and grad_fns whose ids are keys
    # What a module call gets for each of its weights: their twins, or real copies while on stand-ins.
    weight_twin: Callable[[torch.Tensor], torch.Tensor] = field(init=False)
    by_rules: list[fx.Node] = field(default_factory=list)  # nodes nothing could run: decided by name rules

    def __post_init__(self) -> None:
        self.names = parameter_names(self.model)
        stood_for = self.recorded.stood_for if self.recorded is not None else {}  # a fake run's weights: same names
        self.names.update({id(stood_for[key]): name for key, name in list(self.names.items()) if key in stood_for})
        self.histories = dict(self.recorded.histories) if self.recorded is not None else {}
        self.leaf_names = ChainMap(self.twin_names, self.names)
        self.storages = StorageMap({n.name: n for n in self.graph_module.graph.nodes})
        self.weight_twin = self.twin

    # -- twins ------------------------------------------------------------------------------
    def twin(self, tensor: torch.Tensor) -> torch.Tensor:
        """The twin of a real tensor, made once."""
        twin = self.twin_of.get(id(tensor))
        if twin is None:
            twin = make_twin(tensor, self.twins)
            if self.recorded is not None:  # recorded results' histories lead to the real tensor
                self.histories[id(twin)] = history_of(self.recorded.stood_for.get(id(tensor), tensor))
            if isinstance(tensor, torch.nn.Parameter):
                self.twin_names[id(twin)] = self.names.get(id(tensor), "")
            self.twin_of[id(tensor)] = twin
            self.twin_ids.add(id(twin))
            self.keep_alive.append(tensor)
        return twin

    def is_twin(self, value: Any) -> bool:
        """A twin this state made (or, among meta twins, any meta tensor)."""
        if not isinstance(value, torch.Tensor):
            return False
        return id(value) in self.twin_ids or (self.twins in META_TWINS and value.is_meta)

    def retwin(self, value: Any) -> Any:
        """A real tensor computed on stand-ins, back as a twin so later nodes run as usual."""
        if not isinstance(value, torch.Tensor) or self.is_twin(value):
            return value
        return make_twin(value, self.twins)

    # -- keys and reads ---------------------------------------------------------------------
    def key(self, tensor: torch.Tensor) -> tuple:
        """:func:`entry_key` of a tensor, or of the recorded tensor a snapshot stands for."""
        history = self.histories.get(id(tensor))
        return history.key if history is not None else entry_key(tensor)

    def read(self, node: fx.Node) -> fx.Node:
        """The node whose value a read of ``node`` sees: the last in-place write into it, if any."""
        return self.storages.read(node)

    def readers(self, inputs: list[fx.Node]) -> list[Member]:
        """(name read, tensor) for every tensor the node is called with."""
        return [(self.read(i).name, t) for i in inputs for t in tensors_in(self.env[i])]

    def entry_points(self, inputs: list[fx.Node], members: Sequence[Member] = (),
                     own: bool = False) -> dict[tuple, list[str]]:
        """Where each input tensor's gradient would enter autograd, keyed as in the walk.

        The tensors are the ones the node is called with (``env[input]``); the name is the node a
        read of that input sees (the last write into its storage). ``members`` (values sharing
        storage with an input) are entries too: a write through a view reads its base. A snapshot
        is keyed by its recorded tensor's history, unless ``own`` (the node runs again on it).
        """
        entries: dict[tuple, list[str]] = {}
        key_of = entry_key if own else self.key

        def add(key: tuple, name: str) -> None:
            names = entries.setdefault(key, [])
            if name not in names:
                names.append(name)

        for input_node in inputs:
            name = self.read(input_node).name
            for tensor in tensors_in(self.env[input_node]):
                if tensor.requires_grad:
                    add(key_of(tensor), name)
        for name, tensor in members:
            if tensor.requires_grad:
                add(key_of(tensor), self.storages.read_name(name))
        return entries

    def mark_results(self, node: fx.Node, tensors: list[torch.Tensor]) -> None:
        """Walks of later nodes stop at these tensors: they are results of ``node``."""
        for tensor in tensors:
            if tensor.requires_grad:
                self.known[self.key(tensor)] = node.name  # a snapshot: its recorded tensor's key
                self.keep_alive.append(tensor.grad_fn)


class EdgeStrategy(Protocol):
    """One way to decide a node's edges; None when it cannot (the next strategy is asked)."""

    def edges(self, call: NodeCall) -> NodeFlow | None:
        """The node's flow, with ``call.value`` set to its result; None to pass it on."""
