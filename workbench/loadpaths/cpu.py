"""CPU load paths (file -> host memory) and the CPU rooflines.

Every path is timed in two phases that the profile reports apart:

* the **load** (``load_s``): what the path itself does. *Copying* paths (``read``,
  ``readinto``, ``per_tensor_copy``) end with the bytes in new private (anonymous) memory;
  *zero-copy* paths (``mmap_*``, ``torch_frombuffer``, ``wb_views``) end with the file's
  pages mapped and resident — touched: one byte of every page is read, which is what makes
  them resident. A zero-copy load moves no bytes, so its rate (``load_gbps``) is pages
  mapped per second, not a bandwidth;
* the **read** (``read_s``): the consuming pass, :func:`~workbench.loadpaths.checksum` over
  every weight byte the load made available (the unique stored tensor ranges; whole files
  without a tensor table). The CPU must read every byte, and the checksum is the same for
  every path (the profile checks it against the file's).

``wall_s = load_s + read_s`` is the time until every weight byte has been read once: the
same work for every path, so the headline rate ``gbps`` compares like with like, against
the ``ram_read`` roofline (the same checksum over a buffer already in RAM).

Example:
    >>> import workbench as wb
    >>> prof = wb.profile("sample_models/mlp_portable.pte", paths=["read", "mmap_touch"],
    ...                   repeat=1, progress=False)          # doctest: +SKIP
    >>> prof.summary[["path", "load_s", "read_s", "gbps"]]  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import mmap
import os
import time
import warnings
from typing import Any

from ._base import PAGE, Plan, RunContext, Skip, checksum, register

MiB = 1 << 20
#: What a fork server imports for the paths that open the artifact with workbench.
_VIEWS_PRELOAD = ("pandas", "workbench._open", "workbench.artifact")


# -- applicability (evaluated in the parent) ---------------------------------------------------

def needs_tensors(plan: Plan) -> str | None:
    """Skip reason for per-tensor paths when the plan has no stored tensor ranges."""
    if plan.tensors:
        return None
    if plan.format == "raw":
        return "not an artifact workbench reads: no tensor table (whole-file paths only)"
    if not plan.readable:
        return f"workbench cannot list this file's tensors yet: {plan.unreadable}"
    return "the artifact stores no tensor bytes"


def needs_torch(plan: Plan) -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    return None


def _tensors_and_torch(plan: Plan) -> str | None:
    return needs_tensors(plan) or needs_torch(plan)


def _workbench_views_apply(plan: Plan) -> str | None:
    if plan.format == "pt2":
        return "for .pt2 files see pt2_views"
    return needs_tensors(plan)


# -- touching ------------------------------------------------------------------------------------

def touch_bytes(buf: Any, offset: int = 0, count: int = -1) -> int:
    """Read one byte of every page of ``buf[offset:offset+count]`` (and its last byte).

    Returns their sum, so the reads cannot be skipped. This is what brings mapped pages in.

    Example:
        >>> touch_bytes(b"\\x01" * 10000)
        4
    """
    import numpy as np

    a = np.frombuffer(buf, dtype=np.uint8, count=count, offset=offset)
    if a.size == 0:
        return 0
    return int(a[::PAGE].sum(dtype=np.uint64)) + int(a[-1])


def touch_array(v: Any) -> int:
    """Touch every page under a numpy array or torch tensor view (no copy when dense)."""
    import numpy as np

    if isinstance(v, np.ndarray):
        if v.size == 0:
            return 0
        flat = v.ravel(order="K")
        b = flat.view(np.uint8) if flat.flags.c_contiguous else flat
        return int(b[::PAGE].sum()) + int(b[-1])
    if v.numel() == 0:
        return 0
    t = v if v.is_contiguous() else v.contiguous()
    import torch

    b = t.reshape(-1).view(torch.uint8)
    return int(b[::PAGE].sum()) + int(b[-1])


# -- copying paths ----------------------------------------------------------------------------

@register("read", doc="open(f, 'rb').read(): a new bytes object per file (allocation + copy)")
def read(ctx: RunContext) -> None:
    """Read every file whole into a new ``bytes`` object."""
    n = 0
    bufs = {}
    for f in ctx.files:
        with open(f, "rb") as fh:
            bufs[f] = ctx.keep(fh.read())
        n += len(bufs[f])
    ctx.file_buffers = bufs
    ctx.moved(n, copied=n)


def _readinto_setup(ctx: RunContext) -> None:
    import numpy as np

    bufs = []
    for f in ctx.files:
        buf = bytearray(ctx.size(f))
        if len(buf):
            np.frombuffer(buf, dtype=np.uint8)[::PAGE] = 0  # fault the pages in now
        bufs.append(buf)
    ctx.state["bufs"] = bufs


@register("readinto", setup=_readinto_setup,
          doc="readinto a preallocated, pre-faulted bytearray (the copy alone)")
def readinto(ctx: RunContext) -> None:
    """``readinto`` a bytearray allocated and faulted in before timing (its RSS is in the
    baseline): the cost of the copy out of the page cache, without allocation."""
    n = 0
    ctx.file_buffers = {}
    for f, buf in zip(ctx.files, ctx.state["bufs"]):
        ctx.file_buffers[f] = buf
        mv = memoryview(buf)
        with open(f, "rb", buffering=0) as fh:
            got = 0
            while got < len(buf):
                k = fh.readinto(mv[got:])
                if not k:
                    break
                got += k
        n += got
        ctx.keep(buf)
    ctx.moved(n, copied=n)
    ctx.note("destination pre-faulted before timing")


@register("per_tensor_copy", applies=needs_tensors,
          doc="copy each stored tensor out of a read-only map with numpy")
def per_tensor_copy(ctx: RunContext) -> None:
    """Map the files, then ``np.frombuffer(map, ...).copy()`` every unique stored tensor."""
    import numpy as np

    maps = ctx.maps()
    n = 0
    copies = []
    for f, off, nbytes in ctx.extents():
        copies.append(ctx.keep(np.frombuffer(maps[f], dtype=np.uint8, count=nbytes,
                                             offset=off).copy()))
        n += nbytes
    ctx.weight_buffers = copies
    ctx.moved(n, copied=n)


# -- zero-copy paths ---------------------------------------------------------------------------

def _mmap_touch(ctx: RunContext, advice: int | None = None, populate: bool = False) -> None:
    n = 0
    ctx.file_buffers = {}
    for f in dict.fromkeys(ctx.files):
        size = ctx.size(f)
        if size == 0:
            continue
        with open(f, "rb") as fh:
            if populate:
                flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
                mm = mmap.mmap(fh.fileno(), 0, flags=flags, prot=mmap.PROT_READ)
            else:
                mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        ctx.file_buffers[f] = ctx.keep(mm)
        if advice is not None:
            mm.madvise(advice)
        touch_bytes(mm)
        n += size
    ctx.moved(n, copied=0)


@register("mmap_touch", copies=False,
          doc="mmap read-only, touch one byte per page")
def mmap_touch(ctx: RunContext) -> None:
    """Map every file read-only and touch one byte of each page (demand paging)."""
    _mmap_touch(ctx)


@register("mmap_willneed", copies=False,
          doc="mmap + madvise(MADV_WILLNEED), then touch")
def mmap_willneed(ctx: RunContext) -> None:
    """As ``mmap_touch`` after ``madvise(MADV_WILLNEED)`` (asynchronous read-ahead)."""
    _mmap_touch(ctx, advice=mmap.MADV_WILLNEED)


@register("mmap_sequential", copies=False,
          doc="mmap + madvise(MADV_SEQUENTIAL), then touch")
def mmap_sequential(ctx: RunContext) -> None:
    """As ``mmap_touch`` after ``madvise(MADV_SEQUENTIAL)`` (aggressive read-ahead)."""
    _mmap_touch(ctx, advice=mmap.MADV_SEQUENTIAL)


def _populate_apply(plan: Plan) -> str | None:
    return None if hasattr(mmap, "MAP_POPULATE") else "mmap.MAP_POPULATE is not available here"


@register("mmap_populate", copies=False, applies=_populate_apply,
          doc="mmap with MAP_POPULATE (the kernel maps every page up front), then touch")
def mmap_populate(ctx: RunContext) -> None:
    """Map with ``MAP_POPULATE``: the page tables are filled inside ``mmap`` itself."""
    _mmap_touch(ctx, populate=True)


def _torch_setup(ctx: RunContext) -> None:
    try:
        import torch
    except ImportError as e:
        raise Skip("torch is not installed") from e
    # first calls of these ops initialise dispatch tables: not part of the load
    t = torch.frombuffer(bytearray(2 * PAGE), dtype=torch.uint8)
    int(t.view(torch.float32)[:4].sum()) + int(t[::PAGE].sum()) + int(t[-1])
    ctx.state["torch"] = torch


def views_setup(ctx: RunContext) -> None:
    """Open the artifact once before timing: imports and first-call costs are not the load."""
    from .._open import open as wb_open

    plan = ctx.plan
    with (wb_open(plan.path, data=plan.open_data) if plan.format == "pte"
          else wb_open(plan.path)) as art:
        if plan.tensors:
            touch_array(art.tensor(plan.tensors[0][4]))


@register("torch_frombuffer", copies=False, applies=_tensors_and_torch,
          setup=_torch_setup, preload=("torch",),
          doc="torch.frombuffer views of the map per tensor (typed, no copy), then touch")
def torch_frombuffer(ctx: RunContext) -> None:
    """One ``torch.frombuffer`` view per unique stored tensor, viewed as its dtype, touched."""
    torch = ctx.state["torch"]
    maps = ctx.maps()
    n = chk = 0
    views = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        for f, off, nbytes, dtype, _ in ctx.tensor_ranges():
            if nbytes == 0:
                continue
            t = torch.frombuffer(maps[f], dtype=torch.uint8, count=nbytes, offset=off)
            dt = getattr(torch, dtype, None)
            if isinstance(dt, torch.dtype) and dt.itemsize and nbytes % dt.itemsize == 0 \
                    and off % dt.itemsize == 0 and dt != torch.uint8:
                ctx.keep(t.view(dt))
            else:
                ctx.keep(t)
            views.append(t)
            chk += int(t[::PAGE].sum()) + int(t[-1])
            n += nbytes
    ctx.weight_buffers = views  # the consuming pass reads through these tensors' memory
    ctx.moved(n, copied=0)


@register("wb_views", copies=False, applies=_workbench_views_apply, setup=views_setup,
          preload=_VIEWS_PRELOAD,
          doc="workbench.open + art.tensor(name) for every stored tensor, then touch")
def workbench_views(ctx: RunContext) -> None:
    """Our zero-copy views: open the artifact (parse included) and view + touch every tensor."""
    from .._open import open as wb_open

    plan = ctx.plan
    art = ctx.keep(wb_open(plan.path, data=plan.open_data) if plan.format == "pte"
                   else wb_open(plan.path))
    n = 0
    views = []
    for _, _, nbytes, _, name in ctx.tensor_ranges() if plan.tensors else ():
        if nbytes == 0:
            continue
        v = ctx.keep(art.tensor(name))
        touch_array(v)
        views.append(v)
        n += nbytes
    ctx.weight_buffers = views  # the consuming pass reads the views' bytes
    ctx.moved(n, copied=0)


# -- rooflines -------------------------------------------------------------------------------------

def ram_read_roofline(plan: Plan) -> dict[str, Any]:
    """:func:`~workbench.loadpaths.checksum` over a pre-faulted buffer (64-512 MiB, the weight
    size if between: larger than the CPU caches, so the bytes come from RAM): the same read
    as every path's read phase, of bytes already in memory — the floor of every CPU path's
    ``wall_s``. Best of three.

    Example:
        >>> ram_read_roofline(plan)["gbps"]        # doctest: +SKIP
        8.1
    """
    import numpy as np

    n = int(min(max(plan.payload_bytes(), 64 * MiB), 512 * MiB))
    buf = np.ones(n, dtype=np.uint8)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        checksum(buf)
        best = min(best, time.perf_counter() - t0)
    return {"name": "ram_read", "device": "cpu", "gbps": n / best / 1e9, "bytes": n,
            "seconds": best, "note": f"checksum of a pre-faulted {n} B buffer, best of 3"}


def memcpy_roofline(plan: Plan) -> dict[str, Any]:
    """Large ``np.copyto`` between pre-faulted buffers (64-512 MiB, the payload size if between):
    best of three."""
    import numpy as np

    n = int(min(max(plan.payload_bytes(), 64 * MiB), 512 * MiB))
    src = np.ones(n, dtype=np.uint8)
    dst = np.empty(n, dtype=np.uint8)
    dst.fill(0)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return {"name": "memcpy", "device": "cpu", "gbps": n / best / 1e9, "bytes": n,
            "seconds": best, "note": "np.copyto, best of 3"}


def page_cache_roofline(plan: Plan) -> dict[str, Any]:
    """Re-read the artifact's (warm) files with ``preadv`` into a reused, pre-faulted buffer.

    The files are read once first (warming the cache); then passes over all files repeat until
    at least 256 MiB were read; best of three such trials.
    """
    import numpy as np

    files = [f for f, s in zip(plan.files, plan.sizes) if s > 0]
    if not files:
        return {"name": "page_cache_read", "device": "cpu", "gbps": None, "bytes": 0,
                "seconds": None, "note": "empty files"}
    chunk = int(min(max(plan.sizes), 64 * MiB))
    buf = bytearray(chunk)
    np.frombuffer(buf, dtype=np.uint8)[::PAGE] = 0
    mv = memoryview(buf)
    fds = [os.open(f, os.O_RDONLY) for f in files]
    try:
        def one_pass() -> int:
            got = 0
            for fd in fds:
                off = 0
                while True:
                    k = os.preadv(fd, [mv], off)
                    if k <= 0:
                        break
                    off += k
                got += off
            return got

        one_pass()  # warm
        best = 0.0
        total = 0
        for _ in range(3):
            total = 0
            t0 = time.perf_counter()
            while total < 256 * MiB:
                total += one_pass()
            best = max(best, total / (time.perf_counter() - t0))
    finally:
        for fd in fds:
            os.close(fd)
    return {"name": "page_cache_read", "device": "cpu", "gbps": best / 1e9, "bytes": total,
            "seconds": total / best, "note": f"preadv of the warm files into a {chunk} B "
            "buffer, >= 256 MiB per trial, best of 3"}
