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

from .._vecfb import SlowPath, VecReader, layouts
from ..artifact import Parsed
from ..dtypes import SCALAR_TYPES
from ..errors import CorruptError, OutOfBoundsError, TruncatedError, UnsupportedVersionError
from ..flatbuf import FlatBuffer, Table
from ..source import Source
from ._layout import cover, named_data_role

__all__ = ["FORMAT", "MAGIC", "FlatTensorHeader", "detect", "read"]

FORMAT = "ptd"
MAGIC = b"FT01"
HEADER_MAGIC = b"FH01"
HEADER_LENGTH = 40
#: Try the vectorised path first (tests turn it off to compare with the scalar path).
FAST = True
_ENTRY_COLUMNS = ("key", "segment", "offset", "size", "dtype", "shape", "dim_order", "nbytes",
                  "has_layout")


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
        segments, cols = _entries_fast(src, fb, root, h)
    except SlowPath:
        segments, cols = _entries_slow(src, root, h)
    parsed = Parsed(format=FORMAT, path=src.path, sources={src.path: src})
    parsed.info.update({"version": version, "header": h,
                        "segment_base_offset": h.segment_base_offset})
    data = PtdData(src.path, h, segments, cols, src.size)
    parsed.builders.update({"segments": data.segments_columns, "tensors": data.tensors_columns,
                            "named_data": data.named_columns})
    parsed.extra["ptd"] = data
    return parsed


def _entries_slow(src: Source, root: Table, h: FlatTensorHeader
                  ) -> tuple[list[tuple[int, int]], dict[str, list]]:
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
    entries: list[dict[str, Any]] = []
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
            entries.append({"key": key, "segment": si, "offset": off, "size": size,
                            "dtype": dt.name, "shape": sizes, "dim_order": dim_order,
                            "nbytes": nbytes, "has_layout": True})
        else:
            entries.append({"key": key, "segment": si, "offset": off, "size": size,
                            "dtype": "uint8", "shape": (size,), "dim_order": (0,),
                            "nbytes": size, "has_layout": False})
    return segments, {c: [e[c] for e in entries] for c in _ENTRY_COLUMNS}


def _entries_fast(src: Source, fb: FlatBuffer, root: Table, h: FlatTensorHeader
                  ) -> tuple[list[tuple[int, int]], dict[str, list]]:
    """The same as :func:`_entries_slow`, vectorised; raises SlowPath on any doubt."""
    vec = VecReader(fb)
    start, n = root.vector(1, 4, "segments")
    S = vec.table_vector(start, n, "FlatTensor.segments")
    offs = S.scalar(0, "<u8")
    sizes = S.scalar(1, "<u8")
    if n and (offs.max() >= 1 << 62 or sizes.max() >= 1 << 62
              or (offs + sizes).max() > h.segment_data_size):
        raise SlowPath("segment out of range")
    base = h.segment_base_offset
    segments = list(zip((offs.astype(np.int64) + base).tolist(), sizes.astype(np.int64).tolist()))
    start, n = root.vector(2, 4, "named_data")
    N = vec.table_vector(start, n, "FlatTensor.named_data")
    key_start, key_len = vec.vectors(N.ref(0), 1)
    if n and (key_start == 0).any():
        raise SlowPath("key missing")
    if n and (vec.u8[key_start + key_len] != 0).any():
        raise SlowPath("key not NUL-terminated")
    buf = fb.buf
    try:
        keys = [str(buf[a:a + b], "utf-8") for a, b in zip(key_start.tolist(), key_len.tolist())]
    except UnicodeDecodeError:
        raise SlowPath("bad UTF-8") from None
    seg_idx = N.scalar(1, "<u4")
    if n and seg_idx.max() >= len(segments):
        raise SlowPath("segment index out of range")
    lay_ref = N.ref(2)
    has = lay_ref > 0
    L = vec.tables(lay_ref[has], "TensorLayout")
    codes, shapes, dims, numel = layouts(L, 0, 1, 2, SCALAR_TYPES)
    seg_off = np.array([o for o, _ in segments], dtype=np.int64)
    seg_size = np.array([z for _, z in segments], dtype=np.int64)
    off_col = seg_off[seg_idx].tolist() if n else []
    size_col = seg_size[seg_idx].tolist() if n else []
    rows = np.flatnonzero(has).tolist()
    itemsize = np.array([SCALAR_TYPES[c].itemsize for c in codes], dtype=np.int64)
    nb_layout = (numel * itemsize).tolist()
    dtype = ["uint8"] * n
    shape = [(z,) for z in size_col]
    dim_order = [(0,)] * n
    nbytes = list(size_col)
    has_layout = [False] * n
    names = {c: SCALAR_TYPES[c].name for c in set(codes)}
    for k, r in enumerate(rows):
        if nb_layout[k] > size_col[r]:
            raise SlowPath("tensor larger than its segment")
        dtype[r] = names[codes[k]]
        shape[r] = shapes[k]
        dim_order[r] = dims[k]
        nbytes[r] = nb_layout[k]
        has_layout[r] = True
    cols = {"key": keys, "segment": seg_idx.tolist(), "offset": off_col, "size": size_col,
            "dtype": dtype, "shape": shape, "dim_order": dim_order, "nbytes": nbytes,
            "has_layout": has_layout}
    return segments, cols


