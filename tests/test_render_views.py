"""What the default picture shows of real models: nodes that carry no gradient hidden, the cut in
full detail with the healthy rest collapsed, options that are never overridden, a legend of only
what is drawn, PNG scale, the exit code, and the interactive HTML file."""
from __future__ import annotations

import json
import re

import pytest
import torch
import torch.nn as nn

import fxflow
from fxflow.render import build_dot, build_view, engine, render_file, style
from fxflow.render.auto import ranks
from render_helpers import cached_report, graph_attrs, parse_dot
from test_render_scale import synthetic_report

SEED = "examples/seed.py:Net"
NESTED = "examples/render_nested.py:Net"
GPT2 = "examples/hf_gpt2_cut.py:DetachedMlpGpt2"
LLAMA = "examples/hf_planted_cut.py:FrozenEmbeddingsLlama"

TWICE = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        h = torch.relu(self.body(x))
        spare = self.head(h.new_zeros(h.shape))  # a second call no gradient reaches: its norm is missing
        return self.head(h)


def example_inputs():
    return torch.randn(3, 4)
"""


def drawn(nodes: dict) -> dict:
    return {k: v for k, v in nodes.items() if not k.startswith("fxflow.legend")}


# -- the crash on a missing gradient norm ----------------------------------------------------
def test_a_call_without_a_gradient_norm_draws_at_every_depth(tmp_path, write_model, run_fxflow):
    path = write_model(tmp_path, TWICE)
    module = {}
    exec(compile(path.read_text(), str(path), "exec"), module)
    report = fxflow.check(module["Net"](), module["example_inputs"]())
    assert None in report.module_grad_norms["head"]  # the trigger is really there
    for depth in (0, 1, None):
        nodes, _, _ = parse_dot(build_dot(report, depth=depth, announce=False))
        assert drawn(nodes)
    for extra in (["--depth", "0"], ["--depth", "1", "--no-backward"], ["--depth", "0", "--device", "meta"]):
        out = tmp_path / "twice.svg"
        code, _, err = run_fxflow("render", f"{path}:Net", "-o", str(out), *extra)
        assert code == 0, err
        assert out.read_bytes().lstrip().startswith(b"<?xml")


# -- nodes that carry no gradient ------------------------------------------------------------
def test_llama_hides_int_and_mask_nodes_and_marks_their_consumers():
    report = cached_report(LLAMA)
    default, everything = build_view(report, automatic=False), build_view(report, show_all=True, automatic=False)
    assert default.hidden > 20 and everything.hidden == 0
    assert everything.count() - default.count() == default.hidden
    ops = {str(i.base.attrs.get("op")) for i in default.items if i.base is not None and i.kind != "param"}
    assert not ops & {"arange", "unsqueeze", "expand"}, ops
    assert {"arange"} <= {str(i.base.attrs.get("op")) for i in everything.items if i.base is not None}
    source = build_dot(report, announce=False, automatic=False)
    assert f"{default.hidden} nodes that carry no gradient" in graph_attrs(source)["label"]
    assert "--all shows them" in graph_attrs(source)["label"]
    assert "+ mask" in source  # the attention op says what hidden inputs it has
    nodes, _, _ = parse_dot(source)
    cut = [k for k, n in drawn(nodes).items() if "fxflow-cut" in n.attrs["class"]]
    assert cut  # the no_grad embedding stays drawn


def test_a_tall_llama_collapses_its_healthy_layers_but_opens_the_cut(capsys):
    report = cached_report(LLAMA)
    view = build_view(report)  # under the node budget, but 70-odd nodes tall when drawn whole
    assert view.auto_depth and ranks(view) <= 24
    keys = {i.key for i in view.items}
    assert {"module.model.layers.0", "module.model.layers.1"} <= keys  # a healthy model shows its blocks
    assert "embedding" in keys and view.items[[i.key for i in view.items].index("embedding")].state == "cut"
    assert "too tall to read" in " ".join(view.notes)


class ArgmaxLookup(nn.Module):
    """The cut is made by an integer op: argmax feeds an embedding lookup."""

    def __init__(self) -> None:
        super().__init__()
        self.score = nn.Linear(4, 5)
        self.table = nn.Embedding(5, 3)

    def forward(self, x):
        return self.table(self.score(x).argmax(-1))


def test_an_integer_op_that_cuts_stays_visible():
    report = fxflow.check(ArgmaxLookup(), torch.randn(2, 4))
    assert report.parameter("score.weight").static == "cut"
    nodes, _, _ = parse_dot(build_dot(report, announce=False))
    argmax = nodes["argmax"].attrs
    assert "fxflow-cut" in argmax["class"] and "argmax" in argmax["label"]


# -- the automatic view on a 12-layer GPT-2 ---------------------------------------------------
def test_gpt2_default_view_keeps_the_cut_open_and_folds_the_healthy_blocks(capsys):
    report = cached_report(GPT2)
    source = build_dot(report)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "collapsed automatically" in err[0]
    assert "transformer.h.0-4 x5" in err[0] and "transformer.h.6-11 x6" in err[0]
    nodes, _, clusters = parse_dot(source)
    assert {"fold.transformer.h.0-4", "fold.transformer.h.6-11"} <= set(nodes)
    assert "x5" in nodes["fold.transformer.h.0-4"].attrs["label"]
    assert "fxflow-wet" in nodes["fold.transformer.h.6-11"].attrs["class"]
    cut = nodes["detach"].attrs
    assert "fxflow-cut" in cut["class"] and "examples/hf_gpt2_cut.py:24" in cut["label"]
    labels = {c.attrs.get("label") for c in clusters}
    assert {"transformer.h.5 (GPT2Block)", "transformer.h.5.mlp (DetachedMLP)"} <= labels  # the cut's modules open
    dry = [k for k, n in drawn(nodes).items() if "fxflow-dry" in n.attrs["class"]]
    assert "module.transformer.h.5.mlp.c_fc" in dry  # the dry module the cut starves, with its counts
    assert len(drawn(nodes)) <= 40 and ranks(build_view(report)) <= 24


def test_gpt2_png_at_scale_one_fits_a_screen(tmp_path):
    path = tmp_path / "gpt2.png"
    render_file(cached_report(GPT2), str(path), scale=1, announce=False)
    width, height = engine.png_size(path.read_bytes())
    assert width <= 1600 and height <= 1200, (width, height)  # about one screen, as issue 12 asks
    two = tmp_path / "gpt2x2.png"
    render_file(cached_report(GPT2), str(two), announce=False)  # the default scale is 2
    assert abs(engine.png_size(two.read_bytes())[0] - 2 * width) <= 4


def test_the_png_cap_bites_and_says_so(tmp_path, capsys):
    path = tmp_path / "huge.png"
    render_file(cached_report(SEED), str(path), scale=16, announce=False)  # about 12,000 pixels wide uncapped
    width, height = engine.png_size(path.read_bytes())
    assert max(width, height) == engine.PNG_MAX_PIXELS
    err = capsys.readouterr().err
    assert "scaled down" in err and str(engine.PNG_MAX_PIXELS) in err
    render_file(cached_report(SEED), str(tmp_path / "small.png"), scale=1, announce=False)
    assert "scaled down" not in capsys.readouterr().err


# -- options are the user's ------------------------------------------------------------------
def test_depth_is_never_overridden_and_focus_keeps_the_budget(capsys):
    report = synthetic_report(layers=24)
    deep = build_view(report, depth=3, budget=20)
    assert not deep.auto_depth and deep.depth == 3 and deep.count() > 20
    build_dot(report, depth=3, budget=20)
    assert "collapsed automatically" not in capsys.readouterr().err
    # --focus stays within the same box budget as the default view (issue 21), and no note it
    # writes suggests --focus, which was given
    focus = build_view(report, focus=True, budget=20)
    assert focus.count() <= 20 and "detach_3" in {i.key for i in focus.items}
    build_dot(report, focus=True, budget=20)
    assert "--focus" not in capsys.readouterr().err and not any("--focus" in note for note in focus.notes)


# -- legend ----------------------------------------------------------------------------------
def test_legend_shows_only_what_is_drawn_with_the_drawing_s_colors():
    source = cached_report(SEED).to_dot()
    title = graph_attrs(source)["label"]
    for words in ("wet: the gradient arrives", "dry: no gradient", "cut: severs the gradient", "square: a parameter"):
        assert words in title
    for words in ("zero: the gradient", "frozen:", "identical blocks", "collapsed module", "failed:"):
        assert words not in title
    assert style.NODE_STYLES["cut"].fill in title and style.EDGE_STYLES["cut"].color in title
    assert "- - -" in title  # the severed wire is dashed, as drawn
    folded = graph_attrs(cached_report(NESTED).to_dot(depth=0))["label"]
    for words in ("identical blocks", "collapsed module", "zero: the gradient", "frozen:"):
        assert words in folded


# -- the command -----------------------------------------------------------------------------
def test_render_help_shows_render_examples(run_fxflow):
    code, out, _ = run_fxflow("render", "--help")
    assert code == 0
    assert "fxflow render" in out and "report.html" in out and "--strict" in out and "--scale" in out
    assert "fxflow check model.py" not in out


def test_bad_scale_is_one_clear_error(run_fxflow, tmp_path):
    code, _, err = run_fxflow("render", SEED, "-o", str(tmp_path / "f.png"), "--scale", "0")
    assert code == 2 and "--scale" in err and len(err.strip().splitlines()) == 1


# -- the HTML file ---------------------------------------------------------------------------
def test_html_report_is_self_contained_with_views_and_table(run_fxflow, tmp_path):
    path = tmp_path / "report.html"
    code, _, err = run_fxflow("render", SEED, "-o", str(path))
    assert code == 0, err
    page = path.read_text(encoding="utf-8")
    assert not re.search(r"<(script|img|link|iframe)[^>]+(src|href)=", page)  # nothing loaded from elsewhere
    assert "@import" not in page and "url(" not in page
    data = json.loads(re.search(r'<script type="application/json" id="fxflow-data">(.*?)</script>', page, re.S).group(1))
    views = {v["id"]: v for v in data["views"]}
    assert {"main", "focus", "depth0"} <= set(views)
    cut = views["main"]["nodes"]["detach"]
    assert cut["source"] == "examples/seed.py:15" and "detach()" in cut["reason"] and cut["shape"] == "16x32"
    assert "first.weight" in views["main"]["nodes"]["param.first.weight"]["params"]
    assert views["depth0"]["nodes"]["module.first"]["kind"] == "module"
    rows = {r["name"]: r for r in data["parameters"]}
    assert rows["first.weight"]["static"] == "cut" and rows["first.weight"]["problem"]
    assert rows["last.weight"]["state"] == "wet" and rows["last.weight"]["norm"] > 0
    for view in views:
        assert f'id="fxflow-svg-{view}"><svg' in page


def test_notebook_shows_the_report_inline():
    report = cached_report(SEED)
    cell = report._repr_html_()
    assert cell.startswith("<iframe srcdoc=") and "fxflow-data" in cell and "allow-scripts" in cell
