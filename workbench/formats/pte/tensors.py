"""Where a ``.pte`` tensor is read and placed: THE one place.

:class:`TensorReader` reads the ``Tensor`` tables of a method's values and works out where
each tensor's bytes lie (:data:`STORAGES`). Two paths read the same fields, side by side:

* the fast path (:meth:`TensorReader.values_fast`) reads all of a method's tensors at once
  with :mod:`workbench._vecfb` and raises :class:`~workbench._vecfb.SlowPath` at any doubt;
* the scalar verifying path (:meth:`TensorReader.values_slow`) reads one table at a time and
  raises the exact :class:`~workbench.errors.ArtifactError`.

Both end in :meth:`TensorReader.place` for the rare tensors the fast path does not place in
bulk (mutable data, legacy inline constants), so placement rules exist once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import NamedTuple, overload

import numpy as np

from ..._cols import filled, objects
from ..._vecfb import SlowPath, VecReader, layouts
from ...dtypes import SCALAR_TYPES
from ...errors import CorruptError, OutOfBoundsError
from ...flatbuf import Table
from ...limits import TENSOR_MAX_BYTES
from .schema import AllocationDetails, EValue, ExecutionPlan, ExtraTensorInfo, KernelTypes, TensorDataLocation
from .schema import Tensor as T

#: tensors.storage values of a program, by code (the columns keep int8 codes).
STORAGES = ("segment", "inline", "external", "named_data", "mutable", "planned", "unallocated")
STORAGE_CODE = {name: k for k, name in enumerate(STORAGES)}
SEGMENT, INLINE, EXTERNAL, NAMED, MUTABLE, PLANNED, UNALLOCATED = range(len(STORAGES))
CONSTANT_STORAGES = (SEGMENT, INLINE, EXTERNAL)
#: ScalarType code -> element size / dtype name (codes are 0..N-1).
ITEMSIZE = np.array([SCALAR_TYPES[c].itemsize for c in range(len(SCALAR_TYPES))], np.int64)
DTYPE_NAMES = [SCALAR_TYPES[c].name for c in range(len(SCALAR_TYPES))]
#: TensorShapeDynamism names by code (a u8; unknown codes are shown as their number).
SHAPE_DYNAMISM = ("static", "dynamic_bound", "dynamic_unbound")
DYNAMISM_NAMES = [*SHAPE_DYNAMISM, *(str(d) for d in range(len(SHAPE_DYNAMISM), 256))]
#: Larger tensors are corrupt (and would overflow int64 columns).
MAX_TENSOR_BYTES = TENSOR_MAX_BYTES
_EXT = TensorDataLocation.EXTERNAL


class Span(NamedTuple):
    """Bytes of the file: absolute ``offset`` and ``size``."""
    offset: int
    size: int


class Spans(Sequence[Span]):
    """Many spans kept as two int64 columns (``offset``, ``size``); a :class:`Span` is made
    for each item read, so a program with thousands of segments makes none until asked.

    Example:
        >>> s = Spans(np.array([64, 128]), np.array([8, 0]))
        >>> s[-1], len(s), list(s) == [Span(64, 8), Span(128, 0)]
        (Span(offset=128, size=0), 2, True)
    """

    __slots__ = ("offset", "size")

    def __init__(self, offset: np.ndarray, size: np.ndarray) -> None:
        self.offset, self.size = offset, size

    def __len__(self) -> int:
        return len(self.offset)

    @overload
    def __getitem__(self, i: int) -> Span: ...
    @overload
    def __getitem__(self, i: slice) -> list[Span]: ...

    def __getitem__(self, i: int | slice) -> Span | list[Span]:
        if isinstance(i, slice):
            return list(map(Span._make, zip(self.offset[i].tolist(), self.size[i].tolist())))
        return Span(int(self.offset[i]), int(self.size[i]))  # (IndexError as a list's)

    def __iter__(self) -> Iterator[Span]:
        return map(Span._make, zip(self.offset.tolist(), self.size.tolist()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Spans, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Spans({list(self)!r})"


class Subsegment(NamedTuple):
    """A ``SubsegmentOffsets``: its segment, the offsets into it, the segment's absolute start."""
    segment: int
    offsets: list[int]
    base: int


class Placement(NamedTuple):
    """Where one tensor's bytes are (tensors-frame columns; ``None``: nowhere in the file)."""
    nbytes: int
    storage: str
    offset: int | None
    segment: int | None


