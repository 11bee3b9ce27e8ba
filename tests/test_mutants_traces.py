"""ETDump and ETRecord readers pinned column by column, branch by branch (issue #19: the
mutants of ``workbench/formats/etdump/`` and ``workbench/formats/etrecord/``).

Golden facts: ExecuTorch's own ETDump deserializer (``deserialize_from_etdump_flatcc``, flatc's
decoding of the schema) and ``parse_etrecord``; Python's ``zipfile`` and ``json`` for archives;
the verifying flatbuffer reader for table positions; and the inputs themselves, built here
(``flatbuffers`` builder via ``test_etdump.Trace``, ``struct.pack``, ``zipfile``). Both the
vectorised and the scalar ETDump path are run on every input: the fast one with the scalar
one made unavailable, so a fast-path mistake cannot hide behind the fallback.
"""

from __future__ import annotations

import json
import struct
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers import read_tier
from test_etdump import Trace, full_trace

import workbench as wb
from workbench import readpath
from workbench._vecfb import SlowPath, VecReader
from workbench.flatbuf import FlatBuffer
from workbench.formats import etdump, etrecord
from workbench.formats.etdump import columns as C
from workbench.formats.etdump import reader as R
from workbench.formats.etdump import schema as S
from workbench.formats.etrecord import columns as RC
from workbench.formats.etrecord import reader as RR
from workbench.formats.etrecord import schema as RS
from workbench.source import Source

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_models"
TRACE_FRAMES = ("segments", "tensors", "runs", "events", "allocations", "debug_values")
U64 = (1 << 64) - 1


# ----------------------------------------------------------------------------- helpers


def values(df: pd.DataFrame, col: str) -> list:
    """A column as plain Python values, ``None`` for every missing one."""
    out = []
    for v in df[col].astype(object).tolist():
        if v is None or (not isinstance(v, (tuple, list, str, bytes)) and pd.isna(v)):
            out.append(None)
        else:
            out.append(v)
    return out


def categories(df: pd.DataFrame, col: str) -> list:
    assert str(df[col].dtype) == "category", (col, df[col].dtype)
    return list(df[col].cat.categories)


def check_frame(df: pd.DataFrame, want: dict[str, tuple[str, list]]) -> None:
    """Every column of ``df`` with its dtype and values, exactly (and no other columns)."""
    assert list(df.columns) == list(want), list(df.columns)
    for col, (dtype, vals) in want.items():
        assert str(df[col].dtype) == dtype, (col, str(df[col].dtype))
        got = values(df, col)
        assert got == vals, (col, got)
        for g, w in zip(got, vals):  # True == 1 and 1.0 == 1: the types too
            assert type(g) is type(w) or (isinstance(g, (int, np.integer)) and type(w) is int
                                          and not isinstance(g, (bool, np.bool_))), (col, g, w)


def no_slow_path(monkeypatch) -> None:
    def refuse(*a, **k):
        raise AssertionError("the scalar path was used")

    monkeypatch.setattr(R._Slow, "read", refuse)


def open_trace(tmp_path: Path, data: bytes, buf: bytes | None, fast: bool, monkeypatch,
               name: str = "t.etdp") -> wb.Artifact:
    """Open ``data`` (and the debug buffer ``buf``) on one path only."""
    p = tmp_path / name
    p.write_bytes(data)
    extra = None
    if buf is not None:
        b = tmp_path / (Path(name).stem + ".bin")
        b.write_bytes(buf)
        extra = [b]
    with monkeypatch.context() as m:
        m.setattr(readpath, "TIER", read_tier(fast))
        if fast:
            no_slow_path(m)
        art = wb.open(p, data=extra)
        for f in art.frames:
            art.frames[f]
    return art


def records(path: Path, fast: bool) -> R.Records:
    src = Source(str(path))
    h = R.Header(src)
    fb = FlatBuffer(src, h.base, h.end, identifier=S.FILE_IDENTIFIER, name="ETDump")
    root = fb.root("ETDump")
    if fast:
        return R._Fast(src, fb, root).read()
    return R._Slow(src, root).read()


def fast_refuses(path: Path) -> str:
    """The SlowPath message of the vectorised reader on ``path`` (it must raise one)."""
    src = Source(str(path))
    h = R.Header(src)
    fb = FlatBuffer(src, h.base, h.end, identifier=S.FILE_IDENTIFIER, name="ETDump")
    with pytest.raises(SlowPath) as info:
        R._Fast(src, fb, fb.root("ETDump")).read()
    return str(info.value)


def slow_error(path: Path, monkeypatch, data: list | None = None) -> wb.ArtifactError:
    """The error the scalar path raises when the file is opened and its frames built."""
    with monkeypatch.context() as m:
        m.setattr(readpath, "TIER", readpath.Tier.TABLES)
        with pytest.raises(wb.ArtifactError) as info:
            art = wb.open(path, data=data)
            for f in art.frames:
                art.frames[f]
    return info.value


def undouble(structure: str | None) -> str | None:
    """``A.A.x`` -> ``A.x``: an older flatbuf named a vector of tables with its parent's path
    twice (fixed in flatbuf.py since); both spellings are accepted here."""
    if structure:
        for i, ch in enumerate(structure):
            if ch == "." and structure[i + 1:].startswith(structure[:i] + "."):
                return structure[:i] + structure[2 * i + 1:]
    return structure


def error_both(tmp_path: Path, data: bytes, monkeypatch) -> wb.ArtifactError:
    """Fast (with fallback) and slow give the same error; returned."""
    p = tmp_path / "bad.etdp"
    p.write_bytes(data)
    with monkeypatch.context() as m:
        m.setattr(readpath, "TIER", readpath.Tier.BATCHED)
        with pytest.raises(wb.ArtifactError) as fast:
            art = wb.open(p)
            for f in art.frames:
                art.frames[f]
    slow = slow_error(p, monkeypatch)
    assert (type(fast.value), undouble(fast.value.structure), fast.value.offset,
            fast.value.detail) == (type(slow), undouble(slow.structure), slow.offset, slow.detail)
    assert slow.file == p.name
    return slow


def walk(path: Path) -> dict[str, Any]:
    """Table positions of a trace, read with the verifying flatbuffer reader (the oracle for
    every ``table_offset``): runs, events per kind (in file order), tensors, metadata."""
    src = Source(str(path))
    h = R.Header(src)
    fb = FlatBuffer(src, h.base, h.end, identifier=S.FILE_IDENTIFIER, name="ETDump")
    root = fb.root("ETDump")
    out: dict[str, list] = {"runs": [], "profile": [], "alloc": [], "debug": [], "tensor": [],
                            "meta": [], "ref_slots": []}
    for rd in root.tables(S.ETDump.run_data):
        out["runs"].append(rd.pos)
        for ev in rd.tables(S.RunData.events):
            p = ev.table(S.Event.profile_event)
            a = ev.table(S.Event.allocation_event)
            d = ev.table(S.Event.debug_event)
            if p is not None:
                out["profile"].append(p.pos)
                if p.has(S.ProfileEvent.delegate_debug_metadata):
                    out["meta"].append(p.vector(S.ProfileEvent.delegate_debug_metadata, 1))
                else:
                    out["meta"].append(None)
            if a is not None:
                out["alloc"].append(a.pos)
            if d is not None:
                v = d.table(S.DebugEvent.debug_entry)
                ts = []
                if v is not None and v.i8(S.Value.val) == S.Value.TENSOR:
                    ts = [v.table(S.Value.tensor)]
                elif v is not None and v.i8(S.Value.val) == S.Value.TENSOR_LIST:
                    ts = v.table(S.Value.tensor_list).tables(S.TensorList.tensors)
                for t in ts or [None]:
                    out["debug"].append(d.pos)
                    out["tensor"].append(-1 if t is None else t.pos)
    src.close()
    return out


def flatcc(data: bytes):
    serialize = pytest.importorskip("executorch.devtools.etdump.serialize")
    return serialize.deserialize_from_etdump_flatcc(data)


def oracle_duration(start: int, end: int) -> int | None:
    """The Inspector's rule, written out: end - start, or a wrapped 32-bit timer."""
    if end >= start:
        d = end - start
    elif start <= 0xFFFFFFFF and end <= 0xFFFFFFFF:
        d = 0xFFFFFFFF - start + end
    else:
        return None
    return d if d < 1 << 63 else None


def oracle_kind(p) -> str:
    if p.delegate_debug_id_int != -1 or (p.delegate_debug_id_str or ""):
        return "delegate_op"
    if p.chain_index == -1:
        return "framework"
    name = p.name or ""
    if name == "OPERATOR_CALL":
        return "operator_call"
    if name == "DELEGATE_CALL":
        return "delegate_call"
    return "kernel" if name.startswith("native_call_") else "other"


def oracle_id(dd_int: int, dd_str: str | None) -> str | None:
    if dd_int != -1:
        return str(dd_int)
    return dd_str or None


def check_against_flatcc(art: wb.Artifact, data: bytes, path: Path) -> None:
    """Every column of runs / events / allocations / debug_values against flatc's decoding
    (and the table positions against the verifying reader)."""
    want = flatcc(data)
    pos = walk(path)
    runs, ev, al, dv = (art.frames[k] for k in ("runs", "events", "allocations", "debug_values"))
    # runs
    names = [r.name for r in want.run_data]
    assert values(runs, "run") == list(range(len(names)))
    assert values(runs, "block") == names
    assert values(runs, "iteration") == [names[:k].count(n) for k, n in enumerate(names)]
    assert values(runs, "bundled_input_index") == [
        None if r.bundled_input_index == -1 else r.bundled_input_index for r in want.run_data]
    assert values(runs, "allocators") == ["; ".join(a.name for a in r.allocators or [])
                                          for r in want.run_data]
    for col, attr in (("profile_events", "profile_event"), ("allocation_events", "allocation_event"),
                      ("debug_events", "debug_event")):
        assert values(runs, col) == [sum(getattr(e, attr) is not None for e in r.events or [])
                                     for r in want.run_data], col
    assert values(runs, "events") == [len(r.events or []) for r in want.run_data]
    assert values(runs, "table_offset") == pos["runs"]
    spans = [[e.profile_event for e in r.events or [] if e.profile_event] for r in want.run_data]
    starts = [min(p.start_time for p in s) if s else None for s in spans]
    ends = [max(p.end_time for p in s) if s else None for s in spans]
    assert values(runs, "start") == [None if s is None or s >= 1 << 63 else s for s in starts]
    assert values(runs, "end") == [None if e is None or e >= 1 << 63 else e for e in ends]
    assert values(runs, "duration") == [None if s is None else oracle_duration(s, e)
                                        for s, e in zip(starts, ends)]
    # events
    prof = [(r, i, e.profile_event) for r, rd in enumerate(want.run_data)
            for i, e in enumerate(rd.events or []) if e.profile_event]
    assert len(ev) == len(prof)
    assert values(ev, "run") == [r for r, _, _ in prof]
    assert values(ev, "block") == [names[r] for r, _, _ in prof]
    assert values(ev, "iteration") == [names[:r].count(names[r]) for r, _, _ in prof]
    assert values(ev, "index") == [i for _, i, _ in prof]
    ids = [oracle_id(p.delegate_debug_id_int, p.delegate_debug_id_str) for _, _, p in prof]
    assert values(ev, "event_name") == [p.name for _, _, p in prof]
    assert values(ev, "name") == [i if i is not None else p.name for i, (_, _, p) in zip(ids, prof)]
    assert values(ev, "kind") == [oracle_kind(p) for _, _, p in prof]
    assert values(ev, "chain") == [p.chain_index for _, _, p in prof]
    assert values(ev, "instruction") == [p.instruction_id for _, _, p in prof]
    assert values(ev, "delegate_debug_id") == ids
    assert values(ev, "delegate_debug_id_int") == [
        None if p.delegate_debug_id_int == -1 else p.delegate_debug_id_int for _, _, p in prof]
    assert values(ev, "delegate_debug_id_str") == [p.delegate_debug_id_str for _, _, p in prof]
    assert values(ev, "start") == [p.start_time for _, _, p in prof]
    assert values(ev, "end") == [p.end_time for _, _, p in prof]
    assert values(ev, "duration") == [oracle_duration(p.start_time, p.end_time) for _, _, p in prof]
    assert values(ev, "metadata_size") == [
        None if p.delegate_debug_metadata is None else len(p.delegate_debug_metadata)
        for _, _, p in prof]
    assert values(ev, "metadata_offset") == [None if m is None else m[0] for m in pos["meta"]]
    for off, size, (_, _, p) in zip(values(ev, "metadata_offset"), values(ev, "metadata_size"),
                                    prof):
        if off is not None:
            assert data[off:off + size] == bytes(p.delegate_debug_metadata)
    assert values(ev, "table_offset") == pos["profile"]
    # allocations
    allocs = [(r, i, e.allocation_event) for r, rd in enumerate(want.run_data)
              for i, e in enumerate(rd.events or []) if e.allocation_event]
    assert values(al, "run") == [r for r, _, _ in allocs]
    assert values(al, "index") == [i for _, i, _ in allocs]
    assert values(al, "allocator_id") == [a.allocator_id for _, _, a in allocs]
    assert values(al, "size") == [a.allocation_size for _, _, a in allocs]
    known = [[a.name for a in rd.allocators or []] for rd in want.run_data]
    assert values(al, "allocator") == [
        known[r][a.allocator_id] if 0 <= a.allocator_id < len(known[r]) else None
        for r, _, a in allocs]
    assert values(al, "table_offset") == pos["alloc"]
    # debug values: one row per logged value, one per tensor of a list
    rows = []
    for r, rd in enumerate(want.run_data):
        for i, e in enumerate(rd.events or []):
            d = e.debug_event
            if d is None:
                continue
            v = d.debug_entry
            ts = [(-1, v.tensor)] if v is not None and v.val == "Tensor" else \
                list(enumerate(v.tensor_list.tensors)) if v is not None and v.val == "TensorList" \
                and v.tensor_list.tensors else [(-1, None)]
            for k, t in ts:
                rows.append((r, i, d, v, k, t))
    assert values(dv, "run") == [x[0] for x in rows]
    assert values(dv, "index") == [x[1] for x in rows]
    assert values(dv, "list_index") == [None if x[4] < 0 else x[4] for x in rows]
    dids = [oracle_id(d.delegate_debug_id_int, d.delegate_debug_id_str) for _, _, d, *_ in rows]
    assert values(dv, "delegate_debug_id") == dids
    assert values(dv, "name") == [i if i is not None else d.name
                                  for i, (_, _, d, *_) in zip(dids, rows)]
    assert values(dv, "chain") == [d.chain_index - (1 << 64) if d.chain_index >= 1 << 63
                                   else d.chain_index for _, _, d, *_ in rows]
    assert values(dv, "instruction") == [d.instruction_id for _, _, d, *_ in rows]
    assert values(dv, "delegate_debug_id_int") == [
        None if d.delegate_debug_id_int == -1 else d.delegate_debug_id_int for _, _, d, *_ in rows]
    assert values(dv, "delegate_debug_id_str") == [d.delegate_debug_id_str for _, _, d, *_ in rows]
    assert values(dv, "type") == [None if v is None else v.val for _, _, _, v, _, _ in rows]
    assert values(dv, "output") == [None if v is None or v.output is None else v.output.bool_val
                                    for _, _, _, v, _, _ in rows]

    def scalar(v):
        if v is None:
            return None
        return {"Int": v.int_value and v.int_value.int_val,
                "Bool": v.bool_value and v.bool_value.bool_val,
                "Float": v.float_value and v.float_value.float_val,
                "Double": v.double_value and v.double_value.double_val}.get(v.val)

    assert values(dv, "value") == [scalar(v) for _, _, _, v, _, _ in rows]
    tensor_names = [None if t is None else f"{r}/{i}" if k < 0 else f"{r}/{i}/{k}"
                    for r, i, _, _, k, t in rows]
    assert values(dv, "tensor") == tensor_names
    dtypes = {0: "uint8", 1: "int8", 4: "int64", 6: "float32", 7: "float64", 11: "bool",
              15: "bfloat16", 29: "uint64"}
    itemsize = {0: 1, 1: 1, 4: 8, 6: 4, 7: 8, 11: 1, 15: 2, 29: 8}
    assert values(dv, "dtype") == [None if t is None else dtypes[t.scalar_type.value]
                                   for *_, t in rows]
    assert values(dv, "shape") == [None if t is None else tuple(t.sizes) for *_, t in rows]
    assert values(dv, "strides") == [None if t is None else tuple(t.strides) for *_, t in rows]
    assert values(dv, "debug_offset") == [None if t is None else t.offset for *_, t in rows]
    assert values(dv, "nbytes") == [
        None if t is None else int(np.prod(t.sizes, dtype=np.int64)) * itemsize[t.scalar_type.value]
        for *_, t in rows]
    assert values(dv, "table_offset") == pos["debug"]


# ----------------------------------------------------------------------------- the full trace

