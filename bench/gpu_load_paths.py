"""One command on a GPU machine: every CUDA load path and the pinned-copy roofline, in minutes.

What it does
------------
1. Checks that CUDA is usable (``torch.cuda.is_available()``) **before** generating anything;
   without a GPU it prints the reason and exits with code 2.
2. Generates a ~2 GB payload in a temporary folder (never under ``--out``, so the big file is
   not copied back): a plain binary file of ``--tensors`` equal float16 tensors (profiled as a
   ``raw`` file: whole-file extents) and, with ``--pte`` (default: when executorch is importable
   and time allows), a portable ``.pte`` of ``Linear(4096, 4096)`` layers of about the same size
   (exported with ``bench/_artifacts.py``'s generator).
3. Runs :func:`workbench.profile` with ``device="cuda"`` (``--cpu``: every CPU path too):
   ``pageable_h2d``, ``pinned_h2d``, ``registered_h2d``, ``gds`` (kvikio), ``executorch_cuda``
   and ``aoti`` (skipped with their reason where they do not apply) plus the ``h2d_pinned``
   roofline (a large pinned ``cudaMemcpy``), each run in a new process. Every CUDA path is
   timed as the copy to the GPU plus a checksum of the device copy computed on the GPU
   (``read_s``); a checksum that differs from the file's makes the row an ``error``, so a
   path that moved the wrong bytes cannot post a fast number.
4. Writes ``<name>.csv`` (one row per path and run), ``<name>_summary.csv``,
   ``<name>.png`` and ``rooflines.csv`` into ``--out``; prints the tables.

The whole run is budgeted (``--budget-s``, default 300 s): each worker gets a share as its
timeout and the ``.pte`` is skipped when the raw profile used more than half of the budget.

Usage (from the repository root)::

    python bench/gpu_load_paths.py --out /tmp/gpu-load-paths
    python bench/gpu_load_paths.py --out $OUT --size-gb 2 --repeat 2 --no-pte
    python bench/gpu_load_paths.py --out $OUT --cpu          # CPU paths as well
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

MiB = 1 << 20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments (see the module doc)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=pathlib.Path, required=True,
                   help="folder for the CSV and PNG files (created)")
    p.add_argument("--size-gb", type=float, default=2.0, help="payload size in GB (default 2)")
    p.add_argument("--tensors", type=int, default=16,
                   help="tensors in the raw payload (equal sizes; default 16)")
    p.add_argument("--repeat", type=int, default=2, help="runs per path (default 2)")
    p.add_argument("--pte", dest="pte", action="store_true", default=None,
                   help="also export and profile a .pte (default: when executorch is installed)")
    p.add_argument("--no-pte", dest="pte", action="store_false", help="no .pte")
    p.add_argument("--cpu", action="store_true", help="profile the CPU paths as well")
    p.add_argument("--budget-s", type=float, default=300.0,
                   help="time budget for the whole run in seconds (default 300)")
    p.add_argument("--workdir", type=pathlib.Path, default=None,
                   help="where to generate the payload (default: a temporary folder, deleted)")
    a = p.parse_args(argv)
    if a.size_gb <= 0 or a.tensors < 1 or a.repeat < 1:
        p.error("--size-gb, --tensors and --repeat must be positive")
    return a


def cuda_unavailable() -> str | None:
    """Why this machine cannot run the CUDA paths (None when it can): the library's check."""
    from workbench.loadpaths.cuda import cuda_unavailable as check

    return check()


