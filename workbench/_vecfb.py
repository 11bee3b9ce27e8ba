"""Vectorised (numpy) reads of many flatbuffer tables at once — the fast path (private).

The scalar reader in :mod:`workbench.flatbuf` verifies one table at a time and raises
precise errors. For programs with tens of thousands of values that is too slow in pure
Python, so readers first try this path: it applies the *same* checks to whole arrays of
positions at once and, on the first violation, raises :class:`SlowPath` so that the caller
re-reads with the scalar reader, which then reports the exact structure and offset.
"""

from __future__ import annotations

import math
from collections.abc import Container
from typing import TYPE_CHECKING

import numpy as np

from ._cols import filled

if TYPE_CHECKING:
    from .flatbuf import FlatBuffer

#: Below this many rows a fancy index is cheaper than setting up a window view.
_WINDOW_ROWS = 64
#: At most this many distinct string lengths take the fixed-width path of ``strings``.
_FIXED_WIDTHS = 8


#: Up to this many distinct vtables are decoded one by one (cached), more in one pass.
_VTABLES_ONE_BY_ONE = 4


def _vtables(vec: VecReader, uniq: np.ndarray, path: str
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The vtables at positions ``uniq``: ``(field offsets (one row each, 0 = absent), table
    sizes, vtable sizes)``, with the checks of ``FlatBuffer._read_vtable`` (any violation
    raises :class:`SlowPath`; the scalar reader then names it)."""
    fb = vec.fb
    if len(uniq) <= _VTABLES_ONE_BY_ONE:
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
        return table, sizes, 4 + 2 * np.array([len(f) for _, f in decoded], np.int64)
    if uniq[0] < vec.base or (uniq & 1).any():
        raise SlowPath("vtable outside the buffer or not 2-byte aligned")
    vtsize = vec.gather(uniq, "<u2").astype(np.int64)
    sizes = vec.gather(uniq + 2, "<u2").astype(np.int64)
    if (vtsize < 4).any() or (vtsize & 1).any() or (sizes < 4).any():
        raise SlowPath("vtable or table size invalid")
    if (uniq + vtsize > vec.end).any():
        raise SlowPath("vtable runs past the end")
    nfields = (vtsize - 4) // 2
    width = int(nfields.max())
    table = np.zeros((len(uniq), max(width, 1)), np.int64)
    if width:
        has = np.arange(width) < nfields[:, None]
        at = uniq[:, None] + 4 + 2 * np.arange(width)
        table[:, :width][has] = vec.gather(at[has], "<u2")
        if ((table > 0) & (table < 4)).any():
            raise SlowPath("a field offset overlaps the table's soffset")
    return table, sizes, vtsize


def rows_at(u8: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """``u8[s:s + width]`` for every ``s`` in ``starts``, as a ``(len(starts), width)`` array
    (the caller has checked every row to lie inside ``u8``). Many rows are gathered through
    a sliding-window view, one row copy each, instead of one index per byte."""
    if len(starts) >= _WINDOW_ROWS and 0 < width <= len(u8):
        return np.lib.stride_tricks.sliding_window_view(u8, width)[starts]
    return u8[starts[:, None] + np.arange(width, dtype=np.int64)]


def ascii_rows(block: np.ndarray) -> list[str]:
    """The rows of a 2-D uint8 array as strings; the caller has checked that every byte is
    ASCII and not NUL, except for trailing NULs, which are dropped (a row's terminator).
    (One byte string per row from numpy, then one decode each: several times faster than
    slicing one decoded text.)

    Example:
        >>> ascii_rows(np.frombuffer(b"ab\\0cd\\0", np.uint8).reshape(2, 3))
        ['ab', 'cd']
    """
    rows, width = block.shape
    if not width:
        return [""] * rows
    fixed = np.ascontiguousarray(block).view(f"S{width}").reshape(-1)
    return list(map(bytes.decode, fixed.tolist()))


#: log2 of the scalar sizes
_SHIFT = {2: 1, 4: 2, 8: 3}
_DTYPES: dict[str, np.dtype] = {}


def _dtype(name: str) -> np.dtype:
    """``np.dtype(name)``, looked up once per name."""
    dt = _DTYPES.get(name)
    if dt is None:
        dt = _DTYPES[name] = np.dtype(name)
    return dt


class SlowPath(Exception):
    """A check failed: re-read with the scalar verifying reader for a precise error."""


class Tables:
    """Many tables of one type: positions, and per-table field offsets from their vtables.

    ``vt`` is each table's vtable position; ``table``/``sizes``/``vtsize`` hold, per distinct
    vtable, its field offsets, the table size it declares and its own size in bytes;
    ``inv`` maps each table to its vtable row (``None``: all tables share row 0).
    """

    __slots__ = ("inv", "pos", "sizes", "table", "vec", "vt", "vtsize")

    def __init__(self, vec: VecReader, pos: np.ndarray, path: str) -> None:
        self.vec = vec
        self.pos = pos
        self.inv: np.ndarray | None = None  # vtable of each table (None: all share one)
        if len(pos) == 0:
            self.vt = pos
            self.table = np.zeros((1, 1), np.int64)
            self.sizes = np.zeros(1, np.int64)
            self.vtsize = np.full(1, 4, np.int64)
            return
        vec.check(pos, 4)
        vt = self.vt = pos - vec.gather(pos, "<i4")
        if vt.min() == vt.max():  # the common case: one vtable for all
            uniq = vt[:1]
        else:
            # tables of one type mostly come in runs that share a vtable: the distinct
            # vtables are among the first of each run (a short array to sort)
            edge = np.flatnonzero(vt[1:] != vt[:-1])
            uniq = np.unique(vt[np.concatenate(([0], edge + 1))])
            if len(uniq) > 4096:
                raise SlowPath("too many distinct vtables")
            self.inv = np.searchsorted(uniq, vt)
        self.table, self.sizes, self.vtsize = _vtables(vec, uniq, path)
        tsize = self.sizes[0] if self.inv is None else self.sizes[self.inv]
        if (pos + tsize > vec.end).any():
            raise SlowPath("table runs past the end")

    def field(self, i: int, size: int) -> np.ndarray:
        """Absolute position of field ``i`` per table (0 where absent), checked to fit.

        A field past its table's declared size is accepted by the official verifier (and by
        the scalar path, as a finding): it raises :class:`SlowPath` here so that the scalar
        path reads the tables and notes the finding once, as it would alone.
        """
        n = len(self.pos)
        if i >= self.table.shape[1] or n == 0:
            return np.zeros(n, np.int64)
        col = self.table[:, i]
        if ((col > 0) & (col + size > self.sizes)).any():
            raise SlowPath("field past its table's declared size")
        if self.inv is None:
            off = int(col[0])
            return self.pos + off if off > 0 else np.zeros(n, np.int64)
        off = col[self.inv]
        return np.where(off > 0, self.pos + off, 0)

    def scalar(self, i: int, dtype: str, default: int | float = 0) -> np.ndarray:
        """Scalar field ``i`` of every table (``default`` where absent)."""
        dt = _dtype(dtype)
        p = self.field(i, dt.itemsize)  # (inside its table, so inside the buffer)
        if self.inv is None:  # one vtable: the field is in every table or in none
            if len(p) and p[0] > 0:
                return self.vec.gather(p, dtype, checked=True)
            return np.full(len(p), default, dtype=dt)
        out = np.full(len(self.pos), default, dtype=dt)
        present = p > 0
        if present.any():
            out[present] = self.vec.gather(p[present], dtype, checked=True)
        return out

    def ref(self, i: int) -> np.ndarray:
        """Target of reference field ``i`` per table (0 where absent), checked in bounds."""
        p = self.field(i, 4)
        end = self.vec.end
        if self.inv is None:
            if not (len(p) and p[0] > 0):
                return np.zeros(len(p), np.int64)
            tgt = p + self.vec.gather(p, "<u4", checked=True)
            if tgt.max() >= end:
                raise SlowPath("reference points past the end")
            return tgt
        out = np.zeros(len(self.pos), np.int64)
        present = p > 0
        if present.any():
            tgt = p[present] + self.vec.gather(p[present], "<u4", checked=True)
            if tgt.max() >= end:
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

    def gather(self, pos: np.ndarray, dtype: str, checked: bool = False) -> np.ndarray:
        """Little-endian scalars of ``dtype`` at absolute positions ``pos`` (unaligned ok);
        ``checked``: the caller has made sure that every read lies inside the buffer."""
        dt = _dtype(dtype)
        n = dt.itemsize
        if not checked:
            self.check(pos, n)
        if n == 1:
            return self.u8[pos].view(dt)
        # flatbuffers aligns scalars: one typed fancy index
        if not len(pos) or not int(np.bitwise_or.reduce(pos)) & (n - 1):
            view = self._views.get(dt)
            if view is None:
                view = self._views[dt] = self.u8[: len(self.u8) // n * n].view(dt)
            return view[pos >> _SHIFT[n]]
        return np.ascontiguousarray(rows_at(self.u8, pos, n)).view(dt).reshape(-1)

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

    def strings(self, ref: np.ndarray) -> np.ndarray:
        """The strings at ``ref`` (0: absent -> ``None``) as an object array, decoded in one go.

        Raises :class:`SlowPath` when a string is not NUL-terminated, holds a NUL, or is not
        valid UTF-8 (the scalar reader then reports it precisely).
        """
        ref = np.asarray(ref, np.int64)
        out = filled(len(ref), None)
        present = ref > 0
        if not present.any():
            return out
        starts, counts = self.vectors(ref[present], 1)
        ends = starts + counts
        if (ends >= self.end).any() or self.u8[ends].any():
            raise SlowPath("string is not NUL-terminated")
        fixed = self._fixed_width(starts, counts)
        if fixed is not None:
            out[present] = fixed
            return out
        raw = self.flat(starts, counts + 1, "u1").tobytes()  # each with its terminating NUL
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SlowPath("string is not valid UTF-8") from None
        parts = text.split("\0")
        if len(parts) != len(starts) + 1:
            raise SlowPath("string holds a NUL")
        parts.pop()
        out[present] = np.fromiter(parts, dtype=object, count=len(parts))
        return out

    def _fixed_width(self, starts: np.ndarray, counts: np.ndarray) -> np.ndarray | None:
        """The strings (NUL-terminated, checked) as an object array when they are ASCII
        without NULs and of a few lengths (keys, names): the bytes of each length gathered
        as one block (see :func:`ascii_rows`); ``None`` otherwise (the general path)."""
        widths = np.unique(counts)
        if len(widths) > _FIXED_WIDTHS:
            return None
        out = np.empty(len(starts), object)
        for n in widths.tolist():
            rows = np.flatnonzero(counts == n) if len(widths) > 1 else np.arange(len(starts))
            if n == 0:
                out[rows] = ""
                continue
            block = rows_at(self.u8, starts[rows], n)
            if (block >= 0x80).any() or not block.all():  # non-ASCII, or a NUL inside
                return None
            out[rows] = ascii_rows(block)
        return out

    def flat(self, starts: np.ndarray, counts: np.ndarray, dtype: str) -> np.ndarray:
        """All elements of many vectors, concatenated (split with ``counts``)."""
        dt = _dtype(dtype)
        total = int(counts.sum())
        if total == 0:
            return np.zeros(0, dt)
        # positions by one cumulative sum: +itemsize inside a vector, a jump between vectors
        nz = counts > 0
        s = starts[nz]
        c = counts[nz]
        step = np.full(total, dt.itemsize, np.int64)
        begin = np.cumsum(c) - c
        step[0] = s[0]
        step[begin[1:]] = s[1:] - (s[:-1] + (c[:-1] - 1) * dt.itemsize)
        return self.gather(np.cumsum(step), dtype)


def groups(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group equal int64 keys: ``(rep, inv)`` with ``key[rep[inv]] == key``; ``rep`` holds one
    row per distinct key (dense small keys use a lookup table instead of a sort).

    Example:
        >>> rep, inv = groups(np.array([5, 3, 5]))
        >>> np.array([5, 3, 5])[rep[inv]].tolist()
        [5, 3, 5]
    """
    n = len(key)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo, hi = int(key.min()), int(key.max())
    if hi - lo <= 4 * n + 65536:
        k = key - lo
        rep_of = np.full(hi - lo + 1, -1, np.int64)
        rep_of[k] = np.arange(n)  # any row of the group will do
        uniq = np.flatnonzero(rep_of >= 0)
        lut = np.empty(hi - lo + 1, np.int64)
        lut[uniq] = np.arange(len(uniq))
        return rep_of[uniq], lut[k]
    uniq = np.unique(key)  # hashed, then sorted
    inv = np.searchsorted(uniq, key)
    rep = np.empty(len(uniq), np.int64)
    rep[inv] = np.arange(n)
    return rep, inv


def unique_tuples(flat: np.ndarray, counts: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, list[tuple]]:
    """Split ``flat`` into consecutive groups of lengths ``counts``, as tuples.

    Returns ``(tuples, ids, uniques)``: an object array with one tuple per group, where equal
    groups share ONE tuple object (shapes repeat a lot: few objects to make), an int64 id per
    group (equal ids <=> equal tuples) and the distinct tuples by id.

    Example:
        >>> t, i, u = unique_tuples(np.array([2, 3, 2, 3, 7]), np.array([2, 2, 1]))
        >>> t.tolist(), i.tolist(), u
        ([(2, 3), (2, 3), (7,)], [1, 1, 0], [(7,), (2, 3)])
    """
    n = len(counts)
    out = np.empty(n, dtype=object)
    ids = np.zeros(n, np.int64)
    uniques: list[tuple] = []
    if n == 0:
        return out, ids, uniques
    starts = np.cumsum(counts) - counts
    lengths = np.flatnonzero(np.bincount(counts))
    for c in lengths.tolist():
        rows = np.flatnonzero(counts == c) if len(lengths) > 1 else np.arange(n)
        if c == 0:
            objs = np.empty(1, dtype=object)
            objs[0] = ()
            inv = np.zeros(len(rows), np.int64)
        else:
            block = flat[starts[rows][:, None] + np.arange(c)].astype(np.int64)
            # group ids column by column: id * width + (rank of the value) stays below 2**63
            inv = np.zeros(len(rows), np.int64)
            first = np.zeros(1, np.int64)
            for j in range(c):
                col = block[:, j]
                lo = int(col.min())
                if int(col.max()) - lo >= 1 << 31:
                    col = groups(col)[1]
                else:
                    col = col - lo
                width = int(col.max()) + 1
                first, inv = groups(inv * width + col)  # < 2**31 * rows: no overflow
            objs = np.empty(len(first), dtype=object)
            for k, t in enumerate(map(tuple, block[first].tolist())):
                objs[k] = t
        out[rows] = objs[inv]
        ids[rows] = inv + len(uniques)
        uniques.extend(objs.tolist())
    return out, ids, uniques


def layouts(tables: Tables, dtype_field: int, sizes_field: int, dim_order_field: int,
            known_codes: Container[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                  np.ndarray]:
    """The (scalar type, sizes, dim_order) layout fields of many tables at once, checked.

    Returns ``(codes, shapes, shape_ids, dim_orders, numel)``: int64 codes, object arrays of
    tuples (see :func:`unique_tuples`) and int64 element counts; raises :class:`SlowPath` on
    an unknown scalar type, a negative size or an element count of 2**53 or more.
    """
    vec = tables.vec
    codes = tables.scalar(dtype_field, "i1").astype(np.int64)
    if len(codes) and (codes.min() < 0 or any(c not in known_codes for c in
                                              np.flatnonzero(np.bincount(codes)).tolist())):
        raise SlowPath("unknown scalar type")
    s_start, s_cnt = tables.vectors(sizes_field, 4)
    d_start, d_cnt = tables.vectors(dim_order_field, 1)
    flat = vec.flat(s_start, s_cnt, "<i4")
    if len(flat) and flat.min() < 0:
        raise SlowPath("negative size")
    shapes, shape_ids, uniques = unique_tuples(flat, s_cnt)
    sizes = [math.prod(t) for t in uniques]  # exact, once per distinct shape
    if sizes and max(sizes) >= 1 << 53:
        raise SlowPath("huge tensor")
    numel = np.array(sizes, np.int64)[shape_ids] if sizes else np.zeros(0, np.int64)
    dflat = vec.flat(d_start, d_cnt, "u1").astype(np.int64)
    # the usual dim order is 0, 1, ..., k-1: one shared tuple per rank, no grouping
    within = np.arange(len(dflat)) - np.repeat(np.cumsum(d_cnt) - d_cnt, d_cnt)
    if np.array_equal(dflat, within):
        dims = np.empty(len(d_cnt), dtype=object)
        for c in np.flatnonzero(np.bincount(d_cnt)).tolist() if len(d_cnt) else ():
            sel = d_cnt == c
            dims[sel] = filled(int(sel.sum()), tuple(range(c)))
    else:
        dims = unique_tuples(dflat, d_cnt)[0]
    return codes, shapes, shape_ids, dims, numel
