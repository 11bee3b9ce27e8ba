"""Frame builders of an ETDump: ``segments``, ``runs``, ``events``, ``allocations``,
``debug_values`` and ``tensors`` (private; columns are declared in :mod:`workbench.frames`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._cols import align, booleans, categorical, factorized, filled, ints, objects, strings
from ...dtypes import SCALAR_TYPES
from .._layout import cover_arrays, segments_frame
from .reader import Header, Records, Strings
from .schema import (
    DELEGATE_CALL,
    EVENT_KINDS,
    FRAMEWORK_CHAIN,
    KERNEL_PREFIX,
    NOT_SET,
    OPERATOR_CALL,
    VALUE_TYPES,
)

_U32_MAX = (1 << 32) - 1
_I64_MAX = (1 << 63) - 1
_DTYPE_NAMES = [SCALAR_TYPES[c].name if c in SCALAR_TYPES else f"code{c}"
                for c in range(max(SCALAR_TYPES) + 1)]
_KIND = {k: i for i, k in enumerate(EVENT_KINDS)}


def durations(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``end - start`` per event as (int64 values, missing mask), by the Inspector's rule.

    A start after the end is a 32-bit timer that wrapped when both fit in 32 bits:
    ``(2**32 - 1 - start) + end``; otherwise (or beyond int64) the duration is missing.

    Example:
        >>> d, miss = durations(np.array([5, 4294967290], np.uint64), np.array([9, 5], np.uint64))
        >>> d.tolist(), miss.tolist()
        ([4, 10], [False, False])
    """
    start = np.asarray(start, np.uint64)
    end = np.asarray(end, np.uint64)
    out = np.zeros(len(start), np.uint64)
    forward = end >= start
    out[forward] = end[forward] - start[forward]
    wrap = ~forward & (start <= _U32_MAX) & (end <= _U32_MAX)
    out[wrap] = (np.uint64(_U32_MAX) - start[wrap]) + end[wrap]
    missing = ~(forward | wrap) | (out > _I64_MAX)
    return np.where(missing, 0, out).astype(np.int64), missing


def delegate_ids(dd_int: np.ndarray, dd_str: Strings) -> np.ndarray:
    """The delegate debug identifier as the Inspector names it: the integer id when set,
    else the string id when not empty, else ``None`` (object array of str)."""
    ids = dd_str.objects()
    empty = [k for k, v in enumerate(dd_str.values) if v == ""]
    if empty:
        ids[np.isin(dd_str.codes, empty)] = None
    has_int = np.flatnonzero(dd_int != NOT_SET)
    if len(has_int):
        ids[has_int] = objects([str(v) for v in dd_int[has_int].tolist()])
    return ids


def _names(name: Strings, ids: np.ndarray) -> np.ndarray:
    """Event names as the Inspector gives them: the delegate id for delegated events."""
    out = name.objects()
    delegated = np.flatnonzero(np.not_equal(ids, None))
    out[delegated] = ids[delegated]
    return out


