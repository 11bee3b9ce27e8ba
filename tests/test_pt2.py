"""The ``.pt2`` reader (torch.export archives and AOTInductor packages) against torch's own
loaders, plus hostile archives built here. Golden facts come from ``torch.export.load`` /
``load_pt2`` and Python's ``zipfile``, computed in the test."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import struct
import subprocess
import sys
import tracemalloc
import warnings
import zipfile
import zlib
from collections import Counter

import numpy as np
import pytest
from helpers import check_invariants

import workbench as wb
from workbench.errors import CorruptError, OutOfBoundsError, TruncatedError
from workbench.formats import pt2 as pt2_reader
from workbench.formats.pt2 import config as pt2_config

PT2_SAMPLES = ("mlp.pt2", "tied.pt2", "mlp_aoti.pt2", "mlp_aoti_blob.pt2")


# --------------------------------------------------------------------------------------------
# helpers: a tiny zip writer (full control over every field) and torch-side oracles
# --------------------------------------------------------------------------------------------

def build_zip(members: list[dict], *, align: int = 64, zip64: bool = False,
              comment: bytes = b"") -> tuple[bytes, dict]:
    """A zip archive from ``members`` (dicts: name (str|bytes), data (stored bytes), method,
    file_size (declared), flags); member data aligned like torch's writer ("FB" extra).

    Returns the bytes and the offsets of interesting fields: ``central[i]`` (record offset),
    ``local[i]`` (local header offset), ``eocd``, ``cd_offset``.
    """
    out = bytearray()
    where: dict = {"central": [], "local": []}
    records = []
    for m in members:
        name = m["name"].encode() if isinstance(m["name"], str) else m["name"]
        data = m["data"]
        method = m.get("method", 0)
        flags = m.get("flags", 0x0800)
        size = m.get("file_size", len(data))
        crc = zlib.crc32(data) if method == 0 else 0
        lho = len(out)
        extra = b""
        if align:
            pad = (-(lho + 30 + len(name) + 4)) % align
            extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, method, 0, 0, crc,
                           min(len(data), 0xFFFFFFFF), min(size, 0xFFFFFFFF), len(name), len(extra))
        out += name + extra + data
        where["local"].append(lho)
        records.append((name, method, flags, crc, len(data), size, lho))
    cd = len(out)
    for name, method, flags, crc, csize, usize, lho in records:
        where["central"].append(len(out))
        extra = b""
        if zip64:
            extra = struct.pack("<HHQQQ", 1, 24, usize, csize, lho)
            csize = usize = lho = 0xFFFFFFFF
        out += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, flags, method, 0, 0, crc,
                           csize, usize, len(name), len(extra), 0, 0, 0, 0, lho)
        out += name + extra
    cd_size = len(out) - cd
    n = len(records)
    if zip64:
        z64 = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, cd_size, cd)
        out += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
        where["eocd"] = len(out)
        out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                           0xFFFFFFFF, len(comment)) + comment
    else:
        where["eocd"] = len(out)
        out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, n, n, cd_size, cd,
                           len(comment)) + comment
    where["cd_offset"] = cd
    return bytes(out), where


MIN_GRAPH = {"graph_module": {"graph": {"inputs": [], "outputs": [], "nodes": [
    {"target": "torch.ops.aten.relu.default", "inputs": [], "outputs": [], "metadata": {}}]},
    "signature": {"input_specs": [{"user_input": {"arg": {"as_tensor": {"name": "x"}}}}],
                  "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": "y"}}}}]}},
    "schema_version": {"major": 8, "minor": 20}, "torch_version": "test"}


def tensor_meta(dtype: int, sizes: list[int], strides: list[int] | None = None, offset: int = 0,
                requires_grad: bool = False) -> dict:
    if strides is None:
        strides, acc = [], 1
        for s in reversed(sizes):
            strides.insert(0, acc)
            acc *= s
    return {"dtype": dtype, "sizes": [{"as_int": s} for s in sizes], "requires_grad": requires_grad,
            "device": {"type": "cpu", "index": None},
            "strides": [{"as_int": s} for s in strides], "storage_offset": {"as_int": offset},
            "layout": 7}


def pt2_members(root: str = "arc", weights: dict | None = None, constants: dict | None = None,
                files: dict | None = None, model: str = "model") -> list[dict]:
    """Members of a torch.export-style archive: configs, graph, and ``files`` (rel -> bytes)."""
    ms = [{"name": f"{root}/archive_format", "data": b"pt2"},
          {"name": f"{root}/byteorder", "data": b"little"},
          {"name": f"{root}/models/{model}.json", "data": json.dumps(MIN_GRAPH).encode()},
          {"name": f"{root}/data/weights/{model}_weights_config.json",
           "data": json.dumps({"config": weights or {}}).encode()},
          {"name": f"{root}/data/constants/{model}_constants_config.json",
           "data": json.dumps({"config": constants or {}}).encode()}]
    for rel, data in (files or {}).items():
        ms.append({"name": f"{root}/{rel}", "data": data} if isinstance(data, bytes)
                  else {"name": f"{root}/{rel}", **data})
    return ms


def write(tmp_path: pathlib.Path, data: bytes, name: str = "hostile.pt2") -> pathlib.Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def exercise(path) -> wb.Artifact:
    """Open, build every frame, validate, summarise and read every stored tensor; only
    ArtifactError may escape (raised to the caller)."""
    art = wb.open(path)
    for name in list(art.frames):
        art.frames[name]
    art.validate()
    art.summary()
    art._repr_html_()
    t = art.tensors
    for name in t.loc[t["offset"].notna(), "name"]:
        art.tensor(name)
    return art


def as_torch(x):
    import torch

    return torch.from_numpy(np.array(x)) if isinstance(x, np.ndarray) else x


def dense(row) -> bool:
    """The row's view is dense: contiguous up to a permutation of its dimensions."""
    sh, st = tuple(row["shape"]), tuple(row["strides"])
    order = sorted(range(len(sh)), key=lambda d: -st[d])
    return pt2_config.contiguous(tuple(sh[d] for d in order), tuple(st[d] for d in order))


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="session")
def built(tmp_path_factory, torch):
    """Archives exported here: ``rich.pt2`` (bf16 parameter, buffers sharing one storage with
    offsets, a transposed, a strided and an expanded view, a non-persistent buffer, a lifted
    constant) and
    ``multi.pt2`` (two exported programs with overlapping FQNs, via ``package_pt2``)."""
    from torch import nn
    from torch.export.pt2_archive._package import package_pt2

    class Rich(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 4)
            base = torch.arange(32, dtype=torch.float32).reshape(4, 8)
            self.register_buffer("full", base)
            self.register_buffer("tail", base[2:])
            self.register_buffer("tb", base.t())
            self.register_buffer("cols", base[:, ::2])
            self.register_buffer("exp", torch.arange(3.0).reshape(3, 1).expand(3, 4))
            self.register_buffer("np_buf", torch.ones(3), persistent=False)
            self.wbf = nn.Parameter(torch.randn(4, 8).to(torch.bfloat16))
            self.const = torch.tensor([1.0, 2.0, 3.0])

        def forward(self, x):
            return (self.lin(x) + self.full.sum() + self.tail.sum() + self.tb.sum()
                    + self.cols.sum() + self.exp.sum() + self.np_buf.sum() + self.wbf.float().sum()
                    + self.const.sum())

    class Small(nn.Module):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.fc = nn.Linear(n, n)

        def forward(self, x):
            return self.fc(x)

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("pt2")
    ep = torch.export.export(Rich(), (torch.randn(2, 8),), strict=False)
    with warnings.catch_warnings():  # "No complete tensor found in the group" (the views)
        warnings.simplefilter("ignore", UserWarning)
        torch.export.save(ep, str(out / "rich.pt2"))
    a = torch.export.export(Small(4), (torch.randn(1, 4),), strict=False)
    b = torch.export.export(Small(6), (torch.randn(1, 6),), strict=False)
    package_pt2(str(out / "multi.pt2"), exported_programs={"enc": a, "dec": b})
    return out


