"""Delegate blobs of every backend: recognition, header fields, sub-segments that cover each
blob exactly, and hostile blobs (only ``ArtifactError``, naming file, structure and offset;
bounded time and memory).

Real files where they exist (samples made by the real exporters, ``../shared/corpus/``);
otherwise blobs of the documented layout built here, with ExecuTorch's own writers where it
has them (``VulkanDelegateHeader``, ``XNNHeader``, ``executorchcoreml.flatten_directory_contents``,
``arm_vela``'s block header and ``vela_bin_pack_io``) and ``struct`` / ``flatbuffers`` otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import random
import re
import struct
import subprocess
import time
import tracemalloc

import numpy as np
import pytest
from helpers import TIME_SCALE

import workbench as wb
from workbench import readpath
from workbench.formats.delegates import (
    BACKENDS,
    Finding,
    inspect_blob,
    kernel_findings,
    node_columns,
    tensor_columns,
)
from workbench.frames import build

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
CORPUS = ROOT.parent / "shared" / "corpus"
ETHOSU = CORPUS / "Arm-Examples__CMSIS-Executorch__ai_layer__engine__model__ethos_u_minimal_example.pte"
OPENVINO = CORPUS / ("corey-cole__djl-executorch-engine__src__test__resources__models__"
                     "openvino__openvino_tiny.pte")
KEY = "ab" * 32


def covers(info) -> None:
    """The sub-segments tile ``[offset, offset + size)``: in order, no gap, no overlap."""
    at = info.offset
    for s in info.subsegments:
        assert s.offset == at and s.size > 0, (s, at)
        at += s.size
    assert at == info.offset + info.size, info.subsegments


def file_blobs(path: pathlib.Path):
    """(delegates row, BlobInfo, raw bytes) of every delegate of a real file."""
    if not path.is_file():
        pytest.skip(f"{path.name} is not there")
    art = wb.open(path)
    nd = art.frames["named_data"]
    named = {k: (f, o, s) for k, f, o, s in zip(nd["key"], nd["file"], nd["offset"], nd["size"])}
    raw = path.read_bytes()
    out = []
    for _, d in art.frames["delegates"].iterrows():
        info = inspect_blob(memoryview(raw), file=str(path), offset=int(d["offset"]),
                            size=int(d["size"]), backend_id=d["id"], method=d["method"],
                            index=int(d["index"]), named_data=named)
        out.append((d, info, raw))
    return out


def _executorch_dir() -> pathlib.Path:
    spec = importlib.util.find_spec("executorch")
    if spec is None:
        pytest.skip("executorch is not installed")
    return pathlib.Path(next(iter(spec.submodule_search_locations)))


# -- every real delegate blob here --------------------------------------------------------------

REAL = [*sorted(SAMPLES.glob("*.pte")), ETHOSU, OPENVINO,
        CORPUS / "pytorch__executorch__xnnpack_add.ff",
        CORPUS / "corey-cole__executorch-numpy-runtime__tests__models__quantized.pte"]


@pytest.mark.parametrize("path", REAL, ids=[p.name[:40] for p in REAL])
def test_every_real_blob_is_recognised_and_covered(path):
    for d, info, _ in file_blobs(path):
        covers(info)
        assert info.backend != "unknown", (d["id"], info.findings)
        assert info.backend_id == d["id"] and info.offset == d["offset"]
        assert not [f for f in info.findings if f.severity == "error"]
        if info.backend == "xnnpack":
            assert info.findings == [], info.findings
        rows = info.segment_rows()
        assert sum(r[1] for r in rows) == d["size"]
        assert all(r[2].startswith(f"{d['method']} delegate {d['index']} ({d['id']}): ")
                   for r in rows)


def test_frames_build_with_declared_dtypes():
    infos = [i for p in REAL if p.is_file() for _, i, _ in file_blobs(p)]
    t = build("delegate_tensors", tensor_columns(infos))
    n = build("delegate_nodes", node_columns(infos))
    from workbench.frames import SCHEMAS

    for name, frame in (("delegate_tensors", t), ("delegate_nodes", n)):
        declared = {c.name: c.dtype for c in SCHEMAS[name]}
        assert list(frame.columns) == [c for c in declared if c in frame.columns]
        for col in frame.columns:
            assert str(frame[col].dtype) == declared[col] or (
                declared[col] == "string" and str(frame[col].dtype).startswith("string")), col
    expected = {"XnnpackBackend", "VulkanBackend"} | ({"EthosUBackend"} if ETHOSU.is_file() else set())
    assert set(t["delegate"]) >= expected  # the Ethos-U program comes from ../shared/corpus
    assert (t.groupby(["delegate", "method", "index"], observed=True).size() > 0).all()
    empty = build("delegate_tensors", tensor_columns([]))
    assert len(empty) == 0


# -- Vulkan: the sample against ExecuTorch's header reader and flatc -----------------------------

def test_vulkan_sample_against_executorch(sample, tmp_path):
    ser = pytest.importorskip("executorch.backends.vulkan.serialization.vulkan_graph_serialize")
    (_d, info, raw), = file_blobs(sample("mlp_vulkan.pte"))
    blob = raw[info.offset:info.offset + info.size]
    h = ser.VulkanDelegateHeader.from_bytes(blob[:ser.VulkanDelegateHeader.EXPECTED_LENGTH])
    for f in ("flatbuffer_offset", "flatbuffer_size", "bytes_offset", "bytes_size"):
        assert info.header[f] == getattr(h, f)
    ex = _executorch_dir()
    fb = ser.extract_vk_flatbuffer(blob)
    (tmp_path / "g.bin").write_bytes(fb)
    subprocess.run([str(ex / "data/bin/flatc"), "--json", "--strict-json", "--defaults-json",
                    "--raw-binary", "-o", str(tmp_path),
                    str(ex / "backends/vulkan/serialization/schema.fbs"), "--",
                    str(tmp_path / "g.bin")], check=True, capture_output=True)
    j = json.loads((tmp_path / "g.json").read_text())
    t = build("delegate_tensors", tensor_columns([info]))
    tensors = [(k, v["value"]) for k, v in enumerate(j["values"]) if v["value_type"] == "VkTensor"]
    assert t["value"].tolist() == [k for k, _ in tensors]
    for (_k, v), (_, row) in zip(tensors, t.iterrows()):
        assert row["dtype"] == v["datatype"].lower()
        assert row["shape"] == tuple(v["dims"])
        cid = v["constant_id"]
        if cid >= 0:
            c = j["constants"][cid]
            assert row["named_key"] == c["named_key"] and row["data_size"] == c["length"]
            assert row["storage"] == "named_data" and row["offset"] is not None
        else:
            assert row["storage"] == "runtime"
    n = build("delegate_nodes", node_columns([info]))
    assert n["op"].tolist() == [c["name"] for c in j["chain"]]
    assert n["inputs"].tolist() == [tuple(c["args"]) for c in j["chain"]]


# -- Core ML: the sample and hand-made folders against executorchcoreml ----------------------------

def _coreml():
    return pytest.importorskip("executorch.backends.apple.coreml.executorchcoreml")


def test_coreml_sample_against_unflatten(sample, tmp_path):
    cm = _coreml()
    (_d, info, raw), = file_blobs(sample("mlp_coreml.pte"))
    covers(info)
    blob = raw[info.offset:info.offset + info.size]
    assert cm.unflatten_directory_contents(blob, str(tmp_path))
    files = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*")
             if p.is_file()}
    ours = {s.name: raw[s.offset:s.offset + s.size] for s in info.subsegments
            if s.kind in ("delegate", "constant")}
    assert ours == files
    assert info.header["identifier"].startswith("executorch_")
    assert [s.name for s in info.subsegments if s.kind == "constant"] == [
        "lowered_module/model.mlpackage/Data/com.apple.CoreML/weights/weight.bin"]


def test_coreml_flattened_folder_and_reference(tmp_path):
    cm = _coreml()
    root = tmp_path / "lowered_module"
    (root / "a" / "b").mkdir(parents=True)
    (root / "metadata.json").write_text('{"identifier": "x", "inputNames": ["é"]}')
    (root / "a" / "b" / "weight.bin").write_bytes(bytes(range(256)) * 3)
    (root / "a" / "one.txt").write_bytes(b"1")  # (an empty file crashes the flattener)
    (root / "{brace}.json").write_text('{"k": "}{"}')
    blob = cm.flatten_directory_contents(str(root))
    info = inspect_blob(blob, file="c.pte", offset=4096, backend_id="CoreMLBackend")
    covers(info)
    assert info.backend == "coreml" and info.header["inputNames"] == ["é"]
    names = {s.name: (s.offset - 4096, s.size) for s in info.subsegments}
    assert names["lowered_module/a/b/weight.bin"][1] == 768
    got = blob[slice(names["lowered_module/a/b/weight.bin"][0],
                     sum(names["lowered_module/a/b/weight.bin"]))]
    assert got == bytes(range(256)) * 3
    # the same bytes under another backend id are not taken for a Core ML folder
    assert inspect_blob(blob, file="c.pte", backend_id="FooBackend").backend == "unknown"
    # CMJR: a reference into named data
    ref = b"CMJR" + json.dumps({"version": 1, "key": "coreml_x", "functionName": "fwd"}).encode()
    info = inspect_blob(ref, file="c.pte", offset=64, backend_id="CoreMLBackend",
                        named_data={"coreml_x": ("c.pte", 9000, len(blob))})
    covers(info)
    assert info.header["key"] == "coreml_x" and info.header["model_size"] == len(blob)
    assert info.named_keys == ("coreml_x",)
    missing = inspect_blob(ref, file="c.pte", backend_id="CoreMLBackend", named_data={})
    assert [f.severity for f in missing.findings] == ["warning"]


# -- MPS and MLX: hand-built flatbuffers of the documented layouts -----------------------------

def _mps_blob(headed: bool) -> tuple[bytes, bytes]:
    flatbuffers = pytest.importorskip("flatbuffers")
    b = flatbuffers.Builder(0)
    consts = np.arange(6, dtype=np.float32).tobytes()
    tables = []
    for code, dims, size in ((2, [2, 3], 24), (1, [4], 0)):
        vec = b.CreateNumpyVector(np.array(dims, np.int32))
        inline = None
        if size and not headed:
            data = b.CreateNumpyVector(np.frombuffer(consts, np.uint8))
            b.StartObject(1)
            b.PrependUOffsetTRelativeSlot(0, data, 0)
            inline = b.EndObject()
        b.StartObject(6)
        b.PrependInt16Slot(0, code, 0)
        b.PrependInt32Slot(1, len(dims), 0)
        b.PrependUOffsetTRelativeSlot(2, vec, 0)
        b.PrependUint64Slot(3, size, 0)
        if inline is not None:
            b.PrependUOffsetTRelativeSlot(4, inline, 0)
        b.PrependUint64Slot(5, 0, 1)
        tables.append(b.EndObject())
    b.StartVector(4, len(tables), 4)
    for t in reversed(tables):
        b.PrependUOffsetTRelative(t)
    values = b.EndVector()
    inputs = b.CreateNumpyVector(np.array([1], np.int32))
    version = b.CreateString("0")
    b.StartObject(8)
    b.PrependUOffsetTRelativeSlot(0, version, 0)
    b.PrependUOffsetTRelativeSlot(2, values, 0)
    b.PrependUOffsetTRelativeSlot(3, inputs, 0)
    b.Finish(b.EndObject(), file_identifier=b"MP00")
    fb = bytes(b.Output())
    if not headed:
        return fb, consts
    pad = b"\0" * (-(24 + len(fb)) % 16)
    off = 24 + len(fb) + len(pad)
    return b"\0\0\0\0MP00" + struct.pack("<QQ", off, len(consts)) + fb + pad + consts, consts


@pytest.mark.parametrize("headed", [True, False])
def test_mps_blob(headed):
    blob, consts = _mps_blob(headed)
    info = inspect_blob(blob, file="m.pte", offset=1000, backend_id="MPSBackend")
    covers(info)
    assert info.backend == "mps"
    t = build("delegate_tensors", tensor_columns([info]))
    assert t["dtype"].tolist() == ["float32", "float16"]
    assert t["shape"].tolist() == [(2, 3), (4,)]
    assert t["role"].tolist() == ["constant", "input"]
    row = t.iloc[0]
    assert row["storage"] == ("blob" if headed else "inline")
    assert blob[row["offset"] - 1000:row["offset"] - 1000 + 24] == consts
    if headed:
        assert [s.kind for s in info.subsegments] == ["header", "flatbuffer", "constant"]


def test_mlx_blob():
    flatbuffers = pytest.importorskip("flatbuffers")
    b = flatbuffers.Builder(0)
    b.StartVector(4, 0, 4)
    chains = b.EndVector()
    version = b.CreateString("1")
    b.StartObject(8)
    b.PrependUOffsetTRelativeSlot(0, version, 0)
    for slot, v in enumerate((3, 1, 1, 0, 2, 7), start=1):
        b.PrependUint32Slot(slot, v, 0)
    b.PrependUOffsetTRelativeSlot(7, chains, 0)
    b.Finish(b.EndObject())
    fb = bytes(b.Output())
    pad = b"\0" * (-(24 + len(fb)) % 16)
    data = b"w" * 32
    blob = b"\0\0\0\0MLX0" + struct.pack("<QQ", 24 + len(fb) + len(pad), len(data)) + fb + pad + data
    info = inspect_blob(blob, file="x.pte", backend_id="MLXBackend")
    covers(info)
    assert info.header["num_values"] == 7 and info.header["version"] == "1"
    assert [s.kind for s in info.subsegments] == ["header", "flatbuffer", "constant"]


# -- QNN, VGF, OpenVINO, AOTI: struct.pack of the documented headers --------------------------

@pytest.mark.parametrize("aligned", [False, True])
def test_qnn_context_protocol(aligned):
    binary = b"QNNCTX" * 10
    head = struct.pack("<Iqq", 0x5678ABCD, 123456789, len(binary))
    blob = head + (b"\0" * (256 - 20) if aligned else b"") + binary
    info = inspect_blob(blob, file="q.pte", offset=512, backend_id="QnnBackend")
    covers(info)
    assert info.header["signature"] == 123456789
    assert info.header["context_binary_offset"] == (256 if aligned else 20)
    (ctx,) = [s for s in info.subsegments if s.name == "QNN context binary"]
    assert blob[ctx.offset - 512:ctx.offset - 512 + ctx.size] == binary


def test_qnn_qcir_protocol():
    blob = struct.pack("<IIQ", 0x1234ABCD, 8, 5) + b"F" * 8 + b"T" * 5
    info = inspect_blob(blob, file="q.pte", backend_id="QnnBackend")
    covers(info)
    assert [s.kind for s in info.subsegments] == ["header", "flatbuffer", "constant"]


def test_vgf_header():
    sections = [(128, 40), (168, 8), (176, 24), (208, 64)]
    head = b"VGF1" + struct.pack("<HH3BxI", 216, 0, 0, 4, 3, 0)
    head += b"".join(struct.pack("<QQ", o, s) for o, s in sections) + b"\0" * 48
    blob = head + b"M" * 40 + b"S" * 8 + b"R" * 24 + b"\0" * 8 + b"C" * 64
    info = inspect_blob(blob, file="v.pte", backend_id="VgfBackend")
    covers(info)
    assert info.header["version"] == "0.4.3" and info.header["vk_header_version"] == 216
    assert info.header["constant_size"] == 64
    assert [s.kind for s in info.subsegments] == [
        "header", "delegate", "header", "header", "padding", "constant"]


def test_openvino_corpus_file_and_hand_built():
    (_d, info, raw), = file_blobs(OPENVINO)
    covers(info)
    h = info.header
    assert h["custom_data_offset"] == 48 and h["custom_data_is_xml"]
    xml = raw[info.offset + h["custom_data_offset"]:info.offset + h["custom_data_offset"] + 5]
    assert xml == b"<?xml"
    assert h["model_offset"] + h["model_size"] == info.size
    blob = struct.pack("<6Q", 48, 4, 52, 8, 60, 4) + b"<x/>" + b"W" * 8 + b"<m/>"
    assert inspect_blob(blob, file="o.pte", backend_id="OpenvinoBackend").backend == "openvino"
    # no magic: another id does not make it OpenVINO
    assert inspect_blob(blob, file="o.pte", backend_id="Other").backend == "unknown"


def test_aoti_reference():
    so, w = "1" * 64 + "_so_blob", "2" * 64 + "_weights_blob"
    blob = f"{so}\n{w}".encode()
    named = {so: ("m.pte", 4096, 100), w: ("m.ptd", 128, 64)}
    info = inspect_blob(blob, file="m.pte", offset=256, backend_id="CudaBackend", named_data=named)
    covers(info)
    assert info.backend == "aoti" and info.named_keys == (so, w)
    assert info.header["weights_file"] == "m.ptd" and info.header["so_size"] == 100
    missing = inspect_blob(blob, file="m.pte", backend_id="CudaBackend", named_data={})
    assert len(missing.findings) == 2


# -- Ethos-U: the corpus file, and a stream built with ExecuTorch's own block writer --------------

def test_ethosu_corpus_file():
    (_d, info, raw), = file_blobs(ETHOSU)
    covers(info)
    assert info.header["blocks"][0] == "vela_bin_stream"
    assert info.header["blocks"][-1] == "vela_end_stream"
    assert info.header["scratch_size"] > 0
    t = build("delegate_tensors", tensor_columns([info]))
    assert set(t["role"]) == {"input", "output"}
    (cmd,) = [s for s in info.subsegments if s.name == "cmd_data"]
    assert raw[cmd.offset:cmd.offset + 4] == b"COP1"  # the NPU command stream's magic


def _vela_stream(blocks: dict[str, bytes], external: set[str] = frozenset()) -> bytes:
    vela = pytest.importorskip("executorch.backends.arm.arm_vela")
    out = b""
    for name, data in blocks.items():
        flag = 1 if name in external else 0
        out += vela._BLOCK_HEADER.pack(name.encode()[:15].ljust(16, b"\0"), len(data), flag,
                                       b"\0" * 11)
        out += data + b"\0" * (-len(data) % 16)
    return out


def test_ethosu_stream_built_with_executorch_writer():
    vela = pytest.importorskip("executorch.backends.arm.arm_vela")
    io = {"input_shape": [np.array([1, 1, 2, 3, 4, 5])], "input_elem_size": [np.int64(1)],
          "input_offset": [np.int64(32)], "input_region": [np.int64(1)]}
    blob = _vela_stream({"vela_bin_stream": b"", "cmd_data": b"COP1" + b"c" * 20,
                         "weight_data": KEY.encode(), "scratch_size": struct.pack("<I", 99),
                         "inputs": vela.vela_bin_pack_io("input", io),
                         "vela_end_stream": b""}, external={"weight_data"})
    info = inspect_blob(blob, file="e.pte", backend_id="EthosUBackend",
                        named_data={KEY: ("e.pte", 5000, 7)})
    covers(info)
    assert info.named_keys == (KEY,) and info.header["scratch_size"] == 99
    t = build("delegate_tensors", tensor_columns([info]))
    assert t["shape"].tolist() == [(1, 1, 2, 3, 4, 5)] and t["nbytes"].tolist() == [120]
    assert info.header["io"][0]["offset"] == 32


# -- the registry ------------------------------------------------------------------------------

def test_unknown_blob_is_one_range_with_a_finding():
    info = inspect_blob(b"\x01\x02\x03\x04hello", file="u.pte", offset=100,
                        backend_id="SecretBackend", method="forward", index=2)
    covers(info)
    assert info.backend == "unknown" and [s.kind for s in info.subsegments] == ["delegate"]
    (f,) = info.findings
    assert "SecretBackend" in f.message and f.offset == 100
    assert inspect_blob(b"", file="u.pte", backend_id="X").subsegments == []


def test_magic_wins_over_the_id(sample):
    raw = sample("mlp_vulkan.pte").read_bytes()
    (_d, info, _), = file_blobs(sample("mlp_vulkan.pte"))
    other = inspect_blob(memoryview(raw), file="v.pte", offset=info.offset, size=info.size,
                         backend_id="XnnpackBackend")
    assert other.backend == "vulkan"
    assert any("expected VulkanBackend" in f.message for f in other.findings)


def test_whole_file_and_blob_only_views_agree(sample):
    path = sample("mlp_xnnpack_qc8.pte")
    (d, info, raw), = file_blobs(path)
    alone = inspect_blob(raw[info.offset:info.offset + info.size], file=str(path),
                         offset=info.offset, backend_id=d["id"], method=d["method"])
    assert alone.subsegments == info.subsegments and alone.header == info.header
    assert alone.tensors["offset"][0] == info.tensors["offset"][0]


def test_kernel_findings():
    (f,) = kernel_findings(["cadence::quantized_conv.out", "aten::add.out"])
    assert f.severity == "info" and "Cadence" in f.message and "no delegate blob" in f.message
    (f,) = kernel_findings(["cortex_m::quantized_add.out"], ["XnnpackBackend"])
    assert "no delegate blob" not in f.message
    assert kernel_findings(["aten::mm.out"]) == []
    assert isinstance(f, Finding)


def test_every_backend_module_declares_itself():
    names = [m.BACKEND for m in BACKENDS]
    assert len(set(names)) == len(names)
    for m in BACKENDS:
        assert m.IDS and callable(m.detect) and callable(m.parse) and m.__doc__


# -- hostile blobs ------------------------------------------------------------------------------

def _xnn_blob(sample_path: pathlib.Path) -> tuple[bytes, int]:
    (_, info, raw), = [b for b in file_blobs(sample_path) if b[0]["id"] == "XnnpackBackend"]
    return raw[info.offset:info.offset + info.size], info.offset


def _check(blob: bytes, backend_id: str, offset: int = 4096) -> None:
    """Inspect a (hostile) blob: success, or an ArtifactError naming file, structure and an
    offset inside the blob."""
    try:
        info = inspect_blob(blob, file="hostile.pte", offset=offset, backend_id=backend_id,
                            method="forward", named_data={})
    except wb.ArtifactError as e:
        assert e.file == "hostile.pte" and e.structure and e.offset is not None, e
        assert e.structure.startswith(f"forward delegate 0 ({backend_id})"), e
        assert isinstance(e.offset, int), e
        return
    covers(info)
    if info.tensors is not None:
        build("delegate_tensors", tensor_columns([info]))
    if info.nodes is not None:
        build("delegate_nodes", node_columns([info]))


def _hostile_inputs(sample) -> list[tuple[bytes, str]]:
    out = []
    for name in ("mlp_xnnpack_inline.pte", "mlp_xnnpack_qc8.pte", "wide_xnnpack_8da4w.pte"):
        p = SAMPLES / name
        if p.is_file():
            out.append((_xnn_blob(p)[0], "XnnpackBackend"))
    p = SAMPLES / "mlp_vulkan.pte"
    if p.is_file():
        (_, info, raw), = file_blobs(p)
        out.append((raw[info.offset:info.offset + info.size], "VulkanBackend"))
    p = SAMPLES / "mlp_coreml.pte"
    if p.is_file():
        (_, info, raw), = file_blobs(p)
        out.append((raw[info.offset:info.offset + info.size], "CoreMLBackend"))
    if ETHOSU.is_file():
        (_, info, raw), = file_blobs(ETHOSU)
        out.append((raw[info.offset:info.offset + info.size], "EthosUBackend"))
    out.append((_mps_blob(True)[0], "MPSBackend"))
    out.append((struct.pack("<Iqq", 0x5678ABCD, 1, 8) + b"x" * 8, "QnnBackend"))
    out.append((b"VGF1" + b"\0" * 12 + struct.pack("<QQ", 128, 8) + b"\0" * 96 + b"m" * 8,
                "VgfBackend"))
    out.append((struct.pack("<6Q", 48, 4, 52, 8, 60, 4) + b"<x/>" + b"W" * 8 + b"<m/>",
                "OpenvinoBackend"))
    return out


def test_truncated_blobs_raise_only_artifact_errors(sample):
    for blob, bid in _hostile_inputs(sample):
        for n in sorted({*range(0, min(len(blob), 96)), *range(0, len(blob), 37), len(blob) - 1}):
            _check(blob[:n], bid)


@pytest.mark.slow  # a fuzz loop / runtime run: seconds (the mutation runs skip it)
def test_mutated_blobs_raise_only_artifact_errors_in_bounded_time_and_memory(sample):
    rng = random.Random(15)
    inputs = _hostile_inputs(sample)
    tracemalloc.start()
    try:
        worst = 0.0
        for blob, bid in inputs:
            for _ in range(150):
                b = bytearray(blob)
                for _ in range(rng.randint(1, 4)):
                    k = rng.randrange(len(b))
                    b[k] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
                if rng.random() < 0.3:  # a 32-bit field set to something large
                    k = rng.randrange(max(1, len(b) - 4))
                    b[k:k + 4] = struct.pack("<I", rng.choice((0xFFFFFFFF, 0x7FFFFFFF, len(b))))
                t0 = time.perf_counter()
                _check(bytes(b), bid)
                worst = max(worst, time.perf_counter() - t0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert worst < 2.0 * TIME_SCALE, worst
    assert peak < 64 << 20, peak


def _outcome(blob: bytes) -> tuple:
    try:
        info = inspect_blob(blob, file="h.pte", backend_id="XnnpackBackend", named_data={})
    except wb.ArtifactError as e:
        return ("error", type(e).__name__, e.offset)
    return ("ok", build("delegate_tensors", tensor_columns([info])),
            build("delegate_nodes", node_columns([info])), info.findings, info.subsegments)


@pytest.mark.slow  # a fuzz loop / runtime run: seconds (the mutation runs skip it)
def test_fast_and_scalar_xnnpack_readers_agree_on_mutated_blobs(sample, monkeypatch):
    """The vectorised reader falls back to the scalar one on any doubt: on corrupt graphs
    both give the same error class and offset, on readable ones the same records."""

    rng = random.Random(1515)
    outcomes = {"ok": 0, "error": 0}
    for blob, bid in _hostile_inputs(sample):
        if bid != "XnnpackBackend":
            continue
        for _ in range(120):
            b = bytearray(blob)
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(len(b))] = rng.choice((0, 0xFF, 0x80, rng.randrange(256)))
            monkeypatch.setattr(readpath, "TIER", readpath.Tier.BATCHED)
            fast = _outcome(bytes(b))
            monkeypatch.setattr(readpath, "TIER", readpath.Tier.TABLES)
            slow = _outcome(bytes(b))
            assert fast[0] == slow[0]
            outcomes[fast[0]] += 1
            if fast[0] == "error":
                assert fast == slow
            else:
                assert fast[1].equals(slow[1]) and fast[2].equals(slow[2])
                assert fast[3:] == slow[3:]
    assert outcomes["ok"] > 20 and outcomes["error"] > 20, outcomes


def _flatc_graph(j: dict, tmp: pathlib.Path) -> bytes:
    ex = _executorch_dir()
    (tmp / "g.json").write_text(json.dumps(j))
    subprocess.run([str(ex / "data/bin/flatc"), "-b", "-o", str(tmp),
                    str(ex / "backends/xnnpack/serialization/schema.fbs"), str(tmp / "g.json")],
                   check=True, capture_output=True)
    return (tmp / "g.bin").read_bytes()


def _graph_json(blob: bytes, tmp: pathlib.Path) -> dict:
    ex = _executorch_dir()
    fb_off, fb_size = struct.unpack_from("<II", blob, 10)
    (tmp / "in.bin").write_bytes(blob[fb_off:fb_off + fb_size])
    subprocess.run([str(ex / "data/bin/flatc"), "--json", "--strict-json", "--raw-binary", "-o",
                    str(tmp), str(ex / "backends/xnnpack/serialization/schema.fbs"), "--",
                    str(tmp / "in.bin")], check=True, capture_output=True)
    text = (tmp / "in.json").read_text()
    text = re.sub(r"(?<=[:\[,\s])(-?)inf\b", r"\1Infinity", text)
    return json.loads(re.sub(r"(?<=[:\[,\s])-?nan\b", "NaN", text))


def _xnn_wrap(fb: bytes, constants: bytes = b"") -> bytes:
    """A blob around a graph flatbuffer, with ExecuTorch's own header writer."""
    ser = pytest.importorskip("executorch.backends.xnnpack.serialization.xnnpack_graph_serialize")
    fb_pad = fb + b"\0" * (-len(fb) % 16)
    header = ser.XNNHeader(32, len(fb), 32 + len(fb_pad), len(constants)).to_bytes()
    return header + b"\0" * 2 + fb_pad + constants


