"""Will it fit: the memory an ExecuTorch program takes on the runtime, before running it.

:func:`memory` is a view over frames the workbench already reads (``segments``,
``memory_plan``, ``lifetimes``, ``delegates``, ``delegate_tensors``, ``named_data``,
``instructions``, ``memory_efficiency``): it never parses the file a second time. It predicts,
per component, what the runtime allocates (anonymous memory) or maps and keeps resident
(pages of the artifact's own files) in each phase -- ``load_program``, ``load_method``,
``execute`` -- and when it lets go of it. ``measure=True`` runs the program in a child process
(:mod:`workbench.runtime`) and reads the same quantities from ``/proc``.

How the prediction works (facts measured on ExecuTorch 1.5.1's Python runtime; see
``docs/memory.md``):

* ``loader="mmap"`` (what ``Runtime.load_program(path)`` does): the file is memory-mapped and
  every range the runtime loads is ``mlock``-ed (errors ignored). At ``load_program`` that is
  the flatbuffer and the whole constant segment: all of their pages become resident. Without
  the privilege to lock (not root and ``RLIMIT_MEMLOCK`` below the bytes), ``mlock`` fails
  silently and the loader behaves as ``mmap_nolock``.
* ``loader="mmap_nolock"``: pages become resident when read: the flatbuffer at
  ``load_program``, constants when a kernel first reads them (``execute``), delegate weights
  while the backend packs them (``load_method``).
* ``loader="file"``: every loaded range is read into a malloc-ed buffer (anonymous memory).
* ``loader="buffer"``: the whole file is read into one buffer before ``load_program``.
* The Python runtime allocates the planned memory at ``load_program``: one buffer per
  ``mem_id``, as large as the largest of that ``mem_id`` over all methods (methods share it).
* XNNPACK copies ("packs") its weights at ``load_method`` and the runtime then frees the
  delegate blob and the weights it loaded for it: the original pages are released (they are
  a transient part of the peak); a whole-file buffer keeps them (weights held twice).
* A ``.ptd`` is always mapped (``data_path``): its pages used by kernels stay resident, its
  pages used by delegates are released after packing.

Rows whose size the workbench cannot know from the file (allocator metadata, the backend's
own workspace, the Python objects of inputs and outputs) say ``estimated`` in ``note``.
"""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from .artifact import Artifact

__all__ = ["LOADERS", "MEASURABLE", "PHASES", "memory", "parse_bytes"]

#: The phases, in order.
PHASES = ("load_program", "load_method", "execute")
#: The data loaders that can be predicted.
LOADERS = ("mmap", "mmap_nolock", "file", "buffer")
#: The loaders the Python runtime can be made to use (``measure=True``).
MEASURABLE = ("mmap", "mmap_nolock", "buffer")
#: A page.
PAGE = os.sysconf("SC_PAGESIZE") if hasattr(os, "sysconf") else 4096
#: Planned bytes above this are reported as absurd (a finding); nothing is ever allocated.
ABSURD = 1 << 40
#: Estimated bytes of method metadata per value (EValue + tensor object + sizes).
PER_VALUE = 48
PER_TENSOR = 96
#: Estimated bytes the XNNPACK runtime keeps per delegate call site (runtime, operators).
PER_DELEGATE = 4096
#: Estimated anonymous growth of a first execution besides inputs/outputs and workspace
#: (Python objects, the runtime's event tracer and allocator bookkeeping).
EXECUTE_BASE = 48 * 1024

COLUMNS = ["component", "phase", "storage", "bytes", "released", "counted", "explains", "file",
           "note"]


