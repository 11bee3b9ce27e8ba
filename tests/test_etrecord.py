"""ETRecord archives: the reader against ExecuTorch's ``parse_etrecord`` and Inspector, and
against Python's ``zipfile`` + ``json`` for records today's ExecuTorch cannot parse.

The samples are made by ``sample_models/make_traces.py``; the corpus holds a 2026 record
(``examples/devtools/scripts/etrecord.bin``) and a 2024 one whose zip directory no longer
matches its members (see ``test_etrecord_2024``). Hostile archives are built in the tests.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import time
import tracemalloc
import warnings
import zipfile
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

import workbench as wb
from workbench.formats import etrecord
from workbench.frames import SCHEMAS

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_models"
CORPUS = ROOT.parent / "shared" / "corpus"
CORPUS_2026 = CORPUS / "examples__devtools__scripts__etrecord.bin"
CORPUS_2024 = CORPUS / "pytorch__executorch__examples__dev_tools__scripts__etrecord.bin"
RECORDS = ("mlp_portable", "mlp_xnnpack")
FRAMES = ("segments", "tensors", "members", "programs", "nodes", "debug_handles",
          "delegate_map")
EDGE = "edge_dialect_exported_program/forward"


def record(name: str) -> Path:
    p = SAMPLES / f"{name}.etrecord"
    if not p.is_file():
        pytest.skip(f"{p.name} missing: run sample_models/make_traces.py")
    return p


def corpus(p: Path) -> Path:
    if not p.is_file():
        pytest.skip(f"no {p.name} (../shared/corpus is absent)")
    return p


def parse(path: Path):
    """The oracle: ExecuTorch's own ETRecord parser (unpickles; fine on our own samples)."""
    mod = pytest.importorskip("executorch.devtools.etrecord")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mod.parse_etrecord(str(path))


def handle_map(df: pd.DataFrame) -> dict:
    """Rebuild ``{method: {instruction: [handles]}}`` from the debug_handles frame."""
    out: dict = {}
    for r in df.drop_duplicates(["method", "instruction", "position"]).itertuples():
        out.setdefault(r.method, {}).setdefault(str(r.instruction), []).append(r.debug_handle)
    return out


def as_lists(m: dict) -> dict:
    return {meth: {k: v if isinstance(v, list) else [v] for k, v in inner.items()}
            for meth, inner in m.items()}


def graph_nodes(ep) -> list[tuple]:
    """(name, op, debug handle, stack trace, innermost module) of an ExportedProgram."""
    rows = []
    for n in ep.graph.nodes:
        if n.op != "call_function":
            continue
        t = n.target
        op = t.__name__ if type(t).__name__ == "EdgeOpOverload" else str(t)
        stack = n.meta.get("nn_module_stack")
        module = list(stack.values())[-1][0] if stack else None
        handle = n.meta.get("debug_handle")
        rows.append((n.name, op, handle, n.meta.get("stack_trace"), module))
    return rows


def our_nodes(art: wb.Artifact, program: str) -> list[tuple]:
    nd = art.frames["nodes"]
    nd = nd[(nd["program"] == program) & (nd["graph"] == "")]
    return [(r.name, r.op, None if pd.isna(r.debug_handle) else r.debug_handle,
             None if pd.isna(r.stack_trace) else r.stack_trace,
             None if pd.isna(r.module) else r.module) for r in nd.itertuples()]


# ----------------------------------------------------------------------------- the oracles


