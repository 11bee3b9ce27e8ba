"""XNNPACK delegate blobs against ExecuTorch's own XNNPACK serialization code.

For every XNNPACK blob of the samples and of ``../shared/corpus/`` (skipped when absent):
the header against ``XNNHeader.from_bytes``; every xvalue (datatype, dims, quantization,
constant offset or named key) and every node against the blob's flatbuffer decoded to JSON
by the ``flatc`` the executorch wheel ships, with its ``schema.fbs`` (``runtime_schema.fbs``
for ``XN00``); the blob bytes against ``deserialize_pte_binary``; every named constant's
bytes against its key (XNNPACK keys are the SHA-256 of the bytes). Dequantization against
the quantized eager models (PT2E ``dequantize_per_channel``, torchao's ``dequantize()``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import workbench as wb
from workbench import readpath
from workbench.formats.delegates import dequantize, inspect_blob, tensor_columns
from workbench.frames import build

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
CORPUS = ROOT.parent / "shared" / "corpus"
CORPUS_XNNPACK = ("corey-cole__executorch-numpy-runtime__tests__models__quantized.pte",
                  "pytorch__executorch__xnnpack_add.ff")
NAMED = (1 << 64) - 1
INVALID = (1 << 32) - 1


def _xnnpack_files() -> list[pathlib.Path]:
    out = []
    for p in sorted(SAMPLES.glob("*.pte")):
        try:
            if (wb.open(p).frames["delegates"]["id"] == "XnnpackBackend").any():
                out.append(p)
        except wb.ArtifactError:
            continue
    return out + [CORPUS / n for n in CORPUS_XNNPACK]


FILES = _xnnpack_files()


def _ids(paths: list[pathlib.Path]) -> list[str]:
    return [p.name[:40] for p in paths]


def blobs(path: pathlib.Path) -> list[tuple[object, object, bytes]]:
    """(delegates row, BlobInfo, file bytes) for every XNNPACK blob of ``path``."""
    if not path.is_file():
        pytest.skip(f"{path.name} is not there")
    art = wb.open(path)
    nd = art.frames["named_data"]
    named = {k: (f, o, s) for k, f, o, s in zip(nd["key"], nd["file"], nd["offset"], nd["size"])}
    raw = path.read_bytes()
    out = []
    for _, d in art.frames["delegates"].iterrows():
        if d["id"] != "XnnpackBackend":
            continue
        info = inspect_blob(memoryview(raw), file=str(path), offset=int(d["offset"]),
                            size=int(d["size"]), backend_id=d["id"], method=d["method"],
                            index=int(d["index"]), named_data=named)
        out.append((d, info, raw))
    return out


# -- the oracle -------------------------------------------------------------------------------

def _executorch_dir() -> pathlib.Path:
    spec = importlib.util.find_spec("executorch")
    if spec is None:
        pytest.skip("executorch is not installed")
    return pathlib.Path(next(iter(spec.submodule_search_locations)))


def flatc_json(fb: bytes, ident: str, tmp: pathlib.Path) -> dict:
    """The XNNGraph flatbuffer decoded by the wheel's flatc (bare nan/inf made JSON)."""
    ex = _executorch_dir()
    flatc = ex / "data" / "bin" / "flatc"
    schema = ex / "backends" / "xnnpack" / "serialization" / (
        "schema.fbs" if ident == "XN01" else "runtime_schema.fbs")
    if not flatc.is_file() or not schema.is_file():
        pytest.skip("the executorch wheel has no flatc / XNNPACK schema")
    (tmp / "g.bin").write_bytes(fb)
    subprocess.run([str(flatc), "--json", "--strict-json", "--defaults-json", "--raw-binary",
                    "-o", str(tmp), str(schema), "--", str(tmp / "g.bin")], check=True,
                   capture_output=True)
    text = (tmp / "g.json").read_text()
    text = re.sub(r"(?<=[:\[,\s])(-?)inf\b", r"\1Infinity", text)
    text = re.sub(r"(?<=[:\[,\s])-?nan\b", "NaN", text)
    return json.loads(text)