class Tensors:
    """The tensor values of one method as columns (numpy arrays; ``-1`` = none), named like
    the tensors frame's columns.

    ``value`` (index in the value table), ``fqn`` (object: str or None), ``scalar_type``
    (code, the ``dtype`` column), ``shape``/``dim_order`` (object arrays of tuples),
    ``shape_id`` (equal ids <=> equal shapes), ``nbytes``, ``storage`` (code into
    :data:`STORAGES`), ``offset`` (absolute), ``segment``, ``data_buffer_idx``, ``mem_id``,
    ``mem_offset``, ``shape_dynamism`` (code), ``requires_grad``.
    """

    __slots__ = ("data_buffer_idx", "dim_order", "fqn", "mem_id", "mem_offset", "nbytes",
                 "offset", "requires_grad", "scalar_type", "segment", "shape", "shape_dynamism",
                 "shape_id", "storage", "value")

    def __init__(self, **cols: np.ndarray) -> None:
        for name in self.__slots__:
            setattr(self, name, cols[name])

    def __len__(self) -> int:
        return len(self.value)


class TensorRecord(NamedTuple):
    """One tensor read by the scalar path (fields as in :class:`Tensors`)."""
    value: int
    fqn: str | None
    scalar_type: int
    shape: tuple
    dim_order: tuple
    placement: Placement
    data_buffer_idx: int
    mem_id: int | None
    mem_offset: int | None
    shape_dynamism: int
    requires_grad: bool


def _from_records(records: list[TensorRecord]) -> Tensors:
    """:class:`Tensors` from the scalar path's records."""
    i64 = np.int64
    if not records:
        z = np.zeros(0, i64)
        return Tensors(value=z, fqn=objects([]), scalar_type=z, shape=objects([]), shape_id=z,
                       dim_order=objects([]), nbytes=z, storage=np.zeros(0, np.int8), offset=z,
                       segment=z, data_buffer_idx=z, mem_id=z, mem_offset=z, shape_dynamism=z,
                       requires_grad=np.zeros(0, bool))
    ids: dict[tuple, int] = {}
    shape_id = [ids.setdefault(r.shape, len(ids)) for r in records]

    def opt(col: list) -> np.ndarray:
        return np.array([-1 if x is None else x for x in col], i64)

    places = [r.placement for r in records]
    return Tensors(
        value=np.array([r.value for r in records], i64), fqn=objects([r.fqn for r in records]),
        scalar_type=np.array([r.scalar_type for r in records], i64),
        shape=objects([r.shape for r in records]), shape_id=np.array(shape_id, i64),
        dim_order=objects([r.dim_order for r in records]),
        nbytes=np.array([p.nbytes for p in places], i64),
        storage=np.array([STORAGE_CODE[p.storage] for p in places], np.int8),
        offset=opt([p.offset for p in places]), segment=opt([p.segment for p in places]),
        data_buffer_idx=np.array([r.data_buffer_idx for r in records], i64),
        mem_id=opt([r.mem_id for r in records]), mem_offset=opt([r.mem_offset for r in records]),
        shape_dynamism=np.array([r.shape_dynamism for r in records], i64),
        requires_grad=np.array([r.requires_grad for r in records], bool))


