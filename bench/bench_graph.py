"""Benchmark: a ``.pte`` converted into Model Explorer graphs, ours vs the anchor.

What is measured
----------------
* **ours**: ``workbench.model_explorer.convert.me_graphs(path)``: open the file, build the
  frames it needs, ``wb.graph`` (instructions, XNNPACK delegates expanded) and Model
  Explorer's ``graph_builder`` objects: what our adapter returns to the server.
* **anchor**: ``executorch-extension-model-explorer`` 0.1.1's ``PTEAdapter().convert(path,
  {})`` (package ``pte_adapter_model_explorer``): what its adapter returns to the server.

Both sides run in the same process, taking turns, after one untimed warm-up each (imports and
first-use caches are not timed); each repetition opens the file afresh (our artifact is not
reused). Medians over ``--repeat`` runs; the ratio is anchor / ours (> 1: ours is faster),
and the same for the best run of each side (less sensitive to a busy machine).

Files: the llama3.2-1B-shaped export of the LLM issue
(``${WORKBENCH_BENCH_CACHE:-~/.cache/workbench-bench}/llm_1b/llm_1b.pte``, 573 instructions,
164 XNNPACK delegates; built by ``sample_models/make_llm.py --size 1b``), when it is there, and
``sample_models/llm_tiny.pte``. Goal: >= 10x on the 1B file (measured: docs/graph.md).

Run::

    PYTHONPATH=$PWD .venv/bin/python bench/bench_graph.py [--repeat 5] [FILE ...]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("WORKBENCH_BENCH_CACHE", Path.home() / ".cache" / "workbench-bench"))
LLM_1B = CACHE / "llm_1b" / "llm_1b.pte"


def ours(path: str) -> int:
    from workbench.model_explorer.convert import me_graphs

    return sum(len(g.nodes) for g in me_graphs(path))


def anchor(path: str) -> int:
    from pte_adapter_model_explorer.main import PTEAdapter

    out = PTEAdapter().convert(path, {})
    graphs = out.get("graphs") or [g for c in out.get("graphCollections", []) for g in c.graphs]
    return sum(len(g.nodes) for g in graphs)


def timed(fn, path: str) -> tuple[float, int]:
    gc.collect()
    t = time.perf_counter()
    n = fn(path)
    return time.perf_counter() - t, n


def bench(path: Path, repeat: int) -> dict:
    p = str(path)
    sides = {"ours": ours, "anchor": anchor}
    nodes = {}
    for name, fn in sides.items():  # warm-up: imports, first-use caches
        try:
            nodes[name] = fn(p)
        except Exception as e:  # the anchor may not read a file: say so, time ours alone
            nodes[name] = f"failed: {type(e).__name__}: {str(e)[:120]}"
    times: dict[str, list[float]] = {k: [] for k in sides if isinstance(nodes[k], int)}
    for _ in range(repeat):
        for name in times:
            times[name].append(timed(sides[name], p)[0])
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    return {"file": path.name, "size_mb": path.stat().st_size / 1e6, "nodes": nodes, "median_s": med,
            "ratio": med["anchor"] / med["ours"] if len(med) == 2 else None,
            "best_ratio": best["anchor"] / best["ours"] if len(best) == 2 else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    try:
        import pte_adapter_model_explorer  # noqa: F401
    except ImportError:
        print("the anchor (executorch-extension-model-explorer 0.1.1) is not installed")
        return 1
    files = args.files
    if not files:
        if LLM_1B.is_file():
            files.append(LLM_1B)
        else:
            print(f"[bench_graph] {LLM_1B} is not there (build it with sample_models/make_llm.py "
                  "--size 1b); measuring the samples only")
        files.append(ROOT / "sample_models" / "llm_tiny.pte")
    print(f"{'file':28s} {'MB':>8s} {'ours nodes':>10s} {'anchor nodes':>12s} "
          f"{'ours s':>8s} {'anchor s':>9s} {'ratio':>7s} {'best-of ratio':>13s}")
    for f in files:
        r = bench(f, args.repeat)
        m = r["median_s"]
        ratio = f"{r['ratio']:.1f}x" if r["ratio"] is not None else "-"
        best = f"{r['best_ratio']:.1f}x" if r["best_ratio"] is not None else "-"
        print(f"{r['file']:28s} {r['size_mb']:8.1f} {r['nodes']['ours']!s:>10s} "
              f"{r['nodes']['anchor']!s:>12s} {m.get('ours', float('nan')):8.3f} "
              f"{m.get('anchor', float('nan')):9.3f} {ratio:>7s} {best:>13s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
