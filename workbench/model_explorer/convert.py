"""From a :class:`workbench.Graph` to Model Explorer's ``graph_builder`` objects, and the
per-node values of the overlays. ``main`` (the extension module) only wraps these."""

from __future__ import annotations

import os
from itertools import compress
from typing import TYPE_CHECKING, Any

from ..errors import ArtifactError, CorruptError

if TYPE_CHECKING:
    from ..graphs import Graph

__all__ = ["OVERLAYS", "QUANT_CODES", "checked_graph", "me_graphs", "overlay_values"]

#: Node columns shown as attributes (in this order, where present).
ATTRS = ("kind", "instruction", "position", "op", "delegate_index", "backend", "value", "name",
         "dtype", "shape", "bytes", "bytes_read", "bytes_written", "storage", "quant",
         "lifetime", "debug_handle", "defect")
#: The overlays: provider id -> (name, description).
OVERLAYS = {
    "workbench_time": ("Time per node (ETDump)", "mean time per run of each instruction, and "
                       "of each operation inside an XNNPACK call (its events matched to the "
                       "delegate's nodes by order and operator type), from an ETDump read by "
                       "the workbench (no Inspector, no flatc)"),
    "workbench_bytes": ("Bytes read + written", "tensor bytes each instruction reads and writes"),
    "workbench_constant_bytes": ("Constant bytes", "bytes of stored weights and constants"),
    "workbench_quant": ("Quantisation scheme", "0 none, 1 per-tensor, 2 per-channel, "
                        "3 per-channel groupwise, 4 per-token dynamic"),
    "workbench_delegated": ("Delegated vs portable", "1: runs in a delegate, 0: a portable "
                            "kernel call"),
    "workbench_lifetime": ("Tensor lifetime", "instructions the written tensor stays live"),
}
QUANT_CODES = {"none": 0, "per_tensor": 1, "per_channel": 2, "per_channel_group": 3,
               "per_token_dynamic": 4}
DEFECT_STYLE = {"backgroundColor": "#ffcdd2", "borderColor": "#c62828"}


def checked_graph(model_path: str) -> Graph:
    """``wb.graph(model_path)``; any failure on a bad file becomes an ``ArtifactError`` that
    names the file and the structure (Model Explorer shows it as the adapter's error).

    Example:
        >>> checked_graph("sample_models/mlp_portable.pte").format          # doctest: +SKIP
        'pte'
    """
    from ..graphs import graph

    try:
        return graph(model_path)
    except ArtifactError:
        raise
    except (ValueError, KeyError, IndexError, TypeError, OSError) as e:
        raise CorruptError(f"cannot draw the graph: {type(e).__name__}: {e}",
                           file=os.path.basename(model_path), structure="graph") from None


try:
    from pandas import NA as _NA
except ImportError:  # pragma: no cover - pandas is a dependency
    _NA = None


def _missing(v: Any) -> bool:
    import pandas as pd

    if v is None:
        return True
    if isinstance(v, (tuple, list)):
        return False
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _text(v: Any) -> str | None:
    t = type(v)
    if t is str:  # the common cells first, without pandas' scalar checks
        return v
    if t is int or t is bool or (t is float and v == v):
        return str(v)
    if _missing(v):
        return None
    if isinstance(v, tuple):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)


def _texts(col: Any) -> list[str | None]:
    """The texts of one column (None where missing): vectorised except for object columns."""
    if col.dtype == object:
        return [_text(v) for v in col.tolist()]
    missing = col.isna().to_numpy()
    texts = col.astype(str).tolist()
    if missing.any():
        for i in missing.nonzero()[0].tolist():
            texts[i] = None
    return texts


def _raw_texts(values: list, dtype: str) -> list[str | None]:
    """The texts of one raw column (plain Python values, None: missing) of a frame column
    of ``dtype``: what :func:`_texts` gives for the frame that ``graphs.frame`` builds."""
    if dtype == "Int64":
        return [None if v is None or v is _NA else str(int(v)) for v in values]
    if dtype == "object":  # shapes: few distinct values, each formatted once
        memo: dict[Any, str | None] = {}
        out = []
        for v in values:
            try:
                t = memo[v]
            except KeyError:
                t = memo[v] = _text(v)
            except TypeError:  # unhashable (a list)
                t = _text(v)
            out.append(t)
        return out
    return [None if v is None or v is _NA else str(v) for v in values]


