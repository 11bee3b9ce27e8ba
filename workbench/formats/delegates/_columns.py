"""The ``delegate_tensors`` / ``delegate_nodes`` columns of many blobs (private).

A parser leaves its per-blob columns as numpy arrays in :attr:`BlobInfo.tensors` /
:attr:`BlobInfo.nodes` with these conventions: integers are int64 with :data:`MISSING`
for a missing value, strings are object arrays with ``None`` for missing, ``missing`` is
int8 (-1 unknown, 0, 1). :func:`tensor_columns` / :func:`node_columns` concatenate the
blobs and turn them into the pandas arrays that :func:`workbench.frames.build` takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..._cols import align, booleans, categorical, factorized, ints, objects, strings

if TYPE_CHECKING:
    from ._base import BlobInfo

#: A missing integer in a per-blob column.
MISSING = np.iinfo(np.int64).min

#: delegate_tensors: column -> kind (cat, str, int, Int, float, obj, bool3); the delegate,
#: method and index columns are added per blob; ``align`` is derived from ``offset``.
TENSOR_KINDS: dict[str, str] = {
    "name": "str", "value": "int", "dtype": "cat", "backend_dtype": "cat", "shape": "obj",
    "numel": "int", "nbytes": "int", "role": "cat", "quant": "cat", "group_size": "Int",
    "channel_dim": "Int", "num_scales": "Int", "scale": "float", "zero_point": "Int",
    "scale_dtype": "cat", "scale_storage": "cat", "scale_key": "str", "scale_file": "str",
    "scale_offset": "Int", "scale_nbytes": "Int", "storage": "cat", "named_key": "str",
    "file": "str", "offset": "Int", "data_size": "Int", "constant_index": "Int",
    "external_id": "Int", "flags": "int", "missing": "bool3",
}
#: delegate_nodes: column -> kind.
NODE_KINDS: dict[str, str] = {
    "node": "int", "op": "cat", "inputs": "obj", "outputs": "obj", "flags": "int",
    "debug_handle": "Int", "output_min": "float", "output_max": "float",
}


class Coded(NamedTuple):
    """A per-blob ``cat`` column kept as integer ``codes`` into ``names`` (-1: missing):
    blobs that share one vocabulary become a categorical without hashing any string."""

    codes: np.ndarray
    names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.codes)

    def values(self) -> np.ndarray:
        """The column as an object array of names (``None`` for missing)."""
        lut = objects([*self.names, None])
        return lut[self.codes]


class Batch(NamedTuple):
    """Columns of several blobs read in one pass (``tensors``/``nodes``: every blob's rows,
    in blob order) and the rows of one blob in them: a parser sets it as ``_batch`` on each
    blob's record, and :func:`tensor_columns` takes the shared columns whole when the
    records are exactly those blobs, in order."""

    tensors: dict[str, Any]
    nodes: dict[str, Any]
    values: slice
    node_rows: slice


def _whole(infos: list[BlobInfo], attr: str) -> dict[str, Any] | None:
    """The shared columns of ``infos`` when they are one :class:`Batch`, complete and in
    order; ``None`` otherwise."""
    batches = [getattr(b, "_batch", None) for b in infos]
    first = batches[0] if batches else None
    if first is None:
        return None
    whole = first.tensors if attr == "tensors" else first.nodes
    at = 0
    for b in batches:
        if b is None or (b.tensors if attr == "tensors" else b.nodes) is not whole:
            return None
        rows = b.values if attr == "tensors" else b.node_rows
        if rows.start != at:
            return None
        at = rows.stop
    return whole if at == len(whole["value" if attr == "tensors" else "node"]) else None


def _cat(parts: list[Any]) -> Any:
    coded = [p for p in parts if isinstance(p, Coded)]
    if coded and len(coded) == len(parts) and all(p.names == coded[0].names for p in coded):
        return categorical(np.concatenate([p.codes for p in coded]), coded[0].names)
    return factorized(np.concatenate([p.values() if isinstance(p, Coded) else p
                                      for p in parts]))


def _per_blob(values: list[str], sizes: list[int]) -> Any:
    """A category column holding ``values[k]`` on the ``sizes[k]`` rows of blob ``k``."""
    names = tuple(dict.fromkeys(values))
    index = {v: k for k, v in enumerate(names)}
    codes = np.repeat(np.array([index[v] for v in values], np.int64), sizes)
    return categorical(codes, names)


def _convert(kind: str, values: np.ndarray) -> Any:
    if kind == "cat":
        return factorized(values)
    if kind == "str":
        return strings(values)
    if kind == "Int":
        return ints(values, values == MISSING)
    if kind == "bool3":
        return booleans(values == 1, values < 0)
    return values


def _columns(infos: Sequence[BlobInfo], attr: str, kinds: dict[str, str]) -> dict[str, Any]:
    parts = [(b, getattr(b, attr)) for b in infos if getattr(b, attr) is not None]
    sizes = [len(cols["node" if attr == "nodes" else "value"]) for _, cols in parts]
    n = sum(sizes)
    out: dict[str, Any] = {
        "delegate": _per_blob([b.backend_id for b, _ in parts], sizes),
        "method": _per_blob([b.method for b, _ in parts], sizes),
        "index": (np.repeat(np.array([b.index for b, _ in parts], np.int64), sizes) if parts
                  else np.zeros(0, np.int64)),
    }
    whole = _whole([b for b, _ in parts], attr)
    if whole is not None:  # one pass over all these blobs: its columns, not re-joined
        parts = [(parts[0][0], whole)]
    for col, kind in kinds.items():
        if parts and kind == "cat":
            out[col] = _cat([cols[col] for _, cols in parts])
            continue
        if parts:
            values = (parts[0][1][col] if len(parts) == 1 else
                      np.concatenate([cols[col] for _, cols in parts]))
        else:
            values = (objects([]) if kind in ("cat", "str", "obj") else
                      np.zeros(0, np.int8 if kind == "bool3" else
                               np.float64 if kind == "float" else np.int64))
        out[col] = _convert(kind, values)
        if col == "offset":
            raw = values if parts else np.zeros(0, np.int64)
            out["align"] = align(np.where(raw == MISSING, 0, raw), raw == MISSING)
    assert len(out["index"]) == n
    return out


def tensor_columns(infos: Sequence[BlobInfo]) -> dict[str, Any]:
    """Columns of the ``delegate_tensors`` frame for these blobs (in order).

    Example:
        >>> sorted(tensor_columns([]))[:3]
        ['align', 'backend_dtype', 'channel_dim']
    """
    return _columns(infos, "tensors", TENSOR_KINDS)


def node_columns(infos: Sequence[BlobInfo]) -> dict[str, Any]:
    """Columns of the ``delegate_nodes`` frame for these blobs (in order).

    Example:
        >>> "op" in node_columns([])
        True
    """
    return _columns(infos, "nodes", NODE_KINDS)


def rows_to_columns(rows: Sequence[dict[str, Any]], kinds: dict[str, str]) -> dict[str, np.ndarray]:
    """Per-blob columns (the conventions above) from a few row dicts; absent keys are
    missing. For small tables (parsers of backends without a vectorised path).

    Example:
        >>> rows_to_columns([{"node": 0, "op": "add"}], NODE_KINDS)["debug_handle"].tolist()
        [-9223372036854775808]
    """
    out: dict[str, np.ndarray] = {}
    for col, kind in kinds.items():
        vals = [r.get(col) for r in rows]
        if kind in ("cat", "str"):
            out[col] = objects(vals)
        elif kind == "obj":
            out[col] = objects([() if v is None else v for v in vals])
        elif kind == "float":
            out[col] = np.array([np.nan if v is None else v for v in vals], np.float64)
        elif kind == "bool3":
            out[col] = np.array([-1 if v is None else int(bool(v)) for v in vals], np.int8)
        else:
            out[col] = np.array([MISSING if v is None else v for v in vals], np.int64)
    return out