@pytest.mark.parametrize("name", RECORDS)
def test_against_parse_etrecord(name):
    path = record(name)
    art = wb.open(path)
    assert art.format == "etrecord"
    want = parse(path)
    assert handle_map(art.frames["debug_handles"]) == as_lists(want._debug_handle_map)
    dm: dict = {}
    for r in art.frames["delegate_map"].drop_duplicates(
            ["method", "instruction", "delegate_debug_id", "position"]).itertuples():
        entry = dm.setdefault(r.method, {}).setdefault(str(r.instruction),
                                                       {"name": r.backend, "delegate_map": {}})
        if not pd.isna(r.delegate_debug_id):
            entry["delegate_map"].setdefault(r.delegate_debug_id, []).append(r.debug_handle)
    assert dm == {m: v for m, v in want._delegate_map.items() if v}
    assert our_nodes(art, EDGE) == graph_nodes(want.edge_dialect_program)
    assert our_nodes(art, "exported_program") == graph_nodes(want.exported_program)
    assert art.info["export_graph_id"] == want.export_graph_id
    progs = art.frames["programs"].set_index("program")
    assert progs.loc[EDGE, "stage"] == "edge" and progs.loc[EDGE, "method"] == "forward"
    assert progs.loc["exported_program", "stage"] == "export"


@pytest.mark.parametrize("name", RECORDS)
def test_join_equals_the_inspector(name):
    """With the trace and the record, every instruction event gets the same debug handles
    and operator types as the Inspector gives it."""
    rec = record(name)
    etdp = SAMPLES / f"{name}.etdp"
    if not etdp.is_file():
        pytest.skip("no trace sample")
    devtools = pytest.importorskip("executorch.devtools")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ins = devtools.Inspector(etdump_path=str(etdp), etrecord=str(rec))
    dh = wb.open(rec).frames["debug_handles"]
    checked = 0
    for block in ins.event_blocks:
        for e in block.events:
            if not e.op_types:
                continue
            rows = dh[(dh["method"] == "forward") & (dh["instruction"] == e._instruction_id)]
            handles = list(dict.fromkeys(rows["debug_handle"]))
            want = e.debug_handles if isinstance(e.debug_handles, list) else [e.debug_handles]
            assert handles == want
            assert list(rows["op"].astype(str)) == e.op_types
            checked += 1
    assert checked > 0


def test_2026_corpus_against_zipfile_and_json():
    """ExecuTorch 1.5.1 cannot parse this record (it wants members written since 2025);
    Python's zipfile and json are the oracle for what it stores."""
    path = corpus(CORPUS_2026)
    art = wb.open(path)
    assert art.format == "etrecord"
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        mem = art.frames["members"]
        assert list(mem["name"]) == [i.filename for i in infos]
        assert list(mem["header_offset"]) == [i.header_offset for i in infos]
        assert list(mem["size"]) == [i.compress_size for i in infos]
        assert list(mem["crc32"]) == [i.CRC for i in infos]
        assert list(mem.loc[mem["pickled"], "name"]) == [
            "aten_dialect_output/forward_state_dict", "edge_dialect_exported_program_state_dict"]
        nodes = art.frames["nodes"]
        for program in ("aten_dialect_output/forward", "edge_dialect_exported_program"):
            j = json.loads(z.read(program))
            want = j["graph_module"]["graph"]["nodes"]
            got = nodes[nodes["program"] == program]
            assert list(got["target"].astype(str)) == [n["target"] for n in want]
            assert list(got["stack_trace"]) == [n["metadata"].get("stack_trace") for n in want]
            assert list(got["debug_handle"].fillna(-1)) == [
                int(n["metadata"].get("debug_handle", -1)) for n in want]
        assert json.loads(z.read("debug_handle_map")) == {}
    assert list(nodes["name"]) == ["mul", "aten_mul_tensor"]  # from the outputs: no node names
    assert art.frames["debug_handles"].empty and art.frames["delegate_map"].empty
    progs = art.frames["programs"]
    assert list(progs["stage"]) == ["extra", "edge"] and list(progs["method"]) == ["forward"] * 2


