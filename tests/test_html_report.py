"""The HTML report in a real browser: Debian's chromium, driven by Playwright's Python package.

Playwright's own browser download cannot work offline, so the tests launch the system chromium
(``apt-get install -y chromium``, which .ci/run does). They are skipped, with that reason, only
where chromium or the playwright package is missing. Screenshots go to pytest's tmp folder.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from fxflow.render import render_file
from render_helpers import cached_report

CHROMIUM = os.environ.get("FXFLOW_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SEED = "examples/seed.py:Net"
GPT2 = "examples/hf_gpt2_cut.py:DetachedMlpGpt2"

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed (pip install playwright)")
if not os.path.exists(CHROMIUM):
    pytest.skip(f"chromium is not installed at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def seed_html(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "seed.html"
    render_file(cached_report(SEED), str(path), announce=False)
    return path


class Page:
    """One opened report, with the console errors it logged."""

    def __init__(self, browser, path: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.errors: list[str] = []
        self.page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        started = time.perf_counter()
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("body[data-ready=true]")
        self.seconds = time.perf_counter() - started

    def node(self, key: str):
        """The SVG group Graphviz drew for the item ``key``."""
        return self.page.locator("g.node", has=self.page.locator(f'title:text-is("{key}")'))

    def classes(self, key: str) -> list[str]:
        return (self.node(key).get_attribute("class") or "").split()

    def in_viewport(self, key: str) -> bool:
        box = self.node(key).bounding_box()
        area = self.page.locator("#fx-diagram").bounding_box()
        middle_x, middle_y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        return area["x"] <= middle_x <= area["x"] + area["width"] and area["y"] <= middle_y <= area["y"] + area["height"]


@pytest.fixture
def seed_page(browser, seed_html, tmp_path):
    page = Page(browser, seed_html)
    yield page
    page.page.screenshot(path=str(tmp_path / "seed_report.png"))
    page.page.close()


def test_the_page_loads_without_console_errors(seed_page):
    assert seed_page.errors == []
    assert seed_page.page.locator("#fx-table tbody tr").count() == 6
    assert seed_page.node("detach").count() == 1


def test_search_highlights_the_parameter(seed_page):
    seed_page.page.fill("#fx-search", "first.weight")
    assert "fx-hit" in seed_page.classes("param.first.weight")
    assert "fx-hit" not in seed_page.classes("param.last.weight")
    assert seed_page.page.inner_text("#fx-search-count") == "1 found"
    assert seed_page.errors == []


def test_clicking_the_cut_shows_its_line_and_reason(seed_page):
    seed_page.node("detach").click()
    panel = seed_page.page.inner_text("#fx-panel")
    assert "examples/seed.py:15" in panel
    assert "detach() returns a tensor with no autograd history" in panel
    assert "16x32" in panel and "float32" in panel
    assert "fx-selected" in seed_page.classes("detach")


def test_go_to_cut_brings_the_cut_into_view(seed_page):
    diagram = seed_page.page.locator("#fx-diagram")
    box = diagram.bounding_box()
    seed_page.page.mouse.move(box["x"] + 5, box["y"] + 5)  # zoom far into the top-left corner
    for _ in range(12):
        seed_page.page.mouse.wheel(0, -400)
    assert not seed_page.in_viewport("detach")
    seed_page.page.click("#fx-goto-cut")
    assert seed_page.in_viewport("detach")
    assert "examples/seed.py:15" in seed_page.page.inner_text("#fx-panel")


def test_a_table_row_lights_up_the_path_to_the_cut(seed_page):
    seed_page.page.click('#fx-table tr[data-name="first.weight"]')
    on_path = {key for key in ("param.first.weight", "first", "relu", "middle", "relu_1", "detach", "last", "output")
               if "fx-path" in seed_page.classes(key)}
    assert on_path == {"param.first.weight", "first", "relu", "middle", "relu_1", "detach"}  # it ends at the cut
    assert "fx-path" not in seed_page.classes("param.last.weight")
    assert seed_page.page.locator("svg.fx-dim").count() == 1
    assert seed_page.page.locator("g.edge.fx-path").count() >= 5
    seed_page.page.click('#fx-table tr[data-name="last.weight"]')
    assert {"param.last.weight", "last", "output"} <= {k for k in ("param.last.weight", "last", "output")
                                                       if "fx-path" in seed_page.classes(k)}
    assert "fx-path" not in seed_page.classes("detach")


def test_expand_and_collapse_switch_views(seed_page):
    seed_page.page.select_option("#fx-view", "depth0")
    seed_page.node("module.middle").click()
    seed_page.page.click("#fx-panel button")
    assert seed_page.page.input_value("#fx-view") != "depth0"
    assert seed_page.node("param.middle.weight").count() == 1  # drawn open again
    assert seed_page.errors == []


def test_sorting_the_table_by_grad_norm(seed_page):
    header = seed_page.page.locator('#fx-table th[data-key="norm"]')
    header.click()
    header.click()  # descending: the largest measured norm first
    first = seed_page.page.locator("#fx-table tbody tr").first.get_attribute("data-name")
    assert first == "last.weight"


@pytest.fixture(scope="module")
def gpt2_html(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "gpt2.html"
    render_file(cached_report(GPT2), str(path), announce=False)
    return path


def test_a_gpt2_sized_report_opens_quickly_and_is_small(browser, gpt2_html, tmp_path):
    assert gpt2_html.stat().st_size < 600_000  # it was 2.8 MB with every depth pre-rendered
    page = Page(browser, gpt2_html)
    try:
        assert page.seconds < 2.0, page.seconds
        assert page.errors == []
        page.page.click("#fx-goto-cut")
        assert page.in_viewport("detach")
        assert "examples/hf_gpt2_cut.py:24" in page.page.inner_text("#fx-panel")
        page.page.screenshot(path=str(tmp_path / "gpt2_report.png"))
    finally:
        page.page.close()


# -- issue 21: what the report shows agrees with the table -------------------------------------
def test_the_table_says_what_cut_each_parameter(seed_page):
    cells = seed_page.page.locator('#fx-table tr[data-name="first.weight"] td')
    assert cells.last.inner_text() == "detach @ examples/seed.py:15"
    assert seed_page.page.locator('#fx-table tr[data-name="last.weight"] td').last.inner_text() == ""
    assert seed_page.page.locator("#fx-table th").last.inner_text() == "cut by"


def test_rows_that_fail_are_highlighted_including_dynamic_failures(browser, tmp_path):
    import torch

    from fxflow.pipeline import check
    from models.render_models import DeadRelu

    torch.manual_seed(0)
    report = check(DeadRelu(), (torch.randn(4, 4),), seed=0)
    path = tmp_path / "dead.html"
    render_file(report, str(path), announce=False)
    page = Page(browser, path)
    try:
        for parameter in report.parameters:
            row = page.page.locator(f'#fx-table tr[data-name="{parameter.name}"]')
            assert ("fx-row-fail" in (row.get_attribute("class") or "")) == parameter.problem, parameter.name
            dynamic = row.locator("td").nth(3)
            failed = "fx-dynamic-fail" in (dynamic.get_attribute("class") or "")
            assert failed == (parameter.dynamic == "zero"), parameter.name  # static says reachable: only the run fails it
        assert "fxflow-failed" in page.classes("param.dead.weight")  # and the drawing agrees with the row
    finally:
        page.page.close()


def _stroke_width(page: Page, key: str) -> float:
    return page.page.evaluate("""key => {
        const title = [...document.querySelectorAll('g.node > title')].find(t => t.textContent === key);
        return parseFloat(getComputedStyle(title.parentNode.querySelector('polygon, path, ellipse')).strokeWidth);
    }""", key)


def test_search_lights_up_the_drawing_not_only_the_count(seed_page):
    before = _stroke_width(seed_page, "param.first.weight")
    seed_page.page.fill("#fx-search", "first")
    assert seed_page.page.inner_text("#fx-search-count") == "3 found"
    assert _stroke_width(seed_page, "param.first.weight") >= 5 > before
    assert _stroke_width(seed_page, "first") >= 5
    assert _stroke_width(seed_page, "param.last.weight") < 5


@pytest.mark.parametrize("width", [1400, 800])
def test_the_side_panel_never_covers_the_drawing(browser, gpt2_html, width):
    page = Page(browser, gpt2_html)
    try:
        page.page.set_viewport_size({"width": width, "height": 900})
        page.page.click("#fx-fit")
        diagram = page.page.locator("#fx-diagram").bounding_box()
        side = page.page.locator("#fx-side").bounding_box()
        overlap_x = min(diagram["x"] + diagram["width"], side["x"] + side["width"]) - max(diagram["x"], side["x"])
        overlap_y = min(diagram["y"] + diagram["height"], side["y"] + side["height"]) - max(diagram["y"], side["y"])
        assert overlap_x <= 0 or overlap_y <= 0, (diagram, side)
        assert page.in_viewport("output") or page.in_viewport("detach")
        page.page.click("#fx-toggle-side")  # the table can make way for the drawing
        assert page.page.locator("#fx-side").is_hidden()
        grown = page.page.locator("#fx-diagram").bounding_box()
        assert grown["width"] * grown["height"] > diagram["width"] * diagram["height"]
    finally:
        page.page.close()


def test_fit_to_screen_stays_readable_in_every_view(browser, gpt2_html):
    page = Page(browser, gpt2_html)
    try:
        for view in page.page.eval_on_selector_all("#fx-view option", "options => options.map(o => o.value)"):
            page.page.select_option("#fx-view", view)
            page.page.click("#fx-fit")
            heights = page.page.eval_on_selector_all(
                "g.node text", "texts => texts.map(t => t.getBoundingClientRect().height).filter(h => h > 0)")
            assert max(heights) >= 6, (view, max(heights))  # an 11-point label, at least 6 pixels tall
    finally:
        page.page.close()


def test_the_gradient_health_chart_of_a_watched_loop(browser, tmp_path):
    """watch(steps=N): one bar pair per layer, the flagged layer shown over the steps, a click
    on another layer's bars shows that one instead."""
    import torch

    import fxflow
    from test_health import Damped, run

    torch.manual_seed(0)
    model = Damped()
    with fxflow.watch(model, steps=4) as watched:
        run(model, torch.optim.SGD(model.parameters(), lr=0.01), [torch.randn(8, 6) for _ in range(4)])
    path = tmp_path / "health.html"
    render_file(watched.report, str(path), announce=False)
    page = Page(browser, path)
    try:
        assert page.errors == []
        layers = page.page.locator("#fx-health .fx-layer")
        assert [layers.nth(i).get_attribute("data-layer") for i in range(layers.count())] == ["first", "middle", "last"]
        assert page.page.locator("#fx-health .fx-bar").count() == 6
        visible = page.page.locator("#fx-health-steps svg:visible")
        assert visible.count() == 1 and visible.get_attribute("data-layer") == "first"  # flagged: vanishing
        assert "first: vanishing since step 3" in page.page.locator("#fx-health-flags").inner_text()
        layers.nth(2).click()
        assert page.page.locator("#fx-health-steps svg:visible").get_attribute("data-layer") == "last"
        page.page.locator("#fx-health").screenshot(path=str(tmp_path / "health.png"))
    finally:
        page.page.close()


