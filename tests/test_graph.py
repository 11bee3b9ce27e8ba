"""wb.graph / wb.delegation: the program as nodes and edges, checked against ExecuTorch's own
deserializer (instruction counts), the wheel's flatc (XNNPACK node counts), the serialized
graph JSON (edges) and tiny hostile frames built here (defects are drawn, not refused)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import zipfile
from collections import Counter

import pandas as pd
import pytest

import workbench as wb
from workbench.graphs import EDGE_COLUMNS, NODE_COLUMNS, Graph
from workbench.graphs._pte import CYCLE, DANGLING

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
CORPUS = ROOT.parent / "shared" / "corpus"
PTE_LIKE = (".pte", ".bpte", ".ff")


def _programs() -> list[pathlib.Path]:
    files = sorted(SAMPLES.glob("*.pte")) + sorted(SAMPLES.glob("*.bpte")) + \
        sorted(SAMPLES.glob("*.pt2")) + sorted(SAMPLES.glob("*.etrecord"))
    if CORPUS.is_dir():
        files += sorted(p for p in CORPUS.iterdir()
                        if p.suffix in (*PTE_LIKE, ".pt2", ".ep") or "etrecord" in p.name)
    return files


PROGRAMS = _programs()
PTES = [p for p in PROGRAMS if p.suffix in (".pte", ".ff")]


def _ids(paths):
    return [p.name[-45:] for p in paths]


# -- every program converts, with the columns and attributes promised ---------------------------

@pytest.mark.parametrize("path", PROGRAMS, ids=_ids(PROGRAMS))
def test_every_program_converts(path):
    g = wb.graph(path)
    assert isinstance(g, Graph)
    assert list(g.nodes.columns) == list(NODE_COLUMNS)
    assert list(g.edges.columns) == list(EDGE_COLUMNS)
    assert len(g.nodes) > 0 or g.format == "etrecord"  # an old ETRecord may hold no nodes
    for m, nodes in g.nodes.groupby("method"):
        ids = nodes["id"]
        assert ids.is_unique, m
        edges = g.edges[g.edges["method"] == m]
        # every edge joins two drawn nodes of the same method
        assert set(edges["source"]) <= set(ids), m
        assert set(edges["target"]) <= set(ids), m
    if g.format == "pte":
        calls = g.nodes[g.nodes["kind"].isin(["kernel", "delegate"])]
        assert calls["instruction"].notna().all()
        inside = g.nodes[g.nodes["namespace"].fillna("") != ""]
        assert inside["delegate_index"].notna().all()
        assert inside["instruction"].isna().all()
        assert g.defects.empty, g.defects  # real programs have no defects


def _oracle_calls(path: pathlib.Path) -> dict[str, Counter]:
    """Per method, KernelCall / DelegateCall instruction counts from ExecuTorch's deserializer."""
    ser = pytest.importorskip("executorch.exir._serialize._program")
    program = ser.deserialize_pte_binary(path.read_bytes()).program
    out = {}
    for plan in program.execution_plan:
        c = Counter(type(i.instr_args).__name__ for chain in plan.chains
                    for i in chain.instructions)
        out[plan.name] = c
    return out


@pytest.mark.parametrize("path", PTES, ids=_ids(PTES))
def test_instruction_nodes_equal_kernel_and_delegate_calls(path):
    try:
        oracle = _oracle_calls(path)
    except pytest.skip.Exception:
        raise
    except Exception as e:  # an older file the deserializer cannot read
        pytest.skip(f"the oracle cannot read {path.name}: {type(e).__name__}")
    g = wb.graph(path)
    for method, c in oracle.items():
        nodes = g.nodes[(g.nodes["method"] == method) & g.nodes["instruction"].notna()]
        assert (nodes["kind"] == "kernel").sum() == c["KernelCall"], method
        assert (nodes["kind"] == "delegate").sum() == c["DelegateCall"], method
        assert len(nodes) == c["KernelCall"] + c["DelegateCall"]


def _xnn_files() -> list[pathlib.Path]:
    out = []
    for p in PTES:
        try:
            if (wb.open(p).frames["delegates"]["backend"].astype(str) == "xnnpack").any():
                out.append(p)
        except wb.ArtifactError:
            continue
    return out


XNN = _xnn_files()


