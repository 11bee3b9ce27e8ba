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
from typing import NamedTuple

from ..errors import CorruptError, OutOfBoundsError, TruncatedError, UnsupportedVersionError
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
_U64 = struct.Struct("<Q")


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

    Attributes:
        entries: members in central-directory order.
        by_name: name -> entry (the first one when a name repeats; see ``duplicates``).
        duplicates: names that occur more than once.
        cd_offset, cd_size: the central directory.
        eocd_offset: the end-of-central-directory record (``eocd_size`` with its comment).
        zip64_offset, locator_offset: the ZIP64 records (``None`` when absent).
        zip64: the archive uses ZIP64 records.

    Raises:
        TruncatedError / OutOfBoundsError / CorruptError / UnsupportedVersionError.

    Example:
        >>> zd = ZipDirectory(Source("sample_models/tied.pt2"))   # doctest: +SKIP
        >>> [e.name for e in zd.entries][:2]                        # doctest: +SKIP
        ['tied/data/weights/weight_0', 'tied/data/weights/model_weights_config.json']
    """

    def __init__(self, src: Source) -> None:
        self.src = src
        self.path = src.path
        self.zip64_offset: int | None = None
        self.zip64_size = 0
        self.locator_offset: int | None = None
        self._find_end()
        self.entries: list[ZipEntry] = self._central_directory()
        # The first entry wins when a name repeats (built in reverse, so earlier ones overwrite).
        self.by_name: dict[str, ZipEntry] = {e.name: e for e in reversed(self.entries)}
        self.duplicates: list[str] = []
        if len(self.by_name) != len(self.entries):
            seen: set[str] = set()
            for e in self.entries:
                if e.name in seen:
                    self.duplicates.append(e.name)
                seen.add(e.name)

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
    def _central_directory(self) -> list[ZipEntry]:
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
        return self._local_headers(recs)

    # -- local headers --------------------------------------------------------------------
    def _local_headers(self, recs: list[tuple]) -> list[ZipEntry]:
        """Check every local header against its central record (vectorised) and make the
        entries with their absolute data offsets."""
        import numpy as np

        path = self.path
        n = len(recs)
        if not n:
            return []
        limit = self.cd_offset  # member data lies before the central directory
        fields = list(zip(*recs))  # columns of the central records
        lho = np.array(fields[7], np.int64)
        csize = np.array(fields[5], np.int64)
        bad = np.flatnonzero(lho + LOCAL_SIZE > limit)
        if bad.size:
            r = recs[bad[0]]
            raise OutOfBoundsError(f"local header offset 0x{r[7]:x} (+{LOCAL_SIZE}) is not before "
                                   f"the central directory at 0x{limit:x}", file=path,
                                   structure=f"zip local header of {r[0]!r}", offset=r[8] + 42)
        u8 = np.frombuffer(self.src.buf, np.uint8, count=limit)
        head = u8[lho[:, None] + np.arange(LOCAL_SIZE)]
        local = head.view(_LOCAL_DTYPE).reshape(n)
        magic = local["magic"].astype(np.int64)
        method = local["method"].astype(np.int64)
        n_len = local["n_len"].astype(np.int64)
        x_len = local["x_len"].astype(np.int64)
        data = lho + LOCAL_SIZE + n_len + x_len
        cmethod = np.array(fields[3], np.int64)
        cn_len = np.array(list(map(len, fields[1])), np.int64)
        problems = ((magic != 0x04034B50) | (data > limit) | (method != cmethod)
                    | (n_len != cn_len) | (csize > limit - data))
        if not problems.any():
            # Names: gather every local name at once and compare with the central names.
            starts = lho + LOCAL_SIZE
            total = int(cn_len.sum())
            idx = np.repeat(starts - np.concatenate(([0], np.cumsum(cn_len)[:-1])), cn_len)
            local_names = u8[idx + np.arange(total)]
            central = np.frombuffer(b"".join(fields[1]), np.uint8)
            if not np.array_equal(local_names, central):
                diff = np.flatnonzero(local_names != central)[0]
                problems[np.searchsorted(np.cumsum(cn_len), diff, side="right")] = True
        if problems.any():
            k = int(np.flatnonzero(problems)[0])
            self._local_error(recs[k], int(data[k]), limit)
        # Members must not overlap (overlapping members are a zip-bomb device).
        order = np.argsort(lho, kind="stable")
        ends = data + csize
        nxt = np.empty(n, np.int64)
        nxt[order[:-1]] = lho[order[1:]]
        nxt[order[-1]] = limit
        over = np.flatnonzero(ends > nxt)
        if over.size:
            k = int(over[np.argmin(lho[over])])
            b = int(order[np.searchsorted(lho[order], lho[k], side="right")])
            raise CorruptError(f"member {recs[k][0]!r} [0x{lho[k]:x}, 0x{ends[k]:x}) overlaps "
                               f"member {recs[b][0]!r} at 0x{lho[b]:x}", file=path,
                               structure=f"zip member {recs[b][0]!r}", offset=int(lho[b]))
        # Data descriptors (flag bit 3): 12 bytes, 20 with ZIP64 sizes, +4 with the signature.
        flags = np.array(fields[2], np.int64)
        zip64 = np.array(fields[10], bool)
        room = nxt - ends
        at = np.where(room >= 4, ends, 0)
        sig = u8[at[:, None] + np.arange(4)].view("<u4").reshape(n)
        has_sig = (room >= 4) & (sig == int.from_bytes(DESCRIPTOR_MAGIC, "little"))
        desc = np.where(zip64, 20, 12) + 4 * has_sig
        desc = np.where(((flags & FLAG_DESCRIPTOR) != 0) & (desc <= room), desc, 0)
        compressed = ((cmethod != 0) | ((flags & FLAG_ENCRYPTED) != 0)).tolist()
        make = ZipEntry._make
        return [make((i, r[0], r[3], r[2], r[4], r[5], r[6], r[7], r[8], r[9], r[10], d, x, ds, c))
                for i, (r, d, x, ds, c) in enumerate(zip(recs, data.tolist(), x_len.tolist(),
                                                         desc.tolist(), compressed))]

    def _local_error(self, r: tuple, data: int, limit: int) -> None:
        """Raise the precise error for the local header of central record ``r``."""
        name, raw, _, method, _, csize, _, lho = r[:8]
        path = self.path
        what = f"zip local header of {name!r}"
        magic, _, _, l_method, _, _, _, _, _, n_len, x_len = _LOCAL.unpack_from(self.src.buf, lho)
        if magic != 0x04034B50:
            raise CorruptError(f"bad signature 0x{magic:08x} (expected 0x04034b50)", file=path,
                               structure=what, offset=lho)
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
        return len(self.entries)

    def view(self, e: ZipEntry) -> memoryview:
        """The member's stored bytes, zero-copy (compressed bytes for a compressed member)."""
        return self.src.view(e.data_offset, e.compressed_size, f"zip member {e.name!r}")

    def read(self, e: ZipEntry, limit: int) -> bytes:
        """The member's content as ``bytes`` (for small metadata only), at most ``limit`` bytes.

        Stored members are copied; deflated ones are decompressed with an output bound of
        ``min(file_size, limit)`` (the declared size is never trusted for allocation).

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
            return bytes(raw)
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
            return (values.get("file_size", usize), values.get("compressed_size", csize),
                    values.get("header_offset", lho), disk, True)
        pos += 4 + xlen
    raise CorruptError("sizes or offset hold 0xFFFFFFFF but there is no zip64 extra field",
                       file=path, structure=what, offset=end - length)
