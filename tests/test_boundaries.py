"""Every segment row's start and end, checked against a source that is not workbench.

"Sizes sum to the file size" holds for a reader that puts a boundary in the wrong place as long
as the neighbouring row absorbs the difference. Here every boundary is derived independently:

* ``.pte`` / ``.bpte``: ExecuTorch's ``_ExtendedHeader`` and its ``Program`` dataclass
  (``segments``, ``constant_segment``, ``mutable_data_segments``, delegates, ``named_data``):
  the flatbuffer span, the extended header, each segment's absolute ``[offset, offset+size)``,
  the padding between them and any bytes after the declared data;
* ``.ptd``: the ``FlatTensorHeader`` dataclass of ExecuTorch's flat_tensor serializer and its
  ``FlatTensor`` segments;
* ``.pt2`` (zip): Python's ``zipfile`` — ``ZipInfo.header_offset``, where ``zipfile`` itself
  starts reading a member's data (after the raw local header's name and extra field),
  ``compress_size``, the end records — on the samples and on small archives built here with
  data descriptors (with and without their ``PK\\x07\\x08`` signature, 32- and 64-bit sizes)
  and local extra fields that differ from the central ones.
"""

from __future__ import annotations

import io
import struct
import zipfile
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from conftest import SAMPLES

import workbench as wb

PTE_VARIANTS = True  # pte_path: the samples and the layout variants (conftest.py)
NAMED_KINDS = {"named_data", "so_blob", "weights_blob"}


# -- helpers --------------------------------------------------------------------------------------
def reader_rows(art, file=None) -> list[tuple[int, int, str, int]]:
    """``(offset, size, kind, index or -1)`` of the segment rows of ``file``, sorted; the
    sub-segments of a delegate blob (consecutive rows of one ``Program.segments`` index) are
    joined back into the one range of their segment, shown as ``delegate`` (their own
    boundaries are checked by :func:`test_delegate_subsegments_tile_their_segment` and, for
    XNNPACK, against ExecuTorch's ``XNNHeader`` in ``tests/test_xnnpack.py``)."""
    seg = art.segments
    seg = seg[seg["file"] == (file or art.path)]
    index = seg["index"].fillna(-1).astype(np.int64) if "index" in seg else [-1] * len(seg)
    users = seg["used_by"].fillna("").astype(str) if "used_by" in seg else [""] * len(seg)
    rows = sorted(zip(seg["offset"].astype(int), seg["size"].astype(int),
                      seg["kind"].astype(str), (int(i) for i in index), users))
    out: list[tuple[int, int, str, int]] = []
    last_user = None
    for off, size, kind, i, user in rows:
        # the sub-segments of a blob stored inline in the flatbuffer carry no segment index:
        # they are joined by the delegate they belong to
        inline = i < 0 and " delegate " in user and user == last_user
        if out and (inline or (i >= 0 and out[-1][3] == i)) and out[-1][0] + out[-1][1] == off:
            prev = out.pop()
            out.append((prev[0], prev[1] + size, "delegate", i))
        else:
            out.append((off, size, "delegate" if i < 0 and " delegate " in user else kind, i))
        last_user = user
    return out


def fill_gaps(ranges: list[tuple[int, int, set, int]], file_size: int
              ) -> list[tuple[int, int, set, int]]:
    """Add ``padding`` for every gap between declared ranges and ``trailing`` for the bytes
    after the last one; declared ranges must not overlap."""
    out = list(ranges)
    reach = 0
    for off, size, _, _ in sorted(ranges, key=lambda r: (r[0], r[1])):
        assert off >= reach or size == 0, f"declared ranges overlap at {off}"
        if off > reach:
            out.append((reach, off - reach, {"padding"}, -1))
        reach = max(reach, off + size)
    if reach < file_size:
        out.append((reach, file_size - reach, {"trailing"}, -1))
    return sorted(out, key=lambda r: (r[0], r[1], r[3]))