def test_etrecord_2024():
    """The 2024 record's zip directory is stale: a later repo-wide rename (examples/sdk ->
    examples/dev_tools) grew two JSON members by 6 bytes each without updating sizes or
    offsets, so the central directory sits 12 bytes after where the end record says. Python's
    zipfile opens it, lists its 7 members and reads only some; so do we, flagging the rest."""
    path = corpus(CORPUS_2024)
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        readable = {}
        for i in infos:
            try:
                readable[i.filename] = z.read(i)
            except (zipfile.BadZipFile, OSError, ValueError):
                pass
    art = wb.open(path)
    assert art.format == "etrecord"
    mem = art.frames["members"].sort_values("index")
    assert list(mem["name"]) == [i.filename for i in infos]
    assert list(mem["header_offset"]) == [i.header_offset for i in infos]
    assert list(mem["size"]) == [i.compress_size for i in infos]
    assert [not d for d in mem["damaged"]] == [i.filename in readable for i in infos]
    assert 0 < len(readable) < len(infos)
    found = art.validate()
    errors = found[found["severity"] == "error"]
    for name in mem["name"][mem["damaged"]]:
        hit = errors[errors["message"].str.contains(repr(name), regex=False)]
        assert len(hit) == 1 and hit["offset"].notna().all(), (name, errors)
        assert "bad signature" in hit["message"].iloc[0]
    # readable members: the same bytes, the same JSON
    ok = mem[~mem["damaged"]]
    for name, off, size in zip(ok["name"], ok["offset"], ok["size"]):
        raw = path.read_bytes()[off:off + size]
        assert raw == readable[name], name
    assert json.loads(readable["debug_handle_map"]) == {}
    assert json.loads(readable["delegate_map"]) == {}
    assert art.frames["debug_handles"].empty and art.frames["delegate_map"].empty
    # frames of damaged members are empty; segments still cover every byte
    assert art.frames["nodes"].empty
    assert set(art.frames["programs"]["nodes"]) == {0}
    seg = art.segments
    assert seg["size"].sum() == os.path.getsize(path)
    ends = (seg["offset"] + seg["size"]).to_numpy()
    assert seg["offset"].iloc[0] == 0 and (seg["offset"].to_numpy()[1:] == ends[:-1]).all()
    assert "damaged" in set(seg["kind"])


def test_etrecord_2024_damaged_member_raises_cleanly():
    path = corpus(CORPUS_2024)
    art = wb.open(path)
    zd = art._parsed.extra.zip
    e = zd.get("edge_dialect_exported_program")
    with pytest.raises(wb.ArtifactError) as ei:
        zd.view(e)
    assert ei.value.file == path.name and ei.value.offset is not None
    assert "edge_dialect_exported_program" in str(ei.value)


# ----------------------------------------------------------------------------- frames


@pytest.mark.parametrize("name", [*RECORDS, "corpus"])
def test_frames_and_segments(name):
    path = corpus(CORPUS_2026) if name == "corpus" else record(name)
    art = wb.open(path)
    assert set(art.frames) == set(FRAMES)
    for frame in FRAMES:
        df = art.frames[frame]
        declared = [c.name for c in SCHEMAS[frame]]
        assert [c for c in declared if c in df.columns] == list(df.columns), frame
    seg = art.segments
    assert seg["size"].sum() == os.path.getsize(path)
    ends = (seg["offset"] + seg["size"]).to_numpy()
    assert seg["offset"].iloc[0] == 0 and (seg["offset"].to_numpy()[1:] == ends[:-1]).all()
    assert set(seg["kind"]) <= {"header", "graph", "metadata", "pickle", "other", "padding",
                                "central_directory", "end_record", "data_descriptor"}
    assert art.tensors.empty
    mem = art.frames["members"]
    assert mem["pickled"].equals(mem["kind"].isin(
        ["state_dict", "constants", "example_inputs", "reference_outputs",
         "representative_inputs"]))
    assert art.validate().query("severity == 'error'").empty


