"""Hostile inputs, built here from real samples with byte edits: every problem must be an
ArtifactError naming the file and the offset, never a crash, a hang or another exception."""

from __future__ import annotations

import os
import random
import struct
import time
import traceback
import zlib

import pandas as pd
import pytest
from conftest import pte_samples
from helpers import Hang, Located, deadline, exercise, mutate, program_size, read_tier, tensor_bytes

import workbench as wb
from workbench import readpath
from workbench.errors import CorruptError, OutOfBoundsError, TruncatedError

PTE_VARIANTS = True  # pte_path: the samples and the layout variants (not in slow tests)


# -- helpers ------------------------------------------------------------------------------------
def write(tmp_path, data, name: str = "hostile.pte"):
    p = tmp_path / name
    p.write_bytes(bytes(data))
    return p


def check_message(e: wb.ArtifactError, path) -> None:
    msg = str(e)
    assert path.name in msg, msg
    assert "0x" in msg, msg
    assert e.file == path.name


def open_fails(path, cls=wb.ArtifactError) -> wb.ArtifactError:
    """``wb.open(path)`` raises ``cls``; the message names the file and an offset."""
    with deadline(10):
        with pytest.raises(cls) as ei:
            wb.open(path)
    check_message(ei.value, path)
    return ei.value


def only_artifact_errors(path, max_tensors=None) -> wb.ArtifactError | None:
    """Open, build every frame, read stored tensors: only ArtifactError may come out."""
    with deadline(10):
        e = exercise(path, max_tensors=max_tensors)
    if e is not None:
        check_message_file(e, path)
    return e


def check_message_file(e: wb.ArtifactError, path) -> None:
    assert path.name in str(e) or (e.file and e.file.endswith(".ptd")), str(e)


def header_sample_paths():
    """Samples with an eh00 header whose segment data runs to the end of the file."""
    out = []
    for p in pte_samples():
        d = p.read_bytes()
        if d[8:12] != b"eh00":
            continue
        length, _program_size, base, data_size = struct.unpack_from("<IQQQ", d, 12)
        if length >= 32 and base and data_size and base + data_size == len(d):
            out.append(p)
    return out


@pytest.fixture(scope="module")
def base_sample():
    """A sample with an extended header and a non-empty first segment (mlp_portable if there)."""
    paths = header_sample_paths()
    preferred = [p for p in paths if p.name == "mlp_portable.pte"]
    if not (preferred or paths):
        pytest.skip("no sample .pte with an extended header")
    return (preferred or paths)[0]


@pytest.fixture(scope="module")
def base(base_sample):
    with Located(base_sample) as loc:
        yield loc


# -- not artifacts at all ---------------------------------------------------------------------------
def test_directory_and_missing_file(tmp_path):
    with pytest.raises(IsADirectoryError):
        wb.open(tmp_path)
    with pytest.raises(FileNotFoundError):
        wb.open(tmp_path / "no_such.pte")
    assert not issubclass(IsADirectoryError, wb.ArtifactError)


@pytest.mark.parametrize("content", [
    b"hello world, this is not a program\n" * 4,
    b"\x89PNG\r\n\x1a\n" + bytes(64),
    bytes(64),
    b"\xff" * 64,
], ids=["text", "png", "zeros", "ones"])
def test_not_an_artifact(tmp_path, content):
    p = write(tmp_path, content, "thing.pte")
    open_fails(p, wb.UnknownFormatError)


def test_empty_file(tmp_path):
    open_fails(write(tmp_path, b"", "empty.pte"), wb.ArtifactError)


@pytest.mark.parametrize("n", range(1, 8))
def test_tiny_prefix(tmp_path, base_sample, n):
    p = write(tmp_path, base_sample.read_bytes()[:n], "tiny.pte")
    open_fails(p, wb.ArtifactError)


