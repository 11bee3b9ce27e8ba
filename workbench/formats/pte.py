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

import os
import re
import struct
from collections.abc import Sequence
from typing import Any

from .._fmt import align_of
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


def read(src: Source, data: Sequence[Parsed] = (), siblings: Sequence[Parsed] = ()) -> Parsed:
    """Read the ``.pte`` in ``src`` (verified, zero-copy) into a :class:`Parsed`.

    Args:
        src: the program file.
        data: parsed ``.ptd`` files given explicitly: always attached.
        siblings: parsed ``.ptd`` files found next to the program: attached only when they
            hold a key the program refers to (an external tensor's name, or a named-data key
            that a delegate blob mentions).
    """
    return read_program(src, 0, src.size, outer=FORMAT, data=data, siblings=siblings)


def read_program(src: Source, start: int, end: int, outer: str = FORMAT,
                 data: Sequence[Parsed] = (), siblings: Sequence[Parsed] = ()) -> Parsed:
    """Read a program stored in ``src[start:end)`` (``start`` > 0 for one embedded in a .bpte)."""
    reader = _ProgramReader(src, start, end)
    reader.parse()
    reader.attach(data, siblings)
    return reader.parsed(outer)


def sibling_data_files(path: str) -> list[str]:
    """``.ptd`` files in the same folder as ``path`` (sorted), candidates for external data."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    base = os.path.dirname(path)
    return [os.path.join(base, n) for n in names
            if n.endswith(".ptd") and os.path.isfile(os.path.join(folder, n))]




class _ProgramReader:
    """Walks the Program flatbuffer once and keeps compact records for the frames."""

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
        offsets = t.array(1, "<u8", "offsets")
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
        values = plan.tables(2, "values")
        vtypes = []
        payload: list[Any] = []  # per value: Table of the union member or None
        for v in values:
            t, tab = v.union(0, len(VALUE_TYPES), "val")
            vtypes.append(t)
            payload.append(tab)
        tensors = [self._tensor(m, i, tab) for i, (t, tab) in enumerate(zip(vtypes, payload))
                   if t == _TENSOR]
        # Instructions.
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
        return {
            "name": name, "index": m, "vtypes": vtypes, "payload": payload, "tensors": tensors,
            "inputs": plan.scalars(3, "i", "inputs"), "outputs": plan.scalars(4, "i", "outputs"),
            "chains": len(chains), "instructions": n_instr, "instruction_kinds": kinds,
            "operators": operators, "kernel_uses": kernel_uses, "delegates": delegates,
            "buffer_sizes": buffer_sizes,
        }

    def _tensor(self, m: int, value: int, t: Table) -> tuple:
        """One compact tensor record (see ``_TENSOR_FIELDS``)."""
        code = t.i8(0)
        dt = SCALAR_TYPES.get(code)
        if dt is None:
            raise CorruptError(f"scalar_type {code} is unknown", file=self.file,
                               structure=f"{t.path}.scalar_type", offset=t.pos)
        sizes = t.scalars(2, "i", "sizes")
        numel = 1
        for s in sizes:
            if s < 0:
                raise CorruptError(f"negative size {s} in sizes {list(sizes)}", file=self.file,
                                   structure=f"{t.path}.sizes", offset=t.pos)
            numel *= s
        nbytes = numel * dt.itemsize
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
        # Where are the bytes?
        offset = None
        segment = None
        if location == 1:
            storage = "external"
        elif alloc is not None:
            storage = "planned"
            if dbi and self.mutable_segments:
                mi = mutable_idx or 0
                if mi >= len(self.mutable_segments):
                    raise OutOfBoundsError(
                        f"mutable_data_segments_idx {mi} is out of range "
                        f"({len(self.mutable_segments)} entries)",
                        file=self.file, structure=f"{t.path}.extra_tensor_info", offset=t.pos)
                segment, offsets, base = self.mutable_segments[mi]
                offset = self._sub_offset(offsets, base, dbi, t, "mutable_data_segments")
                storage = "mutable"
        elif dbi:
            cs = self.constant_segment
            if cs is not None and len(cs[1]):
                segment, offsets, base = cs
                offset = self._sub_offset(offsets, base, dbi, t, "constant_segment")
                storage = "segment"
            else:
                if dbi >= len(self.constant_buffer):
                    raise OutOfBoundsError(
                        f"data_buffer_idx {dbi} is out of range "
                        f"({len(self.constant_buffer)} constant buffers)",
                        file=self.file, structure=f"{t.path}.data_buffer_idx", offset=t.pos)
                offset, size = self.constant_buffer[dbi]
                if nbytes > size:
                    raise OutOfBoundsError(
                        f"{nbytes} bytes of tensor data do not fit the {size}-byte buffer",
                        file=self.file, structure=f"Program.constant_buffer[{dbi}]", offset=offset)
                storage = "inline"
        else:
            storage = "unallocated"
        if offset is not None and offset + nbytes > self.end:
            raise OutOfBoundsError(
                f"{nbytes} bytes of tensor data at 0x{offset:x} run past the end of the file "
                f"(size 0x{self.end:x})", file=self.file, structure=f"{t.path} data", offset=offset)
        return (m, value, fqn, code, sizes, dim_order, nbytes, storage, offset, segment, dbi,
                mem_id, mem_off, t.u8(8), t.bool(4))

    def _sub_offset(self, offsets: Any, base: int, dbi: int, t: Table, what: str) -> int:
        if dbi >= len(offsets):
            raise OutOfBoundsError(
                f"data_buffer_idx {dbi} is out of range ({len(offsets)} {what} offsets)",
                file=self.file, structure=f"{t.path}.data_buffer_idx", offset=t.pos)
        return base + int(offsets[dbi])

    # -- external data -------------------------------------------------------------------------
    _HEX_KEY = re.compile(rb"[0-9a-f]{64}")
    _MAX_SCANNED_BLOB = 64 << 20

    def _delegate_keys(self, candidates: set[str]) -> dict[str, list[str]]:
        """key -> delegates whose processed blob mentions it (blobs up to 64 MiB are scanned)."""
        found: dict[str, list[str]] = {}
        if not candidates:
            return found
        plain = [k for k in candidates if not (len(k) == 64 and self._HEX_KEY.fullmatch(k.encode()))]
        for plan in self.methods:
            for k, d in enumerate(plan["delegates"]):
                if d["size"] > self._MAX_SCANNED_BLOB:
                    continue
                blob = self.src.buf[d["offset"]: d["offset"] + d["size"]]
                label = f"{plan['name']} delegate {k} ({d['id']})"
                raw = bytes(blob)
                hits = {m.decode() for m in self._HEX_KEY.findall(raw)} & candidates
                if len(plain) <= 4096:
                    hits.update(key for key in plain if key and key.encode() in raw)
                for key in hits:
                    found.setdefault(key, []).append(label)
        return found

    def attach(self, data: Sequence[Parsed], siblings: Sequence[Parsed]) -> None:
        """Resolve external tensors and delegate keys against ``.ptd`` files."""
        external = {r[2] for plan in self.methods for r in plan["tensors"]
                    if r[7] == "external" and r[2] is not None}
        keys: set[str] = {k for k, _ in self.named}
        for p in (*data, *siblings):
            keys.update(p.extra["ptd"].by_key)
        self.key_users = self._delegate_keys(keys)
        wanted = external | set(self.key_users)
        self.data = list(data) + [p for p in siblings if wanted & set(p.extra["ptd"].by_key)]
        for p in siblings:
            if p not in self.data:
                p.sources[p.path].close()

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
        p.findings.extend(self.findings)
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
        by_key: dict[str, tuple[str, dict[str, Any]]] = {}
        for d in self.data:
            for key, entry in d.extra["ptd"].by_key.items():
                by_key.setdefault(key, (d.path, entry))
        matched: set[tuple[str, str]] = set()
        for plan in self.methods:
            mname = plan["name"]
            for (_m, v, fqn, code, sizes, dim_order, nbytes, storage, offset, segment, dbi,
                 mem_id, mem_off, dyn, rg) in plan["tensors"]:
                missing = None
                tfile = file if offset is not None else None
                if storage == "external":
                    hit = by_key.get(fqn) if fqn is not None else None
                    missing = hit is None
                    if hit is not None:
                        tfile, entry = hit
                        offset, segment = entry["offset"], entry["segment"]
                        matched.add((tfile, fqn))
                        if nbytes > entry["size"]:
                            self.findings.append({
                                "severity": "error", "structure": f"tensor {fqn!r}",
                                "offset": offset, "message": f"{nbytes} bytes expected but the "
                                f"data file holds {entry['size']}"})
                            tfile = offset = None
                            missing = True
                cols["has_layout"].append(None)
                cols["missing"].append(missing)
                cols["used_by"].append(None)
                cols["name"].append(fqn if fqn is not None else f"{mname}/{v}")
                cols["dtype"].append(SCALAR_TYPES[code].name)
                cols["shape"].append(tuple(sizes))
                cols["nbytes"].append(nbytes)
                cols["storage"].append(storage)
                cols["file"].append(tfile)
                cols["offset"].append(offset)
                cols["align"].append(align_of(offset))
                cols["method"].append(mname)
                cols["value"].append(v)
                cols["fqn"].append(fqn)
                cols["dim_order"].append(tuple(dim_order))
                cols["segment"].append(segment)
                cols["data_buffer_idx"].append(dbi)
                cols["mem_id"].append(mem_id)
                cols["mem_offset"].append(mem_off)
                cols["shape_dynamism"].append(SHAPE_DYNAMISM[dyn] if dyn < 3 else str(dyn))
                cols["requires_grad"].append(rg)
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

    def _values_columns(self) -> dict[str, list]:
        cols: dict[str, list] = {c: [] for c in ("method", "value", "type", "summary", "is_input",
                                                 "is_output")}
        for plan in self.methods:
            tensors = {r[1]: r for r in plan["tensors"]}
            ins, outs = set(plan["inputs"]), set(plan["outputs"])
            for i, (t, tab) in enumerate(zip(plan["vtypes"], plan["payload"])):
                cols["method"].append(plan["name"])
                cols["value"].append(i)
                cols["type"].append(VALUE_TYPES[t])
                cols["summary"].append(_value_summary(t, tab, tensors.get(i)))
                cols["is_input"].append(i in ins)
                cols["is_output"].append(i in outs)
        return cols

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
        cols: dict[str, list] = {c: [] for c in (
            "method", "mem_id", "buffer_size", "value", "name", "dtype", "shape", "offset",
            "nbytes", "end", "storage", "fits")}
        for plan in self.methods:
            sizes = plan["buffer_sizes"]
            for (_m, v, fqn, code, shape, _, nbytes, storage, _, _, _, mem_id, mem_off, _,
                 _) in plan["tensors"]:
                if mem_id is None:
                    continue
                bsize = sizes[mem_id] if mem_id < len(sizes) else None
                cols["method"].append(plan["name"])
                cols["mem_id"].append(mem_id)
                cols["buffer_size"].append(bsize)
                cols["value"].append(v)
                cols["name"].append(fqn if fqn is not None else f"{plan['name']}/{v}")
                cols["dtype"].append(SCALAR_TYPES[code].name)
                cols["shape"].append(tuple(shape))
                cols["offset"].append(mem_off)
                cols["nbytes"].append(nbytes)
                cols["end"].append(mem_off + nbytes)
                cols["storage"].append(storage)
                cols["fits"].append(bsize is not None and mem_off + nbytes <= bsize)
        return cols


def _value_summary(t: int, tab: Table | None, tensor: tuple | None) -> str:
    """A short human-readable rendering of one EValue (bounded length)."""
    if tab is None:
        return ""
    if t == _TENSOR and tensor is not None:
        shape = "x".join(str(s) for s in tensor[4]) or "scalar"
        return f"{SCALAR_TYPES[tensor[3]].name}[{shape}] {tensor[7]}"
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
        _, n = tab.vector(0, struct.calcsize(fmt), "items")
        items = tab.scalars(0, fmt, "items") if n <= 16 else tab.scalars(0, fmt, "items")[:16]
        if t == 9:
            items = tuple(bool(x) for x in items)
        body = ", ".join(str(x) for x in items) + (f", ... ({n} items)" if n > 16 else "")
        return f"[{body}]"
    return ""


__all__ = ["FORMAT", "MAGIC", "ExtendedHeader", "detect", "read", "read_program"]
