"""Compatibility: artifacts from the wild and from older releases open as their own readers say.

Two sources:

* the corpus: third-party files with ``PROVENANCE.tsv`` (repository, commit, path). Files from
  ``pytorch/executorch`` (BSD-3-Clause, like this project) ship in ``tests/data/compat/``; the
  others are read from ``../shared/corpus/`` when it is present and skipped (with the reason)
  when not. Golden facts come from ExecuTorch's deserializers and ``zipfile``, computed here.
* the version matrix ``sample_models/compat/<release>/``: files written by older ExecuTorch and
  torch releases, with ``facts.json``: what the OLD release's own reader said at generation time.
"""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers import check_invariants, read_tier

import workbench as wb
from workbench import readpath
from workbench.formats._zip import ZipDirectory
from workbench.source import Source

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "tests" / "data" / "compat"
SHARED = ROOT.parent / "shared" / "corpus"
MATRIX = ROOT / "sample_models" / "compat"


def _corpus() -> list[tuple[str, Path, dict]]:
    rows = {}
    for tsv in (SHARED / "PROVENANCE.tsv", HERE / "PROVENANCE.tsv"):
        if tsv.exists():
            with tsv.open(newline="") as f:
                for row in csv.DictReader(f, delimiter="\t"):
                    rows.setdefault(row["file"], row)
    out = []
    for name, row in sorted(rows.items()):
        home = HERE if row["repo"] == "pytorch/executorch" else SHARED
        out.append((name, home / name, row))
    return out


CORPUS = _corpus()

#: files that must be refused, with the error class and words the message must hold (why)
REFUSED: dict[str, tuple[type, tuple[str, ...]]] = {}

#: files whose zip directory is stale (Python's zipfile opens them but cannot read some
#: members): opened, with the unreadable members flagged (see tests/test_etrecord.py)
DAMAGED = {
    # A later rename grew two JSON members by 6 bytes each without updating sizes or
    # offsets. Python's zipfile cannot read 4 of its 7 members either.
    "pytorch__executorch__examples__dev_tools__scripts__etrecord.bin",
}

#: oddities that validate() must list (file -> words of one finding's message)
ODDITIES = {
    "examples__arduino__examples__AddModel__model.pte": "past the table's declared size",
    "test__models__deprecated__ModuleLinear-no-constant-segment.pte": "legacy constant_buffer",
    "pytorch__executorch__extension__module__test__resources__linear.ptd": "FlatTensor v0",
    "pytorch__executorch__examples__dev_tools__scripts__etrecord.bin": "shifted by 12 bytes",
}


def corpus_file(name: str, path: Path) -> Path:
    if not path.exists():
        reason = f"{name}: not here ({path.parent} is absent: only pytorch/executorch files ship)"
        print(reason)
        pytest.skip(reason)
    return path


@pytest.fixture(params=CORPUS, ids=[c[0][:60] for c in CORPUS])
def corpus_entry(request):
    name, path, row = request.param
    return name, corpus_file(name, path), row


def test_the_executorch_files_ship_with_their_provenance():
    with (HERE / "PROVENANCE.tsv").open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert rows and all(r["repo"] == "pytorch/executorch" and len(r["commit"]) == 40 for r in rows)
    assert {r["file"] for r in rows} == {p.name for p in HERE.iterdir()} - {"PROVENANCE.tsv",
                                                                           "README.md"}


def test_opens_or_refuses_as_documented(corpus_entry):
    name, path, _ = corpus_entry
    if name in REFUSED:
        cls, words = REFUSED[name]
        with pytest.raises(cls) as ei:
            _ = wb.open(path).segments
        msg = str(ei.value)
        assert all(w in msg for w in words), msg
        assert ei.value.offset is not None and path.name in msg
        return
    art = wb.open(path)
    try:
        check_invariants(art)
        assert int(art.segments[art.segments["file"] == str(path)]["size"].sum()) == \
            path.stat().st_size
        found = art.validate()
        if name in ODDITIES:
            assert found["message"].str.contains(ODDITIES[name], regex=False).any(), found
    finally:
        art.close()


# -- .pte: ExecuTorch's deserializer -----------------------------------------------------------
PROGRAMS = [c for c in CORPUS if c[0].endswith((".pte", ".ff"))]


