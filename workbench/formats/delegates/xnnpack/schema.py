"""The XNNPACK delegate blob: header layout, flatbuffer slots and enum codes, named once.

Written from the facts of ExecuTorch's ``backends/xnnpack/serialization/schema.fbs``
(file identifier ``XN01``) and ``runtime_schema.fbs`` (``XN00``, older blobs). A slot is
a field's position in its table (flatbuffers keeps deprecated fields in place, so the
numbers never shift); union members are numbered from 1 in schema order (0 = NONE).

Blob layout (all little-endian)::

    0   4   zeros (so that the magic sits where a flatbuffer's identifier would)
    4   4s  "XH00"
    8   u16 header length (30)
    10  u32 flatbuffer offset      \\  from the start of the blob
    14  u32 flatbuffer size         |
    18  u32 constant data offset    |
    22  u64 constant data size     /
    ... padding to 16, the XNNGraph flatbuffer (identifier "XN01" at its byte 4),
    padding to 16, constant data (each entry 16-aligned inside it)

Blobs written before the header existed are the bare flatbuffer (``XN00``), with weights
inline in ``XNNGraph.constant_buffer``.

Example:
    >>> from workbench.formats.delegates.xnnpack import schema
    >>> schema.DATATYPES[10].name, schema.DATATYPES[10].dtype, schema.DATATYPES[10].bits
    ('qbint4', 'int4', 4)
    >>> schema.NODE_TYPES[2].name
    'FullyConnected'
"""

from __future__ import annotations

from typing import NamedTuple

# -- the header -------------------------------------------------------------------------------
HEADER_MAGIC = b"XH00"
HEADER_MAGIC_OFFSET = 4
HEADER_LENGTH = 30  # bytes the header uses; the flatbuffer starts at a 16-aligned offset


class Header:
    """Byte offsets of the header fields (from the start of the blob)."""

    MAGIC = 4  # 4s
    LENGTH = 8  # u16
    FLATBUFFER_OFFSET = 10  # u32
    FLATBUFFER_SIZE = 14  # u32
    CONSTANT_DATA_OFFSET = 18  # u32
    CONSTANT_DATA_SIZE = 22  # u64


#: Flatbuffer file identifiers, newest first.
IDENTIFIERS = (b"XN01", b"XN00")
#: Alignment of the flatbuffer, the constant data and each constant inside it.
CONSTANT_ALIGNMENT = 16
#: ``ConstantDataOffset.offset`` of an entry whose bytes live in named data.
NAMED_OFFSET = (1 << 64) - 1
#: ``XNN_INVALID_VALUE_ID``: an absent optional input (e.g. no bias) or an internal value.
INVALID_ID = (1 << 32) - 1
#: ``XNNTensorValue.flags`` bits.
FLAG_EXTERNAL_INPUT = 1
FLAG_EXTERNAL_OUTPUT = 2


# -- table slots --------------------------------------------------------------------------------
class XNNGraph:
    """Root table."""

    version = 0
    xnodes = 1
    xvalues = 2
    num_externs = 3
    input_ids = 4
    output_ids = 5
    constant_buffer = 6  # [Buffer]: inline weights (XN00; deprecated in XN01)
    mem_buffer_sizes = 7
    constant_data = 8  # [ConstantDataOffset]


class XNode:
    xnode_union_type = 0
    xnode_union = 1
    debug_handle = 2
    output_min_max = 3


class OutputMinMax:
    output_min = 0
    output_max = 1


class XValue:
    xvalue_union_type = 0
    xvalue_union = 1


class XNNTensorValue:
    datatype = 0  # short (XNNDatatype)
    num_dims = 1
    dims = 2  # [uint]
    constant_buffer_idx = 3  # index into constant_data (XN00: constant_buffer); 0 = none
    external_id = 4
    flags = 5
    id_out = 6
    dq_datatype = 7  # XN00 only


class XNNQuantizedTensorValue:
    tensor_value = 0
    quant_params_type = 1
    quant_params = 2


class PerChannelQuant:
    scale = 0  # [float] inline
    channel_dim = 1
    scale_buffer_idx = 2  # constant_data entry of float32 scales
    num_scales = 3


class PerTensorQuant:
    scale = 0  # float
    zero_point = 1  # int


class PerTokenDynamicQuant:
    num_nonbatch_dims = 0


class PerChannelGroupQuant:
    scale = 0  # [float] inline
    channel_dim = 1
    group_size = 2
    scale_bf16 = 3  # [ushort] inline bfloat16 (deprecated)
    scale_buffer_idx = 4  # constant_data entry of bfloat16 scales
    num_scales = 5


class ConstantDataOffset:
    offset = 0  # u64, relative to the constant data; NAMED_OFFSET: in named data
    size = 1  # u64
    named_key = 2  # string


class Buffer:
    storage = 0  # [ubyte] (force_align 16)


# -- unions -------------------------------------------------------------------------------------
#: XValueUnion members (index = union type).
XVALUE_TYPES = ("NONE", "XNNTensorValue", "XNNQuantizedTensorValue")
TENSOR_VALUE = 1
QUANTIZED_TENSOR_VALUE = 2

