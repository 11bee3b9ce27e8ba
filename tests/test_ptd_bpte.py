"""External data (.ptd), .pte + .ptd resolution and bundled programs (.bpte), against the
ExecuTorch oracle (its FlatTensor and bundled-program deserializers and its runtime), plus
hostile .ptd/.bpte inputs built in the test."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
from helpers import check_invariants

import workbench as wb
from workbench import readpath
from workbench.dtypes import SCALAR_TYPES

PTDS = ["mlp_external.ptd", "mlp_xnnpack_external.ptd"]


def _sha(b) -> str:
    return hashlib.sha256(bytes(b)).hexdigest()


def _tensor_bytes(art, name) -> bytes:
    t = art.tensor(name)
    if hasattr(t, "numpy"):  # torch (bf16): reinterpret as bytes
        import torch

        return t.contiguous().view(torch.uint8).numpy().tobytes()
    return np.ascontiguousarray(t).tobytes()


@pytest.fixture(scope="module")
def flat_tensor():
    pytest.importorskip("executorch")
    from executorch.exir._serialize._cord import Cord
    from executorch.extension.flat_tensor.serialize.serialize import (
        FlatTensorHeader,
        FlatTensorSerializer,
    )

    def read(path):
        data = open(path, "rb").read()
        return FlatTensorHeader.from_bytes(data[8:]), FlatTensorSerializer().deserialize(Cord(data))

    return read


# -- .ptd on its own ---------------------------------------------------------------------------

def _layout_nbytes(layout, oracle) -> int:
    """Bytes of a tensor with this FlatTensor layout (numel x element size, by the oracle)."""
    numel = 1
    for s in layout.sizes:
        numel *= s
    return numel * oracle.itemsize(layout.scalar_type)


@pytest.mark.parametrize("name", PTDS)
def test_ptd_matches_oracle(sample, flat_tensor, oracle, name):
    path = sample(name)
    header, payload = flat_tensor(path)
    art = wb.open(path)
    assert art.format == "ptd"
    h = art.info["header"]
    assert (h.flatbuffer_offset, h.flatbuffer_size, h.segment_base_offset, h.segment_data_size) == (
        header.flatbuffer_offset, header.flatbuffer_size, header.segment_base_offset,
        header.segment_data_size)
    nd = art.frames["named_data"].set_index("key")
    assert sorted(nd.index) == sorted(payload.named_data)
    ten = art.tensors.set_index("name")
    for key, entry in payload.named_data.items():
        buf = payload.buffers[entry.buffer_index]
        assert int(nd.loc[key, "segment"]) == entry.buffer_index
        assert int(nd.loc[key, "size"]) == len(buf)
        layout = entry.tensor_layout
        row = ten.loc[key]
        if layout is None:
            assert not row["has_layout"] and row["dtype"] == "uint8" and row["nbytes"] == len(buf)
            n = len(buf)  # a raw blob: all of it
        else:
            assert row["has_layout"]
            assert row["dtype"] == SCALAR_TYPES[int(layout.scalar_type)].name
            assert tuple(row["shape"]) == tuple(layout.sizes)
            assert tuple(row["dim_order"]) == tuple(layout.dim_order)
            n = _layout_nbytes(layout, oracle)
            assert 0 < n <= len(buf) and row["nbytes"] == n
        got = _tensor_bytes(art, key)
        assert len(got) == n and _sha(got) == _sha(buf[:n])


@pytest.mark.parametrize("name", PTDS)
def test_ptd_segments_cover_file(sample, name):
    path = sample(name)
    seg = wb.open(path).segments
    assert seg["offset"].iloc[0] == 0
    assert (seg["offset"].to_numpy()[1:] == (seg["offset"] + seg["size"]).to_numpy()[:-1]).all()
    assert seg["size"].sum() == os.path.getsize(path)
    assert {"header", "flatbuffer", "named_data"} <= set(seg["kind"])


# -- .pte + .ptd resolution ----------------------------------------------------------------------

def test_external_tensors_resolve_to_sibling_ptd(sample, flat_tensor, oracle):
    pte, ptd = sample("mlp_external.pte"), sample("mlp_external.ptd")
    _, payload = flat_tensor(ptd)
    art = wb.open(pte)
    assert art.info["data_files"] == [str(ptd)]
    ext = art.tensors[art.tensors["storage"] == "external"]
    assert len(ext) == len(payload.named_data) > 0
    assert (ext["file"] == str(ptd)).all() and not ext["missing"].any()
    for r in ext.itertuples():
        entry = payload.named_data[r.name]
        n = _layout_nbytes(entry.tensor_layout, oracle)
        got = _tensor_bytes(art, r.name)
        assert len(got) == n and _sha(got) == _sha(payload.buffers[entry.buffer_index][:n])
    # segments: both files, each covered exactly
    for f, g in art.segments.groupby("file"):
        assert g["size"].sum() == os.path.getsize(f)


def test_explicit_data_and_missing_data(sample, tmp_path):
    pte = shutil.copy(sample("mlp_external.pte"), tmp_path / "lonely.pte")
    art = wb.open(pte)  # no sibling .ptd: still opens
    ext = art.tensors[art.tensors["storage"] == "external"]
    assert len(ext) and ext["missing"].all() and ext["offset"].isna().all()
    with pytest.raises(wb.MissingDataError, match=r"fc1\.weight"):
        art.tensor("fc1.weight")
    assert (art.validate()["message"].str.contains("not found")).sum() == len(ext)
    # explicit data= from another folder resolves them
    art2 = wb.open(pte, data=[sample("mlp_external.ptd")])
    assert not art2.tensors["missing"].fillna(False).any()
    assert art2.tensor("fc1.weight").shape == (32, 16)
    # data=[] disables sibling discovery
    art3 = wb.open(sample("mlp_external.pte"), data=[])
    assert art3.tensors["missing"].fillna(False).sum() == len(ext)


def test_missing_xnnpack_data_does_not_crash(sample, tmp_path):
    """ExecuTorch's runtime segfaults here; we open fine and say what is missing."""
    pte = shutil.copy(sample("mlp_xnnpack_external.pte"), tmp_path / "x.pte")
    art = wb.open(pte)
    assert art.info["data_files"] == []
    assert not (art.tensors["storage"] == "named_data").any()


