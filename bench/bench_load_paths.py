"""CPU load paths of the ~400 MB ``.pte``: what mmap, mlock and copies cost in time and memory.

What is measured
----------------
``workbench.profile`` on real ExecuTorch programs from ``bench/_artifacts.py`` (generated
once, cached in ``${WORKBENCH_BENCH_CACHE:-~/.cache/workbench-bench}``):

* ``big`` -- ``big_400mb.pte``: 24 x ``Linear(2048, 2048)``, ~400 MB of fp32 weights in
  the constant segment;
* ``big_external`` -- the same weights in a sibling ``.ptd`` (``external_constants=True``),
  which adds the with/without-``.ptd`` runtime paths;
* ``pt2`` (opt-in) -- ``big_400mb.pt2`` from ``bench/bench_pt2.py`` (``torch.export.save``):
  ``torch.export.load`` vs workbench's views. It is profiled with ``trusted=True`` because
  this script generated it (``torch.export.load`` unpickles).

Every CPU load path (``read``, ``readinto``, ``mmap_*``, ``per_tensor_copy``,
``torch_frombuffer``, ``wb_views``, ``executorch_runtime`` / ``executorch_buffer`` and their
``_no_ptd`` variants) runs ``--repeat`` times, each in a fresh process, with the
``memcpy`` and page-cache-read rooflines measured in the same run. The table shows medians:
time, GB/s, the fraction of the path's roofline, the peak RSS growth and what is held at
the end split into private (anonymous) and file-backed memory, locked memory (the runtime's
mlock) and page faults. A closing paragraph states the private-memory difference between
the mapped and the copying loaders.

Usage (from the repository root)::

    .venv/bin/python bench/bench_load_paths.py                    # big + big_external, 3 runs
    .venv/bin/python bench/bench_load_paths.py --only big --repeat 5
    .venv/bin/python bench/bench_load_paths.py --only pt2         # torch.export.load vs views
    .venv/bin/python bench/bench_load_paths.py --quick            # 4 MB stand-ins, smoke test
    .venv/bin/python bench/bench_load_paths.py --cold --out /tmp/lp   # + CSV and PNG files
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

from _artifacts import QUICK_SPECS, SPECS, ensure

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

MiB = 1 << 20


def story(prof) -> str:
    """Plain sentences: private vs file-backed memory of the mapped and copying loaders."""
    s = prof.summary.set_index("path")
    ok = s[s["status"] == "ok"]

    def held(p: str) -> str | None:
        if p not in ok.index:
            return None
        r = ok.loc[p]
        lock = f", {r['locked'] / MiB:,.0f} MiB locked" if r["locked"] and r["locked"] > MiB else ""
        return (f"{p}: +{r['rss_anon_growth'] / MiB:,.0f} MiB private, "
                f"+{r['rss_file_growth'] / MiB:,.0f} MiB file-backed{lock} "
                f"(peak +{r['peak_rss_growth'] / MiB:,.0f} MiB, {r['wall_s'] * 1e3:,.0f} ms)")

    order = ("mmap_touch", "wb_views", "pt2_views", "executorch_runtime", "read",
             "per_tensor_copy", "executorch_buffer", "pt2_export_load")
    lines = [x for x in (held(p) for p in order) if x]
    if "executorch_runtime" in ok.index and "executorch_buffer" in ok.index:
        d = ok.loc["executorch_buffer", "rss_anon_growth"] - ok.loc["executorch_runtime",
                                                                     "rss_anon_growth"]
        if d > 16 * MiB:
            lines.append(f"=> the runtime's mmap+mlock file loader saves {d / MiB:,.0f} MiB of "
                         "private memory over loading from a bytes copy: its pages are "
                         "file-backed (shared with the page cache) and locked.")
        else:
            lines.append(f"=> file and buffer loaders differ by {d / MiB:,.0f} MiB of private "
                         "memory: the weights are in the .ptd, which both map and lock; only "
                         "the small .pte is copied by the buffer loader.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", choices=("big", "big_external", "pt2"),
                   default=["big", "big_external"])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cold", action="store_true", help="evict the files before each run")
    p.add_argument("--quick", action="store_true", help="small stand-in files (smoke test)")
    p.add_argument("--paths", nargs="+", help="only these load paths")
    p.add_argument("--out", type=pathlib.Path, help="write <name>.csv/_summary.csv/.png here")
    args = p.parse_args(argv)

    import platform

    import workbench as wb

    specs = QUICK_SPECS if args.quick else SPECS
    print(f"# {platform.node()} · {platform.machine()} · {__import__('os').cpu_count()} CPUs · "
          f"python {platform.python_version()} · workbench {wb.__version__}")
    for key in args.only:
        trusted = key == "pt2"
        if trusted:
            import bench_pt2

            path = bench_pt2.ensure((bench_pt2.QUICK_SPECS if args.quick else bench_pt2.SPECS)["big"])
            data = None
        else:
            spec = specs[key]
            path = ensure(spec)
            # the cache folder holds several .ptd files with the same keys: name the right one
            data = [path.with_suffix(".ptd")] if spec.external else None
        t0 = time.perf_counter()
        prof = wb.profile(path, paths=args.paths, repeat=args.repeat, cold=args.cold, data=data,
                          trusted=trusted)
        print()
        print(prof.table())
        print(f"({time.perf_counter() - t0:.0f} s for {len(prof.frame)} rows)")
        print(story(prof))
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            name = path.stem
            prof.to_csv(args.out / f"{name}.csv")
            prof.to_csv(args.out / f"{name}_summary.csv", summary=True)
            prof.plot().savefig(args.out / f"{name}.png", dpi=110)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
