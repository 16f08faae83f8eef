"""Helpers for the render tests: build reports like the CLI does, and read DOT and SVG back.

No mocks of Graphviz: SVG and PNG come from the real executable fxflow finds.
"""
from __future__ import annotations

import functools
import html
import os
import re
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
REGEN_ENV = "FXFLOW_REGEN_GOLDEN"

SVG_NS = "{http://www.w3.org/2000/svg}"
XLINK_TITLE = "{http://www.w3.org/1999/xlink}title"


@contextmanager
def in_root() -> Iterator[None]:
    """Run with the repository as working directory, so source lines read ``examples/...``."""
    before = os.getcwd()
    os.chdir(ROOT)
    try:
        yield
    finally:
        os.chdir(before)


def cli_report(target: str, seed: int = 0):
    """The report ``fxflow render TARGET`` draws (same seeding and loading as the CLI)."""
    import torch

    from fxflow.prepare.load import load_target
    from fxflow.pipeline import check

    with in_root():
        torch.manual_seed(seed)
        loaded = load_target(target)
        report = check(loaded.model, loaded.inputs, seed=seed, target=target, infer=False)
        report.notes[:0] = loaded.notes
    return report


@functools.lru_cache(maxsize=None)
def cached_report(target: str):
    """:func:`cli_report`, once per target and test process (tests only read it)."""
    return cli_report(target)


# -- DOT -------------------------------------------------------------------------------------
@dataclass
class DotStatement:
    ids: tuple[str, ...]  # one id for a node, two for an edge
    attrs: dict[str, str]


def _unquote(token: str) -> str:
    if token.startswith('"') and token.endswith('"'):
        return token[1:-1].replace('\\"', '"')
    return token


def _split_attrs(text: str) -> dict[str, str]:
    """``a=1 b="x y" label=<<b>h</b>>`` -> dict; HTML values keep their outer angle brackets."""
    attrs: dict[str, str] = {}
    i = 0
    while i < len(text):
        while i < len(text) and text[i] in " ,\t":
            i += 1
        match = re.compile(r"[A-Za-z_]\w*=").match(text, i)
        if not match:
            break
        key = match.group()[:-1]
        i = match.end()
        if text[i] == '"':
            j = i + 1
            while text[j] != '"' or text[j - 1] == "\\":
                j += 1
            attrs[key] = _unquote(text[i:j + 1])
            i = j + 1
        elif text[i] == "<":
            depth, j = 0, i
            while True:
                depth += {"<": 1, ">": -1}.get(text[j], 0)
                j += 1
                if depth == 0:
                    break
            attrs[key] = text[i:j]
            i = j
        else:
            j = i
            while j < len(text) and text[j] not in " \t":
                j += 1
            attrs[key] = text[i:j]
            i = j
    return attrs


_ID = r'("(?:[^"\\]|\\.)*"|[^\s\[\]"]+)'
_NODE = re.compile(rf"^\s*{_ID} \[(.*)\]$")
_EDGE = re.compile(rf"^\s*{_ID} -> {_ID}(?: \[(.*)\])?$")


def parse_dot(source: str) -> tuple[dict[str, DotStatement], list[DotStatement], list[DotStatement]]:
    """Nodes by id, edges, and clusters (subgraph attributes) of fxflow's own DOT output."""
    nodes: dict[str, DotStatement] = {}
    edges: list[DotStatement] = []
    clusters: list[DotStatement] = []
    current: list[tuple[str, dict[str, str]]] = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("subgraph "):
            current.append((_unquote(stripped[len("subgraph "):-2].strip()), {}))
            continue
        if stripped == "}" and current:
            name, attrs = current.pop()
            clusters.append(DotStatement((name,), attrs))
            continue
        if current and re.match(r"^[A-Za-z_]\w*=", stripped) and "[" not in stripped.split("=", 1)[0]:
            current[-1][1].update(_split_attrs(stripped))
            continue
        edge = _EDGE.match(line)
        if edge:
            edges.append(DotStatement((_unquote(edge.group(1)), _unquote(edge.group(2))), _split_attrs(edge.group(3) or "")))
            continue
        node = _NODE.match(line)
        if node and _unquote(node.group(1)) not in ("graph", "node", "edge"):
            nodes[_unquote(node.group(1))] = DotStatement((_unquote(node.group(1)),), _split_attrs(node.group(2)))
    return nodes, edges, clusters


def graph_attrs(source: str) -> dict[str, str]:
    for line in source.splitlines():
        if line.strip().startswith("graph ["):
            return _split_attrs(line.strip()[len("graph ["):-1])
    return {}


# -- SVG -------------------------------------------------------------------------------------
@dataclass
class SvgNode:
    title: str
    classes: list[str]
    tooltip: str
    text: str


def parse_svg(data: str | bytes) -> tuple[dict[str, SvgNode], list[SvgNode], list[SvgNode]]:
    """Nodes by DOT id, edges and clusters of an SVG written by Graphviz (classes, tooltips, text)."""
    root = ET.fromstring(data)
    nodes: dict[str, SvgNode] = {}
    edges: list[SvgNode] = []
    clusters: list[SvgNode] = []
    for group in root.iter(f"{SVG_NS}g"):
        classes = (group.get("class") or "").split()
        if not classes or classes[0] not in ("node", "edge", "cluster"):
            continue
        title = group.findtext(f"{SVG_NS}title") or ""
        link = next((a for a in group.iter(f"{SVG_NS}a") if a.get(XLINK_TITLE) is not None), None)
        tooltip = link.get(XLINK_TITLE) if link is not None else ""
        text = " ".join(t.text or "" for t in group.iter(f"{SVG_NS}text"))
        item = SvgNode(title, classes[1:], tooltip, text)
        if classes[0] == "node":
            nodes[title] = item
        elif classes[0] == "edge":
            edges.append(item)
        else:
            clusters.append(item)
    return nodes, edges, clusters


