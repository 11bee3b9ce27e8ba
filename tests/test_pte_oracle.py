"""Every sample .pte, and every layout variant of ``variants.py``, read by workbench agrees
with ExecuTorch's own reading of it.

Golden facts are computed here from ``executorch.exir._serialize._program`` (the extended
header and ``_flatbuffer_to_program``, which keeps ``Program.segments`` as stored), never pasted.
"""

from __future__ import annotations

import mmap
import os
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from conftest import sha256
from helpers import tensor_bytes, tensor_key
from variants import BPTE_VARIANTS, VARIANTS, check, source_sample

import workbench as wb
from workbench import readpath

PTE_VARIANTS = True  # pte_path: the samples and the layout variants (conftest.py)
TENSOR_REQUIRED = ("name", "dtype", "shape", "nbytes", "storage", "file", "offset")
STORAGES = {"segment", "inline", "external", "named_data", "mutable", "planned", "unallocated",
            "zip", "blob", "so"}


def _rows(df: pd.DataFrame, **eq) -> pd.DataFrame:
    mask = np.ones(len(df), dtype=bool)
    for k, v in eq.items():
        mask &= (df[k] == v).fillna(False).to_numpy(dtype=bool)
    return df[mask]


def _one(df: pd.DataFrame, **eq) -> pd.Series:
    r = _rows(df, **eq)
    assert len(r) == 1, f"expected exactly one row with {eq}, got {len(r)}"
    return r.iloc[0]


# -- header and segments ------------------------------------------------------------------------
def test_extended_header(pte_path, oracle, opened):
    o = oracle.read(pte_path)
    art = opened(pte_path)
    assert art.format == "pte"
    assert art.info["program_size"] == o.program_size
    assert art.info["segment_base_offset"] == o.segment_base_offset
    eh = art.info["extended_header"]
    if o.eh is None:
        assert eh is None
    else:
        assert eh.length == o.eh.length
        assert eh.program_size == o.eh.program_size
        assert eh.segment_base_offset == o.eh.segment_base_offset
        assert (eh.segment_data_size or 0) == o.eh.segment_data_size


def test_segments_match_oracle(pte_path, oracle, opened):
    o = oracle.read(pte_path)
    art = opened(pte_path)
    seg = art.segments
    seg = seg[seg["file"] == art.path]
    indexed = seg[seg["index"].notna()]
    assert sorted(set(indexed["index"].astype(int))) == list(range(len(o.program.segments)))
    for i, s in enumerate(o.program.segments):
        rows = indexed[indexed["index"] == i]  # one row, or a delegate blob's sub-segments
        assert len(rows) == 1 or s.size, f"segment {i}"
        assert rows["size"].sum() == s.size, f"segment {i}"
        if o.eh is not None:
            assert rows["offset"].min() == o.segment_base_offset + s.offset, f"segment {i}"
        else:
            # No extended header: ExecuTorch can only have empty segments, placed nowhere.
            assert s.size == 0


def test_segments_cover_file(pte_path, opened):
    art = opened(pte_path)
    seg = art.segments
    for c in ("file", "name", "kind", "offset", "size"):
        assert c in seg.columns
    assert seg["offset"].dtype == np.int64
    assert seg["size"].dtype == np.int64
    assert (seg["size"] >= 0).all()
    assert art.files[0] == art.path
    assert set(seg["file"]) == set(art.files)
    # Sorted by (file, offset) (the contract); the rows of every file cover it exactly.
    keys = list(zip(seg["file"], seg["offset"]))
    assert keys == sorted(keys)
    for file in art.files:
        part = seg[seg["file"] == file]
        offsets = part["offset"].tolist()
        sizes = part["size"].tolist()
        assert offsets[0] == 0, file
        for k in range(1, len(part)):
            assert offsets[k] == offsets[k - 1] + sizes[k - 1], f"{file}: gap/overlap before row {k}"
        file_size = os.path.getsize(file)
        assert sum(sizes) == file_size, file
        assert offsets[-1] + sizes[-1] == file_size, file


