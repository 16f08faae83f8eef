"""fxflow's benchmark: fxflow against the floor and the peers, one process per measurement.

    python tests/benchmarks/bench.py --repeats 4          # everything, medians of 4 alternated runs
    python tests/benchmarks/bench.py --models seed,gpt2   # a subset, prints the table only
    python tests/benchmarks/bench.py --one gpt2 fwd+bwd   # one measurement, JSON on stdout
    python tests/benchmarks/bench.py --render             # the render table (PNG size, times)

The floor, fwd+bwd, is what no gradient-flow checker can beat: import, build the model, one
forward and backward, no capture. export-floor adds one torch.export capture to it. Tools:
fwd+bwd, export-floor, fxflow-check, fxflow-render, torchviz, torchview, torchlens (peers only
where installed). `--repeats N` runs every tool N times, alternated, and reports medians.
Not collected by pytest.
"""
from __future__ import annotations

import time

_PROCESS_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from typing import Any, Callable  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOLS = ("fwd+bwd", "export-floor", "fxflow-check", "fxflow-render", "torchviz", "torchview", "torchlens")
PEERS = {"torchviz": "torchviz", "torchview": "torchview", "torchlens": "torchlens"}


# -- one measurement (child process) ---------------------------------------------------------
def _loss(output: Any) -> Any:
    """A random projection of every floating output that requires grad, as the check's default
    loss; written here so that the floor and the peers never import fxflow."""
    import torch
    from torch.utils._pytree import tree_leaves

    leaves = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    return sum((t * torch.randn_like(t)).sum() for t in leaves)


def _forward_backward(model: Any, inputs: tuple[Any, ...], phases: dict[str, float]) -> None:
    """One forward and backward; on meta weights, under FakeTensorMode (meta has no values)."""
    if any(p.is_meta for p in model.parameters()):
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True):
            _timed(phases, "backward", lambda: _loss(model(*inputs)).backward())
    else:
        _timed(phases, "backward", lambda: _loss(model(*inputs)).backward())


