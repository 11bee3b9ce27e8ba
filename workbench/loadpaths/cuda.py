"""CUDA load paths (file -> GPU memory) and the host-to-device roofline.

Every path moves the same payload — the artifact's unique stored tensor ranges (or whole
files when there is no tensor table) — into device memory, and synchronizes before it
returns:

* ``pageable_h2d`` — ``torch.frombuffer(map).to("cuda")`` per tensor: an ordinary
  (pageable) host tensor; the driver stages it through its own pinned buffer.
* ``pinned_h2d`` — our own staging: two pinned chunks, filled from the map by the CPU while
  the other one is copied on its own stream (double-buffered), into one packed device buffer.
* ``registered_h2d`` — ``cudaHostRegister`` (read-only) on the mapped file itself, then
  direct asynchronous copies: no staging copy at all (registration pins, i.e. faults in,
  every page).
* ``gds`` — GPUDirect Storage through ``kvikio.CuFile.pread`` (file -> GPU, no host copy
  when GDS is really available; kvikio's POSIX compatibility mode otherwise, noted).

Their read phase (``consume = device_checksum``) is :func:`device_checksum` on the GPU over
the device copy of every extent: the same number as the CPU's
:func:`~workbench.loadpaths.checksum` of the file's bytes, so the profile checks that the
right bytes arrived.

Without ``torch.cuda.is_available()`` every CUDA path is a ``skipped`` row with the reason.
The roofline is a large pinned ``cudaMemcpy`` (host -> device) measured in the same run.

Example:
    >>> prof = wb.profile("model.pte", device="cuda")      # doctest: +SKIP
    >>> prof.summary[["path", "gbps", "frac_roofline", "cuda_peak_bytes"]]   # doctest: +SKIP
"""

from __future__ import annotations

import functools
import importlib.util
import time
from typing import Any

from ._base import PAGE, WRAP, Plan, RunContext, Skip, register

MiB = 1 << 20
#: Size of each of the two pinned staging buffers of ``pinned_h2d``.
CHUNK = 64 * MiB
#: cudaHostRegisterPortable | cudaHostRegisterReadOnly (the map is read-only).
REGISTER_FLAGS = 0x01 | 0x08


