"""What the raw ``XNNGraph`` columns mean: storage, scales, checks (private).

Shared by the fast and the scalar reader, vectorised over all values; every check names the
table of the first offending value.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np

from ...._cols import filled, objects
from ....errors import CorruptError, OutOfBoundsError
from .._base import Blob
from .._columns import MISSING
from . import schema as S
from ._graph import RawGraph

#: ``storage`` values of delegate tensors, by code.
STORAGES = ("runtime", "blob", "inline", "named_data", "external")
RUNTIME, BLOB, INLINE, NAMED, EXTERNAL = range(len(STORAGES))
ROLES = ("constant", "input", "output", "internal")
_NAMES = objects([d.name for d in S.DATATYPES])
_DTYPES = objects([d.dtype for d in S.DATATYPES])
_BITS = np.array([d.bits for d in S.DATATYPES], np.int64)
_QUANTS = objects(list(S.QUANT_TYPES))
_STORAGE_NAMES = objects(list(STORAGES))
_ROLE_NAMES = objects(list(ROLES))
_OPS = objects([t.name for t in S.NODE_TYPES])
_MAX_SIZE = 1 << 62


class Constants:
    """The graph's constant table resolved: per entry its storage code, file, absolute
    offset (or MISSING), size, key and whether a named key was not found (int8 -1/0/1)."""

    def __init__(self, n: int) -> None:
        self.storage = np.zeros(n, np.int64)
        self.file = filled(n, None)
        self.offset = np.full(n, MISSING, np.int64)
        self.size = np.zeros(n, np.int64)
        self.key = filled(n, None)
        self.missing = np.full(n, -1, np.int8)


def constants(blob: Blob, raw: RawGraph, cd_start: int, cd_size: int) -> Constants:
    """Check and resolve ``constant_data`` (or, for XN00, ``constant_buffer``) entries."""
    c = raw.cols
    if len(c["c_off"]):
        return _constant_data(blob, c, cd_start, cd_size)
    nb = len(c["b_start"])
    out = Constants(nb)
    out.storage[:] = INLINE
    out.file[:] = blob.path
    out.offset = np.where(c["b_count"] > 0, c["b_start"] + blob.shift, MISSING)
    out.size = c["b_count"].astype(np.int64)
    out.missing[:] = 0
    return out


def _constant_data(blob: Blob, c: dict[str, Any], cd_start: int, cd_size: int) -> Constants:
    off = c["c_off"]
    size = c["c_size"]
    keys = c["c_key"]
    n = len(off)
    key_list = keys.tolist()
    # 1: a non-empty key, 0: an empty key field, -1: no key field
    key_state = np.array([-1 if k is None else 1 if k else 0 for k in key_list], np.int8)
    has_key = key_state == 1
    named = off == np.uint64(S.NAMED_OFFSET)
    huge = size >= np.uint64(_MAX_SIZE)
    bad = np.flatnonzero(huge | (has_key & ~named) | (~has_key & named & (size > 0)))
    if len(bad):
        k = int(bad[0])
        what = f"XNNGraph.constant_data[{k}]"
        if huge[k]:
            raise CorruptError(f"size {int(size[k])} is larger than any blob", file=blob.path,
                               structure=what, offset=int(c["c_pos"][k]))
        if has_key[k]:
            raise CorruptError(f"named_key {keys[k]!r} is set but offset is {int(off[k])}, not "
                               "2**64-1 (they are mutually exclusive)", file=blob.path,
                               structure=what, offset=int(c["c_pos"][k]))
        raise CorruptError("offset is 2**64-1 (named data) but named_key is empty",
                           file=blob.path, structure=what, offset=int(c["c_pos"][k]))
    inblob = ~named
    empty = np.flatnonzero(inblob & (key_state == 0))
    if len(empty):
        k = int(empty[0])
        blob.note("warning", f"XNNGraph.constant_data[{k}]", int(c["c_pos"][k]),
                  f"{len(empty)} entries have an empty named_key field next to an offset: "
                  "ExecuTorch's runtime takes any present named_key as a named-data lookup "
                  "(of the key \"\") and fails to load them")
    off_i = np.where(inblob, off, 0).astype(np.uint64)
    end = off_i + np.where(inblob, size, 0).astype(np.uint64)
    over = np.flatnonzero(inblob & ((off_i >= np.uint64(_MAX_SIZE)) | (end > np.uint64(cd_size))))
    if len(over):
        k = int(over[0])
        raise OutOfBoundsError(f"[0x{int(off[k]):x}, +0x{int(size[k]):x}) runs past the "
                               f"constant data (size 0x{cd_size:x})", file=blob.path,
                               structure=f"XNNGraph.constant_data[{k}]",
                               offset=int(c["c_pos"][k]))
    out = Constants(n)
    out.size = size.astype(np.int64)
    out.storage[:] = BLOB
    out.file[inblob] = blob.path
    out.offset[inblob] = off_i[inblob].astype(np.int64) + cd_start + blob.shift
    out.missing[inblob] = 0
    out.key = np.where(has_key, keys, None)
    rows = np.flatnonzero(named)
    out.storage[rows] = NAMED
    if blob.named is not None and len(rows):
        get = blob.named.get
        hits = [get(key_list[k]) for k in rows.tolist()]
        found = np.array([h is not None for h in hits], bool)
        out.missing[rows] = np.where(found, 0, 1)
        fr = rows[found]
        if len(fr):
            hit = [h for h in hits if h is not None]
            files = objects([str(h[0]) for h in hit])
            out.file[fr] = files
            out.offset[fr] = np.array([int(h[1]) for h in hit], np.int64)
            out.storage[fr] = np.where(files == blob.path, NAMED, EXTERNAL)
            have = np.array([int(h[2]) for h in hit], np.int64)
            short = np.flatnonzero(have < out.size[fr])
            if len(short):
                k = int(fr[short[0]])
                blob.note("error", f"XNNGraph.constant_data[{k}]", int(c["c_pos"][k]),
                          f"{len(short)} named-data entries are shorter than the graph says, "
                          f"e.g. {key_list[k]!r}: {int(have[short[0]])} bytes, the graph "
                          f"expects {int(size[k])}")
    unresolved = np.flatnonzero(out.missing == 1)
    if len(unresolved):
        k = int(unresolved[0])
        blob.note("warning", f"XNNGraph.constant_data[{k}]", int(c["c_pos"][k]),
                  f"{len(unresolved)} named key(s) not found in the program's named data or "
                  f"the attached data files, e.g. {keys[k]!r}")
    return out


def _nbytes(bits: np.ndarray, numel: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Stored bytes: 4-bit rows hold ceil(last / 2) bytes (XNNPACK pads odd rows)."""
    nb = numel * (bits // 8)  # numel < 2**60, at most 4 bytes each: no overflow
    four = bits == 4
    if four.any():
        rows = np.where(last > 0, numel // np.maximum(last, 1), 0)
        per_row = (np.maximum(last, 0) + 1) // 2
        nb = np.where(four, np.where(last < 0, 1, rows * per_row), nb)
    return nb


def values(blob: Blob, raw: RawGraph, const: Constants, n_entries: int) -> dict[str, Any]:
    """The ``delegate_tensors`` columns of one graph (see ``delegates._columns``)."""
    c = raw.cols
    n = len(c["vpos"])
    dt = c["datatype"]
    bad = np.flatnonzero((dt < 0) | (dt >= len(S.DATATYPES)))
    if len(bad):
        k = int(bad[0])
        raise CorruptError(f"datatype {int(dt[k])} is unknown (known: 0..{len(S.DATATYPES) - 1})",
                           file=blob.path, structure=f"XNNGraph.xvalues[{k}].datatype",
                           offset=int(c["tpos"][k]))
    cbi = c["cbi"]
    bad = np.flatnonzero(cbi >= n_entries)
    if len(bad):
        k = int(bad[0])
        raise OutOfBoundsError(f"constant_buffer_idx {int(cbi[k])} is out of range "
                               f"({n_entries} constant entries)", file=blob.path,
                               structure=f"XNNGraph.xvalues[{k}].constant_buffer_idx",
                               offset=int(c["tpos"][k]))
    bits = _BITS[dt]
    numel = c["numel"]
    nbytes = _nbytes(bits, numel, c["last"])
    is_const = cbi > 0
    ci = np.where(is_const, cbi, 0)
    storage = np.where(is_const, const.storage[ci] if n_entries else 0, RUNTIME)
    file = np.where(is_const, const.file[ci], None) if n_entries else filled(n, None)
    offset = np.where(is_const, const.offset[ci], MISSING) if n_entries else np.full(n, MISSING)
    data_size = np.where(is_const, const.size[ci], MISSING) if n_entries else np.full(n, MISSING)
    key = np.where(is_const, const.key[ci], None) if n_entries else filled(n, None)
    missing = np.where(is_const, const.missing[ci], -1).astype(np.int8) if n_entries else \
        np.full(n, -1, np.int8)
    short = np.flatnonzero(is_const & (data_size < nbytes))
    if len(short):
        k = int(short[0])
        blob.note("error", f"XNNGraph.xvalues[{k}]", int(c["tpos"][k]),
                  f"{len(short)} constant(s) hold fewer bytes than their shape needs, e.g. value "
                  f"{int(c['id_out'][k])}: {int(data_size[k])} < {int(nbytes[k])}")
    flags = c["flags"]
    role = np.where(flags & S.FLAG_EXTERNAL_INPUT, 1,
                    np.where(flags & S.FLAG_EXTERNAL_OUTPUT, 2, np.where(is_const, 0, 3)))
    prefix = f"{blob.method}/delegate{blob.index}/"
    ids = c["id_out"]
    cols: dict[str, Any] = {
        "name": objects([prefix + str(i) for i in ids.tolist()]),
        "value": ids, "dtype": _DTYPES[dt], "backend_dtype": _NAMES[dt],
        "shape": c["shape"], "numel": numel, "nbytes": nbytes,
        "role": _ROLE_NAMES[role], "quant": _QUANTS[c["qtype"]],
        "group_size": np.where(c["qtype"] == S.PER_CHANNEL_GROUP, c["group_size"], MISSING),
        "channel_dim": np.where(c["channel_dim"] >= 0, c["channel_dim"], MISSING),
        "scale": c["pt_scale"],
        "zero_point": np.where(c["qtype"] == S.PER_TENSOR, c["pt_zero"], MISSING),
        "storage": _STORAGE_NAMES[storage], "named_key": key, "file": file,
        "offset": offset, "data_size": data_size,
        "constant_index": np.where(is_const, cbi, MISSING),
        "external_id": np.where(c["external_id"] == S.INVALID_ID, MISSING, c["external_id"]),
        "flags": flags, "missing": missing,
    }
    cols.update(_scales(blob, raw, const, n_entries))
    return cols


def _scales(blob: Blob, raw: RawGraph, const: Constants, n_entries: int) -> dict[str, Any]:
    c = raw.cols
    n = len(c["vpos"])
    qt = c["qtype"]
    chan = (qt == S.PER_CHANNEL) | (qt == S.PER_CHANNEL_GROUP)
    inline = chan & (c["s_count"] > 0)
    buffered = chan & ~inline & (c["sbi"] > 0)
    sbi = c["sbi"]
    bad = np.flatnonzero(buffered & (sbi >= n_entries))
    if len(bad):
        k = int(bad[0])
        raise OutOfBoundsError(f"scale_buffer_idx {int(sbi[k])} is out of range "
                               f"({n_entries} constant entries)", file=blob.path,
                               structure=f"XNNGraph.xvalues[{k}].quant_params.scale_buffer_idx",
                               offset=int(c["qpos"][k]))
    none = np.flatnonzero(chan & ~inline & ~buffered)
    if len(none):
        k = int(none[0])
        blob.note("warning", f"XNNGraph.xvalues[{k}].quant_params", int(c["qpos"][k]),
                  f"{len(none)} per-channel quantized value(s) have neither inline scales nor "
                  "a scale buffer")
    si = np.where(buffered, sbi, 0)
    group = qt == S.PER_CHANNEL_GROUP
    # XNNPACK keeps groupwise scales as bfloat16 in their buffer, per-channel ones as float32
    scale_bits = np.where(inline, c["s_bits"], np.where(group, 16, 32))
    s_dtype = np.where(chan, np.where(scale_bits == 16, "bfloat16", "float32"), None)
    s_storage = np.where(inline, "inline", None).astype(object)
    s_file = np.where(inline, blob.path, None).astype(object)
    s_off = np.where(inline, c["s_start"] + blob.shift, MISSING)
    s_nb = np.where(inline, c["s_count"] * scale_bits // 8, MISSING)
    s_key = filled(n, None)
    if buffered.any() and n_entries:
        s_storage = np.where(buffered, _STORAGE_NAMES[const.storage[si]], s_storage)
        s_file = np.where(buffered, const.file[si], s_file)
        s_off = np.where(buffered, const.offset[si], s_off)
        s_nb = np.where(buffered, const.size[si], s_nb)
        s_key = np.where(buffered, const.key[si], s_key)
    num = np.where(chan, np.where((c["num_scales"] <= 0) & inline, c["s_count"],
                                  c["num_scales"]), MISSING)
    return {"num_scales": num, "scale_dtype": objects(s_dtype), "scale_storage": s_storage,
            "scale_key": objects(s_key), "scale_file": objects(s_file), "scale_offset": s_off,
            "scale_nbytes": s_nb}


def nodes(blob: Blob, raw: RawGraph) -> dict[str, Any]:
    """The ``delegate_nodes`` columns of one graph."""
    c = raw.cols
    n = len(c["npos"])
    known = np.unique(c["id_out"])
    ins = c["inputs"]
    outs = c["outputs"]
    if n:
        ids = np.fromiter(chain(chain.from_iterable(ins.tolist()),
                                chain.from_iterable(outs.tolist())), np.int64)
        unknown = np.setdiff1d(ids, known)
        if len(unknown):
            blob.note("warning", "XNNGraph.xnodes", int(c["npos"][0]),
                      f"nodes refer to {len(unknown)} value id(s) that no xvalue defines, e.g. "
                      f"{int(unknown[0])}")
    return {"node": np.arange(n, dtype=np.int64), "op": _OPS[c["ntype"]], "inputs": ins,
            "outputs": outs, "flags": c["nflags"], "debug_handle": c["debug"],
            "output_min": c["out_min"], "output_max": c["out_max"]}


def constant_parts(blob: Blob, raw: RawGraph, const: Constants, cd_start: int,
                   cd_size: int) -> list[tuple[int, int, str, str]]:
    """Sub-segment parts (window coordinates) of the constant data: one per distinct
    in-blob constant range, named after its entry and the values that use it."""
    c = raw.cols
    if not cd_size:
        return []
    users: dict[int, list[int]] = {}
    for v, k in zip(c["id_out"].tolist(), c["cbi"].tolist()):
        if k > 0:
            users.setdefault(k, []).append(v)
    for k in (c["sbi"][(c["sbi"] > 0) & (c["s_count"] == 0)]).tolist():
        users.setdefault(k, [])
    ranges: dict[tuple[int, int], list[int]] = {}
    if len(c["c_off"]):
        for k in sorted(users):
            if k < len(const.storage) and const.storage[k] == BLOB and const.size[k] > 0:
                pos = int(const.offset[k]) - blob.shift
                ranges.setdefault((pos, int(const.size[k])), []).append(k)
    parts = []
    at = cd_start
    for (pos, size), ks in sorted(ranges.items()):
        if pos < at:  # partial overlap: keep the region whole
            blob.note("warning", "XNNGraph.constant_data", pos,
                      f"constant_data entries {ks} overlap other entries; the constant data "
                      "is shown as one range")
            return [(cd_start, cd_size, "constant data", "constant")]
        vals = [v for k in ks for v in users[k]]
        name = f"constant_data[{ks[0]}]" + (f" (+{len(ks) - 1} entries)" if len(ks) > 1 else "")
        if vals:
            name += f" value {vals[0]}" + (f" (+{len(vals) - 1})" if len(vals) > 1 else "")
        else:
            name += " scales"
        parts.append((pos, size, name, "constant"))
        at = pos + size
    if not parts:
        return [(cd_start, cd_size, "constant data (unreferenced)", "constant")]
    return parts