@pytest.mark.parametrize("entry", PROGRAMS, ids=[c[0][:60] for c in PROGRAMS])
def test_pte_matches_executorch(entry, oracle):
    name, path, _ = entry
    path = corpus_file(name, path)
    o = oracle.read(path)
    art = wb.open(path, data=[])
    try:
        seg = art.segments
        for i, s in enumerate(o.program.segments):
            if s.size:
                rows = seg[(seg["index"] == i).to_numpy(bool, na_value=False)]
                assert o.segment_base_offset + s.offset in set(rows["offset"]), (i, rows)
        methods = art.frames["methods"]
        assert list(methods["method"]) == [p.name for p in o.program.execution_plan]
        for p, (_, m) in zip(o.program.execution_plan, methods.iterrows()):
            assert m["values"] == len(p.values)
            assert m["operators"] == len(p.operators)
            assert m["delegates"] == len(p.delegates)
            assert m["instructions"] == sum(len(c.instructions) for c in p.chains)
        t = art.tensors
        for method, v, ten in o.tensors():
            row = t[(t["method"] == method).to_numpy(bool, na_value=False)
                    & (t["value"] == v).to_numpy(bool, na_value=False)]
            assert len(row) == 1, (method, v)
            row = row.iloc[0]
            assert row["shape"] == tuple(ten.sizes), (method, v)
            dt = oracle._enum_to_dtype.get(ten.scalar_type)
            if dt is not None:
                assert f"torch.{row['dtype']}" == str(dt), (method, v)
            assert row["data_buffer_idx"] == ten.data_buffer_idx
            if ten.allocation_info is not None:
                a = ten.allocation_info
                assert row["mem_id"] == a.memory_id
                assert row["mem_offset"] == a.memory_offset_low + (a.memory_offset_high << 32)
    finally:
        art.close()


@pytest.mark.parametrize("entry", PROGRAMS, ids=[c[0][:60] for c in PROGRAMS])
def test_fast_and_scalar_paths_agree(entry, monkeypatch):
    """The vectorised path hands tables with fields past their declared size (or misaligned)
    to the scalar path: same frames and same findings either way."""
    import pandas as pd


    name, path, _ = entry
    path = corpus_file(name, path)
    seen = []
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        art = wb.open(path, data=[])
        try:
            frames = {n: art.frames[n] for n in art.frames}
            seen.append((frames, art.validate().reset_index(drop=True)))
        finally:
            art.close()
    (a, fa), (b, fb) = seen
    assert list(a) == list(b)
    for n in a:
        pd.testing.assert_frame_equal(a[n], b[n], check_exact=True, obj=f"{name}: {n}")
    pd.testing.assert_frame_equal(fa, fb, check_exact=True, obj=f"{name}: findings")


def test_pte_with_an_early_ptd():
    """The February 2025 linear.pte points into an FT01 .ptd of the earlier schema."""
    pte = HERE / "pytorch__executorch__extension__module__test__resources__linear.pte"
    ptd = HERE / "pytorch__executorch__extension__module__test__resources__linear.ptd"
    art = wb.open(pte, data=[ptd])
    data = wb.open(ptd)
    try:
        assert data.info["schema_version"].startswith("FlatTensor v0")
        ext = art.tensors[art.tensors["storage"] == "external"]
        assert sorted(ext["name"]) == sorted(data.tensors["name"]) == ["linear.bias",
                                                                      "linear.weight"]
        for name in ext["name"]:
            np.testing.assert_array_equal(art.tensor(name), data.tensor(name))
        d = data.tensors.set_index("name")
        assert d.loc["linear.weight", "shape"] == (3, 3) and d.loc["linear.bias", "shape"] == (3,)
        # the earlier schema stores each tensor at an offset inside segment 0
        base = data.info["segment_base_offset"]
        assert d.loc["linear.weight", "offset"] == base
        assert d.loc["linear.bias", "offset"] == base + 48
        check_invariants(art)
        check_invariants(data)
    finally:
        art.close()
        data.close()


# -- archives: zipfile + json ------------------------------------------------------------------
ARCHIVES = [c for c in CORPUS if c[0].endswith((".pt2", ".ep", ".bin"))]


@pytest.mark.parametrize("entry", ARCHIVES, ids=[c[0][:60] for c in ARCHIVES])
def test_archive_members_match_zipfile(entry):
    name, path, _ = entry
    path = corpus_file(name, path)
    if name in REFUSED:
        pytest.skip(f"{name}: refused (see test_opens_or_refuses_as_documented)")
    if name in DAMAGED:
        pytest.skip(f"{name}: members unreadable by zipfile too (see tests/test_etrecord.py)")
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        for i in infos:
            if i.filename.endswith(".json"):
                json.loads(z.read(i))  # the JSON members parse
    art = wb.open(path)
    try:
        members = art.frames["members"].sort_values("index")
        assert list(members["name"]) == [i.filename for i in infos]
        assert list(members["header_offset"]) == [i.header_offset for i in infos]
        assert list(members["size"]) == [i.compress_size for i in infos]
        assert list(members["file_size"]) == [i.file_size for i in infos]
    finally:
        art.close()


