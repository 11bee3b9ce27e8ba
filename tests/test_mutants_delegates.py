"""Delegate-blob parsers pinned field by field (issue #19: mutation testing).

Every parser's whole result is compared: the header dict, the layout, every sub-segment
(name, kind, absolute offset, size), every finding, every tensor and node column, and for
each refusal the error's class, structure, absolute offset and message. Blobs are built
here (``struct.pack``; graph flatbuffers with the wheel's ``flatc`` and ExecuTorch's own
schema files, so the slot numbers come from the schema, not from the reader).
"""

from __future__ import annotations

import json
import math
import pathlib
import re
import struct
import subprocess

import numpy as np
import pytest
from helpers import read_tier

import workbench as wb
from workbench import readpath
from workbench.errors import (
    CorruptError,
    OutOfBoundsError,
    TruncatedError,
    UnsupportedVersionError,
)
from workbench.formats.delegates import (
    Finding,
    SubSegment,
    UnsupportedQuantizationError,
    dequantize,
    inspect_blob,
    inspect_blobs,
)
from workbench.formats.delegates._columns import MISSING, NODE_KINDS, TENSOR_KINDS, Coded

FILE = "m.pte"
AT = 1000  # where the blobs sit in their (pretend) file


def look(blob: bytes, bid: str, *, whole: bool = False, named=None, method: str = "forward",
         index: int = 0, offset: int = AT):
    """inspect_blob on the blob alone (``whole`` False) or on a buffer holding it at
    ``offset`` between other bytes: both views must give absolute offsets."""
    if whole:
        buf = b"\xee" * offset + blob + b"\xee" * 7
        return inspect_blob(memoryview(buf), file=FILE, offset=offset, size=len(blob),
                            backend_id=bid, method=method, index=index, named_data=named)
    return inspect_blob(blob, file=FILE, offset=offset, backend_id=bid, method=method,
                        index=index, named_data=named)


def fails(blob: bytes, bid: str, cls: type, structure: str, offset: int, detail: str,
          **kw) -> None:
    """The blob is refused with exactly this error (structure without the delegate label,
    offset relative to the blob)."""
    for whole in (False, True):
        with pytest.raises(wb.ArtifactError) as e:
            look(blob, bid, whole=whole, **kw)
        got = e.value
        label = f"{kw.get('method', 'forward')} delegate {kw.get('index', 0)} ({bid})"
        assert type(got) is cls, (type(got), got)
        text = detail(kw.get("offset", AT) if whole else 0) if callable(detail) else detail
        assert (got.file, got.structure, got.offset, got.detail) == (
            FILE, f"{label}: {structure}", kw.get("offset", AT) + offset, text), got


def seg(name: str, kind: str, offset: int, size: int) -> SubSegment:
    """A sub-segment at ``offset`` relative to the blob."""
    return SubSegment(name, kind, AT + offset, size)


def pad(offset: int, size: int) -> SubSegment:
    return SubSegment("padding", "padding", AT + offset, size)


def column_rows(cols: dict) -> list[dict]:
    """Per-blob columns as row dicts (Coded columns decoded; NaN as the string 'nan')."""
    names = list(cols)
    lists = {}
    for k in names:
        c = cols[k]
        c = c.values() if isinstance(c, Coded) else c
        lists[k] = [v.item() if isinstance(v, np.generic) else v for v in list(c)]
    n = len(lists[names[0]]) if names else 0
    assert all(len(v) == n for v in lists.values())
    return [{k: ("nan" if isinstance(lists[k][i], float) and math.isnan(lists[k][i])
                 else lists[k][i]) for k in names} for i in range(n)]


def default_row(kinds: dict, **values) -> dict:
    """A row of per-blob columns with every field missing but ``values``."""
    empty = {"cat": None, "str": None, "obj": (), "float": "nan", "bool3": -1,
             "int": MISSING, "Int": MISSING}
    row = {k: empty[kind] for k, kind in kinds.items()}
    assert set(values) <= set(row), set(values) - set(row)
    row.update(values)
    return row


def trow(**values) -> dict:
    return default_row(TENSOR_KINDS, **values)


def nrow(**values) -> dict:
    return default_row(NODE_KINDS, **values)


def _executorch_dir() -> pathlib.Path:
    import importlib.util

    spec = importlib.util.find_spec("executorch")
    if spec is None:
        pytest.skip("executorch is not installed")
    return pathlib.Path(next(iter(spec.submodule_search_locations)))


def flatc(schema: str, doc: dict, tmp: pathlib.Path) -> bytes:
    """A flatbuffer written by the wheel's flatc from ``doc`` with ExecuTorch's schema
    ``schema`` (a path inside the executorch package)."""
    ex = _executorch_dir()
    (tmp / "doc.json").write_text(json.dumps(doc))
    subprocess.run([str(ex / "data/bin/flatc"), "-b", "-o", str(tmp), str(ex / schema),
                    str(tmp / "doc.json")], check=True, capture_output=True)
    return (tmp / "doc.bin").read_bytes()


# -- the registry: unknown blobs, ids, views ----------------------------------------------------

@pytest.mark.parametrize("whole", [False, True])
def test_unknown_blob(whole):
    info = look(b"\x01\x02\x03\x04hello", "SecretBackend", whole=whole, method="fwd", index=2)
    assert (info.backend, info.backend_id, info.layout, info.file, info.offset, info.size,
            info.method, info.index) == ("unknown", "SecretBackend", "opaque", FILE, AT, 9,
                                         "fwd", 2)
    assert info.subsegments == [seg("payload", "delegate", 0, 9)]
    assert info.findings == [Finding(
        "warning", "fwd delegate 2 (SecretBackend)", AT,
        "no parser for backend id 'SecretBackend' (first bytes 01 02 03 04 68 65 6c 6c): the "
        "blob is shown as one opaque range")]
    assert (info.header, info.tensors, info.nodes, info.named_keys) == ({}, None, None, ())
    assert info.label == "fwd delegate 2 (SecretBackend)"
    assert info.segment_rows(5) == [(AT, 9, "fwd delegate 2 (SecretBackend): payload",
                                     "delegate", 5, "fwd delegate 2 (SecretBackend)")]


@pytest.mark.parametrize("whole", [False, True])
def test_unknown_short_and_empty_blobs_and_empty_labels(whole):
    info = look(b"\xab\xcd", "", method="", whole=whole)
    assert info.findings == [Finding("warning", "delegate 0 ()", AT,
                                     "no parser for backend id '' (first bytes ab cd): the blob "
                                     "is shown as one opaque range")]
    assert info.subsegments == [seg("payload", "delegate", 0, 2)]
    empty = look(b"", "X", whole=whole)
    assert empty.subsegments == [] and empty.size == 0
    assert empty.findings[0].message == ("no parser for backend id 'X' (first bytes ): the blob "
                                         "is shown as one opaque range")


def test_blob_outside_the_buffer():
    for offset, size in ((-1, 4), (0, -1), (10, 7)):
        with pytest.raises(wb.ArtifactError) as e:
            inspect_blob(b"\0" * 16, file="b/x.pte", offset=offset, size=size, backend_id="Q",
                         method="f", index=3)
        assert type(e.value) is OutOfBoundsError
        assert (e.value.file, e.value.structure, e.value.offset) == ("x.pte", "f delegate 3 (Q)",
                                                                     offset)
        assert e.value.detail == (f"delegate blob [0x{offset:x}, +0x{size:x}) lies outside "
                                  "the buffer (size 0x10)")
    # exactly up to the end is fine
    assert inspect_blob(b"\0" * 16, file="x", offset=10, size=6).size == 6


def test_buffers_of_other_formats_are_cast_to_bytes():
    words = np.array([0x01020304, 0x05060708], np.uint32)
    info = inspect_blob(memoryview(words), file="w.pte", offset=8, backend_id="Z")
    assert info.size == 8 and info.findings[0].message.startswith(
        "no parser for backend id 'Z' (first bytes 04 03 02 01 08 07 06 05)")
    grid = memoryview(np.zeros((2, 4), np.uint8))
    assert inspect_blob(grid, file="g.pte", offset=0, size=8).size == 8


def test_a_blob_called_by_another_id_gets_an_info_finding():
    blob = struct.pack("<Iqq", 0x5678ABCD, 7, 4) + b"QNN!"
    info = look(blob, "XnnpackBackend")
    assert info.backend == "qnn"
    assert info.findings == [Finding("info", "forward delegate 0 (XnnpackBackend)", AT,
                                     "the program calls this qnn blob 'XnnpackBackend' "
                                     "(expected QnnBackend)")]
    assert look(blob, "QnnBackend").findings == []
    assert look(blob, "").findings == []
    so = ("1" * 64 + "_so_blob").encode()
    assert look(so, "Foo").findings == [Finding(
        "info", "forward delegate 0 (Foo)", AT, "the program calls this aoti blob 'Foo' "
        "(expected CudaBackend, MetalBackend, AotiBackend)")]


def test_inspect_blobs_mixed_backends_and_shift():
    qnn = struct.pack("<Iqq", 0x5678ABCD, -5, 4) + b"QNN!"
    buf = b"\0" * 8 + qnn + b"zz" + qnn
    infos = inspect_blobs(memoryview(buf), [(8, 24, "QnnBackend", "f", 0),
                                            (34, 24, "Other", "g", 1), (32, 2, "Odd", "h", 2)],
                          file=FILE)
    assert [(i.backend, i.offset, i.size, i.method, i.index) for i in infos] == [
        ("qnn", 8, 24, "f", 0), ("qnn", 34, 24, "g", 1), ("unknown", 32, 2, "h", 2)]
    assert infos[0].header["signature"] == -5
    assert infos[1].findings[0].severity == "info"
    assert infos[2].subsegments == [SubSegment("payload", "delegate", 32, 2)]
    with pytest.raises(OutOfBoundsError):
        inspect_blobs(buf, [(50, 24, "QnnBackend", "f", 0)], file=FILE)


# -- AOTInductor ----------------------------------------------------------------------------------

SO = "0123456789abcdef" * 4 + "_so_blob"
WEIGHTS = "fedcba9876543210" * 4 + "_weights_blob"


@pytest.mark.parametrize("whole", [False, True])
def test_aoti_reference_resolved(whole):
    blob = f"{SO}\n{WEIGHTS}".encode()
    named = {SO: ("m.pte", 4096, 100), WEIGHTS: (pathlib.Path("w.ptd"), np.int64(128), 64)}
    info = look(blob, "CudaBackend", whole=whole, named=named)
    assert (info.backend, info.layout) == (
        "aoti", "text: named-data keys of the .so and the weights blob")
    assert info.header == {"so_key": SO, "so_file": "m.pte", "so_offset": 4096, "so_size": 100,
                           "weights_key": WEIGHTS, "weights_file": "w.ptd",
                           "weights_offset": 128, "weights_size": 64}
    assert type(info.header["weights_offset"]) is int
    assert info.subsegments == [seg("named-data references (text)", "header", 0, len(blob))]
    assert info.named_keys == (SO, WEIGHTS) and info.findings == []
    assert (info.tensors, info.nodes) == (None, None)


def test_aoti_reference_unresolved():
    blob = SO.encode()
    info = look(blob, "MetalBackend", named={WEIGHTS: ("m.pte", 1, 2)})
    assert info.header == {"so_key": SO}
    assert info.findings == [Finding("warning", "AOTI delegate reference", AT,
                                     f"so key {SO!r} was not found in named data or attached "
                                     "data files")]
    both = look(f"{SO}\n{WEIGHTS}".encode(), "CudaBackend", named={})
    assert [f.message.split(" key")[0] for f in both.findings] == ["so", "weights"]
    assert look(blob, "CudaBackend").findings == []  # no named data given: nothing to say
    assert look(blob, "CudaBackend").header == {"so_key": SO}


@pytest.mark.parametrize("text", [SO.upper(), SO[1:], SO + "\n", f"{SO}\n{SO}", WEIGHTS,
                                  f"{WEIGHTS}\n{SO}", f"x{SO}"])
def test_aoti_detect_needs_the_exact_text(text):
    assert look(text.encode(), "CudaBackend").backend == "unknown"


# -- QNN ----------------------------------------------------------------------------------------

CTX = struct.pack("<I", 0x5678ABCD)
QCIR = struct.pack("<I", 0x1234ABCD)


@pytest.mark.parametrize("whole", [False, True])
def test_qnn_context_exact(whole):
    blob = CTX + struct.pack("<qQ", -123456789, 6) + b"QNNCTX"
    info = look(blob, "QnnBackend", whole=whole)
    assert (info.backend, info.layout) == ("qnn", "context protocol header + QNN context binary")
    assert info.header == {"magic": "0x5678abcd", "protocol": "context",
                           "signature": -123456789, "context_binary_size": 6,
                           "context_binary_offset": 20}
    assert info.subsegments == [seg("header (context protocol)", "header", 0, 20),
                                seg("QNN context binary", "delegate", 20, 6)]
    assert info.findings == []


def test_qnn_context_aligned_and_padded():
    blob = CTX + struct.pack("<qQ", 1, 6) + b"\0" * 236 + b"QNNCTX" + b"\0" * 3
    info = look(blob, "QnnBackend")
    assert info.header["context_binary_offset"] == 256
    assert info.subsegments == [seg("header (context protocol)", "header", 0, 20),
                                pad(20, 236), seg("QNN context binary", "delegate", 256, 6),
                                pad(262, 3)]
    exact = CTX + struct.pack("<qQ", 1, 6) + b"\0" * 236 + b"QNNCTX"
    assert look(exact, "QnnBackend").header["context_binary_offset"] == 256
    # empty context binary
    empty = look(CTX + struct.pack("<qQ", 0, 0), "QnnBackend")
    assert empty.subsegments == [seg("header (context protocol)", "header", 0, 20)]


def test_qnn_context_refusals():
    short = CTX + struct.pack("<qQ", 1, 6)[:15]
    fails(short, "QnnBackend", TruncatedError, "QNN context protocol header", 0,
          "19 bytes is too short for the 20-byte header")
    # neither 20 + binary == size nor 256 + binary <= size
    for binary, size in ((6, 25), (6, 261), (300, 300)):
        blob = (CTX + struct.pack("<qQ", 1, binary)).ljust(size, b"\0")
        fails(blob, "QnnBackend", OutOfBoundsError,
              "QNN context protocol header.context_binary_size", 12,
              f"context binary of {binary} bytes does not fit after the header in the blob "
              f"(size {size})")
    # a 4-byte magic alone is a QNN blob (too short), not an unknown one
    fails(CTX, "QnnBackend", TruncatedError, "QNN context protocol header", 0,
          "4 bytes is too short for the 20-byte header")
    assert look(CTX[:3], "QnnBackend").backend == "unknown"


@pytest.mark.parametrize("whole", [False, True])
def test_qnn_qcir_exact(whole):
    blob = QCIR + struct.pack("<IQ", 8, 5) + b"F" * 8 + b"T" * 5
    info = look(blob, "QnnBackend", whole=whole)
    assert (info.backend, info.layout) == (
        "qnn", "QCIR protocol header + QCIR flatbuffer + tensor data")
    assert info.header == {"magic": "0x1234abcd", "protocol": "qcir", "qcir_fbs_size": 8,
                           "tensor_size": 5}
    assert info.subsegments == [seg("header (QCIR protocol)", "header", 0, 16),
                                seg("QCIR flatbuffer", "flatbuffer", 16, 8),
                                seg("tensor data", "constant", 24, 5)]
    spare = look(QCIR + struct.pack("<IQ", 0, 2) + b"TT" + b"\0\0", "QnnBackend")
    assert spare.subsegments == [seg("header (QCIR protocol)", "header", 0, 16),
                                 seg("tensor data", "constant", 16, 2), pad(18, 2)]


def test_qnn_qcir_refusals():
    fails(QCIR + b"\0" * 11, "QnnBackend", TruncatedError, "QNN QCIR protocol header", 0,
          "15 bytes is too short for the 16-byte header")
    fails(QCIR, "QnnBackend", TruncatedError, "QNN QCIR protocol header", 0,
          "4 bytes is too short for the 16-byte header")
    blob = QCIR + struct.pack("<IQ", 8, 6) + b"F" * 8 + b"T" * 5
    fails(blob, "QnnBackend", OutOfBoundsError, "QNN QCIR protocol header.qcir_fbs_size", 4,
          "QCIR flatbuffer (8 bytes) and tensor data (6 bytes) do not fit in the blob (size 29)")


# -- OpenVINO -----------------------------------------------------------------------------------

def _ov(fields, body: bytes) -> bytes:
    return struct.pack("<6Q", *fields) + body


@pytest.mark.parametrize("whole", [False, True])
def test_openvino_exact(whole):
    blob = _ov((48, 6, 56, 8, 64, 4), b"  <x/>" + b"\0\0" + b"W" * 8 + b"<m/>" + b"\0")
    info = look(blob, "OpenvinoBackend", whole=whole)
    assert (info.backend, info.layout) == (
        "openvino", "StreamSerialize DataHeader + custom data + constants + model")
    assert info.header == {"custom_data_offset": 48, "custom_data_size": 6, "consts_offset": 56,
                           "consts_size": 8, "model_offset": 64, "model_size": 4,
                           "custom_data_is_xml": True}
    assert info.subsegments == [seg("DataHeader", "header", 0, 48),
                                seg("custom data (XML)", "header", 48, 6), pad(54, 2),
                                seg("constants", "constant", 56, 8),
                                seg("model (XML)", "delegate", 64, 4), pad(68, 1)]
    assert info.findings == []


def test_openvino_custom_data_is_xml_looks_at_64_bytes():
    def xml(custom: bytes) -> bool:
        blob = _ov((48, len(custom), 48 + len(custom), 0, 48 + len(custom), 0), custom)
        return look(blob, "OpenvinoBackend").header["custom_data_is_xml"]

    assert xml(b" " * 63 + b"<") is True
    assert xml(b" " * 64 + b"<") is False
    assert xml(b"abc<") is False
    assert xml(b"") is False
    # a custom-data range of size 0 reads nothing past it
    blob = _ov((48, 0, 48, 2, 50, 0), b"<<")
    assert look(blob, "OpenvinoBackend").header["custom_data_is_xml"] is False


def test_openvino_detect_needs_ranges_inside_the_blob_and_the_id():
    body = b"<x/>" + b"W" * 8 + b"<m/>"
    good = (48, 4, 52, 8, 60, 4)
    assert look(_ov(good, body), "OpenvinoBackend").backend == "openvino"
    assert look(_ov(good, body), "Other").backend == "unknown"
    assert look(_ov(good, body)[:47], "OpenvinoBackend").backend == "unknown"
    for k, bad in enumerate(((47, 4, 52, 8, 60, 4),   # custom data overlaps the header
                             (48, 4, 47, 1, 60, 4),   # constants start inside the header
                             (48, 4, 52, 8, 60, 5),   # model runs past the end
                             (48, 4, 52, 13, 60, 4),  # constants run past the end
                             (48, 17, 52, 8, 60, 4),
                             (0, 0, 52, 8, 60, 4))):
        assert look(_ov(bad, body), "OpenvinoBackend").backend == "unknown", k
    # ranges ending exactly at the end and empty ranges at the header's end are fine
    assert look(_ov((48, 16, 64, 0, 64, 0), body), "OpenvinoBackend").backend == "openvino"


def test_openvino_overlapping_ranges_are_corrupt():
    blob = _ov((48, 8, 52, 8, 60, 4), b"<x/>" + b"W" * 8 + b"<m/>")
    fails(blob, "OpenvinoBackend", CorruptError, "constants", 52,
          f"constants [0x{AT + 52:x}, +0x8) overlaps the range before it (ends at "
          f"0x{AT + 56:x})")


# -- VGF ----------------------------------------------------------------------------------------

def _vgf(sections, body: bytes, magic: bytes = b"VGF1", vk: int = 216,
         version=(0, 4, 3)) -> bytes:
    head = magic + struct.pack("<HH3BxI", vk, 7, *version, 9)
    head += b"".join(struct.pack("<QQ", o, s) for o, s in sections) + b"\x55" * 48
    assert len(head) == 128
    return head + body


VGF_BODY = b"M" * 40 + b"S" * 8 + b"R" * 24 + b"\0" * 8 + b"C" * 64


