"""ExecuTorch programs (``.pte``): the ``ET12`` flatbuffer, its ``eh00`` extended header
and the segments appended after it.

Layout (facts from the format; field names follow ``program.fbs``)::

    0   u32  root table offset            \
    4   4s   file identifier "ET12"        |  the Program flatbuffer,
    8   eh00 extended header (optional):   |  program_size bytes long
          4s magic "eh00", u32 length,     |
          u64 program_size,                |
          u64 segment_base_offset,         |
          u64 segment_data_size (length > 24)
    ... flatbuffer tables ...             /
    padding up to segment_base_offset
    segments: DataSegment.offset/size are relative to segment_base_offset

Without an extended header the whole file is the flatbuffer and there are no segments.

:func:`read` verifies the header and every structure it visits, and returns a
:class:`~workbench.artifact.Parsed` whose frame builders never touch weight bytes.
"""

from __future__ import annotations

import math
import os
import re
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .._cols import align, booleans, categorical, factorized, filled, ints, objects, strings
from .._fmt import align_of
from .._vecfb import SlowPath, VecReader, groups, layouts
from ..dtypes import SCALAR_TYPES
from ..errors import CorruptError, OutOfBoundsError, TruncatedError, UnsupportedVersionError
from ..flatbuf import FlatBuffer, Table
from ..source import Source
from ._layout import concat_sorted, cover, named_data_role, segments_frame
from .parsed import Parsed

FORMAT = "pte"
MAGIC = b"ET12"
EXTENDED_HEADER_MAGIC = b"eh00"
EXTENDED_HEADER_MIN_LENGTH = 24  # magic, length, program_size, segment_base_offset
EXTENDED_HEADER_LENGTH = 32  # ... + segment_data_size

# Union KernelTypes (EValue.val), in schema order; 0 is NONE.
VALUE_TYPES = (
    "None", "Null", "Int", "Bool", "Double", "Tensor", "String",
    "IntList", "DoubleList", "BoolList", "TensorList", "OptionalTensorList",
)
_TENSOR = VALUE_TYPES.index("Tensor")
# Union InstructionArguments (Instruction.instr_args); 0 is NONE.
INSTRUCTION_TYPES = ("None", "KernelCall", "DelegateCall", "MoveCall", "JumpFalseCall", "FreeCall")
DATA_LOCATIONS = ("inline", "segment")  # BackendDelegateDataReference.location
TENSOR_DATA_LOCATIONS = ("segment", "external")  # ExtraTensorInfo.location
SHAPE_DYNAMISM = ("static", "dynamic_bound", "dynamic_unbound")
# Larger tensors are corrupt (and would overflow int64 columns).
_MAX_TENSOR_BYTES = 1 << 62
# List members of KernelTypes -> (numpy dtype, element size) of their `items` vector.
_LIST_FORMATS = {7: ("<i8", 8), 8: ("<f8", 8), 9: ("u1", 1), 10: ("<i4", 4), 11: ("<i4", 4)}

_I32 = struct.Struct("<i").unpack_from
_U32 = struct.Struct("<I").unpack_from
_I64 = struct.Struct("<q").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_B = struct.Struct("<B").unpack_from
_b = struct.Struct("<b").unpack_from

#: tensors.storage values of a program, by code (the columns keep int8 codes).
STORAGES = ("segment", "inline", "external", "named_data", "mutable", "planned", "unallocated")
_STORAGE_CODE = {name: k for k, name in enumerate(STORAGES)}
_SEGMENT, _INLINE, _EXTERNAL, _NAMED, _MUTABLE, _PLANNED, _UNALLOCATED = range(len(STORAGES))
_CONSTANT_STORAGES = (_SEGMENT, _INLINE, _EXTERNAL)
#: ScalarType code -> element size / dtype name (codes are 0..N-1).
_ITEMSIZE = np.array([SCALAR_TYPES[c].itemsize for c in range(len(SCALAR_TYPES))], np.int64)
_DTYPE_NAMES = [SCALAR_TYPES[c].name for c in range(len(SCALAR_TYPES))]
#: TensorShapeDynamism by code (a u8; unknown codes are shown as their number).
_DYNAMISM_NAMES = [*SHAPE_DYNAMISM, *(str(d) for d in range(len(SHAPE_DYNAMISM), 256))]


#: Columns of a program's tensors frame.
_TENSOR_COLUMNS = ("name", "dtype", "shape", "nbytes", "storage", "file", "offset", "align",
                   "method", "value", "fqn", "dim_order", "segment", "data_buffer_idx", "mem_id",
                   "mem_offset", "shape_dynamism", "requires_grad", "has_layout", "missing",
                   "used_by")


class _Tensors:
    """The tensor values of one method as columns (numpy arrays; ``-1`` = none).

    ``value`` (index in the value table), ``fqn`` (object: str or None), ``code`` (ScalarType),
    ``shape``/``dim_order`` (object arrays of tuples), ``shape_id`` (equal ids <=> equal
    shapes), ``nbytes``, ``storage`` (code into :data:`STORAGES`), ``offset`` (absolute),
    ``segment``, ``dbi`` (data_buffer_idx), ``mem_id``, ``mem_off``, ``dyn`` (shape
    dynamism code), ``rg`` (requires_grad).
    """

    __slots__ = ("code", "dbi", "dim_order", "dyn", "fqn", "mem_id", "mem_off", "nbytes",
                 "offset", "rg", "segment", "shape", "shape_id", "storage", "value")

    def __init__(self, **cols: np.ndarray) -> None:
        for name in self.__slots__:
            setattr(self, name, cols[name])

    def __len__(self) -> int:
        return len(self.value)

    @classmethod
    def from_records(cls, records: list[tuple]) -> _Tensors:
        """From the scalar path's records (see :meth:`_ProgramReader._place`)."""
        i64 = np.int64
        if not records:
            z = np.zeros(0, i64)
            return cls(value=z, fqn=objects([]), code=z, shape=objects([]), shape_id=z,
                       dim_order=objects([]), nbytes=z, storage=np.zeros(0, np.int8), offset=z,
                       segment=z, dbi=z, mem_id=z, mem_off=z, dyn=z, rg=np.zeros(0, bool))
        (_, value, fqn, code, shape, dims, nbytes, storage, offset, segment, dbi, mem_id,
         mem_off, dyn, rg) = zip(*records)
        ids: dict[tuple, int] = {}
        shape_id = [ids.setdefault(sh, len(ids)) for sh in shape]

        def opt(col: tuple) -> np.ndarray:
            return np.array([-1 if x is None else x for x in col], i64)

        return cls(value=np.array(value, i64), fqn=objects(fqn), code=np.array(code, i64),
                   shape=objects(shape), shape_id=np.array(shape_id, i64),
                   dim_order=objects(dims), nbytes=np.array(nbytes, i64),
                   storage=np.array([_STORAGE_CODE[x] for x in storage], np.int8),
                   offset=opt(offset), segment=opt(segment), dbi=np.array(dbi, i64),
                   mem_id=opt(mem_id), mem_off=opt(mem_off), dyn=np.array(dyn, i64),
                   rg=np.array(rg, bool))


def detect(head: bytes) -> bool:
    """True when ``head`` (the first bytes of a file) looks like an ExecuTorch program.

    Any ``ET``+two digits identifier counts, so unsupported versions get a clear error.

    Example:
        >>> detect(b"\\x20\\x00\\x00\\x00ET12eh00")
        True
    """
    return len(head) >= 8 and head[4:6] == b"ET" and head[6:8].isdigit()


