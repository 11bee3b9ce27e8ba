"""Where time goes: an ETDump joined to the program's instructions (``wb.timeline``), and a
run of a program on the ExecuTorch runtime that records one (``wb.run``).

A view: it reads the frames of a program (``instructions``, ``tensors``), of a trace
(``events``) and optionally of an ETRecord (``debug_handles``, ``delegate_map``, ``nodes``).

An ETDump does not record which method ran. Each ``Execute`` block is one execution of one
method, so a block is attributed to the methods in which every event of the block fits: an
instruction of that kind at that (chain, instruction), calling the operator the event names
(``native_call_<op>``). One method fitting is ``exact``; several are ``ambiguous`` (the first
is named, all are listed in ``candidates``).

Example:
    >>> import workbench as wb
    >>> t = wb.timeline("sample_models/mlp_portable.pte", "sample_models/mlp_portable.etdp")
    >>> t.loc[t["kind"] == "kernel", "op"].iloc[0]
    'aten::permute_copy.out'
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._cols import missing as _missing
from .frames import build

if TYPE_CHECKING:
    import pandas as pd

    from .artifact import Artifact

__all__ = ["run", "timeline"]

#: events.kind -> timeline kind
_KINDS = {"operator_call": "kernel", "kernel": "kernel", "delegate_call": "delegate",
          "delegate_op": "delegate", "framework": "framework"}
#: instructions.kind each timeline kind must land on
_INSTRUCTION_KIND = {"kernel": "kernel", "delegate": "delegate"}
#: tensors.storage -> the storage the timeline names
_STORAGE = {"segment": "constant", "inline": "constant"}


def _artifact(x: str | os.PathLike[str] | Artifact, want: Sequence[str], what: str) -> Artifact:
    from . import _open
    from .errors import UnknownFormatError

    art = _open.open(x) if isinstance(x, (str, os.PathLike)) else x
    if art.format == "bpte" and "pte" in want:
        art = art.program
    if art.format not in want:
        raise UnknownFormatError(f"{art.files[0] if art.files else art!r}: a {what} is wanted "
                                 f"({' or '.join(want)}), not {art.format}")
    return art


def timeline(program: str | os.PathLike[str] | Artifact, etdump: str | os.PathLike[str] | Artifact,
             etrecord: str | os.PathLike[str] | Artifact | None = None, *,
             by: str = "event") -> pd.DataFrame:
    """The events of ``etdump`` joined to the instructions of ``program``.

    Args:
        program: a ``.pte`` or ``.bpte`` (path or opened artifact) the trace was recorded from.
        etdump: the ``.etdp`` trace.
        etrecord: optional ETRecord of the same export: names the graph nodes, their ops and
            module paths of each instruction (and of delegate-internal events that the
            delegate mapped).
        by: ``"event"``: one row per profile event (the ``timeline`` frame); ``"instruction"``:
            duration statistics over the iterations, one row per (method, chain,
            instruction, event name) (the ``timeline_stats`` frame).

    Returns:
        A DataFrame with the columns of ``workbench.frames.SCHEMAS["timeline"]`` (or
        ``["timeline_stats"]``); durations are the runtime's raw units (ns by default).

    Example:
        >>> import workbench as wb
        >>> s = wb.timeline("sample_models/mlp_portable.pte", "sample_models/mlp_portable.etdp",
        ...                 by="instruction")
        >>> s.loc[s["kind"] == "kernel", "count"].unique().tolist()
        [3]
    """
    if by not in ("event", "instruction"):
        raise ValueError(f"by must be 'event' or 'instruction', not {by!r}")
    prog = _artifact(program, ("pte",), "program")
    trace = _artifact(etdump, ("etdump",), "trace")
    rec = _artifact(etrecord, ("etrecord",), "ETRecord") if etrecord is not None else None
    cols = _join(prog, trace, rec)
    frame = build("timeline", cols)
    return frame if by == "event" else _stats(frame)


def _join(prog: Artifact, trace: Artifact, rec: Artifact | None) -> dict[str, Any]:
    import numpy as np

    ev = trace.frames["events"]
    ins = prog.frames["instructions"]
    methods = list(dict.fromkeys(ins["method"].astype(str)))
    by_key: dict[tuple[str, int, int], Any] = {}
    for row in ins.itertuples(index=False):
        by_key[(str(row.method), int(row.chain), int(row.instruction))] = row
    kinds = [_KINDS.get(str(k), "other") for k in ev["kind"].astype(object).tolist()]
    names = ev["name"].astype(object).tolist()
    chains, instrs = ev["chain"].tolist(), ev["instruction"].tolist()
    runs = ev["run"].tolist()

    def fits(m: str, k: int) -> bool:
        want = _INSTRUCTION_KIND.get(kinds[k])
        if want is None:
            return True
        name = names[k] if isinstance(names[k], str) else None
        key = (m, want, chains[k], instrs[k], name)
        ok = fitted.get(key)
        if ok is None:
            row = by_key.get((m, chains[k], instrs[k]))
            ok = row is not None and str(row.kind) == want
            if ok and want == "kernel" and name is not None and name.startswith("native_call_"):
                op = row.op if isinstance(row.op, str) else ""
                ok = op.split("::")[-1] == name[len("native_call_"):]
            fitted[key] = ok
        return ok

    fitted: dict[tuple, bool] = {}

    rows_of: dict[int, list[int]] = {}
    for k, r in enumerate(runs):
        rows_of.setdefault(r, []).append(k)
    cand = {run: [m for m in methods if all(fits(m, k) for k in rows)]
            for run, rows in rows_of.items()}
    blocks = ev["block"].astype(object).tolist()
    dids = ev["delegate_debug_id"].astype(object).tolist()
    n = len(ev)
    out: dict[str, list] = {c: [None] * n for c in ("method", "attribution", "candidates",
                                                    *_DESCRIBED)}
    tensors = _tensor_index(prog)
    handles = _handles(rec)

    def describe(m: str, chain: int, instr: int, did: str | None) -> tuple:
        """The _DESCRIBED values of instruction (m, chain, instr) (once per instruction)."""
        row = by_key.get((m, chain, instr))
        if row is None:
            return _NOTHING
        got: dict[str, Any] = {}
        if str(row.kind) == "kernel":
            for col in ("op", "operator", "overload"):
                v = getattr(row, col)
                got[col] = v if isinstance(v, str) else None
        elif str(row.kind) == "delegate":
            got["delegate_index"] = row.delegate_index
            got["backend"] = row.delegate if isinstance(row.delegate, str) else None
        src = row.alias_source
        got["alias_source"] = src if isinstance(src, str) else None
        stor: list[str] = []
        for side in ("reads", "writes"):
            vals = tuple(getattr(row, side))
            got[side] = vals
            hit = [tensors[(m, v)] for v in vals if (m, v) in tensors]
            got[side[:-1] + "_names"] = tuple(h[0] for h in hit)
            got[side[:-1] + "_bytes"] = int(sum(h[1] for h in hit))
            stor += [h[2] for h in hit]
        got["storages"] = ", ".join(dict.fromkeys(stor)) or None
        h = handles.get((m, instr))
        if did is not None and (m, instr, did) in handles:
            h = handles[(m, instr, did)]
        if h:
            got["debug_handles"], got["nodes"], got["ops"], got["module"] = h
        return tuple(got.get(c, d) for c, d in zip(_DESCRIBED, _NOTHING))

    joined = {run: "; ".join(c) if c else None for run, c in cand.items()}
    memo: dict[tuple, tuple] = {}
    columns = [out[c] for c in _DESCRIBED]
    for k in range(n):
        c = cand[runs[k]]
        if kinds[k] == "framework":
            out["attribution"][k] = "framework"
            m = c[0] if len(c) == 1 and blocks[k] != "Default" else None
            key = None
        else:
            out["attribution"][k] = "exact" if len(c) == 1 else "ambiguous" if c else "none"
            m = c[0] if c else None
            did = dids[k]
            key = (m, chains[k], instrs[k],
                   str(did) if isinstance(did, (str, int, np.integer)) else None) if m else None
        out["method"][k] = m
        out["candidates"][k] = joined[runs[k]]
        got = _NOTHING if key is None else memo.get(key)
        if got is None:
            got = memo[key] = describe(*key)
        for col, v in zip(columns, got):
            col[k] = v
    did = ev["delegate_debug_id"].astype(object)
    return {
        "run": ev["run"].to_numpy(), "block": ev["block"], "iteration": ev["iteration"].to_numpy(),
        "index": ev["index"].to_numpy(), "name": ev["name"], "event": ev["kind"],
        "kind": kinds, "method": out["method"], "attribution": out["attribution"],
        "candidates": out["candidates"], "chain": ev["chain"].to_numpy(),
        "instruction": ev["instruction"].to_numpy(), "op": out["op"],
        "operator": out["operator"], "overload": out["overload"],
        "delegate_index": out["delegate_index"], "backend": out["backend"],
        "delegate_debug_id": [None if v is None or v != v else str(v) for v in did],
        "reads": out["reads"], "writes": out["writes"], "read_names": out["read_names"],
        "write_names": out["write_names"], "read_bytes": out["read_bytes"],
        "write_bytes": out["write_bytes"], "alias_source": out["alias_source"],
        "storages": out["storages"],
        "start": ev["start"].to_numpy(), "end": ev["end"].to_numpy(), "duration": ev["duration"],
        "debug_handles": out["debug_handles"], "nodes": out["nodes"], "ops": out["ops"],
        "module": out["module"],
    }


#: The timeline columns that follow from the instruction an event is attributed to, and
#: their values for an event attributed to none.
_DESCRIBED = ("op", "operator", "overload", "delegate_index", "backend", "reads", "writes",
              "read_names", "write_names", "read_bytes", "write_bytes", "alias_source",
              "storages", "debug_handles", "nodes", "ops", "module")
_NOTHING = (None, None, None, None, None, (), (), None, None, 0, 0, None, None, None, None, None,
            None)


def _tensor_index(prog: Artifact) -> dict[tuple[str, int], tuple[str, int, str]]:
    """(method, value) -> (name, nbytes, storage) of the program's tensor values."""
    t = prog.frames["tensors"]
    t = t[t["value"].notna()]
    return {(str(m), int(v)): (str(n), int(b), _STORAGE.get(str(s), str(s)))
            for m, v, n, b, s in zip(t["method"], t["value"], t["name"], t["nbytes"],
                                     t["storage"])}


