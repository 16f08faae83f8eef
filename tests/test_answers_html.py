"""Issue 41: the HTML report agrees with the table and stays readable, in a real browser (Debian's
chromium driven by Playwright, as tests/test_html_report.py): the "cut by" column is never clipped, the
legend never scrolls away, the node count is the CLI's, unregistered tensors are not drawn as healthy
and have a legend entry, and "go to cut" is offered only where there is a cut."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

import fxflow
from fxflow.render import render_file
from fxflow.render.legend import UNREGISTERED_WORDS

CHROMIUM = os.environ.get("FXFLOW_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed (pip install playwright)")
if not os.path.exists(CHROMIUM):
    pytest.skip(f"chromium is not installed at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)

LONG_MODEL = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding_projection_layer = nn.Linear(8, 8)
        self.second_projection_layer_name = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.embedding_projection_layer(x).detach()
        return self.head(torch.relu(self.second_projection_layer_name(h)))
'''


class Healthy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x)


class ListLayers(nn.Module):
    """Layers kept in a plain list: the backward reaches them, no optimizer ever gets them."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = [nn.Linear(4, 4), nn.Linear(4, 4)]
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.head(x)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


def _page(browser, path: Path, width: int = 1400):
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready=true]")
    return page


def _html(report: fxflow.Report, folder: Path, name: str) -> Path:
    path = folder / name
    render_file(report, str(path), announce=False)
    return path


@pytest.fixture(scope="module")
def long_paths(tmp_path_factory) -> tuple[fxflow.Report, Path]:
    folder = tmp_path_factory.mktemp("newcomer_models_directory")
    source = folder / "my_transformer_with_detach.py"
    source.write_text(LONG_MODEL)
    namespace: dict = {}
    exec(compile(LONG_MODEL, str(source), "exec"), namespace)
    torch.manual_seed(0)
    report = fxflow.check(namespace["Net"](), torch.randn(4, 8))
    assert report.parameter("embedding_projection_layer.weight").static == "cut"
    return report, _html(report, folder, "long.html")


@pytest.mark.parametrize("width", [1400, 1920])
def test_the_cut_by_column_is_never_clipped(browser, long_paths, width):
    page = _page(browser, long_paths[1], width)
    try:
        sizes = page.evaluate("""() => {
            const side = document.getElementById('fx-side');
            const cells = [...document.querySelectorAll('td.fx-cut-by')];
            return {side: side.clientWidth, scroll: side.scrollWidth, cells: cells.length,
                    right: Math.max(...cells.map(c => c.getBoundingClientRect().right)),
                    edge: side.getBoundingClientRect().right};
        }""")
        assert sizes["cells"] == 6 and sizes["scroll"] <= sizes["side"], sizes  # nothing to scroll sideways to
        assert sizes["right"] <= sizes["edge"] + 0.5, sizes
    finally:
        page.close()


def test_the_legend_stays_in_view_when_the_page_opens_on_the_cut(browser, long_paths):
    page = _page(browser, long_paths[1])
    try:
        legend = page.locator("#fx-legend").bounding_box()
        diagram = page.locator("#fx-diagram").bounding_box()
        assert legend["x"] >= diagram["x"] and legend["y"] >= diagram["y"]
        assert legend["x"] + legend["width"] <= diagram["x"] + diagram["width"]
        assert legend["y"] + legend["height"] <= diagram["y"] + diagram["height"]
        words = page.locator("#fx-legend li span:last-child").all_inner_texts()
        assert "cut: severs the gradient" in words and "wire: severed" in words
        page.locator("#fx-diagram").hover()
        page.mouse.wheel(0, -2000)  # zoom in: the drawing moves, the legend does not
        assert page.locator("#fx-legend").bounding_box() == legend
        drawn = page.evaluate("() => document.querySelector('#fx-diagram svg').textContent")
        assert "cut: severs the gradient" not in drawn  # one legend, beside the drawing, not two
    finally:
        page.close()


def test_the_page_counts_the_graph_s_nodes_as_the_cli_does(browser, long_paths):
    report, path = long_paths
    page = _page(browser, path)
    try:
        assert page.locator("#fx-trace").inner_text() == f"trace: symbolic_trace, {report.trace.nodes} nodes"
        assert page.locator("#fx-view option").first.inner_text().endswith(" boxes drawn)")  # boxes, not nodes
    finally:
        page.close()


def test_go_to_cut_is_offered_only_where_there_is_a_cut(browser, long_paths, tmp_path):
    page = _page(browser, long_paths[1])
    try:
        assert page.locator("#fx-goto-cut").is_visible()
    finally:
        page.close()
    torch.manual_seed(0)
    page = _page(browser, _html(fxflow.check(Healthy(), torch.randn(2, 4)), tmp_path, "healthy.html"))
    try:
        assert page.locator("#fx-goto-cut").is_hidden()
    finally:
        page.close()


def test_unregistered_tensors_are_not_drawn_healthy_and_the_legend_says_why(browser, tmp_path):
    torch.manual_seed(0)
    report = fxflow.check(ListLayers(), torch.randn(2, 4))
    assert report.parameter("blocks[0].weight").static == "unregistered"
    page = _page(browser, _html(report, tmp_path, "list.html"))
    try:
        node = page.locator("g.node", has=page.locator('title:text-is("param.blocks[0].weight")'))
        classes = (node.get_attribute("class") or "").split()
        assert "fxflow-failed" in classes and "fxflow-wet" not in classes
        assert UNREGISTERED_WORDS in page.locator("#fx-legend li span:last-child").all_inner_texts()
    finally:
        page.close()
