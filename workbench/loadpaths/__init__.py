"""Load paths: small named functions that bring an artifact's bytes into CPU or CUDA memory.

Every path is a :class:`LoadPath` registered by name in :data:`PATHS` (CPU paths in
:mod:`.cpu`, CUDA paths in :mod:`.cuda`, ExecuTorch runtime and ``.pt2`` paths in
:mod:`.runtime`). :func:`workbench.profile` runs each path in a **new process** (forked from
a server that imported the heavy modules once, :func:`server_main`, or a new interpreter,
:func:`worker_main`) and measures one call in two timed phases:

* the **load** (:attr:`LoadPath.run`, ``load_s``): the path's own work;
* the **read** (:attr:`LoadPath.consume`, ``read_s``): every weight byte read once — a
  :func:`checksum` over the buffers the load offered (the same number for every path, checked
  against the file's), or for the runtime's loaders the first execution of ``forward``.

and then memory (peak RSS growth, anonymous vs file-backed, locked), page faults and, for
CUDA paths, peak device memory. A crash of the worker (a segfault in a native loader) is a
row with an error, never a crash of the caller.

The parent process computes a :class:`Plan` from the :class:`~workbench.Artifact` (files,
sizes, the unique stored byte ranges of its tensors, methods, delegates) and hands it to the
worker as JSON, so workers never reparse the artifact.

Adding a path (a module-level function, importable by name in a fresh interpreter)::

    from workbench.loadpaths import RunContext, register

    @register("read_whole", doc="one read() per file into a bytes object")
    def read_whole(ctx: RunContext) -> None:
        bufs = {}
        for f in ctx.files:
            with open(f, "rb") as fh:
                bufs[f] = ctx.keep(fh.read())
        ctx.file_buffers = bufs          # the consuming pass checksums the weights in them
        n = sum(map(len, bufs.values()))
        ctx.moved(n, copied=n)

or, without touching the registry, ``wb.profile(p, paths=[LoadPath("mine", my_fn), "read"])``.

``ctx.keep(obj)`` holds what the path loaded until memory is measured; ``ctx.moved`` records
the bytes made available (and how many of them were copied); ``ctx.file_buffers`` (file ->
buffer) or ``ctx.weight_buffers`` (one buffer per :meth:`RunContext.extents` entry) is what
the consuming pass reads. Raise :class:`Skip` when the path cannot run here (a missing
package, no GPU).
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
    CONSUME_KINDS,
    PATHS,
    ROOFLINE,
    LoadPath,
    Plan,
    RunContext,
    Skip,
    _cuda_torch,
    _error_text,
    checksum,
    consume_checksum,
    consume_none,
    evict,
    memory_snapshot,
    plan_extents,
    reference_checksum,
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
    "SERVER_BOOT",
    "server_main",
    "checksum",
    "consume_checksum",
    "consume_none",
    "reference_checksum",
    "plan_extents",
    "CONSUME_KINDS",
]


def run_once(plan: Plan, name: str, cold: bool) -> dict[str, Any]:
    """Run path ``name`` once in this process and measure it (called by :func:`worker_main`).

    Untimed: ``setup``, then (``cold``) eviction and the residency check, then the memory
    baseline. Timed: the load (``run``: ``load_s``), then the consuming pass (``consume``:
    ``read_s``); memory is read after both. A ``forward`` consumer's second execution is
    timed last, on its own (``steady_s``).
    """
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
    gc.collect()  # maps that setup left to the collector would keep pages resident
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
    consume = lp.consumer
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
    if out["status"] == "ok" and consume is not None:
        try:
            consume(ctx)
            if torch is not None:
                torch.cuda.synchronize()
        except Exception as e:
            out.update(status="error", error=f"read: {_error_text(e)}",
                       traceback=traceback.format_exc(limit=8))
    t2 = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    m1 = memory_snapshot()
    steady = None
    if out["status"] == "ok" and ctx.again is not None:
        try:
            s0 = time.perf_counter()
            ctx.again()
            steady = time.perf_counter() - s0
        except Exception as e:
            ctx.note(f"second run failed: {_error_text(e)}")
    gc.enable()

    def delta(key: str) -> int | None:
        a, b = m0.get(key), m1.get(key)
        return None if a is None or b is None else b - a

    consumed = consume is not None and out["status"] == "ok"
    out.update(
        load_s=t1 - t0, read_s=(t2 - t1) if consumed else None, wall_s=t2 - t0,
        steady_s=steady, bytes=ctx.bytes, bytes_copied=ctx.bytes_copied,
        read_bytes=ctx.read_bytes if consumed else None,
        checksum=None if ctx.checksum is None or not consumed else f"{ctx.checksum:016x}",
        checksum_comparable=ctx.checksum_comparable and ctx.consume_kind != "forward",
        consume=ctx.consume_kind if consumed else "none",
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
    """The limits, measured here and now: ``ram_read``, ``memcpy``, ``page_cache_read`` (+
    ``h2d_pinned``).

    Each is a dict ``name, device, gbps, bytes, seconds, note`` (``gbps`` None on failure).
    """
    out = [cpu.ram_read_roofline(plan), cpu.memcpy_roofline(plan), cpu.page_cache_roofline(plan)]
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

#: The command that starts a fork server: ``[python, -c, SERVER_BOOT, PRELOAD_JSON]``.
SERVER_BOOT = ("import sys; from workbench.loadpaths import server_main; "
               "server_main(sys.argv[1:])")


def server_main(argv: list[str]) -> int:
    """A fork server: import the modules named in ``argv[0]`` (a JSON list) once, then fork
    one child per request, so that every run is a new process without paying the imports.

    Protocol (one JSON object per line): the server writes ``{"ready": true, "preloaded":
    [...], "failed": {...}}``; then for each request ``{"plan", "name", "cold", "result",
    "log", "tmpdir", "sys_path"}`` read from stdin it forks, writes ``{"pid": n}``, waits, and
    writes ``{"rc": exit code}`` (negative: killed by that signal). The child sends its
    stdout and stderr to ``log`` and runs :func:`worker_main`. The server ends at end of
    input.

    A forked child starts from the server's memory: its RSS includes the preloaded modules
    (the memory columns are growths, measured from the child's own baseline), and the timed
    window can take a few copy-on-write faults on them. ``profile(..., isolation="spawn")``
    runs a new interpreter per run instead.

    Example (what :func:`workbench.profile` starts; one request, by hand)::

        python -c "$SERVER_BOOT" '["numpy"]'   <<< '{"plan": "plan.json", "name": "read",
            "cold": false, "result": "r.json", "log": "w.log", "tmpdir": "/tmp"}'
    """
    import importlib

    # The protocol gets its own descriptor; whatever a module prints goes to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    preload = json.loads(argv[0]) if argv else []
    failed: dict[str, str] = {}
    for mod in preload:
        try:
            importlib.import_module(mod)
        except BaseException as e:  # a module that cannot load here: the child retries it
            failed[mod] = _error_text(e)
    gc.collect()
    gc.freeze()  # fewer copy-on-write faults in the children

    def say(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    say({"ready": True, "preloaded": [m for m in preload if m not in failed], "failed": failed})
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns into this loop
            try:
                out.close()
                _child(req)
            finally:
                os._exit(70)
        say({"pid": pid})
        _, status = os.waitpid(pid, 0)
        say({"rc": os.waitstatus_to_exitcode(status)})
    return 0


def _child(req: dict[str, Any]) -> None:
    log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.environ["TMPDIR"] = req["tmpdir"]
    import tempfile

    tempfile.tempdir = None
    for p in reversed(req.get("sys_path") or []):
        if p not in sys.path:
            sys.path.insert(0, p)
    gc.unfreeze()
    worker_main([req["plan"], req["name"], "1" if req["cold"] else "0", req["result"]])