def _text_columns(df: Any, cols: tuple[str, ...]) -> tuple[list, dict[str, list]]:
    """(method of each row, column -> texts (None: missing)) of frame ``df``."""
    return df["method"].tolist(), {c: _texts(df[c]) for c in cols}


def _raw_text_columns(columns: dict[str, list], dtypes: dict[str, str], cols: tuple[str, ...]
                      ) -> tuple[list, dict[str, list]]:
    """:func:`_text_columns` of the frame that raw ``columns`` would make, without making it."""
    return columns["method"], {c: _raw_texts(columns[c], dtypes[c]) for c in cols}


def _rows_by_method(methods: list) -> dict[str, list[int]]:
    """Row numbers of each method, in row order."""
    out: dict[str, list[int]] = {}
    for i, m in enumerate(methods):
        out.setdefault(str(m), []).append(i)
    return out


def me_graphs(model_path: str) -> list[Any]:
    """Model Explorer graphs (one per method / model) of the artifact at ``model_path``.

    The build allocates tens of thousands of small objects (one per attribute) and keeps all
    of them: the cyclic garbage collector is paused meanwhile (it would only rescan them).

    Example:
        >>> [g.id for g in me_graphs("sample_models/multi_method_xnnpack.pte")]  # doctest: +SKIP
        ['encode', 'forward']
    """
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        return _me_graphs(model_path)
    finally:
        if enabled:
            gc.enable()


def _me_graphs(model_path: str) -> list[Any]:
    """Model Explorer graphs (one per method / model) of the artifact at ``model_path``.

    Example:
        >>> [g.id for g in me_graphs("sample_models/multi_method_xnnpack.pte")]  # doctest: +SKIP
        ['encode', 'forward']
    """
    from model_explorer import graph_builder as gb

    g = checked_graph(model_path)
    raw = g.raw_columns()
    node_cols = ("id", "label", "namespace", "defect")
    edge_cols = ("source", "target", "value", "name", "dtype", "shape", "defect")
    if raw is not None:  # built from column lists: no frames to make and read back
        from ..graphs import EDGE_COLUMNS, NODE_COLUMNS

        ncols = [c for c in ATTRS if c in NODE_COLUMNS]
        n_methods, nt = _raw_text_columns(raw[0], NODE_COLUMNS, (*node_cols, *ncols))
        e_methods, et = _raw_text_columns(raw[1], EDGE_COLUMNS, edge_cols)
    else:
        ncols = [c for c in ATTRS if c in g.nodes]
        n_methods, nt = _text_columns(g.nodes, (*node_cols, *ncols))
        e_methods, et = _text_columns(g.edges, edge_cols)
    # positional arguments (field order of model_explorer 0.1.34, checked by the tests):
    # tens of thousands of these are made for a large program
    KV, Edge, Meta, Node = gb.KeyValue, gb.IncomingEdge, gb.MetadataItem, gb.GraphNode
    # node attributes column by column (most cells are empty), in ATTRS order
    node_attrs: list[list[Any]] = [[] for _ in n_methods]
    for c in ncols:
        col = nt[c]
        present = [v is not None for v in col]
        for attrs, v in zip(compress(node_attrs, present), compress(col, present)):
            attrs.append(KV(c, v))
    node_rows, edge_rows = _rows_by_method(n_methods), _rows_by_method(e_methods)
    ids, labels, spaces, defects = (nt[c] for c in node_cols)
    edge_cols_t = [et[c] for c in edge_cols]
    out = []
    for method in g.methods:
        rows = node_rows.get(method)
        if not rows:
            continue
        # output ids: one per (producer, value) pair; input ids per consumer, in edge order
        out_ids: dict[tuple[str, str], str] = {}
        n_out: dict[str, int] = {}
        incoming: dict[str, list[Any]] = {}
        outputs_meta: dict[str, list[Any]] = {}
        picked = edge_rows.get(method, ())
        for s, t, v, name, dtype, shape, defect in zip(
                *([col[i] for i in picked] for col in edge_cols_t)):
            key = (s, v or name or "")
            oid = out_ids.get(key)
            if oid is None:
                oid = out_ids[key] = str(n_out.get(s, 0))
                n_out[s] = n_out.get(s, 0) + 1
                attrs = [KV("tensor_name", name or key[1])]
                if dtype:
                    attrs.append(KV("tensor_dtype", dtype))
                if shape:
                    attrs.append(KV("tensor_shape", f"{dtype or ''}{shape}"))
                if defect:
                    attrs.append(KV("defect", defect))
                outputs_meta.setdefault(s, []).append(Meta(oid, attrs))
            lst = incoming.setdefault(t, [])
            lst.append(Edge(s, oid, str(len(lst))))
        gnodes = []
        for i in rows:
            nid = ids[i]
            gnodes.append(Node(
                id=nid, label=labels[i] or nid, namespace=spaces[i] or "", attrs=node_attrs[i],
                incomingEdges=incoming.get(nid, []), outputsMetadata=outputs_meta.get(nid, []),
                style=gb.GraphNodeStyle(**DEFECT_STYLE) if defects[i] else None))
        out.append(gb.Graph(id=method, nodes=gnodes))
    if not out:
        out.append(gb.Graph(id="empty", nodes=[gb.GraphNode(
            id="empty", label=f"{os.path.basename(model_path)}: no graph to draw",
            attrs=[gb.KeyValue(key="format", value=g.format)])]))
    return out


