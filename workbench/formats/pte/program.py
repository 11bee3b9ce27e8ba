"""The walk over the ``Program`` flatbuffer: segments, constant data, named data, methods
(values, instructions, operators, delegates). Tensors are read by :mod:`.tensors`, frames
built by :mod:`.columns`, external data attached by :mod:`.external`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ... import readpath
from ..._vecfb import SlowPath, VecReader
from ...errors import ArtifactError, CorruptError, Finding, OutOfBoundsError
from ...flatbuf import FlatBuffer, Table
from ...source import Source
from .header import MAGIC, read_header
from .schema import (
    BackendDelegate,
    BackendDelegateDataReference,
    BackendDelegateInlineData,
    Buffer,
    Chain,
    CompileSpec,
    DataLocation,
    DataSegment,
    DelegateCall,
    ExecutionPlan,
    Instruction,
    InstructionArguments,
    KernelCall,
    NamedData,
    Operator,
    Program,
    SubsegmentOffsets,
)
from .tensors import MAX_TENSOR_BYTES, Span, Spans, Subsegment, TensorReader, Tensors

#: Data locations of delegate blobs, by code (the delegates frame's ``location``).
DATA_LOCATIONS = ("inline", "segment")


def chain_spans(path: readpath.ReadPath, chains: list[Table]) -> list[tuple[int, int]]:
    """``(start, count)`` of each chain's instruction vector, for the columnar readers;
    raises :class:`SlowPath` when the method has fewer than
    :data:`workbench.readpath.SCALAR_INSTRUCTIONS` instructions (tables are then faster)."""
    spans = [c.vector(Chain.instructions, 4, "instructions") for c in chains]
    if not path.columns_for(sum(n for _, n in spans)):
        raise SlowPath("few instructions: the scalar reader is faster")
    return spans


class OperatorEntry(NamedTuple):
    """One ``Operator`` (operators-frame columns)."""
    name: str
    overload: str


class Delegate(NamedTuple):
    """One ``BackendDelegate`` and where its processed blob is (delegates-frame columns)."""
    id: str
    location: str
    data_index: int
    offset: int
    size: int
    compile_specs: tuple[str, ...]
    calls: int


class NamedEntry(NamedTuple):
    """One ``NamedData`` of the program (named_data-frame columns)."""
    key: str
    segment: int


class Instructions(NamedTuple):
    """What a method's chains hold: counts per kind, uses per operator / delegate index."""
    chains: int
    instructions: int
    kinds: list[int]
    kernel_uses: dict[int, int]
    delegate_uses: dict[int, int]


@dataclass
class Method:
    """One ``ExecutionPlan``, read."""
    name: str
    index: int
    vtypes: np.ndarray  # KernelTypes code per value
    vpos: np.ndarray  # table position per value (0: none)
    tensors: Tensors
    inputs: tuple
    outputs: tuple
    instructions: Instructions
    operators: list[OperatorEntry]
    delegates: list[Delegate]
    buffer_sizes: tuple  # non_const_buffer_sizes