class ExtendedHeader:
    """The ``eh00`` header at byte 8 of a ``.pte`` (absent when a program has no segments).

    Attributes keep the format's own names: ``length``, ``program_size``,
    ``segment_base_offset``, ``segment_data_size`` (``None`` when ``length <= 24``).
    """

    __slots__ = ("length", "program_size", "segment_base_offset", "segment_data_size")
    OFFSET = 8
    EXPECTED_MAGIC = EXTENDED_HEADER_MAGIC

    def __init__(self, length: int, program_size: int, segment_base_offset: int,
                 segment_data_size: int | None) -> None:
        self.length = length
        self.program_size = program_size
        self.segment_base_offset = segment_base_offset
        self.segment_data_size = segment_data_size

    @classmethod
    def read(cls, src: Source, at: int = 8) -> ExtendedHeader | None:
        """Read the header at ``at`` (relative offsets are to the program start ``at-8``).

        Returns ``None`` when the magic is not there; raises when it is there but broken.
        """
        if src.size < at + 4 or src.bytes(at, 4, "extended header magic") != EXTENDED_HEADER_MAGIC:
            return None
        length = src.u32(at + 4, "extended header length")
        if length < EXTENDED_HEADER_MIN_LENGTH:
            raise CorruptError(
                f"length {length} is shorter than the minimum {EXTENDED_HEADER_MIN_LENGTH}",
                file=src.path, structure="extended header (eh00)", offset=at + 4,
            )
        src.check(at, min(length, EXTENDED_HEADER_LENGTH), "extended header (eh00)")
        program_size = src.u64(at + 8, "extended header program_size")
        base = src.u64(at + 16, "extended header segment_base_offset")
        data_size = src.u64(at + 24, "extended header segment_data_size") if length > 24 else None
        return cls(length, program_size, base, data_size)

    def __repr__(self) -> str:
        return (f"ExtendedHeader(length={self.length}, program_size={self.program_size}, "
                f"segment_base_offset={self.segment_base_offset}, "
                f"segment_data_size={self.segment_data_size})")


def read(src: Source, data: Sequence[Parsed] = (), siblings: Iterable[Parsed] = ()) -> Parsed:
    """Read the ``.pte`` in ``src`` (verified, zero-copy) into a :class:`Parsed`.

    Args:
        src: the program file.
        data: parsed ``.ptd`` files given explicitly: always attached.
        siblings: parsed ``.ptd`` files found next to the program, best first (may be a lazy
            iterator: it is consumed only while the program has unresolved keys); attached
            only when they hold a key the program refers to (an external tensor's name and
            layout, or a content-hash key that a delegate blob mentions).
    """
    return read_program(src, 0, src.size, outer=FORMAT, data=data, siblings=siblings)


def read_program(src: Source, start: int, end: int, outer: str = FORMAT,
                 data: Sequence[Parsed] = (), siblings: Iterable[Parsed] = ()) -> Parsed:
    """Read a program stored in ``src[start:end)`` (``start`` > 0 for one embedded in a .bpte)."""
    reader = _ProgramReader(src, start, end)
    reader.parse()
    reader.attach(data, siblings)
    return reader.parsed(outer)


