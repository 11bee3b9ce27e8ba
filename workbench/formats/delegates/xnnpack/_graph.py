"""Reading the ``XNNGraph`` flatbuffer into raw numpy columns (private).

Two readers produce the same :class:`RawGraph`: :func:`read_fast` gathers whole vectors of
tables with :mod:`workbench._vecfb` and raises :class:`~workbench._vecfb.SlowPath` on any
doubt; :func:`read_slow` visits one verified table at a time and raises the exact error.
What the values *mean* (storage, scales, checks against the constant data) is worked out
once, for both, in :mod:`._assemble`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...._cols import filled, objects
from ...._vecfb import SlowPath, Tables, VecReader, unique_tuples
from ....flatbuf import FlatBuffer, Table
from ....limits import NUMEL_MAX
from . import schema as S

#: Largest element count accepted for one value (more is corrupt: int64 columns).
MAX_NUMEL = NUMEL_MAX


class RawGraph:
    """The fields of one ``XNNGraph``, one numpy array per column (window positions).

    Values (one row per ``xvalues`` entry): ``vpos``/``tpos``/``qpos`` table positions,
    ``vtype``, ``datatype``, ``num_dims``, ``shape`` (object tuples), ``numel``, ``last``
    (last dim, -1 for scalars), ``cbi`` (constant_buffer_idx), ``external_id``, ``flags``,
    ``id_out``, ``dq`` (XN00 dq_datatype, -1 absent), ``qtype``, ``channel_dim``,
    ``group_size``, ``num_scales``, ``sbi`` (scale_buffer_idx), ``s_start``/``s_count``/
    ``s_bits`` (inline scales), ``pt_scale``, ``pt_zero``, ``nonbatch`` (-1 = absent).

    Constant data: ``c_pos``, ``c_off`` (uint64), ``c_size`` (uint64), ``c_key`` (object).
    Inline buffers (XN00): ``b_pos``, ``b_start``, ``b_count``. Nodes: ``npos``, ``ntype``,
    ``debug``, ``out_min``/``out_max`` (NaN absent), ``nflags``, ``inputs``/``outputs``.
    """

    def __init__(self) -> None:
        self.version: str | None = None
        self.num_externs = 0
        self.input_ids: tuple[int, ...] = ()
        self.output_ids: tuple[int, ...] = ()
        self.cols: dict[str, Any] = {}


_VALUE_INT_COLS = ("vpos", "tpos", "qpos", "vtype", "datatype", "num_dims", "numel", "last",
                   "cbi", "external_id", "flags", "id_out", "dq", "qtype", "channel_dim",
                   "group_size", "num_scales", "sbi", "s_start", "s_count", "s_bits",
                   "pt_zero", "nonbatch")


def _graph_scalars(raw: RawGraph, root: Table) -> None:
    raw.version = root.string(S.XNNGraph.version, "version")
    raw.num_externs = root.u32(S.XNNGraph.num_externs)
    raw.input_ids = root.scalars(S.XNNGraph.input_ids, "I", "input_ids")
    raw.output_ids = root.scalars(S.XNNGraph.output_ids, "I", "output_ids")


# -- the scalar verifying path ------------------------------------------------------------------

def read_slow(fb: FlatBuffer, root: Table, xn00: bool) -> RawGraph:
    """Read every table one at a time with exact errors."""
    raw = RawGraph()
    _graph_scalars(raw, root)
    rows: dict[str, list] = {c: [] for c in _VALUE_INT_COLS}
    shapes: list[tuple] = []
    pt_scale: list[float] = []
    n_q = len(S.QUANT_TYPES)
    for v in root.tables(S.XNNGraph.xvalues, "xvalues"):
        vt, t = v.union(S.XValue.xvalue_union_type, len(S.XVALUE_TYPES), "xvalue_union")
        if t is None:
            raise fb._corrupt(f"{v.path}.xvalue_union", v.pos, "value has no tensor (union NONE)")
        q = None
        qt = 0
        qpos = 0
        if vt == S.QUANTIZED_TENSOR_VALUE:
            q = t
            t = q.table(S.XNNQuantizedTensorValue.tensor_value, "tensor_value")
            if t is None:
                raise fb._corrupt(f"{q.path}.tensor_value", q.pos, "quantized value has no tensor")
            qt, qp = q.union(S.XNNQuantizedTensorValue.quant_params_type, n_q, "quant_params")
            qpos = qp.pos if qp is not None else 0
        dims = tuple(t.scalars(S.XNNTensorValue.dims, "I", "dims"))
        numel = math.prod(dims)
        if numel >= MAX_NUMEL:
            raise fb._corrupt(f"{t.path}.dims", t.pos, f"dims {list(dims)[:8]} describe "
                              f"{numel} elements (at most 2**60 are accepted)")
        shapes.append(dims)
        r = rows
        r["vpos"].append(v.pos)
        r["tpos"].append(t.pos)
        r["qpos"].append(qpos)
        r["vtype"].append(vt)
        r["datatype"].append(t.scalar(S.XNNTensorValue.datatype, "h"))
        r["num_dims"].append(t.u32(S.XNNTensorValue.num_dims))
        r["numel"].append(numel)
        r["last"].append(dims[-1] if dims else -1)
        r["cbi"].append(t.u32(S.XNNTensorValue.constant_buffer_idx))
        r["external_id"].append(t.u32(S.XNNTensorValue.external_id))
        r["flags"].append(t.u32(S.XNNTensorValue.flags))
        r["id_out"].append(t.u32(S.XNNTensorValue.id_out))
        r["dq"].append(t.scalar(S.XNNTensorValue.dq_datatype, "h") if xn00 and
                       t.has(S.XNNTensorValue.dq_datatype) else -1)
        r["qtype"].append(qt)
        cd = gs = ns = sbi = nb = zp = -1
        s_start = s_count = 0
        s_bits = 32
        scale = math.nan
        if qt in (S.PER_CHANNEL, S.PER_CHANNEL_GROUP):
            group = qt == S.PER_CHANNEL_GROUP
            P = S.PerChannelGroupQuant if group else S.PerChannelQuant
            s_start, s_count = qp.vector(P.scale, 4, "scale")
            if group and not s_count:
                st16, ct16 = qp.vector(S.PerChannelGroupQuant.scale_bf16, 2, "scale_bf16")
                if ct16:
                    s_start, s_count, s_bits = st16, ct16, 16
            if not s_count:
                s_start = 0
            cd = qp.i32(P.channel_dim)
            gs = qp.i32(S.PerChannelGroupQuant.group_size) if group else -1
            sbi = qp.u32(P.scale_buffer_idx)
            ns = qp.u32(P.num_scales)
        elif qt == S.PER_TENSOR:
            scale = float(qp.scalar(S.PerTensorQuant.scale, "f"))
            zp = qp.i32(S.PerTensorQuant.zero_point)
        elif qt == S.PER_TOKEN_DYNAMIC:
            nb = qp.i32(S.PerTokenDynamicQuant.num_nonbatch_dims)
        r["channel_dim"].append(cd)
        r["group_size"].append(gs)
        r["num_scales"].append(ns)
        r["sbi"].append(sbi)
        r["s_start"].append(s_start)
        r["s_count"].append(s_count)
        r["s_bits"].append(s_bits)
        r["pt_zero"].append(zp)
        r["nonbatch"].append(nb)
        pt_scale.append(scale)
    cols: dict[str, Any] = {c: np.array(v, np.int64) for c, v in rows.items()}
    cols["vown"] = np.zeros(len(shapes), np.int64)
    cols["shape"] = objects(shapes)
    cols["pt_scale"] = np.array(pt_scale, np.float64)
    # constant data
    c_pos, c_off, c_size, c_key = [], [], [], []
    for c in root.tables(S.XNNGraph.constant_data, "constant_data"):
        c_pos.append(c.pos)
        c_off.append(c.u64(S.ConstantDataOffset.offset))
        c_size.append(c.u64(S.ConstantDataOffset.size))
        c_key.append(c.string(S.ConstantDataOffset.named_key, "named_key"))
    cols["c_pos"] = np.array(c_pos, np.int64)
    cols["c_off"] = np.array(c_off, np.uint64)
    cols["c_size"] = np.array(c_size, np.uint64)
    cols["c_key"] = objects(c_key)
    cols["c_klen"] = np.array([-1 if k is None else len(k) for k in c_key], np.int64)
    cols["cown"] = np.zeros(len(c_pos), np.int64)
    b_pos, b_start, b_count = [], [], []
    for b in root.tables(S.XNNGraph.constant_buffer, "constant_buffer"):
        start, count = b.vector(S.Buffer.storage, 1, "storage")
        b_pos.append(b.pos)
        b_start.append(start)
        b_count.append(count)
    cols["b_pos"] = np.array(b_pos, np.int64)
    cols["b_start"] = np.array(b_start, np.int64)
    cols["b_count"] = np.array(b_count, np.int64)
    cols["bown"] = np.zeros(len(b_pos), np.int64)
    # nodes
    n_types = len(S.NODE_TYPES)
    npos, ntype, debug, omin, omax, nflags, ins, outs = [], [], [], [], [], [], [], []
    for x in root.tables(S.XNNGraph.xnodes, "xnodes"):
        nt, t = x.union(S.XNode.xnode_union_type, n_types, "xnode_union")
        if t is None:
            raise fb._corrupt(f"{x.path}.xnode_union", x.pos, "node has no operation (union NONE)")
        spec = S.NODE_TYPES[nt]
        npos.append(x.pos)
        ntype.append(nt)
        debug.append(x.u32(S.XNode.debug_handle))
        mm = x.table(S.XNode.output_min_max, "output_min_max")
        omin.append(float(mm.scalar(S.OutputMinMax.output_min, "f")) if mm else math.nan)
        omax.append(float(mm.scalar(S.OutputMinMax.output_max, "f")) if mm else math.nan)
        nflags.append(t.u32(spec.flags))
        ins.append(tuple(i for i in (t.u32(s) for s in spec.inputs) if i != S.INVALID_ID))
        outs.append(tuple(t.u32(s) for s in spec.outputs))
    cols.update(npos=np.array(npos, np.int64), ntype=np.array(ntype, np.int64),
                debug=np.array(debug, np.int64), out_min=np.array(omin, np.float64),
                out_max=np.array(omax, np.float64), nflags=np.array(nflags, np.int64),
                inputs=objects(ins), outputs=objects(outs), nown=np.zeros(len(npos), np.int64))
    ids = [i for t in ins for i in t] + [i for t in outs for i in t]
    cols["node_ids"] = np.array(ids, np.int64)
    cols["node_id_own"] = np.zeros(len(ids), np.int64)
    raw.cols = cols
    return raw


# -- the vectorised path ------------------------------------------------------------------------

def _union(tables: Tables, type_slot: int, n_types: int) -> tuple[np.ndarray, np.ndarray]:
    """(type, table position) of a union field of many tables; NONE, unknown types or a
    missing value raise SlowPath."""
    t = tables.scalar(type_slot, "u1").astype(np.int64)
    ref = tables.ref(type_slot + 1)
    if len(t) and (t.min() < 1 or t.max() >= n_types or (ref == 0).any()):
        raise SlowPath("union type or value")
    return t, ref


class Home:
    """Per-row window checks for graphs of several blobs read in one vectorised pass.

    The pass reads through one :class:`FlatBuffer` spanning all the blobs' graphs, so its
    own checks only keep reads inside that span; every table, vtable, vector and string a
    row uses must also lie in the row's own graph ``[lo[b], hi[b])`` (else SlowPath, and the
    blobs are read one by one, for the exact error).
    """

    __slots__ = ("fb", "hi", "lo", "vec")

    def __init__(self, vec: VecReader, lo: np.ndarray, hi: np.ndarray) -> None:
        self.vec = vec
        self.fb = vec.fb
        self.lo = lo
        self.hi = hi

    def _inside(self, start: np.ndarray, end: np.ndarray, owner: np.ndarray) -> None:
        if len(start) and ((start < self.lo[owner]) | (end > self.hi[owner])).any():
            raise SlowPath("a reference leaves its own graph")

    def tables(self, T: Tables, owner: np.ndarray) -> None:
        pos = T.pos
        if not len(pos):
            return
        if T.inv is None:
            tsize, width = T.sizes[0], T.vtsize[0]
        else:
            tsize, width = T.sizes[T.inv], T.vtsize[T.inv]
        lo, hi = self.lo[owner], self.hi[owner]
        vt = T.vt
        if ((pos < lo) | (pos + tsize > hi) | (vt < lo) | (vt + width > hi)).any():
            raise SlowPath("a reference leaves its own graph")

    def vectors(self, start: np.ndarray, count: np.ndarray, elem: int, owner: np.ndarray) -> None:
        has = count > 0
        if has.any():
            self._inside(start[has] - 4, start[has] + count[has] * elem, owner[has])

    def strings(self, ref: np.ndarray, owner: np.ndarray) -> None:
        has = ref > 0
        if has.any():
            r = ref[has]
            n = self.vec.gather(r, "<u4").astype(np.int64)
            self._inside(r, r + 4 + n + 1, owner[has])


def _positions(vec: VecReader, starts: list[int], counts: list[int]
               ) -> tuple[np.ndarray, np.ndarray]:
    """Table positions of several offset vectors, and the vector (blob) each row came from."""
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    if not len(owner):
        return np.zeros(0, np.int64), owner
    first = np.repeat(np.array(starts, np.int64), counts)
    within = np.arange(len(owner), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    at = first + 4 * within
    return at + vec.gather(at, "<u4"), owner


class _Reader:
    """Builds :class:`Tables` and vector/string reads with the :class:`Home` checks."""

    def __init__(self, vec: VecReader, home: Home | None) -> None:
        self.vec = vec
        self.home = home

    def tables(self, pos: np.ndarray, owner: np.ndarray, path: str) -> Tables:
        T = self.vec.tables(pos, path)
        if self.home is not None:
            self.home.tables(T, owner)
        return T

    def vectors(self, T: Tables, slot: int, elem: int, owner: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        start, count = T.vectors(slot, elem)
        if self.home is not None:
            self.home.vectors(start, count, elem, owner)
        return start, count

    def strings(self, ref: np.ndarray, owner: np.ndarray) -> np.ndarray:
        if self.home is not None:
            self.home.strings(ref, owner)
        return self.vec.strings(ref)


def read_fast(fb: FlatBuffer, root: Table, xn00: bool) -> RawGraph:
    """The same as :func:`read_slow`, vectorised; raises SlowPath on any doubt."""
    return read_many(VecReader(fb), [root], xn00, None)


def read_many(vec: VecReader, roots: list[Table], xn00: bool, home: Home | None) -> RawGraph:
    """The graphs of ``roots`` (one blob each) read together; columns are concatenated in
    root order and ``vown``/``cown``/``bown``/``nown`` say which root each row belongs to."""
    raw = RawGraph()
    _graph_scalars(raw, roots[0])
    rd = _Reader(vec, home)

    def rows_of(slot: int, name: str) -> tuple[np.ndarray, np.ndarray]:
        got = [r.vector(slot, 4, name) for r in roots]
        return _positions(vec, [g[0] for g in got], [g[1] for g in got])

    vpos, vown = rows_of(S.XNNGraph.xvalues, "xvalues")
    n = len(vpos)
    V = rd.tables(vpos, vown, "XNNGraph.xvalues")
    vtype, vref = _union(V, S.XValue.xvalue_union_type, len(S.XVALUE_TYPES))
    isq = vtype == S.QUANTIZED_TENSOR_VALUE
    tpos = vref.copy()
    qtype = np.zeros(n, np.int64)
    qpos = np.zeros(n, np.int64)
    qrows = np.flatnonzero(isq)
    if len(qrows):
        Q = rd.tables(vref[qrows], vown[qrows], "XNNQuantizedTensorValue")
        tv = Q.ref(S.XNNQuantizedTensorValue.tensor_value)
        if (tv == 0).any():
            raise SlowPath("quantized value without tensor")
        tpos[qrows] = tv
        qt = Q.scalar(S.XNNQuantizedTensorValue.quant_params_type, "u1").astype(np.int64)
        qr = Q.ref(S.XNNQuantizedTensorValue.quant_params)
        if qt.max() >= len(S.QUANT_TYPES) or ((qt > 0) & (qr == 0)).any():
            raise SlowPath("quant params union")
        qtype[qrows] = qt
        qpos[qrows] = np.where(qt > 0, qr, 0)
    T = rd.tables(tpos, vown, "XNNTensorValue")
    cols: dict[str, Any] = {"vpos": vpos, "tpos": tpos, "qpos": qpos, "vtype": vtype,
                            "vown": vown}
    cols["datatype"] = T.scalar(S.XNNTensorValue.datatype, "<i2").astype(np.int64)
    cols["num_dims"] = T.scalar(S.XNNTensorValue.num_dims, "<u4").astype(np.int64)
    d_start, d_cnt = rd.vectors(T, S.XNNTensorValue.dims, 4, vown)
    flat = vec.flat(d_start, d_cnt, "<u4").astype(np.int64)
    shapes, shape_ids, uniques = unique_tuples(flat, d_cnt)
    sizes = [math.prod(u) for u in uniques]
    if sizes and max(sizes) >= MAX_NUMEL:
        raise SlowPath("huge tensor")
    cols["shape"] = shapes
    cols["numel"] = np.array(sizes, np.int64)[shape_ids] if n else np.zeros(0, np.int64)
    ends = np.cumsum(d_cnt) - 1
    cols["last"] = np.where(d_cnt > 0, flat[np.maximum(ends, 0)] if len(flat) else -1, -1)
    for name, slot in (("cbi", S.XNNTensorValue.constant_buffer_idx),
                       ("external_id", S.XNNTensorValue.external_id),
                       ("flags", S.XNNTensorValue.flags), ("id_out", S.XNNTensorValue.id_out)):
        cols[name] = T.scalar(slot, "<u4").astype(np.int64)
    if xn00:
        present = T.field(S.XNNTensorValue.dq_datatype, 2) > 0
        dq = T.scalar(S.XNNTensorValue.dq_datatype, "<i2").astype(np.int64)
        cols["dq"] = np.where(present, dq, -1)
    else:
        cols["dq"] = np.full(n, -1, np.int64)
    cols["qtype"] = qtype
    _quant_fast(rd, cols, qtype, qpos, vown, n)
    # constant data
    cpos, cown = rows_of(S.XNNGraph.constant_data, "constant_data")
    C = rd.tables(cpos, cown, "XNNGraph.constant_data")
    cols["c_pos"] = C.pos
    cols["cown"] = cown
    cols["c_off"] = C.scalar(S.ConstantDataOffset.offset, "<u8")
    cols["c_size"] = C.scalar(S.ConstantDataOffset.size, "<u8")
    kref = C.ref(S.ConstantDataOffset.named_key)
    klen = np.full(len(kref), -1, np.int64)
    has = kref > 0
    if has.any():
        klen[has] = vec.gather(kref[has], "<u4")
    cols["c_key"] = rd.strings(kref, cown)  # (keys: a few ASCII lengths, one block each)
    cols["c_klen"] = klen
    bpos, bown = rows_of(S.XNNGraph.constant_buffer, "constant_buffer")
    B = rd.tables(bpos, bown, "XNNGraph.constant_buffer")
    b_start, b_count = rd.vectors(B, S.Buffer.storage, 1, bown)
    cols.update(b_pos=B.pos, b_start=b_start, b_count=b_count, bown=bown)
    npos, nown = rows_of(S.XNNGraph.xnodes, "xnodes")
    _nodes_fast(rd, npos, nown, cols)
    raw.cols = cols
    return raw


def _quant_fast(rd: _Reader, cols: dict[str, Any], qtype: np.ndarray, qpos: np.ndarray,
                vown: np.ndarray, n: int) -> None:
    neg = np.full(n, -1, np.int64)
    cd, gs, ns, sbi, zp, nb = (neg.copy() for _ in range(6))
    s_start = np.zeros(n, np.int64)
    s_count = np.zeros(n, np.int64)
    s_bits = np.full(n, 32, np.int64)
    pt_scale = np.full(n, np.nan)
    for qt in (S.PER_CHANNEL, S.PER_CHANNEL_GROUP):
        rows = np.flatnonzero(qtype == qt)
        if not len(rows):
            continue
        group = qt == S.PER_CHANNEL_GROUP
        P = S.PerChannelGroupQuant if group else S.PerChannelQuant
        Q = rd.tables(qpos[rows], vown[rows], P.__name__)
        st, ct = rd.vectors(Q, P.scale, 4, vown[rows])
        bits = np.full(len(rows), 32, np.int64)
        if group:
            st16, ct16 = rd.vectors(Q, S.PerChannelGroupQuant.scale_bf16, 2, vown[rows])
            use16 = (ct == 0) & (ct16 > 0)
            st = np.where(use16, st16, st)
            ct = np.where(use16, ct16, ct)
            bits[use16] = 16
            gs[rows] = Q.scalar(S.PerChannelGroupQuant.group_size, "<i4")
        s_start[rows] = np.where(ct > 0, st, 0)
        s_count[rows] = ct
        s_bits[rows] = bits
        cd[rows] = Q.scalar(P.channel_dim, "<i4")
        sbi[rows] = Q.scalar(P.scale_buffer_idx, "<u4")
        ns[rows] = Q.scalar(P.num_scales, "<u4")
    rows = np.flatnonzero(qtype == S.PER_TENSOR)
    if len(rows):
        Q = rd.tables(qpos[rows], vown[rows], "PerTensorQuant")
        with np.errstate(invalid="ignore"):
            pt_scale[rows] = Q.scalar(S.PerTensorQuant.scale, "<f4").astype(np.float64)
        zp[rows] = Q.scalar(S.PerTensorQuant.zero_point, "<i4")
    rows = np.flatnonzero(qtype == S.PER_TOKEN_DYNAMIC)
    if len(rows):
        Q = rd.tables(qpos[rows], vown[rows], "PerTokenDynamicQuant")
        nb[rows] = Q.scalar(S.PerTokenDynamicQuant.num_nonbatch_dims, "<i4")
    cols.update(channel_dim=cd, group_size=gs, num_scales=ns, sbi=sbi, s_start=s_start,
                s_count=s_count, s_bits=s_bits, pt_scale=pt_scale, pt_zero=zp, nonbatch=nb)


def _nodes_fast(rd: _Reader, npos: np.ndarray, nown: np.ndarray, cols: dict[str, Any]) -> None:
    n = len(npos)
    X = rd.tables(npos, nown, "XNNGraph.xnodes")
    ntype, nref = _union(X, S.XNode.xnode_union_type, len(S.NODE_TYPES))
    cols["npos"] = X.pos
    cols["nown"] = nown
    cols["ntype"] = ntype
    cols["debug"] = X.scalar(S.XNode.debug_handle, "<u4").astype(np.int64)
    mm = X.ref(S.XNode.output_min_max)
    out_min = np.full(n, np.nan)
    out_max = np.full(n, np.nan)
    has = np.flatnonzero(mm > 0)
    if len(has):
        M = rd.tables(mm[has], nown[has], "OutputMinMax")
        with np.errstate(invalid="ignore"):  # any bit pattern is a float (signalling NaNs too)
            out_min[has] = M.scalar(S.OutputMinMax.output_min, "<f4")
            out_max[has] = M.scalar(S.OutputMinMax.output_max, "<f4")
    cols["out_min"] = out_min
    cols["out_max"] = out_max
    nflags = np.zeros(n, np.int64)
    inputs = np.empty(n, object)
    outputs = np.empty(n, object)
    ids: list[np.ndarray] = [np.zeros(0, np.int64)]
    owners: list[np.ndarray] = [np.zeros(0, np.int64)]
    for nt in (np.flatnonzero(np.bincount(ntype)).tolist() if n else ()):
        spec = S.NODE_TYPES[nt]
        rows = np.flatnonzero(ntype == nt)
        N = rd.tables(nref[rows], nown[rows], spec.name)
        nflags[rows] = N.scalar(spec.flags, "<u4")
        for slots, out, drop in ((spec.inputs, inputs, True), (spec.outputs, outputs, False)):
            objs, flat, own = _id_tuples(N, slots, nown[rows], drop)
            out[rows] = objs
            ids.append(flat)
            owners.append(own)
    cols["nflags"] = nflags
    cols["inputs"] = inputs if n else objects([])
    cols["outputs"] = outputs if n else objects([])
    cols["node_ids"] = np.concatenate(ids)
    cols["node_id_own"] = np.concatenate(owners)


def _id_tuples(N: Tables, slots: tuple[int, ...], owner: np.ndarray, drop_invalid: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One tuple of value ids per table, from the u32 fields at ``slots`` (absent optional
    ids dropped when ``drop_invalid``), and the ids and their owners as flat arrays."""
    n = len(owner)
    if not slots:
        return filled(n, ()), np.zeros(0, np.int64), np.zeros(0, np.int64)
    cols = [N.scalar(s, "<u4").astype(np.int64) for s in slots]
    mat = np.stack(cols, axis=1)
    own = np.repeat(owner, len(slots))
    bad = mat == S.INVALID_ID
    if not drop_invalid or not bad.any():  # (zip makes the tuples, no list per row)
        return objects(list(zip(*(c.tolist() for c in cols)))), mat.reshape(-1), own
    # rows grouped by which slots are absent (few patterns): one tolist() per pattern
    pattern = bad @ (1 << np.arange(len(slots), dtype=np.int64))
    out = np.empty(n, object)
    patterns = np.unique(pattern).tolist()
    for p in patterns:
        rows = np.flatnonzero(pattern == p) if len(patterns) > 1 else slice(None)
        kept = [cols[k][rows].tolist() for k in range(len(slots)) if not p >> k & 1]
        out[rows] = objects(list(zip(*kept))) if kept else filled(len(mat[rows]), ())
    good = ~bad.reshape(-1)
    return out, mat.reshape(-1)[good], own[good]