def assert_rows_match(got: list[tuple], expected: list[tuple], what: str) -> None:
    """Same ranges in the same order; each row's kind among the allowed ones."""
    assert [(o, s, i) for o, s, _, i in got] == [(o, s, i) for o, s, _, i in expected], what
    for (o, s, kind, i), (_, _, allowed, _) in zip(got, expected):
        assert kind in allowed, f"{what}: row [{o}, +{s}) index {i} is {kind!r}, want {allowed}"


def segment_uses(program, schema) -> dict[int, set[str]]:
    """Kinds each Program.segments index may be shown as, from what refers to it."""
    uses: dict[int, set[str]] = defaultdict(set)
    if program.constant_segment is not None:
        uses[program.constant_segment.segment_index].add("constant")
    for m in program.mutable_data_segments or []:
        uses[m.segment_index].add("mutable_data")
    for plan in program.execution_plan:
        for d in plan.delegates:
            if d.processed.location == schema.DataLocation.SEGMENT:
                uses[d.processed.index].add("delegate")
    for n in program.named_data or []:
        uses[n.segment_index] |= NAMED_KINDS
    return uses


def inline_blobs(program, schema) -> list:
    """The ``BackendDelegateInlineData`` entries that delegates refer to."""
    used = {d.processed.index for plan in program.execution_plan for d in plan.delegates
            if d.processed.location == schema.DataLocation.INLINE}
    return [program.backend_delegate_data[i] for i in sorted(used)
            if 0 <= i < len(program.backend_delegate_data)]


def pte_expected(o, start: int = 0) -> list[tuple[int, int, set, int]]:
    """Every byte range of a program (at ``start`` in its file) from ExecuTorch's reading."""
    eh = o.eh
    ranges = [(0, 8, {"header"}, -1)]
    fb = 8
    if eh is not None:
        ranges.append((8, eh.length, {"header"}, -1))
        fb = 8 + eh.length
    # delegate blobs stored inline in the flatbuffer (BackendDelegateInlineData): found by
    # their bytes, as ExecuTorch's deserializer hands them out; the flatbuffer around them
    inline = sorted({(o.data.find(bytes(d.data), fb, o.program_size), len(d.data))
                     for d in inline_blobs(o.program, o.ns.schema) if len(d.data)})
    at = fb
    for off, size in inline:
        assert off >= at, "inline blob not found in the flatbuffer"
        if off > at:
            ranges.append((at, off - at, {"flatbuffer"}, -1))
        ranges.append((off, size, {"delegate"}, -1))
        at = off + size
    ranges.append((at, o.program_size - at, {"flatbuffer"}, -1))
    uses = segment_uses(o.program, o.ns.schema)
    for i, s in enumerate(o.program.segments):
        # without a header ExecuTorch writes only empty segments: they sit at the program's end
        at = o.segment_base_offset + s.offset if eh is not None else o.program_size
        ranges.append((at, s.size, uses.get(i) or {"unused"}, i))
    rows = fill_gaps(ranges, len(o.data))
    declared_end = o.segment_base_offset + eh.segment_data_size if eh is not None else len(o.data)
    trailing = [r for r in rows if r[2] == {"trailing"}]
    assert not trailing or trailing[0][0] == declared_end, "data past the last segment"
    return [(off + start, size, kinds, i) for off, size, kinds, i in rows]


# -- .pte -------------------------------------------------------------------------------------------
def test_pte_boundaries(pte_path, oracle, opened):
    o = oracle.read(pte_path)
    art = opened(pte_path)
    assert_rows_match(reader_rows(art), pte_expected(o), pte_path.name)


def test_segment_rows_hold_the_segment_bytes(pte_path, oracle, opened):
    """Each segment row's bytes are the bytes ExecuTorch's restore step reads for it."""
    o = oracle.read(pte_path)
    art = opened(pte_path)
    seg = art.segments
    seg = seg[(seg["file"] == art.path) & seg["index"].notna()]
    # a delegate blob's sub-segments together are its segment
    seg = seg.groupby("index").agg(offset=("offset", "min"), size=("size", "sum")).reset_index()
    data = pte_path.read_bytes()
    blobs = o.program.segments
    assert len(seg) == len(blobs)
    if o.eh is None:
        return
    tail = data[o.segment_base_offset :]  # what _restore_segments slices (segment-relative)
    for r in seg.itertuples():
        s = blobs[int(r.index)]
        assert data[r.offset : r.offset + r.size] == tail[s.offset : s.offset + s.size]