def _pages(ranges: list[tuple[int, int]]) -> int:
    """Bytes of the union of the pages that the ``(offset, size)`` ranges touch."""
    pages: set[int] = set()
    spans = []
    for off, size in ranges:
        if size <= 0:
            continue
        spans.append((off // PAGE, (off + size - 1) // PAGE + 1))
    spans.sort()
    total, end = 0, -1
    for a, b in spans:
        if a >= end:
            total += b - a
        elif b > end:
            total += b - end
        end = max(end, b)
    del pages
    return total * PAGE


def _round_page(n: int) -> int:
    return -(-int(n) // PAGE) * PAGE


def parse_bytes(text: str | int) -> int:
    """Bytes from ``"512MB"``, ``"1.5GiB"``, ``"800k"`` or a number (MB/GB are powers of 1024).

    Example:
        >>> parse_bytes("512MB")
        536870912
    """
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", str(text), re.I)
    if not m:
        raise ValueError(f"not a size: {text!r} (e.g. 512MB, 1.5GB, 800k)")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def _mlock_works(nbytes: int) -> bool:
    """Whether this process could ``mlock`` ``nbytes`` (root, or within ``RLIMIT_MEMLOCK``)."""
    try:
        import resource

        if os.geteuid() == 0:
            return True
        soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
        return soft == resource.RLIM_INFINITY or nbytes <= soft
    except (ImportError, OSError, AttributeError):
        return False


def _mutable_values(art: Artifact, method: str) -> set[int]:
    """Planned values of ``method`` that kernels mutate in place (KV caches, buffers): written
    by an instruction that also writes its own ``out``, or stored as ``mutable``."""
    out: set[int] = set()
    ins = art.frames["instructions"]
    ins = ins[ins["method"].astype(str) == method]
    for kind, writes in zip(ins["kind"].astype(str), ins["writes"]):
        if kind == "kernel" and isinstance(writes, tuple) and len(writes) > 1:
            out.update(int(w) for w in writes[:-1])
    mp = art.frames["memory_plan"]
    mp = mp[mp["method"].astype(str) == method]
    out.update(int(v) for v in mp.loc[mp["storage"].astype(str) == "mutable", "value"])
    return out


class _Rows:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, component: str, phase: str, storage: str, nbytes: int, *,
            released: str | None = None, counted: bool = True, explains: str = "",
            file: str | None = None, note: str = "") -> None:
        self.rows.append({"component": component, "phase": phase, "storage": storage,
                          "bytes": int(nbytes), "released": released, "counted": counted,
                          "explains": explains, "file": file, "note": note})


def _predict(art: Artifact, data: str | None, method: str, loader: str) -> tuple[list, dict]:
    """(rows, extra attrs) of the prediction for an opened program."""
    prog = art.path
    size = os.path.getsize(prog)
    info = art.info
    fb = int(info.get("program_size") or size)
    seg = art.frames["segments"]
    pseg = seg[seg["file"].astype(str) == prog]
    delegates = art.frames["delegates"] if "delegates" in art.frames else None
    dranges = []
    if delegates is not None and len(delegates):
        for loc, off, sz in zip(delegates["location"].astype(str), delegates["offset"],
                                delegates["size"]):
            if loc == "segment" and not _isna(off):
                dranges.append((int(off), int(sz)))

    def in_delegate(off: int) -> bool:
        return any(a <= off < a + s for a, s in dranges)

    const = [(int(o), int(s)) for k, o, s in zip(pseg["kind"].astype(str), pseg["offset"],
                                                pseg["size"])
             if k == "constant" and not in_delegate(int(o))]
    mutable_data = [(int(o), int(s)) for k, o, s in zip(pseg["kind"].astype(str),
                                                       pseg["offset"], pseg["size"])
                    if k == "mutable_data"]
    const_bytes = sum(s for _, s in const)
    rows = _Rows()
    base = os.path.basename(prog)
    lock_ok = _mlock_works(_pages([(0, fb), *const]))
    eff = loader
    findings: list[str] = []
    if loader == "mmap" and not lock_ok:
        eff = "mmap_nolock"
        findings.append("mlock is not permitted here (RLIMIT_MEMLOCK): the mmap loader keeps "
                        "only the pages it reads")

    # -- load_program: the program itself -------------------------------------------------
    if eff == "buffer":
        rows.add("program buffer (whole file)", "load_program", "anon", size,
                 explains="segments (all rows of the .pte)", file=prog,
                 note="the whole file read into one buffer; held while the program lives")
        rows.add("constant segment", "load_program", "anon", const_bytes, counted=False,
                 explains="segments kind=constant", file=prog,
                 note="inside the program buffer (not added again)")
    elif eff == "file":
        rows.add("program flatbuffer", "load_program", "anon", fb,
                 explains="segments kind=header/flatbuffer", file=prog,
                 note="read into a malloc-ed buffer")
        rows.add("constant segment (copied)", "load_program", "anon", const_bytes,
                 explains="segments kind=constant; tensors storage=segment", file=prog,
                 note="read into a malloc-ed buffer")
    elif eff == "mmap":
        rows.add("program flatbuffer (pages)", "load_program", "file",
                 _pages([(0, fb)]), explains="segments kind=header/flatbuffer", file=prog,
                 note="mapped and mlock-ed: every page resident")
        rows.add("constant segment (mapped, locked)", "load_program", "file",
                 _pages([(0, fb), *const]) - _pages([(0, fb)]),
                 explains="segments kind=constant; tensors storage=segment", file=prog,
                 note="mapped and mlock-ed at load_program: every page resident")
    else:  # mmap_nolock
        rows.add("program flatbuffer (pages)", "load_program", "file", _pages([(0, fb)]),
                 explains="segments kind=header/flatbuffer", file=prog,
                 note="estimated: pages read while parsing")
    # -- planned memory: one buffer per mem_id, the largest over the methods -------------------
    mp = art.frames["memory_plan"]
    methods = art.frames["methods"]
    if method not in set(methods["method"].astype(str)):
        raise KeyError(f"{base}: no method {method!r} (methods: "
                       f"{', '.join(methods['method'].astype(str))})")
    sizes: dict[int, dict[str, int]] = {}
    for m, mid, bsize in zip(mp["method"].astype(str), mp["mem_id"], mp["buffer_size"]):
        if not _isna(bsize):
            sizes.setdefault(int(mid), {})[m] = int(bsize)
    planned_total = 0
    for mid in sorted(sizes):
        biggest = max(sizes[mid].values())
        planned_total += biggest
        owner = max(sizes[mid], key=lambda k: sizes[mid][k])
        note = ("allocated by the Python runtime at load_program, shared by all methods "
                f"(largest: {owner})")
        if biggest >= ABSURD:
            note = f"ABSURD: the plan claims {biggest} bytes; " + note
            findings.append(f"{base}: planned arena mem_id {mid} claims {biggest} bytes "
                            f"({biggest / 2**30:.0f} GiB): the runtime would fail or exhaust "
                            "memory; nothing was allocated")
        rows.add(f"planned arena mem_id {mid}", "load_program", "anon", biggest,
                 explains=f"memory_plan mem_id={mid}", note=note)
    mutable = _mutable_values(art, method)
    mpm = mp[(mp["method"].astype(str) == method) & mp["value"].isin(mutable)]
    if len(mpm):
        rows.add("mutable buffers / KV cache", "load_program", "anon",
                 int(mpm["nbytes"].sum()), counted=False,
                 explains=f"memory_plan method={method} value in "
                 f"{sorted(int(v) for v in mpm['value'])[:8]}",
                 note="inside the planned arena (not added again)")
    if mutable_data:
        rows.add("mutable data (initial values)", "load_method",
                 "file" if eff.startswith("mmap") else "anon", sum(s for _, s in mutable_data),
                 released="load_method", explains="segments kind=mutable_data", file=prog,
                 note="copied into the planned arena at load_method")
    # -- load_method: delegates -----------------------------------------------------------------
    dt = art.frames["delegate_tensors"] if "delegate_tensors" in art.frames else None
    n_delegate_calls = 0
    transient_load_method = 0
    blob_max = 0
    if delegates is not None and len(delegates):
        dm = delegates[delegates["method"].astype(str) == method]
        n_delegate_calls = int(dm["calls"].fillna(0).sum()) if "calls" in dm else len(dm)
        blob_bytes = int(dm["size"].fillna(0).sum())
        rows.add("delegate blobs", "load_method", "file" if eff.startswith("mmap") else "anon",
                 0 if eff == "buffer" else blob_bytes, released="load_method",
                 explains=f"delegates method={method}", file=prog,
                 note="loaded for init, freed after (transient)")
        blob_max = 0 if eff == "buffer" else int(dm["size"].fillna(0).max())
    if dt is not None and len(dt):
        d = dt[(dt["method"].astype(str) == method) & (dt["role"].astype(str) == "constant")]
        for backend, grp in d.groupby(d["delegate"].astype(str), sort=True):
            wbytes = int(grp["data_size"].fillna(0).sum() + grp["scale_nbytes"].fillna(0).sum())
            if not wbytes:
                continue
            name = backend.replace("Backend", "")
            est = "" if backend == "XnnpackBackend" else "; estimated for this backend"
            rows.add(f"{name} packed weights", "load_method", "anon", wbytes,
                     explains=f"delegate_tensors delegate={backend} role=constant",
                     note="the backend's own copy of the weights, made at init (estimated "
                     "as the stored bytes)" + est)
            stores = grp["storage"].astype(str)
            files = grp["file"].astype(object)
            for where in sorted(set(stores)):
                sel = grp[stores == where]
                b = int(sel["data_size"].fillna(0).sum() + sel["scale_nbytes"].fillna(0).sum())
                if where == "named_data":
                    held = eff == "buffer"
                    rows.add(f"{name} original weights (in the .pte)", "load_method",
                             "anon" if eff in ("buffer", "file") else "file", b,
                             released=None if held else "load_method", counted=not held or
                             False, explains="named_data used_by delegate", file=prog,
                             note=("inside the whole-file buffer: held twice (original + "
                                   "packed)") if held else
                             "loaded for packing, released after (transient)")
                    if not held:
                        transient_load_method = max(transient_load_method,
                                                    _largest_call(sel))
                elif where == "external":
                    f = next((x for x in files[stores == where] if isinstance(x, str)), data)
                    rows.add(f"{name} original weights (in the .ptd)", "load_method", "file",
                             b, released="load_method", explains="named_data (.ptd) blobs",
                             file=f, note="mapped for packing, released after (transient)")
                    transient_load_method = max(transient_load_method, _largest_call(sel))
    # -- load_method: .ptd pages used by kernels -----------------------------------------------
    if data:
        nd = art.frames["named_data"]
        ndf = nd[nd["file"].astype(str) == data]
        dsize = os.path.getsize(data)
        dseg = seg[seg["file"].astype(str) == data]
        head = [(int(o), int(s)) for k, o, s in zip(dseg["kind"].astype(str), dseg["offset"],
                                                   dseg["size"]) if k in ("header", "flatbuffer")]
        rows.add(".ptd header + flatbuffer (pages)", "load_program", "file", _pages(head),
                 explains="segments of the .ptd kind=header/flatbuffer", file=data,
                 note="mapped (data_path) at load_program")
        kernel_ranges = [(int(o), int(s)) for r, o, s in zip(ndf["role"].astype(str),
                                                            ndf["offset"], ndf["size"])
                         if r != "blob"]
        if kernel_ranges:
            lock = lock_ok and loader != "mmap_nolock"
            rows.add(".ptd pages of kernel constants", "load_method" if lock else "execute",
                     "file", _pages([*head, *kernel_ranges]) - _pages(head),
                     explains="named_data (.ptd) role=tensor", file=data,
                     note="mapped and mlock-ed when the method loads" if lock else
                     "estimated: pages read by kernels")
        del dsize
    # -- portable constants touched without lock ------------------------------------------------
    if eff == "mmap_nolock" and const_bytes:
        rows.add("constant segment (pages read)", "execute", "file",
                 _pages([(0, fb), *const]) - _pages([(0, fb)]),
                 explains="segments kind=constant; tensors storage=segment", file=prog,
                 note="estimated: every constant page read by a kernel at the first execute")
    # -- method metadata -------------------------------------------------------------------
    mrow = methods[methods["method"].astype(str) == method].iloc[0]
    meta = int(mrow["values"]) * PER_VALUE + int(mrow["tensors"]) * PER_TENSOR + \
        n_delegate_calls * PER_DELEGATE
    rows.add("method allocator metadata", "load_method", "anon", meta,
             explains=f"methods method={method} (values, tensors, delegates)",
             note="estimated: values x 48 + tensors x 96 + delegate calls x 4 KiB")
    # -- execute ----------------------------------------------------------------------------------
    lt = art.frames["lifetimes"]
    lt = lt[lt["method"].astype(str) == method]
    ins_b = int(lt.loc[lt["is_input"].astype(bool), "nbytes"].sum())
    outs_b = int(lt.loc[lt["is_output"].astype(bool), "nbytes"].sum())
    rows.add("inputs and outputs", "execute", "anon", ins_b + outs_b + EXECUTE_BASE,
             explains=f"lifetimes method={method} is_input/is_output",
             note="estimated: the caller's input tensors, the returned outputs and "
             f"{EXECUTE_BASE // 1024} KiB of Python/runtime objects")
    if dt is not None and len(dt):
        d = dt[(dt["method"].astype(str) == method) & (dt["role"].astype(str) == "internal")]
        if len(d):
            ws = int(d.groupby("index")["nbytes"].sum().max())
            rows.add("backend workspace", "execute", "anon", ws,
                     explains="delegate_tensors role=internal (largest delegate)",
                     note="estimated: the largest delegate's internal tensors")
    return rows.rows, {"findings": findings, "mlock": lock_ok, "effective_loader": eff,
                       "transient": {"load_method": transient_load_method + blob_max}}


def _largest_call(sel: Any) -> int:
    if "index" not in sel:
        return int(sel["data_size"].fillna(0).sum())
    g = sel.groupby("index")[["data_size", "scale_nbytes"]].sum()
    return int((g["data_size"].fillna(0) + g["scale_nbytes"].fillna(0)).max())


def _isna(x: Any) -> bool:
    import pandas as pd

    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def _summary(rows: list[dict[str, Any]], transient: dict[str, int]) -> tuple[dict, int]:
    """(resident bytes at the end of each phase, peak). A row released in the phase that
    allocates it is transient: the peak adds ``transient[phase]`` (the most such bytes held
    at once, e.g. one delegate's blob and weights while it is packed)."""
    held = dict.fromkeys(PHASES, 0)
    for r in rows:
        if not r["counted"]:
            continue
        start = PHASES.index(r["phase"])
        end = PHASES.index(r["released"]) if r["released"] else len(PHASES)
        for k in range(start, end):
            held[PHASES[k]] += r["bytes"]
    peak = max(held[ph] + transient.get(ph, 0) for ph in PHASES)
    return held, peak


def memory(program: Any, data: Any = None, *, method: str = "forward", loader: str = "mmap",
           measure: bool = False, allow_over_memory: bool = False,
           timeout: float = 600.0) -> pd.DataFrame:
    """How much memory ``program`` takes on the ExecuTorch runtime, per component and phase.

    Args:
        program: a ``.pte`` path or an opened program.
        data: the ``.ptd`` with its external weights (default: the one ``wb.open`` attaches).
        method: the method loaded and executed.
        loader: ``mmap`` (the Python runtime's default: mapped and mlock-ed), ``mmap_nolock``,
            ``file`` (ranges read into buffers) or ``buffer`` (the whole file in memory).
        measure: also run it in a child process and measure (``attrs["measured"]``).
        allow_over_memory: measure even when the prediction exceeds ``MemAvailable``.
        timeout: seconds the measuring child may take.

    Returns:
        One row per component: ``component``, ``phase`` (in which it is allocated),
        ``storage`` (``anon`` or ``file`` pages), ``bytes``, ``released`` (the phase that frees
        it, or ``None``), ``counted`` (``False``: shown for information, inside another row),
        ``explains`` (the frame rows behind it), ``file``, ``note`` (``estimated`` where the
        file cannot tell). ``attrs``: ``by_phase`` (resident bytes at the end of each phase),
        ``peak`` (most held at once, transient copies included), ``findings``, ``savings``
        (what could be saved), ``loaders`` (``by_phase`` and ``peak`` of every loader), and
        with ``measure=True`` ``measured`` (same keys, plus ``anon``/``file`` per phase) and a
        ``measured`` column: the bytes measured for a row where the measurement separates it
        (a file's resident growth, the arena's anon growth), NaN elsewhere.

    Raises:
        ValueError: an unknown loader; measuring a loader the Python runtime cannot select.
        MemoryError: ``measure=True`` and the predicted peak exceeds ``MemAvailable``.
        RuntimeFailure: the child crashed or failed (the message names the phase).

    Example:
        >>> import workbench as wb
        >>> m = wb.memory("sample_models/llm_tiny.pte")             # doctest: +SKIP
        >>> m.attrs["by_phase"]["load_method"] > 0                  # doctest: +SKIP
        True
    """
    import pandas as pd

    from . import _open

    if loader not in LOADERS:
        raise ValueError(f"unknown loader {loader!r}: one of {', '.join(LOADERS)}")
    opened = isinstance(program, (str, os.PathLike))
    art = _open.open(program) if opened else program
    try:
        bundled = art.format == "bpte"
        if bundled:
            if measure:
                raise ValueError(f"{os.path.basename(art.path)}: a bundled program cannot be "
                                 "measured (Runtime.load_program rejects .bpte files)")
            art = art.program
        if art.format != "pte":
            raise TypeError(f"wb.memory needs an ExecuTorch program (.pte), not {art.format}")
        if data is None:
            data = next((f for f in art.files if str(f).endswith(".ptd")), None)
        data = os.fspath(data) if data else None
        rows, extra = _predict(art, data, method, loader)
        by_phase, peak = _summary(rows, extra["transient"])
        loaders = {}
        for other in LOADERS:
            r2, e2 = (rows, extra) if other == loader else _predict(art, data, method, other)
            bp, pk = _summary(r2, e2["transient"])
            loaders[other] = {"by_phase": bp, "peak": pk}
        savings = _savings(art, rows, loader, loaders)
        path = art.path
        libraries, limit = None, None
        if measure:
            from . import runtime

            libraries = runtime.check_kernels(art)
            limit = runtime.int_limit(art)
    finally:
        if opened:
            art.close()
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame.attrs.update({"by_phase": by_phase, "peak": peak, "findings": extra["findings"],
                        "loader": loader, "effective_loader": extra["effective_loader"],
                        "mlock": extra["mlock"], "loaders": loaders, "savings": savings,
                        "transient": extra["transient"],
                        "program": path, "data": data, "method": method})
    if measure:
        got = _measure(path, data, method, loader, peak, libraries, limit, allow_over_memory,
                       timeout)
        frame.attrs["measured"] = got
        frame["measured"] = _separable(frame, got, path, data)
    return frame


def _separable(frame: pd.DataFrame, got: dict[str, Any], program: str,
               data: str | None) -> list[float]:
    """Measured bytes per row where the measurement separates them: a file's resident growth
    in a phase when one counted row of that file is allocated there and kept; the anon growth
    at ``load_program`` when the planned arena is the only anon row there. NaN elsewhere."""
    label = {program: "program", data: "data"}
    out = [math.nan] * len(frame)
    prev = dict.fromkeys(("program", "data"), 0)
    for ph in PHASES:
        files = got["files"][ph]
        here = frame[(frame["phase"] == ph) & frame["counted"] & frame["released"].isna()]
        for f, key in label.items():
            if f is None or key not in files:
                continue
            rows = here[(here["storage"] == "file") & (here["file"] == f)]
            if len(rows) == 1:
                out[rows.index[0]] = float(files[key] - prev[key])
        anon = here[here["storage"] == "anon"]
        if ph == "load_program" and len(anon) == 1:
            out[anon.index[0]] = float(got["anon"][ph])
        prev = {k: files.get(k, 0) for k in prev}
    return out


def _savings(art: Artifact, rows: list[dict[str, Any]], loader: str,
             loaders: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """What could be saved: weights held twice, mostly idle arenas, a loader with a lower
    peak."""
    out: list[dict[str, Any]] = []
    for r in rows:
        if "held twice" in r["note"]:
            out.append({"what": f"weights held twice: {r['component']}", "bytes": r["bytes"],
                        "how": "load from a path (mmap): the original pages are released "
                        "after the backend packs them"})
    me = art.frames["memory_efficiency"] if "memory_efficiency" in art.frames else None
    if me is not None:
        for m, mid, arena, peak_live in zip(me["method"].astype(str), me["mem_id"],
                                            me["arena_bytes"], me["peak_live_bytes"]):
            if _isna(arena) or _isna(peak_live) or not arena:
                continue
            idle = int(arena) - int(peak_live)
            if idle > max(PAGE, 0.25 * int(arena)):
                out.append({"what": f"mostly idle arena: {m} mem_id {int(mid)} "
                            f"({int(peak_live)} of {int(arena)} bytes live at most)",
                            "bytes": idle, "how": "re-plan memory (the lifetimes frame shows "
                            "which tensors overlap)"})
    best = min(loaders, key=lambda k: loaders[k]["peak"])
    gain = loaders[loader]["peak"] - loaders[best]["peak"]
    if gain > 0:
        out.append({"what": f"loader {best!r} instead of {loader!r} lowers the peak",
                    "bytes": gain, "how": f"peak {loaders[best]['peak']} instead of "
                    f"{loaders[loader]['peak']} bytes"})
    return out


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _measure(program: str, data: str | None, method: str, loader: str, predicted_peak: int,
             libraries: dict[str, str] | None, limit: int | None, allow: bool,
             timeout: float) -> dict[str, Any]:
    from .runtime import run_child

    if loader not in MEASURABLE:
        raise ValueError(f"loader {loader!r} cannot be measured: ExecuTorch's Python runtime "
                         f"offers only {', '.join(MEASURABLE)} (the prediction stands alone)")
    if loader == "mmap_nolock" and os.geteuid() == 0:
        raise ValueError("loader 'mmap_nolock' cannot be measured as root: the runtime's "
                         "mlock always succeeds with CAP_IPC_LOCK")
    avail = _mem_available()
    if avail is not None and predicted_peak > avail and not allow:
        raise MemoryError(f"{os.path.basename(program)}: the predicted peak ({predicted_peak} "
                          f"bytes) exceeds the available memory ({avail} bytes); nothing was "
                          "run (pass allow_over_memory=True to run it anyway)")
    r = run_child({"task": "memory", "load": libraries or {}, "program": program, "data": data,
                   "method": method, "loader": loader, "int_limit": limit}, timeout=timeout,
                  what=program)
    return measured_from(r)


def measured_from(r: dict[str, Any]) -> dict[str, Any]:
    """``attrs["measured"]`` from the child's snapshots: ``by_phase`` (anon growth + the
    artifact files' resident bytes at the end of each phase), ``peak`` (``VmHWM`` growth less
    the other file pages faulted in: the runtime's code), ``anon`` and ``file`` per phase,
    ``files`` (per artifact file) and ``code`` (other file pages, not counted).

    Example:
        >>> measured_from(child_result)["by_phase"]["execute"]   # doctest: +SKIP
    """
    b = r["before"]
    out: dict[str, Any] = {"by_phase": {}, "anon": {}, "file": {}, "files": {}, "code": {},
                           "peak": 0, "peak_reset": r.get("peak_reset")}
    peak = 0
    for ph in PHASES:
        s = r["after"][ph]
        anon = s["RssAnon"] - b["RssAnon"]
        files = {k: s["files"][k] - b["files"].get(k, 0) for k in s["files"]}
        code = (s["RssFile"] - b["RssFile"]) - sum(files.values())
        out["anon"][ph], out["file"][ph] = anon, sum(files.values())
        out["files"][ph], out["code"][ph] = files, code
        out["by_phase"][ph] = anon + sum(files.values())
        peak = max(peak, s["VmHWM"] - b["VmRSS"] - max(code, 0), out["by_phase"][ph])
    out["peak"] = peak
    return out


def _fmt(n: float) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "-"
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"