@pytest.mark.parametrize("whole", [False, True])
def test_vgf_exact(whole):
    blob = _vgf([(128, 40), (168, 8), (176, 24), (208, 64)], VGF_BODY + b"\0" * 3)
    info = look(blob, "VgfBackend", whole=whole)
    assert (info.backend, info.layout) == (
        "vgf", "VGF header + module / sequence / resource / constant sections")
    assert info.header == {"magic": "VGF1", "vk_header_version": 216, "version": "0.4.3",
                           "module_offset": 128, "module_size": 40,
                           "model_sequence_offset": 168, "model_sequence_size": 8,
                           "model_resource_offset": 176, "model_resource_size": 24,
                           "constant_offset": 208, "constant_size": 64}
    assert info.subsegments == [seg("header (VGF)", "header", 0, 128),
                                seg("module section", "delegate", 128, 40),
                                seg("model sequence section", "header", 168, 8),
                                seg("model resource section", "header", 176, 24), pad(200, 8),
                                seg("constant section", "constant", 208, 64), pad(272, 3)]
    assert info.findings == [] and info.tensors is None


def test_vgf_old_magic_empty_sections_and_exact_end():
    blob = _vgf([(0, 0), (128, 8), (0, 0), (136, 4)], b"S" * 8 + b"C" * 4,
                magic=struct.pack("<I", 0xF0E1D2C3), vk=1, version=(12, 0, 255))
    info = look(blob, "VgfBackend")
    assert info.header["magic"] == "0xF0E1D2C3" and info.header["version"] == "12.0.255"
    assert info.header["vk_header_version"] == 1
    assert (info.header["module_offset"], info.header["module_size"]) == (0, 0)
    assert info.subsegments == [seg("header (VGF)", "header", 0, 128),
                                seg("model sequence section", "header", 128, 8),
                                seg("constant section", "constant", 136, 4)]


def test_vgf_refusals():
    fails(_vgf([(128, 0)] * 4, b"")[:127], "VgfBackend", TruncatedError, "VGF header", 0,
          "127 bytes is too short for the 128-byte VGF header")
    for k, (key, at) in enumerate((("module", 16), ("model_sequence", 32),
                                   ("model_resource", 48), ("constant", 64))):
        name = key.replace("_", " ") + " section"
        for off, size in ((127, 1), (140, 13), (0, 1)):
            sections = [(128, 0)] * 4
            sections[k] = (off, size)
            fails(_vgf(sections, b"x" * 12), "VgfBackend", OutOfBoundsError,
                  f"VGF header.{key}", at,
                  f"{name} [0x{off:x}, +0x{size:x}) lies outside the file after the header "
                  "(size 0x8c)")


# -- a tiny flatbuffer walker (to find table positions in the blobs built here) -----------------

def fb_root(buf: bytes, base: int = 0) -> int:
    return base + struct.unpack_from("<I", buf, base)[0]


def fb_field(buf: bytes, tpos: int, slot: int) -> int:
    """Absolute position of field ``slot`` of the table at ``tpos`` (0: absent)."""
    vt = tpos - struct.unpack_from("<i", buf, tpos)[0]
    if 4 + 2 * slot >= struct.unpack_from("<H", buf, vt)[0]:
        return 0
    off = struct.unpack_from("<H", buf, vt + 4 + 2 * slot)[0]
    return tpos + off if off else 0


def fb_ref(buf: bytes, tpos: int, slot: int) -> int:
    p = fb_field(buf, tpos, slot)
    assert p, slot
    return p + struct.unpack_from("<I", buf, p)[0]


def fb_tables(buf: bytes, tpos: int, slot: int) -> list[int]:
    vec = fb_ref(buf, tpos, slot)
    n = struct.unpack_from("<I", buf, vec)[0]
    return [vec + 4 + 4 * k + struct.unpack_from("<I", buf, vec + 4 + 4 * k)[0]
            for k in range(n)]


def patched(buf: bytes, at: int, fmt: str, value) -> bytes:
    b = bytearray(buf)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


# -- MLX ------------------------------------------------------------------------------------------

MLX_SCHEMA = "backends/mlx/serialization/schema.fbs"
MLX_DOC = {"version": "1", "num_constant_tensors": 3, "num_input_tensors": 1,
           "num_output_tensors": 2, "num_mutable_buffer_tensors": 4, "num_temp_tensors": 5,
           "num_values": 7, "instruction_chains": [{"instructions": []}, {"instructions": []}]}


def _mlx(fb: bytes, data: bytes = b"", ds=None) -> bytes:
    body = fb + b"\0" * (-(24 + len(fb)) % 16)
    if ds is None:
        ds = (24 + len(body), len(data)) if data else (0, 0)
    return b"\0\0\0\0MLX0" + struct.pack("<QQ", *ds) + body + data


def _mlx_header(**kw) -> dict:
    h = {"magic": "MLX0", "data_segment_offset": 0, "data_segment_size": 0, "version": "1",
         "num_constant_tensors": 3, "num_input_tensors": 1, "num_output_tensors": 2,
         "num_mutable_buffer_tensors": 4, "num_temp_tensors": 5, "num_values": 7,
         "instruction_chains": 2}
    h.update(kw)
    return h


@pytest.mark.parametrize("whole", [False, True])
def test_mlx_without_data_segment(whole, tmp_path):
    blob = _mlx(flatc(MLX_SCHEMA, MLX_DOC, tmp_path))
    info = look(blob, "MLXBackend", whole=whole)
    assert (info.backend, info.layout) == ("mlx", "MLX0 header + MLXGraph flatbuffer + data "
                                                  "segment")
    assert info.header == _mlx_header()
    assert info.subsegments == [seg("header (MLX0)", "header", 0, 24),
                                seg("MLXGraph flatbuffer (+ padding)", "flatbuffer", 24,
                                    len(blob) - 24)]
    assert (info.findings, info.tensors, info.nodes) == ([], None, None)


def test_mlx_with_data_segment(tmp_path):
    fb = flatc(MLX_SCHEMA, MLX_DOC, tmp_path)
    blob = _mlx(fb, b"w" * 32)
    ds = len(blob) - 32
    info = look(blob, "MLXBackend")
    assert info.header == _mlx_header(data_segment_offset=ds, data_segment_size=32)
    assert info.subsegments == [seg("header (MLX0)", "header", 0, 24),
                                seg("MLXGraph flatbuffer (+ padding)", "flatbuffer", 24, ds - 24),
                                seg("data segment", "constant", ds, 32)]
    # an offset with size 0: the flatbuffer ends there, the rest is padding
    blob = _mlx(fb, b"\0" * 16, ds=(ds, 0))
    assert look(blob, "MLXBackend").subsegments == [
        seg("header (MLX0)", "header", 0, 24),
        seg("MLXGraph flatbuffer (+ padding)", "flatbuffer", 24, ds - 24), pad(ds, 16)]


def test_mlx_absent_fields(tmp_path):
    doc = {"instruction_chains": []}
    info = look(_mlx(flatc(MLX_SCHEMA, doc, tmp_path)), "MLXBackend")
    assert info.header == _mlx_header(version="", num_constant_tensors=0, num_input_tensors=0,
                                      num_output_tensors=0, num_mutable_buffer_tensors=0,
                                      num_temp_tensors=0, num_values=0, instruction_chains=0)


def test_mlx_refusals(tmp_path):
    fb = flatc(MLX_SCHEMA, MLX_DOC, tmp_path)
    what = "MLX header (MLX0)"
    fails(_mlx(fb)[:31], "MLXBackend", TruncatedError, what, 0,
          "31 bytes is too short for the MLX header and a flatbuffer")
    blob = _mlx(fb, b"w" * 32)
    size = len(blob)
    ds = size - 32
    for off, n in ((0, 1), (31, 0), (31, size - 31), (ds, 33), (size + 1, 0)):
        fails(_mlx(fb, b"w" * 32, ds=(off, n)), "MLXBackend", OutOfBoundsError,
              f"{what}.data_segment_offset", 8,
              f"data segment [0x{off:x}, +0x{n:x}) does not fit after the header in the blob "
              f"(size 0x{size:x})")
    # 32 bytes pass the header checks; the 8-byte flatbuffer is then read (and refused)
    with pytest.raises(wb.ArtifactError) as e:
        look(_mlx(b"\0" * 8), "MLXBackend")
    assert not e.value.structure.endswith((what, "data_segment_offset"))
    with pytest.raises(wb.ArtifactError) as e:
        look(_mlx(fb, b"w" * 32, ds=(32, size - 32)), "MLXBackend")
    assert e.value.structure.startswith("forward delegate 0 (MLXBackend): MLXGraph")


def test_mlx_flatbuffer_errors_name_the_field(tmp_path):
    fb = flatc(MLX_SCHEMA, MLX_DOC, tmp_path)
    root = fb_root(fb)
    chains = fb_ref(fb, root, 7)
    bad = _mlx(patched(fb, chains, "<I", 1 << 28))
    fb_end = len(bad)
    fails(bad, "MLXBackend", TruncatedError, "MLXGraph.instruction_chains", 24 + chains,
          lambda w: f"vector of {1 << 28} x 4-byte elements runs past the end of the MLXGraph "
          f"flatbuffer (0x{w + fb_end:x})")
    version = fb_ref(fb, root, 0)
    bad = _mlx(patched(fb, version + 5, "<B", 0x41))  # the NUL after "1"
    fails(bad, "MLXBackend", CorruptError, "MLXGraph.version", 24 + version,
          "string is not NUL-terminated")


# -- MPS (no schema in the wheel: the layout of backends/apple/mps/serialization/schema.fbs) ------

def _mps_graph(values, *, inputs=(), outputs=(), nodes=(), version="2", graph_type=3,
               ident=True) -> bytes:
    """An MPSGraph flatbuffer; ``values``: (datatype, dims, constant_buffer_size, inline bytes
    or None, segment_offset or None)."""
    import flatbuffers

    b = flatbuffers.Builder(0)
    tables = []
    for code, dims, size, inline, seg_off in values:
        vec = b.CreateNumpyVector(np.array(dims, np.int32))
        buf = None
        if inline is not None:
            data = b.CreateNumpyVector(np.frombuffer(inline, np.uint8))
            b.StartObject(1)
            b.PrependUOffsetTRelativeSlot(0, data, 0)
            buf = b.EndObject()
        b.StartObject(6)
        b.PrependInt16Slot(0, code, 0)
        b.PrependInt32Slot(1, len(dims), 0)
        b.PrependUOffsetTRelativeSlot(2, vec, 0)
        b.PrependUint64Slot(3, size, 0)
        if buf is not None:
            b.PrependUOffsetTRelativeSlot(4, buf, 0)
        if seg_off is not None:
            b.PrependUint64Slot(5, seg_off, 1 << 63)
        tables.append(b.EndObject())
    node_tables = []
    for union_type in nodes:
        b.StartObject(0)
        member = b.EndObject()
        b.StartObject(2)
        b.PrependUint8Slot(0, union_type, 0)
        b.PrependUOffsetTRelativeSlot(1, member, 0)
        node_tables.append(b.EndObject())

    def table_vector(items):
        b.StartVector(4, len(items), 4)
        for t in reversed(items):
            b.PrependUOffsetTRelative(t)
        return b.EndVector()

    vals = table_vector(tables)
    nvec = table_vector(node_tables)
    ins = b.CreateNumpyVector(np.array(inputs, np.int32))
    outs = b.CreateNumpyVector(np.array(outputs, np.int32))
    ver = b.CreateString(version) if version is not None else None
    b.StartObject(8)
    if ver is not None:
        b.PrependUOffsetTRelativeSlot(0, ver, 0)
    b.PrependUOffsetTRelativeSlot(1, nvec, 0)
    b.PrependUOffsetTRelativeSlot(2, vals, 0)
    b.PrependUOffsetTRelativeSlot(3, ins, 0)
    b.PrependUOffsetTRelativeSlot(4, outs, 0)
    b.PrependInt16Slot(6, graph_type, 0)
    b.Finish(b.EndObject(), file_identifier=b"MP00" if ident else None)
    return bytes(b.Output())


def _mps_headed(fb: bytes, consts: bytes, cd=None) -> bytes:
    body = fb + b"\0" * (-(24 + len(fb)) % 16)
    if cd is None:
        cd = (24 + len(body), len(consts))
    return b"\0\0\0\0MP00" + struct.pack("<QQ", *cd) + body + consts


MPS_CONSTS = np.arange(6, dtype=np.float32).tobytes() + bytes(range(8))
MPS_VALUES = [(2, [2, 3], 24, None, 0),       # float32 constant in the segment
              (1, [4], 0, None, None),        # float16 input
              (7, [], 0, None, None),         # int64 scalar output
              (4, [2, 0], 0, None, None),     # int8 internal, no elements
              (9, [8], 8, None, 24),          # bool constant in the segment, at 24
              (3, [1, 2], 4, b"\1\2\3\4", None)]  # bfloat16 inline constant


def _mps_rows(prefix: str, shift: int, cd_start: int, inline_at: int) -> list[dict]:
    def row(i, dtype, shape, numel, nbytes, role, **kw):
        return trow(name=f"{prefix}{i}", value=i, dtype=dtype, backend_dtype=dtype, shape=shape,
                    numel=numel, nbytes=nbytes, quant="none", flags=0,
                    storage=kw.pop("storage", "runtime"), role=role, **kw)

    return [row(0, "float32", (2, 3), 6, 24, "constant", storage="blob", file=FILE,
                offset=shift + cd_start, data_size=24, missing=0),
            row(1, "float16", (4,), 4, 8, "input"),
            row(2, "int64", (), 1, 8, "output"),
            row(3, "int8", (2, 0), 0, 0, "internal"),
            row(4, "bool", (8,), 8, 8, "constant", storage="blob", file=FILE,
                offset=shift + cd_start + 24, data_size=8, missing=0),
            row(5, "bfloat16", (1, 2), 2, 4, "constant", storage="inline", file=FILE,
                offset=shift + inline_at, data_size=4, missing=0)]


@pytest.mark.parametrize("whole", [False, True])
def test_mps_headed_exact(whole):
    fb = _mps_graph(MPS_VALUES, inputs=[1], outputs=[2, 0, 1], nodes=[5, 0, 17])
    blob = _mps_headed(fb, MPS_CONSTS)
    cd = len(blob) - len(MPS_CONSTS)
    info = look(blob, "MPSBackend", whole=whole, method="fwd", index=3)
    assert (info.backend, info.layout) == ("mps", "MP00 header + MPSGraph flatbuffer + "
                                                  "constant data")
    assert info.header == {"magic": "MP00", "constant_data_offset": cd,
                           "constant_data_size": len(MPS_CONSTS), "identifier": "MP00",
                           "version": "2", "values": 6, "nodes": 3, "graph_type": 3}
    assert info.subsegments == [seg("header (MP00)", "header", 0, 24),
                                seg("MPSGraph flatbuffer (+ padding)", "flatbuffer", 24, cd - 24),
                                seg("constant data", "constant", cd, len(MPS_CONSTS))]
    inline_at = 24 + blob[24:].index(b"\1\2\3\4")
    assert column_rows(info.tensors) == _mps_rows("fwd/delegate3/", AT, cd, inline_at)
    assert column_rows(info.nodes) == [
        nrow(node=0, op="MPSNodeUnion[5]", flags=0), nrow(node=1, op="MPSNodeUnion[0]", flags=0),
        nrow(node=2, op="MPSNodeUnion[17]", flags=0)]
    assert info.findings == []
    assert blob[cd + 24:cd + 32] == bytes(range(8))


def test_mps_bare_flatbuffer():
    values = [(2, [2], 8, b"\0" * 8, None), (6, [3], 0, None, None)]
    fb = _mps_graph(values, outputs=[1], version=None, graph_type=0)
    assert fb[:4] != b"\0\0\0\0" and fb[4:8] == b"MP00"
    info = look(fb, "MPSBackend")
    assert info.layout == "MPSGraph flatbuffer (no header)"
    assert info.header == {"identifier": "MP00", "version": "", "values": 2, "nodes": 0,
                           "graph_type": 0}
    assert info.subsegments == [seg("MPSGraph flatbuffer (MP00)", "flatbuffer", 0, len(fb))]
    at = fb_ref(fb, fb_ref(fb, _mps_value_pos(fb, 0, 0), 4), 0) + 4
    rows = column_rows(info.tensors)
    assert [r["storage"] for r in rows] == ["inline", "runtime"]
    assert [r["role"] for r in rows] == ["constant", "output"]
    assert rows[0]["offset"] == AT + at and rows[0]["data_size"] == 8
    assert rows[1] == trow(name="forward/delegate0/1", value=1, dtype="int32",
                           backend_dtype="int32", shape=(3,), numel=3, nbytes=12, quant="none",
                           flags=0, storage="runtime", role="output")
    assert column_rows(info.nodes) == []


def test_mps_constant_buffer_without_bytes_falls_back_to_the_segment():
    fb = _mps_graph([(8, [4], 4, b"", 2)])
    blob = _mps_headed(fb, b"abcdefgh")
    cd = len(blob) - 8
    (row,) = column_rows(look(blob, "MPSBackend").tensors)
    assert (row["storage"], row["offset"], row["data_size"], row["dtype"]) == (
        "blob", AT + cd + 2, 4, "uint8")


def _mps_value_pos(blob: bytes, fb_at: int, k: int) -> int:
    return fb_at + fb_tables(blob[fb_at:], fb_root(blob[fb_at:]), 2)[k]


def test_mps_refusals():
    fb = _mps_graph(MPS_VALUES, inputs=[1])
    blob = _mps_headed(fb, MPS_CONSTS)
    size = len(blob)
    cd = size - len(MPS_CONSTS)
    what = "MPS header (MP00)"
    fails(blob[:31], "MPSBackend", TruncatedError, what, 0,
          "31 bytes is too short for the MPS header and a flatbuffer")
    for off, n in ((31, 0), (0, 0), (cd, len(MPS_CONSTS) + 1), (size + 1, 0)):
        fails(_mps_headed(fb, MPS_CONSTS, cd=(off, n)), "MPSBackend", OutOfBoundsError,
              f"{what}.constant_data_offset", 8,
              f"constant data [0x{off:x}, +0x{n:x}) does not fit after the header in the blob "
              f"(size 0x{size:x})")
    # segment offsets past the constant data
    for seg_off in (9, 1 << 40):
        bad = _mps_headed(_mps_graph([(2, [2], 8, None, None), (2, [2, 3], 24, None, seg_off)]),
                          MPS_CONSTS)
        fails(bad, "MPSBackend", OutOfBoundsError, "MPSGraph.mps_values[1].segment_offset",
              _mps_value_pos(bad, 24, 1),
              f"constant [0x{seg_off:x}, +0x18) runs past the constant data (size 0x20)")
    # an absent segment_offset is 0; a bare flatbuffer has no constant data at all
    ok = _mps_headed(_mps_graph([(2, [2, 4], 32, None, None)]), MPS_CONSTS)
    assert column_rows(look(ok, "MPSBackend").tensors)[0]["data_size"] == 32
    bare = _mps_graph([(2, [1], 4, None, 0)])
    fails(bare, "MPSBackend", OutOfBoundsError, "MPSGraph.mps_values[0].segment_offset",
          _mps_value_pos(bare, 0, 0), "constant [0x0, +0x4) runs past the constant data "
          "(size 0x0)")
    for code in (0, 12, -1):
        bad = _mps_graph([(2, [1], 0, None, None), (code, [1], 0, None, None)])
        fails(bad, "MPSBackend", CorruptError, "MPSGraph.mps_values[1].datatype",
              _mps_value_pos(bad, 0, 1), f"datatype {code} is unknown")
    for dims in ([2, -1], [1 << 30, 1 << 29], [-3]):
        bad = _mps_graph([(2, dims, 0, None, None)])
        fails(bad, "MPSBackend", CorruptError, "MPSGraph.mps_values[0].dims",
              _mps_value_pos(bad, 0, 0), f"dims {dims} are invalid")
    ok = _mps_graph([(11, [1 << 29, (1 << 30) - 1], 0, None, None)])
    assert column_rows(look(ok, "MPSBackend").tensors)[0]["nbytes"] == 8 * ((1 << 59) - (1 << 29))
    many = _mps_graph([(2, [1] * 9 + [-1], 0, None, None)])
    fails(many, "MPSBackend", CorruptError, "MPSGraph.mps_values[0].dims",
          _mps_value_pos(many, 0, 0), f"dims {[1] * 8} are invalid")


# -- Arm Ethos-U: Vela binary streams --------------------------------------------------------------

def _vela(blocks) -> tuple[bytes, list[SubSegment]]:
    """A Vela stream from ``(name, data[, external[, length]])`` blocks, and the sub-segments
    it should get (blob-relative offsets through :func:`seg`)."""
    out, parts = b"", []
    for block in blocks:
        name, data, external, length = (*block, 0, None)[:4] if len(block) == 2 else (
            (*block, None)[:4] if len(block) == 3 else block)
        length = len(data) if length is None else length
        label = name.decode("ascii", "replace")
        parts.append(seg(f"block header {label!r}", "header", len(out), 32))
        out += struct.pack("<16sIB11s", name, length, external, b"\x77" * 11)
        if external == 1:
            parts.append(seg(f"{label} (named-data key)", "header", len(out), length))
        elif length:
            kind = {"cmd_data": "delegate", "weight_data": "constant"}.get(label, "delegate")
            parts.append(seg(label, kind, len(out), length))
        gap = -len(data) % 16
        if gap and length:
            parts.append(pad(len(out) + len(data), gap))
        out += data + b"\0" * gap
    return out, parts


