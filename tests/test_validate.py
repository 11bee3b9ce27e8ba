"""``Artifact.validate()``: every finding it and the readers can emit, each from one file
crafted here (byte edits of a sample copy, ``struct.pack``, zips built by hand), each test
expecting exactly that finding: severity, structure, offset and message. And every clean
sample gives no warning and no error.

Expected values (offsets, sizes, names) are worked out here from the file bytes, Python's
``zipfile`` and ExecuTorch's own deserializer, not from the reader under test.
"""

from __future__ import annotations

import io
import os
import pathlib
import re
import shutil
import struct
import zipfile

import numpy as np
import pandas as pd
import pytest
from helpers import Located, ptd_entries, ptd_halve_first_dim
from test_pt2 import aoti_wrapper, build_zip, pt2_members, tensor_meta

import workbench as wb

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
#: custom_op.pte calls an operator no kernel library provides: a warning, on purpose
#: (tests/test_runtime.py)
NOT_CLEAN = {"custom_op.pte"}
CLEAN = sorted(p.name for ext in ("pte", "ptd", "bpte", "pt2") for p in SAMPLES.glob(f"*.{ext}")
               if p.name not in NOT_CLEAN)
#: ExecuTorch's tensor alignment (program.fbs: constant data is 16-aligned)
ALIGN = 16


def findings(art: wb.Artifact) -> list[tuple]:
    """``(severity, structure, offset or None, message)`` of every finding, sorted."""
    f = art.validate()
    assert list(f.columns) == ["severity", "structure", "offset", "message"]
    rows = [(r.severity, r.structure, None if pd.isna(r.offset) else int(r.offset), r.message)
            for r in f.itertuples(index=False)]
    return sorted(rows, key=lambda r: (r[0], r[1], -1 if r[2] is None else r[2], r[3]))


def expect(art: wb.Artifact, *want: tuple) -> None:
    """Exactly the findings ``want``: ``(severity, structure, offset, message regex)``."""
    got = findings(art)
    want_sorted = sorted(want, key=lambda r: (r[0], r[1], -1 if r[2] is None else r[2], r[3]))
    assert [g[:3] for g in got] == [w[:3] for w in want_sorted], got
    for g, w in zip(got, want_sorted):
        assert re.fullmatch(w[3], g[3]), (g, w[3])


def _write(path: pathlib.Path, data: bytes | bytearray) -> pathlib.Path:
    path.write_bytes(bytes(data))
    return path


# --------------------------------------------------------------------------------------------
# clean samples: nothing to warn about
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CLEAN)
def test_clean_samples_have_no_warnings_or_errors(sample, name):
    with wb.open(sample(name)) as art:
        arts = [art, art.program] if art.format == "bpte" else [art]
        for a in arts:
            bad = [f for f in findings(a) if f[0] != "info"]
            assert bad == [], bad


# --------------------------------------------------------------------------------------------
# .pte: misalignment, trailing data, padding, arena overflow, missing external data
# --------------------------------------------------------------------------------------------

def _constant_offsets(L: Located) -> tuple[int, list[int]]:
    """(absolute position of the u64 offsets of Program.constant_segment, their values)."""
    cs = L.program.table(5)  # Program.constant_segment: SubsegmentOffsets
    vp = L.vector_pos(cs, 1)  # .offsets: [uint64]
    n = struct.unpack_from("<I", L.data, vp)[0]
    return vp + 4, list(struct.unpack_from(f"<{n}Q", L.data, vp + 4))