def sibling_data_files(path: str) -> list[str]:
    """``.ptd`` files in the same folder as ``path``, candidates for its external data: the
    one named like the program first, then the rest in name order."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    base = os.path.dirname(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    found = [n for n in names if n.endswith(".ptd") and os.path.isfile(os.path.join(folder, n))]
    found.sort(key=lambda n: n[:-4] != stem)
    return [os.path.join(base, n) for n in found]




class _ProgramReader:
    """Walks the Program flatbuffer once and keeps compact records for the frames."""

    #: Try the vectorised path first (tests turn it off to compare with the scalar path).
    fast = True

    def __init__(self, src: Source, start: int, end: int) -> None:
        self.src = src
        self.start = start
        self.end = end
        self.file = src.path
        self.findings: list[dict[str, Any]] = []

    # -- header -----------------------------------------------------------------------
    def _header(self) -> None:
        src, start, end = self.src, self.start, self.end
        size = end - start
        if size < 8:
            raise TruncatedError(f"{size} bytes is too short for a program (needs 8)",
                                 file=self.file, structure="program header", offset=start)
        ident = src.bytes(start + 4, 4, "file identifier")
        if ident != MAGIC:
            if ident[:2] == b"ET":
                raise UnsupportedVersionError(
                    f"program version {ident!r} is not supported (expected {MAGIC!r})",
                    file=self.file, structure="file identifier", offset=start + 4)
            raise CorruptError(f"file identifier is {ident!r}, expected {MAGIC!r}",
                               file=self.file, structure="file identifier", offset=start + 4)
        eh = ExtendedHeader.read(src, start + 8) if size >= 12 else None
        self.header = eh
        if eh is None:
            self.program_size = size
            self.segment_base = None
            self.segment_data_size = 0
            return
        hdr = "extended header (eh00)"
        if eh.program_size > size or eh.program_size < 8 + min(eh.length, EXTENDED_HEADER_LENGTH):
            raise OutOfBoundsError(
                f"program_size 0x{eh.program_size:x} is outside the file (size 0x{size:x})"
                if eh.program_size > size else
                f"program_size {eh.program_size} is smaller than the header itself",
                file=self.file, structure=f"{hdr} program_size", offset=start + 16)
        if eh.length > eh.program_size - 8:
            raise CorruptError(f"length {eh.length} runs past program_size {eh.program_size}",
                               file=self.file, structure=f"{hdr} length", offset=start + 12)
        self.program_size = eh.program_size
        base = eh.segment_base_offset
        if base == 0:
            self.segment_base = None
            self.segment_data_size = 0
            return
        if base < eh.program_size or base > size:
            raise OutOfBoundsError(
                f"segment_base_offset 0x{base:x} lies "
                + ("inside the program flatbuffer" if base < eh.program_size else
                   f"past the end of the file (size 0x{size:x})"),
                file=self.file, structure=f"{hdr} segment_base_offset", offset=start + 24)
        data = eh.segment_data_size
        if data is not None and base + data > size:
            raise TruncatedError(
                f"segment data (0x{base:x} + 0x{data:x}) runs past the end of the file "
                f"(size 0x{size:x})",
                file=self.file, structure=f"{hdr} segment_data_size", offset=start + 32)
        self.segment_base = start + base
        self.segment_data_size = data if data is not None else size - base

    # -- program ------------------------------------------------------------------------------
    def parse(self) -> None:
        self._header()
        fb = FlatBuffer(self.src, self.start, self.start + self.program_size,
                        identifier=MAGIC, name="Program")
        self.fb = fb
        self.vec = VecReader(fb)
        prog = fb.root("Program")
        self.version = prog.u32(0)
        # Segments first: everything else points into them.
        self.segments = []  # (abs offset, size)
        for k, seg in enumerate(prog.tables(4, "segments")):
            off, size = seg.u64(0), seg.u64(1)
            if self.segment_base is None:
                if off or size:
                    raise CorruptError(
                        f"segment {k} [0x{off:x}, +0x{size:x}) is listed but the file has no "
                        "extended header to locate segment data",
                        file=self.file, structure=f"Program.segments[{k}]", offset=seg.pos)
                # ExecuTorch writes empty segments without a header: they sit at the end.
                self.segments.append((self.start + self.program_size, 0))
                continue
            if off + size > self.segment_data_size:
                raise OutOfBoundsError(
                    f"segment {k} [0x{off:x}, +0x{size:x}) runs past the segment data "
                    f"(size 0x{self.segment_data_size:x}, ends at file offset "
                    f"0x{self.segment_base + self.segment_data_size:x})",
                    file=self.file, structure=f"Program.segments[{k}]", offset=seg.pos)
            self.segments.append((self.segment_base + off, size))
        self._check_overlap()
        # Constant data.
        self.constant_buffer = []  # (abs offset, size) of legacy inline Buffer.storage
        for b in prog.tables(2, "constant_buffer"):
            start, n = b.vector(0, 1, "storage")
            self.constant_buffer.append((start, n))
        cs = prog.table(5, "constant_segment")
        self.constant_segment = self._subsegment(cs, "Program.constant_segment") if cs else None
        inline_bytes = sum(n for _, n in self.constant_buffer)
        if inline_bytes and not (self.constant_segment and len(self.constant_segment[1])):
            self.findings.append({
                "severity": "warning", "structure": "Program.constant_buffer",
                "offset": next(at for at, n in self.constant_buffer if n),
                "message": f"{inline_bytes} bytes of "
                "constants inline in the flatbuffer (the legacy constant_buffer): ExecuTorch's "
                "runtime (1.5.1) refuses such a program unless built with "
                "ET_ENABLE_DEPRECATED_CONSTANT_BUFFER"})
        self.mutable_segments = [
            self._subsegment(t, t.path) for t in prog.tables(6, "mutable_data_segments")
        ]
        if len(self.mutable_segments) > 1:
            self.findings.append({
                "severity": "warning", "structure": "Program.mutable_data_segments",
                "offset": prog.pos, "message": f"{len(self.mutable_segments)} mutable data "
                "segments: tensors are placed by ExtraTensorInfo.mutable_data_segments_idx as the "
                "schema says, but ExecuTorch's runtime (1.5.1) reads every initial value from "
                "mutable_data_segments[0] and its Python deserializer refuses such a program"})
        # Delegate data stored inline in the flatbuffer.
        self.inline_delegate_data = [t.vector(0, 1, "data") for t in prog.tables(3, "backend_delegate_data")]
        # Named data.
        self.named = []  # (key, segment_index)
        for t in prog.tables(7, "named_data"):
            key = t.string(0, "key")
            si = t.u32(1)
            if si >= len(self.segments):
                raise OutOfBoundsError(
                    f"segment_index {si} is out of range ({len(self.segments)} segments)",
                    file=self.file, structure=f"{t.path}.segment_index", offset=t.pos)
            self.named.append((key if key is not None else "", si))
        self.methods = [self._plan(k, t) for k, t in enumerate(prog.tables(1, "execution_plan"))]

    def _subsegment(self, t: Table, path: str) -> tuple[int, Any, int]:
        """(segment index, offsets as numpy u64 view, abs base) of a SubsegmentOffsets."""
        si = t.u32(0)
        offsets = t.array(1, "<u8", "offsets").tolist()
        if len(offsets) and si >= len(self.segments):
            raise OutOfBoundsError(
                f"segment_index {si} is out of range ({len(self.segments)} segments)",
                file=self.file, structure=f"{path}.segment_index", offset=t.pos)
        base = self.segments[si][0] if si < len(self.segments) else 0
        return si, offsets, base

    def _check_overlap(self) -> None:
        order = sorted(range(len(self.segments)), key=lambda i: self.segments[i])
        prev_end, prev = 0, -1
        for i in order:
            off, size = self.segments[i]
            if size and off < prev_end:
                raise CorruptError(
                    f"segment {i} [0x{off:x}, 0x{off + size:x}) overlaps segment {prev}",
                    file=self.file, structure=f"Program.segments[{i}]", offset=off)
            if size:
                prev_end, prev = off + size, i

    # -- methods ------------------------------------------------------------------------------
    def _plan(self, m: int, plan: Table) -> dict[str, Any]:
        name = plan.string(0, "name")
        name = name if name is not None else f"method{m}"
        try:
            if not self.fast:
                raise SlowPath("disabled")
            vtypes, vpos, tensors = self._values_fast(m, plan)
            n_chains, n_instr, kinds, kernel_uses, delegate_uses = self._instructions_fast(plan)
        except SlowPath:
            vtypes, vpos, tensors = self._values_slow(m, plan)
            n_chains, n_instr, kinds, kernel_uses, delegate_uses = self._instructions_slow(plan)
        operators = [(o.string(0, "name") or "", o.string(1, "overload") or "")
                     for o in plan.tables(6, "operators")]
        delegates = []
        for k, d in enumerate(plan.tables(7, "delegates")):
            ref = d.table(1, "processed")
            loc = ref.u8(0) if ref else 0
            idx = ref.u32(1) if ref else 0
            if loc >= len(DATA_LOCATIONS):
                raise CorruptError(f"data location {loc} is unknown",
                                   file=self.file, structure=f"{d.path}.processed.location",
                                   offset=ref.pos if ref else d.pos)
            if loc == 1:
                if idx >= len(self.segments):
                    raise OutOfBoundsError(
                        f"segment index {idx} is out of range ({len(self.segments)} segments)",
                        file=self.file, structure=f"{d.path}.processed.index",
                        offset=ref.pos if ref else d.pos)
                off, size = self.segments[idx]
            else:
                if idx >= len(self.inline_delegate_data):
                    raise OutOfBoundsError(
                        f"inline delegate data index {idx} is out of range "
                        f"({len(self.inline_delegate_data)} entries)",
                        file=self.file, structure=f"{d.path}.processed.index",
                        offset=ref.pos if ref else d.pos)
                off, size = self.inline_delegate_data[idx]
            specs = [s.string(0, "key") or "" for s in d.tables(2, "compile_specs")]
            delegates.append({
                "id": d.string(0, "id") or "", "location": DATA_LOCATIONS[loc], "index": idx,
                "offset": off, "size": size, "compile_specs": specs,
                "calls": delegate_uses.get(k, 0),
            })
        buffer_sizes = plan.scalars(8, "q", "non_const_buffer_sizes")
        if any(b < 0 for b in buffer_sizes) or sum(buffer_sizes) > _MAX_TENSOR_BYTES:
            raise CorruptError(f"non_const_buffer_sizes {list(buffer_sizes)[:8]} are negative or "
                               "add up to more than any memory", file=self.file,
                               structure=f"{plan.path}.non_const_buffer_sizes", offset=plan.pos)
        return {
            "name": name, "index": m, "vtypes": vtypes, "vpos": vpos, "tensors": tensors,
            "inputs": plan.scalars(3, "i", "inputs"), "outputs": plan.scalars(4, "i", "outputs"),
            "chains": n_chains, "instructions": n_instr, "instruction_kinds": kinds,
            "operators": operators, "kernel_uses": kernel_uses, "delegates": delegates,
            "buffer_sizes": buffer_sizes,
        }

    # -- values and instructions: a vectorised fast path and the scalar verifying path ----------
    def _values_slow(self, m: int, plan: Table) -> tuple[np.ndarray, np.ndarray, _Tensors]:
        vtypes, vpos, tensors = [], [], []
        for i, v in enumerate(plan.tables(2, "values")):
            t, tab = v.union(0, len(VALUE_TYPES), "val")
            vtypes.append(t)
            vpos.append(tab.pos if tab is not None else 0)
            if t == _TENSOR and tab is not None:
                tensors.append(self._tensor(m, i, tab))
        return np.array(vtypes, np.int64), np.array(vpos, np.int64), _Tensors.from_records(tensors)

    def _values_fast(self, m: int, plan: Table) -> tuple[np.ndarray, np.ndarray, _Tensors]:
        start, n = plan.vector(2, 4, "values")
        path = f"{plan.path}.values"
        vec = self.vec
        V = vec.table_vector(start, n, path)
        vtypes = V.scalar(0, "u1").astype(np.int64)
        vpos = V.ref(1)
        if ((vtypes >= len(VALUE_TYPES)) | ((vtypes > 0) & (vpos == 0))).any():
            raise SlowPath("bad union")
        tidx = np.flatnonzero(vtypes == _TENSOR)
        return vtypes, vpos, self._tensors_fast(m, tidx, vpos[tidx], path)

    def _tensors_fast(self, m: int, tidx: np.ndarray, tpos: np.ndarray, path: str) -> _Tensors:
        vec = self.vec
        T = vec.tables(tpos, path)
        codes, shapes, shape_ids, dims, numel = layouts(T, 0, 2, 3, SCALAR_TYPES)
        n = len(tpos)
        dbi = T.scalar(5, "<u4").astype(np.int64)
        rg = T.scalar(4, "u1") != 0
        dyn = T.scalar(8, "u1").astype(np.int64)
        alloc_ref = T.ref(6)
        has_alloc = alloc_ref > 0
        A = vec.tables(alloc_ref[has_alloc], f"{path}.allocation_info")
        mem_id = np.full(n, -1, np.int64)
        mem_off = np.full(n, -1, np.int64)
        if len(A.pos):
            high = A.scalar(2, "<u4").astype(np.int64)
            if high.max() >= 1 << 30:
                raise SlowPath("memory offset beyond 2**62")
            mem_id[has_alloc] = A.scalar(0, "<u4")
            mem_off[has_alloc] = A.scalar(1, "<u4").astype(np.int64) | (high << 32)
        extra_ref = T.ref(9)
        has_extra = extra_ref > 0
        fqn = filled(n, None)
        loc = np.zeros(n, np.int64)
        mut_present = np.zeros(n, bool)
        mut = np.zeros(n, np.uint64)
        if has_extra.any():
            E = vec.tables(extra_ref[has_extra], f"{path}.extra_tensor_info")
            lc = E.scalar(2, "u1").astype(np.int64)
            if (lc >= len(TENSOR_DATA_LOCATIONS)).any():
                raise SlowPath("bad location")
            loc[has_extra] = lc
            mut_present[has_extra] = E.field(0, 8) > 0
            mut[has_extra] = E.scalar(0, "<u8")
            fqn[has_extra] = vec.strings(E.ref(1))
        nbytes = numel * _ITEMSIZE[codes]
        storage = np.full(n, _UNALLOCATED, np.int8)
        offset = np.full(n, -1, np.int64)
        segment = np.full(n, -1, np.int64)
        ext = loc == 1
        storage[ext] = _EXTERNAL
        planned = ~ext & has_alloc
        mutable = planned & (dbi > 0) if self.mutable_segments else np.zeros(n, bool)
        storage[planned & ~mutable] = _PLANNED
        const = ~ext & ~has_alloc & (dbi > 0)
        cs = self.constant_segment
        slow = np.flatnonzero(mutable).tolist()
        if const.any():
            if cs is not None and len(cs[1]):
                where = np.flatnonzero(const)
                idx = dbi[where]
                if idx.max() >= len(cs[1]):
                    raise SlowPath("data_buffer_idx out of range")
                table = self._constant_offsets()
                if table.max() >= 1 << 62:
                    raise SlowPath("absurd offset")
                offs = table[idx].astype(np.int64) + cs[2]
                if (offs + nbytes[where] > self.end).any():
                    raise SlowPath("tensor data past the end")
                storage[where] = _SEGMENT
                offset[where] = offs
                segment[where] = cs[0]
            else:
                slow += np.flatnonzero(const).tolist()
        values = np.asarray(tidx, np.int64)
        for k in slow:  # mutable and legacy inline tensors: rare, placed one by one
            r = self._place(m, int(values[k]), fqn[k], int(codes[k]), shapes[k], dims[k],
                            int(dbi[k]), int(mem_id[k]) if mem_id[k] >= 0 else None,
                            int(mem_off[k]) if mem_off[k] >= 0 else None, int(loc[k]),
                            int(mut[k]) if mut_present[k] else None, int(dyn[k]), bool(rg[k]),
                            None)
            nbytes[k] = r[6]
            storage[k] = _STORAGE_CODE[r[7]]
            offset[k] = -1 if r[8] is None else r[8]
            segment[k] = -1 if r[9] is None else r[9]
        return _Tensors(value=values, fqn=fqn, code=codes, shape=shapes, shape_id=shape_ids,
                        dim_order=dims, nbytes=nbytes, storage=storage, offset=offset,
                        segment=segment, dbi=dbi, mem_id=mem_id, mem_off=mem_off, dyn=dyn, rg=rg)

    def _constant_offsets(self) -> np.ndarray:
        """The constant segment's offsets table as uint64 (made once)."""
        table = getattr(self, "_cs_table", None)
        if table is None:
            table = self._cs_table = np.array(self.constant_segment[1], dtype=np.uint64)
        return table

    def _instructions_slow(self, plan: Table) -> tuple:
        chains = plan.tables(5, "chains")
        n_instr = 0
        kernel_uses: dict[int, int] = {}
        delegate_uses: dict[int, int] = {}
        kinds = [0] * len(INSTRUCTION_TYPES)
        for c in chains:
            for ins in c.tables(2, "instructions"):
                n_instr += 1
                t, arg = ins.union(0, len(INSTRUCTION_TYPES), "instr_args")
                kinds[t] += 1
                if t == 1 and arg is not None:
                    op = arg.i32(0)
                    kernel_uses[op] = kernel_uses.get(op, 0) + 1
                elif t == 2 and arg is not None:
                    d = arg.i32(0)
                    delegate_uses[d] = delegate_uses.get(d, 0) + 1
        return len(chains), n_instr, kinds, kernel_uses, delegate_uses

    def _instructions_fast(self, plan: Table) -> tuple:
        vec = self.vec
        chains = plan.tables(5, "chains")
        kinds = np.zeros(len(INSTRUCTION_TYPES), np.int64)
        kernel_uses: dict[int, int] = {}
        delegate_uses: dict[int, int] = {}
        n_instr = 0
        for c in chains:
            start, n = c.vector(2, 4, "instructions")
            n_instr += n
            if not n:
                continue
            ins = vec.table_vector(start, n, f"{c.path}.instructions")
            t = ins.scalar(0, "u1").astype(np.int64)
            ref = ins.ref(1)
            if ((t >= len(INSTRUCTION_TYPES)) | ((t > 0) & (ref == 0))).any():
                raise SlowPath("bad union")
            kinds += np.bincount(t, minlength=len(INSTRUCTION_TYPES))
            for typ, uses in ((1, kernel_uses), (2, delegate_uses)):
                sel = ref[t == typ]
                if len(sel):
                    idx = vec.tables(sel, f"{c.path}.instructions").scalar(0, "<i4")
                    u, cnt = np.unique(idx, return_counts=True)
                    for a, b in zip(u.tolist(), cnt.tolist()):
                        uses[a] = uses.get(a, 0) + b
        return len(chains), n_instr, kinds.tolist(), kernel_uses, delegate_uses

    def _tensor(self, m: int, value: int, t: Table) -> tuple:
        """One compact tensor record (see ``_TENSOR_FIELDS``)."""
        code = t.i8(0)
        dt = SCALAR_TYPES.get(code)
        if dt is None:
            raise CorruptError(f"scalar_type {code} is unknown", file=self.file,
                               structure=f"{t.path}.scalar_type", offset=t.pos)
        sizes = t.scalars(2, "i", "sizes")
        if any(d < 0 for d in sizes):
            raise CorruptError(f"negative size in sizes {list(sizes)}", file=self.file,
                               structure=f"{t.path}.sizes", offset=t.pos)
        dim_order = t.scalars(3, "B", "dim_order")
        dbi = t.u32(5)
        alloc = t.table(6, "allocation_info")
        extra = t.table(9, "extra_tensor_info")
        fqn = None
        location = 0
        mutable_idx = None
        if extra is not None:
            fqn = extra.string(1, "fully_qualified_name")
            location = extra.u8(2)
            if location >= len(TENSOR_DATA_LOCATIONS):
                raise CorruptError(f"location {location} is unknown", file=self.file,
                                   structure=f"{extra.path}.location", offset=extra.pos)
            if extra.has(0):
                mutable_idx = extra.u64(0)
        mem_id = mem_off = None
        if alloc is not None:
            mem_id = alloc.u32(0)
            mem_off = alloc.u32(1) | (alloc.u32(2) << 32)
        return self._place(m, value, fqn, code, tuple(sizes), tuple(dim_order), dbi, mem_id,
                           mem_off, location, mutable_idx, t.u8(8), t.bool(4), t)

    def _place(self, m: int, value: int, fqn: str | None, code: int, sizes: tuple, dim_order: tuple,
               dbi: int, mem_id: int | None, mem_off: int | None, location: int,
               mutable_idx: int | None, dyn: int, rg: bool, t: Table | None) -> tuple:
        """Work out where a tensor's bytes are; returns the compact tensor record.

        ``t`` is the tensor's table on the scalar path (for error messages); on the fast path
        it is ``None`` and any problem raises :class:`SlowPath` so the scalar path reports it.
        """
        def fail(exc: Exception) -> Exception:
            return SlowPath(str(exc)) if t is None else exc

        where = t.path if t is not None else "Tensor"
        pos = t.pos if t is not None else None
        nbytes = math.prod(sizes) * SCALAR_TYPES[code].itemsize
        if nbytes > _MAX_TENSOR_BYTES:
            raise fail(CorruptError(f"sizes {list(sizes)} claim {nbytes} bytes", file=self.file,
                                    structure=f"{where}.sizes", offset=pos))
        if mem_off is not None and mem_off >= _MAX_TENSOR_BYTES:
            raise fail(CorruptError(f"memory offset 0x{mem_off:x} is beyond any possible arena",
                                    file=self.file, structure=f"{where}.allocation_info",
                                    offset=pos))
        offset = None
        segment = None
        if location == 1:
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
                    raise fail(OutOfBoundsError(
                        f"data_buffer_idx {dbi} is out of range ({len(offsets)} "
                        "mutable_data_segments offsets)",
                        file=self.file, structure=f"{where}.data_buffer_idx", offset=pos))
                offset = base + offsets[dbi]
                storage = "mutable"
        elif dbi:
            cs = self.constant_segment
            if cs is not None and len(cs[1]):
                segment, offsets, base = cs
                if dbi >= len(offsets):
                    raise fail(OutOfBoundsError(
                        f"data_buffer_idx {dbi} is out of range ({len(offsets)} "
                        "constant_segment offsets)",
                        file=self.file, structure=f"{where}.data_buffer_idx", offset=pos))
                offset = base + offsets[dbi]
                storage = "segment"
            else:
                if dbi >= len(self.constant_buffer):
                    raise fail(OutOfBoundsError(
                        f"data_buffer_idx {dbi} is out of range "
                        f"({len(self.constant_buffer)} constant buffers)",
                        file=self.file, structure=f"{where}.data_buffer_idx", offset=pos))
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
        return (m, value, fqn, code, sizes, dim_order, nbytes, storage, offset, segment, dbi,
                mem_id, mem_off, dyn, rg)

    # -- external data -------------------------------------------------------------------------
    _HEX_KEY = re.compile(rb"[0-9a-f]{64}")
    _MAX_SCANNED_BLOB = 64 << 20

    def _blobs(self) -> list[tuple[str, memoryview]]:
        """(label, bytes) of every delegate blob small enough to scan (up to 64 MiB)."""
        out = []
        for plan in self.methods:
            for k, d in enumerate(plan["delegates"]):
                if d["size"] <= self._MAX_SCANNED_BLOB:
                    out.append((f"{plan['name']} delegate {k} ({d['id']})",
                                self.src.buf[d["offset"]: d["offset"] + d["size"]]))
        return out

    def _hex_keys(self) -> dict[str, list[str]]:
        """Content-hash keys (64 hex digits, the XNNPACK convention) each blob mentions
        (the blobs are scanned once per program)."""
        found = getattr(self, "_hex_key_cache", None)
        if found is None:
            found = {}
            for label, blob in self._blobs():
                for m in set(self._HEX_KEY.findall(blob)):
                    found.setdefault(m.decode(), []).append(label)
            self._hex_key_cache = found
        return found

    def _delegate_keys(self, candidates: set[str]) -> dict[str, list[str]]:
        """key -> delegates whose processed blob mentions it (blobs up to 64 MiB are scanned)."""
        found = {k: v for k, v in self._hex_keys().items() if k in candidates}
        plain = [k for k in candidates
                 if k and not (len(k) == 64 and self._HEX_KEY.fullmatch(k.encode()))]
        if plain and len(plain) <= 4096:
            for label, blob in self._blobs():
                raw = bytes(blob)
                for key in plain:
                    if key.encode() in raw:
                        found.setdefault(key, []).append(label)
        return found

    def _external_wants(self) -> dict[str, tuple[str, tuple, int]]:
        """fqn -> (dtype name, shape, nbytes) of every external tensor of the program."""
        out: dict[str, tuple[str, tuple, int]] = {}
        for plan in self.methods:
            t = plan["tensors"]
            for k in np.flatnonzero(t.storage == _EXTERNAL).tolist():
                fqn = t.fqn[k]
                if fqn is not None:
                    out[fqn] = (_DTYPE_NAMES[t.code[k]], t.shape[k], int(t.nbytes[k]))
        return out

    def attach(self, data: Sequence[Parsed], siblings: Iterable[Parsed]) -> None:
        """Choose the ``.ptd`` files that hold this program's external data.

        Explicit ``data`` files are always attached. ``siblings`` (best candidates first) are
        consumed lazily, only while some key is still unresolved, and attached only when they
        resolve one (see :meth:`resolves`). ``self.data_choice`` records, per attached file,
        how it came (``data`` or ``sibling``) and how many wanted keys it resolved.
        """
        self.wants = self._external_wants()
        own = {k for k, _ in self.named}
        self.hex_wanted = set(self._hex_keys()) - own
        self.data = list(data)
        self.data_choice: dict[str, tuple[str, int]] = {}
        unresolved = set(self.wants) | self.hex_wanted
        for p in data:
            hits = self.resolves(p)
            self.data_choice[p.path] = ("data", len(hits))
            unresolved -= hits
        if unresolved:
            for p in siblings:
                new = self.resolves(p) & unresolved
                if new:
                    self.data.append(p)
                    self.data_choice[p.path] = ("sibling", len(new))
                    unresolved -= new
                else:
                    p.sources[p.path].close()
                if not unresolved:
                    break
        keys = set(own)
        for p in self.data:
            keys.update(p.extra["ptd"].by_key)
        self.key_users = self._delegate_keys(keys)

    def resolves(self, p: Parsed) -> set[str]:
        """The keys this program wants that the parsed ``.ptd`` ``p`` holds: external tensors
        whose dtype/shape agree with the entry, and content-hash keys that a delegate blob
        mentions and the program does not hold itself."""
        ptd = p.extra["ptd"]
        by_key = ptd.by_key
        hits = {k for k, w in self.wants.items() if k in by_key and ptd.fits(by_key[k], *w)}
        return hits | (self.hex_wanted & set(by_key))

    # -- records for the frames --------------------------------------------------------------
    def parsed(self, outer: str) -> Parsed:
        sources = {self.file: self.src}
        for d in self.data:
            sources.update(d.sources)
        p = Parsed(format=outer, path=self.file, sources=sources)
        p.info.update({
            "data_files": [d.path for d in self.data],
            "version": self.version, "program_size": self.program_size,
            "segment_base_offset": (self.segment_base - self.start) if self.segment_base else 0,
            "extended_header": self.header,
        })
        p.builders.update({
            "segments": lambda: segments_frame(self._segments_raw()),
            "tensors": self._tensors_columns,
            "methods": self._methods_columns,
            "values": self._values_columns,
            "operators": self._operators_columns,
            "delegates": self._delegates_columns,
            "named_data": self._named_columns,
            "memory_plan": self._memory_plan_columns,
        })
        p.extra["segments_raw"] = self._segments_raw
        # for validate(): how each data file came, and whether other .ptd files fit too
        p.extra["data_choice"] = self.data_choice
        p.extra["resolves"] = self.resolves
        p.extra["wanted_keys"] = len(self.wants) + len(self.hex_wanted)
        p.extra["span"] = (self.start, self.end)  # the bytes of the file this program covers
        p.findings = self.findings  # shared: frame builders add findings lazily
        return p

    # Segment uses: segment index -> list of (kind, label)
    def _segment_uses(self) -> dict[int, list[tuple[str, str]]]:
        uses: dict[int, list[tuple[str, str]]] = {}
        if self.constant_segment is not None:
            uses.setdefault(self.constant_segment[0], []).append(("constant", "constant_segment"))
        for k, (si, _, _) in enumerate(self.mutable_segments):
            uses.setdefault(si, []).append(("mutable_data", f"mutable_data_segments[{k}]"))
        for plan in self.methods:
            for k, d in enumerate(plan["delegates"]):
                if d["location"] == "segment":
                    uses.setdefault(d["index"], []).append(
                        ("delegate", f"{plan['name']} delegate {k} ({d['id']})"))
        for key, si in self.named:
            uses.setdefault(si, []).append(("named_data", key))
        return uses

    def _segments_raw(self) -> dict[str, Any]:
        """Raw segment columns of the program and its data files (see ``_layout``)."""
        rows: list[tuple] = []  # (offset, size, name, kind, index, used_by)
        s = self.start
        rows.append((s, 8, "flatbuffer root", "header", None, "root offset + ET12"))
        fb_start = s + 8
        if self.header is not None:
            hl = self.header.length
            rows.append((s + 8, hl, "extended header", "header", None, "eh00"))
            fb_start = s + 8 + hl
        rows.append((fb_start, s + self.program_size - fb_start, "program", "flatbuffer", None, ""))
        uses = self._segment_uses()
        for i, (off, size) in enumerate(self.segments):
            u = uses.get(i, [])
            kind = u[0][0] if u else "unused"
            if kind == "named_data":
                role = named_data_role(u[0][1])
                if role != "blob":
                    kind = role
            if len(u) == 1:
                name = u[0][1] if u[0][0] != "named_data" else f"named_data {u[0][1]}"
            elif u:
                name = f"{u[0][1]} (+{len(u) - 1} more)"
            else:
                name = f"segment {i}"
            rows.append((off, size, name, kind, i, "; ".join(lbl for _, lbl in u)))
        parts = [cover(rows, self.file, self.start, self.end)]
        parts.extend(d.extra["ptd"].segments_raw() for d in self.data)
        return concat_sorted(parts)

    def _tensors_columns(self) -> dict[str, Any]:
        wants = self.wants  # made once, in attach()
        matched: dict[str, set[str]] = {}  # data file -> keys claimed by external tensors
        datas = [(d.path, d.extra["ptd"]) for d in self.data]
        parts: list[dict[str, Any]] = []
        for m, plan in enumerate(self.methods):
            t = plan["tensors"]
            n = len(t)
            if not n:
                continue
            offset = t.offset.copy()
            segment = t.segment.copy()
            files = filled(n, None)
            files[offset >= 0] = self.file
            missing = np.full(n, -1, np.int8)  # -1: not external
            for k in np.flatnonzero(t.storage == _EXTERNAL).tolist():
                fqn = t.fqn[k]
                hit = None
                if fqn is not None:  # the first data file whose entry fits the tensor
                    want = wants[fqn]
                    for path, ptd in datas:
                        row = ptd.by_key.get(fqn)
                        if row is not None and ptd.fits(row, *want):
                            hit = (path, ptd, row)
                            break
                missing[k] = hit is None
                if hit is None:
                    holders = sorted({path for path, ptd in datas if fqn in ptd.by_key})
                    if holders:
                        self.findings.append({
                            "severity": "warning", "structure": f"tensor {fqn!r}",
                            "offset": None, "message": "data files hold this key with another "
                            f"dtype/shape: {holders}"})
                    continue
                path, ptd, row = hit
                matched.setdefault(path, set()).add(fqn)
                entry_off = int(ptd.cols["offset"][row])
                entry_size = int(ptd.cols["size"][row])
                if t.nbytes[k] > entry_size:
                    self.findings.append({
                        "severity": "error", "structure": f"tensor {fqn!r}",
                        "offset": entry_off, "message": f"{int(t.nbytes[k])} bytes expected "
                        f"but the data file holds {entry_size}"})
                    missing[k] = 1
                    continue
                files[k], offset[k], segment[k] = path, entry_off, int(ptd.cols["segment"][row])
            parts.append({
                "name": self._names(m), "code": t.code, "shape": t.shape, "nbytes": t.nbytes,
                "storage": t.storage, "file": files, "offset": offset,
                "method": np.full(n, m, np.int64), "value": t.value, "fqn": t.fqn,
                "dim_order": t.dim_order, "segment": segment, "dbi": t.dbi, "mem_id": t.mem_id,
                "mem_off": t.mem_off, "dyn": t.dyn, "rg": t.rg.astype(np.int8),
                "has_layout": np.full(n, -1, np.int8), "missing": missing,
                "used_by": filled(n, None)})
        # Named data: raw bytes in the .pte (no layout stored), then data-file entries that
        # no external tensor claimed (e.g. XNNPACK weights), with their layout when stored.
        for e in self._named_parts():
            claimed = matched.get(e.pop("file_path"))
            if claimed:
                keep = np.array([k not in claimed for k in e["key"].tolist()], bool)
                e = {c: v[keep] for c, v in e.items()}
            n = len(e["key"])
            none = np.full(n, -1, np.int64)
            parts.append({
                "name": e["key"], "code": e["code"], "shape": e["shape"], "nbytes": e["nbytes"],
                "storage": np.full(n, _NAMED, np.int8), "file": e["file"],
                "offset": e["offset"], "method": none, "value": none,
                "fqn": filled(n, None), "dim_order": e["dim_order"],
                "segment": e["segment"], "dbi": none, "mem_id": none, "mem_off": none,
                "dyn": none, "rg": np.full(n, -1, np.int8),
                "has_layout": e["has_layout"].astype(np.int8), "missing": np.full(n, -1, np.int8),
                "used_by": self._users(e["key"])})
        if not parts:
            return {name: [] for name in _TENSOR_COLUMNS}
        c = parts[0] if len(parts) == 1 else {k: np.concatenate([p[k] for p in parts])
                                              for k in parts[0]}
        off = c["offset"]
        return {
            "name": strings(c["name"]), "dtype": categorical(c["code"], _DTYPE_NAMES),
            "shape": c["shape"], "nbytes": c["nbytes"],
            "storage": categorical(c["storage"], STORAGES), "file": strings(c["file"]),
            "offset": ints(off, off < 0), "align": align(off, off < 0),
            "method": categorical(c["method"], [p["name"] for p in self.methods]),
            "value": ints(c["value"], c["value"] < 0), "fqn": strings(c["fqn"]),
            "dim_order": c["dim_order"], "segment": ints(c["segment"], c["segment"] < 0),
            "data_buffer_idx": ints(c["dbi"], c["dbi"] < 0),
            "mem_id": ints(c["mem_id"], c["mem_id"] < 0),
            "mem_offset": ints(c["mem_off"], c["mem_off"] < 0),
            "shape_dynamism": categorical(c["dyn"], _DYNAMISM_NAMES),
            "requires_grad": booleans(c["rg"] == 1, c["rg"] < 0),
            "has_layout": booleans(c["has_layout"] == 1, c["has_layout"] < 0),
            "missing": booleans(c["missing"] == 1, c["missing"] < 0),
            "used_by": strings(c["used_by"]),
        }

    def _names(self, m: int) -> np.ndarray:
        """Names of method ``m``'s tensors: the fqn, else '<method>/<value index>' (cached)."""
        cache = self.__dict__.setdefault("_names_cache", {})
        names = cache.get(m)
        if names is None:
            plan = self.methods[m]
            t = plan["tensors"]
            names = t.fqn.copy()
            unnamed = np.flatnonzero(np.equal(names, None))
            if len(unnamed):
                mname = plan["name"]
                names[unnamed] = objects([f"{mname}/{v}" for v in t.value[unnamed].tolist()])
            cache[m] = names
        return names

    def _users(self, keys: np.ndarray) -> np.ndarray:
        """'; '-joined delegates whose blobs mention each key (None: none)."""
        out = filled(len(keys), None)
        users = self.key_users
        if users:
            for k, key in enumerate(keys.tolist()):
                u = users.get(key)
                if u:
                    out[k] = "; ".join(u)
        return out

    def _named_parts(self) -> list[dict[str, Any]]:
        """Named data of the program, then of each attached data file, as columns."""
        out = []
        if self.named:
            keys, segs = zip(*self.named)
            segs = np.array(segs, np.int64)
            seg_off = np.array([o for o, _ in self.segments], np.int64)
            seg_size = np.array([z for _, z in self.segments], np.int64)
            size = seg_size[segs]
            n = len(keys)
            out.append({"key": objects(keys), "segment": segs, "offset": seg_off[segs],
                        "size": size, "code": np.zeros(n, np.int64),
                        "shape": objects([(z,) for z in size.tolist()]),
                        "dim_order": objects([(0,)] * n), "nbytes": size,
                        "has_layout": np.zeros(n, bool),
                        "file": filled(n, self.file), "file_path": self.file})
        for d in self.data:
            c = d.extra["ptd"].cols
            n = len(c["key"])
            out.append({"key": c["key"], "segment": c["segment"], "offset": c["offset"],
                        "size": c["size"], "code": c["code"], "shape": c["shape"],
                        "dim_order": c["dim_order"], "nbytes": c["nbytes"],
                        "has_layout": c["has_layout"],
                        "file": filled(n, d.path), "file_path": d.path})
        return out

    def _methods_columns(self) -> dict[str, list]:
        cols: dict[str, list] = {c: [] for c in (
            "method", "index", "values", "tensors", "inputs", "outputs", "chains",
            "instructions", "kernel_calls", "delegate_calls", "operators", "delegates",
            "planned_buffers", "planned_bytes", "constant_bytes", "constant_method")}
        for plan in self.methods:
            kinds = plan["instruction_kinds"]
            cols["method"].append(plan["name"])
            cols["index"].append(plan["index"])
            cols["values"].append(len(plan["vtypes"]))
            t = plan["tensors"]
            cols["tensors"].append(len(t))
            cols["inputs"].append(len(plan["inputs"]))
            cols["outputs"].append(len(plan["outputs"]))
            cols["chains"].append(plan["chains"])
            cols["instructions"].append(plan["instructions"])
            cols["kernel_calls"].append(kinds[1])
            cols["delegate_calls"].append(kinds[2])
            cols["operators"].append(len(plan["operators"]))
            cols["delegates"].append(len(plan["delegates"]))
            sizes = plan["buffer_sizes"]
            cols["planned_buffers"].append(max(len(sizes) - 1, 0))
            cols["planned_bytes"].append(sum(sizes[1:]))
            cols["constant_bytes"].append(
                int(t.nbytes[np.isin(t.storage, _CONSTANT_STORAGES)].sum()))
            cols["constant_method"].append(plan["instructions"] == 0)
        return cols

    def _values_columns(self) -> dict[str, Any]:
        import pandas as pd

        summaries: list[np.ndarray] = []
        vtypes, values, method_codes, ins, outs = [], [], [], [], []
        for m, plan in enumerate(self.methods):
            vt, vpos = plan["vtypes"], plan["vpos"]
            n = len(vt)
            summary = filled(n, "")
            t = plan["tensors"]
            if len(t):  # one text per distinct (dtype, shape, storage)
                key = ((t.code * len(STORAGES) + t.storage) * (int(t.shape_id.max()) + 1)
                       + t.shape_id)
                first, inv = groups(key)
                texts = np.empty(len(first), dtype=object)
                for j, k in enumerate(first.tolist()):
                    shape = "x".join(str(d) for d in t.shape[k]) or "scalar"
                    texts[j] = f"{_DTYPE_NAMES[t.code[k]]}[{shape}] {STORAGES[t.storage[k]]}"
                summary[t.value] = texts[inv]
            try:
                if not self.fast:
                    raise SlowPath("disabled")
                self._scalar_summaries(vt, vpos, summary)
            except SlowPath:
                fb = self.fb
                for i, (t, p) in enumerate(zip(vt.tolist(), vpos.tolist())):
                    if t != _TENSOR and p:
                        tab = fb.table_at(p, f"{plan['name']}.values[{i}]", p)
                        summary[i] = _value_summary(t, tab)
            idx = np.arange(n, dtype=np.int64)
            summaries.append(summary)
            vtypes.append(vt)
            values.append(idx)
            method_codes.append(np.full(n, m, dtype=np.int32))
            ins.append(np.isin(idx, plan["inputs"]))
            outs.append(np.isin(idx, plan["outputs"]))

        def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

        return {
            "method": pd.Categorical.from_codes(cat(method_codes, np.int32),
                                                categories=_unique_names(self.methods),
                                                validate=False),
            "value": cat(values, np.int64),
            "type": pd.Categorical.from_codes(cat(vtypes, np.int8), categories=list(VALUE_TYPES),
                                              validate=False),
            "summary": strings(cat(summaries, object)),
            "is_input": cat(ins, bool),
            "is_output": cat(outs, bool),
        }

    def _scalar_summaries(self, vt: np.ndarray, vpos: np.ndarray, summary: np.ndarray) -> None:
        """Fill ``summary`` for non-tensor values, a whole type at a time (fast path); each
        distinct value is rendered once."""
        vec = self.vec
        for t in np.unique(vt).tolist():
            if t in (0, 1, _TENSOR):
                continue
            where = np.flatnonzero(vt == t)
            T = vec.tables(vpos[where], VALUE_TYPES[t])
            if t in (2, 3, 4):
                vals = T.scalar(0, {2: "<i8", 3: "u1", 4: "<f8"}[t])
                bits = vals.view(np.int64) if t == 4 else vals
                first, inv = groups(bits.astype(np.int64))
                show = {2: str, 3: lambda x: str(bool(x)), 4: repr}[t]
                texts = objects([show(x) for x in vals[first].tolist()])[inv]
            elif t == 6:
                fb = self.fb
                out = []
                for r in T.ref(0).tolist():
                    text = fb.string_at(r, "String.string_val") if r else ""
                    out.append(repr(text[:60] + ("..." if len(text) > 60 else "")))
                texts = objects(out)
            else:
                dtype, size = _LIST_FORMATS[t]
                starts, counts = T.vectors(0, size)
                shown = np.minimum(counts, 16)
                flat = vec.flat(starts, shown, dtype)
                show = {8: repr, 9: lambda x: str(bool(x))}.get(t, str)
                texts = _list_texts(objects(list(map(show, flat.tolist()))), shown, counts)
            summary[where] = texts

    def _operators_columns(self) -> dict[str, list]:
        cols: dict[str, list] = {c: [] for c in ("method", "index", "name", "overload", "op", "uses")}
        for plan in self.methods:
            for k, (name, overload) in enumerate(plan["operators"]):
                cols["method"].append(plan["name"])
                cols["index"].append(k)
                cols["name"].append(name)
                cols["overload"].append(overload)
                cols["op"].append(f"{name}.{overload}" if overload else name)
                cols["uses"].append(plan["kernel_uses"].get(k, 0))
        return cols

    def _delegates_columns(self) -> dict[str, list]:
        cols: dict[str, list] = {c: [] for c in (
            "method", "index", "id", "location", "data_index", "file", "offset", "size", "align",
            "compile_specs", "calls")}
        for plan in self.methods:
            for k, d in enumerate(plan["delegates"]):
                cols["method"].append(plan["name"])
                cols["index"].append(k)
                cols["id"].append(d["id"])
                cols["location"].append(d["location"])
                cols["data_index"].append(d["index"])
                cols["file"].append(self.file)
                cols["offset"].append(d["offset"])
                cols["size"].append(d["size"])
                cols["align"].append(align_of(d["offset"]))
                cols["compile_specs"].append(", ".join(d["compile_specs"]))
                cols["calls"].append(d["calls"])
        return cols

    def _named_columns(self) -> dict[str, Any]:
        parts = self._named_parts()
        if not parts:
            return {c: [] for c in ("key", "segment", "file", "offset", "size", "align",
                                    "has_layout", "role", "used_by")}
        c = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "file_path"}
        role = filled(len(c["key"]), "tensor")
        for k in np.flatnonzero(~c["has_layout"]).tolist():
            role[k] = named_data_role(c["key"][k])
        return {
            "key": strings(c["key"]), "segment": c["segment"], "file": strings(c["file"]),
            "offset": c["offset"], "size": c["size"], "align": align(c["offset"]),
            "has_layout": booleans(c["has_layout"]), "role": factorized(role),
            "used_by": strings(self._users(c["key"])),
        }

    def _memory_plan_columns(self) -> dict[str, Any]:
        names = ("method", "mem_id", "buffer_size", "value", "name", "dtype", "shape", "offset",
                 "nbytes", "end", "storage", "fits")
        parts = []
        for m, plan in enumerate(self.methods):
            t = plan["tensors"]
            rows = np.flatnonzero(t.mem_id >= 0)
            if not len(rows):
                continue
            sizes = np.array(plan["buffer_sizes"], np.int64)
            mem_id = t.mem_id[rows]
            known = mem_id < len(sizes)
            bsize = np.full(len(rows), -1, np.int64)
            bsize[known] = sizes[mem_id[known]]
            off = t.mem_off[rows]
            end = off + t.nbytes[rows]
            name = self._names(m)[rows]
            parts.append({"method": np.full(len(rows), m, np.int64), "mem_id": mem_id,
                          "buffer_size": bsize, "known": known, "value": t.value[rows],
                          "name": name, "code": t.code[rows], "shape": t.shape[rows],
                          "offset": off, "nbytes": t.nbytes[rows], "end": end,
                          "storage": t.storage[rows], "fits": known & (end <= bsize)})
        if not parts:
            return {c: [] for c in names}
        c = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        return {
            "method": categorical(c["method"], [p["name"] for p in self.methods]),
            "mem_id": c["mem_id"], "buffer_size": ints(c["buffer_size"], ~c["known"]),
            "value": c["value"], "name": strings(c["name"]),
            "dtype": categorical(c["code"], _DTYPE_NAMES), "shape": c["shape"],
            "offset": c["offset"], "nbytes": c["nbytes"], "end": c["end"],
            "storage": categorical(c["storage"], STORAGES), "fits": c["fits"],
        }