def _io(*tensors) -> bytes:
    return struct.pack("<i", len(tensors)) + b"".join(struct.pack("<9i", *t) for t in tensors)


BEGIN = (b"vela_bin_stream", b"")
END = (b"vela_end_stream", b"")


def _io_row(kind: str, k: int, shape, elem: int, dtype: str, prefix="forward/delegate0/"):
    numel = math.prod(shape)
    return trow(name=f"{prefix}{kind}{k}", value=k, dtype=dtype, backend_dtype=f"{elem}-byte",
                shape=tuple(shape), numel=numel, nbytes=numel * elem,
                role="input" if kind == "inputs" else "output", quant="none", flags=0,
                storage="runtime")


@pytest.mark.parametrize("whole", [False, True])
def test_ethosu_stream_exact(whole):
    blob, parts = _vela([BEGIN, (b"cmd_data", b"COP1" + b"c" * 16),
                         (b"weight_data", b"wwwww"), (b"scratch_size", struct.pack("<I", 99)),
                         (b"inputs", _io((1, 1, 2, 3, 4, 5, 1, 32, 1))),
                         (b"outputs", _io((1, 1, 1, 1, 2, 2, 2, 7, 2),
                                          (1, 1, 1, 1, 1, 3, 4, -8, 3),
                                          (1, 1, 1, 1, 2, 3, 3, 0, 0))),
                         (b"meta", b"xyz"), END])
    info = look(blob, "EthosUBackend", whole=whole, method="m", index=1)
    assert (info.backend, info.layout) == ("ethos-u", "Vela binary stream (blocks)")
    assert info.header == {
        "blocks": ["vela_bin_stream", "cmd_data", "weight_data", "scratch_size", "inputs",
                   "outputs", "meta", "vela_end_stream"],
        "scratch_size": 99,
        "io": [{"name": "m/delegate1/inputs0", "shape": (1, 1, 2, 3, 4, 5), "elem_size": 1,
                "offset": 32, "region": 1},
               {"name": "m/delegate1/outputs0", "shape": (1, 1, 1, 1, 2, 2), "elem_size": 2,
                "offset": 7, "region": 2},
               {"name": "m/delegate1/outputs1", "shape": (1, 1, 1, 1, 1, 3), "elem_size": 4,
                "offset": -8, "region": 3},
               {"name": "m/delegate1/outputs2", "shape": (1, 1, 1, 1, 2, 3), "elem_size": 3,
                "offset": 0, "region": 0}]}
    assert info.subsegments == parts
    p = "m/delegate1/"
    assert column_rows(info.tensors) == [
        _io_row("inputs", 0, (1, 1, 2, 3, 4, 5), 1, "int8", p),
        _io_row("outputs", 0, (1, 1, 1, 1, 2, 2), 2, "int16", p),
        _io_row("outputs", 1, (1, 1, 1, 1, 1, 3), 4, "int32", p),
        _io_row("outputs", 2, (1, 1, 1, 1, 2, 3), 3, "3-byte", p)]
    assert (info.findings, info.named_keys, info.nodes) == ([], (), None)


def test_ethosu_io_elem_size_of_a_tensor_without_elements():
    blob, _ = _vela([BEGIN, (b"inputs", _io((1, 1, 1, 1, 0, 3, 2, 16, 1))), END])
    info = look(blob, "EthosUBackend")
    assert info.header["io"] == [{"name": "forward/delegate0/inputs0", "shape": (1, 1, 1, 1, 0, 3),
                                  "elem_size": 2, "offset": 16, "region": 1}]
    assert column_rows(info.tensors) == [_io_row("inputs", 0, (1, 1, 1, 1, 0, 3), 2, "int16")]


def test_ethosu_external_blocks():
    key, other = "ab" * 32, "cd" * 32
    blocks = [BEGIN, (b"weight_data", key.encode(), 1), (b"inputs", other.encode(), 1),
              (b"scratch_size", b"\1\0\0", 0), END]
    blob, parts = _vela(blocks)
    info = look(blob, "EthosUBackend", named={key: ("m.ptd", 64, 7)})
    assert info.subsegments == parts
    assert info.named_keys == (key, other)
    assert info.header == {"blocks": ["vela_bin_stream", "weight_data", "inputs",
                                      "scratch_size", "vela_end_stream"], "io": []}
    assert column_rows(info.tensors) == []
    inputs_data = 32 * 3 + 64
    assert info.findings == [Finding("warning", "Vela block 'inputs'", AT + inputs_data,
                                     f"external payload key {other!r} was not found in named "
                                     "data")]
    assert look(blob, "EthosUBackend").findings == []  # no named data: nothing to say
    assert len(look(blob, "EthosUBackend", named={}).findings) == 2


def test_ethosu_stream_ends():
    blob, parts = _vela([BEGIN, (b"cmd_data", b"c" * 16)])
    info = look(blob, "EthosUBackend")
    assert info.subsegments == parts
    assert info.findings == [Finding("warning", "Vela stream", AT + len(blob),
                                     "the stream has no vela_end_stream block")]
    blob, parts = _vela([BEGIN, END, (b"cmd_data", b"c" * 16)])
    info = look(blob, "EthosUBackend")
    assert info.header["blocks"] == ["vela_bin_stream", "vela_end_stream"]
    assert info.subsegments == [*parts[:2], pad(64, 48)]
    assert info.findings == [Finding("info", "Vela stream", AT + 64,
                                     "48 bytes after vela_end_stream")]
    blob, _ = _vela([BEGIN, END])
    assert look(blob + b"\0" * 40, "EthosUBackend").findings[0].message == (
        "40 bytes after vela_end_stream")
    assert look(blob, "EthosUBackend").findings == []
    # a name of 16 bytes has no NUL: it is still the whole name
    blob, parts = _vela([BEGIN, (b"0123456789abcdef", b"zz"), END])
    info = look(blob, "EthosUBackend")
    assert info.header["blocks"][1] == "0123456789abcdef" and info.subsegments == parts


def test_ethosu_refusals():
    head, _ = _vela([BEGIN])
    blob = head + b"\0" * 31
    fails(blob, "EthosUBackend", TruncatedError, "Vela block at +0x20", 32,
          "31 bytes left, a block header needs 32")
    blob = head + struct.pack("<16sIB11s", b"cmd_data", 17, 0, b"") + b"c" * 31
    fails(blob, "EthosUBackend", TruncatedError, "Vela block 'cmd_data'", 64,
          f"32 bytes run past the end of the delegate blob (0x{AT + len(blob):x})")
    # the padded length must fit, not only the length
    blob = head + struct.pack("<16sIB11s", b"cmd_data", 1, 0, b"") + b"c" * 15
    fails(blob, "EthosUBackend", TruncatedError, "Vela block 'cmd_data'", 64,
          f"16 bytes run past the end of the delegate blob (0x{AT + len(blob):x})")
    for data, cls, detail in (
            (b"\1\0\0", TruncatedError, "3 bytes cannot hold the tensor count"),
            (struct.pack("<i", -1), CorruptError, "-1 tensors of 36 bytes do not fit in 4 bytes"),
            (_io((1,) * 9)[:39], CorruptError, "1 tensors of 36 bytes do not fit in 39 bytes"),
            (_io((1,) * 9, (1,) * 9)[:-1], CorruptError,
             "2 tensors of 36 bytes do not fit in 75 bytes")):
        blob, _ = _vela([BEGIN, (b"outputs", data), END])
        fails(blob, "EthosUBackend", cls, "Vela block 'outputs'", 64, detail)
    for t in ((1, 1, 1, 1, -1, 1, 1, 0, 0), (1, 1, 1, 1, 1, 1, 0, 0, 0),
              (1, 1, 1, 1, 1, 1, -2, 0, 0), (1, 1, 1 << 20, 1 << 20, 1 << 20, 1, 1 << 2, 0, 0)):
        blob, _ = _vela([BEGIN, (b"inputs", _io((1,) * 9, t)), END])
        fails(blob, "EthosUBackend", CorruptError, "Vela block 'inputs'", 64 + 4 + 36,
              f"inputs[1] has shape {list(t[:6])} and element size {t[6]}")
    # just under 2**62 bytes is accepted
    t = (1, 1, 1 << 20, 1 << 20, (1 << 20) - 1, 1, 4, 0, 0)
    blob, _ = _vela([BEGIN, (b"inputs", _io(t)), END])
    assert column_rows(look(blob, "EthosUBackend").tensors)[0]["nbytes"] == 4 * (
        (1 << 60) - (1 << 40))


# -- Core ML ------------------------------------------------------------------------------------

def _cm_dir(nodes, data: bytes) -> bytes:
    """A flattened model directory: the files' bytes, then the byte-reversed JSON index."""
    return data + json.dumps({"nodes": nodes}).encode()[::-1]


def _file(name: str, off: int, size: int) -> dict:
    return {"name": name, "kind": 0, "dataRegion": {"offset": off, "size": size}}


def _folder(name: str, **children) -> dict:
    return {"name": name, "kind": 1, "children": children}


META = json.dumps({"identifier": "executorch_x", "inputNames": ["é"], "outputNames": ["y"],
                   "other": 1}).encode()


def _cm_sample():
    data = META + b"W" * 32 + b"\0" * 5 + b"MODEL"
    nodes = [_folder("lowered_module", **{"metadata.json": 1, "model.mlpackage": 2}),
             _file("metadata.json", 0, len(META)),
             _folder("model.mlpackage", Data=4, model=3),
             _file("model.mlmodel", len(META) + 37, 5),
             _folder("Data", w=5),
             _file("weight.bin", len(META), 32)]
    return _cm_dir(nodes, data), len(data)


@pytest.mark.parametrize("whole", [False, True])
def test_coreml_directory_exact(whole):
    blob, data_end = _cm_sample()
    info = look(blob, "CoreMLBackend", whole=whole)
    assert (info.backend, info.layout) == (
        "coreml", "flattened model directory + byte-reversed JSON index")
    n = len(blob) - data_end
    assert info.header == {"files": 3, "index_size": n, "root": "lowered_module",
                           "identifier": "executorch_x", "inputNames": ["é"],
                           "outputNames": ["y"]}
    m = len(META)
    assert info.subsegments == [
        seg("lowered_module/metadata.json", "delegate", 0, m),
        seg("lowered_module/model.mlpackage/Data/weight.bin", "constant", m, 32), pad(m + 32, 5),
        seg("lowered_module/model.mlpackage/model.mlmodel", "delegate", m + 37, 5),
        seg("directory index (JSON, byte-reversed)", "header", data_end, n)]
    assert (info.findings, info.tensors, info.nodes, info.named_keys) == ([], None, None, ())


def test_coreml_directory_metadata_variants():
    def header(meta: bytes, name: str = "metadata.json", root: str = "r"):
        nodes = [_folder(root, a=1), _file(name, 0, len(meta))]
        info = look(_cm_dir(nodes, meta), "CoreMLBackend")
        return info.header, info.findings

    h, f = header(b'{"identifier": "i"}')
    assert h == {"files": 1, "index_size": h["index_size"], "root": "r", "identifier": "i"}
    assert f == []
    assert set(header(b"[1, 2]")[0]) == {"files", "index_size", "root"}
    assert set(header(b'{"identifier": "i"}', name="xmetadata.json")[0]) == {
        "files", "index_size", "root"}
    for bad in (b"{nope", b'"\xff"'):
        h, f = header(bad)
        assert set(h) == {"files", "index_size", "root"}
        assert f == [Finding("warning", "metadata.json", AT, "metadata.json is not JSON")]
    # a top-level metadata.json (no folder) counts too
    meta = b'{"outputNames": []}'
    info = look(_cm_dir([_file("metadata.json", 0, len(meta))], meta), "CoreMLBackend")
    assert info.header["outputNames"] == [] and info.header["root"] == "metadata.json"
    # at most 1 MiB of metadata is read
    head = b'{"identifier": "i", "pad": "'
    big = head + b" " * ((1 << 20) - len(head) - 2) + b'"}'
    assert len(big) == 1 << 20
    assert header(big)[0]["identifier"] == "i"
    assert "identifier" not in header(big + b" ")[0]


def test_coreml_directory_walk():
    # several roots, in index order; children by their index; folders need no dataRegion
    nodes = [_folder("b", z=3), _folder("a", y=2), _file("f1", 0, 1), _file("f0", 1, 1),
             {"name": "empty", "kind": 1}, {"kind": 0, "dataRegion": {"offset": 2, "size": 0}}]
    info = look(_cm_dir(nodes, b"xy"), "CoreMLBackend")
    assert info.header["root"] == "b" and info.header["files"] == 3
    assert [s.name for s in info.subsegments] == ["a/f1", "b/f0",
                                                  "directory index (JSON, byte-reversed)"]
    # a cycle that no root reaches is never walked
    nodes = [_folder("a", x=1), _folder("b", y=0)]
    info = look(_cm_dir(nodes, b""), "CoreMLBackend")
    assert info.header == {"files": 0, "index_size": len(_cm_dir(nodes, b"")), "root": ""}
    # 65 levels deep is accepted, 66 are not
    deep = [_folder(f"d{k}", c=k + 1) for k in range(64)] + [_file("leaf", 0, 1)]
    assert look(_cm_dir(deep, b"L"), "CoreMLBackend").header["files"] == 1
    deeper = [_folder(f"d{k}", c=k + 1) for k in range(65)] + [_file("leaf", 0, 1)]
    blob = _cm_dir(deeper, b"L")
    fails(blob, "CoreMLBackend", CorruptError, "Core ML directory index", 1,
          "node 65 is reached twice or too deep (a cycle)")


def test_coreml_directory_refusals():
    def refused(nodes, data: bytes, cls, detail, at=None):
        blob = _cm_dir(nodes, data)
        fails(blob, "CoreMLBackend", cls, "Core ML directory index",
              len(data) if at is None else at, detail)

    refused([_folder("r", a=1), 7], b"", CorruptError, "node 1 is not an object")
    refused([{"name": "r", "children": [1]}], b"", CorruptError,
            "node 0 has children outside the node list")
    for bad in (2, -1, "1", 1.0):
        refused([_folder("r", a=0), _folder("s", b=bad)], b"", CorruptError,
                "node 1 has children outside the node list")
    refused([_folder("r", a=1), _folder("s", b=2), _folder("t", c=1)], b"", CorruptError,
            "node 1 is reached twice or too deep (a cycle)")
    refused([_folder("r", a=1, b=2), _folder("s", c=3), _folder("t", c=3), _file("f", 0, 1)],
            b"x", CorruptError, "node 3 is reached twice or too deep (a cycle)")
    for off, size in ((0, 3), (-1, 1), (0, -1), (None, 1), (0, "1"), (2, 1), (True, 1)):
        if off is True:  # bools are ints: True + 1 fits, so use a region past the end
            off, size = 1, 2
        refused([_folder("r", a=1), {"name": "f", "kind": 0,
                                     "dataRegion": {"offset": off, "size": size}}],
                b"xy", OutOfBoundsError,
                f"file 'r/f' region [{off}, +{size}) lies outside the file data (size 0x2)")
    refused([_folder("r", a=1), {"name": "f", "kind": 0}], b"xy", OutOfBoundsError,
            "file 'r/f' region [None, +None) lies outside the file data (size 0x2)")


def test_coreml_index_refusals():
    def refused(blob: bytes, at: int, detail: str):
        fails(blob, "CoreMLBackend", CorruptError, "Core ML directory index", at, detail)

    blob = b"xx" + b'{"nodes": [}'[::-1]
    try:
        json.JSONDecoder().raw_decode('{"nodes": [}')
    except ValueError as e:
        msg, pos = e.msg, e.pos
    refused(blob, len(blob) - 1, f"the byte-reversed JSON index at the end does not parse "
                                 f"({msg} at {pos})")
    refused(b"garbage{", 7, "the byte-reversed JSON index at the end does not parse (Expecting "
                            "property name enclosed in double quotes at 1)")
    blob = b"\0" + b'{"nodes": 1}'[::-1]
    refused(blob, 1, "the directory index has no 'nodes' list")
    blob = b"\0" + b"[]"[::-1]
    assert look(blob, "CoreMLBackend").backend == "unknown"  # does not end in '{'
    refused(b" }{", 1, "the directory index has no 'nodes' list")
    assert look(b"}{", "CoreMLBackend").backend == "unknown"  # 2 bytes are too few
    text = '{"nodes": [], "x": "\xff"}'.encode("latin-1")
    blob = b"\0\0" + text[::-1]
    with pytest.raises(UnicodeDecodeError) as u:
        text.decode("utf-8")
    refused(blob, 2, f"the directory index is not UTF-8 JSON ({u.value})")
    nested = b'{"nodes": [], "x": ' + b"[" * 300 + b"]" * 300 + b"}"
    refused(b"\0" + nested[::-1], 1, "the directory index is not UTF-8 JSON (JSON nests deeper "
                                     "than JSON_MAX_DEPTH=256)")
    recursive = b'{"x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    refused(recursive[::-1], len(recursive) - 1, "the byte-reversed JSON index nests deeper than "
                                                 "JSON_MAX_DEPTH=256")


def test_coreml_index_larger_than_the_first_window():
    # the first 64 KiB of the reversed tail cut the index in a long name, in a number, ...
    for name_len in (70_000, 65_000, 300_000):
        nodes = [_folder("r", f=1), _file("x" * name_len, 0, 3)]
        blob = _cm_dir(nodes, b"abc")
        info = look(blob, "CoreMLBackend")
        assert info.header["files"] == 1 and info.header["index_size"] == len(blob) - 3
    nodes = [_folder("r", **{f"f{k}": k + 1 for k in range(3000)})]
    nodes += [_file(f"file_{k:05d}.bin", k, 1) for k in range(3000)]
    blob = _cm_dir(nodes, bytes(3000))
    assert look(blob, "CoreMLBackend").header["files"] == 3000
    # garbage that does not parse at any length is refused once the whole blob was tried
    blob = b"[" * 100_000 + b"{"
    with pytest.raises(CorruptError, match="does not parse"):
        look(blob, "CoreMLBackend")


@pytest.mark.parametrize("whole", [False, True])
def test_coreml_reference_exact(whole):
    ref = b"CMJR" + json.dumps({"version": 2, "key": "k1", "functionName": "fwd"}).encode()
    info = look(ref, "CoreMLBackend", whole=whole, named={"k1": ("c.ptd", 9000, 77)})
    assert (info.backend, info.layout) == ("coreml",
                                           "CMJR + JSON reference to a model in named data")
    assert info.header == {"magic": "CMJR", "version": 2, "key": "k1", "functionName": "fwd",
                           "model_file": "c.ptd", "model_offset": 9000, "model_size": 77}
    assert info.subsegments == [seg("magic (CMJR)", "header", 0, 4),
                                seg("reference (JSON)", "header", 4, len(ref) - 4)]
    assert info.named_keys == ("k1",) and info.findings == []
    # any backend id: the magic decides
    assert look(ref, "Other").backend == "coreml"


def test_coreml_reference_unresolved_and_minimal():
    ref = b'CMJR{"key": "k2"}'
    info = look(ref, "CoreMLBackend", named={})
    assert info.header == {"magic": "CMJR", "version": None, "key": "k2", "functionName": None}
    assert info.findings == [Finding("warning", "Core ML reference (CMJR)", AT,
                                     "named-data key 'k2' (the model) was not found")]
    assert look(ref, "CoreMLBackend").findings == []


def test_coreml_reference_refusals():
    what = "Core ML reference (CMJR)"
    for raw in (b"", b"{nope", b"[1]x", b'{"key": "\xff"}'):
        try:
            json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            err = str(e)
        fails(b"CMJR" + raw, "CoreMLBackend", CorruptError, what, 4,
              f"reference is not UTF-8 JSON ({err})")
    fails(b"CMJR" + b"[" * 300 + b"]" * 300, "CoreMLBackend", CorruptError, what, 4,
          "reference is not UTF-8 JSON (JSON nests deeper than JSON_MAX_DEPTH=256)")
    for raw in (b"[]", b'{"key": 1}', b'{"version": 1}', b'"key"'):
        fails(b"CMJR" + raw, "CoreMLBackend", CorruptError, what, 4,
              "reference JSON has no string 'key'")
    from workbench.limits import DELEGATE_INDEX_MAX_BYTES as limit

    head = b'CMJR{"key": "k", "p": "'
    big = head + b" " * (limit + 4 - len(head) - 2) + b'"}'
    assert len(big) - 4 == limit
    assert look(big, "CoreMLBackend").header["key"] == "k"
    fails(big + b" ", "CoreMLBackend", CorruptError, what, 4,
          f"reference JSON of {limit + 1} bytes is larger than {limit}")