#: The frames of ``full_trace()`` (see tests/test_etdump.py), column by column, worked out
#: from the inputs it builds (positions come from the verifying reader, see ``walk``).
FULL_EVENTS = {
    "run": ("int64", [0, 1, 1, 1, 1, 1, 1]),
    "block": ("category", ["Default"] + ["Execute"] * 6),
    "iteration": ("int64", [0] * 7),
    "index": ("int64", [0, 0, 1, 2, 3, 4, 5]),
    "name": ("category", ["Method::init", "OPERATOR_CALL", "native_call_add.out", "7", "xnn op",
                          "DELEGATE_CALL", "cüstom ✓"]),
    "event_name": ("category", ["Method::init", "OPERATOR_CALL", "native_call_add.out", None,
                                None, "DELEGATE_CALL", "cüstom ✓"]),
    "kind": ("category", ["framework", "operator_call", "kernel", "delegate_op", "delegate_op",
                          "delegate_call", "other"]),
    "chain": ("int64", [-1, 0, 0, 0, 0, 0, 2]),
    "instruction": ("int64", [0, 3, 3, 4, 4, 4, 9]),
    "delegate_debug_id": ("category", [None, None, None, "7", "xnn op", None, None]),
    "delegate_debug_id_int": ("Int64", [None, None, None, 7, None, None, None]),
    "delegate_debug_id_str": ("string", [None, None, "", None, "xnn op", None, None]),
    "start": ("uint64", [100, 1000, 1100, 2000, 4294967290, 1900, 1 << 40]),
    "end": ("uint64", [250, 1500, 1400, 2100, 5, 2200, 10]),
    "duration": ("Int64", [150, 500, 300, 100, 10, 300, None]),
    "metadata_offset": ("Int64", None),  # filled from walk()
    "metadata_size": ("Int64", [None, None, None, 3, None, None, None]),
    "table_offset": ("int64", None),
}
FULL_RUNS = {
    "run": ("int64", [0, 1]),
    "block": ("category", ["Default", "Execute"]),
    "iteration": ("int64", [0, 0]),
    "bundled_input_index": ("Int64", [None, 2]),
    "events": ("int64", [3, 16]),
    "profile_events": ("int64", [1, 6]),
    "allocation_events": ("int64", [2, 0]),
    "debug_events": ("int64", [0, 10]),
    "unknown_events": ("int64", [0, 0]),
    "allocators": ("string", ["method; temp", ""]),
    "start": ("Int64", [100, 1000]),
    "end": ("Int64", [250, 2200]),
    "duration": ("Int64", [150, 1200]),
    "table_offset": ("int64", None),
}
FULL_ALLOCATIONS = {
    "run": ("int64", [0, 0]),
    "block": ("category", ["Default", "Default"]),
    "iteration": ("int64", [0, 0]),
    "index": ("int64", [1, 2]),
    "allocator_id": ("int64", [1, 7]),
    "allocator": ("string", ["temp", None]),
    "size": ("uint64", [4096, 16]),
    "table_offset": ("int64", None),
}
_NONE11 = [None] * 11


def full_debug_values(dbg: str | None) -> dict:
    attached = dbg is not None
    offsets = [64, None, None, None, None, 0, 256, None, None, None, 128]
    return {
        "run": ("int64", [1] * 11),
        "block": ("category", ["Execute"] * 11),
        "iteration": ("int64", [0] * 11),
        "index": ("int64", [6, 7, 8, 9, 10, 11, 11, 12, 13, 14, 15]),
        "list_index": ("Int64", [None, None, None, None, None, 0, 1, None, None, None, None]),
        "name": ("category", ["5", None, None, None, "dd", None, None, None, None, None, None]),
        "chain": ("int64", [0] * 10 + [-1]),
        "instruction": ("int64", [3, 5, 5, 5, 5, 6, 6, 6, 7, 7, 0]),
        "delegate_debug_id": ("category", ["5", None, None, None, "dd"] + [None] * 6),
        "delegate_debug_id_int": ("Int64", [5] + [None] * 10),
        "delegate_debug_id_str": ("string", [None, None, None, None, "dd"] + [None] * 6),
        "type": ("category", ["Tensor", "Int", "Bool", "Float", "Double", "TensorList",
                              "TensorList", "TensorList", "Null", "String", "Tensor"]),
        "output": ("boolean", [None] * 10 + [True]),
        "value": ("object", [None, -42, True, 0.25, 1e300] + [None] * 6),
        "tensor": ("string", ["1/6", None, None, None, None, "1/11/0", "1/11/1", None, None,
                              None, "1/15"]),
        "dtype": ("category", ["float32", None, None, None, None, "float32", "int64", None,
                               None, None, "float32"]),
        "shape": ("object", [(4, 4), None, None, None, None, (2, 3), (8,), None, None, None,
                             (1,)]),
        "strides": ("object", [(4, 1), None, None, None, None, (3, 1), (1,), None, None, None,
                               (1,)]),
        "nbytes": ("Int64", [64, None, None, None, None, 24, 64, None, None, None, 4]),
        "file": ("string", [dbg] * 11 if attached else _NONE11),
        "offset": ("Int64", offsets if attached else _NONE11),
        "debug_offset": ("Int64", offsets),
        "table_offset": ("int64", None),
    }


def with_positions(want: dict, **cols: list) -> dict:
    out = dict(want)
    for k, v in cols.items():
        out[k] = (want[k][0], v)
    return out


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("attached", [True, False])
def test_full_trace_every_column(tmp_path, monkeypatch, fast, attached):
    data, buf = full_trace()
    art = open_trace(tmp_path, data, buf if attached else None, fast, monkeypatch, "full.etdp")
    etdp, dbg = str(tmp_path / "full.etdp"), str(tmp_path / "full.bin")
    pos = walk(tmp_path / "full.etdp")
    assert art.format == "etdump"
    check_frame(art.frames["runs"], with_positions(FULL_RUNS, table_offset=pos["runs"]))
    check_frame(art.frames["events"], with_positions(
        FULL_EVENTS, table_offset=pos["profile"],
        metadata_offset=[None if m is None else m[0] for m in pos["meta"]]))
    assert [m is None for m in pos["meta"]] == [True, True, True, False, True, True, True]
    assert pos["meta"][3][1] == 3
    check_frame(art.frames["allocations"], with_positions(FULL_ALLOCATIONS,
                                                          table_offset=pos["alloc"]))
    check_frame(art.frames["debug_values"], with_positions(
        full_debug_values(dbg if attached else None), table_offset=pos["debug"]))
    # categories in order of first appearance
    ev = art.frames["events"]
    assert categories(ev, "kind") == ["framework", "operator_call", "kernel", "delegate_op",
                                      "delegate_call", "other"]
    assert categories(ev, "delegate_debug_id") == ["7", "xnn op"]
    assert categories(art.frames["runs"], "block") == ["Default", "Execute"]
    dv = art.frames["debug_values"]
    assert categories(dv, "type") == ["Tensor", "Int", "Bool", "Float", "Double", "TensorList",
                                      "Null", "String"]
    assert categories(dv, "dtype") == ["float32", "int64"]
    tensors = {
        "name": ("string", ["1/6", "1/11/0", "1/11/1", "1/15"]),
        "dtype": ("category", ["float32", "float32", "int64", "float32"]),
        "shape": ("object", [(4, 4), (2, 3), (8,), (1,)]),
        "nbytes": ("int64", [64, 24, 64, 4]),
        "storage": ("category", ["debug_buffer"] * 4),
        "file": ("string", [dbg] * 4),
        "offset": ("Int64", [64, 0, 256, 128]),
        "align": ("Int64", [64, None, 256, 128]),
        "strides": ("object", [(4, 1), (3, 1), (1,), (1,)]),
        "contiguous": ("boolean", [True] * 4),
    }
    if attached:
        check_frame(art.tensors, tensors)
        assert art.tensor("1/6").tolist() == np.arange(16, 32, dtype=np.float32).reshape(
            4, 4).tolist()
        assert art.tensor("1/11/1").tolist() == list(range(8))
    else:
        assert art.tensors.empty and list(art.tensors.columns) == list(tensors)
    seg = art.segments
    head = [(etdp, "size prefix", "header", 0, 4, None, None, "flatbuffer length"),
            (etdp, "flatbuffer root", "header", 4, 8, 4, None, "root offset + ED00"),
            (etdp, "ETDump", "flatbuffer", 12, len(data) - 12, 4, None, "")]
    debug_rows = [(dbg, "1/11/0", "debug_value", 0, 24, None, None, "debug_values"),
                  (dbg, "padding", "padding", 24, 40, 8, None, ""),
                  (dbg, "1/6", "debug_value", 64, 64, 64, None, "debug_values"),
                  (dbg, "1/15", "debug_value", 128, 4, 128, None, "debug_values"),
                  (dbg, "padding", "padding", 132, 124, 4, None, ""),
                  (dbg, "1/11/1", "debug_value", 256, 64, 256, None, "debug_values")]
    rows = (debug_rows if attached else []) + head
    assert list(seg.columns) == ["file", "name", "kind", "offset", "size", "align", "index",
                                 "used_by"]
    assert list(zip(*(values(seg, c) for c in seg.columns))) == rows
    info = {"version": 0, "size_prefixed": True, "flatbuffer_size": len(data) - 4, "runs": 2,
            "profile_events": 7, "allocation_events": 2, "debug_values": 11,
            "debug_buffer": dbg if attached else None}
    assert {k: art.info[k] for k in info} == info
    assert art.validate().empty
    check_against_flatcc(art, data, tmp_path / "full.etdp")


@pytest.mark.parametrize("fast", [True, False])
def test_full_trace_records(tmp_path, fast):
    """The records both readers hand the frame builders, field by field."""
    data, _ = full_trace()
    p = tmp_path / "full.etdp"
    p.write_bytes(data)
    rec = records(p, fast)
    pos = walk(p)
    r = rec.runs
    p_ = rec.profile
    assert r["name"].objects().tolist() == ["Default", "Execute"]
    assert r["bundled_input_index"].tolist() == [-1, 2]
    assert [r[k].tolist() for k in ("events", "profile", "allocation", "debug", "unknown")] == \
        [[3, 16], [1, 6], [2, 0], [0, 10], [0, 0]]
    assert r["pos"].tolist() == pos["runs"]
    assert r["allocators"].tolist() == [("method", "temp"), ()]
    for k in ("bundled_input_index", "events", "profile", "allocation", "debug", "unknown",
              "pos"):  # int64, as Records documents
        assert r[k].dtype == np.int64, k
    for k in ("run", "index", "pos", "chain", "instruction", "dd_int", "meta_off", "meta_size"):
        assert p_[k].dtype == np.int64, k
    assert p_["dd_int"].tolist() == [-1, -1, -1, 7, -1, -1, -1]
    assert p_["dd_str"].objects().tolist() == [None, None, "", None, "xnn op", None, None]
    assert p_["meta_size"].tolist() == [-1, -1, -1, 3, -1, -1, -1]
    assert p_["meta_off"].tolist() == [-1, -1, -1, pos["meta"][3][0], -1, -1, -1]
    assert p_["start"].dtype == np.uint64 and p_["end"].dtype == np.uint64
    assert p_["pos"].tolist() == pos["profile"]
    a = rec.alloc
    assert a["size"].dtype == np.uint64 and a["allocator_id"].tolist() == [1, 7]
    d = rec.debug
    assert d["vtype"].tolist() == [5, 1, 2, 3, 4, 6, 6, 6, 0, 7, 5]
    assert d["output"].tolist() == [-1] * 10 + [1]
    assert d["code"].tolist() == [6, -1, -1, -1, -1, 6, 4, -1, -1, -1, 6]
    assert d["nbytes"].tolist() == [64, -1, -1, -1, -1, 24, 64, -1, -1, -1, 4]
    assert d["offset"].tolist() == [64, -1, -1, -1, -1, 0, 256, -1, -1, -1, 128]
    assert d["list_index"].tolist() == [-1, -1, -1, -1, -1, 0, 1, -1, -1, -1, -1]
    assert d["tpos"].tolist() == pos["tensor"]
    assert d["chain"].tolist() == [0] * 10 + [-1]
    assert d["name"].objects().tolist() == ["dbg"] + [None] * 10
    assert d["dd_int"].tolist() == [5] + [-1] * 10
    assert d["dd_str"].objects().tolist() == [None] * 4 + ["dd"] + [None] * 6
    assert [type(v).__name__ for v in d["value"].tolist()] == \
        ["NoneType", "int", "bool", "float", "float"] + ["NoneType"] * 6
    for k in ("run", "index", "pos", "chain", "instruction", "dd_int", "vtype", "output",
              "list_index", "code", "offset", "nbytes", "tpos"):
        assert d[k].dtype == np.int64, k


# ----------------------------------------------------------------------------- samples


@pytest.mark.parametrize("name", ["mlp_portable", "mlp_xnnpack"])
@pytest.mark.parametrize("fast", [True, False])
def test_samples_against_flatcc(tmp_path, monkeypatch, name, fast):
    etdp, dbg = SAMPLES / f"{name}.etdp", SAMPLES / f"{name}.debug.bin"
    if not etdp.is_file() or not dbg.is_file():
        pytest.skip("no sample trace: run sample_models/make_traces.py")
    data = etdp.read_bytes()
    art = open_trace(tmp_path, data, dbg.read_bytes(), fast, monkeypatch, f"{name}.etdp")
    check_against_flatcc(art, data, tmp_path / f"{name}.etdp")
    want = flatcc(data)
    info = art.info
    assert info["runs"] == len(want.run_data) and info["version"] == want.version
    assert info["profile_events"] == len(art.frames["events"])
    assert info["debug_values"] == len(art.frames["debug_values"])
    assert info["flatbuffer_size"] == struct.unpack_from("<I", data)[0]


# ----------------------------------------------------------------------------- small traces


def one_run(events_of, name: str = "Execute", **kw) -> tuple[Trace, bytes]:
    t = Trace()
    return t, t.finish([t.run(name, events_of(t), **kw)])


@pytest.mark.parametrize("fast", [True, False])
def test_runs_blocks_iterations_and_missing_times(tmp_path, monkeypatch, fast):
    t = Trace()
    big = (1 << 63) + 5
    runs = [
        t.run("Execute", [t.event(profile=t.profile("a", 0, 0, 10, 20))], bundled=-1),
        t.run("Default", [t.event(allocation=t.allocation(0, 8))], allocators=["only"]),
        t.run("Execute", [t.event(profile=t.profile("a", 0, 0, big, big + 10))], bundled=0),
        t.run("Other", []),
        t.run("Execute", [t.event(profile=t.profile("a", 0, 0, 5, big)),
                          t.event(profile=t.profile("b", 0, 1, 1, 3))]),
        t.run("Default", [t.event(profile=t.profile("c", 0, 0, 30, 20))]),
        t.run("Edge", [t.event(profile=t.profile("e", 0, 0, (1 << 63) - 1, (1 << 63) - 1))]),
    ]
    data = t.finish(runs)
    art = open_trace(tmp_path, data, None, fast, monkeypatch)
    r = art.frames["runs"]
    assert values(r, "block") == ["Execute", "Default", "Execute", "Other", "Execute", "Default",
                                  "Edge"]
    assert categories(r, "block") == ["Execute", "Default", "Other", "Edge"]
    assert values(r, "iteration") == [0, 0, 1, 0, 2, 1, 0]
    assert values(r, "bundled_input_index") == [None, None, 0, None, None, None, None]
    assert values(r, "events") == [1, 1, 1, 0, 2, 1, 1]
    assert values(r, "profile_events") == [1, 0, 1, 0, 2, 1, 1]
    assert values(r, "allocators") == ["", "only", "", "", "", "", ""]
    top = (1 << 63) - 1  # the largest int64: still a value
    assert values(r, "start") == [10, None, None, None, 1, 30, top]
    assert values(r, "end") == [20, None, None, None, None, 20, top]
    assert values(r, "duration") == [10, None, 10, None, None, 4294967285, 0]  # > int64: missing
    ev = art.frames["events"]
    assert values(ev, "iteration") == [0, 1, 2, 2, 1, 0]
    assert values(ev, "block") == ["Execute", "Execute", "Execute", "Execute", "Default", "Edge"]
    assert values(ev, "duration") == [10, 10, None, 2, 4294967285, 0]
    assert values(ev, "kind") == ["other"] * 6
    al = art.frames["allocations"]
    assert values(al, "allocator") == ["only"] and values(al, "block") == ["Default"]
    assert values(al, "iteration") == [0]
    check_against_flatcc(art, data, tmp_path / "t.etdp")


@pytest.mark.parametrize("fast", [True, False])
def test_empty_trace_and_empty_runs(tmp_path, monkeypatch, fast):
    t = Trace()
    data = t.finish([])
    art = open_trace(tmp_path, data, None, fast, monkeypatch)
    for f in ("runs", "events", "allocations", "debug_values", "tensors"):
        assert art.frames[f].empty, f
    assert art.info["runs"] == 0 and art.info["profile_events"] == 0
    t = Trace()
    data = t.finish([t.run("Execute", []), t.run("Execute", [])])
    art = open_trace(tmp_path, data, b"\x00" * 10, fast, monkeypatch, "e.etdp")
    assert values(art.frames["runs"], "iteration") == [0, 1]
    assert values(art.frames["runs"], "duration") == [None, None]
    assert art.frames["events"].empty and art.tensors.empty
    seg = art.segments
    dbg = str(tmp_path / "e.bin")
    assert next(zip(values(seg, "file"), values(seg, "name"), values(seg, "kind"),
                    values(seg, "offset"), values(seg, "size"))) == \
        (dbg, "unused debug buffer", "trailing", 0, 10)


