"""The memory plan, analysed: a view over a program's ``lifetimes`` frame.

The reader knows bytes (where each planned tensor sits, and which instructions touch it:
the ``lifetimes`` frame); this module knows what that means for memory. It computes the
``memory_efficiency`` frame, one row per arena of each method: its size against the most
bytes live at one instruction (overlapping byte ranges, i.e. aliases, counted once). The
frame is registered by the ``.pte`` reader as a :class:`~workbench.formats.parsed.FrameView`
of ``lifetimes``, so it is computed from the frame, never from a second parse.

Example:
    >>> import numpy as np
    >>> lo, hi = np.array([0, 1]), np.array([1, 2])    # live positions of two tensors
    >>> off, nb = np.array([0, 0]), np.array([8, 8])   # the same 8 bytes: aliases
    >>> peak(lo, hi, off, nb)
    (8, 0, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["EFFICIENCY_COLUMNS", "MAX_PEAK_GRID", "MAX_UNION_WORK", "efficiency", "peak"]

#: Above this many (positions x live tensors) the peak is taken as a sum of bytes, not as
#: the union of the live byte ranges (which counts aliased tensors once).
MAX_UNION_WORK = 20_000_000
#: The columns of the ``memory_efficiency`` frame (see :mod:`workbench.frames`).
EFFICIENCY_COLUMNS = ("method", "mem_id", "arena_bytes", "tensors", "tensor_bytes",
                      "high_water", "peak_live_bytes", "peak_at", "peak_exact", "efficiency")


def efficiency(lifetimes: pd.DataFrame, arenas: Sequence[tuple[str, Sequence[int]]]
               ) -> dict[str, list]:
    """The ``memory_efficiency`` columns from the ``lifetimes`` frame and each method's arena
    sizes (``arenas``: ``(method name, non_const_buffer_sizes)`` in program order).

    One row per method and arena (the arenas its planned tensors name, and 1.. of its
    ``non_const_buffer_sizes``), in program order, then arena order.

    Example:
        >>> import pandas as pd
        >>> lt = pd.DataFrame({"method": ["forward"] * 2, "mem_id": [1, 1], "offset": [0, 8],
        ...                    "nbytes": [8, 8], "live_from": pd.array([0, 1], "Int64"),
        ...                    "live_to": pd.array([1, 2], "Int64")})
        >>> e = efficiency(lt, [("forward", (0, 32))])
        >>> e["arena_bytes"], e["peak_live_bytes"], e["efficiency"]
        ([32], [16], [0.5])
    """
    cols: dict[str, list] = {c: [] for c in EFFICIENCY_COLUMNS}
    names = lifetimes["method"].astype(object).to_numpy()
    mem_ids = lifetimes["mem_id"].to_numpy(np.int64)
    offsets = lifetimes["offset"].to_numpy(np.int64)
    nbytes = lifetimes["nbytes"].to_numpy(np.int64)
    starts = lifetimes["live_from"].fillna(-1).to_numpy(np.int64)
    ends = lifetimes["live_to"].fillna(-1).to_numpy(np.int64)
    for name, buffer_sizes in arenas:
        rows = names == name
        sizes = list(buffer_sizes)
        mem, lo_m, hi_m = mem_ids[rows], starts[rows], ends[rows]
        off_m, nb_m = offsets[rows], nbytes[rows]
        for mem_id in sorted(set(mem.tolist()) | set(range(1, len(sizes)))):
            sel = mem == mem_id
            lo, hi = lo_m[sel], hi_m[sel]
            off, nb = off_m[sel], nb_m[sel]
            live = lo >= 0
            most, at, exact = peak(lo[live], hi[live], off[live], nb[live])
            arena = sizes[mem_id] if 0 <= mem_id < len(sizes) else None
            cols["method"].append(name)
            cols["mem_id"].append(mem_id)
            cols["arena_bytes"].append(arena)
            cols["tensors"].append(int(sel.sum()))
            cols["tensor_bytes"].append(int(nb.sum()))
            cols["high_water"].append(int((off + nb).max()) if len(off) else 0)
            cols["peak_live_bytes"].append(most)
            cols["peak_at"].append(at)
            cols["peak_exact"].append(exact)
            cols["efficiency"].append(most / arena if arena else float("nan"))
    return cols


def peak(lo: np.ndarray, hi: np.ndarray, off: np.ndarray, nb: np.ndarray
          ) -> tuple[int, int | None, bool]:
    """(peak live bytes, position, exact): the most bytes live at one instruction, counting
    overlapping byte ranges (aliases) once; a plain sum when that is too much work."""
    if not len(lo):
        return 0, None, True
    starts = np.unique(lo)  # the peak is reached where some tensor becomes live
    if len(starts) * len(lo) > MAX_UNION_WORK:
        delta = np.zeros(int(hi.max()) + 2, np.int64)
        np.add.at(delta, lo, nb)
        np.add.at(delta, hi + 1, -nb)
        run = np.cumsum(delta)
        return int(run.max()), int(run.argmax()), False
    grid = _peak_grid(starts, lo, hi, off, nb)
    if grid is not None:
        return grid
    order = np.argsort(off, kind="stable")
    lo, hi, off, end = lo[order], hi[order], off[order], (off + nb)[order]
    best, best_at = -1, None
    for p in starts.tolist():
        live = (lo <= p) & (hi >= p)
        a, b = off[live], end[live]
        if not len(a):
            continue
        reach = np.maximum.accumulate(b)
        prev = np.concatenate(([a[0]], reach[:-1]))
        total = int(np.maximum(b - np.maximum(a, prev), 0).sum())
        if total > best:
            best, best_at = total, p
    return max(best, 0), best_at, True


#: Most (positions x byte pieces) cells :func:`_peak_grid` fills; beyond, the loop does it.
MAX_PEAK_GRID = 4_000_000


def _peak_grid(starts: np.ndarray, lo: np.ndarray, hi: np.ndarray, off: np.ndarray,
               nb: np.ndarray) -> tuple[int, int | None, bool] | None:
    """:func:`peak`'s exact answer without a loop over positions: the arena is cut at every
    tensor's first and last byte into pieces, a (position x piece) grid counts the live tensors
    covering each piece (one 2-D difference array: four corners per tensor, then two running
    sums), and a position's live bytes are the lengths of its covered pieces. ``None`` when the
    grid would be too big."""
    end = off + nb
    bounds = np.unique(np.concatenate([off, end]))
    if len(starts) * len(bounds) > MAX_PEAK_GRID:
        return None
    a = np.searchsorted(bounds, off)
    b = np.searchsorted(bounds, end)
    t0 = np.searchsorted(starts, lo)  # lo is one of the starts
    t1 = np.searchsorted(starts, hi, "right")  # live through the last start <= hi
    ok = t1 > t0  # (a row with hi < lo is live nowhere)
    n_t, n_s = len(starts), len(bounds)
    grid = np.zeros((n_t + 1, n_s), np.int32)
    live = np.zeros(n_t + 1, np.int64)
    a, b, t0, t1 = a[ok], b[ok], t0[ok], t1[ok]
    np.add.at(grid, (t0, a), 1)
    np.add.at(grid, (t0, b), -1)
    np.add.at(grid, (t1, a), -1)
    np.add.at(grid, (t1, b), 1)
    np.add.at(live, t0, 1)
    np.add.at(live, t1, -1)
    covered = np.cumsum(np.cumsum(grid, axis=0), axis=1)[:n_t, :n_s - 1] > 0
    totals = covered.astype(np.int64) @ np.diff(bounds)
    totals[np.cumsum(live)[:n_t] == 0] = -1  # no tensor live there: not a candidate
    k = int(totals.argmax())
    if totals[k] < 0:
        return 0, None, True
    return int(totals[k]), int(starts[k]), True
