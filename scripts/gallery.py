"""Write docs/gallery.md and docs/gallery/*: each example's picture next to its code and check text.

    python scripts/gallery.py            # from the repository root; rewrites the committed files

Each entry is drawn exactly as ``fxflow render TARGET -o FILE.EXT [OPTIONS]`` would draw it
(same seeding, loading and analysis), so the gallery doubles as a record of the CLI's output.
Some entries are also written as PNG and as the interactive HTML report; with Playwright and
chromium installed, the reports are opened in the browser and screenshotted too.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Entry:
    name: str  # file stem under docs/gallery/
    target: str
    title: str
    blurb: str
    options: dict = field(default_factory=dict)  # depth=, focus=
    formats: tuple[str, ...] = ("svg",)  # the first is shown inline; html gets a screenshot


GALLERY = (
    Entry("seed", "examples/seed.py:Net", "A detach in the middle of forward",
          "The seed tutorial's bug. `detach` (red, with its line) severs the wire: the severed edge is dashed red, "
          "everything upstream is dry (sand), and only `last` learns (green; edge width is the gradient norm that "
          "flowed, log scale). The legend lists only what the picture uses, drawn with the same shapes and lines.",
          formats=("svg", "png", "html")),
    Entry("hf_gpt2_cut", "examples/hf_gpt2_cut.py:DetachedMlpGpt2", "A 12-layer GPT-2 with one planted cut, default view",
          "A real architecture (tiny config, random weights, about 700 graph nodes). By default the int and mask "
          "nodes are hidden (counted in the title), the modules holding the dry parameters and the cut stay open "
          "(`transformer.h.5`, its `mlp`), and the healthy blocks fold into `h.0-4 x5` and `h.6-11 x6`. "
          "The HTML report adds search, zoom, \"go to cut\", the parameter table and every depth level.",
          formats=("png", "svg", "html")),
    Entry("render_nested", "examples/render_nested.py:Net", "Every verdict in one small transformer-shaped model",
          "Clusters nest as the modules nest (`blocks.0 (Block)` > `blocks.0.mlp (MLP)`). The stem is cut off by a "
          "detach, `gate` is rounded (orange: its gradient arrives as an exact zero), `pos` is frozen (grey), and "
          "`aux_head` is never called, so it sits in a dashed \"never called\" cluster instead of vanishing."),
    Entry("render_nested_depth0", "examples/render_nested.py:Net", "The same model with `--depth 0`",
          "Each top-level module collapses into one box colored by the worst state inside, with counts; the four "
          "identical blocks fold into one box marked x4. Above 300 nodes fxflow picks a depth like this by itself "
          "and says so in the title and on stderr.", {"depth": 0}),
    Entry("render_nested_focus", "examples/render_nested.py:Net", "The same model with `--focus`",
          "Only the cut nodes, the dry parameters and the paths from them to the output; modules with nothing "
          "wrong inside collapse.", {"focus": True}),
    Entry("transfer_frozen_detached", "examples/transfer_frozen.py:DetachedBackbone", "A backbone frozen by detaching",
          "The backbone's features are detached: its parameters are cut (dry), which `--allow 'backbone.*'` "
          "accepts as deliberate."),
    Entry("transfer_frozen_frozen", "examples/transfer_frozen.py:FrozenBackbone", "A backbone frozen with requires_grad_(False)",
          "The preferred way: frozen parameters are grey, nothing is cut, and the check passes."),
    Entry("seed_fixed", "examples/seed_fixed.py:Net", "The seed with the detach removed",
          "All soil wet: every parameter is green, and `last`'s numbers are those of the broken model."),
    Entry("break_frozen", "examples/break_frozen.py:Net", "Try it yourself #1: `first.requires_grad_(False)`",
          "Frozen parameters are grey and do not count against the exit code; the rest learns."),
    Entry("break_threshold", "examples/break_threshold.py:Net", "Try it yourself #2: `(h > 0).float()`",
          "The comparison returns a bool tensor: the `gt` node is the cut, and everything before it is dry."),
    Entry("break_unused", "examples/break_unused.py:Net", "Try it yourself #3: a layer never called",
          "`fourth` is listed by `named_parameters()` but forward never calls it: a dashed \"never called\" cluster."),
    Entry("hidden_no_grad", "examples/hidden_no_grad.py:Net", "A no-grad region inside a submodule",
          "torch.fx drops `set_grad_enabled(False)` silently; fxflow records the region and names its line."),
    Entry("hidden_inference_mode", "examples/hidden_inference_mode.py:Net", "`torch.inference_mode()` in forward",
          "torch.export drops it too; the run-time capture keeps it, and the picture says which capture ran."),
    Entry("hidden_detach_inplace", "examples/hidden_detach_inplace.py:Net", "An in-place `detach_()`",
          "The fx graph still shows the old edge; fxflow follows the mutation and cuts every later read."),
    Entry("hidden_autograd_function", "examples/hidden_autograd_function.py:Net", "A custom autograd.Function",
          "Its backward returns None for an input: fxflow runs that backward on stand-in tensors during the "
          "analysis and names ScaleGrad.apply as the cut."),
    Entry("hidden_numpy", "examples/hidden_numpy.py:Net", "A trip through `.tolist()` and back",
          "The run-time capture links the tensor that comes back to the one that left: the cut is at `tolist`."),
    Entry("hidden_checkpoint", "examples/hidden_checkpoint.py:Net", "A reentrant checkpoint whose inputs need no grad",
          "The checkpointed block never learns, a real silent bug; the real backward agrees."),
    Entry("hf_planted_cut", "examples/hf_planted_cut.py:FrozenEmbeddingsLlama", "A Hugging Face LLaMA with no_grad embeddings",
          "A real architecture (tiny config, random weights): the embedding node under `no_grad` is the one red node."),
)


def _report(target: str, seed: int = 0):
    import torch

    from fxflow.prepare.load import load_target
    from fxflow.pipeline import check

    torch.manual_seed(seed)
    loaded = load_target(target)
    report = check(loaded.model, loaded.inputs, seed=seed, target=target, infer=False)
    report.notes[:0] = loaded.notes
    return report


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _screenshot(page_path: Path) -> Path | None:
    """A screenshot of the HTML report after "go to cut", or None without Playwright or chromium."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not os.path.exists(CHROMIUM):
        return None
    shot = page_path.with_name(page_path.stem + "_report.png")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 860})
        page.goto(page_path.resolve().as_uri())
        page.wait_for_selector("body[data-ready=true]")
        page.click("#fx-goto-cut")
        page.screenshot(path=str(shot))
        browser.close()
    return shot


