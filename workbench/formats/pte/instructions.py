"""A program's instructions, and what they tell about memory over time.

Three frames of a ``.pte`` (declared in :mod:`workbench.frames`):

* ``instructions``: one row per instruction of every chain of every method: its kind, the
  operator or delegate it calls, and the value indices it reads and writes;
* ``lifetimes``: one row per memory-planned tensor value: the first and last instruction
  that uses it (from the instruction arguments), and where it lives in its arena;
* ``memory_efficiency``: one row per arena: its size against the peak of bytes live at once.

The program does not say which arguments of a call are written. A kernel call ends with
its ``out`` arguments followed by its return values (the same values again): those are its
``writes``. A delegate call takes its outputs last: its trailing arguments that are
non-constant tensors (or lists of them), not method inputs and not used by an earlier
instruction are taken as written. Everything else is read. A planned tensor that is read
but never written is a view (its bytes are another tensor's): its last use keeps the tensor
last written to its bytes alive.

Both the vectorised path and the scalar verifying path read slots by the names of
:mod:`.schema`; any doubt on the fast path re-reads the method with the scalar path.

Example:
    >>> import workbench as wb
    >>> ins = wb.open("sample_models/mlp_portable.pte").frames["instructions"]
    >>> ins[["instruction", "kind", "op"]].head(2).values.tolist()
    [[0, 'kernel', 'aten::permute_copy.out'], [1, 'kernel', 'aten::addmm.out']]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._cols import categorical, filled, ints, objects, strings
from ..._vecfb import SlowPath
from ...flatbuf import Table
from .program import Method, ProgramReader
from .schema import (
    Chain,
    DelegateCall,
    ExecutionPlan,
    FreeCall,
    Instruction,
    InstructionArguments,
    JumpFalseCall,
    KernelCall,
    KernelTypes,
    List,
    MoveCall,
    Program,
)
from .tensors import CONSTANT_STORAGES, MUTABLE, NAMED, PLANNED

__all__ = ["INSTRUCTION_KINDS", "InstructionColumns", "MethodInstructions"]

_I = InstructionArguments
#: The instructions frame's ``kind`` by InstructionArguments code.
INSTRUCTION_KINDS = ("none", "kernel", "delegate", "move", "jump_false", "free")
# Plain ints (not enum members): these are tested once per argument in the hot loops.
_LISTS = frozenset((int(KernelTypes.TensorList), int(KernelTypes.OptionalTensorList)))
_TENSORISH = frozenset((int(KernelTypes.Tensor), *_LISTS))
_KERNEL, _DELEGATE = int(_I.KernelCall), int(_I.DelegateCall)
_MOVE, _JUMP_FALSE = int(_I.MoveCall), int(_I.JumpFalseCall)
#: Above this many (positions x live tensors) the peak is taken as a sum of bytes, not as
#: the union of the live byte ranges (which counts aliased tensors once).
MAX_UNION_WORK = 20_000_000


@dataclass
class MethodInstructions:
    """The instructions of one method as columns, in execution order (chain by chain)."""
    chain: np.ndarray  # int64
    instruction: np.ndarray  # int64: index in the chain
    kind: np.ndarray  # int64: InstructionArguments code
    index: np.ndarray  # int64: op_index / delegate_index (-1: neither)
    args: list[tuple[int, ...]]
    destination: np.ndarray  # int64: JumpFalseCall.destination_instruction (-1: none)
    table_offset: np.ndarray  # int64: the Instruction table


def read_method(r: ProgramReader, plan: Table) -> MethodInstructions:
    """The instructions of the ExecutionPlan table ``plan`` (fast path, else scalar)."""
    try:
        if not r.fast:
            raise SlowPath("disabled")
        return _fast(r, plan)
    except SlowPath:
        return _slow(plan)


def _fast(r: ProgramReader, plan: Table) -> MethodInstructions:
    vec = r.vec
    pos_parts, chain_parts, idx_parts = [], [], []
    for c, ch in enumerate(plan.tables(ExecutionPlan.chains, "chains")):
        start, n = ch.vector(Chain.instructions, 4, "instructions")
        if not n:
            continue
        at = start + 4 * np.arange(n, dtype=np.int64)
        pos_parts.append(at + vec.gather(at, "<u4"))
        chain_parts.append(np.full(n, c, np.int64))
        idx_parts.append(np.arange(n, dtype=np.int64))
    if not pos_parts:
        z = np.zeros(0, np.int64)
        return MethodInstructions(z, z, z, z, [], z, z)
    pos = np.concatenate(pos_parts)
    ins = vec.tables(pos, "instructions")
    kind = ins.scalar(Instruction.instr_args_type, "u1").astype(np.int64)
    ref = ins.ref(Instruction.instr_args)
    if ((kind >= len(_I)) | ((kind > 0) & (ref == 0))).any():
        raise SlowPath("bad union")
    n = len(pos)
    index = np.full(n, -1, np.int64)
    dest = np.full(n, -1, np.int64)
    args: list[tuple[int, ...]] = [()] * n
    for typ, slot, vslot in ((_I.KernelCall, KernelCall.op_index, KernelCall.args),
                             (_I.DelegateCall, DelegateCall.delegate_index, DelegateCall.args)):
        sel = np.flatnonzero(kind == typ)
        if not len(sel):
            continue
        T = vec.tables(ref[sel], "instr_args")
        index[sel] = T.scalar(slot, "<i4")
        starts, counts = T.vectors(vslot, 4)
        flat = vec.flat(starts, counts, "<i4").tolist()
        k = 0
        for row, cnt in zip(sel.tolist(), counts.tolist()):
            args[row] = tuple(flat[k:k + cnt])
            k += cnt
    sel = np.flatnonzero(kind == _I.MoveCall)
    if len(sel):
        T = vec.tables(ref[sel], "MoveCall")
        for row, a, b in zip(sel.tolist(), T.scalar(MoveCall.move_from, "<i4").tolist(),
                             T.scalar(MoveCall.move_to, "<i4").tolist()):
            args[row] = (a, b)
    sel = np.flatnonzero(kind == _I.JumpFalseCall)
    if len(sel):
        T = vec.tables(ref[sel], "JumpFalseCall")
        dest[sel] = T.scalar(JumpFalseCall.destination_instruction, "<i4")
        for row, a in zip(sel.tolist(), T.scalar(JumpFalseCall.cond_value_index, "<i4").tolist()):
            args[row] = (a,)
    sel = np.flatnonzero(kind == _I.FreeCall)
    if len(sel):
        T = vec.tables(ref[sel], "FreeCall")
        for row, a in zip(sel.tolist(), T.scalar(FreeCall.value_index, "<i4").tolist()):
            args[row] = (a,)
    return MethodInstructions(np.concatenate(chain_parts), np.concatenate(idx_parts), kind,
                              index, args, dest, pos)


def _slow(plan: Table) -> MethodInstructions:
    rows: list[tuple] = []
    for c, ch in enumerate(plan.tables(ExecutionPlan.chains, "chains")):
        for i, ins in enumerate(ch.tables(Chain.instructions, "instructions")):
            t, a = ins.union(Instruction.instr_args_type, len(_I), "instr_args")
            index, dest, args = -1, -1, ()
            if a is not None:
                if t == _I.KernelCall:
                    index = a.i32(KernelCall.op_index)
                    args = tuple(a.array(KernelCall.args, "<i4", "args").tolist())
                elif t == _I.DelegateCall:
                    index = a.i32(DelegateCall.delegate_index)
                    args = tuple(a.array(DelegateCall.args, "<i4", "args").tolist())
                elif t == _I.MoveCall:
                    args = (a.i32(MoveCall.move_from), a.i32(MoveCall.move_to))
                elif t == _I.JumpFalseCall:
                    args = (a.i32(JumpFalseCall.cond_value_index),)
                    dest = a.i32(JumpFalseCall.destination_instruction)
                elif t == _I.FreeCall:
                    args = (a.i32(FreeCall.value_index),)
            rows.append((c, i, t, index, args, dest, ins.pos))
    if not rows:
        z = np.zeros(0, np.int64)
        return MethodInstructions(z, z, z, z, [], z, z)
    c, i, t, index, args, dest, pos = zip(*rows)
    a = [np.array(x, np.int64) for x in (c, i, t, index, dest, pos)]
    return MethodInstructions(a[0], a[1], a[2], a[3], list(args), a[4], a[5])


class InstructionColumns:
    """Builders of the ``instructions``, ``lifetimes`` and ``memory_efficiency`` frames of the
    program read by ``r`` (the records are read once, on first use)."""

    def __init__(self, r: ProgramReader) -> None:
        self.r = r
        self._records: list[MethodInstructions] | None = None
        self._rw: list[tuple[list, list]] | None = None
        self._spans: list[dict[str, np.ndarray]] | None = None
        self._lists: dict[tuple[int, int], tuple[int, ...]] = {}

    @property
    def records(self) -> list[MethodInstructions]:
        """One :class:`MethodInstructions` per method."""
        if self._records is None:
            r = self.r
            plans = r.fb.root("Program").tables(Program.execution_plan, "execution_plan")
            self._records = [read_method(r, p) for p in plans]
        return self._records

    def _list_items(self, m: Method, v: int) -> tuple[int, ...]:
        """Tensor value indices held by list value ``v`` of method ``m`` (read once)."""
        key = (id(m), v)
        items = self._lists.get(key)
        if items is None:
            p = int(m.vpos[v])
            items = ()
            if p:
                tab = self.r.fb.table_at(p, f"{m.name}.values[{v}]", p)
                nv = len(m.vtypes)
                items = tuple(x for x in tab.array(List.items, "<i4", "items").tolist()
                              if 0 <= x < nv)
            self._lists[key] = items
        return items

    def _storage(self, m: Method) -> np.ndarray:
        """Storage code per value of ``m`` (-1: not a tensor)."""
        out = np.full(len(m.vtypes), -1, np.int64)
        t = m.tensors
        ok = (t.value >= 0) & (t.value < len(out))
        out[t.value[ok]] = t.storage[ok]
        return out

    def reads_writes(self) -> list[tuple[list, list]]:
        """Per method: (reads, writes) tuples per instruction (see the module docstring)."""
        if self._rw is not None:
            return self._rw
        self._rw = [self._rw_method(m, rec) for m, rec in zip(self.r.methods, self.records)]
        return self._rw

    def _rw_method(self, m: Method, rec: MethodInstructions) -> tuple[list, list]:
        nv = len(m.vtypes)
        vt = m.vtypes.tolist()
        storage = self._storage(m).tolist()
        constant = frozenset(int(x) for x in CONSTANT_STORAGES) | {int(NAMED)}
        inputs = set(int(x) for x in m.inputs)
        seen = [False] * nv
        lists: dict[int, tuple[int, ...]] = {}

        def items(v: int) -> tuple[int, ...]:
            if v not in lists:
                lists[v] = self._list_items(m, v) if vt[v] in _LISTS else (v,)
            return lists[v]

        def written(v: int) -> bool:
            if not 0 <= v < nv or v in inputs or vt[v] not in _TENSORISH or seen[v]:
                return False
            members = items(v)
            return bool(members) and all(
                0 <= x < nv and not seen[x] and x not in inputs
                and storage[x] >= 0 and storage[x] not in constant for x in members)

        reads, writes = [], []
        for kind, args in zip(rec.kind.tolist(), rec.args):
            if kind == _KERNEL:
                n = _returned(args)
                if not n and args and (args[-1] in args[:-1] or written(args[-1])):
                    n = 1  # returns an argument (in place, e.g. copy_) or a lone out
                r_, w_ = args[:len(args) - n], args[len(args) - n:]
            elif kind == _DELEGATE:
                k = len(args)
                while k > 0 and written(args[k - 1]):
                    k -= 1
                r_, w_ = args[:k], args[k:]
            elif kind == _MOVE:
                r_, w_ = args[:1], args[1:]
            elif kind == _JUMP_FALSE:
                r_, w_ = args, ()
            else:
                r_, w_ = (), ()
            reads.append(tuple(dict.fromkeys(r_)))
            writes.append(tuple(dict.fromkeys(w_)))
            for v in args:
                if 0 <= v < nv:
                    seen[v] = True
                    if vt[v] in _LISTS:
                        for x in items(v):
                            if 0 <= x < nv:
                                seen[x] = True
        return reads, writes

    # -- frames -------------------------------------------------------------------------------
    def instructions(self) -> dict[str, Any]:
        """The instructions frame."""
        r = self.r
        parts = []
        for mi, (m, rec, (reads, writes)) in enumerate(
                zip(r.methods, self.records, self.reads_writes())):
            n = len(rec.kind)
            ops = [f"{a}.{b}" if b else a for a, b in m.operators]
            op = filled(n, None)
            name = filled(n, None)
            overload = filled(n, None)
            deleg = filled(n, None)
            for k, (kind, idx) in enumerate(zip(rec.kind.tolist(), rec.index.tolist())):
                if kind == _I.KernelCall and 0 <= idx < len(ops):
                    op[k] = ops[idx]
                    name[k], overload[k] = m.operators[idx]
                elif kind == _I.DelegateCall and 0 <= idx < len(m.delegates):
                    deleg[k] = m.delegates[idx].id
            is_k = rec.kind == _I.KernelCall
            is_d = rec.kind == _I.DelegateCall
            parts.append({
                "method": np.full(n, mi, np.int64), "chain": rec.chain,
                "instruction": rec.instruction, "position": np.arange(n, dtype=np.int64),
                "kind": rec.kind, "op_index": rec.index, "is_k": is_k, "op": op,
                "operator": name, "overload": overload, "delegate_index": rec.index,
                "is_d": is_d, "delegate": deleg, "args": objects(rec.args),
                "reads": objects(reads), "writes": objects(writes),
                "destination": rec.destination, "table_offset": rec.table_offset})
        if not parts:
            return {c: [] for c in _INSTRUCTION_COLUMNS}
        c = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        return {
            "method": categorical(c["method"], [m.name for m in r.methods]),
            "chain": c["chain"], "instruction": c["instruction"], "position": c["position"],
            "kind": categorical(c["kind"], INSTRUCTION_KINDS),
            "op_index": ints(c["op_index"], ~c["is_k"]), "op": strings(c["op"]),
            "operator": strings(c["operator"]), "overload": strings(c["overload"]),
            "delegate_index": ints(c["delegate_index"], ~c["is_d"]),
            "delegate": strings(c["delegate"]), "args": c["args"], "reads": c["reads"],
            "writes": c["writes"], "destination": ints(c["destination"], c["destination"] < 0),
            "table_offset": c["table_offset"],
        }

    def _uses(self, m: Method, rec: MethodInstructions) -> tuple[np.ndarray, np.ndarray]:
        """(position, value) for every tensor an instruction names (list members expanded)."""
        nv = len(m.vtypes)
        vt = m.vtypes.tolist()
        lists: dict[int, tuple[int, ...]] = {}
        pos, val = [], []
        for p, args in enumerate(rec.args):
            for v in args:
                if not 0 <= v < nv:
                    continue
                if vt[v] in _LISTS:
                    members = lists.get(v)
                    if members is None:
                        members = lists[v] = self._list_items(m, v)
                else:
                    members = (v,)
                for x in members:
                    pos.append(p)
                    val.append(x)
        return np.array(pos, np.int64), np.array(val, np.int64)

    def _lifetimes(self) -> list[dict[str, np.ndarray]]:
        """Per method: the planned tensors' use spans (computed once; two frames share them)."""
        if self._spans is None:
            self._spans = self._compute_lifetimes()
        return self._spans

    def _compute_lifetimes(self) -> list[dict[str, np.ndarray]]:
        out = []
        for mi, (m, rec) in enumerate(zip(self.r.methods, self.records)):
            t = m.tensors
            rows = np.flatnonzero((t.mem_id >= 0) & np.isin(t.storage, (PLANNED, MUTABLE)))
            nv = len(m.vtypes)
            first = np.full(nv + 1, np.iinfo(np.int64).max, np.int64)
            last = np.full(nv + 1, -1, np.int64)
            pos, val = self._uses(m, rec)
            np.minimum.at(first, val, pos)
            np.maximum.at(last, val, pos)
            v = t.value[rows]
            f, la = first[v], last[v]
            used = la >= 0
            n_ins = len(rec.kind)
            is_in = np.isin(v, np.array(m.inputs, np.int64))
            is_out = np.isin(v, np.array(m.outputs, np.int64))
            mutable = t.storage[rows] == MUTABLE  # state kept between calls: always live
            start = np.where(is_in | mutable, 0, np.where(used, f, -1))
            end = np.where(is_out | mutable, max(n_ins - 1, 0), np.where(used, la, -1))
            end = np.where(is_in & ~used & ~is_out, 0, end)
            self._views(mi, rows, start, end, used | is_in)
            out.append({"method": np.full(len(rows), mi, np.int64), "value": v, "rows": rows,
                        "mem_id": t.mem_id[rows], "offset": t.mem_offset[rows],
                        "nbytes": t.nbytes[rows], "first": np.where(used, f, -1),
                        "last": la, "used": used, "is_input": is_in, "is_output": is_out,
                        "start": start, "end": end, "storage": t.storage[rows]})
        return out

    def _views(self, mi: int, rows: np.ndarray, start: np.ndarray, end: np.ndarray,
               live: np.ndarray) -> None:
        """Extend ``end`` of the tensor whose bytes a view reads (in place): a planned tensor
        read but never written holds the bytes last written to its range before it is read."""
        m = self.r.methods[mi]
        t = m.tensors
        writes = self.reads_writes()[mi][1]
        nv = len(m.vtypes)
        first_write: dict[int, int] = {}
        for p, w in enumerate(writes):
            for v in w:
                if 0 <= v < nv and v not in first_write:
                    first_write[v] = p
        wrote = np.full(nv + 1, -1, np.int64)
        if first_write:
            wrote[np.fromiter(first_write, np.int64)] = np.fromiter(first_write.values(), np.int64)
        v = t.value[rows]
        mem, lo = t.mem_id[rows], t.mem_offset[rows]
        hi = lo + t.nbytes[rows]
        w = wrote[v]
        inputs = np.isin(v, np.array(m.inputs, np.int64))
        views = np.flatnonzero(live & (w < 0) & ~inputs)
        if not len(views):
            return
        for k, base in _last_writers(views, mem, lo, hi, w, start, inputs).items():
            end[base] = max(end[base], end[k])

    def lifetimes(self) -> dict[str, Any]:
        """The lifetimes frame."""
        from .tensors import STORAGES

        r = self.r
        parts = self._lifetimes()
        names = []
        for m, p in zip(r.methods, parts):
            t = m.tensors
            fqn = t.fqn[p["rows"]]
            names.append(objects([f if f is not None else f"{m.name}/{v}"
                                  for f, v in zip(fqn.tolist(), p["value"].tolist())]))
        if not parts or not sum(len(p["value"]) for p in parts):
            return {c: [] for c in _LIFETIME_COLUMNS}
        c = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        name = np.concatenate(names)
        return {
            "method": categorical(c["method"], [m.name for m in r.methods]),
            "value": c["value"], "name": strings(name), "storage":
            categorical(c["storage"], STORAGES), "mem_id": c["mem_id"], "offset": c["offset"],
            "nbytes": c["nbytes"], "end_offset": c["offset"] + c["nbytes"],
            "first": ints(c["first"], ~c["used"]), "last": ints(c["last"], ~c["used"]),
            "is_input": c["is_input"], "is_output": c["is_output"],
            "live_from": ints(c["start"], c["start"] < 0),
            "live_to": ints(c["end"], c["end"] < 0),
        }

    def memory_efficiency(self) -> dict[str, Any]:
        """The memory_efficiency frame: per arena, its size against the peak live bytes."""
        r = self.r
        cols: dict[str, list] = {c: [] for c in _EFFICIENCY_COLUMNS}
        for m, p in zip(r.methods, self._lifetimes()):
            sizes = list(m.buffer_sizes)
            for mem_id in sorted(set(p["mem_id"].tolist()) | set(range(1, len(sizes)))):
                sel = p["mem_id"] == mem_id
                lo, hi = p["start"][sel], p["end"][sel]
                off, nb = p["offset"][sel], p["nbytes"][sel]
                live = lo >= 0
                peak, at, exact = _peak(lo[live], hi[live], off[live], nb[live])
                arena = sizes[mem_id] if 0 <= mem_id < len(sizes) else None
                cols["method"].append(m.name)
                cols["mem_id"].append(mem_id)
                cols["arena_bytes"].append(arena)
                cols["tensors"].append(int(sel.sum()))
                cols["tensor_bytes"].append(int(nb.sum()))
                cols["high_water"].append(int((off + nb).max()) if len(off) else 0)
                cols["peak_live_bytes"].append(peak)
                cols["peak_at"].append(at)
                cols["peak_exact"].append(exact)
                cols["efficiency"].append(peak / arena if arena else float("nan"))
        return cols