# -- issue 31: the first view, the side panel, whole sites ---------------------------------------
_SMALLEST_TEXT_PX = """key => {
    const title = [...document.querySelectorAll('g.node > title')].find(t => t.textContent === key);
    const scale = title.ownerSVGElement.getScreenCTM().a;  // screen pixels per SVG unit (a point)
    return Math.min(...[...title.parentNode.querySelectorAll('text')].map(
        t => parseFloat(t.getAttribute('font-size')) * scale));
}"""


@pytest.fixture(scope="module")
def gpt2_4_html(tmp_path_factory) -> Path:
    import fxflow
    from tests.models.newcomer import gpt2_detached_block, gpt2_inputs

    path = tmp_path_factory.mktemp("report") / "gpt2_4.html"
    torch_model = gpt2_detached_block(layers=4)
    render_file(fxflow.check(torch_model, gpt2_inputs()), str(path), announce=False)
    return path


def test_a_4_layer_gpt2_opens_on_the_cut_with_text_at_least_12_px(browser, gpt2_4_html, tmp_path):
    assert gpt2_4_html.stat().st_size < 600_000  # 1.03 MB with every view of a small GPT-2 pre-rendered
    page = Page(browser, gpt2_4_html)
    try:
        assert page.errors == []
        assert page.in_viewport("detach")  # no click: the first view is on the cut
        assert page.page.evaluate(_SMALLEST_TEXT_PX, "detach") >= 12
        page.page.screenshot(path=str(tmp_path / "gpt2_4_first_view.png"))
    finally:
        page.page.close()


