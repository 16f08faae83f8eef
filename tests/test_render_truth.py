"""The picture agrees with the table (issues 21 and 17, item 13; issue 22, item 4).

Each model here showed a picture or a wording that contradicted the table; each test checks the
drawing against a plain ``loss.backward()`` of the same model, on real Graphviz output.
"""
from __future__ import annotations

import functools
import json
import re

import pytest
import torch

from fxflow.pipeline import check
from fxflow.render import NODE_BUDGET, build_dot, build_view, render_file, style, to_svg_text
from fxflow.render.auto import SCREEN_RANKS, ranks
from fxflow.render.engine import png_size
from models.render_models import ArgmaxMoE, DeadRelu, Heads, late_cut_gpt2
from render_helpers import graph_attrs, legend_box, parse_dot, parse_svg

MOE_INPUT = (4, 6, 16)


def real_gradients(model: torch.nn.Module, inputs: tuple) -> dict[str, torch.Tensor | None]:
    """What a plain backward of a random projection of the output leaves in each ``.grad``."""
    model.zero_grad(set_to_none=True)
    output = model(*inputs)
    (output * torch.randn_like(output)).sum().backward()
    grads = {name: None if p.grad is None else p.grad.detach().clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


def learns(grad: torch.Tensor | None) -> bool:
    return grad is not None and bool(torch.isfinite(grad).all()) and bool(grad.abs().sum() > 0)


@functools.lru_cache(maxsize=None)
def checked(name: str):
    """(model, inputs, report) for one model of :mod:`models.render_models`, built once."""
    torch.manual_seed(0)
    model, inputs = {"dead": (DeadRelu, (4, 4)), "moe": (ArgmaxMoE, MOE_INPUT)}[name]
    model = model()
    inputs = (torch.randn(*inputs),)
    return model, inputs, check(model, inputs, seed=0)


def painted_parameters(svg: bytes) -> dict[str, str]:
    """Parameter -> the state its node is drawn with (collapsed boxes: the box's state)."""
    nodes, _, _ = parse_svg(svg)
    states = {}
    for key, node in nodes.items():
        state = next((c.removeprefix("fxflow-") for c in node.classes if c.removeprefix("fxflow-") in style.STATES), None)
        if key.startswith("param."):
            states[key[len("param."):]] = state
    return states


# -- 17.13: every parameter the table fails is painted as failing --------------------------------
def test_a_dead_relu_is_painted_failed_in_svg_html_and_legend(tmp_path):
    model, inputs, report = checked("dead")
    grads = real_gradients(model, inputs)
    assert {name for name, grad in grads.items() if not learns(grad)} == {"dead.weight", "dead.bias"}
    render_file(report, str(tmp_path / "dead.svg"), announce=False)
    painted = painted_parameters((tmp_path / "dead.svg").read_bytes())
    for name, grad in grads.items():
        assert (painted[name] == style.FAILED) == (not learns(grad)), name
        assert (painted[name] == "wet") == learns(grad), name
    assert "failed: no, zero or NaN gradient" in graph_attrs(build_dot(report, announce=False))["label"]
    render_file(report, str(tmp_path / "dead.html"), announce=False)
    page = (tmp_path / "dead.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="fxflow-data">(.*?)</script>', page, re.S).group(1))
    rows = {row["name"]: row for row in data["parameters"]}
    assert rows["dead.weight"]["state"] == style.FAILED and rows["first.weight"]["state"] == "wet"


def test_experts_no_token_reached_are_failed_and_the_moe_fits_one_screen(tmp_path):
    model, inputs, report = checked("moe")
    grads = real_gradients(model, inputs)
    starved = {name.split(".")[1] for name, grad in grads.items() if name.startswith("experts.") and not learns(grad)}
    assert starved, "the batch should leave some expert without a token"
    view = build_view(report)
    for item in view.items:  # a collapsed or folded expert box is failed exactly when its experts are
        experts = {m.param.split(".")[1] for m in item.members if m.param and m.param.startswith("experts.")}
        if experts:
            assert (item.state == style.FAILED) == (experts <= starved), (item.key, experts, starved)
    path = tmp_path / "moe.png"
    render_file(report, str(path), scale=1, announce=False)
    width, height = png_size(path.read_bytes())
    assert width <= 1600, (width, height)  # was 2905 px with tiny labels
    assert any("side-by-side" in note for note in view.notes)


# -- pictures -------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def late_cut_report():
    model = late_cut_gpt2(12)
    return check(model, (torch.randint(0, 99, (2, 8)),), seed=0)


def test_focus_on_a_12_layer_gpt2_stays_within_the_default_budget(tmp_path, capsys):
    report = late_cut_report()
    default, focus = build_view(report), build_view(report, focus=True)
    assert focus.count() <= NODE_BUDGET and ranks(focus) <= SCREEN_RANKS  # it was 648 boxes
    assert focus.count() <= max(default.count(), 2 * SCREEN_RANKS)
    keys = {item.key for item in focus.items}
    assert "detach" in keys and "output" in keys  # the cut stays, in full detail
    render_file(report, str(tmp_path / "focus.png"), focus=True, scale=1)
    width, height = png_size((tmp_path / "focus.png").read_bytes())
    assert width <= 1600 and height <= 1600, (width, height)
    err = capsys.readouterr().err
    assert "--focus" not in err and not any("--focus" in note for note in focus.notes)


def test_counts_read_in_the_singular(tmp_path):
    class One(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.scale

    report = check(One(), (torch.randn(2, 3),), seed=0)
    title = graph_attrs(build_dot(report, announce=False))["label"]
    assert "1 parameter: 1 reachable" in title and "1 parameters" not in title
    assert not re.search(r"\b1 (nodes|boxes|params|parameters|modules)\b", title)


def test_the_legend_is_compact_on_a_small_model(tmp_path):
    _, _, report = checked("dead")
    svg = render_file(report, str(tmp_path / "dead.svg"), announce=False)
    text = open(svg, encoding="utf-8").read()
    width, height = (float(v) for v in re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', text).groups())
    words = [w for _, w in style.LEGEND] + ["square: a parameter"] + [f"wire: {w}" for _, w in style.LEGEND_EDGES]
    left, top, right, bottom = legend_box(text, words)
    assert (right - left) * (bottom - top) <= 0.25 * width * height


# -- 22.4 and issue 21: a module that never ran is never "used in forward" ------------------------
@pytest.mark.parametrize("method", ["symbolic_trace", "torch.export", "runtime"])
def test_never_called_heads_are_named_never_called_on_every_capture_path(method):
    torch.manual_seed(0)
    model = Heads()
    called: set[str] = set()
    for name, module in model.named_modules():
        module.register_forward_hook(lambda m, a, o, name=name: called.add(name))
    report = check(model, (torch.randn(4, 8),), capture_methods=[method], seed=0)
    assert report.trace.method == method
    model(torch.randn(4, 8))
    for parameter in report.parameters:
        owner = parameter.name.rpartition(".")[0]
        if owner in called:
            assert parameter.static == "reachable", parameter
        else:  # the hooks confirm forward never called it
            assert parameter.static == "unused" and "used in forward" not in (parameter.diagnosis or "")
            assert f"its module {owner} is never called in forward" == parameter.diagnosis
    view = build_view(report)
    never = {name for group in view.never_called for name, _ in group.params}
    assert never == {"heads.reg.weight", "heads.reg.bias", "heads.aux.weight", "heads.aux.bias"}
    drawn, _, _ = parse_dot(build_dot(report, announce=False))
    assert "param.heads.reg.weight" in drawn  # inside the "never called" cluster, not beside the drawing


def test_a_wide_rank_nothing_folds_wraps_into_rows(tmp_path):
    from models.render_models import ManyBranches

    torch.manual_seed(0)
    report = check(ManyBranches(), (torch.randn(2, 8),), seed=0)
    view = build_view(report)
    assert view.stacks and not any(i.kind == "fold" for i in view.items)  # wrapped, not folded
    path = tmp_path / "branches.png"
    render_file(report, str(path), scale=1, announce=False)
    assert png_size(path.read_bytes())[0] <= 1600


def _lone_modules(view) -> dict[str, str]:
    """Module -> its title, for every module whose only drawn content is one op or one collapsed box."""
    held: dict[str, list] = {}
    for item in view.items:
        for module in item.cluster:
            held.setdefault(module, []).append(item)
    return {module: f"{module} ({view.classes[module]})" if module in view.classes else module
            for module, items in held.items() if len(items) == 1 and items[0].kind != "param"}


@pytest.mark.parametrize("name", ["gpt2 lm_head", "moe gelu"])
def test_no_wire_crosses_the_title_of_a_one_op_module(name):
    """Measured on the real layout: a module holding a single op (lm_head's linear, an expert's
    gelu, in the run-time capture) is titled on its node, not by a box around it as narrow as the
    node, whose title every wire into the node from above would cross."""
    from models.newcomer import SparseArgmaxMoE, gpt2_detached_block, gpt2_inputs, sparse_moe_inputs
    from render_helpers import boxes_of_words, crossings, edge_points

    torch.manual_seed(0)
    model, inputs = (gpt2_detached_block(), gpt2_inputs()) if name.startswith("gpt2") else (SparseArgmaxMoE(), sparse_moe_inputs())
    report = check(model, inputs, seed=0)
    assert report.trace.method == "runtime"
    lone = _lone_modules(build_view(report))
    assert lone.keys() >= ({"lm_head"} if name.startswith("gpt2") else {"experts.0.1"}), lone
    _, _, clusters = parse_dot(build_dot(report, announce=False))
    assert not {"cluster_" + module for module in lone} & {c.ids[0] for c in clusters}
    svg = to_svg_text(report)
    titles = {module: boxes_of_words(svg, title) for module, title in lone.items()}
    assert all(titles.values()), titles  # each title is drawn, on its node
    _, edges, _ = parse_svg(svg)
    for edge in edges:
        wire = re.sub(r":\w+$", "", edge.title)
        crossed = [m for m, boxes in titles.items() if crossings(edge_points(svg, wire), boxes)]
        assert not crossed, f"{wire} crosses the title of {crossed}"