def oracle_blob(path: pathlib.Path, method: str, index: int) -> bytes:
    """The blob bytes as ExecuTorch's ``deserialize_pte_binary`` gives them."""
    ser = pytest.importorskip("executorch.exir._serialize._program")
    program = ser.deserialize_pte_binary(path.read_bytes()).program
    plan = next(p for p in program.execution_plan if p.name == method)
    ref = plan.delegates[index].processed
    if int(ref.location) == 0:
        return bytes(program.backend_delegate_data[ref.index].data)
    pytest.skip("deserialize_pte_binary left the blob in a segment")  # pragma: no cover


# -- tests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_blob_bytes_and_header_match_executorch(path):
    for d, info, raw in blobs(path):
        blob = raw[info.offset:info.offset + info.size]
        assert blob == oracle_blob(path, d["method"], int(d["index"]))
        if blob[4:8] != b"XH00":
            assert info.layout.endswith("(no header)")
            continue
        from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import XNNHeader

        h = XNNHeader.from_bytes(blob[:XNNHeader.EXPECTED_LENGTH])
        assert h.is_valid()
        for field in ("flatbuffer_offset", "flatbuffer_size", "constant_data_offset",
                      "constant_data_size"):
            assert info.header[field] == getattr(h, field), field


def _subsegments_cover(info) -> None:
    at = info.offset
    for s in info.subsegments:
        assert s.offset == at and s.size > 0, s
        at += s.size
    assert at == info.offset + info.size


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_subsegments_cover_each_blob_exactly(path):
    for _, info, _ in blobs(path):
        _subsegments_cover(info)
        kinds = [s.kind for s in info.subsegments]
        assert "flatbuffer" in kinds
        assert set(kinds) <= {"header", "flatbuffer", "constant", "padding"}


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_values_and_nodes_match_flatc(path, tmp_path):
    for _, info, raw in blobs(path):
        blob = raw[info.offset:info.offset + info.size]
        headed = blob[4:8] == b"XH00"
        fb_off = info.header["flatbuffer_offset"] if headed else 0
        fb_size = info.header["flatbuffer_size"] if headed else len(blob)
        cd_off = info.header["constant_data_offset"] if headed else None
        ident = info.header["identifier"]
        j = flatc_json(blob[fb_off:fb_off + fb_size], ident, tmp_path)
        t = build("delegate_tensors", tensor_columns([info]))
        assert len(t) == len(j["xvalues"])
        constant_data = j.get("constant_data") or []
        buffers = j.get("constant_buffer") or []
        quant_names = {"PerChannelQuant": "per_channel", "PerTensorQuant": "per_tensor",
                       "PerTokenDynamicQuant": "per_token_dynamic",
                       "PerChannelGroupQuant": "per_channel_group"}
        for k, xv in enumerate(j["xvalues"]):
            row = t.iloc[k]
            u = xv["xvalue_union"]
            tv = u if xv["xvalue_union_type"] == "XNNTensorValue" else u["tensor_value"]
            assert row["value"] == tv["id_out"]
            assert row["backend_dtype"] == tv["datatype"].removeprefix("xnn_datatype_")
            assert row["shape"] == tuple(tv["dims"])
            assert row["flags"] == tv["flags"]
            ext = tv["external_id"]
            assert (row["external_id"] is pd_na()) if ext == INVALID else row["external_id"] == ext
            cbi = tv["constant_buffer_idx"]
            if cbi == 0:
                assert row["storage"] == "runtime" and row["constant_index"] is pd_na()
            elif constant_data:
                entry = constant_data[cbi]
                assert row["constant_index"] == cbi and row["data_size"] == entry["size"]
                assert row["nbytes"] == entry["size"]  # 4-bit: two values per byte
                if entry["offset"] == NAMED:
                    assert row["named_key"] == entry["named_key"]
                    assert row["storage"] in ("named_data", "external")
                else:
                    assert row["storage"] == "blob" and row["named_key"] is pd_na()
                    assert row["offset"] == info.offset + cd_off + entry["offset"]
            else:  # XN00: inline constant_buffer
                assert row["storage"] == "inline"
                assert row["data_size"] == len(buffers[cbi].get("storage", []))
            if xv["xvalue_union_type"] == "XNNTensorValue":
                assert row["quant"] == "none"
                continue
            qt = u["quant_params_type"]
            q = u["quant_params"]
            assert row["quant"] == quant_names[qt]
            if qt in ("PerChannelQuant", "PerChannelGroupQuant"):
                assert row["channel_dim"] == q["channel_dim"]
                if q.get("scale"):
                    assert row["scale_storage"] == "inline"
                    assert row["num_scales"] == len(q["scale"])
                else:
                    assert row["num_scales"] == q["num_scales"]
                    entry = constant_data[q["scale_buffer_idx"]]
                    assert row["scale_nbytes"] == entry["size"]
                    assert row["scale_key"] == (entry.get("named_key") or pd_na())
                if qt == "PerChannelGroupQuant":
                    assert row["group_size"] == q["group_size"]
                    assert row["scale_dtype"] == "bfloat16"
                else:
                    assert row["group_size"] is pd_na() and row["scale_dtype"] == "float32"
            elif qt == "PerTensorQuant":
                # flatc prints floats with 6 decimal places
                assert math.isclose(row["scale"], q["scale"], rel_tol=1e-6, abs_tol=5e-7)
                assert row["zero_point"] == q["zero_point"]
        n = build("delegate_nodes", __import__("workbench.formats.delegates",
                                               fromlist=["x"]).node_columns([info]))
        assert len(n) == len(j["xnodes"])
        for k, xn in enumerate(j["xnodes"]):
            row = n.iloc[k]
            op = xn["xnode_union_type"]
            assert "XNN" + row["op"] == op
            assert row["debug_handle"] == xn["debug_handle"]
            u = xn["xnode_union"]
            outs = tuple(v for f, v in u.items() if f.startswith("output") and f.endswith("_id"))
            ins = [v for f, v in u.items() if f.endswith("_id") and not f.startswith("output")]
            m = re.fullmatch(r"XNNConcatenate(\d)", op)
            if m:
                ins = ins[:int(m.group(1))]
            assert row["inputs"] == tuple(i for i in ins if i != INVALID)
            assert row["outputs"] == outs
            mm = xn.get("output_min_max")
            if mm:
                assert row["output_min"] == mm["output_min"]
                assert row["output_max"] == mm["output_max"]