@pytest.mark.parametrize("path", XNN, ids=_ids(XNN))
def test_xnnpack_nodes_equal_the_xnnpack_graph(path, tmp_path):
    from test_xnnpack import flatc_json, oracle_blob

    xh = pytest.importorskip("executorch.backends.xnnpack.serialization.xnnpack_graph_serialize")
    g = wb.graph(path)
    dels = wb.open(path).frames["delegates"]
    for _, d in dels[dels["backend"].astype(str) == "xnnpack"].iterrows():
        blob = oracle_blob(path, d["method"], int(d["index"]))
        if blob[4:8] == b"XH00":
            h = xh.XNNHeader.from_bytes(blob[:xh.XNNHeader.EXPECTED_LENGTH])
            fb = blob[h.flatbuffer_offset:h.flatbuffer_offset + h.flatbuffer_size]
        else:
            fb = blob
        j = flatc_json(fb, fb[4:8].decode("latin-1"), tmp_path)
        inside = g.nodes[(g.nodes["method"] == d["method"])
                         & (g.nodes["delegate_index"] == int(d["index"]))
                         & (g.nodes["kind"] == "delegate_node")]
        assert len(inside) == len(j["xnodes"]), (d["method"], d["index"])
        assert Counter(inside["op"]) == Counter(
            n["xnode_union_type"].removeprefix("XNN") for n in j["xnodes"])


def test_edges_follow_the_value_indices(sample):
    path = sample("mlp_portable.pte")
    art = wb.open(path)
    g = wb.graph(art)
    ins = art.frames["instructions"]
    # every tensor an instruction reads arrives on an edge carrying its value index
    for instr, reads in zip(ins["instruction"], ins["reads"]):
        tensors = [v for v in reads if v in set(art.tensors["value"])]
        got = g.edges[g.edges["target"] == f"i{instr}"]["value"].tolist()
        assert sorted(got) == sorted(tensors), instr
    e = g.edges.set_index("value")
    t = art.tensors.set_index("value")
    for v in e.index:
        assert e.loc[v, "bytes"] == t.loc[v, "nbytes"] and e.loc[v, "dtype"] == t.loc[v, "dtype"]
    kinds = g.nodes["kind"].value_counts()
    assert kinds["constant"] == (art.tensors["storage"] == "segment").sum()
    assert kinds["input"] == 1 and kinds["output"] == 1


def test_xnnpack_group_is_wired_to_the_outer_graph(sample):
    g = wb.graph(sample("mlp_xnnpack_qc8.pte"))
    call = g.nodes[g.nodes["kind"] == "delegate"].iloc[0]
    assert call["instruction"] == 0 and call["backend"] == "xnnpack" and call["bytes"] > 0
    fed = g.edges[g.edges["source"] == call["id"]]["target"].tolist()
    assert fed == ["delegate0/in0"]
    out = g.edges[g.edges["target"].str.startswith("out")]
    assert out["source"].tolist() == ["delegate0/out8"]
    consts = g.nodes[g.nodes["kind"] == "delegate_constant"]
    assert set(consts["quant"]) == {"per_channel", "none"}
    assert set(consts["storage"]) == {"named_data"}


def test_other_backends_stay_one_node_with_the_blob_size(sample):
    path = sample("mlp_vulkan.pte")
    g = wb.graph(path)
    d = wb.open(path).frames["delegates"].iloc[0]
    call = g.nodes[g.nodes["kind"] == "delegate"]
    assert len(call) == 1 and call.iloc[0]["bytes"] == d["size"]
    assert (g.nodes["namespace"].fillna("") == "").all()


# -- .pt2 and ETRecord: from the serialized graph, without torch -----------------------------

def _serialized_graph(path: pathlib.Path, suffix: str) -> dict:
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith(suffix))
        return json.loads(z.read(name))


