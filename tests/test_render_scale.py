"""fxflow render on GPT-2-sized graphs: quick, readable (auto-collapsed), and a sane PNG.

The graph is synthetic (the attributes fxflow.static.analyze documents), so this measures the renderer
alone: 96 layers of 21 nodes each, about 2,000 drawn nodes.
"""
from __future__ import annotations

import time

import networkx as nx
import pytest
import torch

import fxflow
from fxflow.errors import FxflowError

from fxflow.render import build_dot, build_view
from fxflow.render import engine
from fxflow.render.engine import run
from fxflow.reconcile.norms import call_norms
from fxflow.report import CutSite, ParameterReport, Report, TraceInfo
from render_helpers import graph_attrs, parse_dot, parse_svg

LAYERS = 96


def synthetic_report(layers: int = LAYERS, cut_layer: int | None = 3, vanishing: bool = False) -> Report:
    """A decoder stack: embed -> layers x (ln, attn(q,k,v,softmax,matmul,proj), mlp(fc,gelu,proj), adds) -> head."""
    graph = nx.DiGraph()
    parameters: list[ParameterReport] = []
    order = 0
    norms: dict[str, list[float]] = {}

    def node(name: str, kind: str, op: str, stack: list[tuple[str, str]], state: str, **extra):
        nonlocal order
        graph.add_node(name, kind=kind, op=op, label=extra.pop("label", name), state=state, source=f"model.py:{10 + order % 50}",
                       module_stack=stack, shape=(2, 16, 64), dtype="float32", order=order, **extra)
        order += 1

    def param(qualname: str, target: str, state: str, static: str):
        graph.add_node("param:" + qualname, kind="param", label=qualname, state=state, order=graph.nodes[target]["order"])
        graph.add_edge("param:" + qualname, target, kind="diff", state="wet" if state == "wet" else "dry")
        cut = [CutSite("detach_3", "detach", "model.py:42", "detach() returns a tensor with no autograd history")] if static == "cut" else []
        parameters.append(ParameterReport(qualname, (64, 64), static, "missing" if static == "cut" else "ok",
                                          None if static == "cut" else 1.0, cut))

    def edge(a: str, b: str, state: str, kind: str = "diff"):
        graph.add_edge(a, b, kind=kind, state=state)

    node("x", "placeholder", "placeholder", [], "inert")
    node("embed", "call_module", "Embedding", [("embed", "Embedding")], "dry" if cut_layer is not None else "wet", label="embed")
    param("embed.weight", "embed", "dry" if cut_layer is not None else "wet", "cut" if cut_layer is not None else "reachable")
    edge("x", "embed", "inert", "none")
    previous = "embed"
    for i in range(layers):
        dry = cut_layer is not None and i < cut_layer
        state = "dry" if dry else "wet"
        static = "cut" if dry else "reachable"
        layer = (f"layers.{i}", "Layer")
        attn, mlp = (f"layers.{i}.attn", "Attention"), (f"layers.{i}.mlp", "MLP")
        names = {}
        for part, kind, op, stack in [
            ("ln1", "call_module", "LayerNorm", [layer, (f"layers.{i}.ln1", "LayerNorm")]),
            ("q", "call_module", "Linear", [layer, attn, (f"layers.{i}.attn.q", "Linear")]),
            ("k", "call_module", "Linear", [layer, attn, (f"layers.{i}.attn.k", "Linear")]),
            ("v", "call_module", "Linear", [layer, attn, (f"layers.{i}.attn.v", "Linear")]),
            ("scores", "call_function", "matmul", [layer, attn]),
            ("scale", "call_function", "truediv", [layer, attn]),
            ("softmax", "call_function", "softmax", [layer, attn]),
            ("mix", "call_function", "matmul", [layer, attn]),
            ("proj", "call_module", "Linear", [layer, attn, (f"layers.{i}.attn.proj", "Linear")]),
            ("add1", "call_function", "add", [layer]),
            ("ln2", "call_module", "LayerNorm", [layer, (f"layers.{i}.ln2", "LayerNorm")]),
            ("fc", "call_module", "Linear", [layer, mlp, (f"layers.{i}.mlp.fc", "Linear")]),
            ("gelu", "call_function", "gelu", [layer, mlp]),
            ("out", "call_module", "Linear", [layer, mlp, (f"layers.{i}.mlp.out", "Linear")]),
            ("add2", "call_function", "add", [layer]),
        ]:
            name = f"l{i}_{part}"
            label = stack[-1][0] if kind == "call_module" else name
            node(name, kind, op, stack, state, label=label)
            names[part] = name
            if kind == "call_module":
                for leaf in ("weight", "bias"):
                    param(f"{label}.{leaf}", name, state, static)
                norm = 10.0 ** (-(layers - i) / 8) if vanishing else 1.0
                norms[label] = [0.0 if dry else norm]
        n = names
        for a, b in [("ln1", "q"), ("ln1", "k"), ("ln1", "v"), ("q", "scores"), ("k", "scores"), ("scores", "scale"),
                     ("scale", "softmax"), ("softmax", "mix"), ("v", "mix"), ("mix", "proj"), ("proj", "add1"),
                     ("add1", "ln2"), ("ln2", "fc"), ("fc", "gelu"), ("gelu", "out"), ("out", "add2"), ("add1", "add2")]:
            edge(n[a], n[b], state)
        edge(previous, n["ln1"], state)
        edge(previous, n["add1"], state)
        previous = n["add2"]
        if cut_layer is not None and i == cut_layer - 1:
            node("detach_3", "call_method", "detach", [], "cut", reason="detach() returns a tensor with no autograd history")
            edge(previous, "detach_3", "cut", "none")
            previous = "detach_3"
    node("head", "call_module", "Linear", [("head", "Linear")], "wet", label="head")
    param("head.weight", "head", "wet", "reachable")
    node("output", "output", "output", [], "wet")
    edge(previous, "head", "dry" if previous == "detach_3" else "wet", "none" if previous == "detach_3" else "diff")
    edge("head", "output", "wet")
    norms["head"] = [1.0]
    return Report("synthetic.py:Decoder", TraceInfo("symbolic_trace", graph.number_of_nodes()), parameters,
                  graph=graph, module_grad_norms=norms, node_grad_norms=call_norms(graph, norms))