def test_sample_nodes_modules_and_targets():
    art = wb.open(record("mlp_portable"))
    nd = art.frames["nodes"]
    edge = nd[nd["program"] == EDGE]
    assert list(edge["op"].astype(str)) == ["aten.permute_copy.default", "aten.addmm.default",
                                            "aten.relu.default", "aten.permute_copy.default",
                                            "aten.addmm.default"]
    assert list(edge["debug_handle"]) == [1, 1, 2, 3, 3]
    assert list(edge["module"]) == ["fc1", "fc1", "relu", "fc2", "fc2"]
    assert edge["module_type"].astype(str).iloc[0] == "torch.nn.modules.linear.Linear"
    assert edge["stack_trace"].str.contains("make_samples.py").all()
    dh = art.frames["debug_handles"]
    assert list(dh.loc[dh["instruction"] == 1, "node"]) == ["aten_permute_copy_default",
                                                           "aten_addmm_default"]
    xnn = wb.open(record("mlp_xnnpack")).frames["delegate_map"]
    assert list(xnn["backend"].astype(str)) == ["XnnpackBackend"]
    assert xnn["delegate_debug_id"].isna().all()


def test_pt2_is_still_pt2_and_detection():
    pt2 = SAMPLES / "mlp.pt2"
    if pt2.is_file():
        assert wb.open(pt2).format == "pt2"
    head = record("mlp_portable").read_bytes()[:64]
    assert etrecord.detect(head)
    assert not etrecord.detect(head[:40])
    assert not etrecord.detect(b"PK\x03\x04" + bytes(22) + b"\x0b\x00\x00\x00" + b"ETRECORD_V1")


# ----------------------------------------------------------------------------- synthetic records


def make_record(tmp_path: Path, members: dict[str, bytes | str], marker: bool = True,
                name: str = "rec.etrecord", compress: int = zipfile.ZIP_STORED) -> Path:
    p = tmp_path / name
    with zipfile.ZipFile(p, "w", compression=compress) as z:
        if marker:
            z.writestr("ETRECORD_V0", "")
        for k, v in members.items():
            z.writestr(k, v)
    return p


def program_json(nodes: list[dict], nested: dict | None = None) -> str:
    return json.dumps({"graph_module": {"graph": {"nodes": nodes, "inputs": [], "outputs": []}},
                       "schema_version": {"major": 8, "minor": 1}, "dialect": "EDGE"})


def node(name: str, target: str, handle: str | None = None, module: str | None = None,
         inputs: list | None = None) -> dict:
    meta = {"stack_trace": f'File "m.py", line 1, in {name}'}
    if handle is not None:
        meta["debug_handle"] = handle
    if module:
        meta["nn_module_stack"] = f"L__self__,,M;L__self__{module},{module},torch.nn.Linear"
    return {"name": name, "target": target, "inputs": inputs or [], "outputs": [],
            "metadata": meta}


def test_delegate_map_nested_graphs_and_compressed_members(tmp_path):
    sub = {"nodes": [node("inner", "torch.ops.aten.sin.default", "7")]}
    cond = node("cond", "torch.ops.higher_order.cond", "6",
                inputs=[{"name": "true_fn", "arg": {"as_graph": {"name": "true_graph_0",
                                                                 "graph": sub}}}])
    members = {
        "edge_dialect_exported_program/forward": program_json([
            node("a", "executorch.exir.dialects.edge.ops.aten.add.Tensor", "1", "fc"),
            node("b", "executorch.exir.dialects.edge.ops.aten.mul.Tensor", "2"), cond]),
        "edge_dialect_exported_program/forward_state_dict": b"\x80\x04K\x01.",
        "debug_handle_map": json.dumps({"forward": {"0": 1, "3": [2, 6]}}),
        "delegate_map": json.dumps({"forward": {"1": {"name": "DemoBackend", "delegate_map": {
            "10": [1, 2], "conv #1": 6}}}}),
        "instruction_id_to_num_outs_map": json.dumps({"forward": {"0": 1}}),
        "export_graph_id": "123",
        "reference_outputs": b"PK\x03\x04rest-of-a-torch-save",
    }
    for compress in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        p = make_record(tmp_path, members, compress=compress)
        art = wb.open(p)
        nd = art.frames["nodes"]
        assert list(nd["graph"]) == ["", "", "", "true_graph_0"]
        assert list(nd["debug_handle"]) == [1, 2, 6, 7]
        assert list(nd["op"].astype(str)) == ["aten.add.Tensor", "aten.mul.Tensor",
                                              "higher_order.cond", "aten.sin.default"]
        assert nd["module"].iloc[0] == "fc"
        dm = art.frames["delegate_map"]
        assert list(zip(dm["delegate_debug_id"], dm["debug_handle"], dm["node"])) == [
            ("10", 1, "a"), ("10", 2, "b"), ("conv #1", 6, "cond")]
        dh = art.frames["debug_handles"]
        assert handle_map(dh) == {"forward": {"0": [1], "3": [2, 6]}}
        mem = art.frames["members"].set_index("name")
        assert mem.loc["edge_dialect_exported_program/forward_state_dict", "pickled"]
        assert mem.loc["reference_outputs", "pickled"]
        assert mem.loc["instruction_id_to_num_outs_map", "kind"] == "num_outs_map"
        assert art.info["export_graph_id"] == 123
        assert art.segments["size"].sum() == p.stat().st_size


