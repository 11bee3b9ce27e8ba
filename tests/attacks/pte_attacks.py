""".pte containers (extended header, segments, constant offsets, instruction arguments), and
.ptd / .bpte (duplicate keys, an embedded program outside its vector)."""

from __future__ import annotations

from pathlib import Path

import pytest

import workbench as wb
from workbench.formats.bpte import schema as B
from workbench.formats.ptd import schema as D
from workbench.formats.pte import schema as S

from ._common import SAMPLES, Case, patch, put, ref, root_table, sample, u32

PTE = "mlp_portable.pte"
XNN = "mlp_xnnpack.pte"
EH = 8  # the extended header: magic, length u32, program_size, segment_base_offset, data size


def _edit(at, fmt: str, value, src: str = PTE, name: str = "x.pte"):
    def build(tmp: Path) -> Path:
        data = sample(src)
        pos = at() if callable(at) else at
        return put(tmp, name, patch(data, pos, fmt, value(data, pos) if callable(value) else value))
    return build


def _program(src: str = PTE):
    return root_table(SAMPLES / src, b"ET12", "Program")


def _segment(i: int, field: int, src: str = XNN):
    return lambda: _program(src).tables(S.Program.segments)[i].field_pos(field, 8)


def _reverse_constant_offsets(tmp: Path) -> Path:
    data = bytearray(sample(PTE))
    vec = ref(_program().table(S.Program.constant_segment), S.SubsegmentOffsets.offsets)[1]
    n = u32(data, vec)
    items = [bytes(data[vec + 4 + 8 * i:vec + 12 + 8 * i]) for i in range(n)]
    data[vec + 4:vec + 4 + 8 * n] = b"".join(reversed(items))
    return put(tmp, "x.pte", bytes(data))


def _kernel_args():
    plan = _program().tables(S.Program.execution_plan)[0]
    chain = plan.tables(S.ExecutionPlan.chains)[0]
    instr = chain.tables(S.Chain.instructions)[0]
    _, call = instr.union(S.Instruction.instr_args_type, 6)
    return ref(call, S.KernelCall.args)[1] + 4


def _ptd_duplicate_key(tmp: Path) -> Path:
    """named_data[k].key points at an earlier entry's key string (offsets only go forward)."""
    t = root_table(SAMPLES / "mlp_external.ptd", b"FT01", "FlatTensor")
    entries = t.tables(D.FlatTensor.named_data)
    keys = [ref(e, D.NamedData.key) for e in entries]
    data = sample("mlp_external.ptd")
    for i, (field_i, _) in enumerate(keys):
        for j, (_, str_j) in enumerate(keys):
            if i != j and str_j > field_i:
                return put(tmp, "x.ptd", patch(data, field_i, "I", str_j - field_i))
    raise AssertionError("no forward key string")


def _bpte_program(value):
    def at():
        t = root_table(SAMPLES / "mlp.bpte", b"BP08", "BundledProgram")
        return ref(t, B.BundledProgram.program)[1]
    return _edit(at, "I", value, src="mlp.bpte", name="x.bpte")


def _finds(text: str):
    """A check: validate() reports a finding whose message contains ``text``."""
    def check(art: wb.Artifact) -> None:
        if "index past the" in text and "instructions" not in art.frames:
            pytest.skip("no instructions frame in this tree")
        assert art.validate()["message"].str.contains(text, regex=False).any()
    return check


CASES = [
    Case("pte_eh_program_size_lies", _edit(EH + 8, "Q", 1 << 63), wb.OutOfBoundsError,
         "extended header"),
    Case("pte_eh_segment_base_inside_flatbuffer", _edit(EH + 16, "Q", 16), wb.OutOfBoundsError,
         "inside the program flatbuffer"),
    Case("pte_eh_segment_base_past_eof", _edit(EH + 16, "Q", 1 << 40), wb.OutOfBoundsError),
    Case("pte_eh_segment_data_size_lies", _edit(EH + 24, "Q", 1 << 40), wb.TruncatedError),
    Case("pte_eh_length_too_small", _edit(EH + 4, "I", 8), wb.CorruptError),
    Case("pte_segment_size_max", _edit(_segment(2, S.DataSegment.size), "Q", (1 << 64) - 1,
                                       src=XNN), wb.OutOfBoundsError, "segments[2]"),
    Case("pte_segments_overlap", _edit(_segment(3, S.DataSegment.offset), "Q", 1280, src=XNN),
         wb.CorruptError, "overlaps"),
    Case("pte_descending_constant_offsets", _reverse_constant_offsets, wb.OutOfBoundsError,
         "tensor data"),
    Case("pte_kernel_arg_past_values", _edit(_kernel_args, "i", 10_000), None,
         check=_finds("[10000] index past the")),
    Case("pte_kernel_arg_negative", _edit(_kernel_args, "i", -1), None,
         check=_finds("[-1] index past the")),
    Case("ptd_duplicate_keys", _ptd_duplicate_key, None, check=_finds("occurs more than once")),
    Case("bpte_program_outside_vector", _bpte_program(0x7FFFFFFF), wb.TruncatedError,
         "BundledProgram.program"),
    Case("bpte_program_truncated", _bpte_program(64), wb.OutOfBoundsError),
]


def _coreml_deep_index(tmp: Path) -> Path:
    """The Core ML directory index (byte-reversed JSON at the end of the blob, here the end
    of the file) nested 3,000 deep."""
    data = sample("mlp_coreml.pte")
    text = b'{"nodes": ' + b"[" * 3000 + b"]" * 3000 + b"}"
    return put(tmp, "x.pte", data[:-len(text)] + text[::-1])