def test_switching_views_clears_the_side_panel(seed_page):
    hint = seed_page.page.inner_text("#fx-panel")
    seed_page.node("detach").click()
    assert "examples/seed.py:15" in seed_page.page.inner_text("#fx-panel")
    options = seed_page.page.locator("#fx-view option")
    assert options.count() > 1
    seed_page.page.select_option("#fx-view", options.nth(1).get_attribute("value"))
    assert seed_page.page.inner_text("#fx-panel") == hint  # nothing of the last view's selection stays


_LINES_OF = """([selector, words]) => {
    const element = document.querySelector(selector);
    const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const at = node.textContent.indexOf(words);
        if (at < 0) continue;
        const range = document.createRange();
        range.setStart(node, at);
        range.setEnd(node, at + words.length);
        return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size;
    }
    return 0;
}"""


@pytest.mark.parametrize("width", [1400, 1000])
def test_a_file_and_line_never_splits_across_lines(browser, seed_html, width):
    page = Page(browser, seed_html)
    try:
        page.page.set_viewport_size({"width": width, "height": 900})
        # a long path may break after its folder, the file and line never
        assert page.page.evaluate(_LINES_OF, ['#fx-table tr[data-name="first.weight"] td.fx-cut-by', "seed.py:15"]) == 1
        page.node("detach").click()
        assert page.page.evaluate(_LINES_OF, ["#fx-panel dl", "examples/seed.py:15"]) == 1
    finally:
        page.page.close()