CRAFTED = {
    "unknown datatype": (lambda j: j["xvalues"][0]["xvalue_union"].update(datatype=99),
                         r"datatype 99 is unknown", "CorruptError"),
    "constant index out of range": (
        lambda j: _tv(j, 1).update(constant_buffer_idx=99), r"constant_buffer_idx 99",
        "OutOfBoundsError"),
    "huge dims": (lambda j: _tv(j, 0).update(dims=[4294967295] * 3), r"elements", "CorruptError"),
    "blob offset past the constant data": (
        lambda j: j["constant_data"][1].update(offset=4096, named_key=None),
        r"runs past the constant data", "OutOfBoundsError"),
    "named key and offset": (lambda j: j["constant_data"][1].update(offset=0),
                             r"mutually exclusive", "CorruptError"),
    "scale buffer index": (lambda j: _qp(j).update(scale_buffer_idx=77), r"scale_buffer_idx 77",
                           "OutOfBoundsError"),
}


def _tv(j: dict, k: int) -> dict:
    u = j["xvalues"][k]["xvalue_union"]
    return u.get("tensor_value", u)


def _qp(j: dict) -> dict:
    return next(v["xvalue_union"]["quant_params"] for v in j["xvalues"]
                if v["xvalue_union"].get("quant_params_type") == "PerChannelQuant")


