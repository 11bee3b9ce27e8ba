"""A ``.pte`` program as a graph, from its frames (``instructions``, ``values``, ``tensors``,
``lifetimes``, ``delegates``, ``delegate_nodes``, ``delegate_tensors``): never a second parse.

Per method: one node per KernelCall / DelegateCall instruction, one per tensor that an
instruction reads before any instruction writes it (``input``, ``constant``, ``state``), one
per method output. An edge joins the last instruction that wrote a value before the reader
(in execution position order). An XNNPACK delegate whose graph was read expands into its own
nodes inside the group (namespace) ``delegate<i>``: its external inputs, its operations, its
constants (with their quantization) and its external outputs; the DelegateCall node feeds the
group's inputs and the group's outputs feed the instructions that read the call's outputs.
Other backends stay the one DelegateCall node, with the blob size in ``bytes``.

Defects are drawn, never refused: a value index outside the method's value table becomes a
``missing`` node and a ``dangling value index`` edge; a planned tensor read before the only
instructions that write it gets an edge back from the first of them, marked ``read before
written (cycle)``.

Speed: each frame is split by method once and read column-wise (``tolist``, category codes);
the joins are dictionary look-ups over the instructions' argument tuples (the 1B LLM: 573
instructions, 164 XNNPACK delegates), with no per-delegate pandas objects. Rows are dicts
holding every column, transposed into column lists once (:func:`pte_columns`); pandas frames
are made only when a caller asks for them (:class:`~workbench.graphs.Graph` does it lazily).
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ._model import EDGE_COLUMNS, NODE_COLUMNS, frame

if TYPE_CHECKING:
    import pandas as pd

    from ..artifact import Artifact

__all__ = ["CYCLE", "DANGLING", "pte_columns", "pte_frames"]

#: ``tensors.storage`` values whose bytes are stored in the artifact (constant nodes).
STORED = frozenset({"segment", "inline", "external", "named_data"})
CALL_KINDS = frozenset({"kernel", "delegate"})
#: the columns read from each frame (rows become tuples in this order)
INSTRUCTION_COLS = ("instruction", "position", "kind", "op", "delegate_index", "args", "reads",
                    "writes")
TENSOR_COLS = ("value", "name", "dtype", "shape", "nbytes", "storage")
PART_COLS = {
    "values": ("value", "type", "is_input", "is_output"),
    "lifetimes": ("value", "live_from", "live_to"),
    "delegates": ("index", "backend", "id", "size"),
    "delegate_nodes": ("index", "node", "op", "inputs", "outputs", "debug_handle"),
    "delegate_tensors": ("index", "value", "name", "dtype", "shape", "nbytes", "role", "quant",
                         "storage", "external_id"),
}
DANGLING = "dangling value index"
CYCLE = "read before written (cycle)"
NEVER_WRITTEN = "read but never written"


def _rows(df: pd.DataFrame, cols: tuple[str, ...]) -> list[tuple]:
    """The rows of ``df`` as tuples of plain Python values (missing -> None): one pass per
    column (a vectorised mask for the missing cells), not a check per cell."""
    import pandas as pd

    present = []
    for c in cols:
        if c not in df:
            present.append([None] * len(df))
            continue
        col = df[c]
        kind = getattr(col.dtype, "kind", "O")
        if kind in "biu" and not isinstance(col.dtype, pd.api.extensions.ExtensionDtype):
            present.append(col.tolist())  # numpy bool / integers: never missing
            continue
        if isinstance(col.dtype, pd.CategoricalDtype):  # codes -> categories (-1: missing)
            names = [*col.cat.categories.tolist(), None]
            present.append([names[k] for k in col.cat.codes.tolist()])
            continue
        values = col.astype(object).tolist()
        missing = col.isna().to_numpy()
        if missing.any():
            for i in missing.nonzero()[0].tolist():
                values[i] = None
        present.append(values)
    return list(zip(*present))


def _split(df: pd.DataFrame, cols: tuple[str, ...], key: str = "method"
           ) -> dict[str, list[tuple]]:
    """The rows of ``df`` (as :func:`_rows`) grouped by ``key`` (a method name)."""
    out: dict[str, list[tuple]] = {}
    if not len(df) or key not in df:
        return out
    for k, row in zip(df[key].astype(object).tolist(), _rows(df, cols)):
        out.setdefault(str(k), []).append(row)
    return out


class _Out:
    """Node and edge rows (dicts with every column: missing cells None), turned into column
    lists once at the end."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.edges: list[dict[str, Any]] = []

    def node(self, **row: Any) -> None:
        full = dict.fromkeys(NODE_COLUMNS)
        full.update(row)
        self.nodes.append(full)

    def edge(self, **row: Any) -> None:
        full = dict.fromkeys(EDGE_COLUMNS)
        full.update(row)
        self.edges.append(full)

    def columns(self) -> tuple[dict[str, list], dict[str, list]]:
        """(node columns, edge columns): one list per column of ``NODE_COLUMNS`` /
        ``EDGE_COLUMNS`` (None where a row has no value)."""
        return _columns(self.nodes, NODE_COLUMNS), _columns(self.edges, EDGE_COLUMNS)