def test_pt2_graph_matches_model_json(sample):
    path = sample("mlp.pt2")
    doc = _serialized_graph(path, "models/model.json")["graph_module"]["graph"]
    g = wb.graph(path)
    calls = g.nodes[g.nodes["kind"] == "call"]
    assert calls["name"].tolist() == [n["name"] for n in doc["nodes"]]
    expected = sorted((a["arg"]["as_tensor"]["name"], n["name"]) for n in doc["nodes"]
                      for a in n["inputs"] if "as_tensor" in a["arg"])
    got = sorted(zip(g.edges["name"], g.edges["target"]))
    got = [x for x in got if not x[1].startswith("output:")]
    assert got == expected
    consts = g.nodes[g.nodes["kind"] == "constant"]
    assert sorted(consts["label"]) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    tv = doc["tensor_values"]["p_fc1_weight"]
    w = consts[consts["label"] == "fc1.weight"].iloc[0]
    assert w["shape"] == tuple(s["as_int"] for s in tv["sizes"]) and w["bytes"] == 32 * 16 * 4


def test_etrecord_edge_program(sample):
    path = sample("mlp_portable.etrecord")
    g = wb.graph(path)
    nodes = wb.open(path).frames["nodes"]
    edge = nodes[nodes["stage"] == "edge"]
    calls = g.nodes[g.nodes["kind"] == "call"]
    assert calls["name"].tolist() == edge["name"].tolist()
    assert calls["debug_handle"].tolist() == edge["debug_handle"].tolist()
    assert len(g.edges) == sum(len(t) for t in edge["inputs"])