def test_delegate_subsegments_tile_their_segment(pte_path, oracle, opened):
    """A delegate segment shown as sub-segments: they lie back to back from the segment's
    first byte to its last (ExecuTorch's offsets), each named after its delegate; segments
    nothing delegates to are never split."""
    o = oracle.read(pte_path)
    art = opened(pte_path)
    seg = art.segments
    seg = seg[(seg["file"] == art.path) & seg["index"].notna()]
    uses = segment_uses(o.program, o.ns.schema)
    split = 0
    for i, rows in seg.groupby("index"):
        if len(rows) == 1:
            continue
        split += 1
        assert uses.get(int(i)) == {"delegate"}, f"segment {i} is split but is not a delegate blob"
        start = o.segment_base_offset + o.program.segments[int(i)].offset
        ends = (rows["offset"] + rows["size"]).tolist()
        assert rows["offset"].tolist() == [start, *ends[:-1]]
        assert ends[-1] == start + o.program.segments[int(i)].size
        label = rows["used_by"].iloc[0]
        assert label.endswith(")") and " delegate " in label and (rows["used_by"] == label).all()
        assert all(n.startswith(label + ": ") for n in rows["name"])
    delegated = {k for k, v in uses.items() if v == {"delegate"}}
    if delegated and art.frames["delegates"]["backend"].notna().all() and o.eh is not None:
        assert split >= 1, f"{pte_path.name}: no delegate segment was split into its layout"


@pytest.mark.parametrize("name", [p.name for p in sorted(SAMPLES.glob("*.pte"))])
def test_appended_bytes_are_a_trailing_row(tmp_path, oracle, name):
    """Bytes appended to a program with an extended header are one ``trailing`` row, exactly
    after the header's segment data, and validate() reports them. Without a header the file
    IS the flatbuffer (for ExecuTorch too): the program row grows, nothing else changes."""
    data = (SAMPLES / name).read_bytes()
    extra = b"\x00appended\xff" * 7
    p = tmp_path / name
    p.write_bytes(data + extra)
    o = oracle.read_bytes(data + extra, p)
    with wb.open(p) as art, wb.open(SAMPLES / name) as original:
        rows = reader_rows(art)
        assert_rows_match(rows, pte_expected(o), name)
        before = reader_rows(original)
        if o.eh is None:
            assert (8, len(data + extra) - 8, "flatbuffer", -1) in rows
            assert [r for r in rows if r[1] and r not in before] == [rows[1]]
            return
        assert rows[-1] == (o.segment_base_offset + o.eh.segment_data_size, len(extra),
                            "trailing", -1)
        assert rows[-1][0] == len(data)
        assert rows[:-1] == before
        found = art.validate()
        hit = found[(found["offset"] == len(data))
                    & found["message"].str.contains(str(len(extra)), regex=False)]
        assert len(hit) == 1, found.to_string()


def test_trailing_variant_is_reported(pte_variant, oracle):
    p = pte_variant("trailing")
    o = oracle.read(p)
    end = o.segment_base_offset + o.eh.segment_data_size
    with wb.open(p) as art:
        last = reader_rows(art)[-1]
        assert last == (end, len(o.data) - end, "trailing", -1)
        found = art.validate()
        assert (found["offset"] == end).any(), found.to_string()


