"""Reading an ETDump into numpy record columns: the vectorised fast path and the verifying
one-table-at-a-time fallback (private).

Both paths return the same :class:`Records`; the fast path raises
:class:`~workbench._vecfb.SlowPath` at the first doubt and the scalar path then reports the
exact structure and offset. Nothing is copied from the map except event names and the few
scalars the frames need.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ... import readpath
from ..._cols import filled, objects
from ..._vecfb import SlowPath, Tables, VecReader, unique_tuples
from ...dtypes import SCALAR_TYPES
from ...errors import CorruptError, TruncatedError
from ...flatbuf import FlatBuffer, Table
from ...limits import TENSOR_MAX_BYTES
from ...source import Source
from .schema import (
    FILE_IDENTIFIER,
    NOT_SET,
    VALUE_TYPES,
    AllocationEvent,
    Allocator,
    DebugEvent,
    ETDump,
    Event,
    ProfileEvent,
    RunData,
    Scalar,
    Tensor,
    TensorList,
    Value,
)

#: A logged tensor of this many bytes or more is corrupt (it would overflow int64 columns).
MAX_TENSOR_BYTES = TENSOR_MAX_BYTES
_ITEMSIZE = np.zeros(max(SCALAR_TYPES) + 1, np.int64)
for _code, _dt in SCALAR_TYPES.items():
    _ITEMSIZE[_code] = _dt.itemsize
_KNOWN_CODES = np.zeros(max(SCALAR_TYPES) + 1, bool)
_KNOWN_CODES[list(SCALAR_TYPES)] = True


class Strings(NamedTuple):
    """A string column stored once per distinct value: ``codes`` (int64, -1: absent) into
    ``values``. Event names repeat a lot; a Python string per row would cost ~70 bytes each.

    Example:
        >>> Strings(np.array([1, 0, -1]), ["a", "b"]).objects().tolist()
        ['b', 'a', None]
    """

    codes: np.ndarray
    values: list[str]

    def objects(self) -> np.ndarray:
        """One object per row (the distinct values shared), ``None`` where absent."""
        return objects([*self.values, None])[self.codes]

    def take(self, rows: np.ndarray) -> Strings:
        """The rows ``rows`` of the column."""
        return Strings(self.codes[rows], self.values)

    @classmethod
    def of(cls, items: list[str | None]) -> Strings:
        """Intern a list of strings (``None``: absent), values in order of appearance."""
        index: dict[str, int] = {}
        codes = np.array([-1 if v is None else index.setdefault(v, len(index)) for v in items],
                         np.int64)
        return cls(codes, list(index))


#: Bytes gathered at once when interning strings (bounds the temporary matrices).
_INTERN_CHUNK = 1 << 20
#: Distinct values peeled off one at a time before sorting the rest.
_PEELS = 16


def intern(vec: VecReader, ref: np.ndarray) -> Strings:
    """The strings at ``ref`` (0: absent), interned without a Python object per row.

    Rows are grouped by length; each group's bytes are copied out of the map as one
    ``(rows, length)`` matrix (a sliding-window view, no index matrix) and its distinct
    values found by peeling off the rows equal to the first remaining one (event names
    repeat: a handful of peels per group), the rest by sorting. Only distinct values are
    decoded. Raises SlowPath where :meth:`VecReader.strings` would (no NUL terminator, a NUL
    inside, bad UTF-8).
    """
    ref = np.asarray(ref, np.int64)
    codes = np.full(len(ref), -1, np.int64)
    present = np.flatnonzero(ref)
    if not len(present):
        return Strings(codes, [])
    starts, counts = vec.vectors(ref[present], 1)
    ends = starts + counts
    if (ends >= vec.end).any() or vec.u8[ends].any():
        raise SlowPath("string is not NUL-terminated")
    table: dict[bytes, int] = {}
    for length, rows in _by_length(counts):
        if length == 0:
            codes[present[rows]] = table.setdefault(b"", len(table))
            continue
        window = np.lib.stride_tricks.sliding_window_view(vec.u8, length)
        step = max(1, _INTERN_CHUNK // length)
        for c0 in range(0, len(rows), step):
            r = rows[c0:c0 + step]
            mat = window[starts[r]]
            if not mat.all():
                raise SlowPath("string holds a NUL")
            codes[present[r]] = _distinct(mat, table)
    try:
        values = [k.decode("utf-8") for k in table]
    except UnicodeDecodeError:
        raise SlowPath("string is not valid UTF-8") from None
    return Strings(codes, values)


def _by_length(counts: np.ndarray):
    """``(length, rows)`` groups of equal ``counts`` (few distinct lengths: one mask each)."""
    hi = int(counts.max())
    if hi < 1 << 16:
        lengths = np.flatnonzero(np.bincount(counts))
        if len(lengths) <= 32:
            for length in lengths.tolist():
                yield length, np.flatnonzero(counts == length)
            return
    order = np.argsort(counts, kind="stable")
    sc = counts[order]
    bounds = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1], True])
    for b0, b1 in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        yield int(sc[b0]), order[b0:b1]


def _distinct(mat: np.ndarray, table: dict[bytes, int]) -> np.ndarray:
    """Codes (into ``table``, extended) of the rows of a ``(rows, length)`` uint8 matrix."""
    k, length = mat.shape
    width = -(-length // 8)
    if length % 8:
        padded = np.zeros((k, width * 8), np.uint8)
        padded[:, :length] = mat
    else:
        padded = np.ascontiguousarray(mat)
    words = padded.view("<u8")
    out = np.empty(k, np.int64)
    rest = np.arange(k)
    for _ in range(_PEELS):
        if not len(rest):
            return out
        first = words[rest[0]]
        same = (words[rest] == first).all(axis=1)
        out[rest[same]] = table.setdefault(mat[rest[0]].tobytes(), len(table))
        rest = rest[~same]
    if len(rest):
        keys, inv = np.unique(np.ascontiguousarray(mat[rest]).view(f"S{length}").ravel(),
                              return_inverse=True)
        local = np.array([table.setdefault(key, len(table)) for key in keys.tolist()], np.int64)
        out[rest] = local[inv.ravel()]
    return out


class Header:
    """Where the flatbuffer lies: ``base`` (its offsets are relative to it) and ``end``.

    Attributes:
        size_prefixed: the file starts with a ``u32`` length (what the runtime writes);
            else the flatbuffer starts at byte 0 (what flatc writes without
            ``--size-prefixed``).
        size_prefix: that length (``None`` without one).
        base, end: the flatbuffer's byte range ``[base, end)``.
    """

    __slots__ = ("base", "end", "size_prefix", "size_prefixed")

    def __init__(self, src: Source) -> None:
        if src.size < 8:
            raise TruncatedError(f"{src.size} bytes is too short for an ETDump (needs 12)",
                                 file=src.path, structure="file header", offset=0)
        head = src.head(12)
        if head[8:12] == FILE_IDENTIFIER:
            self.size_prefixed = True
            n = src.u32(0, "size prefix")
            self.size_prefix = n
            if n < 8:
                raise TruncatedError(f"size prefix {n} is too small for a flatbuffer (needs 8)",
                                     file=src.path, structure="size prefix", offset=0)
            if 4 + n > src.size:
                raise TruncatedError(
                    f"size prefix says the flatbuffer has {n} bytes, but only {src.size - 4} "
                    "follow it", file=src.path, structure="size prefix", offset=0)
            self.base, self.end = 4, 4 + n
        elif head[4:8] == FILE_IDENTIFIER:
            self.size_prefixed = False
            self.size_prefix = None
            self.base, self.end = 0, src.size
        else:
            raise CorruptError(f"file identifier {head[8:12]!r} is not {FILE_IDENTIFIER!r} "
                               "(neither at byte 8 after a size prefix nor at byte 4)",
                               file=src.path, structure="file identifier", offset=8)


class Records:
    """The ETDump as numpy columns (one dict per record kind; see :func:`read_records`).

    ``runs``: name (:class:`Strings`), bundled_input_index, events, profile, allocation, debug,
    unknown (int64 counts), pos (int64, table offset), allocators (object: tuple of names).
    ``profile``: run, index, pos, chain, instruction, dd_int, meta_off, meta_size (int64,
    -1: absent), name, dd_str (:class:`Strings`), start, end (uint64).
    ``alloc``: run, index, pos, allocator_id (int64), size (uint64).
    ``debug`` (one row per logged value; a tensor list gives one row per tensor): run,
    index, pos, chain, instruction, dd_int, vtype (-1: no debug_entry), output (-1: absent,
    0, 1), list_index (-1: not in a list), code (scalar type, -1: no tensor), offset, nbytes
    (-1: no tensor), tpos (tensor table offset, -1) as int64; name, dd_str
    (:class:`Strings`); value, shape, strides (object).
    """

    __slots__ = ("alloc", "debug", "profile", "runs")

    def __init__(self, runs: dict[str, Any], profile: dict[str, Any], alloc: dict[str, Any],
                 debug: dict[str, Any]) -> None:
        self.runs = runs
        self.profile = profile
        self.alloc = alloc
        self.debug = debug


def read_records(src: Source, fb: FlatBuffer, root: Table) -> Records:
    """All records of the ETDump whose root table is ``root`` (fast path, else scalar)."""
    return readpath.chosen().read(lambda: _Fast(src, fb, root).read(),
                                  lambda: _Slow(src, root).read())


# ------------------------------------------------------------------------------ fast path


def _elements(starts: np.ndarray, counts: np.ndarray, size: int) -> np.ndarray:
    """Absolute positions of every element of many vectors (``size`` bytes each)."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    first = np.cumsum(counts) - counts
    return np.repeat(starts, counts) + size * (np.arange(total) - np.repeat(first, counts))


