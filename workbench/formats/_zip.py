"""A verifying, zero-copy reader of zip *directories* over a :class:`~workbench.source.Source`.

Only the structure is read: the end-of-central-directory record (and its ZIP64 locator and
record), the central directory and each member's local header, which gives the absolute
offset of the member's bytes. Nothing is extracted, no CRC pass is made, and sizes come
from the central directory (local headers written with a data descriptor hold zeros).
Every offset and length is checked against the file before use; errors are
:class:`~workbench.errors.ArtifactError` subclasses naming the file, structure and offset.

Layout (PKWARE APPNOTE; little-endian)::

    [local header 30 B + name + extra][member bytes][data descriptor?]  ... one per member
    [central directory: one 46 B record + name + extra + comment per member]
    [ZIP64 end of central directory record 56 B+]  [ZIP64 locator 20 B]   (only when needed)
    [end of central directory record 22 B + comment]

Example:
    >>> from workbench.source import Source
    >>> zf = ZipDirectory(Source("sample_models/mlp.pt2"))      # doctest: +SKIP
    >>> e = zf.entries[0]; e.name, e.data_offset, e.compressed_size   # doctest: +SKIP
    ('mlp/data/weights/weight_0', 64, 2048)
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from itertools import repeat
from typing import Any, NamedTuple

from ..errors import ArtifactError, CorruptError, OutOfBoundsError, TruncatedError, UnsupportedVersionError
from ..source import Source

__all__ = ["ZipDirectory", "ZipEntry", "LOCAL_MAGIC", "METHODS"]

LOCAL_MAGIC = b"PK\x03\x04"
CENTRAL_MAGIC = 0x02014B50
EOCD_MAGIC = b"PK\x05\x06"
ZIP64_EOCD_MAGIC = 0x06064B50
ZIP64_LOCATOR_MAGIC = 0x07064B50
DESCRIPTOR_MAGIC = b"PK\x07\x08"

EOCD_SIZE = 22
ZIP64_LOCATOR_SIZE = 20
ZIP64_EOCD_SIZE = 56
CENTRAL_SIZE = 46
LOCAL_SIZE = 30
MAX_COMMENT = 0xFFFF

ZIP64_EXTRA_ID = 0x0001
#: Extra field torch's writer (miniz) uses to pad member data to 64 bytes ("FB").
PADDING_EXTRA_ID = 0x4246

FLAG_ENCRYPTED = 0x0001
FLAG_DESCRIPTOR = 0x0008
FLAG_UTF8 = 0x0800

#: Compression method numbers -> names (APPNOTE 4.4.5); 0 is the only zero-copy one.
METHODS = {0: "stored", 8: "deflate", 9: "deflate64", 12: "bzip2", 14: "lzma", 93: "zstd",
           95: "xz", 99: "aes"}

_EOCD = struct.Struct("<4sHHHHIIH")
_LOCATOR = struct.Struct("<IIQI")
_ZIP64_EOCD = struct.Struct("<IQHHIIQQQQ")
#: A central directory record's fields that are used: signature, flags, method, crc32,
#: compressed size, size, name/extra/comment lengths, disk, local header offset.
_CENTRAL_FIELDS = struct.Struct("<I4xHH4xIIIHHHH6xI")
_LOCAL = struct.Struct("<IHHHHHIIIHH")
_EXTRA_HEAD = struct.Struct("<HH")
#: The fixed 30 bytes of a local header, for vectorised reads.
_LOCAL_DTYPE = [("magic", "<u4"), ("version", "<u2"), ("flags", "<u2"), ("method", "<u2"),
                ("time", "<u2"), ("date", "<u2"), ("crc32", "<u4"), ("csize", "<u4"),
                ("usize", "<u4"), ("n_len", "<u2"), ("x_len", "<u2")]
#: The fixed 46 bytes of a central directory record, for vectorised reads.
_CENTRAL_DTYPE = [("magic", "<u4"), ("made_by", "<u2"), ("version", "<u2"), ("flags", "<u2"),
                  ("method", "<u2"), ("time", "<u2"), ("date", "<u2"), ("crc32", "<u4"),
                  ("csize", "<u4"), ("usize", "<u4"), ("n_len", "<u2"), ("x_len", "<u2"),
                  ("c_len", "<u2"), ("disk", "<u2"), ("internal", "<u2"), ("external", "<u4"),
                  ("lho", "<u4")]
_U64 = struct.Struct("<Q")
#: Sizes and offsets must fit the int64 columns they end up in.
_INT64_LIMIT = 1 << 63


class _Central(NamedTuple):
    """The central directory as columns (numpy ``int64`` arrays unless noted)."""

    names: list[str]
    n_len: Any
    flags: Any
    method: Any
    crc32: Any
    csize: Any
    usize: Any
    lho: Any
    pos: Any  # absolute offset of the record
    rec: Any  # record length
    zip64: Any  # bool
    window: Any  # (records, longest name + 1) bytes from each name on, or None


class ZipEntry(NamedTuple):
    """One member, from its central directory record and its local header (immutable).

    Attributes keep the APPNOTE names where there is one. Offsets are absolute in the file.

    Attributes:
        index: position in the central directory.
        name: decoded member path (UTF-8 when flag bit 11 is set, else cp437).
        method: compression method (0 = stored).
        flags: general purpose bit flags.
        crc32: CRC-32 from the central directory (not verified).
        compressed_size: bytes stored in the file.
        file_size: declared uncompressed size (never used to allocate).
        header_offset: absolute offset of the local header.
        data_offset: absolute offset of the member bytes (``header_offset + 30 + n + m``).
        local_extra: length of the local header's extra field.
        central_offset: absolute offset of the central directory record.
        central_size: length of that record (46 + name + extra + comment).
        zip64: the central record carried a ZIP64 extended-information field.
        descriptor_size: length of the data descriptor after the bytes (0 when none).
        compressed: the bytes are not stored as-is (compressed or encrypted): no zero-copy.
    """

    index: int
    name: str
    method: int
    flags: int
    crc32: int
    compressed_size: int
    file_size: int
    header_offset: int
    central_offset: int
    central_size: int
    zip64: bool
    data_offset: int
    local_extra: int
    descriptor_size: int
    compressed: bool

    @property
    def data_end(self) -> int:
        """Absolute offset just past the member bytes."""
        return self.data_offset + self.compressed_size

    def __repr__(self) -> str:
        return (f"ZipEntry({self.index}, {self.name!r}, method={self.method}, "
                f"data_offset={self.data_offset}, compressed_size={self.compressed_size}, "
                f"file_size={self.file_size})")


class ZipDirectory:
    """The verified directory of the zip archive in ``src`` (nothing is extracted).

    Args:
        src: the mapped file.
        tolerant: do not raise for a member whose local header or data cannot be located
            (bad signature, name or method differing from the central directory, bytes
            running past the directory, overlap): flag it in ``damaged`` and keep its error
            in ``problems``, as Python's ``zipfile`` opens such an archive and fails only
            when the member is read. The end records and the central directory are still
            strict. ``.pt2`` archives are read strictly; ETRecords tolerantly.

    Attributes:
        entries: members in central-directory order (made on first use; see ``entry``).
        names: their names (a list, in the same order).
        arrays: the same facts as read-only numpy columns, for vectorised consumers:
            ``header_offset``, ``data_offset``, ``compressed_size``, ``file_size``,
            ``method``, ``flags``, ``crc32``, ``central_offset``, ``central_size``,
            ``local_extra``, ``descriptor_size`` (``int64``), ``compressed`` and ``zip64``
            (``bool``).
        index: name -> position (the first one when a name repeats; see ``duplicates``).
        by_name: name -> entry (likewise; made on first use, see ``get``).
        duplicates: names that occur more than once.
        cd_offset, cd_size: the central directory (where it really lies; see ``prepended``).
        prepended: bytes by which every offset is shifted, as Python's zipfile does, when the
            central directory lies later than the end record says (0 normally).
        eocd_offset: the end-of-central-directory record (``eocd_size`` with its comment).
        zip64_offset, locator_offset: the ZIP64 records (``None`` when absent).
        zip64: the archive uses ZIP64 records.
        damaged: per member, its local header or data could not be located (always all
            ``False`` unless ``tolerant``); such a member keeps its central-directory facts
            and ``header_offset``, with ``data_offset`` -1 and no local extra or descriptor.
        problems: ``(index, error)`` for each damaged member, the error that a strict read
            raises for it (naming the member, the structure and the offset).

    Raises:
        TruncatedError / OutOfBoundsError / CorruptError / UnsupportedVersionError.

    Example:
        >>> zd = ZipDirectory(Source("sample_models/tied.pt2"))   # doctest: +SKIP
        >>> [e.name for e in zd.entries][:2]                        # doctest: +SKIP
        ['tied/data/weights/weight_0', 'tied/data/weights/model_weights_config.json']
    """

    def __init__(self, src: Source, tolerant: bool = False) -> None:
        self.src = src
        self.tolerant = tolerant
        self.problems: list[tuple[int, ArtifactError]] = []
        self.path = src.path
        self.zip64_offset: int | None = None
        self.zip64_size = 0
        self.locator_offset: int | None = None
        self._find_end()
        self.names: list[str] = []
        self.arrays: dict[str, Any] = {}
        self._central_directory()
        n = len(self.names)
        # The first entry wins when a name repeats (built in reverse, so earlier ones overwrite).
        self.index: dict[str, int] = dict(zip(reversed(self.names), range(n - 1, -1, -1)))
        self.duplicates: list[str] = []
        if len(self.index) != n:
            seen: set[str] = set()
            for name in self.names:
                if name in seen:
                    self.duplicates.append(name)
                seen.add(name)
        self._entries: list[ZipEntry] | None = None
        self._by_name: dict[str, ZipEntry] | None = None

    @property
    def entries(self) -> list[ZipEntry]:
        """Every member as a :class:`ZipEntry`, in central-directory order (made once)."""
        if self._entries is None:
            a = self.arrays
            self._entries = list(map(tuple.__new__, repeat(ZipEntry), zip(
                range(len(self.names)), self.names,
                *(a[k].tolist() for k in ZipEntry._fields[2:]))))
        return self._entries

    @property
    def by_name(self) -> dict[str, ZipEntry]:
        """name -> entry (the first one when a name repeats)."""
        if self._by_name is None:
            entries = self.entries
            self._by_name = {name: entries[i] for name, i in self.index.items()}
        return self._by_name

    def entry(self, i: int) -> ZipEntry:
        """Member ``i`` (made on its own when the whole list is not needed)."""
        if self._entries is not None:
            return self._entries[i]
        a = self.arrays
        return tuple.__new__(ZipEntry, (i, self.names[i], *(a[k][i].item()
                                                             for k in ZipEntry._fields[2:])))

    def get(self, name: str) -> ZipEntry | None:
        """The (first) member called ``name``, or ``None``."""
        i = self.index.get(name)
        return None if i is None else self.entry(i)

    # -- end records ------------------------------------------------------------------------
    def _find_end(self) -> None:
        src = self.src
        size = src.size
        if size < EOCD_SIZE:
            raise TruncatedError(f"{size} bytes is too short for a zip archive (needs {EOCD_SIZE})",
                                 file=self.path, structure="zip end of central directory", offset=0)
        # The record is 22 bytes plus a comment of at most 65535: search that window only.
        lo = max(0, size - EOCD_SIZE - MAX_COMMENT)
        tail = src.bytes(lo, size - lo, "zip end of central directory search")
        pos = len(tail)
        found = fallback = -1
        while True:
            pos = tail.rfind(EOCD_MAGIC, 0, pos)
            if pos < 0 or pos + EOCD_SIZE > len(tail):
                if pos < 0:
                    break
                continue
            comment_len = _EOCD.unpack_from(tail, pos)[7]
            if pos + EOCD_SIZE + comment_len == len(tail):
                found = pos
                break
            if fallback < 0 and pos + EOCD_SIZE + comment_len <= len(tail):
                fallback = pos
        if found < 0:
            found = fallback
        if found < 0:
            raise CorruptError("no end of central directory record (PK\\x05\\x06) in the last "
                               f"{len(tail)} bytes", file=self.path,
                               structure="zip end of central directory", offset=lo)
        eocd = lo + found
        (_, disk, cd_disk, n_disk, n_total, cd_size, cd_offset,
         comment_len) = _EOCD.unpack_from(tail, found)
        self.eocd_offset = eocd
        self.eocd_size = EOCD_SIZE + comment_len
        what = "zip end of central directory"
        # ZIP64: a locator sits right before the classic record.
        loc = eocd - ZIP64_LOCATOR_SIZE
        if loc >= 0 and src.u32(loc, "zip64 locator") == ZIP64_LOCATOR_MAGIC:
            _, loc_disk, z64_off, n_disks = _LOCATOR.unpack_from(src.buf, loc)
            self.locator_offset = loc
            if loc_disk != 0 or n_disks > 1:
                raise UnsupportedVersionError(f"multi-disk zip archives are not supported "
                                              f"({n_disks} disks)", file=self.path,
                                              structure="zip64 end of central directory locator",
                                              offset=loc)
            if z64_off > loc - ZIP64_EOCD_SIZE:
                raise OutOfBoundsError(f"zip64 end of central directory offset 0x{z64_off:x} is not "
                                       f"before its locator at 0x{loc:x}", file=self.path,
                                       structure="zip64 end of central directory locator",
                                       offset=loc + 8)
            (magic, rec_size, _, _, disk, cd_disk, n_disk, n_total, cd_size,
             cd_offset) = _ZIP64_EOCD.unpack_from(src.view(z64_off, ZIP64_EOCD_SIZE,
                                                           "zip64 end of central directory"))
            if magic != ZIP64_EOCD_MAGIC:
                raise CorruptError(f"bad signature 0x{magic:08x} (expected 0x{ZIP64_EOCD_MAGIC:08x})",
                                   file=self.path, structure="zip64 end of central directory",
                                   offset=z64_off)
            if rec_size < ZIP64_EOCD_SIZE - 12 or z64_off + 12 + rec_size > loc:
                raise CorruptError(f"record size {rec_size} does not fit before the locator at "
                                   f"0x{loc:x}", file=self.path,
                                   structure="zip64 end of central directory", offset=z64_off + 4)
            self.zip64_offset = z64_off
            self.zip64_size = 12 + rec_size
            what = "zip64 end of central directory"
            end_of_cd = z64_off
        else:
            if 0xFFFF in (n_disk, n_total) or 0xFFFFFFFF in (cd_size, cd_offset):
                raise CorruptError("fields hold ZIP64 markers but there is no ZIP64 locator",
                                   file=self.path, structure=what, offset=eocd)
            end_of_cd = eocd
        if disk != 0 or cd_disk != 0 or n_disk != n_total:
            raise UnsupportedVersionError("multi-disk zip archives are not supported",
                                          file=self.path, structure=what, offset=eocd)
        if cd_offset > end_of_cd or cd_size > end_of_cd - cd_offset:
            raise OutOfBoundsError(f"central directory [0x{cd_offset:x}, +0x{cd_size:x}) runs past "
                                   f"the end records at 0x{end_of_cd:x}", file=self.path,
                                   structure=what, offset=eocd)
        # Python's zipfile takes the directory to end where the end records start; when that is
        # later than the end record says, every offset is shifted by the difference (data was
        # prepended, e.g. a self-extracting stub, or members grew in place). Do the same.
        self.prepended = end_of_cd - cd_size - cd_offset
        cd_offset += self.prepended
        # Bound the entry count by the directory size before allocating anything.
        if n_total * CENTRAL_SIZE > cd_size:
            raise CorruptError(f"{n_total} entries cannot fit a {cd_size}-byte central directory "
                               f"({CENTRAL_SIZE} bytes each at least)", file=self.path,
                               structure=what, offset=eocd)
        self.count = n_total
        self.cd_offset = cd_offset
        self.cd_size = cd_size
        self.zip64 = self.zip64_offset is not None

    # -- central directory ------------------------------------------------------------------
    def _central_directory(self) -> None:
        self.src.prefetch(self.cd_offset, self.cd_size)  # a remote archive: one request
        cols = self._central_fast() if self.count else None
        if cols is None:
            cols = self._central_scalar()
        if self.prepended:
            cols = cols._replace(lho=cols.lho + self.prepended)
        self._local_headers(cols)

    def _central_fast(self) -> _Central | None:
        """The central directory read with vectorised gathers, or ``None`` whenever anything
        is unusual (then :meth:`_central_scalar` decides, and raises the precise error).

        Every ``PK\\x01\\x02`` in the directory is a candidate record start; when there are
        exactly ``count`` of them, the first is at the directory start and each record ends
        where the next one starts (the last one inside the directory), they are exactly the
        records the sequential walk finds.
        """
        import numpy as np

        n, size = self.count, self.cd_size
        if size < CENTRAL_SIZE:
            return None
        cd = np.frombuffer(self.src.buf, np.uint8, count=size, offset=self.cd_offset)
        cand = np.flatnonzero(cd[:size - CENTRAL_SIZE + 1] == 0x50)
        cand = cand[(cd[cand + 1] == 0x4B) & (cd[cand + 2] == 0x01) & (cd[cand + 3] == 0x02)]
        if len(cand) != n or cand[0] != 0:
            return None
        rec = np.lib.stride_tricks.sliding_window_view(cd, CENTRAL_SIZE)[cand]
        rec = rec.view(_CENTRAL_DTYPE).reshape(n)
        n_len = rec["n_len"].astype(np.int64)
        rlen = CENTRAL_SIZE + n_len + rec["x_len"] + rec["c_len"].astype(np.int64)
        ends = cand + rlen
        if ends[-1] > size or not np.array_equal(ends[:-1], cand[1:]):
            return None
        flags = rec["flags"].astype(np.int64)
        csize = rec["csize"].astype(np.int64)
        usize = rec["usize"].astype(np.int64)
        lho = rec["lho"].astype(np.int64)
        disk = rec["disk"].astype(np.int64)
        pos = cand + self.cd_offset
        # Names: select each name and the byte after it (made a NUL separator) and decode
        # them all at once: from fixed-width windows (kept to compare the local names), or
        # with a mask built by a running sum when some names are long (the windows would
        # take more than twice the directory's memory). (The byte after the last name
        # exists: the end records follow the directory.)
        width = int(n_len.max()) + 1
        whole = np.frombuffer(self.src.buf, np.uint8)
        window = None
        if width <= 257 and n * width <= 2 * size and \
                int(pos[-1]) + CENTRAL_SIZE + width <= len(whole):
            window = np.lib.stride_tricks.sliding_window_view(whole, width)[pos + CENTRAL_SIZE]
            gathered = window[np.arange(width) <= n_len[:, None]]
        else:
            step = np.zeros(size + 2, np.int8)
            step[cand + CENTRAL_SIZE] = 1
            step[cand + CENTRAL_SIZE + n_len + 1] = -1
            cd1 = np.frombuffer(self.src.buf, np.uint8, count=size + 1, offset=self.cd_offset)
            gathered = cd1[np.cumsum(step[:-1], dtype=np.int8).view(bool)]
        bounds = np.zeros(n + 1, np.int64)
        np.cumsum(n_len + 1, out=bounds[1:])
        seps = bounds[1:] - 1
        gathered[seps] = 0
        if int(np.count_nonzero(gathered == 0)) != n or gathered.max() >= 0x80:
            names = None  # a NUL or non-ASCII byte in some name: decode one by one
        else:
            names = gathered[:-1].tobytes().decode("ascii").split("\0")
        if names is None:
            raw = gathered.tobytes()
            try:
                names = [_decode_name(raw[a:b], f, self.path, i, p) for i, (a, b, f, p) in
                         enumerate(zip(bounds.tolist(), seps.tolist(), flags.tolist(), pos.tolist()))]
            except CorruptError:
                return None
        zip64 = np.zeros(n, bool)
        marked = np.flatnonzero((usize == 0xFFFFFFFF) | (csize == 0xFFFFFFFF)
                                | (lho == 0xFFFFFFFF) | (disk == 0xFFFF))
        for k in marked.tolist():
            try:
                usize[k], csize[k], lho[k], disk[k], zip64[k] = _zip64_extra(
                    self.src.buf, int(pos[k]) + CENTRAL_SIZE + int(n_len[k]), int(rec["x_len"][k]),
                    int(usize[k]), int(csize[k]), int(lho[k]), int(disk[k]), self.path, k, names[k])
            except ArtifactError:
                return None
        if disk.any():
            return None
        return _Central(names, n_len, flags, rec["method"].astype(np.int64),
                        rec["crc32"].astype(np.int64), csize, usize, lho, pos, rlen, zip64, window)

    def _central_scalar(self) -> _Central:
        """The central directory walked record by record (raises the precise error)."""
        import numpy as np

        buf = self.src.buf
        path = self.path
        pos = self.cd_offset
        end = self.cd_offset + self.cd_size
        unpack = _CENTRAL_FIELDS.unpack_from
        recs: list[tuple] = []
        add = recs.append
        for i in range(self.count):
            if pos + CENTRAL_SIZE > end:
                raise TruncatedError(f"central directory entry {i} of {self.count} runs past the "
                                     f"directory end at 0x{end:x}", file=path,
                                     structure=f"zip central directory entry {i}", offset=pos)
            magic, flags, method, crc, csize, usize, n_len, x_len, c_len, disk, lho = unpack(buf, pos)
            if magic != CENTRAL_MAGIC:
                raise CorruptError(f"bad signature 0x{magic:08x} (expected 0x{CENTRAL_MAGIC:08x})",
                                   file=path, structure=f"zip central directory entry {i}",
                                   offset=pos)
            rec = CENTRAL_SIZE + n_len + x_len + c_len
            if pos + rec > end:
                raise TruncatedError(f"name/extra/comment ({n_len}+{x_len}+{c_len} bytes) run past "
                                     f"the directory end at 0x{end:x}", file=path,
                                     structure=f"zip central directory entry {i}", offset=pos)
            raw = buf[pos + CENTRAL_SIZE: pos + CENTRAL_SIZE + n_len].tobytes()
            try:
                name = raw.decode("utf-8" if flags & FLAG_UTF8 else "ascii")
            except UnicodeDecodeError:
                name = _decode_name(raw, flags, path, i, pos)
            zip64 = False
            if usize == 0xFFFFFFFF or csize == 0xFFFFFFFF or lho == 0xFFFFFFFF or disk == 0xFFFF:
                usize, csize, lho, disk, zip64 = _zip64_extra(
                    buf, pos + CENTRAL_SIZE + n_len, x_len, usize, csize, lho, disk, path, i, name)
            if disk != 0:
                raise UnsupportedVersionError(f"member {name!r} starts on disk {disk}",
                                              file=path, structure=f"zip central directory entry {i}",
                                              offset=pos)
            add((name, raw, flags, method, crc, csize, usize, lho, pos, rec, zip64))
            pos += rec
        fields = list(zip(*recs)) or [()] * 11

        def col(k: int) -> Any:
            return np.array(fields[k], np.int64)

        return _Central(list(fields[0]), np.array(list(map(len, fields[1])), np.int64), col(2),
                        col(3), col(4), col(5), col(6), col(7), col(8), col(9),
                        np.array(fields[10], bool), None)

    # -- local headers --------------------------------------------------------------------
    def _local_headers(self, c: _Central) -> None:
        """Check every local header against its central record (vectorised) and set
        :attr:`names` and :attr:`arrays`, with the absolute data offsets."""
        import numpy as np

        path = self.path
        n = len(c.names)
        self.names = c.names
        if not n:
            self.arrays = {k: np.zeros(0, bool if k in ("compressed", "zip64") else np.int64)
                           for k in ZipEntry._fields[2:]}
            self.damaged = np.zeros(0, bool)
            return
        limit = self.cd_offset  # member data lies before the central directory
        lho, csize, names = c.lho, c.csize, c.names
        if self.src.remote:  # each local header, its name and extra field (+ slack)
            self.src.prefetch_many(zip(lho.tolist(), (c.n_len + c.rec - CENTRAL_SIZE
                                                      + LOCAL_SIZE + 64).tolist()))
        tolerant = self.tolerant
        unplaced = lho + LOCAL_SIZE > limit
        for k in np.flatnonzero(unplaced).tolist():
            err = OutOfBoundsError(f"local header offset 0x{lho[k]:x} (+{LOCAL_SIZE}) is not "
                                   f"before the central directory at 0x{limit:x}", file=path,
                                   structure=f"zip local header of {names[k]!r}",
                                   offset=int(c.pos[k]) + 42)
            if not tolerant:
                raise err
            self.problems.append((k, err))
        glho = np.where(unplaced, 0, lho)  # where to gather (a placeholder for unplaced ones)
        u8 = np.frombuffer(self.src.buf, np.uint8, count=limit)
        whole = np.frombuffer(self.src.buf, np.uint8)
        width = int(c.n_len.max())
        local_names = None
        if c.window is not None and int(glho.max()) + LOCAL_SIZE + width <= len(whole):
            # One gather for each local header and the name after it.
            both = np.lib.stride_tricks.sliding_window_view(whole, LOCAL_SIZE + width)[glho]
            local = np.ascontiguousarray(both[:, :LOCAL_SIZE])
            local_names = both[:, LOCAL_SIZE:]
        else:
            local = np.lib.stride_tricks.sliding_window_view(whole, LOCAL_SIZE)[glho]
        local = local.view(_LOCAL_DTYPE).reshape(n)
        n_len = local["n_len"].astype(np.int64)
        x_len = local["x_len"].astype(np.int64)
        data = glho + LOCAL_SIZE + n_len + x_len
        problems = ((local["magic"] != 0x04034B50) | (data > limit) | (local["method"] != c.method)
                    | (n_len != c.n_len) | (csize > limit - data))
        if tolerant or not problems.any():
            if local_names is not None:
                names_differ = ((local_names != c.window[:, :width])
                                & (np.arange(width) < c.n_len[:, None])).any(axis=1)
            else:
                names_differ = self._names_differ(c, glho + LOCAL_SIZE)
            problems = problems | names_differ
        problems |= unplaced
        for k in np.flatnonzero(problems & ~unplaced).tolist():
            try:
                self._local_error(c, k, int(data[k]), limit)
            except ArtifactError as err:
                if not tolerant:
                    raise
                self.problems.append((k, err))
        # Members must not overlap (overlapping members are a zip-bomb device); in tolerant
        # mode an overlapping member is damaged (the later one, as the strict error names).
        ok = np.flatnonzero(~problems)
        ends = data + csize
        nxt = np.full(n, limit, np.int64)
        while ok.size:
            order = ok[np.argsort(lho[ok], kind="stable")]
            nxt[order[:-1]] = lho[order[1:]]
            nxt[order[-1]] = limit
            over = np.flatnonzero(ends[order] > nxt[order])
            if not over.size:
                break
            i = int(over[0])
            k = int(order[i])
            j = int(np.searchsorted(lho[order], lho[k], side="right"))
            b = int(order[j if j < len(order) else i + 1])
            err = CorruptError(f"member {names[k]!r} [0x{lho[k]:x}, 0x{ends[k]:x}) overlaps "
                               f"member {names[b]!r} at 0x{lho[b]:x}", file=path,
                               structure=f"zip member {names[b]!r}", offset=int(lho[b]))
            if not tolerant:
                raise err
            self.problems.append((b, err))
            problems[b] = True
            ok = np.flatnonzero(~problems)
        self.problems.sort(key=lambda p: p[0])
        self.damaged = problems
        problems.flags.writeable = False
        # Data descriptors (flag bit 3): 12 bytes, 20 with ZIP64 sizes, +4 with the signature.
        # The sizes are 8 bytes when either header has a ZIP64 extra field (APPNOTE 4.3.9.1;
        # Python's zipfile with force_zip64 puts one in the local header only).
        flags = c.flags
        has_desc = (flags & FLAG_DESCRIPTOR) != 0
        wide = c.zip64 | self._local_zip64(data - x_len, x_len, has_desc & ~c.zip64 & ~problems)
        room = nxt - ends
        at = np.where(room >= 4, ends, 0)
        # (fewer than 4 bytes before the directory, tolerant: no member has room for one)
        windows = np.lib.stride_tricks.sliding_window_view(u8, 4) if limit >= 4 else \
            np.zeros((1, 4), np.uint8)
        sig = windows[at].view("<u4").reshape(n)
        has_sig = (room >= 4) & (sig == int.from_bytes(DESCRIPTOR_MAGIC, "little"))
        desc = np.where(wide, 20, 12) + 4 * has_sig
        desc = np.where(has_desc & (desc <= room) & ~problems, desc, 0)
        if problems.any():
            data = np.where(problems, -1, data)
            x_len = np.where(problems, 0, x_len)
        compressed = (c.method != 0) | ((flags & FLAG_ENCRYPTED) != 0)
        self.arrays = arrays = {
            "method": c.method, "flags": flags, "crc32": c.crc32, "compressed_size": csize,
            "file_size": c.usize, "header_offset": lho, "central_offset": c.pos,
            "central_size": c.rec, "zip64": c.zip64, "data_offset": data, "local_extra": x_len,
            "descriptor_size": desc, "compressed": compressed}
        for a in arrays.values():
            a.flags.writeable = False

    def _local_zip64(self, start: Any, x_len: Any, which: Any) -> Any:
        """Whether the local extra field of each member (``x_len`` bytes at ``start``) holds a
        ZIP64 field; only members in ``which`` are looked at (the first field of each at once,
        further fields one member at a time)."""
        import numpy as np

        out = np.zeros(len(start), bool)
        rows = np.flatnonzero(which & (x_len >= 4))
        if not rows.size:
            return out
        u8 = np.frombuffer(self.src.buf, np.uint8)
        head = u8[start[rows, None] + np.arange(4)].view("<u2").reshape(-1, 2).astype(np.int64)
        out[rows] = head[:, 0] == ZIP64_EXTRA_ID
        buf = self.src.buf
        for k in rows[(head[:, 0] != ZIP64_EXTRA_ID) & (head[:, 1] + 4 < x_len[rows])].tolist():
            pos, end = int(start[k]), int(start[k] + x_len[k])
            while pos + 4 <= end:
                xid, xlen = _EXTRA_HEAD.unpack_from(buf, pos)
                if xid == ZIP64_EXTRA_ID:
                    out[k] = True
                    break
                pos += 4 + xlen
        return out

    def _names_differ(self, c: _Central, local: Any) -> Any:
        """Which local names (at ``local``, lengths already equal) differ from the central
        ones: fixed-width windows compared at once, or byte by byte for long names."""
        import numpy as np

        whole = np.frombuffer(self.src.buf, np.uint8)
        central = c.pos + CENTRAL_SIZE
        width = int(c.n_len.max())
        if width == 0:
            return np.zeros(len(central), bool)
        if width <= 256 and len(central) * width <= 2 * int(c.n_len.sum()) + 65536 and \
                max(int(central.max()), int(local.max())) + width <= len(whole):
            win = np.lib.stride_tricks.sliding_window_view(whole, width)
            differ = (win[local] != win[central]) & (np.arange(width) < c.n_len[:, None])
            return differ.any(axis=1)
        owner = np.repeat(np.arange(len(central)), c.n_len)
        at = np.arange(len(owner)) - np.repeat(np.cumsum(c.n_len) - c.n_len, c.n_len)
        differ = np.zeros(len(central), bool)
        differ[owner[whole[local[owner] + at] != whole[central[owner] + at]]] = True
        return differ

    def _local_error(self, c: _Central, k: int, data: int, limit: int) -> None:
        """Raise the precise error for the local header of central record ``k``."""
        name, method, csize, lho = c.names[k], int(c.method[k]), int(c.csize[k]), int(c.lho[k])
        raw = self.src.buf[int(c.pos[k]) + CENTRAL_SIZE:int(c.pos[k]) + CENTRAL_SIZE + int(c.n_len[k])]
        path = self.path
        what = f"zip local header of {name!r}"
        magic, _, _, l_method, _, _, _, _, _, n_len, x_len = _LOCAL.unpack_from(self.src.buf, lho)
        if magic != 0x04034B50:
            shifted = (f"; offsets are shifted by {self.prepended} bytes, as by Python's zipfile, "
                       "because the central directory lies that much later than the end record "
                       "says (bytes prepended or members grown after writing)"
                       if self.prepended else "")
            raise CorruptError(f"bad signature 0x{magic:08x} (expected 0x04034b50){shifted}",
                               file=path, structure=what, offset=lho)
        if data > limit:
            raise OutOfBoundsError(f"name and extra ({n_len}+{x_len} bytes) run past the central "
                                   f"directory at 0x{limit:x}", file=path, structure=what, offset=lho)
        if l_method != method:
            raise CorruptError(f"compression method {l_method} differs from the central "
                               f"directory's {method}", file=path, structure=what, offset=lho + 8)
        if self.src.buf[lho + LOCAL_SIZE: lho + LOCAL_SIZE + n_len] != raw:
            raise CorruptError(f"name differs from the central directory's {name!r}", file=path,
                               structure=what, offset=lho + LOCAL_SIZE)
        raise OutOfBoundsError(f"{csize} bytes at 0x{data:x} run past the central directory at "
                               f"0x{limit:x}", file=path, structure=f"zip member {name!r}",
                               offset=data)

    # -- reading members --------------------------------------------------------------------
    def __iter__(self) -> Iterator[ZipEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.names)

    def view(self, e: ZipEntry) -> memoryview:
        """The member's stored bytes, zero-copy (compressed bytes for a compressed member).

        Raises the member's error from :attr:`problems` for a damaged member."""
        if e.data_offset < 0:
            raise dict(self.problems).get(e.index) or CorruptError(
                "the member's bytes could not be located", file=self.path,
                structure=f"zip member {e.name!r}", offset=e.header_offset)
        return self.src.view(e.data_offset, e.compressed_size, f"zip member {e.name!r}")

    def read(self, e: ZipEntry, limit: int) -> bytes:
        """The member's content as ``bytes`` (for small metadata only), at most ``limit`` bytes.

        Stored members are copied; deflated ones are decompressed with an output bound of
        ``min(file_size, limit)`` (the declared size is never trusted for allocation).
        Raises as :meth:`content` does.
        """
        out = self.content(e, limit)
        return out if isinstance(out, bytes) else bytes(out)

    def content(self, e: ZipEntry, limit: int) -> bytes | memoryview:
        """The member's content, at most ``limit`` bytes: a zero-copy view of a stored
        member, the inflated ``bytes`` of a deflated one (bounded as in :meth:`read`).

        Raises:
            CorruptError: the content is larger than ``limit`` or than declared, or does not
                decompress.
            UnsupportedVersionError: a compression method other than stored/deflate, or
                encryption.
        """
        what = f"zip member {e.name!r}"
        if e.flags & FLAG_ENCRYPTED:
            raise UnsupportedVersionError("the member is encrypted", file=self.path,
                                          structure=what, offset=e.data_offset)
        if e.file_size > limit:
            raise CorruptError(f"declared size {e.file_size} exceeds the {limit}-byte limit for "
                               "metadata", file=self.path, structure=what, offset=e.data_offset)
        raw = self.view(e)
        if e.method == 0:
            if e.compressed_size != e.file_size:
                raise CorruptError(f"stored member sizes differ ({e.compressed_size} stored, "
                                   f"{e.file_size} declared)", file=self.path, structure=what,
                                   offset=e.data_offset)
            return raw
        if e.method != 8:
            raise UnsupportedVersionError(
                f"compression method {e.method} ({METHODS.get(e.method, 'unknown')}) is not "
                "supported for metadata", file=self.path, structure=what, offset=e.data_offset)
        d = zlib.decompressobj(-15)
        try:
            out = d.decompress(raw, e.file_size + 1)
        except zlib.error as exc:
            raise CorruptError(f"deflate stream is corrupt ({exc})", file=self.path, structure=what,
                               offset=e.data_offset) from None
        if len(out) != e.file_size or d.unconsumed_tail:
            raise CorruptError(f"inflates to {'more than ' if len(out) > e.file_size else ''}"
                               f"{len(out)} bytes, {e.file_size} declared", file=self.path,
                               structure=what, offset=e.data_offset)
        return out

    def local_padding(self, e: ZipEntry) -> int:
        """Bytes of alignment padding at the end of ``e``'s local extra field (torch's ``FB``
        field), 0 when the last extra field is something else."""
        buf = self.src.buf
        end = e.data_offset
        pos = end - e.local_extra
        pad = 0
        while pos + 4 <= end:
            xid, xlen = _EXTRA_HEAD.unpack_from(buf, pos)
            if pos + 4 + xlen > end:
                return 0
            pad = xlen if xid == PADDING_EXTRA_ID else 0
            pos += 4 + xlen
        return pad