@pytest.mark.parametrize("fast", [True, False])
def test_event_kinds_and_delegate_ids(tmp_path, monkeypatch, fast):
    def events(t):
        return [
            t.event(profile=t.profile("OPERATOR_CALL", -1, 0, 0, 1)),           # framework
            t.event(profile=t.profile("native_call_x", 0, 0, 0, 1, dd_int=0)),  # delegate id 0
            t.event(profile=t.profile("native_call_", 0, 0, 0, 1)),             # kernel
            t.event(profile=t.profile("xnative_call_y", 0, 0, 0, 1)),           # other
            t.event(profile=t.profile("operator_call", 0, 0, 0, 1)),            # other
            t.event(profile=t.profile(None, 0, 0, 0, 1)),                        # other, no name
            t.event(profile=t.profile("DELEGATE_CALL", 0, 0, 0, 1, dd_str="")),  # empty id
            t.event(profile=t.profile("n", 0, 0, 0, 1, dd_int=3, dd_str="s")),   # int wins
            t.event(profile=t.profile("n", -1, 0, 0, 1, dd_str="s")),            # delegate first
        ]

    _, data = one_run(events)
    art = open_trace(tmp_path, data, None, fast, monkeypatch)
    ev = art.frames["events"]
    assert values(ev, "kind") == ["framework", "delegate_op", "kernel", "other", "other",
                                  "other", "delegate_call", "delegate_op", "delegate_op"]
    assert values(ev, "delegate_debug_id") == [None, "0", None, None, None, None, None, "3", "s"]
    assert values(ev, "name") == ["OPERATOR_CALL", "0", "native_call_", "xnative_call_y",
                                  "operator_call", None, "DELEGATE_CALL", "3", "s"]
    assert values(ev, "event_name") == ["OPERATOR_CALL", "native_call_x", "native_call_",
                                        "xnative_call_y", "operator_call", None, "DELEGATE_CALL",
                                        "n", "n"]
    assert values(ev, "delegate_debug_id_int") == [None, 0, None, None, None, None, None, 3,
                                                   None]
    assert values(ev, "delegate_debug_id_str") == [None] * 6 + ["", "s", "s"]
    # no event is delegated: ``name`` is the event name itself (a categorical)
    _, data = one_run(lambda t: [t.event(profile=t.profile("OPERATOR_CALL", 0, 0, 0, 1)),
                                 t.event(profile=t.profile(None, 0, 0, 0, 1))])
    ev = open_trace(tmp_path, data, None, fast, monkeypatch, "b.etdp").frames["events"]
    assert values(ev, "name") == ["OPERATOR_CALL", None]
    assert values(ev, "kind") == ["operator_call", "other"]
    assert categories(ev, "name") == ["OPERATOR_CALL"]


def test_column_helpers():
    d, miss = C.durations(np.array([5, 7, 0xFFFFFFFF, 0xFFFFFFFF, 1 << 32, 0, 0, 3, 9], np.uint64),
                          np.array([9, 7, 0, 0xFFFFFFFE, 0, U64, (1 << 63) - 1, 1 << 32, 1 << 33],
                                   np.uint64))
    assert d.dtype == np.int64 and miss.dtype == bool
    assert d.tolist() == [4, 0, 0, 0xFFFFFFFE + 0, 0, 0, (1 << 63) - 1, (1 << 32) - 3,
                          (1 << 33) - 9]
    assert miss.tolist() == [False, False, False, False, True, True, False, False, False]
    d, miss = C.durations(np.array([10], np.uint64), np.array([4], np.uint64))
    assert d.tolist() == [0xFFFFFFFF - 10 + 4] and miss.tolist() == [False]
    d, miss = C.durations(np.zeros(0, np.uint64), np.zeros(0, np.uint64))
    assert d.tolist() == [] and miss.tolist() == []
    ids = C.delegate_ids(np.array([-1, 4, -1, -1, 0]), R.Strings(np.array([0, 1, -1, 2, 0]),
                                                                 ["", "a", "b"]))
    assert ids.tolist() == [None, "4", None, "b", "0"]
    ids = C.delegate_ids(np.array([-1, -1]), R.Strings(np.array([0, 1]), ["x", "y"]))
    assert ids.tolist() == ["x", "y"]
    names = C._names(R.Strings(np.array([0, -1, 1]), ["n", "m"]), np.array([None, "7", None],
                                                                            object))
    assert names.tolist() == ["n", "7", "m"]
    assert [C._name_kind(n) for n in ("OPERATOR_CALL", "DELEGATE_CALL", "native_call_add",
                                      "native_call_", "native_call", "x", "")] == \
        ["operator_call", "delegate_call", "kernel", "kernel", "other", "other", "other"]
    assert C._strides((2, 3), ()) == (None, True)
    assert C._strides((), ()) == ((), True)
    assert C._strides((2, 3), (3, 1)) == ((3, 1), True)
    assert C._strides((2, 3), (1, 2)) == ((1, 2), False)
    assert C._strides((4, 2, 3), (6, 3, 1)) == ((6, 3, 1), True)
    assert C._strides((4, 2, 3), (6, 1, 2)) == ((6, 1, 2), False)
    assert C._strides((5,), (2,)) == ((2,), False)
    assert C._strides((), (1,)) == ((1,), False)


def test_strings_record():
    s = R.Strings.of(["b", None, "a", "b", ""])
    assert s.codes.tolist() == [0, -1, 1, 0, 2] and s.values == ["b", "a", ""]
    assert s.codes.dtype == np.int64
    assert s.objects().tolist() == ["b", None, "a", "b", ""]
    assert s.take(np.array([4, 1, 0])).objects().tolist() == ["", None, "b"]
    assert s.take(np.array([4, 1])).values is s.values
    e = R.Strings.of([])
    assert e.codes.tolist() == [] and e.values == [] and e.objects().tolist() == []
    assert R._elements(np.array([10, 100, 50]), np.array([2, 0, 3]), 4).tolist() == \
        [10, 14, 50, 54, 58]
    assert R._elements(np.array([7]), np.array([0]), 8).tolist() == []
    owner, k = R._owner(np.array([2, 0, 3]))
    assert owner.tolist() == [0, 0, 2, 2, 2] and k.tolist() == [0, 1, 0, 1, 2]
    assert R._signed64(U64) == -1 and R._signed64(1 << 63) == -(1 << 63)
    assert R._signed64((1 << 63) - 1) == (1 << 63) - 1 and R._signed64(0) == 0


# ----------------------------------------------------------------------------- names (intern)


def names_trace(names: list[str | None], dd: list[str | None] | None = None) -> bytes:
    t = Trace()
    evs = [t.event(profile=t.profile(n, 0, k, k, k + 1,
                                     dd_str=None if dd is None else dd[k % len(dd)]))
           for k, n in enumerate(names)]
    return t.finish([t.run("Execute", evs)])


@pytest.mark.parametrize("case", ["few", "many_distinct", "many_lengths", "long", "chunked",
                                  "words", "none"])
def test_interned_names_equal_the_scalar_path(tmp_path, monkeypatch, case):
    if case == "few":
        names = ["ab", "cd", "ab", None, "", "ab", "é", "cd"]
    elif case == "many_distinct":  # more distinct values of one length than peels
        names = [f"op{(k * 7) % 40:02d}" for k in range(120)]
    elif case == "many_lengths":  # more than 32 distinct lengths
        names = ["x" * (k % 45 + 1) for k in range(90)] + ["y" * 3]
    elif case == "long":  # a length past 65535: the sorting grouping
        names = ["z" * 70000, "a", "z" * 70000, "b" * 70001, "a"]
    elif case == "chunked":  # the byte matrices are made in chunks
        monkeypatch.setattr(R, "_INTERN_CHUNK", 16)
        names = [f"n{k % 5}xy" for k in range(50)] + [f"m{k % 30:02d}" for k in range(60)]
    elif case == "words":  # lengths that are multiples of 8 (no padding) and not
        names = ["abcdefgh", "abcdefgi", "abcdefgh" * 2, "abcdefg", "abcdefgh"] * 5
    else:
        names = [None, None]
    data = names_trace(names, dd=[None, "d1", "d2", ""])
    p = tmp_path / "names.etdp"
    p.write_bytes(data)
    fast, slow = records(p, True), records(p, False)
    assert fast.profile["name"].objects().tolist() == names
    assert slow.profile["name"].objects().tolist() == names
    assert fast.profile["dd_str"].objects().tolist() == slow.profile["dd_str"].objects().tolist()
    codes = fast.profile["name"].codes
    vals = fast.profile["name"].values
    assert len(vals) == len(set(vals)) == len({n for n in names if n is not None})
    assert codes.dtype == np.int64 and ((codes == -1) == [n is None for n in names]).all()
    art = open_trace(tmp_path, data, None, True, monkeypatch)
    assert values(art.frames["events"], "event_name") == names


def patched_name(data: bytes, name: str, at: int, byte: int) -> bytes:
    k = data.index(name.encode())
    bad = bytearray(data)
    bad[k + at] = byte
    return bytes(bad)


def test_bad_strings(tmp_path, monkeypatch):
    data = names_trace(["abcdef", "qq"])
    # the terminating NUL replaced: the fast path refuses, the scalar one names the string
    bad = patched_name(data, "abcdef", 6, ord("x"))
    p = tmp_path / "bad.etdp"
    p.write_bytes(bad)
    assert fast_refuses(p) == "string is not NUL-terminated"
    e = error_both(tmp_path, bad, monkeypatch)
    assert isinstance(e, wb.CorruptError) and e.detail == "string is not NUL-terminated"
    assert e.structure.endswith("events[0].profile_event.name")
    assert e.offset == data.index(b"abcdef") - 4
    # a NUL inside: the fast path refuses, the scalar one keeps the name
    bad = patched_name(data, "abcdef", 2, 0)
    p.write_bytes(bad)
    assert fast_refuses(p) == "string holds a NUL"
    with monkeypatch.context() as m:
        m.setattr(readpath, "TIER", readpath.Tier.BATCHED)
        assert values(wb.open(p).frames["events"], "event_name") == ["ab\x00def", "qq"]
    # bad UTF-8
    bad = patched_name(data, "abcdef", 1, 0xFF)
    p.write_bytes(bad)
    assert fast_refuses(p) == "string is not valid UTF-8"
    e = error_both(tmp_path, bad, monkeypatch)
    assert isinstance(e, wb.CorruptError)
    assert e.detail == "string is not valid UTF-8 (invalid start byte)"
    assert e.offset == data.index(b"abcdef") + 1


def test_intern_directly(tmp_path):
    data = names_trace(["aa", "bbb", "aa"])
    p = tmp_path / "n.etdp"
    p.write_bytes(data)
    src = Source(str(p))
    fb = FlatBuffer(src, 4, len(data), identifier=S.FILE_IDENTIFIER)
    vec = VecReader(fb)
    pos = walk(p)["profile"]
    refs = [fb.deref(fb.root("ETDump").fb.table_at(q, "p", 0).field_pos(S.ProfileEvent.name, 4),
                     "n") for q in pos]
    s = R.intern(vec, np.array([refs[0], 0, refs[1], refs[2], 0]))
    assert s.objects().tolist() == ["aa", None, "bbb", "aa", None]
    assert s.codes[1] == -1 and s.codes[4] == -1 and s.codes[0] == s.codes[3]
    empty = R.intern(vec, np.zeros(3, np.int64))
    assert empty.codes.tolist() == [-1, -1, -1] and empty.values == []
    none = R.intern(vec, np.zeros(0, np.int64))
    assert none.codes.tolist() == [] and none.values == []
    table: dict[bytes, int] = {b"zz": 0}
    mat = np.frombuffer(b"abcabdabcabc", np.uint8).reshape(4, 3)
    assert R._distinct(mat, table).tolist() == [1, 2, 1, 1]
    assert list(table) == [b"zz", b"abc", b"abd"]
    table = {}
    mat = np.frombuffer(bytes(range(65, 65 + 20)) * 2, np.uint8).reshape(40, 1)
    got = R._distinct(mat, table)  # 20 distinct values: 16 peeled, the rest sorted
    assert [bytes([65 + c]) for c in range(20)] == sorted(table)
    assert [list(table)[c] for c in got.tolist()] == [bytes([65 + k % 20]) for k in range(40)]
    groups = list(R._by_length(np.array([3, 1, 3, 0])))
    assert [(n, rows.tolist()) for n, rows in groups] == [(0, [3]), (1, [1]), (3, [0, 2])]
    groups = list(R._by_length(np.array([70000, 2, 70000])))
    assert [(n, rows.tolist()) for n, rows in groups] == [(2, [1]), (70000, [0, 2])]
    many = np.array([k % 40 for k in range(80)])
    groups = list(R._by_length(many))
    assert [n for n, _ in groups] == list(range(40))
    assert all(rows.tolist() == [n, n + 40] for n, rows in groups)
    src.close()


# ----------------------------------------------------------------------------- logged values


def tensor_trace(specs: list[tuple[int, list[int], list[int], int]], lists: bool = False
                 ) -> bytes:
    t = Trace()
    evs = []
    for k, (code, sizes, strides, off) in enumerate(specs):
        tt = t.tensor(code, sizes, strides, off)
        if lists:
            v = t.value(S.Value.TENSOR_LIST, tensor_list=t.tensor_list([tt]))
        else:
            v = t.value(S.Value.TENSOR, tensor=tt)
        evs.append(t.event(debug=t.debug(0, k, v)))
    return t.finish([t.run("Execute", evs)])


@pytest.mark.parametrize("fast", [True, False])
def test_debug_buffer_segments_and_tensors(tmp_path, monkeypatch, fast):
    specs = [(6, [4], [1], 16),       # 0: [16, 32)
             (6, [2], [1], 20),       # 1: [20, 28) inside 0
             (0, [0], [1], 40),       # 2: empty: no segment
             (6, [2, 3], [], 48),     # 3: [48, 72), no strides stored
             (6, [2, 3], [1, 2], 64),  # 4: [64, 88), overlaps 3, column-major
             (4, [], [], 96),         # 5: a scalar int64 [96, 104)
             (6, [100], [1], 100),    # 6: past the end of the buffer
             (7, [1], [1], 32)]       # 7: [32, 40) right after 0: a group of its own
    data = tensor_trace(specs)
    buf = bytes(range(120))
    art = open_trace(tmp_path, data, buf, fast, monkeypatch)
    dbg = str(tmp_path / "t.bin")
    seg = art.segments[art.segments["file"] == dbg]
    assert list(zip(values(seg, "name"), values(seg, "kind"), values(seg, "offset"),
                    values(seg, "size"), values(seg, "used_by"))) == [
        ("padding", "padding", 0, 16, ""),
        ("0/0 (+1 more)", "debug_value", 16, 16, "debug_values"),
        ("0/7", "debug_value", 32, 8, "debug_values"),
        ("padding", "padding", 40, 8, ""),
        ("0/3 (+1 more)", "debug_value", 48, 40, "debug_values"),
        ("padding", "padding", 88, 8, ""),
        ("0/5", "debug_value", 96, 8, "debug_values"),
        ("unused debug buffer", "trailing", 104, 16, ""),
    ]
    assert values(seg, "index") == [None] * 8
    ten = art.tensors
    assert values(ten, "name") == [f"0/{k}" for k in range(8)]
    assert values(ten, "dtype") == ["float32", "float32", "uint8", "float32", "float32", "int64",
                                    "float32", "float64"]
    assert values(ten, "shape") == [(4,), (2,), (0,), (2, 3), (2, 3), (), (100,), (1,)]
    assert values(ten, "nbytes") == [16, 8, 0, 24, 24, 8, 400, 8]
    assert values(ten, "offset") == [16, 20, 40, 48, 64, 96, 100, 32]
    assert values(ten, "align") == [16, 4, 8, 16, 64, 32, 4, 32]
    assert values(ten, "strides") == [(1,), (1,), (1,), None, (1, 2), (), (1,), (1,)]
    assert values(ten, "contiguous") == [True, True, True, True, False, True, True, True]
    assert str(ten["contiguous"].dtype) == "boolean"
    assert art.tensor("0/3").tolist() == np.frombuffer(buf, np.float32, 6, 48).reshape(
        2, 3).tolist()
    assert art.tensor("0/4").tolist() == np.frombuffer(buf, np.float32, 6, 64).reshape(
        3, 2).T.tolist()
    dv = art.frames["debug_values"]
    assert values(dv, "nbytes") == [16, 8, 0, 24, 24, 8, 400, 8]
    assert values(dv, "dtype") == values(ten, "dtype")
    assert categories(dv, "dtype") == ["float32", "uint8", "int64", "float64"]
    # the one past the end: an error finding naming the first such value
    found = art.validate()
    errors = found[found["message"].str.contains("logged tensors run past the end")]
    assert len(errors) == 1
    row = errors.iloc[0]
    assert row["severity"] == "error" and row["structure"] == "debug value 0/6"
    assert row["offset"] == 100
    assert row["message"] == ("1 logged tensors run past the end of the debug buffer t.bin "
                              "(size 0x78): wrong file?")
    with pytest.raises(wb.OutOfBoundsError):
        art.tensor("0/6")


