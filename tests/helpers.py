"""Test helpers (not fixtures): raw bytes of returned tensors, a full exercise of an opened
artifact that lets only ArtifactError through, and locating structures in a real .pte."""

from __future__ import annotations

import os
import pathlib
import random
import signal
import struct
from contextlib import contextmanager

import workbench as wb
from workbench.flatbuf import FlatBuffer, Table
from workbench.source import Source

# Union tags of the program schema (EValue.val and Instruction.instr_args), from program.fbs.
N_VALUE_TYPES = 12
TENSOR = 5
N_INSTRUCTION_TYPES = 6


def tensor_bytes(x, dim_order=None) -> bytes:
    """The bytes of a returned tensor in *storage* order (``dim_order``), numpy or torch."""
    import numpy as np

    if isinstance(x, np.ndarray):
        if dim_order is not None and x.ndim:
            x = x.transpose(tuple(dim_order))
        return np.ascontiguousarray(x).tobytes()
    import torch

    assert isinstance(x, torch.Tensor), type(x)
    if dim_order is not None and x.dim():
        x = x.permute(tuple(dim_order))
    x = x.contiguous().reshape(-1)
    return x.view(torch.uint8).numpy().tobytes() if x.numel() else b""


def tensor_key(row) -> object:
    """The key ``art.tensor`` accepts for one row of ``art.tensors`` (method, value) or name."""
    import pandas as pd

    method = getattr(row, "method", None)
    value = getattr(row, "value", None)
    if method is not None and not pd.isna(method) and value is not None and not pd.isna(value):
        return (str(method), int(value))
    return str(row.name)


def exercise(path, max_tensors: int | None = None,
             invariants: bool = False) -> wb.ArtifactError | None:
    """Open ``path``, build every frame, the summary and ``validate()``, read stored tensors
    (and, with ``invariants``, assert :func:`check_invariants` when it opened).

    Returns the :class:`ArtifactError` raised (or ``None`` when everything worked). Any
    other exception propagates: that is the bug the hostile tests look for.
    """
    try:
        art = wb.open(path)
    except wb.ArtifactError as e:
        return e
    try:
        for name in list(art.frames):
            art.frames[name]
        art.summary()
        if hasattr(art, "validate"):
            art.validate()
        t = art.tensors
        stored = t[t["offset"].notna()]
        for i, row in enumerate(stored.itertuples(index=False)):
            if max_tensors is not None and i >= max_tensors:
                break
            x = art.tensor(tensor_key(row))
            del x
        if invariants:
            check_invariants(art, max_tensors)
    except wb.ArtifactError as e:
        return e
    finally:
        art.close()
    return None


#: Multiplier for every time bound in the tests (hang guards on hostile inputs, never
#: performance targets): 1 here; ``bench/mutation.py`` sets ``WORKBENCH_TEST_TIME_SCALE``
#: because mutated code runs through a trampoline per call (and its workers share the cores).
TIME_SCALE = float(os.environ.get("WORKBENCH_TEST_TIME_SCALE", "1") or 1)


class Hang(Exception):
    """Raised by :func:`deadline` when a call takes far too long."""


