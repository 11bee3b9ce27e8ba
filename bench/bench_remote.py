"""Benchmark remote artifacts (#37): requests, bytes and time of ``wb.open(url)``.

What is measured
----------------
Every file is served by ``tests/rangeserver.py`` (our range-capable HTTP server on
127.0.0.1; it counts requests and body bytes per path, and can add latency per request and
cap the bandwidth).

1. **Budget** (no latency): ``art = wb.open(url)``, then ``art.segments`` and ``art.tensors``.
   The requests and bytes are the server's own counts for everything the open caused (the
   program, its ``.ptd`` siblings and the folder listing). Goal for a ``.pte`` up to 2 GB:
   at most 4 requests and 1 MB, plus at most one request and 8 kB per delegate blob whose
   header the segments frame needs; for ``.pt2`` and ``.ptd``: at most 4 requests plus one
   per JSON config or header read. Files: the 403 MB program (``bench/_artifacts.py big``),
   the 1B-shaped LLM export (``~/.cache/workbench-bench/llm_1b/llm_1b.pte``, skipped with a
   message when absent), and the samples ``mlp_aoti.pt2``, ``mlp.pt2``,
   ``llm_tiny_external.ptd``.
2. **Speed** of the 403 MB program served with 30 ms latency per request and 100 MB/s:
   *remote* = ``wb.open(url)`` + every frame of ``art.frames``; *download* = fetch the whole
   file (one GET, streamed to a temporary file) + ``wb.open(local)`` + every frame. Each side
   is timed ``--repeat`` times in this process (imports and one warm-up open of a small
   sample over a URL are not timed); medians; the ratio download / remote is the result
   (goal: at least 20x).

Run::

    .venv/bin/python bench/bench_remote.py            # budget + speed
    .venv/bin/python bench/bench_remote.py --repeat 1 --no-speed
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from rangeserver import RangeServer  # noqa: E402

import workbench as wb  # noqa: E402

MB = 1_000_000


def _blobs(art: wb.Artifact) -> int:
    d = art.frames["delegates"] if "delegates" in art.frames else None
    return 0 if d is None else int((d["location"] == "segment").sum())


def budget(path: Path, eager: bool = True) -> dict:
    """Requests and bytes of open + segments + tensors over a URL (no latency); with
    ``eager=False`` a small non-.pte file is not fetched whole first (the readers' ranged
    reads are measured, as for a file over ``workbench._open.EAGER_BYTES``)."""
    from workbench import _open

    saved = _open.EAGER_BYTES
    _open.EAGER_BYTES = saved if eager else 0
    try:
        return _budget(path, eager)
    finally:
        _open.EAGER_BYTES = saved


def _budget(path: Path, eager: bool) -> dict:
    with RangeServer(path.parent) as srv:
        t0 = time.perf_counter()
        art = wb.open(srv.url(path.name))
        art.segments, art.tensors  # noqa: B018
        seconds = time.perf_counter() - t0
        blobs = _blobs(art) if art.format == "pte" else 0
        row = {"file": path.name + ("" if eager else " (ranged)"), "size": path.stat().st_size,
               "format": art.format, "blobs": blobs, "requests": srv.total_requests, "bytes": srv.total_sent,
               "max_in_flight": srv.max_inflight, "seconds": seconds,
               "per_path": dict(srv.requests)}
        art.close()
    if row["format"] == "pte":
        row["goal_requests"] = 4 + blobs
        row["goal_bytes"] = 1 << 20 if not blobs else (1 << 20) + blobs * 8192
    else:
        row["goal_requests"] = None
        row["goal_bytes"] = None
    return row


def _every_frame(art: wb.Artifact) -> None:
    for name in art.frames:
        art.frames[name]


def speed(path: Path, repeat: int, latency: float, bandwidth: float) -> dict:
    """Median seconds of remote open + every frame vs download + local open + every frame."""
    import requests

    remote_s: list[float] = []
    download_s: list[float] = []
    local_s: list[float] = []
    with RangeServer(path.parent, latency=latency, bandwidth=bandwidth) as srv, \
            tempfile.TemporaryDirectory() as tmp:
        with RangeServer(ROOT / "sample_models") as warm:  # warm-up: not timed
            _every_frame(wb.open(warm.url("mlp_xnnpack.pte")))
        _every_frame(wb.open(str(path)))
        for _ in range(repeat):
            srv.reset()
            t0 = time.perf_counter()
            art = wb.open(srv.url(path.name))
            _every_frame(art)
            remote_s.append(time.perf_counter() - t0)
            requests_made, sent = srv.total_requests, srv.total_sent
            art.close()
            local = Path(tmp) / path.name
            t0 = time.perf_counter()
            with requests.get(srv.url(path.name), stream=True, timeout=600) as r, \
                    open(local, "wb") as f:
                r.raise_for_status()
                for chunk in r.iter_content(1 << 20):
                    f.write(chunk)
            t1 = time.perf_counter()
            art = wb.open(str(local))
            _every_frame(art)
            t2 = time.perf_counter()
            download_s.append(t2 - t0)
            local_s.append(t2 - t1)
            art.close()
            local.unlink()
    r, d = statistics.median(remote_s), statistics.median(download_s)
    # what the download would cost at exactly the nominal bandwidth (our server's throttle
    # adds overhead): one request's latency + size / bandwidth + the local open
    ideal = latency + path.stat().st_size / bandwidth + statistics.median(local_s)
    return {"file": path.name, "remote_s": r, "download_s": d, "ratio": d / r,
            "ideal_download_s": ideal, "ideal_ratio": ideal / r,
            "remote_requests": requests_made, "remote_bytes": sent,
            "latency_ms": latency * 1e3, "bandwidth_MBps": bandwidth / MB}


def _print_budget(rows: list[dict]) -> None:
    print(f"{'file':28} {'size':>12} {'fmt':4} {'blobs':>5} {'requests':>8} {'bytes':>10} "
          f"{'goal req':>8} {'goal bytes':>10} {'in flight':>9} {'ok':>3}")
    for r in rows:
        ok = "" if r["goal_requests"] is None else (
            "yes" if r["requests"] <= r["goal_requests"] and r["bytes"] <= r["goal_bytes"]
            else "NO")
        print(f"{r['file']:28} {r['size']:>12,} {r['format']:4} {r['blobs']:>5} "
              f"{r['requests']:>8} {r['bytes']:>10,} {r['goal_requests'] or '-'!s:>8} "
              f"{r['goal_bytes'] or '-'!s:>10} {r['max_in_flight']:>9} {ok:>3}")
        print(f"{'':28} requests per path: {r['per_path']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--latency", type=float, default=0.030)
    ap.add_argument("--bandwidth", type=float, default=100 * MB)
    args = ap.parse_args(argv)

    from _artifacts import SPECS, artifact_path

    big = artifact_path(SPECS["big"])
    llm = Path(os.environ.get("WORKBENCH_BENCH_CACHE", Path.home() / ".cache" /
                              "workbench-bench")).expanduser() / "llm_1b" / "llm_1b.pte"
    files = []
    if big.is_file():
        files.append(big)
    else:
        print(f"skip: {big} is absent (build it: .venv/bin/python bench/_artifacts.py big)")
    if llm.is_file():
        files.append(llm)
    else:
        print(f"skip: {llm} is absent (the 1B-shaped LLM export)")
    files += [ROOT / "sample_models" / n for n in
              ("llm_tiny.pte", "llm_tiny_external.pte", "llm_tiny_external.ptd", "mlp_aoti.pt2",
               "mlp.pt2", "wide_xnnpack_8da4w.pte")]
    print("== budget: open + segments + tensors over http://127.0.0.1 (no latency)")
    rows = [budget(p) for p in files]
    rows += [budget(p, eager=False) for p in files if p.suffix in (".pt2",)]
    _print_budget(rows)
    if not args.no_speed and big.is_file():
        print(f"\n== speed: {big.name} at {args.latency * 1e3:.0f} ms/request, "
              f"{args.bandwidth / MB:.0f} MB/s; open + every frame; median of {args.repeat}")
        s = speed(big, args.repeat, args.latency, args.bandwidth)
        print(f"remote (ranged reads):         {s['remote_s']:8.3f} s  "
              f"({s['remote_requests']} requests, {s['remote_bytes']:,} bytes)")
        print(f"download + open locally:       {s['download_s']:8.3f} s")
        print(f"ratio download / remote:       {s['ratio']:8.1f}x   (goal >= 20x)")
        print(f"nominal download + open:       {s['ideal_download_s']:8.3f} s  (size / bandwidth "
              f"+ latency + the measured local open)")
        print(f"ratio nominal download/remote: {s['ideal_ratio']:8.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