@pytest.mark.parametrize("shift", [4, 8])
def test_misaligned_constant(sample, oracle, tmp_path, shift):
    """A constant moved by 4 or 8 bytes inside its segment: one warning naming it, at its new
    offset (the oracle says where the segment is); the other constants stay aligned."""
    src = sample("mlp_portable.pte")
    with Located(src) as L:
        pos, offs = _constant_offsets(L)
        data = bytearray(L.data)
    struct.pack_into("<Q", data, pos + 8, offs[1] + shift)  # entry 1: forward's first weight
    p = _write(tmp_path / "misaligned.pte", data)
    prog = oracle.read(p)
    seg_off, _ = prog.segment_abs(prog.program.constant_segment.segment_index)
    moved = [(m, v) for m, v, t in prog.tensors() if t.data_buffer_idx == 1]
    assert len(moved) == 1
    at = seg_off + offs[1] + shift
    assert at % ALIGN  # the edit really misaligns it
    with wb.open(p) as art:
        expect(art, ("warning", f"tensor '{moved[0][0]}/{moved[0][1]}'", at,
                     f"data is not {ALIGN}-byte aligned"))


def test_misaligned_mutable_buffer(sample, oracle, tmp_path):
    """The initial value of a mutable buffer moved off the 16-byte grid is flagged too."""
    src = sample("kv_cache.pte")
    prog = oracle.read(src)
    ms = prog.program.mutable_data_segments
    if not ms:
        pytest.skip("kv_cache.pte has no mutable data segment")
    located = [(m, v, prog.mutable_location(t)) for m, v, t in prog.tensors()
               if prog.mutable_location(t) is not None]
    (m, v, at), *_ = sorted(located, key=lambda x: x[2])
    with Located(src) as L:
        sub = L.program.tables(6, "mutable_data_segments")[0]
        vp = L.vector_pos(sub, 1)
        n = struct.unpack_from("<I", L.data, vp)[0]
        offs = struct.unpack_from(f"<{n}Q", L.data, vp + 4)
        data = bytearray(L.data)
    idx = next(t.data_buffer_idx for mm, vv, t in prog.tensors() if (mm, vv) == (m, v))
    struct.pack_into("<Q", data, vp + 4 + 8 * idx, offs[idx] + 4)
    p = _write(tmp_path / "kv.pte", data)
    with wb.open(p) as art:
        name = art.tensors.set_index(["method", "value"]).loc[(m, v), "name"]
        expect(art, ("warning", f"tensor {name!r}", at + 4, f"data is not {ALIGN}-byte aligned"))


def test_dim_order_that_is_no_permutation(sample, oracle, tmp_path):
    """A constant's dim_order (0, 1) edited to (0, 5): warned about, and read row-major."""
    src = sample("mlp_portable.pte")
    prog = oracle.read(src)
    with Located(src) as L:
        value, _ev, tensor = next(x for x in L.tensor_tables() if x[2].u32(5) == 1)
        vp = L.vector_pos(tensor, 3)  # Tensor.dim_order: [ubyte]
        assert struct.unpack_from("<I2B", L.data, vp) == (2, 0, 1)
        data = bytearray(L.data)
    data[vp + 5] = 5
    p = _write(tmp_path / "dim_order.pte", data)
    t = prog.program.execution_plan[0].values[value].val
    at = prog.constant_location(t)
    with wb.open(p) as art:
        expect(art, ("warning", f"tensor 'forward/{value}'", at,
                     re.escape(f"dim_order [0, 5] is not a permutation of the 2 dimensions of "
                               f"shape {list(t.sizes)}: its data is read in row-major order")))
        x = art.tensor(("forward", value))
        assert x.shape == tuple(t.sizes)
        assert np.ascontiguousarray(x).tobytes() == bytes(data[at:at + prog.nbytes(t)])


def test_trailing_data(sample, tmp_path):
    data = sample("mlp_portable.pte").read_bytes()
    p = _write(tmp_path / "trailing.pte", data + b"\xab" * 100)
    with wb.open(p) as art:
        expect(art, ("info", "trailing data", len(data),
                     "100 bytes after the last declared structure"))


def _move_segments(data: bytes, by: int) -> bytes:
    """A .pte whose segment data starts ``by`` bytes later (eh00 segment_base_offset + zeros):
    still valid, the gap is padding."""
    assert data[8:12] == b"eh00"
    base = struct.unpack_from("<Q", data, 24)[0]
    d = bytearray(data)
    struct.pack_into("<Q", d, 24, base + by)
    return bytes(d[:base]) + bytes(by) + bytes(d[base:])


