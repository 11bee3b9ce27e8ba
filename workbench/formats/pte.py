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

from .._fmt import align_of
from .._vecfb import SlowPath, VecReader, layouts
from ..artifact import Parsed
from ..dtypes import SCALAR_TYPES
from ..errors import CorruptError, OutOfBoundsError, TruncatedError, UnsupportedVersionError
from ..flatbuf import FlatBuffer, Table
from ..source import Source
from ._layout import concat_sorted, cover, named_data_role

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
        self.mutable_segments = [
            self._subsegment(t, t.path) for t in prog.tables(6, "mutable_data_segments")
        ]
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
    def _values_slow(self, m: int, plan: Table) -> tuple[np.ndarray, np.ndarray, list[tuple]]:
        vtypes, vpos, tensors = [], [], []
        for i, v in enumerate(plan.tables(2, "values")):
            t, tab = v.union(0, len(VALUE_TYPES), "val")
            vtypes.append(t)
            vpos.append(tab.pos if tab is not None else 0)
            if t == _TENSOR and tab is not None:
                tensors.append(self._tensor(m, i, tab))
        return np.array(vtypes, np.int64), np.array(vpos, np.int64), tensors

    def _values_fast(self, m: int, plan: Table) -> tuple[np.ndarray, np.ndarray, list[tuple]]:
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

    def _tensors_fast(self, m: int, tidx: np.ndarray, tpos: np.ndarray, path: str) -> list[tuple]:
        vec = self.vec
        T = vec.tables(tpos, path)
        codes, shapes, dims, numel = layouts(T, 0, 2, 3, SCALAR_TYPES)
        dbis = T.scalar(5, "<u4").tolist()
        rgs = T.scalar(4, "u1").tolist()
        dyns = T.scalar(8, "u1").tolist()
        alloc_ref = T.ref(6)
        has_alloc = alloc_ref > 0
        A = vec.tables(alloc_ref[has_alloc], f"{path}.allocation_info")
        mem_ids = [None] * len(tpos)
        mem_offs = [None] * len(tpos)
        if len(A.pos):
            where = np.flatnonzero(has_alloc).tolist()
            ids = A.scalar(0, "<u4").tolist()
            high = A.scalar(2, "<u4").astype(np.int64)
            if len(high) and high.max() >= 1 << 30:
                raise SlowPath("memory offset beyond 2**62")
            offs = A.scalar(1, "<u4").astype(np.int64) | (high << 32)
            for w, a, o in zip(where, ids, offs.tolist()):
                mem_ids[w] = a
                mem_offs[w] = o
        extra_ref = T.ref(9)
        has_extra = extra_ref > 0
        fqns: list[str | None] = [None] * len(tpos)
        locs = [0] * len(tpos)
        muts: list[int | None] = [None] * len(tpos)
        if has_extra.any():
            E = vec.tables(extra_ref[has_extra], f"{path}.extra_tensor_info")
            where = np.flatnonzero(has_extra).tolist()
            loc = E.scalar(2, "u1").tolist()
            if any(x >= len(TENSOR_DATA_LOCATIONS) for x in loc):
                raise SlowPath("bad location")
            mut_present = (E.field(0, 8) > 0).tolist()
            mut = E.scalar(0, "<u8").tolist()
            fref = E.ref(1).tolist()
            fb = self.fb
            for k, w in enumerate(where):
                locs[w] = loc[k]
                if mut_present[k]:
                    muts[w] = mut[k]
                if fref[k]:
                    try:
                        fqns[w] = fb.string_at(fref[k], "fully_qualified_name")
                    except Exception as e:
                        raise SlowPath(str(e)) from None
        n = len(tidx)
        values = tidx.tolist()
        item = np.array([SCALAR_TYPES[c].itemsize for c in codes], np.int64)
        nbytes = (numel * item).tolist()
        storage = ["unallocated"] * n
        offsets: list[int | None] = [None] * n
        segments: list[int | None] = [None] * n
        loc_a = np.array(locs, dtype=np.int64) if n else np.zeros(0, np.int64)
        dbi_a = np.array(dbis, dtype=np.int64) if n else np.zeros(0, np.int64)
        ext = loc_a == 1
        for k in np.flatnonzero(ext).tolist():
            storage[k] = "external"
        planned = ~ext & has_alloc
        mutable = planned & (dbi_a > 0) if self.mutable_segments else np.zeros(n, bool)
        for k in np.flatnonzero(planned & ~mutable).tolist():
            storage[k] = "planned"
        const = ~ext & ~has_alloc & (dbi_a > 0)
        cs = self.constant_segment
        slow = np.flatnonzero(mutable).tolist()
        if const.any():
            if cs is not None and len(cs[1]):
                where = np.flatnonzero(const)
                idx = dbi_a[where]
                if idx.max() >= len(cs[1]):
                    raise SlowPath("data_buffer_idx out of range")
                table = np.array(cs[1], dtype=np.uint64)
                if table.max() >= 1 << 62:
                    raise SlowPath("absurd offset")
                offs = (table[idx].astype(np.int64) + cs[2]).tolist()
                for k, o in zip(where.tolist(), offs):
                    if o + nbytes[k] > self.end:
                        raise SlowPath("tensor data past the end")
                    storage[k] = "segment"
                    offsets[k] = o
                    segments[k] = cs[0]
            else:
                slow += np.flatnonzero(const).tolist()
        records = list(zip([m] * n, values, fqns, codes, shapes, dims, nbytes, storage, offsets,
                           segments, dbis, mem_ids, mem_offs, dyns, [bool(x) for x in rgs]))
        for k in slow:  # mutable and legacy inline tensors: rare, placed one by one
            records[k] = self._place(m, values[k], fqns[k], codes[k], shapes[k], dims[k], dbis[k],
                                     mem_ids[k], mem_offs[k], locs[k], muts[k], dyns[k],
                                     bool(rgs[k]), None)
        return records

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
        return {r[2]: (SCALAR_TYPES[r[3]].name, tuple(r[4]), r[6])
                for plan in self.methods for r in plan["tensors"]
                if r[7] == "external" and r[2] is not None}

    @staticmethod
    def _fits(entry: dict[str, Any], want: tuple[str, tuple, int]) -> bool:
        """A data-file entry can hold an external tensor: same dtype and shape when the entry
        stores a layout, else at least as many bytes."""
        if entry["has_layout"]:
            return entry["dtype"] == want[0] and tuple(entry["shape"]) == want[1]
        return entry["size"] >= want[2]

    def attach(self, data: Sequence[Parsed], siblings: Iterable[Parsed]) -> None:
        """Choose the ``.ptd`` files that hold this program's external data.

        Explicit ``data`` files are always attached. ``siblings`` (best candidates first) are
        consumed lazily, only while some key is still unresolved, and attached only when they
        resolve one: an external tensor whose dtype/shape agree with the entry, or a
        content-hash key that a delegate blob mentions and the program does not hold itself.
        """
        wants = self._external_wants()
        own = {k for k, _ in self.named}
        hex_wanted = set(self._hex_keys()) - own

        def resolves(p: Parsed) -> set[str]:
            by_key = p.extra["ptd"].by_key
            hits = {k for k, w in wants.items() if k in by_key and self._fits(by_key[k], w)}
            return hits | (hex_wanted & set(by_key))

        self.data = list(data)
        unresolved = set(wants) | hex_wanted
        for p in data:
            unresolved -= resolves(p)
        if unresolved:
            for p in siblings:
                new = resolves(p) & unresolved
                if new:
                    self.data.append(p)
                    unresolved -= new
                else:
                    p.sources[p.path].close()
                if not unresolved:
                    break
        keys = set(own)
        for p in self.data:
            keys.update(p.extra["ptd"].by_key)
        self.key_users = self._delegate_keys(keys)

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
            "segments": self._segments_columns,
            "tensors": self._tensors_columns,
            "methods": self._methods_columns,
            "values": self._values_columns,
            "operators": self._operators_columns,
            "delegates": self._delegates_columns,
            "named_data": self._named_columns,
            "memory_plan": self._memory_plan_columns,
        })
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

    def _segments_columns(self) -> dict[str, list]:
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
        parts.extend(d.extra["ptd"].segments_columns() for d in self.data)
        return concat_sorted(parts, ("file", "offset"))

    def _tensors_columns(self) -> dict[str, list]:
        cols: dict[str, list] = {c: [] for c in (
            "name", "dtype", "shape", "nbytes", "storage", "file", "offset", "align", "method",
            "value", "fqn", "dim_order", "segment", "data_buffer_idx", "mem_id", "mem_offset",
            "shape_dynamism", "requires_grad", "has_layout", "missing", "used_by")}
        file = self.file
        by_key: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for d in self.data:
            for key, entry in d.extra["ptd"].by_key.items():
                by_key.setdefault(key, []).append((d.path, entry))
        wants = self._external_wants()
        matched: set[tuple[str, str]] = set()
        dnames = {c: d.name for c, d in SCALAR_TYPES.items()}
        for plan in self.methods:
            records = plan["tensors"]
            if not records:
                continue
            mname = plan["name"]
            (_, values, fqns, codes, sizes, dims, nbytes, storage, offsets, segments, dbis,
             mem_ids, mem_offs, dyns, rgs) = (list(c) for c in zip(*records))
            n = len(records)
            files = [file if o is not None else None for o in offsets]
            missing: list[bool | None] = [None] * n
            if "external" in storage:
                for k in range(n):
                    if storage[k] != "external":
                        continue
                    fqn = fqns[k]
                    hit = None
                    if fqn is not None:  # the first data file whose entry fits the tensor
                        hit = next((h for h in by_key.get(fqn, ()) if self._fits(h[1], wants[fqn])),
                                   None)
                    missing[k] = hit is None
                    if hit is None:
                        if fqn in by_key:
                            self.findings.append({
                                "severity": "warning", "structure": f"tensor {fqn!r}",
                                "offset": None, "message": "data files hold this key with another "
                                f"dtype/shape: {sorted({f for f, _ in by_key[fqn]})}"})
                        continue
                    tfile, entry = hit
                    matched.add((tfile, fqn))
                    if nbytes[k] > entry["size"]:
                        self.findings.append({
                            "severity": "error", "structure": f"tensor {fqn!r}",
                            "offset": entry["offset"], "message": f"{nbytes[k]} bytes expected "
                            f"but the data file holds {entry['size']}"})
                        missing[k] = True
                        continue
                    files[k], offsets[k], segments[k] = tfile, entry["offset"], entry["segment"]
            cols["name"] += [f if f is not None else f"{mname}/{v}" for f, v in zip(fqns, values)]
            cols["dtype"] += [dnames[c] for c in codes]
            cols["shape"] += sizes
            cols["nbytes"] += nbytes
            cols["storage"] += storage
            cols["file"] += files
            cols["offset"] += offsets
            cols["align"] += [o & -o if o else None for o in offsets]
            cols["method"] += [mname] * n
            cols["value"] += values
            cols["fqn"] += fqns
            cols["dim_order"] += dims
            cols["segment"] += segments
            cols["data_buffer_idx"] += dbis
            cols["mem_id"] += mem_ids
            cols["mem_offset"] += mem_offs
            cols["shape_dynamism"] += [SHAPE_DYNAMISM[d] if d < 3 else str(d) for d in dyns]
            cols["requires_grad"] += rgs
            cols["has_layout"] += [None] * n
            cols["missing"] += missing
            cols["used_by"] += [None] * n
        # Named data: raw bytes in the .pte (no layout stored), then data-file entries that
        # no external tensor claimed (e.g. XNNPACK weights), with their layout when stored.
        for e in self._named_entries():
            if (e["file"], e["key"]) in matched:
                continue
            cols["name"].append(e["key"])
            cols["dtype"].append(e["dtype"])
            cols["shape"].append(e["shape"])
            cols["nbytes"].append(e["nbytes"])
            cols["storage"].append("named_data")
            cols["file"].append(e["file"])
            cols["offset"].append(e["offset"])
            cols["align"].append(align_of(e["offset"]))
            for c in ("method", "value", "fqn", "mem_id", "mem_offset", "shape_dynamism",
                      "requires_grad", "data_buffer_idx", "missing"):
                cols[c].append(None)
            cols["dim_order"].append(e["dim_order"])
            cols["segment"].append(e["segment"])
            cols["has_layout"].append(e["has_layout"])
            cols["used_by"].append("; ".join(self.key_users.get(e["key"], ())) or None)
        return cols

    def _named_entries(self) -> list[dict[str, Any]]:
        """Named data of the program, then of each attached data file (plain dicts)."""
        out = []
        for key, si in self.named:
            off, size = self.segments[si]
            out.append({"key": key, "segment": si, "offset": off, "size": size, "dtype": "uint8",
                        "shape": (size,), "dim_order": (0,), "nbytes": size,
                        "has_layout": False, "file": self.file})
        for d in self.data:
            out.extend({**e, "file": d.path} for e in d.extra["ptd"].entries)
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
            cols["tensors"].append(len(plan["tensors"]))
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
            cols["constant_bytes"].append(sum(r[6] for r in plan["tensors"]
                                              if r[7] in ("segment", "inline", "external")))
            cols["constant_method"].append(plan["instructions"] == 0)
        return cols

    def _values_columns(self) -> dict[str, Any]:
        import pandas as pd

        summaries: list[str] = []
        vtypes, values, method_codes, ins, outs = [], [], [], [], []
        for m, plan in enumerate(self.methods):
            vt, vpos = plan["vtypes"], plan["vpos"]
            n = len(vt)
            summary = [""] * n
            seen: dict[tuple, str] = {}
            for r in plan["tensors"]:
                key = (r[3], r[4], r[7])
                text = seen.get(key)
                if text is None:
                    shape = "x".join(str(d) for d in r[4]) or "scalar"
                    text = seen[key] = f"{SCALAR_TYPES[r[3]].name}[{shape}] {r[7]}"
                summary[r[1]] = text
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
            summaries += summary
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
            "summary": summaries,
            "is_input": cat(ins, bool),
            "is_output": cat(outs, bool),
        }

    def _scalar_summaries(self, vt: np.ndarray, vpos: np.ndarray, summary: list[str]) -> None:
        """Fill ``summary`` for non-tensor values, a whole type at a time (fast path)."""
        vec = self.vec
        for t in np.unique(vt).tolist():
            if t in (0, 1, _TENSOR):
                continue
            where = np.flatnonzero(vt == t)
            T = vec.tables(vpos[where], VALUE_TYPES[t])
            w = where.tolist()
            if t == 2:
                texts = T.scalar(0, "<i8").astype(str).tolist()
            elif t == 3:
                texts = [str(bool(x)) for x in T.scalar(0, "u1").tolist()]
            elif t == 4:
                texts = [repr(x) for x in T.scalar(0, "<f8").tolist()]
            elif t == 6:
                fb = self.fb
                texts = []
                for r in T.ref(0).tolist():
                    text = fb.string_at(r, "String.string_val") if r else ""
                    texts.append(repr(text[:60] + ("..." if len(text) > 60 else "")))
            else:
                dtype, size = _LIST_FORMATS[t]
                starts, counts = T.vectors(0, size)
                shown = np.minimum(counts, 16)
                flat = vec.flat(starts, shown, dtype)
                if t == 9:
                    flat = flat.astype(bool)
                elif t == 8:
                    flat = np.array([repr(x) for x in flat.tolist()], dtype=object)
                strs = flat.astype(str).tolist()
                texts = []
                pos = 0
                join = ", ".join
                for c, k in zip(counts.tolist(), shown.tolist()):
                    body = join(strs[pos:pos + k])
                    pos += k
                    texts.append(f"[{body}, ... ({c} items)]" if c > k else f"[{body}]")
            for i, text in zip(w, texts):
                summary[i] = text

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

    def _named_columns(self) -> dict[str, list]:
        cols: dict[str, list] = {c: [] for c in ("key", "segment", "file", "offset", "size", "align",
                                                 "has_layout", "role", "used_by")}
        for e in self._named_entries():
            cols["key"].append(e["key"])
            cols["segment"].append(e["segment"])
            cols["file"].append(e["file"])
            cols["offset"].append(e["offset"])
            cols["size"].append(e["size"])
            cols["align"].append(align_of(e["offset"]))
            cols["has_layout"].append(e["has_layout"])
            cols["role"].append("tensor" if e["has_layout"] else named_data_role(e["key"]))
            cols["used_by"].append("; ".join(self.key_users.get(e["key"], ())) or None)
        return cols

    def _memory_plan_columns(self) -> dict[str, list]:
        names = ("method", "mem_id", "buffer_size", "value", "name", "dtype", "shape", "offset",
                 "nbytes", "end", "storage", "fits")
        cols: dict[str, list] = {c: [] for c in names}
        dnames = {c: d.name for c, d in SCALAR_TYPES.items()}
        for plan in self.methods:
            sizes = plan["buffer_sizes"]
            mname = plan["name"]
            rows = [r for r in plan["tensors"] if r[11] is not None]
            if not rows:
                continue
            (_, values, fqns, codes, shapes, _, nbytes, storage, _, _, _, mem_ids, mem_offs, _,
             _) = zip(*rows)
            bsizes = [sizes[m] if m < len(sizes) else None for m in mem_ids]
            ends = [o + b for o, b in zip(mem_offs, nbytes)]
            cols["method"] += [mname] * len(rows)
            cols["mem_id"] += mem_ids
            cols["buffer_size"] += bsizes
            cols["value"] += values
            cols["name"] += [f if f is not None else f"{mname}/{v}" for f, v in zip(fqns, values)]
            cols["dtype"] += [dnames[c] for c in codes]
            cols["shape"] += shapes
            cols["offset"] += mem_offs
            cols["nbytes"] += nbytes
            cols["end"] += ends
            cols["storage"] += storage
            cols["fits"] += [b is not None and e <= b for e, b in zip(ends, bsizes)]
        return cols


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