def _handles(rec: Artifact | None) -> dict[tuple, tuple]:
    """(method, instruction[, delegate debug id]) -> (handles, nodes, ops, modules) from an
    ETRecord (empty without one)."""
    if rec is None:
        return {}
    nodes = rec.frames["nodes"]
    edge = nodes[nodes["stage"].astype(str) == "edge"]
    module = {(str(m), str(n)): mod for m, n, mod in
              zip(edge["method"].astype(object), edge["name"], edge["module"].astype(object))}
    out: dict[tuple, tuple] = {}

    def add(key: tuple, method: str, rows: Any) -> None:
        hs = tuple(dict.fromkeys(int(h) for h in rows["debug_handle"].dropna()))
        # a node listed under several handles / rows is named once (in first-seen order)
        pairs = dict.fromkeys((str(n), None if _missing(o) else str(o))
                              for n, o in zip(rows["node"].astype(object), rows["op"].astype(object))
                              if not _missing(n))
        ns = [n for n, _ in pairs]
        ops = [o for _, o in pairs if o is not None]
        mods = [module.get((method, x)) for x in ns]
        # the model's own top level has the empty module path: not a module to name
        mods = [x for x in dict.fromkeys(mods) if isinstance(x, str) and x]
        if hs or ns:
            out[key] = (hs, "; ".join(ns) or None, "; ".join(ops) or None,
                        "; ".join(mods) or None)

    dh = rec.frames["debug_handles"]
    for (m, i), rows in dh.groupby([dh["method"].astype(object), "instruction"], sort=False):
        add((str(m), int(i)), str(m), rows)
    dm = rec.frames["delegate_map"]
    dm = dm[dm["delegate_debug_id"].notna()]
    for (m, i, d), rows in dm.groupby([dm["method"].astype(object), "instruction",
                                       "delegate_debug_id"], sort=False):
        add((str(m), int(i), str(d)), str(m), rows)
    return out