def test_padding_over_a_quarter_of_a_large_file(sample, tmp_path):
    data = sample("mlp_portable.pte").read_bytes()
    program_size, base = struct.unpack_from("<QQ", data, 16)
    p = _write(tmp_path / "padded.pte", _move_segments(data, 2 << 20))
    size = p.stat().st_size
    pad = base + (2 << 20) - program_size  # between the flatbuffer and the segment data
    assert size > 1 << 20 and pad > size / 4
    with wb.open(p) as art:
        expect(art, ("warning", f"layout of {p}", None,
                     re.escape(f"{pad} bytes ({100 * pad / size:.0f}%) of the file are padding")))
    # a small file with as much padding in proportion is not worth a warning
    small = _write(tmp_path / "small.pte", _move_segments(data, 64 << 10))
    assert small.stat().st_size < 1 << 20
    with wb.open(small) as art:
        expect(art)


def test_memory_plan_outside_the_arena(sample, oracle, tmp_path):
    """Arena 1 shrunk by one byte: exactly the values that reach its end are flagged."""
    src = sample("mlp_portable.pte")
    prog = oracle.read(src)
    plan = prog.program.execution_plan[0]
    ends = {}
    for v, ev in enumerate(plan.values):
        t = ev.val
        if isinstance(t, oracle.schema.Tensor) and t.allocation_info is not None:
            a = t.allocation_info
            off = a.memory_offset_low | (a.memory_offset_high << 32)
            ends[v] = (a.memory_id, off, off + prog.nbytes(t))
    arena = max(e for mid, _, e in ends.values() if mid == 1)
    assert plan.non_const_buffer_sizes[1] == arena  # the planner made it exactly fit
    with Located(src) as L:
        vp = L.vector_pos(L.plans()[0], 8)  # ExecutionPlan.non_const_buffer_sizes: [int64]
        data = bytearray(L.data)
    struct.pack_into("<q", data, vp + 4 + 8, arena - 1)
    p = _write(tmp_path / "arena.pte", data)
    over = [(v, off, end) for v, (mid, off, end) in ends.items() if mid == 1 and end > arena - 1]
    assert over
    with wb.open(p) as art:
        expect(art, *[("error", f"{plan.name} value {v}", None,
                       re.escape(f"planned at [{off}, {end}) outside arena 1 of {arena - 1} bytes"))
                      for v, off, end in over])


def test_missing_external_data(sample, oracle, tmp_path):
    pte = shutil.copy(sample("mlp_external.pte"), tmp_path / "alone.pte")
    prog = oracle.read(pte)
    fqns = [t.extra_tensor_info.fully_qualified_name for _m, _v, t in prog.tensors()
            if prog.is_external(t)]
    assert len(fqns) == 4
    with wb.open(pte) as art:
        expect(art, *[("warning", f"tensor {f!r}", None, "external tensor not found in any data file")
                      for f in fqns])


# --------------------------------------------------------------------------------------------
# .ptd: unused segment; the .pte reader's layout mismatch
# --------------------------------------------------------------------------------------------

def test_unused_segment(sample, oracle, tmp_path):
    """fc1.bias pointed at fc1.weight's (larger) segment: its own segment is now unused."""
    path = sample("mlp_external.ptd")
    data, named, segs = ptd_entries(path)
    w_seg = named["fc1.weight"].u32(1)
    b_seg = named["fc1.bias"].u32(1)
    d = bytearray(data)
    struct.pack_into("<I", d, named["fc1.bias"].field_pos(1, 4), w_seg)
    p = _write(tmp_path / "unused.ptd", d)
    off, size = segs[b_seg]
    assert bytes(oracle.ptd_named_bytes(path)["fc1.bias"]) == data[off:off + size]  # the oracle agrees
    with wb.open(p) as art:
        expect(art, ("warning", f"segment {b_seg}", off,
                     f"{size} bytes in a segment that nothing refers to"))