def _decode_name(raw: bytes, flags: int, path: str, i: int, pos: int) -> str:
    if flags & FLAG_UTF8:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptError(f"member name is not valid UTF-8 ({exc.reason} at byte {exc.start}) "
                               "although flag bit 11 says so", file=path,
                               structure=f"zip central directory entry {i}",
                               offset=pos + CENTRAL_SIZE + exc.start) from None
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        return raw.decode("cp437")


def _zip64_extra(buf: memoryview, pos: int, length: int, usize: int, csize: int, lho: int,
                 disk: int, path: str, i: int, name: str) -> tuple[int, int, int, int, bool]:
    """Replace the 0xFFFFFFFF fields from the ZIP64 extended-information extra field."""
    end = pos + length
    what = f"zip central directory entry {i} ({name!r}) zip64 extra"
    while pos + 4 <= end:
        xid, xlen = _EXTRA_HEAD.unpack_from(buf, pos)
        if pos + 4 + xlen > end:
            raise TruncatedError(f"extra field 0x{xid:04x} of {xlen} bytes runs past the extra data",
                                 file=path, structure=what, offset=pos)
        if xid == ZIP64_EXTRA_ID:
            p = pos + 4
            stop = p + xlen
            need = []
            if usize == 0xFFFFFFFF:
                need.append("file_size")
            if csize == 0xFFFFFFFF:
                need.append("compressed_size")
            if lho == 0xFFFFFFFF:
                need.append("header_offset")
            values = {}
            for field in need:
                if p + 8 > stop:
                    raise TruncatedError(f"{field} is missing from the zip64 field ({xlen} bytes)",
                                         file=path, structure=what, offset=pos)
                values[field] = _U64.unpack_from(buf, p)[0]
                p += 8
            if disk == 0xFFFF:
                if p + 4 > stop:
                    raise TruncatedError("disk number is missing from the zip64 field", file=path,
                                         structure=what, offset=pos)
                disk = struct.unpack_from("<I", buf, p)[0]
            for field, value in values.items():
                if value >= _INT64_LIMIT:
                    raise CorruptError(f"{field} 0x{value:x} does not fit in 63 bits", file=path,
                                       structure=what, offset=pos)
            return (values.get("file_size", usize), values.get("compressed_size", csize),
                    values.get("header_offset", lho), disk, True)
        pos += 4 + xlen
    raise CorruptError("sizes or offset hold 0xFFFFFFFF but there is no zip64 extra field",
                       file=path, structure=what, offset=end - length)
