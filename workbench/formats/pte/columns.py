"""The frames of a program, built from the reader's records (never from weight bytes).

One method per frame of :class:`Columns`: ``segments`` (via :meth:`Columns.segments_raw`),
``tensors``, ``methods``, ``values``, ``operators``, ``delegates``, ``named_data``,
``memory_plan``. Columns and dtypes are declared in :mod:`workbench.frames`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..._cols import align, booleans, categorical, factorized, filled, ints, isin_few, objects, strings
from ..._fmt import align_of
from ..._vecfb import groups
from ...errors import ArtifactError, Finding
from ...flatbuf import Table
from .._layout import concat_sorted, cover_rows, named_data_role, named_data_roles
from ..ptd.columns import segments_raw as ptd_segments_raw
from .delegated import DelegateBlobs
from .external import External
from .program import Method, ProgramReader
from .schema import (
    LIST_TYPES,
    VALUE_TYPES,
    Bool,
    Double,
    InstructionArguments,
    Int,
    KernelTypes,
    List,
    String,
)
from .tensors import CONSTANT_STORAGES, DTYPE_NAMES, DYNAMISM_NAMES, NAMED, STORAGES

#: Columns of a program's tensors frame.
TENSOR_COLUMNS = ("name", "dtype", "shape", "nbytes", "storage", "file", "offset", "align",
                  "method", "value", "fqn", "dim_order", "segment", "data_buffer_idx", "mem_id",
                  "mem_offset", "shape_dynamism", "requires_grad", "has_layout", "missing",
                  "used_by")
_K = KernelTypes
_I = InstructionArguments


class Columns:
    """Frame builders of one program (``r``) and its attached data files (``ext``)."""

    def __init__(self, r: ProgramReader, ext: External, blobs: DelegateBlobs) -> None:
        self.r = r
        self.ext = ext
        self.blobs = blobs
        self._names_cache: dict[int, np.ndarray] = {}
        self._roles_cache: np.ndarray | None = None
        self._named_parts_cache: list[dict[str, Any]] | None = None

    # -- segments ---------------------------------------------------------------------------
    def segments_raw(self) -> dict[str, Any]:
        """Raw segment columns of the program and its data files (see ``_layout``)."""
        r = self.r
        rows: list[tuple] = []  # (offset, size, name, kind, index, used_by)
        s = r.start
        rows.append((s, 8, "flatbuffer root", "header", None, "root offset + ET12"))
        fb_start = s + 8
        if r.header is not None:
            hl = r.header.length
            rows.append((s + 8, hl, "extended header", "header", None, "eh00"))
            fb_start = s + 8 + hl
        rows.extend(self._program_rows(fb_start, s + r.program_size))
        uses = r.segment_uses()
        users = self._delegate_users()
        # segments that hold one named-data entry and nothing else (often thousands): columns
        nseg = len(r.segments)
        n_named = np.bincount(r.named_seg, minlength=nseg)
        other = np.zeros(nseg, bool)
        other[[i for i in uses if 0 <= i < nseg]] = True
        single = (n_named == 1) & ~other
        first = np.full(nseg, -1, np.int64)  # a named entry of each segment (read where
        first[r.named_seg] = np.arange(len(r.named_seg))  # a segment holds exactly one)
        named_of: dict[int, list[str]] = {}  # the keys of the other segments, in key order
        shared = np.flatnonzero(~single[r.named_seg])
        for key, si in zip(r.named_keys[shared].tolist(), r.named_seg[shared].tolist()):
            named_of.setdefault(si, []).append(key)
        append = rows.append
        for i in np.flatnonzero(~single).tolist():
            off, size = r.segments[i]
            u = uses.get(i, []) + [("named_data", key) for key in named_of.get(i, ())]
            if not u:
                append((off, size, f"segment {i}", "unused", i, ""))
                continue
            kind, label = u[0]
            if kind == "named_data":
                role = named_data_role(label)
                if role != "blob":
                    kind = role
            if len(u) > 1:
                append((off, size, f"{label} (+{len(u) - 1} more)", kind, i,
                        "; ".join([lbl for _, lbl in u])))
                continue
            if kind == "delegate" and len(users.get(i, ())) == 1:
                sub = self.blobs.segment_rows(i, *users[i][0])
                if sub is not None:  # the blob's own layout, covering the segment exactly
                    rows.extend(sub)
                    continue
            append((off, size, label, kind, i, label))
        seg = np.flatnonzero(single)
        keys = r.named_keys[first[seg]]
        kind = self._named_roles()[first[seg]]
        kind[kind == "blob"] = "named_data"
        parts = [cover_rows(rows, r.file, r.start, r.end, r.seg_off[seg], r.seg_size[seg],
                            objects(list(map("named_data ".__add__, keys.tolist()))), kind,
                            seg, keys)]
        parts.extend(ptd_segments_raw(d.extra.ptd) for d in self.ext.data)
        return concat_sorted(parts)

    def _program_rows(self, start: int, end: int) -> list[tuple]:
        """Rows of the program flatbuffer ``[start, end)``: one ``program`` row, cut around
        the delegate blobs stored inline in it (``BackendDelegateInlineData``, as older
        releases and ``extract_delegate_segments=False`` write them), each blob split into
        its own sub-segments as a blob in a segment is (one ``delegate`` row when it cannot
        be taken apart)."""
        blobs: dict[tuple[int, int], tuple[int, int]] = {}  # (offset, size) -> a user
        for m, plan in enumerate(self.r.methods):
            for k, d in enumerate(plan.delegates):
                if d.location == "inline" and d.size > 0 and start <= d.offset and \
                        d.offset + d.size <= end:
                    blobs.setdefault((d.offset, d.size), (m, k))
        rows: list[tuple] = []
        at = start
        for (off, size), (m, k) in sorted(blobs.items()):
            if off < at:  # overlaps a blob already cut out (a corrupt table): left inside it
                continue
            if off > at:
                rows.append((at, off - at, "program" if at == start else "program (continued)",
                             "flatbuffer", None, ""))
            info = self.blobs.info(m, k)
            sub = info.segment_rows(None) if info is not None and len(info.subsegments) > 1 \
                else None
            if sub is None:
                label = f"{self.r.methods[m].name} delegate {k} (inline)"
                sub = [(off, size, label, "delegate", None, label)]
            rows.extend(sub)
            at = off + size
        if at < end or not rows:
            rows.append((at, end - at, "program" if at == start else "program (continued)",
                         "flatbuffer", None, ""))
        return rows

    def _named_roles(self) -> np.ndarray:
        """``named_data_role`` of each of the program's named-data keys (cached)."""
        roles = self._roles_cache
        if roles is None:
            roles = self._roles_cache = named_data_roles(self.r.named_keys)
        return roles

    def _delegate_users(self) -> dict[int, list[tuple[int, int]]]:
        """segment index -> (method, delegate index) of the delegates whose blob it holds."""
        out: dict[int, list[tuple[int, int]]] = {}
        for m, plan in enumerate(self.r.methods):
            for k, d in enumerate(plan.delegates):
                if d.location == "segment":
                    out.setdefault(d.data_index, []).append((m, k))
        return out

    # -- tensors ----------------------------------------------------------------------------
    def tensors(self) -> dict[str, Any]:
        """The tensors frame: every method's tensor values, then named data not claimed."""
        r = self.r
        matched: dict[str, set[str]] = {}  # data file -> keys claimed by external tensors
        parts = [self._method_tensors(m, matched) for m, plan in enumerate(r.methods)
                 if len(plan.tensors)]
        parts += self._named_tensors(matched)
        if not parts:
            return {name: [] for name in TENSOR_COLUMNS}
        c = parts[0] if len(parts) == 1 else {k: np.concatenate([p[k] for p in parts])
                                              for k in parts[0]}
        off = c["offset"]
        return {
            "name": strings(c["name"]), "dtype": categorical(c["code"], DTYPE_NAMES),
            "shape": c["shape"], "nbytes": c["nbytes"],
            "storage": categorical(c["storage"], STORAGES), "file": strings(c["file"]),
            "offset": ints(off, off < 0), "align": align(off, off < 0),
            "method": categorical(c["method"], [p.name for p in r.methods]),
            "value": ints(c["value"], c["value"] < 0), "fqn": strings(c["fqn"]),
            "dim_order": c["dim_order"], "segment": ints(c["segment"], c["segment"] < 0),
            "data_buffer_idx": ints(c["dbi"], c["dbi"] < 0),
            "mem_id": ints(c["mem_id"], c["mem_id"] < 0),
            "mem_offset": ints(c["mem_off"], c["mem_off"] < 0),
            "shape_dynamism": categorical(c["dyn"], DYNAMISM_NAMES),
            "requires_grad": booleans(c["rg"] == 1, c["rg"] < 0),
            "has_layout": booleans(c["has_layout"] == 1, c["has_layout"] < 0),
            "missing": booleans(c["missing"] == 1, c["missing"] < 0),
            "used_by": strings(c["used_by"]),
        }

    def _method_tensors(self, m: int, matched: dict[str, set[str]]) -> dict[str, Any]:
        t = self.r.methods[m].tensors
        n = len(t)
        e = self.ext.place(t, self.r.file, self.r.findings, matched)
        return {
            "name": self._names(m), "code": t.scalar_type, "shape": t.shape, "nbytes": t.nbytes,
            "storage": t.storage, "file": e.file, "offset": e.offset,
            "method": np.full(n, m, np.int64), "value": t.value, "fqn": t.fqn,
            "dim_order": t.dim_order, "segment": e.segment, "dbi": t.data_buffer_idx,
            "mem_id": t.mem_id, "mem_off": t.mem_offset, "dyn": t.shape_dynamism,
            "rg": t.requires_grad.astype(np.int8), "has_layout": np.full(n, -1, np.int8),
            "missing": e.missing, "used_by": filled(n, None)}

    def _named_tensors(self, matched: dict[str, set[str]]) -> list[dict[str, Any]]:
        """Named data: raw bytes in the .pte (no layout stored), then data-file entries that
        no external tensor claimed (e.g. XNNPACK weights), with their layout when stored."""
        parts = []
        for e in self._named_parts():
            claimed = matched.get(e.pop("file_path"))
            if claimed:
                keep = np.array([k not in claimed for k in e["key"].tolist()], bool)
                e = {c: v[keep] for c, v in e.items()}
            n = len(e["key"])
            none = np.full(n, -1, np.int64)
            parts.append({
                "name": e["key"], "code": e["code"], "shape": e["shape"], "nbytes": e["nbytes"],
                "storage": np.full(n, NAMED, np.int8), "file": e["file"],
                "offset": e["offset"], "method": none, "value": none,
                "fqn": filled(n, None), "dim_order": e["dim_order"],
                "segment": e["segment"], "dbi": none, "mem_id": none, "mem_off": none,
                "dyn": none, "rg": np.full(n, -1, np.int8),
                "has_layout": e["has_layout"].astype(np.int8), "missing": np.full(n, -1, np.int8),
                "used_by": self._users(e["key"])})
        return parts

    def _names(self, m: int) -> np.ndarray:
        """Names of method ``m``'s tensors: the fqn, else '<method>/<value index>' (cached)."""
        names = self._names_cache.get(m)
        if names is None:
            plan = self.r.methods[m]
            t = plan.tensors
            names = t.fqn.copy()
            unnamed = np.flatnonzero(np.equal(names, None))
            if len(unnamed):
                names[unnamed] = objects([f"{plan.name}/{v}" for v in t.value[unnamed].tolist()])
            self._names_cache[m] = names
        return names

    def _users(self, keys: np.ndarray) -> np.ndarray:
        """'; '-joined delegates whose blobs refer to each key (None: none)."""
        joined = self.ext.key_user_text()
        if not joined:
            return filled(len(keys), None)
        return np.fromiter(map(joined.get, keys.tolist()), object, len(keys))

    def _named_parts(self) -> list[dict[str, Any]]:
        """Named data of the program, then of each attached data file, as columns (a new
        list of new dicts each time; the arrays are shared)."""
        if self._named_parts_cache is None:
            self._named_parts_cache = self._read_named_parts()
        return [dict(p) for p in self._named_parts_cache]

    def _read_named_parts(self) -> list[dict[str, Any]]:
        r = self.r
        out = []
        if len(r.named_keys):
            segs = r.named_seg
            size = r.seg_size[segs]
            n = len(segs)
            sizes = size.tolist()
            shape_of = {z: (z,) for z in set(sizes)}  # one tuple per distinct size
            out.append({"key": r.named_keys, "segment": segs, "offset": r.seg_off[segs],
                        "size": size, "code": np.zeros(n, np.int64),
                        "shape": np.fromiter(map(shape_of.__getitem__, sizes), object, n),
                        "dim_order": filled(n, (0,)), "nbytes": size,
                        "has_layout": np.zeros(n, bool),
                        "file": filled(n, r.file), "file_path": r.file})
        for d in self.ext.data:
            c = d.extra.ptd.cols
            n = len(c["key"])
            out.append({"key": c["key"], "segment": c["segment"], "offset": c["offset"],
                        "size": c["size"], "code": c["code"], "shape": c["shape"],
                        "dim_order": c["dim_order"], "nbytes": c["nbytes"],
                        "has_layout": c["has_layout"],
                        "file": filled(n, d.path), "file_path": d.path})
        return out

    # -- methods, values, operators, delegates ------------------------------------------------
    def methods(self) -> dict[str, list]:
        """The methods frame: one row per ExecutionPlan."""
        cols: dict[str, list] = {c: [] for c in (
            "method", "index", "values", "tensors", "inputs", "outputs", "chains",
            "instructions", "kernel_calls", "delegate_calls", "operators", "delegates",
            "planned_buffers", "planned_bytes", "constant_bytes", "constant_method",
            "constant_value")}
        for plan in self.r.methods:
            ins = plan.instructions
            t = plan.tensors
            sizes = plan.buffer_sizes
            for col, v in (
                ("method", plan.name), ("index", plan.index), ("values", len(plan.vtypes)),
                ("tensors", len(t)), ("inputs", len(plan.inputs)),
                ("outputs", len(plan.outputs)), ("chains", ins.chains),
                ("instructions", ins.instructions),
                ("kernel_calls", ins.kinds[_I.KernelCall]), ("delegate_calls", ins.kinds[_I.DelegateCall]),
                ("operators", len(plan.operators)), ("delegates", len(plan.delegates)),
                ("planned_buffers", max(len(sizes) - 1, 0)), ("planned_bytes", sum(sizes[1:])),
                ("constant_bytes", int(t.nbytes[isin_few(t.storage, CONSTANT_STORAGES)].sum())),
                ("constant_method", ins.instructions == 0),
                ("constant_value", self._constant_value(plan) if ins.instructions == 0
                 else None),
            ):
                cols[col].append(v)
        return cols

    def _constant_value(self, plan: Method) -> Any:
        """What a method without instructions returns (``get_max_seq_len`` -> 128): its output
        value, a tuple of them for several; ``None`` for a tensor or an unreadable value (a
        finding says which)."""
        fb = self.r.fb
        out = []
        for v in plan.outputs:
            if not 0 <= v < len(plan.vtypes) or not plan.vpos[v]:
                out.append(None)
                continue
            p = int(plan.vpos[v])
            try:
                out.append(_python_value(int(plan.vtypes[v]),
                                         fb.table_at(p, f"{plan.name}.values[{v}]", p)))
            except ArtifactError as e:
                self.r.findings.append(Finding("warning", e.structure or f"{plan.name}.values[{v}]", e.offset,
                                               f"the constant method's output cannot be "
                                               f"read: {e.detail}"))
                out.append(None)
        return out[0] if len(out) == 1 else tuple(out)

    def values(self) -> dict[str, Any]:
        """The values frame: every EValue of every method, with a short summary."""
        import pandas as pd

        summaries: list[np.ndarray] = []
        vtypes, values, method_codes, ins, outs = [], [], [], [], []
        for m, plan in enumerate(self.r.methods):
            n = len(plan.vtypes)
            summaries.append(self._summaries(plan))
            idx = np.arange(n, dtype=np.int64)
            vtypes.append(plan.vtypes)
            values.append(idx)
            method_codes.append(np.full(n, m, dtype=np.int32))
            ins.append(isin_few(idx, plan.inputs))
            outs.append(isin_few(idx, plan.outputs))

        def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

        return {
            "method": pd.Categorical.from_codes(cat(method_codes, np.int32),
                                                categories=_unique_names(self.r.methods),
                                                validate=False),
            "value": cat(values, np.int64),
            "type": pd.Categorical.from_codes(cat(vtypes, np.int8), categories=list(VALUE_TYPES),
                                              validate=False),
            "summary": strings(cat(summaries, object)),
            "is_input": cat(ins, bool),
            "is_output": cat(outs, bool),
        }

    def _summaries(self, plan: Method) -> np.ndarray:
        """One summary text per value of ``plan``."""
        vt, vpos = plan.vtypes, plan.vpos
        summary = filled(len(vt), "")
        t = plan.tensors
        if len(t):  # one text per distinct (dtype, shape, storage)
            key = ((t.scalar_type * len(STORAGES) + t.storage) * (int(t.shape_id.max()) + 1)
                   + t.shape_id)
            first, inv = groups(key)
            texts = np.empty(len(first), dtype=object)
            for j, k in enumerate(first.tolist()):
                shape = "x".join(str(d) for d in t.shape[k]) or "scalar"
                texts[j] = f"{DTYPE_NAMES[t.scalar_type[k]]}[{shape}] {STORAGES[t.storage[k]]}"
            summary[t.value] = texts[inv]
        self.r.path.read(lambda: self._scalar_summaries(vt, vpos, summary),
                         lambda: self._table_summaries(plan, vt, vpos, summary))
        return summary

    def _table_summaries(self, plan: Method, vt: np.ndarray, vpos: np.ndarray,
                         summary: np.ndarray) -> None:
        """Fill ``summary`` for non-tensor values, table by table (names a bad table)."""
        fb = self.r.fb
        for i, (k, p) in enumerate(zip(vt.tolist(), vpos.tolist())):
            if k != _K.Tensor and p:
                tab = fb.table_at(p, f"{plan.name}.values[{i}]", p)
                summary[i] = _value_summary(k, tab)

    def _scalar_summaries(self, vt: np.ndarray, vpos: np.ndarray, summary: np.ndarray) -> None:
        """Fill ``summary`` for non-tensor values, a whole type at a time (fast path); each
        distinct value is rendered once."""
        vec = self.r.vec
        for t in np.unique(vt).tolist():
            if t in (_K.NONE, _K.Null, _K.Tensor):
                continue
            where = np.flatnonzero(vt == t)
            T = vec.tables(vpos[where], VALUE_TYPES[t])
            if t in _SCALARS:
                slot, dtype, show = _SCALARS[t]
                vals = T.scalar(slot, dtype)
                bits = vals.view(np.int64) if t == _K.Double else vals
                first, inv = groups(bits.astype(np.int64))
                texts = objects([show(x) for x in vals[first].tolist()])[inv]
            elif t == _K.String:  # a bad string: SlowPath, the scalar path names it
                out = []
                for text in vec.strings(T.ref(String.string_val)).tolist():
                    text = text or ""
                    out.append(repr(text[:60] + ("..." if len(text) > 60 else "")))
                texts = objects(out)
            else:
                dtype, _, size = LIST_TYPES[t]
                starts, counts = T.vectors(List.items, size)
                shown = np.minimum(counts, 16)
                flat = vec.flat(starts, shown, dtype)
                show = {_K.DoubleList: repr, _K.BoolList: _bool_text}.get(t, str)
                texts = list_texts(objects(list(map(show, flat.tolist()))), shown, counts)
            summary[where] = texts

    def operators(self, kernel_keys: Sequence[dict[int, tuple[str, ...]]] = ()
                  ) -> dict[str, list]:
        """The operators frame: every Operator of every method, with its kernel-call count and
        (``kernel_keys``: per method, operator index -> keys) the kernel keys of its calls."""
        cols: dict[str, list] = {c: [] for c in ("method", "index", "name", "overload", "op",
                                                 "uses", "kernel_keys")}
        for mi, plan in enumerate(self.r.methods):
            keys = kernel_keys[mi] if mi < len(kernel_keys) else {}
            for k, (name, overload) in enumerate(plan.operators):
                cols["method"].append(plan.name)
                cols["index"].append(k)
                cols["name"].append(name)
                cols["overload"].append(overload)
                cols["op"].append(f"{name}.{overload}" if overload else name)
                cols["uses"].append(plan.instructions.kernel_uses.get(k, 0))
                cols["kernel_keys"].append(keys.get(k, ()))
        return cols

    def delegates(self) -> dict[str, list]:
        """The delegates frame: every BackendDelegate and where its blob is."""
        cols: dict[str, list] = {c: [] for c in (
            "method", "index", "id", "backend", "layout", "location", "data_index", "file",
            "offset", "size", "align", "compile_specs", "calls")}
        for m, plan in enumerate(self.r.methods):
            for k, d in enumerate(plan.delegates):
                info = self.blobs.info(m, k)
                row = d._asdict()
                row.update(method=plan.name, index=k, file=self.r.file,
                           align=align_of(d.offset), compile_specs=", ".join(d.compile_specs),
                           backend=None if info is None else info.backend,
                           layout=None if info is None else info.layout)
                for c, col in cols.items():
                    col.append(row[c])
        return cols

    # -- named data, memory plan --------------------------------------------------------------
    def named_data(self) -> dict[str, Any]:
        """The named_data frame: the program's entries, then each data file's."""
        parts = self._named_parts()
        if not parts:
            return {c: [] for c in ("key", "segment", "file", "offset", "size", "align",
                                    "has_layout", "role", "used_by", "tensor", "dtype",
                                    "shape", "quant", "group_size")}
        c = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "file_path"}
        n = len(c["key"])
        if len(parts) == 1 and len(self.r.named_keys):  # the program's own keys only: roles known
            role = self._named_roles().copy()
        else:
            role = named_data_roles(c["key"])
        role[c["has_layout"].astype(bool)] = "tensor"
        # what the delegate graph that reads a key says its bytes are
        layouts = self.blobs.key_layout_columns(c["key"]) if n else None
        if layouts:
            tensor, dtype, shape, quant, group = layouts
        else:
            tensor, dtype, shape, quant = (filled(n, None) for _ in range(4))
            group = np.full(n, -1, np.int64)
        return {
            "key": strings(c["key"]), "segment": c["segment"], "file": strings(c["file"]),
            "offset": c["offset"], "size": c["size"], "align": align(c["offset"]),
            "has_layout": booleans(c["has_layout"]), "role": factorized(role),
            "used_by": strings(self._users(c["key"])),
            "tensor": strings(tensor), "dtype": factorized(dtype), "shape": shape,
            "quant": factorized(quant), "group_size": ints(group, group < 0),
        }

    def memory_plan(self) -> dict[str, Any]:
        """The memory_plan frame: every planned tensor and whether it fits its buffer."""
        names = ("method", "mem_id", "buffer_size", "value", "name", "dtype", "shape", "offset",
                 "nbytes", "end", "storage", "fits")
        parts = []
        for m, plan in enumerate(self.r.methods):
            t = plan.tensors
            rows = np.flatnonzero(t.mem_id >= 0)
            if not len(rows):
                continue
            sizes = np.array(plan.buffer_sizes, np.int64)
            mem_id = t.mem_id[rows]
            known = mem_id < len(sizes)
            bsize = np.full(len(rows), -1, np.int64)
            bsize[known] = sizes[mem_id[known]]
            off = t.mem_offset[rows]
            end = off + t.nbytes[rows]
            parts.append({"method": np.full(len(rows), m, np.int64), "mem_id": mem_id,
                          "buffer_size": bsize, "known": known, "value": t.value[rows],
                          "name": self._names(m)[rows], "code": t.scalar_type[rows],
                          "shape": t.shape[rows], "offset": off, "nbytes": t.nbytes[rows],
                          "end": end, "storage": t.storage[rows], "fits": known & (end <= bsize)})
        if not parts:
            return {c: [] for c in names}
        c = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        return {
            "method": categorical(c["method"], [p.name for p in self.r.methods]),
            "mem_id": c["mem_id"], "buffer_size": ints(c["buffer_size"], ~c["known"]),
            "value": c["value"], "name": strings(c["name"]),
            "dtype": categorical(c["code"], DTYPE_NAMES), "shape": c["shape"],
            "offset": c["offset"], "nbytes": c["nbytes"], "end": c["end"],
            "storage": categorical(c["storage"], STORAGES), "fits": c["fits"],
        }