def test_data_file_key_with_another_layout(sample, tmp_path):
    """A copy of the program's .ptd whose fc1.weight has another shape, given explicitly: the
    reader says so and that tensor is missing; the other three resolve."""
    wrong = shutil.copy(sample("mlp_external.ptd"), tmp_path / "wrong.ptd")
    ptd_halve_first_dim(wrong, "fc1.weight")
    pte = shutil.copy(sample("mlp_external.pte"), tmp_path / "m.pte")
    with wb.open(pte, data=[wrong]) as art:
        ext = art.tensors[art.tensors["storage"] == "external"].set_index("name")
        assert len(ext) == 4
        assert list(ext.index[ext["missing"]]) == ["fc1.weight"]
        expect(art, ("warning", "tensor 'fc1.weight'", None,
                     re.escape(f"data files hold this key with another dtype/shape: ['{wrong}']")),
               ("warning", "tensor 'fc1.weight'", None, "external tensor not found in any data file"))


# --------------------------------------------------------------------------------------------
# guards against reader bugs: no file gets these past the readers, so the reader's output is
# bent after parsing (the readers' refusal of such files is tested in test_hostile.py)
# --------------------------------------------------------------------------------------------

def test_tensor_past_the_end_of_its_file(sample, tmp_path):
    p = shutil.copy(sample("mlp_external.ptd"), tmp_path / "x.ptd")
    size = os.path.getsize(p)
    with wb.open(p) as art:
        orig = art._parsed.builders["tensors"]

        def bent():
            cols = dict(orig())
            off = [int(x) for x in cols["offset"]]
            off[0] = size - 4
            cols["offset"], cols["align"] = off, [None] * len(off)
            return cols

        art._parsed.builders["tensors"] = bent
        name, nbytes = art.tensors["name"].iloc[0], int(art.tensors["nbytes"].iloc[0])
        expect(art, ("error", f"tensor {name!r}", size - 4,
                     re.escape(f"{nbytes} bytes run past the end of {p}")))


@pytest.mark.parametrize("back,error", [(16, False), (8, True)])
def test_strided_view_past_the_end(tmp_path, back, error):
    """An expanded view (shape 4x4, strides 0,1: 64 bytes of elements, 16 bytes touched)
    moved to ``back`` bytes before the end of the file: only the bytes it touches count."""
    meta = {**_META, "tensor_meta": tensor_meta(7, [4, 4], strides=[0, 1])}
    data, _ = build_zip(pt2_members(weights={"w": meta},
                                    files={"data/weights/weight_0": bytes(16)}))
    p = _write(tmp_path / "view.pt2", data)
    with wb.open(p) as art:
        orig = art._parsed.builders["tensors"]

        def bent():
            cols = {k: [None if x is pd.NA else x for x in v] for k, v in orig().items()}
            cols["offset"] = [len(data) - back]
            return cols

        art._parsed.builders["tensors"] = bent
        assert art.tensors["nbytes"].tolist() == [64]
        expect(art, *[("error", "tensor 'w'", len(data) - back,
                       re.escape(f"16 bytes run past the end of {p}"))] * error)


@pytest.mark.parametrize("drop", ["last", "middle", "overlap"])
def test_segments_not_covering_the_file(sample, tmp_path, drop):
    p = shutil.copy(sample("mlp_portable.pte"), tmp_path / "x.pte")
    size = os.path.getsize(p)
    with wb.open(p) as art:
        cols = {k: [None if x is pd.NA else x for x in v]
                for k, v in art._parsed.builders["segments"]().items()}
        off, sz = cols["offset"], cols["size"]
        assert off[0] == 0 and off[-1] + sz[-1] == size and len(off) >= 4
        if drop == "last":  # the rows stop short of the end
            cut = {k: v[:-1] for k, v in cols.items()}
            want = ("error", f"segments of {p}", None,
                    re.escape(f"rows cover [0, {off[-1]}), not [0, {size}) of the {size}-byte file"))
        elif drop == "middle":  # a gap
            cut = {k: v[:2] + v[3:] for k, v in cols.items()}
            want = ("error", f"segments of {p}", off[3],
                    f"a row ends at {off[2]} but the next starts at {off[3]}")
        else:  # row 2 reaches one byte into row 3
            cut = {**cols, "size": [*sz[:2], sz[2] + 1, *sz[3:]]}
            want = ("error", f"segments of {p}", off[3],
                    f"a row ends at {off[3] + 1} but the next starts at {off[3]}")
        art._parsed.builders["segments"] = lambda: cut
        expect(art, want)