@pytest.mark.parametrize("case", list(CRAFTED))
def test_crafted_graphs_name_the_structure(case, sample, tmp_path):
    blob, _ = _xnn_blob(sample("mlp_xnnpack_qc8.pte"))
    j = _graph_json(blob, tmp_path)
    edit, message, kind = CRAFTED[case]
    edit(j)
    for k in j["constant_data"]:
        if k.get("named_key") is None:
            k.pop("named_key", None)
    bad = _xnn_wrap(_flatc_graph(j, tmp_path))
    with pytest.raises(wb.ArtifactError, match=message) as e:
        inspect_blob(bad, file="crafted.pte", offset=800, backend_id="XnnpackBackend",
                     method="forward", named_data={})
    assert type(e.value).__name__ == kind
    assert e.value.structure.startswith("forward delegate 0 (XnnpackBackend): XNNGraph")
    assert 800 <= e.value.offset < 800 + len(bad)


def test_header_fields_out_of_range(sample):
    blob, _ = _xnn_blob(sample("mlp_xnnpack_inline.pte"))
    for at, value, match in ((10, 4, "flatbuffer"), (14, 1 << 31, "flatbuffer"),
                             (18, 8, "constant data"), (22, 1 << 40, "constant data"),
                             (8, 3, "length")):
        b = bytearray(blob)
        fmt = "<H" if at == 8 else "<Q" if at == 22 else "<I"
        struct.pack_into(fmt, b, at, value)
        with pytest.raises(wb.ArtifactError, match=match) as e:
            inspect_blob(bytes(b), file="h.pte", offset=64, backend_id="XnnpackBackend")
        assert e.value.offset == 64 + at or e.value.offset >= 64


