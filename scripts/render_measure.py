"""Measure the pictures with real Graphviz and with graphviz-pure: size and wires over words.

    python scripts/render_measure.py ENGINE [ENGINE ...]   # e.g. /usr/bin/dot graphviz-pure

For the examples and the models of issue 31, prints one Markdown row per model and engine: the
PNG's size at ``--scale 1``, the wires that cross a module box's title, and the wires that cross
the words of a node they do not end at (text boxes estimated from font size, as the tests do,
and cut to the outline of their node or box).
Real Graphviz is for measuring only: CI renders with graphviz-pure.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ("seed.py:Net", "seed_fixed.py:Net", "render_nested.py:Net", "transfer_frozen.py:DetachedBackbone",
            "break_threshold.py:Net", "break_unused.py:Net", "hidden_no_grad.py:Net", "hidden_checkpoint.py:Net",
            "hf_gpt2_cut.py:DetachedMlpGpt2", "hf_planted_cut.py:FrozenEmbeddingsLlama")


def _issue_models():
    """(name, report) for the models of issue 31's pictures."""
    import torch

    import fxflow
    from tests.models.newcomer import (ListLayers, SparseArgmaxMoE, TiedHead, example_inputs, gpt2_detached_block,
                                       gpt2_inputs, sparse_moe_inputs, tied_inputs)
    from tests.models.skipping_moe import MoE

    torch.manual_seed(0)
    yield "8 argmax-routed experts", fxflow.check(SparseArgmaxMoE(), sparse_moe_inputs())
    yield "4-layer GPT-2, detaching block", fxflow.check(gpt2_detached_block(), gpt2_inputs())
    torch.manual_seed(0)
    yield "layers in a python list", fxflow.check(ListLayers(), example_inputs())
    torch.manual_seed(0)
    model, batches = MoE(), [(torch.randn(3, 8),) for _ in range(4)]
    yield "intermittent experts (4 steps)", fxflow.check(model, batches[0], steps=4, batches=batches[1:])
    torch.manual_seed(0)
    yield "tied head", fxflow.check(TiedHead(), tied_inputs())


def wires_over_words(svg: str) -> tuple[int, int]:
    """(wires crossing a box's title, wires crossing the words of a node they do not end at)."""
    from render_helpers import crossings, edge_points, parse_svg, word_boxes

    nodes, edges, clusters = parse_svg(svg)
    titles = [word_boxes(svg, c.title) for c in clusters]
    words = {key: word_boxes(svg, key) for key in nodes}
    over_titles = over_words = 0
    for edge in edges:
        wire = re.sub(r":\w+$", "", edge.title)
        ends = {end.split(":")[0] for end in edge.title.split("->")}
        points = edge_points(svg, wire)
        over_titles += any(crossings(points, boxes) for boxes in titles)
        over_words += any(crossings(points, boxes) for key, boxes in words.items() if key not in ends)
    return over_titles, over_words


def main(engines: list[str]) -> int:
    os.chdir(ROOT)  # source lines read examples/..., as in the README
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from zoo.vision_ops import define_nms_if_missing

    from fxflow.render import render_file, to_svg_text
    from fxflow.render.engine import ENV_VAR, png_size
    from render_helpers import cli_report

    define_nms_if_missing()  # transformers imports torchvision, whose wheel may not match torch
    reports = [(target, cli_report("examples/" + target)) for target in EXAMPLES] + list(_issue_models())
    print("| model | engine | PNG x1 px | wires over a box title | wires over a node's words |")
    print("|---|---|---|---:|---:|")
    for name, report in reports:
        for engine in engines:
            os.environ[ENV_VAR] = engine
            with tempfile.TemporaryDirectory() as folder:
                png = Path(folder) / "picture.png"
                render_file(report, str(png), scale=1, announce=False)
                width, height = png_size(png.read_bytes())
            titles, words = wires_over_words(to_svg_text(report))
            print(f"| {name} | {Path(engine).name} | {width}x{height} | {titles} | {words} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["graphviz-pure"]))
