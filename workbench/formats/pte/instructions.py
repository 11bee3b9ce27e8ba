"""A program's instructions, and what they tell about memory over time.

Three frames of a ``.pte`` (declared in :mod:`workbench.frames`):

* ``instructions``: one row per instruction of every chain of every method: its kind, the
  operator or delegate it calls, and the value indices it reads and writes;
* ``lifetimes``: one row per memory-planned tensor value: the first and last instruction
  that uses it (from the instruction arguments), and where it lives in its arena;
* ``memory_efficiency``: one row per arena: its size against the peak of bytes live at once.

The program does not say which arguments of a call are written. For a kernel call, the
operator's schema does (:mod:`workbench.operators`: a table generated from torch's registry
for every operator of ExecuTorch's kernel libraries): the emitter passes one argument per
schema argument, then the call's return values, so argument *i* is written when schema
argument *i* is (``Tensor(a!)``, ``Tensor(a!)[]``) and the trailing return values are
written. For an operator the table does not know, the writes are guessed: the trailing
arguments repeated as return values, else the last argument when it is a tensor no earlier
instruction named; ``alias_source`` says which rule gave each row. A delegate call takes its
outputs last: its trailing arguments that are non-constant tensors (or lists of them), not
method inputs and not used by an earlier instruction are taken as written. Everything else
is read. ``reads`` and ``writes`` name tensors: a ``TensorList`` argument is expanded to its
member tensors. A planned tensor that is read but never written is a view (its bytes are
another tensor's): its last use keeps the tensor last written to its bytes alive.

Both the vectorised path and the scalar verifying path read slots by the names of
:mod:`.schema`; any doubt on the fast path re-reads the method with the scalar path. The
walk over the arguments (list members, reads and writes, uses, the tensor a view reads) has
a vectorised path too (:class:`_Walk`); it gives the same frames and hands a method to the
per-instruction walk where it doubts (a list it cannot read, aliasing writes of one
instruction, a view of no bytes, or a view whose writer lies far back).

Example:
    >>> import workbench as wb
    >>> ins = wb.open("sample_models/mlp_portable.pte").frames["instructions"]
    >>> ins[["instruction", "kind", "op"]].head(2).values.tolist()
    [[0, 'kernel', 'aten::permute_copy.out'], [1, 'kernel', 'aten::addmm.out']]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from ... import operators
from ..._cols import categorical, filled, ints, isin_few, objects, strings
from ..._vecfb import SlowPath
from ...flatbuf import Table
from . import program
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

__all__ = ["ALIAS_SOURCES", "INSTRUCTION_KINDS", "InstructionColumns", "MethodInstructions"]

_I = InstructionArguments
#: The instructions frame's ``kind`` by InstructionArguments code.
INSTRUCTION_KINDS = ("none", "kernel", "delegate", "move", "jump_false", "free")
# Plain ints (not enum members): these are tested once per argument in the hot loops.
_LISTS = frozenset((int(KernelTypes.TensorList), int(KernelTypes.OptionalTensorList)))
_TENSOR = int(KernelTypes.Tensor)
_TENSORISH = frozenset((_TENSOR, *_LISTS))
_KERNEL, _DELEGATE = int(_I.KernelCall), int(_I.DelegateCall)
_MOVE, _JUMP_FALSE = int(_I.MoveCall), int(_I.JumpFalseCall)
#: The instructions frame's ``alias_source``: which rule split an instruction's arguments
#: into reads and writes (codes are indices; -1: none, e.g. a move).
ALIAS_SOURCES = (
    "schema",                           # the operator's schema (workbench.operators)
    "guessed: returned values",         # unknown operator: trailing arguments repeated
    "guessed: last argument",           # unknown operator: a lone fresh last argument
    "guessed: nothing written",         # unknown operator: neither rule applies
    "guessed: arguments differ from the schema",  # fewer arguments than the schema has
    "delegate: trailing outputs",       # a delegate call's trailing fresh tensors
)
_SCHEMA, _RETURNED, _LAST, _NOTHING_WRITTEN, _MISMATCH, _DELEGATE_OUT = range(len(ALIAS_SOURCES))


@dataclass
class MethodInstructions:
    """The instructions of one method as columns, in execution order (chain by chain).

    The arguments are kept flat: ``flat[start[i]:start[i] + count[i]]`` are instruction
    ``i``'s (value indices, as stored); :attr:`args` gives them as tuples.
    """
    chain: np.ndarray  # int64
    instruction: np.ndarray  # int64: index in the chain
    kind: np.ndarray  # int64: InstructionArguments code
    index: np.ndarray  # int64: op_index / delegate_index (-1: neither)
    flat: np.ndarray  # int64: every argument, instruction after instruction
    count: np.ndarray  # int64: arguments per instruction
    destination: np.ndarray  # int64: JumpFalseCall.destination_instruction (-1: none)
    table_offset: np.ndarray  # int64: the Instruction table
    _args: Sequence[tuple[int, ...]] | None = None

    @property
    def start(self) -> np.ndarray:
        """Where each instruction's arguments start in :attr:`flat`."""
        return np.cumsum(self.count) - self.count

    @property
    def args(self) -> Sequence[tuple[int, ...]]:
        """The arguments of each instruction as a tuple (made once)."""
        if self._args is None:
            self._args = _tuples(self.flat, self.count)
        return self._args