# -- tensors --------------------------------------------------------------------------------------
def test_tensors_frame_schema(pte_path, opened):
    import torch

    t = opened(pte_path).tensors
    for c in (*TENSOR_REQUIRED, "method", "value"):
        assert c in t.columns, c
    assert pd.api.types.is_string_dtype(t["name"])
    assert t["nbytes"].dtype == np.int64
    assert t["offset"].dtype == pd.Int64Dtype()
    assert t["value"].dtype == pd.Int64Dtype()
    assert pd.api.types.is_string_dtype(t["file"]) or t["file"].isna().all()
    for shape in t["shape"]:
        assert isinstance(shape, tuple) and all(isinstance(d, int) for d in shape), shape
    for name in t["dtype"].astype(str):
        assert isinstance(getattr(torch, name, None), torch.dtype), name
    assert set(t["storage"].astype(str)) <= STORAGES
    # file/offset are missing together, and only when no bytes are stored.
    assert (t["file"].isna() == t["offset"].isna()).all()
    assert t.loc[t["storage"].isin(["planned", "unallocated"]), "offset"].isna().all()
    assert t.loc[t["storage"].isin(["segment", "inline", "mutable", "named_data"]),
                 "offset"].notna().all()


def test_every_tensor_value(pte_path, oracle, opened):
    """Every Tensor EValue is a row with the oracle's dtype, shape, dim_order and nbytes."""
    o = oracle.read(pte_path)
    t = opened(pte_path).tensors
    n = 0
    for method, v, tensor in o.tensors():
        n += 1
        row = _one(t, method=method, value=v)
        assert row["dtype"] == oracle.dtype_name(tensor.scalar_type), (method, v)
        assert row["shape"] == tuple(tensor.sizes), (method, v)
        assert tuple(row["dim_order"]) == tuple(tensor.dim_order), (method, v)
        assert row["nbytes"] == o.nbytes(tensor), (method, v)
        if tensor.extra_tensor_info is not None and tensor.extra_tensor_info.fully_qualified_name:
            assert row["name"] == tensor.extra_tensor_info.fully_qualified_name
    assert t["method"].notna().sum() == n
    # every other row is named data: the program's own, then entries of attached .ptd files
    assert (t.loc[t["method"].isna(), "storage"] == "named_data").all()
    own = t[t["method"].isna() & (t["file"] == opened(pte_path).path)]
    assert len(own) == len(o.program.named_data or [])


def test_constant_tensors(pte_path, oracle, opened):
    o = oracle.read(pte_path)
    art = opened(pte_path)
    t = art.tensors
    expected = set()
    for method, v, tensor in o.tensors():
        at = o.constant_location(tensor)
        if at is None:
            continue
        expected.add((method, v))
        row = _one(t, method=method, value=v)
        nbytes = o.nbytes(tensor)
        assert row["storage"] == "segment"
        assert row["dtype"] == oracle.dtype_name(tensor.scalar_type)
        assert row["shape"] == tuple(tensor.sizes)
        assert row["offset"] == at
        assert row["file"] == art.path
        want = o.data[at : at + nbytes]
        assert len(want) == nbytes
        got = tensor_bytes(art.tensor((method, v)), tensor.dim_order)
        assert sha256(got) == sha256(want), (method, v)
        # Second path: deserialize_pte_binary restores constants into constant_buffer.
        restored = o.restored_constant(tensor.data_buffer_idx)
        assert sha256(got) == sha256(restored[:nbytes]), (method, v)
    got_set = {(str(r.method), int(r.value)) for r in t[t["storage"] == "segment"].itertuples()}
    assert got_set == expected


