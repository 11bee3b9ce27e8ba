"""Reading a ``.ptd``: the segments and the named-data entries of its FlatTensor, on a fast
(vectorised) path and a scalar verifying path that agree, into a :class:`PtdData`.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np

from ... import readpath
from ..._cols import objects
from ..._vecfb import SlowPath, VecReader, layouts
from ...dtypes import SCALAR_TYPES
from ...errors import CorruptError, OutOfBoundsError
from ...flatbuf import FlatBuffer, Table
from ...source import Source
from .header import FlatTensorHeader
from .schema import DataSegment, FlatTensor, FlatTensorV0, NamedData, TensorLayout, TensorMetadata

__all__ = ["PtdData", "read_entries", "read_entries_v0"]

#: ScalarType code -> element size (codes are 0..N-1).
_ITEMSIZE = np.array([SCALAR_TYPES[c].itemsize for c in range(len(SCALAR_TYPES))], np.int64)


def read_entries(src: Source, fb: FlatBuffer, root: Table, h: FlatTensorHeader
                 ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(segment offsets, segment sizes, entry columns) of the FlatTensor ``root``: the fast
    path first, table by table (exact errors) at any doubt or when :mod:`workbench.readpath`
    says so."""
    return readpath.chosen().read(lambda: _entries_fast(src, fb, root, h),
                                  lambda: _entries_slow(src, root, h))


def _segments(src: Source, root: Table, slot: int, h: FlatTensorHeader) -> list[tuple[int, int]]:
    segments: list[tuple[int, int]] = []
    for k, seg in enumerate(root.tables(slot, "segments")):
        off, size = seg.u64(DataSegment.offset), seg.u64(DataSegment.size)
        if off + size > h.segment_data_size:
            raise OutOfBoundsError(
                f"segment {k} [0x{off:x}, +0x{size:x}) runs past the segment data "
                f"(size 0x{h.segment_data_size:x})",
                file=src.path, structure=f"FlatTensor.segments[{k}]", offset=seg.pos)
        segments.append((h.segment_base_offset + off, size))
    return segments


def _layout(src: Source, t: Table, key: str, si: int, segments: list[tuple[int, int]],
            slots: type, at: int, room: int, what: str) -> tuple:
    """One entry with a tensor layout (scalar_type, sizes, dim_order slots of ``slots``) whose
    bytes start at absolute ``at`` with ``room`` bytes available."""
    code = t.i8(slots.scalar_type)
    dt = SCALAR_TYPES.get(code)
    if dt is None:
        raise CorruptError(f"scalar_type {code} is unknown", file=src.path,
                           structure=f"{t.path}.scalar_type", offset=t.pos)
    sizes = tuple(t.scalars(slots.sizes, "i", "sizes"))
    if any(s < 0 for s in sizes):
        raise CorruptError(f"negative size in {list(sizes)}", file=src.path,
                           structure=f"{t.path}.sizes", offset=t.pos)
    numel = 1
    for s in sizes:
        numel *= s
    nbytes = numel * dt.itemsize
    if nbytes > room:
        raise OutOfBoundsError(
            f"tensor of {nbytes} bytes does not fit the {room} bytes left in its segment {si}",
            file=src.path, structure=f"{what} ({key!r})", offset=at)
    dim_order = tuple(t.scalars(slots.dim_order, "B", "dim_order"))
    return (key, si, at, segments[si][1], code, sizes, dim_order, nbytes, True)


