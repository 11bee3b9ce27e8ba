"""workbench.compare: facts about pairs of sample artifacts, checked against the bytes and the
oracle (ExecuTorch's own deserializer / FlatTensor reader), computed here."""

from __future__ import annotations

import hashlib
import pathlib
import shutil

import pandas as pd
import pytest

import workbench as wb
from workbench import frames
from workbench.comparison import CLASSES, Comparison, duplicates


def _raw(path, offset: int, nbytes: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(nbytes)


def _open_pt2(path: pathlib.Path) -> wb.Artifact:
    """Open a .pt2 sample, or skip while the .pt2 reader has not landed."""
    try:
        return wb.open(path)
    except wb.UnsupportedVersionError as e:
        pytest.skip(f".pt2 reader not there yet: {e}")


def _per_file(cmp: Comparison, side: str, file: str, metric: str) -> int:
    s = cmp.summary
    row = s[(s["side"] == side) & (s["file"] == file) & (s["metric"] == metric)]
    assert len(row) == 1, (side, file, metric)
    return int(row["bytes"].iloc[0])


def _check_schema(cmp: Comparison) -> None:
    for name, df in cmp.frames.items():
        schema = {c.name: c for c in frames.SCHEMAS[f"compare_{name}"]}
        assert set(df.columns) <= set(schema), name
        for c in schema.values():
            if c.required:
                assert c.name in df.columns, (name, c.name)


# --------------------------------------------------------------------------------------------
# portable .pte vs .pte + .ptd: every weight moved, same bytes, the .pte shrank
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def portable_vs_external(sample):
    pte, ext, ptd = sample("mlp_portable.pte"), sample("mlp_external.pte"), sample("mlp_external.ptd")
    with wb.compare(pte, [ext, ptd]) as cmp:
        yield cmp, pte, ext, ptd


def test_portable_vs_external_every_weight_moved(portable_vs_external, oracle):
    cmp, pte, ext, ptd = portable_vs_external
    t = cmp.tensors
    prog_a = oracle.read(pte)
    prog_b = oracle.read(ext)
    # the oracle's constants of a: (method, value) -> (offset, nbytes)
    consts = {(m, v): (prog_a.constant_location(x), prog_a.nbytes(x))
              for m, v, x in prog_a.tensors() if prog_a.constant_location(x) is not None}
    fqn_b = {(m, v): x.extra_tensor_info.fully_qualified_name
             for m, v, x in prog_b.tensors() if prog_b.is_external(x)}
    assert len(consts) == 4 and set(consts) == set(fqn_b)
    assert len(t) == len(consts)
    assert (t["side"] == "both").all()
    # synthetic names on a ("forward/0"): matched by (method, value), not by name
    assert set(t["match"]) == {"method_value"}
    assert (t["moved"] == "segment → external").all()
    assert (t["storage_a"] == "segment").all() and (t["storage_b"] == "external").all()
    assert (t["file_b"] == str(ptd)).all()
    for name_a, name_b, off_a in zip(t["name_a"], t["name_b"], t["offset_a"]):
        method, value = name_a.split("/")
        assert fqn_b[(method, int(value))] == name_b
        assert consts[(method, int(value))][0] == off_a
    # nothing hashed yet
    assert t["same_bytes"].isna().all()
    _check_schema(cmp)


def test_portable_vs_external_same_bytes(portable_vs_external, oracle):
    cmp, pte, _ext, ptd = portable_vs_external
    t = cmp.hash().tensors
    assert cmp.hashed
    assert t["same_bytes"].all()
    named = oracle.ptd_named_bytes(ptd)  # FlatTensorSerializer's reading of the .ptd
    for name_b, off_a, nbytes, sha_a, sha_b in zip(t["name_b"], t["offset_a"], t["nbytes"],
                                                    t["sha256_a"], t["sha256_b"]):
        want = hashlib.sha256(named[name_b]).hexdigest()
        assert sha_b == want
        assert sha_a == hashlib.sha256(_raw(pte, int(off_a), int(nbytes))).hexdigest()


def test_portable_vs_external_pte_shrinks_by_the_weights(portable_vs_external):
    cmp, pte, ext, ptd = portable_vs_external
    t = cmp.tensors
    moved = int(t["nbytes"].sum())
    assert moved == 3232  # sample_models/README.md: 3,232 bytes of weights
    sizes = {p: p.stat().st_size for p in (pte, ext, ptd)}
    # byte classes partition every file
    for side, f in (("a", pte), ("b", ext), ("b", ptd)):
        assert _per_file(cmp, side, str(f), "size") == sizes[f]
        assert sum(_per_file(cmp, side, str(f), c) for c in CLASSES) == sizes[f]
    # the weights left the .pte entirely and are all in the .ptd
    assert _per_file(cmp, "a", str(pte), "weights") == moved
    assert _per_file(cmp, "b", str(ext), "weights") == 0
    assert _per_file(cmp, "b", str(ptd), "weights") == moved
    # the .pte shrank by the weights' size, less what the rest of the file grew by
    # (fqn strings in the flatbuffer; no eh00 header and no segment padding any more)
    others = sum(_per_file(cmp, "b", str(ext), c) - _per_file(cmp, "a", str(pte), c)
                 for c in CLASSES if c != "weights")
    assert sizes[pte] - sizes[ext] == moved - others
    assert sizes[ext] < sizes[pte] - moved + _per_file(cmp, "b", str(ext), "flatbuffer")
    d = cmp.delta()
    assert d.loc["weights", "change"] == 0 and d.loc["stored_tensors", "change"] == 0
    assert d.loc["size", "a"] == sizes[pte] and d.loc["size", "b"] == sizes[ext] + sizes[ptd]


def test_portable_vs_external_segments_and_display(portable_vs_external):
    cmp, _pte, ext, ptd = portable_vs_external
    seg = cmp.segments
    assert (seg["side"] == "a").sum() == len(cmp.a.segments)
    assert (seg["side"] == "b").sum() == len(cmp.b.segments)
    assert set(seg.loc[seg["side"] == "b", "file"]) == {str(ext), str(ptd)}
    for side in ("a", "b"):
        part = seg[seg["side"] == side]
        assert int(part["size"].sum()) == sum(pathlib.Path(f).stat().st_size
                                              for f in cmp.side(side).files)
    html = cmp._repr_html_()
    assert "mlp_portable.pte" in html and "mlp_external.ptd" in html
    assert "segment → external" in html
    assert cmp.duplicates.empty


def test_data_given_three_ways_agree(sample):
    pte, ext, ptd = sample("mlp_portable.pte"), sample("mlp_external.pte"), sample("mlp_external.ptd")
    got = []
    for b, kw in (([ext, ptd], {}), (ext, {"data_b": [ptd]}), (ext, {})):  # list, data_b, sibling
        with wb.compare(pte, b, **kw) as cmp:
            got.append(cmp.tensors[["name_a", "name_b", "moved", "file_b"]].to_dict("list"))
    assert got[0] == got[1] == got[2]
    with wb.compare(pte, ext, data_b=[]) as cmp:  # no data file: the bytes are missing
        t = cmp.tensors
        assert (t["side"] == "both").all() and t["offset_b"].isna().all()
        assert cmp.hash().tensors["same_bytes"].isna().all()


def test_bad_arguments(sample):
    pte = sample("mlp_portable.pte")
    art = wb.open(pte)
    try:
        with pytest.raises(TypeError):
            wb.compare(art, pte, data_a=[])
        with pytest.raises(TypeError):
            wb.compare(pte, [pte], data_b=[])
        with pytest.raises(ValueError):
            wb.compare(pte, [])
        with pytest.raises(wb.ArtifactError):
            wb.compare(pte, sample("README.md"))
        cmp = wb.compare(art, pte)
        cmp.close()  # closes only what it opened
        assert art.tensor("forward/0").shape == (32, 16)
    finally:
        art.close()


def test_compare_with_itself(sample):
    p = sample("multi_method.pte")
    with wb.compare(p, p, hashes=True) as cmp:
        t = cmp.tensors
        assert (t["side"] == "both").all()
        assert set(t["match"]) == {"method_value"}
        assert (t["moved"] == "").all() and t["same_bytes"].all()
        assert (t["name_a"] == t["name_b"]).all()
        # encode and forward share their first two constants: one location, not duplicates
        assert cmp.duplicates.empty
        assert (cmp.delta()["change"] == 0).all()


# --------------------------------------------------------------------------------------------
# duplicates: the tie that XNNPACK breaks
# --------------------------------------------------------------------------------------------

def test_tied_xnnpack_duplicate_found(sample, oracle):
    portable, xnn = sample("tied_portable.pte"), sample("tied_xnnpack.pte")
    with wb.compare(portable, xnn) as cmp:
        d = cmp.duplicates
        assert (d["side"] == "a").sum() == 0  # the portable program stores the tie once
        assert len(d) == 1
        row = d.iloc[0]
        assert row["side"] == "b" and row["nbytes"] == 4096 and row["copies"] == 2
        assert row["wasted"] == 4096 and row["files"] == 1
        # the oracle: one copy in the constant segment, one XNNPACK named-data segment whose
        # key is the sha256 of its bytes (XNNPACK's convention)
        prog = oracle.read(xnn)
        (const,) = [(prog.constant_location(x), prog.nbytes(x)) for _m, _v, x in prog.tensors()
                    if prog.constant_location(x) is not None]
        (key,) = [e.key for e in prog.program.named_data]
        assert row["sha256"] == key == hashlib.sha256(_raw(xnn, *const)).hexdigest()
        key_tensor = cmp.b.frames["named_data"].set_index("key").loc[key, "tensor"]
        assert row["names"].split("; ") == ["forward/0", key_tensor]  # the XNNPACK constant
        s = cmp.summary
        dup = s[(s["metric"] == "duplicates") & s["file"].isna()].set_index("side")
        assert dup.loc["b", "bytes"] == 4096 and dup.loc["b", "count"] == 1
        assert dup.loc["a", "bytes"] == 0
        # content matching after hashing pairs the extra copy with a's single weight
        t = cmp.hash().tensors
        copy = t[t["match"] == "content_copy"]
        assert len(copy) == 1
        # the named-data entry is shown as the XNNPACK constant that reads it
        assert copy["name_a"].iloc[0] == "forward/0"
        assert copy["name_b"].iloc[0] == key_tensor
        assert copy["name_b"].iloc[0].startswith("forward/delegate0/")
        assert copy["moved"].iloc[0] == "segment → named_data"
        assert bool(copy["same_bytes"].iloc[0])
        assert pd.isna(copy["dtype_b"].iloc[0])  # the graph reads it as float32, as a does
    with wb.open(xnn) as art:
        alone = duplicates(art)
        assert list(alone["nbytes"]) == [4096] and list(alone["copies"]) == [2]
        assert duplicates(art, hash_cap=0).empty  # over the cap: not hashed
        assert len(duplicates(art, hash_cap=0, hashes=True)) == 1


def test_xnnpack_inline_vs_external_named_data(sample):
    """Same XNNPACK keys: matched by name (the key), moved from the .pte to the .ptd."""
    pte, ext = sample("mlp_xnnpack.pte"), sample("mlp_xnnpack_external.pte")
    sample("mlp_xnnpack_external.ptd")
    with wb.compare(pte, ext, data_a=[], hashes=True) as cmp:
        t = cmp.tensors
        assert len(t) == 4 and (t["side"] == "both").all() and set(t["match"]) == {"name"}
        assert (t["moved"] == "named_data (.pte) → named_data (.ptd)").all()
        assert t["same_bytes"].all()
        # each row is the XNNPACK constant stored under a key that is the sha256 of its bytes
        keys = cmp.a.frames["named_data"].set_index("tensor")["key"]
        assert (t["name_a"].map(keys) == t["sha256_a"]).all()
        assert (t["name_a"] == t["name_b"]).all() and t["name_a"].str.startswith("forward/delegate0/").all()
        assert _per_file(cmp, "b", str(ext), "weights") == 0
        assert _per_file(cmp, "a", str(pte), "weights") == int(t["nbytes"].sum())


def test_portable_vs_xnnpack_by_content(sample):
    with wb.compare(sample("mlp_portable.pte"), sample("mlp_xnnpack.pte"), data_b=[]) as cmp:
        before = cmp.tensors
        assert set(before["side"]) == {"a_only", "b_only"}  # no names, no shared value table
        after = cmp.hash().tensors
        assert (after["side"] == "both").all() and set(after["match"]) == {"content"}
        assert (after["moved"] == "segment → named_data").all() and after["same_bytes"].all()


# --------------------------------------------------------------------------------------------
# .pt2
# --------------------------------------------------------------------------------------------

def test_pte_vs_pt2(sample):
    pt2 = _open_pt2(sample("mlp.pt2"))
    try:
        with wb.compare(sample("mlp_external.pte"), pt2, hashes=True) as cmp:  # fqn on both
            t = cmp.tensors
            assert (t["side"] == "both").all() and set(t["match"]) == {"name"}
            assert set(t["name_a"]) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
            assert (t["name_a"] == t["name_b"]).all() and t["same_bytes"].all()
        with wb.compare(sample("mlp_portable.pte"), pt2, hashes=True) as cmp:  # no fqn on a
            t = cmp.tensors
            assert (t["side"] == "both").all() and set(t["match"]) == {"content"}
            assert t["same_bytes"].all()
            assert dict(zip(t["name_a"], t["name_b"])) == {
                "forward/0": "fc1.weight", "forward/1": "fc1.bias", "forward/2": "fc2.weight",
                "forward/3": "fc2.bias"}
    finally:
        pt2.close()


def test_tied_pt2_shares_storage(sample):
    pt2 = _open_pt2(sample("tied.pt2"))
    try:
        with wb.compare(sample("tied_xnnpack.pte"), pt2, hashes=True) as cmp:
            # one stored weight_0 for both names: one location, no duplicate on side b
            assert set(cmp.duplicates["side"]) == {"a"}
            t = cmp.tensors
            assert (t["side"] == "both").all() and t["same_bytes"].all()
            assert set(t["name_b"]) == {"emb.weight", "lm_head.weight"}
    finally:
        pt2.close()


def test_aoti_in_so_vs_blob(sample):
    so = _open_pt2(sample("mlp_aoti.pt2"))
    blob = _open_pt2(sample("mlp_aoti_blob.pt2"))
    try:
        with wb.compare(so, blob, hashes=True) as cmp:
            t = cmp.tensors
            stored_a = t[t["offset_a"].notna()]
            assert len(stored_a) >= 3  # fc1.weight, fc1.bias, fc2.weight (fc2.bias inlined)
            assert (stored_a["side"] == "both").all()
            assert stored_a["same_bytes"].all()
            assert (stored_a["storage_a"] == "so").all() and (stored_a["storage_b"] == "blob").all()
            assert (stored_a["moved"] == "so → blob").all()
            assert {"fc1.weight", "fc1.bias", "fc2.weight"} <= set(stored_a["name_b"])
            # same constants on both sides
            d = cmp.delta()
            assert d.loc["stored_tensors", "change"] == 0
            assert d.loc["weights", "b"] >= int(stored_a["nbytes"].sum())
    finally:
        so.close()
        blob.close()


# --------------------------------------------------------------------------------------------
# frames
# --------------------------------------------------------------------------------------------

def test_frames_follow_their_schemas(sample):
    with wb.compare(sample("kv_cache.pte"), sample("mlp_portable.pte"), hashes=True) as cmp:
        assert set(cmp.frames) == {"tensors", "summary", "segments", "duplicates"}
        _check_schema(cmp)
        t = cmp.tensors
        # kv_cache's mutable buffers have stored initial values: they are matched/listed too
        assert {"k_cache", "v_cache"} <= set(t["name_a"].dropna())
        assert not ({"planned"} & set(t["storage_a"].dropna()))
        s = cmp.summary
        assert s["share"].dtype == "float64"
        assert isinstance(s["bytes"].dtype, pd.Int64Dtype)
        whole = s[s["file"].isna() & (s["metric"] == "size")]
        assert (whole["share"] == 1.0).all()


def test_hashing_is_lazy_and_shows_progress_on_request(sample, capsys):
    pytest.importorskip("tqdm")
    with wb.compare(sample("mlp_portable.pte"), sample("mlp_external.pte")) as cmp:
        assert not cmp.hashed and cmp._hasher.digests == {}  # nothing read for matching
        cmp.hash(progress=True)
        assert "sha256" in capsys.readouterr().err
        assert len(cmp._hasher.digests) == 8  # 4 stored tensors on each side
        cmp.hash(progress=True)  # cached: nothing to hash, no bar
        assert "sha256" not in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# negative cases: one weight byte edited in a copy -> same_bytes False for that tensor only
# --------------------------------------------------------------------------------------------

def _edited_copy(src: pathlib.Path, dst: pathlib.Path, needle: bytes) -> int:
    """Copy ``src`` to ``dst`` with one byte in the middle of ``needle`` (which must occur
    exactly once) flipped; returns that byte's offset."""
    data = bytearray(src.read_bytes())
    at = data.find(needle)
    assert at >= 0 and data.find(needle, at + 1) < 0, src
    pos = at + len(needle) // 2
    data[pos] ^= 0x01
    dst.write_bytes(bytes(data))
    return pos


#: (id, side a files, which file of a gets an edited copy for side b)
_EDIT_CASES = [
    ("pte", ["mlp_portable.pte"], 0),
    ("ptd", ["mlp_external.ptd"], 0),
    ("pte+ptd", ["mlp_external.pte", "mlp_external.ptd"], 1),
    ("pt2", ["mlp.pt2"], 0),
    ("aoti_blob", ["mlp_aoti_blob.pt2"], 0),
]


@pytest.mark.parametrize("files,edit", [c[1:] for c in _EDIT_CASES], ids=[c[0] for c in _EDIT_CASES])
def test_one_edited_weight_byte(sample, oracle, tmp_path, files, edit):
    """fc2.weight's bytes (from ExecuTorch's reading of the .ptd; every MLP sample holds the
    same seeded weights) get one byte flipped in a copy: exactly that tensor has
    ``same_bytes`` False, every other matched tensor True, and both hashes are the SHA-256
    of the file slices."""
    needle = oracle.ptd_named_bytes(sample("mlp_external.ptd"))["fc2.weight"]
    a = [sample(f) for f in files]
    b = []
    for i, f in enumerate(a):
        dst = tmp_path / f.name
        if i == edit:
            pos = _edited_copy(f, dst, needle)
        else:
            shutil.copy(f, dst)
        b.append(dst)
    with wb.compare(a, b, hashes=True) as cmp:
        t = cmp.tensors
        assert (t["side"] == "both").all() and len(t) >= 3
        same = t["same_bytes"].astype(bool).tolist()
        for r, s in zip(t.itertuples(), same):
            raw_a = _raw(r.file_a, int(r.offset_a), int(r.nbytes))
            raw_b = _raw(r.file_b, int(r.offset_b), int(r.nbytes))
            assert s == (raw_a == raw_b), r
            assert r.sha256_a == hashlib.sha256(raw_a).hexdigest()
            assert r.sha256_b == hashlib.sha256(raw_b).hexdigest()
        changed = t[~t["same_bytes"].astype(bool)]
        assert len(changed) == 1 and sum(same) == len(t) - 1
        row = changed.iloc[0]
        assert row["file_b"] == str(b[edit]) and row["nbytes"] == len(needle)
        assert row["offset_b"] <= pos < row["offset_b"] + row["nbytes"]
        assert row["sha256_a"] != row["sha256_b"]


def test_content_match_needs_equal_bytes(sample, oracle, tmp_path):
    """mlp_portable.pte (synthetic names) vs mlp.pt2 pairs by content only: with one byte of
    fc2.weight edited in the .pt2, that weight is left unpaired on both sides."""
    needle = oracle.ptd_named_bytes(sample("mlp_external.ptd"))["fc2.weight"]
    b = tmp_path / "mlp.pt2"
    _edited_copy(sample("mlp.pt2"), b, needle)
    with wb.compare(sample("mlp_portable.pte"), b, hashes=True) as cmp:
        t = cmp.tensors
        both = t[t["side"] == "both"]
        assert set(both["match"]) == {"content"} and both["same_bytes"].all()
        assert set(both["name_b"]) == {"fc1.weight", "fc1.bias", "fc2.bias"}
        assert sorted(t.loc[t["side"] != "both", "side"]) == ["a_only", "b_only"]
        assert list(t.loc[t["side"] == "b_only", "name_b"]) == ["fc2.weight"]
        assert t.loc[t["side"] != "both", "same_bytes"].isna().all()


# --------------------------------------------------------------------------------------------
# delegate constants: which portable weight became which (quantized) XNNPACK constant
# --------------------------------------------------------------------------------------------

def test_portable_weights_found_as_quantized_xnnpack_constants(sample):
    """Per-channel int8: each fp32 weight pairs with the qcint8 constant whose dequantized
    values are it up to rounding (rule ``dequantized``); the biases stay fp32 (``content``).
    Without hashing nothing is read, so only the byte-identical rows could pair."""
    a, b = sample("mlp_portable.pte"), sample("mlp_xnnpack_qc8.pte")
    with wb.compare(a, b) as cmp:
        assert "dequantized" not in set(cmp.tensors["match"].dropna())
        t = cmp.hash().tensors.set_index("name_a", drop=False)
        dq = cmp.b.frames["delegate_tensors"].set_index("name")
        for name, shape in (("forward/0", (32, 16)), ("forward/2", (8, 32))):
            row = t.loc[name]
            assert row["match"] == "dequantized" and row["shape"] == shape
            assert row["dtype_b"] == "int8" and not row["same_bytes"]
            assert dq.loc[row["name_b"], "backend_dtype"] == "qcint8"
        for name in ("forward/1", "forward/3"):
            assert t.loc[name, "match"] == "content" and t.loc[name, "same_bytes"]


def test_a_changed_weight_is_not_its_quantized_constant(sample, tmp_path):
    """One weight moved by far more than a quantization step: it no longer pairs; the other
    weight still does."""
    import numpy as np

    src = sample("mlp_portable.pte")
    art = wb.open(src)
    off = int(art.tensors.set_index("name").loc["forward/0", "offset"])
    art.close()
    data = bytearray(src.read_bytes())
    w = np.frombuffer(data, np.float32, 1, off)
    data[off:off + 4] = np.float32(w[0] + 0.25).tobytes()
    edited = tmp_path / "edited.pte"
    edited.write_bytes(bytes(data))
    with wb.compare(edited, sample("mlp_xnnpack_qc8.pte"), hashes=True) as cmp:
        t = cmp.tensors
        assert t.loc[t["name_a"] == "forward/0", "side"].tolist() == ["a_only"]
        assert t.loc[t["name_a"] == "forward/2", "match"].tolist() == ["dequantized"]


def test_float_export_weights_found_as_groupwise_int4_constants(sample, tmp_path):
    """A torch.export archive of the float model against its 8da4w XNNPACK program: every
    linear weight pairs with its qbint4 constant (groupwise, bfloat16 scales)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchao")
    from test_xnnpack import _make_samples

    ms = _make_samples()
    model = ms.seeded(ms.WideMLP)
    pt2 = tmp_path / "wide.pt2"
    torch.export.save(torch.export.export(model, (torch.zeros(2, 64),)), str(pt2))
    with wb.compare(pt2, sample("wide_xnnpack_8da4w.pte"), hashes=True) as cmp:
        t = cmp.tensors.set_index("name_a", drop=False)
        for name in ("fc1.weight", "fc2.weight"):
            assert t.loc[name, "match"] == "dequantized", t[["name_a", "name_b", "match"]]
            assert t.loc[name, "dtype_b"] == "int4"
        assert t.loc["fc1.bias", "match"] == "content"


def test_hashed_is_the_bool_false_until_hash_then_true(sample):
    """``Comparison.hashed`` is exactly ``False`` before :meth:`Comparison.hash`, ``True`` after."""
    with wb.compare(sample("mlp_portable.pte"), sample("mlp_external.pte")) as cmp:
        assert cmp.hashed is False
        assert cmp.hash(progress=False) is cmp
        assert cmp.hashed is True
