"""workbench.source.Source: a read-only map with checked little-endian reads and slices."""

from __future__ import annotations

import os
import struct

import pytest

from workbench.errors import ArtifactError, OutOfBoundsError, TruncatedError
from workbench.source import Source

PAYLOAD = (struct.pack("<BHIQ", 0xAB, 0xBEEF, 0xDEADBEEF, 0x0123456789ABCDEF)
           + struct.pack("<bhiq", -2, -3, -4, -5) + b"tail")


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "data.bin"
    p.write_bytes(PAYLOAD)
    return p


@pytest.fixture
def src(path):
    with Source(path) as s:
        yield s


def test_attributes(src, path):
    assert src.path == str(path)
    assert src.name == "data.bin"
    assert src.size == len(PAYLOAD) == os.path.getsize(path)
    assert len(src.buf) == src.size
    assert src.buf.readonly
    assert "data.bin" in repr(src)


def test_integer_reads(src):
    assert src.u8(0) == 0xAB
    assert src.u16(1) == 0xBEEF
    assert src.u32(3) == 0xDEADBEEF
    assert src.u64(7) == 0x0123456789ABCDEF
    assert src.u8(15) == 0xFE  # -2 unsigned
    assert src.i32(18) == -4
    assert src.i64(22) == -5
    assert src.u32(0) == struct.unpack_from("<I", PAYLOAD, 0)[0]


@pytest.mark.parametrize("reader,size", [("u8", 1), ("u16", 2), ("u32", 4), ("i32", 4),
                                         ("u64", 8), ("i64", 8)])
def test_reads_past_the_end(src, reader, size):
    read = getattr(src, reader)
    read(src.size - size)  # the last one that fits
    with pytest.raises(TruncatedError) as ei:
        read(src.size - size + 1, "thing")
    e = ei.value
    assert "data.bin" in str(e) and "thing" in str(e) and "0x" in str(e)
    assert e.offset == src.size - size + 1
    with pytest.raises(OutOfBoundsError):
        read(src.size + 1)
    with pytest.raises(OutOfBoundsError):
        read(-1)
    with pytest.raises(OutOfBoundsError):
        read(2**64)


def test_view_is_zero_copy_and_read_only(src):
    v = src.view(3, 4, "word")
    assert isinstance(v, memoryview)
    assert v.readonly
    assert bytes(v) == PAYLOAD[3:7]
    with pytest.raises(TypeError):
        v[0] = 0
    assert v.obj is src.buf.obj  # a slice of the map, not a copy
    assert src.view(src.size, 0) == b""


def test_bytes_is_a_copy(src):
    b = src.bytes(0, 4)
    assert isinstance(b, bytes) and b == PAYLOAD[:4]


@pytest.mark.parametrize("offset,length,cls", [
    (0, len(PAYLOAD) + 1, TruncatedError),
    (len(PAYLOAD) - 1, 2, TruncatedError),
    (len(PAYLOAD) + 1, 0, OutOfBoundsError),
    (-1, 1, OutOfBoundsError),
    (0, -1, OutOfBoundsError),
    (2**63, 2**63, OutOfBoundsError),
    (8, 2**64, TruncatedError),
])
def test_view_checks(src, offset, length, cls):
    with pytest.raises(cls) as ei:
        src.view(offset, length, "range")
    assert isinstance(ei.value, ArtifactError) and isinstance(ei.value, ValueError)
    assert "data.bin" in str(ei.value)


def test_check_with_end(src):
    src.check(0, 4, "x", end=4)
    with pytest.raises(TruncatedError):
        src.check(2, 4, "x", end=4)
    with pytest.raises(OutOfBoundsError):
        src.check(5, 0, "x", end=4)


def test_head(src):
    assert src.head(4) == PAYLOAD[:4]
    assert src.head(10_000) == PAYLOAD
    assert isinstance(src.head(), bytes)


def test_empty_file(tmp_path):
    p = tmp_path / "empty"
    p.write_bytes(b"")
    with Source(p) as s:
        assert s.size == 0
        assert s.head() == b""
        assert s.view(0, 0) == b""
        with pytest.raises(TruncatedError):
            s.u8(0)
        with pytest.raises(OutOfBoundsError):
            s.view(1, 0)


def test_not_files(tmp_path):
    with pytest.raises(IsADirectoryError):
        Source(tmp_path)
    with pytest.raises(FileNotFoundError):
        Source(tmp_path / "missing")


def test_never_writes(path):
    before = (path.read_bytes(), os.stat(path).st_mtime_ns)
    with Source(path) as s:
        with pytest.raises(TypeError):
            s.buf[0] = 1
    assert (path.read_bytes(), os.stat(path).st_mtime_ns) == before


def test_close_keeps_exported_views_alive(path):
    import numpy as np

    s = Source(path)
    arr = np.frombuffer(s.view(0, 8), np.uint8)
    s.close()  # must not raise although a numpy view still exports the map
    assert arr.tobytes() == PAYLOAD[:8]
    s.close()  # idempotent