class ProgramReader:
    """Walks the Program flatbuffer in ``src[start:end)`` once and keeps compact records."""

    def __init__(self, src: Source, start: int, end: int) -> None:
        self.src = src
        self.start = start
        self.end = end
        self.file = src.path
        #: the read tier, chosen once (the lazy frames read with the same)
        self.path = readpath.chosen()
        self.findings: list[Finding] = []

    def parse(self) -> None:
        """Check the header, then read segments, constant and named data, and the methods."""
        span = read_header(self.src, self.start, self.end)
        self.header = span.header
        self.program_size = span.program_size
        self.segment_base = span.segment_base
        self.segment_data_size = span.segment_data_size
        fb = FlatBuffer(self.src, self.start, self.start + self.program_size,
                        identifier=MAGIC, name="Program", findings=self.findings)
        self.fb = fb
        self.vec = VecReader(fb)
        prog = fb.root("Program")
        self.version = prog.u32(Program.version)
        #: the segments as int64 columns (absolute offset, size), for vectorised joins
        self.seg_off = self.seg_size = np.zeros(0, np.int64)
        self.segments = self._segments(prog)  # first: everything else points into them
        if len(self.seg_off) != len(self.segments):  # (read by the scalar path)
            self.seg_off = np.fromiter((o for o, _ in self.segments), np.int64,
                                       len(self.segments))
            self.seg_size = np.fromiter((z for _, z in self.segments), np.int64,
                                        len(self.segments))
        self._check_overlap()
        self._constants(prog)
        self.inline_delegate_data = [
            Span(*t.vector(BackendDelegateInlineData.data, 1, "data"))
            for t in prog.tables(Program.backend_delegate_data, "backend_delegate_data")]
        #: the named data as columns: keys (object array) and segment indices (int64); the
        #: records (:attr:`named`) are made from them on first use
        self.named_keys, self.named_seg = self._named(prog)
        self._named_list: list[NamedEntry] | None = None
        self.tensor_reader = TensorReader(self.file, self.end, self.vec, self.constant_segment,
                                          self.constant_buffer, self.mutable_segments)
        plans = prog.tables(Program.execution_plan, "execution_plan")
        values = None
        if self.path.allows(readpath.Tier.BATCHED) and len(plans) > 1:  # all methods at once
            try:
                values = self.tensor_reader.values_many(plans)
            except (SlowPath, ArtifactError):  # (an error is then raised in method order)
                values = None  # one by one, each on its fast path first
        self.methods = [self._plan(k, t, None if values is None else values[k])
                        for k, t in enumerate(plans)]

    def _segments(self, prog: Table) -> Sequence[Span]:
        """``Program.segments`` as absolute spans (vectorised; the scalar reader names the
        first bad segment)."""
        return self.path.read(lambda: self._segments_fast(prog),
                              lambda: self._segments_slow(prog))

    def _segments_fast(self, prog: Table) -> Spans:
        start, n = prog.vector(Program.segments, 4, "segments")
        S = self.vec.table_vector(start, n, "Program.segments")
        offs = S.scalar(DataSegment.offset, "<u8")
        sizes = S.scalar(DataSegment.size, "<u8")
        if self.segment_base is None:
            if offs.any() or sizes.any():
                raise SlowPath("segment data without an extended header")
            self.seg_off = np.full(n, self.start + self.program_size, np.int64)
            self.seg_size = np.zeros(n, np.int64)
            return Spans(self.seg_off, self.seg_size)
        if n and (offs.max() >= 1 << 62 or sizes.max() >= 1 << 62
                  or (offs + sizes).max() > self.segment_data_size):
            raise SlowPath("segment out of range")
        self.seg_off = offs.astype(np.int64) + self.segment_base
        self.seg_size = sizes.astype(np.int64)
        return Spans(self.seg_off, self.seg_size)

    def _segments_slow(self, prog: Table) -> list[Span]:
        segments = []
        for k, seg in enumerate(prog.tables(Program.segments, "segments")):
            off, size = seg.u64(DataSegment.offset), seg.u64(DataSegment.size)
            if self.segment_base is None:
                if off or size:
                    raise CorruptError(
                        f"segment {k} [0x{off:x}, +0x{size:x}) is listed but the file has no "
                        "extended header to locate segment data",
                        file=self.file, structure=f"Program.segments[{k}]", offset=seg.pos)
                # ExecuTorch writes empty segments without a header: they sit at the end.
                segments.append(Span(self.start + self.program_size, 0))
                continue
            if off + size > self.segment_data_size:
                raise OutOfBoundsError(
                    f"segment {k} [0x{off:x}, +0x{size:x}) runs past the segment data "
                    f"(size 0x{self.segment_data_size:x}, ends at file offset "
                    f"0x{self.segment_base + self.segment_data_size:x})",
                    file=self.file, structure=f"Program.segments[{k}]", offset=seg.pos)
            segments.append(Span(self.segment_base + off, size))
        return segments

    def _check_overlap(self) -> None:
        """Refuse two non-empty segments that share bytes (named by the first in offset order
        that starts before the end of the non-empty segment before it)."""
        off, size = self.seg_off, self.seg_size
        order = np.lexsort((size, off))  # by (offset, size), as sorting the spans would
        order = order[size[order] > 0]
        if len(order) < 2:
            return
        ends = off[order] + size[order]
        bad = np.flatnonzero(off[order[1:]] < ends[:-1])
        if len(bad):
            i, prev = int(order[bad[0] + 1]), int(order[bad[0]])
            o = int(off[i])
            raise CorruptError(
                f"segment {i} [0x{o:x}, 0x{o + int(size[i]):x}) overlaps segment {prev}",
                file=self.file, structure=f"Program.segments[{i}]", offset=o)

    def _constants(self, prog: Table) -> None:
        """The legacy inline constant_buffer, constant_segment and mutable_data_segments."""
        self.constant_buffer = [Span(*b.vector(Buffer.storage, 1, "storage"))
                                for b in prog.tables(Program.constant_buffer, "constant_buffer")]
        cs = prog.table(Program.constant_segment, "constant_segment")
        self.constant_segment = self._subsegment(cs, "Program.constant_segment") if cs else None
        inline_bytes = sum(n for _, n in self.constant_buffer)
        if inline_bytes and not (self.constant_segment and len(self.constant_segment.offsets)):
            first = next(at for at, n in self.constant_buffer if n)
            self.findings.append(Finding(
                "warning", "Program.constant_buffer", first,
                f"{inline_bytes} bytes of constants inline in the flatbuffer (the legacy "
                "constant_buffer): ExecuTorch's runtime (1.5.1) refuses such a program unless "
                "built with ET_ENABLE_DEPRECATED_CONSTANT_BUFFER"))
        self.mutable_segments = [
            self._subsegment(t, t.path)
            for t in prog.tables(Program.mutable_data_segments, "mutable_data_segments")]
        if len(self.mutable_segments) > 1:
            self.findings.append(Finding(
                "warning", "Program.mutable_data_segments", prog.pos,
                f"{len(self.mutable_segments)} mutable data segments: tensors are placed by "
                "ExtraTensorInfo.mutable_data_segments_idx as the schema says, but ExecuTorch's "
                "runtime (1.5.1) reads every initial value from mutable_data_segments[0] and its "
                "Python deserializer refuses such a program"))

    def _subsegment(self, t: Table, path: str) -> Subsegment:
        si = t.u32(SubsegmentOffsets.segment_index)
        offsets = t.array(SubsegmentOffsets.offsets, "<u8", "offsets").tolist()
        if len(offsets) and si >= len(self.segments):
            raise OutOfBoundsError(
                f"segment_index {si} is out of range ({len(self.segments)} segments)",
                file=self.file, structure=f"{path}.segment_index", offset=t.pos)
        base = self.segments[si].offset if si < len(self.segments) else 0
        return Subsegment(si, offsets, base)

    @property
    def named(self) -> list[NamedEntry]:
        """``Program.named_data`` as records (key, segment index)."""
        if self._named_list is None:
            self._named_list = list(map(NamedEntry._make, zip(self.named_keys.tolist(),
                                                              self.named_seg.tolist())))
        return self._named_list

    def _named(self, prog: Table) -> tuple[np.ndarray, np.ndarray]:
        """``Program.named_data`` as columns: keys (object array) and segment indices
        (vectorised; the scalar reader names the first bad entry)."""
        return self.path.read(lambda: self._named_fast(prog), lambda: self._named_columns(prog))

    def _named_columns(self, prog: Table) -> tuple[np.ndarray, np.ndarray]:
        named = self._named_slow(prog)
        keys = [k for k, _ in named]
        seg = np.fromiter((i for _, i in named), np.int64, len(named))
        return np.fromiter(keys, object, len(keys)), seg

    def _named_fast(self, prog: Table) -> tuple[np.ndarray, np.ndarray]:
        start, n = prog.vector(Program.named_data, 4, "named_data")
        N = self.vec.table_vector(start, n, "Program.named_data")
        keys = self.vec.strings(N.ref(NamedData.key))  # (an object array of its own)
        si = N.scalar(NamedData.segment_index, "<u4")
        if n and int(si.max()) >= len(self.segments):
            raise SlowPath("segment index out of range")
        absent = np.equal(keys, None)
        if absent.any():
            keys[absent] = ""
        return keys, si.astype(np.int64)

    def _named_slow(self, prog: Table) -> list[NamedEntry]:
        named = []
        for t in prog.tables(Program.named_data, "named_data"):
            key = t.string(NamedData.key, "key")
            si = t.u32(NamedData.segment_index)
            if si >= len(self.segments):
                raise OutOfBoundsError(
                    f"segment_index {si} is out of range ({len(self.segments)} segments)",
                    file=self.file, structure=f"{t.path}.segment_index", offset=t.pos)
            named.append(NamedEntry(key if key is not None else "", si))
        return named

    # -- methods ------------------------------------------------------------------------------
    def _plan(self, m: int, plan: Table,
              values: tuple[np.ndarray, np.ndarray, Tensors] | None = None) -> Method:
        """Method ``m`` (``values``: its value table, already read with the others')."""
        name = plan.string(ExecutionPlan.name, "name")
        name = name if name is not None else f"method{m}"
        tr = self.tensor_reader
        vtypes, vpos, tensors = values if values is not None else self.path.read(
            lambda: tr.values_fast(plan), lambda: tr.values_slow(plan))
        ins = self.path.read(lambda: self._instructions_fast(plan),
                             lambda: self._instructions_slow(plan))
        operators = [OperatorEntry(o.string(Operator.name, "name") or "",
                                   o.string(Operator.overload, "overload") or "")
                     for o in plan.tables(ExecutionPlan.operators, "operators")]
        delegates = [self._delegate(d, ins.delegate_uses.get(k, 0))
                     for k, d in enumerate(plan.tables(ExecutionPlan.delegates, "delegates"))]
        buffer_sizes = plan.scalars(ExecutionPlan.non_const_buffer_sizes, "q",
                                    "non_const_buffer_sizes")
        if any(b < 0 for b in buffer_sizes) or sum(buffer_sizes) > MAX_TENSOR_BYTES:
            raise CorruptError(f"non_const_buffer_sizes {list(buffer_sizes)[:8]} are negative or "
                               "add up to more than any memory", file=self.file,
                               structure=f"{plan.path}.non_const_buffer_sizes", offset=plan.pos)
        return Method(name=name, index=m, vtypes=vtypes, vpos=vpos, tensors=tensors,
                      inputs=plan.scalars(ExecutionPlan.inputs, "i", "inputs"),
                      outputs=plan.scalars(ExecutionPlan.outputs, "i", "outputs"),
                      instructions=ins, operators=operators, delegates=delegates,
                      buffer_sizes=buffer_sizes)

    def _delegate(self, d: Table, calls: int) -> Delegate:
        """One BackendDelegate, its processed blob located (inline or in a segment)."""
        R = BackendDelegateDataReference
        ref = d.table(BackendDelegate.processed, "processed")
        loc = ref.u8(R.location) if ref else 0
        idx = ref.u32(R.index) if ref else 0
        at = ref.pos if ref else d.pos
        if loc >= len(DataLocation):
            raise CorruptError(f"data location {loc} is unknown",
                               file=self.file, structure=f"{d.path}.processed.location", offset=at)
        if loc == DataLocation.SEGMENT:
            if idx >= len(self.segments):
                raise OutOfBoundsError(
                    f"segment index {idx} is out of range ({len(self.segments)} segments)",
                    file=self.file, structure=f"{d.path}.processed.index", offset=at)
            off, size = self.segments[idx]
        else:
            if idx >= len(self.inline_delegate_data):
                raise OutOfBoundsError(
                    f"inline delegate data index {idx} is out of range "
                    f"({len(self.inline_delegate_data)} entries)",
                    file=self.file, structure=f"{d.path}.processed.index", offset=at)
            off, size = self.inline_delegate_data[idx]
        specs = tuple(s.string(CompileSpec.key, "key") or ""
                      for s in d.tables(BackendDelegate.compile_specs, "compile_specs"))
        return Delegate(d.string(BackendDelegate.id, "id") or "", DATA_LOCATIONS[loc], idx,
                        off, size, specs, calls)

    def _instructions_slow(self, plan: Table) -> Instructions:
        chains = plan.tables(ExecutionPlan.chains, "chains")
        n_instr = 0
        kernel_uses: dict[int, int] = {}
        delegate_uses: dict[int, int] = {}
        kinds = [0] * len(InstructionArguments)
        for c in chains:
            for ins in c.tables(Chain.instructions, "instructions"):
                n_instr += 1
                t, arg = ins.union(Instruction.instr_args_type, len(InstructionArguments),
                                   "instr_args")
                kinds[t] += 1
                if t == InstructionArguments.KernelCall and arg is not None:
                    op = arg.i32(KernelCall.op_index)
                    kernel_uses[op] = kernel_uses.get(op, 0) + 1
                elif t == InstructionArguments.DelegateCall and arg is not None:
                    d = arg.i32(DelegateCall.delegate_index)
                    delegate_uses[d] = delegate_uses.get(d, 0) + 1
        return Instructions(len(chains), n_instr, kinds, kernel_uses, delegate_uses)

    def _instructions_fast(self, plan: Table) -> Instructions:
        vec = self.vec
        chains = plan.tables(ExecutionPlan.chains, "chains")
        kinds = np.zeros(len(InstructionArguments), np.int64)
        kernel_uses: dict[int, int] = {}
        delegate_uses: dict[int, int] = {}
        n_instr = 0
        # KernelCall.op_index and DelegateCall.delegate_index: the same slot, read alike
        calls = ((InstructionArguments.KernelCall, KernelCall.op_index, kernel_uses),
                 (InstructionArguments.DelegateCall, DelegateCall.delegate_index, delegate_uses))
        for c, (start, n) in zip(chains, chain_spans(self.path, chains)):
            n_instr += n
            if not n:
                continue
            ins = vec.table_vector(start, n, f"{c.path}.instructions")
            t = ins.scalar(Instruction.instr_args_type, "u1").astype(np.int64)
            ref = ins.ref(Instruction.instr_args)
            if ((t >= len(InstructionArguments)) | ((t > 0) & (ref == 0))).any():
                raise SlowPath("bad union")
            kinds += np.bincount(t, minlength=len(InstructionArguments))
            for typ, slot, uses in calls:
                sel = ref[t == typ]
                if len(sel):
                    idx = vec.tables(sel, f"{c.path}.instructions").scalar(slot, "<i4")
                    u, cnt = np.unique(idx, return_counts=True)
                    for a, b in zip(u.tolist(), cnt.tolist()):
                        uses[a] = uses.get(a, 0) + b
        return Instructions(len(chains), n_instr, kinds.tolist(), kernel_uses, delegate_uses)

    def segment_uses(self) -> dict[int, list[tuple[str, str]]]:
        """segment index -> (kind, label) of the constants and delegate blobs stored in it
        (the named data's segments are the columns :attr:`named_keys` / :attr:`named_seg`)."""
        uses: dict[int, list[tuple[str, str]]] = {}
        if self.constant_segment is not None:
            uses.setdefault(self.constant_segment.segment, []).append(
                ("constant", "constant_segment"))
        for k, ms in enumerate(self.mutable_segments):
            uses.setdefault(ms.segment, []).append(("mutable_data", f"mutable_data_segments[{k}]"))
        for plan in self.methods:
            for k, d in enumerate(plan.delegates):
                if d.location == "segment":
                    uses.setdefault(d.data_index, []).append(
                        ("delegate", f"{plan.name} delegate {k} ({d.id})"))
        return uses