def test_zip_with_prepended_bytes_reads_as_zipfile_does(tmp_path):
    """A stub before the archive (self-extracting style): zipfile shifts every offset."""
    src = MATRIX / "executorch-0.4.0" / "mlp.pt2"
    if not src.exists():
        pytest.skip(f"{src} is absent")
    p = tmp_path / "stub.pt2"
    p.write_bytes(b"#!stub\n" + b"\0" * 25 + src.read_bytes())
    with zipfile.ZipFile(p) as z:
        infos = z.infolist()
        data = [z.read(i) for i in infos]
    src_ = Source(p)
    try:
        zd = ZipDirectory(src_)  # the format is known by its first bytes: the zip layer here
        assert zd.prepended == 32
        assert [e.header_offset for e in zd.entries] == [i.header_offset for i in infos]
        assert [bytes(zd.view(e)) for e in zd.entries if not e.compressed] == \
            [d for d, i in zip(data, infos) if i.compress_type == 0]
    finally:
        src_.close()


def test_bundled_program_matches_executorch(oracle):
    from executorch.devtools.bundled_program.serialize import (
        deserialize_from_flatbuffer_to_bundled_program,
    )

    path = HERE / "extension__module__test__resources__bundled_program.bpte"
    bp = deserialize_from_flatbuffer_to_bundled_program(path.read_bytes())
    art = wb.open(path)
    try:
        cases = art.frames["test_cases"].drop_duplicates(["method", "case"])
        for s in bp.method_test_suites:
            assert (cases["method"] == s.method_name).sum() == len(s.test_cases)
        inner = oracle.read_bytes(bytes(bp.program))  # the program inside, as ExecuTorch reads it
        assert list(art.frames["methods"]["method"]) == \
            [p.name for p in inner.program.execution_plan]
    finally:
        art.close()


# -- the version matrix: facts the old release's own reader gave -------------------------------
SCALAR = {"BYTE": "uint8", "CHAR": "int8", "SHORT": "int16", "INT": "int32", "LONG": "int64",
          "HALF": "float16", "FLOAT": "float32", "DOUBLE": "float64", "BOOL": "bool",
          "BFLOAT16": "bfloat16"}


def _matrix() -> list[tuple[str, Path, dict]]:
    out = []
    for facts in sorted(MATRIX.glob("*/facts.json")):
        try:
            files = json.loads(facts.read_text()).get("files") or {}
        except ValueError:
            continue  # still being written by its maker
        for name, f in sorted(files.items()):
            if isinstance(f, dict):
                out.append((f"{facts.parent.name}/{name}", facts.parent / name, f))
    return out


MATRIX_FILES = _matrix()


@pytest.mark.parametrize("entry", MATRIX_FILES, ids=[m[0] for m in MATRIX_FILES])
def test_matrix_matches_the_old_readers_facts(entry):
    label, path, facts = entry
    if not path.exists():
        pytest.skip(f"{label}: facts without the file")
    art = wb.open(path, data=[]) if path.suffix == ".pte" else wb.open(path)
    try:
        check_invariants(art)
        if path.suffix == ".pte":
            _check_pte(art, facts, label)
        elif path.suffix == ".ptd":
            _check_ptd(art, facts, label)
        elif path.suffix == ".pt2":
            _check_pt2(art, facts, label)
    finally:
        art.close()


def _check_pte(art, facts: dict, label: str) -> None:
    prog = facts.get("program")
    if not isinstance(prog, dict):
        pytest.skip(f"{label}: no program facts (the old reader: {facts.get('reader_error')})")
    base = art.info.get("segment_base_offset") or 0
    seg = art.segments
    for i, s in enumerate(prog.get("segments") or []):
        if s["size"]:
            rows = seg[(seg["index"] == i).to_numpy(bool, na_value=False)]
            assert base + s["offset"] in set(rows["offset"]), (label, i)
            assert rows["size"].max() <= s["size"]
    t = art.tensors
    cs = prog.get("constant_segment")
    methods = art.frames["methods"].set_index("method")
    for plan in prog.get("execution_plan") or []:
        m = methods.loc[plan["name"]]
        if "operators" in plan:
            assert m["operators"] == len(plan["operators"]), label
        if "delegates" in plan:
            assert m["delegates"] == len(plan["delegates"]), label
        if "value_count" in plan:
            assert m["values"] == plan["value_count"], label
        for v in plan.get("values") or []:
            if v.get("type") != "Tensor":
                continue
            row = t[(t["method"] == plan["name"]).to_numpy(bool, na_value=False)
                    & (t["value"] == v["index"]).to_numpy(bool, na_value=False)]
            assert len(row) == 1, (label, v["index"])
            row = row.iloc[0]
            what = (label, plan["name"], v["index"])
            assert row["shape"] == tuple(v["sizes"]), what
            if v["scalar_type"] in SCALAR:
                assert row["dtype"] == SCALAR[v["scalar_type"]], what
            assert row["data_buffer_idx"] == v["data_buffer_idx"], what
            a = v.get("allocation_info")
            if a:
                assert row["mem_id"] == a["memory_id"], what
                hi = a["memory_offset_high"] << 32
                assert row["mem_offset"] == a["memory_offset_low"] + hi, what
            info = v.get("extra_tensor_info")
            if info and info.get("fully_qualified_name"):
                assert row["fqn"] == info["fully_qualified_name"], what
                if str(info.get("location", "")).upper().endswith("EXTERNAL"):
                    assert row["storage"] == "external", what
            elif (isinstance(cs, dict) and v["data_buffer_idx"] and row["storage"] == "segment"
                  and v["data_buffer_idx"] < len(cs["offsets"])):
                s = prog["segments"][cs["segment_index"]]
                assert row["offset"] == base + s["offset"] + cs["offsets"][v["data_buffer_idx"]], what