# -- dequantize ---------------------------------------------------------------------------------

def _deq_fails(cls, detail, data, row, scales=None, *, file=None, offset=None,
               name="tensor"):
    with pytest.raises(wb.ArtifactError) as e:
        dequantize(data, row, scales)
    assert type(e.value) is cls, e.value
    assert (e.value.file, e.value.structure, e.value.offset, e.value.detail) == (
        file, f"delegate tensor {name}", offset, detail)
    assert offset is None or type(e.value.offset) is int


def _f32(*v) -> bytes:
    return np.array(v, np.float32).tobytes()


def _same_floats(got, expected) -> None:
    assert got.dtype == np.float32
    assert got.shape == np.asarray(expected).shape
    assert got.tolist() == np.asarray(expected, np.float32).tolist()


def test_unpack_int4_exact():
    from workbench.formats.delegates.quant import unpack_int4

    got = unpack_int4(bytes([0x9F, 0x08, 0x70, 0x21]), (2, 3))
    assert got.dtype == np.int8 and got.shape == (2, 3)
    assert got.tolist() == [[7, 1, 0], [-8, -1, -7]]
    assert unpack_int4(bytes([0x0F]), ()).tolist() == 7 and unpack_int4(b"\x0f", ()).dtype == \
        np.int8
    one = unpack_int4(bytes([0x10, 0xFF]), (1, 2))  # extra bytes are not read
    assert one.tolist() == [[-8, -7]] and one.dtype == np.int8
    assert unpack_int4(bytes([0x10, 0x32]), (4,)).tolist() == [-8, -7, -6, -5]
    assert unpack_int4(bytes([0x10, 0x32]), (2, 1, 1)).tolist() == [[[-8]], [[-6]]]


def test_dequantize_plain_floats():
    row = {"backend_dtype": "fp32", "shape": (2, 2), "quant": "none"}
    got = dequantize(_f32(1, -2, 3.5, 4), row)
    _same_floats(got, [[1, -2], [3.5, 4]])
    assert got.flags.writeable
    for kind in ("pfp32", "float32"):
        _same_floats(dequantize(_f32(5), {"dtype": kind, "shape": (1,)}), [5])
    for kind in ("fp16", "float16"):
        _same_floats(dequantize(np.array([1.5, -2], np.float16).tobytes(),
                                {"backend_dtype": kind, "shape": [2]}), [1.5, -2])
    for kind in ("bf16", "bfloat16"):
        _same_floats(dequantize(np.array([0x3FC0, 0xC000], np.uint16).tobytes(),
                                {"backend_dtype": kind, "shape": (2,), "quant": None}),
                     [1.5, -2])
    # backend_dtype wins over dtype; numpy arrays of any dtype are their bytes
    _same_floats(dequantize(np.array([2.0], np.float32), {"backend_dtype": "fp32",
                                                          "dtype": "int8", "shape": (1,)}), [2])
    _same_floats(dequantize(np.array([0x3F800000], np.uint32), {"dtype": "float32",
                                                                "shape": ()}), 1.0)
    _same_floats(dequantize(memoryview(_f32(7, 8)), {"dtype": "float32", "shape": (1, 2)}),
                 [[7, 8]])
    # longer data: only what the shape needs is read
    _same_floats(dequantize(_f32(1, 2, 3), {"dtype": "float32", "shape": (2,)}), [1, 2])


def test_dequantize_per_tensor():
    row = {"backend_dtype": "qint8", "shape": (3,), "quant": "per_tensor", "scale": 0.5,
           "zero_point": -2}
    _same_floats(dequantize(np.array([0, 2, -128], np.int8).tobytes(), row), [1, 2, -63])
    row = {"backend_dtype": "quint8", "shape": (2,), "quant": "per_tensor", "scale": 2.0}
    _same_floats(dequantize(bytes([255, 1]), row), [510, 2])  # zero point 0 when absent
    row = {"backend_dtype": "qint32", "shape": (1,), "quant": "per_tensor", "scale": 0.25,
           "zero_point": 4}
    _same_floats(dequantize(np.array([-100000], np.int32).tobytes(), row), [-25001])
    row = {"backend_dtype": "uint8", "shape": (1,), "quant": "per_tensor", "scale": 1.0,
           "zero_point": float("nan")}
    _same_floats(dequantize(bytes([3]), row), [3])
    _deq_fails(CorruptError, "per-tensor quantization without a scale", b"\0",
               {"backend_dtype": "qint8", "shape": (1,), "quant": "per_tensor",
                "scale": float("nan"), "name": "w", "file": "f.pte", "offset": np.int64(8)},
               file="f.pte", offset=8, name="w")


def test_dequantize_per_channel():
    q = np.array([[1, -2, 3], [4, 5, -6]], np.int8).tobytes()
    row = {"backend_dtype": "qcint8", "shape": (2, 3), "quant": "per_channel",
           "channel_dim": 0, "scale_dtype": "float32"}
    _same_floats(dequantize(q, row, _f32(0.5, 2)), [[0.5, -1, 1.5], [8, 10, -12]])
    row = dict(row, channel_dim=1, scale_dtype=None)  # float32 when absent
    _same_floats(dequantize(q, row, _f32(1, 10, 100)), [[1, -20, 300], [4, 50, -600]])
    row = dict(row, channel_dim=None)  # channel_dim 0 when absent
    _same_floats(dequantize(q, row, np.array([1, 2], np.float32)), [[1, -2, 3], [8, 10, -12]])
    bf = np.array([0x3F80, 0x4000], np.uint16).tobytes()
    row = dict(row, channel_dim=0, scale_dtype="bfloat16")
    _same_floats(dequantize(q, row, memoryview(bf)), [[1, -2, 3], [8, 10, -12]])
    row = {"backend_dtype": "qcint32", "shape": (2,), "quant": "per_channel",
           "channel_dim": 0}
    _same_floats(dequantize(np.array([3, -3], np.int32).tobytes(), row, _f32(2, 3)), [6, -9])
    row = {"backend_dtype": "qcint4", "shape": (2, 3), "quant": "per_channel",
           "channel_dim": 0}
    _same_floats(dequantize(bytes([0x9F, 0x08, 0x70, 0x21]), row, _f32(1, 2)),
                 [[7, 1, 0], [-16, -2, -14]])


def test_dequantize_groupwise():
    row = {"backend_dtype": "qbint4", "shape": (2, 3), "quant": "per_channel_group",
           "channel_dim": 0, "group_size": 2, "scale_dtype": "bfloat16"}
    s = np.array([0x3F80, 0x4000, 0x4040, 0x4080], np.uint16).tobytes()  # 1, 2, 3, 4
    _same_floats(dequantize(bytes([0x9F, 0x08, 0x70, 0x21]), row, s),
                 [[7, 1, 0], [-24, -3, -28]])
    row = dict(row, scale_dtype="float32", group_size=3)
    _same_floats(dequantize(bytes([0x9F, 0x08, 0x70, 0x21]), row, _f32(2, -1)),
                 [[14, 2, 0], [8, 1, 7]])


def test_dequantize_refusals():
    base = {"name": "w", "file": "f.pte", "offset": 64}
    loc = {"file": "f.pte", "offset": 64, "name": "w"}
    for kind, quant, text in (
            ("qdint8", "per_token_dynamic", "cannot dequantize qdint8 tensor with "
             "per_token_dynamic quantization (dynamically quantized: no stored values)"),
            ("qint8", "per_token_dynamic", "cannot dequantize qint8 tensor with "
             "per_token_dynamic quantization (dynamically quantized: no stored values)"),
            ("qpint8", "none", "cannot dequantize qpint8 tensor with none quantization"),
            ("int64", "per_tensor", "cannot dequantize int64 tensor with per_tensor "
             "quantization"),
            ("", None, "cannot dequantize an untyped tensor with none quantization")):
        _deq_fails(UnsupportedQuantizationError, text, b"\0" * 8,
                   dict(base, backend_dtype=kind, shape=(1,), quant=quant), **loc)
    _deq_fails(UnsupportedQuantizationError, "cannot dequantize an untyped tensor with none "
               "quantization", b"", {})
    for kind in ("qint8", "int8", "uint8", "int32", "qcint8"):
        _deq_fails(UnsupportedQuantizationError, f"{kind} tensor has no quantization "
                   "parameters", b"\0" * 4, dict(base, backend_dtype=kind, shape=(1,)), **loc)
    _deq_fails(UnsupportedQuantizationError, "quantization 'per_block' is not handled",
               b"\0", dict(base, backend_dtype="qint8", shape=(1,), quant="per_block"), **loc)
    for kind, shape, need, have in (("fp32", (2, 3), 24, 23), ("bf16", (3,), 6, 5),
                                    ("qcint4", (2, 3), 4, 3), ("qbint4", (3,), 2, 1),
                                    ("qbint4", (), 1, 0), ("qint32", (2,), 8, 7)):
        _deq_fails(CorruptError, f"{have} bytes given, the {kind} tensor of shape {list(shape)} "
                   f"needs {need}", b"\0" * have,
                   dict(base, backend_dtype=kind, shape=shape, quant="per_channel"), **loc)
    pc = dict(base, backend_dtype="qcint8", shape=(2, 2), quant="per_channel")
    _deq_fails(UnsupportedQuantizationError, "per-channel quantization needs the scale bytes "
               "(scale_file / scale_offset)", b"\0" * 4, pc, **loc)
    _deq_fails(UnsupportedQuantizationError, "scale dtype 'float16' is not handled", b"\0" * 4,
               dict(pc, scale_dtype="float16"), b"\0" * 4, **loc)
    for cd in (2, -1):
        _deq_fails(CorruptError, f"channel_dim {cd} is not a dimension of shape [2, 2]",
                   b"\0" * 4, dict(pc, channel_dim=cd), _f32(1, 1), **loc)
    _deq_fails(CorruptError, "channel_dim 0 is not a dimension of shape []", b"\0",
               dict(pc, shape=()), _f32(1), **loc)
    _deq_fails(CorruptError, "3 scales for 2 channels (dim 1 of [2, 2])", b"\0" * 4,
               dict(pc, channel_dim=1), _f32(1, 1, 1), **loc)
    g = dict(base, backend_dtype="qbint4", shape=(2, 4), quant="per_channel_group",
             channel_dim=0, group_size=2, scale_dtype="float32")
    for over, text in (({"shape": (8,)}, "groupwise quantization of shape [8] with channel_dim "
                        "0 and group size 2 is not handled (expected 2-D weights, channel_dim 0)"),
                       ({"channel_dim": 1}, "groupwise quantization of shape [2, 4] with "
                        "channel_dim 1 and group size 2 is not handled (expected 2-D weights, "
                        "channel_dim 0)"),
                       ({"group_size": 0}, "groupwise quantization of shape [2, 4] with "
                        "channel_dim 0 and group size 0 is not handled (expected 2-D weights, "
                        "channel_dim 0)"),
                       ({"group_size": None}, "groupwise quantization of shape [2, 4] with "
                        "channel_dim 0 and group size 0 is not handled (expected 2-D weights, "
                        "channel_dim 0)")):
        _deq_fails(UnsupportedQuantizationError, text, b"\0" * 8, dict(g, **over),
                   _f32(1, 1, 1, 1), **loc)
    _deq_fails(CorruptError, "3 scales for 2 rows x 2 groups of 2", b"\0" * 8, g, _f32(1, 1, 1),
               **loc)


def test_dequantize_reads_pandas_rows():
    pd = pytest.importorskip("pandas")
    row = pd.Series({"name": "t", "backend_dtype": "qint8", "dtype": "int8", "shape": (2,),
                     "quant": "per_tensor", "scale": 0.5, "zero_point": pd.NA,
                     "file": "x.pte", "offset": pd.NA})
    _same_floats(dequantize(np.array([4, -4], np.int8), row), [2, -2])
    _deq_fails(CorruptError, "1 bytes given, the qint8 tensor of shape [2] needs 2", b"\0",
               row, file="x.pte", name="t")
    # a row without names (a plain sequence) reads as all missing
    _deq_fails(UnsupportedQuantizationError, "cannot dequantize an untyped tensor with none "
               "quantization", b"", [1, 2])


# -- Vulkan (graphs written by flatc from ExecuTorch's schema.fbs) ---------------------------------

VK_SCHEMA = "backends/vulkan/serialization/schema.fbs"
NAMED = (1 << 64) - 1


def _vk_doc() -> dict:
    def tensor(dt, dims, cid=-1):
        return {"value_type": "VkTensor", "value": {"datatype": dt, "dims": dims,
                                                    "constant_id": cid, "mem_obj_id": 3}}

    return {"version": "v1",
            "chain": [{"node_id": 7, "name": "aten.add.Tensor", "args": [0, 2, 4]},
                      {"node_id": 9, "args": []}],
            "values": [tensor("FLOAT32", [2, 3], 0), {"value_type": "Int", "value":
                                                     {"int_val": 5}},
                       tensor("INT8", [4]), {"value_type": "Null", "value": {}},
                       tensor("FLOAT16", [], 1), tensor("INT64", [1, 2]),
                       tensor("BOOL", [3], 2), tensor("UINT8", [0], 3),
                       tensor("FLOAT64", [1]), tensor("INT32", [2], 0)],
            "input_ids": [2, 5], "output_ids": [5, 8],
            "constants": [{"offset": 0, "length": 24}, {"offset": NAMED, "length": 2,
                                                         "named_key": "k1"},
                          {"offset": NAMED, "length": 3, "named_key": "k2"},
                          {"offset": 32, "length": 0}],
            "shaders": [{"offset": 0, "length": 0}, {"offset": 0, "length": 0}]}


def _vk(fb: bytes, consts: bytes = b"", head=None) -> bytes:
    body = fb + b"\0" * (-len(fb) % 16)
    if head is None:
        head = (30, 32, len(fb), 32 + len(body), len(consts))
    return struct.pack("<4s4sHIIIQ", b"", b"VH00", *head) + b"\0\0" + body + consts


def _vk_values(fb: bytes) -> list[int]:
    """Positions of the VkTensor (or other member) tables of each value."""
    return [fb_ref(fb, v, 1) for v in fb_tables(fb, fb_root(fb), 2)]


@pytest.mark.parametrize("whole", [False, True])
def test_vulkan_exact(whole, tmp_path):
    fb = flatc(VK_SCHEMA, _vk_doc(), tmp_path)
    consts = bytes(range(24)) + b"\0" * 24
    blob = _vk(fb, consts)
    b_off = len(blob) - len(consts)
    named = {"k1": (FILE, 5000, 2), "k3": ("other", 1, 1)}
    info = look(blob, "VulkanBackend", whole=whole, named=named, method="f", index=1)
    assert (info.backend, info.layout) == ("vulkan",
                                           "VH00 header + VK00 flatbuffer + constant bytes")
    assert info.header == {"magic": "VH00", "length": 30, "flatbuffer_offset": 32,
                           "flatbuffer_size": len(fb), "bytes_offset": b_off,
                           "bytes_size": len(consts), "identifier": "VK00", "version": "v1",
                           "values": 8, "chain": 2, "constants": 4, "shaders": 2}
    assert info.subsegments == [seg("header (VH00)", "header", 0, 30), pad(30, 2),
                                seg("VkGraph flatbuffer (VK00)", "flatbuffer", 32, len(fb)),
                                *([pad(32 + len(fb), b_off - 32 - len(fb))]
                                  if b_off > 32 + len(fb) else []),
                                seg("constants[0]", "constant", b_off, 24), pad(b_off + 24, 24)]
    p = "f/delegate1/"

    def row(i, dtype, shape, nbytes, role, **kw):
        return trow(name=f"{p}{i}", value=i, dtype=dtype, backend_dtype=dtype, shape=shape,
                    numel=math.prod(shape), nbytes=nbytes, quant="none", flags=0,
                    storage=kw.pop("storage", "runtime"), role=role, **kw)

    blob_const = {"storage": "blob", "file": FILE, "offset": AT + b_off, "data_size": 24,
                  "constant_index": 0, "missing": 0}
    assert column_rows(info.tensors) == [
        row(0, "float32", (2, 3), 24, "constant", **blob_const),
        row(2, "int8", (4,), 4, "input"),
        row(4, "float16", (), 2, "constant", storage="named_data", file=FILE, offset=5000,
            data_size=2, named_key="k1", constant_index=1, missing=0),
        row(5, "int64", (1, 2), 16, "input"),
        row(6, "bool", (3,), 3, "constant", storage="named_data", data_size=3, named_key="k2",
            constant_index=2, missing=1),
        row(7, "uint8", (0,), 0, "constant", storage="blob", file=FILE,
            offset=AT + b_off + 32, data_size=0, constant_index=3, missing=0),
        row(8, "float64", (1,), 8, "output"),
        row(9, "int32", (2,), 8, "constant", **blob_const)]
    assert column_rows(info.nodes) == [
        nrow(node=0, op="aten.add.Tensor", inputs=(0, 2, 4), outputs=(), flags=0,
             debug_handle=7),
        nrow(node=1, op="", inputs=(), outputs=(), flags=0, debug_handle=9)]
    assert info.findings == [Finding(
        "info", "VkGraph.chain", AT + 32 + fb_root(fb),
        "OperatorCall.args lists every argument value id (inputs and outputs together); "
        "delegate_nodes shows them as inputs")]
    assert info.named_keys == ("k1", "k2")


def test_vulkan_named_constants(tmp_path):
    doc = _vk_doc()
    fb = flatc(VK_SCHEMA, doc, tmp_path)
    blob = _vk(fb, bytes(48))

    def const_rows(named):
        rows = column_rows(look(blob, "VulkanBackend", named=named).tensors)
        return [(r["storage"], r["file"], r["offset"], r["missing"]) for r in rows
                if r["named_key"]]

    assert const_rows(None) == [("named_data", None, MISSING, -1)] * 2
    assert const_rows({"k1": ("x.ptd", 64, 2), "k2": (FILE, 128, 3)}) == [
        ("external", "x.ptd", 64, 0), ("named_data", FILE, 128, 0)]
    # an empty named_key resolves nothing
    doc["constants"][1]["named_key"] = ""
    doc["values"][4]["value"]["constant_id"] = 1
    blob = _vk(flatc(VK_SCHEMA, doc, tmp_path), bytes(48))
    info = look(blob, "VulkanBackend", named={"": (FILE, 1, 1)})
    row = column_rows(info.tensors)[2]
    assert (row["storage"], row["named_key"], row["missing"], row["file"]) == (
        "named_data", None, 1, None)
    assert info.named_keys == ("k2",)


def test_vulkan_bare_flatbuffer_and_absent_fields(tmp_path):
    doc = {"values": [{"value_type": "VkTensor", "value": {"datatype": "FLOAT32", "dims": [2]}}],
           "constants": [{"offset": 0, "length": 0}]}
    fb = flatc(VK_SCHEMA, doc, tmp_path)
    info = look(fb, "VulkanBackend")
    assert info.layout == "VK00 flatbuffer (no header)"
    assert info.header == {"identifier": "VK00", "version": "", "values": 1, "chain": 0,
                           "constants": 1, "shaders": 0}
    assert info.subsegments == [seg("VkGraph flatbuffer (VK00)", "flatbuffer", 0, len(fb))]
    # constant_id absent is 0 (the schema's default): the (empty) constant 0
    (row,) = column_rows(info.tensors)
    assert (row["role"], row["storage"], row["offset"], row["data_size"]) == (
        "constant", "blob", AT + len(fb), 0)
    assert column_rows(info.nodes) == []


