"""Behaviour pinned completely for the readers of the core (issue #19, mutation testing):
``workbench.source``, ``workbench.flatbuf``, ``workbench._vecfb``, ``workbench.formats``
(sniffing, the identifier check) and the ``.pte`` / ``.ptd`` / ``.bpte`` readers.

Every error is checked whole (class, file, structure, offset, message), every frame column
exactly, on the fast (numpy) path and on the scalar verifying path. Golden values come from
ExecuTorch's own deserializer/serializer (the ``oracle``), or from bytes built here.
"""

from __future__ import annotations

import io
import math
import os
import pathlib
import struct
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
from helpers import read_tier
from test_flatbuf import ROOT_FIELDS, fb_of, hand_built

import workbench as wb
from workbench import _vecfb, formats, readpath
from workbench._vecfb import SlowPath, VecReader
from workbench.errors import (
    ArtifactError,
    CorruptError,
    StaleFileError,
    TruncatedError,
)
from workbench.flatbuf import FlatBuffer
from workbench.formats._ident import expect_identifier
from workbench.formats.pte import header as pte_header
from workbench.source import Source


def err(e: ArtifactError) -> tuple:
    """An error as ``(class name, file, structure, offset, detail)``."""
    return type(e).__name__, e.file, e.structure, e.offset, e.detail


def raises(fn, *args, **kwargs) -> tuple:
    with pytest.raises(ArtifactError) as ei:
        fn(*args, **kwargs)
    return err(ei.value)


# =============================================================================================
# workbench.source
# =============================================================================================
DATA = bytes(range(200))


@pytest.fixture
def data_file(tmp_path):
    p = tmp_path / "d.bin"
    p.write_bytes(DATA)
    return p


@pytest.fixture
def src(data_file):
    with Source(data_file) as s:
        yield s


def test_source_check_errors(src):
    assert src.check(0, 200, "w") is None
    assert src.check(200, 0, "w") is None
    assert raises(src.check, -1, 4, "w") == (
        "OutOfBoundsError", "d.bin", "w", -1, "offset 0x-1 (length 4) is outside the range (size 0xc8)")
    assert raises(src.check, 4, -1, "w") == (
        "OutOfBoundsError", "d.bin", "w", 4, "offset 0x4 (length -1) is outside the range (size 0xc8)")
    assert raises(src.check, 201, 0, "w") == (
        "OutOfBoundsError", "d.bin", "w", 201, "offset 0xc9 (length 0) is outside the range (size 0xc8)")
    assert raises(src.check, 199, 2, "w") == (
        "TruncatedError", "d.bin", "w", 199, "2 bytes run past the end (size 0xc8)")
    # an explicit end
    assert src.check(10, 10, "w", end=20) is None
    assert raises(src.check, 10, 11, "w", end=20) == (
        "TruncatedError", "d.bin", "w", 10, "11 bytes run past the end (size 0x14)")
    assert raises(src.check, 21, 0, "w", end=20) == (
        "OutOfBoundsError", "d.bin", "w", 21, "offset 0x15 (length 0) is outside the range (size 0x14)")
    assert src.check(0, 0, "w", end=0) is None


@pytest.mark.parametrize("reader,fmt", [("u8", "<B"), ("u16", "<H"), ("u32", "<I"),
                                        ("i32", "<i"), ("u64", "<Q"), ("i64", "<q")])
def test_source_integer_reads(src, reader, fmt):
    read = getattr(src, reader)
    n = struct.calcsize(fmt)
    for at in (0, 1, 200 - n):
        assert read(at) == struct.unpack_from(fmt, DATA, at)[0]
    assert raises(read, 200 - n + 1) == (
        "TruncatedError", "d.bin", reader, 200 - n + 1, f"{n} bytes run past the end (size 0xc8)")
    assert raises(read, -1, "x") == (
        "OutOfBoundsError", "d.bin", "x", -1, f"offset 0x-1 (length {n}) is outside the range (size 0xc8)")
    assert raises(read, 300, "x")[0] == "OutOfBoundsError"


def test_source_slices(src):
    v = src.view(3, 5)
    assert isinstance(v, memoryview) and v.readonly and bytes(v) == DATA[3:8]
    assert bytes(src.view(200, 0)) == b""
    b = src.bytes(7, 3)
    assert type(b) is bytes and b == DATA[7:10]
    assert raises(src.view, 198, 3) == ("TruncatedError", "d.bin", "range", 198,
                                        "3 bytes run past the end (size 0xc8)")
    assert raises(src.bytes, 198, 3)[2] == "range"
    assert raises(src.bytes, 198, 3, "hdr")[2] == "hdr"
    assert src.head() == DATA[:64]
    assert src.head(5) == DATA[:5]
    assert src.head(1000) == DATA
    assert type(src.head()) is bytes
    assert src.size == 200 and src.name == "d.bin" and repr(src) == f"Source({src.path!r}, size=200)"


def test_source_identity_and_fresh(src, data_file):
    st = os.stat(data_file)
    assert src.identity == (200, st.st_mtime_ns, st.st_ino, st.st_dev)
    assert src.changes() is None and src.is_stale() is False
    assert src.ensure_fresh("x", 3) is None


def _when(ns: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ns / 1e9).isoformat(timespec="microseconds")


def test_source_changes_size_only(src, data_file):
    """Rewritten shorter with its mtime put back: only the size is named."""
    mtime = src.identity[1]
    with open(data_file, "r+b") as f:
        f.truncate(120)
    os.utime(data_file, ns=(mtime, mtime))
    assert src.changes() == "size 200 -> 120"
    assert src.is_stale() is True
    assert raises(src.ensure_fresh, "tensor 'a'", 9) == (
        "StaleFileError", "d.bin", "tensor 'a'", 9,
        "changed since it was opened: size 200 -> 120; reload it (Artifact.reload())")
    assert raises(src.ensure_fresh)[2:4] == (None, None)


def test_source_changes_mtime_only(src, data_file):
    old = src.identity[1]
    new = old + 1_234_567_000
    os.utime(data_file, ns=(new, new))
    assert src.changes() == f"mtime {_when(old)} -> {_when(new)}"
    assert raises(src.ensure_fresh, "w", 0)[4] == (
        f"changed since it was opened: mtime {_when(old)} -> {_when(new)}; "
        "reload it (Artifact.reload())")


def test_source_changes_size_and_mtime(src, data_file):
    old = src.identity[1]
    with open(data_file, "ab") as f:
        f.write(b"xy")
    os.utime(data_file, ns=(old + 5000, old + 5000))
    assert src.changes() == f"size 200 -> 202, mtime {_when(old)} -> {_when(old + 5000)}"


def test_source_changes_replaced_and_removed(src, data_file):
    ino = src.identity[2]
    other = data_file.with_name("other.bin")
    other.write_bytes(DATA[:50])
    mtime = src.identity[1]
    os.utime(other, ns=(mtime, mtime))
    os.replace(other, data_file)
    new_ino = os.stat(data_file).st_ino
    assert new_ino != ino
    assert src.changes() == f"replaced (inode {ino} -> {new_ino}), size 200 -> 50"
    assert src.ensure_fresh() is None  # the mapped inode is intact: its bytes are served
    assert src.u8(100) == 100
    os.remove(data_file)
    assert src.changes() == "the path no longer opens (No such file or directory)"


def test_source_replaced_by_same_size_and_mtime(src, data_file):
    """A replacement of the same size and mtime is named by its inode alone."""
    ino = src.identity[2]
    other = data_file.with_name("other.bin")
    other.write_bytes(DATA[::-1])
    os.utime(other, ns=(src.identity[1], src.identity[1]))
    os.replace(other, data_file)
    assert src.changes() == f"replaced (inode {ino} -> {os.stat(data_file).st_ino})"


def test_source_closed(data_file):
    s = Source(data_file)
    s.close()
    assert s.changes() is None and s.is_stale() is False and s.ensure_fresh("x", 1) is None
    assert s.size == 200 and bytes(s.buf) == b""
    s.close()  # twice is fine


def test_source_readinto_and_chunks(src, data_file, monkeypatch):
    out = np.zeros(10, np.uint8)
    assert src.readinto(5, out) is out and out.tobytes() == DATA[5:15]
    words = np.zeros(3, np.uint32)  # any writable buffer: cast to bytes
    src.readinto(1, words)
    assert words.tobytes() == DATA[1:13]
    assert raises(src.readinto, 195, np.zeros(6, np.uint8)) == (
        "TruncatedError", "d.bin", "range", 195, "6 bytes run past the end (size 0xc8)")
    assert raises(src.readinto, 195, np.zeros(6, np.uint8), "t")[2] == "t"
    parts = [bytes(c) for c in src.chunks(10, 25, chunk=10)]
    assert parts == [DATA[10:20], DATA[20:30], DATA[30:35]]
    assert [bytes(c) for c in src.chunks(0, 200)] == [DATA]
    with pytest.raises(TruncatedError) as ei:
        next(src.chunks(190, 11))
    assert err(ei.value) == ("TruncatedError", "d.bin", "range", 190,
                             "11 bytes run past the end (size 0xc8)")
    with pytest.raises(TruncatedError) as ei:
        next(src.chunks(190, 11, "c"))
    assert ei.value.structure == "c"


def test_source_stale_during_and_after_copy(src, data_file, monkeypatch):
    import workbench.source as source

    real = os.preadv
    mtime = src.identity[1]

    def short(fd, buffers, offset):  # the file "ends" after 3 bytes
        (buf,) = buffers
        if offset >= 23:
            return 0
        k = real(fd, [buf[:3]], offset)
        return k

    monkeypatch.setattr(source.os, "preadv", short)
    assert raises(src.readinto, 20, np.zeros(8, np.uint8), "ten") == (
        "StaleFileError", "d.bin", "ten", 20,
        "the file ended at 0x17 while 8 bytes were read: it changed since it was opened; "
        "reload it (Artifact.reload())")
    with pytest.raises(StaleFileError) as ei:
        list(src.chunks(20, 8, "ch"))
    assert err(ei.value)[2:4] == ("ch", 20)

    def touch(fd, buffers, offset):
        k = real(fd, buffers, offset)
        os.utime(data_file, ns=(mtime + 10_000, mtime + 10_000))
        return k

    monkeypatch.setattr(source.os, "preadv", touch)
    e = raises(src.readinto, 40, np.zeros(4, np.uint8), "after")
    assert e[:4] == ("StaleFileError", "d.bin", "after", 40)
    assert e[4].startswith("changed since it was opened: mtime ")


def test_source_chunk_fresh_checks(src, data_file):
    gen = src.chunks(0, 30, "c", chunk=10)
    assert bytes(next(gen)) == DATA[:10]
    os.utime(data_file, ns=(1, 1))
    assert bytes(next(gen)) == DATA[10:20]  # read through the descriptor: same bytes
    assert bytes(next(gen)) == DATA[20:30]
    with pytest.raises(StaleFileError) as ei:
        next(gen)  # checked after the last chunk
    assert err(ei.value)[2:4] == ("c", 0)
    with pytest.raises(StaleFileError):  # and before the first
        next(src.chunks(0, 1))


def test_source_empty_and_directory(tmp_path):
    p = tmp_path / "e.bin"
    p.write_bytes(b"")
    with Source(p) as s:
        assert s.size == 0 and s.head() == b"" and bytes(s.buf) == b""
        assert raises(s.u8, 0) == ("TruncatedError", "e.bin", "u8", 0,
                                   "1 bytes run past the end (size 0x0)")
        assert list(s.chunks(0, 0)) == []
    with pytest.raises(IsADirectoryError):
        Source(tmp_path)


# =============================================================================================
# workbench.formats: sniffing, the identifier check
# =============================================================================================
class _Recorder(io.BytesIO):
    reads: ClassVar[list] = []

    def read(self, n=-1):
        self.reads.append(n)
        return super().read(n)


def test_sniff_path_reads_only_the_head(tmp_path, monkeypatch):
    p = tmp_path / "x.pte"
    p.write_bytes(b"\x00\x00\x00\x00ET12" + bytes(200))
    opened = []

    def fake_open(path, mode):
        opened.append((os.fspath(path), mode))
        return _Recorder(p.read_bytes())

    _Recorder.reads = []
    monkeypatch.setattr(formats, "open", fake_open, raising=False)
    assert formats.sniff_path(p) is formats.pte
    assert opened == [(str(p), "rb")] and _Recorder.reads == [64]
    assert formats.HEAD == 64


@pytest.mark.parametrize("head,fmt", [
    (b"\x00\x00\x00\x00ET12", "pte"), (b"\x00\x00\x00\x00ET99", "pte"),
    (b"\x00\x00\x00\x00FT01", "ptd"), (b"\x00\x00\x00\x00FTx1", "ptd"),
    (b"\x00\x00\x00\x00BP08", "bpte"), (b"\x00\x00\x00\x00BP12", "bpte"),
    (b"\x00\x00\x00\x00ETxy", None), (b"\x00\x00\x00\x00BPxy", None), (b"\x00\x00\x00\x00FT-1", None),
    (b"\x00\x00\x00\x00ET1", None), (b"", None), (b"hello world", None),
])
def test_sniff(head, fmt, tmp_path):
    mod = formats.sniff(head + bytes(8) if len(head) >= 8 else head)
    assert (mod.FORMAT if mod else None) == fmt
    p = tmp_path / "f.bin"
    p.write_bytes(head)
    m2 = formats.sniff_path(p)
    assert (m2.FORMAT if m2 else None) == (fmt if len(head) >= 8 else None)
    assert [m.FORMAT for m in formats.READERS] == ["pte", "ptd", "bpte", "etdump", "etrecord", "pt2"]


def test_expect_identifier(tmp_path):
    p = tmp_path / "i.bin"
    p.write_bytes(b"1234BP08")
    with Source(p) as s:
        assert expect_identifier(s, b"BP08", "bundled program") is None
        assert raises(expect_identifier, s, b"BP09", "bundled program") == (
            "UnsupportedVersionError", "i.bin", "file identifier", 4,
            "bundled program version b'BP08' is not supported (expected b'BP09')")
    p.write_bytes(b"1234BP0")
    with Source(p) as s:
        assert raises(expect_identifier, s, b"BP08", "FlatTensor") == (
            "TruncatedError", "i.bin", "file header", 0,
            "7 bytes is too short for a FlatTensor file (needs 8)")


# =============================================================================================
# workbench.flatbuf (hand-built buffers from test_flatbuf, placed behind a prefix so that
# every offset is absolute)
# =============================================================================================
PRE = 16  # bytes before the flatbuffer in its file


def fb_edit(edit=None, **kw):
    data, L = hand_built(**kw)
    if edit is not None:
        edit(data, L)
    return fb_of(data, prefix=b"\xee" * PRE, suffix=b"\xee" * 8), L, len(data)


def ferr(fn) -> tuple:
    """An error as (class, structure, offset, detail) (the file is a temporary fbN.bin)."""
    e = raises(fn)
    assert e[1].startswith("fb")
    return e[0], e[2], e[3], e[4]


def test_flatbuf_values_and_positions():
    fb, L, n = fb_edit()
    root = fb.root("Root")
    assert (root.pos, root.tsize, root.path, repr(root)) == (
        PRE + L["root"], 48, "Root", f"<Table Root at 0x{PRE + L['root']:x}>")
    assert root.fields == tuple(ROOT_FIELDS)
    assert fb.base == PRE and fb.end == PRE + n and fb.name == "Test" and fb.findings == []
    assert root.field_pos(0, 4) == PRE + L["f0"] and root.field_pos(6, 4) == 0
    assert root.field_pos(10, 4) == 0
    assert root.vector(2, 4) == (PRE + L["vec"] + 4, 3)
    assert root.struct(7, 8) == PRE + L["f7"]
    assert root.u8(0) == 7 and root.i8(0) == 7 and root.i32(0) == 7 and root.u64(7) == struct.unpack(
        "<Q", struct.pack("<d", 2.5))[0]
    assert root.scalar(0, "H") == 7 and root.bool(0) is True
    sub = root.table(3, "sub")
    assert sub.path == "Root.sub" and sub.pos == PRE + L["sub"] and sub.i64(0) == 42
    assert root.table(3).path == "Root.field3"
    kids = root.tables(8, "kids")
    assert [k.path for k in kids] == ["Root.kids[0]", "Root.kids[1]"]
    assert [k.pos for k in kids] == [PRE + L["sub"], PRE + L["uni"]]
    assert [k.path for k in root.tables(8)] == ["Root.field8[0]", "Root.field8[1]"]
    t, u = root.union(4, 3, "u")
    assert (t, u.path, u.pos) == (1, "Root.u", PRE + L["uni"])
    assert root.union(4, 3)[1].path == "Root.field5"
    a = root.array(2, "<i4")
    assert a.dtype == np.dtype("<i4") and a.tolist() == [1, 2, 3] and not a.flags.writeable
    assert root.array(6, "<u8").dtype == np.dtype("<u8")
    assert root.scalars(2, "i") == (1, 2, 3) and root.scalars(2, "I", "v") == (1, 2, 3)
    assert root.strings(9) == ["ab", "xyz"] and root.string(1) == "hello"


def _flatbuf_cases():
    r = PRE  # absolute offsets: prefix + label

    def at(L, label, delta=0):
        return r + L[label] + delta

    cases = []

    def case(name, edit, call, expected):
        cases.append(pytest.param(edit, call, expected, id=name))

    # root / identifier / short
    case("identifier", lambda d, L: d.__setitem__(slice(4, 8), b"NOPE"),
         lambda fb: fb.root("Root"),
         lambda L, n: ("CorruptError", "Test header", r + 4,
                       "file identifier is b'NOPE', expected b'TEST'"))
    case("root outside", lambda d, L: struct.pack_into("<I", d, 0, 0x7FFF0000),
         lambda fb: fb.root("Root"),
         lambda L, n: ("OutOfBoundsError", "Root", r + 0x7FFF0000,
                       f"points outside the Test flatbuffer [0x{r:x}, 0x{r + n:x}) (length 4)"))
    case("root at the end", lambda d, L: struct.pack_into("<I", d, 0, len(d) - 2),
         lambda fb: fb.root("Root"),
         lambda L, n: ("TruncatedError", "Root", r + n - 2,
                       f"4 bytes run past the end of the Test flatbuffer (0x{r + n:x})"))
    # vtables
    case("vtable before start", lambda d, L: struct.pack_into("<i", d, L["root"], L["root"] + 4),
         lambda fb: fb.root("Root"),
         lambda L, n: ("OutOfBoundsError", "Root vtable", at(L, "root"),
                       f"vtable at 0x{r - 4:x} (soffset {L['root'] + 4}) lies before the Test "
                       f"flatbuffer [0x{r:x}, 0x{r + n:x})"))
    case("vtable negative", lambda d, L: struct.pack_into("<i", d, L["root"], L["root"] + r + 6),
         lambda fb: fb.root("Root"),
         lambda L, n: ("OutOfBoundsError", "Root vtable", at(L, "root"),
                       f"vtable at -0x6 (soffset {L['root'] + r + 6}) lies before the Test "
                       f"flatbuffer [0x{r:x}, 0x{r + n:x})"))
    case("vtable past end", lambda d, L: struct.pack_into("<i", d, L["root"], L["root"] - len(d) + 2),
         lambda fb: fb.root("Root"),
         lambda L, n: ("TruncatedError", "Root vtable", r + n - 2,
                       f"4 bytes run past the end of the Test flatbuffer (0x{r + n:x})"))
    case("vtable odd", lambda d, L: struct.pack_into("<i", d, L["root"], L["root"] - L["root_vt"] - 1),
         lambda fb: fb.root("Root"),
         lambda L, n: ("CorruptError", "Root vtable", at(L, "root_vt", 1),
                       "vtable is not 2-byte aligned"))
    for vts in (0, 2, 5):
        case(f"vtable size {vts}", lambda d, L, v=vts: struct.pack_into("<H", d, L["root_vt"], v),
             lambda fb: fb.root("Root"),
             lambda L, n, v=vts: ("CorruptError", "Root vtable", at(L, "root_vt"),
                                  f"vtable size {v} is invalid (must be even and >= 4)"))
    case("table size 3", lambda d, L: struct.pack_into("<H", d, L["root_vt"] + 2, 3),
         lambda fb: fb.root("Root"),
         lambda L, n: ("CorruptError", "Root vtable", at(L, "root_vt"),
                       "table size 3 is invalid (must be >= 4)"))
    case("vtable size past end", lambda d, L: struct.pack_into("<H", d, L["root_vt"], 0xFFFE),
         lambda fb: fb.root("Root"),
         lambda L, n: ("TruncatedError", "Root vtable", at(L, "root_vt"),
                       f"65534 bytes run past the end of the Test flatbuffer (0x{r + n:x})"))
    case("field offset 2", lambda d, L: struct.pack_into("<H", d, L["root_vt"] + 4 + 2 * 3, 2),
         lambda fb: fb.root("Root"),
         lambda L, n: ("CorruptError", "Root vtable", at(L, "root_vt", 4 + 2 * 3),
                       "field 3 offset 2 overlaps the table's soffset (must be >= 4)"))
    case("table past end", lambda d, L: struct.pack_into("<H", d, L["root_vt"] + 2, 0xFFF0),
         lambda fb: fb.root("Root"),
         lambda L, n: ("TruncatedError", "Root", at(L, "root"),
                       f"65520 bytes run past the end of the Test flatbuffer (0x{r + n:x})"))
    # references
    case("string ref past end", lambda d, L: struct.pack_into("<I", d, L["f1"], 0x10000),
         lambda fb: fb.root("Root").string(1, "name"),
         lambda L, n: ("OutOfBoundsError", "Root.name", at(L, "f1", 0x10000),
                       f"points outside the Test flatbuffer [0x{r:x}, 0x{r + n:x}) (length 4)"))
    case("string ref at end", lambda d, L: struct.pack_into("<I", d, L["f1"], len(d) - L["f1"] - 2),
         lambda fb: fb.root("Root").string(1),
         lambda L, n: ("TruncatedError", "Root.field1", r + n - 2,
                       f"4 bytes run past the end of the Test flatbuffer (0x{r + n:x})"))
    case("string no nul", lambda d, L: d.__setitem__(L["str"] + 4 + 5, 0x41),
         lambda fb: fb.root("Root").string(1, "s"),
         lambda L, n: ("CorruptError", "Root.s", at(L, "str"), "string is not NUL-terminated"))
    case("string utf8", lambda d, L: d.__setitem__(L["str"] + 4 + 2, 0xFF),
         lambda fb: fb.root("Root").string(1, "s"),
         lambda L, n: ("CorruptError", "Root.s", at(L, "str", 6),
                       "string is not valid UTF-8 (invalid start byte)"))
    case("string count", lambda d, L: struct.pack_into("<I", d, L["str"], 0x1000),
         lambda fb: fb.root("Root").string(1, "s"),
         lambda L, n: ("TruncatedError", "Root.s", at(L, "str"),
                       f"vector of 4096 x 1-byte elements runs past the end of the Test "
                       f"flatbuffer (0x{r + n:x})"))
    case("vector count", lambda d, L: struct.pack_into("<I", d, L["vec"], 2**31),
         lambda fb: fb.root("Root").scalars(2, "i", "v"),
         lambda L, n: ("TruncatedError", "Root.v", at(L, "vec"),
                       f"vector of 2147483648 x 4-byte elements runs past the end of the Test "
                       f"flatbuffer (0x{r + n:x})"))
    case("array count", lambda d, L: struct.pack_into("<I", d, L["vec"], 2**31),
         lambda fb: fb.root("Root").array(2, "<i8"),
         lambda L, n: ("TruncatedError", "Root.field2", at(L, "vec"),
                       f"vector of 2147483648 x 8-byte elements runs past the end of the Test "
                       f"flatbuffer (0x{r + n:x})"))
    case("tables count", lambda d, L: struct.pack_into("<I", d, L["tvec"], 2**31),
         lambda fb: fb.root("Root").tables(8, "kids"),
         lambda L, n: ("TruncatedError", "Root.kids", at(L, "tvec"),
                       f"vector of 2147483648 x 4-byte elements runs past the end of the Test "
                       f"flatbuffer (0x{r + n:x})"))
    case("strings count", lambda d, L: struct.pack_into("<I", d, L["svec"], 2**31),
         lambda fb: fb.root("Root").strings(9, "names"),
         lambda L, n: ("TruncatedError", "Root.names", at(L, "svec"),
                       f"vector of 2147483648 x 4-byte elements runs past the end of the Test "
                       f"flatbuffer (0x{r + n:x})"))
    case("tables element outside", lambda d, L: struct.pack_into("<I", d, L["tvec"] + 8, 0x10000),
         lambda fb: fb.root("Root").tables(8, "kids"),
         lambda L, n: ("OutOfBoundsError", "Root.kids[1]", at(L, "tvec", 8 + 0x10000),
                       f"points outside the Test flatbuffer [0x{r:x}, 0x{r + n:x}) (length 4)"))
    case("tables element vtable", lambda d, L: struct.pack_into("<H", d, L["sub_vt"], 3),
         lambda fb: fb.root("Root").tables(8, "kids"),
         lambda L, n: ("CorruptError", "Root.kids[0] vtable", at(L, "sub_vt"),
                       "vtable size 3 is invalid (must be even and >= 4)"))
    case("tables element size", lambda d, L: struct.pack_into("<H", d, L["sub_vt"] + 2, 0xFFF0),
         lambda fb: fb.root("Root").tables(8, "kids"),
         lambda L, n: ("TruncatedError", "Root.kids[0]", at(L, "sub"),
                       f"65520 bytes run past the end of the Test flatbuffer (0x{r + n:x})"))
    case("strings element", lambda d, L: struct.pack_into("<I", d, L["svec"] + 8, 0x10000),
         lambda fb: fb.root("Root").strings(9, "names"),
         lambda L, n: ("OutOfBoundsError", "Root.names[1]", at(L, "svec", 8 + 0x10000),
                       f"points outside the Test flatbuffer [0x{r:x}, 0x{r + n:x}) (length 4)"))
    case("strings element utf8", lambda d, L: d.__setitem__(L["s2"] + 4, 0xC3),
         lambda fb: fb.root("Root").strings(9, "names"),
         lambda L, n: ("CorruptError", "Root.names[1]", at(L, "s2", 4),
                       "string is not valid UTF-8 (invalid continuation byte)"))
    case("sub table ref", lambda d, L: struct.pack_into("<I", d, L["f3"], 0x10000),
         lambda fb: fb.root("Root").table(3, "sub"),
         lambda L, n: ("OutOfBoundsError", "Root.sub", at(L, "f3", 0x10000),
                       f"points outside the Test flatbuffer [0x{r:x}, 0x{r + n:x}) (length 4)"))
    # unions
    case("union type", lambda d, L: d.__setitem__(L["f4"], 3),
         lambda fb: fb.root("Root").union(4, 3, "u"),
         lambda L, n: ("CorruptError", "Root.u", at(L, "f4"), "union type 3 is unknown (max 2)"))
    case("union type default name", lambda d, L: d.__setitem__(L["f4"], 200),
         lambda fb: fb.root("Root").union(4, 3),
         lambda L, n: ("CorruptError", "Root.field5", at(L, "f4"),
                       "union type 200 is unknown (max 2)"))
    case("union value missing",
         lambda d, L: struct.pack_into("<H", d, L["root_vt"] + 4 + 2 * 5, 0),
         lambda fb: fb.root("Root").union(4, 3, "u"),
         lambda L, n: ("CorruptError", "Root.u", at(L, "root"),
                       "union type 1 is set but its value is missing"))
    # a field past the buffer (bounded by the buffer, not by the declared table size)
    case("field past the buffer", lambda d, L: struct.pack_into("<H", d, L["root_vt"] + 4, 0xFFF0),
         lambda fb: fb.root("Root").u32(0),
         lambda L, n: ("OutOfBoundsError", "Root.field0", at(L, "root", 0xFFF0),
                       f"points outside the Test flatbuffer [0x{r:x}, 0x{r + n:x}) (length 4)"))
    return cases