def test_empty_named_key_field_is_reported(sample, tmp_path):
    """A present-but-empty ``named_key`` makes the runtime look up key "" (it tests the
    field's presence); the graph is still read as an in-blob constant, with a finding."""
    blob, _ = _xnn_blob(sample("mlp_xnnpack_inline.pte"))
    j = _graph_json(blob, tmp_path)
    j["constant_data"][1]["named_key"] = ""
    consts = blob[struct.unpack_from("<I", blob, 18)[0]:]
    info = inspect_blob(_xnn_wrap(_flatc_graph(j, tmp_path), consts), file="e.pte",
                        backend_id="XnnpackBackend")
    assert any("named_key" in f.message and f.severity == "warning" for f in info.findings)


def _vk_json(blob: bytes, tmp: pathlib.Path) -> dict:
    ex = _executorch_dir()
    fb_off, fb_size = struct.unpack_from("<II", blob, 10)
    (tmp / "vk.bin").write_bytes(blob[fb_off:fb_off + fb_size])
    subprocess.run([str(ex / "data/bin/flatc"), "--json", "--strict-json", "--raw-binary", "-o",
                    str(tmp), str(ex / "backends/vulkan/serialization/schema.fbs"), "--",
                    str(tmp / "vk.bin")], check=True, capture_output=True)
    return json.loads((tmp / "vk.json").read_text())