def test_vulkan_header_refusals(tmp_path):
    fb = flatc(VK_SCHEMA, _vk_doc(), tmp_path)
    consts = bytes(48)
    good = _vk(fb, consts)
    size = len(good)
    fbs = len(fb)
    b_off = size - 48
    what = "Vulkan header (VH00)"
    fails(good[:29], "VulkanBackend", TruncatedError, what, 0,
          "29 bytes is too short for the Vulkan header")
    for length, fb_off, fb_size in ((29, 32, fbs), (33, 32, fbs), (30, 29, fbs), (30, 32, 7),
                                    (30, 32, size - 31), (30, size, 8)):
        fails(_vk(fb, consts, head=(length, fb_off, fb_size, b_off, 48)), "VulkanBackend",
              OutOfBoundsError, f"{what}.flatbuffer_offset", 10,
              f"flatbuffer [0x{fb_off:x}, +0x{fb_size:x}) does not fit between the header "
              f"({length} bytes) and the end of the blob (size 0x{size:x})")
    for bo, bs in ((32 + fbs - 1, 0), (b_off, 49), (size, 1), (size + 1, 0)):
        fails(_vk(fb, consts, head=(30, 32, fbs, bo, bs)), "VulkanBackend", OutOfBoundsError,
              f"{what}.bytes_offset", 18,
              f"bytes [0x{bo:x}, +0x{bs:x}) do not fit after the flatbuffer in the blob "
              f"(size 0x{size:x})")
    # boundaries that are fine: the bytes right after the flatbuffer, up to the very end
    ok = look(_vk(fb, consts, head=(30, 32, fbs, 32 + fbs, size - 32 - fbs)), "VulkanBackend")
    assert ok.header["bytes_offset"] == 32 + fbs
    assert look(_vk(fb, consts, head=(32, 32, fbs, b_off, 48)), "VulkanBackend").subsegments[0] \
        == seg("header (VH00)", "header", 0, 32)
    other = _vk(fb.replace(b"VK00", b"VK01", 1), consts)
    fails(other, "VulkanBackend", UnsupportedVersionError, "VkGraph identifier", 36,
          "VkGraph file identifier is b'VK01', expected b'VK00'")


def test_vulkan_graph_refusals(tmp_path):
    def refused(edit, cls, structure, detail, consts=bytes(48), at=None):
        doc = _vk_doc()
        edit(doc)
        fb = flatc(VK_SCHEMA, doc, tmp_path)
        blob = _vk(fb, consts)
        pos = at(fb) if at else None
        fails(blob, "VulkanBackend", cls, structure, 32 + pos, detail)

    def const_pos(k):
        return lambda fb: fb_tables(fb, fb_root(fb), 5)[k]

    def tensor_pos(i):
        return lambda fb: _vk_values(fb)[i]

    refused(lambda d: d["constants"][3].update(length=1 << 62), CorruptError,
            "VkGraph.constants[3].length", f"length {1 << 62} is larger than any blob",
            at=const_pos(3))
    refused(lambda d: d["constants"][2].update(length=1 << 63), CorruptError,
            "VkGraph.constants[2].length", f"length {1 << 63} is larger than any blob",
            at=const_pos(2))
    refused(lambda d: d["constants"][0].update(offset=25), OutOfBoundsError,
            "VkGraph.constants[0]", "constant [0x19, +0x18) runs past the bytes section "
            "(size 0x30)", at=const_pos(0))
    refused(lambda d: d["constants"][3].update(offset=49), OutOfBoundsError,
            "VkGraph.constants[3]", "constant [0x31, +0x0) runs past the bytes section "
            "(size 0x30)", at=const_pos(3))
    refused(lambda d: d["values"][5]["value"].update(datatype="UNSET"), CorruptError,
            "VkGraph.values[5].value.datatype", "datatype 127 is unknown", at=tensor_pos(5))
    refused(lambda d: d["values"][2]["value"].update(dims=[1 << 20, 1 << 20, 1 << 19]),
            CorruptError, "VkGraph.values[2].value.dims",
            f"dims {[1 << 20, 1 << 20, 1 << 19]} are too large", at=tensor_pos(2))
    refused(lambda d: d["values"][2]["value"].update(dims=[1] * 8 + [1 << 30, 1 << 29]),
            CorruptError, "VkGraph.values[2].value.dims", f"dims {[1] * 8} are too large",
            at=tensor_pos(2))
    refused(lambda d: d["values"][9]["value"].update(constant_id=4), OutOfBoundsError,
            "VkGraph.values[9].value.constant_id", "constant_id 4 is out of range (4 constants)",
            at=tensor_pos(9))
    # two constants over the same bytes
    doc = _vk_doc()
    doc["constants"][3].update(offset=8, length=8)
    blob = _vk(flatc(VK_SCHEMA, doc, tmp_path), bytes(48))
    b_off = len(blob) - 48
    fails(blob, "VulkanBackend", CorruptError, "constants[3]", b_off + 8,
          f"constants[3] [0x{AT + b_off + 8:x}, +0x8) overlaps the range before it (ends at "
          f"0x{AT + b_off + 24:x})")


def test_vulkan_largest_dims_and_chain_errors(tmp_path):
    doc = _vk_doc()
    doc["values"][2]["value"]["dims"] = [1 << 20, 1 << 20, (1 << 19) - 1]
    fb = flatc(VK_SCHEMA, doc, tmp_path)
    rows = column_rows(look(_vk(fb, bytes(48)), "VulkanBackend").tensors)
    assert rows[1]["numel"] == (1 << 59) - (1 << 40)
    fb = flatc(VK_SCHEMA, _vk_doc(), tmp_path)
    op = fb_tables(fb, fb_root(fb), 1)[0]
    name = fb_ref(fb, op, 1)
    bad = _vk(patched(fb, name + 4 + len("aten.add.Tensor"), "<B", 0x41), bytes(48))
    fails(bad, "VulkanBackend", CorruptError, "VkGraph.chain[0].name", 32 + name,
          "string is not NUL-terminated")
    args = fb_ref(fb, op, 2)
    bad = _vk(patched(fb, args, "<I", 1 << 28), bytes(48))
    fails(bad, "VulkanBackend", TruncatedError, "VkGraph.chain[0].args", 32 + args,
          lambda w: f"vector of {1 << 28} x 4-byte elements runs past the end of the VkGraph "
          f"flatbuffer (0x{w + 32 + len(fb):x})")


# -- XNNPACK (graphs written by flatc from ExecuTorch's schema.fbs / runtime_schema.fbs) ----------

XNN_SCHEMA = "backends/xnnpack/serialization/schema.fbs"
XN00_SCHEMA = "backends/xnnpack/serialization/runtime_schema.fbs"
INVALID = (1 << 32) - 1


def _schema_tables(schema: str) -> tuple[dict[str, list[tuple[str, str]]], dict[str, list]]:
    """Tables (fields and types in order) and unions (member name, table) of a .fbs file."""
    text = re.sub(r"//[^\n]*", "", (_executorch_dir() / schema).read_text())
    tables = {m[1]: re.findall(r"(\w+)\s*:\s*([\w\[\]]+)", m[2])
              for m in re.finditer(r"table\s+(\w+)\s*\{(.*?)\}", text, re.S)}
    unions = {m[1]: [(a, b or a) for a, b in re.findall(r"(\w+)\s*(?::\s*(\w+))?\s*,?",
                                                        m[2])]
              for m in re.finditer(r"union\s+(\w+)\s*\{(.*?)\}", text, re.S)}
    return tables, unions


def _xnn(fb: bytes, consts: bytes = b"", head=None, tail: bytes = b"") -> bytes:
    """An XH00 blob: header (30 bytes + 2 padding), the flatbuffer padded to 16, constants."""
    body = fb + b"\0" * (-len(fb) % 16)
    if head is None:
        head = (30, 32, len(fb), 32 + len(body), len(consts))
    return struct.pack("<4s4sHIIIQ", b"", b"XH00", *head) + b"\0\0" + body + consts + tail


def _tv(dt: str, dims, *, cbi=0, ext=INVALID, flags=0, id_out=0, num_dims=None) -> dict:
    return {"datatype": f"xnn_datatype_{dt}", "num_dims": len(dims) if num_dims is None else
            num_dims, "dims": dims, "constant_buffer_idx": cbi, "external_id": ext,
            "flags": flags, "id_out": id_out}


def _plain(tv: dict) -> dict:
    return {"xvalue_union_type": "XNNTensorValue", "xvalue_union": tv}


def _quant(tv: dict, kind: str, params: dict) -> dict:
    return {"xvalue_union_type": "XNNQuantizedTensorValue",
            "xvalue_union": {"tensor_value": tv, "quant_params_type": kind,
                             "quant_params": params}}


def _reader(monkeypatch, fast: bool) -> None:
    """The vectorised XNNPACK reader (which must then not fall back to the scalar one: a
    spurious fallback gives the same records, only slower) or the scalar one."""
    from workbench.formats.delegates.xnnpack import _graph

    monkeypatch.setattr(readpath, "TIER", read_tier(fast))
    if fast:
        def no_fallback(*a, **k):
            raise AssertionError("the vectorised reader fell back to the scalar one")

        monkeypatch.setattr(_graph, "read_slow", no_fallback)


def _every_node(tmp_path):
    """An XNNGraph with one node of every XNodeUnion member, every field a distinct value, and
    the inputs / outputs / flags each node should show (from the schema's field names)."""
    tables, unions = _schema_tables(XNN_SCHEMA)
    nodes, expect = [], []
    for k, (member, table) in enumerate(unions["XNodeUnion"], start=1):
        fields, node = tables[table], {}
        ins, outs, flags = [], [], None
        for j, (field, typ) in enumerate(fields):
            value = 1000 * k + j
            if typ.startswith("["):
                node[field] = [value, value + 1]
            elif typ == "float":
                node[field] = value + 0.5
            else:
                node[field] = value
            if field == "flags":
                flags = value
            elif field.startswith("output") and field.endswith("_id"):
                outs.append(value)
            elif field.endswith("_id"):
                ins.append(value)
        cat = re.fullmatch(r"XNNConcatenate(\d)", member)
        if cat:  # ConcatenateN reads the first N of input1_id .. input5_id
            ins = ins[:int(cat[1])]
        x = {"xnode_union_type": member, "xnode_union": node, "debug_handle": 7 * k}
        if k % 3 == 0:
            x["output_min_max"] = {"output_min": -k - 0.25, "output_max": k + 0.75}
        nodes.append(x)
        expect.append((member[3:], tuple(ins), tuple(outs), flags, 7 * k,
                       (-k - 0.25, k + 0.75) if k % 3 == 0 else ("nan", "nan")))
    doc = {"version": "", "xnodes": nodes,
           "xvalues": [_plain(_tv("fp32", [1], id_out=i)) for i in (1001, 1002)],
           "num_externs": 0, "input_ids": [], "output_ids": [],
           "constant_data": [{"offset": 0, "size": 0}]}
    return flatc(XNN_SCHEMA, doc, tmp_path), expect


@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_every_node_type(fast, tmp_path, monkeypatch):
    _reader(monkeypatch, fast)
    fb, expect = _every_node(tmp_path)
    assert len(expect) == 47
    info = look(_xnn(fb), "XnnpackBackend")
    rows = column_rows(info.nodes)
    assert [(r["op"], r["inputs"], r["outputs"], r["flags"], r["debug_handle"],
             (r["output_min"], r["output_max"])) for r in rows] == expect
    assert [r["node"] for r in rows] == list(range(47))
    assert info.header["xnodes"] == 47
    unknown = {i for e in expect for i in e[1] + e[2]} - {1001, 1002}
    first = fb_tables(fb, fb_root(fb), 1)[0]
    assert info.findings == [Finding(
        "warning", "XNNGraph.xnodes", AT + 32 + first,
        f"nodes refer to {len(unknown)} value id(s) that no xvalue defines, e.g. {min(unknown)}")]


def test_xnnpack_absent_optional_inputs_are_dropped(tmp_path):
    fc = {"input1_id": 0, "filter_id": 1, "bias_id": INVALID, "output_id": 2, "flags": 3}
    add = {"input1_id": INVALID, "input2_id": INVALID, "output_id": INVALID, "flags": 0}
    doc = {"xnodes": [{"xnode_union_type": "XNNFullyConnected", "xnode_union": fc},
                      {"xnode_union_type": "XNNAdd", "xnode_union": add},
                      {"xnode_union_type": "XNNFullyConnected", "xnode_union": dict(fc,
                                                                                   bias_id=1)}],
           "xvalues": [_plain(_tv("fp32", [1], id_out=i)) for i in range(3)],
           "constant_data": [{"offset": 0, "size": 0}]}
    fb = flatc(XNN_SCHEMA, doc, tmp_path)
    for fast in (True, False):

        with readpath.using(read_tier(fast)):
            info = look(_xnn(fb), "XnnpackBackend")
        assert [(r["inputs"], r["outputs"]) for r in column_rows(info.nodes)] == [
            ((0, 1), (2,)), ((), (INVALID,)), ((0, 1, 1), (2,))]
        assert [f.message for f in info.findings] == [
            f"nodes refer to 1 value id(s) that no xvalue defines, e.g. {INVALID}"]


def test_xnnpack_no_constant_table_and_unknown_ids_named_the_same_on_both_readers(
        tmp_path, monkeypatch):
    """constant_buffer_idx 0 means "no constant" even in a graph without a constant table;
    the unknown-id finding names the smallest id whichever reader ran."""

    doc = {"xnodes": [{"xnode_union_type": "XNNSoftmax",
                       "xnode_union": {"input_id": 50, "output_id": 0}},
                      {"xnode_union_type": "XNNAdd",
                       "xnode_union": {"input1_id": 60, "input2_id": 0, "output_id": 0}}],
           "xvalues": [_plain(_tv("fp32", [1], id_out=0))]}
    fb = flatc(XNN_SCHEMA, doc, tmp_path)
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        info = look(_xnn(fb), "XnnpackBackend")
        assert info.findings == [Finding(
            "warning", "XNNGraph.xnodes", AT + 32 + fb_tables(fb, fb_root(fb), 1)[0],
            "nodes refer to 2 value id(s) that no xvalue defines, e.g. 50")]
        assert column_rows(info.tensors)[0]["storage"] == "runtime"
        assert info.header["constant_entries"] == 0


def _xnn_values_doc() -> dict:
    f32 = "PerChannelQuant"
    return {
        "version": "v9", "num_externs": 3, "input_ids": [1, 8], "output_ids": [2],
        "constant_data": [{"offset": 0, "size": 0}, {"offset": 0, "size": 24},
                          {"offset": 32, "size": 8}, {"offset": NAMED, "size": 16,
                                                      "named_key": "kw"},
                          {"offset": 48, "size": 8}, {"offset": NAMED, "size": 8,
                                                      "named_key": "gone"}],
        "xvalues": [
            _plain(_tv("fp32", [2, 3], cbi=1, id_out=0)),
            _plain(_tv("fp32", [1, 4], ext=0, flags=1, id_out=1)),
            _plain(_tv("fp16", [4], ext=1, flags=2, id_out=2)),
            _quant(_tv("qint8", [3], id_out=3), "PerTensorQuant",
                   {"scale": 0.5, "zero_point": -3}),
            _quant(_tv("qcint8", [2, 8], cbi=3, id_out=4), f32,
                   {"channel_dim": 0, "scale_buffer_idx": 2, "num_scales": 2}),
            _quant(_tv("qcint4", [2, 3], cbi=5, id_out=5), f32,
                   {"scale": [1.0, 2.0], "channel_dim": 1}),
            _quant(_tv("qbint4", [2, 4], id_out=6), "PerChannelGroupQuant",
                   {"channel_dim": 0, "group_size": 2, "scale_buffer_idx": 4,
                    "num_scales": 4}),
            _quant(_tv("qdint8", [1, 4], id_out=7), "PerTokenDynamicQuant",
                   {"num_nonbatch_dims": 1}),
            _plain(_tv("bf16", [2], ext=2, flags=3, id_out=8)),
            _plain(_tv("int32", [], id_out=9, num_dims=7)),
            _quant(_tv("qcint8", [3], id_out=10), f32, {"channel_dim": 0, "num_scales": 3}),
            _quant(_tv("qcint32", [2], id_out=11), f32, {"scale": [3.0, 4.0], "num_scales": 5}),
            _quant(_tv("qbint4", [1, 3], id_out=12), "PerChannelGroupQuant",
                   {"scale": [1.5, 2.5], "channel_dim": 0, "group_size": 2}),
        ]}


def _xnn_expected_rows(fb: bytes, cd: int, prefix: str = "forward/delegate0/") -> list[dict]:
    root = fb_root(fb)
    xv = fb_tables(fb, root, 2)

    def qp(i):  # the quant params table of value i
        return fb_ref(fb, fb_ref(fb, xv[i], 1), 2)

    def inline_scales(i):
        return AT + 32 + fb_ref(fb, qp(i), 0) + 4

    def row(i, dt, name, shape, nbytes, role, quant="none", **kw):
        return trow(name=f"{prefix}{i}", value=i, dtype=dt, backend_dtype=name, shape=shape,
                    numel=math.prod(shape), nbytes=nbytes, role=role, quant=quant,
                    storage=kw.pop("storage", "runtime"), flags=kw.pop("flags", 0),
                    missing=kw.pop("missing", -1), **kw)

    return [
        row(0, "float32", "fp32", (2, 3), 24, "constant", storage="blob", file=FILE,
            offset=AT + cd, data_size=24, constant_index=1, missing=0),
        row(1, "float32", "fp32", (1, 4), 16, "input", external_id=0, flags=1),
        row(2, "float16", "fp16", (4,), 8, "output", external_id=1, flags=2),
        row(3, "int8", "qint8", (3,), 3, "internal", "per_tensor", scale=0.5, zero_point=-3),
        row(4, "int8", "qcint8", (2, 8), 16, "constant", "per_channel", channel_dim=0,
            num_scales=2, scale_dtype="float32", scale_storage="blob", scale_file=FILE,
            scale_offset=AT + cd + 32, scale_nbytes=8, storage="named_data", named_key="kw",
            file=FILE, offset=5000, data_size=16, constant_index=3, missing=0),
        row(5, "int4", "qcint4", (2, 3), 4, "constant", "per_channel", channel_dim=1,
            num_scales=2, scale_dtype="float32", scale_storage="inline", scale_file=FILE,
            scale_offset=inline_scales(5), scale_nbytes=8, storage="named_data",
            named_key="gone", data_size=8, constant_index=5, missing=1),
        row(6, "int4", "qbint4", (2, 4), 4, "internal", "per_channel_group", group_size=2,
            channel_dim=0, num_scales=4, scale_dtype="bfloat16", scale_storage="blob",
            scale_file=FILE, scale_offset=AT + cd + 48, scale_nbytes=8),
        row(7, "int8", "qdint8", (1, 4), 4, "internal", "per_token_dynamic"),
        row(8, "bfloat16", "bf16", (2,), 4, "input", external_id=2, flags=3),
        row(9, "int32", "int32", (), 4, "internal"),
        row(10, "int8", "qcint8", (3,), 3, "internal", "per_channel", channel_dim=0,
            num_scales=3, scale_dtype="float32"),
        row(11, "int32", "qcint32", (2,), 8, "internal", "per_channel", channel_dim=0,
            num_scales=5, scale_dtype="float32", scale_storage="inline", scale_file=FILE,
            scale_offset=inline_scales(11), scale_nbytes=8),
        row(12, "int4", "qbint4", (1, 3), 2, "internal", "per_channel_group", group_size=2,
            channel_dim=0, num_scales=2, scale_dtype="float32", scale_storage="inline",
            scale_file=FILE, scale_offset=inline_scales(12), scale_nbytes=8),
    ]


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("whole", [False, True])
def test_xnnpack_values_exact(fast, whole, tmp_path, monkeypatch):
    _reader(monkeypatch, fast)
    fb = flatc(XNN_SCHEMA, _xnn_values_doc(), tmp_path)
    consts = bytes(range(64))
    blob = _xnn(fb, consts)
    cd = len(blob) - 64
    info = look(blob, "XnnpackBackend", whole=whole, named={"kw": (FILE, 5000, 16)})
    assert (info.backend, info.layout) == ("xnnpack",
                                           "XH00 header + XN01 flatbuffer + constant data")
    assert info.header == {"magic": "XH00", "length": 30, "flatbuffer_offset": 32,
                           "flatbuffer_size": len(fb), "constant_data_offset": cd,
                           "constant_data_size": 64, "identifier": "XN01", "version": "v9",
                           "num_externs": 3, "xvalues": 13, "xnodes": 0, "constant_entries": 6}
    assert column_rows(info.tensors) == _xnn_expected_rows(fb, cd)
    assert column_rows(info.nodes) == []
    end_fb = 32 + len(fb)
    assert info.subsegments == [
        seg("header (XH00)", "header", 0, 30), pad(30, 2),
        seg("XNNGraph flatbuffer (XN01)", "flatbuffer", 32, len(fb)),
        *([pad(end_fb, cd - end_fb)] if cd > end_fb else []),
        seg("constant_data[1] value 0", "constant", cd, 24), pad(cd + 24, 8),
        seg("constant_data[2] scales", "constant", cd + 32, 8), pad(cd + 40, 8),
        seg("constant_data[4] scales", "constant", cd + 48, 8), pad(cd + 56, 8)]
    root = fb_root(fb)
    c5 = fb_tables(fb, root, 8)[5]
    q10 = fb_ref(fb, fb_ref(fb, fb_tables(fb, root, 2)[10], 1), 2)
    assert info.findings == [
        Finding("warning", "XNNGraph.constant_data[5]", AT + 32 + c5,
                "1 named key(s) not found in the program's named data or the attached data "
                "files, e.g. 'gone'"),
        Finding("warning", "XNNGraph.xvalues[10].quant_params", AT + 32 + q10,
                "1 per-channel quantized value(s) have neither inline scales nor a scale "
                "buffer")]
    assert info.named_keys == ("kw", "gone")