# --------------------------------------------------------------------------------------------
# .pte + .ptd: which data file was attached, and which other one also fits
# --------------------------------------------------------------------------------------------

def test_attached_data_file_is_named(sample, tmp_path):
    pte = shutil.copy(sample("mlp_external.pte"), tmp_path / "model.pte")
    shutil.copy(sample("mlp_external.ptd"), tmp_path / "model.ptd")
    with wb.open(pte) as art:
        expect(art, ("info", "data file 'model.ptd'", None,
                     re.escape("attached automatically (next to the program, named like it): "
                               "resolves 4 of the 4 keys the program needs")))
    with wb.open(pte, data=[tmp_path / "model.ptd"]) as art:  # chosen by the caller: no note
        expect(art)


# --------------------------------------------------------------------------------------------
# .pt2 reader findings (zips built here)
# --------------------------------------------------------------------------------------------

_META = {"path_name": "weight_0", "is_param": True, "use_pickle": False,
         "tensor_meta": tensor_meta(7, [2, 3])}
_W = np.arange(6, dtype=np.float32).tobytes()


def _members(**kw) -> list[dict]:
    return pt2_members(weights={"w": _META}, files={"data/weights/weight_0": _W}, **kw)


def _replace(ms: list[dict], suffix: str, data: bytes) -> list[dict]:
    return [m if not m["name"].endswith(suffix) else {**m, "data": data} for m in ms]


