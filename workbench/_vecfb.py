"""Vectorised (numpy) reads of many flatbuffer tables at once — the fast path (private).

The scalar reader in :mod:`workbench.flatbuf` verifies one table at a time and raises
precise errors. For programs with tens of thousands of values that is too slow in pure
Python, so readers first try this path: it applies the *same* checks to whole arrays of
positions at once and, on the first violation, raises :class:`SlowPath` so that the caller
re-reads with the scalar reader, which then reports the exact structure and offset.
"""

from __future__ import annotations

from collections.abc import Container
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .flatbuf import FlatBuffer

_BYTES = np.arange(8, dtype=np.int64)


class SlowPath(Exception):
    """A check failed: re-read with the scalar verifying reader for a precise error."""


class Tables:
    """Many tables of one type: positions, and per-table field offsets from their vtables."""

    __slots__ = ("fields", "pos", "tsize", "vec")

    def __init__(self, vec: VecReader, pos: np.ndarray, path: str) -> None:
        self.vec = vec
        self.pos = pos
        fb = vec.fb
        if len(pos) == 0:
            self.fields = np.zeros((0, 0), np.int64)
            self.tsize = np.zeros(0, np.int64)
            return
        vec.check(pos, 4)
        soff = vec.gather(pos, "<i4")
        vt = pos - soff
        uniq, inv = np.unique(vt, return_inverse=True)
        if len(uniq) > 4096:
            raise SlowPath("too many distinct vtables")
        decoded = []
        for v in uniq.tolist():
            try:
                decoded.append(fb._vtables.get(v) or fb._read_vtable(v, path, 0))
            except Exception as e:  # the scalar path will report it precisely
                raise SlowPath(str(e)) from None
        width = max((len(f) for _, f in decoded), default=0)
        table = np.zeros((len(uniq), max(width, 1)), np.int64)
        sizes = np.empty(len(uniq), np.int64)
        for k, (ts, f) in enumerate(decoded):
            table[k, : len(f)] = f
            sizes[k] = ts
        self.fields = table[inv]
        self.tsize = sizes[inv]
        if (pos + self.tsize > vec.end).any():
            raise SlowPath("table runs past the end")

    def field(self, i: int, size: int) -> np.ndarray:
        """Absolute position of field ``i`` per table (0 where absent), checked to fit."""
        if i >= self.fields.shape[1]:
            return np.zeros(len(self.pos), np.int64)
        off = self.fields[:, i]
        if ((off > 0) & (off + size > self.tsize)).any():
            raise SlowPath("field overruns its table")
        return np.where(off > 0, self.pos + off, 0)

    def scalar(self, i: int, dtype: str, default: int | float = 0) -> np.ndarray:
        """Scalar field ``i`` of every table (``default`` where absent)."""
        dt = np.dtype(dtype)
        p = self.field(i, dt.itemsize)
        out = np.full(len(self.pos), default, dtype=dt)
        present = p > 0
        if present.any():
            out[present] = self.vec.gather(p[present], dtype)
        return out

    def ref(self, i: int) -> np.ndarray:
        """Target of reference field ``i`` per table (0 where absent), checked in bounds."""
        p = self.field(i, 4)
        out = np.zeros(len(self.pos), np.int64)
        present = p > 0
        if present.any():
            tgt = p[present] + self.vec.gather(p[present], "<u4")
            if (tgt >= self.vec.end).any():
                raise SlowPath("reference points past the end")
            out[present] = tgt
        return out

    def vectors(self, i: int, elem_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``(first element position, count)`` of vector field ``i`` per table (0, 0 if absent)."""
        return self.vec.vectors(self.ref(i), elem_size)


class VecReader:
    """Vectorised gathers over the bytes of one :class:`FlatBuffer` window."""

    __slots__ = ("_views", "base", "end", "fb", "u8")

    def __init__(self, fb: FlatBuffer) -> None:
        self.fb = fb
        self.base = fb.base
        self.end = fb.end
        self.u8 = np.frombuffer(fb.buf, np.uint8)
        self._views: dict[np.dtype, np.ndarray] = {}

    def check(self, pos: np.ndarray, size: int) -> None:
        if len(pos) and (pos.min() < self.base or pos.max() + size > self.end):
            raise SlowPath("position out of bounds")

    def gather(self, pos: np.ndarray, dtype: str) -> np.ndarray:
        """Little-endian scalars of ``dtype`` at absolute positions ``pos`` (unaligned ok)."""
        dt = np.dtype(dtype)
        n = dt.itemsize
        self.check(pos, n)
        if n == 1:
            return self.u8[pos].view(dt)
        if not (pos & (n - 1)).any():  # flatbuffers aligns scalars: one typed fancy index
            view = self._views.get(dt)
            if view is None:
                view = self._views[dt] = self.u8[: len(self.u8) // n * n].view(dt)
            return view[pos // n]
        idx = pos[:, None] + _BYTES[:n]
        return np.ascontiguousarray(self.u8[idx]).view(dt).reshape(-1)

    def tables(self, pos: np.ndarray, path: str) -> Tables:
        return Tables(self, np.asarray(pos, np.int64), path)

    def table_vector(self, start: int, count: int, path: str) -> Tables:
        """The tables referenced by a vector of ``count`` offsets starting at ``start``."""
        at = start + 4 * np.arange(count, dtype=np.int64)
        return self.tables(at + self.gather(at, "<u4"), path)

    def vectors(self, ref: np.ndarray, elem_size: int) -> tuple[np.ndarray, np.ndarray]:
        present = ref > 0
        counts = np.zeros(len(ref), np.int64)
        if present.any():
            counts[present] = self.gather(ref[present], "<u4")
        starts = np.where(present, ref + 4, 0)
        if (starts + counts * elem_size > self.end).any():
            raise SlowPath("vector runs past the end")
        total = int(counts.sum())
        try:
            self.fb.charge(total, "vectors", int(ref[present][0]) if present.any() else 0)
        except Exception as e:
            raise SlowPath(str(e)) from None
        return starts, counts

    def flat(self, starts: np.ndarray, counts: np.ndarray, dtype: str) -> np.ndarray:
        """All elements of many vectors, concatenated (split with ``counts``)."""
        dt = np.dtype(dtype)
        total = int(counts.sum())
        if total == 0:
            return np.zeros(0, dt)
        first = np.repeat(starts, counts)
        offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        return self.gather(first + offs * dt.itemsize, dtype)


def split_tuples(flat: np.ndarray, counts: np.ndarray) -> list[tuple]:
    """Split ``flat`` into consecutive tuples of lengths ``counts`` (grouped by length, fast)."""
    n = len(counts)
    out: list[tuple] = [()] * n
    if n == 0:
        return out
    starts = np.cumsum(counts) - counts
    for c in np.unique(counts).tolist():
        rows = np.flatnonzero(counts == c)
        if c == 0:
            continue
        block = flat[starts[rows][:, None] + np.arange(c)]
        for r, t in zip(rows.tolist(), map(tuple, block.tolist())):
            out[r] = t
    return out


def products(flat: np.ndarray, counts: np.ndarray) -> np.ndarray | None:
    """Product of each consecutive group (1 for empty groups) as int64, or ``None`` when a
    product would not fit comfortably in int64 (callers then fall back to Python ints)."""
    n = len(counts)
    out = np.ones(n, np.int64)
    if n == 0:
        return out
    starts = np.cumsum(counts) - counts
    for c in np.unique(counts).tolist():
        if c == 0:
            continue
        rows = np.flatnonzero(counts == c)
        block = flat[starts[rows][:, None] + np.arange(c)].astype(np.float64)
        with np.errstate(over="ignore"):
            prod = block.prod(axis=1)
        if len(prod) and prod.max() >= 2.0**53:
            return None
        out[rows] = prod.astype(np.int64)
    return out


def layouts(tables: Tables, dtype_field: int, sizes_field: int, dim_order_field: int,
            known_codes: Container[int]) -> tuple[list[int], list[tuple], list[tuple], np.ndarray]:
    """The (scalar type, sizes, dim_order) layout fields of many tables at once, checked.

    Returns ``(codes, shapes, dim_orders, numel)``; raises :class:`SlowPath` on an unknown
    scalar type, a negative size or an element count too large for int64 arithmetic.
    """
    vec = tables.vec
    codes = tables.scalar(dtype_field, "i1").tolist()
    if any(c not in known_codes for c in set(codes)):
        raise SlowPath("unknown scalar type")
    s_start, s_cnt = tables.vectors(sizes_field, 4)
    d_start, d_cnt = tables.vectors(dim_order_field, 1)
    flat = vec.flat(s_start, s_cnt, "<i4")
    if len(flat) and flat.min() < 0:
        raise SlowPath("negative size")
    numel = products(flat, s_cnt)
    if numel is None:
        raise SlowPath("huge tensor")
    return (codes, split_tuples(flat, s_cnt), split_tuples(vec.flat(d_start, d_cnt, "u1"), d_cnt),
            numel)