def test_wrong_magic(tmp_path, base_sample):
    d = bytearray(base_sample.read_bytes())
    d[4:8] = b"XY12"
    open_fails(write(tmp_path, d), wb.UnknownFormatError)


@pytest.mark.parametrize("ident", [b"ET99", b"ET11", b"ET00"])
def test_unsupported_version(tmp_path, base_sample, ident):
    d = bytearray(base_sample.read_bytes())
    d[4:8] = ident
    e = open_fails(write(tmp_path, d), wb.UnsupportedVersionError)
    assert e.offset == 4


# -- extended header --------------------------------------------------------------------------------
@pytest.mark.parametrize("length", [0, 4, 16, 23])
def test_eh00_length_too_small(tmp_path, base_sample, length):
    d = bytearray(base_sample.read_bytes())
    struct.pack_into("<I", d, 12, length)
    open_fails(write(tmp_path, d), CorruptError)


@pytest.mark.parametrize("delta", [1, 4096, 2**40, 2**63, 2**64 - 1], ids=str)
def test_program_size_past_eof(tmp_path, base_sample, delta):
    d = bytearray(base_sample.read_bytes())
    struct.pack_into("<Q", d, 16, min(len(d) + delta, 2**64 - 1))
    open_fails(write(tmp_path, d), OutOfBoundsError)


@pytest.mark.parametrize("program_size", [0, 8, 39])
def test_program_size_smaller_than_header(tmp_path, base_sample, program_size):
    d = bytearray(base_sample.read_bytes())
    struct.pack_into("<Q", d, 16, program_size)
    open_fails(write(tmp_path, d))


@pytest.mark.parametrize("where", ["inside_header", "inside_program", "past_eof", "huge"])
def test_segment_base_offset_out_of_range(tmp_path, base_sample, base, where):
    d = bytearray(base_sample.read_bytes())
    value = {"inside_header": 16, "inside_program": base.program_size - 8,
             "past_eof": len(d) + 8, "huge": 2**64 - 8}[where]
    struct.pack_into("<Q", d, 24, value)
    open_fails(write(tmp_path, d), OutOfBoundsError)


@pytest.mark.parametrize("extra", [1, 2**32, 2**64 - 1], ids=str)
def test_segment_data_size_past_eof(tmp_path, base_sample, base, extra):
    d = bytearray(base_sample.read_bytes())
    struct.pack_into("<Q", d, 32, min(len(d) - base.segment_base_offset + extra, 2**64 - 1))
    open_fails(write(tmp_path, d), TruncatedError)