def _vk_blob(j: dict, tmp: pathlib.Path) -> bytes:
    ser = pytest.importorskip("executorch.backends.vulkan.serialization.vulkan_graph_serialize")
    ex = _executorch_dir()
    (tmp / "vk.json").write_text(json.dumps(j))
    subprocess.run([str(ex / "data/bin/flatc"), "-b", "-o", str(tmp),
                    str(ex / "backends/vulkan/serialization/schema.fbs"), str(tmp / "vk.json")],
                   check=True, capture_output=True)
    fb = (tmp / "vk.bin").read_bytes()
    fb += b"\0" * (-len(fb) % 16)
    head = ser.VulkanDelegateHeader(32, len(fb), 32 + len(fb), 0).to_bytes()
    return head + b"\0\0" + fb


@pytest.mark.parametrize("case", ["huge dims", "huge constant", "constant id", "datatype"])
def test_crafted_vulkan_graphs(case, sample, tmp_path):
    (_, info, raw), = file_blobs(sample("mlp_vulkan.pte"))
    j = _vk_json(raw[info.offset:info.offset + info.size], tmp_path)
    tensor = next(v["value"] for v in j["values"] if v["value_type"] == "VkTensor")
    if case == "huge dims":
        tensor["dims"] = [4294967295] * 3
    elif case == "huge constant":
        j["constants"][0]["length"] = 1 << 63
    elif case == "constant id":
        tensor["constant_id"] = 1000
    else:
        tensor["datatype"] = "UNSET"
    with pytest.raises(wb.ArtifactError) as e:
        inspect_blob(_vk_blob(j, tmp_path), file="vk.pte", offset=64, backend_id="VulkanBackend",
                     method="forward")
    assert e.value.structure.startswith("forward delegate 0 (VulkanBackend): VkGraph")
    assert 64 <= e.value.offset < 64 + 2048