def _bool_text(x: Any) -> str:
    return str(bool(x))


#: Scalar members of KernelTypes -> (slot, numpy dtype, rendering) (fast path).
_SCALARS = {_K.Int: (Int.int_val, "<i8", str), _K.Bool: (Bool.bool_val, "u1", _bool_text),
            _K.Double: (Double.double_val, "<f8", repr)}


def list_texts(items: np.ndarray, shown: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """'[a, b, ...]' per list, from the rendered ``items`` of all lists back to back (``shown``
    of each list; ``counts`` is its full length, longer lists end with '... (n items)').

    All texts come from ONE join over the items and their separators, split at NUL.

    Example:
        >>> list_texts(objects(["1", "2", "3"]), np.array([2, 0, 1]), np.array([2, 0, 5])).tolist()
        ['[1, 2]', '[]', '[3, ... (5 items)]']
    """
    n = len(shown)
    out = filled(n, "[]")
    total = len(items)
    if total == 0:
        return out
    nonempty = np.flatnonzero(shown > 0)
    begin = (np.cumsum(shown) - shown)[nonempty]
    last = begin + shown[nonempty] - 1
    pre = filled(total, "")
    pre[begin] = "["
    sep = filled(total, ", ")
    close = filled(len(nonempty), "]\0")
    cut = np.flatnonzero(counts[nonempty] > shown[nonempty])
    for j, c in zip(cut.tolist(), counts[nonempty][cut].tolist()):
        close[j] = f", ... ({c} items)]\0"
    sep[last] = close
    tokens = np.empty(3 * total, dtype=object)
    tokens[0::3] = pre
    tokens[1::3] = items
    tokens[2::3] = sep
    texts = "".join(tokens.tolist()).split("\0")
    texts.pop()
    out[nonempty] = objects(texts)
    return out


def _unique_names(methods: list[Method]) -> list[str]:
    """Method names as categories (a repeated name from a corrupt file gets a suffix)."""
    out: list[str] = []
    for plan in methods:
        name = plan.name
        while name in out:
            name += "'"
        out.append(name)
    return out


def _python_value(t: int, tab: Table) -> Any:
    """One non-tensor EValue as a Python value (scalar verifying path); ``None`` for a tensor
    or an unknown type."""
    if t == _K.Int:
        return tab.i64(Int.int_val)
    if t == _K.Bool:
        return tab.bool(Bool.bool_val)
    if t == _K.Double:
        return tab.f64(Double.double_val)
    if t == _K.String:
        return tab.string(String.string_val, "string_val")
    if t in LIST_TYPES and t not in (_K.TensorList, _K.OptionalTensorList):
        items = tab.scalars(List.items, LIST_TYPES[t][1], "items")
        return tuple(bool(x) for x in items) if t == _K.BoolList else tuple(items)
    return None


def _value_summary(t: int, tab: Table) -> str:
    """A short rendering of one non-tensor EValue (scalar verifying path)."""
    if t == _K.Int:
        return str(tab.i64(Int.int_val))
    if t == _K.Bool:
        return str(tab.bool(Bool.bool_val))
    if t == _K.Double:
        return repr(tab.f64(Double.double_val))
    if t == _K.String:
        s = tab.string(String.string_val, "string_val") or ""
        return repr(s[:60] + ("..." if len(s) > 60 else ""))
    if t in LIST_TYPES:
        items = tab.scalars(List.items, LIST_TYPES[t][1], "items")
        n = len(items)
        shown = [bool(x) if t == _K.BoolList else x for x in items[:16]]
        body = ", ".join(str(x) for x in shown) + (f", ... ({n} items)" if n > 16 else "")
        return f"[{body}]"
    return ""
