"""Benchmark ``workbench.scan`` over a generated corpus: one process, a process pool, Dask.

What is measured
----------------
A corpus of small real artifacts is generated in a temporary folder: ``--sets`` copies of
``sample_models/`` (default 60 -> 1,020 artifacts of every format: .pte, .ptd, .bpte, .pt2),
each set in its own sub-folder so that ``.pte`` programs find their ``.ptd`` siblings, plus
per set a ``README.md`` (skipped: not an artifact) and a truncated ``.pte`` (an ``errors``
row). Then the whole corpus is scanned (``segments`` and ``tensors`` collected, frames built)
with:

* ``jobs=1``  -- in this process (the reference for the ratios);
* ``jobs=N``  -- a ``concurrent.futures`` process pool of N workers, for each ``--jobs``
  (default 2); pool start-up is included, as a user pays it;
* ``dask N``  -- a ``dask.distributed.LocalCluster(n_workers=N, processes=True,
  threads_per_worker=1)``; cluster start-up is *not* included (a cluster is long-lived),
  the client round trips are.

Every run's frames are checked equal to the reference's. Times are the best of
``--repeat`` runs (default 3) after one untimed warm-up (page cache, imports).

Usage
-----
::

    .venv/bin/python bench/bench_scan.py                  # 60 sets, jobs 2, dask 2
    .venv/bin/python bench/bench_scan.py --sets 200 --jobs 2 4 --dask 2 4
    .venv/bin/python bench/bench_scan.py --no-dask --repeat 1
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
sys.path.insert(0, str(ROOT))

import workbench as wb  # noqa: E402


def make_corpus(dest: pathlib.Path, sets: int) -> int:
    """``sets`` copies of the sample artifacts (+ a README and a truncated .pte each)."""
    samples = [p for p in sorted(SAMPLES.iterdir())
               if p.is_file() and p.suffix in (".pte", ".ptd", ".bpte", ".pt2")]
    trunc = (SAMPLES / "mlp_portable.pte").read_bytes()[:200]
    n = 0
    for i in range(sets):
        d = dest / f"group{i // 10:02d}" / f"set{i:04d}"
        d.mkdir(parents=True)
        for p in samples:
            shutil.copyfile(p, d / p.name)
            n += 1
        (d / "README.md").write_text("not an artifact\n")
        (d / "truncated.pte").write_bytes(trunc)
    return n


def timed(label: str, fn, repeat: int) -> tuple[float, dict]:
    fn()  # warm-up
    best, res = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = fn()
        best = min(best, time.perf_counter() - t0)
    return best, res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", type=int, default=60, help="copies of sample_models/ (default 60)")
    ap.add_argument("--jobs", type=int, nargs="+", default=[2], help="process pool sizes")
    ap.add_argument("--dask", type=int, nargs="+", default=[2], help="LocalCluster sizes")
    ap.add_argument("--no-dask", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="wb-scan-bench-") as tmp:
        corpus = pathlib.Path(tmp)
        artifacts = make_corpus(corpus, args.sets)
        total = sum(1 for _ in corpus.rglob("*") if _.is_file())
        print(f"corpus: {total} files ({artifacts} artifacts, {args.sets} README.md skipped, "
              f"{args.sets} truncated) in {corpus}; {os.cpu_count()} CPUs; best of {args.repeat}")

        rows = []
        ref_t, ref = timed("jobs=1", lambda: wb.scan(corpus, jobs=1), args.repeat)
        assert len(ref["artifacts"]) == artifacts and len(ref["errors"]) == args.sets
        rows.append(("in-process (jobs=1)", ref_t))

        def same(res) -> None:
            for name in ref:
                pd.testing.assert_frame_equal(res[name], ref[name])

        for j in args.jobs:
            t, res = timed(f"jobs={j}", lambda j=j: wb.scan(corpus, jobs=j), args.repeat)
            same(res)
            rows.append((f"process pool (jobs={j})", t))

        if not args.no_dask:
            from distributed import Client, LocalCluster

            for w in args.dask:
                t0 = time.perf_counter()
                with LocalCluster(n_workers=w, processes=True, threads_per_worker=1,
                                  dashboard_address=":0") as cluster, Client(cluster) as client:
                    start = time.perf_counter() - t0
                    t, res = timed(f"dask {w}", lambda c=client: wb.scan(corpus, scheduler=c),
                                   args.repeat)
                    same(res)
                rows.append((f"dask LocalCluster ({w} workers; start-up {start:.1f} s not counted)", t))

        print(f"\n{'backend':<62} {'seconds':>8} {'files/s':>9} {'vs jobs=1':>10}")
        for label, t in rows:
            print(f"{label:<62} {t:8.2f} {total / t:9.0f} {ref_t / t:9.2f}x")
        seg, ten = len(ref["segments"]), len(ref["tensors"])
        print(f"\nframes: artifacts {len(ref['artifacts'])}, segments {seg}, tensors {ten}, "
              f"errors {len(ref['errors'])} (identical for every backend)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