def _tuples(flat: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``flat`` cut into consecutive tuples of ``counts`` elements (an object array).

    Rows of one length are made together, by ``zip`` over their elements (no Python code
    per row); a program has few distinct argument counts.
    """
    out = np.empty(len(counts), object)
    start = np.cumsum(counts) - counts
    for c in np.flatnonzero(np.bincount(counts)).tolist() if len(counts) else ():
        rows = np.flatnonzero(counts == c)
        if c == 0:
            out[rows] = filled(len(rows), ())
            continue
        items = flat[(start[rows][:, None] + np.arange(c)).reshape(-1)].tolist()
        out[rows] = np.fromiter(zip(*[iter(items)] * c), object, count=len(rows))
    return out


def _empty() -> MethodInstructions:
    z = np.zeros(0, np.int64)
    return MethodInstructions(z, z, z, z, z, z, z, z, [])


def read_method(r: ProgramReader, plan: Table) -> MethodInstructions:
    """The instructions of the ExecutionPlan table ``plan`` (fast path, else scalar)."""
    return r.path.read(lambda: _fast(r, plan), lambda: _slow(plan))


def _fast(r: ProgramReader, plan: Table) -> MethodInstructions:
    vec = r.vec
    pos_parts, chain_parts, idx_parts = [], [], []
    spans = program.chain_spans(r.path, plan.tables(ExecutionPlan.chains, "chains"))
    for c, (start, n) in enumerate(spans):
        if not n:
            continue
        at = start + 4 * np.arange(n, dtype=np.int64)
        pos_parts.append(at + vec.gather(at, "<u4"))
        chain_parts.append(np.full(n, c, np.int64))
        idx_parts.append(np.arange(n, dtype=np.int64))
    if not pos_parts:
        return _empty()
    pos = np.concatenate(pos_parts)
    ins = vec.tables(pos, "instructions")
    kind = ins.scalar(Instruction.instr_args_type, "u1").astype(np.int64)
    ref = ins.ref(Instruction.instr_args)
    if ((kind >= len(_I)) | ((kind > 0) & (ref == 0))).any():
        raise SlowPath("bad union")
    n = len(pos)
    index = np.full(n, -1, np.int64)
    dest = np.full(n, -1, np.int64)
    count = np.zeros(n, np.int64)
    vectors: list[tuple[np.ndarray, np.ndarray]] = []  # (rows, their arguments, flat)
    scalars: list[tuple[np.ndarray, list[np.ndarray]]] = []  # (rows, one column per argument)
    for typ, slot, vslot in ((_I.KernelCall, KernelCall.op_index, KernelCall.args),
                             (_I.DelegateCall, DelegateCall.delegate_index, DelegateCall.args)):
        sel = np.flatnonzero(kind == typ)
        if not len(sel):
            continue
        T = vec.tables(ref[sel], "instr_args")
        index[sel] = T.scalar(slot, "<i4")
        starts, counts = T.vectors(vslot, 4)
        count[sel] = counts
        vectors.append((sel, vec.flat(starts, counts, "<i4").astype(np.int64)))
    for typ, path, slots in ((_I.MoveCall, "MoveCall", (MoveCall.move_from, MoveCall.move_to)),
                             (_I.JumpFalseCall, "JumpFalseCall", (JumpFalseCall.cond_value_index,)),
                             (_I.FreeCall, "FreeCall", (FreeCall.value_index,))):
        sel = np.flatnonzero(kind == typ)
        if not len(sel):
            continue
        T = vec.tables(ref[sel], path)
        if typ == _I.JumpFalseCall:
            dest[sel] = T.scalar(JumpFalseCall.destination_instruction, "<i4")
        count[sel] = len(slots)
        scalars.append((sel, [T.scalar(x, "<i4").astype(np.int64) for x in slots]))
    flat = np.zeros(int(count.sum()), np.int64)
    start = np.cumsum(count) - count
    for sel, values in vectors:
        c = count[sel]
        flat[np.repeat(start[sel] - (np.cumsum(c) - c), c) + np.arange(len(values))] = values
    for sel, cols in scalars:
        for k, col in enumerate(cols):
            flat[start[sel] + k] = col
    return MethodInstructions(np.concatenate(chain_parts), np.concatenate(idx_parts), kind,
                              index, flat, count, dest, pos)


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
        return _empty()
    c, i, t, index, args, dest, pos = zip(*rows)
    a = [np.array(x, np.int64) for x in (c, i, t, index, dest, pos)]
    flat = np.fromiter(chain.from_iterable(args), np.int64)
    count = np.fromiter(map(len, args), np.int64, count=len(args))
    return MethodInstructions(a[0], a[1], a[2], a[3], flat, count, a[4], a[5], list(args))


class InstructionColumns:
    """Builders of the ``instructions``, ``lifetimes`` and ``memory_efficiency`` frames of the
    program read by ``r`` (the records are read once, on first use)."""

    def __init__(self, r: ProgramReader) -> None:
        self.r = r
        self._records: list[MethodInstructions] | None = None
        self._rw: list[tuple[list, list]] | None = None
        self._alias: list[np.ndarray] | None = None
        self._masks: dict[int, list[tuple[bool, ...] | None]] = {}
        self._spans: list[dict[str, np.ndarray]] | None = None
        self._lists: dict[tuple[int, int], tuple[int, ...]] = {}
        self._walks: dict[int, _Walk | None] = {}

    def _walk(self, mi: int) -> _Walk | None:
        """The vectorised walk of method ``mi`` (``None``: the scalar walk does it)."""
        if mi not in self._walks:
            walk = None
            # (few instructions: the per-instruction walk is faster, see SCALAR_INSTRUCTIONS)
            if self.r.path.columns_for(len(self.records[mi].kind)):
                m = self.r.methods[mi]
                try:
                    walk = _Walk(self.r, m, self.records[mi], self._storage(m),
                                 self._written_masks(m))
                except SlowPath:
                    walk = None
            self._walks[mi] = walk
        return self._walks[mi]

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

    def _written_masks(self, m: Method) -> list[tuple[bool, ...] | None]:
        """Per operator of ``m``: which schema arguments are written (``None``: the operator
        table does not know the operator)."""
        key = id(m)
        masks = self._masks.get(key)
        if masks is None:
            masks = []
            for name, overload in m.operators:
                s = operators.schema(f"{name}.{overload}" if overload else name)
                masks.append(None if s is None else s.written_mask)
            self._masks[key] = masks
        return masks

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
        self._rw, self._alias = [], []
        for mi, (m, rec) in enumerate(zip(self.r.methods, self.records)):
            walk = self._walk(mi)
            if walk is not None:
                self._rw.append(walk.reads_writes())
                self._alias.append(walk.alias_source())
            else:
                reads, writes, alias = self._rw_method(m, rec)
                self._rw.append((reads, writes))
                self._alias.append(alias)
        return self._rw

    def alias_sources(self) -> list[np.ndarray]:
        """Per method: the :data:`ALIAS_SOURCES` code of each instruction (-1: none)."""
        self.reads_writes()
        assert self._alias is not None
        return self._alias

    def _rw_method(self, m: Method, rec: MethodInstructions) -> tuple[list, list, np.ndarray]:
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

        def tensors(vs: Sequence[int]) -> tuple[int, ...]:
            """``vs`` with tensor lists expanded to their members, each value once."""
            return tuple(dict.fromkeys(x for v in vs for x in (
                items(v) if 0 <= v < nv and vt[v] in _LISTS else (v,))))

        masks = self._written_masks(m)
        reads, writes = [], []
        alias = np.full(len(rec.kind), -1, np.int64)
        for p, (kind, index, args) in enumerate(zip(rec.kind.tolist(), rec.index.tolist(),
                                                    rec.args)):
            if kind == _KERNEL:
                mask = masks[index] if 0 <= index < len(masks) else None
                if mask is not None and len(args) >= len(mask):
                    alias[p] = _SCHEMA
                    r_ = [a for i, a in enumerate(args) if i < len(mask) and not mask[i]]
                    w_ = [a for i, a in enumerate(args) if i >= len(mask) or mask[i]]
                else:
                    n = _returned(args)
                    alias[p] = _RETURNED if n else _NOTHING_WRITTEN
                    if not n and args and (args[-1] in args[:-1] or written(args[-1])):
                        n = 1  # returns an argument (in place, e.g. copy_) or a lone out
                        alias[p] = _LAST
                    if mask is not None:
                        alias[p] = _MISMATCH
                    r_, w_ = args[:len(args) - n], args[len(args) - n:]
            elif kind == _DELEGATE:
                k = len(args)
                while k > 0 and written(args[k - 1]):
                    k -= 1
                r_, w_ = args[:k], args[k:]
                alias[p] = _DELEGATE_OUT
            elif kind == _MOVE:
                r_, w_ = args[:1], args[1:]
            elif kind == _JUMP_FALSE:
                r_, w_ = args, ()
            else:
                r_, w_ = (), ()
            reads.append(tensors(r_))
            writes.append(tensors(w_))
            for v in args:
                if 0 <= v < nv:
                    seen[v] = True
                    if vt[v] in _LISTS:
                        for x in items(v):
                            if 0 <= x < nv:
                                seen[x] = True
        return reads, writes, alias

    def kernel_keys(self) -> list[dict[int, tuple[str, ...]]]:
        """Per method: operator index -> the distinct kernel keys of its calls, in first-use
        order, as ExecuTorch's selective build writes them (``et_kernel_metadata``):
        ``"v1/" + "|".join("<dtype>;<dim order>")`` over the call's tensor arguments (return
        values included; a tensor list by its first member). ``"default"`` stands for a call
        whose key cannot be derived (an argument that names no tensor, an empty list)."""
        out = []
        for m, rec in zip(self.r.methods, self.records):
            nv = len(m.vtypes)
            vt = m.vtypes.tolist()
            t = m.tensors
            meta: dict[int, str] = {}
            for v, st, order in zip(t.value.tolist(), t.scalar_type.tolist(), t.dim_order):
                if 0 <= v < nv and st >= 0:
                    meta[v] = f"{st};{','.join(map(str, order))}"
            keys: dict[int, dict[str, None]] = {}
            for kind, index, args in zip(rec.kind.tolist(), rec.index.tolist(), rec.args):
                if kind != _KERNEL:
                    continue
                parts: list[str] | None = []
                for v in args:
                    if not 0 <= v < nv:
                        parts = None
                        break
                    if vt[v] in _LISTS:
                        members = self._list_items(m, v)
                        v = members[0] if members else -1
                    elif vt[v] != _TENSOR:
                        continue
                    part = meta.get(v)
                    if part is None:
                        parts = None
                        break
                    parts.append(part)
                key = "default" if parts is None else "v1/" + "|".join(parts)
                keys.setdefault(index, {})[key] = None
            out.append({k: tuple(v) for k, v in keys.items()})
        return out

    # -- frames -------------------------------------------------------------------------------
    def instructions(self) -> dict[str, Any]:
        """The instructions frame."""
        r = self.r
        parts = []
        for mi, (m, rec, (reads, writes), alias) in enumerate(
                zip(r.methods, self.records, self.reads_writes(), self.alias_sources())):
            n = len(rec.kind)
            is_k = rec.kind == _I.KernelCall
            is_d = rec.kind == _I.DelegateCall
            # names by index: the last entry (None) for instructions that name none
            nk, nd = len(m.operators), len(m.delegates)
            k_at = np.where(is_k & (rec.index >= 0) & (rec.index < nk), rec.index, nk)
            d_at = np.where(is_d & (rec.index >= 0) & (rec.index < nd), rec.index, nd)
            op = objects([*(f"{a}.{b}" if b else a for a, b in m.operators), None])[k_at]
            name = objects([*(a for a, _ in m.operators), None])[k_at]
            overload = objects([*(b for _, b in m.operators), None])[k_at]
            deleg = objects([*(d.id for d in m.delegates), None])[d_at]
            parts.append({
                "method": np.full(n, mi, np.int64), "chain": rec.chain,
                "instruction": rec.instruction, "position": np.arange(n, dtype=np.int64),
                "kind": rec.kind, "op_index": rec.index, "is_k": is_k, "op": op,
                "operator": name, "overload": overload, "delegate_index": rec.index,
                "is_d": is_d, "delegate": deleg, "args": objects(rec.args),
                "reads": objects(reads), "writes": objects(writes), "alias": alias,
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
            "writes": c["writes"],
            "alias_source": categorical(c["alias"], ALIAS_SOURCES),
            "destination": ints(c["destination"], c["destination"] < 0),
            "table_offset": c["table_offset"],
        }

    def _uses(self, mi: int) -> tuple[np.ndarray, np.ndarray]:
        """(position, value) for every tensor an instruction names (list members expanded)."""
        walk = self._walk(mi)
        if walk is not None:
            return walk.use_pos, walk.use_val
        m, rec = self.r.methods[mi], self.records[mi]
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
        """Per method: the planned tensors' use spans (computed once)."""
        if self._spans is None:
            self._spans = self._compute_lifetimes()
        return self._spans

    def _compute_lifetimes(self) -> list[dict[str, np.ndarray]]:
        out = []
        for mi, (m, rec) in enumerate(zip(self.r.methods, self.records)):
            t = m.tensors
            rows = np.flatnonzero((t.mem_id >= 0) & isin_few(t.storage, (PLANNED, MUTABLE)))
            nv = len(m.vtypes)
            first = np.full(nv + 1, np.iinfo(np.int64).max, np.int64)
            last = np.full(nv + 1, -1, np.int64)
            pos, val = self._uses(mi)
            np.minimum.at(first, val, pos)
            np.maximum.at(last, val, pos)
            v = t.value[rows]
            f, la = first[v], last[v]
            used = la >= 0
            n_ins = len(rec.kind)
            is_in = isin_few(v, m.inputs)
            is_out = isin_few(v, m.outputs)
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
        nv = len(m.vtypes)
        wrote = np.full(nv + 1, -1, np.int64)
        walk = self._walk(mi)
        if walk is not None:
            wrote[:nv] = walk.first_write()
        else:
            first_write: dict[int, int] = {}
            for p, w in enumerate(self.reads_writes()[mi][1]):
                for v in w:
                    if 0 <= v < nv and v not in first_write:
                        first_write[v] = p
            if first_write:
                wrote[np.fromiter(first_write, np.int64)] = np.fromiter(first_write.values(),
                                                                         np.int64)
        v = t.value[rows]
        mem, lo = t.mem_id[rows], t.mem_offset[rows]
        hi = lo + t.nbytes[rows]
        w = wrote[v]
        inputs = isin_few(v, m.inputs)
        views = np.flatnonzero(live & (w < 0) & ~inputs)
        if not len(views):
            return
        if walk is not None:
            k, base = _last_writers_fast(views, mem, lo, hi, w, start, inputs)
        else:
            found = _last_writers(views, mem, lo, hi, w, start, inputs)
            k = np.fromiter(found, np.int64, count=len(found))
            base = np.fromiter(found.values(), np.int64, count=len(found))
        # a view is never a base (it is not written, not an input): the order is free
        np.maximum.at(end, base, end[k])

    def lifetimes(self) -> dict[str, Any]:
        """The lifetimes frame."""
        from .tensors import STORAGES

        r = self.r
        parts = self._lifetimes()
        names = []
        for m, p in zip(r.methods, parts):
            t = m.tensors
            name = objects(t.fqn[p["rows"]]).copy()
            bare = np.flatnonzero(np.equal(name, None))  # no FQN: "<method>/<value>"
            if len(bare):
                name[bare] = list(map(f"{m.name}/".__add__, map(str, p["value"][bare].tolist())))
            names.append(name)
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