def make_raw(path: pathlib.Path, nbytes: int, tensors: int = 16, seed: int = 0) -> pathlib.Path:
    """Write ``nbytes`` of float16 values as ``tensors`` back-to-back tensors; return ``path``.

    The content is a 64 MiB block of random float16 values, repeated (fast to write,
    incompressible, not zeros). ``tensors`` only shapes the doc; the file is flat bytes.

    Example:
        >>> make_raw(pathlib.Path("/tmp/w.bin"), 4 << 20).stat().st_size   # doctest: +SKIP
        4194304
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    block = rng.standard_normal(min(nbytes, 64 * MiB) // 2 + 1).astype(np.float16).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    left = nbytes
    with open(path, "wb") as f:
        while left > 0:
            k = min(left, len(block))
            f.write(block[:k])
            left -= k
    return path


def make_pte(folder: pathlib.Path, nbytes: int) -> pathlib.Path:
    """Export a portable ``.pte`` of ``Linear(4096, 4096)`` layers holding ~``nbytes``."""
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    from _artifacts import Spec, generate

    layer = 4096 * 4096 * 4 + 4096 * 4
    spec = Spec("gpu_load_paths.pte", "linear", max(1, round(nbytes / layer)), 4096)
    dest = folder / spec.name
    generate(spec, dest)
    return dest


def checked(prof) -> str:
    """One line: how many ok runs had their read checked against the file's checksum.

    Example:
        >>> print(checked(prof))       # doctest: +SKIP
        checksums: 8 of 8 ok runs match the file's (3f2a...); 0 runs failed the check
    """
    f = prof.frame
    ok = f[(f["status"] == "ok") & f["consume"].isin(["checksum", "device_checksum"])]
    bad = f["error"].fillna("").str.contains("checksum").sum()
    want = ", ".join(prof.info.get("checksums", {}).values()) or "none"
    return (f"checksums: {len(ok)} ok run(s) read the file's bytes ({want}); "
            f"{bad} run(s) failed the check")


def _write(prof, out: pathlib.Path, name: str) -> None:
    prof.to_csv(out / f"{name}.csv")
    prof.to_csv(out / f"{name}_summary.csv", summary=True)
    try:
        prof.plot().savefig(out / f"{name}.png", dpi=110)
    except ImportError as e:
        print(f"(no PNG: {e})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    reason = cuda_unavailable()
    if reason:
        print(f"error: no usable CUDA device: {reason}\n"
              "bench/gpu_load_paths.py needs a GPU machine with a CUDA build of torch.",
              file=sys.stderr)
        return 2
    import pandas as pd

    import workbench as wb

    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    device = "all" if args.cpu else "cuda"
    want_pte = args.pte if args.pte is not None else importlib.util.find_spec("executorch") is not None
    nbytes = int(args.size_gb * 1e9)
    # per-run timeout: the runs of one artifact share half the budget
    per_run = max(30.0, args.budget_s / 2 / max(1, 3 * args.repeat + 1))
    rooflines = []
    with tempfile.TemporaryDirectory(prefix="gpu-load-paths-", dir=args.workdir) as tmp:
        work = pathlib.Path(tmp)
        print(f"generating {nbytes / 1e9:.2f} GB raw payload in {work} ...", flush=True)
        raw = make_raw(work / "payload.bin", nbytes, tensors=args.tensors)
        print(f"  {time.perf_counter() - t0:.1f} s", flush=True)
        prof = wb.profile(raw, device=device, repeat=args.repeat, timeout=per_run)
        print(prof.table(), flush=True)
        print(checked(prof), flush=True)
        _write(prof, args.out, "raw")
        rooflines.append(prof.rooflines.assign(artifact="raw"))
        spent = time.perf_counter() - t0
        if want_pte and spent > args.budget_s / 2:
            print(f"skipping the .pte: {spent:.0f} s of the {args.budget_s:.0f} s budget used")
        elif want_pte:
            try:
                pte = make_pte(work, nbytes)
            except Exception as e:  # the export is a bonus; the raw profile stands
                print(f"skipping the .pte: export failed: {type(e).__name__}: {e}")
            else:
                prof = wb.profile(pte, device=device, repeat=args.repeat, timeout=per_run)
                print(prof.table(), flush=True)
                print(checked(prof), flush=True)
                _write(prof, args.out, "pte")
                rooflines.append(prof.rooflines.assign(artifact="pte"))
    pd.concat(rooflines).to_csv(args.out / "rooflines.csv", index=False)
    took = time.perf_counter() - t0
    print(f"done in {took:.0f} s (budget {args.budget_s:.0f} s); files in {args.out}:")
    for f in sorted(os.listdir(args.out)):
        print(f"  {f}")
    return 0 if took <= args.budget_s * 1.2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