def pd_na():
    import pandas as pd

    return pd.NA


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_constant_bytes_are_where_the_records_say(path):
    """Named constants: SHA-256 of the bytes at (file, offset, data_size) is the key; blob
    constants: the bytes are inside the blob's constant data."""
    files: dict[str, bytes] = {}
    for _, info, _raw in blobs(path):
        t = build("delegate_tensors", tensor_columns([info]))
        stored = t[t["storage"] != "runtime"]
        for _, row in stored.iterrows():
            if row["file"] is pd_na():
                continue
            data = files.setdefault(row["file"], pathlib.Path(row["file"]).read_bytes())
            got = data[row["offset"]:row["offset"] + row["data_size"]]
            assert len(got) == row["data_size"]
            if row["storage"] in ("named_data", "external"):
                assert hashlib.sha256(got).hexdigest() == row["named_key"]
            else:
                assert info.offset <= row["offset"] < info.offset + info.size
        scaled = t[t["scale_key"].notna()]
        for _, row in scaled.iterrows():
            data = files.setdefault(row["scale_file"], pathlib.Path(row["scale_file"]).read_bytes())
            got = data[row["scale_offset"]:row["scale_offset"] + row["scale_nbytes"]]
            assert "scale_" + hashlib.sha256(got).hexdigest() == row["scale_key"]


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_fast_and_scalar_readers_agree(path, monkeypatch):
    fast = blobs(path)
    monkeypatch.setattr(readpath, "TIER", readpath.Tier.TABLES)
    slow = blobs(path)
    for (_, a, _), (_, b, _) in zip(fast, slow):
        ta = build("delegate_tensors", tensor_columns([a]))
        tb = build("delegate_tensors", tensor_columns([b]))
        assert ta.equals(tb)
        assert a.subsegments == b.subsegments and a.header == b.header
        assert a.findings == b.findings


