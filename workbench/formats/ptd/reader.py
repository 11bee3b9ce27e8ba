"""ExecuTorch external data files (``.ptd``, FlatTensor): named tensors and blobs.

Layout (facts from the format; field names follow ``flat_tensor.fbs``)::

    0   u32  root table offset              \\
    4   4s   file identifier "FT01"          |
    8   FH01 header (padded to 16 bytes):    |  the FlatTensor flatbuffer,
          4s magic "FH01", u32 length,       |  [0, flatbuffer_offset + flatbuffer_size)
          u64 flatbuffer_offset,             |
          u64 flatbuffer_size,               |
          u64 segment_base_offset,           |
          u64 segment_data_size              /
    padding up to segment_base_offset
    segments: DataSegment.offset/size relative to segment_base_offset

``FlatTensor`` = version, segments [DataSegment], named_data [NamedData(key, segment_index,
tensor_layout(scalar_type, sizes, dim_order))]. Entries written for external constants carry
a tensor layout; delegate blobs (e.g. XNNPACK weights) do not.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np

from .._cols import align, booleans, categorical, factorized, filled, ints, objects, strings
from .._vecfb import SlowPath, VecReader, layouts
from ..dtypes import SCALAR_TYPES
from ..errors import CorruptError, OutOfBoundsError, TruncatedError, UnsupportedVersionError
from ..flatbuf import FlatBuffer, Table
from ..source import Source
from ._layout import cover_arrays, named_data_role, segments_frame
from .parsed import Parsed

__all__ = ["FORMAT", "MAGIC", "FlatTensorHeader", "detect", "read"]

FORMAT = "ptd"
MAGIC = b"FT01"
HEADER_MAGIC = b"FH01"
HEADER_LENGTH = 40
#: Try the vectorised path first (tests turn it off to compare with the scalar path).
FAST = True
#: ScalarType code -> element size / torch dtype name (codes are 0..N-1).
_ITEMSIZE = np.array([SCALAR_TYPES[c].itemsize for c in range(len(SCALAR_TYPES))], np.int64)
DTYPE_NAMES = [SCALAR_TYPES[c].name for c in range(len(SCALAR_TYPES))]


def detect(head: bytes) -> bool:
    """True when ``head`` looks like a FlatTensor data file (``FT`` + two characters at 4).

    Example:
        >>> detect(b"D\\x00\\x00\\x00FT01FH01")
        True
    """
    return len(head) >= 8 and head[4:6] == b"FT" and head[6:8].isalnum()


class FlatTensorHeader:
    """The ``FH01`` header at byte 8 of a ``.ptd``; attributes keep the format's names."""

    __slots__ = ("flatbuffer_offset", "flatbuffer_size", "length", "segment_base_offset",
                 "segment_data_size")

    def __init__(self, length: int, flatbuffer_offset: int, flatbuffer_size: int,
                 segment_base_offset: int, segment_data_size: int) -> None:
        self.length = length
        self.flatbuffer_offset = flatbuffer_offset
        self.flatbuffer_size = flatbuffer_size
        self.segment_base_offset = segment_base_offset
        self.segment_data_size = segment_data_size

    @classmethod
    def read(cls, src: Source) -> FlatTensorHeader:
        """Read and check the header against the file size (raises ArtifactError)."""
        what = "FlatTensor header (FH01)"
        src.check(8, HEADER_LENGTH, what)
        magic = src.bytes(8, 4, what)
        if magic != HEADER_MAGIC:
            raise CorruptError(f"magic is {magic!r}, expected {HEADER_MAGIC!r}",
                               file=src.path, structure=what, offset=8)
        length = src.u32(12, what)
        if length < HEADER_LENGTH:
            raise CorruptError(f"length {length} is shorter than {HEADER_LENGTH}",
                               file=src.path, structure=f"{what} length", offset=12)
        h = cls(length, src.u64(16, what), src.u64(24, what), src.u64(32, what), src.u64(40, what))
        size = src.size
        fb_end = h.flatbuffer_offset + h.flatbuffer_size
        if h.flatbuffer_offset < length or fb_end > size:
            raise OutOfBoundsError(
                f"flatbuffer [0x{h.flatbuffer_offset:x}, 0x{fb_end:x}) does not fit between the "
                f"header (length {length}) and the end of the file (size 0x{size:x})",
                file=src.path, structure=f"{what} flatbuffer_offset", offset=16)
        if h.segment_base_offset < fb_end or h.segment_base_offset > size:
            raise OutOfBoundsError(
                f"segment_base_offset 0x{h.segment_base_offset:x} is outside "
                f"[0x{fb_end:x}, 0x{size:x}]", file=src.path,
                structure=f"{what} segment_base_offset", offset=32)
        if h.segment_base_offset + h.segment_data_size > size:
            raise TruncatedError(
                f"segment data (0x{h.segment_base_offset:x} + 0x{h.segment_data_size:x}) runs past "
                f"the end of the file (size 0x{size:x})", file=src.path,
                structure=f"{what} segment_data_size", offset=40)
        return h

    def __repr__(self) -> str:
        return (f"FlatTensorHeader(length={self.length}, flatbuffer_offset={self.flatbuffer_offset}, "
                f"flatbuffer_size={self.flatbuffer_size}, "
                f"segment_base_offset={self.segment_base_offset}, "
                f"segment_data_size={self.segment_data_size})")


