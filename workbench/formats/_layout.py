"""Byte-range bookkeeping shared by the format readers (private)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._cols import filled, objects
from ..errors import CorruptError

#: Raw segment columns: offset/size/index are int64 arrays (index -1: none), the others
#: object arrays. :func:`segments_frame` turns them into the frame's pandas arrays.
RAW_SEGMENT_COLUMNS = ("file", "name", "kind", "offset", "size", "index", "used_by")


def cover(rows: list[tuple], file: str, start: int, end: int,
          gap: tuple[str, str] = ("padding", "padding"),
          tail: tuple[str, str] = ("trailing data", "trailing")) -> dict[str, Any]:
    """Sort byte ranges and fill every gap with an explicit ``padding`` row.

    ``rows`` holds ``(offset, size, name, kind, index, used_by)``; the result covers
    ``[start, end)`` exactly (zero-size ranges are kept in place). ``gap`` is the
    ``(name, kind)`` given to the rows that fill gaps, ``tail`` to bytes after the last row.
    Returns the columns of the ``segments`` frame (see :func:`cover_arrays`).
    """
    if not rows:
        z = np.zeros(0, np.int64)
        return cover_arrays(file, start, end, z, z, objects([]), objects([]), z, objects([]),
                            gap, tail)
    off, size, name, kind, index, used = zip(*rows)
    return cover_arrays(file, start, end, np.array(off, np.int64), np.array(size, np.int64),
                        objects(name), objects(kind),
                        np.array([-1 if i is None else i for i in index], np.int64),
                        objects(used), gap, tail)


def cover_rows(rows: list[tuple], file: str, start: int, end: int, offset: np.ndarray,
               size: np.ndarray, name: np.ndarray, kind: np.ndarray, index: np.ndarray,
               used_by: np.ndarray) -> dict[str, Any]:
    """:func:`cover` over ``rows`` plus more ranges given as columns (``index`` >= 0 each).

    Ranges that start at the same offset with the same size keep the order of their
    ``index`` (rows without an index first, then rows in the order given): the order
    :func:`cover` gives when every range is a row, listed by index.

    Example:
        >>> c = cover_rows([(0, 4, "head", "header", None, "")], "f", 0, 16,
        ...                np.array([8]), np.array([8]), objects(["blob"]), objects(["x"]),
        ...                np.array([0]), objects([""]))
        >>> c["name"].tolist()
        ['head', 'padding', 'blob']
    """
    if rows:
        r_off, r_size, r_name, r_kind, r_index, r_used = zip(*rows)
        offset = np.concatenate([np.array(r_off, np.int64), offset])
        size = np.concatenate([np.array(r_size, np.int64), size])
        name = np.concatenate([objects(r_name), name])
        kind = np.concatenate([objects(r_kind), kind])
        index = np.concatenate([np.array([-1 if i is None else i for i in r_index], np.int64),
                                index])
        used_by = np.concatenate([objects(r_used), used_by])
    return cover_arrays(file, start, end, offset, size, name, kind, index, used_by,
                        seq=index)


def cover_arrays(file: str, start: int, end: int, offset: np.ndarray, size: np.ndarray,
                 name: np.ndarray, kind: np.ndarray, index: np.ndarray, used_by: np.ndarray,
                 gap: tuple[str, str] = ("padding", "padding"),
                 tail: tuple[str, str] = ("trailing data", "trailing"),
                 seq: np.ndarray | None = None) -> dict[str, Any]:
    """:func:`cover` over columns (``index`` -1: none), vectorised; returns raw columns
    (:data:`RAW_SEGMENT_COLUMNS`) sorted by offset, gaps filled, covering ``[start, end)``.
    Ranges with the same offset and size keep their order (or the order of ``seq``).

    Raises :class:`CorruptError` naming the first range that overlaps the one before it.
    """
    order = np.lexsort((size, offset)) if seq is None else np.lexsort((seq, size, offset))
    off = offset[order]
    sz = size[order]
    ends = off + sz
    n = len(off)
    # where the previous rows reach: start, then the running maximum of their ends
    reach = np.empty(n, np.int64)
    if n:
        reach[0] = start
        np.maximum.accumulate(ends[:-1], out=reach[1:])
        np.maximum(reach, start, out=reach)
    bad = np.flatnonzero(off < reach)
    if len(bad):
        k = int(bad[0])
        nm = name[order[k]]
        raise CorruptError(f"{nm} [0x{int(off[k]):x}, 0x{int(ends[k]):x}) overlaps the previous "
                           f"range (ends at 0x{int(reach[k]):x})", file=file, structure=str(nm),
                           offset=int(off[k]))
    has_gap = off > reach
    last = max(int(ends.max()), start) if n else start
    has_tail = last < end
    total = n + int(has_gap.sum()) + int(has_tail)
    pos = np.arange(n) + np.cumsum(has_gap)  # row k lands after the gaps before it
    out_off = np.empty(total, np.int64)
    out_size = np.empty(total, np.int64)
    out_index = np.full(total, -1, np.int64)
    out_name = np.empty(total, object)
    out_kind = np.empty(total, object)
    out_used = filled(total, "")
    out_off[pos] = off
    out_size[pos] = sz
    out_index[pos] = index[order]
    out_name[pos] = name[order]
    out_kind[pos] = kind[order]
    out_used[pos] = used_by[order]
    gpos = pos[has_gap] - 1
    out_off[gpos] = reach[has_gap]
    out_size[gpos] = off[has_gap] - reach[has_gap]
    out_name[gpos] = gap[0]
    out_kind[gpos] = gap[1]
    if has_tail:
        out_off[-1] = last
        out_size[-1] = end - last
        out_name[-1] = tail[0]
        out_kind[-1] = tail[1]
    out_file = filled(total, file)
    return {"file": out_file, "name": out_name, "kind": out_kind, "offset": out_off,
            "size": out_size, "index": out_index, "used_by": out_used}


def concat_sorted(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Concatenate raw segment columns of several files (each sorted by offset), in file
    name order."""
    if len(parts) == 1:
        return parts[0]
    parts = sorted(parts, key=lambda p: p["file"][0] if len(p["file"]) else "")
    return {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}