def _small_doc(**kw) -> dict:
    doc = {"xvalues": [_plain(_tv("fp32", [2], cbi=1, id_out=0)),
                       _plain(_tv("fp32", [2], id_out=1))],
           "xnodes": [{"xnode_union_type": "XNNAdd",
                       "xnode_union": {"input1_id": 0, "input2_id": 0, "output_id": 1}}],
           "constant_data": [{"offset": 0, "size": 0}, {"offset": 0, "size": 8}]}
    doc.update(kw)
    return doc


def test_xnnpack_header_refusals(tmp_path):
    fb = flatc(XNN_SCHEMA, _small_doc(), tmp_path)
    consts = bytes(16)
    good = _xnn(fb, consts)
    size, fbs = len(good), len(fb)
    cd = size - 16
    what = "XNNPACK header (XH00)"
    fails(good[:29], "XnnpackBackend", TruncatedError, what, 0,
          "29 bytes is too short for the 30-byte XNNPACK header")
    fails(_xnn(fb, consts, head=(29, 32, fbs, cd, 16)), "XnnpackBackend", CorruptError,
          f"{what}.length", 8, "header length 29 is shorter than 30")
    for length, fb_off, fb_size in ((33, 32, fbs), (30, 29, fbs), (30, 32, 7),
                                    (30, 32, size - 31), (30, size, 8)):
        fails(_xnn(fb, consts, head=(length, fb_off, fb_size, cd, 16)), "XnnpackBackend",
              OutOfBoundsError, f"{what}.flatbuffer_offset", 10,
              f"flatbuffer [0x{fb_off:x}, +0x{fb_size:x}) does not fit between the header "
              f"({length} bytes) and the end of the blob (size 0x{size:x})")
    for co, cs in ((32 + fbs - 1, 0), (cd, 17), (size, 1), (size + 1, 0)):
        fails(_xnn(fb, consts, head=(30, 32, fbs, co, cs)), "XnnpackBackend", OutOfBoundsError,
              f"{what}.constant_data_offset", 18,
              f"constant data [0x{co:x}, +0x{cs:x}) does not fit between the flatbuffer (ends "
              f"at 0x{32 + fbs:x}) and the end of the blob (size 0x{size:x})")
    other = _xnn(fb.replace(b"XN01", b"XN02", 1), consts)
    fails(other, "XnnpackBackend", UnsupportedVersionError, "XNNGraph identifier", 36,
          "XNNGraph file identifier is b'XN02', expected one of b'XN01', b'XN00'")
    # bytes after the constant data are noted; a header of 32 bytes covers its padding
    info = look(_xnn(fb, consts, head=(32, 32, fbs, cd, 8)), "XnnpackBackend")
    assert info.findings == [Finding("info", what, AT + cd + 8,
                                     "8 bytes after the constant data")]
    assert info.subsegments[0] == seg("header (XH00)", "header", 0, 32)
    assert info.subsegments[-1] == pad(cd + 8, 8)
    info = look(_xnn(fb, consts, tail=b"\0" * 3), "XnnpackBackend")
    assert info.findings == [Finding("info", what, AT + size, "3 bytes after the constant data")]
    assert look(good, "XnnpackBackend").findings == []
    # the constant data right after the flatbuffer (no padding), up to the very end
    tight = struct.pack("<4s4sHIIIQ", b"", b"XH00", 30, 30, fbs, 30 + fbs, 8) + fb + bytes(8)
    info = look(tight, "XnnpackBackend")
    assert [(s.name, s.offset - AT, s.size) for s in info.subsegments] == [
        ("header (XH00)", 0, 30), ("XNNGraph flatbuffer (XN01)", 30, fbs),
        ("constant_data[1] value 0", 30 + fbs, 8)]


@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_bare_xn01_graph(fast, tmp_path, monkeypatch):
    _reader(monkeypatch, fast)
    doc = _small_doc(constant_data=[{"offset": 0, "size": 0}])
    doc["xvalues"][0]["xvalue_union"]["constant_buffer_idx"] = 0
    fb = flatc(XNN_SCHEMA, doc, tmp_path)
    info = look(fb, "XnnpackBackend")
    assert info.layout == "XN01 flatbuffer (no header)"
    assert info.header == {"identifier": "XN01", "version": "", "num_externs": 0, "xvalues": 2,
                           "xnodes": 1, "constant_entries": 1}
    assert info.subsegments == [seg("XNNGraph flatbuffer (XN01)", "flatbuffer", 0, len(fb))]
    assert column_rows(info.nodes) == [nrow(node=0, op="Add", inputs=(0, 0), outputs=(1,),
                                            flags=0, debug_handle=0)]


def _xn00_doc() -> dict:
    return {"version": "0",
            "xvalues": [_plain(_tv("fp32", [2], cbi=1, id_out=0)),
                        _plain(dict(_tv("qint8", [4], cbi=2, id_out=1), dq_datatype=
                                    "xnn_datatype_qdint8")),
                        _plain(_tv("fp32", [3], id_out=2))],
            "constant_buffer": [{"storage": []}, {"storage": list(range(8))},
                                {"storage": [9, 9, 9, 9]}]}


@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_xn00_inline_constants(fast, tmp_path, monkeypatch):
    _reader(monkeypatch, fast)
    fb = flatc(XN00_SCHEMA, _xn00_doc(), tmp_path)
    assert fb[4:8] == b"XN00"
    info = look(fb, "XnnpackBackend")
    assert info.layout == "XN00 flatbuffer (no header)"
    assert info.header == {"identifier": "XN00", "version": "0", "num_externs": 0,
                           "xvalues": 3, "xnodes": 0, "constant_entries": 3}
    bufs = fb_tables(fb, fb_root(fb), 6)
    starts = [AT + fb_ref(fb, b, 0) + 4 for b in bufs[1:]]
    rows = column_rows(info.tensors)
    assert [(r["storage"], r["file"], r["offset"], r["data_size"], r["constant_index"],
             r["missing"], r["role"]) for r in rows] == [
        ("inline", FILE, starts[0], 8, 1, 0, "constant"),
        ("inline", FILE, starts[1], 4, 2, 0, "constant"),
        ("runtime", None, MISSING, MISSING, MISSING, -1, "internal")]
    assert info.subsegments == [seg("XNNGraph flatbuffer (XN00)", "flatbuffer", 0, len(fb))]
    assert info.findings == []
    # in a headed blob too
    blob = _xnn(fb)
    assert look(blob, "XnnpackBackend").layout == "XH00 header + XN00 flatbuffer + constant data"


def test_xnnpack_xn00_with_constant_data_too(tmp_path):
    doc = _xn00_doc()
    doc["constant_data"] = [{"offset": 0, "size": 0}, {"offset": 0, "size": 8},
                            {"offset": 16, "size": 4}]
    fb = flatc(XN00_SCHEMA, doc, tmp_path)
    blob = _xnn(fb, bytes(32))
    cd = len(blob) - 32
    info = look(blob, "XnnpackBackend")
    rows = column_rows(info.tensors)
    assert [(r["storage"], r["offset"]) for r in rows[:2]] == [("blob", AT + cd),
                                                               ("blob", AT + cd + 16)]
    assert info.findings == [Finding("warning", "XNNGraph.constant_buffer",
                                     AT + 32 + fb_root(fb), "both constant_buffer and "
                                     "constant_data are set; constant_data is used")]


@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_graph_refusals(fast, tmp_path, monkeypatch):
    monkeypatch.setattr(readpath, "TIER", read_tier(fast))

    def refused(edit, cls, structure, detail, at, consts=bytes(16)):
        doc = _small_doc()
        edit(doc)
        fb = flatc(XNN_SCHEMA, doc, tmp_path)
        fails(_xnn(fb, consts), "XnnpackBackend", cls, structure, 32 + at(fb), detail)

    def value(k):
        return lambda fb: fb_tables(fb, fb_root(fb), 2)[k]

    def tensor(k):
        return lambda fb: fb_ref(fb, value(k)(fb), 1)

    def const(k):
        return lambda fb: fb_tables(fb, fb_root(fb), 8)[k]

    refused(lambda d: d["xvalues"].append({}), CorruptError, "XNNGraph.xvalues[2].xvalue_union",
            "value has no tensor (union NONE)", value(2))
    refused(lambda d: d["xnodes"].append({"debug_handle": 1}), CorruptError,
            "XNNGraph.xnodes[1].xnode_union", "node has no operation (union NONE)",
            lambda fb: fb_tables(fb, fb_root(fb), 1)[1])
    refused(lambda d: d["xvalues"].append(
        {"xvalue_union_type": "XNNQuantizedTensorValue",
         "xvalue_union": {"quant_params_type": "PerTensorQuant", "quant_params": {}}}),
        CorruptError, "XNNGraph.xvalues[2].xvalue_union.tensor_value",
        "quantized value has no tensor", tensor(2))
    dims = [1 << 30, 1 << 30, 1]
    refused(lambda d: d["xvalues"][1]["xvalue_union"].update(dims=dims), CorruptError,
            "XNNGraph.xvalues[1].xvalue_union.dims",
            f"dims {dims} describe {1 << 60} elements (at most 2**60 are accepted)", tensor(1))
    refused(lambda d: d["xvalues"][1]["xvalue_union"].update(datatype=15), CorruptError,
            "XNNGraph.xvalues[1].datatype", "datatype 15 is unknown (known: 0..14)", tensor(1))
    refused(lambda d: d["xvalues"][1]["xvalue_union"].update(datatype=-1), CorruptError,
            "XNNGraph.xvalues[1].datatype", "datatype -1 is unknown (known: 0..14)", tensor(1))
    refused(lambda d: d["xvalues"][1]["xvalue_union"].update(constant_buffer_idx=2),
            OutOfBoundsError, "XNNGraph.xvalues[1].constant_buffer_idx",
            "constant_buffer_idx 2 is out of range (2 constant entries)", tensor(1))
    refused(lambda d: d["constant_data"][1].update(size=1 << 62), CorruptError,
            "XNNGraph.constant_data[1]", f"size {1 << 62} is larger than any blob", const(1))
    refused(lambda d: d["constant_data"][1].update(named_key="k"), CorruptError,
            "XNNGraph.constant_data[1]", "named_key 'k' is set but offset is 0, not 2**64-1 "
            "(they are mutually exclusive)", const(1))
    refused(lambda d: d["constant_data"][1].update(offset=NAMED), CorruptError,
            "XNNGraph.constant_data[1]", "offset is 2**64-1 (named data) but named_key is empty",
            const(1))
    refused(lambda d: d["constant_data"][1].update(offset=NAMED, named_key=""), CorruptError,
            "XNNGraph.constant_data[1]", "offset is 2**64-1 (named data) but named_key is empty",
            const(1))
    refused(lambda d: d["constant_data"][1].update(offset=9), OutOfBoundsError,
            "XNNGraph.constant_data[1]", "[0x9, +0x8) runs past the constant data (size 0x10)",
            const(1))
    refused(lambda d: d["constant_data"][1].update(offset=1 << 62, size=0), OutOfBoundsError,
            "XNNGraph.constant_data[1]",
            f"[0x{1 << 62:x}, +0x0) runs past the constant data (size 0x10)", const(1))
    refused(lambda d: d["xvalues"].append(_quant(_tv("qcint8", [2], id_out=2), "PerChannelQuant",
                                                 {"scale_buffer_idx": 2})),
            OutOfBoundsError, "XNNGraph.xvalues[2].quant_params.scale_buffer_idx",
            "scale_buffer_idx 2 is out of range (2 constant entries)",
            lambda fb: fb_ref(fb, fb_ref(fb, value(2)(fb), 1), 2))


@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_vectors_past_the_end_name_the_field(fast, tmp_path, monkeypatch):
    monkeypatch.setattr(readpath, "TIER", read_tier(fast))
    doc = _small_doc()
    doc["xvalues"].append(_quant(_tv("qcint8", [2], id_out=2), "PerChannelQuant",
                                 {"scale": [1.0, 2.0]}))
    fb = flatc(XNN_SCHEMA, doc, tmp_path)
    root = fb_root(fb)
    xv = fb_tables(fb, root, 2)
    end = 32 + len(fb)
    for pos, structure in ((fb_ref(fb, fb_ref(fb, xv[1], 1), 2), "XNNGraph.xvalues[1]"
                            ".xvalue_union.dims"),
                           (fb_ref(fb, fb_ref(fb, fb_ref(fb, xv[2], 1), 0), 2),
                            "XNNGraph.xvalues[2].xvalue_union.tensor_value.dims"),
                           (fb_ref(fb, fb_ref(fb, fb_ref(fb, xv[2], 1), 2), 0),
                            "XNNGraph.xvalues[2].xvalue_union.quant_params.scale")):
        bad = _xnn(patched(fb, pos, "<I", 1 << 28), bytes(16))
        fails(bad, "XnnpackBackend", TruncatedError, structure, 32 + pos,
              lambda w: f"vector of {1 << 28} x 4-byte elements runs past the end of the "
              f"XNNGraph flatbuffer (0x{w + end:x})")
    key_doc = _small_doc(constant_data=[{"offset": 0, "size": 0},
                                        {"offset": NAMED, "size": 8, "named_key": "abc"}])
    fb = flatc(XNN_SCHEMA, key_doc, tmp_path)
    key = fb_ref(fb, fb_tables(fb, fb_root(fb), 8)[1], 2)
    bad = _xnn(patched(fb, key + 7, "<B", 0x41), bytes(16))
    fails(bad, "XnnpackBackend", CorruptError, "XNNGraph.constant_data[1].named_key", 32 + key,
          "string is not NUL-terminated")


# -- the delegate_tensors / delegate_nodes columns of many blobs ----------------------------------

def _kind_of(col) -> str:
    import pandas as pd

    if isinstance(col, pd.Categorical):
        return "cat"
    if isinstance(col, np.ndarray):
        return str(col.dtype)
    return str(col.dtype)


def test_tensor_and_node_columns_of_several_blobs(tmp_path):
    from workbench._cols import plain
    from workbench.formats.delegates import node_columns, tensor_columns

    fb = flatc(XNN_SCHEMA, _xnn_values_doc(), tmp_path)
    xa = look(_xnn(fb, bytes(64)), "XnnpackBackend", method="a", index=0,
              named={"kw": (FILE, 5008, 16)})
    xb = look(_xnn(flatc(XNN_SCHEMA, _small_doc(), tmp_path), bytes(16)), "XnnpackBackend",
              method="b", index=4)
    mps = look(_mps_headed(_mps_graph(MPS_VALUES[:2], inputs=[1]), MPS_CONSTS), "MPSBackend",
               method="a", index=1)
    qnn = look(CTX + struct.pack("<qQ", 0, 0), "QnnBackend")
    infos = [xa, qnn, xb, mps]
    cols = tensor_columns(infos)
    names = ["delegate", "method", "index"]
    for k in TENSOR_KINDS:
        names.append(k)
        if k == "offset":
            names.append("align")
    assert list(cols) == names
    sizes = [13, 2, 2]
    assert plain(cols["delegate"]) == ["XnnpackBackend"] * 15 + ["MPSBackend"] * 2
    assert list(cols["delegate"].categories) == ["XnnpackBackend", "MPSBackend"]
    assert plain(cols["method"]) == ["a"] * 13 + ["b"] * 2 + ["a"] * 2
    assert list(cols["method"].categories) == ["a", "b"]
    assert cols["index"].dtype == np.int64 and cols["index"].tolist() == [0] * 13 + [4] * 2 + \
        [1] * 2
    kinds = {"cat": "cat", "str": "string", "Int": "Int64", "bool3": "boolean", "int": "int64",
             "obj": "object", "float": "float64"}
    for k, kind in TENSOR_KINDS.items():
        assert _kind_of(cols[k]) == kinds[kind], k
        assert len(cols[k]) == sum(sizes), k
    expected = [*column_rows(xa.tensors), *column_rows(xb.tensors), *column_rows(mps.tensors)]

    def want(row, k):
        v = row[k]
        kind = TENSOR_KINDS[k]
        if kind in ("Int",) and v == MISSING:
            return None
        if kind == "bool3":
            return None if v == -1 else bool(v)
        if kind == "float" and v == "nan":
            return "nan"
        return v

    for k in TENSOR_KINDS:
        got = plain(cols[k]) if TENSOR_KINDS[k] not in ("obj",) else list(cols[k])
        got = ["nan" if isinstance(v, float) and math.isnan(v) else v for v in got]
        assert got == [want(r, k) for r in expected], k
    assert list(cols["dtype"].categories) == ["float32", "float16", "int8", "int4", "bfloat16",
                                              "int32"]
    assert list(cols["storage"].categories) == ["blob", "runtime", "named_data"]
    offsets = [r["offset"] for r in expected]
    assert plain(cols["align"]) == [None if o == MISSING or o == 0 else o & -o for o in offsets]
    assert plain(cols["align"])[0] == (xa.offset + xa.header["constant_data_offset"]) & -(
        xa.offset + xa.header["constant_data_offset"])
    nodes = node_columns(infos)
    assert list(nodes) == ["delegate", "method", "index", *NODE_KINDS]
    assert plain(nodes["delegate"]) == ["XnnpackBackend"]  # xa and mps have no nodes
    assert list(nodes["delegate"].categories) == ["XnnpackBackend"]
    assert nodes["node"].tolist() == [0] and plain(nodes["op"]) == ["Add"]
    assert plain(nodes["method"]) == ["b"] and nodes["index"].tolist() == [4]
    assert list(nodes["inputs"]) == [(0, 0)] and plain(nodes["debug_handle"]) == [0]
    # BlobInfo's own helpers are the one-blob case
    assert list(xb.tensor_columns()) == names
    assert plain(xb.node_columns()["op"]) == ["Add"]


def test_columns_of_no_blobs_and_of_blobs_without_tables():
    from workbench._cols import plain
    from workbench.formats.delegates import node_columns, tensor_columns

    qnn = look(CTX + struct.pack("<qQ", 0, 0), "QnnBackend")
    for infos in ([], [qnn]):
        cols = tensor_columns(infos)
        assert all(len(v) == 0 for v in cols.values())
        kinds = {"cat": "cat", "str": "string", "Int": "Int64", "bool3": "boolean",
                 "int": "int64", "obj": "object", "float": "float64"}
        for k, kind in TENSOR_KINDS.items():
            assert _kind_of(cols[k]) == kinds[kind], k
        assert cols["index"].dtype == np.int64 and _kind_of(cols["align"]) == "Int64"
        assert plain(cols["delegate"]) == [] and _kind_of(cols["delegate"]) == "cat"
        nodes = node_columns(infos)
        assert list(nodes) == ["delegate", "method", "index", *NODE_KINDS]
        assert _kind_of(nodes["output_min"]) == "float64"


def test_coded_columns_and_rows_to_columns():
    from workbench._cols import plain
    from workbench.formats.delegates._columns import _cat, rows_to_columns

    a = Coded(np.array([1, -1, 0]), ("x", "y"))
    assert len(a) == 3 and a.values().tolist() == ["y", None, "x"]
    same = _cat([a, Coded(np.array([0]), ("x", "y"))])
    assert plain(same) == ["y", None, "x", "x"] and list(same.categories) == ["y", "x"]
    mixed = _cat([a, Coded(np.array([0]), ("z",)), np.array(["w", None], object)])
    assert plain(mixed) == ["y", None, "x", "z", "w", None]
    assert list(mixed.categories) == ["y", "x", "z", "w"]
    cols = rows_to_columns([{"name": "n", "shape": (2,), "scale": 0.5, "missing": True,
                             "value": 3, "dtype": "int8"}, {}], TENSOR_KINDS)
    assert list(cols) == list(TENSOR_KINDS)
    assert cols["name"].tolist() == ["n", None] and cols["name"].dtype == object
    assert cols["shape"].tolist() == [(2,), ()]
    assert cols["scale"].dtype == np.float64 and cols["scale"][0] == 0.5 and \
        math.isnan(cols["scale"][1])
    assert cols["missing"].dtype == np.int8 and cols["missing"].tolist() == [1, -1]
    assert cols["value"].dtype == np.int64 and cols["value"].tolist() == [3, MISSING]
    assert cols["dtype"].tolist() == ["int8", None]
    assert rows_to_columns([{"missing": 0}], TENSOR_KINDS)["missing"].tolist() == [0]
    assert rows_to_columns([], NODE_KINDS)["node"].dtype == np.int64