#: XNNQuantParams members (index = union type) as ``quant`` column values.
QUANT_TYPES = ("none", "per_channel", "per_tensor", "per_token_dynamic", "per_channel_group")
PER_CHANNEL, PER_TENSOR, PER_TOKEN_DYNAMIC, PER_CHANNEL_GROUP = 1, 2, 3, 4


class Datatype(NamedTuple):
    """One ``XNNDatatype``: its code, XNNPACK name (without ``xnn_datatype_``), the torch
    dtype name of its logical elements and their width in bits."""

    code: int
    name: str
    dtype: str
    bits: int


DATATYPES: tuple[Datatype, ...] = (
    Datatype(0, "invalid", "invalid", 0),
    Datatype(1, "fp32", "float32", 32),
    Datatype(2, "fp16", "float16", 16),
    Datatype(3, "qint8", "int8", 8),  # per-tensor scale / zero point
    Datatype(4, "quint8", "uint8", 8),
    Datatype(5, "qint32", "int32", 32),
    Datatype(6, "qcint8", "int8", 8),  # per-channel scales
    Datatype(7, "qcint32", "int32", 32),
    Datatype(8, "qcint4", "int4", 4),  # per-channel, two values per byte (+8)
    Datatype(9, "qdint8", "int8", 8),  # dynamically quantized activations
    Datatype(10, "qbint4", "int4", 4),  # blockwise (groupwise), two values per byte (+8)
    Datatype(11, "qpint8", "int8", 8),
    Datatype(12, "int32", "int32", 32),
    Datatype(13, "pfp32", "float32", 32),
    Datatype(14, "bf16", "bfloat16", 16),
)
#: Zero point of the 4-bit types: stored nibble = value + 8 (low nibble first).
INT4_ZERO_POINT = 8


class NodeType(NamedTuple):
    """One ``XNodeUnion`` member: its op name (without ``XNN``) and the slots of its input
    ids, output ids and flags in the node's table."""

    code: int
    name: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    flags: int


# Table shapes shared by several union members (slots of input ids, output ids, flags).
_2X1 = ((0, 1), (2,), 3)  # _XNNNode2x1: input1_id, input2_id, output_id, flags
_1X1 = ((0,), (1,), 2)  # _XNNNode1x1: input_id, output_id, flags
_FC = ((0, 1, 2), (3,), 4)  # XNNFullyConnected: input1_id, filter_id, bias_id, output_id, flags
_CONV = ((15, 16, 17), (18,), 19)  # _XNNNodeConv: 15 geometry fields, then the ids
_POOL = ((10,), (11,), 12)  # _XNNPooling2D: 10 geometry fields, then the ids
_SHAPED = ((2,), (3,), 4)  # num_dims/perm or new_shape or new_height/new_width, then the ids
_PAD = ((3,), (4,), 5)  # pre_paddings, post_paddings, padding_value, ids
_SLOPE = ((1,), (2,), 3)  # alpha / negative_slope, ids
_SLICE = ((3,), (4,), 5)  # num_dims, offsets, sizes, ids


def _cat(n: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    # _XNNCat: axis, input1..4_id, output_id, flags, input5_id
    return ((1, 2, 3, 4, 7)[:n], (5,), 6)


_NODES: tuple[tuple[str, tuple[tuple[int, ...], tuple[int, ...], int]], ...] = (
    ("Add", _2X1), ("FullyConnected", _FC), ("Softmax", _1X1), ("Sigmoid", _1X1),
    ("StaticTranspose", _SHAPED), ("Clamp", _1X1), ("Conv2d", _CONV), ("Div", _2X1),
    ("StaticResizeBilinear2D", _SHAPED), ("StaticConstantPad", _PAD),
    ("AvgPooling2d", _POOL), ("Minimum", _2X1), ("DepthwiseConv2d", _CONV),
    ("MaxPooling2d", _POOL), ("Multiply", _2X1), ("Subtract", _2X1), ("Floor", _1X1),
    ("Convert", _1X1), ("GlobalAvgPooling2d", _1X1), ("StaticReshape", _SHAPED),
    ("ArgMaxPooling2d", ((6,), (7, 8), 9)), ("SquareRoot", _1X1), ("Ceiling", _1X1),
    ("Hardswish", _1X1), ("LeakyReLU", _SLOPE), ("Maximum", _2X1), ("Negate", _1X1),
    ("Square", _1X1), ("ELU", _SLOPE), ("Abs", _1X1), ("PReLU", _2X1),
    ("Concatenate2", _cat(2)), ("Concatenate3", _cat(3)), ("Concatenate4", _cat(4)),
    ("StaticSlice", _SLICE), ("ScaledDotProductAttention", ((0, 1, 2, 3, 4), (5,), 6)),
    ("BatchMatrixMultiply", _2X1), ("Concatenate5", _cat(5)), ("ConvTranspose2d", _CONV),
    ("ReciprocalSquareRoot", _1X1), ("Log", _1X1), ("Gelu", _1X1), ("Tanh", _1X1),
    ("Exp", _1X1), ("Sin", _1X1), ("Copy", _1X1), ("Cos", _1X1),
)
#: XNodeUnion members (index = union type; 0 = NONE).
NODE_TYPES: tuple[NodeType, ...] = (
    NodeType(0, "NONE", (), (), -1),
    *(NodeType(k, name, ins, outs, fl) for k, (name, (ins, outs, fl)) in enumerate(_NODES, 1)),
)