def test_huge_vela_io_shape_is_corrupt():
    io = struct.pack("<i", 1) + struct.pack("<9i", *[2**31 - 1] * 4, 1, 1, 4, 0, 0)
    blob = _vela_stream({"vela_bin_stream": b"", "inputs": io, "vela_end_stream": b""})
    with pytest.raises(wb.ArtifactError, match=r"inputs\[0\] has shape") as e:
        inspect_blob(blob, file="e.pte", backend_id="EthosUBackend")
    assert e.value.offset is not None


# -- many blobs at once -------------------------------------------------------------------------

def _program_of_many(names: list[str]):
    """Several sample programs laid end to end in one buffer: the blobs (shifted) and the
    named data of all of them, as if they were one file."""
    buf, blobs, named = b"", [], {}
    for name in names:
        p = SAMPLES / name
        if not p.is_file():
            pytest.skip(f"{name} is not there")
        art = wb.open(p)
        base = len(buf)
        d, nd = art.frames["delegates"], art.frames["named_data"]
        blobs += [(base + int(o), int(s), i, f"{p.stem}.{m}", int(k))
                  for o, s, i, m, k in zip(d["offset"], d["size"], d["id"], d["method"],
                                           d["index"])]
        for k, f, o, s in zip(nd["key"], nd["file"], nd["offset"], nd["size"]):
            if f == str(p):
                named.setdefault(k, ("many.pte", base + int(o), int(s)))
        buf += p.read_bytes()
        buf += b"\0" * (-len(buf) % 64)
    return buf, blobs, named