def overlay_values(provider: str, model_path: str, graph_id: str,
                   etdump: str | None = None) -> dict[str, float]:
    """node id -> value of overlay ``provider`` (see :data:`OVERLAYS`) on graph ``graph_id``.

    ``workbench_time`` needs an ETDump: ``etdump``, else ``<model stem>.etdp`` next to the
    model. Time lands on instruction nodes (mean per run) and on the operations inside
    XNNPACK calls that :func:`workbench.graphs.match_ops` matched to an event
    (the call node keeps the whole call's time).

    Example:
        >>> overlay_values("workbench_delegated", "sample_models/mlp_xnnpack.pte",
        ...                "forward")                                      # doctest: +SKIP
        {'i0': 1.0, ...}
    """
    g = checked_graph(model_path).method(graph_id)
    n = g.nodes
    out: dict[str, float] = {}
    if provider == "workbench_time":
        from ..graphs import as_artifact
        from ..graphs._delegation import delegate_op_times, node_times

        path = etdump or os.path.splitext(model_path)[0] + ".etdp"
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{os.path.basename(model_path)}: no ETDump given and none "
                                    f"at {os.path.basename(path)}")
        art = as_artifact(model_path)
        t = node_times(art, path)
        t = t[t["method"] == graph_id]
        by = dict(zip(t["instruction"].astype(int), t["mean"].astype(float)))
        for nid, ins in zip(n["id"], n["instruction"]):
            if not _missing(ins) and int(ins) in by:
                out[nid] = by[int(ins)]
        # operations inside XNNPACK calls: matched by order and type (delegate_op_times)
        ids = set(n["id"])
        inner = delegate_op_times(art, path)
        inner = inner[(inner["method"] == graph_id) & inner["node"].notna()]
        for ins, d, node, mean in zip(inner["instruction"], inner["delegate_index"],
                                      inner["node"], inner["mean"]):
            nid = f"delegate{d}@i{ins}/n{node}"
            if nid not in ids:
                nid = f"delegate{d}/n{node}"
            if nid in ids:
                out[nid] = out.get(nid, 0.0) + float(mean)
        return out
    for row in n.itertuples(index=False):
        v: Any = None
        if provider == "workbench_bytes":
            r, w = row.bytes_read, row.bytes_written
            if _text(r) is not None or _text(w) is not None:
                v = (0 if _text(r) is None else int(r)) + (0 if _text(w) is None else int(w))
        elif provider == "workbench_constant_bytes":
            if row.kind in ("constant", "delegate_constant") and _text(row.bytes) is not None:
                v = int(row.bytes)
        elif provider == "workbench_quant":
            q = _text(row.quant)
            v = QUANT_CODES.get(q) if q is not None else None
        elif provider == "workbench_delegated":
            if row.kind in ("kernel", "call"):
                v = 0
            elif row.kind in ("delegate", "delegate_node"):
                v = 1
        elif provider == "workbench_lifetime":
            life = _text(row.lifetime)
            if life and ".." in life:
                lo, hi = life.split("..")
                v = int(hi) - int(lo) + 1
        else:
            raise KeyError(f"unknown overlay {provider!r}")
        if v is not None:
            out[row.id] = float(v)
    return out