def _check_ptd(art, facts: dict, label: str) -> None:
    ft = facts.get("flat_tensor")
    if not isinstance(ft, dict):
        pytest.skip(f"{label}: no flat_tensor facts")
    base = art.info["segment_base_offset"]
    segs = ft.get("segments") or []
    t = art.tensors.set_index("name")
    # a field the release's schema lacks is a string saying so
    tensors = ft["tensors"] if isinstance(ft.get("tensors"), list) else []
    named = ft["named_data"] if isinstance(ft.get("named_data"), list) else []
    keys = [x["fully_qualified_name"] for x in tensors] + [x["key"] for x in named]
    assert sorted(t.index) == sorted(keys), label
    for x in tensors:  # the earlier schema: TensorMetadata
        r = t.loc[x["fully_qualified_name"]]
        assert r["shape"] == tuple(x["sizes"]) and r["dtype"] == SCALAR.get(x["scalar_type"],
                                                                            r["dtype"])
        assert r["offset"] == base + segs[x["segment_index"]]["offset"] + x["offset"], label
    for x in named:
        r = t.loc[x["key"]]
        assert r["offset"] == base + segs[x["segment_index"]]["offset"], label
        lay = x.get("tensor_layout")
        if isinstance(lay, dict):
            assert r["shape"] == tuple(lay["sizes"]), label


def _check_pt2(art, facts: dict, label: str) -> None:
    members = facts.get("members")
    if isinstance(members, list):
        m = art.frames["members"].set_index("name")
        for x in members:
            r = m.loc[x["name"]]
            assert r["header_offset"] == x["header_offset"], (label, x["name"])
            assert r["offset"] == x["data_offset"], (label, x["name"])
            assert r["size"] == x["compress_size"] and r["file_size"] == x["file_size"]
    load = facts.get("export_load")
    sd = load.get("state_dict") if isinstance(load, dict) else None
    t = art.tensors
    if not sd or not len(t):
        return  # an old flat archive keeps its state_dict pickled: not read, no tensors
    t = t.set_index("name")
    for x in sd:
        if x["name"] in t.index:
            r = t.loc[x["name"]]
            assert f"torch.{r['dtype']}" == x["dtype"] and r["shape"] == tuple(x["shape"]), label


@pytest.mark.parametrize("release,layout", [
    ("executorch-0.4.0", "legacy"),   # torch 2.5: torch.export.save's flat zip
    ("executorch-0.7.0", "pickled"),  # torch 2.8: the pt2 layout with pickled weights
])
def test_older_pt2_layouts_are_named(release, layout):
    """Older torch.export archives are named by their layout, not called 'not an archive'."""
    import zipfile

    p = ROOT / "sample_models" / "compat" / release / "mlp.pt2"
    if not p.is_file():
        pytest.skip(f"{p} is not there")
    names = zipfile.ZipFile(p).namelist()
    art = wb.open(p)
    found = art.validate()
    assert not (found["severity"] == "warning").any(), found.to_string()
    messages = " | ".join(found["message"])
    if layout == "legacy":
        assert "serialized_exported_program.json" in names
        assert art.info["layout"].startswith("torch.export legacy flat layout")
        assert "weights are pickled in serialized_state_dict.pt" in messages
    else:
        pickled = [n for n in names if n.endswith("data/weights/model.pt")]
        assert len(pickled) == 1
        assert f"pickled in {pickled[0]} (torch 2.8 layout" in messages
    assert len(art.tensors) == 0  # nothing unpickled, so no tensor is listed
