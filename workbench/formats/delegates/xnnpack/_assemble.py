"""What the raw ``XNNGraph`` columns mean: storage, scales, checks (private).

Shared by the fast and the scalar reader, vectorised over all values. A :class:`Ctx` holds
the blobs being assembled: one blob (``exact``: every check raises the error naming the
table of the first offending row, observations become findings) or several blobs read in
one pass (anything unusual raises :class:`~workbench._vecfb.SlowPath`, and the blobs are
then read one by one, for exact errors and findings).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...._cols import filled, objects
from ...._vecfb import SlowPath
from ....errors import ArtifactError, CorruptError, OutOfBoundsError
from .._base import Blob
from .._columns import MISSING, Coded
from . import schema as S
from ._graph import RawGraph

#: ``storage`` values of delegate tensors, by code.
STORAGES = ("runtime", "blob", "inline", "named_data", "external")
RUNTIME, BLOB, INLINE, NAMED, EXTERNAL = range(len(STORAGES))
ROLES = ("constant", "input", "output", "internal")
_NAMES = tuple(d.name for d in S.DATATYPES)
_DTYPES = tuple(d.dtype for d in S.DATATYPES)
_BITS = np.array([d.bits for d in S.DATATYPES], np.int64)
_SCALE_DTYPES = ("float32", "bfloat16")
_OPS = tuple(t.name for t in S.NODE_TYPES)
_MAX_SIZE = 1 << 62


class Ctx:
    """The blobs being assembled, with per-blob arrays (indexed by a row's owner)."""

    def __init__(self, blobs: list[Blob], cd_start: list[int], cd_size: list[int]) -> None:
        self.blobs = blobs
        self.exact = len(blobs) == 1
        self.path = blobs[0].path
        self.named = blobs[0].named
        self.shift = np.array([b.shift for b in blobs], np.int64)
        self.cd_start = np.array(cd_start, np.int64)
        self.cd_size = np.array(cd_size, np.uint64)

    def fail(self, error: ArtifactError) -> None:
        """Raise ``error`` (one blob) or SlowPath (several)."""
        if not self.exact:
            raise SlowPath(str(error))
        raise error

    def note(self, owner: int, severity: str, what: str, pos: int | None, message: str) -> None:
        """A finding for blob ``owner`` (one blob) or SlowPath (several)."""
        if not self.exact:
            raise SlowPath(message)
        self.blobs[owner].note(severity, what, pos, message)


class Constants:
    """The graphs' constant tables resolved (rows of all blobs, in order): per entry its
    storage code, file, absolute offset (or MISSING), size, key and whether a named key was
    not found (int8 -1/0/1); ``base``/``count``: each blob's first row and number of rows."""

    def __init__(self, n: int, base: np.ndarray, count: np.ndarray) -> None:
        self.storage = np.zeros(n, np.int64)
        self.file = filled(n, None)
        self.offset = np.full(n, MISSING, np.int64)
        self.size = np.zeros(n, np.int64)
        self.key = filled(n, None)
        self.missing = np.full(n, -1, np.int8)
        self.base = base
        self.count = count


def _bases(owner: np.ndarray, nblobs: int) -> tuple[np.ndarray, np.ndarray]:
    count = np.bincount(owner, minlength=nblobs).astype(np.int64)
    return np.cumsum(count) - count, count


def constants(ctx: Ctx, raw: RawGraph) -> Constants:
    """Check and resolve ``constant_data`` (or, for XN00, ``constant_buffer``) entries."""
    c = raw.cols
    nblobs = len(ctx.blobs)
    if len(c["c_off"]):
        if len(c["b_start"]) and not ctx.exact:
            raise SlowPath("constant_buffer next to constant_data")
        return _constant_data(ctx, c, *_bases(c["cown"], nblobs))
    nb = len(c["b_start"])
    out = Constants(nb, *_bases(c["bown"], nblobs))
    out.storage[:] = INLINE
    out.file[:] = ctx.path
    out.offset = np.where(c["b_count"] > 0, c["b_start"] + ctx.shift[c["bown"]], MISSING)
    out.size = c["b_count"].astype(np.int64)
    out.missing[:] = 0
    return out


def _constant_data(ctx: Ctx, c: dict[str, Any], base: np.ndarray, count: np.ndarray
                   ) -> Constants:
    off = c["c_off"]
    size = c["c_size"]
    keys = c["c_key"]
    own = c["cown"]
    n = len(off)
    key_list = keys.tolist()
    klen = c["c_klen"]  # -1: no key field, 0: an empty key
    has_key = klen > 0
    named = off == np.uint64(S.NAMED_OFFSET)
    huge = size >= np.uint64(_MAX_SIZE)
    bad = np.flatnonzero(huge | (has_key & ~named) | (~has_key & named & (size > 0)))
    if len(bad):
        k = int(bad[0])
        what = f"XNNGraph.constant_data[{k}]"
        if huge[k]:
            ctx.fail(CorruptError(f"size {int(size[k])} is larger than any blob", file=ctx.path,
                                  structure=what, offset=int(c["c_pos"][k])))
        if has_key[k]:
            ctx.fail(CorruptError(f"named_key {keys[k]!r} is set but offset is {int(off[k])}, "
                                  "not 2**64-1 (they are mutually exclusive)", file=ctx.path,
                                  structure=what, offset=int(c["c_pos"][k])))
        ctx.fail(CorruptError("offset is 2**64-1 (named data) but named_key is empty",
                              file=ctx.path, structure=what, offset=int(c["c_pos"][k])))
    inblob = ~named
    local = np.arange(n, dtype=np.int64) - base[own]  # entry 0 is the reserved placeholder
    empty = np.flatnonzero(inblob & (klen == 0) & (local > 0))
    if len(empty):
        k = int(empty[0])
        ctx.note(int(own[k]), "warning", f"XNNGraph.constant_data[{k}]", int(c["c_pos"][k]),
                 f"{len(empty)} entries have an empty named_key field next to an offset: "
                 "ExecuTorch's runtime takes any present named_key as a named-data lookup "
                 "(of the key \"\") and fails to load them")
    off_i = np.where(inblob, off, 0).astype(np.uint64)
    end = off_i + np.where(inblob, size, 0).astype(np.uint64)
    cd_size = ctx.cd_size[own]
    over = np.flatnonzero(inblob & ((off_i >= np.uint64(_MAX_SIZE)) | (end > cd_size)))
    if len(over):
        k = int(over[0])
        ctx.fail(OutOfBoundsError(f"[0x{int(off[k]):x}, +0x{int(size[k]):x}) runs past the "
                                  f"constant data (size 0x{int(cd_size[k]):x})", file=ctx.path,
                                  structure=f"XNNGraph.constant_data[{k}]",
                                  offset=int(c["c_pos"][k])))
    out = Constants(n, base, count)
    out.size = size.astype(np.int64)
    out.storage[:] = BLOB
    out.file[inblob] = ctx.path
    out.offset[inblob] = (off_i[inblob].astype(np.int64) + ctx.cd_start[own[inblob]]
                          + ctx.shift[own[inblob]])
    out.missing[inblob] = 0
    out.key = np.where(has_key, keys, None)
    rows = np.flatnonzero(named)
    out.storage[rows] = NAMED
    if ctx.named is not None and len(rows):
        hits = list(map(ctx.named.get, keys[rows].tolist()))
        found = np.fromiter(map(bool, hits), bool, len(hits))  # (file, offset, size) or None
        out.missing[rows] = np.where(found, 0, 1)
        fr = rows[found]
        if len(fr):
            f, o, z = zip(*(hits if len(fr) == len(rows) else filter(None, hits)))
            paths = set(f)
            if len(paths) == 1 and type(f[0]) is str:  # every key in one file (the usual)
                out.file[fr] = f[0]
                out.storage[fr] = NAMED if f[0] == ctx.path else EXTERNAL
            else:
                files = objects(list(map(str, f)))
                out.file[fr] = files
                out.storage[fr] = np.where(files == ctx.path, NAMED, EXTERNAL)
            out.offset[fr] = np.array(o, np.int64)
            have = np.array(z, np.int64)
            short = np.flatnonzero(have < out.size[fr])
            if len(short):
                k = int(fr[short[0]])
                ctx.note(int(own[k]), "error", f"XNNGraph.constant_data[{k}]",
                         int(c["c_pos"][k]),
                         f"{len(short)} named-data entries are shorter than the graph says, "
                         f"e.g. {key_list[k]!r}: {int(have[short[0]])} bytes, the graph "
                         f"expects {int(size[k])}")
    unresolved = np.flatnonzero(out.missing == 1)
    if len(unresolved):
        k = int(unresolved[0])
        ctx.note(int(own[k]), "warning", f"XNNGraph.constant_data[{k}]", int(c["c_pos"][k]),
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


def values(ctx: Ctx, raw: RawGraph, const: Constants) -> dict[str, Any]:
    """The ``delegate_tensors`` columns of the graphs (see ``delegates._columns``)."""
    c = raw.cols
    own = c["vown"]
    n = len(own)
    dt = c["datatype"]
    bad = np.flatnonzero((dt < 0) | (dt >= len(S.DATATYPES)))
    if len(bad):
        k = int(bad[0])
        ctx.fail(CorruptError(f"datatype {int(dt[k])} is unknown (known: 0.."
                              f"{len(S.DATATYPES) - 1})", file=ctx.path,
                              structure=f"XNNGraph.xvalues[{k}].datatype",
                              offset=int(c["tpos"][k])))
    cbi = c["cbi"]
    entries = const.count[own]
    bad = np.flatnonzero((cbi > 0) & (cbi >= entries))  # 0: no constant, even with no table
    if len(bad):
        k = int(bad[0])
        ctx.fail(OutOfBoundsError(f"constant_buffer_idx {int(cbi[k])} is out of range "
                                  f"({int(entries[k])} constant entries)", file=ctx.path,
                                  structure=f"XNNGraph.xvalues[{k}].constant_buffer_idx",
                                  offset=int(c["tpos"][k])))
    bits = _BITS[dt]
    numel = c["numel"]
    nbytes = _nbytes(bits, numel, c["last"])
    is_const = cbi > 0
    ci = np.where(is_const, const.base[own] + cbi, 0)
    has_table = len(const.storage) > 0
    storage = np.where(is_const, const.storage[ci], RUNTIME) if has_table else \
        np.full(n, RUNTIME)
    file = np.where(is_const, const.file[ci], None) if has_table else filled(n, None)
    offset = np.where(is_const, const.offset[ci], MISSING) if has_table else \
        np.full(n, MISSING)
    data_size = np.where(is_const, const.size[ci], MISSING) if has_table else \
        np.full(n, MISSING)
    key = np.where(is_const, const.key[ci], None) if has_table else filled(n, None)
    missing = (np.where(is_const, const.missing[ci], -1) if has_table else
               np.full(n, -1)).astype(np.int8)
    short = np.flatnonzero(is_const & (data_size < nbytes))
    if len(short):
        k = int(short[0])
        ctx.note(int(own[k]), "error", f"XNNGraph.xvalues[{k}]", int(c["tpos"][k]),
                 f"{len(short)} constant(s) hold fewer bytes than their shape needs, e.g. "
                 f"value {int(c['id_out'][k])}: {int(data_size[k])} < {int(nbytes[k])}")
    flags = c["flags"]
    role = np.where(flags & S.FLAG_EXTERNAL_INPUT, 1,
                    np.where(flags & S.FLAG_EXTERNAL_OUTPUT, 2, np.where(is_const, 0, 3)))
    ids = c["id_out"]
    cols: dict[str, Any] = {
        "name": _names(ctx, ids, own),
        "value": ids, "dtype": Coded(dt, _DTYPES), "backend_dtype": Coded(dt, _NAMES),
        "shape": c["shape"], "numel": numel, "nbytes": nbytes,
        "role": Coded(role, ROLES), "quant": Coded(c["qtype"], S.QUANT_TYPES),
        "group_size": np.where(c["qtype"] == S.PER_CHANNEL_GROUP, c["group_size"], MISSING),
        "channel_dim": np.where(c["channel_dim"] >= 0, c["channel_dim"], MISSING),
        "scale": c["pt_scale"],
        "zero_point": np.where(c["qtype"] == S.PER_TENSOR, c["pt_zero"], MISSING),
        "storage": Coded(storage, STORAGES), "named_key": key, "file": file,
        "offset": offset, "data_size": data_size,
        "constant_index": np.where(is_const, cbi, MISSING),
        "external_id": np.where(c["external_id"] == S.INVALID_ID, MISSING, c["external_id"]),
        "flags": flags, "missing": missing,
    }
    cols.update(_scales(ctx, raw, const))
    return cols


def _names(ctx: Ctx, ids: np.ndarray, own: np.ndarray) -> np.ndarray:
    """``'<method>/delegate<index>/<value id>'`` per value: one concatenation per row, the
    digits of dense ids (the usual 0..n-1) made once."""
    n = len(ids)
    prefixes = [f"{b.method}/delegate{b.index}/" for b in ctx.blobs]
    small = n and int(ids.min()) >= 0 and int(ids.max()) < 4 * n + 1024
    digits = objects(list(map(str, range(int(ids.max()) + 1)))) if small else None
    out = np.empty(n, object)
    # rows are in blob order (read_many lists each blob's values after the previous one's)
    base, count = _bases(own, len(prefixes))
    for k, prefix in enumerate(prefixes):
        a, b = int(base[k]), int(base[k] + count[k])
        if a == b:
            continue
        part = ids[a:b]
        texts = digits[part].tolist() if small else list(map(str, part.tolist()))
        out[a:b] = list(map(prefix.__add__, texts))
    return out


def _scales(ctx: Ctx, raw: RawGraph, const: Constants) -> dict[str, Any]:
    c = raw.cols
    own = c["vown"]
    n = len(own)
    qt = c["qtype"]
    chan = (qt == S.PER_CHANNEL) | (qt == S.PER_CHANNEL_GROUP)
    inline = chan & (c["s_count"] > 0)
    buffered = chan & ~inline & (c["sbi"] > 0)
    sbi = c["sbi"]
    entries = const.count[own]
    bad = np.flatnonzero(buffered & (sbi >= entries))
    if len(bad):
        k = int(bad[0])
        ctx.fail(OutOfBoundsError(f"scale_buffer_idx {int(sbi[k])} is out of range "
                                  f"({int(entries[k])} constant entries)", file=ctx.path,
                                  structure=f"XNNGraph.xvalues[{k}].quant_params."
                                  "scale_buffer_idx", offset=int(c["qpos"][k])))
    none = np.flatnonzero(chan & ~inline & ~buffered)
    if len(none):
        k = int(none[0])
        ctx.note(int(own[k]), "warning", f"XNNGraph.xvalues[{k}].quant_params",
                 int(c["qpos"][k]), f"{len(none)} per-channel quantized value(s) have neither "
                 "inline scales nor a scale buffer")
    si = np.where(buffered, const.base[own] + sbi, 0)
    group = qt == S.PER_CHANNEL_GROUP
    # XNNPACK keeps groupwise scales as bfloat16 in their buffer, per-channel ones as float32
    scale_bits = np.where(inline, c["s_bits"], np.where(group, 16, 32))
    s_dtype = np.where(chan, np.where(scale_bits == 16, 1, 0), -1)
    s_storage = np.where(inline, INLINE, -1)
    s_file = np.where(inline, ctx.path, None).astype(object)
    s_off = np.where(inline, c["s_start"] + ctx.shift[own], MISSING)
    s_nb = np.where(inline, c["s_count"] * scale_bits // 8, MISSING)
    s_key = filled(n, None)
    if buffered.any() and len(const.storage):
        s_storage = np.where(buffered, const.storage[si], s_storage)
        s_file = np.where(buffered, const.file[si], s_file)
        s_off = np.where(buffered, const.offset[si], s_off)
        s_nb = np.where(buffered, const.size[si], s_nb)
        s_key = np.where(buffered, const.key[si], s_key)
    num = np.where(chan, np.where((c["num_scales"] <= 0) & inline, c["s_count"],
                                  c["num_scales"]), MISSING)
    return {"num_scales": num, "scale_dtype": Coded(s_dtype, _SCALE_DTYPES),
            "scale_storage": Coded(s_storage, STORAGES),
            "scale_key": objects(s_key), "scale_file": objects(s_file), "scale_offset": s_off,
            "scale_nbytes": s_nb}


def nodes(ctx: Ctx, raw: RawGraph) -> dict[str, Any]:
    """The ``delegate_nodes`` columns of the graphs."""
    c = raw.cols
    n = len(c["npos"])
    ins = c["inputs"]
    outs = c["outputs"]
    if n:
        nown = c["nown"]
        ids = c["node_ids"]
        owner = c["node_id_own"]
        vown, vid = c["vown"], c["id_out"]
        top = int(vid.max()) + 1 if len(vid) else 1
        if len(ids) and int(ids.max()) < top <= 4 * len(vid) + 1024:
            # dense ids (the usual 0..n-1): a lookup table per blob instead of a sort
            lut = np.zeros((len(ctx.blobs), top), bool)
            lut[vown, vid] = True
            unknown = np.flatnonzero(~lut[owner, ids])
        else:  # (owner, id) pairs as one key: ids are u32
            known = np.unique((vown << 33) + vid)
            unknown = np.flatnonzero(~np.isin((owner << 33) + ids, known))
        if len(unknown):
            k = int(unknown[0])
            missing = np.unique(ids[unknown])  # the smallest named: the same on both readers
            ctx.note(int(owner[k]), "warning", "XNNGraph.xnodes",
                     int(c["npos"][np.flatnonzero(nown == owner[k])[0]]),
                     f"nodes refer to {len(missing)} value id(s) that no "
                     f"xvalue defines, e.g. {int(missing[0])}")
    pos = np.arange(n, dtype=np.int64)
    if n and not ctx.exact:
        base, _ = _bases(c["nown"], len(ctx.blobs))
        pos = pos - base[c["nown"]]
    return {"node": pos, "op": Coded(c["ntype"], _OPS), "inputs": ins,
            "outputs": outs, "flags": c["nflags"], "debug_handle": c["debug"],
            "output_min": c["out_min"], "output_max": c["out_max"]}


def constant_parts(blob: Blob, raw: RawGraph, const: Constants, cd_start: int,
                   cd_size: int, owner: int = 0) -> list[tuple[int, int, str, str]]:
    """Sub-segment parts (window coordinates) of blob ``owner``'s constant data: one per
    distinct in-blob constant range, named after its entry and the values that use it."""
    c = raw.cols
    if not cd_size:
        return []
    mine = c["vown"] == owner
    base = int(const.base[owner]) if len(const.base) else 0
    users: dict[int, list[int]] = {}
    for v, k in zip(c["id_out"][mine].tolist(), c["cbi"][mine].tolist()):
        if k > 0:
            users.setdefault(k, []).append(v)
    sbi = c["sbi"][mine]
    for k in (sbi[(sbi > 0) & (c["s_count"][mine] == 0)]).tolist():
        users.setdefault(k, [])
    ranges: dict[tuple[int, int], list[int]] = {}
    if len(c["c_off"]):
        for k in sorted(users):
            g = base + k
            if k < const.count[owner] and const.storage[g] == BLOB and const.size[g] > 0:
                pos = int(const.offset[g]) - blob.shift
                ranges.setdefault((pos, int(const.size[g])), []).append(k)
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
