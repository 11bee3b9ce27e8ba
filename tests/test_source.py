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



# -- reads through the descriptor (readinto / chunks): what mutation testing found untested ----

READERS = ("u8", "u16", "u32", "i32", "u64", "i64")


@pytest.mark.parametrize("reader", READERS)
def test_default_structure_names(src, reader):
    """Without a ``what``, the error names the read itself (``u8``, ``u16``, ...)."""
    with pytest.raises(ArtifactError) as e:
        getattr(src, reader)(src.size)
    assert e.value.structure == reader and e.value.file == src.name and e.value.offset == src.size


def test_slices_default_to_range(src):
    import numpy as np

    for call in (lambda: src.view(src.size, 1), lambda: src.bytes(src.size, 1),
                 lambda: src.readinto(src.size, np.empty(1, np.uint8)),
                 lambda: next(src.chunks(src.size, 1))):
        with pytest.raises(TruncatedError) as e:
            call()
        assert e.value.structure == "range" and e.value.offset == src.size


class _Preadv:
    """A stand-in for ``os.preadv`` that serves at most ``step`` bytes per call from the real
    file (then ``zeros_after`` calls in, 0 bytes: a short read) and records every call; more
    than ``max_calls`` calls is a read loop that makes no progress (failed, not hung)."""

    def __init__(self, data: bytes, step: int, zeros_after: int | None = None,
                 max_calls: int = 100) -> None:
        self.data, self.step, self.zeros_after = data, step, zeros_after
        self.max_calls = max_calls
        self.calls: list[tuple[int, int]] = []

    def __call__(self, fd, buffers, offset):
        (buf,) = buffers
        self.calls.append((offset, len(buf)))
        if len(self.calls) > self.max_calls:
            raise AssertionError(f"{self.max_calls} reads and still reading: no progress "
                                 f"(last: {self.calls[-3:]})")
        if self.zeros_after is not None and len(self.calls) > self.zeros_after:
            if len(self.calls) > self.zeros_after + 1:
                raise AssertionError("read again after the file ended")
            return 0
        chunk = self.data[offset:offset + min(self.step, len(buf))]
        buf[:len(chunk)] = chunk
        return len(chunk)


@pytest.mark.parametrize("step", [1, 3])
def test_partial_reads_are_continued_where_they_stopped(src, path, monkeypatch, step):
    """Short reads add up: each next read starts where the bytes read so far end (no re-read)."""
    import numpy as np

    import workbench.source as source

    fake = _Preadv(path.read_bytes(), step)
    monkeypatch.setattr(source.os, "preadv", fake)
    out = src.readinto(3, np.zeros(10, np.uint8), "x")
    assert out.tobytes() == PAYLOAD[3:13]
    assert [o for o, _ in fake.calls] == list(range(3, 13, step))
    assert [n for _, n in fake.calls] == [10 - k for k in range(0, 10, step)]
    parts = [bytes(c) for c in src.chunks(2, 9, "y", chunk=4)]
    assert parts == [PAYLOAD[2:6], PAYLOAD[6:10], PAYLOAD[10:11]]


def test_a_read_that_ends_early_is_a_stale_file(src, path, monkeypatch):
    import numpy as np

    import workbench.source as source
    from workbench.errors import StaleFileError

    monkeypatch.setattr(source.os, "preadv", _Preadv(path.read_bytes(), 4, zeros_after=1))
    with pytest.raises(StaleFileError) as e:
        src.readinto(5, np.zeros(10, np.uint8), "tensor 't'")
    assert (e.value.file, e.value.structure, e.value.offset) == (src.name, "tensor 't'", 5)
    assert e.value.detail == ("the file ended at 0x9 while 10 bytes were read: it changed since "
                              "it was opened; reload it (Artifact.reload())")


def test_one_byte_and_zero_bytes(src, monkeypatch):
    import numpy as np

    import workbench.source as source

    one = src.readinto(1, np.zeros(1, np.uint8))
    assert one.tolist() == [PAYLOAD[1]] and PAYLOAD[1] != 0
    monkeypatch.setattr(source.os, "preadv", _Preadv(b"", 1, zeros_after=0))
    empty = np.zeros(0, np.uint8)
    assert src.readinto(src.size, empty) is empty  # nothing to read: no read at all
    assert list(src.chunks(0, 0)) == []


def test_a_file_changed_during_a_copy_is_refused(src, path, monkeypatch):
    """The identity is checked before and after the copy; both errors name the read."""
    import numpy as np

    import workbench.source as source
    from workbench.errors import StaleFileError

    real = os.preadv

    def rewrite_then_read(fd, buffers, offset):
        k = real(fd, buffers, offset)
        os.utime(path, ns=(0, 12345))  # the file changes under the copy
        return k

    monkeypatch.setattr(source.os, "preadv", rewrite_then_read)
    with pytest.raises(StaleFileError) as e:
        src.readinto(4, np.zeros(4, np.uint8), "after")
    assert (e.value.structure, e.value.offset) == ("after", 4)
    with pytest.raises(StaleFileError) as e:  # changed now: refused before reading
        src.readinto(6, np.zeros(2, np.uint8), "before")
    assert (e.value.structure, e.value.offset) == ("before", 6)
    with pytest.raises(StaleFileError) as e:
        next(src.chunks(6, 2, "chunks"))
    assert (e.value.structure, e.value.offset) == ("chunks", 6)