def test_xnnpack_named_data_in_ptd_is_used_by_delegate(sample):
    art = wb.open(sample("mlp_xnnpack_external.pte"))
    nd = art.frames["named_data"]
    assert len(nd) == 4 and nd["file"].str.endswith(".ptd").all()
    assert nd["used_by"].str.contains("XnnpackBackend").all()
    # the same keys live inside mlp_xnnpack.pte (content hashes): bytes agree
    inline = wb.open(sample("mlp_xnnpack.pte"))
    for key in nd["key"]:
        assert _sha(_tensor_bytes(art, key)) == _sha(_tensor_bytes(inline, key)) == key


@pytest.mark.slow
def test_runtime_runs_with_resolved_data(sample):
    """The oracle runtime loads the program with the .ptd we matched (in a subprocess)."""
    pytest.importorskip("executorch")
    art = wb.open(sample("mlp_external.pte"))
    code = (
        "import sys, torch\n"
        "from executorch.runtime import Runtime\n"
        "p = Runtime.get().load_program(sys.argv[1], data_path=sys.argv[2])\n"
        "out = p.load_method('forward').execute([torch.ones(2, 16)])\n"
        "print('OK', tuple(out[0].shape))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, art.path, art.info["data_files"][0]],
                          capture_output=True, text=True, timeout=120)
    assert "OK (2, 8)" in proc.stdout, proc.stderr[-2000:]


# -- bundled programs --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bundled():
    pytest.importorskip("executorch")
    from executorch.devtools.bundled_program.serialize import (
        deserialize_from_flatbuffer_to_bundled_program,
    )

    return lambda path: deserialize_from_flatbuffer_to_bundled_program(open(path, "rb").read())