def read(src: Source) -> Parsed:
    """Read the ``.ptd`` in ``src`` (verified, zero-copy) into a :class:`Parsed`."""
    if src.size < 8:
        raise TruncatedError(f"{src.size} bytes is too short for a data file (needs 8)",
                             file=src.path, structure="file header", offset=0)
    ident = src.bytes(4, 4, "file identifier")
    if ident != MAGIC:
        raise UnsupportedVersionError(f"FlatTensor version {ident!r} is not supported "
                                      f"(expected {MAGIC!r})", file=src.path,
                                      structure="file identifier", offset=4)
    h = FlatTensorHeader.read(src)
    fb_end = h.flatbuffer_offset + h.flatbuffer_size
    fb = FlatBuffer(src, 0, fb_end, identifier=MAGIC, name="FlatTensor")
    root = fb.root("FlatTensor")
    version = root.u32(0)
    try:
        if not FAST:
            raise SlowPath("disabled")
        seg_off, seg_size, cols = _entries_fast(src, fb, root, h)
    except SlowPath:
        seg_off, seg_size, cols = _entries_slow(src, root, h)
    parsed = Parsed(format=FORMAT, path=src.path, sources={src.path: src})
    parsed.info.update({"version": version, "header": h,
                        "segment_base_offset": h.segment_base_offset})
    data = PtdData(src.path, h, seg_off, seg_size, cols, src.size)
    parsed.builders.update({"segments": data.segments_columns, "tensors": data.tensors_columns,
                            "named_data": data.named_columns})
    parsed.extra["ptd"] = data
    return parsed