def _returned(args: tuple[int, ...]) -> int:
    """Arguments a kernel call writes: the emitter passes an out variant's ``out`` arguments,
    then its return values, which are the same values: the largest ``2n`` trailing arguments
    whose halves are equal give ``2n`` (0: none repeat, e.g. an op returning nothing)."""
    for n in range(len(args) // 2, 0, -1):
        if args[-n:] == args[-2 * n:-n]:
            return 2 * n
    return 0


def _peak(lo: np.ndarray, hi: np.ndarray, off: np.ndarray, nb: np.ndarray
          ) -> tuple[int, int | None, bool]:
    """(peak live bytes, position, exact): the most bytes live at one instruction, counting
    overlapping byte ranges (aliases) once; a plain sum when that is too much work."""
    if not len(lo):
        return 0, None, True
    starts = np.unique(lo)  # the peak is reached where some tensor becomes live
    if len(starts) * len(lo) > MAX_UNION_WORK:
        delta = np.zeros(int(hi.max()) + 2, np.int64)
        np.add.at(delta, lo, nb)
        np.add.at(delta, hi + 1, -nb)
        run = np.cumsum(delta)
        return int(run.max()), int(run.argmax()), False
    order = np.argsort(off, kind="stable")
    lo, hi, off, end = lo[order], hi[order], off[order], (off + nb)[order]
    best, best_at = -1, None
    for p in starts.tolist():
        live = (lo <= p) & (hi >= p)
        a, b = off[live], end[live]
        if not len(a):
            continue
        reach = np.maximum.accumulate(b)
        prev = np.concatenate(([a[0]], reach[:-1]))
        total = int(np.maximum(b - np.maximum(a, prev), 0).sum())
        if total > best:
            best, best_at = total, p
    return max(best, 0), best_at, True


_INSTRUCTION_COLUMNS = ("method", "chain", "instruction", "position", "kind", "op_index", "op",
                        "operator", "overload", "delegate_index", "delegate", "args", "reads",
                        "writes", "destination", "table_offset")
_LIFETIME_COLUMNS = ("method", "value", "name", "storage", "mem_id", "offset", "nbytes",
                     "end_offset", "first", "last", "is_input", "is_output", "live_from",
                     "live_to")
_EFFICIENCY_COLUMNS = ("method", "mem_id", "arena_bytes", "tensors", "tensor_bytes",
                       "high_water", "peak_live_bytes", "peak_at", "peak_exact", "efficiency")


def _last_writers(views: np.ndarray, mem: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                  w: np.ndarray, start: np.ndarray, inputs: np.ndarray) -> dict[int, int]:
    """view row -> the row whose bytes it reads: of the rows overlapping it in its arena, the
    one written last before the view's first use (an input when none was written).

    One sweep in instruction order over a per-arena map of disjoint byte ranges to their last
    writer, so the cost grows with rows x live ranges, not rows squared.
    """
    mem_l, lo_l, hi_l, w_l = mem.tolist(), lo.tolist(), hi.tolist(), w.tolist()
    # events: (time, 0 = query before the writes of that instruction, 1 = write, row)
    events = [(int(start[k]), 0, k) for k in views.tolist()]
    events += [(w_l[r], 1, r) for r in np.flatnonzero(w >= 0).tolist()]
    events.sort()
    owners: dict[int, list[tuple[int, int, int]]] = {}  # arena -> sorted [(lo, hi, row)]
    found: dict[int, int] = {}
    for _, what, r in events:
        ranges = owners.setdefault(mem_l[r], [])
        a, b = lo_l[r], hi_l[r]
        if what == 0:
            best = -1
            for x_lo, x_hi, x in ranges:
                if x_lo < b and x_hi > a and (best < 0 or w_l[x] > w_l[best]):
                    best = x
            if best >= 0:
                found[r] = best
            continue
        kept: list[tuple[int, int, int]] = []
        for x_lo, x_hi, x in ranges:  # trim what this write covers
            if x_hi <= a or x_lo >= b:
                kept.append((x_lo, x_hi, x))
                continue
            if x_lo < a:
                kept.append((x_lo, a, x))
            if x_hi > b:
                kept.append((b, x_hi, x))
        if b > a:
            kept.append((a, b, r))
        kept.sort()
        owners[mem_l[r]] = kept
    missing = [k for k in views.tolist() if k not in found]
    if missing:  # read before anything was written there: the input holding those bytes
        ins = np.flatnonzero(inputs)
        order = ins[np.lexsort((lo[ins], mem[ins]))]
        for k in missing:
            hit = order[(mem[order] == mem[k]) & (lo[order] < hi[k]) & (hi[order] > lo[k])]
            if len(hit):
                found[k] = int(hit[0])
    return found