def _columns(rows: list[dict[str, Any]], names: dict[str, str]) -> dict[str, list]:
    """Rows holding every column in ``names`` -> one list per column (a transposition in C)."""
    if not rows:
        return {c: [] for c in names}
    return {c: list(v) for c, v in zip(names, zip(*map(itemgetter(*names), rows)))}


class _Fact:
    """What the frames say about one value of a method."""

    __slots__ = ("dtype", "is_input", "is_output", "is_tensor", "lifetime", "name", "nbytes",
                 "shape", "storage")

    def __init__(self) -> None:
        self.name = self.dtype = self.shape = self.nbytes = self.storage = None
        self.lifetime = None
        self.is_input = self.is_output = self.is_tensor = False

    def tensor(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": self.shape,
                "bytes": self.nbytes, "lifetime": self.lifetime}


def pte_frames(art: Artifact, method: str | None = None
               ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(nodes, edges, method names) of a ``.pte`` / ``.bpte`` artifact.

    Example:
        >>> import workbench as wb
        >>> nodes, edges, methods = pte_frames(wb.open("sample_models/mlp_portable.pte"))  # doctest: +SKIP
    """
    ncols, ecols, names = pte_columns(art, method)
    return frame(NODE_COLUMNS, ncols), frame(EDGE_COLUMNS, ecols), names


def pte_columns(art: Artifact, method: str | None = None
                ) -> tuple[dict[str, list], dict[str, list], list[str]]:
    """(node columns, edge columns, method names) of a ``.pte`` / ``.bpte`` artifact: the
    rows of :func:`pte_frames` as one list of plain Python values per column (None:
    missing), before any pandas conversion (Model Explorer's adapter reads these).

    Example:
        >>> import workbench as wb
        >>> ncols, ecols, methods = pte_columns(wb.open("sample_models/mlp_portable.pte"))  # doctest: +SKIP
        >>> ncols["kind"][:2]                                               # doctest: +SKIP
        ['input', 'kernel']
    """
    fr = art.frames
    methods = fr["methods"]
    names = [str(m) for m in methods["method"]]
    if method is not None:
        if method not in names:
            raise KeyError(f"{art.path}: no method {method!r} (methods: {names})")
        names = [method]
    nvalues = dict(zip(methods["method"].astype(str), methods["values"].astype(int)))
    ins = _split(fr["instructions"], INSTRUCTION_COLS)
    parts = {k: _split(fr[k], cols) for k, cols in PART_COLS.items()}
    tens = _split(art.tensors, TENSOR_COLS)
    out = _Out()
    for m in names:
        if m not in ins:
            continue  # a constant method: no instructions, no graph
        _method(out, m, ins[m], nvalues[m], {k: v.get(m) for k, v in parts.items()},
                tens.get(m))
    ncols, ecols = out.columns()
    return ncols, ecols, names


def _facts(n: int, values: Any, tens: Any, life: Any) -> list[_Fact]:
    facts = [_Fact() for _ in range(n)]
    if values is not None:
        for v, typ, is_in, is_out in values:
            if 0 <= v < n:
                f = facts[v]
                f.is_input, f.is_output, f.is_tensor = bool(is_in), bool(is_out), typ == "Tensor"
    if tens is not None:
        for row in tens:
            v = row[0]
            if v is not None and 0 <= v < n and facts[v].name is None:
                f = facts[v]
                f.name, f.dtype, f.shape, f.nbytes, f.storage = row[1:]
                f.is_tensor = True
    if life is not None:
        for v, lo, hi in life:
            if 0 <= v < n and lo is not None and hi is not None:
                facts[v].lifetime = f"{lo}..{hi}"
    return facts


def _method(out: _Out, m: str, ins: list[tuple], nvalues: int, parts: dict[str, Any],
            tens: Any) -> None:
    facts = _facts(nvalues, parts["values"], tens, parts["lifetimes"])
    dels = {}
    if parts["delegates"] is not None:
        for d, backend, did, size in parts["delegates"]:
            dels.setdefault(d, (backend, did, size))
    rows = sorted((r for r in ins if r[2] in CALL_KINDS), key=lambda r: r[1])
    ok = range(nvalues).__contains__

    def nbytes(vals: tuple) -> int | None:
        b = [facts[v].nbytes for v in vals if ok(v) and facts[v].nbytes is not None]
        return sum(b) if b else None

    # where each value is written (positions in order) -> first writer after a read
    writers: dict[int, list[tuple[int, int]]] = {}
    for instr, pos, _k, _op, _d, _a, _r, writes in rows:
        for v in writes or ():
            writers.setdefault(v, []).append((pos, instr))
    sources: dict[int, str] = {}
    missing: set[int] = set()

    def source(v: int) -> str:
        """The node of a tensor read with no writer before: input / constant / state."""
        sid = sources.get(v)
        if sid is None:
            f = facts[v]
            kind = ("input" if f.is_input else "constant" if f.storage in STORED else "state")
            sid = sources[v] = {"input": "in", "constant": "c", "state": "s"}[kind] + str(v)
            out.node(method=m, id=sid, label=f"input {v}" if f.is_input else (f.name or sid),
                     kind=kind, namespace="", value=v, storage=f.storage, **f.tensor())
        return sid

    def dangling(v: int) -> str:
        if v not in missing:
            missing.add(v)
            out.node(method=m, id=f"missing{v}", label=f"value {v} (missing)", kind="missing",
                     namespace="", value=v, defect=f"{DANGLING} (method has {nvalues} values)")
        return f"missing{v}"

    last: dict[int, str] = {}   # value -> node id of its latest writer so far
    edges: list[tuple[str, str, int | None, str | None]] = []  # source, target, value, defect
    calls = []
    for instr, pos, kind, op, d, args, reads, writes in rows:
        nid = f"i{instr}"
        backend = blob = None
        label = op
        if kind == "delegate":
            backend, did, blob = dels.get(d, (None, None, None))
            label = f"delegate {d} ({did or '?'})"
            calls.append((instr, d, tuple(args or ()), nid))
        first = next((v for v in writes or () if ok(v)), None)
        out.node(method=m, id=nid, label=label or "?", kind=kind, namespace="",
                 instruction=instr, position=pos, op=op if kind == "kernel" else label,
                 delegate_index=d, backend=backend, bytes=blob,
                 dtype=facts[first].dtype if first is not None else None,
                 shape=facts[first].shape if first is not None else None,
                 lifetime=facts[first].lifetime if first is not None else None,
                 bytes_read=nbytes(tuple(reads or ())), bytes_written=nbytes(tuple(writes or ())))
        for v in reads or ():
            if not ok(v):
                edges.append((dangling(v), nid, v, DANGLING))
                continue
            src = last.get(v)
            if src is not None:
                edges.append((src, nid, v, None))
                continue
            f = facts[v]
            if not f.is_tensor:
                continue  # a literal argument (Int, IntList, ...): an attribute, not an edge
            later = [i for p, i in writers.get(v, ()) if p >= pos]
            if later and not f.is_input and f.storage not in STORED and f.storage != "mutable":
                edges.append((f"i{later[0]}", nid, v, CYCLE))
            else:
                edges.append((source(v), nid, v, None))
        for v in writes or ():
            if ok(v):
                last[v] = nid
            else:
                edges.append((nid, dangling(v), v, DANGLING))
    # method outputs
    for k, v in enumerate(v for v in range(nvalues) if facts[v].is_output):
        f = facts[v]
        oid = f"out{v}"
        out.node(method=m, id=oid, label=f"output {k}", kind="output", namespace="", value=v,
                 storage=f.storage, **f.tensor())
        src = last.get(v)
        edges.append((src if src is not None else source(v), oid, v, None))
    # XNNPACK delegates expand inside their group; their outputs feed the call's readers
    rewire = _expand(out, m, calls, dels, parts, facts)
    add, blank = out.edges.append, dict.fromkeys(EDGE_COLUMNS)
    for src, tgt, v, defect in edges:
        row = blank.copy()
        if v is not None and ok(v):
            f = facts[v]
            row["name"], row["dtype"], row["shape"] = f.name, f.dtype, f.shape
            row["bytes"], row["lifetime"] = f.nbytes, f.lifetime
        row["method"], row["source"], row["target"] = m, rewire.get((src, v), src), tgt
        row["value"], row["defect"] = v, defect
        add(row)


def _expand(out: _Out, m: str, calls: list, dels: dict, parts: dict[str, Any],
            facts: list[_Fact]) -> dict[tuple[str, int], str]:
    """Nodes and edges inside every XNNPACK delegate call of method ``m`` whose graph was
    read; returns (call node, outer value) -> the group output node that now produces it.

    A delegate tensor row is ``(name, dtype, shape, nbytes, role, quant, storage,
    external_id)`` (``PART_COLS["delegate_tensors"]`` after index and value)."""
    dn, dt = parts["delegate_nodes"], parts["delegate_tensors"]
    rewire: dict[tuple[str, int], str] = {}
    if dn is None or not calls:
        return rewire
    ops: dict[int, list[tuple]] = {}
    for row in dn:
        ops.setdefault(row[0], []).append(row[1:])
    tensors: dict[int, dict[int, tuple]] = {}
    if dt is not None:
        for row in dt:
            tensors.setdefault(row[0], {}).setdefault(row[1], row[2:])
    ncalls: dict[int, int] = {}
    for _i, d, _a, _n in calls:
        ncalls[d] = ncalls.get(d, 0) + 1
    n_outer = len(facts)
    add_node, add_edge = out.nodes.append, out.edges.append
    node_blank, edge_blank = dict.fromkeys(NODE_COLUMNS), dict.fromkeys(EDGE_COLUMNS)
    for instr, d, args, call in calls:
        backend = dels.get(d, (None,))[0]
        if backend != "xnnpack" or d not in ops:
            continue
        ns = f"delegate{d}" if ncalls[d] == 1 else f"delegate{d}@i{instr}"
        tens: dict[int, tuple] = tensors.get(d, {})
        base = node_blank.copy()
        base["method"], base["namespace"], base["delegate_index"], base["backend"] = \
            m, ns, d, backend
        made: set[str] = set()

        def edge(src: str, target: str, t: int, defect: str | None,
                 tens: dict[int, tuple] = tens) -> None:
            row = edge_blank.copy()
            r = tens.get(t)
            if r is not None:
                row["name"], row["dtype"], row["shape"], row["bytes"] = r[0], r[1], r[2], r[3]
            row["method"], row["source"], row["target"] = m, src, target
            row["value"], row["defect"] = t, defect
            add_edge(row)

        def group_node(t: int, kind: str, ns: str = ns, tens: dict[int, tuple] = tens,
                       made: set[str] = made, base: dict[str, Any] = base) -> str:
            """The id of the group node of ``kind`` for value ``t`` (made on first use)."""
            prefix = _GROUP_PREFIX[kind]
            nid = f"{ns}/{prefix}{t}"
            if nid not in made:
                made.add(nid)
                r = tens.get(t)
                row = base.copy()
                ext = None
                if r is not None:
                    row["name"], row["dtype"], row["shape"], row["bytes"] = r[0], r[1], r[2], r[3]
                    row["quant"], row["storage"], ext = r[5], r[6], r[7]
                row["id"], row["kind"], row["value"] = nid, kind, t
                row["label"] = (row["name"] if kind == "delegate_constant" else
                                f"{prefix} {ext}" if ext is not None else nid)
                row["defect"] = DANGLING if kind == "missing" else None
                add_node(row)
            return nid

        prod: dict[int, str] = {}
        for node, op, _in, outs, handle in ops[d]:
            nid = f"{ns}/n{node}"
            row = base.copy()
            r = tens.get(outs[0]) if outs else None
            if r is not None:
                row["dtype"], row["shape"], row["quant"] = r[1], r[2], r[5]
            row["id"], row["label"], row["kind"], row["op"] = nid, op, "delegate_node", op
            row["debug_handle"] = handle
            add_node(row)
            for t in outs:
                prod.setdefault(t, nid)
        for node, _op, inputs, _outs, _h in ops[d]:
            target = f"{ns}/n{node}"
            for t in inputs:
                src, defect = prod.get(t), None
                if src is None:
                    r = tens.get(t)
                    role = r[4] if r is not None else None
                    if role == "input":
                        src = group_node(t, "delegate_input")
                    elif role == "constant":
                        src = group_node(t, "delegate_constant")
                    else:
                        src = group_node(t, "missing")
                        defect = DANGLING if role is None else NEVER_WRITTEN
                edge(src, target, t, defect)
        for t, r in tens.items():
            if r[4] == "input" and f"{ns}/in{t}" not in made:
                group_node(t, "delegate_input")  # an input no operation reads
            if r[4] != "output":
                continue
            oid = group_node(t, "delegate_output")
            src = prod.get(t) or (f"{ns}/in{t}" if f"{ns}/in{t}" in made else None)
            edge(src or group_node(t, "missing"), oid, t, None if src else NEVER_WRITTEN)
        # the call feeds the group inputs; the group outputs feed the call's readers
        for t, r in tens.items():
            ext = r[7]
            if r[4] not in ("input", "output"):
                continue
            outer = args[ext] if ext is not None and 0 <= ext < len(args) else None
            good = outer is not None and 0 <= outer < n_outer
            if r[4] == "input":
                row = edge_blank.copy()
                if good:
                    f = facts[outer]
                    row["name"], row["dtype"], row["shape"] = f.name, f.dtype, f.shape
                    row["bytes"], row["lifetime"] = f.nbytes, f.lifetime
                row["method"], row["source"], row["target"] = m, call, f"{ns}/in{t}"
                row["value"], row["defect"] = outer, None if good else DANGLING
                add_edge(row)
            elif good:
                rewire[(call, outer)] = f"{ns}/out{t}"
    return rewire


#: id prefix of each kind of group node
_GROUP_PREFIX = {"delegate_input": "in", "delegate_constant": "c", "delegate_output": "out",
                 "missing": "missing"}
