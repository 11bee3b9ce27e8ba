"""Read-only, bounds-checked access to the bytes of one file.

A :class:`Source` maps a file with ``mmap`` (``ACCESS_READ``), never reads it whole, and
checks every offset and length against the file size before use. Views it hands out are
``memoryview`` slices of the map: zero-copy and read-only.

Live files: a map of a file that is truncated while mapped faults (``SIGBUS``) when a page
past the new end is touched. A :class:`Source` records the file's identity at open (size,
``mtime_ns``, inode, device) and keeps a read-only descriptor. :meth:`Source.ensure_fresh`
(one ``os.fstat``) raises :class:`~workbench.errors.StaleFileError` once the mapped file has
changed; :meth:`Source.readinto` and :meth:`Source.chunks` copy through that descriptor
(``os.preadv``), which returns a short read instead of faulting, and check again afterwards,
so a copy is either consistent or an error. An atomic replace (``os.replace``) leaves the
mapped inode alone: its bytes stay valid and are served; :meth:`Source.is_stale` also
compares the path's current identity and tells that a newer file is there.

Example:
    >>> from workbench.source import Source
    >>> src = Source("sample_models/mlp_portable.pte")      # doctest: +SKIP
    >>> src.bytes(4, 4, "file identifier")                  # doctest: +SKIP
    b'ET12'
"""

from __future__ import annotations

import datetime
import errno
import mmap
import os
import stat
import struct
from collections.abc import Iterator
from typing import Any

from .errors import OutOfBoundsError, StaleFileError, TruncatedError