def segments_frame(raw: dict[str, Any]) -> dict[str, Any]:
    """The ``segments`` frame's columns (pandas arrays) from raw columns."""
    from .._cols import align, factorized, ints, strings

    return {
        "file": strings(raw["file"]), "name": strings(raw["name"]),
        "kind": factorized(raw["kind"]),
        "offset": raw["offset"], "size": raw["size"], "align": align(raw["offset"]),
        "index": ints(raw["index"], raw["index"] < 0), "used_by": strings(raw["used_by"]),
    }


#: Key endings that give a named-data entry a role other than ``blob``.
_ROLE_SUFFIXES = ("_so_blob", "_weights_blob")


def named_data_roles(keys: np.ndarray) -> np.ndarray:
    """:func:`named_data_role` of every key of an object array, as an object array.

    Example:
        >>> named_data_roles(objects(["a_so_blob", "b"])).tolist()
        ['so_blob', 'blob']
    """
    out = filled(len(keys), "blob")
    listed = keys.tolist()
    if "_blob\0" not in "\0".join(listed) + "\0":  # (every key is followed by a NUL here)
        return out
    ends = _ROLE_SUFFIXES
    for k in [k for k, key in enumerate(listed) if key.endswith(ends)]:
        out[k] = named_data_role(keys[k])
    return out


def named_data_role(key: str) -> str:
    """Role of a named-data key by convention: ``so_blob``/``weights_blob`` (the ExecuTorch
    CUDA/AOTI delegate's shared object and weights), else ``blob``.

    Example:
        >>> named_data_role("3f2a_so_blob"), named_data_role("ab12")
        ('so_blob', 'blob')
    """
    if key.endswith("_so_blob"):
        return "so_blob"
    if key.endswith("_weights_blob"):
        return "weights_blob"
    return "blob"
