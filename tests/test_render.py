"""fxflow render: the diagram marks the cut, colors every parameter, and is byte-stable.

Golden DOT files live in tests/golden/; after an intended change, regenerate them with

    FXFLOW_REGEN_GOLDEN=1 python -m pytest tests/test_render.py -k golden
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from fxflow.errors import FxflowError
from fxflow.render import build_dot, render_file, to_svg_text
from fxflow.render import engine
from conftest import fxflow_completed
from render_helpers import GOLDEN, REGEN_ENV, ROOT, cli_report, graph_attrs, parse_dot, parse_svg

SEED = "examples/seed.py:Net"
NESTED = "examples/render_nested.py:Net"

# Every example (but the Hugging Face one) with its golden DOT file.
GOLDEN_TARGETS = {
    "seed": SEED,
    "render_nested": NESTED,
    "transfer_frozen_detached": "examples/transfer_frozen.py:DetachedBackbone",
    "transfer_frozen_frozen": "examples/transfer_frozen.py:FrozenBackbone",
    "seed_fixed": "examples/seed_fixed.py:Net",
    "break_frozen": "examples/break_frozen.py:Net",
    "break_threshold": "examples/break_threshold.py:Net",
    "break_unused": "examples/break_unused.py:Net",
    "hidden_no_grad": "examples/hidden_no_grad.py:Net",
    "hidden_inference_mode": "examples/hidden_inference_mode.py:Net",
    "hidden_detach_inplace": "examples/hidden_detach_inplace.py:Net",
    "hidden_autograd_function": "examples/hidden_autograd_function.py:Net",
    "hidden_numpy": "examples/hidden_numpy.py:Net",
    "hidden_checkpoint": "examples/hidden_checkpoint.py:Net",
    # hf_planted_cut is left out: its graph follows the installed transformers version
}

_reports: dict[str, object] = {}


def report_for(target: str):
    if target not in _reports:
        _reports[target] = cli_report(target)
    return _reports[target]


def state_class(classes: str | list[str]) -> set[str]:
    items = classes.split() if isinstance(classes, str) else classes
    return {c for c in items if c.startswith("fxflow-")}


# -- the cut, the parameters, the clusters ---------------------------------------------------
def test_seed_cut_node_is_marked_with_its_line_in_dot():
    nodes, edges, _ = parse_dot(report_for(SEED).to_dot())
    cut = nodes["detach"].attrs
    assert state_class(cut["class"]) >= {"fxflow-cut"}
    assert "examples/seed.py:15" in cut["label"] and "detach" in cut["label"]
    assert "examples/seed.py:15" in cut["tooltip"]
    assert cut["color"] == "#c62828" and float(cut["penwidth"]) >= 2.5
    severed = [e for e in edges if e.ids == ("relu_1", "detach")]
    assert severed and severed[0].attrs["style"] == "dashed"
    assert "fxflow-edge-cut" in severed[0].attrs["class"]


def test_seed_parameters_have_their_classes():
    nodes, _, _ = parse_dot(report_for(SEED).to_dot())
    for name in ("first.weight", "first.bias", "middle.weight", "middle.bias"):
        attrs = nodes["param." + name].attrs
        assert attrs["class"] == "fxflow-param fxflow-dry"
        assert attrs["tooltip"].startswith(name)
    for name in ("last.weight", "last.bias"):
        assert nodes["param." + name].attrs["class"] == "fxflow-param fxflow-wet"


def test_svg_keeps_classes_tooltips_and_the_cut_line():
    report = report_for(SEED)
    svg = to_svg_text(report)
    nodes, edges, _ = parse_svg(svg)
    assert {"fxflow-cut"} <= state_class(nodes["detach"].classes)
    assert "examples/seed.py:15" in nodes["detach"].text
    assert "examples/seed.py:15" in nodes["detach"].tooltip
    assert state_class(nodes["param.first.weight"].classes) == {"fxflow-param", "fxflow-dry"}
    assert state_class(nodes["param.last.weight"].classes) == {"fxflow-param", "fxflow-wet"}
    assert nodes["param.middle.bias"].tooltip.startswith("middle.bias")
    for key, node in nodes.items():
        if key.startswith("fxflow.legend"):
            continue
        states = {c[len("fxflow-"):] for c in node.classes} & {"wet", "dry", "cut", "zero", "frozen", "unused", "inert"}
        assert len(states) == 1, (key, node.classes)
        assert node.tooltip, key
    assert any("fxflow-edge-cut" in e.classes for e in edges)
    assert report.render  # the notebook path and the CLI path share the builder
    assert report._repr_svg_() == svg


def test_nested_zero_frozen_unused_and_clusters():
    source = report_for(NESTED).to_dot()
    nodes, edges, clusters = parse_dot(source)
    assert graph_attrs(source)["newrank"] == "true"
    round_node = nodes["round_1"].attrs
    assert "fxflow-zero" in round_node["class"] and "examples/render_nested.py:50" in round_node["label"]
    assert "fxflow-cut" in nodes["detach"].attrs["class"]
    assert "examples/render_nested.py:47" in nodes["detach"].attrs["label"]
    assert nodes["param.gate"].attrs["class"] == "fxflow-param fxflow-zero"
    assert nodes["param.pos"].attrs["class"] == "fxflow-param fxflow-frozen"
    assert nodes["param.stem.weight"].attrs["class"] == "fxflow-param fxflow-dry"
    assert nodes["param.blocks.2.mlp.fc1.weight"].attrs["class"] == "fxflow-param fxflow-wet"
    # the module forward never calls is drawn, not silently absent
    for name in ("aux_head.weight", "aux_head.bias"):
        assert "fxflow-unused" in nodes["param." + name].attrs["class"]
        assert nodes["param." + name].attrs["tooltip"].startswith(name)
    labels = {c.attrs.get("label") for c in clusters}
    assert {"blocks.0 (Block)", "blocks.3.mlp (MLP)", "not called in forward on the checked batch", "aux_head (Linear)"} <= labels
    # every edge leaving a parameter that learns is wet; the ones of the dry stem are dry
    states = {e.ids: e.attrs["class"].split()[-1] for e in edges}
    assert states[("param.head.weight", "head")] == "fxflow-edge-wet"
    assert states[("param.stem.weight", "stem")] == "fxflow-edge-dry"
    # measured gradient norms set width and tooltip of wet edges
    wet = [e for e in edges if "fxflow-edge-wet" in e.attrs["class"] and "grad norm" in e.attrs.get("tooltip", "")]
    assert len({e.attrs["penwidth"] for e in wet}) > 3


def test_nested_svg_shows_never_called_cluster():
    nodes, _, clusters = parse_svg(to_svg_text(report_for(NESTED)))
    assert any("fxflow-never-called" in c.classes for c in clusters)
    assert "fxflow-unused" in nodes["param.aux_head.weight"].classes
    assert "examples/render_nested.py:50" in nodes["round_1"].text


# -- depth, focus, budget, folding -----------------------------------------------------------
def test_depth_zero_collapses_and_folds_identical_blocks():
    nodes, edges, _ = parse_dot(report_for(NESTED).to_dot(depth=0))
    fold = nodes["fold.blocks.0-3"].attrs
    assert "x4" in fold["label"] and "fxflow-wet" in fold["class"] and fold["peripheries"] == "2"
    stem = nodes["module.stem"].attrs
    assert "fxflow-dry" in stem["class"] and "fxflow-module" in stem["class"]
    assert "fxflow-cut" in nodes["detach"].attrs["class"]  # top-level nodes stay as they are
    assert not any(key.startswith("param.blocks") for key in nodes)
    assert "never.aux_head" in nodes and "fxflow-unused" in nodes["never.aux_head"].attrs["class"]
    assert all(a in nodes or a.startswith("fxflow.") for e in edges for a in e.ids)


def test_collapsed_box_takes_the_worst_state_and_names_the_cut():
    report = report_for("examples/transfer_frozen.py:DetachedBackbone")
    nodes, _, _ = parse_dot(report.to_dot(depth=0))
    backbone = nodes["module.backbone"].attrs
    assert "fxflow-dry" in backbone["class"]
    assert "fxflow-cut" in nodes["detach"].attrs["class"]


def test_focus_keeps_cuts_dry_parameters_and_their_paths():
    report = report_for(NESTED)
    nodes, _, _ = parse_dot(report.to_dot(focus=True))
    assert "fxflow-cut" in nodes["detach"].attrs["class"]
    assert {"param.stem.weight", "param.stem.bias", "param.gate", "output", "round_1"} <= set(nodes)
    assert not any(k.startswith("param.blocks") or k == "param.head.weight" for k in nodes)
    assert len(nodes) < len(parse_dot(report.to_dot())[0]) / 2


def test_budget_collapses_automatically_and_says_so(capsys):
    report = report_for(NESTED)
    source = build_dot(report, budget=20)
    err = capsys.readouterr().err
    assert "collapsed automatically" in err and "--depth" in err and len(err.strip().splitlines()) == 1
    assert "over the budget of 20" in graph_attrs(source)["label"]
    nodes, _, _ = parse_dot(source)
    assert len([k for k in nodes if not k.startswith("fxflow.legend")]) <= 20


def test_output_is_deterministic_and_free_of_addresses():
    first = report_for(NESTED).to_dot()
    assert first == report_for(NESTED).to_dot()
    assert first == cli_report(NESTED).to_dot()  # a second capture of the same model
    assert not re.search(r"0x[0-9a-f]{6,}", first)
    assert first == report_for(NESTED).to_dot(depth=None, focus=False)


def test_report_without_graph_draws_parameters_only():
    report = cli_report(SEED)
    report.graph = None
    nodes, _, clusters = parse_dot(report.to_dot())
    assert nodes["param.first.weight"].attrs["class"] == "fxflow-param fxflow-dry"
    assert nodes["param.last.bias"].attrs["class"] == "fxflow-param fxflow-wet"
    assert "parameters only" in graph_attrs(report.to_dot())["label"]


# -- golden files ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(GOLDEN_TARGETS))
def test_golden_dot(name):
    source = report_for(GOLDEN_TARGETS[name]).to_dot()
    path = GOLDEN / f"{name}.dot"
    if os.environ.get(REGEN_ENV):
        path.parent.mkdir(exist_ok=True)
        path.write_text(source, encoding="utf-8")
    if not path.exists():
        pytest.fail(f"no golden file {path.name}: run {REGEN_ENV}=1 python -m pytest tests/test_render.py -k golden")
    assert source == path.read_text(encoding="utf-8"), (
        f"DOT of {GOLDEN_TARGETS[name]} changed; if intended: {REGEN_ENV}=1 python -m pytest tests/test_render.py -k golden")



@pytest.mark.parametrize("name", ["seed", "render_nested", "break_unused"])
def test_the_title_and_legend_fit_their_tables(name):
    """Graphviz (dot and graphviz-pure alike) warns when an HTML table is smaller than its cells:
    the legend's fixed-size entries are sized to hold their swatch, words and spacing."""
    found = engine.find_engine()
    completed = subprocess.run(engine.command(found, "svg"), input=report_for(GOLDEN_TARGETS[name]).to_dot().encode(),
                               capture_output=True, check=True)
    assert b"too small" not in completed.stderr, completed.stderr.decode()