# -- .bpte ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["mlp.bpte", "variant:bundled_constant_not_first"])
def test_bpte_boundaries(which, sample, oracle, request):
    """The embedded program's rows are the oracle's, shifted to where the program lies in
    the bundle; its constant tensors are placed from the constant segment's own offset there;
    the test-data rows hold the oracle's test tensors."""
    pytest.importorskip("executorch.devtools.bundled_program.serialize")
    from executorch.devtools.bundled_program.serialize import (
        deserialize_from_flatbuffer_to_bundled_program,
    )

    if which.startswith("variant:"):
        path = request.getfixturevalue("pte_variant")(which.split(":")[1])
    else:
        path = sample(which)
    data = path.read_bytes()
    bundled = deserialize_from_flatbuffer_to_bundled_program(data)
    program = bytes(bundled.program)
    start = data.find(program)
    assert start > 0 and data.find(program, start + 1) < 0
    end = start + len(program)
    o = oracle.read_bytes(program)
    with wb.open(path) as art:
        assert art.format == "bpte"
        rows = reader_rows(art)
        inside = [r for r in rows if start <= r[0] < end or (r[0] == end and r[1] == 0)]
        assert_rows_match(inside, pte_expected(o, start), "embedded program")
        test_data = [bytes(v.val.data) for s in bundled.method_test_suites for c in s.test_cases
                     for v in (*c.inputs, *c.expected_outputs)
                     if type(v.val).__name__ == "Tensor"]
        outside = [r for r in rows if r not in inside]
        assert outside[0] == (0, 8, "header", -1)
        got = sorted(data[off : off + size] for off, size, kind, _ in outside if kind == "test_data")
        assert got == sorted(test_data)
        assert {kind for _, _, kind, _ in outside[1:]} <= {"flatbuffer", "test_data"}
        t = art.tensors
        n = 0
        for method, v, tensor in o.tensors():
            at = o.constant_location(tensor)
            if at is not None:
                row = t[(t["method"] == method) & (t["value"] == v)].iloc[0]
                assert row["offset"] == start + at, (method, v)
                n += 1
        assert n


# -- .ptd -------------------------------------------------------------------------------------------
def ptd_paths() -> list:
    return [*sorted(SAMPLES.glob("*.ptd")), "variant:ptd_trailing"]


def ptd_expected(data: bytes) -> list[tuple[int, int, set, int]]:
    """Byte ranges of a .ptd from ExecuTorch's FlatTensor header and flatbuffer."""
    from executorch.extension.flat_tensor.serialize.serialize import (
        FlatTensorHeader,
        _deserialize_to_flat_tensor,
    )

    h = FlatTensorHeader.from_bytes(data[8:])
    assert h.is_valid()
    fb_end = h.flatbuffer_offset + h.flatbuffer_size
    ft = _deserialize_to_flat_tensor(data[:fb_end])
    # The serializer inserts the header, padded to flatbuffer_offset bytes, after the root
    # offset and file identifier: the padding is zeros, the flatbuffer's tables follow it.
    body = 8 + h.flatbuffer_offset
    assert data[8 + h.length : body] == bytes(body - 8 - h.length)
    ranges = [(0, 8, {"header"}, -1), (8, h.length, {"header"}, -1),
              (body, fb_end - body, {"flatbuffer"}, -1)]
    named = {n.segment_index for n in ft.named_data}
    for i, s in enumerate(ft.segments):
        ranges.append((h.segment_base_offset + s.offset, s.size,
                       NAMED_KINDS if i in named else {"unused"}, i))
    rows = fill_gaps(ranges, len(data))
    trailing = [r for r in rows if r[2] == {"trailing"}]
    assert not trailing or trailing[0][0] == h.segment_base_offset + h.segment_data_size
    return rows


@pytest.mark.parametrize("which", ptd_paths(), ids=lambda p: getattr(p, "name", p))
def test_ptd_boundaries(which, request):
    pytest.importorskip("executorch.extension.flat_tensor.serialize.serialize")
    if isinstance(which, str):
        path = request.getfixturevalue("pte_variant")(which.split(":")[1]).with_suffix(".ptd")
    else:
        path = which
    data = path.read_bytes()
    with wb.open(path) as art:
        assert art.format == "ptd"
        assert_rows_match(reader_rows(art), ptd_expected(data), path.name)


