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

from typing import Any

from .._fmt import align_of
from ..artifact import Parsed
from ..dtypes import SCALAR_TYPES
from ..errors import CorruptError, OutOfBoundsError, TruncatedError, UnsupportedVersionError
from ..flatbuf import FlatBuffer
from ..source import Source
from ._layout import cover, named_data_role

__all__ = ["FORMAT", "MAGIC", "FlatTensorHeader", "detect", "read"]

FORMAT = "ptd"
MAGIC = b"FT01"
HEADER_MAGIC = b"FH01"
HEADER_LENGTH = 40


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
    root = FlatBuffer(src, 0, fb_end, identifier=MAGIC, name="FlatTensor").root("FlatTensor")
    version = root.u32(0)
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
    parsed = Parsed(format=FORMAT, path=src.path, sources={src.path: src})
    parsed.info.update({"version": version, "header": h,
                        "segment_base_offset": h.segment_base_offset})
    data = PtdData(src.path, h, segments, entries, src.size)
    parsed.builders.update({"segments": data.segments_columns, "tensors": data.tensors_columns,
                            "named_data": data.named_columns})
    parsed.extra["ptd"] = data
    return parsed


class PtdData:
    """Plain records of one ``.ptd``: used for its own frames and to resolve a .pte's keys."""

    def __init__(self, path: str, header: FlatTensorHeader, segments: list[tuple[int, int]],
                 entries: list[dict[str, Any]], size: int) -> None:
        self.path = path
        self.header = header
        self.segments = segments
        self.entries = entries
        self.size = size
        self.by_key = {e["key"]: e for e in entries}

    def segments_columns(self) -> dict[str, list]:
        h = self.header
        rows: list[tuple] = [
            (0, 8, "flatbuffer root", "header", None, "root offset + FT01"),
            (8, h.length, "FlatTensor header", "header", None, "FH01"),
            (8 + h.flatbuffer_offset, h.flatbuffer_size - 8, "FlatTensor", "flatbuffer", None, ""),
        ]
        users: dict[int, list[str]] = {}
        for e in self.entries:
            users.setdefault(e["segment"], []).append(e["key"])
        for i, (off, size) in enumerate(self.segments):
            keys = users.get(i, [])
            name = keys[0] + (f" (+{len(keys) - 1} more)" if len(keys) > 1 else "") if keys else \
                f"segment {i}"
            rows.append((off, size, name, "named_data" if keys else "unused", i, "; ".join(keys)))
        return cover(rows, self.path, 0, self.size)

    def tensors_columns(self) -> dict[str, list]:
        es = self.entries
        return {
            "name": [e["key"] for e in es], "dtype": [e["dtype"] for e in es],
            "shape": [e["shape"] for e in es], "nbytes": [e["nbytes"] for e in es],
            "storage": ["named_data"] * len(es), "file": [self.path] * len(es),
            "offset": [e["offset"] for e in es], "align": [align_of(e["offset"]) for e in es],
            "dim_order": [e["dim_order"] for e in es], "segment": [e["segment"] for e in es],
            "has_layout": [e["has_layout"] for e in es],
        }

    def named_columns(self) -> dict[str, list]:
        es = self.entries
        return {
            "key": [e["key"] for e in es], "segment": [e["segment"] for e in es],
            "file": [self.path] * len(es), "offset": [e["offset"] for e in es],
            "size": [e["size"] for e in es], "align": [align_of(e["offset"]) for e in es],
            "has_layout": [e["has_layout"] for e in es],
            "role": ["tensor" if e["has_layout"] else named_data_role(e["key"]) for e in es],
        }