def _timed(phases: dict[str, float], name: str, action: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    result = action()
    phases[name] = time.perf_counter() - started
    return result


def measure(model_name: str, tool: str, workdir: str) -> dict[str, Any]:
    """Run one tool on one model in this process; returns phases, total and peak RSS."""
    sys.path.insert(0, HERE)
    phases: dict[str, float] = {}
    _timed(phases, "import", lambda: __import__("torch"))
    import torch
    from models import MODELS

    torch.manual_seed(0)
    model, inputs = _timed(phases, "build", {**MODELS, **RENDER_MODELS}[model_name])
    extra: dict[str, Any] = {}
    extra_nodes: int | None = None
    if tool == "fwd+bwd":
        _forward_backward(model, inputs, phases)
    elif tool == "export-floor":
        _timed(phases, "capture", lambda: torch.export.export(model, inputs, strict=False))
        _forward_backward(model, inputs, phases)
    elif tool in ("fxflow-check", "fxflow-render"):
        import fxflow

        report = fxflow.check(model, inputs)
        phases.update(report.timings)
        extra_nodes = report.trace.nodes
        if tool == "fxflow-render":
            extra = _render_all(report, phases, workdir)
    elif tool == "torchviz":
        from torchviz import make_dot

        output = _timed(phases, "forward", lambda: model(*inputs))
        graph = _timed(phases, "dot build", lambda: make_dot(_loss(output), params=dict(model.named_parameters())))
        _timed(phases, "render", lambda: graph.render(os.path.join(workdir, "torchviz"), format="svg"))
    elif tool == "torchview":
        from torchview import draw_graph

        graph = _timed(phases, "capture", lambda: draw_graph(model, input_data=list(inputs), depth=3))
        _timed(phases, "render", lambda: graph.visual_graph.render(os.path.join(workdir, "torchview"), format="svg"))
    elif tool == "torchlens":
        import torchlens

        trace = _timed(phases, "capture", lambda: torchlens.trace(model, list(inputs)))
        _timed(phases, "render", lambda: trace.draw(vis_outpath=os.path.join(workdir, "torchlens"),
                                                    vis_fileformat="svg", vis_save_only=True))
    else:
        raise SystemExit(f"unknown tool {tool}")
    return {
        "model": model_name,
        "tool": tool,
        "phases": phases,
        "render": extra,
        "nodes": extra_nodes,
        "total_s": time.perf_counter() - _PROCESS_START,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# -- render: the default view, as SVG, PNG at scale 1 and 2, and the HTML report ---------------
def _gpt2_planted_cut() -> tuple[Any, tuple[Any, ...]]:
    from fxflow.prepare.load import load_target

    cwd = os.getcwd()
    os.chdir(ROOT)  # source lines read examples/...
    try:
        loaded = load_target("examples/hf_gpt2_cut.py:DetachedMlpGpt2")
    finally:
        os.chdir(cwd)
    return loaded.model, loaded.inputs


RENDER_MODELS = {"gpt2-12-planted-cut": _gpt2_planted_cut}  # besides models.MODELS
RENDER_TABLE_MODELS = ("gpt2-12-planted-cut", "gpt2", "llama-7b-meta", "synthetic-20k")


def _render_all(report: Any, phases: dict[str, float], workdir: str) -> dict[str, Any]:
    """Time the default view's DOT, SVG, PNG (scale 1 and 2) and HTML; returns sizes."""
    from fxflow.render import build_view
    from fxflow.render.engine import png_size

    dot = _timed(phases, "dot build", lambda: report.to_dot(announce=False))
    _timed(phases, "render", lambda: report.render(os.path.join(workdir, "flow.svg"), announce=False))
    sizes: dict[str, Any] = {"boxes": build_view(report).count(), "dot_bytes": len(dot)}
    for scale in (1, 2):
        path = os.path.join(workdir, f"flow{scale}.png")
        _timed(phases, f"png x{scale}", lambda: report.render(path, scale=scale, announce=False))
        with open(path, "rb") as handle:
            sizes[f"png_x{scale}"] = png_size(handle.read())
    page = os.path.join(workdir, "report.html")
    _timed(phases, "html", lambda: report.render(page, announce=False))
    sizes["html_mib"] = os.path.getsize(page) / 2**20
    return sizes


def render_markdown(results: list[dict[str, Any]]) -> str:
    """The render table of docs/performance.md."""
    lines = ["| model | graph nodes | boxes drawn | DOT + SVG s | PNG x1 px | PNG x2 px | PNG x2 s | HTML s | HTML MiB |",
             "|---|---:|---:|---:|---|---|---:|---:|---:|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | - | - | - | - | - | - | - | error: {r['error']} |")
            continue
        p, sizes = r["phases"], r["render"]
        px = {k: "x".join(str(v) for v in sizes[k]) for k in ("png_x1", "png_x2")}
        lines.append(f"| {r['model']} | {r.get('nodes', '-')} | {sizes['boxes']} | {p['dot build'] + p['render']:.2f} | "
                     f"{px['png_x1']} | {px['png_x2']} | {p['png x2']:.2f} | {p['html']:.2f} | {sizes['html_mib']:.2f} |")
    return "\n".join(lines) + "\n"


# -- the driver ------------------------------------------------------------------------------
def _dot_on_path(env: dict[str, str], workdir: str) -> None:
    """torchviz and torchview call `dot`: give them the renderer fxflow uses when there is none."""
    if shutil.which("dot"):
        return
    pure = shutil.which("graphviz-pure") or os.path.join(os.path.dirname(sys.executable), "graphviz-pure")
    if os.path.exists(pure):
        shim = os.path.join(workdir, "bin")
        os.makedirs(shim, exist_ok=True)
        link = os.path.join(shim, "dot")
        if not os.path.exists(link):
            os.symlink(pure, link)
        env["PATH"] = shim + os.pathsep + env.get("PATH", "")


def run_one(model_name: str, tool: str, timeout: float) -> dict[str, Any]:
    """One measurement in a fresh process; wall time measured from outside too."""
    with tempfile.TemporaryDirectory() as workdir:
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        _dot_on_path(env, workdir)
        started = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, __file__, "--one", model_name, tool, "--workdir", workdir],
                                  capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"model": model_name, "tool": tool, "error": f"timed out after {timeout:.0f} s"}
        wall = time.perf_counter() - started
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"model": model_name, "tool": tool, "error": last[:200], "wall_s": wall}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    return result


def scaling(sizes: list[int]) -> list[dict[str, Any]]:
    """Static walk + reconcile time on synthetic graphs of growing size (in this process)."""
    sys.path.insert(0, HERE)
    import fxflow
    from models import synthetic

    rows = []
    for size in sizes:
        model, inputs = synthetic(size)
        report = fxflow.check(model, inputs, backward=False)
        rows.append({"nodes": report.trace.nodes, "annotate_s": report.timings.get("annotate", 0.0),
                     "walk_s": report.timings.get("static walk", 0.0), "gc_s": report.timings.get("gc", 0.0),
                     "reconcile_s": report.timings.get("reconcile", 0.0)})
    return rows