def test_two_thousand_nodes_build_and_render_quickly(capsys):
    report = synthetic_report()
    started = time.perf_counter()
    full = build_dot(report, automatic=False)
    full_seconds = time.perf_counter() - started
    drawn = len(parse_dot(full)[0])
    assert drawn > 2000
    assert full_seconds < 10, full_seconds

    started = time.perf_counter()
    auto = build_dot(report)
    svg = run(auto, "svg")
    auto_seconds = time.perf_counter() - started
    assert auto_seconds < 30, auto_seconds
    assert "collapsed automatically" in capsys.readouterr().err
    nodes, _, _ = parse_svg(svg)
    assert len(nodes) <= 300
    assert "fxflow-cut" in nodes["detach_3"].classes  # the cut stays visible at any depth
    assert build_dot(report) == auto  # deterministic at scale too


def test_identical_layers_fold_into_one_box():
    report = synthetic_report(layers=24, cut_layer=None)
    nodes, _, _ = parse_dot(build_dot(report, depth=0, announce=False))
    assert "fold.layers.0-23" in nodes and "x24" in nodes["fold.layers.0-23"].attrs["label"]
    # with a cut in layer 3, the dry layers 0-2 and the wet layers 3-23 fold separately
    report = synthetic_report(layers=24, cut_layer=3)
    nodes, _, _ = parse_dot(build_dot(report, depth=0, announce=False))
    assert {"fold.layers.0-2", "fold.layers.3-23"} <= set(nodes)
    assert "fxflow-dry" in nodes["fold.layers.0-2"].attrs["class"]
    assert "fxflow-wet" in nodes["fold.layers.3-23"].attrs["class"]


def test_vanishing_stack_fades():
    report = synthetic_report(layers=12, cut_layer=None, vanishing=True)
    _, edges, _ = parse_dot(build_dot(report, automatic=False, announce=False))
    edges = [e for e in edges if e.attrs.get("class", "").startswith("fxflow-edge")]
    width = {e.ids: float(e.attrs["penwidth"]) for e in edges}
    assert width[("l0_out", "l0_add2")] < width[("l11_out", "l11_add2")]
    tooltip = {e.ids: e.attrs["tooltip"] for e in edges}
    assert "grad norm" in tooltip[("l0_out", "l0_add2")]


def test_png_of_a_big_graph_stays_small():
    report = synthetic_report(layers=24)
    png = run(build_dot(report, automatic=False, announce=False), "png")
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert max(width, height) <= engine.PNG_MAX_PIXELS


def test_view_counts_match_dot():
    report = synthetic_report(layers=8)
    view = build_view(report, depth=1)
    nodes, _, _ = parse_dot(build_dot(report, depth=1, announce=False))
    assert view.count() == len([k for k in nodes if not k.startswith("fxflow.legend")])
    assert "modules deeper than 1" in graph_attrs(build_dot(report, depth=1, announce=False))["label"]


class _FlatStack(torch.nn.Module):
    """Thousands of top-level ops and no modules to collapse them into, with one planted detach."""

    def __init__(self, blocks: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(blocks))

    def forward(self, x):
        for index, layer in enumerate(self.layers):
            x = x + torch.tanh(layer(x)) * 0.5
            if index == 3:
                x = x.detach()  # planted: every layer before this one is cut
        return x


def test_a_flat_graph_with_no_modules_to_collapse_into_draws_runs_of_like_ops(capsys):
    model = _FlatStack(1400)  # about 5,600 graph nodes, 4,200 boxes even at --depth 0
    report = fxflow.check(model, torch.randn(2, 4), backward=False)
    nodes, _, _ = parse_dot(build_dot(report))
    assert "collapsed automatically" in capsys.readouterr().err
    drawn = [k for k in nodes if not k.startswith("fxflow.legend")]
    assert len(drawn) <= 300
    cut = [n for k, n in nodes.items() if "fxflow-cut" in n.attrs.get("class", "") and not k.startswith("fxflow.legend")]
    assert len(cut) == 1 and "detach" in cut[0].attrs["label"]  # the cut is never merged into a run
    runs = [nodes[k].attrs for k in drawn if k.startswith("run.")]
    assert {"fxflow-dry", "fxflow-wet"} <= {c for r in runs for c in r["class"].split()}  # before and after it


def test_a_flat_graph_that_collapses_enough_is_drawn():
    model = _FlatStack(500)  # about 2,000 graph nodes; --depth 0 leaves about 1,500 boxes
    report = fxflow.check(model, torch.randn(2, 4), backward=False)
    nodes, _, _ = parse_dot(build_dot(report))
    cut = [n for k, n in nodes.items() if "fxflow-cut" in n.attrs.get("class", "") and not k.startswith("fxflow.legend")]
    assert len(cut) == 1 and "detach" in cut[0].attrs["label"]