def _stats(t: pd.DataFrame) -> pd.DataFrame:
    """Duration statistics over iterations: one row per (method, chain, instruction, kind,
    name)."""
    import pandas as pd

    keys = ["method", "chain", "instruction", "kind", "name"]
    g = t.assign(method=t["method"].astype(object), kind=t["kind"].astype(object),
                 name=t["name"].astype(object), d=t["duration"].astype("float64"))
    g["method"] = g["method"].fillna("")
    grouped = g.groupby(keys, sort=False, dropna=False)
    d = grouped["d"]
    first = grouped[["op", "backend", "read_bytes", "write_bytes", "alias_source", "storages",
                     "module"]].first()
    s = pd.DataFrame({"count": grouped.size(), "total": d.sum(min_count=1), "mean": d.mean(),
                      "std": d.std(), "min": d.min(), "median": d.median(), "max": d.max()})
    s = s.join(first).reset_index()
    kind_total = s.groupby("kind")["total"].transform("sum")
    s["share"] = s["total"] / kind_total
    s["method"] = s["method"].replace("", None)
    cols: dict[str, Any] = {c: s[c].tolist() for c in s.columns}
    for c in ("total", "min", "max"):
        cols[c] = [None if v != v else int(v) for v in cols[c]]
    for c in ("op", "backend", "alias_source", "storages", "module"):
        cols[c] = [v if isinstance(v, str) else None for v in cols[c]]
    return build("timeline_stats", cols)


