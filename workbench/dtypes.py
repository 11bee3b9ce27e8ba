"""Element types: one table from ExecuTorch ``ScalarType`` codes to names and sizes.

The codes are ExecuTorch's (and c10's) scalar type numbers; names are torch dtype names
(``torch.<name>``). ``numpy`` is the numpy dtype :meth:`workbench.Artifact.tensor` returns;
``None`` means numpy cannot represent the type and a torch tensor is returned instead
(bfloat16, float8 types, complex32). Quantized (``qint8``, ``quint4x2``, ...) and ``bits``
types are returned as their raw integer representation: their scale and zero point are not
part of the stored bytes, so no quantized tensor can be made from the bytes alone.

Example:
    >>> from workbench.dtypes import SCALAR_TYPES
    >>> SCALAR_TYPES[6]
    DType(code=6, name='float32', itemsize=4, numpy='<f4')
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["DType", "SCALAR_TYPES", "BY_NAME"]


class DType(NamedTuple):
    """One element type: its ScalarType ``code``, torch ``name``, ``itemsize`` and numpy dtype."""

    code: int
    name: str
    itemsize: int
    numpy: str | None


SCALAR_TYPES: dict[int, DType] = {
    d.code: d
    for d in (
        DType(0, "uint8", 1, "|u1"),
        DType(1, "int8", 1, "|i1"),
        DType(2, "int16", 2, "<i2"),
        DType(3, "int32", 4, "<i4"),
        DType(4, "int64", 8, "<i8"),
        DType(5, "float16", 2, "<f2"),
        DType(6, "float32", 4, "<f4"),
        DType(7, "float64", 8, "<f8"),
        DType(8, "complex32", 4, None),
        DType(9, "complex64", 8, "<c8"),
        DType(10, "complex128", 16, "<c16"),
        DType(11, "bool", 1, "|b1"),
        DType(12, "qint8", 1, "|i1"),
        DType(13, "quint8", 1, "|u1"),
        DType(14, "qint32", 4, "<i4"),
        DType(15, "bfloat16", 2, None),
        DType(16, "quint4x2", 1, "|u1"),
        DType(17, "quint2x4", 1, "|u1"),
        DType(18, "bits1x8", 1, "|u1"),
        DType(19, "bits2x4", 1, "|u1"),
        DType(20, "bits4x2", 1, "|u1"),
        DType(21, "bits8", 1, "|u1"),
        DType(22, "bits16", 2, "<u2"),
        DType(23, "float8_e5m2", 1, None),
        DType(24, "float8_e4m3fn", 1, None),
        DType(25, "float8_e5m2fnuz", 1, None),
        DType(26, "float8_e4m3fnuz", 1, None),
        DType(27, "uint16", 2, "<u2"),
        DType(28, "uint32", 4, "<u4"),
        DType(29, "uint64", 8, "<u8"),
    )
}

BY_NAME: dict[str, DType] = {d.name: d for d in SCALAR_TYPES.values()}
