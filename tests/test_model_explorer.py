"""The Model Explorer extension, loaded by Model Explorer's own ExtensionManager and served by
its own server: graphs equal wb.graph's, overlays, and bad files answered as errors (naming the
file and the structure) while the server stays up."""

from __future__ import annotations

import json
import pathlib
import urllib.parse
import urllib.request

import pytest

import workbench as wb

pytest.importorskip("model_explorer", reason="the graph extra (ai-edge-model-explorer) is "
                    "not installed")

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
PROGRAMS = ["mlp_portable.pte", "mlp_xnnpack_qc8.pte", "llm_tiny.pte", "multi_method_xnnpack.pte",
            "mlp_vulkan.pte", "mlp.bpte", "mlp.pt2", "mlp_aoti.pt2", "mlp_xnnpack.etrecord"]


@pytest.fixture(scope="module")
def manager():
    from model_explorer.extension_manager import ExtensionManager

    em = ExtensionManager(["workbench.model_explorer"])
    em.load_extensions()
    return em


def _convert(em, path) -> dict:
    return em.run_cmd({"extensionId": "workbench_adapter", "cmdId": "convert",
                       "modelPath": str(path), "settings": {}, "deleteAfterConversion": False})


def test_extension_is_registered(manager):
    meta = {m["id"]: m for m in manager.get_extensions_metadata()}
    assert meta["workbench_adapter"]["type"] == "adapter"
    assert {"pte", "pt2", "etrecord"} <= set(meta["workbench_adapter"]["fileExts"])
    for pid in ("workbench_time", "workbench_bytes", "workbench_constant_bytes",
                "workbench_quant", "workbench_delegated", "workbench_lifetime"):
        assert meta[pid]["type"] == "node_data_provider"


@pytest.mark.parametrize("name", PROGRAMS)
def test_graphs_equal_wb_graph(manager, name):
    path = SAMPLES / name
    if not path.is_file():
        pytest.skip(f"{name} is not there")
    resp = _convert(manager, path)
    g = wb.graph(path)
    graphs = {x["id"]: x for x in resp["graphs"]}
    drawn = [m for m in g.methods if (g.nodes["method"] == m).any()]
    assert sorted(graphs) == sorted(drawn)
    for m in drawn:
        sub = g.method(m)
        me = graphs[m]
        assert [n["id"] for n in me["nodes"]] == sub.nodes["id"].tolist()
        assert sum(len(n["incomingEdges"]) for n in me["nodes"]) == len(sub.edges)
        ids = {n["id"] for n in me["nodes"]}
        for n in me["nodes"]:
            for e in n["incomingEdges"]:
                assert e["sourceNodeId"] in ids
        attrs = {n["id"]: {a["key"]: a["value"] for a in n["attrs"]} for n in me["nodes"]}
        for _, row in sub.nodes.iterrows():
            if row["kind"] in ("kernel", "delegate"):
                assert attrs[row["id"]]["instruction"] == str(row["instruction"])
            if row["namespace"]:
                assert "instruction" not in attrs[row["id"]]
                assert attrs[row["id"]]["delegate_index"] == str(row["delegate_index"])



@pytest.mark.parametrize("name", ["llm_tiny.pte", "multi_method_xnnpack.pte", "mlp_portable.pte"])
def test_column_path_equals_frame_path(monkeypatch, name):
    """A .pte graph is handed to Model Explorer from its column lists (no frames made); the
    result must be exactly what the frames give (the path .pt2 / ETRecord graphs take)."""
    import dataclasses

    from workbench.graphs import Graph
    from workbench.model_explorer import convert

    path = str(SAMPLES / name)
    fast = [dataclasses.asdict(x) for x in convert.me_graphs(path)]
    g = wb.graph(path)
    assert g.raw_columns() is not None
    framed = Graph(g.nodes, g.edges, g.source, g.format, g.methods)
    assert framed.raw_columns() is None
    monkeypatch.setattr(convert, "checked_graph", lambda _p: framed)
    slow = [dataclasses.asdict(x) for x in convert.me_graphs(path)]
    assert fast == slow
    assert sum(len(x["nodes"]) for x in fast) == len(g.nodes)