def test_nbytes_of_packed_int4_and_storage_of_split_program(sample):
    (_, info, _), = blobs(sample("wide_xnnpack_8da4w_external.pte"))
    t = build("delegate_tensors", tensor_columns([info]))
    w = t[t["backend_dtype"] == "qbint4"]
    assert w["dtype"].tolist() == ["int4", "int4"]
    assert w["nbytes"].tolist() == [32 * 64 // 2, 8 * 32 // 2] == w["data_size"].tolist()
    assert set(w["storage"]) == {"named_data"}
    bias = t[(t["role"] == "constant") & (t["backend_dtype"] == "fp32")]
    assert bias["storage"].tolist() == ["external"]
    assert bias["file"].iloc[0].endswith(".ptd")


def test_constants_inside_the_blob(sample):
    (_, info, _), = blobs(sample("mlp_xnnpack_inline.pte"))
    t = build("delegate_tensors", tensor_columns([info]))
    consts = t[t["role"] == "constant"]
    assert set(consts["storage"]) == {"blob"} and consts["named_key"].isna().all()
    assert info.named_keys == ()
    parts = [s for s in info.subsegments if s.kind == "constant"]
    assert sorted((s.offset, s.size) for s in parts) == sorted(
        zip(consts["offset"], consts["nbytes"]))
    # the values are the model's weights, bit for bit
    torch = pytest.importorskip("torch")
    model = _make_samples().seeded(_make_samples().MLP)
    raw = pathlib.Path(info.file).read_bytes()
    for name, shape in (("fc1.weight", (32, 16)), ("fc1.bias", (32,)), ("fc2.weight", (8, 32)),
                        ("fc2.bias", (8,))):
        row = consts[consts["shape"] == shape].iloc[0]
        got = np.frombuffer(raw, np.float32, math.prod(shape), row["offset"]).reshape(shape)
        want = dict(model.named_parameters())[name].detach().numpy()
        assert torch.equal(torch.from_numpy(got.copy()), torch.from_numpy(want))


def _make_samples():
    if "make_samples" not in sys.modules:
        spec = importlib.util.spec_from_file_location("make_samples", SAMPLES / "make_samples.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["make_samples"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["make_samples"]


def _read(row, which: str = "") -> memoryview:
    data = pathlib.Path(row[f"{which}file"]).read_bytes()
    off = row[f"{which}offset"]
    return memoryview(data)[off:off + row[f"{which}nbytes"]]


def test_dequantize_qcint8_matches_pt2e_reference(sample):
    """Per-channel int8 weights against ``dequantize_per_channel`` of the PT2E model."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchao")
    (_, info, _), = blobs(sample("mlp_xnnpack_qc8.pte"))
    t = build("delegate_tensors", tensor_columns([info]))
    model = _make_samples().qc8_mlp()
    refs = {}
    for node in model.graph.nodes:
        if node.target == torch.ops.quantized_decomposed.dequantize_per_channel.default:
            args = [model.get_submodule("").get_buffer(a.target) if hasattr(a, "op") and
                    a.op == "get_attr" else a for a in node.args]
            ref = node.target(*args)
            refs[tuple(ref.shape)] = ref.numpy()
    weights = t[t["backend_dtype"] == "qcint8"]
    assert len(weights) == 2 and set(map(tuple, weights["shape"])) == set(refs)
    for _, row in weights.iterrows():
        got = dequantize(_read(row), row, _read(row, "scale_"))
        assert got.dtype == np.float32 and got.shape == row["shape"]
        np.testing.assert_array_equal(got, refs[row["shape"]])


def test_dequantize_groupwise_int4_matches_torchao(sample):
    """Groupwise int4 weights against torchao's own tensors: exactly, with XNNPACK's bfloat16
    scales; and within bf16 rounding of torchao's ``dequantize()``."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchao")
    (_, info, _), = blobs(sample("wide_xnnpack_8da4w.pte"))
    t = build("delegate_tensors", tensor_columns([info]))
    model = _make_samples().int4_wide_mlp()
    weights = t[t["backend_dtype"] == "qbint4"]
    assert len(weights) == 2
    for _, row in weights.iterrows():
        lin = model.fc1 if row["shape"] == (32, 64) else model.fc2
        w = lin.weight
        got = dequantize(_read(row), row, _read(row, "scale_"))
        ref = w.dequantize().float().numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-2, atol=1e-6)
        q = w.qdata.to(torch.float32) - w.zero_point.to(torch.float32).repeat_interleave(
            row["group_size"], dim=1)
        s = w.scale.to(torch.bfloat16).to(torch.float32).repeat_interleave(row["group_size"], dim=1)
        np.testing.assert_array_equal(got, (q * s).numpy())


def test_dequantize_per_tensor_and_refusals(sample):
    from workbench.formats.delegates import UnsupportedQuantizationError

    path = CORPUS / CORPUS_XNNPACK[0]
    (_, info, _), = blobs(path)
    t = build("delegate_tensors", tensor_columns([info]))
    w = t[(t["backend_dtype"] == "qint8") & (t["role"] == "constant")].iloc[0]
    got = dequantize(_read(w), w)
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch.ao.quantization.fx._decomposed")  # registers quantized_decomposed

    q = torch.frombuffer(bytearray(_read(w)), dtype=torch.int8).reshape(w["shape"])
    ref = torch.ops.quantized_decomposed.dequantize_per_tensor.default(
        q, float(np.float32(w["scale"])), int(w["zero_point"]), -128, 127, torch.int8)
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-6)
    act = t[t["backend_dtype"] == "qint8"].iloc[0]
    assert act["storage"] == "runtime"
    (_, info, _), = blobs(sample("mlp_xnnpack_qc8.pte"))
    t = build("delegate_tensors", tensor_columns([info]))
    dyn = t[t["backend_dtype"] == "qdint8"].iloc[0]
    with pytest.raises(UnsupportedQuantizationError, match="dynamically quantized"):
        dequantize(b"", dyn)
    w = t[t["backend_dtype"] == "qcint8"].iloc[0]
    with pytest.raises(UnsupportedQuantizationError, match="scale bytes"):
        dequantize(_read(w), w)
    with pytest.raises(wb.ArtifactError, match="bytes given") as e:
        dequantize(bytes(_read(w))[:-1], w, _read(w, "scale_"))
    assert e.value.file and e.value.offset == w["offset"]
    with pytest.raises(wb.ArtifactError, match="scales for"):
        dequantize(_read(w), w, bytes(_read(w, "scale_"))[:-4])