def oracle_programs(path, torch) -> dict:
    """model name -> ExportedProgram, loaded by torch (trusted files only)."""
    from torch.export.pt2_archive._package import load_pt2

    return dict(load_pt2(str(path)).exported_programs)


def all_pt2(sample, built) -> list[pathlib.Path]:
    return [sample(n) for n in PT2_SAMPLES] + [built / "rich.pt2", built / "multi.pt2"]


# --------------------------------------------------------------------------------------------
# torch.export archives against torch
# --------------------------------------------------------------------------------------------

@pytest.mark.oracle
@pytest.mark.parametrize("which", ["mlp.pt2", "tied.pt2", "rich.pt2", "multi.pt2"])
def test_tensors_match_torch_export_load(which, sample, built, torch):
    path = built / which if which in ("rich.pt2", "multi.pt2") else sample(which)
    programs = oracle_programs(path, torch)
    with wb.open(path) as art:
        assert art.format == "pt2" and art.info["archive_format"] == "pt2"
        t = art.tensors.set_index(["model", "fqn"], drop=False)
        expected = 0
        storages: dict = {}
        for model, ep in programs.items():
            items = [(k, v, "parameter" if isinstance(v, torch.nn.Parameter) else "buffer")
                     for k, v in ep.state_dict.items()]
            items += [(k, v, "constant") for k, v in ep.constants.items()]
            for fqn, v, kind in items:
                expected += 1
                row = t.loc[(model, fqn)]
                assert row["dtype"] == str(v.dtype).removeprefix("torch."), fqn
                assert tuple(row["shape"]) == tuple(v.shape)
                assert tuple(row["strides"]) == v.stride()
                assert row["storage_offset"] == v.storage_offset()
                assert row["nbytes"] == v.numel() * v.element_size()
                assert row["kind"] == kind and row["storage"] == "zip" and not row["pickled"]
                assert row["contiguous"] == v.is_contiguous()
                if kind != "constant":
                    assert bool(row["requires_grad"]) == v.requires_grad
                assert row["offset"] % v.element_size() == 0
                storages.setdefault(v.untyped_storage().data_ptr(), set()).add(row["storage_id"])
                x = art.tensor(row["name"])
                strides = (tuple(s // x.itemsize for s in x.strides) if isinstance(x, np.ndarray)
                           else x.stride())
                got = as_torch(x)
                assert got.dtype == v.dtype and got.shape == v.shape and strides == v.stride()
                assert torch.equal(got, v.detach()), fqn
        assert len(t) == expected
        # one storage id per torch storage, and different storages get different ids
        assert all(len(ids) == 1 for ids in storages.values())
        assert len({next(iter(ids)) for ids in storages.values()}) == len(storages)
        shared = t.groupby("storage_id")["name"].transform("count") > 1
        assert (t["shared"] == shared).all()


@pytest.mark.oracle
def test_views_follow_strides(built, torch):
    """Non-dense views (``base[:, ::2]``, an expanded stride-0 buffer) need
    ``Artifact.tensor`` to honour the ``strides`` column."""
    ep = torch.export.load(str(built / "rich.pt2"))
    with wb.open(built / "rich.pt2") as art:
        t = art.tensors.set_index("name", drop=False)
        assert not dense(t.loc["cols"]) and not dense(t.loc["exp"]) and dense(t.loc["tb"])
        assert not t.loc["tb", "contiguous"] and t.loc["tail", "contiguous"]
        for name in ("tb", "tail", "cols", "exp"):
            got = as_torch(art.tensor(name))
            assert got.shape == ep.state_dict[name].shape
            assert torch.equal(got, ep.state_dict[name]), name


@pytest.mark.oracle
def test_tied_weights_share_one_member(sample, torch):
    ep = torch.export.load(str(sample("tied.pt2")))
    sd = ep.state_dict
    assert sd["emb.weight"].untyped_storage().data_ptr() == \
        sd["lm_head.weight"].untyped_storage().data_ptr()
    with wb.open(sample("tied.pt2")) as art:
        t = art.tensors.set_index("name")
        a, b = t.loc["emb.weight"], t.loc["lm_head.weight"]
        assert a["member"] == b["member"] and a["offset"] == b["offset"]
        assert a["storage_id"] == b["storage_id"] and a["shared"] and b["shared"]
        m = art.frames["members"].set_index("name").loc[a["member"]]
        assert m["used_by"] == "emb.weight; lm_head.weight" and m["kind"] == "weights"


@pytest.mark.oracle
@pytest.mark.parametrize("which", ["mlp.pt2", "tied.pt2", "rich.pt2", "multi.pt2"])
def test_models_and_graph_frames(which, sample, built, torch):
    path = built / which if which in ("rich.pt2", "multi.pt2") else sample(which)
    programs = oracle_programs(path, torch)
    with wb.open(path) as art:
        models = art.frames["models"].set_index("name")
        graph = art.frames["graph"]
        assert set(models.index) == set(programs)
        for model, ep in programs.items():
            sig = ep.graph_signature
            row = models.loc[model]
            calls = Counter(f"torch.ops.{n.target}" for n in ep.graph.nodes
                            if n.op == "call_function")
            assert row["kind"] == "exported_program"
            assert row["nodes"] == sum(calls.values()) and row["ops"] == len(calls)
            assert row["parameters"] == len(sig.parameters)
            assert row["buffers"] == len(sig.buffers)
            assert row["constants"] == len(sig.lifted_tensor_constants) + len(sig.lifted_custom_objs)
            assert row["inputs"] == len(sig.user_inputs)
            assert row["outputs"] == len(sig.user_outputs)
            assert row["torch_version"] == torch.__version__
            g = graph[graph["model"] == model]
            assert dict(zip(g["target"], g["count"])) == dict(calls)


def test_graph_scan_equals_full_parse(sample, built):
    """The fast scan used for large graph JSON agrees with json.loads on every graph here,
    and with other separators/indentation."""
    seen = 0
    for path in [sample("mlp.pt2"), sample("tied.pt2"), built / "rich.pt2", built / "multi.pt2"]:
        with zipfile.ZipFile(path) as zf:
            for name in zf.namelist():
                if "/models/" in name:
                    raw = zf.read(name)
                    full = pt2_reader.graph_stats(raw, full_parse_limit=1 << 40)
                    assert pt2_reader.graph_stats(raw, full_parse_limit=0) == full
                    doc = json.loads(raw)
                    for kw in ({"separators": (",", ":")}, {"indent": 1}):
                        other = json.dumps(doc, **kw).encode()
                        assert pt2_reader.graph_stats(other, full_parse_limit=0) == full
                    seen += 1
    assert seen >= 5


# --------------------------------------------------------------------------------------------
# AOTInductor packages
# --------------------------------------------------------------------------------------------

@pytest.mark.oracle
@pytest.mark.parametrize("which,storage", [("mlp_aoti.pt2", "so"), ("mlp_aoti_blob.pt2", "blob")])
def test_aoti_constants(which, storage, sample, torch):
    """Constants of the AOTI packages (the same seeded MLP) equal mlp.pt2's weights."""
    ref = torch.export.load(str(sample("mlp.pt2"))).state_dict
    with wb.open(sample(which)) as art:
        t = art.tensors.set_index("name", drop=False)
        assert set(t["storage"]) == {storage}
        assert set(t.index) <= set(ref) and len(t) >= 3
        members = art.frames["members"].set_index("name")
        seg = art.segments
        blob_rows = seg[seg["kind"] == "blob"]
        assert len(blob_rows) == 1
        lo, hi = int(blob_rows["offset"].iloc[0]), int(blob_rows[["offset", "size"]].sum(axis=1).iloc[0])
        for name, row in t.iterrows():
            assert row["kind"] == "parameter" and row["offset"] % 64 == 0
            assert lo <= row["offset"] and row["offset"] + row["nbytes"] <= hi
            m = members.loc[row["member"]]
            assert m["kind"] == storage
            got = as_torch(art.tensor(name))
            assert torch.equal(got, ref[name].detach()), name
        models = art.frames["models"]
        assert list(models["kind"]) == ["aoti"] and models["device"].iloc[0] == "cpu"
        assert models["parameters"].iloc[0] == len(t)
        if storage == "so":  # the constants sit inside the shared object's bytes
            so = members[members["kind"] == "so"].iloc[0]
            assert so["offset"] <= lo and hi <= so["offset"] + so["size"]


@pytest.mark.slow
@pytest.mark.oracle
@pytest.mark.skipif(os.environ.get("WORKBENCH_TEST_AOTI_LOAD") != "1",
                    reason="aoti_load_package takes ~15 s (vec ISA probing); "
                           "set WORKBENCH_TEST_AOTI_LOAD=1")
def test_aoti_against_aoti_load_package(sample, tmp_path, monkeypatch, torch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for which in ("mlp_aoti.pt2", "mlp_aoti_blob.pt2"):
        runner = torch._inductor.aoti_load_package(str(sample(which)))
        with wb.open(sample(which)) as art:
            assert set(runner.get_constant_fqns()) == set(art.tensors["fqn"])


# --------------------------------------------------------------------------------------------
# layout: segments, members
# --------------------------------------------------------------------------------------------

def test_segments_cover_every_file(sample, built):
    for path in all_pt2(sample, built):
        with wb.open(path) as art:
            # every stored tensor (strided views of rich.pt2 too) reads back as its file bytes
            assert check_invariants(art) == int(art.tensors["offset"].notna().sum()) > 0
            seg = art.segments
            size = path.stat().st_size
            assert seg["size"].sum() == size, path.name
            assert seg["offset"].iloc[0] == 0
            assert (seg["offset"].iloc[1:].to_numpy()
                    == (seg["offset"] + seg["size"]).iloc[:-1].to_numpy()).all()
            kinds = set(seg["kind"])
            assert {"header", "central_directory", "end_record", "data_descriptor"} <= kinds
            assert "trailing" not in kinds
            # torch pads member data to 64 bytes with an "FB" extra field: padding rows
            assert (seg["kind"] == "padding").sum() >= len(art.frames["members"]) // 2


def test_members_match_zipfile(sample, built):
    """Member offsets and sizes agree with Python's zipfile, and the bytes at each data
    offset are the member's content (every member is stored)."""
    for path in all_pt2(sample, built):
        data = path.read_bytes()
        with zipfile.ZipFile(path) as zf, wb.open(path) as art:
            infos = zf.infolist()
            m = art.frames["members"]
            assert list(m["name"]) == [i.filename for i in infos]
            for info, row in zip(infos, m.itertuples()):
                assert row.header_offset == info.header_offset and row.crc32 == info.CRC
                assert row.size == info.compress_size and row.file_size == info.file_size
                assert info.compress_type == 0 and not row.compressed
                assert data[row.offset:row.offset + row.size] == zf.read(info)
                assert row.offset % 64 == 0
            seg = art.segments
            data_rows = seg[~seg["kind"].isin(["header", "padding", "data_descriptor",
                                                "central_directory", "end_record"])]
            names = dict(zip(m["index"], m["name"]))
            assert {names[i] for i in data_rows["index"]} == set(m["name"])
            assert all(n.startswith(names[i]) for n, i in zip(data_rows["name"], data_rows["index"]))


def test_member_kinds(sample):
    with wb.open(sample("mlp.pt2")) as art:
        m = art.frames["members"]
        kinds = {n.removeprefix("mlp/"): k for n, k in zip(m["name"], m["kind"])}
        assert kinds["data/weights/weight_0"] == "weights"
        assert kinds["data/weights/model_weights_config.json"] == "config"
        assert kinds["data/constants/model_constants_config.json"] == "config"
        assert kinds["models/model.json"] == "graph"
        assert kinds["data/sample_inputs/model.pt"] == "sample_inputs"
        assert kinds["archive_format"] == kinds["byteorder"] == "metadata"
        pickled = set(m.loc[m["pickled"], "name"])
        assert pickled == {"mlp/data/sample_inputs/model.pt"}  # torch.save zip (data.pkl)
        assert not m["unsafe_name"].any()
        assert set(art.frames) == {"segments", "tensors", "members", "models", "graph", "graph_nodes"}
    with wb.open(sample("mlp_aoti.pt2")) as art:
        m = art.frames["members"]
        by_suffix = {n.rsplit(".", 1)[-1]: k for n, k in zip(m["name"], m["kind"])}
        assert by_suffix["so"] == "so" and by_suffix["cpp"] == "source"
        assert by_suffix["json"] == "metadata"


def test_frames_follow_schemas(sample, built):
    from workbench.frames import SCHEMAS

    for path in all_pt2(sample, built):
        with wb.open(path) as art:
            for name in art.frames:
                df = art.frames[name]
                declared = [c.name for c in SCHEMAS[name]]
                assert [c for c in declared if c in df.columns] == list(df.columns)
                assert df.columns.is_unique


def test_workbench_does_not_import_torch(sample):
    paths = [str(sample(n)) for n in PT2_SAMPLES]
    code = (
        "import sys, workbench\n"
        f"for p in {paths!r}:\n"
        "    a = workbench.open(p)\n"
        "    [a.frames[k] for k in a.frames]\n"
        "    t = a.tensors\n"
        "    [a.tensor(n) for n in t.loc[t['offset'].notna(), 'name']]\n"
        "    a.validate()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


# --------------------------------------------------------------------------------------------
# archives built here: zip64, several models, compressed members, bf16
# --------------------------------------------------------------------------------------------

def test_zip64_records_and_extras(tmp_path):
    w = np.arange(12, dtype=np.float32)
    ms = pt2_members(weights={"w": {"path_name": "weight_0", "is_param": True, "use_pickle": False,
                                    "tensor_meta": tensor_meta(7, [3, 4], requires_grad=True)}},
                     files={"data/weights/weight_0": w.tobytes()})
    plain, _ = build_zip(ms)
    z64, _ = build_zip(ms, zip64=True)
    with zipfile.ZipFile(write(tmp_path, z64, "z64.pt2")) as zf:  # a valid zip64 archive
        assert zf.read("arc/data/weights/weight_0") == w.tobytes()
    for name, data in (("plain.pt2", plain), ("z64.pt2", z64)):
        with wb.open(write(tmp_path, data, name)) as art:
            assert art.info["zip64"] == (name == "z64.pt2")
            np.testing.assert_array_equal(art.tensor("w"), w.reshape(3, 4))
            seg = art.segments
            assert seg["size"].sum() == len(data)
            assert (seg["kind"] == "end_record").sum() == (3 if name == "z64.pt2" else 1)


def test_several_models_with_the_same_fqns(tmp_path):
    a, b = np.ones(4, np.float32), np.full(4, 2, np.float32)
    meta = {"path_name": "weight_0", "is_param": True, "use_pickle": False,
            "tensor_meta": tensor_meta(7, [4])}
    ms = pt2_members(weights={"fc.weight": meta}, files={"data/weights/weight_0": a.tobytes()},
                     model="enc")
    ms += [m for m in pt2_members(weights={"fc.weight": {**meta, "path_name": "weight_1"}},
                                  files={"data/weights/weight_1": b.tobytes()}, model="dec")
           if "archive_format" not in m["name"] and "byteorder" not in m["name"]]
    data, _ = build_zip(ms)
    with wb.open(write(tmp_path, data)) as art:
        t = art.tensors
        assert sorted(t["name"]) == ["dec/fc.weight", "enc/fc.weight"]
        assert set(t["fqn"]) == {"fc.weight"}
        np.testing.assert_array_equal(art.tensor("enc/fc.weight"), a)
        np.testing.assert_array_equal(art.tensor("dec/fc.weight"), b)
        assert set(art.frames["models"]["name"]) == {"enc", "dec"}


def test_bfloat16_is_a_torch_view(built, torch):
    with wb.open(built / "rich.pt2") as art:
        x = art.tensor("wbf")
        assert isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16


def test_compressed_members_are_not_zero_copy(tmp_path, sample):
    """A deflated weight (64 MiB of zeros, ratio ~1000:1) is listed as compressed, never
    inflated; reading it raises ArtifactError. A deflated config is inflated within bounds."""
    raw = bytes(64 << 20)
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    packed = co.compress(raw) + co.flush()
    assert len(raw) / len(packed) > 500
    cfg = json.dumps({"config": {"w": {"path_name": "weight_0", "is_param": False,
                                       "use_pickle": False,
                                       "tensor_meta": tensor_meta(7, [16 << 20])}}}).encode()
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    cfg_packed = co.compress(cfg) + co.flush()
    ms = pt2_members(files={"data/weights/weight_0": {"data": packed, "method": 8,
                                                      "file_size": len(raw)}})
    ms = [m if not m["name"].endswith("weights_config.json")
          else {**m, "data": cfg_packed, "method": 8, "file_size": len(cfg)} for m in ms]
    data, _ = build_zip(ms)
    p = write(tmp_path, data)
    exercise(sample("mlp.pt2"))  # the libraries' one-time imports (pandas) are not traced
    tracemalloc.start()
    try:
        art = exercise(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak} bytes allocated: a compressed member was inflated"
    with art:
        row = art.tensors.set_index("name").loc["w"]
        assert row["storage"] == "compressed" and pd_isna(row["offset"])
        with pytest.raises(wb.ArtifactError, match="compressed"):
            art.tensor("w")
        m = art.frames["members"].set_index("name")
        assert m.loc["arc/data/weights/weight_0", "compressed"]
        assert m.loc["arc/data/weights/weight_0", "method"] == 8
        f = art.validate()
        assert list(f.loc[f["message"].str.contains("compressed"), "severity"]) == ["info"]


def pd_isna(x) -> bool:
    import pandas as pd

    return bool(pd.isna(x))


# --------------------------------------------------------------------------------------------
# safety: pickles are listed, never unpickled; unsafe names flagged; nothing written
# --------------------------------------------------------------------------------------------

class _WritesFile:
    """Unpickling an instance opens (creates) ``path`` for writing."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_pickles_are_never_unpickled(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_WritesFile(str(marker)), protocol=2)
    # the payload is live: unpickling it (elsewhere) does create a file
    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(_WritesFile(str(probe)), protocol=2)).close()
    assert probe.exists()
    inner, _ = build_zip([{"name": "archive/data.pkl", "data": payload},
                          {"name": "archive/version", "data": b"3\n"}], align=0)
    meta = tensor_meta(7, [2, 2])
    ms = pt2_members(
        weights={"evil.weight": {"path_name": "weight_0", "is_param": True, "use_pickle": True,
                                 "tensor_meta": meta},
                 "good.weight": {"path_name": "weight_1", "is_param": True, "use_pickle": False,
                                 "tensor_meta": meta}},
        constants={"obj": {"path_name": "custom_obj_0", "is_param": False, "use_pickle": True,
                           "tensor_meta": None}},
        files={"data/weights/weight_0": payload,
               "data/weights/weight_1": np.ones(4, np.float32).tobytes(),
               "data/constants/custom_obj_0": payload,
               "data/sample_inputs/model.pt": inner,
               "extra/blob.bin": payload})
    ms.append({"name": "../evil", "data": payload})
    data, _ = build_zip(ms)
    p = write(tmp_path, data)
    art = exercise(p)
    with art:
        t = art.tensors.set_index("name")
        assert t.loc["evil.weight", "storage"] == "pickle" and t.loc["evil.weight", "pickled"]
        assert "obj" not in t.index  # a custom object: listed as a member, not a tensor
        assert t.loc["good.weight", "storage"] == "zip" and not t.loc["good.weight", "pickled"]
        with pytest.raises(wb.ArtifactError):
            art.tensor("evil.weight")
        m = art.frames["members"].set_index("name")
        assert m.loc[["arc/data/weights/weight_0", "arc/data/constants/custom_obj_0",
                      "arc/data/sample_inputs/model.pt", "arc/extra/blob.bin", "../evil"],
                     "pickled"].all()
        assert not m.loc["arc/data/weights/weight_1", "pickled"]
        assert m.loc["arc/data/constants/custom_obj_0", "used_by"] == "obj"
        assert m.loc["arc/data/weights/weight_0", "kind"] == "pickle"
        assert m.loc["../evil", "unsafe_name"] and m["unsafe_name"].sum() == 1
        f = art.validate()
        unsafe = f[f["message"].str.contains("unsafe member name")]
        assert list(unsafe["severity"]) == ["warning"] and "../evil" in unsafe["structure"].iloc[0]
        assert f["message"].str.contains("never unpickled").any()
    assert not marker.exists(), "a pickle was executed"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["hostile.pt2", "probe"]


@pytest.mark.parametrize("name", ["/abs/path", "a/../../b", "C:evil", "back\\slash", "ctl\x1bname"])
def test_unsafe_names_are_flagged(tmp_path, name):
    data, _ = build_zip([*pt2_members(), {"name": name, "data": b"x"}])
    with wb.open(write(tmp_path, data)) as art:
        m = art.frames["members"]
        assert list(m.loc[m["unsafe_name"], "name"]) == [name]
        msgs = [f.structure for f in art._parsed.findings if "unsafe" in f.message]
        assert len(msgs) == 1 and "\x1b" not in msgs[0]  # control characters escaped


def test_plain_zip_without_archive_format(tmp_path):
    data, _ = build_zip([{"name": "a.txt", "data": b"hello"}, {"name": "b/c.bin", "data": b"\0" * 9}])
    with wb.open(write(tmp_path, data, "plain.zip")) as art:
        assert art.format == "pt2" and len(art.tensors) == 0
        assert list(art.frames["members"]["kind"]) == ["other", "other"]
        assert any("archive_format" in f.message for f in art._parsed.findings)
        assert art.segments["size"].sum() == len(data)


# --------------------------------------------------------------------------------------------
# hostile zips: every failure is an ArtifactError naming the file and the offset
# --------------------------------------------------------------------------------------------

def fails(path, cls=wb.ArtifactError) -> wb.ArtifactError:
    with pytest.raises(cls) as ei:
        exercise(path)
    e = ei.value
    assert isinstance(e, wb.ArtifactError)
    assert str(e).startswith(pathlib.Path(path).name + ":")
    return e


@pytest.fixture
def base_zip():
    w = np.arange(6, dtype=np.float32)
    ms = pt2_members(weights={"w": {"path_name": "weight_0", "is_param": True, "use_pickle": False,
                                    "tensor_meta": tensor_meta(7, [2, 3])}},
                     files={"data/weights/weight_0": w.tobytes()})
    return ms


def test_truncated_archives(tmp_path, sample):
    data = sample("mlp.pt2").read_bytes()
    for cut in (10, 21, 30, 100, 1000):
        e = fails(write(tmp_path, data[:-cut]))
        assert 0 <= e.offset <= len(data) - cut and f" at 0x{e.offset:x}: " in str(e)
    fails(write(tmp_path, data[:21]), TruncatedError)
    e = fails(write(tmp_path, b"PK\x03\x04" + bytes(200_000)), CorruptError)
    assert "end of central directory" in str(e)


def test_truncated_central_directory(tmp_path, base_zip):
    data, where = build_zip(base_zip)
    d = bytearray(data)
    # claim a directory larger than what lies before the end record
    struct.pack_into("<I", d, where["eocd"] + 12, where["eocd"] - where["cd_offset"] + 100)
    fails(write(tmp_path, bytes(d)), OutOfBoundsError)
    # claim more entries than the directory can hold (checked before allocating)
    d = bytearray(data)
    struct.pack_into("<HH", d, where["eocd"] + 8, 0xFFF0, 0xFFF0)
    e = fails(write(tmp_path, bytes(d)), CorruptError)
    assert "cannot fit" in str(e)
    # a central record cut in the middle: move the end record over it
    d = bytearray(data)
    last = where["central"][-1]
    eocd = d[where["eocd"]:]
    d = d[:last + 20] + eocd
    struct.pack_into("<I", d, last + 20 + 12, last + 20 - where["cd_offset"])
    fails(write(tmp_path, bytes(d)), TruncatedError)


def test_offsets_past_the_end(tmp_path, base_zip):
    data, where = build_zip(base_zip)
    for field, value in ((42, len(data) + 10), (42, 0xFFFFFFF0), (20, len(data))):
        d = bytearray(data)
        struct.pack_into("<I", d, where["central"][-1] + field, value)  # lho / compressed size
        e = fails(write(tmp_path, bytes(d)), OutOfBoundsError)
        assert 0 <= e.offset <= len(d) and f" at 0x{e.offset:x}: " in str(e)


def test_member_claiming_2_to_the_40_bytes(tmp_path, base_zip):
    data, _ = build_zip(base_zip, zip64=True)
    i = data.index(b"arc/data/weights/weight_0", data.index(b"PK\x01\x02"))
    d = bytearray(data)
    # the zip64 extra follows the name: (usize, csize, lho)
    x = i + len(b"arc/data/weights/weight_0") + 4
    struct.pack_into("<QQ", d, x, 2**40, 2**40)
    tracemalloc.start()
    try:
        fails(write(tmp_path, bytes(d)), OutOfBoundsError)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
    # a config declaring 2**40 bytes (stored size honest): refused, never allocated
    d = bytearray(data)
    j = data.index(b"arc/data/weights/model_weights_config.json", data.index(b"PK\x01\x02"))
    x = j + len(b"arc/data/weights/model_weights_config.json") + 4
    struct.pack_into("<Q", d, x, 2**40)
    e = fails(write(tmp_path, bytes(d)), CorruptError)
    assert "limit" in str(e)


def test_deflate_bomb_in_metadata(tmp_path, base_zip):
    """A config that inflates far beyond its declared size is cut at the declared size."""
    bomb = b'{"config": {}}' + b" " * (200 << 20)
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    packed = co.compress(bomb) + co.flush()
    ms = [m if not m["name"].endswith("weights_config.json")
          else {**m, "data": packed, "method": 8, "file_size": 100} for m in base_zip]
    data, _ = build_zip(ms)
    tracemalloc.start()
    try:
        e = fails(write(tmp_path, data), CorruptError)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "inflates to more than" in str(e) and peak < 16 << 20


def test_overlapping_members(tmp_path, base_zip):
    data, where = build_zip(base_zip)
    d = bytearray(data)
    # point the last member's local header at the first one's
    struct.pack_into("<I", d, where["central"][-1] + 42, where["local"][0])
    fails(write(tmp_path, bytes(d)), CorruptError)


def test_local_header_disagrees(tmp_path, base_zip):
    data, where = build_zip(base_zip)
    d = bytearray(data)
    d[where["local"][2] + 30] ^= 0x20  # first byte of the name
    assert "name differs" in str(fails(write(tmp_path, bytes(d)), CorruptError))
    d = bytearray(data)
    struct.pack_into("<I", d, where["local"][2], 0x12345678)
    assert "signature" in str(fails(write(tmp_path, bytes(d)), CorruptError))


def test_bad_utf8_name(tmp_path, base_zip):
    data, _ = build_zip([*base_zip, {"name": b"bad\xff\xfename", "data": b"x"}])
    e = fails(write(tmp_path, data), CorruptError)
    assert "UTF-8" in str(e)
    data, _ = build_zip([*base_zip, {"name": b"cp437 \x81", "data": b"x", "flags": 0}])
    with wb.open(write(tmp_path, data, "cp437.pt2")) as art:
        assert "cp437 ü" in set(art.frames["members"]["name"])


def test_config_pointing_nowhere(tmp_path):
    meta = {"path_name": "weight_9", "is_param": True, "use_pickle": False,
            "tensor_meta": tensor_meta(7, [2])}
    data, _ = build_zip(pt2_members(weights={"w": meta}))
    assert "names no member" in str(fails(write(tmp_path, data), CorruptError))
    meta = {**meta, "path_name": "weight_0", "tensor_meta": tensor_meta(7, [4, 4], offset=2)}
    data, _ = build_zip(pt2_members(weights={"w": meta},
                                    files={"data/weights/weight_0": bytes(64)}))
    assert "reaches 72 bytes" in str(fails(write(tmp_path, data), OutOfBoundsError))
    for bad in ({**meta, "tensor_meta": {**tensor_meta(7, [4]), "dtype": 99}},
                {**meta, "tensor_meta": {**tensor_meta(7, [4]), "sizes": [{"as_expr": "s0"}]}},
                {**meta, "tensor_meta": tensor_meta(7, [-1])}, {"is_param": True}):
        data, _ = build_zip(pt2_members(weights={"w": bad},
                                        files={"data/weights/weight_0": bytes(64)}))
        fails(write(tmp_path, data), CorruptError)
    ms = [m if "models/" not in m["name"] else {**m, "data": b"{not json"} for m in pt2_members()]
    data, _ = build_zip(ms)
    assert "not valid JSON" in str(fails(write(tmp_path, data), CorruptError))


def test_fuzzed_samples_raise_only_artifact_errors(tmp_path, sample):
    """Seeded random byte flips in the zip structures: never another exception, and every
    mutant that opens still satisfies the invariants (segments tile the file, tensors read
    back as their file bytes)."""
    import random

    rng = random.Random(1234)
    outcomes = Counter()
    for name in ("mlp.pt2", "mlp_aoti_blob.pt2"):
        data = sample(name).read_bytes()
        cd = data.rindex(b"PK\x05\x06")
        cd_start = struct.unpack_from("<I", data, cd + 16)[0]
        hot = list(range(cd_start, len(data))) + list(range(0, 200))
        for i in range(150):
            d = bytearray(data)
            for _ in range(rng.choice((1, 2, 4))):
                d[rng.choice(hot)] = rng.randrange(256)
            p = write(tmp_path, bytes(d), f"fuzz{i}.pt2")
            try:
                art = exercise(p)
            except wb.ArtifactError:
                outcomes["error", name] += 1
            else:
                with art:
                    check_invariants(art)
                outcomes["ok", name] += 1
            p.unlink()
    # both outcomes happen for both samples: the invariants were checked on real openings
    assert all(outcomes[k, n] >= 10 for k in ("ok", "error")
               for n in ("mlp.pt2", "mlp_aoti_blob.pt2")), outcomes


def test_sizes_that_overflow_int64_are_corrupt(tmp_path):
    meta = {"path_name": "weight_0", "is_param": True, "use_pickle": False,
            "tensor_meta": tensor_meta(7, [2**40, 2**40], strides=[0, 0])}
    data, _ = build_zip(pt2_members(weights={"w": meta}, files={"data/weights/weight_0": bytes(4)}))
    assert "too large" in str(fails(write(tmp_path, data), CorruptError))


def aoti_wrapper(constants: list[dict], declared: int | None = None) -> bytes:
    """A generated-wrapper-like source declaring ``constants`` the way AOTInductor writes them."""
    lines = [f"    : AOTInductorModelBase(1,\n 1,\n {declared if declared is not None else len(constants)},"
             "\n device_str) {"]
    for i, c in enumerate(constants):
        lines += [f'    constants_info_[{i}].name = "{c["name"]}";',
                  f"    constants_info_[{i}].dtype = cached_torch_dtype_{c.get('dtype', 'float32')};",
                  f"    constants_info_[{i}].device_type = cached_torch_device_type_cpu;",
                  f"    constants_info_[{i}].offset = {c.get('offset', 0)};",
                  f"    constants_info_[{i}].data_size = {c['data_size']};",
                  f"    constants_info_[{i}].from_folded = {c.get('folded', 'false')};",
                  f"    constants_info_[{i}].type = static_cast<int32_t>(torch::aot_inductor::"
                  f"ConstantType::{c.get('type', 'Parameter')});",
                  f"    constants_info_[{i}].shape = {{{', '.join(map(str, c['shape']))}}};",
                  f"    constants_info_[{i}].stride = {{{', '.join(map(str, c['stride']))}}};",
                  f"    constants_info_[{i}].layout = static_cast<int32_t>(cached_torch_layout_strided);",
                  f'    constants_info_[{i}].original_fqn = "{c["fqn"]}";']
    return "\n".join(lines).encode()


def test_aoti_blob_layout_from_the_wrapper(tmp_path):
    """Constants in wrapper order, each padded to 64 bytes; storage offsets honoured; folded
    constants have no bytes; a constant with absurd numbers is skipped with a finding."""
    w = np.arange(16, dtype=np.float32)
    b = np.arange(17, dtype=np.float32) + 100  # a view starting at element 1 of its storage
    h = np.arange(3, dtype=np.float16)
    blob = w.tobytes() + b.tobytes().ljust(128, b"\0") + h.tobytes().ljust(64, b"\0")
    consts = [
        {"name": "w", "fqn": "w", "data_size": 64, "shape": [4, 4], "stride": [4, 1]},
        {"name": "b", "fqn": "sub.b", "data_size": 128, "offset": 1, "shape": [16], "stride": [1],
         "type": "Buffer"},
        {"name": "folded", "fqn": "f", "data_size": 64, "shape": [4], "stride": [1],
         "folded": "true", "type": "FoldedConstant"},
        {"name": "h", "fqn": "h", "data_size": 64, "shape": [3], "stride": [1], "dtype": "float16",
         "type": "TensorConstant"},
        {"name": "huge", "fqn": "huge", "data_size": 64, "shape": [2**70], "stride": [1]},
    ]
    stem = "data/aotinductor/model/cabc.wrapper"
    ms = [{"name": "pkg/archive_format", "data": b"pt2"},
          {"name": f"pkg/{stem}.cpp", "data": aoti_wrapper(consts)},
          {"name": f"pkg/{stem}_metadata.json", "data": b'{"AOTI_DEVICE_KEY": "cpu"}'},
          {"name": f"pkg/{stem}_weights.blob", "data": blob},
          {"name": f"pkg/{stem}.so", "data": b"\x7fELF" + bytes(60)}]
    data, _ = build_zip(ms)
    with wb.open(write(tmp_path, data)) as art:
        t = art.tensors.set_index("name")
        assert list(t.index) == ["w", "sub.b", "f", "h"]
        np.testing.assert_array_equal(art.tensor("w"), w.reshape(4, 4))
        np.testing.assert_array_equal(art.tensor("sub.b"), b[1:])
        np.testing.assert_array_equal(art.tensor("h"), h)
        assert list(t["storage"]) == ["blob", "blob", "folded", "blob"]
        assert list(t["kind"]) == ["parameter", "buffer", "constant", "constant"]
        assert t.loc["sub.b", "storage_offset"] == 1
        with pytest.raises(wb.ArtifactError):
            art.tensor("f")
        models = art.frames["models"].iloc[0]
        assert (models["kind"], models["device"], models["inputs"], models["outputs"]) == \
            ("aoti", "cpu", 1, 1)
        assert any("skipped" in f.message for f in art._parsed.findings)
        seg = art.segments
        assert list(seg.loc[seg["kind"] == "blob", "size"]) == [len(blob)]


def test_duplicate_member_names(tmp_path, base_zip):
    first = np.arange(6, dtype=np.float32)
    data, _ = build_zip([*base_zip, {"name": "arc/data/weights/weight_0", "data": bytes(24)}])
    with wb.open(write(tmp_path, data)) as art:
        np.testing.assert_array_equal(art.tensor("w"), first.reshape(2, 3))  # the first one
        assert any("more than once" in f.message for f in art._parsed.findings)
        assert len(art.frames["members"]) == len(base_zip) + 1


# --------------------------------------------------------------------------------------------
# the fast paths (vectorised central directory, canonical configs) agree with the general ones
# --------------------------------------------------------------------------------------------

def _outcome(path) -> tuple:
    """Every frame, the findings and the info of ``path``, or the error it raises."""
    try:
        art = wb.open(path)
        with art:
            return {k: art.frames[k] for k in art.frames}, art._parsed.findings, art.info
    except wb.ArtifactError as e:
        return type(e), str(e), e.offset


def _assert_same(fast: tuple, general: tuple, path) -> None:
    import pandas as pd

    if not isinstance(fast[0], dict) or not isinstance(general[0], dict):
        assert fast == general, path
        return
    assert list(fast[0]) == list(general[0]), path
    for name, df in fast[0].items():
        pd.testing.assert_frame_equal(df, general[0][name], check_exact=True, obj=f"{path} {name}")
    assert fast[1:] == general[1:], path


def _tricky_archives(tmp_path) -> list[pathlib.Path]:
    """Archives whose names, extras and configs stress the fast paths."""
    w = np.arange(6, dtype=np.float32).tobytes()
    meta = {"path_name": "weight_0", "is_param": True, "use_pickle": False,
            "tensor_meta": tensor_meta(7, [2, 3], requires_grad=True)}
    out = []

    def add(name: str, members: list[dict], **kw) -> None:
        out.append(write(tmp_path, build_zip(members, **kw)[0], name))

    add("plain.pt2", pt2_members(weights={"w": meta}, files={"data/weights/weight_0": w}))
    add("zip64.pt2", pt2_members(weights={"w": meta}, files={"data/weights/weight_0": w}),
        zip64=True)
    add("comment.pt2", pt2_members(weights={"w": meta}, files={"data/weights/weight_0": w}),
        comment=b"PK\x01\x02 a comment with a central signature")
    add("signature_in_name.pt2", pt2_members(
        weights={"w": {**meta, "path_name": "PK\x01\x02"}}, files={"data/weights/PK\x01\x02": w}))
    add("non_ascii.pt2", pt2_members(
        weights={"gewicht.größe": {**meta, "path_name": "wé"}}, files={"data/weights/wé": w}))
    add("cp437.pt2", [*pt2_members(), {"name": "arc/extra/caf\x82".encode("latin-1"), "data": w,
                                       "flags": 0}])
    add("nul_in_name.pt2", [*pt2_members(), {"name": b"arc/extra/a\0b", "data": w}])
    add("unaligned.pt2", pt2_members(weights={"w": meta}, files={"data/weights/weight_0": w}),
        align=0)
    add("tied_and_empty.pt2", pt2_members(
        weights={"a": meta, "b": {**meta, "tensor_meta": tensor_meta(7, [3], offset=3)},
                 "e": {**meta, "path_name": "weight_1", "tensor_meta": tensor_meta(7, [0])}},
        files={"data/weights/weight_0": w, "data/weights/weight_1": b""}))
    add("escaped_fqn.pt2", pt2_members(weights={'a"b\\c\u00e9': meta},
                                       files={"data/weights/weight_0": w}))
    add("long_name.pt2", pt2_members(weights={"w": {**meta, "path_name": "x" * 300}},
                                     files={"data/weights/" + "x" * 300: w}))
    add("duplicates.pt2", [*pt2_members(weights={"w": meta}, files={"data/weights/weight_0": w}),
                           {"name": "arc/data/weights/weight_0", "data": bytes(24)}])
    add("empty.pt2", [])
    return out


def test_fast_paths_equal_general_paths(tmp_path, sample, monkeypatch):
    """Frames, findings and errors are the same with the vectorised central directory and
    the canonical config parser switched off, on samples, tricky archives and seeded
    mutations of the central directory and of the weights config."""
    import random

    from workbench.formats._zip import ZipDirectory

    paths = [sample(n) for n in PT2_SAMPLES] + _tricky_archives(tmp_path)
    rng = random.Random(7)
    data = sample("tied.pt2").read_bytes()
    cd = struct.unpack_from("<I", data, data.rindex(b"PK\x05\x06") + 16)[0]
    cfg = data.index(b'{"config": {')
    for i in range(120):
        d = bytearray(data)
        lo, hi = (cd, len(data)) if i % 2 else (cfg, cfg + 200)
        for _ in range(rng.choice((1, 2, 3))):
            d[rng.randrange(lo, hi)] = rng.choice((rng.randrange(256), *b'"\\{}[],: 019'))
        paths.append(write(tmp_path, bytes(d), f"mutant{i}.pt2"))
    fast = [_outcome(p) for p in paths]
    assert sum(isinstance(f[0], dict) for f in fast) >= 20
    monkeypatch.setattr(ZipDirectory, "_central_fast", lambda self: None)
    monkeypatch.setattr(pt2_config, "_canonical_config", lambda *a: None)
    for p, f in zip(paths, fast):
        _assert_same(f, _outcome(p), p.name)


def test_fast_paths_are_taken(sample, monkeypatch):
    """The samples (written by torch) go through the vectorised and canonical paths."""
    from workbench.formats._zip import ZipDirectory

    taken: list[str] = []
    central, canonical = ZipDirectory._central_fast, pt2_config._canonical_config

    def spy_central(self):
        out = central(self)
        taken.append("central" if out is not None else "-")
        return out

    def spy_canonical(raw, *a):
        out = canonical(raw, *a)
        taken.append("config" if out is not None or bytes(raw) == b'{"config": {}}' else "-")
        return out

    monkeypatch.setattr(ZipDirectory, "_central_fast", spy_central)
    monkeypatch.setattr(pt2_config, "_canonical_config", spy_canonical)
    for name in ("mlp.pt2", "tied.pt2"):
        wb.open(sample(name)).close()
    assert taken and "-" not in taken and "config" in taken


def test_graph_scan_of_a_zero_copy_view(sample):
    """graph_stats gives the same on a memoryview of the member as on its bytes."""
    with zipfile.ZipFile(sample("mlp.pt2")) as zf:
        raw = zf.read(next(n for n in zf.namelist() if "/models/" in n))
    for limit in (0, 1 << 40):
        assert pt2_reader.graph_stats(memoryview(raw), full_parse_limit=limit) == \
            pt2_reader.graph_stats(raw, full_parse_limit=limit)


@pytest.mark.parametrize("length", [5, 40, 300])
def test_every_local_name_byte_is_compared(tmp_path, length):
    """A local name that differs from its central name in any byte is corrupt, whether the
    names are compared in fixed-width windows or byte by byte (long names)."""
    names = [f"arc/extra/{i:03d}".ljust(length, "n") for i in range(5)]
    data, where = build_zip([{"name": n, "data": b"x" * i} for i, n in enumerate(names)])
    assert isinstance(_outcome(write(tmp_path, data))[0], dict)  # the intact archive opens
    for k in (0, 2, 4):
        for at in (0, len(names[k]) // 2, len(names[k]) - 1):
            d = bytearray(data)
            d[where["local"][k] + 30 + at] ^= 0x01
            e = fails(write(tmp_path, bytes(d)), CorruptError)
            assert "name differs" in str(e) and repr(names[k]) in str(e)


def test_zip64_sizes_past_int64_are_corrupt(tmp_path, base_zip):
    """A ZIP64 size or offset of 2**63 or more cannot be an int64 column: CorruptError."""
    data, _ = build_zip(base_zip, zip64=True)
    i = data.index(b"arc/data/weights/weight_0", data.index(b"PK\x01\x02"))
    extra = i + len(b"arc/data/weights/weight_0") + 4  # the zip64 field's first value
    for k in range(3):  # file_size, compressed_size, header_offset
        d = bytearray(data)
        struct.pack_into("<Q", d, extra + 8 * k, 2**64 - 1)
        assert "63 bits" in str(fails(write(tmp_path, bytes(d)), CorruptError))


def test_wrapper_string_values_with_bad_escapes_are_refused_quietly():
    """A C string value in an AOTI wrapper with a backslash that starts no C escape is not
    decoded (codecs.escape_decode would emit a DeprecationWarning, later an error)."""
    import warnings

    from workbench.formats.pt2.aoti import cvalue

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cvalue("name", b'"a\\\\Z\\x41\\n"') == "a\\ZA\n"
        assert cvalue("name", b'"x\\' + "\u00c4".encode() + b'y"') is None
        assert cvalue("name", b'"\\q"') is None
        assert cvalue("name", b'"ends\\"') is None