@functools.lru_cache(maxsize=1)
def cuda_unavailable() -> str | None:
    """Why CUDA paths cannot run here (None when they can). Imports torch (parent side)."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else \
            f"CUDA {torch.version.cuda} build, no usable device"
        return f"torch.cuda.is_available() is False ({build})"
    return None


def _applies(plan: Plan) -> str | None:
    return cuda_unavailable()


def _kvikio_applies(plan: Plan) -> str | None:
    reason = cuda_unavailable()
    if reason is None and importlib.util.find_spec("kvikio") is None:
        reason = "kvikio is not installed (GPUDirect Storage via cuFile)"
    return reason


def cuda_setup(ctx: RunContext) -> None:
    """Import torch and create the CUDA context before timing (untimed)."""
    try:
        import torch
    except ImportError as e:
        raise Skip("torch is not installed") from e
    if not torch.cuda.is_available():
        raise Skip("torch.cuda.is_available() is False in the worker")
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    ctx.state["torch"] = torch


def _packed_destination(ctx: RunContext) -> tuple[Any, list[tuple[str, int, int, int]]]:
    """One device byte buffer for all extents: (buffer, [(file, offset, nbytes, dst_pos)])."""
    torch = ctx.state["torch"]
    layout = []
    pos = 0
    for f, off, n in ctx.extents():
        layout.append((f, off, n, pos))
        pos += n
    dst = ctx.keep(torch.empty(pos, dtype=torch.uint8, device="cuda"))
    return dst, layout


def device_checksum(torch: Any, pieces: list[Any]) -> int:
    """:func:`~workbench.loadpaths.checksum` of 1-D ``uint8`` tensors, computed where they
    live (on the GPU for device tensors), with one transfer of a few numbers at the end.

    Each piece's body is read as ``int32`` halves of its little-endian 64-bit words; a half
    is summed as signed ``int64`` and corrected by 2**32 per negative value, so no
    intermediate overflows (pieces under 8 GiB); the tail bytes are copied back.

    Example:
        >>> import torch
        >>> device_checksum(torch, [torch.tensor([1, 0, 0, 0, 0, 0, 0, 0, 2], dtype=torch.uint8)])
        3
    """
    parts = []
    tails = []
    for t in pieces:
        n = int(t.numel())
        body = n - n % 8
        if body:
            b = t[:body]
            if b.storage_offset() % 8:
                b = b.clone()  # int32 views need an aligned start
            h = b.view(torch.int32)
            lo, hi = h[0::2], h[1::2]
            parts.append(torch.stack([lo.sum(dtype=torch.int64), (lo < 0).sum(dtype=torch.int64),
                                      hi.sum(dtype=torch.int64), (hi < 0).sum(dtype=torch.int64)]))
        if body < n:
            tails.append(t[body:])
    total = 0
    if parts:
        for lo_s, lo_neg, hi_s, hi_neg in torch.stack(parts).cpu().tolist():
            total += (lo_s + (lo_neg << 32)) + ((hi_s + (hi_neg << 32)) << 32)
    if tails:
        flat = bytes(torch.cat(tails).cpu().tolist())
        at = 0
        for tail in tails:
            k = int(tail.numel())
            total += int.from_bytes(flat[at:at + k], "little")
            at += k
    return total % WRAP


def consume_device(ctx: RunContext) -> None:
    """Read phase of the CUDA paths: :func:`device_checksum` over ``ctx.weight_buffers``
    (the device copy of every extent), synchronised.

    Example:
        >>> register("my_h2d", device="cuda", consume=consume_device)(my_h2d)   # doctest: +SKIP
    """
    torch = ctx.state["torch"]
    pieces = ctx.weight_buffers or []
    total = device_checksum(torch, pieces)
    ctx.consumed(sum(int(p.numel()) for p in pieces), total, "device_checksum")


def _packed_pieces(dst: Any, layout: list[tuple[str, int, int, int]]) -> list[Any]:
    return [dst[pos:pos + n] for _, _, n, pos in layout]


@register("pageable_h2d", device="cuda", roofline="h2d_pinned", applies=_applies,
          setup=cuda_setup, consume=consume_device, preload=("torch",),
          doc="per tensor: torch.frombuffer(map).to('cuda') (pageable source)")
def pageable_h2d(ctx: RunContext) -> None:
    """``.to("cuda")`` of an ordinary host tensor (a view of the map), tensor by tensor."""
    import warnings

    torch = ctx.state["torch"]
    maps = ctx.maps()
    n = 0
    pieces = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        for f, off, nbytes in ctx.extents():
            src = torch.frombuffer(maps[f], dtype=torch.uint8, count=nbytes, offset=off)
            pieces.append(ctx.keep(src.to("cuda")))
            n += nbytes
    torch.cuda.synchronize()
    ctx.weight_buffers = pieces
    ctx.moved(n, copied=n)


def staging_plan(layout: list[tuple[str, int, int, int]], chunk: int
                 ) -> list[tuple[int, int, int, list[tuple[str, int, int, int]]]]:
    """Cut packed extents into staging chunks for two alternating buffers.

    Args:
        layout: ``(file, offset, nbytes, dst_pos)`` with extents packed back to back.
        chunk: size of each staging buffer.

    Returns:
        ``[(slot, dst_pos, fill, pieces)]`` in order: copy each piece
        ``(file, file_offset, stage_offset, nbytes)`` into buffer ``slot``, then
        ``fill`` bytes of it to ``dst[dst_pos:]``; slots alternate 0, 1, 0, ...

    Example:
        >>> staging_plan([("a", 0, 5, 0), ("b", 8, 4, 5)], chunk=4)[:2]
        [(0, 0, 4, [('a', 0, 0, 4)]), (1, 4, 4, [('a', 4, 0, 1), ('b', 8, 1, 3)])]
    """
    out: list[tuple[int, int, int, list[tuple[str, int, int, int]]]] = []
    pieces: list[tuple[str, int, int, int]] = []
    fill = pos = 0
    for f, off, nbytes, _ in layout:
        i = 0
        while i < nbytes:
            k = min(chunk - fill, nbytes - i)
            pieces.append((f, off + i, fill, k))
            fill += k
            i += k
            if fill == chunk:
                out.append((len(out) % 2, pos, fill, pieces))
                pos += fill
                fill, pieces = 0, []
    if fill:
        out.append((len(out) % 2, pos, fill, pieces))
    return out


@register("pinned_h2d", device="cuda", roofline="h2d_pinned", applies=_applies,
          setup=cuda_setup, consume=consume_device, preload=("torch",),
          doc="CPU copy into two pinned chunks, async copies on two streams (double-buffered)")
def pinned_h2d(ctx: RunContext) -> None:
    """Stage through two pinned buffers: while one chunk is copied to the GPU on its stream,
    the CPU fills the other one from the map (:func:`staging_plan`)."""
    import numpy as np

    torch = ctx.state["torch"]
    maps = ctx.maps()
    dst, layout = _packed_destination(ctx)
    total = int(dst.numel())
    chunk = int(min(CHUNK, max(total, 1)))
    stage = ctx.keep([torch.empty(chunk, dtype=torch.uint8, pin_memory=True) for _ in range(2)])
    stage_np = [s.numpy() for s in stage]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    done: list[Any] = [None, None]
    for slot, pos, fill, pieces in staging_plan(layout, chunk):
        if done[slot] is not None:
            done[slot].synchronize()  # this buffer's previous copy must be finished
        for f, off, soff, n in pieces:
            stage_np[slot][soff:soff + n] = np.frombuffer(maps[f], dtype=np.uint8, count=n,
                                                          offset=off)
        with torch.cuda.stream(streams[slot]):
            dst[pos:pos + fill].copy_(stage[slot][:fill], non_blocking=True)
            done[slot] = torch.cuda.Event()
            done[slot].record(streams[slot])
    torch.cuda.synchronize()
    ctx.weight_buffers = _packed_pieces(dst, layout)
    ctx.moved(total, copied=total)
    ctx.note(f"2 x {chunk} B pinned staging buffers")


@register("registered_h2d", device="cuda", roofline="h2d_pinned", applies=_applies,
          setup=cuda_setup, consume=consume_device, preload=("torch",),
          doc="cudaHostRegister(read-only) on the mapped file, then async copies")
def registered_h2d(ctx: RunContext) -> None:
    """Pin the file's mapped pages in place with ``cudaHostRegister`` and DMA from them."""
    import warnings

    import numpy as np

    torch = ctx.state["torch"]
    cudart = torch.cuda.cudart()
    maps = ctx.maps()
    for f, mm in maps.items():
        ptr = np.frombuffer(mm, dtype=np.uint8).ctypes.data
        size = (len(mm) + PAGE - 1) // PAGE * PAGE  # the map covers whole pages
        codes = []
        for flags in (REGISTER_FLAGS, 0x01):  # read-only first; some drivers lack it
            rc = int(cudart.cudaHostRegister(ptr, size, flags))
            codes.append(rc)
            if rc == 0:
                break
        else:
            raise RuntimeError(f"cudaHostRegister({f}) failed: cudaError {codes} "
                               "(flags read-only|portable, then portable)")
        ctx.note("registered " + ("read-only" if len(codes) == 1 else
                                  "without cudaHostRegisterReadOnly"))
    dst, layout = _packed_destination(ctx)
    stream = torch.cuda.Stream()
    with warnings.catch_warnings(), torch.cuda.stream(stream):
        warnings.filterwarnings("ignore", message=".*not writable.*")
        for f, off, nbytes, pos in layout:
            src = torch.frombuffer(maps[f], dtype=torch.uint8, count=nbytes, offset=off)
            dst[pos:pos + nbytes].copy_(src, non_blocking=True)
    stream.synchronize()
    ctx.weight_buffers = _packed_pieces(dst, layout)
    ctx.moved(int(dst.numel()), copied=int(dst.numel()))