class PtdData:
    """Plain records of one ``.ptd``: used for its own frames and to resolve a .pte's keys.

    ``cols`` holds one list per entry field (key, segment, offset, size, dtype, shape,
    dim_order, nbytes, has_layout); ``entries``/``by_key`` are dict views built on demand.
    """

    def __init__(self, path: str, header: FlatTensorHeader, segments: list[tuple[int, int]],
                 cols: dict[str, list], size: int) -> None:
        self.path = path
        self.header = header
        self.segments = segments
        self.cols = cols
        self.size = size

    @cached_property
    def entries(self) -> list[dict[str, Any]]:
        """One dict per named-data entry."""
        names = list(self.cols)
        return [dict(zip(names, row)) for row in zip(*self.cols.values())]

    @cached_property
    def by_key(self) -> dict[str, dict[str, Any]]:
        """key -> entry (the first one when a key repeats)."""
        out: dict[str, dict[str, Any]] = {}
        for e in self.entries:
            out.setdefault(e["key"], e)
        return out

    def segments_columns(self) -> dict[str, list]:
        h = self.header
        rows: list[tuple] = [
            (0, 8, "flatbuffer root", "header", None, "root offset + FT01"),
            (8, h.length, "FlatTensor header", "header", None, "FH01"),
            (8 + h.flatbuffer_offset, h.flatbuffer_size - 8, "FlatTensor", "flatbuffer", None, ""),
        ]
        users: dict[int, list[str]] = {}
        for si, key in zip(self.cols["segment"], self.cols["key"]):
            users.setdefault(si, []).append(key)
        for i, (off, size) in enumerate(self.segments):
            keys = users.get(i, [])
            if keys:
                name = keys[0] + (f" (+{len(keys) - 1} more)" if len(keys) > 1 else "")
            else:
                name = f"segment {i}"
            rows.append((off, size, name, "named_data" if keys else "unused", i, "; ".join(keys)))
        return cover(rows, self.path, 0, self.size)

    def tensors_columns(self) -> dict[str, list]:
        c = self.cols
        n = len(c["key"])
        return {
            "name": c["key"], "dtype": c["dtype"], "shape": c["shape"], "nbytes": c["nbytes"],
            "storage": ["named_data"] * n, "file": [self.path] * n, "offset": c["offset"],
            "align": [o & -o if o else None for o in c["offset"]],
            "dim_order": c["dim_order"], "segment": c["segment"], "has_layout": c["has_layout"],
        }

    def named_columns(self) -> dict[str, list]:
        c = self.cols
        n = len(c["key"])
        return {
            "key": c["key"], "segment": c["segment"], "file": [self.path] * n,
            "offset": c["offset"], "size": c["size"],
            "align": [o & -o if o else None for o in c["offset"]],
            "has_layout": c["has_layout"],
            "role": ["tensor" if h else named_data_role(k) for k, h in zip(c["key"], c["has_layout"])],
        }