def test_graph_builder_field_order():
    """convert.py builds these positionally (speed): the pinned Model Explorer's field order."""
    import dataclasses

    from model_explorer import graph_builder as gb

    def names(cls):
        return [f.name for f in dataclasses.fields(cls)]

    assert names(gb.KeyValue)[:2] == ["key", "value"]
    assert names(gb.IncomingEdge)[:3] == ["sourceNodeId", "sourceNodeOutputId",
                                          "targetNodeInputId"]
    assert names(gb.MetadataItem)[:2] == ["id", "attrs"]


def test_overlays(manager):
    def run(pid, name, graph="forward", config=None):
        return manager.run_cmd({"extensionId": pid, "cmdId": "run", "modelPath": str(SAMPLES / name),
                                "graphId": graph, "configValues": config or {}})

    t = run("workbench_time", "mlp_portable.pte")["result"]["results"]
    from workbench.graphs._delegation import node_times

    ref = node_times(wb.open(SAMPLES / "mlp_portable.pte"), SAMPLES / "mlp_portable.etdp")
    assert {k: v["value"] for k, v in t.items()} == {
        f"i{i}": m for i, m in zip(ref["instruction"], ref["mean"])}
    d = run("workbench_delegated", "tied_xnnpack.pte")["result"]["results"]
    g = wb.graph(SAMPLES / "tied_xnnpack.pte")
    kinds = dict(zip(g.nodes["id"], g.nodes["kind"]))
    assert {k for k, v in d.items() if v["value"] == 0} == {k for k, v in kinds.items()
                                                             if v == "kernel"}
    q = run("workbench_quant", "mlp_xnnpack_qc8.pte")["result"]["results"]
    assert q["delegate0/c2"]["value"] == 2 and q["delegate0/n0"]["value"] == 4
    c = run("workbench_constant_bytes", "mlp_portable.pte")["result"]["results"]
    assert sum(v["value"] for v in c.values()) == 3232
    missing = run("workbench_time", "mlp_xnnpack_qc8.pte")
    assert ("no ETDump" in missing["error"] and "result" not in missing) or not missing["result"]


def test_bad_files_are_adapter_errors(manager, tmp_path):
    cut = tmp_path / "cut.pte"
    cut.write_bytes((SAMPLES / "mlp_xnnpack.pte").read_bytes()[:300])
    with pytest.raises(wb.ArtifactError) as e:
        _convert(manager, cut)
    assert "cut.pte" in str(e.value)
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"PK\x03\x04" + b"\x00" * 60)
    with pytest.raises(wb.ArtifactError, match=r"junk\.pt2"):
        _convert(manager, junk)


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def _send(base: str, path) -> dict:
    cmd = {"extensionId": "workbench_adapter", "cmdId": "convert", "modelPath": str(path),
           "settings": {}, "deleteAfterConversion": False}
    return _get(base + "/api/v1/send_command?json=" + urllib.parse.quote(json.dumps(cmd)))


def test_server_answers_bad_files_and_stays_up(model_explorer_server, tmp_path):
    cut = tmp_path / "cut.pte"
    cut.write_bytes((SAMPLES / "mlp_xnnpack.pte").read_bytes()[:300])
    server = model_explorer_server
    resp = _send(server, cut)
    assert set(resp) == {"error"}
    assert "cut.pte" in resp["error"] and "Traceback" not in resp["error"]
    assert "Error" in resp["error"].split(":", 1)[0]
    # still up, and a good file converts
    urllib.request.urlopen(server + "/check_health", timeout=10)
    ok = _send(server, SAMPLES / "mlp_xnnpack_qc8.pte")
    assert [g["id"] for g in ok["graphs"]] == ["forward"]
