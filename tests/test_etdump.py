"""ETDump traces (``.etdp``): the reader against ExecuTorch's Inspector and flatc decoder.

Oracles, computed in the tests: ``executorch.devtools.Inspector`` (event blocks, names, raw
durations, logged values; it shells out to flatc) on the samples made by
``sample_models/make_traces.py`` and on the corpus trace; ``deserialize_from_etdump_flatcc``
(flatc's JSON of the schema) on synthetic traces built here with the ``flatbuffers`` builder,
covering every table and value type. Hostile traces are built or patched in the tests.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import time
import tracemalloc
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import TIME_SCALE, read_tier

import workbench as wb
from workbench import readpath
from workbench.flatbuf import FlatBuffer
from workbench.formats import etdump
from workbench.formats.etdump import reader as etdump_reader
from workbench.formats.etdump import schema as S
from workbench.frames import SCHEMAS
from workbench.source import Source

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_models"
CORPUS = ROOT.parent / "shared" / "corpus"
CORPUS_ETDP = CORPUS / "docs__source__tutorials_source__etdump.etdp"
TRACES = ("mlp_portable", "mlp_xnnpack")
FRAMES = ("segments", "tensors", "runs", "events", "allocations", "debug_values")


def trace(name: str) -> tuple[Path, Path]:
    etdp, dbg = SAMPLES / f"{name}.etdp", SAMPLES / f"{name}.debug.bin"
    if not etdp.is_file() or not dbg.is_file():
        pytest.skip(f"{etdp.name} missing: run sample_models/make_traces.py")
    return etdp, dbg


def corpus_trace() -> Path:
    if not CORPUS_ETDP.is_file():
        pytest.skip(f"no corpus trace at {CORPUS_ETDP} (../shared/corpus is absent)")
    return CORPUS_ETDP


def inspector(etdp: Path, debug: Path | None = None):
    """The Inspector with raw units (no time scaling): durations are end - start."""
    devtools = pytest.importorskip("executorch.devtools")
    from executorch.devtools.inspector import TimeScale

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return devtools.Inspector(etdump_path=str(etdp),
                                  debug_buffer_path=str(debug) if debug else None,
                                  source_time_scale=TimeScale.NS, target_time_scale=TimeScale.NS)


def all_frames(art: wb.Artifact) -> dict[str, pd.DataFrame]:
    return {name: art.frames[name] for name in art.frames}


def our_groups(art: wb.Artifact) -> list[tuple[str, list[int]]]:
    """Runs grouped as the Inspector groups them: same block name, same event signatures."""
    ev = art.frames["events"]
    groups: dict[tuple, list[int]] = {}
    for run, block in zip(art.frames["runs"]["run"], art.frames["runs"]["block"]):
        e = ev[ev["run"] == run]
        sig = (block, tuple(zip(e["name"].astype(object), e["instruction"], e["chain"],
                                e["delegate_debug_id"].astype(object))))
        groups.setdefault(sig, []).append(int(run))
    return [(sig[0], runs) for sig, runs in groups.items()]


# ----------------------------------------------------------------------------- the oracle


@pytest.mark.parametrize("which", [*TRACES, "corpus"])
def test_events_equal_the_inspector(which):
    if which == "corpus":
        etdp, dbg = corpus_trace(), None
    else:
        etdp, dbg = trace(which)
    art = wb.open(etdp, data=[dbg] if dbg else None)
    assert art.format == "etdump"
    ins = inspector(etdp, dbg)
    ev = art.frames["events"]
    groups = our_groups(art)
    assert [b.name for b in ins.event_blocks] == [g[0] for g in groups]
    total = 0
    for block, (_, runs) in zip(ins.event_blocks, groups):
        theirs = Counter((e.name, tuple(int(x) for x in e.perf_data.raw))
                         for e in block.events if e.perf_data is not None)
        per_run = [ev[ev["run"] == r] for r in runs]
        ours = Counter((str(name), tuple(int(p["duration"].iloc[k]) for p in per_run))
                       for k, name in enumerate(per_run[0]["name"]))
        assert ours == theirs, block.name
        total += sum(n * len(key[1]) for key, n in theirs.items())
    assert total == len(ev)
    # every profile event of the file is a row, framework events included
    assert {"Method::init", "Program::load_method", "Method::execute"} <= set(ev["name"])
    assert set(ev.loc[ev["chain"] == -1, "kind"]) == {"framework"}


@pytest.mark.parametrize("which", TRACES)
def test_logged_values_equal_the_inspector(which):
    torch = pytest.importorskip("torch")
    etdp, dbg = trace(which)
    art = wb.open(etdp, data=[dbg])
    ins = inspector(etdp, dbg)
    dv = art.frames["debug_values"]
    checked = 0
    for block, (_, runs) in zip(ins.event_blocks, our_groups(art)):
        first = dv[(dv["run"] == runs[0])]
        for e in block.events:
            if not e.debug_data:
                continue
            rows = first[(first["instruction"] == e._instruction_id) & (first["chain"] >= 0)
                         & ~first["output"].fillna(False)]
            assert len(rows) == len(e.debug_data)
            for name, want in zip(rows["tensor"], e.debug_data):
                got = art.tensor(name)
                assert not got.flags.writeable and got.base is not None  # a view of the map
                assert torch.equal(torch.from_numpy(np.array(got)), want)
                checked += 1
        outputs = first[first["output"].fillna(False)]
        assert len(outputs) == len(block.run_output)
        for name, want in zip(outputs["tensor"], block.run_output):
            assert torch.equal(torch.from_numpy(np.array(art.tensor(name))), want)
    assert checked > 0


def test_portable_trace_facts():
    etdp, dbg = trace("mlp_portable")
    art = wb.open(etdp, data=[dbg])
    runs = art.frames["runs"]
    assert list(runs["block"]) == ["Default", "Execute", "Execute", "Execute"]
    assert list(runs["iteration"]) == [0, 0, 1, 2]
    ev = art.frames["events"]
    execute = ev[ev["run"] == 1]
    # five kernel instructions: OPERATOR_CALL around native_call_<op>
    assert (execute["kind"] == "operator_call").sum() == 5
    assert set(execute.loc[execute["kind"] == "kernel", "name"]) == {
        "native_call_permute_copy.out", "native_call_addmm.out", "native_call_relu.out"}
    assert (ev["duration"] == (ev["end"].astype("int64") - ev["start"].astype("int64"))).all()
    ten = art.tensors
    assert list(ten.columns[:7]) == ["name", "dtype", "shape", "nbytes", "storage", "file",
                                     "offset"]
    assert set(ten["storage"]) == {"debug_buffer"} and set(ten["file"]) == {str(dbg)}
    # the program output of each run: the MLP's [2, 8] result
    out = art.frames["debug_values"].query("output == True")
    assert len(out) == 3 and all(s == (2, 8) for s in out["shape"])
    x = art.tensor(out["tensor"].iloc[0])
    assert x.shape == (2, 8) and x.dtype == np.float32


def test_xnnpack_trace_kinds():
    etdp, _ = trace("mlp_xnnpack")
    ev = wb.open(etdp).frames["events"]
    ops = ev[ev["kind"] == "delegate_op"]
    assert len(ops) == 6 and ops["event_name"].isna().all()
    assert set(ops["name"]) == {"Fully Connected (NC, F32) GEMM #1",
                                "Fully Connected (NC, F32) GEMM #2"}
    assert (ops["delegate_debug_id"].astype(str) == ops["delegate_debug_id_str"]).all()
    assert (ev["kind"] == "delegate_call").sum() == 3


# ----------------------------------------------------------------------------- frames


@pytest.mark.parametrize("which", TRACES)
def test_frames_follow_the_schemas_and_fast_equals_slow(which, monkeypatch):
    etdp, dbg = trace(which)
    fast = all_frames(wb.open(etdp, data=[dbg]))
    assert set(fast) == set(FRAMES)
    for name, df in fast.items():
        declared = [c.name for c in SCHEMAS[name]]
        assert [c for c in declared if c in df.columns] == list(df.columns), name
        for c in SCHEMAS[name]:
            if c.name in df.columns and c.dtype not in ("object",):
                assert str(df[c.name].dtype) == c.dtype, (name, c.name, df[c.name].dtype)
    monkeypatch.setattr(readpath, "TIER", readpath.Tier.TABLES)
    slow = all_frames(wb.open(etdp, data=[dbg]))
    for name in FRAMES:
        pd.testing.assert_frame_equal(fast[name], slow[name], check_exact=True)


@pytest.mark.parametrize("which", [*TRACES, "corpus"])
def test_segments_cover_every_byte(which):
    if which == "corpus":
        etdp, dbg = corpus_trace(), None
    else:
        etdp, dbg = trace(which)
    art = wb.open(etdp, data=[dbg] if dbg else None)
    seg = art.segments
    for f in art.files:
        part = seg[seg["file"] == f]
        assert part["size"].sum() == os.path.getsize(f)
        ends = (part["offset"] + part["size"]).to_numpy()
        assert part["offset"].iloc[0] == 0 and (part["offset"].to_numpy()[1:] == ends[:-1]).all()
    head = seg[seg["file"] == str(etdp)]
    assert list(head["name"][:3]) == ["size prefix", "flatbuffer root", "ETDump"]
    if dbg:
        d = seg[seg["file"] == str(dbg)]
        assert (d["kind"] == "debug_value").sum() == len(art.tensors)
        assert d["kind"].iloc[-1] == "trailing"
    assert art.validate().query("severity == 'error'").empty


def test_no_debug_buffer_gives_an_empty_tensors_frame():
    etdp, _ = trace("mlp_portable")
    art = wb.open(etdp)
    assert art.tensors.empty
    assert [c.name for c in SCHEMAS["tensors"] if c.required] == list(art.tensors.columns[:7])
    dv = art.frames["debug_values"]
    assert len(dv) == 18 and dv["file"].isna().all() and dv["offset"].isna().all()
    assert dv["debug_offset"].notna().all()
    with pytest.raises(KeyError):
        art.tensor(dv["tensor"].iloc[0])


def test_debug_buffer_arguments(tmp_path):
    etdp, dbg = trace("mlp_portable")
    with pytest.raises(ValueError, match="one debug buffer"):
        wb.open(etdp, data=[dbg, dbg])
    short = tmp_path / "short.bin"
    short.write_bytes(dbg.read_bytes()[:3000])
    art = wb.open(etdp, data=[short])
    found = art.validate()
    assert "run past the end of the debug buffer" in " ".join(found["message"])
    late = art.tensors.query("offset + nbytes > 3000")["name"].iloc[0]
    with pytest.raises(wb.OutOfBoundsError, match=r"short\.bin"):
        art.tensor(late)
    seg = art.segments
    assert seg.loc[seg["file"] == str(short), "size"].sum() == 3000


# ----------------------------------------------------------------------------- synthetic traces

fb = pytest.importorskip("flatbuffers")


class Trace:
    """Builds ETDump flatbuffers with the ``flatbuffers`` package, slot by slot (the slots are
    the reader's own names; flatc's decoding of the result checks them)."""

    def __init__(self) -> None:
        self.b = fb.Builder(1024)

    def _string(self, s: str | None) -> int | None:
        return None if s is None else self.b.CreateString(s)

    def _offsets(self, offs: list[int]) -> int:
        b = self.b
        b.StartVector(4, len(offs), 4)
        for o in reversed(offs):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    def _longs(self, vals: list[int]) -> int:
        b = self.b
        b.StartVector(8, len(vals), 8)
        for v in reversed(vals):
            b.PrependInt64(v)
        return b.EndVector()

    def _table(self, fields: list[tuple[int, str, object]]) -> int:
        """fields: (slot, kind, value) with kind i8/u8/bool/i32/u32/i64/u64/f32/f64/off."""
        b = self.b
        b.StartObject(max((s for s, _, _ in fields), default=-1) + 1)
        add = {"i8": b.PrependInt8Slot, "u8": b.PrependUint8Slot, "bool": b.PrependBoolSlot,
               "i32": b.PrependInt32Slot, "u32": b.PrependUint32Slot, "i64": b.PrependInt64Slot,
               "u64": b.PrependUint64Slot, "f32": b.PrependFloat32Slot,
               "f64": b.PrependFloat64Slot}
        for slot, kind, value in fields:
            if value is None:
                continue
            if kind == "off":
                b.PrependUOffsetTRelativeSlot(slot, value, 0)
            else:
                add[kind](slot, value, None)  # default None: always written
        return b.EndObject()

    def tensor(self, code: int, sizes: list[int], strides: list[int], offset: int) -> int:
        s, st = self._longs(sizes), self._longs(strides)
        return self._table([(S.Tensor.scalar_type, "i8", code), (S.Tensor.sizes, "off", s),
                            (S.Tensor.strides, "off", st), (S.Tensor.offset, "i64", offset)])

    def wrapper(self, kind: str, value: object) -> int:
        return self._table([(S.Scalar.value, kind, value)])

    def value(self, val: int, **fields: int) -> int:
        slots = {"tensor": S.Value.tensor, "tensor_list": S.Value.tensor_list,
                 "int_value": S.Value.int_value, "float_value": S.Value.float_value,
                 "double_value": S.Value.double_value, "bool_value": S.Value.bool_value,
                 "output": S.Value.output}
        return self._table([(S.Value.val, "i8", val)]
                           + [(slots[k], "off", v) for k, v in fields.items()])

    def tensor_list(self, tensors: list[int]) -> int:
        return self._table([(S.TensorList.tensors, "off", self._offsets(tensors))])

    def profile(self, name: str | None, chain: int, instr: int, start: int, end: int,
                dd_int: int | None = None, dd_str: str | None = None,
                meta: bytes | None = None) -> int:
        n, d = self._string(name), self._string(dd_str)
        m = self.b.CreateByteVector(meta) if meta is not None else None
        return self._table([
            (S.ProfileEvent.name, "off", n), (S.ProfileEvent.chain_index, "i32", chain),
            (S.ProfileEvent.instruction_id, "i32", instr),
            (S.ProfileEvent.delegate_debug_id_int, "i32", dd_int),
            (S.ProfileEvent.delegate_debug_id_str, "off", d),
            (S.ProfileEvent.delegate_debug_metadata, "off", m),
            (S.ProfileEvent.start_time, "u64", start), (S.ProfileEvent.end_time, "u64", end)])

    def debug(self, chain: int, instr: int, value: int | None, name: str | None = None,
              dd_int: int | None = None, dd_str: str | None = None) -> int:
        n, d = self._string(name), self._string(dd_str)
        return self._table([
            (S.DebugEvent.chain_index, "u64", chain), (S.DebugEvent.instruction_id, "i32", instr),
            (S.DebugEvent.debug_entry, "off", value),
            (S.DebugEvent.delegate_debug_id_int, "i32", dd_int),
            (S.DebugEvent.delegate_debug_id_str, "off", d), (S.DebugEvent.name, "off", n)])

    def allocation(self, allocator: int, size: int) -> int:
        return self._table([(S.AllocationEvent.allocator_id, "i32", allocator),
                            (S.AllocationEvent.allocation_size, "u64", size)])

    def event(self, profile: int | None = None, allocation: int | None = None,
              debug: int | None = None) -> int:
        return self._table([(S.Event.profile_event, "off", profile),
                            (S.Event.allocation_event, "off", allocation),
                            (S.Event.debug_event, "off", debug)])

    def run(self, name: str, events: list[int], allocators: list[str] = (),
            bundled: int | None = None) -> int:
        n = self._string(name)
        allocs = [self._table([(S.Allocator.name, "off", self._string(a))]) for a in allocators]
        a = self._offsets(allocs) if allocators else None
        e = self._offsets(events)
        return self._table([(S.RunData.name, "off", n),
                            (S.RunData.bundled_input_index, "i32", bundled),
                            (S.RunData.allocators, "off", a), (S.RunData.events, "off", e)])

    def finish(self, runs: list[int], version: int = 0, prefixed: bool = True) -> bytes:
        root = self._table([(S.ETDump.version, "u32", version),
                            (S.ETDump.run_data, "off", self._offsets(runs))])
        if prefixed:
            self.b.FinishSizePrefixed(root, S.FILE_IDENTIFIER)
        else:
            self.b.Finish(root, S.FILE_IDENTIFIER)
        return bytes(self.b.Output())


def full_trace() -> tuple[bytes, bytes]:
    """A trace using every table and value type, and the debug buffer it refers to."""
    t = Trace()
    buf = np.arange(64, dtype=np.float32).tobytes() + np.arange(8, dtype=np.int64).tobytes()
    events = [
        t.event(profile=t.profile("Method::init", -1, 0, 100, 250)),
        t.event(allocation=t.allocation(1, 4096)),
        t.event(allocation=t.allocation(7, 16)),  # allocator id out of range
    ]
    run0 = t.run("Default", events, allocators=["method", "temp"])
    tl = t.tensor_list([t.tensor(6, [2, 3], [3, 1], 0), t.tensor(4, [8], [1], 256)])
    ev = [
        t.event(profile=t.profile("OPERATOR_CALL", 0, 3, 1000, 1500)),
        t.event(profile=t.profile("native_call_add.out", 0, 3, 1100, 1400, dd_str="")),
        t.event(profile=t.profile(None, 0, 4, 2000, 2100, dd_int=7, meta=b"\x01\x02\x03")),
        t.event(profile=t.profile(None, 0, 4, 4294967290, 5, dd_str="xnn op")),  # wrapped
        t.event(profile=t.profile("DELEGATE_CALL", 0, 4, 1900, 2200)),
        t.event(profile=t.profile("cüstom ✓", 2, 9, 1 << 40, 10)),  # end < start, 64 bits
        t.event(debug=t.debug(0, 3, t.value(S.Value.TENSOR, tensor=t.tensor(6, [4, 4], [4, 1], 64)),
                              name="dbg", dd_int=5)),
        t.event(debug=t.debug(0, 5, t.value(S.Value.INT, int_value=t.wrapper("i64", -42)))),
        t.event(debug=t.debug(0, 5, t.value(S.Value.BOOL, bool_value=t.wrapper("bool", True)))),
        t.event(debug=t.debug(0, 5, t.value(S.Value.FLOAT, float_value=t.wrapper("f32", 0.25)))),
        t.event(debug=t.debug(0, 5, t.value(S.Value.DOUBLE, double_value=t.wrapper("f64", 1e300)),
                              dd_str="dd")),
        t.event(debug=t.debug(0, 6, t.value(S.Value.TENSOR_LIST, tensor_list=tl))),
        t.event(debug=t.debug(0, 6, t.value(S.Value.TENSOR_LIST, tensor_list=t.tensor_list([])))),
        t.event(debug=t.debug(0, 7, t.value(S.Value.NULL))),
        t.event(debug=t.debug(0, 7, t.value(S.Value.STRING))),
        t.event(debug=t.debug((1 << 64) - 1, 0, t.value(
            S.Value.TENSOR, tensor=t.tensor(6, [1], [1], 128), output=t.wrapper("bool", True)))),
    ]
    run1 = t.run("Execute", ev, bundled=2)
    return t.finish([run0, run1]), buf


def test_full_schema_against_flatc(tmp_path, monkeypatch):
    serialize = pytest.importorskip("executorch.devtools.etdump.serialize")
    data, buf = full_trace()
    (tmp_path / "full.etdp").write_bytes(data)
    (tmp_path / "full.bin").write_bytes(buf)
    want = serialize.deserialize_from_etdump_flatcc(data)
    frames = all_frames(wb.open(tmp_path / "full.etdp", data=[tmp_path / "full.bin"]))
    monkeypatch.setattr(readpath, "TIER", readpath.Tier.TABLES)
    slow = all_frames(wb.open(tmp_path / "full.etdp", data=[tmp_path / "full.bin"]))
    for name in FRAMES:
        pd.testing.assert_frame_equal(frames[name], slow[name], check_exact=True)
    runs, ev, al, dv = (frames[k] for k in ("runs", "events", "allocations", "debug_values"))
    assert list(runs["block"]) == [r.name for r in want.run_data]
    assert list(runs["bundled_input_index"].fillna(-1)) == [
        r.bundled_input_index for r in want.run_data]
    assert runs["allocators"].iloc[0] == "; ".join(a.name for a in want.run_data[0].allocators)
    profile = [(r, i, e.profile_event) for r, rd in enumerate(want.run_data)
               for i, e in enumerate(rd.events) if e.profile_event]
    assert len(profile) == len(ev)
    for row, (r, i, p) in zip(ev.itertuples(), profile):
        assert (row.run, row.index) == (r, i)
        assert (row.chain, row.instruction) == (p.chain_index, p.instruction_id)
        assert (row.start, row.end) == (p.start_time, p.end_time)
        assert (None if pd.isna(row.event_name) else row.event_name) == p.name
        assert (-1 if pd.isna(row.delegate_debug_id_int) else row.delegate_debug_id_int) == \
            p.delegate_debug_id_int
        assert (None if pd.isna(row.delegate_debug_id_str) else row.delegate_debug_id_str) == \
            p.delegate_debug_id_str
        meta = p.delegate_debug_metadata
        assert (0 if pd.isna(row.metadata_size) else row.metadata_size) == len(meta or b"")
        if meta:
            assert data[row.metadata_offset:row.metadata_offset + row.metadata_size] == meta
    assert list(ev["duration"].fillna(-1)) == [150, 500, 300, 100, 10, 300, -1]
    assert list(ev["kind"]) == ["framework", "operator_call", "kernel", "delegate_op",
                                "delegate_op", "delegate_call", "other"]
    assert list(ev["name"].astype(object))[2:] == ["native_call_add.out", "7", "xnn op",
                                                 "DELEGATE_CALL", "cüstom ✓"]
    assert ev["delegate_debug_id_str"].iloc[2] == "" and pd.isna(ev["delegate_debug_id"].iloc[2])
    allocs = [(r, i, e.allocation_event) for r, rd in enumerate(want.run_data)
              for i, e in enumerate(rd.events) if e.allocation_event]
    assert [(a.allocator_id, a.allocation_size) for _, _, a in allocs] == \
        list(zip(al["allocator_id"], al["size"]))
    assert list(al["allocator"].astype(object).fillna("?")) == ["temp", "?"]
    debug = [(r, i, e.debug_event) for r, rd in enumerate(want.run_data)
             for i, e in enumerate(rd.events) if e.debug_event]
    rows = dv.groupby(["run", "index"], sort=False)
    assert len(rows) == len(debug)
    for (r, i, d), ((rr, ii), g) in zip(debug, rows):
        assert (rr, ii) == (r, i)
        first = g.iloc[0]
        assert first["chain"] == (d.chain_index if d.chain_index < 1 << 63
                                  else d.chain_index - (1 << 64))
        assert first["instruction"] == d.instruction_id
        v = d.debug_entry
        if v is None:
            assert pd.isna(first["type"])
            continue
        assert first["type"] == v.val
        if v.output is not None:
            assert first["output"] == v.output.bool_val
        scalar = (v.int_value and v.int_value.int_val, v.bool_value and v.bool_value.bool_val,
                  v.float_value and v.float_value.float_val,
                  v.double_value and v.double_value.double_val)
        if v.val in ("Int", "Bool", "Float", "Double"):
            assert first["value"] == scalar[("Int", "Bool", "Float", "Double").index(v.val)]
        tensors = [v.tensor] if v.val == "Tensor" else (v.tensor_list.tensors
                                                        if v.val == "TensorList" else [])
        if not tensors:
            assert len(g) == 1 and pd.isna(first["dtype"])
            continue
        assert len(g) == len(tensors)
        for (_, row), tt in zip(g.iterrows(), tensors):
            assert row["shape"] == tuple(tt.sizes) and row["strides"] == tuple(tt.strides)
            assert row["debug_offset"] == tt.offset
            assert row["dtype"] == {6: "float32", 4: "int64"}[tt.scalar_type.value]
    art = wb.open(tmp_path / "full.etdp", data=[tmp_path / "full.bin"])
    assert art.tensor("1/6").tolist() == np.arange(16, 32, dtype=np.float32).reshape(4, 4).tolist()
    assert art.tensor("1/11/0").tolist() == [[0, 1, 2], [3, 4, 5]]
    assert art.tensor("1/11/1").tolist() == list(range(8))
    assert art.tensor("1/15").tolist() == [32.0]
    assert list(dv.loc[dv["type"] == "TensorList", "list_index"].fillna(-1)) == [0, 1, -1]


def test_plain_flatbuffer_without_size_prefix(tmp_path):
    t = Trace()
    data = t.finish([t.run("Execute", [t.event(profile=t.profile("x", 0, 0, 1, 3))])],
                    prefixed=False)
    assert data[4:8] == b"ED00" and etdump.detect(data[:64])
    p = tmp_path / "plain.etdp"
    p.write_bytes(data)
    art = wb.open(p)
    assert art.info["size_prefixed"] is False
    assert list(art.frames["events"]["duration"]) == [2]
    assert art.segments["size"].sum() == len(data)


# ----------------------------------------------------------------------------- hostile traces


def opens_or_fails(path: Path, data: list | None = None) -> str:
    """Open, build every frame and read every tensor: nothing but ArtifactError may escape."""
    try:
        art = wb.open(path, data=data)
        for name in art.frames:
            art.frames[name]
        for name in art.tensors["name"]:
            art.tensor(name)
        art.validate()
        return "ok"
    except wb.ArtifactError as e:
        assert e.file in (path.name, *(Path(d).name for d in data or ())) and e.structure, str(e)
        return type(e).__name__


def fails(path: Path, cls: type, structure: str, offset: int | None = None) -> wb.ArtifactError:
    with pytest.raises(cls) as info:
        art = wb.open(path)
        for name in art.frames:
            art.frames[name]
    e = info.value
    assert e.file == path.name and structure in (e.structure or ""), str(e)
    if offset is not None:
        assert e.offset == offset, str(e)
    assert f"at 0x{e.offset:x}" in str(e)
    return e


def write(tmp_path: Path, data: bytes | bytearray, name: str = "bad.etdp") -> Path:
    p = tmp_path / name
    p.write_bytes(bytes(data))
    return p


def locate(data: bytes) -> dict[str, int]:
    """Byte positions inside a sample trace, found with the verifying reader."""
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".etdp") as f:
        f.write(data)
        f.flush()
        src = Source(f.name)
        root = FlatBuffer(src, 4, len(data), identifier=b"ED00").root("ETDump")
        out = {"run_data": root.vector(S.ETDump.run_data, 4)[0] - 4}
        run = root.tables(S.ETDump.run_data)[1]
        out["events"] = run.vector(S.RunData.events, 4)[0] - 4
        for ev in run.tables(S.RunData.events):
            d = ev.table(S.Event.debug_event)
            if d is not None and "val" not in out:
                v = d.table(S.DebugEvent.debug_entry)
                out["val"] = v.field_pos(S.Value.val, 1)
                tt = v.table(S.Value.tensor)
                out["scalar_type"] = tt.field_pos(S.Tensor.scalar_type, 1)
                out["sizes"] = tt.vector(S.Tensor.sizes, 8)[0]
        src.close()
    return out


def test_truncated_everywhere(tmp_path):
    etdp, _ = trace("mlp_portable")
    data = etdp.read_bytes()
    outcomes = Counter()
    for cut in list(range(0, 64)) + list(range(64, len(data), 97)):
        # as cut, and with the size prefix fixed to the new length (deeper failures)
        outcomes[opens_or_fails(write(tmp_path, data[:cut]))] += 1
        if cut >= 12:
            fixed = struct.pack("<I", cut - 4) + data[4:cut]
            outcomes[opens_or_fails(write(tmp_path, fixed))] += 1
    assert "ok" not in outcomes or outcomes["ok"] < 3, outcomes
    assert outcomes["TruncatedError"] > 0


def test_size_prefix_lying(tmp_path):
    etdp, _ = trace("mlp_portable")
    data = bytearray(etdp.read_bytes())
    data[0:4] = struct.pack("<I", len(data))  # four bytes more than there are
    e = fails(write(tmp_path, data), wb.TruncatedError, "size prefix", 0)
    assert "only" in e.detail
    data[0:4] = struct.pack("<I", 4)
    fails(write(tmp_path, data), wb.TruncatedError, "size prefix", 0)
    data[0:4] = struct.pack("<I", 0xFFFFFFFF)
    fails(write(tmp_path, data), wb.TruncatedError, "size prefix", 0)
    data[0:4] = struct.pack("<I", 64)  # everything after 68 is outside the flatbuffer
    assert opens_or_fails(write(tmp_path, data)) in ("OutOfBoundsError", "TruncatedError")


@pytest.mark.parametrize("fast", [True, False])
def test_huge_vectors(tmp_path, monkeypatch, fast):
    monkeypatch.setattr(readpath, "TIER", read_tier(fast))
    etdp, _ = trace("mlp_portable")
    data = etdp.read_bytes()
    where = locate(data)
    for what, structure in (("run_data", "ETDump.run_data"),
                            ("events", "ETDump.run_data[1].events"),
                            ("sizes", "sizes")):
        bad = bytearray(data)
        at = where[what] if what != "sizes" else where["sizes"] - 4
        bad[at:at + 4] = b"\xff\xff\xff\xff"
        t0 = time.perf_counter()
        tracemalloc.start()
        e = fails(write(tmp_path, bad), wb.TruncatedError, structure, at)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert "runs past the end" in e.detail
        assert time.perf_counter() - t0 < 5 * TIME_SCALE and peak < 32 << 20


@pytest.mark.parametrize("fast", [True, False])
def test_unknown_value_type_and_scalar_type(tmp_path, monkeypatch, fast):
    monkeypatch.setattr(readpath, "TIER", read_tier(fast))
    etdp, _ = trace("mlp_portable")
    data = etdp.read_bytes()
    where = locate(data)
    bad = bytearray(data)
    bad[where["val"]] = 42
    e = fails(write(tmp_path, bad), wb.CorruptError, "debug_entry", where["val"])
    assert "Value.val 42 is unknown" in e.detail
    bad = bytearray(data)
    bad[where["scalar_type"]] = 99
    e = fails(write(tmp_path, bad), wb.CorruptError, "tensor", where["scalar_type"])
    assert "scalar_type 99" in e.detail


@pytest.mark.parametrize("fast", [True, False])
def test_built_hostile_traces(tmp_path, monkeypatch, fast):
    monkeypatch.setattr(readpath, "TIER", read_tier(fast))
    t = Trace()
    both = t.event(profile=t.profile("a", 0, 0, 1, 2), debug=t.debug(0, 0, None))
    p = write(tmp_path, t.finish([t.run("Execute", [both])]))
    e = fails(p, wb.CorruptError, "events[0]")
    assert "exactly one must be" in e.detail
    t = Trace()
    p = write(tmp_path, t.finish([t.run("Execute", [t.event(
        debug=t.debug(0, 0, t.value(S.Value.TENSOR)))])]))
    assert "Value.tensor is missing" in fails(p, wb.CorruptError, "debug_entry").detail
    t = Trace()
    p = write(tmp_path, t.finish([t.run("Execute", [t.event(debug=t.debug(0, 0, t.value(
        S.Value.TENSOR, tensor=t.tensor(6, [1 << 40, 1 << 40], [], 0))))])]))
    assert "too many" in fails(p, wb.CorruptError, "tensor").detail
    t = Trace()
    p = write(tmp_path, t.finish([t.run("Execute", [t.event(debug=t.debug(0, 0, t.value(
        S.Value.TENSOR, tensor=t.tensor(6, [2, -3], [], 0))))])]))
    assert "negative size" in fails(p, wb.CorruptError, "tensor").detail
    t = Trace()
    p = write(tmp_path, t.finish([t.run("Execute", [t.event(debug=t.debug(0, 0, t.value(
        S.Value.TENSOR, tensor=t.tensor(6, [2], [1], -8))))])]))
    assert "negative" in fails(p, wb.CorruptError, "tensor").detail
    # a debug event without a value: one row, no type
    t = Trace()
    p = write(tmp_path, t.finish([t.run("Execute", [t.event(debug=t.debug(0, 8, None))])]))
    dv = wb.open(p).frames["debug_values"]
    assert len(dv) == 1 and pd.isna(dv["type"].iloc[0]) and dv["instruction"].iloc[0] == 8
    # an event with no known type set (a newer schema): counted, reported, not fatal
    t = Trace()
    p = write(tmp_path, t.finish([t.run("Execute", [t.event(), t.event(
        profile=t.profile("x", 0, 0, 1, 2))])], version=3))
    art = wb.open(p)
    assert list(art.frames["runs"]["unknown_events"]) == [1] and len(art.frames["events"]) == 1
    messages = " ".join(art.validate()["message"])
    assert "newer" in messages and "none of profile_event" in messages


def test_identifier_and_tiny_files(tmp_path):
    etdp, _ = trace("mlp_portable")
    data = bytearray(etdp.read_bytes())
    for n in range(0, 12):
        assert opens_or_fails(write(tmp_path, data[:n])) != "ok"
    assert not etdump.detect(b"\x00" * 12)
    data[8:12] = b"ED01"
    with pytest.raises(wb.UnknownFormatError):
        wb.open(write(tmp_path, data))


@pytest.mark.slow  # a fuzz loop / runtime run: seconds (the mutation runs skip it)
def test_mutations_raise_only_artifact_errors(tmp_path):
    etdp, dbg = trace("mlp_portable")
    data = etdp.read_bytes()
    rng = random.Random(16)
    outcomes = Counter()
    tracemalloc.start()
    t0 = time.perf_counter()
    for _case in range(250):
        bad = bytearray(data)
        for _ in range(rng.choice((1, 2, 4, 16))):
            at = rng.randrange(len(bad))
            bad[at] = rng.choice((0, 0xFF, rng.randrange(256), bad[at] ^ (1 << rng.randrange(8))))
        outcomes[opens_or_fails(write(tmp_path, bad), [dbg])] += 1
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 120 * TIME_SCALE and peak < 64 << 20, (elapsed, peak)
    assert outcomes["ok"] > 0 and len(outcomes) > 2, outcomes


# ----------------------------------------------------------------------------- safety


def test_reading_starts_no_process_unpickles_nothing_imports_no_torch(tmp_path):
    etdp, dbg = trace("mlp_portable")
    files = [[str(etdp), [str(dbg)]], [str(SAMPLES / "mlp_xnnpack.etdp"), None]]
    if CORPUS_ETDP.is_file():
        files.append([str(CORPUS_ETDP), None])
    script = f"""