def test_inline_constant_tensors(pte_path, oracle, opened):
    """Legacy Program.constant_buffer (no constant segment): bytes inside the flatbuffer."""
    o = oracle.read(pte_path)
    art = opened(pte_path)
    cs = o.program.constant_segment
    expected = set()
    if not (cs is not None and cs.offsets):  # no constant segment: constants are inline
        for method, v, tensor in o.tensors():
            if (tensor.allocation_info is not None or not tensor.data_buffer_idx
                    or o.is_external(tensor)):
                continue
            expected.add((method, v))
            row = _one(art.tensors, method=method, value=v)
            assert row["storage"] == "inline"
            buf = o.program.constant_buffer[tensor.data_buffer_idx].storage
            want = bytes(buf[: o.nbytes(tensor)])
            assert len(want) == o.nbytes(tensor)
            # the row's offset is where those bytes are in the file (inside the flatbuffer)
            assert row["file"] == art.path
            assert 0 < row["offset"] and row["offset"] + row["nbytes"] <= o.program_size
            assert o.data[row["offset"] : row["offset"] + row["nbytes"]] == want
            got = tensor_bytes(art.tensor((method, v)), tensor.dim_order)
            assert sha256(got) == sha256(want), (method, v)
    t = art.tensors
    assert {(str(r.method), int(r.value)) for r in t[t["storage"] == "inline"].itertuples()} \
        == expected


def test_mutable_tensors(pte_path, oracle, opened):
    o = oracle.read(pte_path)
    art = opened(pte_path)
    t = art.tensors
    expected = set()
    for method, v, tensor in o.tensors():
        at = o.mutable_location(tensor)
        if at is None:
            continue
        expected.add((method, v))
        nbytes = o.nbytes(tensor)
        row = _one(t, method=method, value=v)
        assert row["storage"] == "mutable"
        assert row["offset"] == at
        want = o.data[at : at + nbytes]
        got = tensor_bytes(art.tensor((method, v)), tensor.dim_order)
        assert sha256(got) == sha256(want), (method, v)
        restored = o.restored_mutable(tensor)
        assert sha256(got) == sha256(restored[:nbytes]), (method, v)
    got_set = {(str(r.method), int(r.value)) for r in t[t["storage"] == "mutable"].itertuples()}
    assert got_set == expected


def test_kv_cache_has_mutable_tensors(sample, oracle, opened):
    p = sample("kv_cache.pte")
    o = oracle.read(p)
    assert o.program.mutable_data_segments, "sample lost its mutable data segment"
    assert (opened(p).tensors["storage"] == "mutable").any()


def test_external_tensors(pte_path, oracle, opened):
    o = oracle.read(pte_path)
    art = opened(pte_path)
    t = art.tensors
    expected = {}
    for method, v, tensor in o.tensors():
        if o.is_external(tensor):
            expected[(method, v)] = tensor.extra_tensor_info.fully_qualified_name
    for (method, v), fqn in expected.items():
        row = _one(t, method=method, value=v)
        assert row["storage"] == "external"
        assert row["name"] == fqn
        assert row["fqn"] == fqn
        try:
            x = art.tensor((method, v))
        except wb.MissingDataError:
            assert pd.isna(row["offset"]) and row["missing"]  # no .ptd holds it
        else:
            assert tuple(x.shape) == row["shape"]
            assert row["file"] != art.path and str(row["file"]).endswith(".ptd")
            assert row["file"] in art.files
            want = oracle.ptd_named_bytes(row["file"])[fqn][: row["nbytes"]]
            assert len(want) == row["nbytes"]
            assert sha256(tensor_bytes(x, row["dim_order"])) == sha256(want), fqn
    got = {(str(r.method), int(r.value)) for r in t[t["storage"] == "external"].itertuples()}
    assert got == set(expected)


def test_mlp_external_is_external(sample, oracle, opened):
    p = sample("mlp_external.pte")
    o = oracle.read(p)
    fqns = sorted(t.extra_tensor_info.fully_qualified_name for _, _, t in o.tensors()
                  if o.is_external(t))
    assert fqns, "sample lost its external tensors"
    for art in (opened(p), wb.open(p, data=[])):
        t = art.tensors
        assert sorted(t.loc[t["storage"] == "external", "name"]) == fqns
    # without data files: missing, and reading one is a MissingDataError naming the file
    bare = wb.open(p, data=[])
    t = bare.tensors
    assert t.loc[t["storage"] == "external", "offset"].isna().all()
    with pytest.raises(wb.MissingDataError, match=r"mlp_external\.pte"):
        bare.tensor(fqns[0])
    bare.close()


