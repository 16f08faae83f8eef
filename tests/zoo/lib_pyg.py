"""torch_geometric: the standard graph convolutions, each in a two-layer node classifier, and the
library's ready-made models, on one small random graph (12 nodes, 36 edges, 8 features)."""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch_geometric.nn as gnn
from torch import nn

from .registry import Built, specimen

FAMILY = "torch_geometric"
NODES, EDGES, FEATURES, HIDDEN, CLASSES = 12, 36, 8, 16, 3


def graph(edge_features: int = 0) -> dict[str, torch.Tensor]:
    """A random directed graph: node features, edges (no self loops), and edge features when asked."""
    source = torch.randint(0, NODES, (EDGES,))
    target = (source + torch.randint(1, NODES, (EDGES,))) % NODES
    found = {"x": torch.randn(NODES, FEATURES), "edge_index": torch.stack([source, target])}
    if edge_features:
        found["edge_attr"] = torch.randn(EDGES, edge_features)
    return found


class NodeClassifier(nn.Module):
    """conv -> relu -> conv -> linear: the shape of the library's examples."""

    def __init__(self, make: Callable[[int, int], nn.Module], edge_attr: bool = False) -> None:
        super().__init__()
        self.first, self.second = make(FEATURES, HIDDEN), make(HIDDEN, HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)
        self.edge_attr = edge_attr

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor | None = None) -> torch.Tensor:
        extra: tuple[Any, ...] = (edge_attr,) if self.edge_attr else ()
        hidden = self.first(x, edge_index, *extra).relu()
        return self.head(self.second(hidden, edge_index, *extra).relu())


def _mlp(width_in: int, width_out: int) -> nn.Module:
    return nn.Sequential(nn.Linear(width_in, width_out), nn.ReLU(), nn.Linear(width_out, width_out))


EDGE_DIM = 4
CONVS: dict[str, tuple[Callable[[int, int], nn.Module], bool]] = {
    "gcn": (lambda i, o: gnn.GCNConv(i, o), False),
    "sage": (lambda i, o: gnn.SAGEConv(i, o), False),
    "gat": (lambda i, o: gnn.GATConv(i, o, heads=2, concat=False), False),
    "gatv2": (lambda i, o: gnn.GATv2Conv(i, o, heads=2, concat=False), False),
    "gin": (lambda i, o: gnn.GINConv(_mlp(i, o), train_eps=True), False),
    "gine": (lambda i, o: gnn.GINEConv(_mlp(i, o), train_eps=True, edge_dim=EDGE_DIM), True),
    "graph": (lambda i, o: gnn.GraphConv(i, o), False),
    "cheb": (lambda i, o: gnn.ChebConv(i, o, K=3), False),
    "transformer": (lambda i, o: gnn.TransformerConv(i, o, heads=2, concat=False, edge_dim=EDGE_DIM), True),
    "edge": (lambda i, o: gnn.EdgeConv(_mlp(2 * i, o)), False),
    "nn": (lambda i, o: gnn.NNConv(i, o, nn.Linear(EDGE_DIM, i * o)), True),
    "gated_graph": (lambda i, o: gnn.GatedGraphConv(o, num_layers=2), False),
    "tag": (lambda i, o: gnn.TAGConv(i, o, K=2), False),
    "sg": (lambda i, o: gnn.SGConv(i, o, K=2), False),
    "arma": (lambda i, o: gnn.ARMAConv(i, o, num_stacks=2, num_layers=2), False),
    "gen": (lambda i, o: gnn.GENConv(i, o, learn_t=True), False),
    "general": (lambda i, o: gnn.GeneralConv(i, o, in_edge_channels=EDGE_DIM), True),
    "res_gated_graph": (lambda i, o: gnn.ResGatedGraphConv(i, o), False),
}

for _name, (_make, _edges) in CONVS.items():
    specimen(FAMILY, name=f"pyg_{_name}_conv")(
        lambda m=_make, e=_edges: (NodeClassifier(m, e), graph(EDGE_DIM if e else 0)))


MODELS: dict[str, Callable[[], nn.Module]] = {
    "gcn": lambda: gnn.models.GCN(FEATURES, HIDDEN, 2, CLASSES, dropout=0.1),
    "graphsage": lambda: gnn.models.GraphSAGE(FEATURES, HIDDEN, 2, CLASSES, dropout=0.1),
    "gin": lambda: gnn.models.GIN(FEATURES, HIDDEN, 2, CLASSES, dropout=0.1),
    "gat": lambda: gnn.models.GAT(FEATURES, HIDDEN, 2, CLASSES, heads=2),
    "edgecnn": lambda: gnn.models.EdgeCNN(FEATURES, HIDDEN, 2, CLASSES),
    "pna": lambda: gnn.models.PNA(FEATURES, HIDDEN, 2, CLASSES, aggregators=["mean", "max", "std"],
                                  scalers=["identity", "amplification"], deg=torch.tensor([0, 2, 4, 4, 2])),
}

for _name, _make in MODELS.items():
    specimen(FAMILY, name=f"pyg_{_name}")(lambda m=_make: (m(), graph()))


@specimen(FAMILY, name="pyg_graph_classifier")
def pyg_graph_classifier() -> Built:
    """Graph classification: GIN layers, global pooling over two graphs of a batch, a linear head."""

    class GraphClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gnn = gnn.models.GIN(FEATURES, HIDDEN, 2, HIDDEN)
            self.head = nn.Linear(2 * HIDDEN, CLASSES)

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
            hidden = self.gnn(x, edge_index)
            return self.head(torch.cat([gnn.global_mean_pool(hidden, batch), gnn.global_max_pool(hidden, batch)], 1))

    inputs = graph()
    inputs["batch"] = (torch.arange(NODES) >= NODES // 2).long()
    return GraphClassifier(), inputs
