"""The ``delegation`` frame: per method, what the delegates took and where they stopped.

A view over the ``.pte`` frames (``instructions``, ``delegates``, ``delegate_nodes``,
``delegate_tensors``, ``tensors``) and, with an ETDump, over :func:`workbench.timeline`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from ..artifact import Artifact

__all__ = ["DELEGATION_COLUMNS", "OP_ALIASES", "delegate_op_times", "delegation_frame", "match_ops",
           "node_times"]

#: Columns of the ``delegation`` frame, with their meaning.
DELEGATION_COLUMNS: dict[str, str] = {
    "method": "method name",
    "instructions": "KernelCall + DelegateCall instructions",
    "kernel_calls": "operators run outside delegates (KernelCall instructions)",
    "delegate_calls": "DelegateCall instructions (each runs one partition)",
    "partitions": "distinct delegates called",
    "backends": "backends of those delegates (tuple)",
    "delegated_ops": "operations inside the delegates whose graph was read (XNNPACK nodes); "
                     "missing where a backend's graph is opaque",
    "ops_inside_share": "delegated_ops / (delegated_ops + kernel_calls)",
    "bytes_inside": "constant bytes the delegates hold or read (XNNPACK constants, else the "
                    "blob size)",
    "bytes_outside": "constant bytes the kernel calls read (stored tensors)",
    "bytes_inside_share": "bytes_inside / (bytes_inside + bytes_outside)",
    "graph_breaks": "runs of kernel calls between two delegate calls: where a partition "
                    "stopped and the next one started",
    "break_ops": "operators in those runs, most frequent first (tuple): why the partitions broke",
    "time_inside": "ETDump: summed DELEGATE_CALL durations (trace ticks)",
    "time_outside": "ETDump: summed kernel-call durations",
    "time_inside_share": "time_inside / (time_inside + time_outside)",
}
STORED = ("segment", "inline", "external", "named_data")


def delegation_frame(art: Artifact, etdump: Any = None) -> pd.DataFrame:
    """The ``delegation`` frame of an opened ``.pte`` (see :data:`DELEGATION_COLUMNS`).

    Example:
        >>> import workbench as wb
        >>> df = delegation_frame(wb.open("sample_models/llm_tiny.pte"))   # doctest: +SKIP
        >>> df.loc[0, ["partitions", "graph_breaks"]].tolist()             # doctest: +SKIP
        [24, 13]
    """
    import pandas as pd

    if art.format != "pte":
        raise ValueError(f"{art.path}: delegation is a view of a .pte program, not {art.format}")
    fr = art.frames
    ins = fr["instructions"]
    ins = ins[ins["kind"].isin(("kernel", "delegate"))]
    dels, dn, dt = fr["delegates"], fr["delegate_nodes"], fr["delegate_tensors"]
    tens = art.tensors
    times = _times(art, etdump) if etdump is not None else None
    rows = []
    for m in fr["methods"]["method"].astype(str):
        mi = ins[ins["method"] == m].sort_values("position")
        kinds = mi["kind"].astype(str).tolist()
        ops = mi["op"].astype("string").fillna("?").tolist()
        didx = mi["delegate_index"]
        called = sorted({int(d) for d in didx.dropna()})
        md = dels[dels["method"] == m] if len(dels) else dels
        backends = tuple(dict.fromkeys(md[md["index"].isin(called)]["backend"].astype(str)))
        mdn = dn[(dn["method"] == m) & dn["index"].isin(called)] if len(dn) else dn
        read_graph = set(mdn["index"].astype(int)) if len(mdn) else set()
        opaque = [d for d in called if d not in read_graph]
        delegated_ops = len(mdn) if not opaque else None
        mdt = dt[(dt["method"] == m) & dt["index"].isin(called)] if len(dt) else dt
        inside = int(mdt[mdt["role"].astype(str) == "constant"]["nbytes"].sum()) if len(mdt) else 0
        if opaque and len(md):
            inside += int(md[md["index"].isin(opaque)]["size"].sum())
        # constant bytes read by kernel calls
        kr = {v for k, r in zip(kinds, mi["reads"]) if k == "kernel" for v in r}
        mt = tens[(tens["method"] == m) & tens["storage"].isin(STORED)] if "method" in tens \
            else tens.iloc[:0]
        outside = int(mt[mt["value"].isin(kr)].drop_duplicates("value")["nbytes"].sum())
        # graph breaks: kernel runs between two delegate calls
        breaks, break_ops, run, seen_delegate = 0, [], [], False
        for k, op in zip(kinds, ops):
            if k == "delegate":
                if seen_delegate and run:
                    breaks += 1
                    break_ops.extend(run)
                run, seen_delegate = [], True
            else:
                run.append(op)
        kc = kinds.count("kernel")
        row = {"method": m, "instructions": len(kinds), "kernel_calls": kc,
               "delegate_calls": kinds.count("delegate"), "partitions": len(called),
               "backends": backends, "delegated_ops": delegated_ops,
               "ops_inside_share": (delegated_ops / (delegated_ops + kc)
                                    if delegated_ops is not None and delegated_ops + kc else None),
               "bytes_inside": inside, "bytes_outside": outside,
               "bytes_inside_share": inside / (inside + outside) if inside + outside else None,
               "graph_breaks": breaks,
               "break_ops": tuple(pd.Series(break_ops, dtype=object).value_counts().index)}
        if times is not None:
            t_in, t_out = times.get(m, (0, 0))
            row.update(time_inside=t_in, time_outside=t_out,
                       time_inside_share=t_in / (t_in + t_out) if t_in + t_out else None)
        rows.append(row)
    cols = [c for c in DELEGATION_COLUMNS if times is not None or not c.startswith("time")]
    df = pd.DataFrame(rows, columns=cols)
    for c in ("delegated_ops",):
        df[c] = df[c].astype("Int64")
    return df


def _timeline(art: Artifact, etdump: Any) -> pd.DataFrame:
    from ..timing import timeline

    return timeline(art, etdump)


def _times(art: Artifact, etdump: Any) -> dict[str, tuple[int, int]]:
    """method -> (DELEGATE_CALL duration, kernel-call duration), summed over runs."""
    tl = _timeline(art, etdump)
    out: dict[str, tuple[int, int]] = {}
    for m, g in tl.groupby(tl["method"].astype(str), observed=True):
        t_in = int(g.loc[g["event"].astype(str) == "delegate_call", "duration"].sum())
        t_out = int(g.loc[g["kind"].astype(str) == "kernel", "duration"].sum())
        out[str(m)] = (t_in, t_out)
    return out


def node_times(art: Artifact, etdump: Any) -> pd.DataFrame:
    """Time per instruction (``method``, ``instruction``, ``duration``, ``runs``) from an
    ETDump: kernel calls and DELEGATE_CALL events, summed over runs; ``mean`` per run.

    Example:
        >>> art = wb.open("sample_models/mlp_xnnpack.pte")               # doctest: +SKIP
        >>> node_times(art, "sample_models/mlp_xnnpack.etdp")           # doctest: +SKIP
    """
    tl = _timeline(art, etdump)
    ev = tl["event"].astype(str)
    keep = (tl["kind"].astype(str) == "kernel") | (ev == "delegate_call")
    t = tl[keep & tl["method"].notna()]
    g = t.groupby([t["method"].astype(str), t["instruction"].astype(int)], observed=True)
    out = g["duration"].agg(["sum", "count"]).reset_index()
    out.columns = ["method", "instruction", "duration", "runs"]
    out["mean"] = out["duration"] / out["runs"]
    return out


#: Runtime operators XNNPACK makes for a graph node of another type (its rewrites):
#: ``x * x`` runs as Square; concatenation and reshapes run as copies.
OP_ALIASES: dict[str, frozenset[str]] = {
    "square": frozenset({"multiply"}),
    "copy": frozenset({"concatenate", "staticreshape", "staticslice", "copy"}),
}


def _event_key(name: str) -> str:
    """``"Fully Connected (NC, F32) GEMM #2"`` -> ``"fullyconnected"``."""
    base = name.split(" (", 1)[0].split(" #", 1)[0]
    return base.replace(" ", "").lower()


def _node_key(op: str) -> str:
    """``"Concatenate2"`` -> ``"concatenate"``."""
    return op.rstrip("0123456789").lower()


def match_ops(events: list[str], ops: list[str]) -> list[int | None]:
    """For each XNNPACK runtime event name (in execution order), the position in ``ops`` (the
    delegate's graph nodes, in node order) of the node it ran, or None.

    XNNPACK runs one operator per node in node order, but fuses some nodes away (a Convert
    feeding a Fully Connected, a Clamp) and rewrites others (:data:`OP_ALIASES`). The match is
    greedy and forward only: an event takes the next unmatched node of its type (or an
    alias); an event of a type not ahead stays unmatched (its time stays on the call only).

    Example:
        >>> match_ops(["Convert (NC, F32, QD8) #1", "Fully Connected (NC, QD8, F32) GEMM #1"],
        ...           ["Convert", "FullyConnected", "Clamp"])
        [0, 1]
        >>> match_ops(["Square (NC) #1"], ["Multiply"])
        [0]
    """
    keys = [_node_key(o) for o in ops]
    out: list[int | None] = []
    at = 0
    for name in events:
        ek = _event_key(name)
        wanted = OP_ALIASES.get(ek, frozenset()) | {ek}
        hit = next((k for k in range(at, len(keys)) if keys[k] in wanted), None)
        out.append(hit)
        if hit is not None:
            at = hit + 1
    return out


def delegate_op_times(art: Artifact, etdump: Any) -> pd.DataFrame:
    """Time per operation *inside* XNNPACK delegate calls, from an ETDump.

    XNNPACK logs one event per runtime operator of a call (``"Fully Connected (NC, F32) GEMM
    #1"``), with no debug handle: each is matched to a node of the delegate's graph by
    :func:`match_ops` (execution order and operator type). One row per (method, instruction,
    event position): ``delegate_index``, ``event`` (name without ``#k``), ``node`` (XNNPACK
    node id, NA when unmatched), ``op`` (the node's type), ``duration`` (summed over runs),
    ``runs``, ``mean``.

    Example:
        >>> art = wb.open("sample_models/mlp_xnnpack.pte")               # doctest: +SKIP
        >>> delegate_op_times(art, "sample_models/mlp_xnnpack.etdp")     # doctest: +SKIP
    """
    import pandas as pd

    cols = ["method", "instruction", "delegate_index", "position", "event", "node", "op",
            "duration", "runs", "mean"]
    tl = _timeline(art, etdump)
    d = tl[(tl["event"].astype(str) == "delegate_op") & tl["method"].notna()
           & tl["delegate_index"].notna()]
    dels = art.frames["delegates"]
    xnnpack = set(dels.loc[dels["backend"].astype(str) == "xnnpack", "index"].astype(int))
    d = d[d["delegate_index"].astype(int).isin(xnnpack)]
    if d.empty:
        return pd.DataFrame({c: [] for c in cols})
    dn = art.frames["delegate_nodes"]
    nodes: dict[int, tuple[list[int], list[str]]] = {}
    for idx, g in dn.groupby("index", sort=False):
        g = g.sort_values("node")
        nodes[int(idx)] = (g["node"].astype(int).tolist(), g["op"].astype(str).tolist())
    matched: dict[tuple[int, tuple[str, ...]], list[int | None]] = {}
    acc: dict[tuple[str, int, int], list[Any]] = {}
    keys = [d["run"], d["method"].astype(str), d["instruction"].astype(int)]
    for (_run, m, ins), g in d.sort_values("index").groupby(keys, sort=False, observed=True):
        di = int(g["delegate_index"].iloc[0])
        names = g["name"].astype(str).tolist()
        ids, ops = nodes.get(di, ([], []))
        key = (di, tuple(names))
        if key not in matched:
            matched[key] = match_ops(names, ops)
        for pos, (name, hit, dur) in enumerate(zip(names, matched[key],
                                                   g["duration"].astype(int).tolist())):
            row = acc.get((m, ins, pos))
            if row is None:
                row = acc[(m, ins, pos)] = [
                    m, ins, di, pos, name.split(" #", 1)[0],
                    ids[hit] if hit is not None else None,
                    ops[hit] if hit is not None else None, 0, 0]
            row[7] += dur
            row[8] += 1
    out = pd.DataFrame(list(acc.values()), columns=cols[:-1])
    out["node"] = out["node"].astype("Int64")
    out["mean"] = out["duration"] / out["runs"]
    return out.sort_values(["method", "instruction", "position"], ignore_index=True)