def test_bf16_tensors(sample, oracle, opened):
    import torch

    p = sample("mlp_bf16.pte")
    o = oracle.read(p)
    art = opened(p)
    n = 0
    for method, v, tensor in o.tensors():
        at = o.constant_location(tensor)
        if at is None or oracle.dtype_name(tensor.scalar_type) != "bfloat16":
            continue
        x = art.tensor((method, v))
        assert isinstance(x, torch.Tensor)
        assert x.dtype == torch.bfloat16
        assert tuple(x.shape) == tuple(tensor.sizes)
        assert tensor_bytes(x, tensor.dim_order) == o.data[at : at + o.nbytes(tensor)]
        # zero-copy: two calls see the same memory; copy=True does not
        assert art.tensor((method, v)).data_ptr() == x.data_ptr()
        c = art.tensor((method, v), copy=True)
        assert c.data_ptr() != x.data_ptr() and torch.equal(c, x)
        n += 1
    assert n, "mlp_bf16.pte has no bfloat16 constants"


def test_numpy_views_are_readonly_and_zero_copy(pte_path, opened):
    art = opened(pte_path)
    t = art.tensors
    rows = t[t["offset"].notna()]
    checked = 0
    for row in rows.itertuples(index=False):
        key = (str(row.method), int(row.value)) if pd.notna(row.method) else str(row.name)
        x = art.tensor(key)
        if not isinstance(x, np.ndarray):
            continue
        assert x.flags.writeable is False
        assert x.flags.owndata is False
        with pytest.raises(ValueError):
            x[...] = 0
        base = x
        while isinstance(base, np.ndarray):
            base = base.base
        assert isinstance(base, memoryview), type(base)
        assert isinstance(base.obj, mmap.mmap), type(base.obj)
        assert np.shares_memory(art.tensor(key), x)
        c = art.tensor(key, copy=True)
        assert c.flags.writeable and not np.shares_memory(c, x)
        np.testing.assert_array_equal(c, x)
        checked += 1
        if checked >= 3:
            break
    if not checked:
        pytest.skip("no numpy-viewable stored tensors")


def test_tensor_accepts_every_name(pte_path, opened):
    art = opened(pte_path)
    t = art.tensors
    first = t.drop_duplicates("name")
    for row in first.itertuples(index=False):
        if pd.isna(row.offset):
            with pytest.raises(wb.MissingDataError):
                art.tensor(row.name)
        else:
            assert tuple(art.tensor(row.name).shape) == row.shape
    with pytest.raises(KeyError):
        art.tensor("no such tensor \x00")


# -- program tables -------------------------------------------------------------------------------
def test_operators(pte_path, oracle, opened):
    o = oracle.read(pte_path)
    ops = opened(pte_path).frames["operators"]
    for plan in o.program.execution_plan:
        mine = _rows(ops, method=plan.name).sort_values("index")
        assert list(zip(mine["name"], mine["overload"])) == [
            (op.name, op.overload) for op in plan.operators]
        uses = Counter(
            ins.instr_args.op_index for chain in plan.chains for ins in chain.instructions
            if isinstance(ins.instr_args, oracle.schema.KernelCall))
        assert mine["uses"].tolist() == [uses.get(k, 0) for k in range(len(plan.operators))]
    assert len(ops) == sum(len(p.operators) for p in o.program.execution_plan)