def test_bpte_matches_oracle(sample, bundled, oracle):
    path = sample("mlp.bpte")
    bundle = bundled(path)
    art = wb.open(path)
    assert art.format == "bpte"
    start, size = art.info["program_offset"], art.info["program_size_in_bundle"]
    raw = open(path, "rb").read()
    assert raw[start:start + size] == bundle.program
    # the embedded program's frames equal the standalone .pte's, shifted by `start`
    standalone = wb.open(sample("mlp_portable.pte"))
    assert bytes(bundle.program) == open(standalone.path, "rb").read()  # sample_models/README.md
    a = art.tensors.dropna(subset=["offset"]).reset_index(drop=True)
    b = standalone.tensors.dropna(subset=["offset"]).reset_index(drop=True)
    assert list(a["name"]) == list(b["name"]) and len(a) == 4
    assert (a["offset"] - b["offset"] == start).all()
    # test cases
    cases = art.frames["test_cases"]
    expected_rows = []
    for suite in bundle.method_test_suites:
        for ci, case in enumerate(suite.test_cases):
            for io, values in (("input", case.inputs), ("expected_output", case.expected_outputs)):
                for k, v in enumerate(values):
                    expected_rows.append((suite.method_name, ci, io, k, v.val))
    assert len(cases) == len(expected_rows)
    for (method, ci, io, k, val), r in zip(expected_rows, cases.itertuples()):
        assert (r.method, r.case, r.io, r.index) == (method, ci, io, k)
        if type(val).__name__ == "Tensor":
            assert r.dtype == SCALAR_TYPES[int(val.scalar_type)].name
            assert tuple(r.shape) == tuple(val.sizes)
            n = 1
            for d in val.sizes:
                n *= d
            n *= oracle.itemsize(val.scalar_type)
            assert r.nbytes == n and len(val.data) >= n
            assert _tensor_bytes(art, r.name) == bytes(val.data)[:n]
    # segments cover the .bpte; the program and test data are labelled
    seg = art.segments
    assert seg["size"].sum() == os.path.getsize(path)
    assert (seg["kind"] == "test_data").sum() == int((cases["kind"] == "Tensor").sum())
    assert seg["name"].str.startswith("program: ").any()
    # art.program: same map, no copy
    inner = art.program
    assert inner.format == "pte" and inner.tensors["offset"].dropna().min() >= start


def test_bpte_run_test_cases(sample):
    pytest.importorskip("executorch")
    res = wb.open(sample("mlp.bpte")).run_test_cases(rtol=1e-3, atol=1e-5)
    assert len(res) == 2 and res["passed"].all(), res
    assert (res["max_abs_error"] < 1e-4).all()


# -- hostile .ptd / .bpte ------------------------------------------------------------------------

def _mutate(src, tmp_path, name, edits):
    data = bytearray(open(src, "rb").read())
    for off, blob in edits:
        data[off:off + len(blob)] = blob
    p = tmp_path / name
    p.write_bytes(bytes(data))
    return p


@pytest.mark.parametrize("field,offset", [("flatbuffer_offset", 16), ("flatbuffer_size", 24),
                                          ("segment_base_offset", 32), ("segment_data_size", 40)])
def test_ptd_header_fields_past_eof(sample, tmp_path, field, offset):
    p = _mutate(sample("mlp_external.ptd"), tmp_path, "bad.ptd", [(offset, struct.pack("<Q", 2**40))])
    with pytest.raises(wb.ArtifactError) as e:
        wb.open(p)
    assert "bad.ptd" in str(e.value) and "0x" in str(e.value)


def test_ptd_truncated_everywhere(sample, tmp_path):
    data = open(sample("mlp_external.ptd"), "rb").read()
    for cut in [0, 4, 7, 8, 12, 20, 47, 48, 100, 511, 512, 1000, len(data) - 1]:
        p = tmp_path / f"t{cut}.ptd"
        p.write_bytes(data[:cut])
        with pytest.raises(wb.ArtifactError):
            wb.open(p)


def test_ptd_bad_header_magic_and_version(sample, tmp_path):
    p = _mutate(sample("mlp_external.ptd"), tmp_path, "m.ptd", [(8, b"XX01")])
    with pytest.raises(wb.CorruptError, match="FH01"):
        wb.open(p)
    p = _mutate(sample("mlp_external.ptd"), tmp_path, "v.ptd", [(4, b"FT99")])
    with pytest.raises(wb.UnsupportedVersionError):
        wb.open(p)