MANY = ["mlp_xnnpack_qc8.pte", "wide_xnnpack_8da4w.pte", "mlp_vulkan.pte", "mlp_xnnpack_inline.pte",
        "tied_xnnpack.pte", "mlp_xnnpack.pte"]


def _same(a, b) -> None:
    assert (a.backend, a.layout, a.header, a.subsegments, a.findings, a.named_keys) == \
        (b.backend, b.layout, b.header, b.subsegments, b.findings, b.named_keys)
    for attr, frame, cols in (("tensors", "delegate_tensors", tensor_columns),
                              ("nodes", "delegate_nodes", node_columns)):
        if getattr(a, attr) is None:
            assert getattr(b, attr) is None
            continue
        assert build(frame, cols([a])).equals(build(frame, cols([b])))


def test_inspect_blobs_equals_one_by_one(monkeypatch):
    from workbench.formats.delegates import inspect_blobs, xnnpack

    passes = []
    one_pass = xnnpack.parse_many

    def spy(group):
        out = one_pass(group)  # raises if the one-pass reader gave up
        passes.append(len(out))
        return out

    monkeypatch.setattr(xnnpack, "parse_many", spy)
    buf, blobs, named = _program_of_many(MANY)
    many = inspect_blobs(buf, blobs, file="many.pte", named_data=named)
    assert passes == [sum(i == "XnnpackBackend" for _, _, i, _, _ in blobs)]
    assert len(many) == len(blobs) and {i.backend for i in many} == {"xnnpack", "vulkan"}
    for (o, s, i, m, k), got in zip(blobs, many):
        _same(got, inspect_blob(buf, file="many.pte", offset=o, size=s, backend_id=i, method=m,
                                index=k, named_data=named))
        covers(got)
    t = build("delegate_tensors", tensor_columns(many))
    assert t["storage"].isin(["named_data", "blob", "runtime"]).all()
    assert t.groupby("method", observed=True).size().size == len(MANY)
    # the blobs of the one pass hand their shared columns over whole (all of them, in
    # order); any other selection is joined blob by blob: the same frames either way
    from workbench.formats.delegates import _columns

    xnn = [(b, got) for b, got in zip(blobs, many) if got.backend == "xnnpack"]
    alone = [inspect_blob(buf, file="many.pte", offset=o, size=s, backend_id=i, method=m,
                          index=k, named_data=named) for (o, s, i, m, k), _ in xnn]
    xnn = [got for _, got in xnn]
    assert _columns._whole(xnn, "tensors") is not None
    assert _columns._whole(xnn, "nodes") is not None
    assert _columns._whole(xnn[1:], "tensors") is None and _columns._whole(xnn[::-1], "nodes") is None
    for sel in (slice(None), slice(1, None), slice(None, None, -1)):
        for frame, cols in (("delegate_tensors", tensor_columns), ("delegate_nodes", node_columns)):
            assert build(frame, cols(xnn[sel])).equals(build(frame, cols(alone[sel])))


