"""Flatbuffer structure attacks on a ``.pte``: offsets that wrap or refer to themselves,
tables aliasing their own vtable, vectors of length 2^32-1, strings without a terminator,
unions with unknown or self-referring types, and the same in an ETDump."""

from __future__ import annotations

from pathlib import Path

import workbench as wb
from workbench.formats.etdump import schema as E
from workbench.formats.pte import schema as S

from ._common import SAMPLES, Case, patch, put, ref, root_table, sample, u32

PTE = "mlp_portable.pte"


def _program():
    return root_table(SAMPLES / PTE, b"ET12", "Program")


def _plan():
    return _program().tables(S.Program.execution_plan)[0]


def _edit(locate, fmt: str, value, name: str = "x.pte", src: str = PTE):
    """A builder writing ``value`` (or ``value(old, pos)``) at ``locate()``."""
    def build(tmp: Path) -> Path:
        data = sample(src)
        at = locate()
        v = value(data, at) if callable(value) else value
        return put(tmp, name, patch(data, at, fmt, v))
    return build


def _vec(table_fn, slot):
    return lambda: ref(table_fn(), slot)[1]


def _value(i: int):
    return lambda: _plan().tables(S.ExecutionPlan.values)[i]


def _name_string():
    return ref(_plan(), S.ExecutionPlan.name)[1]


def _name_terminator():
    at = _name_string()
    return at + 4 + u32(_program().fb.buf, at)


def _shared_values(tmp: Path) -> Path:
    """Every ``values[i]`` offset points at the same EValue table (aliasing)."""
    data = sample(PTE)
    vec = ref(_plan(), S.ExecutionPlan.values)[1]
    n = u32(data, vec)
    target = vec + 4 + u32(data, vec + 4)
    for i in range(n):
        at = vec + 4 + 4 * i
        data = patch(data, at, "I", target - at)
    return put(tmp, "x.pte", data)


def _etdump_run_data():
    return ref(root_table(SAMPLES / "mlp_portable.etdp", b"ED00", "ETDump", base=4),
               E.ETDump.run_data)[1]


def _one_tensor(art: wb.Artifact) -> None:
    assert len(art.frames["values"]) > 0


CASES = [
    Case("fb_root_offset_past_end", _edit(lambda: 0, "I", 0xFFFFFFF0), wb.OutOfBoundsError),
    Case("fb_table_aliases_its_vtable", _edit(lambda: _program().pos, "i", 0), wb.CorruptError,
         "vtable size 0 is invalid"),
    Case("fb_vtable_inside_table", _edit(lambda: _plan().pos, "i", -4), wb.CorruptError),
    Case("fb_vtable_size_huge", _edit(lambda: _plan().pos - u32(_program().fb.buf, _plan().pos),
                                      "H", 0xFFFE), wb.TruncatedError),
    Case("fb_offset_wraps_backwards", _edit(lambda: ref(_program(), S.Program.execution_plan)[0],
                                            "I", 0xFFFFFFFC), wb.OutOfBoundsError),
    Case("fb_offset_refers_to_itself", _edit(lambda: ref(_program(), S.Program.execution_plan)[1]
                                             + 4, "I", 0), wb.CorruptError),
    Case("fb_vector_len_max", _edit(_vec(_program, S.Program.execution_plan), "I", 0xFFFFFFFF),
         wb.TruncatedError, "execution_plan"),
    Case("fb_values_len_max", _edit(_vec(_plan, S.ExecutionPlan.values), "I", 0xFFFFFFFF),
         wb.TruncatedError, "values"),
    Case("fb_values_len_2_31", _edit(_vec(_plan, S.ExecutionPlan.values), "I", 0x80000000),
         wb.TruncatedError, "values"),
    Case("fb_string_len_max", _edit(_name_string, "I", 0xFFFFFFFF), wb.TruncatedError, "name"),
    Case("fb_string_without_terminator", _edit(_name_terminator, "B", ord("x")),
         wb.CorruptError, "NUL-terminated"),
    Case("fb_union_unknown_type", _edit(lambda: _value(0)().field_pos(S.EValue.val_type, 1), "B",
                                        200), wb.CorruptError, "union type 200 is unknown"),
    Case("fb_union_self_reference", _edit(lambda: _value(0)().field_pos(S.EValue.val, 4), "I", 0),
         wb.CorruptError),
    Case("fb_union_type_mismatch", _edit(lambda: _value(0)().field_pos(S.EValue.val_type, 1), "B",
                                         int(S.KernelTypes.String)), wb.OutOfBoundsError),
    Case("fb_shared_tables", _shared_values, None, check=_one_tensor),
    Case("etdump_run_data_len_max", _edit(_etdump_run_data, "I", 0xFFFFFFFF, name="x.etdp",
                                          src="mlp_portable.etdp"), wb.TruncatedError, "run_data"),
    Case("etdump_size_prefix_lies", _edit(lambda: 0, "I", 0x7FFFFFFF, name="x.etdp",
                                          src="mlp_portable.etdp"), wb.TruncatedError, "size prefix"),
]