def test_dequantize_packed_int4_with_odd_rows_and_partial_groups():
    """Rows of odd length are padded with one nibble; the last group of a row may be short."""
    q = np.array([[-8, 7, 1, -1, 3], [0, 2, -3, 4, -5]], np.int8)
    packed = bytearray()
    for row in q:
        nib = [int(v) + 8 for v in row] + [8]  # pad to an even count
        packed += bytes(lo | hi << 4 for lo, hi in zip(nib[0::2], nib[1::2]))
    assert len(packed) == 2 * 3
    from workbench.formats.delegates.quant import unpack_int4

    np.testing.assert_array_equal(unpack_int4(bytes(packed), (2, 5)), q)
    # per channel (qcint4), float32 scales
    row = {"backend_dtype": "qcint4", "shape": (2, 5), "quant": "per_channel", "channel_dim": 0,
           "scale_dtype": "float32"}
    s = np.array([0.5, 2.0], np.float32)
    np.testing.assert_array_equal(dequantize(bytes(packed), row, s.tobytes()),
                                  q * s[:, None])
    # groupwise (qbint4), groups of 2: three groups per row, the last one short
    row = {"backend_dtype": "qbint4", "shape": (2, 5), "quant": "per_channel_group",
           "channel_dim": 0, "group_size": 2, "scale_dtype": "bfloat16"}
    bf = np.array([[1.0, 2.0, 4.0], [0.5, 0.25, 8.0]], np.float32)
    raw = (bf.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    want = q * np.repeat(bf, 2, axis=1)[:, :5]
    np.testing.assert_array_equal(dequantize(bytes(packed), row, raw), want)
    with pytest.raises(wb.ArtifactError, match="scales for 2 rows x 3 groups"):
        dequantize(bytes(packed), row, raw[:-2])


# -- wired into wb.open: frames, segments, tensor(), dequantize -------------------------------

def _plain(df):
    """Rows of a frame as comparable tuples (categories and NA spelled one way)."""
    import pandas as pd

    return [tuple(None if (v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)))
                  else v for v in row) for row in df.astype(object).itertuples(index=False)]


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_open_wires_in_the_blob_records(path):
    """``wb.open`` gives the records that ``inspect_blob`` gives (checked against flatc and
    XNNHeader above): the delegate_tensors/delegate_nodes frames, the backend in the
    delegates frame, and each XNNPACK blob's segment rows at XNNHeader's offsets."""
    found = blobs(path)
    art = wb.open(path)
    infos = [i for _, i, _ in found]
    for frame, cols in (("delegate_tensors", tensor_columns(infos)),
                        ("delegate_nodes", xnn_node_columns(infos))):
        got = art.frames[frame]
        got = got[got["delegate"] == "XnnpackBackend"].reset_index(drop=True)
        assert _plain(got) == _plain(build(frame, cols)), frame
    d = art.frames["delegates"]
    assert set(d.loc[d["id"] == "XnnpackBackend", "backend"]) == {"xnnpack"}
    seg = art.segments
    for row, info, raw in found:
        if row["location"] != "segment" or raw[info.offset + 4:info.offset + 8] != b"XH00":
            continue
        from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import XNNHeader

        h = XNNHeader.from_bytes(raw[info.offset:info.offset + XNNHeader.EXPECTED_LENGTH])
        rows = seg[(seg["file"] == art.path) & (seg["index"] == row["data_index"])]
        rows = rows.sort_values("offset")
        assert rows["offset"].iloc[0] == info.offset
        assert (rows["offset"] + rows["size"]).iloc[-1] == info.offset + info.size
        by_kind = {k: list(zip(g["offset"], g["size"])) for k, g in rows.groupby("kind", observed=True)}
        assert by_kind["header"] == [(info.offset, XNNHeader.EXPECTED_LENGTH)]
        assert by_kind["flatbuffer"] == [(info.offset + h.flatbuffer_offset, h.flatbuffer_size)]
        lo = info.offset + h.constant_data_offset
        for off, size in by_kind.get("constant", []):
            assert lo <= off and off + size <= lo + h.constant_data_size


