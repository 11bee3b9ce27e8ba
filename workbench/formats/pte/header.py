"""The first bytes of a program: root offset, ``ET12`` identifier and the ``eh00`` extended
header that locates the segments after the flatbuffer.

Layout (facts from the format)::

    0   u32  root table offset            \\
    4   4s   file identifier "ET12"        |  the Program flatbuffer,
    8   eh00 extended header (optional):   |  program_size bytes long
          4s magic "eh00", u32 length,     |
          u64 program_size,                |
          u64 segment_base_offset,         |
          u64 segment_data_size (length > 24)
    ... flatbuffer tables ...             /
    padding up to segment_base_offset
    segments: DataSegment.offset/size are relative to segment_base_offset

Without an extended header the whole program is the flatbuffer and there are no segments.
"""

from __future__ import annotations

from typing import NamedTuple

from ...errors import CorruptError, OutOfBoundsError, TruncatedError, UnsupportedVersionError
from ...source import Source

MAGIC = b"ET12"
EXTENDED_HEADER_MAGIC = b"eh00"
EXTENDED_HEADER_MIN_LENGTH = 24  # magic, length, program_size, segment_base_offset
EXTENDED_HEADER_LENGTH = 32  # ... + segment_data_size


class ExtendedHeader:
    """The ``eh00`` header at byte 8 of a ``.pte`` (absent when a program has no segments).

    Attributes keep the format's own names: ``length``, ``program_size``,
    ``segment_base_offset``, ``segment_data_size`` (``None`` when ``length <= 24``).
    """

    __slots__ = ("length", "program_size", "segment_base_offset", "segment_data_size")
    OFFSET = 8
    EXPECTED_MAGIC = EXTENDED_HEADER_MAGIC

    def __init__(self, length: int, program_size: int, segment_base_offset: int,
                 segment_data_size: int | None) -> None:
        self.length = length
        self.program_size = program_size
        self.segment_base_offset = segment_base_offset
        self.segment_data_size = segment_data_size

    @classmethod
    def read(cls, src: Source, at: int = 8) -> ExtendedHeader | None:
        """Read the header at ``at`` (relative offsets are to the program start ``at-8``).

        Returns ``None`` when the magic is not there; raises when it is there but broken.
        """
        if src.size < at + 4 or src.bytes(at, 4, "extended header magic") != EXTENDED_HEADER_MAGIC:
            return None
        length = src.u32(at + 4, "extended header length")
        if length < EXTENDED_HEADER_MIN_LENGTH:
            raise CorruptError(
                f"length {length} is shorter than the minimum {EXTENDED_HEADER_MIN_LENGTH}",
                file=src.path, structure="extended header (eh00)", offset=at + 4,
            )
        src.check(at, min(length, EXTENDED_HEADER_LENGTH), "extended header (eh00)")
        program_size = src.u64(at + 8, "extended header program_size")
        base = src.u64(at + 16, "extended header segment_base_offset")
        data_size = src.u64(at + 24, "extended header segment_data_size") if length > 24 else None
        return cls(length, program_size, base, data_size)

    def __repr__(self) -> str:
        return (f"ExtendedHeader(length={self.length}, program_size={self.program_size}, "
                f"segment_base_offset={self.segment_base_offset}, "
                f"segment_data_size={self.segment_data_size})")


class ProgramSpan(NamedTuple):
    """Where a program's parts lie, checked against its bytes ``[start, end)``.

    ``segment_base`` is absolute (``None``: no segments); ``segment_data_size`` is 0 then.
    """

    header: ExtendedHeader | None
    program_size: int
    segment_base: int | None
    segment_data_size: int


def read_header(src: Source, start: int, end: int) -> ProgramSpan:
    """Check the identifier and the extended header of the program in ``src[start:end)``."""
    file = src.path
    size = end - start
    if size < 8:
        raise TruncatedError(f"{size} bytes is too short for a program (needs 8)",
                             file=file, structure="program header", offset=start)
    ident = src.bytes(start + 4, 4, "file identifier")
    if ident != MAGIC:
        if ident[:2] == b"ET":
            raise UnsupportedVersionError(
                f"program version {ident!r} is not supported (expected {MAGIC!r})",
                file=file, structure="file identifier", offset=start + 4)
        raise CorruptError(f"file identifier is {ident!r}, expected {MAGIC!r}",
                           file=file, structure="file identifier", offset=start + 4)
    eh = ExtendedHeader.read(src, start + 8) if size >= 12 else None
    if eh is None:
        return ProgramSpan(None, size, None, 0)
    hdr = "extended header (eh00)"
    if eh.program_size > size or eh.program_size < 8 + min(eh.length, EXTENDED_HEADER_LENGTH):
        raise OutOfBoundsError(
            f"program_size 0x{eh.program_size:x} is outside the file (size 0x{size:x})"
            if eh.program_size > size else
            f"program_size {eh.program_size} is smaller than the header itself",
            file=file, structure=f"{hdr} program_size", offset=start + 16)
    if eh.length > eh.program_size - 8:
        raise CorruptError(f"length {eh.length} runs past program_size {eh.program_size}",
                           file=file, structure=f"{hdr} length", offset=start + 12)
    base = eh.segment_base_offset
    if base == 0:
        return ProgramSpan(eh, eh.program_size, None, 0)
    if base < eh.program_size or base > size:
        raise OutOfBoundsError(
            f"segment_base_offset 0x{base:x} lies "
            + ("inside the program flatbuffer" if base < eh.program_size else
               f"past the end of the file (size 0x{size:x})"),
            file=file, structure=f"{hdr} segment_base_offset", offset=start + 24)
    data = eh.segment_data_size
    if data is not None and base + data > size:
        raise TruncatedError(
            f"segment data (0x{base:x} + 0x{data:x}) runs past the end of the file "
            f"(size 0x{size:x})",
            file=file, structure=f"{hdr} segment_data_size", offset=start + 32)
    return ProgramSpan(eh, eh.program_size, start + base,
                       data if data is not None else size - base)
