"""A serialized exported program as a graph: the ``.pt2`` ``graph_nodes`` frame and the
ETRecord ``nodes`` frame (its edge program per method). Nothing is unpickled; no torch.

A value's producer is the node that writes it; a read of a value no node writes becomes an
``input`` node (``constant`` for parameters, buffers and constants of a ``.pt2``). A node that
reads a value written by itself or a later node draws that edge with the defect ``cycle``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._model import EDGE_COLUMNS, NODE_COLUMNS, frame

if TYPE_CHECKING:
    import pandas as pd

    from ..artifact import Artifact

__all__ = ["exported_frames"]

#: graph-input signature kinds whose values are stored weights (constant nodes).
CONSTANT_KINDS = frozenset({"parameter", "buffer", "tensor_constant", "constant_input",
                            "custom_obj", "token"})


def _numel_bytes(dtype: Any, shape: Any) -> int | None:
    from ..formats.pt2.schema import ITEMSIZE

    if not isinstance(dtype, str) or not isinstance(shape, tuple) or dtype not in ITEMSIZE:
        return None
    n = 1
    for s in shape:
        if s < 0:
            return None
        n *= s
    return n * ITEMSIZE[dtype]


def exported_frames(art: Artifact, method: str | None = None
                    ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(nodes, edges, graph names) of a ``.pt2`` (one graph per model) or an ETRecord (one
    per edge program: its method).

    Example:
        >>> import workbench as wb
        >>> nodes, edges, names = exported_frames(wb.open("sample_models/mlp.pt2"))  # doctest: +SKIP
    """
    if art.format == "pt2":
        df = art.frames["graph_nodes"]
        key = df["model"].astype(str)
    else:
        df = art.frames["nodes"]
        edge = df["stage"].astype(str) == "edge"
        # the edge programs (one per method); a record without them: whatever it holds
        df = df[edge] if edge.any() else df
        key = df["method"].astype("string").fillna(df["program"].astype(str)).astype(str)
    names = list(dict.fromkeys(key.tolist()))
    if method is not None:
        if method not in names:
            raise KeyError(f"{art.path}: no graph {method!r} (graphs: {names})")
        names = [method]
    n: dict[str, list] = {c: [] for c in NODE_COLUMNS}
    e: dict[str, list] = {c: [] for c in EDGE_COLUMNS}
    for name in names:
        _graph(n, e, name, df[(key == name).to_numpy()])
    if art.format == "pt2" and method is None:
        _compiled(art, n, names)
    return frame(NODE_COLUMNS, n), frame(EDGE_COLUMNS, e), names


def _add(cols: dict[str, list], **row: Any) -> None:
    for c, v in cols.items():
        v.append(row.get(c))


def _graph(n: dict[str, list], e: dict[str, list], name: str, df: pd.DataFrame) -> None:
    kinds = df["kind"].astype(str).tolist() if "kind" in df else ["call"] * len(df)
    graphs = df["graph"].astype(object).where(df["graph"].notna(), "").astype(str).tolist()
    import pandas as pd

    def plain(col: str) -> list:
        if col not in df:
            return [None] * len(df)
        return [None if v is pd.NA or v is None else v for v in df[col].astype(object)]

    fqn = plain("fqn")
    debug = plain("debug_handle")
    order = {}  # value name -> (node id, position, dtype, shape)
    ids = []
    for pos, (_kind, g, nm, _target, outs, dts, shps) in enumerate(zip(
            kinds, graphs, df["name"].astype(str), df["target"].astype(str), df["outputs"],
            df["dtypes"], df["shapes"])):
        nid = f"{g}/{nm}" if g else nm
        if nid in ids:
            nid = f"{nid}#{pos}"
        ids.append(nid)
        for k, v in enumerate(outs):
            order.setdefault(v, (nid, pos, dts[k] if k < len(dts) else None,
                                 shps[k] if k < len(shps) else None))
    sources: dict[str, str] = {}
    for pos, (nid, kind, g, nm, target, ins, _outs, dts, shps) in enumerate(zip(
            ids, kinds, graphs, df["name"].astype(str), df["target"].astype(str),
            df["inputs"], df["outputs"], df["dtypes"], df["shapes"])):
        if target == "placeholder":
            nkind = "constant" if kind in CONSTANT_KINDS else "input"
        elif target == "output":
            nkind = "output"
        else:
            nkind = "call"
        dtype = dts[0] if dts else None
        shape = shps[0] if shps else None
        if nkind == "output" and ins and ins[0] in order:
            dtype, shape = order[ins[0]][2], order[ins[0]][3]
        _add(n, method=name, id=nid, label=(fqn[pos] or nm) if nkind != "call" else
             target.rsplit(".", 2)[-2] if target.count(".") >= 2 else target,
             kind=nkind, namespace=g, op=target if nkind == "call" else None, name=fqn[pos] or nm,
             dtype=dtype, shape=shape, bytes=_numel_bytes(dtype, shape),
             storage=kind if nkind in ("constant", "input") else None,
             debug_handle=debug[pos])
        for v in ins:
            src = order.get(v)
            defect = None
            if src is None:
                sid = sources.get(v)
                if sid is None:
                    sid = sources[v] = f"input:{v}"
                    _add(n, method=name, id=sid, label=v, kind="input", namespace="", name=v)
                src = (sid, -1, None, None)
            elif src[1] >= pos:
                defect = "cycle"
            _add(e, method=name, source=src[0], target=nid, name=v, dtype=src[2], shape=src[3],
                 bytes=_numel_bytes(src[2], src[3]), defect=defect)


def _compiled(art: Artifact, n: dict[str, list], names: list[str]) -> None:
    """One node per AOTInductor model of a ``.pt2``: compiled code has no graph to draw, but
    the model, its device and its input/output counts are shown."""
    models = art.frames["models"]
    for row in models[models["kind"].astype(str) == "aoti"].itertuples():
        name = str(row.name)
        names.append(name)
        _add(n, method=name, id=name, label=f"{name} (AOTInductor, compiled)", kind="compiled",
             namespace="", op="aoti", name=str(row.member),
             storage="so", defect=None)