def _owner(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the concatenated elements of vectors with ``counts``: (vector, index within it)."""
    total = int(counts.sum())
    owner = np.repeat(np.arange(len(counts)), counts)
    first = np.cumsum(counts) - counts
    return owner, np.arange(total) - first[owner]


class _Fast:
    """The vectorised reader (raises SlowPath on any doubt)."""

    def __init__(self, src: Source, fb: FlatBuffer, root: Table) -> None:
        self.src = src
        self.vec = VecReader(fb)
        self.root = root

    def _tables_of(self, table_vec_pos: np.ndarray, path: str) -> Tables:
        """The tables referenced from the offset slots at ``table_vec_pos``."""
        vec = self.vec
        target = table_vec_pos + vec.gather(table_vec_pos, "<u4") if len(table_vec_pos) else \
            np.zeros(0, np.int64)
        if len(target) and (target >= vec.end).any():
            raise SlowPath("reference past the end")
        return vec.tables(target, path)

    def read(self) -> Records:
        vec = self.vec
        start, n = self.root.vector(ETDump.run_data, 4, "run_data")
        R = vec.table_vector(start, n, "ETDump.run_data")
        run_names = intern(vec, R.ref(RunData.name))
        bundled = R.scalar(RunData.bundled_input_index, "<i4", NOT_SET).astype(np.int64)
        a_start, a_cnt = R.vectors(RunData.allocators, 4)
        A = self._tables_of(_elements(a_start, a_cnt, 4), "Allocator")
        alloc_names = vec.strings(A.ref(Allocator.name)).tolist()
        allocators = np.empty(n, object)
        at = 0
        for k, c in enumerate(a_cnt.tolist()):
            allocators[k] = tuple(alloc_names[at:at + c])
            at += c

        e_start, e_cnt = R.vectors(RunData.events, 4)
        E = self._tables_of(_elements(e_start, e_cnt, 4), "Event")
        run_of, index = _owner(e_cnt)
        p_ref = E.ref(Event.profile_event)
        a_ref = E.ref(Event.allocation_event)
        d_ref = E.ref(Event.debug_event)
        n_set = (p_ref > 0).astype(np.int64) + (a_ref > 0) + (d_ref > 0)
        if (n_set > 1).any():
            raise SlowPath("event with more than one type")
        p_sel = np.flatnonzero(p_ref)
        a_sel = np.flatnonzero(a_ref)
        d_sel = np.flatnonzero(d_ref)

        def per_run(sel: np.ndarray) -> np.ndarray:
            return np.bincount(run_of[sel], minlength=n).astype(np.int64)

        runs = {"name": run_names, "bundled_input_index": bundled, "events": e_cnt.astype(np.int64),
                "profile": per_run(p_sel), "allocation": per_run(a_sel), "debug": per_run(d_sel),
                "unknown": per_run(np.flatnonzero(n_set == 0)), "pos": R.pos,
                "allocators": allocators}
        profile = self._profile(vec.tables(p_ref[p_sel], "ProfileEvent"), run_of[p_sel],
                                index[p_sel])
        alloc = self._alloc(vec.tables(a_ref[a_sel], "AllocationEvent"), run_of[a_sel],
                            index[a_sel])
        debug = self._debug(vec.tables(d_ref[d_sel], "DebugEvent"), run_of[d_sel], index[d_sel])
        return Records(runs, profile, alloc, debug)

    def _profile(self, P: Tables, run: np.ndarray, index: np.ndarray) -> dict[str, Any]:
        vec = self.vec
        m_ref = P.ref(ProfileEvent.delegate_debug_metadata)
        m_start, m_cnt = vec.vectors(m_ref, 1)
        present = m_ref > 0
        return {
            "run": run, "index": index, "pos": P.pos,
            "name": intern(vec, P.ref(ProfileEvent.name)),
            "chain": P.scalar(ProfileEvent.chain_index, "<i4").astype(np.int64),
            "instruction": P.scalar(ProfileEvent.instruction_id, "<i4", NOT_SET).astype(np.int64),
            "dd_int": P.scalar(ProfileEvent.delegate_debug_id_int, "<i4", NOT_SET).astype(np.int64),
            "dd_str": intern(vec, P.ref(ProfileEvent.delegate_debug_id_str)),
            "meta_off": np.where(present, m_start, -1), "meta_size": np.where(present, m_cnt, -1),
            "start": P.scalar(ProfileEvent.start_time, "<u8"),
            "end": P.scalar(ProfileEvent.end_time, "<u8"),
        }

    def _alloc(self, A: Tables, run: np.ndarray, index: np.ndarray) -> dict[str, Any]:
        return {"run": run, "index": index, "pos": A.pos,
                "allocator_id": A.scalar(AllocationEvent.allocator_id, "<i4").astype(np.int64),
                "size": A.scalar(AllocationEvent.allocation_size, "<u8")}

    def _scalars(self, V: Tables, rows: np.ndarray, slot: int, dtype: str) -> np.ndarray:
        """The one field of the wrapper tables at ``V``'s field ``slot`` for ``rows``."""
        ref = V.ref(slot)[rows]
        if (ref == 0).any():
            raise SlowPath("value type without its value")
        return self.vec.tables(ref, "Scalar").scalar(Scalar.value, dtype)

    def _debug(self, D: Tables, run: np.ndarray, index: np.ndarray) -> dict[str, Any]:
        vec = self.vec
        n = len(D.pos)
        v_ref = D.ref(DebugEvent.debug_entry)
        has_v = np.flatnonzero(v_ref)
        V = vec.tables(v_ref[has_v], "Value")
        vt = V.scalar(Value.val, "i1").astype(np.int64)
        if len(vt) and (vt.min() < 0 or vt.max() >= len(VALUE_TYPES)):
            raise SlowPath("unknown value type")
        vtype = np.full(n, -1, np.int64)
        vtype[has_v] = vt
        o_ref = V.ref(Value.output)
        output = np.full(n, -1, np.int64)
        has_o = np.flatnonzero(o_ref)
        output[has_v[has_o]] = vec.tables(o_ref[has_o], "Bool").scalar(Scalar.value, "u1") != 0
        value = filled(n, None)
        for code, slot, dtype in ((Value.INT, Value.int_value, "<i8"),
                                  (Value.BOOL, Value.bool_value, "u1"),
                                  (Value.FLOAT, Value.float_value, "<f4"),
                                  (Value.DOUBLE, Value.double_value, "<f8")):
            rows = np.flatnonzero(vt == code)
            if len(rows):
                got = self._scalars(V, rows, slot, dtype)
                if code == Value.BOOL:
                    got = got != 0
                value[has_v[rows]] = objects(got.astype(np.float64 if dtype == "<f4" else got.dtype)
                                             .tolist())
        # tensors: one per Tensor value, one per element of a TensorList
        t_rows = np.flatnonzero(vt == Value.TENSOR)
        t_ref = V.ref(Value.tensor)[t_rows]
        l_rows = np.flatnonzero(vt == Value.TENSOR_LIST)
        l_ref = V.ref(Value.tensor_list)[l_rows]
        if (t_ref == 0).any() or (l_ref == 0).any():
            raise SlowPath("value type without its value")
        L = vec.tables(l_ref, "TensorList")
        le_start, le_cnt = L.vectors(TensorList.tensors, 4)
        le_pos = _elements(le_start, le_cnt, 4)
        le_ref = le_pos + vec.gather(le_pos, "<u4") if len(le_pos) else np.zeros(0, np.int64)
        if len(le_ref) and (le_ref >= vec.end).any():
            raise SlowPath("reference past the end")
        le_owner, le_k = _owner(le_cnt)
        tensor_event = np.concatenate([has_v[t_rows], has_v[l_rows][le_owner]])
        tensor_k = np.concatenate([np.full(len(t_rows), -1, np.int64), le_k])
        T = vec.tables(np.concatenate([t_ref, le_ref]), "Tensor")
        code, shape, strides, offset, nbytes = self._tensors(T)
        # rows: every event without a tensor (an empty list too), then the tensor rows
        bare = np.ones(n, bool)
        bare[tensor_event] = False
        bare_ev = np.flatnonzero(bare)
        ev = np.concatenate([bare_ev, tensor_event])
        k = np.concatenate([np.full(len(bare_ev), -1, np.int64), tensor_k])
        order = np.lexsort((k, ev))
        ev = ev[order]
        m = len(bare_ev)

        def tensor_col(values: np.ndarray, missing: Any) -> np.ndarray:
            out = np.empty(m + len(values), values.dtype)
            out[:m] = missing
            out[m:] = values
            return out[order]

        return {
            "run": run[ev], "index": index[ev], "pos": D.pos[ev],
            "name": intern(vec, D.ref(DebugEvent.name)).take(ev),
            "chain": D.scalar(DebugEvent.chain_index, "<u8").view(np.int64)[ev],
            "instruction": D.scalar(DebugEvent.instruction_id, "<i4", NOT_SET).astype(np.int64)[ev],
            "dd_int": D.scalar(DebugEvent.delegate_debug_id_int, "<i4", NOT_SET).astype(np.int64)[ev],
            "dd_str": intern(vec, D.ref(DebugEvent.delegate_debug_id_str)).take(ev),
            "vtype": vtype[ev], "output": output[ev], "value": value[ev],
            "list_index": k[order],
            "code": tensor_col(code, -1), "shape": tensor_col(shape, None),
            "strides": tensor_col(strides, None), "offset": tensor_col(offset, -1),
            "nbytes": tensor_col(nbytes, -1), "tpos": tensor_col(T.pos, -1),
        }

    def _tensors(self, T: Tables) -> tuple[np.ndarray, ...]:
        vec = self.vec
        code = T.scalar(Tensor.scalar_type, "i1").astype(np.int64)
        if len(code) and (code.min() < 0 or code.max() >= len(_KNOWN_CODES)
                          or not _KNOWN_CODES[code].all()):
            raise SlowPath("unknown scalar type")
        s_start, s_cnt = T.vectors(Tensor.sizes, 8)
        flat = vec.flat(s_start, s_cnt, "<i8")
        if len(flat) and flat.min() < 0:
            raise SlowPath("negative size")
        shape, shape_id, uniques = unique_tuples(flat, s_cnt)
        numel = [math.prod(t) for t in uniques]
        if numel and max(numel) >= MAX_TENSOR_BYTES // 16:
            raise SlowPath("huge tensor")
        nbytes = (np.array(numel, np.int64)[shape_id] if numel else np.zeros(0, np.int64)) \
            * _ITEMSIZE[code]
        st_start, st_cnt = T.vectors(Tensor.strides, 8)
        strides = unique_tuples(vec.flat(st_start, st_cnt, "<i8"), st_cnt)[0]
        offset = T.scalar(Tensor.offset, "<i8")
        if len(offset) and offset.min() < 0:
            raise SlowPath("negative offset")
        return code, shape, strides, offset.astype(np.int64), nbytes


# ------------------------------------------------------------------------------ scalar path


class _Slow:
    """The verifying reader, one table at a time: exact errors."""

    def __init__(self, src: Source, root: Table) -> None:
        self.src = src
        self.root = root

    def _corrupt(self, t: Table, detail: str, offset: int | None = None) -> CorruptError:
        return CorruptError(detail, file=self.src.path, structure=t.path,
                            offset=t.pos if offset is None else offset)

    def read(self) -> Records:
        runs: dict[str, list] = {k: [] for k in ("name", "bundled_input_index", "events",
                                                 "profile", "allocation", "debug", "unknown",
                                                 "pos", "allocators")}
        prof: dict[str, list] = {k: [] for k in ("run", "index", "pos", "name", "chain",
                                                 "instruction", "dd_int", "dd_str", "meta_off",
                                                 "meta_size", "start", "end")}
        alloc: dict[str, list] = {k: [] for k in ("run", "index", "pos", "allocator_id", "size")}
        debug: dict[str, list] = {k: [] for k in _DEBUG_COLUMNS}
        for r, rd in enumerate(self.root.tables(ETDump.run_data, "run_data")):
            counts = [0, 0, 0, 0]
            names = tuple(a.string(Allocator.name, "name")
                          for a in rd.tables(RunData.allocators, "allocators"))
            events = rd.tables(RunData.events, "events")
            for i, ev in enumerate(events):
                parts = [(slot, ev.table(slot, name)) for slot, name in
                         ((Event.profile_event, "profile_event"),
                          (Event.allocation_event, "allocation_event"),
                          (Event.debug_event, "debug_event"))]
                present = [(slot, t) for slot, t in parts if t is not None]
                if len(present) > 1:
                    raise self._corrupt(ev, f"{len(present)} of profile_event, allocation_event "
                                            "and debug_event are set (exactly one must be)")
                if not present:
                    counts[3] += 1
                    continue
                slot, t = present[0]
                counts[slot] += 1
                if slot == Event.profile_event:
                    self._profile(t, r, i, prof)
                elif slot == Event.allocation_event:
                    for k, v in (("run", r), ("index", i), ("pos", t.pos),
                                 ("allocator_id", t.i32(AllocationEvent.allocator_id)),
                                 ("size", t.u64(AllocationEvent.allocation_size))):
                        alloc[k].append(v)
                else:
                    self._debug(t, r, i, debug)
            for k, v in (("name", rd.string(RunData.name, "name")),
                         ("bundled_input_index", rd.i32(RunData.bundled_input_index, NOT_SET)),
                         ("events", len(events)), ("profile", counts[0]),
                         ("allocation", counts[1]), ("debug", counts[2]), ("unknown", counts[3]),
                         ("pos", rd.pos), ("allocators", names)):
                runs[k].append(v)
        return Records(
            {k: (Strings.of(v) if k == "name" else objects(v) if k == "allocators"
                 else np.array(v, np.int64))
             for k, v in runs.items()},
            {k: (Strings.of(v) if k in ("name", "dd_str") else
                 np.array(v, np.uint64) if k in ("start", "end") else np.array(v, np.int64))
             for k, v in prof.items()},
            {k: np.array(v, np.uint64 if k == "size" else np.int64) for k, v in alloc.items()},
            {k: (Strings.of(v) if k in ("name", "dd_str") else objects(v) if k in _OBJECT_DEBUG
                 else np.array(v, np.int64)) for k, v in debug.items()})

    def _profile(self, t: Table, r: int, i: int, out: dict[str, list]) -> None:
        start, n = t.vector(ProfileEvent.delegate_debug_metadata, 1, "delegate_debug_metadata")
        present = t.has(ProfileEvent.delegate_debug_metadata)
        for k, v in (("run", r), ("index", i), ("pos", t.pos),
                     ("name", t.string(ProfileEvent.name, "name")),
                     ("chain", t.i32(ProfileEvent.chain_index)),
                     ("instruction", t.i32(ProfileEvent.instruction_id, NOT_SET)),
                     ("dd_int", t.i32(ProfileEvent.delegate_debug_id_int, NOT_SET)),
                     ("dd_str", t.string(ProfileEvent.delegate_debug_id_str, "delegate_debug_id_str")),
                     ("meta_off", start if present else -1), ("meta_size", n if present else -1),
                     ("start", t.u64(ProfileEvent.start_time)),
                     ("end", t.u64(ProfileEvent.end_time))):
            out[k].append(v)

    def _wrapped(self, v: Table, slot: int, name: str) -> Table:
        t = v.table(slot, name)
        if t is None:
            raise self._corrupt(v, f"Value.val is {VALUE_TYPES[v.i8(Value.val)]} but "
                                   f"Value.{name} is missing")
        return t

    def _debug(self, t: Table, r: int, i: int, out: dict[str, list]) -> None:
        common = {"run": r, "index": i, "pos": t.pos,
                  "name": t.string(DebugEvent.name, "name"),
                  "chain": _signed64(t.u64(DebugEvent.chain_index)),
                  "instruction": t.i32(DebugEvent.instruction_id, NOT_SET),
                  "dd_int": t.i32(DebugEvent.delegate_debug_id_int, NOT_SET),
                  "dd_str": t.string(DebugEvent.delegate_debug_id_str, "delegate_debug_id_str"),
                  "vtype": -1, "output": -1, "value": None}
        tensors: list[tuple[int, Table]] = []
        v = t.table(DebugEvent.debug_entry, "debug_entry")
        if v is not None:
            vt = v.i8(Value.val)
            if not 0 <= vt < len(VALUE_TYPES):
                raise self._corrupt(v, f"Value.val {vt} is unknown (known: 0..{len(VALUE_TYPES) - 1})",
                                    v.field_pos(Value.val, 1))
            common["vtype"] = vt
            o = v.table(Value.output, "output")
            if o is not None:
                common["output"] = int(o.bool(Scalar.value))
            if vt == Value.INT:
                common["value"] = self._wrapped(v, Value.int_value, "int_value").i64(Scalar.value)
            elif vt == Value.BOOL:
                common["value"] = self._wrapped(v, Value.bool_value, "bool_value").bool(Scalar.value)
            elif vt == Value.FLOAT:
                common["value"] = self._wrapped(v, Value.float_value, "float_value").scalar(
                    Scalar.value, "f")
            elif vt == Value.DOUBLE:
                common["value"] = self._wrapped(v, Value.double_value, "double_value").f64(
                    Scalar.value)
            elif vt == Value.TENSOR:
                tensors.append((-1, self._wrapped(v, Value.tensor, "tensor")))
            elif vt == Value.TENSOR_LIST:
                lst = self._wrapped(v, Value.tensor_list, "tensor_list")
                tensors.extend(enumerate(lst.tables(TensorList.tensors, "tensors")))
        if not tensors:
            for k, val in common.items():
                out[k].append(val)
            for k, val in (("list_index", -1), ("code", -1), ("shape", None), ("strides", None),
                           ("offset", -1), ("nbytes", -1), ("tpos", -1)):
                out[k].append(val)
            return
        for k_list, tt in tensors:
            for k, val in common.items():
                out[k].append(val)
            code, shape, strides, offset, nbytes = self._tensor(tt)
            for k, val in (("list_index", k_list), ("code", code), ("shape", shape),
                           ("strides", strides), ("offset", offset), ("nbytes", nbytes),
                           ("tpos", tt.pos)):
                out[k].append(val)

    def _tensor(self, t: Table) -> tuple[int, tuple, tuple, int, int]:
        code = t.i8(Tensor.scalar_type)
        dt = SCALAR_TYPES.get(code)
        if dt is None:
            raise self._corrupt(t, f"scalar_type {code} is unknown",
                                t.field_pos(Tensor.scalar_type, 1) or t.pos)
        shape = t.scalars(Tensor.sizes, "q", "sizes")
        if any(s < 0 for s in shape):
            raise self._corrupt(t, f"negative size in {list(shape)}")
        numel = math.prod(shape)
        if numel >= MAX_TENSOR_BYTES // 16:
            raise self._corrupt(t, f"sizes {list(shape)} make {numel} elements: too many")
        strides = t.scalars(Tensor.strides, "q", "strides")
        offset = t.i64(Tensor.offset)
        if offset < 0:
            raise self._corrupt(t, f"offset {offset} in the debug buffer is negative",
                                t.field_pos(Tensor.offset, 8))
        return code, tuple(shape), tuple(strides), offset, numel * dt.itemsize


_DEBUG_COLUMNS = ("run", "index", "pos", "name", "chain", "instruction", "dd_int", "dd_str",
                  "vtype", "output", "value", "list_index", "code", "shape", "strides", "offset",
                  "nbytes", "tpos")
_OBJECT_DEBUG = frozenset({"value", "shape", "strides"})


def _signed64(v: int) -> int:
    """A ``ulong`` as the int64 it was written from (``2**64 - 1`` is -1)."""
    return v - (1 << 64) if v >= 1 << 63 else v