def test_two_method_xnnpack_sample_reads_in_one_pass(monkeypatch):
    """The real two-blob program (one XNNPACK blob per method, shared weights stored once):
    its blobs are read in one pass, and every frame is the one the blob-by-blob reader gives."""
    from workbench._vecfb import SlowPath
    from workbench.formats.delegates import xnnpack

    path = SAMPLES / "multi_method_xnnpack.pte"
    names = ("segments", "tensors", "named_data", "delegates", "delegate_tensors",
             "delegate_nodes")
    one_pass = xnnpack.parse_many
    passes: list[int] = []

    def spy(group):
        out = one_pass(group)
        passes.append(len(out))
        return out

    monkeypatch.setattr(xnnpack, "parse_many", spy)
    with wb.open(path) as art:
        together = {k: art.frames[k] for k in names}
    assert passes == [2]

    def give_up(group):
        passes.append(-len(group))
        raise SlowPath("test: blob by blob")

    monkeypatch.setattr(xnnpack, "parse_many", give_up)
    with wb.open(path) as art:
        alone = {k: art.frames[k] for k in names}
    assert passes == [2, -2]
    for k in names:
        assert together[k].equals(alone[k]), k
    nd = together["named_data"]
    both = "encode delegate 0 (XnnpackBackend); forward delegate 0 (XnnpackBackend)"
    assert sorted(nd["used_by"]) == [both, both, "forward delegate 0 (XnnpackBackend)",
                                     "forward delegate 0 (XnnpackBackend)"]
    dt = together["delegate_tensors"]
    keys = {m: set(g["named_key"].dropna()) for m, g in dt.groupby("method", observed=True)}
    assert len(keys["encode"]) == 2 and keys["encode"] < keys["forward"]
    assert set(nd["key"]) == keys["forward"]


def test_inspect_blobs_on_mutated_buffers_equals_one_by_one():
    """A corrupt blob among many: the one-pass reader gives up and every blob is read alone,
    so results and errors are those of ``inspect_blob``."""
    from workbench.formats.delegates import inspect_blobs

    buf, blobs, named = _program_of_many(MANY[:2] + MANY[3:4])
    rng = random.Random(99)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(60):
        b = bytearray(buf)
        o, s, *_rest = blobs[rng.randrange(len(blobs))]
        for _ in range(rng.randint(1, 3)):
            b[o + rng.randrange(s)] = rng.choice((0, 0xFF, 0x80, rng.randrange(256)))
        data = bytes(b)
        try:
            many = inspect_blobs(data, blobs, file="many.pte", named_data=named)
        except wb.ArtifactError as e:
            outcomes["error"] += 1
            with pytest.raises(type(e)) as one:
                for o2, s2, i2, m2, k2 in blobs:
                    inspect_blob(data, file="many.pte", offset=o2, size=s2, backend_id=i2,
                                 method=m2, index=k2, named_data=named)
            assert (one.value.offset, one.value.structure) == (e.offset, e.structure)
            continue
        outcomes["ok"] += 1
        for (o2, s2, i2, m2, k2), got in zip(blobs, many):
            _same(got, inspect_blob(data, file="many.pte", offset=o2, size=s2, backend_id=i2,
                                    method=m2, index=k2, named_data=named))
    assert outcomes["ok"] > 5 and outcomes["error"] > 5, outcomes