# -- SVG geometry ----------------------------------------------------------------------------
Box = tuple[float, float, float, float]  # left, top, right, bottom in SVG user units


def _group(svg: str, title: str) -> str:
    """The SVG of the node, edge or cluster group whose title is ``title`` (an edge's ``:port`` aside)."""
    escaped = re.escape(title.replace("-", "&#45;").replace(">", "&gt;"))  # as Graphviz writes titles
    match = re.search(rf"<title>{escaped}(?::\w+)?</title>(.*?)</g>\s*</g>", svg, re.S)
    assert match, f"no {title} in the SVG"
    return match[1]


def text_boxes(svg: str, title: str) -> list[Box]:
    """The boxes of the text lines of one group, from their anchor, font size and length (Helvetica
    averages about 0.6 of its size per character)."""
    return _text_boxes(_group(svg, title))


def boxes_of_words(svg: str, words: str) -> list[Box]:
    """The boxes of every text line of the picture that reads exactly ``words``."""
    return _text_boxes(svg, words)


def _text_boxes(fragment: str, words: str | None = None) -> list[Box]:
    boxes = []
    for match in re.finditer(r'<text [^>]*text-anchor="(\w+)" x="([-\d.]+)" y="([-\d.]+)"[^>]*font-size="([\d.]+)"'
                             r"[^>]*>([^<]*)</text>", fragment):
        if words is not None and html.unescape(match[5]) != words:
            continue
        anchor, x, y, size = match[1], float(match[2]), float(match[3]), float(match[4])
        width = 0.6 * size * len(html.unescape(match[5]))
        left = {"start": x, "middle": x - width / 2}.get(anchor, x - width)
        boxes.append((left, y - size, left + width, y + 0.25 * size))
    return boxes


def edge_points(svg: str, title: str, samples: int = 40) -> list[tuple[float, float]]:
    """Points along the drawn path of the edge ``title`` (``a->b``): its cubic Bezier pieces sampled."""
    path = re.search(r'<path [^>]*d="([^"]*)"', _group(svg, title))[1]
    points = [tuple(map(float, p.split(","))) for p in re.findall(r"-?[\d.]+,-?[\d.]+", path)]
    found = []
    for start in range(0, len(points) - 3, 3):
        p0, p1, p2, p3 = points[start:start + 4]
        for step in range(samples + 1):
            t = step / samples
            weights = ((1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t * t, t ** 3)
            found.append((sum(w * p[0] for w, p in zip(weights, (p0, p1, p2, p3))),
                          sum(w * p[1] for w, p in zip(weights, (p0, p1, p2, p3)))))
    return found


def crossings(points: list[tuple[float, float]], boxes: list[Box]) -> list[tuple[float, float]]:
    """The points that fall inside any of ``boxes``."""
    return [(x, y) for x, y in points if any(l <= x <= r and t <= y <= b for l, t, r, b in boxes)]


def _coordinates(fragment: str) -> list[tuple[float, float]]:
    points = [tuple(map(float, p.split(","))) for p in re.findall(r"-?[\d.]+,-?[\d.]+", " ".join(
        re.findall(r' (?:points|d)="([^"]*)"', fragment)))]
    for ellipse in re.finditer(r'cx="([-\d.]+)" cy="([-\d.]+)" rx="([-\d.]+)" ry="([-\d.]+)"', fragment):
        cx, cy, rx, ry = (float(v) for v in ellipse.groups())
        points += [(cx - rx, cy - ry), (cx + rx, cy + ry)]
    return points


def word_boxes(svg: str, title: str) -> list[Box]:
    """:func:`text_boxes` of a node or cluster, cut to its outline: Graphviz sizes a shape to its
    words, so what the per-character estimate puts past the outline is the estimate's error."""
    group = _group(svg, title)
    xs, ys = zip(*_coordinates(group))
    return [(max(l, min(xs)), max(t, min(ys)), min(r, max(xs)), min(b, max(ys))) for l, t, r, b in _text_boxes(group)]


def drawing_width(svg: str) -> float:
    """The width of the drawing itself: its nodes and clusters, the title and legend above it aside."""
    xs = [x for group in re.findall(r'<g id="(?:node|clust)\d+" class="(?:node|cluster)[^"]*">(.*?)</g>\s*</g>', svg, re.S)
          for x, _ in _coordinates(group)]
    return max(xs) - min(xs)


def legend_box(svg: str, words: list[str]) -> Box:
    """The box around the legend entries whose words are among ``words`` (their swatches included)."""
    boxes = []
    for match in re.finditer(r'<text [^>]*x="([-\d.]+)" y="([-\d.]+)"[^>]*font-size="([\d.]+)"[^>]*>([^<]*)</text>', svg):
        x, y, size, content = float(match[1]), float(match[2]), float(match[3]), match[4].replace("&#45;", "-")
        if content in words:
            boxes.append((x, y - size, x + 0.6 * size * len(content), y))
    assert boxes, "no legend entry in the SVG"
    swatch = 30  # points left of the words: the swatch and its gap
    return (min(b[0] for b in boxes) - swatch, min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))