__all__ = ["Source"]

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_PREADV = hasattr(os, "preadv")
#: Chunk size of :meth:`Source.chunks` (one reused buffer of this size).
CHUNK = 16 << 20


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

    __slots__ = ("path", "name", "size", "buf", "_mm", "_fd", "_ident", "__weakref__")
    #: ``True`` for a :class:`~workbench.remote.RemoteSource` (ranged reads of a URL).
    remote = False

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.name = os.path.basename(self.path)
        self._fd = -1
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), self.path)
            size = st.st_size
            if size == 0:
                self._mm = None
                self.buf = memoryview(b"")
            else:
                self._mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
                self.buf = memoryview(self._mm)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._ident = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
        self.size = len(self.buf)

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        """Release the map. Views handed out earlier keep it alive until they are dropped."""
        self.buf = memoryview(b"")
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
        mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                # numpy/torch views still export the buffer; the map is freed with them.
                pass

    def __del__(self) -> None:
        fd = getattr(self, "_fd", -1)
        if fd >= 0:
            self._fd = -1
            os.close(fd)

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

    # -- hints for ranged reads ---------------------------------------------------------------
    def prefetch(self, offset: int, length: int) -> None:
        """Nothing to do for a mapped file: a :class:`~workbench.remote.RemoteSource`
        fetches ``[offset, offset+length)`` here, before a reader reads :attr:`buf`.

        Example:
            >>> src.prefetch(0, 4096)                   # doctest: +SKIP
        """

    def prefetch_many(self, ranges: Any, gap: int = 0) -> None:
        """Nothing to do for a mapped file (see :meth:`prefetch`).

        Example:
            >>> src.prefetch_many([(0, 64), (4096, 64)])   # doctest: +SKIP
        """

    @property
    def transfer(self) -> dict[str, int]:
        """Requests made and bytes fetched for this file: none for a mapped local file
        (a :class:`~workbench.remote.RemoteSource` counts its ranged requests).

        Example:
            >>> Source("sample_models/mlp_portable.pte").transfer   # doctest: +SKIP
            {'requests': 0, 'bytes': 0}
        """
        return {"requests": 0, "bytes": 0}

    # -- live files -------------------------------------------------------------------------
    @property
    def identity(self) -> tuple[int, int, int, int]:
        """``(size, mtime_ns, inode, device)`` of the file when it was opened."""
        return self._ident

    def _what_changed(self, st: os.stat_result, replaced: bool = False) -> str:
        size, mtime, ino, dev = self._ident
        parts = []
        if replaced and (st.st_ino, st.st_dev) != (ino, dev):
            parts.append(f"replaced (inode {ino} -> {st.st_ino})")
        if st.st_size != size:
            parts.append(f"size {size} -> {st.st_size}")
        if st.st_mtime_ns != mtime:
            parts.append(f"mtime {_when(mtime)} -> {_when(st.st_mtime_ns)}")
        return ", ".join(parts)

    def changes(self) -> str | None:
        """What changed about the file since it was opened, or ``None``.

        Compares the mapped file (``os.fstat`` of the descriptor: rewritten in place,
        truncated) and the path (``os.stat``: atomically replaced, removed).

        Example:
            >>> src.changes()                           # doctest: +SKIP
            'size 5408 -> 120, mtime 2026-12-01T12:00:00.000001 -> 2026-12-01T12:00:03.120000'
        """
        if self._fd < 0:
            return None
        st = os.fstat(self._fd)
        if (st.st_size, st.st_mtime_ns) != self._ident[:2]:
            return self._what_changed(st)
        try:
            pst = os.stat(self.path)
        except OSError as e:
            return f"the path no longer opens ({e.strerror})"
        if (pst.st_size, pst.st_mtime_ns, pst.st_ino, pst.st_dev) != self._ident:
            return self._what_changed(pst, replaced=True)
        return None

    def is_stale(self) -> bool:
        """Whether the file at :attr:`path` is no longer the one that was opened (changed in
        place, truncated, replaced or removed); see :meth:`changes`.

        Example:
            >>> Source("sample_models/mlp_portable.pte").is_stale()   # doctest: +SKIP
            False
        """
        return self.changes() is not None

    def ensure_fresh(self, what: str | None = None, offset: int | None = None) -> None:
        """Raise :class:`StaleFileError` when the mapped file changed since it was opened.

        One ``os.fstat`` of the descriptor: a file rewritten in place or truncated is
        refused (its map may fault); an atomically replaced path is not (the map still holds
        the old, consistent file). A closed source passes (its view is empty).

        Example:
            >>> src.ensure_fresh("tensor 'forward/0'")  # doctest: +SKIP
        """
        if self._fd < 0:
            return
        st = os.fstat(self._fd)
        if st.st_size != self._ident[0] or st.st_mtime_ns != self._ident[1]:
            raise StaleFileError(
                f"changed since it was opened: {self._what_changed(st)}; "
                "reload it (Artifact.reload())", file=self.path, structure=what, offset=offset)

    def _pread(self, out: memoryview, offset: int, what: str) -> None:
        got, n = 0, len(out)
        while got < n:
            k = os.preadv(self._fd, [out[got:]], offset + got)
            if k <= 0:
                raise StaleFileError(
                    f"the file ended at 0x{offset + got:x} while {n} bytes were read: it "
                    "changed since it was opened; reload it (Artifact.reload())",
                    file=self.path, structure=what, offset=offset)
            got += k

    def readinto(self, offset: int, out: Any, what: str = "range") -> Any:
        """Copy ``len(out)`` bytes at ``offset`` into the writable buffer ``out`` (checked)
        through the file descriptor, never through the map; returns ``out``.

        The copy cannot fault: a file truncated under it gives a short read, reported as
        :class:`StaleFileError`, and the file's identity is checked before and after, so
        the bytes are the opened file's or an error is raised.

        Example:
            >>> import numpy as np
            >>> raw = src.readinto(80, np.empty(64, np.uint8))   # doctest: +SKIP
        """
        mv = memoryview(out).cast("B")
        n = len(mv)
        self.check(offset, n, what)
        self.ensure_fresh(what, offset)
        if n == 0:
            return out
        if _PREADV:
            self._pread(mv, offset, what)
        else:  # pragma: no cover - no preadv (Windows): copy from the map after the check
            mv[:] = self.buf[offset:offset + n]
        self.ensure_fresh(what, offset)
        return out

    def chunks(self, offset: int, length: int, what: str = "range",
               chunk: int = CHUNK) -> Iterator[memoryview]:
        """The bytes of ``[offset, offset+length)`` (checked) as consecutive chunks read
        through the descriptor into one reused buffer (for hashing: no fault, no big copy).

        Each chunk is valid until the next one is read. The identity is checked before the
        first chunk and after the last.

        Example:
            >>> import hashlib
            >>> h = hashlib.sha256()
            >>> for c in src.chunks(0, src.size):   # doctest: +SKIP
            ...     h.update(c)
        """
        self.check(offset, length, what)
        self.ensure_fresh(what, offset)
        if length == 0:
            return
        buf = memoryview(bytearray(min(chunk, length)))
        end = offset + length
        pos = offset
        while pos < end:
            n = min(chunk, end - pos)
            part = buf[:n]
            if _PREADV:
                self._pread(part, pos, what)
            else:  # pragma: no cover - no preadv (Windows)
                part[:] = self.buf[pos:pos + n]
            yield part
            pos += n
        self.ensure_fresh(what, offset)


def _when(ns: int) -> str:
    """A local ISO time with microseconds for an ``mtime_ns``."""
    return datetime.datetime.fromtimestamp(ns / 1e9).isoformat(timespec="microseconds")
