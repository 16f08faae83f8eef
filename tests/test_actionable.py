"""Issue 31: answers a person can act on. The fix in the output, big models at a glance, and a
picture that never contradicts the table; each checked against a real backward of the same model,
real files and real CLI runs."""
from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
import torch

import fxflow
from fxflow.present.fixes import CUT_CAUSES, FIXES, fix_text, fixes_markdown
from fxflow.present.sarif import sarif_log
from fxflow.present.text import FOLD_ROWS, render_text
from fxflow.render import to_svg_text
from fxflow.prepare.load import split_target
from render_helpers import parse_dot, parse_svg
from tests.models import marker_line, real_grads
from tests.models.causes import Argmax, CastLong, Compare, Detach, Item, NoGrad, float_input
from tests.models.newcomer import (BuiltInForward, ListLayers, ManyLayers, SparseArgmaxMoE, example_inputs,
                                   sparse_moe_inputs)

ROOT = Path(__file__).resolve().parent.parent
NEWCOMER = "tests/models/newcomer.py"


def _checked(model_class, inputs):
    torch.manual_seed(0)
    model = model_class()
    return model, fxflow.check(model, inputs)


def _fix_after(text: str, first_words: str) -> str:
    """The fix line (its wrapped lines joined) that ends the paragraph starting ``first_words``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_words))
    fix = next(i for i in range(start, len(lines)) if lines[i].startswith("fix: "))
    joined = [lines[fix]]
    for line in lines[fix + 1:]:
        if not line.startswith("  "):
            break
        joined.append(line.strip())
    return " ".join(joined)


# -- 1. one line of fix per failing group, chosen by the cause ---------------------------------
@pytest.mark.parametrize("model_class, inputs, paragraph, fix", [
    (Detach, float_input, "detach at", "fix: remove the detach, or use a straight-through estimator"),
    (Argmax, float_input, "argmax at", "fix: `argmax` returns indices, which carry no gradient: for routing, weight "
                                       "the outputs by softmax probabilities or use `F.gumbel_softmax(logits, hard=True)`"),
    (NoGrad, float_input, "no_grad at", "fix: move the call out of `torch.no_grad()`"),
    (Compare, float_input, "gt at", "fix: use a soft threshold such as `torch.sigmoid((x - t) / temperature)`"),
    (CastLong, float_input, "to_int64 at", "fix: keep a floating dtype on the gradient path"),
    (Item, float_input, "item at", "fix: keep the computation in torch ops"),
])
def test_each_cut_ends_with_the_fix_for_its_op(model_class, inputs, paragraph, fix):
    model, report = _checked(model_class, inputs())
    cut = sorted(name for name, grad in real_grads(model, inputs()).items() if grad is None)
    assert cut and sorted(p.name for p in report.problems) == cut  # the real backward agrees on who is dry
    line = _fix_after(render_text(report), paragraph)
    assert line.startswith(fix)
    # for a deliberate freeze: the --allow the line offers accepts exactly these parameters
    patterns = re.findall(r"--allow '([^']+)'", line)
    assert patterns and fxflow.check(model_class(), inputs(), allow=patterns).ok
    assert all(any(re.fullmatch(p.replace(".", r"\.").replace("*", ".*"), name) for p in patterns) for name in cut)


def test_layers_in_a_plain_list_are_told_to_use_module_list():
    model, report = _checked(ListLayers, example_inputs())
    model(*example_inputs()).sum().backward()
    assert model.blocks[0].weight.grad is not None  # reached ...
    assert all(p is not model.blocks[0].weight for p in model.parameters())  # ... and in no optimizer
    text = render_text(report)
    assert "fix: for layers kept in a plain list, use `nn.ModuleList`" in _fix_after(text, "blocks[0].weight")
    assert "--allow" not in _fix_after(text, "blocks[0].weight")  # not something to allow: a bug


def test_docs_print_the_one_fix_table():
    """docs/verdicts.md shows the table fxflow/present/fixes.py holds; FXFLOW_REGEN_DOCS=1 rewrites it."""
    path = ROOT / "docs" / "verdicts.md"
    text = path.read_text()
    begin, end = "<!-- fixes:begin -->\n", "\n<!-- fixes:end -->"
    shown = text[text.index(begin) + len(begin):text.index(end)]
    if os.environ.get("FXFLOW_REGEN_DOCS") == "1" and shown != fixes_markdown():
        path.write_text(text.replace(shown, fixes_markdown()))
        return
    assert shown == fixes_markdown(), "docs/verdicts.md's fix table is stale: FXFLOW_REGEN_DOCS=1 rewrites it"
    assert len(fixes_markdown().splitlines()) == len(FIXES) + 2


def test_sarif_help_and_messages_read_the_same_table():
    model, report = _checked(Argmax, float_input())
    log = sarif_log(report)
    rules = {rule["id"]: rule for rule in log["runs"][0]["tool"]["driver"]["rules"]}
    assert all(fix_text(cause) in rules["cut"]["help"]["text"] for cause in CUT_CAUSES)
    (result,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "cut"]
    fix = result["message"]["text"].splitlines()[-1]
    assert fix == _fix_after(render_text(report), "argmax at")  # the text report's line, word for word


# -- 2. a layer built inside forward -----------------------------------------------------------
def test_a_layer_built_in_forward_is_named_at_the_line_that_builds_it():
    model, report = _checked(BuiltInForward, example_inputs())
    x = example_inputs()[0]
    with torch.no_grad():
        assert not torch.equal(model(x), model(x))  # a fresh, untrained layer on every call
    _, line = marker_line(BuiltInForward, "plant-built-in-forward")
    where = f"{NEWCOMER}:{line}"
    text = render_text(report)
    assert f"At {where} forward builds a new layer (a tensor that requires grad) on every call" in text
    assert "fix: build the layer once in `__init__`" in _fix_after(text, f"At {where}")
    assert report.summary().endswith(f"; 1 layer built inside forward (at {where})")
    _, listed = _checked(ListLayers, example_inputs())  # tensors merely read from a list are not built here
    assert "built inside forward" not in render_text(listed)


# -- 3. big models at a glance ----------------------------------------------------------------
def test_a_148_parameter_table_lists_the_failing_rows_and_one_line_for_the_rest(run_fxflow):
    torch.manual_seed(0)
    model = ManyLayers()
    dry = sorted(name for name, grad in real_grads(model, example_inputs()).items() if grad is None)
    assert len(list(model.parameters())) == 148 > FOLD_ROWS and len(dry) == 4
    code, out, err = run_fxflow("check", f"{NEWCOMER}:ManyLayers", env={"COLUMNS": "100"})
    assert code == 1, err
    lines = out.splitlines()
    table = lines[2:lines.index("", 2)]
    assert sorted(line.split()[0] for line in table[1:-1]) == dry  # one line each: no site wraps
    assert re.fullmatch(r"\.\.\. 144 more parameters without a problem \(.*\): --all lists every row", table[-1])
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", table[-1].split("(")[1])}
    assert sum(counts.values()) == 144
    code, out, _ = run_fxflow("check", f"{NEWCOMER}:ManyLayers", "--all", env={"COLUMNS": "100"})
    lines = out.splitlines()
    assert code == 1 and len(lines[2:lines.index("", 2)]) == 1 + 148


def test_a_cut_by_site_never_wraps_even_in_a_narrow_terminal():
    model, report = _checked(ManyLayers, example_inputs())
    for width in (60, 80, 100):
        text = render_text(report, width=width)
        sites = [line for line in text.splitlines() if "@" in line and line.split()[0].startswith("side.")]
        assert len(sites) == 4 and all(line.endswith(f"detach @ {NEWCOMER}:20") for line in sites)


# -- 5. small things ---------------------------------------------------------------------------
@pytest.mark.parametrize("command", [[], ["check"], ["render"], ["diff"]])
def test_help_lists_the_exit_codes(run_fxflow, command):
    code, out, _ = run_fxflow(*command, "--help")
    assert code == 0
    block = out[out.index("exit codes:"):].splitlines()
    assert [line.split()[0] for line in block[1:] if line.startswith("  ")][:2] == ["0", "1" if command != ["render"] else "2"]


def test_render_quiet_says_nothing_but_the_summary(run_fxflow, tmp_path):
    out_path = tmp_path / "many.svg"
    code, _, loud = run_fxflow("render", f"{NEWCOMER}:ManyLayers", "-o", str(out_path))
    assert code == 0 and "collapsed automatically" in loud  # the case -q must silence
    code, _, quiet = run_fxflow("render", f"{NEWCOMER}:ManyLayers", "-o", str(out_path), "-q")
    assert code == 0 and "collapsed automatically" not in quiet and quiet.startswith("problem: 4 of 148")


def test_docs_say_one_thing_about_wrapping_when_piped():
    text = (ROOT / "docs" / "cli.md").read_text()
    assert "no wrapping when piped" not in text and "100 columns when piped" in text


def test_a_windows_path_is_a_target(run_fxflow):
    assert split_target("C:\\proj\\model.py:Net") == ("C:\\proj\\model.py", "Net")
    assert split_target("C:\\proj\\model.py") == ("C:\\proj\\model.py", None)
    assert split_target("D:/proj/model.py") == ("D:/proj/model.py", None)
    code, out, err = run_fxflow("check", "C:\\proj\\model.py:Net")
    assert code == 2 and err.strip() == "fxflow: error: file not found: C:\\proj\\model.py"


def test_not_verified_names_forward_s_arguments(run_fxflow, write_model, tmp_path):
    write_model(tmp_path, """
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(4, 4)

            def forward(self, batch: dict, lengths):
                return self.a(batch["x"]) * lengths
    """)
    code, out, err = run_fxflow("check", "model.py:Net", "-q", cwd=tmp_path)
    assert code == 2, err
    assert out.strip() == ("not verified: no backward ran for forward(batch, lengths) "
                           "(give --input-size or example_inputs())")


def test_no_machine_path_in_docs():
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        assert not re.search(r"(?<![\w.])/tmp/|pytest-of-", path.read_text()), path.name


# -- pictures ----------------------------------------------------------------------------------
def test_layers_in_a_list_are_drawn_called_and_marked_unregistered(tmp_path):
    model, report = _checked(ListLayers, example_inputs())
    assert all(grad is not None for grad in real_grads(model, example_inputs()).values())
    nodes, edges, clusters = parse_svg(to_svg_text(report))
    assert not [c for c in clusters if "fxflow-never-called" in c.classes]
    for name in ("blocks[0].weight", "blocks[0].bias", "blocks[1].weight", "blocks[1].bias"):
        node = nodes[f"param.{name}"]
        assert "fxflow-failed" in node.classes and f"{name} (unregistered)" in node.text  # fails: never wet
        assert any(edge.title.startswith(f"param.{name}->") for edge in edges)  # wired where it was called


def test_a_layer_built_in_forward_leaves_no_stray_nodes():
    _, report = _checked(BuiltInForward, example_inputs())
    nodes, _, _ = parse_svg(to_svg_text(report))
    assert not [key for key, node in nodes.items() if node.text.startswith("empty")]


def test_the_severed_wire_is_long_enough_to_show_its_dashes():
    from render_helpers import cached_report

    svg = to_svg_text(cached_report("examples/seed.py:Net"))
    path = re.search(r'<g id="edge\d+" class="edge fxflow&#45;edge fxflow&#45;edge&#45;cut">.*?<path ([^>]*)>', svg, re.S)[1]
    dash, gap = (float(v) for v in re.search(r'stroke-dasharray="([\d.]+),([\d.]+)"', path).groups())
    points = [tuple(map(float, p.split(","))) for p in re.findall(r"-?[\d.]+,-?[\d.]+", re.search(r' d="([^"]*)"', path)[1])]
    length = math.dist(points[0], points[-1])
    assert length >= 2 * (dash + gap), f"a {length:.1f}-point wire shows no dashes"


def test_eight_sparse_experts_fit_1600_pixels_and_the_unused_ones_are_not_called_on_this_batch(tmp_path):
    torch.manual_seed(0)
    model = SparseArgmaxMoE()
    report = fxflow.check(model, sparse_moe_inputs())
    missing = {name for name, grad in real_grads(model, sparse_moe_inputs()).items() if grad is None}
    assert any(name.startswith("experts.") for name in missing)  # some experts get no token on this batch
    path = tmp_path / "moe.png"
    report.render(str(path), scale=1, announce=False)
    png = path.read_bytes()
    width = int.from_bytes(png[16:20], "big")
    assert width <= 1600, f"{width} px wide at scale 1"
    _, _, clusters = parse_svg(to_svg_text(report))
    (box,) = [c for c in clusters if c.title == "cluster_never_called" or "fxflow-never-called" in c.classes][:1]
    assert "not called in forward on the checked batch" in box.text


def test_the_legend_counts_the_folds_the_drawing_shows():
    _, report = _checked(ManyLayers, example_inputs())
    svg = to_svg_text(report)
    nodes, _, _ = parse_svg(svg)
    drawn = sorted({int(n) for node in nodes.values() for n in re.findall(r"\bx(\d+)\b", node.text)})
    legend = re.search(r"double, (x\d+(?:/x\d+)*): identical blocks", svg)[1]
    assert drawn == [72] and legend == "/".join(f"x{n}" for n in drawn)


def test_many_unused_modules_share_a_paragraph_and_none_is_lost():
    torch.manual_seed(0)
    model = SparseArgmaxMoE()
    report = fxflow.check(model, sparse_moe_inputs())
    missing = {name for name, grad in real_grads(model, sparse_moe_inputs()).items() if grad is None}
    unused = {p.name for p in report.parameters if p.static == "unused"}
    assert unused and unused <= missing  # the real backward gives them nothing on this batch
    paragraphs = [line for line in render_text(report).splitlines() if " are unused" in line or " is unused" in line]
    assert len(paragraphs) <= 3
    counted = 0
    for line in paragraphs:
        listed = line.split(" are unused" if " are unused" in line else " is unused")[0]
        more = re.search(r" and (\d+) more$", listed)
        counted += len(listed.split(", ")) + (int(more[1]) if more else 0)
    assert counted == len(unused)


def _skipping_moe_over_four_steps():
    """The skipping mixture of experts, checked over four batches: the router sends no token to
    expert 3 on the first (checked) batch, and some on two of the others."""
    from tests.models.skipping_moe import MoE

    torch.manual_seed(0)
    model = MoE()
    batches = [(torch.randn(3, 8),) for _ in range(4)]
    return model, batches, fxflow.check(model, batches[0], steps=4, batches=batches[1:])


def test_an_expert_used_on_some_steps_is_drawn_used_on_some_steps_not_never_called(tmp_path):
    model, batches, report = _skipping_moe_over_four_steps()
    learned = {name: 0 for name, _ in model.named_parameters()}  # per parameter, steps with a gradient
    for batch in batches:
        for name, grad in real_grads(model, batch).items():
            learned[name] += grad is not None and bool(grad.ne(0).any())
    assert learned["experts.3.weight"] == 2 and learned["experts.0.weight"] == 0
    assert real_grads(model, batches[0])["experts.3.weight"] is None  # not called on the checked batch
    path = tmp_path / "moe.dot"
    report.render(str(path), announce=False)
    dot = path.read_text(encoding="utf-8")
    nodes, _, clusters = parse_dot(dot)
    cluster_of = _clusters_holding(dot)
    for name, steps in learned.items():
        parameter = report.parameter(name)
        assert parameter.steps_with_gradient == steps, name
        holders = cluster_of.get("param." + name, [])
        if name.startswith(("experts.0.", "experts.3.")):  # the modules the checked batch did not call
            assert ("cluster_fxflow.never" in holders) == (steps == 0), (name, holders)
            assert ("cluster_fxflow.some_steps" in holders) == (steps > 0), (name, holders)
        if 0 < steps < 4:  # the table says intermittent, "used on some steps only"; so does the picture
            assert parameter.dynamic == "intermittent"
            assert f"({steps} of 4 steps)" in nodes["param." + name].attrs["label"], name
    titles = {c.ids[0]: c.attrs.get("label") for c in clusters}
    assert titles["cluster_fxflow.some_steps.experts.3"] == "experts.3 (Linear): used on 2 of 4 steps"
    assert titles["cluster_fxflow.some_steps"].startswith("used on some steps only")
    assert "used on some steps only" in render_text(report)  # the words the box title repeats
    _, _, drawn = parse_svg(to_svg_text(report))  # the rendered picture: each expert in its own box
    boxes = {c.title: c for c in drawn}
    expert3 = boxes["cluster_fxflow.some_steps.experts.3"]
    assert "fxflow-some-steps" in expert3.classes and expert3.text == "experts.3 (Linear): used on 2 of 4 steps"
    assert "fxflow-never-called" in boxes["cluster_fxflow.never.experts.0"].classes
    assert not [title for title in boxes if title.startswith("cluster_fxflow.never.experts.3")]


def _clusters_holding(dot: str) -> dict[str, list[str]]:
    """DOT node id -> the clusters it is declared in, outermost first."""
    found: dict[str, list[str]] = {}
    stack: list[str] = []
    for line in dot.splitlines():
        stripped = line.strip()
        if stripped.startswith("subgraph "):
            stack.append(stripped[len("subgraph "):-2].strip().strip('"'))
        elif stripped == "}" and stack:
            stack.pop()
        elif stack and re.match(r'^"?[\w.\[\]-]+"? \[', stripped):
            found[stripped.split(" [")[0].strip('"')] = list(stack)
    return found


@pytest.mark.parametrize("method", ["runtime", "symbolic_trace"])
def test_the_tie_wire_keeps_off_the_label_of_the_head_it_feeds(method):
    """The embedding's weight, tied to the head, is wired from the top of the picture to the head:
    it enters the head from the side, so it crosses neither the head's words nor its box's title."""
    from tests.models.newcomer import TiedHead, tied_inputs
    from render_helpers import crossings, edge_points, text_boxes

    model = TiedHead()
    assert model.lm_head.weight is model.embed.weight
    report = fxflow.check(model, tied_inputs(), capture_methods=[method])
    assert report.trace.method == method and report.ok
    assert real_grads(model, tied_inputs())["embed.weight"] is not None
    svg = to_svg_text(report)
    _, edges, clusters = parse_svg(svg)
    (tie,) = [edge for edge in edges if "fxflow-tie" in edge.classes]
    wire, head = tie.title.split(":")[0], tie.title.split("->")[1].split(":")[0]
    assert wire.startswith("param.embed.weight->") and tie.title.endswith(":e")  # into the head's east side
    labels = text_boxes(svg, head) + [box for c in clusters if c.title == "cluster_lm_head" for box in text_boxes(svg, c.title)]
    assert len(labels) >= 2  # the head's words (and, in runtime capture, its box's title)
    assert not crossings(edge_points(svg, wire), labels)


@pytest.mark.parametrize("model", ["sequential", "tied", "dead relu"])
def test_the_legend_is_no_wider_than_a_small_drawing(model):
    """Measured in the rendered SVG: the legend of a tiny model is one column, never wider than the
    drawing under it, and lists only what the drawing shows."""
    from fxflow.render import build_view
    from fxflow.render.legend import legend_entries
    from render_helpers import drawing_width, legend_box
    from tests.models.dead_relu import DeadRelu
    from tests.models.newcomer import TiedHead, tied_inputs

    made = {"sequential": (lambda: torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)),
                           lambda: (torch.randn(3, 4),)),
            "tied": (TiedHead, tied_inputs), "dead relu": (DeadRelu, lambda: (torch.randn(4, 4),))}[model]
    _, report = _checked(made[0], made[1]())
    svg = to_svg_text(report)
    words = [w for _, w in legend_entries(build_view(report))]
    left, top, right, bottom = legend_box(svg, words)
    width = drawing_width(svg)
    assert right - left <= width, f"legend {right - left:.0f} pt wide over a {width:.0f} pt drawing"
    assert len(words) <= 7 and not any(w.startswith(("cut", "frozen", "zero")) for w in words)
