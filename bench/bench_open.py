"""Benchmark ``workbench.open`` against ExecuTorch's own ``.pte`` deserializer.

What is measured
----------------
Two real ``.pte`` files exported with the installed ExecuTorch (portable path,
see ``bench/_artifacts.py``; cached outside the repo in
``${WORKBENCH_BENCH_CACHE:-~/.cache/workbench-bench}``):

* ``big``  -- ``big_400mb.pte``: 24 x ``Linear(2048, 2048)``, ~400 MB of fp32
  weights in the constant segment.
* ``many`` -- ``many_5000.pte``: 1,300 x [``Linear(16, 16)`` + ``LayerNorm(16)``],
  5,200 parameter tensors.  The first export takes minutes; it is cached.

For each file two sides are timed:

* **ours**: ``art = workbench.open(p)``; build every frame of ``art.frames``
  (a mapping of name -> ``pandas.DataFrame``) and touch ``art.segments`` and
  ``art.tensors``.  ``workbench``, ``pandas`` and ``numpy`` are imported first
  and not timed.
* **reference**: ``deserialize_pte_binary(open(p, "rb").read())`` from
  ``executorch.exir._serialize._program`` -- including reading the file, since
  that is what the reference needs.  Its imports are not timed either.

Method
------
Every repeat runs in its **own fresh subprocess** (``--repeat`` of them per
side and file; default 5), performing exactly one timed operation.  This keeps
the peak-RSS figure honest (no allocator arenas or caches left over from a
previous run) and means any first-call costs inside the operation are counted,
as a user opening one file would pay them -- except one-time library warm-up: each
worker first runs its operation once, untimed, on the tiny ``sample_models/mlp_portable.pte``
(both sides alike).  Before timing, the parent reads each
file once so both sides see a warm OS page cache.  Reported times are medians.

Peak RSS growth is ``VmHWM`` after the operation minus ``VmRSS`` before it, with
the high-water mark reset (``echo 5 > /proc/self/clear_refs``) after the imports
so import-time peaks are excluded.  If that reset is not permitted, the worker
falls back to ``ru_maxrss`` after minus before, which can under-report growth
that stays below the import-time peak; the method used is recorded.  The table
reports the largest growth over the repeats.  File-backed pages mapped and
touched by the process (e.g. via ``mmap``) count toward RSS.

Targets: on ``big`` ours is >= 100x faster and grows RSS by <= 20 MB; on
``many`` ours is >= 50x faster.  With ``--quick`` small stand-in files are used
(4 x ``Linear(512)``, 100 blocks) and the targets are informative only.

Frames only (``--frames``)
--------------------------
``--frames instructions,lifetimes,memory_efficiency`` times building just those frames:
each worker opens the file and builds ``tensors`` and ``segments`` untimed (after the same
warm-up), then builds the listed frames, timed. With ``--baseline DIR`` a second side,
``before``, runs the same worker with ``workbench`` imported from ``DIR`` (an older checkout,
e.g. ``git archive HEAD workbench | tar -x -C /tmp/wb-before``), alternating with ``ours``
run by run, so both see the same machine load; the table gives ``before/ours``. Target:
``ours`` under 10 ms on ``many``.

Usage
-----
::

    .venv/bin/python bench/bench_open.py                 # both files, 5 repeats
    .venv/bin/python bench/bench_open.py --quick         # smoke test, small files
    .venv/bin/python bench/bench_open.py --only big --repeat 9 --json out.json
    .venv/bin/python bench/bench_open.py --check         # exit 1 if a target is missed
    .venv/bin/python bench/bench_open.py --kind ptd      # .ptd files vs FlatTensorSerializer
    .venv/bin/python bench/bench_open.py --file ~/.cache/workbench-bench/llm_1b/llm_1b.pte
    .venv/bin/python bench/bench_open.py --only many --repeat 15 \
        --frames instructions,lifetimes,memory_efficiency --baseline /tmp/wb-before

Run it from the repository root (the workers import ``workbench`` from there).
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

from _artifacts import QUICK_SPECS, SPECS, Spec, ensure, read_meta
from _measure import maxrss_kb, reset_hwm, status_kb

REPO_ROOT = Path(__file__).resolve().parent.parent
#: A tiny real program both sides open once (untimed) before the timed call.
WARMUP = str(REPO_ROOT / "sample_models" / "mlp_xnnpack.pte")
WARMUP_PTD = str(REPO_ROOT / "sample_models" / "mlp_external.ptd")
RESULT_MARKER = "@@BENCH_RESULT "
SIDES = ("ours", "reference")

#: name -> (min speed-up, max ours RSS growth in MB or None)
TARGETS: dict[str, tuple[float, float | None]] = {
    "big": (100.0, 20.0),
    "many": (50.0, None),
    # --kind ptd: the external-data files of the same models (issue: >= 50x, no weight bytes)
    "big_external": (50.0, 20.0),
    "many_external": (50.0, None),
    # --file: any .pte, e.g. the 1B-shaped LLM export (sample_models/make_llm.py --size 1b;
    # issue: open + every frame >= 100x faster than deserialize_pte_binary, <= 30 MB growth)
    "file": (100.0, 30.0),
}
#: Which generated files each --kind benchmarks.
KINDS = {"pte": ("big", "many"), "ptd": ("big_external", "many_external")}

# --------------------------------------------------------------------------
# Worker side: runs in a fresh interpreter, prints one marked JSON line.
# --------------------------------------------------------------------------


#: The frames a ``--frames`` worker builds (passed through the environment).
FRAMES_ENV = "WORKBENCH_BENCH_FRAMES"
#: Target of ``--frames`` on ``many``: ours builds them in under this many seconds.
FRAMES_TARGET_S = 0.010


def _worker(side: str, path: str) -> dict:
    """Do the imports, then time one operation on ``path`` and measure RSS."""
    frames_only = [f for f in os.environ.get(FRAMES_ENV, "").split(",") if f]
    if frames_only and side in ("ours", "before"):
        import numpy
        import pandas

        import workbench

        opened: dict[str, object] = {}

        def prepare(path: str) -> None:
            art = workbench.open(path)
            art.frames["tensors"]
            art.frames["segments"]
            opened["art"] = art

        def op(path: str):
            art = opened.pop("art")
            return [art.frames[k] for k in frames_only]

        def describe(res) -> dict:
            return {"frames": len(res), "frame_rows": sum(len(df) for df in res),
                    "workbench": os.path.dirname(os.path.dirname(workbench.__file__))}

        prepare(WARMUP)
        op(WARMUP)
        prepare(path)
        return _measure_op(op, path, describe)

    if side == "ours":
        import numpy  # noqa: F401
        import pandas  # noqa: F401

        import workbench

        def op(path: str):
            art = workbench.open(path)
            frames = art.frames
            built = [frames[k] for k in frames]
            segments = art.segments
            tensors = art.tensors
            return art, built, segments, tensors

        def describe(res) -> dict:
            _, built, segments, tensors = res
            return {
                "frames": len(built),
                "frame_rows": sum(len(df) for df in built),
                "segments_rows": _safe_len(segments),
                "tensors_rows": _safe_len(tensors),
            }

    elif side == "reference" and path.endswith(".ptd"):
        from executorch.exir._serialize._cord import Cord
        from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

        def op(path: str):
            with open(path, "rb") as f:
                data = f.read()
            return FlatTensorSerializer().deserialize(Cord(data))

        def describe(res) -> dict:
            return {"named_data": _safe_len(getattr(res, "named_data", None))}

    elif side == "reference":
        from executorch.exir._serialize._program import deserialize_pte_binary

        def op(path: str):
            with open(path, "rb") as f:
                data = f.read()
            return deserialize_pte_binary(data)

        def describe(res) -> dict:
            plans = getattr(getattr(res, "program", None), "execution_plan", None)
            return {"execution_plans": _safe_len(plans)}

    else:
        raise ValueError(f"unknown side {side!r}")

    # Warm-up on a tiny sample, for both sides alike: lazy imports inside the libraries
    # (pandas' array machinery, the reference's flatc/json/dataclass setup) are paid here,
    # so the timed call measures the work that scales with the file.
    op(WARMUP_PTD if path.endswith(".ptd") else WARMUP)
    return _measure_op(op, path, describe)


def _measure_op(op, path: str, describe) -> dict:
    """Time ``op(path)`` once and measure the RSS it adds."""
    hwm_reset = reset_hwm()
    rss_before = status_kb("VmRSS")
    maxrss_before = maxrss_kb()
    c0, t0 = time.process_time(), time.perf_counter()
    res = op(path)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    hwm_after = status_kb("VmHWM")
    maxrss_after = maxrss_kb()
    if hwm_reset and rss_before is not None and hwm_after is not None:
        growth_kb, method = hwm_after - rss_before, "VmHWM (clear_refs reset)"
    else:
        growth_kb, method = maxrss_after - maxrss_before, "ru_maxrss delta"
    out = {
        "time_s": elapsed,
        "cpu_s": cpu,
        "rss_growth_mb": max(growth_kb, 0) / 1024,
        "rss_method": method,
        "rss_before_mb": (rss_before or 0) / 1024,
    }
    out.update(describe(res))
    return out


def _safe_len(obj) -> int | None:
    try:
        return len(obj)
    except TypeError:
        return None


# --------------------------------------------------------------------------
# Driver side.
# --------------------------------------------------------------------------


def _run_worker(side: str, path: Path, timeout: float, frames: str = "",
                baseline: str | None = None) -> dict:
    env = dict(os.environ)
    home = baseline if side == "before" and baseline else str(REPO_ROOT)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [home, env.get("PYTHONPATH")]))
    env[FRAMES_ENV] = frames
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", side, str(path)]
    try:
        proc = subprocess.run(
            cmd,
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER) :])
    tail = (proc.stderr.strip().splitlines() or ["<no stderr>"])[-1]
    return {"error": f"exit {proc.returncode}: {tail}"}


def _warm_page_cache(path: Path) -> None:
    buf = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def _summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    summary: dict = {"runs": runs}
    if not ok:
        summary["error"] = runs[0]["error"] if runs else "no runs"
        return summary
    times = [r["time_s"] for r in ok]
    rss = [r["rss_growth_mb"] for r in ok]
    summary.update(
        median_s=statistics.median(times),
        min_s=min(times),
        max_s=max(times),
        rss_growth_mb_max=max(rss),
        rss_growth_mb_median=statistics.median(rss),
        rss_method=ok[0]["rss_method"],
        failed_runs=len(runs) - len(ok),
    )
    if all("cpu_s" in r for r in ok):
        summary["cpu_median_s"] = statistics.median(r["cpu_s"] for r in ok)
    return summary


def _bench_frames(key: str, spec: Spec, repeat: int, timeout: float, frames: str,
                  baseline: str | None) -> dict:
    """``--frames``: ours (and before) alternating, run by run."""
    path = ensure(spec)
    _warm_page_cache(path)
    sides = ("ours", "before") if baseline else ("ours",)
    result: dict = {"key": key, "path": str(path), "size_bytes": path.stat().st_size,
                    "spec": spec.describe(), "frames": frames, "baseline": baseline}
    runs: dict[str, list] = {s: [] for s in sides}
    for i in range(repeat):
        for side in sides:
            r = _run_worker(side, path, timeout, frames, baseline)
            msg = r.get("error") or f"{r['time_s'] * 1e3:.2f} ms"
            print(f"  {key:<5} {side:<7} run {i + 1}/{repeat}: {msg}", file=sys.stderr,
                  flush=True)
            runs[side].append(r)
    for side in sides:
        result[side] = _summarize(runs[side])
    ours, before = result["ours"], result.get("before", {})
    if "median_s" in ours and "median_s" in before and ours["median_s"] > 0:
        result["speedup"] = before["median_s"] / ours["median_s"]
    return result


def _print_frames_table(results: list[dict]) -> list[tuple[str, bool | None, str]]:
    header = (f"{'file':<16} {'ours med ms':>11} {'ours min ms':>11} {'ours cpu ms':>11} "
              f"{'before med ms':>13} {'before cpu ms':>13} {'before/ours':>11}")
    print(header)
    print("-" * len(header))
    checks = []
    for r in results:
        ours, before = r["ours"], r.get("before", {})
        med = ours.get("median_s")
        def ms(side: dict, key: str) -> float | None:
            v = side.get(key)
            return None if v is None else v * 1e3

        print(f"{Path(r['path']).name:<16} {_fmt(ms(ours, 'median_s'), '.2f'):>11} "
              f"{_fmt(ms(ours, 'min_s'), '.2f'):>11} {_fmt(ms(ours, 'cpu_median_s'), '.2f'):>11} "
              f"{_fmt(ms(before, 'median_s'), '.2f'):>13} "
              f"{_fmt(ms(before, 'cpu_median_s'), '.2f'):>13} "
              f"{_fmt(r.get('speedup'), '.1f'):>11}")
        for side in ("ours", "before"):
            if "error" in r.get(side, {}):
                print(f"! {r['key']} {side}: {r[side]['error']}")
        if r["key"] == "many":
            checks.append((f"many: ours builds {r['frames']} in < {FRAMES_TARGET_S * 1e3:g} ms",
                           None if med is None else med < FRAMES_TARGET_S,
                           "n/a" if med is None else f"{med * 1e3:.2f} ms"))
    if results:
        print(f"frames: {results[0]['frames']}; cpu: process time of the timed call (no wait "
              "for a core on a loaded machine)")
    if results and results[0].get("baseline"):
        print(f"before: workbench from {results[0]['baseline']}")
    print("Targets:")
    for desc, met, detail in checks:
        mark = {True: "MET", False: "MISSED", None: "UNKNOWN"}[met]
        print(f"  [{mark:^7}] {desc}  ({detail})")
    return checks


def _bench_file(key: str, spec: Spec, repeat: int, timeout: float) -> dict:
    t0 = time.perf_counter()
    path = ensure(spec)
    if spec.external:
        path = path.with_suffix(".ptd")
    ensure_s = time.perf_counter() - t0
    return _bench_path(key, path, repeat, timeout, spec=spec.describe(),
                       generation=read_meta(spec), ensure_s=round(ensure_s, 2))


def _bench_path(key: str, path: Path, repeat: int, timeout: float, **about) -> dict:
    """Both sides on the file ``path`` (a generated one, or any ``--file``)."""
    _warm_page_cache(path)
    result: dict = {"key": key, "path": str(path), "size_bytes": path.stat().st_size, **about}
    for side in SIDES:
        runs = []
        for i in range(repeat):
            r = _run_worker(side, path, timeout)
            msg = r.get("error") or f"{r['time_s'] * 1e3:.2f} ms, +{r['rss_growth_mb']:.1f} MB"
            print(
                f"  {key:<5} {side:<9} run {i + 1}/{repeat}: {msg}",
                file=sys.stderr,
                flush=True,
            )
            runs.append(r)
            if "error" in r and i == 0:
                break  # a broken side will not get better; don't burn the repeats
        result[side] = _summarize(runs)
    ours, ref = result["ours"], result["reference"]
    if "median_s" in ours and "median_s" in ref and ours["median_s"] > 0:
        result["speedup"] = ref["median_s"] / ours["median_s"]
    return result


def _check_targets(results: list[dict]) -> list[tuple[str, bool | None, str]]:
    """Return (description, met?, detail) per target; met is None if unknown."""
    checks = []
    for r in results:
        min_speedup, max_rss = TARGETS[r["key"]]
        speedup = r.get("speedup")
        checks.append(
            (
                f"{r['key']}: speedup >= {min_speedup:g}x",
                None if speedup is None else speedup >= min_speedup,
                "n/a" if speedup is None else f"{speedup:.1f}x",
            )
        )
        if max_rss is not None:
            rss = r["ours"].get("rss_growth_mb_max")
            checks.append(
                (
                    f"{r['key']}: ours RSS growth <= {max_rss:g} MB",
                    None if rss is None else rss <= max_rss,
                    "n/a" if rss is None else f"{rss:.1f} MB",
                )
            )
    return checks


def _fmt(value, spec: str, na: str = "n/a") -> str:
    return na if value is None else format(value, spec)


def _print_table(results: list[dict], quick: bool) -> list[tuple[str, bool | None, str]]:
    header = (
        f"{'file':<16} {'size MB':>8} {'ours med s':>11} {'ref med s':>10} "
        f"{'ref/ours':>9} {'ours +RSS MB':>13} {'ref +RSS MB':>12}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        ours, ref = r["ours"], r["reference"]
        print(
            f"{Path(r['path']).name:<16} {r['size_bytes'] / 1e6:>8.1f} "
            f"{_fmt(ours.get('median_s'), '.5f'):>11} {_fmt(ref.get('median_s'), '.4f'):>10} "
            f"{_fmt(r.get('speedup'), '.1f'):>9} "
            f"{_fmt(ours.get('rss_growth_mb_max'), '.1f'):>13} "
            f"{_fmt(ref.get('rss_growth_mb_max'), '.1f'):>12}"
        )
    for r in results:
        for side in SIDES:
            if "error" in r[side]:
                print(f"! {r['key']} {side}: {r[side]['error']}")
    methods = {r[s].get("rss_method") for r in results for s in SIDES} - {None}
    if methods:
        print(f"RSS growth: max over repeats, measured via {', '.join(sorted(methods))}")
    checks = _check_targets(results)
    print("Targets" + (" (quick mode: small files, informative only)" if quick else "") + ":")
    for desc, met, detail in checks:
        mark = {True: "MET", False: "MISSED", None: "UNKNOWN"}[met]
        print(f"  [{mark:^7}] {desc}  ({detail})")
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Benchmark workbench.open against executorch's deserialize_pte_binary."
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per side (default 5)")
    parser.add_argument("--only", choices=sorted(SPECS), help="benchmark just one file")
    parser.add_argument("--kind", choices=sorted(KINDS), default="pte",
                        help="pte: programs vs deserialize_pte_binary (default); "
                        "ptd: external data files vs FlatTensorSerializer().deserialize")
    parser.add_argument("--quick", action="store_true", help="use small generated files")
    parser.add_argument("--json", metavar="OUT", help="write results as JSON to OUT")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is not met")
    parser.add_argument("--timeout", type=float, default=600.0, help="per-run subprocess timeout, s")
    parser.add_argument("--frames", metavar="A,B", default="",
                        help="time building only these frames (after an untimed open)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="with --frames: also time workbench imported from DIR (before)")
    parser.add_argument("--file", metavar="PTE",
                        help="benchmark this existing .pte instead of the generated files, e.g. "
                        "~/.cache/workbench-bench/llm_1b/llm_1b.pte (sample_models/make_llm.py "
                        "--size 1b); targets >= 100x and <= 30 MB RSS growth")
    parser.add_argument("--worker", nargs=2, metavar=("SIDE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        side, path = args.worker
        print(RESULT_MARKER + json.dumps(_worker(side, path)), flush=True)
        return 0

    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    specs = QUICK_SPECS if args.quick else SPECS
    keys = [args.only] if args.only else list(KINDS[args.kind])
    if args.baseline and not (Path(args.baseline) / "workbench" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: no workbench package there")
    if args.baseline and not args.frames:
        parser.error("--baseline needs --frames")
    results = []
    if args.file:
        path = Path(args.file).expanduser()
        if not path.is_file():
            parser.error(f"--file {args.file}: no such file")
        keys = []
        print(f"[bench] file: {path}", file=sys.stderr, flush=True)
        results.append(_bench_path("file", path, args.repeat, args.timeout, spec=path.name))
    for key in keys:
        print(f"[bench] {key}: {specs[key].describe()}", file=sys.stderr, flush=True)
        if args.frames:
            results.append(_bench_frames(key, specs[key], args.repeat, args.timeout,
                                         args.frames, args.baseline))
        else:
            results.append(_bench_file(key, specs[key], args.repeat, args.timeout))
    checks = (_print_frames_table(results) if args.frames else
              _print_table(results, args.quick))

    if args.json:
        payload = {
            "config": {
                "repeat": args.repeat,
                "quick": args.quick,
                "method": "one fresh subprocess per timed run; warm page cache",
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "executorch": metadata.version("executorch"),
                "torch": metadata.version("torch"),
            },
            "results": results,
            "targets": [{"target": d, "met": m, "value": v} for d, m, v in checks],
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)

    if args.check and not all(met for _, met, _ in checks):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