class TensorReader:
    """Reads and places the tensors of one program's methods.

    Args:
        file: the file's path (for errors).
        end: the end of the program's bytes (tensor data must end before it).
        vec: the vectorised reader over the Program flatbuffer.
        constant_segment: ``Program.constant_segment`` (``None``: absent).
        constant_buffer: the legacy inline ``Program.constant_buffer`` entries.
        mutable_segments: ``Program.mutable_data_segments``.
    """

    def __init__(self, file: str, end: int, vec: VecReader, constant_segment: Subsegment | None,
                 constant_buffer: list[Span], mutable_segments: list[Subsegment]) -> None:
        self.file = file
        self.end = end
        self.vec = vec
        self.constant_segment = constant_segment
        self.constant_buffer = constant_buffer
        self.mutable_segments = mutable_segments
        self._cs_table: np.ndarray | None = None

    # -- the scalar verifying path ------------------------------------------------------------
    def values_slow(self, plan: Table) -> tuple[np.ndarray, np.ndarray, Tensors]:
        """(value type codes, value table positions, tensors) of one ``ExecutionPlan``."""
        vtypes, vpos, tensors = [], [], []
        for i, v in enumerate(plan.tables(ExecutionPlan.values, "values")):
            t, tab = v.union(EValue.val_type, len(KernelTypes), "val")
            vtypes.append(t)
            vpos.append(tab.pos if tab is not None else 0)
            if t == KernelTypes.Tensor and tab is not None:
                tensors.append(self.tensor(i, tab))
        return np.array(vtypes, np.int64), np.array(vpos, np.int64), _from_records(tensors)

    def tensor(self, value: int, t: Table) -> TensorRecord:
        """One ``Tensor`` table, verified, and where its bytes are."""
        code = t.i8(T.scalar_type)
        if SCALAR_TYPES.get(code) is None:
            raise CorruptError(f"scalar_type {code} is unknown", file=self.file,
                               structure=f"{t.path}.scalar_type", offset=t.pos)
        sizes = t.scalars(T.sizes, "i", "sizes")
        if any(d < 0 for d in sizes):
            raise CorruptError(f"negative size in sizes {list(sizes)}", file=self.file,
                               structure=f"{t.path}.sizes", offset=t.pos)
        dim_order = t.scalars(T.dim_order, "B", "dim_order")
        dbi = t.u32(T.data_buffer_idx)
        alloc = t.table(T.allocation_info, "allocation_info")
        extra = t.table(T.extra_tensor_info, "extra_tensor_info")
        fqn = None
        location = TensorDataLocation.SEGMENT
        mutable_idx = None
        if extra is not None:
            fqn = extra.string(ExtraTensorInfo.fully_qualified_name, "fully_qualified_name")
            location = extra.u8(ExtraTensorInfo.location)
            if location >= len(TensorDataLocation):
                raise CorruptError(f"location {location} is unknown", file=self.file,
                                   structure=f"{extra.path}.location", offset=extra.pos)
            if extra.has(ExtraTensorInfo.mutable_data_segments_idx):
                mutable_idx = extra.u64(ExtraTensorInfo.mutable_data_segments_idx)
        mem_id = mem_off = None
        if alloc is not None:
            mem_id = alloc.u32(AllocationDetails.memory_id)
            mem_off = (alloc.u32(AllocationDetails.memory_offset_low)
                       | (alloc.u32(AllocationDetails.memory_offset_high) << 32))
        sizes, dim_order = tuple(sizes), tuple(dim_order)
        dyn, rg = t.u8(T.shape_dynamism), t.bool(T.requires_grad)
        where = self.place(code, sizes, dbi, mem_id, mem_off, location, mutable_idx, t)
        return TensorRecord(value, fqn, code, sizes, dim_order, where, dbi, mem_id, mem_off,
                            dyn, rg)

    def place(self, code: int, sizes: tuple, dbi: int, mem_id: int | None, mem_off: int | None,
              location: int, mutable_idx: int | None, t: Table | None) -> Placement:
        """Work out where a tensor's bytes are (both paths).

        ``t`` is the tensor's table on the scalar path (for error messages); on the fast path
        it is ``None`` and any problem raises :class:`SlowPath` so the scalar path reports it.
        """
        def fail(exc: Exception) -> Exception:
            return SlowPath(str(exc)) if t is None else exc

        def out_of_range(what: str, n: int, table: str) -> Exception:
            return fail(OutOfBoundsError(f"data_buffer_idx {dbi} is out of range ({n} {what})",
                                         file=self.file, structure=table, offset=pos))

        where = t.path if t is not None else "Tensor"
        pos = t.pos if t is not None else None
        nbytes = math.prod(sizes) * SCALAR_TYPES[code].itemsize
        if nbytes > MAX_TENSOR_BYTES:
            raise fail(CorruptError(f"sizes {list(sizes)} claim {nbytes} bytes", file=self.file,
                                    structure=f"{where}.sizes", offset=pos))
        if mem_off is not None and mem_off >= MAX_TENSOR_BYTES:
            raise fail(CorruptError(f"memory offset 0x{mem_off:x} is beyond any possible arena",
                                    file=self.file, structure=f"{where}.allocation_info",
                                    offset=pos))
        offset = segment = None
        if location == _EXT:
            storage = "external"
        elif mem_id is not None:
            storage = "planned"
            if dbi and self.mutable_segments:
                mi = mutable_idx or 0
                if mi >= len(self.mutable_segments):
                    raise fail(OutOfBoundsError(
                        f"mutable_data_segments_idx {mi} is out of range "
                        f"({len(self.mutable_segments)} entries)",
                        file=self.file, structure=f"{where}.extra_tensor_info", offset=pos))
                segment, offsets, base = self.mutable_segments[mi]
                if dbi >= len(offsets):
                    raise out_of_range("mutable_data_segments offsets", len(offsets),
                                       f"{where}.data_buffer_idx")
                offset = base + offsets[dbi]
                storage = "mutable"
        elif dbi:
            cs = self.constant_segment
            if cs is not None and len(cs.offsets):
                if dbi >= len(cs.offsets):
                    raise out_of_range("constant_segment offsets", len(cs.offsets),
                                       f"{where}.data_buffer_idx")
                segment, offset, storage = cs.segment, cs.base + cs.offsets[dbi], "segment"
            else:
                if dbi >= len(self.constant_buffer):
                    raise out_of_range("constant buffers", len(self.constant_buffer),
                                       f"{where}.data_buffer_idx")
                offset, size = self.constant_buffer[dbi]
                if nbytes > size:
                    raise fail(OutOfBoundsError(
                        f"{nbytes} bytes of tensor data do not fit the {size}-byte buffer",
                        file=self.file, structure=f"Program.constant_buffer[{dbi}]", offset=offset))
                storage = "inline"
        else:
            storage = "unallocated"
        if offset is not None and offset + nbytes > self.end:
            raise fail(OutOfBoundsError(
                f"{nbytes} bytes of tensor data at 0x{offset:x} run past the end of the file "
                f"(size 0x{self.end:x})", file=self.file, structure=f"{where} data", offset=offset))
        return Placement(nbytes, storage, offset, segment)

    # -- the fast (vectorised) path -----------------------------------------------------------
    def values_fast(self, plan: Table) -> tuple[np.ndarray, np.ndarray, Tensors]:
        """The same as :meth:`values_slow`, vectorised; raises SlowPath on any doubt."""
        start, n = plan.vector(ExecutionPlan.values, 4, "values")
        path = f"{plan.path}.values"
        V = self.vec.table_vector(start, n, path)
        vtypes = V.scalar(EValue.val_type, "u1").astype(np.int64)
        vpos = V.ref(EValue.val)
        if ((vtypes >= len(KernelTypes)) | ((vtypes > 0) & (vpos == 0))).any():
            raise SlowPath("bad union")
        tidx = np.flatnonzero(vtypes == KernelTypes.Tensor)
        return vtypes, vpos, self._tensors_fast(tidx, vpos[tidx], path)

    def values_many(self, plans: list[Table]) -> list[tuple[np.ndarray, np.ndarray, Tensors]]:
        """:meth:`values_fast` of several methods in one vectorised pass (a program of many
        small methods costs about what one method of the same size costs); raises SlowPath
        on any doubt, and the methods are then read one by one."""
        starts, counts = zip(*(plan.vector(ExecutionPlan.values, 4, "values") for plan in plans))
        count = np.array(counts, np.int64)
        first = np.cumsum(count) - count  # each method's first row
        owner = np.repeat(np.arange(len(plans)), count)
        local = np.arange(len(owner), dtype=np.int64) - first[owner]
        at = np.repeat(np.array(starts, np.int64), count) + 4 * local
        V = self.vec.tables(at + self.vec.gather(at, "<u4"), "ExecutionPlan.values")
        vtypes = V.scalar(EValue.val_type, "u1").astype(np.int64)
        vpos = V.ref(EValue.val)
        if ((vtypes >= len(KernelTypes)) | ((vtypes > 0) & (vpos == 0))).any():
            raise SlowPath("bad union")
        rows = np.flatnonzero(vtypes == KernelTypes.Tensor)
        every = self._tensors_fast(local[rows], vpos[rows], "ExecutionPlan.values")
        cut = np.searchsorted(owner[rows], np.arange(len(plans) + 1)).tolist()
        out = []
        for k in range(len(plans)):
            a, b = int(first[k]), int(first[k] + count[k])
            part = Tensors(**{f: getattr(every, f)[cut[k]:cut[k + 1]] for f in Tensors.__slots__})
            out.append((vtypes[a:b], vpos[a:b], part))
        return out

    def _tensors_fast(self, tidx: np.ndarray, tpos: np.ndarray, path: str) -> Tensors:
        vec = self.vec
        tabs = vec.tables(tpos, path)
        codes, shapes, shape_ids, dims, numel = layouts(tabs, T.scalar_type, T.sizes,
                                                        T.dim_order, SCALAR_TYPES)
        n = len(tpos)
        dbi = tabs.scalar(T.data_buffer_idx, "<u4").astype(np.int64)
        alloc_ref = tabs.ref(T.allocation_info)
        has_alloc = alloc_ref > 0
        A = vec.tables(alloc_ref[has_alloc], f"{path}.allocation_info")
        mem_id = np.full(n, -1, np.int64)
        mem_off = np.full(n, -1, np.int64)
        if len(A.pos):
            high = A.scalar(AllocationDetails.memory_offset_high, "<u4").astype(np.int64)
            if high.max() >= 1 << 30:
                raise SlowPath("memory offset beyond 2**62")
            mem_id[has_alloc] = A.scalar(AllocationDetails.memory_id, "<u4")
            mem_off[has_alloc] = (A.scalar(AllocationDetails.memory_offset_low, "<u4")
                                  .astype(np.int64) | (high << 32))
        extra_ref = tabs.ref(T.extra_tensor_info)
        has_extra = extra_ref > 0
        fqn = filled(n, None)
        loc = np.zeros(n, np.int64)
        mut_present = np.zeros(n, bool)
        mut = np.zeros(n, np.uint64)
        if has_extra.any():
            E = vec.tables(extra_ref[has_extra], f"{path}.extra_tensor_info")
            lc = E.scalar(ExtraTensorInfo.location, "u1").astype(np.int64)
            if (lc >= len(TensorDataLocation)).any():
                raise SlowPath("bad location")
            loc[has_extra] = lc
            mut_present[has_extra] = E.field(ExtraTensorInfo.mutable_data_segments_idx, 8) > 0
            mut[has_extra] = E.scalar(ExtraTensorInfo.mutable_data_segments_idx, "<u8")
            fqn[has_extra] = vec.strings(E.ref(ExtraTensorInfo.fully_qualified_name))
        tensors = Tensors(
            value=np.asarray(tidx, np.int64), fqn=fqn, scalar_type=codes, shape=shapes,
            shape_id=shape_ids, dim_order=dims, nbytes=numel * ITEMSIZE[codes],
            storage=np.full(n, UNALLOCATED, np.int8), offset=np.full(n, -1, np.int64),
            segment=np.full(n, -1, np.int64), data_buffer_idx=dbi, mem_id=mem_id,
            mem_offset=mem_off, shape_dynamism=tabs.scalar(T.shape_dynamism, "u1").astype(np.int64),
            requires_grad=tabs.scalar(T.requires_grad, "u1") != 0)
        slow = self._place_fast(tensors, loc == _EXT, has_alloc)
        for k in slow:  # mutable and legacy inline tensors: rare, placed one by one
            r = self.place(int(codes[k]), shapes[k], int(dbi[k]),
                           int(mem_id[k]) if mem_id[k] >= 0 else None,
                           int(mem_off[k]) if mem_off[k] >= 0 else None, int(loc[k]),
                           int(mut[k]) if mut_present[k] else None, None)
            tensors.nbytes[k] = r.nbytes
            tensors.storage[k] = STORAGE_CODE[r.storage]
            tensors.offset[k] = -1 if r.offset is None else r.offset
            tensors.segment[k] = -1 if r.segment is None else r.segment
        return tensors

    def _place_fast(self, t: Tensors, ext: np.ndarray, has_alloc: np.ndarray) -> list[int]:
        """Place external, planned and constant-segment tensors in bulk (fills ``t``'s
        storage, offset, segment); returns the rows left for :meth:`place`."""
        storage, dbi = t.storage, t.data_buffer_idx
        storage[ext] = EXTERNAL
        planned = ~ext & has_alloc
        mutable = planned & (dbi > 0) if self.mutable_segments else np.zeros(len(t), bool)
        storage[planned & ~mutable] = PLANNED
        const = ~ext & ~has_alloc & (dbi > 0)
        cs = self.constant_segment
        slow = np.flatnonzero(mutable).tolist()
        if const.any():
            if cs is not None and len(cs.offsets):
                where = np.flatnonzero(const)
                idx = dbi[where]
                if idx.max() >= len(cs.offsets):
                    raise SlowPath("data_buffer_idx out of range")
                table = self._constant_offsets()
                if table.max() >= 1 << 62:
                    raise SlowPath("absurd offset")
                offs = table[idx].astype(np.int64) + cs.base
                if (offs + t.nbytes[where] > self.end).any():
                    raise SlowPath("tensor data past the end")
                storage[where] = SEGMENT
                t.offset[where] = offs
                t.segment[where] = cs.segment
            else:
                slow += np.flatnonzero(const).tolist()
        return slow

    def _constant_offsets(self) -> np.ndarray:
        """The constant segment's offsets table as uint64 (made once)."""
        if self._cs_table is None:
            assert self.constant_segment is not None
            self._cs_table = np.array(self.constant_segment.offsets, dtype=np.uint64)
        return self._cs_table
