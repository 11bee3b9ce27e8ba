"""The ``FlatTensor`` flatbuffer schema (``flat_tensor.fbs``, file identifier ``FT01``), as
slots: each table a class whose attributes are its field slots, in schema order.

Example:
    >>> NamedData.tensor_layout, TensorLayout.dim_order
    (2, 2)
"""

from __future__ import annotations

__all__ = ["V0_NAME", "DataSegment", "FlatTensor", "FlatTensorV0", "NamedData", "TensorLayout",
           "TensorMetadata"]


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


# -- the earlier schema (FlatTensor v0: ExecuTorch's first .ptd files, early 2025, up to 0.6) --
# Same identifier (FT01) and FH01 header, but a different root: tensors are described by
# TensorMetadata tables that point into a segment at an offset; a root vtable of 4 or more
# slots (tensor_alignment sits where today's segments are) is how it is recognised.
V0_NAME = "FlatTensor v0 (ExecuTorch <= 0.6, early 2025: TensorMetadata tables)"


class FlatTensorV0:
    """The root table of the earlier schema."""
    version = 0
    tensor_alignment = 1
    tensors = 2
    segments = 3
    named_data = 4  # ExecuTorch 0.6: NamedData(key, segment_index), as the first two slots today


class TensorMetadata:
    fully_qualified_name = 0
    scalar_type = 1
    sizes = 2
    dim_order = 3
    segment_index = 4
    offset = 5