@pytest.mark.slow  # a fuzz loop / runtime run: seconds (the mutation runs skip it)
def test_bpte_truncated_and_mutated(sample, tmp_path):
    data = open(sample("mlp.bpte"), "rb").read()
    for cut in [0, 7, 8, 60, 64, 100, 3000, len(data) - 40, len(data) - 1]:
        p = tmp_path / f"t{cut}.bpte"
        p.write_bytes(data[:cut])
        with pytest.raises(wb.ArtifactError):
            wb.open(p)
    rng = np.random.default_rng(0)
    outcomes = {"ok": 0, "error": 0}
    for i in range(150):
        buf = bytearray(data)
        for _ in range(4):
            buf[int(rng.integers(0, len(buf)))] ^= 1 << int(rng.integers(0, 8))
        p = tmp_path / f"m{i}.bpte"
        p.write_bytes(bytes(buf))
        try:
            art = wb.open(p)
            for k in art.frames:
                art.frames[k]
            art.validate()
            # every test-case row names a readable tensor (or an ArtifactError says why not),
            # and whatever opened satisfies the invariants, the embedded program's too
            for name in art.frames["test_cases"]["name"].dropna():
                art.tensor(name)
            check_invariants(art)
            check_invariants(art.program)
        except wb.ArtifactError:
            outcomes["error"] += 1
        else:
            outcomes["ok"] += 1
            art.close()
        p.unlink()
    assert outcomes["ok"] >= 20 and outcomes["error"] >= 20, outcomes


def test_sibling_with_same_keys_but_other_layout_is_not_used(sample, tmp_path):
    """A neighbour .ptd that holds the same names with other shapes (another model's weights)
    must not be picked up; the right one (named like the program) must."""
    pytest.importorskip("executorch")
    from executorch.exir._serialize._cord import Cord  # noqa: F401
    from executorch.exir._serialize.data_serializer import DataEntry, DataPayload
    from executorch.exir.schema import ScalarType
    from executorch.extension.flat_tensor.serialize.flat_tensor_schema import TensorLayout
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    payload = DataPayload(
        buffers=[b"\0" * 16],
        named_data={"fc1.weight": DataEntry(0, 16, TensorLayout(ScalarType.FLOAT, [4], [0]))})
    (tmp_path / "a_other_model.ptd").write_bytes(bytes(FlatTensorSerializer().serialize(payload)))
    pte = shutil.copy(sample("mlp_external.pte"), tmp_path / "mlp.pte")
    art = wb.open(pte)
    assert art.info["data_files"] == []  # the decoy resolves nothing
    assert art.tensors["missing"].fillna(False).sum() == 4
    # given explicitly, it is attached, but the mismatching entry is not used (and is reported)
    forced = wb.open(pte, data=[tmp_path / "a_other_model.ptd"])
    assert forced.tensors["missing"].fillna(False).sum() == 4
    assert forced.validate()["message"].str.contains("another dtype/shape").any()
    shutil.copy(sample("mlp_external.ptd"), tmp_path / "mlp.ptd")
    art = wb.open(pte)
    assert art.info["data_files"] == [str(tmp_path / "mlp.ptd")]
    assert not art.tensors["missing"].fillna(False).any()


@pytest.mark.parametrize("name", PTDS)
def test_ptd_fast_and_scalar_paths_agree(sample, monkeypatch, name):
    import pandas as pd


    fast = wb.open(sample(name))
    monkeypatch.setattr(readpath, "TIER", readpath.Tier.TABLES)
    slow = wb.open(sample(name))
    for k in fast.frames:
        pd.testing.assert_frame_equal(fast.frames[k], slow.frames[k])


def test_self_contained_program_does_not_parse_siblings(sample, tmp_path, monkeypatch):
    """A program that needs no external data never reads the .ptd files next to it."""
    import workbench.formats.ptd as ptd

    pte = shutil.copy(sample("mlp_portable.pte"), tmp_path / "mlp.pte")
    shutil.copy(sample("mlp_external.ptd"), tmp_path / "mlp.ptd")
    calls = []
    real = ptd.read
    monkeypatch.setattr(ptd, "read", lambda src: calls.append(src.path) or real(src))
    art = wb.open(pte)
    assert calls == [] and art.info["data_files"] == []
