"""Benchmark ``workbench.open`` on ``.pt2`` archives against ``torch.export.load``.

What is measured
----------------
Two real ``torch.export.save`` archives made with the installed torch, cached outside the
repo in ``${WORKBENCH_BENCH_CACHE:-~/.cache/workbench-bench}/torch-<version>/``:

* ``big``  -- ``big_400mb.pt2``: 24 x ``Linear(2048, 2048)``, ~400 MB of fp32 weights.
* ``many`` -- ``many_5000.pt2``: 1,300 x [``Linear(16, 16)`` + ``LayerNorm(16)``],
  5,200 parameter tensors.

For each file two sides are timed, each run in its **own fresh subprocess**:

* **ours**: ``art = workbench.open(p)``, then every frame of ``art.frames``.
  ``workbench`` (with its format readers), ``pandas`` and ``numpy`` are imported first
  and not timed.
* **reference**: ``torch.export.load(p)`` (``torch`` imported first, not timed).

Before timing, the parent reads each file once so both sides see a warm page cache.
Reported times are medians over ``--repeat`` runs. Peak RSS growth is ``VmHWM`` after the
operation minus ``VmRSS`` before it, with the high-water mark reset
(``echo 5 > /proc/self/clear_refs``) after the imports (``ru_maxrss`` delta if the reset is
not permitted). Targets: ``many`` >= 150x, ``big`` >= 100x and ours grows RSS by <= 20 MB.

Usage (from the repository root)::

    .venv/bin/python bench/bench_pt2.py                 # both files, 5 repeats
    .venv/bin/python bench/bench_pt2.py --only many --repeat 9
    .venv/bin/python bench/bench_pt2.py --quick         # small stand-ins, informative only
    .venv/bin/python bench/bench_pt2.py --check         # exit 1 if a target is missed
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from _measure import maxrss_kb, reset_hwm, status_kb

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULT_MARKER = "@@BENCH_RESULT "
SIDES = ("ours", "reference")


@dataclass(frozen=True)
class Spec:
    """One generated archive: ``count`` x Linear(width) (``linear``) or Linear+LayerNorm (``blocks``)."""

    name: str
    kind: str
    count: int
    width: int

    def describe(self) -> str:
        if self.kind == "linear":
            return f"{self.count} x Linear({self.width}, {self.width})"
        return f"{self.count} x [Linear({self.width}, {self.width}) + LayerNorm({self.width})]"


SPECS = {"big": Spec("big_400mb.pt2", "linear", 24, 2048),
         "many": Spec("many_5000.pt2", "blocks", 1300, 16)}
QUICK_SPECS = {"big": Spec("big_quick.pt2", "linear", 4, 512),
               "many": Spec("many_quick.pt2", "blocks", 100, 16)}
#: name -> (min speed-up, max ours RSS growth in MB or None)
TARGETS: dict[str, tuple[float, float | None]] = {"big": (100.0, 20.0), "many": (150.0, None)}


def cache_dir() -> Path:
    """The versioned cache folder for the installed torch."""
    env = os.environ.get("WORKBENCH_BENCH_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "workbench-bench"
    return root / f"torch-{metadata.version('torch')}"


def generate(spec: Spec, dest: Path) -> None:
    """Export ``spec`` with ``torch.export`` and save it to ``dest`` atomically."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(spec.count):
        layers.append(nn.Linear(spec.width, spec.width))
        if spec.kind == "blocks":
            layers.append(nn.LayerNorm(spec.width))
    model = nn.Sequential(*layers).eval()
    t0 = time.perf_counter()
    print(f"[bench_pt2] exporting {spec.describe()} -> {dest}", file=sys.stderr, flush=True)
    with torch.no_grad():
        ep = torch.export.export(model, (torch.randn(1, spec.width),), strict=False)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # torch names the archive folder after the file: write under the final name in a
    # temporary folder next to the cache, then move it into place.
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmpdir:
        tmp = Path(tmpdir) / dest.name
        torch.export.save(ep, str(tmp))
        os.replace(tmp, dest)
    print(f"[bench_pt2] wrote {dest} ({dest.stat().st_size / 1e6:.1f} MB) in "
          f"{time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)


def ensure(spec: Spec) -> Path:
    """The cached archive for ``spec``, generated in a subprocess on first use."""
    path = cache_dir() / spec.name
    if not path.is_file():
        subprocess.run([sys.executable, __file__, "--generate", spec.name, spec.kind,
                        str(spec.count), str(spec.width), str(path)], check=True)
    return path


# ------------------------------------------------------------------ worker (fresh process)


def _worker(side: str, path: str) -> dict:
    if side == "ours":
        import numpy  # noqa: F401
        import pandas  # noqa: F401

        import workbench
        import workbench.formats  # the readers (imported lazily by open): not timed either

        def op():
            art = workbench.open(path)
            return art, [art.frames[k] for k in art.frames]

        def describe(res) -> dict:
            art, built = res
            return {"frames": len(built), "rows": sum(len(df) for df in built),
                    "tensors": len(art.tensors), "torch_imported": "torch" in sys.modules}
    else:
        import torch

        def op():
            return torch.export.load(path)

        def describe(res) -> dict:
            return {"tensors": len(res.state_dict) + len(res.constants)}

    hwm_reset = reset_hwm()
    rss_before = status_kb("VmRSS")
    maxrss_before = maxrss_kb()
    t0 = time.perf_counter()
    res = op()
    elapsed = time.perf_counter() - t0
    hwm_after = status_kb("VmHWM")
    if hwm_reset and rss_before is not None and hwm_after is not None:
        growth_kb, method = hwm_after - rss_before, "VmHWM"
    else:
        growth_kb, method = maxrss_kb() - maxrss_before, "ru_maxrss"
    return {"time_s": elapsed, "rss_growth_mb": max(growth_kb, 0) / 1024, "rss_method": method,
            **describe(res)}


# ------------------------------------------------------------------ driver


def _run_worker(side: str, path: Path, timeout: float) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    try:
        proc = subprocess.run([sys.executable, __file__, "--worker", side, str(path)],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER):])
    tail = (proc.stderr.strip().splitlines() or ["<no stderr>"])[-1]
    return {"error": f"exit {proc.returncode}: {tail}"}