import json, os, pickle, subprocess, sys
def refuse(*a, **k):
    raise AssertionError("forbidden call")
subprocess.Popen = subprocess.run = subprocess.call = subprocess.check_output = refuse
os.system = os.popen = os.posix_spawn = os.posix_spawnp = os.execv = os.fork = refuse
pickle.loads = pickle.load = refuse
pickle.Unpickler = refuse
import workbench as wb
for path, data in json.loads({json.dumps(json.dumps(files))}):
    art = wb.open(path, data=data)
    for name in art.frames:
        art.frames[name]
    for name in art.tensors["name"]:
        art.tensor(name)
    art.validate()
bad = [m for m in ("torch", "executorch", "flatbuffers") if m in sys.modules]
print("OK" if not bad else f"imported {{bad}}")
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "OK", res.stdout + res.stderr


def test_big_trace_fast_path_is_used(tmp_path, monkeypatch):
    """10,000 runs: the vectorised path reads them (the scalar one would take seconds)."""
    t = Trace()
    runs = []
    for r in range(2000):
        runs.append(t.run("Execute", [t.event(profile=t.profile(f"native_call_op{k}.out", 0, k,
                                                                r * 10 + k, r * 10 + k + 3))
                                      for k in range(5)]))
    p = write(tmp_path, t.finish(runs))

    def refuse(*a, **k):
        raise AssertionError("scalar path used")

    monkeypatch.setattr(etdump_reader._Slow, "read", refuse)
    art = wb.open(p)
    ev = art.frames["events"]
    assert len(ev) == 10_000 and (ev["duration"] == 3).all()
    assert list(art.frames["runs"]["iteration"][:3]) == [0, 1, 2]


