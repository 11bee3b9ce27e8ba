"""The ``FH01`` header of a ``.ptd``: where the flatbuffer and the segments lie.

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
"""

from __future__ import annotations

from ...errors import CorruptError, OutOfBoundsError, TruncatedError
from ...source import Source

__all__ = ["HEADER_LENGTH", "HEADER_MAGIC", "FlatTensorHeader"]

HEADER_MAGIC = b"FH01"
HEADER_LENGTH = 40


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
