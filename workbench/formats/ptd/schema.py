"""The ``FlatTensor`` flatbuffer schema (``flat_tensor.fbs``, file identifier ``FT01``), as
slots: each table a class whose attributes are its field slots, in schema order.

Example:
    >>> NamedData.tensor_layout, TensorLayout.dim_order
    (2, 2)
"""

from __future__ import annotations

__all__ = ["DataSegment", "FlatTensor", "NamedData", "TensorLayout"]


class FlatTensor:
    """The root table."""
    version = 0
    segments = 1
    named_data = 2


class DataSegment:
    offset = 0
    size = 1


class NamedData:
    key = 0
    segment_index = 1
    tensor_layout = 2


class TensorLayout:
    scalar_type = 0
    sizes = 1
    dim_order = 2