def _gds_setup(ctx: RunContext) -> None:
    try:
        import kvikio
    except ImportError as e:
        raise Skip("kvikio is not installed (GPUDirect Storage via cuFile)") from e
    cuda_setup(ctx)
    ctx.state["kvikio"] = kvikio


def _kvikio_compat(kvikio: Any) -> str:
    d = getattr(kvikio, "defaults", None)
    for name in ("is_compat_mode_preferred", "compat_mode"):
        fn = getattr(d, name, None)
        if callable(fn):
            try:
                return f"kvikio compat mode: {fn()}"
            except Exception:  # informative only
                pass
    return "kvikio compat mode: unknown"


@register("gds", device="cuda", roofline="h2d_pinned", applies=_kvikio_applies,
          setup=_gds_setup, consume=consume_device, preload=("torch",),
          doc="kvikio.CuFile.pread: file -> GPU (GPUDirect Storage)")
def gds(ctx: RunContext) -> None:
    """Read every extent straight into device memory with cuFile (``kvikio``)."""
    kvikio = ctx.state["kvikio"]
    dst, layout = _packed_destination(ctx)
    handles: dict[str, Any] = {}
    futures = []
    try:
        for f, off, nbytes, pos in layout:
            fh = handles.get(f)
            if fh is None:
                fh = handles[f] = kvikio.CuFile(f, "r")
            futures.append(fh.pread(dst[pos:pos + nbytes], nbytes, off))
        got = sum(fu.get() for fu in futures)
    finally:
        for fh in handles.values():
            fh.close()
    if got != dst.numel():
        raise RuntimeError(f"cuFile read {got} of {int(dst.numel())} bytes")
    ctx.weight_buffers = _packed_pieces(dst, layout)
    ctx.moved(got, copied=got)
    ctx.note(_kvikio_compat(kvikio))


def h2d_roofline(plan: Plan) -> dict[str, Any]:
    """A large pinned host -> device ``cudaMemcpy`` (256 MiB - 1 GiB): best of three."""
    try:
        import torch

        if not torch.cuda.is_available():
            return {"name": "h2d_pinned", "device": "cuda", "gbps": None, "bytes": 0,
                    "seconds": None, "note": "torch.cuda.is_available() is False"}
        n = int(min(max(plan.payload_bytes(), 256 * MiB), 1024 * MiB))
        host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        host.fill_(1)
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            dev.copy_(host, non_blocking=True)
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        return {"name": "h2d_pinned", "device": "cuda", "gbps": n / best / 1e9, "bytes": n,
                "seconds": best, "note": f"pinned -> {torch.cuda.get_device_name()}, best of 3"}
    except Exception as e:  # a roofline failure is reported, not raised
        return {"name": "h2d_pinned", "device": "cuda", "gbps": None, "bytes": 0,
                "seconds": None, "note": f"failed: {type(e).__name__}: {e}"}
