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
``_no_ptd`` variants) runs ``--repeat`` times, each in a new process, with the ``ram_read``,
``memcpy`` and page-cache-read rooflines measured in the same run. Every run is timed as the
load plus a read of every weight byte (a checksum, checked against the file's; for the
runtime's loaders the first ``forward``), so the paths compare the same work. The table shows
medians of the load, the read and their total with the min-max over the runs, GB/s against
``ram_read``, the peak RSS growth and what is held at the end split into private (anonymous)
and file-backed memory, locked memory (the runtime's mlock) and page faults. Closing
paragraphs state what the mapping path's load-only rate means, the time to the first
inference of the mapped and the copying loader, and their private-memory difference.

Timings on a shared machine are noisy: read the min-max column before comparing medians.

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
    """Plain sentences: what each path holds, mapping vs copying to every byte read once, and
    the runtime's loaders to the first inference."""
    s = prof.summary.set_index("path")
    ok = s[s["status"] == "ok"]

    def ms(p: str, col: str = "wall_s") -> float:
        return float(ok.loc[p, col]) * 1e3

    def held(p: str) -> str | None:
        if p not in ok.index:
            return None
        r = ok.loc[p]
        lock = f", {r['locked'] / MiB:,.0f} MiB locked" if r["locked"] and r["locked"] > MiB else ""
        return (f"{p}: +{r['rss_anon_growth'] / MiB:,.0f} MiB private, "
                f"+{r['rss_file_growth'] / MiB:,.0f} MiB file-backed{lock} "
                f"(peak +{r['peak_rss_growth'] / MiB:,.0f} MiB); load {ms(p, 'load_s'):,.1f} ms + "
                f"read {ms(p, 'read_s'):,.1f} ms = {ms(p):,.1f} ms")

    order = ("mmap_touch", "wb_views", "pt2_views", "executorch_runtime", "read", "readinto",
             "per_tensor_copy", "executorch_buffer", "pt2_export_load")
    lines = [x for x in (held(p) for p in order) if x]
    memcpy = prof.roofline("memcpy")
    if "mmap_touch" in ok.index and memcpy:
        r = ok.loc["mmap_touch"]
        lines.append(f"=> mmap_touch's load alone is {r['load_gbps']:,.1f} GB/s "
                     f"({r['load_gbps'] / memcpy:,.1f}x memcpy): pages mapped, not bytes read; with "
                     f"every weight byte read once it is {r['gbps']:,.2f} GB/s "
                     f"({r['frac_roofline']:.0%} of ram_read).")
    copying = [p for p in ("read", "readinto", "per_tensor_copy") if p in ok.index]
    if "mmap_touch" in ok.index and copying:
        best = min(copying, key=lambda p: ms(p))
        lines.append(f"=> to every weight byte read once: mmap_touch {ms('mmap_touch'):,.1f} ms, "
                     f"the fastest copying path ({best}) {ms(best):,.1f} ms.")
    if "executorch_runtime" in ok.index and "executorch_buffer" in ok.index:
        lines.append(f"=> to the first inference (load + first forward): runtime file loader "
                     f"{ms('executorch_runtime'):,.0f} ms (load {ms('executorch_runtime', 'load_s'):,.1f}),"
                     f" bytes loader {ms('executorch_buffer'):,.0f} ms "
                     f"(load {ms('executorch_buffer', 'load_s'):,.1f}); a second forward "
                     f"{ms('executorch_runtime', 'steady_s'):,.0f} ms.")
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
    lines += [f"=> {n}" for n in prof.cold_notes]
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