@pytest.mark.parametrize("fast", [True, False])
def test_past_the_end_findings(tmp_path, monkeypatch, fast):
    # two past the end (the first one named), one ending exactly at the end (fine)
    data = tensor_trace([(6, [2], [1], 0), (6, [4], [1], 8), (0, [3], [1], 23), (0, [9], [1], 20)],
                        lists=True)
    art = open_trace(tmp_path, data, bytes(24), fast, monkeypatch)
    found = [f for f in art._parsed.findings if "past the end" in f.message]
    assert [f.as_dict() for f in found] == [{"severity": "error", "structure": "debug value 0/2",
                                             "offset": 23,
                      "message": "2 logged tensors run past the end of the debug buffer t.bin "
                                 "(size 0x18): wrong file?"}]
    seg = art.segments[art.segments["file"] == str(tmp_path / "t.bin")]
    assert list(zip(values(seg, "name"), values(seg, "offset"), values(seg, "size"))) == [
        ("0/0/0", 0, 8), ("0/1/0", 8, 16)]
    art = open_trace(tmp_path, data, bytes(29), fast, monkeypatch, "ok.etdp")
    assert not [f for f in art._parsed.findings if "past the end" in f.message]
    art = open_trace(tmp_path, data, None, fast, monkeypatch, "none.etdp")
    assert art._parsed.findings == []


@pytest.mark.parametrize("fast", [True, False])
def test_tensor_defaults_and_bounds(tmp_path, monkeypatch, fast):
    t = Trace()
    bare = t._table([])  # a Tensor with no field: uint8, shape (), offset 0
    limit = R.MAX_TENSOR_BYTES // 16
    evs = [t.event(debug=t.debug(0, 0, t.value(S.Value.TENSOR, tensor=bare))),
           t.event(debug=t.debug(0, 1, t.value(S.Value.TENSOR, tensor=t.tensor(
               0, [limit - 1], [1], 0)))),
           t.event(debug=t.debug(0, 2, t.value(S.Value.TENSOR, tensor=t.tensor(
               29, [2, 0, 5], [], 0)))),
           t.event(debug=t.debug(0, 3, t.value(S.Value.TENSOR, tensor=t.tensor(
               15, [3], [1], 0))))]
    data = t.finish([t.run("Execute", evs)])
    art = open_trace(tmp_path, data, None, fast, monkeypatch)
    dv = art.frames["debug_values"]
    assert values(dv, "dtype") == ["uint8", "uint8", "uint64", "bfloat16"]
    assert values(dv, "shape") == [(), (limit - 1,), (2, 0, 5), (3,)]
    assert values(dv, "strides") == [(), (1,), (), (1,)]
    assert values(dv, "nbytes") == [1, limit - 1, 0, 6]
    assert values(dv, "debug_offset") == [0, 0, 0, 0]
    assert values(dv, "offset") == [None] * 4 and values(dv, "file") == [None] * 4
    assert values(dv, "tensor") == ["0/0", "0/1", "0/2", "0/3"]


# ----------------------------------------------------------------------------- hostile traces


def value_trace(build) -> bytes:
    t = Trace()
    return t.finish([t.run("Execute", [t.event(profile=t.profile("p", 0, 0, 1, 2)),
                                       t.event(debug=t.debug(0, 4, build(t)))])])


def debug_entry_pos(path: Path) -> tuple[int, int]:
    """(Value table position, position of its ``val`` field) of the first debug event."""
    src = Source(str(path))
    fb = FlatBuffer(src, 4, src.size, identifier=S.FILE_IDENTIFIER)
    for ev in fb.root("ETDump").tables(S.ETDump.run_data)[0].tables(S.RunData.events):
        d = ev.table(S.Event.debug_event)
        if d is not None:
            v = d.table(S.DebugEvent.debug_entry)
            out = v.pos, v.field_pos(S.Value.val, 1)
            src.close()
            return out
    raise AssertionError("no debug event")


MISSING = [(S.Value.INT, "Int", "int_value"), (S.Value.BOOL, "Bool", "bool_value"),
           (S.Value.FLOAT, "Float", "float_value"), (S.Value.DOUBLE, "Double", "double_value"),
           (S.Value.TENSOR, "Tensor", "tensor"), (S.Value.TENSOR_LIST, "TensorList",
                                                  "tensor_list")]


@pytest.mark.parametrize("code,label,field", MISSING)
def test_value_type_without_its_value(tmp_path, monkeypatch, code, label, field):
    data = value_trace(lambda t: t.value(code))
    p = tmp_path / "bad.etdp"
    p.write_bytes(data)
    assert fast_refuses(p) == "value type without its value"
    e = error_both(tmp_path, data, monkeypatch)
    vpos, _ = debug_entry_pos(p)
    assert type(e) is wb.CorruptError
    assert e.detail == f"Value.val is {label} but Value.{field} is missing"
    assert e.structure == "ETDump.run_data[0].events[1].debug_event.debug_entry"
    assert e.offset == vpos
    assert str(e) == f"bad.etdp: {e.structure} at 0x{vpos:x}: {e.detail}"


@pytest.mark.parametrize("val", [8, 42, -1, -128])
def test_unknown_value_type(tmp_path, monkeypatch, val):
    data = value_trace(lambda t: t.value(val))
    p = tmp_path / "bad.etdp"
    p.write_bytes(data)
    assert fast_refuses(p) == "unknown value type"
    e = error_both(tmp_path, data, monkeypatch)
    _, at = debug_entry_pos(p)
    assert type(e) is wb.CorruptError
    assert e.detail == f"Value.val {val} is unknown (known: 0..7)"
    assert e.structure == "ETDump.run_data[0].events[1].debug_event.debug_entry"
    assert e.offset == at


def tensor_value(code, sizes, strides, off):
    return lambda t: t.value(S.Value.TENSOR, tensor=t.tensor(code, sizes, strides, off))


def tensor_pos(path: Path) -> Any:
    src = Source(str(path))
    fb = FlatBuffer(src, 4, src.size, identifier=S.FILE_IDENTIFIER)
    ev = fb.root("ETDump").tables(S.ETDump.run_data)[0].tables(S.RunData.events)[1]
    tt = ev.table(S.Event.debug_event).table(S.DebugEvent.debug_entry).table(S.Value.tensor)
    out = tt.pos, tt.field_pos(S.Tensor.scalar_type, 1), tt.field_pos(S.Tensor.offset, 8)
    src.close()
    return out