def _flags(options: dict) -> str:
    flags = []
    if options.get("depth") is not None:
        flags.append(f"--depth {options['depth']}")
    if options.get("focus"):
        flags.append("--focus")
    return (" " + " ".join(flags)) if flags else ""


def build(out_md: Path, out_dir: Path) -> list[Path]:
    """Render every entry; returns the files written."""
    from fxflow.present.text import render_text
    from fxflow.render import render_file

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    reports = {}
    parts = [
        "# Gallery",
        "",
        "Generated by `python scripts/gallery.py`; do not edit by hand. Each picture is what",
        "`fxflow render TARGET -o FILE.svg` draws; open the SVG in a browser for tooltips (op, shape, dtype,",
        "source line, gradient norm) on every node and edge, or the `.html` reports for search, zoom, a",
        "parameter table and expandable modules. Colors: green wet (the gradient arrives),",
        "sand dry (upstream of a cut), red the cutting node, orange zero gradient, pink a parameter the real",
        "backward failed (no, zero or NaN gradient, though the graph reaches it), grey frozen, dashed unused.",
        "The legend under each title lists only what that picture draws.",
        "",
    ]
    shown_code: set[str] = set()
    for entry in GALLERY:
        report = reports.get(entry.target) or reports.setdefault(entry.target, _report(entry.target))
        files = []
        for extension in entry.formats:
            path = out_dir / f"{entry.name}.{extension}"
            render_file(report, str(path), depth=entry.options.get("depth"), focus=entry.options.get("focus", False),
                        announce=False)
            files.append(path)
        written.extend(files)
        file = entry.target.rsplit(":", 1)[0]
        commands = [f"fxflow render {entry.target} -o {p.name}{_flags(entry.options)}" for p in files]
        parts += [f"## {entry.title}", "", entry.blurb, "", "```", *commands, "```", "",
                  f"![{entry.title}](gallery/{files[0].name})", ""]
        others = [f"[{p.suffix[1:].upper()}](gallery/{p.name})" for p in files[1:]]
        if others:
            parts += ["Also as " + ", ".join(others) + " (download the HTML and open it: it needs no server).", ""]
        html = next((p for p in files if p.suffix == ".html"), None)
        shot = _screenshot(html) if html is not None else None
        if shot is not None:
            written.append(shot)
            parts += [f"The HTML report in chromium, after \"go to cut\":", "", f"![HTML report](gallery/{shot.name})", ""]
        if file not in shown_code:
            shown_code.add(file)
            code = (ROOT / file).read_text(encoding="utf-8").rstrip()
            parts += [f"<details><summary>Model code: <code>{file}</code></summary>", "", "```python", code, "```",
                      "", "</details>", ""]
        if not entry.options:
            # the CLI's words (--allow, --all), as `fxflow check` prints them; report.table() speaks the API's
            parts += [f"`fxflow check {entry.target}`:", "", "```", render_text(report, width=None).rstrip(), "```", ""]
    out_md.write_text("\n".join(parts).rstrip() + "\n", encoding="utf-8")
    written.append(out_md)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs"), help="docs folder (default: the repository's docs/)")
    options = parser.parse_args(argv)
    os.chdir(ROOT)  # source lines read examples/..., as in the README
    sys.path.insert(0, str(ROOT))
    import torchvision_env  # noqa: F401  (the examples import transformers, which imports torchvision)
    docs = Path(options.out)
    for path in build(docs / "gallery.md", docs / "gallery"):
        print(path.relative_to(docs.parent) if docs.parent in path.parents else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