@pytest.mark.parametrize("edit,call,expected", _flatbuf_cases())
def test_flatbuf_errors(edit, call, expected):
    fb, L, n = fb_edit(edit)
    assert ferr(lambda: call(fb)) == expected(L, n)


@pytest.mark.parametrize("n", [0, 7])
def test_flatbuf_too_short(n):
    data, _ = hand_built()
    fb = fb_of(data[:n], prefix=b"\xee" * PRE)
    assert ferr(lambda: fb.root("Root")) == (
        "TruncatedError", "Test header", PRE, f"{n} bytes is too short for a flatbuffer (needs 8)")
    with pytest.raises(TruncatedError) as ei:  # the window itself outside the file
        FlatBuffer(fb.src, PRE, PRE + 100, name="P")
    assert err(ei.value)[2:4] == ("P flatbuffer", PRE)


def test_flatbuf_no_identifier_checked():
    fb, _, _ = fb_edit(ident=b"NOPE")
    fb2 = FlatBuffer(fb.src, fb.base, fb.end)
    assert fb2.identifier is None and fb2.name == "flatbuffer"
    assert fb2.root("R").u32(0) == 7


def test_flatbuf_lenient_field_finding():
    """A field past the table's declared size but inside the buffer: read, noted once."""
    def shrink(d, L):
        struct.pack_into("<H", d, L["root_vt"] + 2, 24)  # f7 (offset 32) lies past 24

    fb, L, _n = fb_edit(shrink)
    root = fb.root("Root")
    assert root.f64(7) == 2.5 and root.f64(7) == 2.5
    assert [x.as_dict() for x in fb.findings] == [{
        "severity": "info", "structure": "Root.field7", "offset": PRE + L["f7"],
        "message": "8-byte field at table offset 32 lies past the table's declared size 24 "
                   "(older writers; the FlatBuffers verifier bounds it by the buffer)"}]
    assert root.u32(0) == 7 and len(fb.findings) == 1  # within the size: no finding
    assert root.field_pos(8, 4) == PRE + L["f8"] and len(fb.findings) == 2
    shared = []
    fb2 = FlatBuffer(fb.src, fb.base, fb.end, identifier=b"TEST", name="T", findings=shared)
    fb2.root("Root").f64(7)
    assert fb2.findings is shared and len(shared) == 1


def test_flatbuf_amplification_budget():
    fb, _, n = fb_edit()
    root = fb.root("Root")
    budget = 2 * n + 65536
    assert fb._budget == budget
    fb.charge(budget, "x", 5)
    assert fb._budget == 0
    assert ferr(lambda: fb.charge(1, "what", 77)) == (
        "CorruptError", "what", 77,
        "structures are shared so often that reading them would take more work than the "
        "buffer's size allows (amplification)")
    fb, _L, n = fb_edit()
    root = fb.root("Root")
    root.scalars(2, "i")
    assert fb._budget == budget - 3
    root.tables(8)
    root.strings(9)
    assert fb._budget == budget - 3 - 2 - 2 - 2 - 3  # the strings are vectors too


def test_flatbuf_vtable_cache():
    fb, L, _n = fb_edit()
    root = fb.root("Root")
    vt = PRE + L["root_vt"]
    assert fb._vtables == {vt: (48, tuple(ROOT_FIELDS))}
    root.tables(8)
    assert fb._vtables[PRE + L["sub_vt"]] == (16, (8,))


# =============================================================================================
# workbench._vecfb (the same hand-built buffer, read many tables at once)
# =============================================================================================
def test_vecfb_gather_and_check():
    fb, L, n = fb_edit()
    vec = VecReader(fb)
    assert (vec.base, vec.end) == (PRE, PRE + n)
    pos = np.array([PRE + L["vec"] + 4, PRE + L["vec"] + 8], np.int64)
    assert vec.gather(pos, "<i4").tolist() == [1, 2]
    assert vec.gather(pos + 1, "<u2").tolist() == [0, 0]  # unaligned
    assert vec.gather(np.array([PRE + L["f0"]]), "u1").tolist() == [7]
    odd = np.array([PRE + L["f0"] - 1], np.int64)
    assert vec.gather(odd, "<u4").tolist() == [struct.unpack_from("<I", fb.buf, odd[0])[0]]
    assert vec.gather(np.array([PRE + L["f7"]]), "<f8").tolist() == [2.5]
    vec.check(np.array([PRE, PRE + n - 4]), 4)
    vec.check(np.zeros(0, np.int64), 4)
    for bad in ([PRE - 1], [PRE + n - 3]):
        with pytest.raises(SlowPath, match="position out of bounds"):
            vec.check(np.array(bad), 4)
    with pytest.raises(SlowPath):
        vec.gather(np.array([PRE + n]), "u1")


def test_vecfb_tables_fields_and_refs():
    fb, L, _n = fb_edit()
    vec = VecReader(fb)
    root = fb.root("Root")
    start, cnt = root.vector(8, 4)
    T = vec.table_vector(start, cnt, "kids")
    assert T.pos.tolist() == [PRE + L["sub"], PRE + L["uni"]] and T.inv is None
    assert T.scalar(0, "<i8").tolist() == [42, 99]
    assert T.scalar(1, "<i8", default=-5).tolist() == [-5, -5]
    assert T.field(0, 8).tolist() == [PRE + L["sub"] + 8, PRE + L["uni"] + 8]
    assert T.field(3, 8).tolist() == [0, 0]
    R = vec.tables(np.array([PRE + L["root"]]), "Root")
    assert R.scalar(0, "<u4").tolist() == [7] and R.scalar(7, "<f8").tolist() == [2.5]
    assert R.ref(1).tolist() == [PRE + L["str"]] and R.ref(6).tolist() == [0]
    assert R.vectors(2, 4)[0].tolist() == [PRE + L["vec"] + 4]
    assert R.vectors(2, 4)[1].tolist() == [3]
    assert vec.strings(R.ref(1)).tolist() == ["hello"]
    assert vec.strings(np.array([0, PRE + L["s1"], PRE + L["s2"]])).tolist() == [None, "ab", "xyz"]
    assert vec.strings(np.zeros(2, np.int64)).tolist() == [None, None]
    # two vtables: root + sub
    M = vec.tables(np.array([PRE + L["root"], PRE + L["sub"], PRE + L["root"]]), "mixed")
    assert M.inv.tolist() == [1, 0, 1] or M.inv.tolist() == [0, 1, 0]
    assert M.scalar(0, "<u4").tolist()[0] == 7 and M.scalar(0, "<u4").tolist()[2] == 7
    assert M.field(9, 4).tolist() == [PRE + L["f9"], 0, PRE + L["f9"]]
    E = vec.tables(np.zeros(0, np.int64), "none")
    assert E.scalar(0, "<u4").tolist() == [] and E.field(0, 4).tolist() == []
    assert vec.flat(np.array([PRE + L["vec"] + 4, 0, PRE + L["vec"] + 8]), np.array([3, 0, 2]),
                    "<i4").tolist() == [1, 2, 3, 2, 3]
    assert vec.flat(np.array([0]), np.array([0]), "<i4").tolist() == []


@pytest.mark.parametrize("edit,what,message", [
    (lambda d, L: struct.pack_into("<H", d, L["sub_vt"], 3), "tables", "invalid"),
    (lambda d, L: struct.pack_into("<H", d, L["sub_vt"] + 2, 0xFFF0), "tables",
     "table runs past the end"),
    (lambda d, L: struct.pack_into("<H", d, L["sub_vt"] + 2, 8), "field",
     "field past its table's declared size"),
    (lambda d, L: struct.pack_into("<I", d, L["f1"], 0x10000), "ref",
     "reference points past the end"),
    (lambda d, L: struct.pack_into("<I", d, L["vec"], 2**20), "vectors",
     "vector runs past the end"),
    (lambda d, L: d.__setitem__(L["str"] + 4 + 5, 0x41), "strings", "string is not NUL-terminated"),
    (lambda d, L: d.__setitem__(L["str"] + 4 + 1, 0xFF), "strings", "string is not valid UTF-8"),
    (lambda d, L: d.__setitem__(L["str"] + 4 + 1, 0), "strings", "string holds a NUL"),
])
def test_vecfb_slow_path_reasons(edit, what, message):
    fb, L, _n = fb_edit(edit)
    vec = VecReader(fb)
    with pytest.raises(SlowPath, match=message):
        if what == "tables":
            vec.tables(np.array([PRE + L["sub"]]), "kids")
        elif what == "field":
            vec.tables(np.array([PRE + L["sub"]]), "kids").scalar(0, "<i8")
        else:
            R = vec.tables(np.array([PRE + L["root"]]), "Root")
            if what == "ref":
                R.ref(1)
            elif what == "vectors":
                R.vectors(2, 4)
            else:
                vec.strings(R.ref(1))


def test_vecfb_vectors_charge_the_budget():
    fb, L, _n = fb_edit()
    vec = VecReader(fb)
    R = vec.tables(np.array([PRE + L["root"]]), "Root")
    before = fb._budget
    R.vectors(2, 4)
    assert fb._budget == before - 3
    fb._budget = 2
    with pytest.raises(SlowPath, match="amplification"):
        R.vectors(2, 4)