def _data_offset(data: bytes, name: str) -> int:
    """Where member ``name``'s data starts, from zipfile's header offset and the local header."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        lho = zf.getinfo(name).header_offset
    n, e = struct.unpack_from("<HH", data, lho + 26)
    return lho + 30 + n + e


def _header_offset(data: bytes, name: str) -> int:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return next(i.header_offset for i in zf.infolist() if i.filename == name)


def _deflated(raw: bytes) -> bytes:
    import zlib

    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    return co.compress(raw) + co.flush()


_STEM = "data/aotinductor/model/cabc.wrapper"
_CONST = {"name": "w", "fqn": "w", "data_size": 64, "shape": [4, 4], "stride": [4, 1]}


def _aoti(wrapper=True, blob=bytes(64), so=b"\x7fELF" + bytes(60), consts=(_CONST,)) -> list[dict]:
    ms = [{"name": "pkg/archive_format", "data": b"pt2"}]
    if wrapper:
        ms.append({"name": f"pkg/{_STEM}.cpp", "data": aoti_wrapper(list(consts))})
    ms.append({"name": f"pkg/{_STEM}_metadata.json", "data": b'{"AOTI_DEVICE_KEY": "cpu"}'})
    if blob is not None:
        ms.append({"name": f"pkg/{_STEM}_weights.blob", "data": blob})
    if so is not None:
        ms.append({"name": f"pkg/{_STEM}.so", "data": so})
    return ms


_CFG = "arc/data/weights/model_weights_config.json"
_MODEL = "AOTInductor model 'model'"
_UNSAFE = "unsafe member name (absolute path, '..', backslash or control character); nothing is extracted"

#: (id, members, [(severity, structure, offset: int | None | (member name, 'data'|'header'),
#: message)])
PT2_CASES = [
    ("byteorder", _replace(_members(), "byteorder", b"big"),
     [("warning", "byteorder", None, "byteorder is 'big': tensor views assume little-endian bytes")]),
    ("archive_format", _replace(_members(), "archive_format", b"pt3"),
     [("warning", "archive_format", None, "archive_format is 'pt3', expected 'pt2'")]),
    ("no_archive_format", [m for m in _members() if not m["name"].endswith("archive_format")],
     [("warning", "archive_format", None, "no archive_format member: not a torch.export / "
       "AOTInductor archive (members are listed, nothing else is read)")]),
    ("duplicate", [*_members(), {"name": "arc/data/weights/weight_0", "data": bytes(24)}],
     [("warning", "zip member 'arc/data/weights/weight_0'", None,
       "the name occurs more than once; the first entry is used")]),
    ("unsafe", [*_members(), {"name": "arc/../evil", "data": b"x"}],
     [("warning", "zip member 'arc/../evil'", ("arc/../evil", "header"), _UNSAFE)]),
    ("outside", [*_members(), {"name": "other/x", "data": b"x"}],
     [("warning", "zip central directory", None, "1 member(s) lie outside the archive folder 'arc'")]),
    ("no_config", [m for m in _members() if not m["name"].endswith("weights_config.json")],
     [("warning", "model 'model'", None, "no data/weights/model_weights_config.json")]),
    ("empty_storage", pt2_members(weights={"w": {**_META, "tensor_meta": tensor_meta(7, [0])}},
                                  files={"data/weights/weight_0": b""}),
     [("info", f"{_CFG} config['w']", None, "storage member is empty: torch.export.load makes zeros")]),
    ("pickled", pt2_members(weights={"w": {**_META, "use_pickle": True}},
                            files={"data/weights/weight_0": b"\x80\x02N."}),
     [("info", "zip central directory", None, "1 pickled member(s) are listed but never unpickled "
       "(torch.export.load would unpickle them: only load trusted files)")]),
    ("compressed", [*_members(), {"name": "arc/extra/z.bin", "data": _deflated(b"x" * 100),
                                  "method": 8, "file_size": 100}],
     [("info", "zip central directory", None,
       "1 compressed member(s) (e.g. 'arc/extra/z.bin', deflate): not zero-copy")]),
    ("aoti_no_wrapper", _aoti(wrapper=False),
     [("warning", _MODEL, None, "no generated wrapper source: constants cannot be listed")]),
    ("aoti_small_blob", _aoti(blob=bytes(32)),
     [("warning", _MODEL, (f"pkg/{_STEM}_weights.blob", "data"),
       "constants need 64 bytes, the blob holds 32")]),
    ("aoti_bad_constant", _aoti(consts=(_CONST, {"name": "huge", "fqn": "huge", "data_size": 64,
                                                 "shape": [2**70], "stride": [1]})),
     [("warning", f"zip member 'pkg/{_STEM}.cpp'", (f"pkg/{_STEM}.cpp", "data"),
       "constants_info_[1] has a negative, oversized or inconsistent shape, stride, offset or "
       "data_size: skipped")]),
    ("aoti_no_so", _aoti(blob=None, so=None),
     [("warning", _MODEL, None, "no shared object: constant offsets are unknown")]),
    ("aoti_so_not_elf", _aoti(blob=None, so=b"junk" * 20),
     [("info", _MODEL, None, "constants region of the shared object not found (not an ELF64 "
       "file with _binary_constants_bin_start): offsets unknown")]),
]


@pytest.mark.parametrize("members,want", [c[1:] for c in PT2_CASES], ids=[c[0] for c in PT2_CASES])
def test_pt2_reader_findings(tmp_path, members, want):
    data, _ = build_zip(members)
    p = _write(tmp_path / "case.pt2", data)
    resolved = []
    for sev, structure, off, msg in want:
        if isinstance(off, tuple):
            off = _data_offset(data, off[0]) if off[1] == "data" else _header_offset(data, off[0])
        resolved.append((sev, structure, off, re.escape(msg)))
    with wb.open(p) as art:
        expect(art, *resolved)


def test_pt2_clean_builds_have_no_findings(tmp_path):
    """The builders above make clean archives: each finding is the edit's doing."""
    for i, ms in enumerate((_members(), _aoti())):
        with wb.open(_write(tmp_path / f"clean{i}.pt2", build_zip(ms)[0])) as art:
            expect(art)