# -- the real command ------------------------------------------------------------------------
def _fxflow(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return fxflow_completed(*args, cwd=cwd)


def test_cli_writes_svg_png_and_dot(tmp_path):
    outputs = {ext: tmp_path / f"flow.{ext}" for ext in ("svg", "png", "dot")}
    for ext, path in outputs.items():
        result = _fxflow("render", SEED, "-o", str(path))
        assert result.returncode == 0, result.stderr  # written: render is not the gate
        assert "detach @ examples/seed.py:15" in result.stderr  # the one-line summary
    nodes, _, _ = parse_svg(outputs["svg"].read_bytes())
    assert "fxflow-cut" in nodes["detach"].classes and "examples/seed.py:15" in nodes["detach"].text
    png = outputs["png"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    points = re.search(rb'<svg width="([\d.]+)pt" height="([\d.]+)pt"', outputs["svg"].read_bytes())
    assert abs(width - 2 * float(points[1])) <= 4 and abs(height - 2 * float(points[2])) <= 4  # --scale 2: 2 px a point
    assert outputs["dot"].read_text() == (GOLDEN / "seed.dot").read_text()
    stdout = _fxflow("render", SEED, "-o", "-")
    assert stdout.returncode == 0 and stdout.stdout == outputs["dot"].read_text()
    strict = _fxflow("render", SEED, "-o", str(outputs["svg"]), "--strict")
    assert strict.returncode == 1, strict.stderr  # --strict: exit codes as for check


def test_cli_format_flag_overrides_extension(tmp_path):
    path = tmp_path / "flow.out"
    result = _fxflow("render", SEED, "-o", str(path), "--format", "svg", "--depth", "0")
    assert result.returncode == 0, result.stderr
    assert path.read_bytes().lstrip().startswith(b"<?xml")


# -- the renderer executable -----------------------------------------------------------------
def test_engine_prefers_the_env_override(monkeypatch):
    pure = engine.find_engine()
    monkeypatch.setenv(engine.ENV_VAR, pure.path)
    assert engine.find_engine().path == pure.path
    monkeypatch.setenv(engine.ENV_VAR, "/nonexistent/dot")
    with pytest.raises(FxflowError, match="FXFLOW_DOT"):
        engine.find_engine()


def test_engine_finds_graphviz_pure_off_path(monkeypatch):
    if engine.find_engine().system_dot:
        pytest.skip("a system dot is installed")
    monkeypatch.delenv(engine.ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    found = engine.find_engine()
    assert os.path.basename(found.path).startswith("graphviz-pure") and not found.system_dot


def test_engine_failure_is_an_error_even_with_output(tmp_path):
    with pytest.raises(FxflowError, match="failed"):
        engine.run("digraph { a -> }", "svg")


def test_pdf_without_system_dot_names_the_fix(tmp_path):
    found = engine.find_engine()
    if found.system_dot:
        pytest.skip("a system dot is installed: PDF works")
    with pytest.raises(FxflowError) as error:
        render_file(report_for(SEED), str(tmp_path / "flow.pdf"))
    message = str(error.value)
    assert "PDF" in message and "install Graphviz" in message and "\n" not in message
    assert not (tmp_path / "flow.pdf").exists()


def test_png_scale_sets_the_resolution_and_the_cap_the_size():
    command = engine.command(engine.Engine("dot", True), "png", scale=3)
    assert "-Gdpi=216" in command
    inches = float(next(a for a in command if a.startswith("-Gsize=")).split("=")[1].split(",")[0])
    assert round(inches * 216) == engine.PNG_MAX_PIXELS


def test_unknown_extension_is_one_clear_error(tmp_path):
    with pytest.raises(FxflowError, match="extension"):
        render_file(report_for(SEED), str(tmp_path / "flow.jpeg2000"))