def test_vecfb_groups_and_unique_tuples():
    for key in (np.array([5, 3, 5, 9]), np.array([0, 2**40, 0, 7]), np.array([-3, -3, 2])):
        rep, inv = _vecfb.groups(key)
        assert key[rep[inv]].tolist() == key.tolist()
        assert len(rep) == len(set(key.tolist()))
        assert sorted(key[rep].tolist()) == sorted(set(key.tolist()))
    assert [x.tolist() for x in _vecfb.groups(np.zeros(0, np.int64))] == [[], []]
    rep, inv = _vecfb.groups(np.array([4, 1, 4]))
    assert inv.tolist() == [1, 0, 1]
    rep, inv = _vecfb.groups(np.array([2**40, 1, 2**40]))
    assert inv.tolist() == [1, 0, 1] and rep.tolist()[0] == 1
    t, i, u = _vecfb.unique_tuples(np.array([2, 3, 2, 3, 7]), np.array([2, 2, 1]))
    assert t.tolist() == [(2, 3), (2, 3), (7,)] and i.tolist() == [1, 1, 0] and u == [(7,), (2, 3)]
    assert t[0] is t[1]
    t, i, u = _vecfb.unique_tuples(np.array([1, 2, 1, 2]), np.array([2, 0, 2]))
    assert t.tolist() == [(1, 2), (), (1, 2)] and u == [(), (1, 2)] and i.tolist() == [1, 0, 1]
    t, i, u = _vecfb.unique_tuples(np.array([5, 2**40, 5, 1]), np.array([2, 2]))
    assert t.tolist() == [(5, 2**40), (5, 1)] and len(u) == 2 and i[0] != i[1]
    t, i, u = _vecfb.unique_tuples(np.array([1, 2, 2, 1]), np.array([2, 2]))
    assert t.tolist() == [(1, 2), (2, 1)] and i[0] != i[1]
    t, i, u = _vecfb.unique_tuples(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert t.tolist() == [] and i.tolist() == [] and u == []
    t, i, u = _vecfb.unique_tuples(np.zeros(0, np.int64), np.zeros(3, np.int64))
    assert t.tolist() == [(), (), ()] and i.tolist() == [0, 0, 0] and u == [()]


# =============================================================================================
# workbench.formats.pte.header (files built with struct.pack; programs at 0 and embedded)
# =============================================================================================
def _eh(length=32, program_size=64, base=128, data=None, magic=b"eh00") -> bytes:
    out = magic + struct.pack("<IQQ", length, program_size, base)
    if length > 24:
        out += struct.pack("<Q", 0 if data is None else data)
    return out


def _program_file(tmp_path, body: bytes, start: int, total: int | None = None):
    raw = b"\xaa" * start + b"\x00\x00\x00\x00" + body
    if total is not None:
        raw += b"\xbb" * (total - len(raw))
    p = tmp_path / "h.pte"
    p.write_bytes(raw)
    return p


@pytest.mark.parametrize("start", [0, 16])
def test_read_header_identifier(tmp_path, start):
    read = pte_header.read_header
    for ident, expected in (
            (b"ET13", ("UnsupportedVersionError", "h.pte", "file identifier", start + 4,
                       "program version b'ET13' is not supported (expected b'ET12')")),
            (b"EU12", ("CorruptError", "h.pte", "file identifier", start + 4,
                       "file identifier is b'EU12', expected b'ET12'")),
            (b"XT12", ("CorruptError", "h.pte", "file identifier", start + 4,
                       "file identifier is b'XT12', expected b'ET12'"))):
        p = _program_file(tmp_path, ident + bytes(8), start)
        with Source(p) as s:
            assert raises(read, s, start, s.size) == expected
    p = _program_file(tmp_path, b"ET12" + bytes(8), start)
    with Source(p) as s:
        for n in (0, 7):
            assert raises(read, s, start, start + n) == (
                "TruncatedError", "h.pte", "program header", start,
                f"{n} bytes is too short for a program (needs 8)")
        for n in (8, 11, 12):  # no room for (or no) extended header
            assert read(s, start, start + n) == (None, n, None, 0)


@pytest.mark.parametrize("start", [0, 16])
def test_read_header_valid(tmp_path, start):
    read = pte_header.read_header
    p = _program_file(tmp_path, b"ET12" + _eh(32, 64, 128, 72), start, start + 200)
    with Source(p) as s:
        span = read(s, start, start + 200)
        eh = span.header
        assert (eh.length, eh.program_size, eh.segment_base_offset, eh.segment_data_size) == (
            32, 64, 128, 72)
        assert span[1:] == (64, start + 128, 72)
        assert repr(eh) == ("ExtendedHeader(length=32, program_size=64, segment_base_offset=128, "
                            "segment_data_size=72)")
        assert eh.OFFSET == 8 and eh.EXPECTED_MAGIC == b"eh00"
        assert read(s, start, start + 201)[1:] == (64, start + 128, 72)
    # the limits, each exactly met
    for body, total, want in (
            (_eh(32, 200, 200, 0), 200, (200, start + 200, 0)),  # base == size == program_size
            (_eh(32, 40, 128, 72), 200, (40, start + 128, 72)),  # the smallest program_size
            (_eh(24, 32, 100), 200, (32, start + 100, 100)),  # no segment_data_size: the rest
            (_eh(56, 64, 64, 3), 200, (64, start + 64, 3)),  # length == program_size - 8
            (_eh(32, 64, 0), 200, (64, None, 0)),  # no segments
    ):
        p = _program_file(tmp_path, b"ET12" + body, start, start + total)
        with Source(p) as s:
            span = read(s, start, start + total)
            assert span[1:] == want, body
    p = _program_file(tmp_path, b"ET12" + _eh(24, 32, 100), start, start + 200)
    with Source(p) as s:
        assert read(s, start, start + 200).header.segment_data_size is None
    p = _program_file(tmp_path, b"ET12" + b"eh01" + bytes(28), start, start + 100)
    with Source(p) as s:
        assert read(s, start, start + 100) == (None, 100, None, 0)


@pytest.mark.parametrize("start", [0, 16])
@pytest.mark.parametrize("body,total,expected", [
    (_eh(23, 64, 128, 1), 200, ("CorruptError", "extended header (eh00)", 12,
                                "length 23 is shorter than the minimum 24")),
    (_eh(0, 64, 128, 1), 200, ("CorruptError", "extended header (eh00)", 12,
                               "length 0 is shorter than the minimum 24")),
    (_eh(32, 201, 128, 1), 200, ("OutOfBoundsError", "extended header (eh00) program_size", 16,
                                 "program_size 0xc9 is outside the file (size 0xc8)")),
    (_eh(32, 39, 128, 1), 200, ("OutOfBoundsError", "extended header (eh00) program_size", 16,
                                "program_size 39 is smaller than the header itself")),
    (_eh(24, 31, 128), 200, ("OutOfBoundsError", "extended header (eh00) program_size", 16,
                             "program_size 31 is smaller than the header itself")),
    (_eh(57, 64, 128, 1), 200, ("CorruptError", "extended header (eh00) length", 12,
                                "length 57 runs past program_size 64")),
    (_eh(32, 64, 63, 1), 200, ("OutOfBoundsError", "extended header (eh00) segment_base_offset", 24,
                               "segment_base_offset 0x3f lies inside the program flatbuffer")),
    (_eh(32, 64, 201, 0), 200, ("OutOfBoundsError", "extended header (eh00) segment_base_offset",
                                24, "segment_base_offset 0xc9 lies past the end of the file "
                                    "(size 0xc8)")),
    (_eh(32, 64, 128, 73), 200, ("TruncatedError", "extended header (eh00) segment_data_size", 32,
                                 "segment data (0x80 + 0x49) runs past the end of the file "
                                 "(size 0xc8)")),
])
def test_read_header_errors(tmp_path, start, body, total, expected):
    p = _program_file(tmp_path, b"ET12" + body, start, start + total)
    with Source(p) as s:
        cls, structure, off, detail = expected
        assert raises(pte_header.read_header, s, start, start + total) == (
            cls, "h.pte", structure, start + off, detail)


def test_extended_header_read_truncated(tmp_path):
    p = _program_file(tmp_path, b"ET12eh00" + struct.pack("<I", 32) + bytes(10), 0)
    with Source(p) as s:
        assert raises(pte_header.ExtendedHeader.read, s) == (
            "TruncatedError", "h.pte", "extended header (eh00)", 8,
            f"32 bytes run past the end (size 0x{s.size:x})")
    p = _program_file(tmp_path, b"ET12eh0", 0)
    with Source(p) as s:
        assert pte_header.ExtendedHeader.read(s) is None
    p = _program_file(tmp_path, b"ET12eh00" + struct.pack("<I", 24) + bytes(16), 0)
    with Source(p) as s:
        eh = pte_header.ExtendedHeader.read(s)
        assert (eh.length, eh.segment_data_size) == (24, None)
    p = _program_file(tmp_path, b"ET12eh00" + struct.pack("<I", 100) + bytes(24), 0)
    with Source(p) as s:  # a long header: only its first 32 bytes need to be there
        assert pte_header.ExtendedHeader.read(s).length == 100


# =============================================================================================
# workbench.formats.pte.tensors: placement rules (TensorReader.place), both paths
# =============================================================================================
class _T:
    """A stand-in for the Tensor table of the scalar path (place() reads .path and .pos)."""
    path = "P.values[3].val"
    pos = 0x123


def _reader(**kw):
    from workbench.formats.pte.tensors import Span, Subsegment, TensorReader

    args = dict(file="/x/m.pte", end=1000, vec=None,
                constant_segment=Subsegment(2, [0, 16, 64], 100),
                constant_buffer=[Span(0, 0), Span(500, 12)],
                mutable_segments=[Subsegment(1, [0, 8], 300), Subsegment(0, [0, 0, 40], 600)])
    args.update(kw)
    conv = {"constant_segment": lambda v: v if v is None or (isinstance(v, tuple) and hasattr(
        v, "base")) else Subsegment(*v)}
    for k, f in conv.items():
        args[k] = f(args[k])
    args["constant_buffer"] = [Span(*s) for s in args["constant_buffer"]]
    args["mutable_segments"] = [Subsegment(*s) for s in args["mutable_segments"]]
    return TensorReader(**args)


def _place(reader, *a, scalar=True):
    return reader.place(*a, _T() if scalar else None)


# (code, sizes, dbi, mem_id, mem_off, location, mutable_idx) -> Placement
@pytest.mark.parametrize("args,want", [
    ((6, (2, 3), 1, None, None, 0, None), (24, "segment", 116, 2)),
    ((6, (2, 3), 2, None, None, 0, None), (24, "segment", 164, 2)),
    ((4, (), 2, None, None, 0, None), (8, "segment", 164, 2)),
    ((6, (2, 3), 0, None, None, 0, None), (24, "unallocated", None, None)),
    ((6, (2, 3), 0, 1, 64, 0, None), (24, "planned", None, None)),
    ((6, (2, 3), 1, 1, 64, 0, None), (24, "mutable", 308, 1)),
    ((6, (2, 3), 1, 1, 64, 0, 0), (24, "mutable", 308, 1)),
    ((6, (2, 3), 2, 1, 64, 0, 1), (24, "mutable", 640, 0)),
    ((6, (2, 3), 2, None, None, 1, None), (24, "external", None, None)),
    ((6, (2, 3), 0, 1, 64, 1, 5), (24, "external", None, None)),
    ((0, (0, 5), 1, None, None, 0, None), (0, "segment", 116, 2)),
    ((6, (2, 3), 0, 1, 2**62 - 1, 0, None), (24, "planned", None, None)),
])
def test_place(args, want):
    r = _reader()
    for scalar in (True, False):
        assert tuple(_place(r, *args, scalar=scalar)) == want


def test_place_inline_and_no_mutable_segments():
    r = _reader(constant_segment=None, mutable_segments=[])
    assert tuple(_place(r, 1, (12,), 1, None, None, 0, None)) == (12, "inline", 500, None)
    assert tuple(_place(r, 6, (2, 3), 1, 0, 8, 0, 3)) == (24, "planned", None, None)
    r = _reader(constant_segment=(2, [], 100))  # a constant segment without offsets: inline
    assert tuple(_place(r, 1, (12,), 1, None, None, 0, None)) == (12, "inline", 500, None)


@pytest.mark.parametrize("kw,args,want", [
    ({}, (6, (2**31, 2**31, 2), 0, None, None, 0, None),
     ("CorruptError", "P.values[3].val.sizes",
      f"sizes [2147483648, 2147483648, 2] claim {2**65} bytes")),
    ({}, (6, (2, 3), 0, 0, 2**62, 0, None),
     ("CorruptError", "P.values[3].val.allocation_info",
      f"memory offset 0x{2**62:x} is beyond any possible arena")),
    ({}, (6, (2, 3), 1, 0, 0, 0, 2),
     ("OutOfBoundsError", "P.values[3].val.extra_tensor_info",
      "mutable_data_segments_idx 2 is out of range (2 entries)")),
    ({}, (6, (2, 3), 2, 0, 0, 0, 0),
     ("OutOfBoundsError", "P.values[3].val.data_buffer_idx",
      "data_buffer_idx 2 is out of range (2 mutable_data_segments offsets)")),
    ({}, (6, (2, 3), 3, None, None, 0, None),
     ("OutOfBoundsError", "P.values[3].val.data_buffer_idx",
      "data_buffer_idx 3 is out of range (3 constant_segment offsets)")),
    ({"constant_segment": None}, (6, (2, 3), 2, None, None, 0, None),
     ("OutOfBoundsError", "P.values[3].val.data_buffer_idx",
      "data_buffer_idx 2 is out of range (2 constant buffers)")),
    ({"end": 663}, (6, (2, 3), 2, 1, 0, 0, 1),
     ("OutOfBoundsError", "P.values[3].val data",
      "24 bytes of tensor data at 0x280 run past the end of the file (size 0x297)")),
    ({"end": 187}, (6, (2, 3), 2, None, None, 0, None),
     ("OutOfBoundsError", "P.values[3].val data",
      "24 bytes of tensor data at 0xa4 run past the end of the file (size 0xbb)")),
])
def test_place_errors(kw, args, want):
    r = _reader(**kw)
    cls, structure, detail = want
    data = structure.endswith(" data")
    e = raises(_place, r, *args)
    off = e[3]
    assert e == (cls, "m.pte", structure, off if data else 0x123, detail)
    with pytest.raises(SlowPath) as ei:  # the fast path: the same text, for the scalar path
        _place(r, *args, scalar=False)
    at = f" at 0x{off:x}" if data else ""
    assert str(ei.value) == f"m.pte: {structure.replace('P.values[3].val', 'Tensor')}{at}: {detail}"


def test_place_error_offsets():
    r = _reader(end=187)
    assert raises(_place, r, 6, (2, 3), 2, None, None, 0, None)[3] == 164
    assert raises(_place, r, 6, (2, 3), 3, None, None, 0, None)[3] == 0x123
    r = _reader(constant_segment=None)
    assert raises(_place, r, 1, (13,), 1, None, None, 0, None) == (
        "OutOfBoundsError", "m.pte", "Program.constant_buffer[1]", 500,
        "13 bytes of tensor data do not fit the 12-byte buffer")
    r = _reader(constant_segment=None, end=511)
    assert raises(_place, r, 1, (12,), 1, None, None, 0, None)[2:] == (
        "P.values[3].val data", 500,
        "12 bytes of tensor data at 0x1f4 run past the end of the file (size 0x1ff)")
    assert tuple(_reader(constant_segment=None, end=512).place(1, (12,), 1, None, None, 0,
                                                               None, None)) == (
        12, "inline", 500, None)


# =============================================================================================
# .pte programs: frames against ExecuTorch's reading, on both paths; programs edited with
# ExecuTorch's own schema and serializer (tests/variants.py)
# =============================================================================================
SAMPLES = pathlib.Path(__file__).resolve().parents[1] / "sample_models"
PTE_SAMPLES = sorted(p.name for p in SAMPLES.glob("*.pte"))


def frames_both(path, monkeypatch, names=None) -> dict:
    """The frames of ``path`` read on the fast and on the scalar path: asserted equal."""
    from test_pte_paths import assert_same_frames


    out = []
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        art = wb.open(path, data=[])
        try:
            out.append({n: art.frames[n] for n in (names or art.frames)})
        finally:
            art.close()
    assert_same_frames(out[0], out[1], str(path))
    return out[0]


def open_error_both(path, monkeypatch) -> tuple:
    """The error opening ``path`` gives on both paths (asserted equal)."""

    got = []
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        got.append(raises(lambda: wb.open(path, data=[]).frames["tensors"]))
    assert got[0] == got[1]
    return got[0]


@pytest.fixture(scope="module")
def et():
    pytest.importorskip("executorch.exir._serialize._program",
                        reason="executorch (the oracle) is not installed")
    import variants
    from executorch.exir import schema

    return schema, variants


def build(et, tmp_path, edit, sample="mlp_portable.pte", name="built.pte"):
    """``sample`` taken apart by ExecuTorch, ``edit(program, blobs)`` applied (it may return new
    blobs), written again with ExecuTorch's serializer."""
    _, variants = et
    program, blobs = variants.split((SAMPLES / sample).read_bytes())
    new = edit(program, blobs)
    p = tmp_path / name
    p.write_bytes(variants.assemble(program, blobs if new is None else new))
    return p


def _storage_of(oracle, prog, t) -> str:
    if prog.is_external(t):
        return "external"
    if t.allocation_info is not None:
        return "mutable" if t.data_buffer_idx and prog.program.mutable_data_segments else "planned"
    if not t.data_buffer_idx:
        return "unallocated"
    cs = prog.program.constant_segment
    return "segment" if cs is not None and cs.offsets else "inline"


def expected_summary(oracle, prog, ev) -> str:
    """The values frame's summary text of one EValue (the documented rendering)."""
    v = ev.val
    kind = type(v).__name__
    if kind == "Int":
        return str(v.int_val)
    if kind == "Bool":
        return str(bool(v.bool_val))
    if kind == "Double":
        return repr(float(v.double_val))
    if kind == "String":
        s = v.string_val
        return repr(s[:60] + ("..." if len(s) > 60 else ""))
    if kind == "Tensor":
        shape = "x".join(str(d) for d in v.sizes) or "scalar"
        return f"{oracle.dtype_name(v.scalar_type)}[{shape}] {_storage_of(oracle, prog, v)}"
    if kind in ("IntList", "DoubleList", "BoolList", "TensorList", "OptionalTensorList"):
        items = list(v.items)
        show = {"BoolList": lambda x: str(bool(x)), "DoubleList": lambda x: repr(float(x))}.get(
            kind, str)
        body = ", ".join(show(x) for x in items[:16])
        return f"[{body}{f', ... ({len(items)} items)' if len(items) > 16 else ''}]"
    return ""


VALUE_TYPE_NAMES = {"Null": "Null", "Int": "Int", "Bool": "Bool", "Double": "Double",
                    "Tensor": "Tensor", "String": "String", "IntList": "IntList",
                    "DoubleList": "DoubleList", "BoolList": "BoolList",
                    "TensorList": "TensorList", "OptionalTensorList": "OptionalTensorList"}


def _constant_value(plan):
    """What a method without instructions returns, from the oracle's values: the output's
    Python value (a tuple for a list), a tuple of them for several outputs."""
    out = []
    for v in plan.outputs:
        val = plan.values[v].val if 0 <= v < len(plan.values) else None
        kind = type(val).__name__
        if kind in ("Int", "Bool", "Double", "String"):
            out.append(getattr(val, {"Int": "int_val", "Bool": "bool_val", "Double": "double_val",
                                     "String": "string_val"}[kind]))
        elif kind in ("IntList", "DoubleList", "BoolList"):
            out.append(tuple(val.items))
        else:
            out.append(None)
    return out[0] if len(out) == 1 else tuple(out)


def check_program_frames(frames, oracle, path):
    """methods, values, operators and delegates frames: every column, from the oracle."""
    prog = oracle.read(path)
    plans = prog.program.execution_plan
    methods = frames["methods"]
    assert list(methods["method"]) == [p.name for p in plans]
    assert list(methods["index"]) == list(range(len(plans)))
    for k, plan in enumerate(plans):
        row = methods.iloc[k]
        ins = [i for c in plan.chains for i in c.instructions]
        kinds = [type(i.instr_args).__name__ for i in ins]
        tensors = [ev.val for ev in plan.values if type(ev.val).__name__ == "Tensor"]
        constant = sum(prog.nbytes(t) for t in tensors
                       if _storage_of(oracle, prog, t) in ("segment", "inline", "external"))
        sizes = list(plan.non_const_buffer_sizes)
        assert {c: row[c] for c in methods.columns} == {
            "method": plan.name, "index": k, "values": len(plan.values), "tensors": len(tensors),
            "inputs": len(plan.inputs), "outputs": len(plan.outputs), "chains": len(plan.chains),
            "instructions": len(ins), "kernel_calls": kinds.count("KernelCall"),
            "delegate_calls": kinds.count("DelegateCall"), "operators": len(plan.operators),
            "delegates": len(plan.delegates), "planned_buffers": max(len(sizes) - 1, 0),
            "planned_bytes": sum(sizes[1:]), "constant_bytes": constant,
            "constant_method": len(ins) == 0,
            "constant_value": _constant_value(plan) if not ins else None}, (path.name, plan.name)
    values = frames["values"]
    want = [(p.name, v, type(ev.val).__name__, expected_summary(oracle, prog, ev),
             v in p.inputs, v in p.outputs) for p in plans for v, ev in enumerate(p.values)]
    got = list(zip(values["method"].astype(object), values["value"], values["type"].astype(object),
                   values["summary"], values["is_input"], values["is_output"]))
    assert got == want
    assert list(values.columns) == ["method", "value", "type", "summary", "is_input", "is_output"]
    ops = frames["operators"]
    want = []
    for p in plans:
        uses = [i.instr_args.op_index for c in p.chains for i in c.instructions
                if type(i.instr_args).__name__ == "KernelCall"]
        for k, o in enumerate(p.operators):
            want.append((p.name, k, o.name, o.overload or "",
                         f"{o.name}.{o.overload}" if o.overload else o.name, uses.count(k)))
    assert [tuple(r) for r in ops[["method", "index", "name", "overload", "op", "uses"]]
            .itertuples(index=False)] == want
    dels = frames["delegates"]
    want = []
    for p in plans:
        calls = [i.instr_args.delegate_index for c in p.chains for i in c.instructions
                 if type(i.instr_args).__name__ == "DelegateCall"]
        for k, d in enumerate(p.delegates):
            ref = d.processed
            if int(ref.location) == 1:
                off, size = prog.segment_abs(ref.index)
                loc = "segment"
            else:
                loc, off, size = "inline", None, len(prog.program.backend_delegate_data[ref.index].data)
            want.append((p.name, k, d.id, loc, ref.index, size, ", ".join(s.key for s in d.compile_specs),
                         calls.count(k), off))
    got = [(r.method, r.index, r.id, r.location, r.data_index, r.size, r.compile_specs, r.calls,
            r.offset if r.location == "segment" else None) for r in dels.itertuples(index=False)]
    assert got == want
    for r in dels.itertuples(index=False):
        assert r.file == str(path) and r.align == _align_of(r.offset)
        if r.location == "inline":
            assert bytes(pathlib.Path(path).read_bytes()[r.offset:r.offset + r.size]) == bytes(
                prog.program.backend_delegate_data[r.data_index].data)


def _align_of(off: int) -> int:
    return off & -off if off else 1 << 62


@pytest.mark.parametrize("name", PTE_SAMPLES)
def test_program_frames_match_the_oracle(name, oracle, monkeypatch):
    path = SAMPLES / name
    frames = frames_both(path, monkeypatch, ["methods", "values", "operators", "delegates"])
    check_program_frames(frames, oracle, path)


@pytest.mark.parametrize("variant", ["inline_delegate", "two_mutable", "inline_constant_buffer"])
def test_variant_frames_match_the_oracle(variant, pte_variant, oracle, monkeypatch):
    path = pte_variant(variant)
    frames = frames_both(path, monkeypatch, ["methods", "values", "operators", "delegates"])
    check_program_frames(frames, oracle, path)


def _extra_values(S):
    long = "é" * 61
    return [S.EValue(S.Int(-7)), S.EValue(S.Int(2**40)), S.EValue(S.Int(-7)),
            S.EValue(S.Bool(True)), S.EValue(S.Bool(False)), S.EValue(S.Double(0.0)),
            S.EValue(S.Double(-0.0)), S.EValue(S.Double(0.1)), S.EValue(S.Double(-2.5e300)),
            S.EValue(S.String("")), S.EValue(S.String("a" * 60)), S.EValue(S.String("b" * 61)),
            S.EValue(S.String(long)), S.EValue(S.String("q'\"\n")), S.EValue(S.Null()),
            S.EValue(S.IntList([])), S.EValue(S.IntList(list(range(16)))),
            S.EValue(S.IntList(list(range(100, 117)))), S.EValue(S.IntList([-1, 2**40])),
            S.EValue(S.DoubleList([0.5, -0.0, 1e-300])), S.EValue(S.DoubleList([0.25] * 17)),
            S.EValue(S.BoolList([True, False, True])), S.EValue(S.BoolList([False] * 20)),
            S.EValue(S.TensorList([0, 1])), S.EValue(S.OptionalTensorList([0, -1, 2])),
            S.EValue(S.TensorList(list(range(18))))]


def test_value_summaries(et, tmp_path, oracle, monkeypatch):
    S, _ = et

    def edit(program, blobs):
        program.execution_plan[0].values.extend(_extra_values(S))

    path = build(et, tmp_path, edit)
    frames = frames_both(path, monkeypatch, ["methods", "values", "operators", "delegates"])
    check_program_frames(frames, oracle, path)
    summary = frames["values"]["summary"].tolist()
    assert summary[-26:-20] == ["-7", "1099511627776", "-7", "True", "False", "0.0"]
    assert summary[-18] == "-2.5e+300" and summary[-19] == "0.1"
    assert summary[-17:-13] == ["''", repr("a" * 60), repr("b" * 60 + "..."), repr("é" * 60 + "...")]
    assert summary[-11] == "[]" and summary[-9] == "[100, 101, 102, 103, 104, 105, 106, 107, 108, " \
        "109, 110, 111, 112, 113, 114, 115, ... (17 items)]"
    assert summary[-4] == "[False, False, False, False, False, False, False, False, False, False, " \
        "False, False, False, False, False, False, ... (20 items)]"
    assert summary[-7] in ("[0.5, -0.0, 1e-300]", "[0.5, 0.0, 1e-300]")  # the writer's sign of 0


def _frames_walks(path, monkeypatch, names):
    """``frames_both`` with the instruction walk vectorised and per instruction (equal)."""
    from test_pte_paths import assert_same_frames

    from workbench.formats.pte import instructions

    a = frames_both(path, monkeypatch, names)
    with monkeypatch.context() as m:
        m.setattr(instructions.InstructionColumns, "_walk", lambda self, mi: None)
        b = frames_both(path, monkeypatch, names)
    assert_same_frames(a, b, f"{path} (walks)")
    return a


def _instruction_program(S):
    """mlp_portable plus a method with no values and no chains, and one with every
    instruction kind (Move, JumpFalse, Free, a kernel call, a delegate call of no delegate)."""

    def edit(program, blobs):
        base = program.execution_plan[0]
        meta = base.container_meta_type
        program.execution_plan.append(S.ExecutionPlan(
            name="empty", container_meta_type=meta, values=[], inputs=[], outputs=[], chains=[],
            operators=[], delegates=[], non_const_buffer_sizes=[]))
        ins = [S.Instruction(S.MoveCall(0, 1)), S.Instruction(S.JumpFalseCall(2, 4)),
               S.Instruction(S.FreeCall(1)), S.Instruction(S.KernelCall(1, [0, 2, 3])),
               S.Instruction(S.DelegateCall(0, [3, 0]))]
        program.execution_plan.append(S.ExecutionPlan(
            name="kinds", container_meta_type=meta,
            values=[S.EValue(S.Int(1)), S.EValue(S.Int(2)), S.EValue(S.Bool(True)),
                    S.EValue(S.Null())],
            inputs=[0], outputs=[3],
            chains=[S.Chain(inputs=[], outputs=[], instructions=ins[:3], stacktrace=None),
                    S.Chain(inputs=[], outputs=[], instructions=[], stacktrace=None),
                    S.Chain(inputs=[], outputs=[], instructions=ins[3:], stacktrace=None)],
            operators=[S.Operator("aten::add", "out"), S.Operator("aten::relu", "")],
            delegates=[], non_const_buffer_sizes=[0, 16]))

    return edit


INS_COLUMNS = ["method", "chain", "instruction", "position", "kind", "op_index", "op", "operator",
               "overload", "delegate_index", "delegate", "args", "reads", "writes",
               "alias_source", "destination", "table_offset"]


def test_instruction_kinds_and_empty_methods(et, tmp_path, oracle, monkeypatch):
    S, _ = et
    path = build(et, tmp_path, _instruction_program(S))
    frames = _frames_walks(path, monkeypatch, ["methods", "values", "operators", "delegates",
                                                "instructions", "lifetimes", "memory_efficiency"])
    check_program_frames(frames, oracle, path)
    ins = frames["instructions"]
    assert list(ins.columns) == INS_COLUMNS
    assert str(ins["table_offset"].dtype) == "int64"
    kinds = ins[ins["method"] == "kinds"]
    assert kinds["chain"].tolist() == [0, 0, 0, 2, 2]
    assert kinds["instruction"].tolist() == [0, 1, 2, 0, 1]
    assert kinds["position"].tolist() == [0, 1, 2, 3, 4]
    assert kinds["kind"].astype(str).tolist() == ["move", "jump_false", "free", "kernel", "delegate"]
    assert kinds["op_index"].tolist()[3] == 1 and kinds["op_index"].isna().tolist() == [
        True, True, True, False, True]
    assert kinds["op"].tolist()[3] == "aten::relu" and kinds["operator"].tolist()[3] == "aten::relu"
    assert kinds["overload"].tolist()[3] == ""
    assert kinds["delegate_index"].tolist()[4] == 0 and kinds["delegate"].isna().all()
    assert kinds["args"].tolist() == [(0, 1), (2,), (1,), (0, 2, 3), (3, 0)]
    assert kinds["destination"].isna().tolist() == [True, False, True, True, True]
    assert kinds["destination"].tolist()[1] == 4
    assert kinds["reads"].tolist()[:3] == [(0,), (2,), ()]
    assert kinds["writes"].tolist()[:3] == [(1,), (), ()]
    # which rule split the arguments: none for move/jump/free; aten::relu (no overload) is not
    # in the operator table: a guess, said so
    alias = kinds["alias_source"].astype(object).tolist()
    assert [a is pd.NA or a is None or a != a for a in alias[:3]] == [True] * 3
    assert alias[3].startswith("guessed: ") and alias[4] == "delegate: trailing outputs"
    # the Instruction tables, found with the verifying reader
    with Source(path) as s:
        fb = FlatBuffer(s, 0, s.size, identifier=b"ET12", name="Program")
        plan = fb.root("Program").tables(1)[2]
        want = [i.pos for c in plan.tables(5) for i in c.tables(2)]
    assert kinds["table_offset"].tolist() == want
    methods = frames["methods"].set_index("method")
    assert methods.loc["empty", "constant_method"] and methods.loc["empty", "values"] == 0
    assert methods.loc["kinds", "planned_buffers"] == 1 and methods.loc["kinds", "planned_bytes"] == 16


def test_method_internals_have_documented_dtypes(et, tmp_path, monkeypatch):
    """The records of every method (with and without tensors or values) on both paths."""

    S, _ = et
    path = build(et, tmp_path, _instruction_program(S))
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        with wb.open(path, data=[]) as art:
            cols = art._parsed.builders["values"].__self__
            icols = art._parsed.builders["instructions"].__self__
            for m, rec in zip(cols.r.methods, icols.records):
                assert m.vtypes.dtype == np.int64 and m.vpos.dtype == np.int64, (fast, m.name)
                t = m.tensors
                for name in ("value", "scalar_type", "shape_id", "nbytes", "offset", "segment",
                             "data_buffer_idx", "mem_id", "mem_offset", "shape_dynamism"):
                    assert getattr(t, name).dtype == np.int64, (fast, m.name, name)
                assert t.storage.dtype == np.int8 and t.requires_grad.dtype == np.bool_
                for name in ("fqn", "shape", "dim_order"):
                    assert getattr(t, name).dtype == object
                for name in ("chain", "instruction", "kind", "index", "flat", "count",
                             "destination", "table_offset"):
                    assert getattr(rec, name).dtype == np.int64, (fast, m.name, name)
                assert len(rec.args) == len(rec.count)


# =============================================================================================
# .ptd: FlatTensor files written here with the flatbuffers package's Builder (every field
# under control), read on both paths
# =============================================================================================
def _fb_vector(b, items, prepend, elem_size, align=None):
    b.StartVector(elem_size, len(items), align or elem_size)
    for x in reversed(items):
        prepend(x)
    return b.EndVector()


def _layout_table(b, layout):
    code, sizes, dims = layout
    sv = _fb_vector(b, list(sizes), b.PrependInt32, 4)
    dv = _fb_vector(b, list(dims), b.PrependUint8, 1)
    b.StartObject(3)
    b.PrependInt8Slot(0, code, 0)
    b.PrependUOffsetTRelativeSlot(1, sv, 0)
    b.PrependUOffsetTRelativeSlot(2, dv, 0)
    return b.EndObject()


def ptd_bytes(segments, named, *, v0_tensors=None, data_size=None, base_pad=0) -> bytes:
    """A .ptd: ``segments`` = [(offset, size)] in the segment data, ``named`` = [(key,
    segment_index, layout or None)] with layout (code, sizes, dim_order); with ``v0_tensors``
    = [(fqn, code, sizes, dims, segment_index, offset)] the earlier schema's root."""
    import flatbuffers

    b = flatbuffers.Builder(0)
    nd_offs = []
    for key, si, layout in named:
        k = b.CreateString(key)
        lay = _layout_table(b, layout) if layout is not None else None
        b.StartObject(3)
        b.PrependUOffsetTRelativeSlot(0, k, 0)
        b.PrependUint32Slot(1, si, 0)
        if lay is not None:
            b.PrependUOffsetTRelativeSlot(2, lay, 0)
        nd_offs.append(b.EndObject())
    seg_offs = []
    for off, size in segments:
        b.StartObject(2)
        b.PrependUint64Slot(0, off, 0)
        b.PrependUint64Slot(1, size, 0)
        seg_offs.append(b.EndObject())
    t_offs = []
    for fqn, code, sizes, dims, si, off in v0_tensors or ():
        k = b.CreateString(fqn)
        sv = _fb_vector(b, list(sizes), b.PrependInt32, 4)
        dv = _fb_vector(b, list(dims), b.PrependUint8, 1)
        b.StartObject(6)
        b.PrependUOffsetTRelativeSlot(0, k, 0)
        b.PrependInt8Slot(1, code, 0)
        b.PrependUOffsetTRelativeSlot(2, sv, 0)
        b.PrependUOffsetTRelativeSlot(3, dv, 0)
        b.PrependInt32Slot(4, si, 0)
        b.PrependUint64Slot(5, off, 0)
        t_offs.append(b.EndObject())
    segv = _fb_vector(b, seg_offs, b.PrependUOffsetTRelative, 4)
    ndv = _fb_vector(b, nd_offs, b.PrependUOffsetTRelative, 4)
    if v0_tensors is None:
        b.StartObject(3)
        b.PrependUint32Slot(0, 0, 1)  # version 0 (stored: not the default)
        b.PrependUOffsetTRelativeSlot(1, segv, 0)
        b.PrependUOffsetTRelativeSlot(2, ndv, 0)
    else:
        tv = _fb_vector(b, t_offs, b.PrependUOffsetTRelative, 4)
        b.StartObject(5)
        b.PrependUint32Slot(0, 0, 1)
        b.PrependUint32Slot(1, 16, 0)
        b.PrependUOffsetTRelativeSlot(2, tv, 0)
        b.PrependUOffsetTRelativeSlot(3, segv, 0)
        b.PrependUOffsetTRelativeSlot(4, ndv, 0)
    b.Finish(b.EndObject(), file_identifier=b"FT01")
    fb = bytes(b.Output())
    # the FH01 header (40 bytes, padded to 48) inserted after the root offset and identifier,
    # as ExecuTorch writes it: flatbuffer_offset is the padded header length,
    # flatbuffer_size the flatbuffer's own length
    (root,) = struct.unpack_from("<I", fb, 0)
    body = fb[8:]
    seg_data = max([o + s for o, s in segments] + [0]) if data_size is None else data_size
    out = struct.pack("<I", root + 48) + b"FT01"
    end = 56 + len(body)
    base = -(-end // 16) * 16 + base_pad
    out += b"FH01" + struct.pack("<IQQQQ", 40, 48, len(fb), base, seg_data) + bytes(8) + body
    out += bytes(base - len(out))
    data = bytearray(seg_data)
    for k, (off, size) in enumerate(segments):
        data[off:off + size] = bytes((k * 16 + j) % 251 for j in range(max(0, min(size, seg_data - off))))
    return out + bytes(data)


def _lowbit(off: int):
    return off & -off if off > 0 else None


def _nullable(values) -> list:
    return [None if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v
            for v in values]


def ptd_frames_both(path, monkeypatch) -> dict:
    from test_pte_paths import assert_same_frames


    out = []
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        with wb.open(path) as art:
            out.append({n: art.frames[n] for n in ("segments", "tensors", "named_data")})
            findings = list(art._parsed.findings)
            info = dict(art.info)
    assert_same_frames(out[0], out[1], str(path))
    out[0]["findings"] = findings
    out[0]["info"] = info
    return out[0]


def ptd_error_both(path, monkeypatch) -> tuple:
    got = []
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        got.append(raises(lambda: wb.open(path).frames["tensors"]))
    assert got[0] == got[1]
    return got[0]


def expected_ptd(path, data: bytes, segments, named) -> dict:
    """The three frames of a .ptd built by :func:`ptd_bytes`, from what was put in."""
    from workbench.dtypes import SCALAR_TYPES
    from workbench.formats._layout import named_data_role

    fb_size, base = struct.unpack_from("<QQ", data, 24)
    abs_seg = [(base + o, s) for o, s in segments]
    nd, ten = [], []
    for key, si, layout in named:
        off, size = abs_seg[si]
        if layout is None:
            role, dtype, shape, nbytes, dims = named_data_role(key), "uint8", (size,), size, (0,)
        else:
            code, sizes, dims = layout
            role, dtype, shape, dims = "tensor", SCALAR_TYPES[code].name, tuple(sizes), tuple(dims)
            nbytes = math.prod(sizes) * SCALAR_TYPES[code].itemsize
        nd.append((key, si, str(path), off, size, _lowbit(off), layout is not None, role))
        ten.append((key, dtype, shape, nbytes, "named_data", str(path), off, _lowbit(off), dims,
                    si, layout is not None))
    rows = [(0, 8, "flatbuffer root", "header", None, "root offset + FT01"),
            (8, 40, "FlatTensor header", "header", None, "FH01"),
            (56, fb_size - 8, "FlatTensor", "flatbuffer", None, "")]
    for i, (off, size) in enumerate(abs_seg):
        keys = [k for k, si, _ in named if si == i]
        if not keys:
            rows.append((off, size, f"segment {i}", "unused", i, ""))
        elif len(keys) == 1:
            rows.append((off, size, keys[0], "named_data", i, keys[0]))
        else:
            rows.append((off, size, f"{keys[0]} (+{len(keys) - 1} more)", "named_data", i,
                         "; ".join(keys)))
    rows.sort(key=lambda r: (r[0], r[1]))
    seg, at = [], 0
    for r in rows:
        if r[0] > at:
            seg.append((at, r[0] - at, "padding", "padding", None, ""))
        seg.append(r)
        at = max(at, r[0] + r[1])
    if at < len(data):
        seg.append((at, len(data) - at, "trailing data", "trailing", None, ""))
    return {"named_data": nd, "tensors": ten,
            "segments": [(str(path), n, k, o, s, _lowbit(o), i, u) for o, s, n, k, i, u in seg]}


def check_ptd(frames, want):
    nd = frames["named_data"]
    assert list(nd.columns) == ["key", "segment", "file", "offset", "size", "align", "has_layout",
                                "role"]
    assert list(zip(*(_nullable(nd[c]) for c in nd.columns))) == want["named_data"]
    t = frames["tensors"]
    assert list(t.columns) == ["name", "dtype", "shape", "nbytes", "storage", "file", "offset",
                               "align", "dim_order", "segment", "has_layout"]
    got = list(zip(*(_nullable(t[c].astype(object) if c in ("dtype", "storage") else t[c])
                     for c in t.columns)))
    assert got == want["tensors"]
    s = frames["segments"]
    assert list(s.columns) == ["file", "name", "kind", "offset", "size", "align", "index", "used_by"]
    got = list(zip(*(_nullable(s[c].astype(object) if c == "kind" else s[c]) for c in s.columns)))
    assert got == want["segments"]
    for name in ("segment", "offset", "size", "nbytes"):
        for f in (nd, t):
            if name in f:
                assert str(f[name].dtype) in ("int64", "Int64"), name


PTD_CASES = {
    "simple": ([(0, 24), (32, 8), (48, 4)],
               [("a", 0, (6, (2, 3), (0, 1))), ("b", 1, None), ("c", 1, None)]),
    "roles": ([(0, 8), (16, 8), (32, 8), (64, 1)],
              [("x_so_blob", 0, None), ("y_weights_blob", 1, None), ("zz", 2, None),
               ("w", 3, (0, (), ()))]),
    "layouts": ([(0, 64), (64, 64)],
                [("bf", 0, (15, (4, 2), (1, 0))), ("i64", 1, (4, (2, 2, 2), (0, 1, 2))),
                 ("empty", 1, (6, (0, 3), (0, 1))), ("raw", 0, None)]),
    "gaps": ([(16, 8), (0, 8)], [("late", 0, None)]),
    "no entries": ([(0, 4)], []),
    "nothing": ([], []),
    # many keys in few segments, interleaved: the grouping must keep the keys' order
    "many": ([(0, 8), (8, 8), (16, 8)],
             [(f"k{i:02d}", (i * 7) % 3, None) for i in range(40)]),
}


@pytest.mark.parametrize("case", list(PTD_CASES))
def test_ptd_frames(case, tmp_path, monkeypatch):
    segments, named = PTD_CASES[case]
    data = ptd_bytes(segments, named)
    path = tmp_path / "t.ptd"
    path.write_bytes(data)
    frames = ptd_frames_both(path, monkeypatch)
    check_ptd(frames, expected_ptd(path, data, segments, named))
    assert frames["findings"] == []
    assert frames["info"]["version"] == 0 and frames["info"]["segment_base_offset"] == (
        struct.unpack_from("<Q", data, 32)[0])
    # trailing bytes after the segment data
    path.write_bytes(data + b"\x01\x02\x03")
    frames = ptd_frames_both(path, monkeypatch)
    check_ptd(frames, expected_ptd(path, data + b"\x01\x02\x03", segments, named))


def test_ptd_built_files_are_read_by_executorch(tmp_path):
    pytest.importorskip("executorch")
    from executorch.exir._serialize._cord import Cord
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    segments, named = PTD_CASES["simple"]
    data = ptd_bytes(segments, named)
    payload = FlatTensorSerializer().deserialize(Cord(data))
    assert {k: e.buffer_index for k, e in payload.named_data.items()} == {"a": 0, "b": 1, "c": 1}
    assert [len(b) for b in payload.buffers] == [24, 8, 4]
    assert list(payload.named_data["a"].tensor_layout.sizes) == [2, 3]


def test_ptd_duplicate_keys(tmp_path, monkeypatch):
    segments, named = [(0, 8), (8, 8)], [("k", 0, None), ("j", 1, None), ("k", 1, None)]
    data = ptd_bytes(segments, named)
    path = tmp_path / "t.ptd"
    path.write_bytes(data)
    frames = ptd_frames_both(path, monkeypatch)
    assert [x.as_dict() for x in frames["findings"]] == [{
        "severity": "warning", "structure": "FlatTensor.named_data[2]", "offset": None,
        "message": "key 'k' occurs more than once; the first entry is used (as by the runtime)"}]
    with wb.open(path) as art:
        assert art._parsed.extra.ptd.by_key == {"k": 0, "j": 1}


def _fh(data: bytes, **fields) -> bytes:
    d = bytearray(data)
    at = {"magic": 8, "length": 12, "flatbuffer_offset": 16, "flatbuffer_size": 24,
          "segment_base_offset": 32, "segment_data_size": 40}
    for k, v in fields.items():
        if k == "magic":
            d[8:12] = v
        elif k == "length":
            struct.pack_into("<I", d, 12, v)
        else:
            struct.pack_into("<Q", d, at[k], v)
    return bytes(d)


def test_ptd_header_errors(tmp_path, monkeypatch):
    segments, named = PTD_CASES["simple"]
    data = ptd_bytes(segments, named)
    n = len(data)
    fb_size, base, seg_size = struct.unpack_from("<QQQ", data, 24)
    path = tmp_path / "t.ptd"
    H = "FlatTensor header (FH01)"
    for edit, want in (
            ({"magic": b"FH02"}, ("CorruptError", H, 8, "magic is b'FH02', expected b'FH01'")),
            ({"length": 39}, ("CorruptError", f"{H} length", 12, "length 39 is shorter than 40")),
            ({"flatbuffer_offset": 39}, ("OutOfBoundsError", f"{H} flatbuffer_offset", 16,
                                         f"flatbuffer [0x27, 0x{39 + fb_size:x}) does not fit "
                                         f"between the header (length 40) and the end of the "
                                         f"file (size 0x{n:x})")),
            ({"flatbuffer_size": n - 47}, ("OutOfBoundsError", f"{H} flatbuffer_offset", 16,
                                           f"flatbuffer [0x30, 0x{n + 1:x}) does not fit between "
                                           f"the header (length 40) and the end of the file "
                                           f"(size 0x{n:x})")),
            ({"segment_base_offset": 48 + fb_size - 1},
             ("OutOfBoundsError", f"{H} segment_base_offset", 32,
              f"segment_base_offset 0x{48 + fb_size - 1:x} is outside "
              f"[0x{48 + fb_size:x}, 0x{n:x}]")),
            ({"segment_base_offset": n + 1},
             ("OutOfBoundsError", f"{H} segment_base_offset", 32,
              f"segment_base_offset 0x{n + 1:x} is outside [0x{48 + fb_size:x}, 0x{n:x}]")),
            ({"segment_data_size": seg_size + 1},
             ("TruncatedError", f"{H} segment_data_size", 40,
              f"segment data (0x{base:x} + 0x{seg_size + 1:x}) runs past the end of the file "
              f"(size 0x{n:x})")),
    ):
        path.write_bytes(_fh(data, **edit))
        assert ptd_error_both(path, monkeypatch) == (want[0], "t.ptd", *want[1:]), edit
    # the limits, exactly met
    for edit in ({"length": 40}, {"flatbuffer_offset": 40},
                 {"flatbuffer_size": base - 48, "segment_base_offset": base},
                 {"segment_base_offset": n, "segment_data_size": 0},
                 {"segment_data_size": n - base}):
        path.write_bytes(_fh(data, **edit))
        try:
            wb.open(path).close()
        except ArtifactError as e:  # only the flatbuffer or the segments may object now
            assert "FH01" not in (e.structure or ""), (edit, err(e))
    path.write_bytes(data[:47])
    assert ptd_error_both(path, monkeypatch) == (
        "TruncatedError", "t.ptd", H, 8, "40 bytes run past the end (size 0x2f)")
    path.write_bytes(data[:4] + b"FT02" + data[8:])
    assert ptd_error_both(path, monkeypatch) == (
        "UnsupportedVersionError", "t.ptd", "file identifier", 4,
        "FlatTensor version b'FT02' is not supported (expected b'FT01')")
    with Source(_w(tmp_path, data)) as s:
        from workbench.formats.ptd.header import FlatTensorHeader

        h = FlatTensorHeader.read(s)
        assert repr(h) == (f"FlatTensorHeader(length=40, flatbuffer_offset=48, "
                           f"flatbuffer_size={fb_size}, segment_base_offset={base}, "
                           f"segment_data_size={seg_size})")


def _w(tmp_path, data, name="w.ptd"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("segments,named,want", [
    ([(0, 8), (8, 9)], [("a", 0, None)],
     ("OutOfBoundsError", "FlatTensor.segments[1]", None,
      "segment 1 [0x8, +0x9) runs past the segment data (size 0x10)")),
    ([(0, 8)], [("a", 0, None), ("b", 1, None)],
     ("OutOfBoundsError", "FlatTensor.named_data[1].segment_index", None,
      "segment_index 1 is out of range (1 segments)")),
    ([(0, 8)], [("a", 0, (99, (2,), (0,)))],
     ("CorruptError", "FlatTensor.named_data[0].tensor_layout.scalar_type", None,
      "scalar_type 99 is unknown")),
    ([(0, 8)], [("a", 0, (-1, (2,), (0,)))],
     ("CorruptError", "FlatTensor.named_data[0].tensor_layout.scalar_type", None,
      "scalar_type -1 is unknown")),
    ([(0, 8)], [("a", 0, (6, (2, -1), (0, 1)))],
     ("CorruptError", "FlatTensor.named_data[0].tensor_layout.sizes", None,
      "negative size in [2, -1]")),
    ([(0, 8), (8, 8)], [("a", 0, None), ("b", 1, (6, (3,), (0,)))],
     ("OutOfBoundsError", "FlatTensor.named_data[1] ('b')", None,
      "tensor of 12 bytes does not fit the 8 bytes left in its segment 1")),
])
def test_ptd_entry_errors(segments, named, want, tmp_path, monkeypatch):
    data = ptd_bytes(segments, named, data_size=16 if want[3].startswith("segment 1") else None)
    path = _w(tmp_path, data, "t.ptd")
    e = ptd_error_both(path, monkeypatch)
    assert e[:3] == (want[0], "t.ptd", want[1]) and e[4] == want[3]
    # the offset: the table named (or the tensor's bytes)
    with Source(path) as s:
        fb = FlatBuffer(s, 0, 56 + struct.unpack_from("<Q", data, 24)[0] - 8,
                        identifier=b"FT01", name="FlatTensor")
        root = fb.root("FlatTensor")
        if "segments[" in want[1]:
            assert e[3] == root.tables(1)[1].pos
        elif "('b')" in want[1]:
            assert e[3] == struct.unpack_from("<Q", data, 32)[0] + 8
        elif "tensor_layout" in want[1]:
            assert e[3] == root.tables(2)[0].table(2).pos
        else:
            assert e[3] == root.tables(2)[1].pos


# =============================================================================================
# .bpte: bundled programs written with ExecuTorch's bundled-program serializer
# =============================================================================================
@pytest.fixture(scope="module")
def bundled_io():
    pytest.importorskip("executorch.devtools.bundled_program.serialize")
    from executorch.devtools.bundled_program.schema import bundled_program_schema as BS
    from executorch.devtools.bundled_program.serialize import (
        _bundled_program_schema_to_flatbuffer,
        deserialize_from_flatbuffer_to_bundled_program,
    )

    def load():
        return deserialize_from_flatbuffer_to_bundled_program((SAMPLES / "mlp.bpte").read_bytes())

    return BS, load, _bundled_program_schema_to_flatbuffer


def _pattern(k: int, n: int) -> bytes:
    return bytes((k * 37 + 11 * j + (j * j) % 7) % 256 for j in range(n)) + bytes([k]) * 0


def _bpte_with_values(BS, bundled, tensors_data):
    """The first test case's inputs replaced by an Int, a Bool, a Double and tensors."""
    case = bundled.method_test_suites[0].test_cases[0]
    vals = [BS.Value(BS.Int(-3)), BS.Value(BS.Bool(True)), BS.Value(BS.Double(0.1))]
    for code, sizes, data, dims in tensors_data:
        vals.append(BS.Value(BS.Tensor(scalar_type=code, sizes=sizes, data=data, dim_order=dims)))
    case.inputs = vals
    return bundled


def test_bpte_frames(bundled_io, tmp_path, monkeypatch, oracle):
    from workbench.dtypes import SCALAR_TYPES

    BS, load, dump = bundled_io
    S = BS.ScalarType
    t1 = _pattern(1, 24)
    t2 = _pattern(2, 40)  # 32 needed: 8 more stored
    b = _bpte_with_values(BS, load(), [(S.FLOAT, [2, 3], t1, [1, 0]), (S.LONG, [4], t2, [0]),
                                       (S.INT, [], _pattern(3, 4), [])])
    data = dump(b)
    path = _w(tmp_path, data, "b.bpte")
    program = bytes(b.program)
    po = data.find(program)
    assert po > 0 and data.find(program, po + 1) < 0
    standalone = _w(tmp_path, program, "inner.pte")
    results = []
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        with wb.open(path) as art:
            results.append((dict(art.info), art.frames["test_cases"], art.frames["segments"],
                            art._parsed.tensor_frames))
        with wb.open(standalone, data=[]) as inner:
            inner_segments = inner.frames["segments"]
    info, cases, segs, tensor_frames = results[0]
    from test_pte_paths import assert_same_frames

    assert_same_frames({"c": cases, "s": segs}, {"c": results[1][1], "s": results[1][2]}, "bpte")
    assert info["bundled_version"] == b.version == 2
    assert info["program_offset"] == po and info["program_size_in_bundle"] == len(program)
    assert "data_files" not in info and info["program_size"] == oracle.read_bytes(program).program_size
    assert tensor_frames == ["tensors", "test_cases"]
    assert list(cases.columns) == ["name", "method", "case", "io", "index", "kind", "dtype",
                                   "shape", "nbytes", "file", "offset", "align", "value",
                                   "dim_order"]
    want = []
    for s in b.method_test_suites:
        for ci, c in enumerate(s.test_cases):
            for io_, vals in (("input", c.inputs), ("expected_output", c.expected_outputs)):
                for k, v in enumerate(vals):
                    kind = type(v.val).__name__
                    row = [f"{s.method_name}/{ci}/{io_}/{k}", s.method_name, ci, io_, k, kind]
                    if kind == "Tensor":
                        dt = SCALAR_TYPES[int(v.val.scalar_type)]
                        off = data.find(bytes(v.val.data))
                        assert off > 0
                        row += [dt.name, tuple(v.val.sizes), math.prod(v.val.sizes) * dt.itemsize,
                                str(path), off, _lowbit(off), None, tuple(v.val.dim_order)]
                    else:
                        x = {"Int": lambda y: str(y.int_val), "Bool": lambda y: str(bool(y.bool_val)),
                             "Double": lambda y: repr(float(y.double_val))}[kind](v.val)
                        row += [None, None, None, None, None, None, x, None]
                    want.append(tuple(row))
    got = [tuple(_nullable(r)) for r in cases.astype(object).itertuples(index=False)]
    assert got == want
    assert got[:3] == [("forward/0/input/0", "forward", 0, "input", 0, "Int", None, None, None,
                        None, None, None, "-3", None),
                       ("forward/0/input/1", "forward", 0, "input", 1, "Bool", None, None, None,
                        None, None, None, "True", None),
                       ("forward/0/input/2", "forward", 0, "input", 2, "Double", None, None, None,
                        None, None, None, "0.1", None)]
    # segments: the root, the program's own rows shifted, the test data (stored bytes), and
    # the bundle's flatbuffer around them
    rows = [(0, 8, "flatbuffer root", "header", None, "root offset + BP08")]
    rows += [(o + po, z, f"program: {n}", k, None if pd.isna(i) else i, u) for o, z, n, k, i, u in
             zip(inner_segments["offset"], inner_segments["size"], inner_segments["name"],
                 inner_segments["kind"].astype(object), inner_segments["index"],
                 inner_segments["used_by"])]
    for r in want:
        if r[5] == "Tensor":
            stored = next(len(bytes(v.val.data)) for s in b.method_test_suites
                          for ci, c in enumerate(s.test_cases)
                          for io_, vals in (("input", c.inputs), ("expected_output", c.expected_outputs))
                          for k, v in enumerate(vals) if f"{s.method_name}/{ci}/{io_}/{k}" == r[0])
            rows.append((r[10], stored, f"test data {r[0]}", "test_data", None, ""))
    rows.sort(key=lambda x: (x[0], x[1]))
    cover_rows, at = [], 0
    for r in rows:
        if r[0] > at:
            cover_rows.append((at, r[0] - at, "BundledProgram", "flatbuffer", None, ""))
        cover_rows.append(r)
        at = max(at, r[0] + r[1])
    if at < len(data):
        cover_rows.append((at, len(data) - at, "BundledProgram", "flatbuffer", None, ""))
    got = list(zip(segs["offset"], segs["size"], segs["name"], segs["kind"].astype(object),
                   _nullable(segs["index"]), segs["used_by"]))
    assert got == cover_rows
    assert set(segs["file"]) == {str(path)}


def _bpte_error(bundled_io, tmp_path, monkeypatch, tensor):
    BS, load, dump = bundled_io
    data = dump(_bpte_with_values(BS, load(), [tensor]))
    path = _w(tmp_path, data, "b.bpte")
    got = []
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        got.append(raises(lambda: wb.open(path).frames["test_cases"]))
    assert got[0] == got[1]
    return data, got[0]


def test_bpte_test_data_too_short(bundled_io, tmp_path, monkeypatch):
    S = bundled_io[0].ScalarType
    short = _pattern(5, 23)
    data, e = _bpte_error(bundled_io, tmp_path, monkeypatch, (S.FLOAT, [2, 3], short, [0, 1]))
    off = data.find(short)
    assert e == ("OutOfBoundsError", "b.bpte",
                 "BundledProgram.method_test_suites[0].test_cases[0].inputs[3].val.data", off,
                 "24 bytes of test data expected, 23 stored")


def test_bpte_negative_size_and_unknown_dtype(bundled_io, tmp_path, monkeypatch):
    S = bundled_io[0].ScalarType
    where = "BundledProgram.method_test_suites[0].test_cases[0].inputs[3].val"
    data, e = _bpte_error(bundled_io, tmp_path, monkeypatch, (S.FLOAT, [2, -3], b"", [0, 1]))
    with Source(_w(tmp_path, data, "c.bpte")) as s:
        fb = FlatBuffer(s, 0, s.size, identifier=b"BP08", name="BundledProgram")
        tpos = fb.root("BundledProgram").tables(1)[0].tables(1)[0].tables(0)[3].union(0, 5)[1].pos
    assert e == ("CorruptError", "b.bpte", f"{where}.sizes", tpos, "negative size in [2, -3]")
    BS, load, dump = bundled_io
    pat = _pattern(9, 13)
    data = dump(_bpte_with_values(BS, load(), [(S.CHAR, [13], pat, [0])]))
    d = bytearray(data)
    # the scalar_type byte of that tensor table: find it with the flatbuffer reader
    with Source(_w(tmp_path, data, "c.bpte")) as s:
        fb = FlatBuffer(s, 0, s.size, identifier=b"BP08", name="BundledProgram")
        t = fb.root("BundledProgram").tables(1)[0].tables(1)[0].tables(0)[3].union(0, 5)[1]
        p = t.field_pos(0, 1)
        tpos = t.pos
    assert p and d[p] == 1
    d[p] = 77
    path = _w(tmp_path, bytes(d), "b.bpte")
    assert raises(lambda: wb.open(path)) == ("CorruptError", "b.bpte", f"{where}.scalar_type",
                                             tpos, "scalar_type 77 is unknown")


def test_bpte_without_program(bundled_io, tmp_path):
    _, load, dump = bundled_io
    b = load()
    b.program = b""
    path = _w(tmp_path, dump(b), "b.bpte")
    with Source(path) as s:
        root = FlatBuffer(s, 0, s.size, identifier=b"BP08", name="BundledProgram").root("B")
        pos = root.pos
    assert raises(lambda: wb.open(path)) == ("CorruptError", "b.bpte", "BundledProgram.program",
                                             pos, "the bundled program holds no program")


# -- hostile programs: the exact error, the same on both paths -------------------------------
def test_unknown_tensor_location(tmp_path, monkeypatch):
    from helpers import Located

    from workbench.formats.pte.schema import ExtraTensorInfo
    from workbench.formats.pte.schema import Tensor as TS

    src = SAMPLES / "mlp_external.pte"
    d = bytearray(src.read_bytes())
    with Located(src) as loc:
        v, _, tensor = next((v, e, t) for v, e, t in loc.tensor_tables()
                            if t.table(TS.extra_tensor_info) is not None
                            and t.table(TS.extra_tensor_info).has(ExtraTensorInfo.location))
        extra = tensor.table(TS.extra_tensor_info)
        p = extra.field_pos(ExtraTensorInfo.location, 1)
        assert d[p] == 1
        extra_pos = extra.pos
    for bad in (2, 255):
        d[p] = bad
        path = _w(tmp_path, bytes(d), "loc.pte")
        assert open_error_both(path, monkeypatch) == (
            "CorruptError", "loc.pte",
            f"Program.execution_plan[0].values[{v}].val.extra_tensor_info.location", extra_pos,
            f"location {bad} is unknown")


def test_unknown_instruction_kind(tmp_path, monkeypatch):
    from helpers import Located

    from workbench.formats.pte import instructions

    src = SAMPLES / "mlp_portable.pte"
    d = bytearray(src.read_bytes())
    with Located(src) as loc:
        ins = loc.plans()[0].tables(5)[0].tables(2)[1]
        p = ins.field_pos(0, 1)
        assert d[p] == 1
    d[p] = 6
    path = _w(tmp_path, bytes(d), "ins.pte")
    want = ("CorruptError", "ins.pte",
            "Program.execution_plan[0].chains[0].instructions[1].instr_args", p,
            "union type 6 is unknown (max 5)")
    assert open_error_both(path, monkeypatch) == want
    with Source(path) as s:  # the instruction records read alone (both paths)
        fb = FlatBuffer(s, 0, s.size, identifier=b"ET12", name="Program")
        plan = fb.root("Program").tables(1, "execution_plan")[0]
        assert raises(instructions._slow, plan) == want

        class R:
            path = readpath.ReadPath(readpath.Tier.TABLES)

        assert raises(instructions.read_method, R(), plan) == want


def test_bad_string_value(et, tmp_path, monkeypatch):
    S, _ = et
    marker = "unique marker string value"

    def edit(program, blobs):
        program.execution_plan[0].values.append(S.EValue(S.String(marker)))

    path = build(et, tmp_path, edit)
    data = bytearray(path.read_bytes())
    at = data.find(marker.encode())
    assert at > 0 and data.find(marker.encode(), at + 1) < 0
    n = len(frames_both(path, monkeypatch, ["values"])["values"]) - 1
    data[at + 3] = 0xFF
    bad = _w(tmp_path, bytes(data), "bad.pte")

    got = []
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        with wb.open(bad, data=[]) as art:
            got.append(raises(lambda: art.frames["values"]))
    assert got[0] == got[1] == ("CorruptError", "bad.pte", f"forward.values[{n}].string_val",
                                at + 3, "string is not valid UTF-8 (invalid start byte)")


def test_program_without_methods(et, tmp_path, monkeypatch):
    def edit(program, blobs):
        program.execution_plan = []

    path = build(et, tmp_path, edit)
    names = ["methods", "values", "tensors", "operators", "delegates", "memory_plan",
             "instructions", "lifetimes", "memory_efficiency", "named_data"]
    frames = _frames_walks(path, monkeypatch, names)
    for n in names[:-1]:
        assert len(frames[n]) == 0, n
    assert list(frames["values"].columns) == ["method", "value", "type", "summary", "is_input",
                                              "is_output"]
    assert list(frames["instructions"].columns) == INS_COLUMNS
    assert list(frames["tensors"].columns)[:7] == ["name", "dtype", "shape", "nbytes", "storage",
                                                   "file", "offset"]


def test_delegate_backends(tmp_path, monkeypatch):
    """DelegateBlobs.backends(): (backend, layout) per delegate, as the delegates frame says;
    (None, None) for a blob that cannot be taken apart."""
    for name in ("mlp_xnnpack.pte", "mlp_portable.pte", "mlp_coreml.pte", "mlp_vulkan.pte"):
        with wb.open(SAMPLES / name, data=[]) as art:
            blobs = art._parsed.extra.delegate_blobs
            d = art.frames["delegates"]
            assert blobs.backends() == list(zip(_nullable(d["backend"]), _nullable(d["layout"])))
            if name == "mlp_xnnpack.pte":
                assert blobs.backends()[0][0] is not None
    src = SAMPLES / "mlp_xnnpack.pte"
    data = bytearray(src.read_bytes())
    with wb.open(src, data=[]) as art:
        off = int(art.frames["delegates"]["offset"].iloc[0])
    assert data[off + 4:off + 8] == b"XH00"
    struct.pack_into("<Q", data, off + 16, 2**40)  # the graph's size: far past the blob
    path = _w(tmp_path, bytes(data), "x.pte")
    with wb.open(path, data=[]) as art:
        blobs = art._parsed.extra.delegate_blobs
        assert blobs.backends() == [(None, None)]
        assert blobs.info(0, 0) is None and blobs.info(5, 5) is None
        assert any(f.severity == "error" for f in art._parsed.findings)


# -- the earlier FlatTensor schema (v0: TensorMetadata tables) ---------------------------------
def test_ptd_v0_frames(tmp_path, monkeypatch):
    from workbench.formats.ptd.schema import V0_NAME

    tensors = [("w", 6, (2, 2), (1, 0), 0, 0), ("b", 4, (2,), (0,), 0, 16),
               ("z", 6, (0,), (0,), 1, 8)]
    data = ptd_bytes([(0, 32), (32, 8)], [("blob", 1, None)], v0_tensors=tensors)
    path = _w(tmp_path, data, "v0.ptd")
    frames = ptd_frames_both(path, monkeypatch)
    base = struct.unpack_from("<Q", data, 32)[0]
    nd = frames["named_data"]
    assert list(zip(nd["key"], nd["segment"], nd["offset"], nd["size"], nd["has_layout"],
                    nd["role"].astype(object))) == [
        ("w", 0, base, 16, True, "tensor"), ("b", 0, base + 16, 16, True, "tensor"),
        ("z", 1, base + 40, 0, True, "tensor"), ("blob", 1, base + 32, 8, False, "blob")]
    t = frames["tensors"]
    assert list(zip(t["name"], t["dtype"].astype(object), t["shape"], t["nbytes"], t["dim_order"],
                    t["offset"])) == [
        ("w", "float32", (2, 2), 16, (1, 0), base), ("b", "int64", (2,), 16, (0,), base + 16),
        ("z", "float32", (0,), 0, (0,), base + 40), ("blob", "uint8", (8,), 8, (0,), base + 32)]
    assert frames["info"]["schema_version"] == V0_NAME
    assert frames["info"]["tensor_alignment"] == 16
    with Source(path) as s:
        root = FlatBuffer(s, 0, s.size, identifier=b"FT01", name="FlatTensor").root("FlatTensor")
        root_pos, nslots = root.pos, len(root.fields)
    assert [x.as_dict() for x in frames["findings"]] == [{
        "severity": "info", "structure": "FlatTensor", "offset": root_pos,
        "message": f"written with the earlier schema, {V0_NAME} (a root of {nslots} slots): read "
                   "by that schema; today's ExecuTorch reads only the current FlatTensor schema"}]
    seg = frames["segments"]
    assert [(n, u) for n, u in zip(seg["name"], seg["used_by"]) if n in ("w (+1 more)", "z (+1 more)")] == [
        ("w (+1 more)", "w; b"), ("z (+1 more)", "z; blob")]


@pytest.mark.parametrize("tensor,want", [
    (("w", 6, (2,), (0,), 1, 0), ("OutOfBoundsError", "FlatTensor.tensors[0].segment_index",
                                  "segment_index 1 is out of range (1 segments)")),
    (("w", 6, (2,), (0,), -1, 0), ("OutOfBoundsError", "FlatTensor.tensors[0].segment_index",
                                   "segment_index -1 is out of range (1 segments)")),
    (("w", 6, (2,), (0,), 0, 33), ("OutOfBoundsError", "FlatTensor.tensors[0].offset",
                                   "offset 0x21 lies past the end of segment 0 (size 0x20)")),
    (("w", 6, (4,), (0,), 0, 24), ("OutOfBoundsError", "FlatTensor.tensors[0] ('w')",
                                   "tensor of 16 bytes does not fit the 8 bytes left in its "
                                   "segment 0")),
    (("w", 99, (4,), (0,), 0, 0), ("CorruptError", "FlatTensor.tensors[0].scalar_type",
                                   "scalar_type 99 is unknown")),
    (("w", 6, (-4,), (0,), 0, 0), ("CorruptError", "FlatTensor.tensors[0].sizes",
                                   "negative size in [-4]")),
])
def test_ptd_v0_errors(tensor, want, tmp_path, monkeypatch):
    data = ptd_bytes([(0, 32)], [], v0_tensors=[tensor])
    path = _w(tmp_path, data, "v0.ptd")
    e = ptd_error_both(path, monkeypatch)
    with Source(path) as s:
        root = FlatBuffer(s, 0, s.size, identifier=b"FT01", name="FlatTensor").root("FlatTensor")
        tpos = root.tables(2)[0].pos
    base = struct.unpack_from("<Q", data, 32)[0]
    off = base + tensor[5] if "('w')" in want[1] else tpos
    assert e == (want[0], "v0.ptd", want[1], off, want[2])
    ok = ptd_bytes([(0, 32)], [], v0_tensors=[("w", 6, (0,), (0,), 0, 32)])  # at the very end
    path.write_bytes(ok)
    assert ptd_frames_both(path, monkeypatch)["tensors"]["offset"].tolist() == [
        struct.unpack_from("<Q", ok, 32)[0] + 32]


def test_value_summaries_use_the_fast_path(et, tmp_path, monkeypatch):
    from workbench.formats.pte import columns as pte_columns

    S, _ = et

    def edit(program, blobs):
        program.execution_plan[0].values.extend(_extra_values(S))

    path = build(et, tmp_path, edit)
    real = pte_columns.Columns._scalar_summaries
    calls = []

    def spy(self, *a):
        calls.append(self.r.path.columns)
        return real(self, *a)

    monkeypatch.setattr(pte_columns.Columns, "_scalar_summaries", spy)
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        with wb.open(path, data=[]) as art:
            art.frames["values"]
    assert calls == [True]


# -- the tensors frame, every column, from ExecuTorch's reading --------------------------------
_DYN = ("static", "dynamic_bound", "dynamic_unbound")


def expected_tensors(oracle, path, ptd_paths) -> list[tuple]:
    """Rows (name, dtype, shape, nbytes, storage, file, offset, method, value, fqn, dim_order,
    segment, data_buffer_idx, mem_id, mem_offset, shape_dynamism, requires_grad, has_layout,
    missing, used_by) of a program's tensors frame, from the oracle and the data files' bytes."""
    prog = oracle.read(path)
    named_in_ptd = {p: oracle.ptd_named_bytes(p) for p in ptd_paths}
    ptd_rows = {}
    for p in ptd_paths:
        with wb.open(p) as art:
            ptd_rows[p] = {r.name: (r.offset, r.segment, r.has_layout, r.dtype, tuple(r.shape),
                                    r.nbytes, tuple(r.dim_order))
                           for r in art.tensors.itertuples(index=False)}
    data = path.read_bytes()
    blobs = []
    for plan in prog.program.execution_plan:
        for k, d in enumerate(plan.delegates):
            if int(d.processed.location) == 1:
                off, size = prog.segment_abs(d.processed.index)
                raw = data[off:off + size]
            else:
                raw = bytes(prog.program.backend_delegate_data[d.processed.index].data)
            blobs.append((f"{plan.name} delegate {k} ({d.id})", raw))

    def users(key):
        u = [label for label, raw in blobs if key.encode() in raw]
        return "; ".join(u) if u else None

    rows, claimed = [], {p: set() for p in ptd_paths}
    for plan in prog.program.execution_plan:
        for v, ev in enumerate(plan.values):
            t = ev.val
            if type(t).__name__ != "Tensor":
                continue
            e = t.extra_tensor_info
            fqn = e.fully_qualified_name if e is not None else None
            storage = _storage_of(oracle, prog, t)
            nbytes = prog.nbytes(t)
            file = offset = segment = None
            missing = None
            if storage == "segment":
                offset = prog.constant_location(t)
                segment = prog.program.constant_segment.segment_index
            elif storage == "mutable":
                offset = prog.mutable_location(t)
                ms = prog.program.mutable_data_segments
                segment = ms[e.mutable_data_segments_idx if e is not None else 0].segment_index
            elif storage == "inline":
                raise AssertionError("inline constants: see the variant test")
            elif storage == "external":
                missing = True
                for p in ptd_paths:
                    hit = ptd_rows[p].get(fqn)
                    if hit and hit[3] == oracle.dtype_name(t.scalar_type) and hit[4] == tuple(t.sizes):
                        offset, segment, missing, file = hit[0], hit[1], False, str(p)
                        raw = pathlib.Path(p).read_bytes()[offset:offset + nbytes]
                        assert raw == named_in_ptd[p][fqn][:nbytes]
                        claimed[p].add(fqn)
                        break
            if offset is not None and file is None:
                file = str(path)
            a = t.allocation_info
            rows.append((fqn if fqn is not None else f"{plan.name}/{v}",
                         oracle.dtype_name(t.scalar_type), tuple(t.sizes), nbytes, storage, file,
                         offset, plan.name, v, fqn, tuple(t.dim_order), segment,
                         t.data_buffer_idx, None if a is None else a.memory_id,
                         None if a is None else a.memory_offset_low | (a.memory_offset_high << 32),
                         _DYN[int(t.shape_dynamism)], bool(t.requires_grad), None, missing, None))
    for nd in prog.program.named_data or []:
        off, size = prog.segment_abs(nd.segment_index)
        rows.append((nd.key, "uint8", (size,), size, "named_data", str(path), off, None, None,
                     None, (0,), nd.segment_index, None, None, None, None, None, False, None,
                     users(nd.key)))
    for p in ptd_paths:
        for key, (off, seg, has, dtype, shape, nbytes, dims) in ptd_rows[p].items():
            if key in claimed[p]:
                continue
            rows.append((key, dtype, shape, nbytes, "named_data", str(p), off, None, None, None,
                         dims, seg, None, None, None, None, None, has, None, users(key)))
    return rows


TENSOR_COLS = ["name", "dtype", "shape", "nbytes", "storage", "file", "offset", "method", "value",
               "fqn", "dim_order", "segment", "data_buffer_idx", "mem_id", "mem_offset",
               "shape_dynamism", "requires_grad", "has_layout", "missing", "used_by"]


def _rows(frame, cols) -> list[tuple]:
    out = []
    for c in cols:
        s = frame[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            s = s.astype(object)
        out.append(_nullable(s.tolist()))
    return [tuple(r) for r in zip(*out)]


@pytest.mark.parametrize("name", PTE_SAMPLES)
def test_tensors_frame_matches_the_oracle(name, oracle, monkeypatch):
    path = SAMPLES / name
    with wb.open(path) as art:
        ptds = [pathlib.Path(p) for p in art.info["data_files"]]
    from test_pte_paths import assert_same_frames


    got = []
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        with wb.open(path) as art:
            got.append({"tensors": art.frames["tensors"]})
    assert_same_frames(got[0], got[1], name)
    t = got[0]["tensors"]
    assert list(t.columns) == ["name", "dtype", "shape", "nbytes", "storage", "file", "offset",
                               "align", "method", "value", "fqn", "dim_order", "segment",
                               "data_buffer_idx", "mem_id", "mem_offset", "shape_dynamism",
                               "requires_grad", "has_layout", "missing", "used_by"]
    assert _rows(t, TENSOR_COLS) == expected_tensors(oracle, path, ptds)
    assert _nullable(t["align"]) == [_lowbit(o) if o is not None else None
                                     for o in _nullable(t["offset"])]
    for c in ("nbytes", "offset", "value", "segment", "data_buffer_idx", "mem_id", "mem_offset"):
        assert str(t[c].dtype) in ("int64", "Int64"), c
    if name == "mlp_external.pte":  # without its data file: the external tensors are missing
        with wb.open(path, data=[]) as art:
            t = art.frames["tensors"]
            ext = t[t["storage"] == "external"]
            assert len(ext) and ext["missing"].all() and ext["file"].isna().all()
            assert ext["offset"].isna().all() and ext["segment"].isna().all()


# =============================================================================================
# workbench.formats._layout: covering byte ranges exactly
# =============================================================================================
def _cov(raw) -> list[tuple]:
    return list(zip(raw["file"].tolist(), raw["name"].tolist(), raw["kind"].tolist(),
                    raw["offset"].tolist(), raw["size"].tolist(), raw["index"].tolist(),
                    raw["used_by"].tolist()))


def test_cover():
    from workbench.formats._layout import RAW_SEGMENT_COLUMNS, cover

    rows = [(40, 10, "b", "kb", 1, "ub"), (10, 5, "a", "ka", None, "ua"), (15, 0, "z", "kz", 7, ""),
            (15, 5, "c", "kc", 2, "uc")]
    raw = cover(rows, "f", 4, 60)
    assert tuple(raw) == RAW_SEGMENT_COLUMNS
    assert _cov(raw) == [("f", "padding", "padding", 4, 6, -1, ""), ("f", "a", "ka", 10, 5, -1, "ua"),
                         ("f", "z", "kz", 15, 0, 7, ""), ("f", "c", "kc", 15, 5, 2, "uc"),
                         ("f", "padding", "padding", 20, 20, -1, ""), ("f", "b", "kb", 40, 10, 1, "ub"),
                         ("f", "trailing data", "trailing", 50, 10, -1, "")]
    for c in ("offset", "size", "index"):
        assert raw[c].dtype == np.int64
    raw = cover(rows, "f", 10, 50, gap=("G", "g"), tail=("T", "t"))
    assert [r[1:3] for r in _cov(raw)] == [("a", "ka"), ("z", "kz"), ("c", "kc"), ("G", "g"),
                                           ("b", "kb")]
    raw = cover(rows, "f", 10, 51, gap=("G", "g"), tail=("T", "t"))
    assert _cov(raw)[-1] == ("f", "T", "t", 50, 1, -1, "")
    assert _cov(cover([], "e", 3, 9)) == [("e", "trailing data", "trailing", 3, 6, -1, "")]
    assert _cov(cover([], "e", 3, 3)) == []
    assert _cov(cover([(3, 0, "n", "k", None, "")], "e", 3, 3)) == [("e", "n", "k", 3, 0, -1, "")]
    # a range inside an earlier one
    assert raises(cover, [(0, 20, "big", "k", None, ""), (5, 5, "in", "k", None, "")], "/p/f.pte",
                  0, 30) == ("CorruptError", "f.pte", "in", 5,
                             "in [0x5, 0xa) overlaps the previous range (ends at 0x14)")
    assert raises(cover, [(0, 20, "a", "k", None, ""), (30, 5, "b", "k", None, ""),
                          (19, 4, "c", "k", None, "")], "f", 0, 40) == (
        "CorruptError", "f", "c", 19, "c [0x13, 0x17) overlaps the previous range (ends at 0x14)")
    assert raises(cover, [(2, 4, "early", "k", None, "")], "f", 4, 10) == (
        "CorruptError", "f", "early", 2, "early [0x2, 0x6) overlaps the previous range (ends at 0x4)")
    # touching ranges are fine
    assert [r[3:5] for r in _cov(cover([(0, 4, "a", "k", None, ""), (4, 4, "b", "k", None, "")],
                                       "f", 0, 8))] == [(0, 4), (4, 4)]


def test_concat_sorted_and_frame():
    from workbench.formats._layout import concat_sorted, cover, named_data_role, segments_frame

    a = cover([(0, 4, "x", "k", None, "u")], "b.ptd", 0, 4)
    b = cover([(0, 2, "y", "k", 3, "")], "a.pte", 0, 6)
    assert concat_sorted([a]) is a
    both = concat_sorted([a, b])
    assert both["file"].tolist() == ["a.pte", "a.pte", "b.ptd"]
    assert both["name"].tolist() == ["y", "trailing data", "x"]
    empty = cover([], "c", 0, 0)
    assert concat_sorted([a, empty])["file"].tolist() == ["b.ptd"]
    f = segments_frame(both)
    assert list(f) == ["file", "name", "kind", "offset", "size", "align", "index", "used_by"]
    assert _nullable(list(f["index"])) == [3, None, None]
    assert _nullable(list(f["align"])) == [None, 2, None]
    assert list(f["used_by"]) == ["", "", "u"] and list(f["kind"]) == ["k", "trailing", "k"]
    assert [named_data_role(k) for k in ("a_so_blob", "a_weights_blob", "so_blob", "_so_blob",
                                         "x_so_blobs", "weights_blob_x", "")] == [
        "so_blob", "weights_blob", "blob", "so_blob", "blob", "blob", "blob"]


# -- segments, named_data and memory_plan frames of programs without delegates ------------------
PORTABLE = ["mlp_portable.pte", "mlp_bf16.pte", "mlp_external.pte", "kv_cache.pte",
            "multi_method.pte", "no_weights.pte", "tied_portable.pte"]


def expected_segments(oracle, path) -> list[tuple]:
    """(name, kind, offset, size, index, used_by) of a delegate-free program's segments."""
    from workbench.formats._layout import named_data_role

    prog = oracle.read(path)
    size = len(prog.data)
    rows = [(0, 8, "flatbuffer root", "header", None, "root offset + ET12")]
    fb_start = 8
    if prog.eh is not None:
        hl = struct.unpack_from("<I", prog.data, 12)[0]
        rows.append((8, hl, "extended header", "header", None, "eh00"))
        fb_start = 8 + hl
    rows.append((fb_start, prog.program_size - fb_start, "program", "flatbuffer", None, ""))
    uses: dict[int, list] = {}
    P = prog.program
    if P.constant_segment is not None:
        uses.setdefault(P.constant_segment.segment_index, []).append(("constant", "constant_segment"))
    for k, ms in enumerate(P.mutable_data_segments or []):
        uses.setdefault(ms.segment_index, []).append(("mutable_data", f"mutable_data_segments[{k}]"))
    for nd in P.named_data or []:
        uses.setdefault(nd.segment_index, []).append(("named_data", nd.key))
    for i in range(len(P.segments)):
        # no extended header: (empty) segments sit at the end of the program
        off, sz = prog.segment_abs(i) if prog.eh is not None else (prog.program_size, 0)
        u = uses.get(i, [])
        kind = u[0][0] if u else "unused"
        if kind == "named_data" and named_data_role(u[0][1]) != "blob":
            kind = named_data_role(u[0][1])
        if len(u) == 1:
            name = u[0][1] if u[0][0] != "named_data" else f"named_data {u[0][1]}"
        elif u:
            name = f"{u[0][1]} (+{len(u) - 1} more)"
        else:
            name = f"segment {i}"
        rows.append((off, sz, name, kind, i, "; ".join(x for _, x in u)))
    rows.sort(key=lambda r: (r[0], r[1]))
    out, at = [], 0
    for r in rows:
        if r[0] > at:
            out.append(("padding", "padding", at, r[0] - at, None, ""))
        out.append((r[2], r[3], r[0], r[1], r[4], r[5]))
        at = max(at, r[0] + r[1])
    if at < size:
        out.append(("trailing data", "trailing", at, size - at, None, ""))
    return out


SEG_COLS = ["name", "kind", "offset", "size", "index", "used_by"]


@pytest.mark.parametrize("name", PORTABLE)
def test_portable_segments_match_the_oracle(name, oracle, monkeypatch):
    path = SAMPLES / name
    frames = frames_both(path, monkeypatch, ["segments", "memory_plan", "named_data"])
    s = frames["segments"]
    assert set(s["file"]) == {str(path)}
    assert _rows(s, SEG_COLS) == expected_segments(oracle, path)
    assert _nullable(s["align"]) == [_lowbit(o) for o in s["offset"]]
    check_memory_plan(frames["memory_plan"], oracle, path)


def check_memory_plan(mp, oracle, path):
    prog = oracle.read(path)
    want = []
    for plan in prog.program.execution_plan:
        sizes = list(plan.non_const_buffer_sizes)
        for v, ev in enumerate(plan.values):
            t = ev.val
            if type(t).__name__ != "Tensor" or t.allocation_info is None:
                continue
            a = t.allocation_info
            off = a.memory_offset_low | (a.memory_offset_high << 32)
            nb = prog.nbytes(t)
            e = t.extra_tensor_info
            fqn = e.fully_qualified_name if e is not None else None
            bsize = sizes[a.memory_id] if a.memory_id < len(sizes) else None
            want.append((plan.name, a.memory_id, bsize, v, fqn or f"{plan.name}/{v}",
                         oracle.dtype_name(t.scalar_type), tuple(t.sizes), off, nb, off + nb,
                         _storage_of(oracle, prog, t), bsize is not None and off + nb <= bsize))
    assert list(mp.columns) == ["method", "mem_id", "buffer_size", "value", "name", "dtype",
                                "shape", "offset", "nbytes", "end", "storage", "fits"]
    assert _rows(mp, list(mp.columns)) == want


def test_segment_uses_and_memory_plan_edges(et, tmp_path, oracle, monkeypatch):
    """A segment shared by the constants and a named key, an unused segment, a
    ``*_so_blob`` key, a tensor planned in an arena the method does not have, one that does
    not fit its arena; the data file rows after the program's (by file name)."""
    S, _ = et

    def edit(program, blobs):
        cs = program.constant_segment.segment_index
        program.named_data = [*(program.named_data or []),
                              S.NamedData(key="shared", segment_index=cs),
                              S.NamedData(key="lib_so_blob", segment_index=len(blobs)),
                              S.NamedData(key="w_weights_blob", segment_index=len(blobs) + 2)]
        plan = program.execution_plan[0]
        planned = [ev.val for ev in plan.values
                   if type(ev.val).__name__ == "Tensor" and ev.val.allocation_info is not None]
        planned[0].allocation_info.memory_id = 7  # no such arena
        planned[1].allocation_info.memory_offset_low = plan.non_const_buffer_sizes[1]  # past it
        return [*blobs, b"\x7fELF" + bytes(60), bytes(range(33)), b"w" * 16]

    path = build(et, tmp_path, edit)
    frames = frames_both(path, monkeypatch, ["segments", "memory_plan", "named_data"])
    got = _rows(frames["segments"], SEG_COLS)
    assert got == expected_segments(oracle, path)
    names = [r[0] for r in got]
    assert "constant_segment (+1 more)" in names and "segment 2" in names
    assert ("named_data lib_so_blob", "so_blob") in [r[:2] for r in got]
    assert ("named_data w_weights_blob", "weights_blob") in [r[:2] for r in got]
    check_memory_plan(frames["memory_plan"], oracle, path)
    mp = frames["memory_plan"]
    assert not mp["fits"].iloc[0] and pd.isna(mp["buffer_size"].iloc[0])
    nd = frames["named_data"]
    assert list(nd.columns) == ["key", "segment", "file", "offset", "size", "align", "has_layout",
                                "role", "used_by", "tensor", "dtype", "shape", "quant",
                                "group_size"]
    prog = oracle.read(path)
    want = []
    for e in prog.program.named_data:
        off, size = prog.segment_abs(e.segment_index)
        from workbench.formats._layout import named_data_role

        want.append((e.key, e.segment_index, str(path), off, size, _lowbit(off), False,
                     named_data_role(e.key), None, None, None, None, None, None))
    assert _rows(nd, list(nd.columns)) == want


def test_segments_with_a_data_file(monkeypatch, oracle):
    path = SAMPLES / "mlp_external.pte"
    ptd = SAMPLES / "mlp_external.ptd"
    with wb.open(ptd) as art:
        ptd_rows = _rows(art.segments, ["file", *SEG_COLS])
    with wb.open(path) as art:
        s = art.segments
        assert art.info["data_files"] == [str(ptd)]
        rows = _rows(s, ["file", *SEG_COLS])
    own = [r for r in rows if r[0] == str(path)]
    assert [r[1:] for r in own] == expected_segments(oracle, path)
    assert [r for r in rows if r[0] == str(ptd)] == ptd_rows
    assert rows == ptd_rows + own  # by file name: .ptd before .pte


# =============================================================================================
# workbench.formats.pte.instructions: the helpers, against plain reference implementations
# =============================================================================================
def _ref_returned(args):
    for n in range(len(args) // 2, 0, -1):
        if tuple(args[-n:]) == tuple(args[-2 * n:-n]):
            return 2 * n
    return 0


def test_returned():
    from workbench.formats.pte.instructions import _returned

    for args, want in (((), 0), ((1,), 0), ((1, 1), 2), ((1, 2), 0), ((0, 5, 5), 2),
                       ((1, 2, 1, 2), 4), ((3, 1, 2, 1, 2), 4), ((1, 1, 1, 1), 4),
                       ((2, 1, 1, 1), 2), ((9, 8, 7, 9, 8, 7), 6), ((1, 2, 3, 2, 3, 4), 0)):
        assert _returned(args) == want == _ref_returned(args), args


def test_returned_many_and_tuples():
    import random

    from workbench.formats.pte.instructions import _returned_many, _tuples

    rnd = random.Random(3)
    rows = []
    for _ in range(300):
        n = rnd.choice([0, 1, 2, 3, 4, 5, 8, 63, 64, 65, 66, 130])
        base = [rnd.randrange(4) for _ in range(n)]
        if n >= 2 and rnd.random() < 0.6:
            k = rnd.randrange(1, n // 2 + 1)
            base = base[:n - 2 * k] + base[n - k:] + base[n - k:]
        rows.append(tuple(base))
    counts = np.array([len(r) for r in rows], np.int64)
    flat = np.array([x for r in rows for x in r], np.int64)
    start = np.cumsum(counts) - counts
    sel = np.array([k for k in range(len(rows)) if rnd.random() < 0.8], np.int64)
    got = _returned_many(flat, start, counts, sel)
    assert got.tolist() == [_ref_returned(rows[k]) for k in sel.tolist()]
    assert got.dtype == np.int64
    assert _returned_many(flat, start, counts, np.zeros(0, np.int64)).tolist() == []
    t = _tuples(flat, counts)
    assert t.dtype == object and t.tolist() == rows
    assert _tuples(np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []
    assert _tuples(np.zeros(0, np.int64), np.zeros(2, np.int64)).tolist() == [(), ()]


def test_first_of_each_and_ranges():
    import random

    from workbench.formats.pte.instructions import _first_of_each, _ranges

    rnd = random.Random(5)
    group = np.sort(np.array([rnd.randrange(6) for _ in range(80)], np.int64))
    values = np.array([rnd.randrange(5) for _ in range(80)], np.int64)
    seen, want = set(), []
    for g, v in zip(group.tolist(), values.tolist()):
        want.append((g, v) not in seen)
        seen.add((g, v))
    assert _first_of_each(group, values).tolist() == want
    assert _first_of_each(np.array([0]), np.array([3])).tolist() == [True]
    assert _first_of_each(np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []
    arena = np.array([1, 0, 1, 0, 1], np.int64)
    lo = np.array([0, 4, 0, 4, 8], np.int64)
    hi = np.array([8, 8, 8, 6, 9], np.int64)
    rep, grp = _ranges(arena, lo, hi)
    keys = [(a, b, c) for a, b, c in zip(arena.tolist(), lo.tolist(), hi.tolist())]
    order = sorted(set(keys))
    assert grp.tolist() == [order.index(k) for k in keys]
    assert [keys[r] for r in rep.tolist()] == order


def _ref_peak(lo, hi, off, nb):
    """(most bytes live at one start position, the first such position): aliases once."""
    best, at = -1, None
    for p in sorted(set(lo)):
        live = [(o, o + n) for a, b, o, n in zip(lo, hi, off, nb) if a <= p <= b]
        covered = {x for a, b in live for x in range(a, b)}
        if live and len(covered) > best:
            best, at = len(covered), p
    return max(best, 0), at


def test_peak():
    import random

    from workbench import memory_plan
    from workbench.memory_plan import peak as _peak

    assert _peak(*(np.zeros(0, np.int64),) * 4) == (0, None, True)
    rnd = random.Random(11)
    for _ in range(60):
        n = rnd.randrange(1, 9)
        lo = [rnd.randrange(6) for _ in range(n)]
        hi = [a + rnd.randrange(4) for a in lo]
        off = [rnd.randrange(0, 40, 4) for _ in range(n)]
        nb = [rnd.randrange(0, 24, 4) for _ in range(n)]
        arr = [np.array(x, np.int64) for x in (lo, hi, off, nb)]
        got = _peak(*arr)
        assert got == (*_ref_peak(lo, hi, off, nb), True), (lo, hi, off, nb)
    # too much work: a plain sum of the live bytes per position (aliases counted twice)
    lo, hi = np.array([0, 1, 3]), np.array([2, 3, 3])
    off, nb = np.array([0, 0, 100]), np.array([8, 8, 4])
    assert _peak(lo, hi, off, nb) == (12, 3, True)
    orig = memory_plan.MAX_UNION_WORK
    try:
        memory_plan.MAX_UNION_WORK = 9  # 3 starts x 3 rows: still exact
        assert _peak(lo, hi, off, nb) == (12, 3, True)
        memory_plan.MAX_UNION_WORK = 8
        assert _peak(lo, hi, off, nb) == (16, 1, False)
        memory_plan.MAX_UNION_WORK = 0
        assert _peak(lo, hi, off, nb) == (16, 1, False)
        assert _peak(np.array([2]), np.array([2]), np.array([0]), np.array([5])) == (5, 2, False)
    finally:
        memory_plan.MAX_UNION_WORK = orig


def test_last_writers_hand_cases():
    from workbench.formats.pte.instructions import _inputs_holding, _last_writers, _last_writers_fast

    #            0   1   2  3  4  5   6  7   8  9
    mem = np.array([0, 0, 0, 0, 0, 0, 1, 0, 0, 0], np.int64)
    lo = np.array([0, 0, 0, 0, 0, 0, 0, 16, 8, 40], np.int64)
    hi = np.array([16, 16, 8, 8, 8, 32, 8, 32, 24, 48], np.int64)
    w = np.array([1, 3, -1, -1, -1, -1, -1, 2, -1, -1], np.int64)
    start = np.array([1, 3, 4, 2, 1, 0, 0, 2, 5, 6], np.int64)
    inputs = np.zeros(10, bool)
    inputs[5] = True
    views = np.array([2, 3, 4, 6, 8, 9], np.int64)
    want = {2: 1, 3: 0, 4: 5, 8: 1}
    assert _last_writers(views, mem, lo, hi, w, start, inputs) == want
    k, base = _last_writers_fast(views, mem, lo, hi, w, start, inputs)
    assert dict(zip(k.tolist(), base.tolist())) == want
    assert _inputs_holding(np.array([2, 6, 9]), mem, lo, hi, inputs).tolist() == [5, -1, -1]
    assert _inputs_holding(np.array([2]), mem, lo, hi, np.zeros(10, bool)).tolist() == [-1]
    two = inputs.copy()
    two[7] = True  # inputs in offset order: the first overlapping one wins
    assert _inputs_holding(np.array([8, 2]), mem, lo, hi, two).tolist() == [5, 5]
    assert _inputs_holding(np.zeros(0, np.int64), mem, lo, hi, two).tolist() == []


def test_last_writers_fast_equals_the_sweep():
    import random

    from workbench.formats.pte.instructions import _last_writers, _last_writers_fast

    rnd = random.Random(17)
    for trial in range(150):
        n = rnd.randrange(1, 14)
        mem = np.array([rnd.randrange(2) for _ in range(n)], np.int64)
        lo = np.array([rnd.randrange(0, 32, 8) for _ in range(n)], np.int64)
        hi = lo + np.array([rnd.choice([8, 8, 16, 24]) for _ in range(n)], np.int64)
        w = np.array([rnd.choice([-1, -1, 0, 1, 2, 3, 4, 5]) for _ in range(n)], np.int64)
        start = np.array([rnd.randrange(0, 7) for _ in range(n)], np.int64)
        inputs = np.array([rnd.random() < 0.15 for _ in range(n)], bool)
        views = np.flatnonzero((w < 0) & ~inputs)
        slow = _last_writers(views, mem, lo, hi, w, start, inputs)
        k, base = _last_writers_fast(views, mem, lo, hi, w, start, inputs)
        assert dict(zip(k.tolist(), base.tolist())) == slow, trial


def _random_plan(S, rnd, base_plan, name):
    """A method of random instructions over planned tensors, constants, lists and scalars."""
    consts = [ev for ev in base_plan.values if type(ev.val).__name__ == "Tensor"
              and ev.val.allocation_info is None and ev.val.data_buffer_idx][:2]
    values = list(consts)
    n_planned = rnd.randrange(3, 9)
    for _ in range(n_planned):
        size = rnd.choice([1, 2, 4, 8])
        off = rnd.randrange(0, 16) * 16
        values.append(S.EValue(S.Tensor(
            scalar_type=S.ScalarType.FLOAT, storage_offset=0, sizes=[size], dim_order=[0],
            requires_grad=False, layout=0, data_buffer_idx=0,
            allocation_info=S.AllocationDetails(memory_id=rnd.choice([1, 1, 1, 2]),
                                                memory_offset_low=off, memory_offset_high=0),
            shape_dynamism=S.TensorShapeDynamism.STATIC, extra_tensor_info=None)))
    values.append(S.EValue(S.Int(3)))
    tensors = list(range(len(values) - 1))
    values.append(S.EValue(S.TensorList(rnd.sample(tensors, 2))))
    values.append(S.EValue(S.OptionalTensorList([rnd.choice(tensors), -1])))
    values.append(S.EValue(S.TensorList([])))
    values.append(S.EValue(S.TensorList([rnd.choice(tensors), len(values) + 9, -3])))
    nv = len(values)
    inputs = rnd.sample(range(len(consts), nv - 5), 1)
    outputs = rnd.sample(range(nv), 2)
    ins = []
    for _ in range(rnd.randrange(2, 12)):
        kind = rnd.choice(["k", "k", "k", "d", "m", "f", "j"])
        arg = lambda: rnd.choice([*range(nv), nv + 2, -1]) if rnd.random() < 0.1 else rnd.randrange(nv)  # noqa: E731
        if kind == "k":
            args = [arg() for _ in range(rnd.randrange(0, 5))]
            if args and rnd.random() < 0.6:
                k = rnd.randrange(1, 3)
                outs = [arg() for _ in range(k)]
                args += outs + outs
            ins.append(S.Instruction(S.KernelCall(rnd.randrange(3), args)))
        elif kind == "d":
            args = [arg() for _ in range(rnd.randrange(1, 5))]
            ins.append(S.Instruction(S.DelegateCall(rnd.randrange(2), args)))
        elif kind == "m":
            ins.append(S.Instruction(S.MoveCall(arg(), arg())))
        elif kind == "f":
            ins.append(S.Instruction(S.FreeCall(arg())))
        else:
            ins.append(S.Instruction(S.JumpFalseCall(arg(), rnd.randrange(5))))
    cut = rnd.randrange(len(ins) + 1)
    chains = [S.Chain(inputs=[], outputs=[], instructions=ins[:cut], stacktrace=None),
              S.Chain(inputs=[], outputs=[], instructions=ins[cut:], stacktrace=None)]
    return S.ExecutionPlan(name=name, container_meta_type=base_plan.container_meta_type,
                           values=values, inputs=inputs, outputs=outputs, chains=chains,
                           operators=[S.Operator("aten::a", "out"), S.Operator("aten::b", ""),
                                      S.Operator("aten::c", "Tensor")],
                           delegates=[], non_const_buffer_sizes=[0, 256, 128])


@pytest.mark.parametrize("seed", range(8))
def test_random_methods_walks_agree(et, tmp_path, oracle, monkeypatch, seed):
    import random

    S, _ = et
    rnd = random.Random(seed)

    def edit(program, blobs):
        base = program.execution_plan[0]
        program.execution_plan += [_random_plan(S, rnd, base, f"r{k}") for k in range(3)]

    path = build(et, tmp_path, edit)
    frames = _frames_walks(path, monkeypatch, ["methods", "values", "operators", "delegates",
                                                "instructions", "lifetimes", "memory_efficiency",
                                                "memory_plan"])
    check_program_frames(frames, oracle, path)
    check_memory_plan(frames["memory_plan"], oracle, path)
    prog = oracle.read(path)
    ins = frames["instructions"]
    want = []
    for plan in prog.program.execution_plan:
        p = 0
        for c, ch in enumerate(plan.chains):
            for i, x in enumerate(ch.instructions):
                a = x.instr_args
                kind = type(a).__name__
                if kind in ("KernelCall", "DelegateCall"):
                    args = tuple(a.args)
                elif kind == "MoveCall":
                    args = (a.move_from, a.move_to)
                elif kind == "JumpFalseCall":
                    args = (a.cond_value_index,)
                else:
                    args = (a.value_index,)
                op = plan.operators[a.op_index] if kind == "KernelCall" else None
                want.append((plan.name, c, i, p, {"KernelCall": "kernel", "DelegateCall": "delegate",
                                                  "MoveCall": "move", "JumpFalseCall": "jump_false",
                                                  "FreeCall": "free"}[kind],
                             a.op_index if kind == "KernelCall" else None,
                             (f"{op.name}.{op.overload}" if op.overload else op.name) if op else None,
                             a.delegate_index if kind == "DelegateCall" else None, args,
                             a.destination_instruction if kind == "JumpFalseCall" else None))
                p += 1
    assert _rows(ins, ["method", "chain", "instruction", "position", "kind", "op_index", "op",
                       "delegate_index", "args", "destination"]) == want

    monkeypatch.setattr(readpath, "TIER", readpath.Tier.BATCHED)
    with wb.open(path, data=[]) as art:
        cols = art._parsed.builders["instructions"].__self__
        assert all(cols._walk(k) is not None for k in range(len(cols.r.methods)))


def test_lifetimes_and_memory_efficiency_by_hand(et, tmp_path, monkeypatch):
    """A method small enough to work out by hand: an input, a tensor written by an out
    kernel, a view of its bytes read later (it keeps the writer alive), an output, an arena
    nobody uses."""
    S, _ = et

    def planned(off, n=4, mem=1):
        return S.EValue(S.Tensor(
            scalar_type=S.ScalarType.FLOAT, storage_offset=0, sizes=[n], dim_order=[0],
            requires_grad=False, layout=0, data_buffer_idx=0,
            allocation_info=S.AllocationDetails(memory_id=mem, memory_offset_low=off,
                                                memory_offset_high=0),
            shape_dynamism=S.TensorShapeDynamism.STATIC, extra_tensor_info=None))

    def edit(program, blobs):
        base = program.execution_plan[0]
        ins = [S.Instruction(S.KernelCall(0, [0, 1, 1])), S.Instruction(S.KernelCall(0, [3, 2, 2])),
               S.Instruction(S.KernelCall(1, [2, 4]))]
        program.execution_plan = [S.ExecutionPlan(
            name="life", container_meta_type=base.container_meta_type,
            values=[planned(0), planned(16), planned(32), planned(16), S.EValue(S.Int(1))],
            inputs=[0], outputs=[2],
            chains=[S.Chain(inputs=[], outputs=[], instructions=ins, stacktrace=None)],
            operators=[S.Operator("aten::op", "out"), S.Operator("aten::use", "")],
            delegates=[], non_const_buffer_sizes=[0, 64, 32])]

    path = build(et, tmp_path, edit)
    frames = _frames_walks(path, monkeypatch, ["instructions", "lifetimes", "memory_efficiency"])
    ins = frames["instructions"]
    assert ins["reads"].tolist() == [(0,), (3,), (2, 4)]
    assert ins["writes"].tolist() == [(1,), (2,), ()]
    lt = frames["lifetimes"]
    assert list(lt.columns) == ["method", "value", "name", "storage", "mem_id", "offset", "nbytes",
                                "end_offset", "first", "last", "is_input", "is_output",
                                "live_from", "live_to"]
    assert _rows(lt, list(lt.columns)) == [
        ("life", 0, "life/0", "planned", 1, 0, 16, 16, 0, 0, True, False, 0, 0),
        ("life", 1, "life/1", "planned", 1, 16, 16, 32, 0, 0, False, False, 0, 1),
        ("life", 2, "life/2", "planned", 1, 32, 16, 48, 1, 2, False, True, 1, 2),
        ("life", 3, "life/3", "planned", 1, 16, 16, 32, 1, 1, False, False, 1, 1)]
    me = frames["memory_efficiency"]
    assert list(me.columns) == ["method", "mem_id", "arena_bytes", "tensors", "tensor_bytes",
                                "high_water", "peak_live_bytes", "peak_at", "peak_exact",
                                "efficiency"]
    assert _rows(me, list(me.columns)) == [("life", 1, 64, 4, 64, 48, 32, 0, True, 0.5),
                                           ("life", 2, 32, 0, 0, 0, 0, None, True, 0.0)]


def test_lifetimes_unused_inputs_outputs(et, tmp_path, monkeypatch):
    """Planned tensors no instruction names: an input (live at 0 only), an output (live to
    the last instruction), neither (never live); a method with no instructions."""
    S, _ = et

    def planned(off, mem=1):
        return S.EValue(S.Tensor(
            scalar_type=S.ScalarType.INT, storage_offset=0, sizes=[2], dim_order=[0],
            requires_grad=True, layout=0, data_buffer_idx=0,
            allocation_info=S.AllocationDetails(memory_id=mem, memory_offset_low=off,
                                                memory_offset_high=0),
            shape_dynamism=S.TensorShapeDynamism.DYNAMIC_BOUND,
            extra_tensor_info=S.ExtraTensorInfo(fully_qualified_name=f"t{off}")))

    def edit(program, blobs):
        base = program.execution_plan[0]
        meta = base.container_meta_type
        one = [S.Instruction(S.FreeCall(3)), S.Instruction(S.FreeCall(3))]
        program.execution_plan = [
            S.ExecutionPlan(name="m", container_meta_type=meta,
                            values=[planned(0), planned(8), planned(16), S.EValue(S.Int(0))],
                            inputs=[0], outputs=[1],
                            chains=[S.Chain(inputs=[], outputs=[], instructions=one, stacktrace=None)],
                            operators=[], delegates=[], non_const_buffer_sizes=[0, 24]),
            S.ExecutionPlan(name="c", container_meta_type=meta, values=[planned(0)], inputs=[0],
                            outputs=[0], chains=[], operators=[], delegates=[],
                            non_const_buffer_sizes=[0, 8, 0])]

    path = build(et, tmp_path, edit)
    frames = _frames_walks(path, monkeypatch, ["lifetimes", "memory_efficiency", "tensors"])
    lt = frames["lifetimes"]
    assert _rows(lt, ["method", "value", "name", "first", "last", "live_from", "live_to"]) == [
        ("m", 0, "t0", None, None, 0, 0), ("m", 1, "t8", None, None, None, 1),
        ("m", 2, "t16", None, None, None, None), ("c", 0, "t0", None, None, 0, 0)]
    me = frames["memory_efficiency"]
    got = _rows(me, list(me.columns))
    assert got[0] == ("m", 1, 24, 3, 24, 24, 8, 0, True, 8 / 24)
    assert got[1] == ("c", 1, 8, 1, 8, 8, 8, 0, True, 1.0)
    assert got[2] == ("c", 2, 0, 0, 0, 0, 0, None, True, None)  # efficiency NaN: no arena
    t = frames["tensors"]
    assert t["shape_dynamism"].astype(str).tolist() == ["dynamic_bound"] * 4
    assert t["requires_grad"].tolist() == [True] * 4


# =============================================================================================
# .pte reader: program structure errors, delegates, external data, every reference followed
# =============================================================================================
def _root(path):
    s = Source(path)
    return s, FlatBuffer(s, 0, s.size, identifier=b"ET12", name="Program").root("Program")


def _program_only(et, tmp_path, edit, name="p.pte"):
    """``edit(program)`` on mlp_portable, written as a bare flatbuffer (no extended header)."""
    _, variants = et
    from executorch.exir._serialize._flatbuffer_program import _program_to_flatbuffer

    program, _ = variants.split((SAMPLES / "mlp_portable.pte").read_bytes())
    edit(program)
    return _w(tmp_path, _program_to_flatbuffer(program).data, name)


def test_segments_without_extended_header(et, tmp_path, monkeypatch):
    S, _ = et

    def edit(program):
        program.execution_plan = []
        program.constant_segment = S.SubsegmentOffsets(segment_index=0, offsets=[])
        program.segments = [S.DataSegment(offset=0, size=0), S.DataSegment(offset=16, size=0)]

    path = _program_only(et, tmp_path, edit)
    s, root = _root(path)
    pos = root.tables(4)[1].pos
    s.close()
    assert open_error_both(path, monkeypatch) == (
        "CorruptError", "p.pte", "Program.segments[1]", pos,
        "segment 1 [0x10, +0x0) is listed but the file has no extended header to locate "
        "segment data")

    def edit2(program):
        program.execution_plan = []
        program.constant_segment = S.SubsegmentOffsets(segment_index=0, offsets=[])
        program.segments = [S.DataSegment(offset=0, size=0), S.DataSegment(offset=0, size=4)]

    path = _program_only(et, tmp_path, edit2)
    assert open_error_both(path, monkeypatch)[4] == (
        "segment 1 [0x0, +0x4) is listed but the file has no extended header to locate "
        "segment data")

    def edit3(program):
        program.execution_plan = []
        program.constant_segment = S.SubsegmentOffsets(segment_index=0, offsets=[])
        program.segments = [S.DataSegment(offset=0, size=0)] * 2

    path = _program_only(et, tmp_path, edit3)
    n = path.stat().st_size
    frames = frames_both(path, monkeypatch, ["segments"])
    rows = list(zip(frames["segments"]["name"], frames["segments"]["offset"],
                    frames["segments"]["size"]))
    assert rows[-2:] == [("constant_segment", n, 0), ("segment 1", n, 0)]


def _patched(src_path, tmp_path, patch, name="x.pte"):
    d = bytearray(src_path.read_bytes())
    with Source(src_path) as s:
        root = FlatBuffer(s, 0, s.size, identifier=b"ET12", name="Program").root("Program")
        info = patch(d, root)
    return _w(tmp_path, bytes(d), name), info


def test_segment_errors(tmp_path, monkeypatch):
    src = SAMPLES / "mlp_xnnpack.pte"  # two segments: the delegate blob and named data
    data = src.read_bytes()
    (_, base, sds) = struct.unpack_from("<QQQ", data, 16)

    def grow(d, root):
        seg = root.tables(4)[1]
        p = seg.field_pos(1, 8)
        off = seg.u64(0)
        struct.pack_into("<Q", d, p, sds - off + 1)
        return seg.pos, off

    path, (pos, off) = _patched(src, tmp_path, grow)
    assert open_error_both(path, monkeypatch) == (
        "OutOfBoundsError", "x.pte", "Program.segments[1]", pos,
        f"segment 1 [0x{off:x}, +0x{sds - off + 1:x}) runs past the segment data "
        f"(size 0x{sds:x}, ends at file offset 0x{base + sds:x})")

    def overlap(d, root):
        segs = root.tables(4)
        p = segs[3].field_pos(0, 8)
        assert p
        struct.pack_into("<Q", d, p, segs[2].u64(0) + 8)
        return segs[2].u64(0), segs[3].u64(1)

    path, (o2, z3) = _patched(src, tmp_path, overlap)
    start = base + o2 + 8
    assert open_error_both(path, monkeypatch) == (
        "CorruptError", "x.pte", "Program.segments[3]", start,
        f"segment 3 [0x{start:x}, 0x{start + z3:x}) overlaps segment 2")

    def exact_end(d, root):  # a segment ending exactly at the end of the segment data: fine
        seg = root.tables(4)[-1]
        struct.pack_into("<Q", d, seg.field_pos(1, 8), sds - seg.u64(0))

    path, _ = _patched(src, tmp_path, exact_end)
    wb.open(path, data=[]).close()


def test_segment_index_errors(tmp_path, monkeypatch, pte_variant):
    src = pte_variant("constant_not_first")  # its constant segment is segment 1: stored

    def patch(d, root):
        t = root.table(5)
        struct.pack_into("<I", d, t.field_pos(0, 4), 9)
        return t.pos

    path, pos = _patched(src, tmp_path, patch)
    assert open_error_both(path, monkeypatch) == (
        "OutOfBoundsError", "x.pte", "Program.constant_segment.segment_index", pos,
        "segment_index 9 is out of range (2 segments)")

    def named(d, root):
        t = root.tables(7)[1]
        p = t.field_pos(1, 4)
        assert struct.unpack_from("<I", d, p)[0] == 3
        struct.pack_into("<I", d, p, 6)
        return t.pos

    path, pos = _patched(SAMPLES / "mlp_xnnpack.pte", tmp_path, named)
    assert open_error_both(path, monkeypatch) == (
        "OutOfBoundsError", "x.pte", "Program.named_data[1].segment_index", pos,
        "segment_index 6 is out of range (6 segments)")
    path, pos = _patched(SAMPLES / "mlp_xnnpack.pte", tmp_path, lambda d, r: struct.pack_into(
        "<I", d, r.tables(7)[1].field_pos(1, 4), 5))  # the last one: fine
    wb.open(path, data=[]).close()


def test_mutable_segment_index_error(tmp_path, monkeypatch, pte_variant):
    src = pte_variant("two_mutable")

    def patch(d, root):
        t = root.tables(6)[0]
        struct.pack_into("<I", d, t.field_pos(0, 4), 3)
        return t.pos

    path, pos = _patched(src, tmp_path, patch)
    assert open_error_both(path, monkeypatch) == (
        "OutOfBoundsError", "x.pte", "Program.mutable_data_segments[0].segment_index", pos,
        "segment_index 3 is out of range (3 segments)")


def test_program_findings(pte_variant, monkeypatch):
    with Source(pte_variant("two_mutable")) as s:
        pos = FlatBuffer(s, 0, s.size, identifier=b"ET12", name="P").root("P").pos
    with wb.open(pte_variant("two_mutable"), data=[]) as art:
        f = [x for x in art._parsed.findings if x.structure == "Program.mutable_data_segments"]
    assert [x.as_dict() for x in f] == [{"severity": "warning", "structure": "Program.mutable_data_segments",
                  "offset": pos, "message": "2 mutable data segments: tensors are placed by "
                  "ExtraTensorInfo.mutable_data_segments_idx as the schema says, but ExecuTorch's "
                  "runtime (1.5.1) reads every initial value from mutable_data_segments[0] and its "
                  "Python deserializer refuses such a program"}]
    path = pte_variant("inline_constant_buffer")
    with Source(path) as s:
        root = FlatBuffer(s, 0, s.size, identifier=b"ET12", name="P").root("P")
        bufs = [b.vector(0, 1) for b in root.tables(2)]
    first = next(at for at, n in bufs if n)
    total = sum(n for _, n in bufs)
    with wb.open(path, data=[]) as art:
        f = [x for x in art._parsed.findings if x.structure == "Program.constant_buffer"]
        t = art.tensors
    assert [x.as_dict() for x in f] == [
        {"severity": "warning", "structure": "Program.constant_buffer", "offset": first,
                  "message": f"{total} bytes of constants inline in the flatbuffer (the legacy "
                  "constant_buffer): ExecuTorch's runtime (1.5.1) refuses such a program unless "
                  "built with ET_ENABLE_DEPRECATED_CONSTANT_BUFFER"}]
    inline = t[t["storage"] == "inline"]
    assert len(inline) and set(inline["offset"]) <= {at for at, _ in bufs}
    assert list(inline["offset"]) == [bufs[i][0] for i in inline["data_buffer_idx"]]
    assert inline["segment"].isna().all()


def test_buffer_sizes_and_names(et, tmp_path, monkeypatch):
    _ = et

    def edit(program, blobs):
        plan = program.execution_plan[0]
        plan.non_const_buffer_sizes = [0, 2**61, 2**61]

    path = build(et, tmp_path, edit)
    frames_both(path, monkeypatch, ["methods"])

    for sizes in ([0, -5], [0, 2**61, 2**61, 1], [-1] * 10):
        def edit(program, blobs, sizes=sizes):
            program.execution_plan[0].non_const_buffer_sizes = sizes

        path = build(et, tmp_path, edit)
        s, root = _root(path)
        pos = root.tables(1)[0].pos
        s.close()
        assert open_error_both(path, monkeypatch) == (
            "CorruptError", "built.pte", "Program.execution_plan[0].non_const_buffer_sizes", pos,
            f"non_const_buffer_sizes {sizes[:8]} are negative or add up to more than any memory")


def _with_delegate(S, ref, inline=None, calls=0):
    def edit(program, blobs):
        plan = program.execution_plan[0]
        plan.delegates = [S.BackendDelegate(
            id="FooBackend", processed=ref,
            compile_specs=[S.CompileSpec("k1", b"v"), S.CompileSpec("k2", b"")])]
        plan.chains[0].instructions += [S.Instruction(S.DelegateCall(0, [0]))] * calls
        if inline is not None:
            program.backend_delegate_data = [S.BackendDelegateInlineData(data=x) for x in inline]
    return edit


def test_delegate_reference_errors(et, tmp_path, monkeypatch):
    S, _ = et
    L = S.DataLocation
    where = "Program.execution_plan[0].delegates[0].processed"
    for ref, inline, detail in (
            (S.BackendDelegateDataReference(L.SEGMENT, 99), None,
             "segment index 99 is out of range (1 segments)"),
            (S.BackendDelegateDataReference(L.SEGMENT, 1), None,
             "segment index 1 is out of range (1 segments)"),
            (S.BackendDelegateDataReference(L.INLINE, 5), [], "inline delegate data index 5 is "
             "out of range (0 entries)"),
            (S.BackendDelegateDataReference(L.INLINE, 1), [b"x"], "inline delegate data index 1 "
             "is out of range (1 entries)")):
        path = build(et, tmp_path, _with_delegate(S, ref, inline))
        s, root = _root(path)
        pos = root.tables(1)[0].tables(7)[0].table(1).pos
        s.close()
        assert open_error_both(path, monkeypatch) == (
            "OutOfBoundsError", "built.pte", f"{where}.index", pos, detail)
    path = build(et, tmp_path, _with_delegate(S, S.BackendDelegateDataReference(L.SEGMENT, 0)))
    d = bytearray(path.read_bytes())
    s, root = _root(path)
    ref = root.tables(1)[0].tables(7)[0].table(1)
    p, pos = ref.field_pos(0, 1), ref.pos
    s.close()
    assert d[p] == 1
    d[p] = 2
    bad = _w(tmp_path, bytes(d), "loc.pte")
    assert open_error_both(bad, monkeypatch) == (
        "CorruptError", "loc.pte", f"{where}.location", pos, "data location 2 is unknown")


def test_delegate_frame(et, tmp_path, oracle, monkeypatch):
    S, _ = et
    L = S.DataLocation
    blob = b"not a known backend blob " * 3
    path = build(et, tmp_path, _with_delegate(S, S.BackendDelegateDataReference(L.INLINE, 1),
                                              [b"zz", blob], calls=2))
    frames = frames_both(path, monkeypatch, ["methods", "values", "operators", "delegates"])
    check_program_frames(frames, oracle, path)
    d = frames["delegates"]
    row = d.iloc[0]
    at = path.read_bytes().find(blob)
    assert (row["id"], row["location"], row["data_index"], row["offset"], row["size"],
            row["compile_specs"], row["calls"]) == ("FooBackend", "inline", 1, at, len(blob),
                                                    "k1, k2", 2)
    assert frames["methods"]["delegate_calls"].iloc[0] == 2
    assert frames["methods"]["delegates"].iloc[0] == 1
    path = build(et, tmp_path, _with_delegate(S, S.BackendDelegateDataReference(L.SEGMENT, 0)))
    frames = frames_both(path, monkeypatch, ["segments", "delegates"])
    row = frames["delegates"].iloc[0]
    assert (row["location"], row["data_index"], row["calls"]) == ("segment", 0, 0)
    seg = frames["segments"]
    named = seg[seg["index"] == 0]
    assert list(named["name"]) == ["constant_segment (+1 more)"]
    assert list(named["used_by"]) == ["constant_segment; forward delegate 0 (FooBackend)"]
    assert list(named["kind"].astype(str)) == ["constant"]


def test_external_data_that_does_not_fit(tmp_path, monkeypatch):
    import shutil

    from helpers import ptd_halve_first_dim

    pte = tmp_path / "m.pte"
    ptd = tmp_path / "m.ptd"
    shutil.copy(SAMPLES / "mlp_external.pte", pte)
    shutil.copy(SAMPLES / "mlp_external.ptd", ptd)
    with wb.open(pte) as art:
        ext = art.tensors[art.tensors["storage"] == "external"]
        keys = list(ext["fqn"])
        assert art._parsed.extra.data_choice == {str(ptd): ("sibling", len(keys))}
        assert not ext["missing"].any()
    ptd_halve_first_dim(ptd, keys[0])
    with wb.open(pte) as art:  # the sibling still resolves the other keys
        t = art.tensors
        t = t[t["storage"] == "external"].set_index("name")
        assert bool(t.loc[keys[0], "missing"]) and not t.loc[keys[1:], "missing"].any()
        assert pd.isna(t.loc[keys[0], "offset"]) and pd.isna(t.loc[keys[0], "file"])
        assert art._parsed.extra.data_choice == {str(ptd): ("sibling", len(keys) - 1)}
        f = [x for x in art._parsed.findings if x.structure == f"tensor {keys[0]!r}"]
        assert [x.as_dict() for x in f] == [
            {"severity": "warning", "structure": f"tensor {keys[0]!r}", "offset": None,
                      "message": f"data files hold this key with another dtype/shape: {[str(ptd)]}"}]
        # the unclaimed entry is listed as named data of the .ptd
        nd = art.tensors[(art.tensors["storage"] == "named_data") & (art.tensors["name"] == keys[0])]
        assert list(nd["file"]) == [str(ptd)]
    with wb.open(pte, data=[]) as art:
        assert art._parsed.extra.data_choice == {} and art.info["data_files"] == []
    with wb.open(pte, data=[ptd]) as art:
        assert art._parsed.extra.data_choice == {str(ptd): ("data", len(keys) - 1)}


def test_sibling_data_files(tmp_path, monkeypatch):
    from workbench.formats.pte import sibling_data_files

    for n in ("z.ptd", "m.ptd", "a.ptd", "m.pte", "x.txt", "mptd", "m.ptd.bak"):
        (tmp_path / n).write_bytes(b"")
    (tmp_path / "d.ptd").mkdir()
    assert sibling_data_files(str(tmp_path / "m.pte")) == [
        str(tmp_path / "m.ptd"), str(tmp_path / "a.ptd"), str(tmp_path / "z.ptd")]
    assert sibling_data_files(str(tmp_path / "q.pte")) == [
        str(tmp_path / "a.ptd"), str(tmp_path / "m.ptd"), str(tmp_path / "z.ptd")]
    monkeypatch.chdir(tmp_path)
    assert sibling_data_files("m.pte") == ["m.ptd", "a.ptd", "z.ptd"]
    assert sibling_data_files(str(tmp_path / "nowhere" / "m.pte")) == []


@pytest.mark.parametrize("name", ["mlp_portable.pte", "mlp_xnnpack.pte", "no_weights.pte",
                                  "mlp_external.pte"])
def test_program_info(name):
    path = SAMPLES / name
    data = path.read_bytes()
    with wb.open(path) as art:
        info, p = art.info, art._parsed
        assert art.format == "pte" and p.format == "pte" and p.path == str(path)
        assert info["version"] == 0
        if data[8:12] == b"eh00":
            length, ps, base = struct.unpack_from("<IQQ", data, 12)
            eh = info["extended_header"]
            assert (eh.length, eh.program_size, eh.segment_base_offset) == (length, ps, base)
            assert info["program_size"] == ps and info["segment_base_offset"] == base
        else:
            assert info["extended_header"] is None and info["segment_base_offset"] == 0
            assert info["program_size"] == len(data)
        assert info["data_files"] == ([str(SAMPLES / "mlp_external.ptd")]
                                      if name == "mlp_external.pte" else [])
        assert p.tensor_frames == ["tensors", "delegate_tensors"]
        assert p.extra.span == (0, len(data))
        assert set(p.sources) == {str(path), *info["data_files"]}
        t = art.tensors
        ext = set(t.loc[t["storage"] == "external", "fqn"])
        assert p.extra.wanted_keys() == len(ext)  # and no content-hash key held elsewhere
        assert set(p.builders) == {"segments", "tensors", "methods", "values", "operators",
                                   "delegates", "named_data", "delegate_tensors",
                                   "delegate_nodes", "memory_plan", "instructions", "lifetimes",
                                   "memory_efficiency"}


def test_bpte_info_is_the_programs(bundled_io, tmp_path):
    _, load, dump = bundled_io
    b = load()
    data = dump(b)
    path = _w(tmp_path, data, "b.bpte")
    inner = _w(tmp_path, bytes(b.program), "i.pte")
    with wb.open(path) as art, wb.open(inner, data=[]) as one:
        info = dict(art.info)
        po = info.pop("program_offset")
        assert info.pop("program_size_in_bundle") == len(b.program)
        assert info.pop("bundled_version") == b.version
        want = dict(one.info)
        want.pop("data_files")
        eh, weh = info.pop("extended_header"), want.pop("extended_header")
        assert info == want and repr(eh) == repr(weh)
        assert art._parsed.extra.program.extra.span == (po, po + len(b.program))
        assert art._parsed.findings is art._parsed.extra.program.findings


def test_ptd_fits_and_info(tmp_path):
    data = ptd_bytes([(0, 24), (32, 8)], [("a", 0, (6, (2, 3), (0, 1))), ("b", 1, None)])
    path = _w(tmp_path, data, "f.ptd")
    with wb.open(path) as art:
        d = art._parsed.extra.ptd
        assert d.fits(0, "float32", (2, 3), 24) and d.fits(0, "float32", (2, 3), 999)
        assert not d.fits(0, "float16", (2, 3), 12) and not d.fits(0, "float32", (3, 2), 24)
        assert not d.fits(0, "float32", [2, 3], 24)  # shapes are tuples
        assert d.fits(1, "int64", (1,), 8) and d.fits(1, "uint8", (3,), 3)
        assert not d.fits(1, "uint8", (9,), 9)
        assert d.by_key == {"a": 0, "b": 1}
        assert d.path == str(path) and d.size == len(data)
        assert d.seg_off.tolist() == [struct.unpack_from("<Q", data, 32)[0] + o for o in (0, 32)]
        assert d.seg_size.tolist() == [24, 8]
        info = art.info
        assert art.format == "ptd" and info["version"] == 0
        h = info["header"]
        assert (h.length, h.flatbuffer_offset, h.flatbuffer_size, h.segment_base_offset,
                h.segment_data_size) == struct.unpack_from("<IQQQQ", data, 12)
        assert info["segment_base_offset"] == h.segment_base_offset
        assert "schema_version" not in info
        assert set(art._parsed.builders) == {"segments", "tensors", "named_data"}
        assert art._parsed.sources == {str(path): art._parsed.sources[str(path)]}


@pytest.mark.parametrize("name", ["mlp_xnnpack.pte", "mlp_xnnpack_qc8.pte", "wide_xnnpack_8da4w.pte",
                                  "wide_xnnpack_8da4w_external.pte", "tied_xnnpack.pte",
                                  "mlp_portable.pte"])
def test_named_data_layouts_from_the_graph(name, monkeypatch):
    """The named_data frame's tensor/dtype/shape/quant/group_size: the first graph tensor
    stored under the key (scales under their own key: '<tensor> (scales)')."""
    from workbench.formats._layout import named_data_role

    frames = frames_both(SAMPLES / name, monkeypatch, ["named_data", "delegate_tensors"])
    dt = frames["delegate_tensors"]
    want: dict = {}
    scales: dict = {}
    for r in dt.astype(object).itertuples(index=False):
        key = None if pd.isna(r.named_key) else r.named_key
        if key is not None and key not in want:
            want[key] = (r.name, r.dtype, tuple(r.shape), None if pd.isna(r.quant) else r.quant,
                         None if pd.isna(r.group_size) else int(r.group_size))
        skey = None if pd.isna(r.scale_key) else r.scale_key
        if skey is not None and skey not in scales:
            scales[skey] = (f"{r.name} (scales)", r.scale_dtype,
                            None if pd.isna(r.num_scales) else (int(r.num_scales),), None, None)
    for k, v in scales.items():
        want.setdefault(k, v)
    nd = frames["named_data"]
    got = _rows(nd, ["key", "tensor", "dtype", "shape", "quant", "group_size"])
    assert got == [(k, *want.get(k, (None,) * 5)) for k in nd["key"]]
    assert _nullable(nd["role"].astype(object)) == [
        "tensor" if h else named_data_role(k) for k, h in zip(nd["key"], nd["has_layout"])]
    if name.startswith("wide"):
        assert any(t and t.endswith(" (scales)") for t, *_ in [g[1:] for g in got])
    with wb.open(SAMPLES / name) as art:
        assert art._parsed.extra.delegate_blobs.key_layouts() == {
            k: (*v[:4], -1 if v[4] is None else v[4]) for k, v in want.items()}


def test_delegate_segments_split_or_shared(et, tmp_path, monkeypatch):
    """A delegate's segment is split into its blob's sub-segments when it alone uses it;
    shared by two delegates it stays one row naming both."""
    import copy

    path = SAMPLES / "mlp_xnnpack.pte"
    frames = frames_both(path, monkeypatch, ["segments", "delegates"])
    seg = frames["segments"]
    d = frames["delegates"].iloc[0]
    inside = seg[(seg["offset"] >= d["offset"]) & (seg["offset"] < d["offset"] + d["size"])
                 & (seg["size"] > 0)]
    assert len(inside) >= 2 and inside["size"].sum() == d["size"]
    assert inside["offset"].iloc[0] == d["offset"]
    assert (inside["index"] == d["data_index"]).all()

    def edit(program, blobs):
        plan = program.execution_plan[0]
        plan.delegates.append(copy.deepcopy(plan.delegates[0]))
        plan.delegates[1].id = "Second"

    p2 = build(et, tmp_path, edit, sample="mlp_xnnpack.pte")
    frames = frames_both(p2, monkeypatch, ["segments", "delegates"])
    d = frames["delegates"]
    assert list(d["id"]) == ["XnnpackBackend", "Second"] and d["data_index"].nunique() == 1
    seg = frames["segments"]
    row = seg[seg["index"] == d["data_index"].iloc[0]]
    assert len(row) == 1
    assert row["name"].iloc[0] == "forward delegate 0 (XnnpackBackend) (+1 more)"
    assert row["used_by"].iloc[0] == ("forward delegate 0 (XnnpackBackend); "
                                      "forward delegate 1 (Second)")
    assert str(row["kind"].iloc[0]) == "delegate"
    assert (row["offset"].iloc[0], row["size"].iloc[0]) == (d["offset"].iloc[0], d["size"].iloc[0])


def _ref_cases():
    """(sample or variant, locate(root) -> (table, field), structure) for reference fields
    the .pte reader follows (each pointed past the end of the flatbuffer in turn)."""
    P = "Program"
    E = f"{P}.execution_plan[0]"

    def plan(r):
        return r.tables(1)[0]

    def tensor_val(r, want_field):
        for k, v in enumerate(plan(r).tables(2)):
            if v.u8(0) == 5:
                t = v.union(0, 12)[1]
                if t.has(want_field):
                    return k, t
        raise AssertionError("no such tensor")

    def extra(r):
        for k, v in enumerate(plan(r).tables(2)):
            if v.u8(0) == 5:
                t = v.union(0, 12)[1]
                if t.has(9) and t.table(9).has(1):
                    return k, t.table(9)
        raise AssertionError

    def alloc(r):
        return tensor_val(r, 6)

    cases = [
        ("mlp_portable.pte", lambda r: (r, 1), f"{P}.execution_plan"),
        ("mlp_portable.pte", lambda r: (r, 4), f"{P}.segments"),
        ("mlp_portable.pte", lambda r: (r, 5), f"{P}.constant_segment"),
        ("mlp_portable.pte", lambda r: (r.table(5), 1), f"{P}.constant_segment.offsets"),
        ("mlp_xnnpack.pte", lambda r: (r, 7), f"{P}.named_data"),
        ("mlp_xnnpack.pte", lambda r: (r.tables(7)[1], 0), f"{P}.named_data[1].key"),
        ("kv_cache.pte", lambda r: (r, 6), f"{P}.mutable_data_segments"),
        ("kv_cache.pte", lambda r: (r.tables(6)[0], 1), f"{P}.mutable_data_segments[0].offsets"),
        ("variant:inline_constant_buffer", lambda r: (r, 2), f"{P}.constant_buffer"),
        ("variant:inline_constant_buffer", lambda r: (r.tables(2)[1], 0),
         f"{P}.constant_buffer[1].storage"),
        ("variant:inline_delegate", lambda r: (r, 3), f"{P}.backend_delegate_data"),
        ("variant:inline_delegate", lambda r: (r.tables(3)[0], 0),
         f"{P}.backend_delegate_data[0].data"),
        ("mlp_portable.pte", lambda r: (plan(r), 0), f"{E}.name"),
        ("mlp_portable.pte", lambda r: (plan(r), 2), f"{E}.values"),
        ("mlp_portable.pte", lambda r: (plan(r), 3), f"{E}.inputs"),
        ("mlp_portable.pte", lambda r: (plan(r), 4), f"{E}.outputs"),
        ("mlp_portable.pte", lambda r: (plan(r), 5), f"{E}.chains"),
        ("mlp_portable.pte", lambda r: (plan(r), 6), f"{E}.operators"),
        ("mlp_portable.pte", lambda r: (plan(r), 8), f"{E}.non_const_buffer_sizes"),
        ("mlp_xnnpack.pte", lambda r: (plan(r), 7), f"{E}.delegates"),
        ("mlp_xnnpack.pte", lambda r: (plan(r).tables(7)[0], 0), f"{E}.delegates[0].id"),
        ("mlp_xnnpack.pte", lambda r: (plan(r).tables(7)[0], 1), f"{E}.delegates[0].processed"),
        ("mlp_xnnpack.pte", lambda r: (plan(r).tables(7)[0], 2),
         f"{E}.delegates[0].compile_specs"),
        ("mlp_portable.pte", lambda r: (plan(r).tables(6)[1], 0), f"{E}.operators[1].name"),
        ("mlp_portable.pte", lambda r: (plan(r).tables(6)[1], 1), f"{E}.operators[1].overload"),
        ("mlp_portable.pte", lambda r: (plan(r).tables(5)[0], 2), f"{E}.chains[0].instructions"),
        ("mlp_portable.pte", lambda r: (plan(r).tables(5)[0].tables(2)[1], 1),
         f"{E}.chains[0].instructions[1].instr_args"),
        ("mlp_portable.pte", lambda r: (plan(r).tables(5)[0].tables(2)[1].union(0, 6)[1], 1),
         f"{E}.chains[0].instructions[1].instr_args.args"),
        ("mlp_portable.pte", lambda r: (plan(r).tables(2)[3], 1), f"{E}.values[3].val"),
        ("mlp_portable.pte", lambda r: (tensor_val(r, 2)[1], 2), ("tensor", 2, "sizes")),
        ("mlp_portable.pte", lambda r: (tensor_val(r, 3)[1], 3), ("tensor", 3, "dim_order")),
        ("mlp_portable.pte", lambda r: (alloc(r)[1], 6), ("tensor", 6, "allocation_info")),
        ("mlp_external.pte", lambda r: (tensor_val(r, 9)[1], 9), ("tensor", 9, "extra_tensor_info")),
        ("mlp_external.pte", lambda r: (extra(r)[1], 1), ("extra", None, "fully_qualified_name")),
    ]
    return cases


@pytest.mark.parametrize("where,locate,structure", _ref_cases(),
                         ids=[c[2] if isinstance(c[2], str) else c[2][2] for c in _ref_cases()])
def test_reference_past_the_end(where, locate, structure, tmp_path, monkeypatch, pte_variant):
    src = pte_variant(where.split(":")[1]) if where.startswith("variant:") else SAMPLES / where
    data = bytearray(src.read_bytes())
    with Source(src) as s:
        size = struct.unpack_from("<Q", data, 16)[0] if data[8:12] == b"eh00" else len(data)
        root = FlatBuffer(s, 0, size, identifier=b"ET12", name="Program").root("Program")
        table, field = locate(root)
        if not isinstance(structure, str):
            kind, _, name = structure
            vals = root.tables(1)[0].tables(2)
            k = next(i for i, v in enumerate(vals) if v.u8(0) == 5 and (
                v.union(0, 12)[1].pos == table.pos or
                (v.union(0, 12)[1].has(9) and v.union(0, 12)[1].table(9).pos == table.pos)))
            base = f"Program.execution_plan[0].values[{k}].val"
            structure = f"{base}.{name}" if kind == "tensor" else f"{base}.extra_tensor_info.{name}"
        p = table.field_pos(field, 4)
        assert p, structure
    rel = 0x7FFFFFF0
    struct.pack_into("<I", data, p, rel)
    path = _w(tmp_path, bytes(data), "r.pte")

    got = []
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))

        def read_all():
            with wb.open(path, data=[]) as art:
                for n in art.frames:
                    art.frames[n]

        got.append(raises(read_all))
    assert got[0] == got[1] == (
        "OutOfBoundsError", "r.pte", structure, p + rel,
        f"points outside the Program flatbuffer [0x0, 0x{size:x}) (length 4)")


def test_flatbuf_union_value_outside():
    fb, L, n = fb_edit(lambda d, L: struct.pack_into("<I", d, L["f5"], 0x10000))
    root = fb.root("Root")
    for name, structure in (("u", "Root.u"), ("", "Root.field5")):
        assert ferr(lambda name=name: root.union(4, 3, name)) == (
            "OutOfBoundsError", structure, PRE + L["f5"] + 0x10000,
            f"points outside the Test flatbuffer [0x{PRE:x}, 0x{PRE + n:x}) (length 4)")
    fb, L, n = fb_edit(lambda d, L: struct.pack_into("<i", d, L["uni"], 0x7000))
    assert ferr(lambda: fb.root("Root").union(4, 3, "u"))[:2] == ("OutOfBoundsError", "Root.u vtable")


def test_vecfb_slow_path_names_the_vtable():
    from workbench._vecfb import SlowPath, VecReader

    fb, L, _ = fb_edit(lambda d, L: struct.pack_into("<H", d, L["sub_vt"], 3))
    with pytest.raises(SlowPath) as ei:
        VecReader(fb).tables(np.array([PRE + L["sub"]]), "kids")
    assert str(ei.value) == (f"{fb.src.name}: kids vtable at 0x{PRE + L['sub_vt']:x}: vtable size 3 "
                             "is invalid (must be even and >= 4)")


def _edge_tensors(S):
    def t(sizes, dims, *, mem=None, high=0, dyn=0, rg=False, fqn=None, code=None, dbi=0):
        return S.EValue(S.Tensor(
            scalar_type=code if code is not None else S.ScalarType.FLOAT, storage_offset=0,
            sizes=sizes, dim_order=dims, requires_grad=rg, layout=0, data_buffer_idx=dbi,
            allocation_info=None if mem is None else S.AllocationDetails(
                memory_id=mem, memory_offset_low=16, memory_offset_high=high),
            shape_dynamism=S.TensorShapeDynamism(dyn),
            extra_tensor_info=None if fqn is None else S.ExtraTensorInfo(fully_qualified_name=fqn)))

    return [t([2, 3], [1, 0], mem=1), t([], [], mem=1, dyn=2, rg=True), t([0, 4], [0, 1], mem=1),
            t([4, 1, 2], [2, 0, 1], mem=2, high=1, fqn="hi"), t([3], [0], dyn=1, fqn="unalloc"),
            t([2, 2], [0, 1], code=S.ScalarType.BFLOAT16, mem=1, fqn="bf"),
            t([5], [0], code=S.ScalarType.BOOL, mem=1), t([1], [0], code=S.ScalarType.LONG, dbi=1)]


def test_edge_tensors_match_the_oracle(et, tmp_path, oracle, monkeypatch):
    """Permuted dim orders, scalars, empty tensors, a memory offset past 4 GiB, dynamic
    shapes, requires_grad, fully qualified names on planned and unallocated tensors, and a
    constant sharing another's buffer; on both paths."""
    S, _ = et

    def edit(program, blobs):
        plan = program.execution_plan[0]
        plan.values.extend(_edge_tensors(S))
        plan.non_const_buffer_sizes = [0, 4096, 2**33]

    path = build(et, tmp_path, edit)
    frames = frames_both(path, monkeypatch, ["tensors", "methods", "values", "operators",
                                             "delegates", "memory_plan"])
    check_program_frames(frames, oracle, path)
    assert _rows(frames["tensors"], TENSOR_COLS) == expected_tensors(oracle, path, [])
    t = frames["tensors"].set_index("name")
    assert t.loc["hi", "mem_offset"] == 16 + 2**32 and t.loc["hi", "dim_order"] == (2, 0, 1)
    assert t.loc["unalloc", "storage"] == "unallocated" and t.loc["bf", "nbytes"] == 8


def test_unknown_dtype_and_negative_size(tmp_path, monkeypatch):
    from helpers import Located

    src = SAMPLES / "mlp_portable.pte"
    with Located(src) as loc:
        v, _, tensor = loc.tensor_tables()[1]
        p_code = tensor.field_pos(0, 1)
        sizes_at = loc.vector_pos(tensor, 2)
        tpos = tensor.pos
    where = f"Program.execution_plan[0].values[{v}].val"
    d = bytearray(src.read_bytes())
    code = d[p_code]
    for bad in (30, 100, 0x80):
        d[p_code] = bad
        path = _w(tmp_path, bytes(d), "c.pte")
        n = bad if bad < 128 else bad - 256
        assert open_error_both(path, monkeypatch) == (
            "CorruptError", "c.pte", f"{where}.scalar_type", tpos, f"scalar_type {n} is unknown")
    d[p_code] = code
    n = struct.unpack_from("<I", d, sizes_at)[0]
    sizes = list(struct.unpack_from(f"<{n}i", d, sizes_at + 4))
    struct.pack_into("<i", d, sizes_at + 4 + 4 * (n - 1), -2)
    path = _w(tmp_path, bytes(d), "c.pte")
    assert open_error_both(path, monkeypatch) == (
        "CorruptError", "c.pte", f"{where}.sizes", tpos,
        f"negative size in sizes {[*sizes[:-1], -2]}")


def test_constant_offset_far_past_the_end(tmp_path, monkeypatch):
    """A constant's offset in its segment beyond 2**62: the exact error on both paths."""
    from helpers import Located

    src = SAMPLES / "mlp_portable.pte"
    d = bytearray(src.read_bytes())
    with Located(src) as loc:
        cs = loc.program.table(5)
        start, n = cs.vector(1, 8)
        seg_index = cs.u32(0)
        seg_off = loc.segment_base_offset + loc.segments()[seg_index].u64(0)
        dbi = n - 1
        v, tensor = next((v, t) for v, _, t in loc.tensor_tables() if t.u32(5) == dbi)
        nbytes = 4
        for s in tensor.scalars(2, "i"):
            nbytes *= s
        tpos = tensor.pos
    for huge in (2**62, 2**64 - 1, len(d)):
        struct.pack_into("<Q", d, start + 8 * dbi, huge)
        path = _w(tmp_path, bytes(d), "o.pte")
        off = seg_off + huge
        assert open_error_both(path, monkeypatch) == (
            "OutOfBoundsError", "o.pte", f"Program.execution_plan[0].values[{v}].val data", off,
            f"{nbytes} bytes of tensor data at 0x{off:x} run past the end of the file "
            f"(size 0x{len(d):x})")
    assert tpos


def test_duplicate_method_names(et, tmp_path, monkeypatch):
    import copy

    def edit(program, blobs):
        program.execution_plan.append(copy.deepcopy(program.execution_plan[0]))
        program.execution_plan.append(copy.deepcopy(program.execution_plan[0]))

    path = build(et, tmp_path, edit)
    frames = frames_both(path, monkeypatch, ["values", "methods", "tensors"])
    v = frames["values"]
    assert list(v["method"].cat.categories) == ["forward", "forward'", "forward''"]
    n = len(v) // 3
    assert list(v["method"].astype(str)) == ["forward"] * n + ["forward'"] * n + ["forward''"] * n
    assert list(frames["methods"]["method"]) == ["forward"] * 3
    assert list(frames["methods"]["index"]) == [0, 1, 2]


# -- valid files are read on the fast paths (a fallback would only cost time: pinned here) ----
@pytest.fixture
def no_fallback(monkeypatch):
    """Every scalar (fallback) reader raises: a valid file must be read on the fast paths."""
    from workbench.formats.ptd import reader as ptd_reader
    from workbench.formats.pte import columns, instructions, program, tensors

    def refuse(what):
        def f(*a, **k):
            raise AssertionError(f"fell back to the scalar path: {what}")
        return f

    monkeypatch.setattr(readpath, "TIER", readpath.Tier.BATCHED)
    monkeypatch.setattr(tensors.TensorReader, "values_slow", refuse("values_slow"))
    monkeypatch.setattr(program.ProgramReader, "_instructions_slow", refuse("_instructions_slow"))
    monkeypatch.setattr(instructions, "_slow", refuse("instructions._slow"))
    monkeypatch.setattr(instructions.InstructionColumns, "_rw_method", refuse("_rw_method"))
    monkeypatch.setattr(columns, "_value_summary", refuse("_value_summary"))
    monkeypatch.setattr(ptd_reader, "_entries_slow", refuse("_entries_slow"))
    monkeypatch.setattr(program.ProgramReader, "_segments_slow", refuse("_segments_slow"))
    monkeypatch.setattr(program.ProgramReader, "_named_slow", refuse("_named_slow"))


def _read_all(path, **kw):
    with wb.open(path, **kw) as art:
        for n in art.frames:
            art.frames[n]


FAST_SAMPLES = sorted(p.name for p in SAMPLES.glob("*.pt[ed]"))


@pytest.mark.parametrize("name", FAST_SAMPLES)
def test_valid_samples_take_the_fast_paths(name, no_fallback):
    _read_all(SAMPLES / name)


def test_valid_built_programs_take_the_fast_paths(et, tmp_path, no_fallback):
    import random

    S, _ = et

    def many(program, blobs):
        plan = program.execution_plan[0]
        plan.values.extend(_extra_values(S))
        plan.values.extend(_edge_tensors(S))
        plan.non_const_buffer_sizes = [0, 4096, 2**33]
        rnd = random.Random(99)
        program.execution_plan += [_random_plan(S, rnd, plan, f"r{k}") for k in range(4)]

    for k, edit in enumerate((many, _instruction_program(S))):
        _read_all(build(et, tmp_path, edit, name=f"b{k}.pte"), data=[])
    for segments, named in PTD_CASES.values():
        _read_all(_w(tmp_path, ptd_bytes(segments, named), "f.ptd"))


def test_memory_offset_just_below_the_limit(et, tmp_path, no_fallback):
    """memory_offset_high 2**30 - 1 (offset below 2**62): valid, read on the fast path."""

    def edit(program, blobs):
        plan = program.execution_plan[0]
        t = next(ev.val for ev in plan.values
                 if type(ev.val).__name__ == "Tensor" and ev.val.allocation_info is not None)
        t.allocation_info.memory_offset_high = (1 << 30) - 1

    path = build(et, tmp_path, edit)
    with wb.open(path, data=[]) as art:
        mp = art.frames["memory_plan"]
        assert [o >> 32 for o in mp["offset"]].count((1 << 30) - 1) == 1


@pytest.mark.parametrize("name", ["mlp_external.pte", "wide_xnnpack_8da4w_external.pte",
                                  "mlp_xnnpack_external.pte"])
def test_named_data_with_data_files(name, oracle, monkeypatch):
    from workbench.formats._layout import named_data_role

    path = SAMPLES / name
    ptd = path.with_suffix(".ptd")
    with wb.open(ptd) as one:
        own = _rows(one.frames["named_data"], ["key", "segment", "file", "offset", "size", "align",
                                               "has_layout", "role"])
    got = []
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        with wb.open(path) as art:
            assert art.info["data_files"] == [str(ptd)]
            nd = art.frames["named_data"]
            layouts = art._parsed.extra.delegate_blobs.key_layouts()
            users = art._parsed.builders["tensors"].__self__.ext.key_users
            got.append(_rows(nd, list(nd.columns)))
    assert got[0] == got[1]
    prog = oracle.read(path)
    want = []
    for e in prog.program.named_data or []:
        off, size = prog.segment_abs(e.segment_index)
        want.append((e.key, e.segment_index, str(path), off, size, off & -off if off else None,
                     False, named_data_role(e.key)))
    want += own
    assert [r[:8] for r in got[0]] == want
    assert any(r[7] == "tensor" for r in own) or name != "mlp_external.pte"
    for r in got[0]:
        lay = layouts.get(r[0])
        u = users.get(r[0])
        assert r[8:] == (("; ".join(u) if u else None,) + (
            (None,) * 5 if lay is None else (*lay[:4], None if lay[4] < 0 else lay[4])))


def _drop_field(d, table, field):
    """Mark ``field`` of ``table`` absent in its vtable (shared vtables: every table of it)."""
    import struct

    soff = struct.unpack_from("<i", d, table.pos)[0]
    vt = table.pos - soff
    struct.pack_into("<H", d, vt + 4 + 2 * field, 0)


def test_absent_names(tmp_path, monkeypatch):
    """Absent strings: a method is named 'method<k>', operators, delegate ids, compile spec
    keys and named-data keys are ''."""
    from workbench.flatbuf import FlatBuffer
    from workbench.source import Source

    src = SAMPLES / "mlp_portable.pte"
    d = bytearray(src.read_bytes())
    with Source(src) as s:
        plan = FlatBuffer(s, 0, s.size, identifier=b"ET12", name="P").root("P").tables(1)[0]
        _drop_field(d, plan, 0)  # ExecutionPlan.name
        _drop_field(d, plan.tables(6)[0], 0)  # Operator.name (the operators share a vtable)
        _drop_field(d, plan.tables(6)[0], 1)  # Operator.overload
        n_ops = len(plan.tables(6))
    path = _w(tmp_path, bytes(d), "a.pte")
    frames = frames_both(path, monkeypatch, ["methods", "operators", "values", "instructions"])
    assert list(frames["methods"]["method"]) == ["method0"]
    assert set(frames["values"]["method"].astype(str)) == {"method0"}
    ops = frames["operators"]
    assert list(ops["name"]) == list(ops["op"]) == list(ops["overload"]) == [""] * n_ops
    assert set(frames["instructions"]["op"]) == {""}

    src = SAMPLES / "mlp_xnnpack.pte"
    d = bytearray(src.read_bytes())
    with Source(src) as s:
        root = FlatBuffer(s, 0, s.size, identifier=b"ET12", name="P").root("P")
        dl = root.tables(1)[0].tables(7)[0]
        _drop_field(d, dl, 0)  # BackendDelegate.id
        specs = dl.tables(2)
        if specs:
            _drop_field(d, specs[0], 0)  # CompileSpec.key
        _drop_field(d, root.tables(7)[0], 0)  # NamedData.key
    path = _w(tmp_path, bytes(d), "b.pte")
    frames = frames_both(path, monkeypatch, ["delegates", "named_data", "segments",
                                             "instructions"])
    dels = frames["delegates"]
    assert list(dels["id"]) == [""] and list(dels["compile_specs"]) == [", ".join([""] * len(specs))]
    assert set(frames["named_data"]["key"]) == {""}
    assert set(frames["instructions"]["delegate"].dropna()) == {""}
    assert "forward delegate 0 ()" in set(frames["segments"]["used_by"])


# --------------------------------------------------------------------------------------------
# lifetimes from the oracle's instructions
# --------------------------------------------------------------------------------------------

def check_lifetimes(frames, oracle, path):
    """first/last use, input/output, live range of every planned tensor, from the oracle's
    instructions (list values expanded to their members); a view's writer may live longer."""
    prog = oracle.read(path)
    lt = frames["lifetimes"]
    got = {(r[0], r[1]): r[2:] for r in _rows(lt, ["method", "value", "first", "last", "is_input",
                                                    "is_output", "live_from", "live_to",
                                                    "storage", "mem_id", "offset", "nbytes",
                                                    "end_offset", "name"])}
    want_keys = []
    for plan in prog.program.execution_plan:
        nv = len(plan.values)
        ins = [i.instr_args for c in plan.chains for i in c.instructions]
        uses: dict[int, list[int]] = {}
        for p, a in enumerate(ins):
            kind = type(a).__name__
            args = (list(a.args) if kind in ("KernelCall", "DelegateCall") else
                    [a.move_from, a.move_to] if kind == "MoveCall" else
                    [a.cond_value_index] if kind == "JumpFalseCall" else [a.value_index])
            for v in args:
                if not 0 <= v < nv:
                    continue
                val = plan.values[v].val
                members = ([x for x in val.items if 0 <= x < nv]
                           if type(val).__name__ in ("TensorList", "OptionalTensorList") else [v])
                for x in members:
                    uses.setdefault(x, []).append(p)
        n = len(ins)
        for v, ev in enumerate(plan.values):
            t = ev.val
            if type(t).__name__ != "Tensor" or t.allocation_info is None:
                continue
            want_keys.append((plan.name, v))
            u = uses.get(v)
            first, last = (min(u), max(u)) if u else (None, None)
            is_in, is_out = v in plan.inputs, v in plan.outputs
            mutable = bool(t.data_buffer_idx and prog.program.mutable_data_segments)
            start = 0 if is_in or mutable else first
            end = n - 1 if (is_out or mutable) and n else (0 if is_out or mutable else last)
            if is_in and not u and not is_out:
                end = 0
            g = got[(plan.name, v)]
            a = t.allocation_info
            off = a.memory_offset_low | (a.memory_offset_high << 32)
            e = t.extra_tensor_info
            name = (e.fully_qualified_name if e is not None and e.fully_qualified_name
                    else f"{plan.name}/{v}")
            assert g[:5] == (first, last, is_in, is_out, start), (plan.name, v)
            assert g[6:] == ("mutable" if mutable else "planned", a.memory_id, off,
                             prog.nbytes(t), off + prog.nbytes(t), name)
            if end is None:
                assert g[5] is None or g[5] >= 0
            else:
                assert g[5] is not None and g[5] >= end, (plan.name, v, g, end)
    assert list(got) == want_keys


@pytest.mark.parametrize("name", PTE_SAMPLES)
def test_lifetimes_match_the_instructions(name, oracle, monkeypatch):
    path = SAMPLES / name
    frames = frames_both(path, monkeypatch, ["lifetimes"])
    check_lifetimes(frames, oracle, path)


@pytest.mark.parametrize("seed", range(4))
def test_lifetimes_of_random_methods(et, tmp_path, oracle, monkeypatch, seed):
    import random

    S, _ = et
    rnd = random.Random(1000 + seed)

    def edit(program, blobs):
        base = program.execution_plan[0]
        program.execution_plan += [_random_plan(S, rnd, base, f"r{k}") for k in range(3)]

    path = build(et, tmp_path, edit)
    frames = frames_both(path, monkeypatch, ["lifetimes"])
    check_lifetimes(frames, oracle, path)


# --------------------------------------------------------------------------------------------
# behaviours pinned by the triage of surviving mutants (group B: .pte / .ptd readers)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("start", [0, 16])
def test_extended_header_magic_without_room_for_its_length(tmp_path, start):
    """'eh00' followed by fewer than 4 bytes: a TruncatedError naming the header's length
    field and its offset (read directly and through read_header)."""
    p = _program_file(tmp_path, b"ET12eh00\x01\x02", start)
    size = start + 4 + 10
    want = ("TruncatedError", "h.pte", "extended header length", start + 12,
            f"4 bytes run past the end (size 0x{size:x})")
    with Source(p) as s:
        assert s.size == size
        assert raises(pte_header.ExtendedHeader.read, s, start + 8) == want
        assert raises(pte_header.read_header, s, start, size) == want


@pytest.mark.parametrize("slot,name", [(1, "segments"), (2, "named_data")])
def test_ptd_vector_count_past_the_flatbuffer(slot, name, tmp_path, monkeypatch):
    """A FlatTensor segments / named_data vector whose count runs past the flatbuffer: the
    same TruncatedError on the fast and the scalar path, naming the vector and its offset."""
    segments, named = PTD_CASES["simple"]
    data = bytearray(ptd_bytes(segments, named))
    fb_end = 48 + struct.unpack_from("<Q", data, 24)[0]  # flatbuffer_offset + flatbuffer_size
    path = _w(tmp_path, bytes(data), "t.ptd")
    with Source(path) as s:
        root = FlatBuffer(s, 0, fb_end, identifier=b"FT01", name="FlatTensor").root("FlatTensor")
        start, n = root.vector(slot, 4)
    assert n == 3
    struct.pack_into("<I", data, start - 4, 0x10000000)
    path.write_bytes(bytes(data))
    assert ptd_error_both(path, monkeypatch) == (
        "TruncatedError", "t.ptd", f"FlatTensor.{name}", start - 4,
        f"vector of 268435456 x 4-byte elements runs past the end of the FlatTensor flatbuffer "
        f"(0x{fb_end:x})")


def test_a_broken_blob_leaves_the_other_blobs_whole(et, tmp_path, monkeypatch):
    """Two XNNPACK delegates, the second blob broken: the first is still read in full (its
    constants are the program's own named data, in this file), the second is one opaque range
    and an error finding naming its header field and offset."""
    import copy

    _, variants = et
    program, blobs = variants.split((SAMPLES / "mlp_xnnpack.pte").read_bytes())
    plan = program.execution_plan[0]
    broken = bytearray(blobs[plan.delegates[0].processed.index])
    assert broken[4:8] == b"XH00" and struct.unpack_from("<HI", broken, 8) == (30, 0x20)
    struct.pack_into("<I", broken, 14, 0x10000)  # flatbuffer_size: far past the blob
    second = copy.deepcopy(plan.delegates[0])
    second.processed.index = len(blobs)
    plan.delegates.append(second)
    path = _w(tmp_path, variants.assemble(program, [*blobs, bytes(broken)]), "two.pte")
    with wb.open(SAMPLES / "mlp_xnnpack.pte", data=[]) as art:
        want = art.frames["delegate_tensors"]
        want_backend = art._parsed.extra.delegate_blobs.backends()[0]
    with wb.open(path, data=[]) as art:
        d = art.frames["delegates"]
        off1, size1 = int(d["offset"].iloc[1]), int(d["size"].iloc[1])
        assert art._parsed.extra.delegate_blobs.backends() == [want_backend, (None, None)]
        assert [f.as_dict() for f in art._parsed.findings if f.severity == "error"] == [{
            "severity": "error",
            "structure": "forward delegate 1 (XnnpackBackend): XNNPACK header (XH00).flatbuffer_offset",
            "offset": off1 + 10,
            "message": "the delegate blob cannot be taken apart: flatbuffer [0x20, +0x10000) does "
                       f"not fit between the header (30 bytes) and the end of the blob (size "
                       f"0x{size1:x}) (shown as one opaque range)"}]
        got = art.frames["delegate_tensors"]
        nd = art.frames["named_data"].set_index("key")
        seg = art.frames["segments"]
        assert seg[seg["index"] == d["data_index"].iloc[1]][["offset", "size"]].values.tolist() == [
            [off1, size1]]
        assert (seg["index"] == d["data_index"].iloc[0]).sum() >= 2  # split into sub-segments
    same = [c for c in want.columns if c not in ("file", "offset", "align")]
    pd.testing.assert_frame_equal(got[same], want[same], check_exact=True)
    named = got["named_key"].notna()
    assert named.any() and (got["storage"].astype(str)[named] == "named_data").all()
    assert list(got["file"][named]) == [str(path)] * int(named.sum())
    assert list(got["offset"][named]) == [nd.loc[k, "offset"] for k in got["named_key"][named]]


def test_external_tensor_larger_than_its_entry(et, tmp_path, monkeypatch):
    """Two external tensors share the fqn 'fc2.bias', the first 8 times larger than the data
    file's entry: that one is missing, with an error finding naming the tensor, the entry's
    offset and both sizes; the other still lies in the data file."""
    S, _ = et
    ptd = SAMPLES / "mlp_external.ptd"

    def edit(program, blobs):
        plan = program.execution_plan[0]
        bias = next(ev.val for ev in plan.values if type(ev.val).__name__ == "Tensor"
                    and ev.val.extra_tensor_info is not None
                    and ev.val.extra_tensor_info.fully_qualified_name == "fc2.bias")
        assert list(bias.sizes) == [8]
        big = S.Tensor(scalar_type=bias.scalar_type, storage_offset=0, sizes=[64], dim_order=[0],
                       requires_grad=False, layout=0, data_buffer_idx=0, allocation_info=None,
                       shape_dynamism=S.TensorShapeDynamism(0),
                       extra_tensor_info=S.ExtraTensorInfo(
                           fully_qualified_name="fc2.bias",
                           location=S.TensorDataLocation.EXTERNAL))
        plan.values += [S.EValue(big), S.EValue(bias)]

    path = build(et, tmp_path, edit, sample="mlp_external.pte")
    with wb.open(ptd) as one:
        entry = one.frames["named_data"].set_index("key").loc["fc2.bias"]
        entry_off, entry_size = int(entry["offset"]), int(entry["size"])
    assert entry_size == 32
    got = []
    for fast in (True, False):

        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        with wb.open(path, data=[ptd]) as art:
            t = art.tensors  # placed when the frame is made: the findings come with it
            findings = [f for f in art._parsed.findings if f.structure == "tensor 'fc2.bias'"]
            t = t[(t["name"] == "fc2.bias") & (t["storage"] == "external")]
            got.append((findings, _rows(t, ["nbytes", "missing", "file", "offset"])))
    assert got[0] == got[1]
    findings, rows = got[0]
    assert [x.as_dict() for x in findings] == [
        {"severity": "error", "structure": "tensor 'fc2.bias'", "offset": entry_off,
                         "message": "256 bytes expected but the data file holds 32"}]
    assert rows == [(32, False, str(ptd), entry_off), (256, True, None, None),
                    (32, False, str(ptd), entry_off)]


def _planned(S, off, n=4):
    return S.EValue(S.Tensor(
        scalar_type=S.ScalarType.FLOAT, storage_offset=0, sizes=[n], dim_order=[0],
        requires_grad=False, layout=0, data_buffer_idx=0,
        allocation_info=S.AllocationDetails(memory_id=1, memory_offset_low=off,
                                            memory_offset_high=0),
        shape_dynamism=S.TensorShapeDynamism(0), extra_tensor_info=None))


def test_delegate_call_that_only_writes(et, tmp_path, oracle, monkeypatch):
    """A delegate call whose every argument is a fresh planned tensor writes them all and
    reads none, on the vectorised and on the per-instruction walk."""
    S, _ = et

    def edit(program, blobs):
        meta = program.execution_plan[0].container_meta_type
        ins = [S.Instruction(S.DelegateCall(0, [1, 2])), S.Instruction(S.DelegateCall(0, [0, 1, 3])),
               S.Instruction(S.DelegateCall(0, [3]))]
        program.execution_plan.append(S.ExecutionPlan(
            name="writes", container_meta_type=meta,
            values=[_planned(S, 0), _planned(S, 16), _planned(S, 32), _planned(S, 48)],
            inputs=[0], outputs=[3],
            chains=[S.Chain(inputs=[], outputs=[], instructions=ins, stacktrace=None)],
            operators=[], delegates=[], non_const_buffer_sizes=[0, 64]))

    path = build(et, tmp_path, edit)
    frames = _frames_walks(path, monkeypatch, ["instructions", "lifetimes"])
    check_lifetimes(frames, oracle, path)
    ins = frames["instructions"]
    ins = ins[ins["method"] == "writes"]
    assert ins["reads"].tolist() == [(), (0, 1), (3,)]
    assert ins["writes"].tolist() == [(1, 2), (3,), ()]


def test_delegate_calls_counted_only_for_delegate_calls(et, tmp_path, oracle, monkeypatch):
    """Move, jump-false and free instructions whose first field equals a delegate's index
    add nothing to that delegate's calls (on both paths)."""
    S, _ = et
    base = _instruction_program(S)
    L = S.DataLocation

    def edit(program, blobs):
        base(program, blobs)
        kinds = program.execution_plan[-1]
        kinds.delegates = [S.BackendDelegate(
            id="FooBackend", processed=S.BackendDelegateDataReference(L.INLINE, 0),
            compile_specs=[])]
        program.backend_delegate_data = [S.BackendDelegateInlineData(data=b"opaque blob")]
        # Move(0, 1), JumpFalse(2, 4), Free(1): fields 0 name delegates 0, 2 and 1
        kinds.delegates += [S.BackendDelegate(
            id=f"Other{k}", processed=S.BackendDelegateDataReference(L.INLINE, 0),
            compile_specs=[]) for k in (1, 2)]

    path = build(et, tmp_path, edit)
    frames = frames_both(path, monkeypatch, ["methods", "values", "operators", "delegates"])
    check_program_frames(frames, oracle, path)
    d = frames["delegates"]
    assert d[["method", "index", "calls"]].astype(object).values.tolist() == [
        ["kinds", 0, 1], ["kinds", 1, 0], ["kinds", 2, 0]]


def test_method_inputs_and_outputs_keep_their_sign(et, tmp_path, oracle, monkeypatch):
    """ExecutionPlan.inputs / outputs are [int] (i32): ProgramReader keeps negative entries
    negative, as ExecuTorch's deserializer reads them, on both paths."""
    from workbench.formats.pte import ProgramReader

    def edit(program, blobs):
        plan = program.execution_plan[0]
        plan.inputs = [*plan.inputs, -1]
        plan.outputs = [*plan.outputs, -1, -(2**31)]

    path = build(et, tmp_path, edit)
    want = oracle.read(path).program.execution_plan[0]
    assert list(want.outputs)[-2:] == [-1, -(2**31)]
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        with Source(path) as s:
            r = ProgramReader(s, 0, s.size)
            r.parse()
            m = r.methods[0]
            assert (tuple(m.inputs), tuple(m.outputs)) == (tuple(want.inputs), tuple(want.outputs))
    frames = frames_both(path, monkeypatch, ["methods", "values", "operators", "delegates"])
    check_program_frames(frames, oracle, path)


def test_named_data_of_a_delegated_program_with_only_an_empty_data_file(tmp_path):
    """A delegated program without named data of its own, given an empty .ptd: the
    named_data frame has no rows (the graph's layouts have no key to describe), and the
    delegate's constants are missing."""
    import shutil

    shutil.copyfile(SAMPLES / "mlp_xnnpack_external.pte", tmp_path / "m.pte")
    _w(tmp_path, ptd_bytes([], []), "e.ptd")
    with wb.open(tmp_path / "m.pte", data=[tmp_path / "e.ptd"]) as art:
        assert not art._parsed.extra.delegate_blobs.r.named
        nd = art.frames["named_data"]
        assert len(nd) == 0 and "dtype" in nd.columns
        dt = art.frames["delegate_tensors"]
        named = dt[dt["named_key"].notna()]
        assert len(named) and named["missing"].all()


# -- the value tables of several methods are read in one pass --------------------------------
def _program(path):
    from workbench.formats.pte.program import ProgramReader

    src = Source(path)
    r = ProgramReader(src, 0, src.size)
    r.parse()
    return r


def test_values_of_many_methods_read_together_equal_one_by_one():
    from workbench.formats.pte.program import Program
    from workbench.formats.pte.tensors import Tensors

    r = _program(SAMPLES / "multi_method.pte")
    plans = r.fb.root("Program").tables(Program.execution_plan, "execution_plan")
    many = r.tensor_reader.values_many(plans)
    assert len(many) == len(plans) == 6
    for (vtypes, vpos, t), plan in zip(many, plans):
        w_vtypes, w_vpos, w = r.tensor_reader.values_fast(plan)
        assert vtypes.tolist() == w_vtypes.tolist() and vpos.tolist() == w_vpos.tolist()
        for f in Tensors.__slots__:
            if f != "shape_id":  # ids of the shapes of all methods; equal <=> equal shapes
                assert getattr(t, f).tolist() == getattr(w, f).tolist(), f
        same = t.shape_id[:, None] == t.shape_id[None, :]
        assert (same == (w.shape_id[:, None] == w.shape_id[None, :])).all()
    assert [len(m.tensors) for m in r.methods] == [len(t) for _, _, t in many]


def test_a_method_the_joint_pass_cannot_vouch_for_is_read_alone(monkeypatch):
    """When the joint pass gives up, every method is read on its own fast path (the frames
    stay the same)."""
    from workbench.formats.pte import tensors

    path = SAMPLES / "multi_method.pte"
    with wb.open(path) as art:
        want = {n: art.frames[n] for n in ("tensors", "values", "methods")}
    calls = []
    real = tensors.TensorReader._tensors_fast

    def first_gives_up(self, tidx, tpos, where):
        calls.append(len(tidx))
        if len(calls) == 1:
            raise SlowPath("test")
        return real(self, tidx, tpos, where)

    monkeypatch.setattr(tensors.TensorReader, "_tensors_fast", first_gives_up)
    with wb.open(path) as art:
        for n, frame in want.items():
            pd.testing.assert_frame_equal(art.frames[n], frame)
    assert calls[0] == sum(calls[1:]) and len(calls) == 1 + 6  # the joint pass, then each


def test_an_error_in_the_joint_pass_is_left_to_the_methods_in_order(monkeypatch):
    """An ArtifactError met while reading all value tables at once (say method 3's table
    runs past the end) is not raised from there: the methods are read one by one, in order,
    so the error a broken program gets is the one of its first broken method."""
    from workbench.formats.pte import tensors

    path = SAMPLES / "multi_method.pte"
    with wb.open(path) as art:
        want = art.frames["tensors"]

    def broken(self, plans):
        raise CorruptError("joint pass", file=str(path), structure="x", offset=0)

    monkeypatch.setattr(tensors.TensorReader, "values_many", broken)
    with wb.open(path) as art:
        pd.testing.assert_frame_equal(art.frames["tensors"], want)
