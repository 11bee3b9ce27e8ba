"""Benchmark reading an ETDump: ``workbench.open`` + the ``events`` frame against ExecuTorch's
``Inspector(etdump_path=...)``.

What is measured
----------------
One real trace of at least 100,000 events, made once with the installed runtime and cached in
``${WORKBENCH_BENCH_CACHE:-~/.cache/workbench-bench}/<toolchain>/``: a portable program of
``--layers`` x ``Linear(4, 4)`` (two kernel instructions each: ``permute_copy`` and
``addmm``, so four profile events per layer, plus ``Method::execute``) loaded with
``_load_for_executorch(path, enable_etdump=True)`` and run ``--runs`` times (default
25 x 1,000: 101,002 events in 1,001 blocks, ~7 MB).

* **ours**: ``art = workbench.open(p); art.frames["events"]`` (every profile event as a row
  with names, kinds, timestamps and durations). ``workbench``, ``pandas`` and ``numpy`` are
  imported first and not timed.
* **reference**: ``Inspector(etdump_path=p)`` -- it converts the flatbuffer to JSON with the
  ``flatc`` binary, builds dataclasses and groups the events into blocks. Its imports are not
  timed either.

Method
------
Every timed run is a fresh subprocess doing exactly one timed operation (the two sides
alternate, so that both see the same load on a shared machine), after an untimed
warm-up of the same operation on the tiny ``sample_models/mlp_portable.etdp`` (lazy imports
inside the libraries are paid there, for both sides alike). The workers run without
``PYTHONDONTWRITEBYTECODE`` and one untimed priming process per side runs first, so that no
timed run compiles Python sources. The parent reads the trace once so both sides see a warm
page cache. Times are medians over ``--repeat`` runs (the ratio of the fastest runs is
printed too); peak RSS growth is ``VmHWM`` after the
operation minus ``VmRSS`` before it (high-water mark reset after the imports; else
``ru_maxrss``), the largest over the repeats.

Targets: ours >= 50x faster, our RSS growth <= 50 MB.

Usage
-----
::

    .venv/bin/python bench/bench_etdump.py                  # 5 repeats per side
    .venv/bin/python bench/bench_etdump.py --repeat 3 --json out.json --check
    .venv/bin/python bench/bench_etdump.py --runs 200       # a smaller trace (~20,000 events)

Run it from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from _artifacts import cache_dir
from _measure import maxrss_kb, reset_hwm, status_kb

REPO_ROOT = Path(__file__).resolve().parent.parent
WARMUP = str(REPO_ROOT / "sample_models" / "mlp_portable.etdp")
RESULT_MARKER = "@@BENCH_RESULT "
SIDES = ("ours", "reference")
MIN_SPEEDUP = 50.0
MAX_RSS_MB = 50.0


# --------------------------------------------------------------------------- the trace


def trace_path(layers: int, runs: int) -> Path:
    return cache_dir() / f"etdump_linear{layers}_x{runs}.etdp"


def ensure_trace(layers: int, runs: int) -> Path:
    """Export the chain of Linear layers, run it ``runs`` times with ETDump on (cached)."""
    dest = trace_path(layers, runs)
    if dest.is_file():
        return dest
    import torch
    from executorch.exir import ExecutorchBackendConfig, to_edge
    from executorch.extension.pybindings.portable_lib import _load_for_executorch
    from torch import nn

    dest.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(layers)]).eval()
    x = torch.randn(1, 4)
    t0 = time.perf_counter()
    program = to_edge(torch.export.export(model, (x,), strict=False)).to_executorch(
        ExecutorchBackendConfig())
    pte = dest.with_suffix(".pte")
    tmp = dest.with_suffix(".tmp")
    pte.write_bytes(program.buffer)
    module = _load_for_executorch(str(pte), enable_etdump=True, debug_buffer_size=0)
    for _ in range(runs):
        module.forward([x])
    module.write_etdump_result_to_file(str(tmp), str(dest.with_suffix(".debug.bin")))
    os.replace(tmp, dest)
    print(f"[bench] generated {dest} ({dest.stat().st_size / 1e6:.1f} MB) in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return dest


# --------------------------------------------------------------------------- worker side


def _worker(side: str, path: str) -> dict:
    if side == "ours":
        import numpy  # noqa: F401
        import pandas  # noqa: F401

        import workbench

        def op(p: str):
            art = workbench.open(p)
            return art, art.frames["events"]

        def describe(res) -> dict:
            return {"events": len(res[1]), "blocks": int(res[1]["run"].max()) + 1}
    elif side == "reference":
        import warnings

        warnings.simplefilter("ignore")
        from executorch.devtools import Inspector

        def op(p: str):
            return Inspector(etdump_path=p)

        def describe(res) -> dict:
            blocks = res.event_blocks
            events = sum(len(e.perf_data.raw) for b in blocks for e in b.events
                         if e.perf_data is not None)
            return {"events": events, "blocks": len(blocks)}
    else:
        raise ValueError(f"unknown side {side!r}")

    op(WARMUP)
    hwm_reset = reset_hwm()
    rss_before = status_kb("VmRSS")
    maxrss_before = maxrss_kb()
    t0 = time.perf_counter()
    res = op(path)
    elapsed = time.perf_counter() - t0
    hwm_after = status_kb("VmHWM")
    if hwm_reset and rss_before is not None and hwm_after is not None:
        growth_kb, method = hwm_after - rss_before, "VmHWM (clear_refs reset)"
    else:
        growth_kb, method = maxrss_kb() - maxrss_before, "ru_maxrss delta"
    return {"time_s": elapsed, "rss_growth_mb": max(growth_kb, 0) / 1024, "rss_method": method,
            **describe(res)}


# --------------------------------------------------------------------------- driver side


def _run_worker(side: str, path: Path, timeout: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", side, str(path)]
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER):])
    tail = (proc.stderr.strip().splitlines() or ["<no stderr>"])[-1]
    return {"error": f"exit {proc.returncode}: {tail}"}


def _summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"runs": runs, "error": runs[0]["error"] if runs else "no runs"}
    times = [r["time_s"] for r in ok]
    return {"runs": runs, "median_s": statistics.median(times), "min_s": min(times),
            "max_s": max(times), "rss_growth_mb_max": max(r["rss_growth_mb"] for r in ok),
            "rss_method": ok[0]["rss_method"], "events": ok[0]["events"],
            "blocks": ok[0]["blocks"], "failed_runs": len(runs) - len(ok)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="workbench ETDump reading vs the Inspector")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per side (default 5)")
    ap.add_argument("--layers", type=int, default=25, help="Linear layers of the traced model")
    ap.add_argument("--runs", type=int, default=1000, help="executions recorded in the trace")
    ap.add_argument("--json", metavar="OUT", help="write the results as JSON")
    ap.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    ap.add_argument("--timeout", type=float, default=900.0, help="per-run timeout, s")
    ap.add_argument("--worker", nargs=2, metavar=("SIDE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(RESULT_MARKER + json.dumps(_worker(*args.worker)), flush=True)
        return 0
    path = ensure_trace(args.layers, args.runs)
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass
    results: dict = {"path": str(path), "size_bytes": path.stat().st_size}
    for side in SIDES:
        _run_worker(side, path, args.timeout)  # priming: writes bytecode caches, untimed
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    for i in range(args.repeat):  # the sides alternate: both see the same machine load
        for side in SIDES:
            if runs[side] and "error" in runs[side][-1]:
                continue
            r = _run_worker(side, path, args.timeout)
            msg = r.get("error") or f"{r['time_s'] * 1e3:.1f} ms, +{r['rss_growth_mb']:.1f} MB"
            print(f"  {side:<9} run {i + 1}/{args.repeat}: {msg}", file=sys.stderr, flush=True)
            runs[side].append(r)
    for side in SIDES:
        results[side] = _summarize(runs[side])
    ours, ref = results["ours"], results["reference"]
    speedup = ref["median_s"] / ours["median_s"] if "median_s" in ours and "median_s" in ref \
        else None
    results["speedup"] = speedup
    results["speedup_of_minimums"] = ref["min_s"] / ours["min_s"] if speedup else None
    print(f"{'file':<28} {'MB':>5} {'events':>8} {'ours ms':>9} {'Inspector ms':>13} "
          f"{'ratio':>7} {'ours +RSS MB':>13} {'ref +RSS MB':>12}")
    print(f"{path.name:<28} {path.stat().st_size / 1e6:>5.1f} {ours.get('events', 0):>8,} "
          f"{ours.get('median_s', float('nan')) * 1e3:>9.1f} "
          f"{ref.get('median_s', float('nan')) * 1e3:>13.1f} "
          f"{speedup or float('nan'):>7.0f} {ours.get('rss_growth_mb_max', float('nan')):>13.1f} "
          f"{ref.get('rss_growth_mb_max', float('nan')):>12.1f}")
    if speedup:
        print(f"fastest runs: ours {ours['min_s'] * 1e3:.1f} ms, Inspector "
              f"{ref['min_s'] * 1e3:.1f} ms: {results['speedup_of_minimums']:.0f}x")
    for side in SIDES:
        if "error" in results[side]:
            print(f"! {side}: {results[side]['error']}")
    if "events" in ours and "events" in ref and ours["events"] != ref["events"]:
        print(f"! event counts differ: ours {ours['events']}, Inspector {ref['events']}")
    checks = [(f"speedup >= {MIN_SPEEDUP:g}x", speedup is not None and speedup >= MIN_SPEEDUP),
              (f"ours RSS growth <= {MAX_RSS_MB:g} MB",
               ours.get("rss_growth_mb_max", float("inf")) <= MAX_RSS_MB)]
    for desc, met in checks:
        print(f"  [{'MET' if met else 'MISSED':^7}] {desc}")
    if args.json:
        results["config"] = {"repeat": args.repeat, "layers": args.layers, "runs": args.runs,
                             "python": platform.python_version(),
                             "platform": platform.platform(), "cpus": os.cpu_count(),
                             "executorch": metadata.version("executorch"),
                             "torch": metadata.version("torch")}
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 1 if args.check and not all(m for _, m in checks) else 0


if __name__ == "__main__":
    raise SystemExit(main())