# -- running a program with ETDump on -----------------------------------------------------------

def run(program: str | os.PathLike[str], iterations: int = 10, etdump: bool | str = True, *,
        method: str = "forward", etrecord: str | os.PathLike[str] | Artifact | None = None,
        data: str | os.PathLike[str] | None = None, inputs: Sequence[Any] | None = None,
        debug_buffer_size: int = 0, timeout: float = 600.0, by: str = "event") -> pd.DataFrame:
    """Run ``method`` of ``program`` ``iterations`` times on the ExecuTorch runtime with
    ETDump on, and return its :func:`timeline`.

    The runtime runs in a child process (:func:`workbench.runtime.run_child`): a crash there
    (e.g. an XNNPACK program whose weights are in a ``.ptd`` not given) raises an error here
    instead of ending the interpreter. Before anything runs, the kernels the program calls
    are checked against the installed runtime, and the kernel libraries it needs (quantized
    ops, LLM custom ops) are imported in the child; ``frame.attrs["kernel_libraries"]`` lists
    them.

    Args:
        program: the ``.pte`` path.
        iterations: executions of ``method``.
        etdump: ``True``: write the trace to a temporary file (deleted after reading);
            a path: write it there and keep it.
        method: the method to run.
        etrecord: optional ETRecord for :func:`timeline`.
        data: the ``.ptd`` holding external weights (default: the one ``wb.open`` attaches).
        inputs: the method's inputs (torch tensors or numpy arrays, in order); default:
            built from the method's ``method_meta``: seeded normal floats and zero integers,
            or for an LLM program (one with ``get_max_seq_len`` / ``get_vocab_size``)
            integers ``0..n-1``: token ids inside the vocabulary and positions within the
            cache (:func:`workbench.runtime.int_limit`).
        debug_buffer_size: bytes for logged intermediate values (0: none logged).
        timeout: seconds before the child is stopped.
        by: as for :func:`timeline`.

    Raises:
        MissingKernelError: the program calls operators the installed runtime does not
            register (named, with the library that would provide each).
        RuntimeFailure: (a ``RuntimeError``) the runtime failed or crashed; the message names
            the phase (``load_program``, ``load_method``, ``execute``).

    Example:
        >>> import workbench as wb
        >>> t = wb.run("sample_models/mlp_portable.pte", iterations=2)   # doctest: +SKIP
        >>> t.groupby("op")["duration"].median()                          # doctest: +SKIP
        >>> t.attrs["kernel_libraries"]                                   # doctest: +SKIP
        []
    """
    from . import _open, runtime

    if etdump is False:
        raise ValueError("wb.run records an ETDump: etdump must be True or a path")
    if iterations < 1:
        raise ValueError("iterations must be at least 1")
    with _open.open(program) as art:
        if art.format != "pte":
            raise TypeError(f"wb.run runs a .pte program, not a {art.format} file")
        if data is None:  # the .ptd the workbench attaches to the program, if any
            data = next((f for f in art.files if f.endswith(".ptd")), None)
        libraries = runtime.check_kernels(art)  # MissingKernelError before anything runs
        limit = runtime.int_limit(art) if inputs is None else None
    with tempfile.TemporaryDirectory(prefix="wb-run-") as tmp:
        path = os.fspath(etdump) if isinstance(etdump, (str, os.PathLike)) else \
            os.path.join(tmp, "trace.etdp")
        given = None
        if inputs is not None:
            import torch

            given = os.path.join(tmp, "inputs.pt")
            torch.save([x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
                        for x in inputs], given)
        result = runtime.run_child({
            "task": "run", "load": libraries, "program": os.fspath(program),
            "data": os.fspath(data) if data else None, "method": method,
            "iterations": int(iterations), "etdump": path,
            "debug": os.path.join(tmp, "debug.bin"), "debug_buffer_size": int(debug_buffer_size),
            "inputs": given, "int_limit": limit}, timeout=timeout, what=os.fspath(program))
        trace = _open.open(path)
        try:
            frame = timeline(program, trace, etrecord, by=by)
        finally:
            trace.close()
    frame.attrs["kernel_libraries"] = result["loaded_libraries"]
    frame.attrs["inputs"] = result["inputs"]
    frame.attrs["outputs"] = result["outputs"]
    return frame