def _warm(path: Path) -> None:
    buf = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def _bench(key: str, spec: Spec, repeat: int, timeout: float) -> dict:
    path = ensure(spec)
    _warm(path)
    out: dict = {"key": key, "path": str(path), "size": path.stat().st_size}
    for side in SIDES:
        runs = []
        for i in range(repeat):
            r = _run_worker(side, path, timeout)
            msg = r.get("error") or f"{r['time_s'] * 1e3:.2f} ms +{r['rss_growth_mb']:.1f} MB"
            print(f"  {key:<5} {side:<9} {i + 1}/{repeat}: {msg}", file=sys.stderr, flush=True)
            runs.append(r)
            if "error" in r:
                break
        ok = [r for r in runs if "error" not in r]
        out[side] = ({"median_s": statistics.median(r["time_s"] for r in ok),
                      "rss_mb": max(r["rss_growth_mb"] for r in ok),
                      "rss_method": ok[0]["rss_method"], "last": ok[-1]}
                     if ok else {"error": runs[-1]["error"]})
    if "median_s" in out["ours"] and "median_s" in out["reference"]:
        out["speedup"] = out["reference"]["median_s"] / out["ours"]["median_s"]
    return out


def _table(results: list[dict], quick: bool) -> bool:
    head = (f"{'file':<16} {'size MB':>8} {'ours ms':>9} {'torch.export.load ms':>21} "
            f"{'ratio':>7} {'ours +RSS MB':>13} {'ref +RSS MB':>12}")
    print(head)
    print("-" * len(head))
    ok = True
    for r in results:
        o, f = r["ours"], r["reference"]
        print(f"{Path(r['path']).name:<16} {r['size'] / 1e6:>8.1f} "
              f"{o.get('median_s', float('nan')) * 1e3:>9.2f} "
              f"{f.get('median_s', float('nan')) * 1e3:>21.1f} {r.get('speedup', float('nan')):>6.1f}x "
              f"{o.get('rss_mb', float('nan')):>13.1f} {f.get('rss_mb', float('nan')):>12.1f}")
    print("Targets" + (" (quick: informative only)" if quick else "") + ":")
    for r in results:
        min_speedup, max_rss = TARGETS[r["key"]]
        sp = r.get("speedup")
        met = sp is not None and sp >= min_speedup
        ok &= met
        print(f"  [{'MET' if met else 'MISSED':^7}] {r['key']}: ratio >= {min_speedup:g}x "
              f"({'n/a' if sp is None else f'{sp:.1f}x'})")
        if max_rss is not None:
            rss = r["ours"].get("rss_mb")
            met = rss is not None and rss <= max_rss
            ok &= met
            print(f"  [{'MET' if met else 'MISSED':^7}] {r['key']}: ours RSS growth <= {max_rss:g} MB "
                  f"({'n/a' if rss is None else f'{rss:.1f} MB'})")
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="workbench.open vs torch.export.load on .pt2 archives")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--only", choices=sorted(SPECS))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--check", action="store_true")
    p.add_argument("--json", metavar="OUT")
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--generate", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(RESULT_MARKER + json.dumps(_worker(*args.worker)), flush=True)
        return 0
    if args.generate:
        name, kind, count, width, dest = args.generate
        generate(Spec(name, kind, int(count), int(width)), Path(dest))
        return 0
    specs = QUICK_SPECS if args.quick else SPECS
    keys = [args.only] if args.only else list(specs)
    results = [_bench(k, specs[k], max(args.repeat, 1), args.timeout) for k in keys]
    ok = _table(results, args.quick)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