@pytest.mark.parametrize("name", [p.name for p in sorted(SAMPLES.glob("*.ptd"))])
def test_ptd_appended_bytes(tmp_path, name):
    pytest.importorskip("executorch.extension.flat_tensor.serialize.serialize")
    data = (SAMPLES / name).read_bytes()
    extra = b"\x07tail" * 5
    p = tmp_path / name
    p.write_bytes(data + extra)
    with wb.open(p) as art:
        rows = reader_rows(art)
        assert rows[-1] == (len(data), len(extra), "trailing", -1)
        assert_rows_match(rows, ptd_expected(data + extra), name)
        found = art.validate()
        assert (found["offset"] == len(data)).any(), found.to_string()
    # opened as the data file of its program, the trailing row is there too
    pte = SAMPLES / name.replace(".ptd", ".pte")
    if pte.is_file():
        (tmp_path / pte.name).write_bytes(pte.read_bytes())
        with wb.open(tmp_path / pte.name) as art:
            ptd_file = next(f for f in art.files if f.endswith(".ptd"))
            assert reader_rows(art, ptd_file)[-1] == (len(data), len(extra), "trailing", -1)


def test_ptd_trailing_variant_with_its_program(pte_variant):
    """The ptd_trailing variant's program finds its .ptd; the .ptd's rows end in the trailing
    bytes, which validate() reports."""
    p = pte_variant("ptd_trailing")
    ptd = p.with_suffix(".ptd")
    data = ptd.read_bytes()
    with wb.open(p) as art:
        ptd_file = next(f for f in art.files if f.endswith(".ptd"))
        rows = reader_rows(art, ptd_file)
        assert_rows_match(rows, ptd_expected(data), ptd.name)
        assert rows[-1][2] == "trailing"
        found = art.validate()
        assert (found["offset"] == rows[-1][0]).any(), found.to_string()


# -- .pt2 (zip) ------------------------------------------------------------------------------------
class _Unseekable(io.RawIOBase):
    """A write-only stream without tell/seek: zipfile then writes data descriptors."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.data += b
        return len(b)


def _members(zf: zipfile.ZipFile) -> None:
    """Stored members of a small torch.export-like archive."""
    zf.writestr("arc/archive_format", b"pt2")
    zf.writestr("arc/data/weights/weight_0", np.arange(64, dtype=np.float32).tobytes())
    info = zipfile.ZipInfo("arc/extra/with_extra.bin")
    info.extra = struct.pack("<HH", 0xCAFE, 6) + b"abcdef"  # an unknown extra field
    zf.writestr(info, b"member with an extra field")
    with zf.open("arc/data/weights/zip64_sizes", "w", force_zip64=True) as f:
        f.write(b"\x01\x02" * 50)  # the local header gets a zip64 extra field, the central not
    info = zipfile.ZipInfo("arc/extra/zip64_after_another_field")
    info.extra = struct.pack("<HH", 0xCAFE, 2) + b"xy"
    with zf.open(info, "w", force_zip64=True) as f:  # local extra: 0xCAFE, then zip64
        f.write(b"\x03" * 33)
    zf.writestr("arc/version", b"1\n")


def _strip_descriptor_signatures(data: bytes) -> bytes:
    """The same archive with every data descriptor written without its PK\\x07\\x08
    signature (the signature is optional): members, central offsets and the end record are
    moved accordingly."""
    out = bytearray()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = sorted(zf.infolist(), key=lambda i: i.header_offset)
        new_offset = {}
        for k, info in enumerate(infos):
            nxt = infos[k + 1].header_offset if k + 1 < len(infos) else zf.start_dir
            data_end = _data_offset(zf, info) + info.compress_size
            assert data[data_end : data_end + 4] == b"PK\x07\x08"
            new_offset[info.header_offset] = len(out)
            out += data[info.header_offset : data_end] + data[data_end + 4 : nxt]
        cd_offset = len(out)
        pos = zf.start_dir
        for _ in infos:  # central records: patch the local header offset (at +42)
            n, m, c = struct.unpack_from("<HHH", data, pos + 28)
            rec = bytearray(data[pos : pos + 46 + n + m + c])
            (lho,) = struct.unpack_from("<I", rec, 42)
            struct.pack_into("<I", rec, 42, new_offset[lho])
            out += rec
            pos += len(rec)
        cd_size = len(out) - cd_offset
        eocd = bytearray(data[pos:])
        assert eocd[:4] == b"PK\x05\x06"
        struct.pack_into("<II", eocd, 12, cd_size, cd_offset)
        out += eocd
    return bytes(out)


def _data_offset(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
    """Where zipfile itself starts reading ``info``'s data (it parses the local header)."""
    with zf.open(info) as f:
        return f._fileobj.tell()


