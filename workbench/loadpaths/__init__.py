"""Load paths: small named functions that bring an artifact's bytes into CPU or CUDA memory.

Every path is a :class:`LoadPath` registered by name in :data:`PATHS` (CPU paths in
:mod:`.cpu`, CUDA paths in :mod:`.cuda`, ExecuTorch runtime and ``.pt2`` paths in
:mod:`.runtime`). :func:`workbench.profile` runs each path in a **fresh subprocess**
(:func:`worker_main`) and measures one call of :attr:`LoadPath.run`: wall time, bytes,
peak RSS growth (anonymous vs file-backed), locked memory, page faults and, for CUDA paths,
peak device memory. A crash of the worker (a segfault in a native loader) is a row with an
error, never a crash of the caller.

The parent process computes a :class:`Plan` from the :class:`~workbench.Artifact` (files,
sizes, the unique stored byte ranges of its tensors, methods, delegates) and hands it to the
worker as JSON, so workers never reparse the artifact.

Adding a path (a module-level function, importable by name in a fresh interpreter)::

    from workbench.loadpaths import RunContext, register

    @register("read_first_page", roofline="page_cache_read", doc="first 4 KiB of each file")
    def read_first_page(ctx: RunContext) -> None:
        n = 0
        for f in ctx.files:
            with open(f, "rb") as fh:
                n += len(ctx.keep(fh.read(4096)))
        ctx.moved(n, copied=n)

or, without touching the registry, ``wb.profile(p, paths=[LoadPath("mine", my_fn), "read"])``.

``ctx.keep(obj)`` holds what the path loaded until memory is measured; ``ctx.moved`` records
the bytes made available (and how many of them were copied). Raise :class:`Skip` when the
path cannot run here (a missing package, no GPU).
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
import traceback
from typing import Any

# Register the built-in paths (these modules import nothing heavy at import time).
# Import order = registry order: CPU paths, CUDA copies, then the real loaders of runtime.py.
from . import cpu, cuda, runtime  # noqa: F401 - imported to register their paths
from ._base import (
    COLD_THRESHOLD,
    PATHS,
    ROOFLINE,
    LoadPath,
    Plan,
    RunContext,
    Skip,
    _cuda_torch,
    _error_text,
    evict,
    memory_snapshot,
    register,
    reset_peak,
    resident_fraction,
    resolve,
)

__all__ = [
    "PATHS",
    "LoadPath",
    "Plan",
    "RunContext",
    "Skip",
    "register",
    "resolve",
    "worker_main",
    "memory_snapshot",
    "resident_fraction",
    "evict",
    "reset_peak",
    "ROOFLINE",
    "run_once",
    "measure_rooflines",
    "BOOT",
]


def run_once(plan: Plan, name: str, cold: bool) -> dict[str, Any]:
    """Run path ``name`` once in this process and measure it (called by :func:`worker_main`)."""
    if name.startswith(ROOFLINE):
        return {"status": "ok", "rooflines": measure_rooflines(plan, with_cuda=name.endswith("+cuda"))}
    import numpy  # noqa: F401  (most paths use it: imported before timing, never inside)

    lp = resolve(name, plan)
    ctx = RunContext(plan, lp)
    out: dict[str, Any] = {"status": "ok", "error": None, "device": lp.device,
                           "roofline": lp.roofline, "cold_requested": cold}
    try:
        if lp.setup is not None:
            lp.setup(ctx)
    except Skip as e:
        return {**out, "status": "skipped", "error": str(e)}
    except Exception as e:
        return {**out, "status": "error", "error": f"setup: {_error_text(e)}",
                "traceback": traceback.format_exc(limit=8)}
    if cold:
        evict(ctx.files)
    out["resident_before"] = resident_fraction(ctx.files)
    if cold:
        rb = out["resident_before"]
        out["cold_achieved"] = rb is not None and rb <= COLD_THRESHOLD
    torch = _cuda_torch(lp)
    if torch is not None:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        cuda_base = torch.cuda.memory_allocated()
        cuda_free = torch.cuda.mem_get_info()[0]
    gc.collect()
    gc.disable()
    out["hwm_reset"] = reset_peak()
    m0 = memory_snapshot()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    try:
        lp.run(ctx)
        if torch is not None:
            torch.cuda.synchronize()
    except Skip as e:
        out.update(status="skipped", error=str(e))
    except Exception as e:
        out.update(status="error", error=_error_text(e), traceback=traceback.format_exc(limit=8))
    t1 = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    m1 = memory_snapshot()
    gc.enable()

    def delta(key: str) -> int | None:
        a, b = m0.get(key), m1.get(key)
        return None if a is None or b is None else b - a

    out.update(
        wall_s=t1 - t0, bytes=ctx.bytes, bytes_copied=ctx.bytes_copied,
        peak_rss_growth=(None if m1["hwm"] is None or m0["rss"] is None
                         else max(0, m1["hwm"] - m0["rss"])),
        rss_anon_growth=delta("anon"), rss_file_growth=delta("file"), locked=m1["locked"],
        major_faults=r1.ru_majflt - r0.ru_majflt, minor_faults=r1.ru_minflt - r0.ru_minflt,
        note="; ".join(ctx.notes))
    if torch is not None:
        # torch's allocator peak; loaders that allocate outside torch (ExecuTorch's CUDA
        # backend) show as the growth of device memory in use instead.
        peak = torch.cuda.max_memory_allocated() - cuda_base
        used = cuda_free - torch.cuda.mem_get_info()[0]
        out["cuda_peak_bytes"] = peak if peak > 0 else max(used, 0)
    return out


def measure_rooflines(plan: Plan, with_cuda: bool = False) -> list[dict[str, Any]]:
    """The limits, measured here and now: ``memcpy``, ``page_cache_read`` (+ ``h2d_pinned``).

    Each is a dict ``name, device, gbps, bytes, seconds, note`` (``gbps`` None on failure).
    """
    out = [cpu.memcpy_roofline(plan), cpu.page_cache_roofline(plan)]
    if with_cuda:
        out.append(cuda.h2d_roofline(plan))
    return out


def worker_main(argv: list[str]) -> int:
    """Entry point of a worker: ``PLAN_JSON PATH_NAME COLD(0|1) RESULT_JSON``.

    Writes the measurement as JSON to ``RESULT_JSON`` and leaves with ``os._exit`` (no
    interpreter teardown: native loaders' destructors are not part of the measurement).
    """
    plan_file, name, cold, result_file = argv
    with open(plan_file) as f:
        plan = Plan.from_json(f.read())
    try:
        result = run_once(plan, name, cold == "1")
    except Exception as e:  # a bug in the harness itself: still report it as a row
        result = {"status": "error", "error": f"worker: {_error_text(e)}",
                  "traceback": traceback.format_exc(limit=8)}
    tmp = f"{result_file}.tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, default=str)
    os.replace(tmp, result_file)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


#: The command a parent runs: ``[python, -c, BOOT, plan, name, cold, result]``.
BOOT = ("import sys; from workbench.loadpaths import worker_main; "
        "worker_main(sys.argv[1:])")