def xnn_node_columns(infos):
    from workbench.formats.delegates import node_columns

    return node_columns(infos)


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_tensor_reads_every_stored_delegate_constant(path):
    """``art.tensor(name)`` of a delegate constant: the stored bytes at the frame's offset, in
    its dtype and shape; packed 4-bit data as uint8 rows of ceil(cols / 2) bytes; and
    ``dequantize=True`` equals :func:`dequantize` over the same bytes and scales."""
    if not path.is_file():
        pytest.skip(f"{path.name} is not there")
    art = wb.open(path)
    t = art.frames["delegate_tensors"]
    stored = t[t["offset"].notna()]
    assert len(stored) == (t["role"] == "constant").sum()  # every constant is readable
    for _, row in stored.iterrows():
        got = art.tensor(row["name"])
        raw = pathlib.Path(row["file"]).read_bytes()[row["offset"]:row["offset"] + row["nbytes"]]
        assert np.asarray(got).tobytes() == raw, row["name"]
        shape = tuple(row["shape"])
        if row["dtype"] == "int4":
            assert got.dtype == np.uint8 and got.shape == (*shape[:-1], (shape[-1] + 1) // 2)
        else:
            assert tuple(got.shape) == shape and str(got.dtype).removeprefix("torch.") == row["dtype"]
        if row["quant"] in ("none", "per_tensor", "per_channel", "per_channel_group") and \
                row["backend_dtype"] != "qdint8":
            scales = None if pd_isna(row["scale_offset"]) else _read(row, "scale_")
            want = dequantize(raw, row, scales)
            np.testing.assert_array_equal(art.tensor(row["name"], dequantize=True), want)


def pd_isna(v) -> bool:
    import pandas as pd

    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) or pd.isna(v)