def built_zips() -> dict[str, bytes]:
    seekable = io.BytesIO()
    with zipfile.ZipFile(seekable, "w") as zf:
        _members(zf)
        zf.comment = b"an archive comment"
    stream = _Unseekable()
    with zipfile.ZipFile(stream, "w") as zf:
        _members(zf)
    with_sig = bytes(stream.data)
    return {"seekable_extras.zip": seekable.getvalue(), "descriptors_signed.zip": with_sig,
            "descriptors_unsigned.zip": _strip_descriptor_signatures(with_sig),
            "descriptors_trailing.zip": with_sig + b"bytes after the end record"}


def _has_local_zip64(data: bytes, info: zipfile.ZipInfo) -> bool:
    n, m = struct.unpack_from("<HH", data, info.header_offset + 26)
    pos = info.header_offset + 30 + n
    end = pos + m
    while pos + 4 <= end:
        xid, xlen = struct.unpack_from("<HH", data, pos)
        if xid == 1:
            return True
        pos += 4 + xlen
    return False


def zip_expected(data: bytes) -> tuple[list[tuple[int, int, int]], dict]:
    """From zipfile: per member (index) its header span, data span, descriptor span; plus the
    central directory and end records."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert zf.testzip() is None  # zipfile reads every member back (CRC checked)
        infos = zf.infolist()
        order = sorted(range(len(infos)), key=lambda k: infos[k].header_offset)
        members = {}
        for pos, k in enumerate(order):
            info = infos[k]
            lho = info.header_offset
            sig, *_, n, m = struct.unpack_from(zipfile.structFileHeader, data, lho)
            assert sig == zipfile.stringFileHeader
            start = _data_offset(zf, info)
            assert start == lho + zipfile.sizeFileHeader + n + m  # raw local header lengths
            end = start + info.compress_size
            nxt = infos[order[pos + 1]].header_offset if pos + 1 < len(order) else zf.start_dir
            desc = 0
            if info.flag_bits & 0x08:
                wide = _has_local_zip64(data, info) or info.compress_size >= 0xFFFFFFFF
                desc = (20 if wide else 12) + 4 * (data[end : end + 4] == b"PK\x07\x08")
                assert end + desc == nxt, "a descriptor is not followed by the next header"
            members[k] = {"header": (lho, start), "data": (start, end), "descriptor": desc}
        endrec = zipfile._EndRecData(io.BytesIO(data))
        cd = (endrec[zipfile._ECD_OFFSET], endrec[zipfile._ECD_SIZE])
        eocd = endrec[zipfile._ECD_LOCATION]
        eocd_end = eocd + zipfile.sizeEndCentDir + len(zf.comment)
    return members, {"central_directory": cd, "eocd": (eocd, eocd_end)}


def assert_zip_rows(art, data: bytes, what: str) -> None:
    members, ends = zip_expected(data)
    seg = art.segments
    rows = seg[seg["file"] == art.path]
    by_member = defaultdict(list)
    for r in rows.itertuples():
        if pd.notna(r.index) and r.kind not in ("central_directory", "end_record", "trailing"):
            by_member[int(r.index)].append((int(r.offset), int(r.size), str(r.kind)))
    assert set(by_member) == set(members), what
    for k, want in members.items():
        got = sorted(by_member[k])
        head = [g for g in got if g[2] in ("header", "padding")]
        desc = [g for g in got if g[2] == "data_descriptor"]
        body = [g for g in got if g not in head and g not in desc]
        lho, start = want["header"]
        assert head[0][0] == lho and head[-1][0] + head[-1][1] == start, (what, k, head)
        assert head[0][2] == "header" and sum(s for _, s, _ in head) == start - lho
        d0, d1 = want["data"]
        assert body and body[0][0] == d0 and body[-1][0] + body[-1][1] == d1, (what, k, body)
        assert sum(s for _, s, _ in body) == d1 - d0
        if want["descriptor"]:
            assert desc == [(d1, want["descriptor"], "data_descriptor")], (what, k, desc)
        else:
            assert not desc, (what, k, desc)
    cd_off, cd_size = ends["central_directory"]
    cd = rows[rows["kind"] == "central_directory"]
    assert list(zip(cd["offset"], cd["size"])) == [(cd_off, cd_size)], what
    eocd, eocd_end = ends["eocd"]
    end_rows = rows[rows["kind"] == "end_record"]
    assert int(end_rows["offset"].min()) == cd_off + cd_size
    last = end_rows.iloc[-1]
    assert (int(last["offset"]), int(last["offset"] + last["size"])) == (eocd, eocd_end), what
    tail = rows[rows["kind"] == "trailing"]
    if eocd_end < len(data):
        assert list(zip(tail["offset"], tail["size"])) == [(eocd_end, len(data) - eocd_end)]
    else:
        assert tail.empty
    # nothing else: every other row is a member's or end-record row checked above
    assert set(rows["kind"].astype(str)) - {"central_directory", "end_record", "trailing",
                                            "header", "padding", "data_descriptor"} \
        <= {g[2] for v in by_member.values() for g in v}


@pytest.mark.parametrize("name", [p.name for p in sorted(SAMPLES.glob("*.pt2"))])
def test_pt2_sample_boundaries(name):
    path = SAMPLES / name
    with wb.open(path) as art:
        assert_zip_rows(art, path.read_bytes(), name)


@pytest.mark.parametrize("name", list(built_zips()))
def test_zip_boundaries(tmp_path, name):
    data = built_zips()[name]
    p = tmp_path / name.replace(".zip", ".pt2")
    p.write_bytes(data)
    with wb.open(p) as art:
        assert_zip_rows(art, data, name)


def test_built_zips_have_what_they_claim():
    """The archives above really hold descriptors with and without signature, 8-byte
    descriptor sizes and local extra fields that differ from the central ones."""
    zips = built_zips()
    for name in ("descriptors_signed.zip", "descriptors_unsigned.zip"):
        data = zips[name]
        members, _ = zip_expected(data)
        sizes = sorted({m["descriptor"] for m in members.values()})
        assert sizes == ([16, 24] if name == "descriptors_signed.zip" else [12, 20]), sizes
    with zipfile.ZipFile(io.BytesIO(zips["seekable_extras.zip"])) as zf:
        differ = 0
        for info in zf.infolist():
            _, m = struct.unpack_from("<HH", zips["seekable_extras.zip"], info.header_offset + 26)
            differ += m != len(info.extra)
            assert not info.flag_bits & 0x08
        assert differ and any(i.extra for i in zf.infolist())


def test_inline_delegate_blob_is_split_inside_the_flatbuffer(pte_variant, oracle):
    """A delegate blob stored inline in the program flatbuffer (``extract_delegate_segments=
    False``) is taken apart as a blob in a segment is: its XNNPACK header and graph are rows
    inside the flatbuffer's range, the flatbuffer on both sides stays ``flatbuffer``, and the
    rows still cover the file exactly."""
    path = pte_variant("inline_delegate")
    o = oracle.read(path)
    (blob,) = inline_blobs(o.program, o.ns.schema)
    start = o.data.find(bytes(blob.data))
    end = start + len(blob.data)
    seg = wb.open(path).segments
    inside = seg[(seg["offset"] >= start) & (seg["offset"] < end)]
    assert inside["offset"].iloc[0] == start
    assert (inside["offset"] + inside["size"]).iloc[-1] == end
    assert len(inside) >= 3 and {"header", "flatbuffer"} <= set(inside["kind"])
    assert inside["name"].str.contains("header (XH00)", regex=False).any()
    around = seg[seg["name"].astype(str).str.startswith("program")]
    assert around["kind"].tolist() == ["flatbuffer", "flatbuffer"]
    assert around["offset"].iloc[1] == end
    assert int(seg["size"].sum()) == len(o.data)