def test_delegates(pte_path, oracle, opened):
    o = oracle.read(pte_path)
    dele = opened(pte_path).frames["delegates"]
    segment = int(oracle.schema.DataLocation.SEGMENT)
    for plan in o.program.execution_plan:
        mine = _rows(dele, method=plan.name).sort_values("index")
        assert mine["id"].tolist() == [d.id for d in plan.delegates]
        calls = Counter(
            ins.instr_args.delegate_index for chain in plan.chains for ins in chain.instructions
            if isinstance(ins.instr_args, oracle.schema.DelegateCall))
        for k, (d, row) in enumerate(zip(plan.delegates, mine.itertuples(index=False))):
            assert row.data_index == d.processed.index
            assert row.calls == calls.get(k, 0)
            if int(d.processed.location) == segment:
                assert row.location == "segment"
                off, size = o.segment_abs(d.processed.index)
                assert (row.offset, row.size) == (off, size)
            else:
                assert row.location == "inline"
                want = o.program.backend_delegate_data[d.processed.index].data
                assert row.size == len(want)
                assert o.data[row.offset : row.offset + row.size] == bytes(want)
    assert len(dele) == sum(len(p.delegates) for p in o.program.execution_plan)


def test_named_data(pte_path, oracle, opened):
    o = oracle.read(pte_path)
    art = opened(pte_path)
    nd = art.frames["named_data"]
    nd = nd[nd["file"] == art.path]
    want = [(n.key, n.segment_index) for n in (o.program.named_data or [])]
    assert list(zip(nd["key"], nd["segment"])) == want
    for key, si in want:
        row = _one(nd, key=key)
        assert (row["offset"], row["size"]) == o.segment_abs(si)
        trow = _one(art.tensors, name=key, file=art.path)
        assert trow["storage"] == "named_data"
        off, size = o.segment_abs(si)
        assert tensor_bytes(art.tensor(key)) == o.data[off : off + size]


def test_methods(pte_path, oracle, opened):
    o = oracle.read(pte_path)
    m = opened(pte_path).frames["methods"]
    plans = o.program.execution_plan
    assert m["method"].tolist() == [p.name for p in plans]
    for p, row in zip(plans, m.itertuples(index=False)):
        instrs = [ins for c in p.chains for ins in c.instructions]
        assert row.instructions == len(instrs), p.name
        assert row.kernel_calls == sum(isinstance(i.instr_args, oracle.schema.KernelCall)
                                       for i in instrs)
        assert row.delegate_calls == sum(isinstance(i.instr_args, oracle.schema.DelegateCall)
                                         for i in instrs)
        assert row.values == len(p.values)
        assert row.tensors == sum(isinstance(v.val, oracle.schema.Tensor) for v in p.values)
        assert row.inputs == len(p.inputs) and row.outputs == len(p.outputs)
        assert row.chains == len(p.chains)
        assert row.operators == len(p.operators) and row.delegates == len(p.delegates)
        sizes = list(p.non_const_buffer_sizes)
        assert row.planned_bytes == sum(sizes[1:])
        assert row.planned_buffers == max(len(sizes) - 1, 0)


def test_memory_plan(pte_path, oracle, opened):
    o = oracle.read(pte_path)
    art = opened(pte_path)
    mp = art.frames["memory_plan"]
    sizes = {p.name: list(p.non_const_buffer_sizes) for p in o.program.execution_plan}
    expected = set()
    for method, v, tensor in o.tensors():
        a = tensor.allocation_info
        if a is None:
            continue
        expected.add((method, v))
        offset = a.memory_offset_low | (a.memory_offset_high << 32)
        row = _one(mp, method=method, value=v)
        assert row["mem_id"] == a.memory_id
        assert row["offset"] == offset
        assert row["nbytes"] == o.nbytes(tensor)
        assert row["buffer_size"] == sizes[method][a.memory_id]
        assert row["end"] == offset + o.nbytes(tensor)
        assert row["fits"] == (offset + o.nbytes(tensor) <= sizes[method][a.memory_id])
        trow = _one(art.tensors, method=method, value=v)
        assert trow["mem_id"] == a.memory_id and trow["mem_offset"] == offset
    assert {(str(r.method), int(r.value)) for r in mp.itertuples()} == expected


def test_stored_offsets_on_scalar_path(pte_path, oracle, monkeypatch):
    """Constant and mutable tensor offsets, read with the vectorised path turned off (the
    scalar verifying path), are ExecuTorch's."""

    monkeypatch.setattr(readpath, "TIER", readpath.Tier.TABLES)
    o = oracle.read(pte_path)
    want = {}
    for method, v, tensor in o.tensors():
        at = o.constant_location(tensor)
        if at is None:
            at = o.mutable_location(tensor)
        if at is not None:
            want[(method, v)] = at
    with wb.open(pte_path, data=[]) as art:
        t = art.tensors
        t = t[t["storage"].isin(["segment", "mutable"])]
        got = {(str(r.method), int(r.value)): int(r.offset) for r in t.itertuples()}
    assert got == want