def test_no_torch_and_no_unpickling():
    code = ("import sys, pickle, workbench as wb\n"
            "pickle.loads = pickle.load = None\n"
            "for p in ['sample_models/mlp.pt2', 'sample_models/mlp_xnnpack.etrecord',\n"
            "          'sample_models/mlp_xnnpack.pte']:\n"
            "    wb.graph(p)\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr


# -- defects are drawn, not refused ---------------------------------------------------------

class _Stub:
    """An opened program whose frames a test edits (the view reads frames only)."""

    def __init__(self, art, **changes):
        self.format, self.path, self.tensors = art.format, art.path, art.tensors
        self.frames = {k: art.frames[k] for k in art.frames}
        self.frames.update(changes)


def _edited(path, instruction, **cols):
    art = wb.open(path)
    ins = art.frames["instructions"].copy()
    for col, value in cols.items():
        ins[col] = ins[col].astype(object)
        ins.at[ins.index[ins["instruction"] == instruction][0], col] = value
    return _Stub(art, instructions=ins)


def test_dangling_value_index_is_drawn(sample):
    stub = _edited(sample("mlp_portable.pte"), 2, reads=(9, 999), writes=(12, -3))
    g = wb.graph(stub)
    bad = g.nodes[g.nodes["kind"] == "missing"]
    assert sorted(bad["value"]) == [-3, 999]
    assert bad["defect"].str.startswith(DANGLING).all()
    e = g.edges[g.edges["defect"] == DANGLING]
    assert set(zip(e["source"], e["target"])) == {("missing999", "i2"), ("i2", "missing-3")}
    assert len(g.defects) == 4
    # the rest of the graph is still there
    assert (g.nodes["kind"] == "kernel").sum() == 5


def test_read_before_write_is_a_marked_cycle(sample):
    # instruction 0 now reads value 12, which only instruction 2 writes (later)
    stub = _edited(sample("mlp_portable.pte"), 0, reads=(0, 8, 12))
    g = wb.graph(stub)
    cyc = g.edges[g.edges["defect"] == CYCLE]
    assert list(zip(cyc["source"], cyc["target"], cyc["value"])) == [("i2", "i0", 12)]


def test_cycle_in_a_serialized_graph_is_marked(tmp_path, sample):
    src = sample("mlp.pt2")
    out = tmp_path / "cyclic.pt2"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("models/model.json"):
                doc = json.loads(data)
                first = doc["graph_module"]["graph"]["nodes"][0]
                first["inputs"][0]["arg"] = {"as_tensor": {"name": "relu"}}  # relu is later
                data = json.dumps(doc).encode()
            zout.writestr(info, data)
    g = wb.graph(out)
    cyc = g.edges[g.edges["defect"] == "cycle"]
    assert list(zip(cyc["source"], cyc["target"])) == [("relu", "linear")]


def test_formats_without_a_graph_say_so(sample):
    with pytest.raises(ValueError, match="no graph"):
        wb.graph(sample("mlp_xnnpack.etdp"))
    with pytest.raises(KeyError, match="no method"):
        wb.graph(sample("mlp_portable.pte"), method="nope")


def test_truncated_file_is_an_artifact_error(tmp_path, sample):
    p = tmp_path / "cut.pte"
    p.write_bytes(sample("mlp_xnnpack.pte").read_bytes()[:300])
    with pytest.raises(wb.ArtifactError, match=r"cut\.pte"):
        wb.graph(p)


def test_method_and_svg(sample):
    g = wb.graph(sample("multi_method_xnnpack.pte"))
    assert g.methods == ["encode", "forward"]
    enc = g.method("encode")
    assert set(enc.nodes["method"]) == {"encode"} and len(enc.nodes) < len(g.nodes)
    svg = g.to_svg("forward")
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert "delegate0" in svg and "FullyConnected" in svg


# -- delegation ----------------------------------------------------------------------------

def test_delegation_counts_partitions_and_breaks(sample):
    path = sample("llm_tiny.pte")
    art = wb.open(path)
    d = wb.delegation(art).set_index("method")
    ins = art.frames["instructions"]
    fwd = ins[ins["method"] == "forward"].sort_values("position")
    row = d.loc["forward"]
    assert row["partitions"] == art.frames["delegates"]["index"].nunique()
    assert row["kernel_calls"] == (fwd["kind"] == "kernel").sum()
    assert row["delegated_ops"] == len(art.frames["delegate_nodes"])
    # graph breaks counted independently: kernel runs with a delegate call on both sides
    s = "".join("D" if k == "delegate" else "K" for k in fwd["kind"])
    import re

    assert row["graph_breaks"] == len(re.findall(r"(?<=D)K+(?=D)", s))
    assert row["graph_breaks"] > 0 and len(row["break_ops"]) > 0
    assert 0 < row["bytes_inside_share"] < 1
    assert d.loc["get_n_layers", "instructions"] == 0


def test_delegation_stub_breaks(sample):
    art = wb.open(sample("mlp_portable.pte"))
    ins = art.frames["instructions"].copy()
    ins["kind"] = pd.Categorical(["delegate", "kernel", "kernel", "delegate", "kernel"])
    ins["delegate_index"] = pd.array([0, None, None, 0, None], dtype="Int64")
    from workbench.graphs._delegation import delegation_frame

    d = delegation_frame(_Stub(art, instructions=ins))
    assert d.loc[0, "graph_breaks"] == 1
    assert d.loc[0, "break_ops"][0] == "aten::addmm.out"
    assert d.loc[0, "delegate_calls"] == 2 and d.loc[0, "kernel_calls"] == 3


def test_delegation_time_share(sample):
    d = wb.delegation(sample("mlp_xnnpack.pte"), etdump=sample("mlp_xnnpack.etdp"))
    assert d.loc[0, "time_inside"] > 0 and d.loc[0, "time_inside_share"] == 1.0
    p = wb.delegation(sample("mlp_portable.pte"), etdump=sample("mlp_portable.etdp"))
    assert p.loc[0, "time_outside"] > 0 and p.loc[0, "time_inside_share"] == 0.0
    assert "time_inside" not in wb.delegation(sample("mlp_portable.pte")).columns


@pytest.mark.parametrize("name", ["mlp_xnnpack_qc8.pte", "llm_tiny.pte", "mlp.pt2",
                                  "mlp_portable.etrecord"])
def test_mutants_draw_or_raise_artifact_errors(name, tmp_path):
    """Seeded mutants of real files (bench/fuzz.py's mutator): the graph is drawn or the
    error is an ArtifactError, never another exception."""
    from test_fuzz_all_formats import fuzz

    path = SAMPLES / name
    if not path.is_file():
        pytest.skip(f"{name} is not there")
    target = fuzz.analyse(path)[0]
    drawn = 0
    for i in range(25):
        _, data = fuzz.mutant(target, 34, i)
        p = tmp_path / name
        p.write_bytes(data)
        try:
            wb.graph(p).to_svg()
            drawn += 1
        except wb.ArtifactError:
            pass
    assert drawn > 0  # some mutants still open: their graphs are drawn


def test_graph_from_columns_equals_frames():
    """wb.graph keeps a .pte graph as column lists and makes the frames on first use: they
    equal pte_frames' (same dtypes, same cells); a Graph needs frames or columns."""
    from workbench.graphs import Graph
    from workbench.graphs._pte import pte_frames

    art = wb.open(SAMPLES / "llm_tiny.pte")
    g = wb.graph(art)
    ncols, ecols = g.raw_columns()
    assert len(ncols["id"]) == len(g.nodes) and len(ecols["source"]) == len(g.edges)
    nodes, edges, names = pte_frames(art)
    pd.testing.assert_frame_equal(g.nodes, nodes)
    pd.testing.assert_frame_equal(g.edges, edges)
    assert g.methods == names
    with pytest.raises(TypeError):
        Graph(source="x")


# ------------------------------------------------ time on the operations inside XNNPACK calls


def test_match_ops_order_type_aliases_and_leftovers():
    from workbench.graphs._delegation import match_ops

    # fused Convert nodes have no event; the FCs match in order
    assert match_ops(["Fully Connected (NC, QDU8, F32, QB4W) GEMM #1",
                      "Fully Connected (NC, QDU8, F32, QB4W) GEMM #2"],
                     ["Convert", "Convert", "FullyConnected", "FullyConnected"]) == [2, 3]
    # XNNPACK's rewrites: x*x runs as Square, a concatenation as a copy
    assert match_ops(["Square (NC) #1", "Copy (NC, X32) #1"], ["Multiply", "Concatenate2"]) \
        == [0, 1]
    # an event of a type not ahead stays unmatched; matching goes on after it
    assert match_ops(["Add (ND) #1", "Softmax (NC) #1", "Add (ND) #2"],
                     ["Add", "Multiply", "Add"]) == [0, None, 2]
    # forward only: a node is taken once
    assert match_ops(["Add (ND) #1", "Add (ND) #2"], ["Add"]) == [0, None]
    assert match_ops([], ["Add"]) == [] and match_ops(["Add (ND) #1"], []) == [None]


def test_delegate_op_times_on_the_xnnpack_sample():
    from workbench.graphs._delegation import delegate_op_times

    art = wb.open(SAMPLES / "mlp_xnnpack.pte")
    t = delegate_op_times(art, SAMPLES / "mlp_xnnpack.etdp")
    ev = wb.open(SAMPLES / "mlp_xnnpack.etdp").frames["events"]
    ops = ev[ev["kind"] == "delegate_op"]
    assert t["node"].tolist() == [0, 1] and set(t["op"]) == {"FullyConnected"}
    assert t["runs"].tolist() == [3, 3]
    assert int(t["duration"].sum()) == int(ops["duration"].sum())
    pytest.importorskip("model_explorer", reason="the graph extra is not installed")
    from workbench.model_explorer.convert import overlay_values

    v = overlay_values("workbench_time", str(SAMPLES / "mlp_xnnpack.pte"), "forward")
    assert v["delegate0/n0"] == t["mean"].iloc[0] and "delegate0/n1" in v and "i0" in v


@pytest.mark.slow
def test_delegate_op_times_match_every_xnnpack_event_of_a_real_llm_run(tmp_path):
    """A real run of the LLM export: every XNNPACK operator event lands on a node of its own
    delegate, of the same type (or an XNNPACK rewrite of it); per call, the operations' time
    fits inside the call's."""
    from workbench.graphs._delegation import (
        OP_ALIASES,
        _event_key,
        _node_key,
        delegate_op_times,
        node_times,
    )

    pytest.importorskip("executorch.runtime")
    trace = tmp_path / "llm_tiny.etdp"
    wb.run(SAMPLES / "llm_tiny.pte", iterations=2, etdump=str(trace))
    art = wb.open(SAMPLES / "llm_tiny.pte")
    t = delegate_op_times(art, trace)
    ev = wb.open(trace).frames["events"]
    n_events = int((ev["kind"] == "delegate_op").sum())
    assert len(t) > 50 and int(t["runs"].sum()) == n_events
    assert t["node"].notna().all(), t[t["node"].isna()]
    for event, op in zip(t["event"], t["op"]):
        k = _event_key(event)
        assert _node_key(op) in OP_ALIASES.get(k, frozenset()) | {k}, (event, op)
    dn = art.frames["delegate_nodes"]
    known = set(zip(dn["index"].astype(int), dn["node"].astype(int)))
    assert set(zip(t["delegate_index"], t["node"])) <= known
    calls = node_times(art, trace).set_index("instruction")["duration"]
    inside = t.groupby("instruction")["duration"].sum()
    assert (inside <= calls.reindex(inside.index)).all()