def test_many_distinct_names_fast_equals_slow(tmp_path, monkeypatch):
    """Names are interned by length groups, peeling and sorting: every path gives the names
    the scalar reader gives, in the same rows."""
    t = Trace()
    names = [f"op{k:03d}" for k in range(60)] + ["é" * 3, "", "x" * 300, "OPERATOR_CALL"]
    events = [t.event(profile=t.profile(names[(k * 7) % len(names)], 0, k, k, k + 1,
                                        dd_str=names[k % 5] if k % 3 else None))
              for k in range(400)]
    p = write(tmp_path, t.finish([t.run("Execute", events), t.run("é", events[:3])]))
    with monkeypatch.context() as m:
        m.setattr(etdump_reader._Slow, "read", None)  # the fast path must not fall back
        fast = wb.open(p).frames["events"]
    monkeypatch.setattr(readpath, "TIER", readpath.Tier.TABLES)
    slow = wb.open(p).frames["events"]
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)
    assert list(fast["event_name"].astype(object)[:8]) == [names[(k * 7) % len(names)]
                                                            for k in range(8)]


def test_schema_module_matches_the_installed_fbs():
    """Every table and field of the installed schema has a slot here, in schema order."""
    import importlib.util

    pytest.importorskip("executorch.devtools")
    spec = importlib.util.find_spec("executorch.devtools.etdump")
    fbs = Path(next(iter(spec.submodule_search_locations))) / "etdump_schema_flatcc.fbs"
    if not fbs.is_file():
        pytest.skip("the installed executorch has no etdump schema")
    text = fbs.read_text()
    import re

    tables = dict(re.findall(r"table (\w+) \{([^}]*)\}", text))
    mine = {"ETDump": S.ETDump, "RunData": S.RunData, "Allocator": S.Allocator,
            "Event": S.Event, "ProfileEvent": S.ProfileEvent,
            "AllocationEvent": S.AllocationEvent, "DebugEvent": S.DebugEvent, "Value": S.Value,
            "Tensor": S.Tensor, "TensorList": S.TensorList}
    for name, cls in mine.items():
        fields = re.findall(r"^\s*(\w+)\s*:", re.sub(r"//.*", "", tables[name]), re.M)
        assert [getattr(cls, f) for f in fields] == list(range(len(fields))), name
    enum = re.search(r"enum ValueType : byte \{([^}]*)\}", text).group(1)
    assert [v.strip() for v in enum.split(",") if v.strip()] == list(S.VALUE_TYPES)
    assert json.dumps(S.FILE_IDENTIFIER.decode()) in json.dumps(
        re.search(r'file_identifier "(\w+)"', text).group(1))