# -- the bounded window ---------------------------------------------------------------------------

def _blob(data: bytes, start: int, end: int, shift: int = 0, named=None):
    from workbench.formats.delegates._base import Blob

    return Blob(memoryview(data), "d/x.pte", start, end, shift, "B", "m", 2, named)


def _err(fn, cls, structure, offset, detail):
    with pytest.raises(wb.ArtifactError) as e:
        fn()
    assert type(e.value) is cls
    assert (e.value.file, e.value.structure, e.value.offset, e.value.detail) == (
        "x.pte", structure, offset, detail)


def test_blob_checked_reads():
    data = bytes(range(32))
    b = _blob(data, 8, 24, shift=100)
    assert (b.length, b.size, b.name, b.path) == (16, 24, "d/x.pte", "d/x.pte")
    assert b.u16(8, "w") == 0x0908 and b.u16(22, "w") == 0x1716
    assert b.u32(20, "w") == 0x17161514
    assert b.u64(16, "w") == int.from_bytes(data[16:24], "little")
    assert b.i64(8, "w") == int.from_bytes(data[8:16], "little", signed=True)
    neg = _blob(b"\xff" * 8, 0, 8)
    assert neg.i64(0, "w") == -1 and neg.u64(0, "w") == (1 << 64) - 1
    got = b.bytes(10, 3, "w")
    assert got == data[10:13] and type(got) is bytes
    v = b.view(12, 4, "w")
    assert isinstance(v, memoryview) and v.obj is data and bytes(v) == data[12:16]
    assert b.bytes(24, 0, "w") == b""
    for fn, length, at in ((lambda: b.u16(23, "f"), 2, 23), (lambda: b.u32(21, "f"), 4, 21),
                           (lambda: b.u64(17, "f"), 8, 17), (lambda: b.i64(17, "f"), 8, 17),
                           (lambda: b.bytes(20, 5, "f"), 5, 20), (lambda: b.view(24, 1, "f"), 1,
                                                                  24)):
        _err(fn, TruncatedError, "f", at, f"{length} bytes run past the end of the delegate blob "
                                          "(0x7c)")
    for fn, at, length in ((lambda: b.u16(7, "f"), 7, 2), (lambda: b.u32(25, "f"), 25, 4),
                           (lambda: b.view(10, -1, "f"), 10, -1)):
        _err(fn, OutOfBoundsError, "f", at,
             f"offset 0x{at + 100:x} (length {length}) is outside the delegate blob "
             "[0x6c, 0x7c)")
    b.check(24, 0, "ok")
    b.check(8, 16, "ok")
    _err(lambda: b.check(10, 4, "f", end=12), TruncatedError, "f", 10,
         "4 bytes run past the end of the delegate blob (0x70)")
    _err(lambda: b.check(13, 0, "f", end=12), OutOfBoundsError, "f", 13,
         "offset 0x71 (length 0) is outside the delegate blob [0x6c, 0x70)")
    b.check(10, 14, "ok", end=99)  # an end past the blob is the blob's end
    _err(lambda: b.check(10, 15, "f", end=99), TruncatedError, "f", 10,
         "15 bytes run past the end of the delegate blob (0x7c)")


def test_blob_errors_notes_and_named_data():
    b = _blob(bytes(16), 0, 16, shift=50, named={"k": (pathlib.Path("a.ptd"), np.int64(7), 3.0)})
    e = b.corrupt("what", 4, "bad")
    assert type(e) is CorruptError and (e.file, e.structure, e.offset, e.detail) == (
        "x.pte", "what", 4, "bad")
    e = b.out_of_bounds("w2", 5, "far")
    assert type(e) is OutOfBoundsError and (e.structure, e.offset, e.detail) == ("w2", 5, "far")
    b.note("info", "s", 3, "m1")
    b.note("error", "t", None, "m2")
    assert b.findings == [Finding("info", "s", 53, "m1"), Finding("error", "t", None, "m2")]
    hit = b.resolve("k")
    assert hit == ("a.ptd", 7, 3) and [type(x) for x in hit] == [str, int, int]
    assert b.resolve("nope") is None
    assert _blob(bytes(4), 0, 4).resolve("k") is None
    info = b.info("be", "lay", header={"h": 1})
    assert (info.backend, info.backend_id, info.layout, info.file, info.offset, info.size,
            info.method, info.index, info.header) == ("be", "B", "lay", "d/x.pte", 50, 16, "m",
                                                       2, {"h": 1})
    assert info.findings is b.findings


def test_blob_cover():
    b = _blob(bytes(40), 10, 40, shift=1000)
    assert b.cover([]) == [SubSegment("padding", "padding", 1010, 30)]
    assert b.cover([(10, 30, "all", "delegate")]) == [SubSegment("all", "delegate", 1010, 30)]
    got = b.cover([(30, 10, "c", "constant"), (10, 0, "empty", "header"), (12, 4, "a", "header"),
                   (16, 0, "z", "header"), (16, 6, "b", "flatbuffer")])
    assert got == [SubSegment("padding", "padding", 1010, 2), SubSegment("a", "header", 1012, 4),
                   SubSegment("b", "flatbuffer", 1016, 6),
                   SubSegment("padding", "padding", 1022, 8),
                   SubSegment("c", "constant", 1030, 10)]
    _err(lambda: b.cover([(12, 4, "a", "h"), (15, 2, "b", "h")]), CorruptError, "b", 15,
         "b [0x3f7, +0x2) overlaps the range before it (ends at 0x3f8)")
    _err(lambda: b.cover([(9, 2, "a", "h")]), CorruptError, "a", 9,
         "a [0x3f1, +0x2) overlaps the range before it (ends at 0x3f2)")
    _err(lambda: b.cover([(35, 6, "a", "h")]), OutOfBoundsError, "a", 35,
         "a [0x40b, +0x6) runs past the end of the blob (0x410)")
    # the same start: the shorter part first, then the overlap is found
    _err(lambda: b.cover([(12, 8, "long", "h"), (12, 4, "short", "h")]), CorruptError, "long",
         12, "long [0x3f4, +0x8) overlaps the range before it (ends at 0x3f8)")


def test_rebased_and_labels():
    from workbench.formats.delegates import BlobInfo
    from workbench.formats.delegates._base import rebased

    for cls in (CorruptError, TruncatedError, OutOfBoundsError):
        e = rebased(cls("bad", file="/a/b.pte", structure="S", offset=4), 100, "lab")
        assert type(e) is cls and (e.file, e.structure, e.offset, e.detail) == (
            "b.pte", "lab: S", 104, "bad")
    e = rebased(CorruptError("bad", file="b.pte"), 100, "lab")
    assert (e.structure, e.offset, str(e)) == ("lab", None, "b.pte: lab: bad")
    info = BlobInfo("x", "Id", "l", "f", 8, 4, "", 3, subsegments=[
        SubSegment("p", "delegate", 8, 2), SubSegment("q", "padding", 10, 2)])
    assert info.label == "delegate 3 (Id)"
    assert info.segment_rows() == [(8, 2, "delegate 3 (Id): p", "delegate", None,
                                    "delegate 3 (Id)"),
                                   (10, 2, "delegate 3 (Id): q", "padding", None,
                                    "delegate 3 (Id)")]
    assert BlobInfo("x", "", "l", "f", 0, 0, "m", 0).label == "m delegate 0 ()"


# -- detection ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("blob", "bid", "cls", "structure", "detail"), [
    (b"\0\0\0\0XH00", "X", TruncatedError, "XNNPACK header (XH00)",
     "8 bytes is too short for the 30-byte XNNPACK header"),
    (b"\0\0\0\0MP00", "X", TruncatedError, "MPS header (MP00)",
     "8 bytes is too short for the MPS header and a flatbuffer"),
    (b"\0\0\0\0MLX0", "X", TruncatedError, "MLX header (MLX0)",
     "8 bytes is too short for the MLX header and a flatbuffer"),
    (b"\0\0\0\0VH00", "X", TruncatedError, "Vulkan header (VH00)",
     "8 bytes is too short for the Vulkan header"),
    (b"vela_bin_stream\0", "X", TruncatedError, "Vela block at +0x0",
     "16 bytes left, a block header needs 32"),
    (b"VGF1", "X", TruncatedError, "VGF header", "4 bytes is too short for the 128-byte VGF "
                                                 "header"),
    (struct.pack("<I", 0xF0E1D2C3), "X", TruncatedError, "VGF header",
     "4 bytes is too short for the 128-byte VGF header"),
    # the first parser in BACKENDS order wins
    (b"VGF1XH00", "X", TruncatedError, "XNNPACK header (XH00)",
     "8 bytes is too short for the 30-byte XNNPACK header"),
    (b"CMJRVH00", "X", TruncatedError, "Vulkan header (VH00)",
     "8 bytes is too short for the Vulkan header"),
])
def test_detection_by_magic(blob, bid, cls, structure, detail):
    fails(blob, bid, cls, structure, 0, detail)


@pytest.mark.parametrize("blob", [b"\0\0\0\0XH0", b"\0\0\0\0XN0", b"\0\0\0\0MP0", b"\0\0\0\0MLX",
                                  b"\0\0\0\0VH0", b"\0\0\0\0VK0", b"vela_bin_stream",
                                  b"vela_bin_streamX", b"VGF", b"\xc3\xd2\xe1", b"\xcd\xab\x78",
                                  b"CMJ", b"\0\0\0\0XN02", b"\0\0\0\0VK01"])
def test_too_short_or_other_magic_is_unknown(blob):
    assert look(blob, "Anything").backend == "unknown"


def test_bare_graphs_and_headerless_mps_are_detected():
    for head, graph in ((b"\0\0\0\0XN01", "XNNGraph"), (b"\0\0\0\0XN00", "XNNGraph"),
                        (b"\0\0\0\0VK00", "VkGraph"), (CTX + b"MP00", "MPSGraph")):
        with pytest.raises(wb.ArtifactError) as e:
            look(head, "X")
        assert e.value.structure.startswith(f"forward delegate 0 (X): {graph}"), e.value


def test_kernel_findings_exact():
    from workbench.formats.delegates import kernel_findings

    ops = ["cadence::a", "aten::add", "cadence::b", "cortex_m::x", "noscope", "llama::sdpa",
           "torchao::q", "qnn_custom::c", "executorch_cuda::k", "quantized_decomposed::d",
           "cadence"]
    got = kernel_findings(iter(ops))
    assert got == [
        Finding("info", "Program.execution_plan.operators", None,
                f"{k} of 11 operators are {ns}:: kernels ({desc}); this program carries no "
                "delegate blob")
        for ns, k, desc in (
            ("cadence", 2, "Cadence (Xtensa HiFi / Fusion DSP kernels)"),
            ("cortex_m", 1, "Arm Cortex-M (CMSIS-NN kernels)"),
            ("llama", 1, "ExecuTorch LLM custom ops (sdpa_with_kv_cache, update_cache, ...)"),
            ("torchao", 1, "torchao low-bit kernels"),
            ("qnn_custom", 1, "Qualcomm custom ops"),
            ("executorch_cuda", 1, "ExecuTorch CUDA custom ops"),
            ("quantized_decomposed", 1, "quantized kernels (quantize / dequantize ops)"))]
    (f,) = kernel_findings(["cortex_m::x"], iter(["XnnpackBackend"]))
    assert f.message == "1 of 1 operators are cortex_m:: kernels (Arm Cortex-M (CMSIS-NN kernels))"
    assert kernel_findings(["aten::mm", "::x", "cadence"]) == []
    assert kernel_findings([]) == []


# -- many XNNPACK blobs in one pass --------------------------------------------------------------

def _clean_values_doc() -> dict:
    doc = _xnn_values_doc()
    del doc["xvalues"][10]
    return doc


def _many_xnn(tmp_path):
    docs = [_clean_values_doc(), _small_doc(version="b", num_externs=2),
            _small_doc(xnodes=[], xvalues=[_plain(_tv("fp16", [3, 1], id_out=5))],
                       constant_data=[{"offset": 0, "size": 0}])]
    blobs, buf, items = [], b"\x99" * 40, []
    for k, doc in enumerate(docs):
        (tmp_path / str(k)).mkdir()
        blob = _xnn(flatc(XNN_SCHEMA, doc, tmp_path / str(k)), bytes(range(64)))
        items.append((len(buf), len(blob), "XnnpackBackend", f"m{k}", k))
        buf += blob + b"\x99" * (16 + 8 * k)
        blobs.append(blob)
    named = {"kw": (FILE, 5000, 16), "gone": ("o.ptd", 1, 8)}
    return buf, items, named


def _same_info(a, b) -> None:
    assert (a.backend, a.backend_id, a.layout, a.file, a.offset, a.size, a.method, a.index,
            a.header, a.subsegments, a.findings, a.named_keys) == (
        b.backend, b.backend_id, b.layout, b.file, b.offset, b.size, b.method, b.index,
        b.header, b.subsegments, b.findings, b.named_keys)
    assert column_rows(a.tensors) == column_rows(b.tensors)
    assert column_rows(a.nodes) == column_rows(b.nodes)


def test_inspect_blobs_reads_xnnpack_blobs_in_one_pass(tmp_path, monkeypatch):
    import gc

    from workbench.formats.delegates import xnnpack

    buf, items, named = _many_xnn(tmp_path)
    alone = [inspect_blob(buf, file=FILE, offset=o, size=z, backend_id=b, method=m, index=i,
                          named_data=named) for o, z, b, m, i in items]
    _reader(monkeypatch, True)
    calls = []
    one_pass = xnnpack.parse_many

    def spy(group):
        out = one_pass(group)  # raises when the one pass gives up
        calls.append(len(out))
        return out

    monkeypatch.setattr(xnnpack, "parse_many", spy)
    many = inspect_blobs(memoryview(buf), items, file=FILE, named_data=named)
    assert calls == [3] and gc.isenabled()
    for a, b in zip(many, alone):
        _same_info(a, b)
    assert [i.header["version"] for i in many] == ["v9", "b", ""]
    assert [i.header["num_externs"] for i in many] == [3, 2, 0]
    assert column_rows(many[2].tensors)[0]["name"] == "m2/delegate2/5"
    # another id: the same records with the id finding
    items2 = [(o, z, "Other" if i == 1 else b, m, i) for o, z, b, m, i in items]
    many = inspect_blobs(buf, items2, file=FILE, named_data=named)
    assert many[1].findings == [Finding("info", "m1 delegate 1 (Other)", many[1].offset,
                                        "the program calls this xnnpack blob 'Other' (expected "
                                        "XnnpackBackend)")]
    gc.disable()
    try:
        inspect_blobs(buf, items, file=FILE, named_data=named)
        assert not gc.isenabled()
    finally:
        gc.enable()
    # one blob alone is not batched
    calls.clear()
    (one,) = inspect_blobs(buf, items[:1], file=FILE, named_data=named)
    assert calls == []
    _same_info(one, alone[0])


def test_inspect_blobs_falls_back_one_by_one(tmp_path, monkeypatch):
    from workbench.formats.delegates import xnnpack

    buf, items, named = _many_xnn(tmp_path)
    calls = []
    one_pass = xnnpack.parse_many

    def spy(group):
        calls.append(len(group))
        return one_pass(group)

    monkeypatch.setattr(xnnpack, "parse_many", spy)
    # a named key missing: a finding, which only the one-by-one reading makes
    got = inspect_blobs(buf, items, file=FILE, named_data={"kw": (FILE, 5000, 16)})
    assert calls == [3]
    assert [f.message for f in got[0].findings] == [
        "1 named key(s) not found in the program's named data or the attached data files, "
        "e.g. 'gone'"]
    for (o, z, b, m, i), info in zip(items, got):
        _same_info(info, inspect_blob(buf, file=FILE, offset=o, size=z, backend_id=b, method=m,
                                      index=i, named_data={"kw": (FILE, 5000, 16)}))
    # a corrupt blob among them: the error of reading it alone
    bad = bytearray(buf)
    o, z = items[1][:2]
    struct.pack_into("<H", bad, o + 8, 3)  # header length 3
    with pytest.raises(CorruptError) as e:
        inspect_blobs(bytes(bad), items, file=FILE, named_data=named)
    assert (e.value.structure, e.value.offset) == (
        "m1 delegate 1 (XnnpackBackend): XNNPACK header (XH00).length", o + 8)
    # blobs that cannot be batched: out of the buffer, too short, not XH00
    short = [(len(buf) - 4, 8, "XnnpackBackend", "s", 0), (-1, 8, "X", "s", 1)]
    with pytest.raises(OutOfBoundsError):
        inspect_blobs(buf, items + short[:1], file=FILE, named_data=named)
    calls.clear()
    got = inspect_blobs(buf, [items[0], (0, 7, "X", "z", 9), (0, 40, "X", "z", 8)], file=FILE,
                        named_data=named)
    assert calls == [] and [i.backend for i in got] == ["xnnpack", "unknown", "unknown"]


def test_vulkan_roles(tmp_path):
    def tensor(cid=-1):
        return {"value_type": "VkTensor", "value": {"datatype": "FLOAT32", "dims": [1],
                                                    "constant_id": cid}}

    doc = {"values": [tensor(), tensor(), tensor(), tensor(), tensor(0)],
           "input_ids": [1, 3, 4], "output_ids": [2, 3, 4],
           "constants": [{"offset": 0, "length": 0}]}
    info = look(flatc(VK_SCHEMA, doc, tmp_path), "VulkanBackend")
    assert [r["role"] for r in column_rows(info.tensors)] == [
        "internal", "input", "output", "input", "constant"]


@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_node_ids_dense_and_sparse(fast, tmp_path, monkeypatch):
    """Value ids looked up in a table (dense ids) or by sorting (sparse ones): the same."""
    def graph(ids, uses):
        add = {"input1_id": uses[0], "input2_id": uses[1], "output_id": uses[2]}
        doc = {"xvalues": [_plain(_tv("fp32", [1], id_out=i)) for i in ids],
               "xnodes": [{"xnode_union_type": "XNNAdd", "xnode_union": add}],
               "constant_data": [{"offset": 0, "size": 0}]}
        return look(_xnn(flatc(XNN_SCHEMA, doc, tmp_path)), "XnnpackBackend").findings

    _reader(monkeypatch, fast)
    assert graph([0, 1, 2, 3], [0, 0, 1]) == []      # the largest id unused by the nodes
    assert graph([3, 2, 1, 0], [0, 1, 2]) == []
    assert graph([5000, 7], [5000, 7, 7]) == []      # sparse: more than 4 x values + 1024
    assert graph([0], [0, 0, 0]) == []
    for ids, uses, n, eg in (([0, 1, 2, 3], [0, 4, 1], 1, 4), ([0, 1], [8, 9, 1], 2, 8),
                             ([5000, 7], [5000, 6, 5001], 2, 6), ([1, 2], [0, 0, 3], 2, 0),
                             ([2000], [1, 2000, 2001], 2, 1)):
        (f,) = graph(ids, uses)
        assert f.message == (f"nodes refer to {n} value id(s) that no xvalue defines, "
                             f"e.g. {eg}"), (ids, uses)


@pytest.mark.parametrize("keys", [
    ["a" * 64, "b" * 64, "scale_" + "c" * 64, "k", "a" * 64],            # few lengths
    [f"{'x' * n}" for n in range(1, 11)],                                # more than 8 lengths
    ["s" * 1025, "t"],                                                   # a long key
    ["ké", "plain"],                                                     # not ASCII
])
@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_named_keys(keys, fast, tmp_path, monkeypatch):
    _reader(monkeypatch, fast)
    doc = {"constant_data": [{"offset": 0, "size": 0}] + [
        {"offset": NAMED, "size": 4, "named_key": k} for k in keys],
        "xvalues": [_plain(_tv("fp32", [1], cbi=k + 1, id_out=k)) for k in range(len(keys))]}
    fb = flatc(XNN_SCHEMA, doc, tmp_path)
    named = {k: ("d.ptd", 64 * n, 4) for n, k in enumerate(keys)}
    info = look(_xnn(fb), "XnnpackBackend", named=named)
    rows = column_rows(info.tensors)
    assert [r["named_key"] for r in rows] == keys
    assert [(r["storage"], r["file"], r["offset"], r["missing"]) for r in rows] == [
        ("external", "d.ptd", named[k][1], 0) for k in keys]
    assert info.named_keys == tuple(dict.fromkeys(keys)) and info.findings == []