def _columns(segments: list[tuple[int, int]], entries: list[tuple]
             ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    seg_off = np.array([o for o, _ in segments], np.int64)
    seg_size = np.array([z for _, z in segments], np.int64)
    if not entries:
        z = np.zeros(0, np.int64)
        return seg_off, seg_size, {"key": objects([]), "segment": z, "offset": z, "size": z,
                                   "code": z, "shape": objects([]), "dim_order": objects([]),
                                   "nbytes": z, "has_layout": np.zeros(0, bool)}
    key, seg, off, size, code, shape, dims, nbytes, has = zip(*entries)
    cols = {"key": objects(key), "segment": np.array(seg, np.int64),
            "offset": np.array(off, np.int64), "size": np.array(size, np.int64),
            "code": np.array(code, np.int64), "shape": objects(shape), "dim_order": objects(dims),
            "nbytes": np.array(nbytes, np.int64), "has_layout": np.array(has, bool)}
    return seg_off, seg_size, cols


def read_entries_v0(src: Source, root: Table, h: FlatTensorHeader
                    ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The same columns from the earlier schema (:class:`~.schema.FlatTensorV0`): one entry
    per ``TensorMetadata`` (its bytes at ``offset`` inside segment ``segment_index``; ``size``
    is its own byte count), then the ``named_data`` blobs. Scalar
    path only: these files are small and no longer written."""
    segments = _segments(src, root, FlatTensorV0.segments, h)
    entries: list[tuple] = []
    for t in root.tables(FlatTensorV0.tensors, "tensors"):
        key = t.string(TensorMetadata.fully_qualified_name, "fully_qualified_name") or ""
        si = t.i32(TensorMetadata.segment_index)
        if not 0 <= si < len(segments):
            raise OutOfBoundsError(f"segment_index {si} is out of range ({len(segments)} segments)",
                                   file=src.path, structure=f"{t.path}.segment_index", offset=t.pos)
        seg_at, seg_size = segments[si]
        off = t.u64(TensorMetadata.offset)
        if off > seg_size:
            raise OutOfBoundsError(f"offset 0x{off:x} lies past the end of segment {si} "
                                   f"(size 0x{seg_size:x})", file=src.path,
                                   structure=f"{t.path}.offset", offset=t.pos)
        e = _layout(src, t, key, si, segments, TensorMetadata, seg_at + off, seg_size - off,
                    t.path)
        entries.append((*e[:3], e[7], *e[4:]))  # size: the tensor's own bytes
    for nd in root.tables(FlatTensorV0.named_data, "named_data"):
        entries.append(_named_entry(src, nd, segments))
    return _columns(segments, entries)


def _named_entry(src: Source, nd: Table, segments: list[tuple[int, int]]) -> tuple:
    key = nd.string(NamedData.key, "key") or ""
    si = nd.u32(NamedData.segment_index)
    if si >= len(segments):
        raise OutOfBoundsError(f"segment_index {si} is out of range ({len(segments)} segments)",
                               file=src.path, structure=f"{nd.path}.segment_index", offset=nd.pos)
    off, size = segments[si]
    layout = nd.table(NamedData.tensor_layout, "tensor_layout")
    if layout is not None:
        return _layout(src, layout, key, si, segments, TensorLayout, off, size, nd.path)
    return (key, si, off, size, 0, (size,), (0,), size, False)


def _entries_slow(src: Source, root: Table, h: FlatTensorHeader
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Segments and named-data entries, one verified table at a time (exact errors)."""
    segments = _segments(src, root, FlatTensor.segments, h)
    entries: list[tuple] = []
    for nd in root.tables(FlatTensor.named_data, "named_data"):
        entries.append(_named_entry(src, nd, segments))
    return _columns(segments, entries)


def _entries_fast(src: Source, fb: FlatBuffer, root: Table, h: FlatTensorHeader
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The same as :func:`_entries_slow`, vectorised; raises SlowPath on any doubt."""
    vec = VecReader(fb)
    start, n = root.vector(FlatTensor.segments, 4, "segments")
    S = vec.table_vector(start, n, "FlatTensor.segments")
    offs = S.scalar(DataSegment.offset, "<u8")
    sizes = S.scalar(DataSegment.size, "<u8")
    if n and (offs.max() >= 1 << 62 or sizes.max() >= 1 << 62
              or (offs + sizes).max() > h.segment_data_size):
        raise SlowPath("segment out of range")
    seg_off = offs.astype(np.int64) + h.segment_base_offset
    seg_size = sizes.astype(np.int64)
    start, n = root.vector(FlatTensor.named_data, 4, "named_data")
    N = vec.table_vector(start, n, "FlatTensor.named_data")
    key_ref = N.ref(NamedData.key)
    if n and (key_ref == 0).any():
        raise SlowPath("key missing")
    keys = vec.strings(key_ref)
    seg_idx = N.scalar(NamedData.segment_index, "<u4").astype(np.int64)
    if n and seg_idx.max() >= len(seg_off):
        raise SlowPath("segment index out of range")
    lay_ref = N.ref(NamedData.tensor_layout)
    has = lay_ref > 0
    L = vec.tables(lay_ref[has], "TensorLayout")
    codes, shapes, _, dims, numel = layouts(L, TensorLayout.scalar_type, TensorLayout.sizes,
                                   TensorLayout.dim_order, SCALAR_TYPES)
    size_col = seg_size[seg_idx]
    rows = np.flatnonzero(has)
    nb_layout = numel * _ITEMSIZE[codes]
    if (nb_layout > size_col[rows]).any():
        raise SlowPath("tensor larger than its segment")
    code = np.zeros(n, np.int64)
    code[rows] = codes
    nbytes = size_col.copy()
    nbytes[rows] = nb_layout
    shape = np.empty(n, object)
    dim_order = np.empty(n, object)
    shape[rows] = shapes
    dim_order[rows] = dims
    raw = (0,)
    for k, z in zip(np.flatnonzero(~has).tolist(), size_col[~has].tolist()):
        shape[k] = (z,)
        dim_order[k] = raw
    cols = {"key": keys, "segment": seg_idx, "offset": seg_off[seg_idx], "size": size_col,
            "code": code, "shape": shape, "dim_order": dim_order, "nbytes": nbytes,
            "has_layout": has}
    return seg_off, seg_size, cols


class PtdData:
    """Columns of one ``.ptd``: used for its own frames and to resolve a .pte's keys.

    ``cols`` holds one array per entry field: key (object), segment, offset, size, code
    (ScalarType; 0 = uint8 for entries without a layout), shape and dim_order (object
    arrays of tuples), nbytes, has_layout.
    """

    def __init__(self, path: str, header: FlatTensorHeader, seg_off: np.ndarray,
                 seg_size: np.ndarray, cols: dict[str, Any], size: int) -> None:
        self.path = path
        self.header = header
        self.seg_off = seg_off
        self.seg_size = seg_size
        self.cols = cols
        self.size = size

    @cached_property
    def by_key(self) -> dict[str, int]:
        """key -> row of its entry (the first one when a key repeats)."""
        keys = self.cols["key"].tolist()
        n = len(keys)
        return dict(zip(reversed(keys), range(n - 1, -1, -1)))

    def fits(self, row: int, dtype: str, shape: tuple, nbytes: int) -> bool:
        """Entry ``row`` can hold a tensor of this dtype/shape (same layout when the entry
        stores one, else at least ``nbytes`` bytes)."""
        c = self.cols
        if c["has_layout"][row]:
            return SCALAR_TYPES[int(c["code"][row])].name == dtype and c["shape"][row] == shape
        return int(c["size"][row]) >= nbytes