# -- the layout variants (variants.py) ------------------------------------------------------------
@pytest.mark.parametrize("name", VARIANTS + BPTE_VARIANTS)
def test_variant_has_its_property(name, pte_variant):
    """Each variant really is what it is named for (checked again from the written bytes)."""
    check(name, pte_variant(name))


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_tensors_match_source_sample(name, pte_variant, sample):
    """A variant holds its source sample's tensors and delegate blobs: each reads the same
    bytes (same dtype and shape) from the variant, wherever the variant's layout put them."""
    p = pte_variant(name)
    src = sample(source_sample(name))
    moved = 0
    with wb.open(src) as a, wb.open(p) as b:
        ta, tb = a.tensors, b.tensors
        stored = ta[ta["offset"].notna()]
        assert len(stored)
        for r in stored.itertuples(index=False):
            key = tensor_key(r)
            if isinstance(key, tuple):
                row = _one(tb, method=key[0], value=key[1])
            else:
                row = _one(tb, name=key)
            assert (row["dtype"], row["shape"]) == (r.dtype, r.shape), key
            want_storage = "inline" if name == "inline_constant_buffer" else r.storage
            assert row["storage"] == want_storage, key
            assert pd.notna(row["offset"]), key
            assert tensor_bytes(b.tensor(key)) == tensor_bytes(a.tensor(key)), key
            moved += int(row["offset"]) != int(r.offset)
        da, db = a.frames["delegates"], b.frames["delegates"]
        assert len(da) == len(db)
        raw_a, raw_b = src.read_bytes(), p.read_bytes()
        for x, y in zip(da.itertuples(), db.itertuples()):
            assert (x.id, x.size) == (y.id, y.size)
            assert raw_a[x.offset : x.offset + x.size] == raw_b[y.offset : y.offset + y.size]
            moved += x.offset != y.offset
    if name not in ("trailing", "ptd_trailing"):  # every other layout moves some bytes
        assert moved, "nothing moved: the variant has the sample's layout"


def test_two_mutable_segments_are_flagged(pte_variant, oracle, sample):
    """Tensors of the second mutable segment are placed by mutable_data_segments_idx; the
    program is flagged since ExecuTorch's own readers do not follow that index."""
    p = pte_variant("two_mutable")
    o = oracle.read(p)
    with wb.open(p) as art:
        t = art.tensors
        mut = t[t["storage"] == "mutable"]
        segs = {m.segment_index for m in o.program.mutable_data_segments}
        assert set(mut["segment"].astype(int)) == segs
        found = art.validate()
        hit = found[found["structure"] == "Program.mutable_data_segments"]
        assert len(hit) == 1 and hit["severity"].iloc[0] == "warning"
    with wb.open(sample("kv_cache.pte")) as art:  # one mutable segment: nothing to say
        assert not (art.validate()["structure"] == "Program.mutable_data_segments").any()


def test_legacy_constant_buffer_is_flagged(pte_variant, oracle, sample):
    """Constants inline in Program.constant_buffer read fine, and validate() warns that
    ExecuTorch's runtime refuses such a program."""
    p = pte_variant("inline_constant_buffer")
    o = oracle.read(p)
    stored = sum(len(b.storage) for b in o.program.constant_buffer)
    with wb.open(p) as art:
        found = art.validate()
        hit = found[found["structure"] == "Program.constant_buffer"]
        assert len(hit) == 1 and hit["severity"].iloc[0] == "warning"
        assert str(stored) in hit["message"].iloc[0]
    with wb.open(sample("mlp_portable.pte")) as art:  # constant segment: nothing to say
        assert not (art.validate()["structure"] == "Program.constant_buffer").any()
