"""The frames of a ``.ptd`` (``segments``, ``tensors``, ``named_data``) from its
:class:`~workbench.formats.ptd.reader.PtdData`; a program with attached data files reuses
:func:`segments_raw`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._cols import align, booleans, categorical, factorized, filled, ints, objects, strings
from ...dtypes import SCALAR_TYPES
from .._layout import cover_arrays, named_data_roles, segments_frame
from .reader import PtdData

__all__ = ["named_data", "segments", "segments_raw", "tensors"]

#: ScalarType code -> torch dtype name (codes are 0..N-1).
DTYPE_NAMES = [SCALAR_TYPES[c].name for c in range(len(SCALAR_TYPES))]


def segments_raw(data: PtdData) -> dict[str, Any]:
    """Raw segment columns (see :mod:`workbench.formats._layout`)."""
    h = data.header
    c = data.cols
    nseg = len(data.seg_off)
    name = np.empty(nseg, object)
    used = filled(nseg, "")
    kind = filled(nseg, "unused")
    if len(c["key"]):
        order = np.argsort(c["segment"], kind="stable")
        segs = c["segment"][order]
        keys = c["key"][order]
        first = np.flatnonzero(np.r_[True, segs[1:] != segs[:-1]])
        counts = np.diff(np.r_[first, len(segs)])
        heads = segs[first]
        kind[heads] = "named_data"
        single = counts == 1
        name[heads[single]] = keys[first[single]]
        used[heads[single]] = keys[first[single]]
        for si, f, k in zip(heads[~single].tolist(), first[~single].tolist(),
                            counts[~single].tolist()):
            group = keys[f:f + k].tolist()
            name[si] = f"{group[0]} (+{k - 1} more)"
            used[si] = "; ".join(group)
    for i in np.flatnonzero(np.equal(name, None)).tolist():
        name[i] = f"segment {i}"
    head = [(0, 8, "flatbuffer root", "header", -1, "root offset + FT01"),
            (8, h.length, "FlatTensor header", "header", -1, "FH01"),
            (8 + h.flatbuffer_offset, h.flatbuffer_size - 8, "FlatTensor", "flatbuffer", -1,
             "")]
    ho, hs, hn, hk, hi, hu = zip(*head)
    return cover_arrays(
        data.path, 0, data.size,
        np.concatenate([np.array(ho, np.int64), data.seg_off]),
        np.concatenate([np.array(hs, np.int64), data.seg_size]),
        np.concatenate([objects(hn), name]), np.concatenate([objects(hk), kind]),
        np.concatenate([np.array(hi, np.int64), np.arange(nseg, dtype=np.int64)]),
        np.concatenate([objects(hu), used]))

def segments(data: PtdData) -> dict[str, Any]:
    """The segments frame of a .ptd."""
    return segments_frame(segments_raw(data))

def tensors(data: PtdData) -> dict[str, Any]:
    """The tensors frame of a .ptd: one row per named-data entry."""
    c = data.cols
    n = len(c["key"])
    off = c["offset"]
    return {
        "name": strings(c["key"]), "dtype": categorical(c["code"], DTYPE_NAMES),
        "shape": c["shape"], "nbytes": c["nbytes"],
        "storage": categorical(np.zeros(n, np.int64), ["named_data"]),
        "file": strings(filled(n, data.path)), "offset": ints(off),
        "align": align(off), "dim_order": c["dim_order"], "segment": ints(c["segment"]),
        "has_layout": booleans(c["has_layout"]),
    }

def named_data(data: PtdData) -> dict[str, Any]:
    """The named_data frame of a .ptd."""
    c = data.cols
    n = len(c["key"])
    off = c["offset"]
    role = named_data_roles(c["key"])
    role[c["has_layout"]] = "tensor"
    return {
        "key": strings(c["key"]), "segment": c["segment"],
        "file": strings(filled(n, data.path)), "offset": off,
        "size": c["size"], "align": align(off), "has_layout": booleans(c["has_layout"]),
        "role": factorized(role),
    }