def test_dequantize_through_the_artifact_matches_torchao(sample):
    """``tensor(name, dequantize=True)`` of the groupwise int4 weights: torchao's values."""
    pytest.importorskip("torchao")
    art = wb.open(sample("wide_xnnpack_8da4w.pte"))
    t = art.frames["delegate_tensors"]
    model = _make_samples().int4_wide_mlp()
    for _, row in t[t["backend_dtype"] == "qbint4"].iterrows():
        lin = model.fc1 if row["shape"] == (32, 64) else model.fc2
        got = art.tensor(row["name"], dequantize=True)
        assert got.dtype == np.float32 and got.shape == row["shape"]
        np.testing.assert_allclose(got, lin.weight.dequantize().float().numpy(), rtol=1e-2, atol=1e-6)


def test_dequantize_refusals_and_plain_tensors(sample):
    from workbench.formats.delegates import UnsupportedQuantizationError

    q = wb.open(sample("mlp_xnnpack_qc8.pte"))
    dyn = q.frames["delegate_tensors"].query("backend_dtype == 'qdint8'")["name"].iloc[0]
    with pytest.raises(wb.MissingDataError, match="no stored bytes"):
        q.tensor(dyn, dequantize=True)  # a dynamically quantized activation: nothing stored
    p = wb.open(sample("mlp_portable.pte"))
    w = p.tensor("forward/0")
    got = p.tensor("forward/0", dequantize=True)
    assert got.dtype == np.float32 and got.flags.writeable
    np.testing.assert_array_equal(got, w)
    b = wb.open(sample("mlp_bf16.pte"))
    name = b.tensors.query("dtype == 'bfloat16' and offset.notna()")["name"].iloc[0]
    np.testing.assert_array_equal(b.tensor(name, dequantize=True), b.tensor(name).float().numpy())
    planned = p.tensors.query("storage == 'planned'")["name"].iloc[0]
    with pytest.raises(wb.MissingDataError):
        p.tensor(planned, dequantize=True)
    nd = q.tensors.query("storage == 'named_data'")["name"].iloc[0]  # raw uint8 named data
    with pytest.raises(UnsupportedQuantizationError, match="no quantization parameters"):
        q.tensor(nd, dequantize=True)


