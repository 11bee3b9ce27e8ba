"""Read-only, bounds-checked access to the bytes of one file.

A :class:`Source` maps a file with ``mmap`` (``ACCESS_READ``), never reads it whole, and
checks every offset and length against the file size before use. Views it hands out are
``memoryview`` slices of the map: zero-copy and read-only.

Example:
    >>> from workbench.source import Source
    >>> src = Source("sample_models/mlp_portable.pte")      # doctest: +SKIP
    >>> src.bytes(4, 4, "file identifier")                  # doctest: +SKIP
    b'ET12'
"""

from __future__ import annotations

import mmap
import os
import struct

from .errors import OutOfBoundsError, TruncatedError

__all__ = ["Source"]

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")


class Source:
    """A read-only memory map of one file with checked little-endian reads.

    Args:
        path: the file to map. It is opened read-only and never written.

    Attributes:
        path: the path as given (``str``).
        name: the file's base name, used in error messages.
        size: the file size in bytes.
        buf: a read-only ``memoryview`` over the whole file (empty for an empty file).

    Example:
        >>> with Source("sample_models/mlp_portable.pte") as src:   # doctest: +SKIP
        ...     src.u32(0, "root offset")
        80
    """

    __slots__ = ("path", "name", "size", "buf", "_mm", "__weakref__")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.name = os.path.basename(self.path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                self._mm = None
                self.buf = memoryview(b"")
            else:
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                self.buf = memoryview(self._mm)
        self.size = len(self.buf)

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        """Release the map. Views handed out earlier keep it alive until they are dropped."""
        self.buf = memoryview(b"")
        mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                # numpy/torch views still export the buffer; the map is freed with them.
                pass

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Source({self.path!r}, size={self.size})"

    # -- checks ---------------------------------------------------------------------------
    def check(self, offset: int, length: int, what: str, *, end: int | None = None) -> None:
        """Raise unless ``[offset, offset+length)`` lies inside ``[0, end)`` (default: the file).

        A range that starts inside but runs past the end is :class:`TruncatedError`;
        one that starts outside (or is negative) is :class:`OutOfBoundsError`.
        """
        limit = self.size if end is None else end
        if offset < 0 or length < 0 or offset > limit:
            raise OutOfBoundsError(
                f"offset 0x{offset:x} (length {length}) is outside the range (size 0x{limit:x})",
                file=self.path, structure=what, offset=offset,
            )
        if offset + length > limit:
            raise TruncatedError(
                f"{length} bytes run past the end (size 0x{limit:x})",
                file=self.path, structure=what, offset=offset,
            )

    # -- integer reads ----------------------------------------------------------------------
    def _read(self, st: struct.Struct, offset: int, what: str) -> int:
        if offset < 0 or offset + st.size > self.size:
            self.check(offset, st.size, what)
        return st.unpack_from(self.buf, offset)[0]

    def u8(self, offset: int, what: str = "u8") -> int:
        """Unsigned 8-bit integer at ``offset``."""
        return self._read(_U8, offset, what)

    def u16(self, offset: int, what: str = "u16") -> int:
        """Little-endian unsigned 16-bit integer at ``offset``."""
        return self._read(_U16, offset, what)

    def u32(self, offset: int, what: str = "u32") -> int:
        """Little-endian unsigned 32-bit integer at ``offset``."""
        return self._read(_U32, offset, what)

    def i32(self, offset: int, what: str = "i32") -> int:
        """Little-endian signed 32-bit integer at ``offset``."""
        return self._read(_I32, offset, what)

    def u64(self, offset: int, what: str = "u64") -> int:
        """Little-endian unsigned 64-bit integer at ``offset``."""
        return self._read(_U64, offset, what)

    def i64(self, offset: int, what: str = "i64") -> int:
        """Little-endian signed 64-bit integer at ``offset``."""
        return self._read(_I64, offset, what)

    # -- slices ---------------------------------------------------------------------------
    def view(self, offset: int, length: int, what: str = "range") -> memoryview:
        """A zero-copy read-only ``memoryview`` of ``length`` bytes at ``offset`` (checked)."""
        self.check(offset, length, what)
        return self.buf[offset : offset + length]

    def bytes(self, offset: int, length: int, what: str = "range") -> bytes:
        """A private copy of ``length`` bytes at ``offset`` (checked); for small headers only."""
        return bytes(self.view(offset, length, what))

    def head(self, n: int = 64) -> bytes:
        """The first ``min(n, size)`` bytes (used for format detection)."""
        return bytes(self.buf[: min(n, self.size)])