def test_flat_maps_of_older_writers(tmp_path):
    p = make_record(tmp_path, {
        "edge_dialect_exported_program": program_json([node("x", "t.add", "4")]),
        "debug_handle_map": json.dumps({"0": [4], "1": 4}),
        "delegate_map": json.dumps({"2": {"name": "B", "delegate_map": {"0": 4}}}),
    })
    art = wb.open(p)
    dh = art.frames["debug_handles"]
    assert dh["method"].isna().all() and list(dh["node"]) == ["x", "x"]
    dm = art.frames["delegate_map"]
    assert list(dm["backend"].astype(str)) == ["B"] and list(dm["node"]) == ["x"]


# ----------------------------------------------------------------------------- hostile records


def fails(path: Path, cls: type, text: str, frames: bool = True) -> wb.ArtifactError:
    with pytest.raises(cls) as info:
        art = wb.open(path)
        if frames:
            for name in art.frames:
                art.frames[name]
    e = info.value
    assert e.file == path.name and e.offset is not None and text in str(e), str(e)
    return e


def test_bad_json_members(tmp_path):
    good = program_json([node("x", "t.add", "1")])
    p = make_record(tmp_path, {"e/forward": good, "debug_handle_map": '{"forward": {"0": [1,'})
    e = fails(p, wb.CorruptError, "not valid JSON", frames=False)
    with zipfile.ZipFile(p) as z:
        info = z.getinfo("debug_handle_map")
    assert "zip member 'debug_handle_map'" in e.structure
    assert e.offset >= info.header_offset + 30
    for bad, text in ((b'{"forward": {"zero": 1}}', "not a non-negative integer"),
                      (b'{"forward": {"0": "1"}}', "is not an integer"),
                      (b'{"forward": {"0": true}}', "is not an integer"),
                      (b"[1, 2]", "expected a JSON object"),
                      (b"\xff\xfe{}", "JSON"),
                      (b"{" * 200_000, "JSON")):
        p = make_record(tmp_path, {"e/forward": good, "debug_handle_map": bad})
        fails(p, wb.CorruptError, text, frames=False)
    p = make_record(tmp_path, {"delegate_map": json.dumps({"forward": {"0": [1]}})})
    fails(p, wb.CorruptError, "not a JSON object", frames=False)


def test_bad_programs_fail_when_their_frames_are_built(tmp_path):
    cases = (
        ('{"graph_module": {"graph": {"nodes": {}}}}', "nodes is not a list"),
        ('{"graph_module": {"graph": {"nodes": [3]}}}', "a node is not a JSON object"),
        ('{"graph_module": {"graph": {"nodes": [{"target": 5}]}}}', "target is not a string"),
        ('{"graph_module": 1}', "graph_module.graph is missing"),
        ('{"graph_module": {"graph": {"nodes": [' * 1 + "[" * 100_000, "JSON"),
        ('{"graph_module": {"graph": {"nodes": [{"target": "t", "metadata": []}]}}}',
         "metadata is not a JSON object"),
    )
    for text, want in cases:
        p = make_record(tmp_path, {"edge_dialect_exported_program/forward": text})
        art = wb.open(p)  # programs are parsed on demand
        assert art.frames["members"]["kind"].iloc[1] == "program"
        t0 = time.perf_counter()
        e = fails(p, wb.CorruptError, want)
        assert "edge_dialect_exported_program/forward" in e.structure
        assert time.perf_counter() - t0 < 5