@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_constant_parts_and_findings(fast, tmp_path, monkeypatch):
    _reader(monkeypatch, fast)

    def graph(constant_data, values, consts=bytes(64), named=None):
        doc = {"constant_data": [{"offset": 0, "size": 0}, *constant_data], "xvalues": values}
        fb = flatc(XNN_SCHEMA, doc, tmp_path)
        blob = _xnn(fb, consts)
        cd = len(blob) - len(consts)
        info = look(blob, "XnnpackBackend", named=named)
        return info, fb, cd

    def parts(info, cd):
        return [(s.name, s.offset - AT - cd, s.size) for s in info.subsegments
                if s.offset - AT >= cd]

    v = _plain
    # two values share one entry, two entries share one range, one range is only scales
    info, fb, cd = graph(
        [{"offset": 0, "size": 16}, {"offset": 16, "size": 8}, {"offset": 16, "size": 8},
         {"offset": 32, "size": 8}, {"offset": 48, "size": 0}],
        [v(_tv("fp32", [4], cbi=1, id_out=3)), v(_tv("fp32", [2], cbi=2, id_out=4)),
         v(_tv("fp32", [4], cbi=1, id_out=5)), v(_tv("fp32", [2], cbi=3, id_out=6)),
         v(_tv("fp32", [2], cbi=1, id_out=7)),
         _quant(_tv("qcint8", [2], id_out=8), "PerChannelQuant", {"scale_buffer_idx": 4}),
         v(_tv("fp32", [0], cbi=5, id_out=9))])
    assert parts(info, cd) == [("constant_data[1] value 3 (+2)", 0, 16),
                               ("constant_data[2] (+1 entries) value 4 (+1)", 16, 8),
                               ("padding", 24, 8), ("constant_data[4] scales", 32, 8),
                               ("padding", 40, 24)]
    assert info.findings == []
    # overlapping entries: one range, with a warning
    info, fb, cd = graph([{"offset": 0, "size": 16}, {"offset": 8, "size": 16}],
                         [v(_tv("fp32", [4], cbi=1, id_out=0)),
                          v(_tv("fp32", [4], cbi=2, id_out=1))])
    assert parts(info, cd) == [("constant data", 0, 64)]
    assert info.findings == [Finding("warning", "XNNGraph.constant_data", AT + cd + 8,
                                     "constant_data entries [2] overlap other entries; the "
                                     "constant data is shown as one range")]
    # nothing references the constant data
    info, fb, cd = graph([{"offset": 0, "size": 16}], [v(_tv("fp32", [4], id_out=0))])
    assert parts(info, cd) == [("constant data (unreferenced)", 0, 64)]
    info, fb, cd = graph([], [v(_tv("fp32", [4], id_out=0))], consts=b"")
    assert [s.kind for s in info.subsegments if s.kind != "padding"] == ["header", "flatbuffer"]
    # too few bytes for the shape; named data shorter than the entry
    info, fb, cd = graph([{"offset": 0, "size": 15}, {"offset": NAMED, "size": 8,
                                                       "named_key": "n"},
                          {"offset": 16, "size": 1}],
                         [v(_tv("fp32", [4], cbi=1, id_out=10)),
                          v(_tv("fp32", [2], cbi=2, id_out=11)),
                          v(_tv("qcint4", [3], cbi=3, id_out=12))],
                         named={"n": (FILE, 9000, 7)})
    root = fb_root(fb)
    c2 = fb_tables(fb, root, 8)[2]
    t0 = fb_ref(fb, fb_tables(fb, root, 2)[0], 1)
    assert info.findings == [
        Finding("error", "XNNGraph.constant_data[2]", AT + 32 + c2,
                "1 named-data entries are shorter than the graph says, e.g. 'n': 7 bytes, the "
                "graph expects 8"),
        Finding("error", "XNNGraph.xvalues[0]", AT + 32 + t0,
                "2 constant(s) hold fewer bytes than their shape needs, e.g. value 10: 15 < 16")]
    rows = column_rows(info.tensors)
    assert [(r["nbytes"], r["data_size"]) for r in rows] == [(16, 15), (8, 8), (2, 1)]
    # an empty named_key next to an offset
    info, fb, cd = graph([{"offset": 0, "size": 4, "named_key": ""},
                          {"offset": 8, "size": 4, "named_key": ""}],
                         [v(_tv("fp32", [1], cbi=1, id_out=0))])
    c1 = fb_tables(fb, fb_root(fb), 8)[1]
    assert info.findings == [Finding(
        "warning", "XNNGraph.constant_data[1]", AT + 32 + c1,
        "2 entries have an empty named_key field next to an offset: ExecuTorch's runtime takes "
        "any present named_key as a named-data lookup (of the key \"\") and fails to load them")]
    assert column_rows(info.tensors)[0]["named_key"] is None
    # 4-bit scalars take one byte, 4-bit values with an empty last dimension none
    info, fb, cd = graph([], [v(_tv("qcint4", [], id_out=0)), v(_tv("qbint4", [3, 0], id_out=1)),
                              v(_tv("qcint4", [0, 3], id_out=2)),
                              v(_tv("qcint4", [2, 2, 5], id_out=3))])
    assert [r["nbytes"] for r in column_rows(info.tensors)] == [1, 0, 0, 12]


def _truncated_vector(blob: bytes, at: int, bid: str, field: str, elem: int, fb_end: int):
    """Set the count of the vector at blob position ``at`` past the end: a TruncatedError
    at ``at`` naming the field."""
    bad = patched(blob, at, "<I", 1 << 28)
    for whole in (False, True):
        with pytest.raises(wb.ArtifactError) as e:
            look(bad, bid, whole=whole)
        assert type(e.value) is TruncatedError, e.value
        assert e.value.offset == AT + at
        # (the flatbuffer reader of the sample run named table vectors twice: "G.G.field")
        assert e.value.structure.startswith(f"forward delegate 0 ({bid}): "), e.value
        assert e.value.structure.endswith(field), e.value
        assert e.value.detail.startswith(f"vector of {1 << 28} x {elem}-byte elements runs past "
                                         "the end of the ")
        shift = AT if whole else 0
        assert e.value.detail.endswith(f" flatbuffer (0x{shift + fb_end:x})"), e.value.detail


def test_mps_vectors_past_the_end_name_the_field():
    fb = _mps_graph(MPS_VALUES, inputs=[1], outputs=[2], nodes=[1])
    blob = _mps_headed(fb, MPS_CONSTS)
    fb_end = len(blob) - len(MPS_CONSTS)
    root = fb_root(fb)
    v5 = fb_tables(fb, root, 2)[5]
    for at, field, elem in ((fb_ref(fb, root, 0), "MPSGraph.version", 1),
                            (fb_ref(fb, root, 1), "MPSGraph.mps_nodes", 4),
                            (fb_ref(fb, root, 2), "MPSGraph.mps_values", 4),
                            (fb_ref(fb, root, 3), "MPSGraph.input_ids", 4),
                            (fb_ref(fb, root, 4), "MPSGraph.output_ids", 4),
                            (fb_ref(fb, v5, 2), "MPSGraph.mps_values[5].dims", 4),
                            (fb_ref(fb, fb_ref(fb, v5, 4), 0),
                             "MPSGraph.mps_values[5].constant_buffer.storage", 1)):
        _truncated_vector(blob, 24 + at, "MPSBackend", field, elem, fb_end)


def test_vulkan_vectors_past_the_end_name_the_field(tmp_path):
    fb = flatc(VK_SCHEMA, _vk_doc(), tmp_path)
    blob = _vk(fb, bytes(48))
    root = fb_root(fb)
    fb_end = 32 + len(fb)
    t0 = _vk_values(fb)[0]
    for at, field, elem in ((fb_ref(fb, root, 0), "VkGraph.version", 1),
                            (fb_ref(fb, root, 1), "VkGraph.chain", 4),
                            (fb_ref(fb, root, 2), "VkGraph.values", 4),
                            (fb_ref(fb, root, 3), "VkGraph.input_ids", 4),
                            (fb_ref(fb, root, 4), "VkGraph.output_ids", 4),
                            (fb_ref(fb, root, 5), "VkGraph.constants", 4),
                            (fb_ref(fb, root, 6), "VkGraph.shaders", 4),
                            (fb_ref(fb, fb_tables(fb, root, 5)[1], 2),
                             "VkGraph.constants[1].named_key", 1),
                            (fb_ref(fb, t0, 1), "VkGraph.values[0].value.dims", 4)):
        _truncated_vector(blob, 32 + at, "VulkanBackend", field, elem, fb_end)


def _undeprecated_schema(tmp_path) -> str:
    """ExecuTorch's XN01 schema with ``scale_bf16`` writable (flatc skips deprecated fields;
    the field keeps its slot)."""
    text = (_executorch_dir() / XNN_SCHEMA).read_text()
    fixed = text.replace("scale_bf16:[ushort] (deprecated);", "scale_bf16:[ushort];")
    assert fixed != text
    path = tmp_path / "xnn_bf16.fbs"
    path.write_text(fixed)
    return str(path)


@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_inline_bfloat16_group_scales(fast, tmp_path, monkeypatch):
    _reader(monkeypatch, fast)
    schema = _undeprecated_schema(tmp_path)
    g = "PerChannelGroupQuant"
    doc = {"constant_data": [{"offset": 0, "size": 0}],
           "xvalues": [_quant(_tv("qbint4", [2, 4], id_out=0), g,
                              {"group_size": 2, "scale_bf16": [0x3F80, 0x4000, 0x4040, 0x4080]}),
                       _quant(_tv("qbint4", [1, 4], id_out=1), g,
                              {"group_size": 2, "scale": [1.0, 2.0], "scale_bf16": [1, 2]}),
                       _quant(_tv("qbint4", [1, 2], id_out=2), g,
                              {"group_size": 2, "scale_bf16": [], "num_scales": 1})]}
    fb = flatc(schema, doc, tmp_path)  # (an absolute schema path)
    info = look(_xnn(fb), "XnnpackBackend")
    xv = fb_tables(fb, fb_root(fb), 2)

    def qp(i):
        return fb_ref(fb, fb_ref(fb, xv[i], 1), 2)

    rows = column_rows(info.tensors)
    assert [(r["scale_dtype"], r["scale_storage"], r["scale_offset"], r["scale_nbytes"],
             r["num_scales"]) for r in rows] == [
        ("bfloat16", "inline", AT + 32 + fb_ref(fb, qp(0), 3) + 4, 8, 4),
        ("float32", "inline", AT + 32 + fb_ref(fb, qp(1), 0) + 4, 8, 2),
        ("bfloat16", None, MISSING, MISSING, 1)]
    assert [f.message for f in info.findings] == [
        "1 per-channel quantized value(s) have neither inline scales nor a scale buffer"]


def test_inspect_blobs_with_an_xn00_blob_reads_one_by_one(tmp_path, monkeypatch):
    from workbench.formats.delegates import xnnpack

    (tmp_path / "a").mkdir()
    xn01 = _xnn(flatc(XNN_SCHEMA, _small_doc(), tmp_path / "a"), bytes(16))
    xn00 = _xnn(flatc(XN00_SCHEMA, _xn00_doc(), tmp_path))
    buf = xn01 + xn00 + xn01
    items = [(0, len(xn01), "XnnpackBackend", "f", 0),
             (len(xn01), len(xn00), "XnnpackBackend", "f", 1),
             (len(xn01) + len(xn00), len(xn01), "XnnpackBackend", "f", 2)]
    passes = []
    one_pass = xnnpack.parse_many

    def spy(group):
        out = one_pass(group)
        passes.append(len(out))
        return out

    monkeypatch.setattr(xnnpack, "parse_many", spy)
    got = inspect_blobs(buf, items, file=FILE)
    assert passes == []  # the XN00 graph made the pass give up
    for (o, z, b, m, i), info in zip(items, got):
        _same_info(info, inspect_blob(buf, file=FILE, offset=o, size=z, backend_id=b, method=m,
                                      index=i))
    assert [i.header["identifier"] for i in got] == ["XN01", "XN00", "XN01"]
    got = inspect_blobs(buf, [items[0], items[2]], file=FILE)
    assert passes == [2] and got[1].offset == items[2][0]


@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_root_vectors_past_the_end_name_the_field(fast, tmp_path, monkeypatch):
    monkeypatch.setattr(readpath, "TIER", read_tier(fast))
    doc = _small_doc(version="v", input_ids=[0], output_ids=[1])
    fb = flatc(XNN_SCHEMA, doc, tmp_path)
    blob = _xnn(fb, bytes(16))
    root = fb_root(fb)
    for slot, field, elem in ((0, "XNNGraph.version", 1), (1, "XNNGraph.xnodes", 4),
                              (2, "XNNGraph.xvalues", 4), (4, "XNNGraph.input_ids", 4),
                              (5, "XNNGraph.output_ids", 4), (8, "XNNGraph.constant_data", 4)):
        _truncated_vector(blob, 32 + fb_ref(fb, root, slot), "XnnpackBackend", field, elem,
                          32 + len(fb))
    fb = flatc(XN00_SCHEMA, _xn00_doc(), tmp_path)
    root = fb_root(fb)
    _truncated_vector(fb, fb_ref(fb, root, 6), "XnnpackBackend", "XNNGraph.constant_buffer", 4,
                      len(fb))
    buf1 = fb_tables(fb, root, 6)[1]
    _truncated_vector(fb, fb_ref(fb, buf1, 0), "XnnpackBackend",
                      "XNNGraph.constant_buffer[1].storage", 1, len(fb))


@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_named_key_not_utf8(fast, tmp_path, monkeypatch):
    monkeypatch.setattr(readpath, "TIER", read_tier(fast))
    doc = _small_doc(constant_data=[{"offset": 0, "size": 0},
                                    {"offset": NAMED, "size": 8, "named_key": "abc"}])
    fb = flatc(XNN_SCHEMA, doc, tmp_path)
    key = fb_ref(fb, fb_tables(fb, fb_root(fb), 8)[1], 2)
    for byte in (0x80, 0xFF):
        bad = _xnn(patched(fb, key + 5, "<B", byte), bytes(16))
        fails(bad, "XnnpackBackend", CorruptError, "XNNGraph.constant_data[1].named_key",
              32 + key + 5, "string is not valid UTF-8 (invalid start byte)")


def test_inspect_blobs_refuses_references_into_another_blob(tmp_path):
    """One pass reads all graphs through one window: a reference of blob A into blob B's
    bytes must still be the error of reading A alone."""
    doc = _small_doc(constant_data=[{"offset": 0, "size": 0},
                                    {"offset": NAMED, "size": 8, "named_key": "abc"}])
    fb = flatc(XNN_SCHEMA, doc, tmp_path)
    a = _xnn(fb, bytes(16))
    root = fb_root(fb)
    xv = fb_tables(fb, root, 2)
    t0 = fb_ref(fb, xv[0], 1)
    c1 = fb_tables(fb, root, 8)[1]
    targets = {  # (position of the reference in the graph, position it should point to)
        "table": (fb_ref(fb, root, 2) + 4, xv[0]),
        "vector": (fb_field(fb, t0, 2), fb_ref(fb, t0, 2)),
        "string": (fb_field(fb, c1, 2), fb_ref(fb, c1, 2)),
        "tensor": (fb_field(fb, xv[0], 1), t0),
        "node": (fb_ref(fb, root, 1) + 4, fb_tables(fb, root, 1)[0]),  # only tables in it
    }
    for what, (ref_at, target) in targets.items():
        # A's reference moved to the same structure in B (right after A)
        rel = struct.unpack_from("<I", fb, ref_at)[0]
        bad_fb = patched(fb, ref_at, "<I", rel + len(a))
        bad_a = _xnn(bad_fb, bytes(16))
        assert len(bad_a) == len(a) and target == ref_at + rel
        buf = bad_a + a
        items = [(0, len(a), "XnnpackBackend", "f", 0), (len(a), len(a), "XnnpackBackend", "f", 1)]
        named = {"abc": (FILE, 1, 8)}
        with pytest.raises(wb.ArtifactError) as alone:
            inspect_blob(buf, file=FILE, offset=0, size=len(a), backend_id="XnnpackBackend",
                         method="f", index=0, named_data=named)
        with pytest.raises(wb.ArtifactError) as many:
            inspect_blobs(buf, items, file=FILE, named_data=named)
        assert (type(many.value), many.value.structure, many.value.offset, many.value.detail) == (
            type(alone.value), alone.value.structure, alone.value.offset,
            alone.value.detail), what


@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_unknown_union_types(fast, tmp_path, monkeypatch):
    monkeypatch.setattr(readpath, "TIER", read_tier(fast))
    doc = _small_doc()
    doc["xvalues"].append(_quant(_tv("qint8", [1], id_out=2), "PerTensorQuant", {"scale": 1.0}))
    fb = flatc(XNN_SCHEMA, doc, tmp_path)
    root = fb_root(fb)
    xv = fb_tables(fb, root, 2)
    node = fb_tables(fb, root, 1)[0]
    q = fb_ref(fb, xv[2], 1)
    for at, value, structure, n in (
            (fb_field(fb, xv[1], 0), 3, "XNNGraph.xvalues[1].xvalue_union", 3),
            (fb_field(fb, xv[1], 0), 255, "XNNGraph.xvalues[1].xvalue_union", 3),
            (fb_field(fb, node, 0), 48, "XNNGraph.xnodes[0].xnode_union", 48),
            (fb_field(fb, q, 1), 5, "XNNGraph.xvalues[2].xvalue_union.quant_params", 5)):
        bad = _xnn(patched(fb, at, "<B", value), bytes(16))
        fails(bad, "XnnpackBackend", CorruptError, structure, 32 + at,
              f"union type {value} is unknown (max {n - 1})")
    # the last member of each union is read
    ok = patched(fb, fb_field(fb, node, 0), "<B", 47)  # XNNCos: input_id, output_id, flags
    (row,) = column_rows(look(_xnn(ok, bytes(16)), "XnnpackBackend").nodes)
    assert row["op"] == "Cos"


@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_inline_float32_scales_take_four_bytes_each(fast, tmp_path, monkeypatch):
    """Inline per-channel (and group) float32 scales span exactly 4 bytes per scale on both
    readers, whatever their count (8 and 10 scales: 32 and 40 bytes)."""
    _reader(monkeypatch, fast)
    doc = {"constant_data": [{"offset": 0, "size": 0}],
           "xvalues": [_quant(_tv("qcint8", [8, 2], id_out=0), "PerChannelQuant",
                              {"scale": [float(k) for k in range(1, 9)], "channel_dim": 0}),
                       _quant(_tv("qbint4", [2, 10], id_out=1), "PerChannelGroupQuant",
                              {"scale": [0.5] * 10, "channel_dim": 0, "group_size": 2})]}
    fb = flatc(XNN_SCHEMA, doc, tmp_path)
    info = look(_xnn(fb), "XnnpackBackend")
    xv = fb_tables(fb, fb_root(fb), 2)
    scales = [AT + 32 + fb_ref(fb, fb_ref(fb, fb_ref(fb, xv[i], 1), 2), 0) + 4 for i in (0, 1)]
    rows = column_rows(info.tensors)
    assert [(r["scale_dtype"], r["scale_storage"], r["scale_file"], r["scale_offset"],
             r["scale_nbytes"], r["num_scales"]) for r in rows] == [
        ("float32", "inline", FILE, scales[0], 32, 8),
        ("float32", "inline", FILE, scales[1], 40, 10)]
    assert info.findings == []


@pytest.mark.parametrize("fast", [True, False])
def test_xnnpack_graph_without_nodes_keeps_integer_node_columns(fast, tmp_path, monkeypatch):
    """A graph with no xnodes gives empty node columns of the documented dtypes (int64 flags,
    not numpy's float64 default), so that concatenating it with another blob's nodes keeps
    the flags integers."""
    from workbench.formats.delegates._columns import node_columns

    _reader(monkeypatch, fast)
    empty = look(_xnn(flatc(XNN_SCHEMA, _small_doc(xnodes=[]), tmp_path), bytes(16)),
                 "XnnpackBackend", index=0)
    assert {k: (np.asarray(v.codes if isinstance(v, Coded) else v).dtype, len(v))
            for k, v in empty.nodes.items()} == {
        "node": (np.int64, 0), "op": (np.int64, 0), "inputs": (object, 0),
        "outputs": (object, 0), "flags": (np.int64, 0), "debug_handle": (np.int64, 0),
        "output_min": (np.float64, 0), "output_max": (np.float64, 0)}
    add = {"input1_id": 0, "input2_id": 0, "output_id": 1, "flags": 3}
    full = look(_xnn(flatc(XNN_SCHEMA, _small_doc(xnodes=[
        {"xnode_union_type": "XNNAdd", "xnode_union": add}]), tmp_path), bytes(16)),
        "XnnpackBackend", index=1)
    cols = node_columns([empty, full])
    assert cols["flags"].dtype == np.int64 and cols["flags"].tolist() == [3]
    assert [type(v) for v in cols["flags"].tolist()] == [int]