def test_named_data_rows_say_what_the_graph_reads(sample):
    """Each named-data key a graph tensor reads carries that tensor's name, dtype, logical
    shape and quantization; the scales' keys name the tensor they scale."""
    art = wb.open(sample("wide_xnnpack_8da4w.pte"))
    nd = art.frames["named_data"].set_index("key")
    t = art.frames["delegate_tensors"]
    consts = t[t["named_key"].notna()]
    assert len(consts) and set(consts["named_key"]) <= set(nd.index)
    for _, row in consts.iterrows():
        r = nd.loc[row["named_key"]]
        assert (r["tensor"], r["dtype"], r["shape"], r["quant"]) == (
            row["name"], row["dtype"], row["shape"], row["quant"])
        if row["quant"] == "per_channel_group":
            assert r["group_size"] == row["group_size"] == 32
            s = nd.loc[row["scale_key"]]
            assert s["tensor"] == f"{row['name']} (scales)" and s["dtype"] == row["scale_dtype"]
            assert s["shape"] == (row["num_scales"],) and s["size"] == row["scale_nbytes"]
    unread = set(nd.index) - set(consts["named_key"]) - set(consts["scale_key"].dropna())
    assert all(pd_isna(nd.loc[k, "tensor"]) for k in unread)


def test_a_broken_blob_is_a_finding_not_a_refusal(sample, tmp_path):
    """An XNNPACK blob whose header points its graph past the blob: the program still opens
    (the runtime would load it and fail in the backend's init), the blob stays one segment,
    and validate() names the delegate and the offset."""
    import struct

    src = sample("mlp_xnnpack.pte")
    art = wb.open(src)
    d = art.frames["delegates"].iloc[0]
    data = bytearray(src.read_bytes())
    struct.pack_into("<I", data, int(d["offset"]) + 12, int(d["size"]) * 4)  # flatbuffer_size
    bad = tmp_path / "broken.pte"
    bad.write_bytes(bytes(data))
    b = wb.open(bad)
    rows = b.segments[b.segments["index"] == d["data_index"]]
    assert rows[["offset", "size", "kind"]].values.tolist() == [[d["offset"], d["size"], "delegate"]]
    assert b.frames["delegate_tensors"].empty and b.frames["delegates"]["backend"].isna().all()
    v = b.validate()
    err = v[v["severity"] == "error"]
    assert len(err) == 1 and "forward delegate 0 (XnnpackBackend)" in err["structure"].iloc[0]
    assert "cannot be taken apart" in err["message"].iloc[0]
    assert d["offset"] <= int(err["offset"].iloc[0]) < d["offset"] + d["size"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_scales_are_a_finding_and_a_clear_warning(tmp_path, bad):
    """A per-channel scale set to NaN / inf (as a mutated mlp_xnnpack_qc8.pte has): validate()
    names the tensor and the count, and the dequantized view warns clearly instead of
    numpy's bare RuntimeWarning."""
    import struct
    import warnings

    import numpy as np

    from workbench.formats.delegates.quant import NonFiniteScalesWarning

    src = pathlib.Path(__file__).resolve().parent.parent / "sample_models" / "mlp_xnnpack_qc8.pte"
    dt = wb.open(src).frames["delegate_tensors"]
    row = dt[dt["quant"] == "per_channel"].iloc[0]
    assert row["scale_dtype"] == "float32"
    data = bytearray(src.read_bytes())
    at = int(row["scale_offset"]) + 4 * 3  # the fourth scale
    data[at:at + 4] = struct.pack("<f", bad)
    path = tmp_path / "qc8_bad_scale.pte"
    path.write_bytes(bytes(data))
    art = wb.open(path)
    found = art.validate()
    hit = found[found["structure"] == f"delegate tensor {row['name']!r}"]
    assert len(hit) == 1 and hit["severity"].iloc[0] == "warning"
    assert "1 of " in hit["message"].iloc[0] and hit["offset"].iloc[0] == int(row["scale_offset"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = art.tensor(row["name"], dequantize=True)
    kinds = [w.category for w in caught]
    assert kinds == [NonFiniteScalesWarning], kinds  # no numpy RuntimeWarning
    assert row["name"] in str(caught[0].message) and "1 of" in str(caught[0].message)
    assert (~np.isfinite(values)).any() and np.isfinite(values[0]).all()
    assert wb.open(src).validate().empty or not wb.open(src).validate()["message"].str.contains(
        "scales are").any()
