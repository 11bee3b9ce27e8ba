"""The ``BundledProgram`` flatbuffer schema (``bundled_program_schema.fbs``, file identifier
``BP08``), as slots: each table a class whose attributes are its field slots, in schema
order; a union takes two slots (its ``u8`` type, then its value).

Example:
    >>> Value.val, ValueUnion.Tensor, Tensor.data
    (1, <ValueUnion.Tensor: 1>, 2)
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["VALUE_TYPES", "Bool", "BundledMethodTestCase", "BundledMethodTestSuite",
           "BundledProgram", "Double", "Int", "Tensor", "Value", "ValueUnion"]


class BundledProgram:
    """The root table."""
    version = 0
    method_test_suites = 1
    program = 2


class BundledMethodTestSuite:
    method_name = 0
    test_cases = 1


class BundledMethodTestCase:
    inputs = 0
    expected_outputs = 1


class Value:
    """A test value: the union ``val`` (:class:`ValueUnion`)."""
    val_type = 0
    val = 1


class Tensor:
    scalar_type = 0
    sizes = 1
    data = 2
    dim_order = 3


class Int:
    int_val = 0


class Bool:
    bool_val = 0


class Double:
    double_val = 0


class ValueUnion(IntEnum):
    """Union ``ValueUnion`` (``Value.val``); 0 is NONE."""
    NONE = 0
    Tensor = 1
    Int = 2
    Bool = 3
    Double = 4


#: ValueUnion names by code, as shown in the test_cases frame ("None" for NONE).
VALUE_TYPES = ("None", *(k.name for k in ValueUnion if k))