TENSOR_CASES = [
    ("code99", (99, [2], [1], 0), "unknown scalar type", "scalar_type 99 is unknown", "type"),
    ("code30", (30, [2], [1], 0), "unknown scalar type", "scalar_type 30 is unknown", "type"),
    ("code-1", (-1, [2], [1], 0), "unknown scalar type", "scalar_type -1 is unknown", "type"),
    ("negative", (6, [2, -3], [], 0), "negative size", "negative size in [2, -3]", "table"),
    ("huge", (0, [R.MAX_TENSOR_BYTES // 16], [1], 0), "huge tensor",
     f"sizes [{R.MAX_TENSOR_BYTES // 16}] make {R.MAX_TENSOR_BYTES // 16} elements: too many",
     "table"),
    ("huge2", (0, [1 << 40, 1 << 40], [], 0), "huge tensor",
     f"sizes [{1 << 40}, {1 << 40}] make {1 << 80} elements: too many", "table"),
    ("offset", (6, [2], [1], -8), "negative offset",
     "offset -8 in the debug buffer is negative", "offset"),
]


@pytest.mark.parametrize("case", TENSOR_CASES, ids=[c[0] for c in TENSOR_CASES])
def test_bad_tensors(tmp_path, monkeypatch, case):
    _, spec, fast_msg, detail, where = case
    data = value_trace(tensor_value(*spec))
    p = tmp_path / "bad.etdp"
    p.write_bytes(data)
    assert fast_refuses(p) == fast_msg
    e = error_both(tmp_path, data, monkeypatch)
    tpos, type_at, off_at = tensor_pos(p)
    assert type(e) is wb.CorruptError
    assert e.detail == detail
    assert e.structure == "ETDump.run_data[0].events[1].debug_event.debug_entry.tensor"
    assert e.offset == {"type": type_at, "table": tpos, "offset": off_at}[where]


def test_negative_tensor_offset_in_the_last_bytes_of_the_flatbuffer(tmp_path, monkeypatch):
    """A negative debug-buffer offset stored in the last 8 bytes of the flatbuffer (the
    tensor table's trailing field) is a CorruptError at that field, on both paths."""
    t = Trace()
    tensor = t._table([(S.Tensor.offset, "i64", -8), (S.Tensor.scalar_type, "i8", 6)])
    data = t.finish([t.run("Execute", [
        t.event(profile=t.profile("p", 0, 0, 1, 2)),
        t.event(debug=t.debug(0, 4, t.value(S.Value.TENSOR, tensor=tensor)))])])
    p = tmp_path / "bad.etdp"
    p.write_bytes(data)
    _, _, off_at = tensor_pos(p)
    assert off_at + 8 == len(data)  # the field ends the table, the table ends the buffer
    assert fast_refuses(p) == "negative offset"
    e = error_both(tmp_path, data, monkeypatch)
    assert (type(e), e.structure, e.offset, e.detail) == (
        wb.CorruptError, "ETDump.run_data[0].events[1].debug_event.debug_entry.tensor", off_at,
        "offset -8 in the debug buffer is negative")


def test_bad_tensor_in_a_list(tmp_path, monkeypatch):
    data = value_trace(lambda t: t.value(S.Value.TENSOR_LIST, tensor_list=t.tensor_list(
        [t.tensor(6, [1], [1], 0), t.tensor(6, [-2], [1], 0)])))
    e = error_both(tmp_path, data, monkeypatch)
    assert e.detail == "negative size in [-2]"
    assert e.structure.startswith("ETDump.run_data[0].events[1].debug_event.debug_entry."
                                  "tensor_list.")
    assert e.structure.endswith(".tensors[1]")


@pytest.mark.parametrize("n", [2, 3])
def test_event_with_more_than_one_type(tmp_path, monkeypatch, n):
    t = Trace()
    kw = {"profile": t.profile("a", 0, 0, 1, 2), "allocation": t.allocation(0, 1)}
    if n == 3:
        kw["debug"] = t.debug(0, 0, None)
    good = t.event(profile=t.profile("g", 0, 0, 1, 2))
    data = t.finish([t.run("Default", [good]), t.run("Execute", [good, t.event(**kw)])])
    p = tmp_path / "bad.etdp"
    p.write_bytes(data)
    assert fast_refuses(p) == "event with more than one type"
    e = error_both(tmp_path, data, monkeypatch)
    src = Source(str(p))
    fb = FlatBuffer(src, 4, src.size, identifier=S.FILE_IDENTIFIER)
    ev = fb.root("ETDump").tables(S.ETDump.run_data)[1].tables(S.RunData.events)[1]
    assert type(e) is wb.CorruptError and e.offset == ev.pos
    assert e.structure.endswith("events[1]") and e.structure.startswith("ETDump.run_data[1].")
    assert e.detail == (f"{n} of profile_event, allocation_event and debug_event are set "
                        "(exactly one must be)")
    src.close()


@pytest.mark.parametrize("fast", [True, False])
def test_unknown_events_and_newer_version(tmp_path, monkeypatch, fast):
    t = Trace()
    data = t.finish([t.run("Default", [t.event()]),
                     t.run("Execute", [t.event(), t.event(allocation=t.allocation(0, 3)),
                                       t.event()])], version=1)
    art = open_trace(tmp_path, data, None, fast, monkeypatch)
    assert values(art.frames["runs"], "unknown_events") == [1, 2]
    assert values(art.frames["runs"], "events") == [1, 3]
    assert values(art.frames["allocations"], "index") == [1]
    assert art.info["version"] == 1
    assert [x.as_dict() for x in art._parsed.findings] == [
        {"severity": "warning", "structure": "ETDump.version", "offset": 4,
         "message": "schema version 1 is newer than the known version 0; fields may be misread"},
        {"severity": "warning", "structure": "ETDump.run_data[].events", "offset": None,
         "message": "3 events have none of profile_event, allocation_event, debug_event set "
                    "(a newer event type?): not listed"}]
    plain = Trace()
    data = plain.finish([plain.run("Execute", [plain.event()])], prefixed=False, version=2)
    art = open_trace(tmp_path, data, None, fast, monkeypatch, "plain.etdp")
    assert art._parsed.findings[0].offset == 0
    assert art._parsed.findings[0].message.startswith("schema version 2 is newer")


def test_every_reference_pointing_outside(tmp_path, monkeypatch):
    """Each offset field of the full trace pointed past the end, one at a time: both paths
    raise the flatbuffer reader's error for the field, named by the schema."""
    data, _ = full_trace()
    p = tmp_path / "full.etdp"
    p.write_bytes(data)
    src = Source(str(p))
    fb = FlatBuffer(src, 4, len(data), identifier=S.FILE_IDENTIFIER)
    slots: list[tuple[int, str, str]] = []
    fields = {"RunData": {S.RunData.name: "name", S.RunData.allocators: "allocators",
                          S.RunData.events: "events"},
              "Allocator": {S.Allocator.name: "name"},
              "Event": {S.Event.profile_event: "profile_event",
                        S.Event.allocation_event: "allocation_event",
                        S.Event.debug_event: "debug_event"},
              "ProfileEvent": {S.ProfileEvent.name: "name",
                               S.ProfileEvent.delegate_debug_id_str: "delegate_debug_id_str",
                               S.ProfileEvent.delegate_debug_metadata: "delegate_debug_metadata"},
              "DebugEvent": {S.DebugEvent.debug_entry: "debug_entry",
                             S.DebugEvent.delegate_debug_id_str: "delegate_debug_id_str",
                             S.DebugEvent.name: "name"},
              "Value": {S.Value.tensor: "tensor", S.Value.tensor_list: "tensor_list",
                        S.Value.int_value: "int_value", S.Value.float_value: "float_value",
                        S.Value.double_value: "double_value", S.Value.bool_value: "bool_value",
                        S.Value.output: "output"},
              "Tensor": {S.Tensor.sizes: "sizes", S.Tensor.strides: "strides"},
              "TensorList": {S.TensorList.tensors: "tensors"}}

    def visit(t, kind: str, path: str) -> None:
        for slot, name in fields[kind].items():
            at = t.field_pos(slot, 4)
            if at:
                slots.append((at, f"{path}.{name}", name))
        if kind == "RunData":
            for k, a in enumerate(t.tables(S.RunData.allocators)):
                visit(a, "Allocator", f"{path}.allocators[{k}]")
            for k, e in enumerate(t.tables(S.RunData.events)):
                visit(e, "Event", f"{path}.events[{k}]")
        elif kind == "Event":
            for slot, sub, name in ((S.Event.profile_event, "ProfileEvent", "profile_event"),
                                    (S.Event.debug_event, "DebugEvent", "debug_event")):
                x = t.table(slot)
                if x is not None:
                    visit(x, sub, f"{path}.{name}")
        elif kind == "DebugEvent":
            v = t.table(S.DebugEvent.debug_entry)
            if v is not None:
                visit(v, "Value", f"{path}.debug_entry")
        elif kind == "Value":
            x = t.table(S.Value.tensor)
            if x is not None:
                visit(x, "Tensor", f"{path}.tensor")
            x = t.table(S.Value.tensor_list)
            if x is not None:
                visit(x, "TensorList", f"{path}.tensor_list")
                for k, tt in enumerate(x.tables(S.TensorList.tensors)):
                    visit(tt, "Tensor", f"{path}.tensor_list.tensors[{k}]")

    root = fb.root("ETDump")
    slots.append((root.field_pos(S.ETDump.run_data, 4), "ETDump.run_data", "run_data"))
    for k, rd in enumerate(root.tables(S.ETDump.run_data)):
        visit(rd, "RunData", f"ETDump.run_data[{k}]")
    src.close()
    assert len(slots) == 66
    far = 0x7FFFFFF0
    for at, path, _name in slots:
        bad = bytearray(data)
        bad[at:at + 4] = struct.pack("<I", far)
        e = error_both(tmp_path, bytes(bad), monkeypatch)
        assert type(e) is wb.OutOfBoundsError, (path, e)
        assert e.offset == at + far, path
        assert e.detail == f"points outside the ETDump flatbuffer [0x4, 0x{len(data):x}) (length 4)"
        assert undouble(e.structure) == path, (path, e.structure)


# ----------------------------------------------------------------------------- header, detect, read


def test_header_and_detect(tmp_path, monkeypatch):
    good = Trace()
    data = good.finish([good.run("Execute", [])])
    n = len(data) - 4
    assert etdump.detect(data[:64]) and etdump.detect(data[:12])
    assert etdump.detect(b"\x00" * 4 + b"ED00") and etdump.detect(b"\x00" * 8 + b"ED00")
    assert not etdump.detect(b"\x00" * 8 + b"ED0") and not etdump.detect(b"ED00" * 1)
    assert not etdump.detect(b"\x00" * 3 + b"ED00")
    cases = [
        (b"\x00" * 7, wb.TruncatedError, "file header", 0,
         "7 bytes is too short for an ETDump (needs 12)"),
        (b"", wb.TruncatedError, "file header", 0, "0 bytes is too short for an ETDump (needs 12)"),
        (struct.pack("<I", 7) + data[4:], wb.TruncatedError, "size prefix", 0,
         "size prefix 7 is too small for a flatbuffer (needs 8)"),
        (struct.pack("<I", n + 1) + data[4:], wb.TruncatedError, "size prefix", 0,
         f"size prefix says the flatbuffer has {n + 1} bytes, but only {n} follow it"),
        (data[:8] + b"XD00" + data[12:], wb.CorruptError, "file identifier", 8,
         "file identifier b'XD00' is not b'ED00' (neither at byte 8 after a size prefix nor at "
         "byte 4)"),
    ]
    for raw, cls, structure, offset, detail in cases:
        p = tmp_path / "h.etdp"
        p.write_bytes(raw)
        src = Source(str(p))
        with pytest.raises(wb.ArtifactError) as info:
            R.Header(src)
        e = info.value
        assert (type(e), e.structure, e.offset, e.detail, e.file) == \
            (cls, structure, offset, detail, "h.etdp")
        src.close()
    # an 8-byte file with the identifier at 4 passes the header (a plain flatbuffer)
    p = tmp_path / "h.etdp"
    p.write_bytes(b"\x00" * 4 + b"ED00")
    h = R.Header(Source(str(p)))
    assert (h.size_prefixed, h.size_prefix, h.base, h.end) == (False, None, 0, 8)
    # a size prefix of exactly 8, and one that leaves trailing bytes
    p.write_bytes(struct.pack("<I", 8) + b"\x00" * 4 + b"ED00" + b"\x00" * 4)
    h = R.Header(Source(str(p)))
    assert (h.size_prefixed, h.size_prefix, h.base, h.end) == (True, 8, 4, 12)
    p.write_bytes(data + b"\xAA" * 5)
    h = R.Header(Source(str(p)))
    assert (h.size_prefixed, h.size_prefix, h.base, h.end) == (True, n, 4, n + 4)
    art = wb.open(p)
    seg = art.segments
    assert list(zip(values(seg, "name"), values(seg, "kind"), values(seg, "offset"),
                    values(seg, "size"))) == [
        ("size prefix", "header", 0, 4), ("flatbuffer root", "header", 4, 8),
        ("ETDump", "flatbuffer", 12, n - 8), ("trailing data", "trailing", n + 4, 5)]
    assert art.info["flatbuffer_size"] == n and art.info["size_prefixed"] is True
    # a size prefix of exactly what follows
    p.write_bytes(data)
    assert R.Header(Source(str(p))).end == len(data)


@pytest.mark.parametrize("fast", [True, False])
def test_plain_flatbuffer_segments(tmp_path, monkeypatch, fast):
    t = Trace()
    data = t.finish([t.run("Execute", [t.event(profile=t.profile("x", 0, 0, 1, 3))])],
                    prefixed=False)
    art = open_trace(tmp_path, data, b"\x01\x02", fast, monkeypatch)
    etdp, dbg = str(tmp_path / "t.etdp"), str(tmp_path / "t.bin")
    seg = art.segments
    assert list(zip(*(values(seg, c) for c in seg.columns))) == [
        (dbg, "unused debug buffer", "trailing", 0, 2, None, None, ""),
        (etdp, "flatbuffer root", "header", 0, 8, None, None, "root offset + ED00"),
        (etdp, "ETDump", "flatbuffer", 8, len(data) - 8, 8, None, "")]
    assert categories(seg, "kind") == ["trailing", "header", "flatbuffer"]
    info = {"version": 0, "size_prefixed": False, "flatbuffer_size": len(data), "runs": 1,
            "profile_events": 1, "allocation_events": 0, "debug_values": 0,
            "debug_buffer": dbg}
    assert {k: art.info[k] for k in info} == info


def test_read_arguments_and_cleanup(tmp_path, monkeypatch):
    data, buf = full_trace()
    p = tmp_path / "full.etdp"
    p.write_bytes(data)
    (tmp_path / "full.bin").write_bytes(buf)
    src = Source(str(p))
    with pytest.raises(ValueError) as info:
        etdump.read(src, data=[tmp_path / "a", tmp_path / "b"])
    assert str(info.value) == (f"an ETDump takes one debug buffer, got 2: "
                               f"{[str(tmp_path / 'a'), str(tmp_path / 'b')]}")
    assert not isinstance(info.value, wb.ArtifactError)
    parsed = etdump.read(src, data=[])
    assert parsed.format == "etdump" and parsed.path == str(p)
    assert list(parsed.sources) == [str(p)] and parsed.info["debug_buffer"] is None
    assert sorted(parsed.builders) == sorted(TRACE_FRAMES)
    assert isinstance(parsed.extra.etdump, C.TraceColumns)
    assert parsed.extra.etdump.debug_path is None and parsed.extra.etdump.debug_size == 0
    parsed = etdump.read(src, data=[tmp_path / "full.bin"])
    assert list(parsed.sources) == [str(p), str(tmp_path / "full.bin")]
    cols = parsed.extra.etdump
    assert (cols.path, cols.size, cols.debug_path, cols.debug_size) == \
        (str(p), len(data), str(tmp_path / "full.bin"), len(buf))
    for name, builder in parsed.builders.items():
        assert builder.__self__ is cols and builder.__name__ == f"{name}_columns"
    # an error after the debug buffer is opened closes it
    opened = []

    class Spy(Source):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            opened.append(self)

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(etdump, "Source", Spy)
    monkeypatch.setattr(etdump, "TraceColumns", boom)
    with pytest.raises(RuntimeError, match="boom"):
        etdump.read(src, data=[tmp_path / "full.bin"])
    assert len(opened) == 1 and opened[0]._fd == -1
    monkeypatch.undo()
    monkeypatch.setattr(etdump, "Source", Spy)
    monkeypatch.setattr(etdump, "_findings", boom)
    with pytest.raises(RuntimeError, match="boom"):
        etdump.read(src, data=[tmp_path / "full.bin"])
    assert len(opened) == 2 and opened[1]._fd == -1
    src.close()


def test_iteration_and_tensor_names_directly(tmp_path):
    t = Trace()
    data = t.finish([t.run(n, []) for n in ("b", "a", "b", "b", "c", "a")])
    p = tmp_path / "i.etdp"
    p.write_bytes(data)
    src = Source(str(p))
    h = R.Header(src)
    rec = records(p, False)
    cols = C.TraceColumns(str(p), src.size, h, rec, None, 0)
    assert cols.iteration.tolist() == [0, 0, 1, 2, 0, 1]
    assert cols.block_names == ["b", "a", "c"]
    rc = cols._run_cols(np.array([5, 0, 2]))
    assert rc["run"].tolist() == [5, 0, 2] and rc["iteration"].tolist() == [1, 0, 1]
    assert list(rc["block"]) == ["a", "b", "b"]
    rec = records(tmp_path / "i.etdp", True)
    assert C.TraceColumns(str(p), src.size, h, rec, None, 0).iteration.tolist() == \
        [0, 0, 1, 2, 0, 1]
    data, _ = full_trace()
    p.write_bytes(data)
    src2 = Source(str(p))
    cols = C.TraceColumns(str(p), src2.size, R.Header(src2), records(p, True), None, 0)
    assert cols.tensor_names().tolist() == ["1/6", None, None, None, None, "1/11/0", "1/11/1",
                                            None, None, None, "1/15"]
    src.close()
    src2.close()


# ============================================================================= ETRecord


RECORD_FRAMES = ("segments", "tensors", "members", "programs", "nodes", "debug_handles",
                 "delegate_map")
EDGE = "edge_dialect_exported_program/forward"


class _Unseekable:
    """A write-only stream: Python's zipfile then writes a data descriptor per member."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, b: bytes) -> int:
        self.parts.append(bytes(b))
        return len(b)

    def flush(self) -> None:
        pass


def zip_bytes(members: list[tuple[str, bytes | str]], descriptors: bool = False,
              deflate: tuple[str, ...] = ()) -> bytes:
    """A zip archive of ``members`` in order (duplicates allowed), written by ``zipfile``."""
    import io
    import warnings
    import zipfile

    out: Any = _Unseekable() if descriptors else io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names
        with zipfile.ZipFile(out, "w") as z:
            for name, data in members:
                z.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED if name in deflate
                           else zipfile.ZIP_STORED)
    return b"".join(out.parts) if descriptors else out.getvalue()


def write_record(tmp_path: Path, members: list[tuple[str, bytes | str]], name: str = "r.etrecord",
                 marker: bool = True, **kw) -> Path:
    p = tmp_path / name
    p.write_bytes(zip_bytes(([("ETRECORD_V0", b"")] if marker else []) + members, **kw))
    return p


def graph_json(nodes: list, **top) -> str:
    return json.dumps({"graph_module": {"graph": {"nodes": nodes}}, **top})


def a_node(name: str | None, target: str, handle: Any = None, stack: str | None = None,
           trace: str | None = None, fn: str | None = None, inputs: Any = None,
           outputs: Any = None, meta: Any = "auto") -> dict:
    n: dict = {"target": target}
    if name is not None:
        n["name"] = name
    if meta == "auto":
        meta = {}
        for k, v in (("debug_handle", handle), ("nn_module_stack", stack), ("stack_trace", trace),
                     ("torch_fn", fn)):
            if v is not None:
                meta[k] = v
    if meta is not None:
        n["metadata"] = meta
    if inputs is not None:
        n["inputs"] = inputs
    if outputs is not None:
        n["outputs"] = outputs
    return n


def sub_graph(nodes: list, name: str | None = None) -> dict:
    g: dict = {"graph": {"nodes": nodes}}
    if name is not None:
        g["name"] = name
    return {"name": "fn", "arg": {"as_graph": g}}


def local_data_offset(data: bytes, lho: int) -> int:
    n_len, x_len = struct.unpack_from("<HH", data, lho + 26)
    return lho + 30 + n_len + x_len


def member_oracle(path: Path) -> list[dict]:
    """The members as Python's zipfile sees them (data offsets from the local headers)."""
    import zipfile

    data = path.read_bytes()
    out = []
    with zipfile.ZipFile(path) as z:
        for i in z.infolist():
            out.append({"name": i.filename, "header_offset": i.header_offset,
                        "offset": local_data_offset(data, i.header_offset),
                        "size": i.compress_size, "file_size": i.file_size,
                        "method": i.compress_type, "crc32": i.CRC,
                        "descriptor": bool(i.flag_bits & 8)})
    return out


def oracle_kind_of(name: str) -> tuple[str, str | None]:
    """Member kind by name, the schema's rule written out (before the JSON sniff)."""
    fixed = {"ETRECORD_V0": "marker", "debug_handle_map": "debug_handle_map",
             "delegate_map": "delegate_map", "instruction_id_to_num_outs_map": "num_outs_map",
             "export_graph_id": "export_graph_id", "reference_outputs": "reference_outputs",
             "representative_inputs": "representative_inputs"}
    if name in fixed:
        return fixed[name], None
    for suffix in ("_state_dict", "_constants", "_example_inputs"):
        if name.endswith(suffix) and name != suffix:
            return suffix[1:], name[: -len(suffix)]
    return "program", name


def check_members(art: wb.Artifact, path: Path, kinds: list[str] | None = None,
                  pickled: list[bool] | None = None, unsafe: list[bool] | None = None) -> None:
    mem = art.frames["members"]
    want = member_oracle(path)
    n = len(want)
    assert list(mem.columns) == ["index", "name", "kind", "model", "file", "header_offset",
                                 "offset", "size", "file_size", "align", "method", "compressed",
                                 "crc32", "pickled", "unsafe_name", "damaged"]
    dtypes = {"index": "int64", "name": "string", "kind": "category", "model": "category",
              "file": "string", "header_offset": "int64", "offset": "int64", "size": "int64",
              "file_size": "int64", "align": "Int64", "method": "int64", "compressed": "bool",
              "crc32": "int64", "pickled": "bool", "unsafe_name": "bool", "damaged": "bool"}
    assert {c: str(mem[c].dtype) for c in mem.columns} == dtypes
    assert values(mem, "index") == list(range(n))
    for col in ("name", "header_offset", "offset", "size", "file_size", "method", "crc32"):
        assert values(mem, col) == [w[col] for w in want], col
    assert values(mem, "file") == [str(path)] * n
    assert values(mem, "compressed") == [w["method"] != 0 for w in want]
    assert values(mem, "align") == [(w["offset"] & -w["offset"]) or None for w in want]
    assert values(mem, "damaged") == [False] * n
    by_name = [oracle_kind_of(w["name"]) for w in want]
    assert values(mem, "kind") == (kinds if kinds is not None else [k for k, _ in by_name])
    assert values(mem, "model") == [None if k == "other" else m
                                    for (_, m), k in zip(by_name, values(mem, "kind"))]
    if pickled is not None:
        assert values(mem, "pickled") == pickled
    if unsafe is not None:
        assert values(mem, "unsafe_name") == unsafe


@pytest.mark.parametrize("name", ["mlp_portable", "mlp_xnnpack"])
def test_sample_records_every_frame(name):
    import zipfile

    path = SAMPLES / f"{name}.etrecord"
    if not path.is_file():
        pytest.skip("no sample record: run sample_models/make_traces.py")
    art = wb.open(path)
    assert art.format == "etrecord" and set(art.frames) == set(RECORD_FRAMES)
    kinds = [oracle_kind_of(w["name"])[0] for w in member_oracle(path)]
    pickled = [k in ("state_dict", "constants", "example_inputs") for k in kinds]
    check_members(art, path, pickled=pickled, unsafe=[False] * len(kinds))
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        programs = [i.filename for i in infos if oracle_kind_of(i.filename)[0] == "program"]
        docs = {p: json.loads(z.read(p)) for p in programs}
        dh_json = json.loads(z.read("debug_handle_map"))
        dm_json = json.loads(z.read("delegate_map"))
        gid = json.loads(z.read("export_graph_id"))
    info = {"members": len(infos), "programs": programs, "export_graph_id": gid,
            "pickled_members": sum(pickled)}
    assert {k: art.info[k] for k in info} == info
    # programs and nodes against the JSON itself
    pr = art.frames["programs"]
    assert values(pr, "program") == programs
    assert values(pr, "stage") == ["export" if p == "exported_program" else "edge"
                                   for p in programs]
    assert values(pr, "method") == [None if p == "exported_program" else "forward"
                                    for p in programs]
    nd = art.frames["nodes"]
    want_nodes = [(p, n) for p in programs for n in docs[p]["graph_module"]["graph"]["nodes"]]
    assert len(nd) == len(want_nodes)
    assert values(pr, "nodes") == [len(docs[p]["graph_module"]["graph"]["nodes"])
                                   for p in programs]
    assert values(pr, "ops") == [len({n["target"] for n in docs[p]["graph_module"]["graph"]
                                      ["nodes"]}) for p in programs]
    assert values(pr, "schema_version") == [
        "{major}.{minor}".format(**docs[p]["schema_version"]) for p in programs]
    assert values(pr, "dialect") == [docs[p]["dialect"] for p in programs]
    assert values(pr, "debug_handles") == [
        sum("debug_handle" in n["metadata"] for n in docs[p]["graph_module"]["graph"]["nodes"])
        for p in programs]
    assert values(nd, "program") == [p for p, _ in want_nodes]
    assert values(nd, "graph") == [""] * len(nd)
    assert values(nd, "name") == [n["name"] for _, n in want_nodes]
    assert values(nd, "target") == [n["target"] for _, n in want_nodes]
    assert values(nd, "debug_handle") == [
        int(n["metadata"]["debug_handle"]) if "debug_handle" in n["metadata"] else None
        for _, n in want_nodes]
    assert values(nd, "stack_trace") == [n["metadata"].get("stack_trace") for _, n in want_nodes]
    assert values(nd, "module_stack") == [n["metadata"].get("nn_module_stack")
                                          for _, n in want_nodes]
    assert values(nd, "torch_fn") == [n["metadata"].get("torch_fn") for _, n in want_nodes]
    idx = []
    for p in programs:
        idx += list(range(len(docs[p]["graph_module"]["graph"]["nodes"])))
    assert values(nd, "index") == idx
    # the maps against the JSON and ExecuTorch's parser
    dh = art.frames["debug_handles"]
    rows = []
    for m, inner in dh_json.items():
        for k, v in inner.items():
            for pos, h in enumerate(v if isinstance(v, list) else [v]):
                rows.append((m, int(k), pos, h))
    got = list(dict.fromkeys(zip(values(dh, "method"), values(dh, "instruction"),
                                 values(dh, "position"), values(dh, "debug_handle"))))
    assert got == rows
    edge = [n for p, n in want_nodes if p == EDGE]
    for r in dh.itertuples():
        names = [n["name"] for n in edge if int(n["metadata"].get("debug_handle", -1))
                 == r.debug_handle]
        assert r.node in names
    dm = art.frames["delegate_map"]
    drows = []
    for m, inner in dm_json.items():
        for k, v in inner.items():
            ids = v.get("delegate_map") or {}
            if not ids:
                drows.append((m, int(k), v.get("name"), None, None, None))
            for ident, hs in ids.items():
                for pos, h in enumerate(hs if isinstance(hs, list) else [hs]):
                    drows.append((m, int(k), v.get("name"), ident, pos, h))
    assert list(dict.fromkeys(zip(*(values(dm, c) for c in (
        "method", "instruction", "backend", "delegate_debug_id", "position",
        "debug_handle"))))) == drows
    mod = pytest.importorskip("executorch.devtools.etrecord")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = mod.parse_etrecord(str(path))
    assert {m: {str(k): v if isinstance(v, list) else [v] for k, v in inner.items()}
            for m, inner in theirs._debug_handle_map.items()} == \
        {m: {str(k): [h for mm, kk, _, h in rows if (mm, kk) == (m, int(k))] for k in inner}
         for m, inner in dh_json.items()}
    assert art.info["export_graph_id"] == theirs.export_graph_id
    seg = art.segments
    assert seg["size"].sum() == path.stat().st_size
    assert art.tensors.empty
    assert list(art.tensors.columns) == ["name", "dtype", "shape", "nbytes", "storage", "file",
                                         "offset"]


def test_member_kind_and_program_stage():
    assert RS.member_kind("ETRECORD_V0") == ("marker", None)
    for name, kind in (("debug_handle_map", "debug_handle_map"), ("delegate_map", "delegate_map"),
                       ("instruction_id_to_num_outs_map", "num_outs_map"),
                       ("export_graph_id", "export_graph_id"),
                       ("reference_outputs", "reference_outputs"),
                       ("representative_inputs", "representative_inputs")):
        assert RS.member_kind(name) == (kind, None)
    assert RS.member_kind("p_state_dict") == ("state_dict", "p")
    assert RS.member_kind("a/b_constants") == ("constants", "a/b")
    assert RS.member_kind("x_example_inputs") == ("example_inputs", "x")
    assert RS.member_kind("_state_dict") == ("program", "_state_dict")
    assert RS.member_kind("_constants") == ("program", "_constants")
    assert RS.member_kind("_example_inputs") == ("program", "_example_inputs")
    assert RS.member_kind("state_dict") == ("program", "state_dict")
    assert RS.member_kind("a_state_dict_x") == ("program", "a_state_dict_x")
    assert RS.member_kind("ETRECORD_V0_state_dict") == ("state_dict", "ETRECORD_V0")
    assert RS.member_kind("debug_handle_map_constants") == ("constants", "debug_handle_map")
    assert RS.program_stage("exported_program") == ("export", None)
    assert RS.program_stage("edge_dialect_exported_program") == ("edge", "forward")
    assert RS.program_stage("edge_dialect_exported_program/forward") == ("edge", "forward")
    assert RS.program_stage("edge_dialect_exported_program/a/b") == ("edge", "a/b")
    assert RS.program_stage("edge_dialect_exported_program/") == ("edge", "")
    assert RS.program_stage("edge_dialect_exported_programx") == ("extra", None)
    assert RS.program_stage("edge_dialect_exported_programx/m") == ("extra", "m")
    assert RS.program_stage("aten/forward") == ("extra", "forward")
    assert RS.program_stage("a/b/c") == ("extra", "c")
    assert RS.program_stage("graph") == ("extra", None)
    assert RS.program_stage("exported_program/forward") == ("extra", "forward")
    assert RS.SEGMENT_KIND["program"] == "graph" and set(RS.SEGMENT_KIND) == set(RS.MEMBER_KINDS)


def test_record_detect():
    head = zip_bytes([("ETRECORD_V0", b""), ("x", b"{}")])[:64]
    assert etrecord.detect(head) and etrecord.detect(head[:41])
    assert not etrecord.detect(head[:40])
    assert not etrecord.detect(b"PK\x03\x05" + head[4:])
    bad = bytearray(head)
    bad[26:28] = struct.pack("<H", 12)
    assert not etrecord.detect(bytes(bad))
    assert not etrecord.detect(head[:30] + b"ETRECORD_V1" + head[41:])
    assert not etrecord.detect(zip_bytes([("ETRECORD_V0x", b"")])[:64])
    assert not etrecord.detect(zip_bytes([("x", b""), ("ETRECORD_V0", b"")])[:64])
    assert etrecord.MAGIC == b"ETRECORD_V0"


def map_record(tmp_path: Path, dh: Any = None, dm: Any = None, nodes: list | None = None,
               extra: list | None = None) -> Path:
    members: list = []
    if nodes is not None:
        members.append((EDGE, graph_json(nodes)))
    if dh is not None:
        members.append(("debug_handle_map", dh if isinstance(dh, (str, bytes)) else json.dumps(dh)))
    if dm is not None:
        members.append(("delegate_map", dm if isinstance(dm, (str, bytes)) else json.dumps(dm)))
    return write_record(tmp_path, members + (extra or []))


def record_error(path: Path, frames: bool = True) -> wb.ArtifactError:
    with pytest.raises(wb.ArtifactError) as info:
        art = wb.open(path)
        if frames:
            for f in art.frames:
                art.frames[f]
    assert info.value.file == path.name
    return info.value


def data_offset_of(path: Path, member: str) -> int:
    return next(m["offset"] for m in member_oracle(path) if m["name"] == member)


MAP_ERRORS = [
    ({"forward": {"zero": 1}}, "['forward']", "instruction key 'zero' is not a non-negative integer"),
    ({"forward": {"-1": 1}}, "['forward']", "instruction key '-1' is not a non-negative integer"),
    ({"forward": {"1.0": 1}}, "['forward']", "instruction key '1.0' is not a non-negative integer"),
    ({"forward": {"\u0661": 1}}, "['forward']",
     "instruction key '\u0661' is not a non-negative integer"),
    ({"forward": {"1" * 19: 1}}, "['forward']",
     f"instruction key '{'1' * 19}' is not a non-negative integer"),
    ({"forward": {"k" * 50: 1}}, "['forward']",
     f"instruction key '{'k' * 40}' is not a non-negative integer"),
    ({"7x": 1}, "", "instruction key '7x' is not a non-negative integer"),
    ({"forward": {"0": "1"}}, "['forward']['0']", "debug handle '1' is not an integer"),
    ({"forward": {"0": [1, True]}}, "['forward']['0']", "debug handle 'True' is not an integer"),
    ({"forward": {"0": 1.5}}, "['forward']['0']", "debug handle '1.5' is not an integer"),
    ({"forward": {"0": [None]}}, "['forward']['0']", "debug handle 'None' is not an integer"),
    ({"forward": {"0": "x" * 60}}, "['forward']['0']",
     f"debug handle '{'x' * 40}' is not an integer"),
    ({"0": [1, "a"]}, "[None]['0']", "debug handle 'a' is not an integer"),
    ([1, 2], "", "expected a JSON object, got list"),
    ("3", "", "expected a JSON object, got int"),
    ('"s"', "", "expected a JSON object, got str"),
]


@pytest.mark.parametrize("value,where,detail", MAP_ERRORS)
def test_debug_handle_map_errors(tmp_path, value, where, detail):
    p = map_record(tmp_path, dh=value if isinstance(value, str) else json.dumps(value))
    e = record_error(p, frames=False)
    assert type(e) is wb.CorruptError
    assert e.structure == "zip member 'debug_handle_map'" + (f" {where}" if where else "")
    assert e.detail == detail
    assert e.offset == data_offset_of(p, "debug_handle_map")


DELEGATE_ERRORS = [
    ({"forward": {"0": [1]}}, "['forward']['0']", "a delegate entry is not a JSON object"),
    ({"forward": {"0": {"name": 3}}}, "['forward']['0']", "the backend name is not a string"),
    ({"forward": {"0": {"name": "B", "delegate_map": [1]}}}, "['forward']['0']",
     "delegate_map is not a JSON object"),
    ({"forward": {"0": {"name": "B", "delegate_map": {"5": "h"}}}}, "['forward']['0']['5']",
     "debug handle 'h' is not an integer"),
    ({"forward": {"x": {"name": "B"}}}, "['forward']", "instruction key 'x' is not a non-negative "
     "integer"),
    ({"0": {"name": "B", "delegate_map": {"5": [1, False]}}}, "[None]['0']['5']",
     "debug handle 'False' is not an integer"),
    ({"0": 5}, "[None]['0']", "a delegate entry is not a JSON object"),
    ([], "", "expected a JSON object, got list"),
]


@pytest.mark.parametrize("value,where,detail", DELEGATE_ERRORS)
def test_delegate_map_errors(tmp_path, value, where, detail):
    p = map_record(tmp_path, dm=json.dumps(value))
    e = record_error(p, frames=False)
    assert type(e) is wb.CorruptError
    assert e.structure == "zip member 'delegate_map'" + (f" {where}" if where else "")
    assert e.detail == detail
    assert e.offset == data_offset_of(p, "delegate_map")


def test_maps_rows_and_joins(tmp_path):
    nodes = [a_node("a", "executorch.exir.dialects.edge.ops.aten.add.Tensor", 1),
             a_node("b", "torch.ops.aten.mul.Tensor", "2"),
             a_node("c", "other.op", 1),
             a_node("d", "no.handle")]
    dh = {"forward": {"0": 1, "3": [2, 1, 9], "00": []}}
    dm = {"forward": {"1": {"name": "DemoBackend", "delegate_map": {"10": [2, 1], "x #1": 9}},
                      "2": {"name": "Empty", "delegate_map": {}},
                      "4": {"name": None},
                      "5": {"delegate_map": None}}}
    p = map_record(tmp_path, dh=dh, dm=dm, nodes=nodes)
    art = wb.open(p)
    arc = art._parsed.extra.etrecord
    assert arc.debug_handles == [("forward", 0, 0, 1), ("forward", 3, 0, 2), ("forward", 3, 1, 1),
                                 ("forward", 3, 2, 9)]
    assert arc.delegates == [("forward", 1, "DemoBackend", "10", 0, 2),
                             ("forward", 1, "DemoBackend", "10", 1, 1),
                             ("forward", 1, "DemoBackend", "x #1", 0, 9),
                             ("forward", 2, "Empty", None, None, None),
                             ("forward", 4, None, None, None, None),
                             ("forward", 5, None, None, None, None)]
    check_frame(art.frames["debug_handles"], {
        "method": ("category", ["forward"] * 6),
        "instruction": ("int64", [0, 0, 3, 3, 3, 3]),
        "position": ("int64", [0, 0, 0, 1, 1, 2]),
        "debug_handle": ("int64", [1, 1, 2, 1, 1, 9]),
        "node": ("string", ["a", "c", "b", "a", "c", None]),
        "target": ("category", ["executorch.exir.dialects.edge.ops.aten.add.Tensor", "other.op",
                                "torch.ops.aten.mul.Tensor",
                                "executorch.exir.dialects.edge.ops.aten.add.Tensor", "other.op",
                                None]),
        "op": ("category", ["aten.add.Tensor", "other.op", "aten.mul.Tensor", "aten.add.Tensor",
                            "other.op", None]),
    })
    check_frame(art.frames["delegate_map"], {
        "method": ("category", ["forward"] * 7),
        "instruction": ("int64", [1, 1, 1, 1, 2, 4, 5]),
        "backend": ("category", ["DemoBackend"] * 4 + ["Empty", None, None]),
        "delegate_debug_id": ("string", ["10", "10", "10", "x #1", None, None, None]),
        "position": ("Int64", [0, 1, 1, 0, None, None, None]),
        "debug_handle": ("Int64", [2, 1, 1, 9, None, None, None]),
        "node": ("string", ["b", "a", "c", None, None, None, None]),
        "target": ("category", ["torch.ops.aten.mul.Tensor",
                                "executorch.exir.dialects.edge.ops.aten.add.Tensor", "other.op",
                                None, None, None, None]),
        "op": ("category", ["aten.mul.Tensor", "aten.add.Tensor", "other.op", None, None, None,
                            None]),
    })
    # flat maps (older writers): no method level; the only edge program answers
    flat_dh = {"0": [1], "1": 2}
    flat_dm = {"2": {"name": "B", "delegate_map": {"0": 2}}, "3": {"name": "C"}}
    p = map_record(tmp_path, dh=flat_dh, dm=flat_dm, nodes=nodes)
    art = wb.open(p)
    dh_f = art.frames["debug_handles"]
    assert values(dh_f, "method") == [None, None, None]
    assert values(dh_f, "node") == ["a", "c", "b"]
    dm_f = art.frames["delegate_map"]
    assert values(dm_f, "method") == [None, None]
    assert values(dm_f, "node") == ["b", None] and values(dm_f, "backend") == ["B", "C"]
    # a method level whose entries are objects with a flat key is taken as flat
    p = map_record(tmp_path, dm={"7": {"name": "B"}, "8": {"delegate_map": {}}})
    assert values(wb.open(p).frames["delegate_map"], "instruction") == [7, 8]
    # empty maps: no rows; and {} at the method level
    p = map_record(tmp_path, dh={}, dm={"forward": {}})
    art = wb.open(p)
    assert art.frames["debug_handles"].empty and art.frames["delegate_map"].empty
    assert list(art.frames["delegate_map"].columns) == ["method", "instruction", "backend",
                                                        "delegate_debug_id", "position",
                                                        "debug_handle", "node", "target", "op"]


def test_handles_name_nodes_of_their_method(tmp_path):
    """Two edge programs: each handle is looked up in its own method's program only; an
    export-stage program is never used."""
    fwd = graph_json([a_node("f1", "t.a", 1), a_node("f2", "t.b", 2)])
    enc = graph_json([a_node("e1", "t.c", 1)])
    exp = graph_json([a_node("x1", "t.d", 2)])
    p = write_record(tmp_path, [
        ("exported_program", exp), ("edge_dialect_exported_program/forward", fwd),
        ("edge_dialect_exported_program/encode", enc),
        ("debug_handle_map", json.dumps({"forward": {"0": [1, 2]}, "encode": {"0": 1, "1": 2}})),
        ("delegate_map", json.dumps({"encode": {"3": {"name": "B", "delegate_map": {"i": 1}}}}))])
    art = wb.open(p)
    dh = art.frames["debug_handles"]
    assert list(zip(values(dh, "method"), values(dh, "instruction"), values(dh, "node"))) == [
        ("forward", 0, "f1"), ("forward", 0, "f2"), ("encode", 0, "e1"), ("encode", 1, None)]
    assert categories(dh, "method") == ["forward", "encode"]
    dm = art.frames["delegate_map"]
    assert values(dm, "node") == ["e1"]
    cols = art._parsed.extra.etrecord
    rc = RC.RecordColumns(cols)
    by = rc._by_handle()
    assert sorted(((k, [n.name for n in v]) for k, v in by.items()), key=str) == [
        (("encode", 1), ["e1"]), (("forward", 1), ["f1"]), (("forward", 2), ["f2"])]
    # one edge program: its method and None both answer
    p = write_record(tmp_path, [("exported_program", exp), (EDGE, fwd)], name="one.etrecord")
    by = RC.RecordColumns(wb.open(p)._parsed.extra.etrecord)._by_handle()
    assert sorted(((k, [n.name for n in v]) for k, v in by.items()), key=str) == [
        (("forward", 1), ["f1"]), (("forward", 2), ["f2"]), ((None, 1), ["f1"]),
        ((None, 2), ["f2"])]
    assert RC._short("torch.ops.aten.x") == "aten.x"
    assert RC._short("executorch.exir.dialects.edge.ops.aten.y.default") == "aten.y.default"
    assert RC._short("torch.opsx") == "torch.opsx" and RC._short("") == ""
    assert RC._short("a.torch.ops.b") == "a.torch.ops.b"


def test_nodes_every_column(tmp_path):
    stack = "L__self__,,m.M;L__self__fc,fc,torch.nn.Linear"
    inner = [a_node("s1", "torch.ops.aten.sin.default", 7, trace="inner trace")]
    deeper = [a_node("d1", "t.deep", "8")]
    nodes = [
        a_node("a", "executorch.exir.dialects.edge.ops.aten.add.Tensor", 1, stack, "trace a",
               "('add', 'builtin')"),
        a_node(None, "torch.ops.aten.mul.Tensor", "2",
               outputs=[{"as_tensor": {"name": "mul_out"}}]),
        a_node(None, "t.list_out", " 3 ", outputs=[{"as_tensors": [{"name": "lo"}, {"name": "l2"}]}]),
        a_node(None, "t.no_out", "-4", outputs=[]),
        a_node("cond", "torch.ops.higher_order.cond", True, "a,b",
               inputs=[{"name": "pred", "arg": {"as_tensor": {"name": "x"}}},
                       sub_graph(inner, "true_graph_0"), sub_graph([a_node(
                           "w", "t.w", 1.5, inputs=[sub_graph(deeper)])])]),
        a_node("m", "t.meta_none", meta=None, inputs="not a list"),
        a_node("z", "t.z", "12345678901234567890", "k,p,t,with,commas",
               fn=5, trace=["not", "text"], inputs=[None, 3, {"arg": 4}, {"arg": {"as_graph": 1}}]),
        a_node("y", "t.y", "1" * 19),
    ]
    p = write_record(tmp_path, [(EDGE, graph_json(nodes, schema_version={"major": 8, "minor": 1},
                                                  dialect="EDGE"))])
    art = wb.open(p)
    check_frame(art.frames["nodes"], {
        "program": ("category", [EDGE] * 11),
        "stage": ("category", ["edge"] * 11),
        "method": ("category", ["forward"] * 11),
        "graph": ("string", [""] * 8 + ["true_graph_0", "cond.2", "cond.2/w.0"]),
        "index": ("int64", [0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0]),
        "name": ("string", ["a", "mul_out", "lo", "", "cond", "m", "z", "y", "s1", "w", "d1"]),
        "target": ("category", ["executorch.exir.dialects.edge.ops.aten.add.Tensor",
                                "torch.ops.aten.mul.Tensor", "t.list_out", "t.no_out",
                                "torch.ops.higher_order.cond", "t.meta_none", "t.z", "t.y",
                                "torch.ops.aten.sin.default", "t.w", "t.deep"]),
        "op": ("category", ["aten.add.Tensor", "aten.mul.Tensor", "t.list_out", "t.no_out",
                            "higher_order.cond", "t.meta_none", "t.z", "t.y", "aten.sin.default",
                            "t.w", "t.deep"]),
        "debug_handle": ("Int64", [1, 2, 3, -4, None, None, None, int("1" * 19), 7, None, 8]),
        "module": ("string", ["fc", None, None, None, None, None, "p", None, None, None, None]),
        "module_type": ("category", ["torch.nn.Linear", None, None, None, None, None,
                                     "t,with,commas", None, None, None, None]),
        "module_stack": ("string", [stack, None, None, None, "a,b", None, "k,p,t,with,commas",
                                    None, None, None, None]),
        "stack_trace": ("string", ["trace a", None, None, None, None, None, None, None,
                                   "inner trace", None, None]),
        "torch_fn": ("string", ["('add', 'builtin')"] + [None] * 10),
        # the data flow (graph views): names read and written, the written values' dtype/shape
        "inputs": ("object", [(), (), (), (), ("x", "true_graph_0"), (), (), (), (), (), ()]),
        "outputs": ("object", [(), ("mul_out",), ("lo", "l2"), (), (), (), (), (), (), (), ()]),
        "dtypes": ("object", [(), (None,), (None, None), (), (), (), (), (), (), (), ()]),
        "shapes": ("object", [(), (None,), (None, None), (), (), (), (), (), (), (), ()]),
    })
    check_frame(art.frames["programs"], {
        "program": ("string", [EDGE]), "stage": ("category", ["edge"]),
        "method": ("category", ["forward"]), "nodes": ("int64", [11]), "ops": ("int64", [11]),
        "debug_handles": ("int64", [7]), "schema_version": ("string", ["8.1"]),
        "dialect": ("string", ["EDGE"]),
    })
    prog = art._parsed.extra.etrecord.program(EDGE)
    assert prog is art._parsed.extra.etrecord.program(EDGE)  # parsed once
    assert [n.module_type for n in prog.nodes][:1] == ["torch.nn.Linear"]


@pytest.mark.parametrize("version,want", [({"major": 3, "minor": 0}, "3.0"), ({"major": 3}, "3.None"),
                                           ({}, "None.None"), (5, "5"), ("7.2", "7.2"), (True, None),
                                           (None, None), ([1], None), (1.5, None)])
def test_program_schema_version_and_dialect(tmp_path, version, want):
    top = {} if version is None else {"schema_version": version}
    p = write_record(tmp_path, [("exported_program", graph_json(
        [a_node("a", "t.a"), a_node("b", "t.a", 0)], dialect=7 if want is None else "ATEN",
        **top))])
    pr = wb.open(p).frames["programs"]
    assert values(pr, "schema_version") == [want]
    assert values(pr, "dialect") == [None if want is None else "ATEN"]
    assert values(pr, "stage") == ["export"] and values(pr, "method") == [None]
    assert values(pr, "nodes") == [2] and values(pr, "ops") == [1]
    assert values(pr, "debug_handles") == [1]


def test_handle_output_name_and_module_helpers():
    assert RR._handle(3) == 3 and RR._handle(0) == 0 and RR._handle(-2) == -2
    assert RR._handle(True) is None and RR._handle(False) is None
    assert RR._handle("12") == 12 and RR._handle(" 5 ") == 5 and RR._handle("-3") == -3
    assert RR._handle("1" * 19) == int("1" * 19) and RR._handle("1" * 20) is None
    assert RR._handle("-" + "1" * 18) == -int("1" * 18)
    assert RR._handle("1.5") is None and RR._handle("") is None and RR._handle("x") is None
    assert RR._handle(None) is None and RR._handle(2.0) is None and RR._handle([1]) is None
    assert RR._output_name([{"as_tensor": {"name": "o"}}]) == "o"
    assert RR._output_name([{"as_tensors": [{"name": "p"}, {"name": "q"}]}]) == "p"
    assert RR._output_name([{"a": 1, "b": {"name": "second"}}]) == "second"
    assert RR._output_name([{"a": {"name": 3}, "b": [{"name": "l"}]}]) == "l"
    assert RR._output_name([{"a": []}, {"b": {"name": "not first"}}]) == ""
    assert RR._output_name([{"a": [1]}]) == "" and RR._output_name([{"a": [{"x": 1}]}]) == ""
    assert RR._output_name([]) == "" and RR._output_name(None) == ""
    assert RR._output_name({"a": {"name": "x"}}) == "" and RR._output_name([3]) == ""
    assert RR._innermost_module(None) == (None, None)
    assert RR._innermost_module("") == (None, None)
    assert RR._innermost_module("a,b") == (None, None)
    assert RR._innermost_module("x,y,z;a,b") == (None, None)
    assert RR._innermost_module("a,b;k,p,t") == ("p", "t")
    assert RR._innermost_module("k,p,t,u") == ("p", "t,u")
    assert RR._innermost_module("k,,t") == ("", "t")
    n = RR.Node("g", 2, "n", "t", 5, "k,p,T", "st", "fn")
    assert (n.graph, n.index, n.name, n.target, n.debug_handle, n.module_stack, n.module,
            n.module_type, n.stack_trace, n.torch_fn) == ("g", 2, "n", "t", 5, "k,p,T", "p", "T",
                                                          "st", "fn")
    prog = RR.Program("edge_dialect_exported_program/enc")
    assert (prog.member, prog.stage, prog.method, prog.nodes, prog.schema_version,
            prog.dialect) == ("edge_dialect_exported_program/enc", "edge", "enc", [], None, None)


PROGRAM_ERRORS = [
    ("[1, 2]", "", "the serialized program is not a JSON object"),
    ('{"graph_module": 1}', " graph_module", "graph_module.graph is missing or not an object"),
    ('{"graph_module": {"graph": []}}', " graph_module",
     "graph_module.graph is missing or not an object"),
    ('{"x": 1}', " graph_module", "graph_module.graph is missing or not an object"),
    ('{"graph_module": {"graph": {"nodes": {}}}}', " graph_module.graph.nodes",
     "nodes is not a list"),
    ('{"graph_module": {"graph": {"nodes": [{"target": "t"}, 3]}}}',
     " graph_module.graph.nodes[1]", "a node is not a JSON object"),
    ('{"graph_module": {"graph": {"nodes": [{"target": 5}]}}}', " graph_module.graph.nodes[0]",
     "the node target is not a string"),
    ('{"graph_module": {"graph": {"nodes": [{"name": "n"}]}}}', " graph_module.graph.nodes[0]",
     "the node target is not a string"),
    ('{"graph_module": {"graph": {"nodes": [{"target": "t", "metadata": []}]}}}',
     " graph_module.graph.nodes[0].metadata", "metadata is not a JSON object"),
    (json.dumps({"graph_module": {"graph": {"nodes": [a_node("c", "t", inputs=[
        {"arg": 1}, {"arg": {"as_graph": {"name": "g"}}}])]}}}),
     " graph_module.graph.nodes[0].inputs[1].arg.as_graph.graph", "a graph is not a JSON object"),
    (json.dumps({"graph_module": {"graph": {"nodes": [a_node("c", "t", inputs=[
        sub_graph([a_node("i", "t", inputs=[{"arg": {"as_graph": {"graph": 3}}}])])])]}}}),
     " graph_module.graph.nodes[0].inputs[0].arg.as_graph.graph.nodes[0].inputs[0].arg.as_graph"
     ".graph", "a graph is not a JSON object"),
    (json.dumps({"graph_module": {"graph": {"nodes": [a_node("c", "t", inputs=[
        sub_graph({"a": 1})])]}}}), " graph_module.graph.nodes[0].inputs[0].arg.as_graph.graph"
     ".nodes", "nodes is not a list"),
]


@pytest.mark.parametrize("text,where,detail", PROGRAM_ERRORS)
def test_bad_programs(tmp_path, text, where, detail):
    p = write_record(tmp_path, [(EDGE, text)], deflate=(EDGE,) if text[0] == "[" else ())
    art = wb.open(p)
    assert values(art.frames["members"], "kind") == ["marker", "program"]
    with pytest.raises(wb.ArtifactError) as info:
        art.frames["programs"]
    e = info.value
    assert type(e) is wb.CorruptError
    assert e.structure == f"zip member '{EDGE}'{where}"
    assert e.detail == detail and e.file == p.name
    assert e.offset == data_offset_of(p, EDGE)
    with pytest.raises(wb.CorruptError):
        wb.open(p).frames["nodes"]


def test_program_nodes_absent_and_empty(tmp_path):
    p = write_record(tmp_path, [("exported_program", '{"graph_module": {"graph": {}}}'),
                                ("aten/forward", graph_json([]))])
    art = wb.open(p)
    pr = art.frames["programs"]
    assert values(pr, "program") == ["exported_program", "aten/forward"]
    assert values(pr, "nodes") == [0, 0] and values(pr, "ops") == [0, 0]
    assert values(pr, "stage") == ["export", "extra"] and values(pr, "method") == [None, "forward"]
    nd = art.frames["nodes"]
    assert nd.empty and list(nd.columns) == [
        "program", "stage", "method", "graph", "index", "name", "target", "op", "debug_handle",
        "module", "module_type", "module_stack", "stack_trace", "torch_fn",
        "inputs", "outputs", "dtypes", "shapes"]
    assert art.frames["debug_handles"].empty


def test_members_kinds_pickles_and_names(tmp_path):
    members = [
        ("exported_program", graph_json([])),
        ("exported_program_state_dict", b"s: not a pickle"),      # pickled by name
        ("exported_program_constants", b"not a pickle at all"),   # pickled by name
        ("exported_program_example_inputs", b"e: not a pickle"),  # pickled by name
        ("reference_outputs", b"r: not a pickle"),                # pickled by name
        ("representative_inputs", b""),
        ("p2", b"\x80\x03K\x01."),        # a pickle by content, not JSON: other
        ("p1", b"\x80\x01K\x01."),        # protocol 1: not recognised
        ("p6", b"\x80\x06K\x01."),        # protocol 6: not recognised
        ("p5", b"\x80\x05"),              # protocol 5, two bytes
        ("one", b"\x80"),                 # one byte
        ("zip", b"PK\x03\x04rest"),       # a torch.save zip
        ("zip3", b"PK\x03"),              # too short for one
        ("spaces", b" \n\t {}"),          # JSON after blanks: a program
        ("late", b" " * 64 + b"{}"),      # the brace after 64 bytes: not seen
        ("edge", b" " * 63 + b"{}"),      # just seen
        ("/abs", b"{}"), ("C:x", b"{}"), ("a\\b", b"{}"), ("a\x01b", b"{}"), ("a\x7fb", b"{}"),
        ("a\u009fb", b"{}"), ("a\u00a0b", b"{}"), ("../up", b"{}"), ("a/../b", b"{}"),
        ("a/..", b"{}"), ("..", b"{}"), ("..a", b"{}"), ("a..b", b"{}"), ("a/b", b"{}"),
        ("deflated", b"[1, 2, 3] not json"),  # compressed: assumed JSON (a program)
        ("deflated_state_dict", b"\x80\x04."),  # compressed: pickled by name only
        ("instruction_id_to_num_outs_map", b"{}"),
        ("export_graph_id", b"42"),
        ("p2b", b"\x80\x02K\x01."), ("p4", b"\x80\x04K\x01."),  # protocols 2 and 4
    ]
    p = write_record(tmp_path, members, deflate=("deflated", "deflated_state_dict"))
    art = wb.open(p)
    kinds = ["marker", "program", "state_dict", "constants", "example_inputs",
             "reference_outputs", "representative_inputs", "other", "other", "other", "other",
             "other", "other", "other", "program", "other", "program"] + ["program"] * 14 + [
        "program", "state_dict", "num_outs_map", "export_graph_id", "other", "other"]
    pickled = [False, False, True, True, True, True, True, True, False, False, True, False,
               True, False, False, False, False] + [False] * 14 + [False, True, False, False, True, True]
    unsafe = [False] * 17 + [True, True, True, True, True, True, False, True, True, True, True,
                             False, False, False] + [False] * 6
    check_members(art, p, kinds=kinds, pickled=pickled, unsafe=unsafe)
    mem = art.frames["members"]
    assert values(mem, "model") == [None, "exported_program", "exported_program",
                                    "exported_program", "exported_program", None, None, None,
                                    None, None, None, None, None, None, "spaces", None, "edge"] + \
        [m for m, _ in members[16:30]] + ["deflated", "deflated", None, None, None, None]
    assert values(mem, "compressed")[-6:] == [True, True, False, False, False, False]
    assert art.info["export_graph_id"] == 42
    assert art.info["pickled_members"] == sum(pickled)
    assert art.info["programs"] == ["exported_program", "spaces", "edge"] + \
        [m for m, _ in members[16:30]] + ["deflated"]
    seg = art.segments
    kinds_of = dict(zip(values(seg, "name"), values(seg, "kind")))
    assert kinds_of["p2"] == "other" and kinds_of["spaces"] == "graph"
    assert kinds_of["exported_program_state_dict"] == "pickle"
    assert kinds_of["export_graph_id"] == "metadata" and kinds_of["ETRECORD_V0"] == "metadata"


@pytest.mark.parametrize("raw,want", [(b"7", 7), (b"0", 0), (b"-3", -3), (b"true", None),
                                      (b"false", None), (b"1.5", None), (b'"7"', None),
                                      (b"null", None), (b"[1]", None)])
def test_export_graph_id(tmp_path, raw, want):
    p = write_record(tmp_path, [("export_graph_id", raw)])
    assert wb.open(p).info["export_graph_id"] == want
    p = write_record(tmp_path, [])
    assert wb.open(p).info["export_graph_id"] is None


def test_bad_export_graph_id_json(tmp_path):
    p = write_record(tmp_path, [("export_graph_id", b"{")])
    e = record_error(p, frames=False)
    assert type(e) is wb.CorruptError and e.structure == "zip member 'export_graph_id'"
    assert e.offset == data_offset_of(p, "export_graph_id") + 1  # where the JSON fails


def test_no_marker_and_duplicates(tmp_path):
    p = write_record(tmp_path, [("x", b"{}")], marker=False)
    src = Source(str(p))
    with pytest.raises(wb.CorruptError) as info:
        RR.Archive(src)
    e = info.value
    z = next(i for i in [p.read_bytes()] for _ in [0])
    cd = struct.unpack_from("<I", z, len(z) - 22 + 16)[0]
    assert (e.structure, e.offset, e.detail, e.file) == (
        "zip central directory", cd, "no ETRECORD_V0 marker member: not an ETRecord", p.name)
    src.close()
    p = write_record(tmp_path, [("debug_handle_map", json.dumps({"forward": {"0": 1}})),
                                ("exported_program", graph_json([a_node("a", "t")])),
                                ("exported_program", graph_json([])),
                                ("debug_handle_map", json.dumps({"forward": {"5": 2}}))],
                     name="dup.etrecord")
    art = wb.open(p)
    assert sorted((f.as_dict() for f in art._parsed.findings), key=str) == [
        {"severity": "warning", "structure": "zip member 'debug_handle_map'", "offset": None,
         "message": "the name occurs more than once; the first member is used"},
        {"severity": "warning", "structure": "zip member 'exported_program'", "offset": None,
         "message": "the name occurs more than once; the first member is used"}]
    assert art.info["programs"] == ["exported_program"] and art.info["members"] == 5
    assert values(art.frames["debug_handles"], "instruction") == [0]
    assert values(art.frames["programs"], "nodes") == [1]
    assert values(art.frames["members"], "kind") == ["marker", "debug_handle_map", "program",
                                                     "program", "debug_handle_map"]


def test_segments_with_descriptors(tmp_path):
    members = [("exported_program", graph_json([])), ("debug_handle_map", b"{}"),
               ("exported_program_state_dict", b"\x80\x04.")]
    for descriptors in (False, True):
        p = write_record(tmp_path, members, descriptors=descriptors,
                         name=f"d{int(descriptors)}.etrecord")
        data = p.read_bytes()
        art = wb.open(p)
        want = member_oracle(p)
        assert all(w["descriptor"] == descriptors for w in want)
        rows = []
        kinds = {"ETRECORD_V0": "metadata", "exported_program": "graph",
                 "debug_handle_map": "metadata", "exported_program_state_dict": "pickle"}
        for i, w in enumerate(want):
            lho, off, size = w["header_offset"], w["offset"], w["size"]
            rows.append(("local header", "header", lho, off - lho, i, w["name"]))
            rows.append((w["name"], kinds[w["name"]], off, size, i, ""))
            if descriptors:
                rows.append(("data descriptor", "data_descriptor", off + size, 16, i, w["name"]))
        eocd = len(data) - 22
        cd_size, cd = struct.unpack_from("<II", data, eocd + 12)
        rows.append(("central directory", "central_directory", cd, cd_size, None,
                     f"{len(want)} entries"))
        rows.append(("end of central directory", "end_record", eocd, 22, None, ""))
        seg = art.segments
        assert list(zip(values(seg, "name"), values(seg, "kind"), values(seg, "offset"),
                        values(seg, "size"), values(seg, "index"), values(seg, "used_by"))) == rows
        assert values(seg, "file") == [str(p)] * len(rows)
        assert str(seg["index"].dtype) == "Int64"


def test_damaged_members(tmp_path):
    members = [("exported_program", graph_json([a_node("a", "t", 1)])),
               ("debug_handle_map", json.dumps({"forward": {"0": 1}})),
               ("delegate_map", json.dumps({"forward": {"0": {"name": "B"}}})),
               ("edge_dialect_exported_program/forward", graph_json([a_node("e", "t", 1)])),
               ("export_graph_id", b"5")]
    p = write_record(tmp_path, members)
    data = bytearray(p.read_bytes())
    want = member_oracle(p)
    damaged = ["debug_handle_map", "delegate_map", EDGE, "export_graph_id"]
    for m in want:
        if m["name"] in damaged:
            data[m["header_offset"] + 3] = 5  # the local header's signature
    q = tmp_path / "dmg.etrecord"
    q.write_bytes(bytes(data))
    art = wb.open(q)
    assert [x.as_dict() for x in art._parsed.findings] == [
        {"severity": "error", "structure": f"zip local header of {m['name']!r}",
         "offset": m["header_offset"],
         "message": f"member {m['name']!r} cannot be read (nor by Python's zipfile): bad "
                    f"signature 0x05034b50 (expected 0x04034b50); frames built from it are empty"}
        for m in want if m["name"] in damaged]
    mem = art.frames["members"]
    is_bad = [m["name"] in damaged for m in want]
    assert values(mem, "damaged") == is_bad
    assert values(mem, "offset") == [-1 if b else m["offset"] for m, b in zip(want, is_bad)]
    assert values(mem, "align") == [None if b or m["offset"] == 0 else m["offset"] & -m["offset"]
                                    for m, b in zip(want, is_bad)]
    assert values(mem, "pickled") == [False] * len(want)
    assert values(mem, "kind") == ["marker", "program", "debug_handle_map", "delegate_map",
                                   "program", "export_graph_id"]
    assert art.frames["debug_handles"].empty and art.frames["delegate_map"].empty
    assert art.info["export_graph_id"] is None
    pr = art.frames["programs"]
    assert values(pr, "program") == ["exported_program", EDGE]
    assert values(pr, "nodes") == [1, 0]
    assert values(art.frames["nodes"], "name") == ["a"]
    seg = art.segments
    rows = list(zip(values(seg, "name"), values(seg, "kind"), values(seg, "offset"),
                    values(seg, "size"), values(seg, "used_by")))
    first = want[2]["header_offset"]
    gap_end = want[1]["header_offset"] + (want[1]["offset"] - want[1]["header_offset"]) + \
        want[1]["size"]
    assert ("exported_program", "graph", want[1]["offset"], want[1]["size"], "") in rows
    assert gap_end == first
    assert seg["size"].sum() == len(data)
    dmg = [r for r in rows if r[1] == "damaged"]
    assert [r[4] for r in dmg] == ["debug_handle_map, delegate_map, "
                                   "edge_dialect_exported_program/forward, export_graph_id"]
    assert [(r[0], r[2], r[3]) for r in dmg] == [
        ("damaged members", first, next(r[2] for r in rows if r[0] == "central directory")
         - first)]
    assert "local header" not in [r[0] for r in rows if r[2] >= first and r[1] != "damaged"
                                  and r[0] != "central directory"]


def test_damaged_member_between_good_ones(tmp_path):
    members = [("a", graph_json([])), ("debug_handle_map", b"{}"), ("b", graph_json([]))]
    p = write_record(tmp_path, members)
    data = bytearray(p.read_bytes())
    want = member_oracle(p)
    data[want[2]["header_offset"] + 3] = 5
    q = tmp_path / "dmg.etrecord"
    q.write_bytes(bytes(data))
    seg = wb.open(q).segments
    rows = list(zip(values(seg, "name"), values(seg, "kind"), values(seg, "offset"),
                    values(seg, "size"), values(seg, "used_by"), values(seg, "index")))
    lho = want[2]["header_offset"]
    assert ("damaged members", "damaged", lho, want[3]["header_offset"] - lho,
            "debug_handle_map", None) in rows
    assert ("local header", "header", want[3]["header_offset"],
            want[3]["offset"] - want[3]["header_offset"], "b", 3) in rows
    # only gaps holding a damaged member's header are relabelled
    raw = {"offset": np.array([0, 10, 20, 30], np.int64), "size": np.array([10, 10, 10, 5]),
           "index": np.array([-1, 0, -1, -1]), "kind": objects_of(["padding", "x", "padding",
                                                                   "trailing"]),
           "name": objects_of(["padding", "m", "padding", "t"]),
           "used_by": objects_of(["", "", "", ""])}
    RC._mark_damaged(raw, ["m", "d1", "d2", "d3"], np.array([10, 30, 20, 0], np.int64),
                     np.array([False, True, True, True]))
    assert list(raw["kind"]) == ["damaged", "x", "damaged", "trailing"]
    assert list(raw["name"]) == ["damaged members", "m", "damaged members", "t"]
    assert list(raw["used_by"]) == ["d3", "", "d1, d2", ""]


def objects_of(items: list) -> np.ndarray:
    out = np.empty(len(items), object)
    out[:] = items
    return out


def test_record_read_parsed(tmp_path):
    p = write_record(tmp_path, [("exported_program", graph_json([])),
                                ("exported_program_state_dict", b"\x80\x04."),
                                ("export_graph_id", b"9")])
    src = Source(str(p))
    parsed = etrecord.read(src)
    assert parsed.format == "etrecord" and parsed.path == str(p)
    assert list(parsed.sources) == [str(p)]
    assert {k: parsed.info[k] for k in ("members", "programs", "export_graph_id",
                                        "pickled_members")} == {
        "members": 4, "programs": ["exported_program"], "export_graph_id": 9,
        "pickled_members": 1}
    assert sorted(parsed.builders) == sorted(RECORD_FRAMES)
    arc = parsed.extra.etrecord
    assert isinstance(arc, RR.Archive) and parsed.extra.zip is arc.zip
    for name, builder in parsed.builders.items():
        assert builder.__name__ == f"{name}_columns" and builder.__self__.arc is arc
    assert parsed.findings == []
    assert RC.RecordColumns(arc).tensors_columns() == {
        c: [] for c in ("name", "dtype", "shape", "nbytes", "storage", "file", "offset")}
    src.close()


def test_zip64_end_records(tmp_path, monkeypatch):
    import io
    import zipfile

    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 2)  # zipfile then writes ZIP64 ends
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        for name, data in (("ETRECORD_V0", ""), ("debug_handle_map", "{}"), ("x", "{}")):
            z.writestr(name, data)
    monkeypatch.undo()
    data = b.getvalue()
    p = tmp_path / "z64.etrecord"
    p.write_bytes(data)
    eocd = len(data) - 22
    locator = eocd - 20
    assert struct.unpack_from("<I", data, locator)[0] == 0x07064B50
    z64 = struct.unpack_from("<Q", data, locator + 8)[0]
    z64_size = 12 + struct.unpack_from("<Q", data, z64 + 4)[0]
    cd_size, cd = struct.unpack_from("<QQ", data, z64 + 40)
    seg = wb.open(p).segments
    tail = list(zip(values(seg, "name"), values(seg, "kind"), values(seg, "offset"),
                    values(seg, "size"), values(seg, "index"), values(seg, "used_by")))[-4:]
    assert tail == [("central directory", "central_directory", cd, cd_size, None, "3 entries"),
                    ("zip64 end of central directory", "end_record", z64, z64_size, None, ""),
                    ("zip64 end of central directory locator", "end_record", locator, 20, None,
                     ""),
                    ("end of central directory", "end_record", eocd, 22, None, "")]
    assert z64 + z64_size == locator and cd + cd_size == z64


@pytest.mark.parametrize("fast", [True, False])
def test_debug_events_without_values_outputs_and_allocator_ids(tmp_path, monkeypatch, fast):
    t = Trace()
    lst = t.tensor_list([t.tensor(6, [1], [1], 0), t.tensor(6, [2], [1], 4),
                         t.tensor(4, [1], [1], 16)])
    evs = [
        t.event(debug=t.debug(3, 1, None, name="bare", dd_str="s")),
        t.event(allocation=t.allocation(-1, 5)),
        t.event(debug=t.debug(0, 2, t.value(S.Value.INT, int_value=t.wrapper("i64", 1 << 40),
                                            output=t.wrapper("bool", False)))),
        t.event(debug=t.debug(0, 3, t.value(S.Value.TENSOR_LIST, tensor_list=lst))),
        t.event(allocation=t.allocation(0, 6)),
        t.event(debug=t.debug(0, 4, None)),
        t.event(debug=t.debug(0, 5, t.value(S.Value.TENSOR, tensor=t.tensor(6, [2], [1], 24),
                                            output=t.wrapper("bool", True)))),
        t.event(debug=t.debug(0, 6, t.value(S.Value.NULL, output=t.wrapper("bool", False)))),
        t.event(debug=t.debug(0, 7, t.value(S.Value.BOOL, bool_value=t.wrapper("bool", False)))),
        t.event(debug=t.debug(0, 8, t.value(S.Value.FLOAT, float_value=t.wrapper("f32", 1.1)))),
        t.event(allocation=t.allocation(1, 7)),
    ]
    data = t.finish([t.run("Execute", evs, allocators=["a0", "a1"])])
    art = open_trace(tmp_path, data, bytes(40), fast, monkeypatch)
    dv = art.frames["debug_values"]
    f32 = float(np.float32(1.1))
    check_frame(dv.drop(columns=["block", "iteration", "file", "table_offset", "name",
                                 "delegate_debug_id", "delegate_debug_id_int", "dtype",
                                 "strides"]), {
        "run": ("int64", [0] * 10),
        "index": ("int64", [0, 2, 3, 3, 3, 5, 6, 7, 8, 9]),
        "list_index": ("Int64", [None, None, 0, 1, 2, None, None, None, None, None]),
        "chain": ("int64", [3, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        "instruction": ("int64", [1, 2, 3, 3, 3, 4, 5, 6, 7, 8]),
        "delegate_debug_id_str": ("string", ["s"] + [None] * 9),
        "type": ("category", [None, "Int", "TensorList", "TensorList", "TensorList", None,
                              "Tensor", "Null", "Bool", "Float"]),
        "output": ("boolean", [None, False, None, None, None, None, True, False, None, None]),
        "value": ("object", [None, 1 << 40, None, None, None, None, None, None, False, f32]),
        "tensor": ("string", [None, None, "0/3/0", "0/3/1", "0/3/2", None, "0/6", None, None,
                              None]),
        "shape": ("object", [None, None, (1,), (2,), (1,), None, (2,), None, None, None]),
        "nbytes": ("Int64", [None, None, 4, 8, 8, None, 8, None, None, None]),
        "offset": ("Int64", [None, None, 0, 4, 16, None, 24, None, None, None]),
        "debug_offset": ("Int64", [None, None, 0, 4, 16, None, 24, None, None, None]),
    })
    assert values(dv, "name") == ["s"] + [None] * 9
    assert values(dv, "dtype") == [None, None, "float32", "float32", "int64", None, "float32",
                                   None, None, None]
    assert values(dv, "table_offset") == walk(tmp_path / "t.etdp")["debug"]
    al = art.frames["allocations"]
    assert values(al, "index") == [1, 4, 10]
    assert values(al, "allocator_id") == [-1, 0, 1]
    assert values(al, "allocator") == [None, "a0", "a1"]
    assert values(art.frames["runs"], "allocators") == ["a0; a1"]
    # (flatc's decoder refuses a debug event without a value: no oracle run here)


def test_map_json_bounds_and_offsets(tmp_path, monkeypatch):
    p = map_record(tmp_path, dh={"forward": {"1" * 18: [3], "0007": 4}})
    assert wb.open(p)._parsed.extra.etrecord.debug_handles == [
        ("forward", int("1" * 18), 0, 3), ("forward", 7, 0, 4)]
    # bad JSON: stored members name the byte where parsing failed, compressed ones cannot
    for deflate, want in (((), "offset"), (("debug_handle_map",), None)):
        p = write_record(tmp_path, [("debug_handle_map", b'{"forward": [}')], deflate=deflate)
        e = record_error(p, frames=False)
        assert type(e) is wb.CorruptError and e.structure == "zip member 'debug_handle_map'"
        assert e.offset == (data_offset_of(p, "debug_handle_map") + 13 if want else None)
        assert e.detail.startswith("not valid JSON")
    monkeypatch.setattr(RR, "JSON_LIMIT", 10)
    for deflate in ((), ("debug_handle_map",)):
        p = write_record(tmp_path, [("debug_handle_map", json.dumps({"forward": {"0": 12345}}))],
                         deflate=deflate)
        e = record_error(p, frames=False)
        assert isinstance(e, wb.ArtifactError) and "10-byte limit" in e.detail, e
        assert "debug_handle_map" in e.structure
    p = write_record(tmp_path, [("debug_handle_map", b"{}")])
    assert wb.open(p).frames["debug_handles"].empty  # within the limit


@pytest.mark.parametrize("fast", [True, False])
def test_absent_fields_take_the_schema_defaults(tmp_path, monkeypatch, fast):
    t = Trace()
    evs = [t.event(profile=t.profile(None, None, None, None, None)),
           t.event(allocation=t.allocation(None, None)),
           t.event(debug=t.debug(None, None, t.value(S.Value.INT, int_value=t._table([])))),
           t.event(debug=t.debug(None, None, t.value(S.Value.DOUBLE,
                                                     double_value=t._table([])))),
           t.event(debug=t.debug(None, None, t.value(S.Value.BOOL, bool_value=t._table([]),
                                                     output=t._table([])))),
           t.event(debug=t.debug(None, None, t._table([])))]  # a Value with no field: Null
    root_runs = [t._table([(S.RunData.events, "off", t._offsets(evs))])]  # no name, no index
    data = t.finish(root_runs)
    art = open_trace(tmp_path, data, None, fast, monkeypatch)
    r = art.frames["runs"]
    assert values(r, "block") == [None] and values(r, "bundled_input_index") == [None]
    assert values(r, "iteration") == [0] and values(r, "allocators") == [""]
    ev = art.frames["events"]
    assert (values(ev, "chain"), values(ev, "instruction"), values(ev, "start"),
            values(ev, "end"), values(ev, "duration")) == ([0], [-1], [0], [0], [0])
    assert values(ev, "kind") == ["other"] and values(ev, "block") == [None]
    assert values(ev, "delegate_debug_id_int") == [None] and values(ev, "name") == [None]
    al = art.frames["allocations"]
    assert values(al, "allocator_id") == [0] and values(al, "size") == [0]
    assert values(al, "allocator") == [None]
    dv = art.frames["debug_values"]
    assert values(dv, "chain") == [0] * 4 and values(dv, "instruction") == [-1] * 4
    assert values(dv, "type") == ["Int", "Double", "Bool", "Null"]
    assert values(dv, "value") == [0, 0.0, False, None]
    assert [type(v) for v in values(dv, "value")[:3]] == [int, float, bool]
    assert values(dv, "output") == [None, None, False, None]
    assert values(dv, "delegate_debug_id_int") == [None] * 4


def test_delegate_metadata_at_the_end_of_the_flatbuffer_is_read_vectorised(tmp_path,
                                                                           monkeypatch):
    """A profile event's delegate_debug_metadata bytes that end the flatbuffer are read by the
    vectorised path itself (no fallback): exact offset, size and bytes, as the scalar path and
    flatc's decoding give them."""
    meta = bytes(range(1, 33))
    t = Trace()
    first = t.profile(None, 0, 1, 10, 20, dd_int=5, meta=meta)  # the first object: the tail
    data = t.finish([t.run("Execute", [t.event(profile=first),
                                       t.event(profile=t.profile("b", 0, 2, 30, 40))])])
    assert data.endswith(meta)
    got = {}
    for fast in (True, False):
        ev = open_trace(tmp_path, data, None, fast, monkeypatch).frames["events"]
        got[fast] = (values(ev, "metadata_offset"), values(ev, "metadata_size"))
    assert got[True] == got[False] == ([len(data) - len(meta), None], [len(meta), None])
    assert walk(tmp_path / "t.etdp")["meta"] == [(len(data) - len(meta), len(meta)), None]
    assert [e.profile_event.delegate_debug_metadata for e in flatcc(data).run_data[0].events] \
        == [meta, None]