def _list_texts(items: np.ndarray, shown: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """'[a, b, ...]' per list, from the rendered ``items`` of all lists back to back (``shown``
    of each list; ``counts`` is its full length, longer lists end with '... (n items)').

    All texts come from ONE join over the items and their separators, split at NUL.

    Example:
        >>> _list_texts(objects(["1", "2", "3"]), np.array([2, 0, 1]), np.array([2, 0, 5])).tolist()
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


def _unique_names(methods: list[dict[str, Any]]) -> list[str]:
    """Method names as categories (a repeated name from a corrupt file gets a suffix)."""
    out: list[str] = []
    for plan in methods:
        name = plan["name"]
        while name in out:
            name += "'"
        out.append(name)
    return out


def _value_summary(t: int, tab: Table) -> str:
    """A short rendering of one non-tensor EValue (scalar verifying path)."""
    if t == 2:
        return str(tab.i64(0))
    if t == 3:
        return str(tab.bool(0))
    if t == 4:
        return repr(tab.f64(0))
    if t == 6:
        s = tab.string(0, "string_val") or ""
        return repr(s[:60] + ("..." if len(s) > 60 else ""))
    if t in (7, 8, 9, 10, 11):
        fmt = {7: "q", 8: "d", 9: "B", 10: "i", 11: "i"}[t]
        items = tab.scalars(0, fmt, "items")
        n = len(items)
        shown = [bool(x) if t == 9 else x for x in items[:16]]
        body = ", ".join(str(x) for x in shown) + (f", ... ({n} items)" if n > 16 else "")
        return f"[{body}]"
    return ""


__all__ = ["FORMAT", "MAGIC", "ExtendedHeader", "detect", "read", "read_program"]
