"""Reading a bundled program's test cases: one :class:`TestValue` per input and expected
output of every test case (the embedded program is read by :mod:`workbench.formats.pte`)."""

from __future__ import annotations

from typing import NamedTuple

from ...dtypes import SCALAR_TYPES
from ...errors import CorruptError, OutOfBoundsError
from ...flatbuf import Table
from .schema import (
    VALUE_TYPES,
    Bool,
    BundledMethodTestCase,
    BundledMethodTestSuite,
    BundledProgram,
    Double,
    Int,
    Tensor,
    Value,
    ValueUnion,
)

__all__ = ["TestValue", "case_name", "test_cases"]


class TestValue(NamedTuple):
    """One test value (test_cases-frame columns; ``stored``: bytes of tensor data stored)."""
    method: str
    case: int
    io: str
    index: int
    kind: str
    dtype: str | None = None
    shape: tuple | None = None
    nbytes: int | None = None
    offset: int | None = None
    value: str | None = None
    dim_order: tuple | None = None
    stored: int | None = None


def case_name(row: TestValue) -> str:
    """Stable name of one test value, e.g. ``forward/0/input/1`` (method/case/io/index)."""
    return f"{row.method}/{row.case}/{row.io}/{row.index}"


def test_cases(root: Table, file: str) -> list[TestValue]:
    """Every input and expected output of every test case under the BundledProgram ``root``."""
    out = []
    C = BundledMethodTestCase
    for suite in root.tables(BundledProgram.method_test_suites, "method_test_suites"):
        method = suite.string(BundledMethodTestSuite.method_name, "method_name") or ""
        for case_idx, case in enumerate(suite.tables(BundledMethodTestSuite.test_cases,
                                                     "test_cases")):
            for io, field, name in (("input", C.inputs, "inputs"),
                                    ("expected_output", C.expected_outputs, "expected_outputs")):
                for k, v in enumerate(case.tables(field, name)):
                    t, tab = v.union(Value.val_type, len(ValueUnion), "val")
                    row = TestValue(method, case_idx, io, k, VALUE_TYPES[t])
                    if tab is not None:
                        row = _value(row, t, tab, file)
                    out.append(row)
    return out


def _value(row: TestValue, t: int, tab: Table, file: str) -> TestValue:
    """``row`` with the value of union member ``t`` (a tensor's layout and data, or a scalar)."""
    if t == ValueUnion.Tensor:
        code = tab.i8(Tensor.scalar_type)
        dt = SCALAR_TYPES.get(code)
        if dt is None:
            raise CorruptError(f"scalar_type {code} is unknown", file=file,
                               structure=f"{tab.path}.scalar_type", offset=tab.pos)
        sizes = tuple(tab.scalars(Tensor.sizes, "i", "sizes"))
        if any(s < 0 for s in sizes):
            raise CorruptError(f"negative size in {list(sizes)}", file=file,
                               structure=f"{tab.path}.sizes", offset=tab.pos)
        numel = 1
        for s in sizes:
            numel *= s
        start, n = tab.vector(Tensor.data, 1, "data")
        if numel * dt.itemsize > n:
            raise OutOfBoundsError(
                f"{numel * dt.itemsize} bytes of test data expected, {n} stored",
                file=file, structure=f"{tab.path}.data", offset=start)
        return row._replace(dtype=dt.name, shape=sizes, nbytes=numel * dt.itemsize,
                            offset=start, stored=n,
                            dim_order=tuple(tab.scalars(Tensor.dim_order, "B", "dim_order")))
    if t == ValueUnion.Int:
        return row._replace(value=str(tab.i64(Int.int_val)))
    if t == ValueUnion.Bool:
        return row._replace(value=str(tab.bool(Bool.bool_val)))
    if t == ValueUnion.Double:
        return row._replace(value=repr(tab.f64(Double.double_val)))
    return row