class TraceColumns:
    """The frames of one ETDump (and its debug buffer, when attached).

    Args:
        path: the ``.etdp`` file; ``size`` its size; ``header`` where its flatbuffer lies.
        records: what the reader found.
        debug_path, debug_size: the attached debug buffer (``None``: none attached).
    """

    def __init__(self, path: str, size: int, header: Header, records: Records,
                 debug_path: str | None, debug_size: int) -> None:
        self.path = path
        self.size = size
        self.header = header
        self.rec = records
        self.debug_path = debug_path
        self.debug_size = debug_size
        runs = records.runs
        n = len(runs["pos"])
        self.block_codes, self.block_names = runs["name"]
        # k-th run with the same block name
        iteration = np.zeros(n, np.int64)
        if n:
            order = np.argsort(self.block_codes, kind="stable")
            sorted_codes = self.block_codes[order]
            first = np.r_[0, np.flatnonzero(sorted_codes[1:] != sorted_codes[:-1]) + 1]
            group_start = np.repeat(first, np.diff(np.r_[first, n]))
            iteration[order] = np.arange(n) - group_start
        self.iteration = iteration

    # -- shared helpers -----------------------------------------------------------------------
    def _run_cols(self, run: np.ndarray) -> dict[str, Any]:
        """``run``, ``block`` and ``iteration`` columns for records of runs ``run``."""
        return {"run": run, "block": categorical(self.block_codes[run], self.block_names),
                "iteration": self.iteration[run]}

    def tensor_names(self) -> np.ndarray:
        """``"<run>/<event index>"`` (``/<k>`` for the k-th tensor of a list) per debug row
        that holds a tensor; ``None`` for the others."""
        d = self.rec.debug
        out = filled(len(d["run"]), None)
        rows = np.flatnonzero(d["code"] >= 0)
        out[rows] = objects([f"{r}/{i}" if k < 0 else f"{r}/{i}/{k}" for r, i, k in zip(
            d["run"][rows].tolist(), d["index"][rows].tolist(), d["list_index"][rows].tolist())])
        return out

    # -- frames -----------------------------------------------------------------------------------
    def segments_columns(self) -> dict[str, Any]:
        h = self.header
        if h.size_prefixed:
            head = [(0, 4, "size prefix", "header", "flatbuffer length"),
                    (4, 8, "flatbuffer root", "header", "root offset + ED00"),
                    (12, h.end - 12, "ETDump", "flatbuffer", "")]
        else:
            head = [(0, 8, "flatbuffer root", "header", "root offset + ED00"),
                    (8, h.end - 8, "ETDump", "flatbuffer", "")]
        off, size, name, kind, used = zip(*head)
        parts = [cover_arrays(self.path, 0, self.size, np.array(off, np.int64),
                              np.array(size, np.int64), objects(name), objects(kind),
                              np.full(len(head), -1, np.int64), objects(used))]
        if self.debug_path is not None:
            parts.append(self._debug_segments())
            parts.sort(key=lambda p: p["file"][0] if len(p["file"]) else "")
        raw = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
        return segments_frame(raw)

    def _debug_segments(self) -> dict[str, Any]:
        """The debug buffer: the ranges logged values occupy (overlapping ones merged),
        padding between them, the unfilled rest as ``trailing``."""
        d = self.rec.debug
        rows = np.flatnonzero((d["code"] >= 0) & (d["nbytes"] > 0)
                              & (d["offset"] + d["nbytes"] <= self.debug_size))
        names = self.tensor_names()[rows]
        off = d["offset"][rows]
        end = off + d["nbytes"][rows]
        order = np.argsort(off, kind="stable")
        off, end, names = off[order], end[order], names[order]
        m = len(off)
        if m:
            reach = np.maximum.accumulate(end)
            starts = np.r_[True, off[1:] >= reach[:-1]]
            group = np.cumsum(starts) - 1
            first = np.flatnonzero(starts)
            g_off = off[first]
            g_end = np.maximum.reduceat(end, first)
            g_count = np.bincount(group)
            g_name = names[first].copy()
            for g in np.flatnonzero(g_count > 1).tolist():
                g_name[g] = f"{g_name[g]} (+{int(g_count[g]) - 1} more)"
        else:
            g_off = g_end = np.zeros(0, np.int64)
            g_name = objects([])
        k = len(g_off)
        return cover_arrays(self.debug_path, 0, self.debug_size, g_off, g_end - g_off, g_name,
                            filled(k, "debug_value"), np.full(k, -1, np.int64),
                            filled(k, "debug_values"),
                            tail=("unused debug buffer", "trailing"))

    def runs_columns(self) -> dict[str, Any]:
        r = self.rec.runs
        n = len(r["pos"])
        p = self.rec.profile
        big = np.uint64(np.iinfo(np.uint64).max)
        start = np.full(n, big, np.uint64)
        end = np.zeros(n, np.uint64)
        if len(p["run"]):
            np.minimum.at(start, p["run"], p["start"])
            np.maximum.at(end, p["run"], p["end"])
        none = r["profile"] == 0
        dur, bad = durations(np.where(none, 0, start).astype(np.uint64), end)
        start_i = np.where(none | (start > _I64_MAX), 0, start).astype(np.int64)
        end_i = np.where(none | (end > _I64_MAX), 0, end).astype(np.int64)
        allocs = [("; ".join("(unnamed)" if x is None else x for x in a) if a else "")
                  for a in r["allocators"].tolist()] if n else []
        bundled = r["bundled_input_index"]
        return {
            "run": np.arange(n, dtype=np.int64),
            "block": categorical(self.block_codes, self.block_names),
            "iteration": self.iteration,
            "bundled_input_index": ints(bundled, bundled == NOT_SET),
            "events": r["events"], "profile_events": r["profile"],
            "allocation_events": r["allocation"], "debug_events": r["debug"],
            "unknown_events": r["unknown"],
            "allocators": strings(objects(allocs)),
            "start": ints(start_i, none | (start > _I64_MAX)),
            "end": ints(end_i, none | (end > _I64_MAX)),
            "duration": ints(dur, none | bad),
            "table_offset": r["pos"],
        }

    def events_columns(self) -> dict[str, Any]:
        p = self.rec.profile
        ids = delegate_ids(p["dd_int"], p["dd_str"])
        dur, bad = durations(p["start"], p["end"])
        codes, uniques = p["name"]
        # the kind of each distinct name, then per row (few names, many rows)
        by_name = np.array([_KIND[_name_kind(u)] for u in uniques] + [_KIND["other"]], np.int64)
        kind = by_name[codes]  # code -1 (no name) picks the trailing "other"
        kind[p["chain"] == FRAMEWORK_CHAIN] = _KIND["framework"]
        delegated = np.not_equal(ids, None)
        kind[delegated] = _KIND["delegate_op"]
        event_name = categorical(codes, uniques)
        meta_missing = p["meta_size"] < 0
        return {
            **self._run_cols(p["run"]), "index": p["index"],
            "name": factorized(_names(p["name"], ids)) if delegated.any() else event_name,
            "event_name": event_name,
            "kind": categorical(kind, EVENT_KINDS),
            "chain": p["chain"], "instruction": p["instruction"],
            "delegate_debug_id": factorized(ids),
            "delegate_debug_id_int": ints(p["dd_int"], p["dd_int"] == NOT_SET),
            "delegate_debug_id_str": strings(p["dd_str"].objects()),
            "start": p["start"], "end": p["end"], "duration": ints(dur, bad),
            "metadata_offset": ints(p["meta_off"], meta_missing),
            "metadata_size": ints(p["meta_size"], meta_missing),
            "table_offset": p["pos"],
        }

    def allocations_columns(self) -> dict[str, Any]:
        a = self.rec.alloc
        n = len(a["run"])
        names = filled(n, None)
        allocators = self.rec.runs["allocators"]
        for k, (r, i) in enumerate(zip(a["run"].tolist(), a["allocator_id"].tolist())):
            known = allocators[r]
            if 0 <= i < len(known):
                names[k] = known[i]
        return {**self._run_cols(a["run"]), "index": a["index"],
                "allocator_id": a["allocator_id"], "allocator": strings(names),
                "size": a["size"], "table_offset": a["pos"]}

    def debug_values_columns(self) -> dict[str, Any]:
        d = self.rec.debug
        n = len(d["run"])
        ids = delegate_ids(d["dd_int"], d["dd_str"])
        has_t = d["code"] >= 0
        attached = self.debug_path is not None
        return {
            **self._run_cols(d["run"]), "index": d["index"],
            "list_index": ints(d["list_index"], d["list_index"] < 0),
            "name": factorized(_names(d["name"], ids)),
            "chain": d["chain"], "instruction": d["instruction"],
            "delegate_debug_id": factorized(ids),
            "delegate_debug_id_int": ints(d["dd_int"], d["dd_int"] == NOT_SET),
            "delegate_debug_id_str": strings(d["dd_str"].objects()),
            "type": categorical(d["vtype"], VALUE_TYPES),
            "output": booleans(d["output"] == 1, d["output"] < 0),
            "value": d["value"],
            "tensor": strings(self.tensor_names()),
            "dtype": categorical(np.where(has_t, d["code"], -1), _DTYPE_NAMES),
            "shape": d["shape"], "strides": d["strides"],
            "nbytes": ints(d["nbytes"], ~has_t),
            "file": strings(filled(n, self.debug_path) if attached else filled(n, None)),
            "offset": ints(d["offset"], ~has_t | (not attached)),
            "debug_offset": ints(d["offset"], ~has_t),
            "table_offset": d["pos"],
        }

    def tensors_columns(self) -> dict[str, Any]:
        d = self.rec.debug
        rows = np.flatnonzero(d["code"] >= 0) if self.debug_path is not None else \
            np.zeros(0, np.int64)
        n = len(rows)
        shape = d["shape"][rows]
        stored = d["strides"][rows]
        strides = filled(n, None)
        contiguous = np.ones(n, bool)
        cache: dict[tuple, tuple[Any, bool]] = {}
        for k, (s, st) in enumerate(zip(shape.tolist(), stored.tolist())):
            got = cache.get((s, st))
            if got is None:
                got = cache[(s, st)] = _strides(s, st)
            strides[k], contiguous[k] = got
        off = d["offset"][rows]
        return {
            "name": strings(self.tensor_names()[rows]),
            "dtype": categorical(d["code"][rows], _DTYPE_NAMES),
            "shape": shape, "nbytes": d["nbytes"][rows],
            "storage": categorical(np.zeros(n, np.int64), ["debug_buffer"]),
            "file": strings(filled(n, self.debug_path)), "offset": ints(off),
            "align": align(off), "strides": strides, "contiguous": booleans(contiguous),
        }


def _name_kind(name: str) -> str:
    """``events.kind`` by the event name alone (delegate ids and chain -1 come first)."""
    if name == OPERATOR_CALL:
        return "operator_call"
    if name == DELEGATE_CALL:
        return "delegate_call"
    if name.startswith(KERNEL_PREFIX):
        return "kernel"
    return "other"


def _strides(shape: tuple, stored: tuple) -> tuple[tuple | None, bool]:
    """(strides for the view, contiguous): ``None`` (row-major) when none are stored."""
    row_major = []
    acc = 1
    for dim in reversed(shape):
        row_major.append(acc)
        acc *= dim
    row_major_t = tuple(reversed(row_major))
    if not stored and shape:
        return None, True
    return stored, stored == row_major_t