def _entries_slow(src: Source, root: Table, h: FlatTensorHeader
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Segments and named-data entries, one verified table at a time (exact errors)."""
    segments: list[tuple[int, int]] = []
    for k, seg in enumerate(root.tables(1, "segments")):
        off, size = seg.u64(0), seg.u64(1)
        if off + size > h.segment_data_size:
            raise OutOfBoundsError(
                f"segment {k} [0x{off:x}, +0x{size:x}) runs past the segment data "
                f"(size 0x{h.segment_data_size:x})",
                file=src.path, structure=f"FlatTensor.segments[{k}]", offset=seg.pos)
        segments.append((h.segment_base_offset + off, size))
    entries: list[tuple] = []
    for nd in root.tables(2, "named_data"):
        key = nd.string(0, "key") or ""
        si = nd.u32(1)
        if si >= len(segments):
            raise OutOfBoundsError(f"segment_index {si} is out of range ({len(segments)} segments)",
                                   file=src.path, structure=f"{nd.path}.segment_index", offset=nd.pos)
        off, size = segments[si]
        layout = nd.table(2, "tensor_layout")
        if layout is not None:
            code = layout.i8(0)
            dt = SCALAR_TYPES.get(code)
            if dt is None:
                raise CorruptError(f"scalar_type {code} is unknown", file=src.path,
                                   structure=f"{layout.path}.scalar_type", offset=layout.pos)
            sizes = tuple(layout.scalars(1, "i", "sizes"))
            if any(s < 0 for s in sizes):
                raise CorruptError(f"negative size in {list(sizes)}", file=src.path,
                                   structure=f"{layout.path}.sizes", offset=layout.pos)
            numel = 1
            for s in sizes:
                numel *= s
            nbytes = numel * dt.itemsize
            if nbytes > size:
                raise OutOfBoundsError(
                    f"tensor of {nbytes} bytes does not fit its {size}-byte segment {si}",
                    file=src.path, structure=f"{nd.path} ({key!r})", offset=off)
            dim_order = tuple(layout.scalars(2, "B", "dim_order"))
            entries.append((key, si, off, size, code, sizes, dim_order, nbytes, True))
        else:
            entries.append((key, si, off, size, 0, (size,), (0,), size, False))
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


def _entries_fast(src: Source, fb: FlatBuffer, root: Table, h: FlatTensorHeader
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The same as :func:`_entries_slow`, vectorised; raises SlowPath on any doubt."""
    vec = VecReader(fb)
    start, n = root.vector(1, 4, "segments")
    S = vec.table_vector(start, n, "FlatTensor.segments")
    offs = S.scalar(0, "<u8")
    sizes = S.scalar(1, "<u8")
    if n and (offs.max() >= 1 << 62 or sizes.max() >= 1 << 62
              or (offs + sizes).max() > h.segment_data_size):
        raise SlowPath("segment out of range")
    seg_off = offs.astype(np.int64) + h.segment_base_offset
    seg_size = sizes.astype(np.int64)
    start, n = root.vector(2, 4, "named_data")
    N = vec.table_vector(start, n, "FlatTensor.named_data")
    key_ref = N.ref(0)
    if n and (key_ref == 0).any():
        raise SlowPath("key missing")
    keys = vec.strings(key_ref)
    seg_idx = N.scalar(1, "<u4").astype(np.int64)
    if n and seg_idx.max() >= len(seg_off):
        raise SlowPath("segment index out of range")
    lay_ref = N.ref(2)
    has = lay_ref > 0
    L = vec.tables(lay_ref[has], "TensorLayout")
    codes, shapes, _, dims, numel = layouts(L, 0, 1, 2, SCALAR_TYPES)
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

    def segments_raw(self) -> dict[str, Any]:
        """Raw segment columns (see :mod:`workbench.formats._layout`)."""
        h = self.header
        c = self.cols
        nseg = len(self.seg_off)
        name = np.empty(nseg, object)
        used = filled(nseg, "")
        kind = filled(nseg, "unused")
        if len(c["key"]):
            order = np.argsort(c["segment"], kind="stable")
            segs = c["segment"][order]
            keys = c["key"][order]
            first = np.flatnonzero(np.r_[True, segs[1:] != segs[:-1]])
            counts = np.diff(np.r_[first, len(segs)])
            heads = segs[first]
            kind[heads] = "named_data"
            single = counts == 1
            name[heads[single]] = keys[first[single]]
            used[heads[single]] = keys[first[single]]
            for si, f, k in zip(heads[~single].tolist(), first[~single].tolist(),
                                counts[~single].tolist()):
                group = keys[f:f + k].tolist()
                name[si] = f"{group[0]} (+{k - 1} more)"
                used[si] = "; ".join(group)
        for i in np.flatnonzero(np.equal(name, None)).tolist():
            name[i] = f"segment {i}"
        head = [(0, 8, "flatbuffer root", "header", -1, "root offset + FT01"),
                (8, h.length, "FlatTensor header", "header", -1, "FH01"),
                (8 + h.flatbuffer_offset, h.flatbuffer_size - 8, "FlatTensor", "flatbuffer", -1,
                 "")]
        ho, hs, hn, hk, hi, hu = zip(*head)
        return cover_arrays(
            self.path, 0, self.size,
            np.concatenate([np.array(ho, np.int64), self.seg_off]),
            np.concatenate([np.array(hs, np.int64), self.seg_size]),
            np.concatenate([objects(hn), name]), np.concatenate([objects(hk), kind]),
            np.concatenate([np.array(hi, np.int64), np.arange(nseg, dtype=np.int64)]),
            np.concatenate([objects(hu), used]))

    def segments_columns(self) -> dict[str, Any]:
        return segments_frame(self.segments_raw())

    def tensors_columns(self) -> dict[str, Any]:
        c = self.cols
        n = len(c["key"])
        off = c["offset"]
        return {
            "name": strings(c["key"]), "dtype": categorical(c["code"], DTYPE_NAMES),
            "shape": c["shape"], "nbytes": c["nbytes"],
            "storage": categorical(np.zeros(n, np.int64), ["named_data"]),
            "file": strings(filled(n, self.path)), "offset": ints(off),
            "align": align(off), "dim_order": c["dim_order"], "segment": ints(c["segment"]),
            "has_layout": booleans(c["has_layout"]),
        }

    def named_columns(self) -> dict[str, Any]:
        c = self.cols
        n = len(c["key"])
        off = c["offset"]
        role = filled(n, "tensor")
        for k in np.flatnonzero(~c["has_layout"]).tolist():
            role[k] = named_data_role(c["key"][k])
        return {
            "key": strings(c["key"]), "segment": c["segment"],
            "file": strings(filled(n, self.path)), "offset": off,
            "size": c["size"], "align": align(off), "has_layout": booleans(c["has_layout"]),
            "role": factorized(role),
        }