@contextmanager
def deadline(seconds: float):
    """Interrupt the block with :class:`Hang` after ``seconds`` (main thread, POSIX only)."""
    if not hasattr(signal, "setitimer"):  # pragma: no cover
        yield
        return

    seconds *= TIME_SCALE

    def on_alarm(signum, frame):
        raise Hang(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class Located:
    """Absolute positions of structures in a real .pte, found with workbench.flatbuf."""

    def __init__(self, path) -> None:
        self.path = pathlib.Path(path)
        self.src = Source(path)
        self.data = self.path.read_bytes()
        if self.data[8:12] == b"eh00":
            (self.program_size,) = struct.unpack_from("<Q", self.data, 16)
            (self.segment_base_offset,) = struct.unpack_from("<Q", self.data, 24)
        else:
            self.program_size, self.segment_base_offset = len(self.data), 0
        self.fb = FlatBuffer(self.src, 0, self.program_size, identifier=b"ET12", name="Program")
        self.program = self.fb.root("Program")

    def close(self) -> None:
        self.src.close()

    def __enter__(self) -> Located:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def root_pos(self) -> int:
        return self.program.pos

    def segments(self) -> list[Table]:
        return self.program.tables(4, "segments")

    def plans(self) -> list[Table]:
        return self.program.tables(1, "execution_plan")

    def values(self, plan: int = 0) -> list[Table]:
        return self.plans()[plan].tables(2, "values")

    def tensor_tables(self, plan: int = 0) -> list[tuple[int, Table, Table]]:
        """``(value index, EValue table, Tensor table)`` for the tensors of one plan."""
        out = []
        for i, v in enumerate(self.values(plan)):
            t, tab = v.union(0, N_VALUE_TYPES)
            if t == TENSOR:
                out.append((i, v, tab))
        return out

    def string_pos(self, table: Table, field: int) -> int:
        """Absolute offset of the u32 length of string field ``field``."""
        p = table.field_pos(field, 4)
        assert p, "field absent"
        return p + struct.unpack_from("<I", self.data, p)[0]

    def vector_pos(self, table: Table, field: int) -> int:
        """Absolute offset of the u32 count of vector field ``field``."""
        return self.string_pos(table, field)


_SPECIAL_U32 = (0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0, 1, 0xFFFF, 0x10000)


def mutate(data: bytes, rng: random.Random, hot: int) -> tuple[str, bytes]:
    """One mutant: ``hot`` bytes at the start (the flatbuffer) get most of the hits."""
    d = bytearray(data)
    n = len(d)

    def pos(width: int = 1, aligned: int = 1) -> int:
        hi = hot if rng.random() < 0.85 else n
        p = rng.randrange(0, max(hi - width, 1))
        return p - p % aligned

    kind = rng.choice(("bitflip", "u32", "u32", "u64", "byte", "trunc", "zeros", "copy"))
    if kind == "bitflip":
        for _ in range(rng.randint(1, 4)):
            p = pos()
            d[p] ^= 1 << rng.randrange(8)
        desc = "bitflip"
    elif kind == "u32":
        p = pos(4, rng.choice((1, 4)))
        v = rng.choice((*_SPECIAL_U32, rng.getrandbits(32)))
        struct.pack_into("<I", d, p, v)
        desc = f"u32 0x{v:x} at {p}"
    elif kind == "u64":
        p = pos(8, 8)
        v = rng.choice((2**64 - 1, 2**63, 2**32, n, n + 1))
        struct.pack_into("<Q", d, p, v)
        desc = f"u64 0x{v:x} at {p}"
    elif kind == "byte":
        p = pos()
        d[p] = rng.randrange(256)
        desc = f"byte 0x{d[p]:x} at {p}"
    elif kind == "trunc":
        cut = rng.randrange(0, n)
        del d[cut:]
        desc = f"truncate at {cut}"
    elif kind == "zeros":
        p = pos()
        k = rng.randint(1, 64)
        d[p : p + k] = bytes(len(d[p : p + k]))
        desc = f"zero {k} at {p}"
    else:  # copy a u32 from elsewhere (plausible-looking offsets)
        a, b = pos(4, 4), pos(4, 4)
        d[b : b + 4] = d[a : a + 4]
        desc = f"copy u32 {a}->{b}"
    return desc, bytes(d)


def program_size(data: bytes) -> int:
    """The program flatbuffer's size from the eh00 header (the whole file without one)."""
    n = struct.unpack_from("<Q", data, 16)[0] if data[8:12] == b"eh00" else len(data)
    return min(max(n, 8), len(data))


def ptd_entries(path) -> tuple[bytes, dict[str, Table], list[tuple[int, int]]]:
    """A ``.ptd``'s bytes, its NamedData tables by key and its segments as ``(absolute offset,
    size)``, read with the flatbuffer reader directly (FH01 header fields at fixed offsets)."""
    data = pathlib.Path(path).read_bytes()
    fb_off, fb_size, seg_base = struct.unpack_from("<QQQ", data, 16)
    src = Source(path)
    root = FlatBuffer(src, 0, fb_off + fb_size, identifier=b"FT01",
                      name="FlatTensor").root("FlatTensor")
    segs = [(seg_base + s.u64(0), s.u64(1)) for s in root.tables(1)]
    named = {nd.string(0): nd for nd in root.tables(2)}
    return data, named, segs


def ptd_halve_first_dim(path, key: str) -> None:
    """Edit the ``.ptd`` at ``path`` in place: entry ``key``'s layout gets half as many rows
    (it still fits its segment, but no longer matches the program's tensor)."""
    data, named, _ = ptd_entries(path)
    layout = named[key].table(2)
    pos = layout.field_pos(1, 4)
    pos += struct.unpack_from("<I", data, pos)[0] + 4  # TensorLayout.sizes: [int32]
    d = bytearray(data)
    struct.pack_into("<i", d, pos, struct.unpack_from("<i", d, pos)[0] // 2)
    pathlib.Path(path).write_bytes(bytes(d))


def _strided_expected(raw: bytes, offset: int, itemsize: int, shape: tuple, strides: tuple) -> bytes:
    """The bytes of a strided view of ``raw`` (element strides), in row-major order."""
    import numpy as np

    if not itemsize or 0 in shape:
        return b""
    reach = sum((d - 1) * s for d, s in zip(shape, strides)) + 1
    base = np.frombuffer(raw, np.uint8, reach * itemsize, offset).view(f"V{itemsize}")
    view = np.lib.stride_tricks.as_strided(base, shape, tuple(s * itemsize for s in strides))
    return np.ascontiguousarray(view).tobytes()


def check_invariants(art, max_tensors: int | None = None) -> int:
    """Assert what must hold for every artifact that opened, whatever its bytes:

    - the ``segments`` rows of each file tile it: sorted, contiguous, from 0 to the file size
      (for a program embedded in a ``.bpte``, ``art.program``: its span of the file);
    - every offset (segments, stored tensors) lies within its file;
    - a stored tensor whose bytes fit its file reads back as exactly the file slice
      ``[offset, offset + nbytes)`` (in storage order: ``dim_order``; strided views of a
      ``.pt2`` as the strided gather of the file bytes); one that does not fit raises
      :class:`workbench.ArtifactError` when read, and ``validate()`` reports it.

    The files are read here with plain ``open()``. Returns the number of tensors compared.
    """
    import os

    import pandas as pd

    sizes = {f: os.path.getsize(f) for f in art.files}
    raw: dict[str, bytes] = {}
    seg = art.segments
    files = list(dict.fromkeys(seg["file"]))
    assert set(files) <= set(sizes), (files, sizes)
    assert list(seg["file"]) == [f for f in files for _ in range(int((seg["file"] == f).sum()))], \
        "rows of one file are not together"
    for f in files:
        g = seg[seg["file"] == f]
        off = g["offset"].to_numpy("int64")
        end = off + g["size"].to_numpy("int64")
        assert (g["size"].to_numpy("int64") >= 0).all(), f
        assert (off[1:] == end[:-1]).all(), f"{f}: rows are not contiguous"
        lo, hi = (art._parsed.extra.span or (0, sizes[f])) if f == art.path else (0, sizes[f])
        assert (off[0], end[-1]) == (lo, hi), f"{f}: rows cover [{off[0]}, {end[-1]}), not [{lo}, {hi})"
        assert 0 <= lo <= hi <= sizes[f]
    compared = 0
    findings = None
    rows = []
    # "tensors" (+ "test_cases" of a .bpte, "delegate_tensors" of a delegated program: those
    # are read by name; (method, value) keys are the program's value table)
    for frame in art._parsed.tensor_frames:
        t = art.frames[frame]
        stored = t[t["offset"].notna()]
        rows += [(tensor_key(r) if frame == "tensors" else str(r.name), r)
                 for r in (stored if max_tensors is None else stored.head(max_tensors))
                 .itertuples(index=False)]
    for key, row in rows:
        f, offset, nbytes = row.file, int(row.offset), int(row.nbytes)
        assert f in sizes, (row.name, f)
        assert 0 <= offset <= sizes[f], (row.name, offset, sizes[f])
        strides = getattr(row, "strides", None)
        contiguous = getattr(row, "contiguous", True)
        strided = isinstance(strides, tuple) and (contiguous is pd.NA or not contiguous)
        shape = tuple(row.shape)
        numel = 1
        for d in shape:
            numel *= d
        itemsize = nbytes // numel if numel else 0
        reach = (sum((d - 1) * s for d, s in zip(shape, strides)) + 1) * itemsize \
            if strided and numel else nbytes
        if offset + reach > sizes[f]:
            try:
                art.tensor(key)
            except wb.ArtifactError:
                pass
            else:
                raise AssertionError(f"{row.name}: {reach} bytes at {offset} run past {f}, "
                                     "yet reading it worked")
            if findings is None:
                findings = art.validate()
            assert ((findings["severity"] == "error")
                    & (findings["structure"] == f"tensor {row.name!r}")).any(), row.name
            continue
        if f not in raw:
            with open(f, "rb") as fh:
                raw[f] = fh.read()
        got = art.tensor(key)
        if strided:
            want = _strided_expected(raw[f], offset, itemsize, shape, tuple(strides))
            got_bytes = tensor_bytes(got)
        else:
            want = raw[f][offset:offset + nbytes]
            dim_order = getattr(row, "dim_order", None)
            # the library's rule: a dim_order that is no permutation reads row-major
            ok_order = isinstance(dim_order, tuple) and sorted(dim_order) == list(range(len(shape)))
            got_bytes = tensor_bytes(got, dim_order if ok_order else None)
        assert got_bytes == want, f"{row.name}: tensor bytes differ from the file slice"
        compared += 1
    return compared


def read_tier(fast: bool):
    """The read tier a test that compares "fast" (every tier allowed) with "slow" (table by
    table) sets as :data:`workbench.readpath.TIER`."""
    from workbench import readpath

    return readpath.Tier.BATCHED if fast else readpath.Tier.TABLES