#: A kernel's arguments beyond this many are split by :func:`_returned` one row at a time.
_VECTOR_RETURNS = 64
#: Most (view, writer) pairs :func:`_last_writers_fast` compares; beyond, the sweep does it.
MAX_VIEW_WORK = 4_000_000
_NEVER = np.iinfo(np.int64).max


class _Walk:
    """The vectorised walk over one method's instruction arguments: what the per-instruction
    walk of :class:`InstructionColumns` computes, with numpy (raises SlowPath on doubt).

    Attributes:
        use_pos, use_val: ``(position, value)`` of every tensor an instruction names (list
            members expanded), in instruction and argument order.
        seen: per value, the first position whose arguments name it (the list value itself
            too), ``_NEVER`` for none.
    """

    def __init__(self, r: ProgramReader, m: Method, rec: MethodInstructions,
                 storage: np.ndarray, masks: Sequence[tuple[bool, ...] | None] = ()) -> None:
        nv = len(m.vtypes)
        self.rec, self.nv, self.masks = rec, nv, masks
        vt = m.vtypes.astype(np.int64)
        flat, count = rec.flat, rec.count
        self.owner = np.repeat(np.arange(len(count), dtype=np.int64), count)
        self.start = np.cumsum(count) - count
        # per-value arrays get one more entry, at ``nv``: where out-of-range arguments look
        valid = (flat >= 0) & (flat < nv)
        v = np.where(valid, flat, nv)
        is_list = np.isin(vt, tuple(_LISTS))
        # list members (those in range), read for every list value at once
        lists = np.flatnonzero(is_list & (m.vpos != 0))
        mcount = np.zeros(nv + 1, np.int64)
        mstart = np.zeros(nv + 1, np.int64)
        members = np.zeros(0, np.int64)
        if len(lists):
            T = r.vec.tables(m.vpos[lists].astype(np.int64), f"{m.name}.values")
            starts, counts = T.vectors(List.items, 4)
            items = r.vec.flat(starts, counts, "<i4").astype(np.int64)
            keep = (items >= 0) & (items < nv)
            of = np.repeat(np.arange(len(lists)), counts)
            mcount[lists] = np.bincount(of[keep], minlength=len(lists))
            mstart[lists] = np.cumsum(mcount[lists]) - mcount[lists]
            members = items[keep]
        self.mcount, self.mstart, self.members = mcount, mstart, members
        self.is_list = np.append(is_list, False)
        # every argument expanded to the tensors it names: itself, or a list's members
        el_list = valid & np.append(is_list, False)[v]
        n_exp = np.where(el_list, mcount[v], valid.astype(np.int64))
        src = np.where(el_list, mstart[v], len(members) + v)
        pool = np.concatenate([members, np.arange(nv, dtype=np.int64)])
        within = np.arange(int(n_exp.sum())) - np.repeat(np.cumsum(n_exp) - n_exp, n_exp)
        self.use_val = pool[np.repeat(src, n_exp) + within]
        self.use_pos = np.repeat(self.owner, n_exp)
        seen = np.full(nv, _NEVER, np.int64)
        np.minimum.at(seen, self.use_val, self.use_pos)
        np.minimum.at(seen, flat[el_list], self.owner[el_list])
        self.seen = seen
        # written(v, p) <=> ok[v] and fresh[v] >= p: a tensor or list of tensors, not a
        # method input, whose members are all non-constant tensors, none of them (nor the
        # list) named before p
        inputs = np.zeros(nv, bool)
        given = np.array([x for x in m.inputs if 0 <= x < nv], np.int64)
        inputs[given] = True
        constant = np.array(sorted({*map(int, CONSTANT_STORAGES), int(NAMED)}), np.int64)
        member_ok = ~inputs & (storage >= 0) & ~np.isin(storage, constant)
        ok = np.isin(vt, tuple(_TENSORISH)) & ~inputs
        fresh = seen.copy()
        list_vals = np.flatnonzero(is_list)
        single = ~is_list
        ok[single] &= member_ok[single]
        if len(list_vals):
            owner = np.repeat(np.arange(nv, dtype=np.int64), mcount[:nv])
            bad = np.bincount(owner[~member_ok[members]], minlength=nv)
            ok[list_vals] &= (mcount[list_vals] > 0) & (bad[list_vals] == 0)
            np.minimum.at(fresh, owner, seen[members])
        self.ok, self.fresh = np.append(ok, False), np.append(fresh, 0)
        self._split: tuple[np.ndarray, np.ndarray] | None = None
        self._alias = np.full(len(count), -1, np.int64)
        self._expanded: tuple[np.ndarray, ...] | None = None

    def written(self, values: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Whether the instruction at position ``at`` writes value ``values`` (elementwise)."""
        valid = (values >= 0) & (values < self.nv)
        v = np.where(valid, values, self.nv)
        return valid & self.ok[v] & (self.fresh[v] >= at)

    def split(self) -> tuple[np.ndarray, np.ndarray]:
        """Per argument: is it read, is it written (see the module docstring)."""
        if self._split is not None:
            return self._split
        rec = self.rec
        flat, count, start, owner = rec.flat, rec.count, self.start, self.owner
        n = len(count)
        local = np.arange(len(flat)) - start[owner]
        cut = count.copy()  # reads: arguments [0, cut), writes: [cut, count)
        kind = rec.kind
        alias = self._alias
        alias[kind == _KERNEL] = _NOTHING_WRITTEN
        kernels = np.flatnonzero((kind == _KERNEL) & (count > 0))
        if len(kernels):
            ret = _returned_many(flat, start, count, kernels)
            last = start[kernels] + count[kernels] - 1
            # returns an argument (in place, e.g. copy_) or a lone out
            again = np.zeros(n, bool)
            same = (flat == flat[start[owner] + count[owner] - 1]) & (
                local < count[owner] - 1)
            again[owner[same]] = True
            lone = (ret == 0) & (again[kernels] | self.written(flat[last], kernels))
            cut[kernels] = count[kernels] - np.where(lone, 1, ret)
            alias[kernels] = np.where(lone, _LAST, np.where(ret > 0, _RETURNED,
                                                            _NOTHING_WRITTEN))
        alias[kind == _DELEGATE] = _DELEGATE_OUT
        dels = (kind == _DELEGATE)[owner]
        if dels.any():
            fixed = dels & ~self.written(flat, owner)  # the last argument read
            last_read = np.full(n, -1, np.int64)
            np.maximum.at(last_read, owner[fixed], local[fixed])
            d = kind == _DELEGATE
            cut[d] = last_read[d] + 1
        mv = kind == _MOVE
        cut[mv] = np.minimum(count[mv], 1)
        none = ~np.isin(kind, (_KERNEL, _DELEGATE, _MOVE, _JUMP_FALSE))
        cut[none] = 0
        is_read = (local < cut[owner]) & ~none[owner]
        is_write = ~is_read & ~none[owner]
        self._schema_split(local, is_read, is_write)
        self._split = (is_read, is_write)
        return self._split

    def _schema_split(self, local: np.ndarray, is_read: np.ndarray, is_write: np.ndarray
                      ) -> None:
        """Kernel calls of operators the schema table knows: argument ``i`` is written when
        schema argument ``i`` is, the trailing return values are written (in place)."""
        masks = self.masks
        if not any(mk is not None for mk in masks):
            return
        rec, owner = self.rec, self.owner
        mlen = np.array([-1 if mk is None else len(mk) for mk in masks], np.int64)
        mstart = np.cumsum(np.maximum(mlen, 0)) - np.maximum(mlen, 0)
        # every mask end to end, then one False for "past the mask" lookups
        mflat = np.array([b for mk in masks if mk is not None for b in mk] + [False], bool)
        index = rec.index
        known_op = (rec.kind == _KERNEL) & (index >= 0) & (index < len(masks))
        op = np.where(known_op, index, 0)
        length = np.where(known_op, mlen[op] if len(mlen) else -1, -1)
        has = length >= 0
        self._alias[has & (rec.count < length)] = _MISMATCH
        use = has & (rec.count >= length)
        self._alias[use] = _SCHEMA
        sel = use[owner]
        if not sel.any():
            return
        o, loc = owner[sel], local[sel]
        inside = loc < length[o]
        at = np.where(inside, mstart[op[o]] + loc, len(mflat) - 1)
        w = ~inside | mflat[at]
        is_write[sel] = w
        is_read[sel] = ~w

    def alias_source(self) -> np.ndarray:
        """The :data:`ALIAS_SOURCES` code of each instruction (-1: none)."""
        self.split()
        return self._alias

    def _expand(self) -> tuple[np.ndarray, ...]:
        """Every argument expanded to the values it names, for reads and writes: a tensor
        list to its members, anything else (out-of-range values too) to itself. Returns
        ``(owner, value, is_read, is_write)`` per expanded element, in argument order."""
        if self._expanded is not None:
            return self._expanded
        flat, nv = self.rec.flat, self.nv
        is_read, is_write = self.split()
        valid = (flat >= 0) & (flat < nv)
        v = np.where(valid, flat, nv)
        el_list = valid & self.is_list[v]
        n_exp = np.where(el_list, self.mcount[v], 1)
        arg = np.repeat(np.arange(len(flat), dtype=np.int64), n_exp)
        within = np.arange(len(arg)) - np.repeat(np.cumsum(n_exp) - n_exp, n_exp)
        val = flat[arg]
        from_list = el_list[arg]
        if from_list.any():
            val[from_list] = self.members[self.mstart[v][arg][from_list] + within[from_list]]
        self._expanded = (self.owner[arg], val, is_read[arg], is_write[arg])
        return self._expanded

    def reads_writes(self) -> tuple[np.ndarray, np.ndarray]:
        """(reads, writes) tuples per instruction, each value once, in argument order."""
        n = len(self.rec.count)
        owner, val, is_read, is_write = self._expand()
        out = []
        for part in (is_read, is_write):
            at = np.flatnonzero(part)
            kept = at[_first_of_each(owner[at], val[at])]
            out.append(_tuples(val[kept], np.bincount(owner[kept], minlength=n)))
        return out[0], out[1]

    def first_write(self) -> np.ndarray:
        """Per value, the first position that writes it (-1: none)."""
        owner, val, _, is_write = self._expand()
        vals = val[is_write]
        pos = owner[is_write]
        ok = (vals >= 0) & (vals < self.nv)
        first = np.full(self.nv, _NEVER, np.int64)
        np.minimum.at(first, vals[ok], pos[ok])
        return np.where(first == _NEVER, -1, first)


def _first_of_each(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Mask of the elements whose value does not occur earlier in their group (``group``
    non-decreasing): what ``dict.fromkeys`` keeps per group."""
    keep = np.ones(len(values), bool)
    if len(values) < 2:
        return keep
    order = np.lexsort((np.arange(len(values)), values, group))
    g, v = group[order], values[order]
    dup = (g[1:] == g[:-1]) & (v[1:] == v[:-1])
    keep[order[1:][dup]] = False
    return keep


def _returned_many(flat: np.ndarray, start: np.ndarray, count: np.ndarray,
                   rows: np.ndarray) -> np.ndarray:
    """:func:`_returned` of the arguments of instructions ``rows``, vectorised per length."""
    c = count[rows]
    end = start[rows] + c
    out = np.zeros(len(rows), np.int64)
    long = c > _VECTOR_RETURNS
    for n in range(1, int(np.minimum(c, _VECTOR_RETURNS).max(initial=0)) // 2 + 1):
        sel = np.flatnonzero((c >= 2 * n) & ~long)
        if not len(sel):
            continue
        j = np.arange(n)
        e = end[sel][:, None]
        eq = (flat[e - n + j] == flat[e - 2 * n + j]).all(axis=1)
        out[sel[eq]] = 2 * n  # n grows: the largest match wins
    for k in np.flatnonzero(long).tolist():
        out[k] = _returned(tuple(flat[end[k] - c[k]:end[k]].tolist()))
    return out


def _ranges(arena: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group rows by (arena, lo, hi): ``(first row of each group, group of each row)``,
    groups in (arena, lo, hi) order."""
    order = np.lexsort((hi, lo, arena))
    a, b, c = arena[order], lo[order], hi[order]
    new = np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1]) | (c[1:] != c[:-1])]
    group = np.empty(len(order), np.int64)
    group[order] = np.cumsum(new) - 1
    return order[new], group


def _last_writers_fast(views: np.ndarray, mem: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                       w: np.ndarray, start: np.ndarray, inputs: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_last_writers`, vectorised: the views found and the row each reads (arrays).

    Without aliasing writes (two rows of one arena written by one instruction, overlapping)
    the bytes a view reads were last written by the row of largest ``w`` before the view's
    first use among those that overlap it (of several, the one lowest in the arena).
    Memory plans reuse a few byte ranges for many tensors, so rows are grouped by (arena,
    byte range): each view is matched with the writer groups its range overlaps, and in each
    the last write before the view's first use is found by binary search. Views of no bytes,
    aliasing writes and more than :data:`MAX_VIEW_WORK` pairs go to the sweep.
    """
    def sweep() -> tuple[np.ndarray, np.ndarray]:
        found = _last_writers(views, mem, lo, hi, w, start, inputs)
        return (np.fromiter(found, np.int64, count=len(found)),
                np.fromiter(found.values(), np.int64, count=len(found)))

    if not len(views) or (hi[views] <= lo[views]).any():
        return sweep()
    _, arena = np.unique(mem, return_inverse=True)
    arena = arena.reshape(-1).astype(np.int64)
    writers = np.flatnonzero((w >= 0) & (hi > lo))  # writes of no bytes own nothing
    got = np.full(len(views), -1, np.int64)  # the row each view reads
    if len(writers):
        wa, wl, wh, wt = arena[writers], lo[writers], hi[writers], w[writers]
        by_w = np.lexsort((wl, wt, wa))  # one instruction writing overlapping rows
        a, t, lw, hw = wa[by_w], wt[by_w], wl[by_w], wh[by_w]
        if ((a[1:] == a[:-1]) & (t[1:] == t[:-1]) & (lw[1:] < hw[:-1])).any():
            return sweep()
        wrep, wgroup = _ranges(wa, wl, wh)
        order = np.lexsort((wt, wgroup))  # a group's writes in time order
        ww, wg = wt[order], wgroup[order]
        g_arena, g_lo, g_hi = wa[wrep], wl[wrep], wh[wrep]
        qrep, qgroup = _ranges(arena[views], lo[views], hi[views])
        if len(qrep) * len(wrep) > MAX_VIEW_WORK:
            return sweep()
        r = views[qrep]
        pq, pw = np.nonzero((arena[r][:, None] == g_arena) & (lo[r][:, None] < g_hi)
                            & (hi[r][:, None] > g_lo))
        # every (view, writer group overlapping it): the pairs of the view's group
        per_group = np.bincount(pq, minlength=len(qrep))
        n_pairs = per_group[qgroup]
        if int(n_pairs.sum()) > MAX_VIEW_WORK:
            return sweep()
        q = np.repeat(np.arange(len(views)), n_pairs)
        within = np.arange(len(q)) - np.repeat(np.cumsum(n_pairs) - n_pairs, n_pairs)
        g = pw[(np.cumsum(per_group) - per_group)[qgroup[q]] + within]
        # in each group, its last write before the view's first use
        span = int(w.max(initial=0)) + 2
        at = np.searchsorted(wg * span + ww, g * span + np.clip(start[views][q], -1, span - 1),
                             "left") - 1
        ok = (at >= 0) & (wg[np.maximum(at, 0)] == g)
        q, g, at = q[ok], g[ok], at[ok]
        if len(q):  # per view: the latest write, then the lowest range
            pick = np.lexsort((g_lo[g], -ww[at], q))
            first = pick[np.r_[True, q[pick][1:] != q[pick][:-1]]]
            got[q[first]] = writers[order[at[first]]]
    missing = np.flatnonzero(got < 0)
    got[missing] = _inputs_holding(views[missing], mem, lo, hi, inputs)
    hit = got >= 0
    return views[hit], got[hit]


def _inputs_holding(ks: np.ndarray, mem: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                    inputs: np.ndarray) -> np.ndarray:
    """For rows ``ks`` read before anything was written to their bytes: the input row
    holding them (the first by arena and offset), -1 for none."""
    ins = np.flatnonzero(inputs)
    order = ins[np.lexsort((lo[ins], mem[ins]))]
    out = np.full(len(ks), -1, np.int64)
    if not len(order):
        return out
    step = max(1, MAX_VIEW_WORK // len(order))
    for c in range(0, len(ks), step):  # a (rows x inputs) overlap matrix per chunk
        k = ks[c:c + step, None]
        hit = (mem[order] == mem[k]) & (lo[order] < hi[k]) & (hi[order] > lo[k])
        out[c:c + step] = np.where(hit.any(axis=1), order[hit.argmax(axis=1)], -1)
    return out


def _returned(args: tuple[int, ...]) -> int:
    """Arguments a kernel call writes: the emitter passes an out variant's ``out`` arguments,
    then its return values, which are the same values: the largest ``2n`` trailing arguments
    whose halves are equal give ``2n`` (0: none repeat, e.g. an op returning nothing)."""
    for n in range(len(args) // 2, 0, -1):
        if args[-n:] == args[-2 * n:-n]:
            return 2 * n
    return 0


_INSTRUCTION_COLUMNS = ("method", "chain", "instruction", "position", "kind", "op_index", "op",
                        "operator", "overload", "delegate_index", "delegate", "args", "reads",
                        "writes", "alias_source", "destination", "table_offset")
_LIFETIME_COLUMNS = ("method", "value", "name", "storage", "mem_id", "offset", "nbytes",
                     "end_offset", "first", "last", "is_input", "is_output", "live_from",
                     "live_to")


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
    # read before anything was written there: the input holding those bytes
    missing = np.array([k for k in views.tolist() if k not in found], np.int64)
    base = _inputs_holding(missing, mem, lo, hi, inputs)
    found.update(zip(missing[base >= 0].tolist(), base[base >= 0].tolist()))
    return found