def _available(tool: str) -> bool:
    module = PEERS.get(tool)
    if module is None:
        return True
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def medians(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per model and tool: the run of median wall time, its peak RSS the runs' median, and
    fxflow check's ratios to each other tool as the median of the per-repeat ratios (runs next to
    each other in time share the machine's load)."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        grouped.setdefault((run["model"], run["tool"]), []).append(run)
    rows = []
    for (model, tool), group in grouped.items():
        done = sorted((r for r in group if "error" not in r), key=lambda r: r["wall_s"])
        if not done:
            rows.append(group[0])
            continue
        row = dict(done[(len(done) - 1) // 2], repeats=len(done))
        row["peak_rss_mib"] = statistics.median(r["peak_rss_mib"] for r in done)
        rows.append(row)
        if tool != "fxflow-check":
            continue
        row["ratios"] = {}
        for other in TOOLS:
            pairs = [(c["wall_s"], o["wall_s"]) for c, o in zip(group, grouped.get((model, other), []))
                     if "error" not in c and "error" not in o]
            if pairs and other != tool:
                row["ratios"][other] = statistics.median(c / o for c, o in pairs)
    return rows


def markdown(results: list[dict[str, Any]], scale_rows: list[dict[str, Any]], load: str = "-") -> str:
    """The results as the Markdown tables of docs/performance.md."""
    import torch

    lines = [
        "| model | tool | runs | wall s | peak RSS MiB | phases (s) |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['tool']} | - | - | - | error: {r['error']} |")
            continue
        phases = ", ".join(f"{k} {v:.3f}" for k, v in r["phases"].items())
        lines.append(f"| {r['model']} | {r['tool']} | {r.get('repeats', 1)} | {_fmt(r['wall_s'])} | {_fmt(r['peak_rss_mib'], 0)} | {phases} |")
    ratios = ["", "| model | check / fwd+bwd | check / torchviz | check / export-floor | "
              "fxflow render phase / torchviz make_dot+dot | fxflow render / torchlens draw |",
              "|---|---:|---:|---:|---:|---:|"]
    by = {(r["model"], r["tool"]): r for r in results if "error" not in r}
    for model in dict.fromkeys(r["model"] for r in results):
        check = by.get((model, "fxflow-check"))
        render, viz, lens = by.get((model, "fxflow-render")), by.get((model, "torchviz")), by.get((model, "torchlens"))
        ours = (render["phases"]["dot build"] + render["phases"]["render"]) if render else None
        theirs = (viz["phases"]["dot build"] + viz["phases"]["render"]) if viz else None
        lens_draw = lens["phases"]["render"] if lens else None
        against = [_fmt(check["ratios"].get(tool)) if check else "-" for tool in ("fwd+bwd", "torchviz", "export-floor")]
        ratios.append(f"| {model} | {' | '.join(against)} | {_fmt(ours / theirs if ours and theirs else None)} | "
                      f"{_fmt(ours / lens_draw if ours and lens_draw else None)} |")
    scale = ["", "| graph nodes | annotate s | static walk s | deferred gc s | reconcile s | walk+reconcile per 1k nodes ms |",
             "|---:|---:|---:|---:|---:|---:|"]
    for row in scale_rows:
        per_k = (row["walk_s"] + row["reconcile_s"]) / row["nodes"] * 1e6
        scale.append(f"| {row['nodes']} | {row['annotate_s']:.3f} | {row['walk_s']:.3f} | {row['gc_s']:.3f} | "
                     f"{row['reconcile_s']:.3f} | {per_k:.1f} |")
    header = [
        f"Load average (1, 5, 15 min) at the start and end: {load}.",
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()} with {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, torch {torch.__version__}.",
        "",
    ]
    return "\n".join(header + lines + ratios + scale) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "TOOL"))
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--models", default="seed,gpt2,bert,vit,t5,llama-small,synthetic-20k,llama-7b-meta")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--scaling", default="2000,5000,10000,20000", help="node counts for the walk scaling ('' to skip)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--repeats", type=int, default=1, help="runs of every tool, alternated; the tables give medians")
    parser.add_argument("--slow-peers", action="store_true", help="also run the peers on the synthetic graph")
    parser.add_argument("--write", default=None, help="write the Markdown tables to this file")
    parser.add_argument("--render", action="store_true",
                        help="only the render table: PNG pixel sizes and times of the default view")
    options = parser.parse_args()
    if options.one:
        print(json.dumps(measure(*options.one, options.workdir or tempfile.mkdtemp())))
        return
    if options.render:
        rows = []
        for model in RENDER_TABLE_MODELS:
            result = run_one(model, "fxflow-render", options.timeout)
            print(json.dumps(result), flush=True)
            rows.append(result)
        print(render_markdown(rows))
        return
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    runs = []
    for _ in range(options.repeats):  # alternated, so a neighbour's load falls on every tool alike
        for model in filter(None, options.models.split(",")):
            for tool in options.tools.split(","):
                if model.endswith("-meta") and tool not in ("fwd+bwd", "export-floor", "fxflow-check", "fxflow-render"):
                    continue  # no values on meta: nothing for the drawing tools to show
                if model.startswith("synthetic") and tool in PEERS and not options.slow_peers:
                    continue  # torchview takes minutes to lay it out, torchviz overflows the stack
                if not _available(tool):
                    continue
                result = run_one(model, tool, options.timeout)
                print(json.dumps(result), flush=True)
                runs.append(result)
    load += " / " + ", ".join(f"{x:.2f}" for x in os.getloadavg())
    results = medians(runs)
    sizes = [int(s) for s in options.scaling.split(",") if s]
    scale_rows = scaling(sizes) if sizes else []
    table = markdown(results, scale_rows, load)
    print(table)
    if options.write:
        with open(options.write, "w") as handle:
            handle.write(table)


if __name__ == "__main__":
    main()