def test_declared_sizes_are_bounded(tmp_path, monkeypatch):
    from workbench.formats.etrecord import reader

    p = make_record(tmp_path, {"debug_handle_map": json.dumps({"forward": {"0": 1}}) + " " * 5000},
                    compress=zipfile.ZIP_DEFLATED)
    monkeypatch.setattr(reader, "JSON_LIMIT", 1000)
    fails(p, wb.CorruptError, "exceeds the 1000-byte limit", frames=False)


def test_no_marker_is_not_an_etrecord(tmp_path):
    p = make_record(tmp_path, {"debug_handle_map": "{}"}, marker=False)
    assert not etrecord.detect(p.read_bytes()[:64])
    assert wb.open(p).format == "pt2"


@pytest.mark.slow  # a fuzz loop / runtime run: seconds (the mutation runs skip it)
def test_truncations_and_mutations_raise_only_artifact_errors(tmp_path):
    data = record("mlp_xnnpack").read_bytes()
    rng = random.Random(16)
    outcomes: Counter = Counter()
    tracemalloc.start()
    t0 = time.perf_counter()
    cases = [data[:cut] for cut in range(0, len(data), max(1, len(data) // 120))]
    for _ in range(200):
        bad = bytearray(data)
        for _ in range(rng.choice((1, 3, 8))):
            at = rng.randrange(len(bad))
            bad[at] = rng.randrange(256)
        cases.append(bytes(bad))
    p = tmp_path / "bad.etrecord"
    for case in cases:
        p.write_bytes(case)
        try:
            art = wb.open(p)
            for name in art.frames:
                art.frames[name]
            art.validate()
            outcomes["ok"] += 1
        except wb.ArtifactError as e:
            assert e.file == p.name, str(e)
            outcomes[type(e).__name__] += 1
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 120 and peak < 128 << 20, (elapsed, peak)
    assert outcomes["ok"] > 0 and len(outcomes) > 2, outcomes


# ----------------------------------------------------------------------------- safety


def test_reading_starts_no_process_unpickles_nothing_imports_no_torch():
    files = [str(record(n)) for n in RECORDS]
    if CORPUS_2026.is_file():
        files.append(str(CORPUS_2026))
    script = f"""
import os, pickle, subprocess, sys
def refuse(*a, **k):
    raise AssertionError("forbidden call")
subprocess.Popen = subprocess.run = subprocess.call = subprocess.check_output = refuse
os.system = os.popen = os.posix_spawn = os.posix_spawnp = os.execv = os.fork = refuse
pickle.loads = pickle.load = refuse
pickle.Unpickler = refuse
import workbench as wb
for path in {files!r}:
    art = wb.open(path)
    for name in art.frames:
        art.frames[name]
    art.validate()
    assert art.frames["members"]["pickled"].any() or "etrecord.bin" in path
bad = [m for m in ("torch", "executorch") if m in sys.modules]
print("OK" if not bad else f"imported {{bad}}")
"""
    res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "OK", res.stdout + res.stderr


def test_members_are_never_extracted(tmp_path):
    """A pickled member that would run code if loaded: listed, flagged, never loaded."""
    payload = io.BytesIO()
    payload.write(b"\x80\x04cos\nsystem\n(S'touch " + str(tmp_path / "pwned").encode()
                  + b"'\ntR.")
    p = make_record(tmp_path, {"exported_program": program_json([]),
                               "exported_program_constants": payload.getvalue(),
                               "../../escape": b"x"})
    art = wb.open(p)
    for name in art.frames:
        art.frames[name]
    mem = art.frames["members"].set_index("name")
    assert mem.loc["exported_program_constants", "pickled"]
    assert mem.loc["../../escape", "unsafe_name"]
    assert not (tmp_path / "pwned").exists()