@pytest.mark.parametrize("path", header_sample_paths(), ids=lambda p: p.name)
def test_truncation_at_header_boundaries_is_detected(tmp_path, path):
    """A file whose header declares its segment data cannot be cut anywhere unnoticed."""
    d = path.read_bytes()
    _, program_size, base, _ = struct.unpack_from("<IQQQ", d, 12)
    cuts = {8, 9, 12, 16, 24, 32, 40, 41, program_size - 1, program_size, program_size + 1,
            base - 1, base, base + 1, len(d) - 1}
    cuts |= {program_size * k // 16 for k in range(1, 16)}
    for cut in sorted(c for c in cuts if 8 <= c < len(d)):
        p = write(tmp_path, d[:cut], "cut.pte")
        try:
            open_fails(p)
        except BaseException as e:
            raise AssertionError(f"cut at {cut}") from e


def test_truncation_anywhere(tmp_path, pte_path):
    """Cuts at every header boundary and at many points in the flatbuffer: error or fine."""
    d = pte_path.read_bytes()
    program_size = struct.unpack_from("<Q", d, 16)[0] if d[8:12] == b"eh00" else len(d)
    cuts = set(range(0, 48)) | {program_size * k // 97 for k in range(97)}
    cuts |= {program_size - 1, program_size, len(d) - 1}
    for cut in sorted(c for c in cuts if 0 <= c < len(d)):
        p = write(tmp_path, d[:cut], "cut.pte")
        try:
            only_artifact_errors(p)
        except BaseException as e:
            raise AssertionError(f"{pte_path.name} cut at {cut}: {type(e).__name__}: {e}") from e


# -- flatbuffer structures ---------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["eof", "eof+100", 0xFFFFFFFF, 0xFFFFFFFC], ids=str)
def test_root_offset_past_eof(tmp_path, base_sample, base, value):
    d = bytearray(base_sample.read_bytes())
    v = {"eof": base.program_size, "eof+100": len(d) + 100}.get(value, value)
    struct.pack_into("<I", d, 0, v)
    open_fails(write(tmp_path, d), (OutOfBoundsError, TruncatedError))


@pytest.mark.parametrize("soffset", [0x7FFFFFFF, -0x80000000, -0x10000, 0x10000], ids=hex)
def test_vtable_offset_out_of_range(tmp_path, base_sample, base, soffset):
    d = bytearray(base_sample.read_bytes())
    struct.pack_into("<i", d, base.root_pos, soffset)
    open_fails(write(tmp_path, d), OutOfBoundsError)


def test_vtable_offset_odd(tmp_path, base_sample, base):
    d = bytearray(base_sample.read_bytes())
    (soff,) = struct.unpack_from("<i", d, base.root_pos)
    struct.pack_into("<i", d, base.root_pos, soff + 1)
    open_fails(write(tmp_path, d))


@pytest.mark.parametrize("count", [2**31, 2**32 - 1, 2**28], ids=hex)
def test_tensor_sizes_vector_length_huge(tmp_path, base_sample, base, count):
    d = bytearray(base_sample.read_bytes())
    _, _, tensor = base.tensor_tables()[0]
    struct.pack_into("<I", d, base.vector_pos(tensor, 2), count)
    open_fails(write(tmp_path, d), TruncatedError)


@pytest.mark.parametrize("count", [2**31, 2**32 - 1], ids=hex)
def test_values_vector_length_huge(tmp_path, base_sample, base, count):
    d = bytearray(base_sample.read_bytes())
    struct.pack_into("<I", d, base.vector_pos(base.plans()[0], 2), count)
    t0 = time.perf_counter()
    open_fails(write(tmp_path, d), TruncatedError)
    assert time.perf_counter() - t0 < 2


@pytest.mark.parametrize("bad", [b"\xff", b"\xc3\x28", b"\xed\xa0\x80"], ids=["ff", "c328", "surrogate"])
def test_method_name_invalid_utf8(tmp_path, base_sample, base, bad):
    d = bytearray(base_sample.read_bytes())
    pos = base.string_pos(base.plans()[0], 0)
    (n,) = struct.unpack_from("<I", d, pos)
    assert n >= len(bad)
    d[pos + 4 : pos + 4 + len(bad)] = bad
    e = open_fails(write(tmp_path, d), CorruptError)
    assert "UTF-8" in str(e)


def test_string_without_nul(tmp_path, base_sample, base):
    d = bytearray(base_sample.read_bytes())
    pos = base.string_pos(base.plans()[0], 0)
    (n,) = struct.unpack_from("<I", d, pos)
    d[pos + 4 + n] = ord("x")
    open_fails(write(tmp_path, d), CorruptError)


@pytest.mark.parametrize("tag", [12, 13, 200, 255])
def test_unknown_value_union_type(tmp_path, base_sample, base, tag):
    d = bytearray(base_sample.read_bytes())
    _, evalue, _ = base.tensor_tables()[0]
    p = evalue.field_pos(0, 1)
    assert p
    d[p] = tag
    e = open_fails(write(tmp_path, d), CorruptError)
    assert "union" in str(e)


@pytest.mark.parametrize("tag", [6, 99])
def test_unknown_instruction_union_type(tmp_path, base_sample, base, tag):
    d = bytearray(base_sample.read_bytes())
    chain = base.plans()[0].tables(5)[0]
    ins = chain.tables(2)[0]
    p = ins.field_pos(0, 1)
    assert p
    d[p] = tag
    open_fails(write(tmp_path, d), CorruptError)


def test_unknown_scalar_type(tmp_path, base_sample, base):
    d = bytearray(base_sample.read_bytes())
    _, _, tensor = base.tensor_tables()[0]
    p = tensor.field_pos(0, 1)
    assert p
    d[p] = 100
    open_fails(write(tmp_path, d), CorruptError)


def test_negative_tensor_size(tmp_path, base_sample, base):
    d = bytearray(base_sample.read_bytes())
    _, _, tensor = base.tensor_tables()[0]
    struct.pack_into("<i", d, base.vector_pos(tensor, 2) + 4, -1)
    open_fails(write(tmp_path, d), CorruptError)


# -- segments and offsets into them --------------------------------------------------------------------
def _segment_fields(loc):
    """[(index, offset field pos or 0, size field pos or 0, offset, size)] of Program.segments."""
    out = []
    for i, s in enumerate(loc.segments()):
        out.append((i, s.field_pos(0, 8), s.field_pos(1, 8), s.u64(0), s.u64(1)))
    return out


@pytest.mark.parametrize("size", ["data+1", 2**40, 2**64 - 1], ids=str)
def test_segment_size_past_end(tmp_path, base_sample, base, size):
    d = bytearray(base_sample.read_bytes())
    seg = [s for s in _segment_fields(base) if s[2]]
    assert seg, "no segment with a stored size"
    i, _, size_pos, off, _ = seg[0]
    data_size = len(d) - base.segment_base_offset
    struct.pack_into("<Q", d, size_pos, data_size - off + 1 if size == "data+1" else size)
    e = open_fails(write(tmp_path, d), OutOfBoundsError)
    assert f"segments[{i}]" in str(e)


def _multi_segment_sample():
    for p in header_sample_paths():
        with Located(p) as loc:
            segs = [s for s in _segment_fields(loc) if s[1] and s[4]]
            if len(segs) >= 2:
                return p
    return None


def test_segment_offset_past_end(tmp_path):
    p = _multi_segment_sample()
    if p is None:
        pytest.skip("no sample with two stored segment offsets")
    d = bytearray(p.read_bytes())
    with Located(p) as loc:
        i, off_pos, _, _, _ = next(s for s in _segment_fields(loc) if s[1])
        struct.pack_into("<Q", d, off_pos, len(d))
    e = open_fails(write(tmp_path, d), OutOfBoundsError)
    assert f"segments[{i}]" in str(e)


def test_overlapping_segments(tmp_path):
    p = _multi_segment_sample()
    if p is None:
        pytest.skip("no sample with two stored segment offsets")
    d = bytearray(p.read_bytes())
    with Located(p) as loc:
        data_size = len(d) - loc.segment_base_offset
        segs = [s for s in _segment_fields(loc) if s[1] and s[4]]
        pairs = [(a, b) for a in segs for b in segs
                 if a[3] < b[3] and a[3] + b[4] <= data_size]
        assert pairs
        a, b = pairs[0]
        struct.pack_into("<Q", d, b[1], a[3])  # b now starts where a starts
    e = open_fails(write(tmp_path, d), CorruptError)
    assert "overlap" in str(e)


def test_constant_offset_past_end(tmp_path, base_sample, base):
    d = bytearray(base_sample.read_bytes())
    cs = base.program.table(5)
    start, n = cs.vector(1, 8)
    assert n >= 2
    struct.pack_into("<Q", d, start + 8 * (n - 1), 2**62)
    open_fails(write(tmp_path, d), OutOfBoundsError)


@pytest.mark.parametrize("index", [2, 1000, 0xFFFFFFFF], ids=str)
def test_constant_segment_index_out_of_range(tmp_path, pte_variant, index):
    """On the variant whose constant segment is segment 1 (so the field is stored)."""
    src = pte_variant("constant_not_first")
    d = bytearray(src.read_bytes())
    with Located(src) as loc:
        cs = loc.program.table(5)
        p = cs.field_pos(0, 4)
        assert p, "the variant lost its stored constant_segment.segment_index"
        assert struct.unpack_from("<I", d, p)[0] == 1
        n = len(loc.segments())
    assert index >= n
    struct.pack_into("<I", d, p, index)
    e = open_fails(write(tmp_path, d), OutOfBoundsError)
    assert "constant_segment" in str(e) and f"{n} segments" in str(e)


def test_data_buffer_idx_out_of_range(tmp_path, base_sample, base):
    d = bytearray(base_sample.read_bytes())
    for _, _, tensor in base.tensor_tables():
        p = tensor.field_pos(5, 4)
        if p:
            struct.pack_into("<I", d, p, 0x7FFFFFFF)
            break
    else:
        pytest.skip("no tensor with data_buffer_idx")
    open_fails(write(tmp_path, d), OutOfBoundsError)


# -- bugs found while writing these tests (values a valid-looking file can hold) -------------------------
def test_planned_tensor_with_huge_sizes(tmp_path, base_sample, base):
    """sizes [2**31-1, 2**31-1] on a planned tensor: nbytes overflows int64 -> ArtifactError
    (or a frame that holds it), never OverflowError from pandas."""
    d = bytearray(base_sample.read_bytes())
    for _, _, tensor in base.tensor_tables():
        if tensor.has(6):  # allocation_info
            start, n = tensor.vector(2, 4)
            if n:
                for k in range(n):
                    struct.pack_into("<i", d, start + 4 * k, 0x7FFFFFFF)
                break
    else:
        pytest.skip("no planned tensor with sizes")
    d_path = write(tmp_path, d)
    only_artifact_errors(d_path)


def test_empty_bfloat16_tensor_reads(tmp_path, sample):
    """A zero-element bf16 constant is valid and reads as an empty torch tensor."""
    import torch

    p = sample("mlp_bf16.pte")
    d = bytearray(p.read_bytes())
    with Located(p) as loc:
        bf16 = [(v, t) for v, _, t in loc.tensor_tables() if t.i8(0) == 15 and t.u32(5)]
        if not bf16:
            pytest.skip("no bf16 constant")
        value, tensor = bf16[-1]
        start, _ = tensor.vector(2, 4)
        struct.pack_into("<i", d, start, 0)  # first dimension 0: zero elements, zero bytes
    art = wb.open(write(tmp_path, d))
    x = art.tensor(("forward", value))
    assert isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 and x.numel() == 0
    assert tensor_bytes(x) == b""


@pytest.mark.parametrize("high", [1, 0x3FFFFFFF, 0x40000000, 0xFFFFFFFF], ids=hex)
@pytest.mark.parametrize("fast", [True, False], ids=["fast_path", "scalar_path"])
def test_memory_offset_high_bits(tmp_path, sample, oracle, monkeypatch, fast, high):
    """AllocationDetails.memory_offset_high set on every planned tensor (built with
    ExecuTorch's serializer). Offsets below 2**62 are read exactly (low | high << 32, beyond
    every arena); from 2**62 on (they would not fit int64 frames) opening is a CorruptError
    naming the allocation — never a crash, never wrapped (negative) offsets."""
    from executorch.exir._serialize._flatbuffer_program import _program_to_flatbuffer


    monkeypatch.setattr(readpath, "TIER", read_tier(fast))
    p = sample("no_weights.pte")
    prog = oracle.flatbuffer_to_program(p.read_bytes())
    want = {}
    for k, v in enumerate(prog.execution_plan[0].values):
        a = getattr(v.val, "allocation_info", None)
        if a is not None:
            a.memory_offset_high = high
            want[k] = a.memory_offset_low | (high << 32)
    assert want
    out = write(tmp_path, _program_to_flatbuffer(prog).data, "high.pte")
    if high >= 1 << 30:
        e = open_fails(out, CorruptError)
        assert "memory offset" in str(e) and "allocation_info" in str(e), str(e)
        return
    with wb.open(out) as art:
        mp = art.frames["memory_plan"]
        name = prog.execution_plan[0].name
        assert dict(zip(mp["value"].astype(int), mp["offset"].astype(int))) == want
        assert not mp["fits"].any()
        t = art.tensors
        t = t[t["method"] == name]
        got = {int(v): int(o) for v, o in zip(t["value"], t["mem_offset"]) if pd.notna(o)}
        assert got == want
        assert "planned at" in " ".join(art.validate()["message"])


# -- random inputs -------------------------------------------------------------------------------------
MUTANTS_PER_FILE = int(os.environ.get("WORKBENCH_FUZZ_MUTANTS", "200"))


@pytest.mark.slow
def test_mutation_fuzz(tmp_path, pte_path):
    # torch is imported by the first bfloat16 tensor view: import it before anything is timed
    # (seconds on a loaded machine; a mutant is timed, not the import)
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    data = pte_path.read_bytes()
    hot = program_size(data)
    rng = random.Random(zlib.crc32(pte_path.name.encode()))
    failures = []
    slow = []
    target = tmp_path / "mutant.pte"
    for i in range(MUTANTS_PER_FILE):
        desc, mutant = mutate(data, rng, hot)
        target.write_bytes(mutant)
        t0 = time.perf_counter()
        try:
            only_artifact_errors(target, max_tensors=5)
        except Hang:
            failures.append((i, desc, "hang (> 10 s)"))
            continue
        except Exception as e:
            tb = traceback.extract_tb(e.__traceback__)[-1]
            failures.append((i, desc, f"{type(e).__name__}: {str(e)[:100]} "
                                      f"[{tb.filename.rsplit('/', 1)[-1]}:{tb.lineno}]"))
        dt = time.perf_counter() - t0
        if dt > 2:
            slow.append((i, desc, f"{dt:.2f} s"))
    assert not failures, "\n".join(f"mutant {i} ({desc}): {what}" for i, desc, what in failures[:15])
    assert not slow, "\n".join(f"mutant {i} ({desc}): {what}" for i, desc, what in slow[:15])



@pytest.mark.parametrize("stem", ["mlp_external", "mlp_xnnpack_external"])
def test_broken_sibling_data_file(tmp_path, sample, stem):
    """A .pte next to a damaged .ptd: opening and reading give only ArtifactError (the
    program itself may still open, with its external data missing)."""
    import shutil

    shutil.copy(sample(f"{stem}.pte"), tmp_path)
    ptd = sample(f"{stem}.ptd").read_bytes()
    rng = random.Random(zlib.crc32(stem.encode()))
    for i in range(20):
        desc, mutant = mutate(ptd, rng, min(len(ptd), 512))
        (tmp_path / f"{stem}.ptd").write_bytes(mutant)
        try:
            only_artifact_errors(tmp_path / f"{stem}.pte")
        except BaseException as e:
            raise AssertionError(f"sibling mutant {i} ({desc}): {type(e).__name__}: {e}") from e


# -- random bytes behind a plausible header --------------------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def plausible_pte(draw):
    body = draw(st.binary(min_size=0, max_size=400))
    n = 40 + len(body)
    head = struct.pack("<I4s4sIQQQ", draw(st.integers(0, n + 8)), b"ET12", b"eh00",
                       draw(st.sampled_from([24, 32, 40, 0xFFFFFFFF])),
                       draw(st.integers(0, n + 8)), draw(st.integers(0, n + 8)),
                       draw(st.integers(0, n + 8)))
    return head + body


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(plausible_pte())
def test_random_body_behind_header(tmp_path, data):
    only_artifact_errors(write(tmp_path, data, "random.pte"))
