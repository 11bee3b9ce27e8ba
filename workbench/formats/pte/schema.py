"""The ``Program`` flatbuffer schema (``program.fbs``, file identifier ``ET12``), as slots.

Every table the reader visits is a class whose attributes are its field slots (vtable
indices), in schema order and with the schema's own names; a union field takes two slots, its
``u8`` type (``<name>_type``) and then its value. Union and enum codes are ``IntEnum``s. Both
the vectorised path (``Tables.scalar(Tensor.data_buffer_idx, "<u4")``) and the scalar
verifying path (``table.u32(Tensor.data_buffer_idx)``) read fields through these names only.

Example:
    >>> Tensor.data_buffer_idx, EValue.val, KernelTypes.Tensor
    (5, 1, <KernelTypes.Tensor: 5>)
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "AllocationDetails", "BackendDelegate", "BackendDelegateDataReference",
    "BackendDelegateInlineData", "Bool", "Buffer", "Chain", "CompileSpec", "DataLocation",
    "DataSegment", "DelegateCall", "Double", "EValue", "ExecutionPlan", "ExtraTensorInfo",
    "FreeCall", "INSTRUCTION_TYPES", "Instruction", "InstructionArguments", "Int",
    "JumpFalseCall", "KernelCall", "KernelTypes", "LIST_TYPES", "List", "MoveCall", "NamedData",
    "Operator", "Program", "String",
    "SubsegmentOffsets", "Tensor", "TensorDataLocation", "TensorShapeDynamism", "VALUE_TYPES",
]


class Program:
    """The root table."""
    version = 0
    execution_plan = 1
    constant_buffer = 2
    backend_delegate_data = 3
    segments = 4
    constant_segment = 5
    mutable_data_segments = 6
    named_data = 7


class ExecutionPlan:
    """One method."""
    name = 0
    container_meta_type = 1
    values = 2
    inputs = 3
    outputs = 4
    chains = 5
    operators = 6
    delegates = 7
    non_const_buffer_sizes = 8
    non_const_buffer_device = 9


class EValue:
    """A value: the union ``val`` (:class:`KernelTypes`)."""
    val_type = 0
    val = 1


class Tensor:
    scalar_type = 0
    storage_offset = 1
    sizes = 2
    dim_order = 3
    requires_grad = 4
    data_buffer_idx = 5
    allocation_info = 6
    layout = 7
    shape_dynamism = 8
    extra_tensor_info = 9


class AllocationDetails:
    memory_id = 0
    memory_offset_low = 1
    memory_offset_high = 2


class ExtraTensorInfo:
    mutable_data_segments_idx = 0
    fully_qualified_name = 1
    location = 2
    device_type = 3
    device_index = 4


class Int:
    int_val = 0


class Bool:
    bool_val = 0


class Double:
    double_val = 0


class String:
    string_val = 0


class List:
    """IntList, DoubleList, BoolList, TensorList and OptionalTensorList: one vector."""
    items = 0


class Chain:
    inputs = 0
    outputs = 1
    instructions = 2
    stacktrace = 3


class Instruction:
    """An instruction: the union ``instr_args`` (:class:`InstructionArguments`)."""
    instr_args_type = 0
    instr_args = 1


class KernelCall:
    op_index = 0
    args = 1


class DelegateCall:
    delegate_index = 0
    args = 1


class MoveCall:
    move_from = 0
    move_to = 1


class JumpFalseCall:
    cond_value_index = 0
    destination_instruction = 1


class FreeCall:
    value_index = 0


class Operator:
    name = 0
    overload = 1


class BackendDelegate:
    id = 0
    processed = 1
    compile_specs = 2


class BackendDelegateDataReference:
    location = 0
    index = 1


class CompileSpec:
    key = 0
    value = 1


class Buffer:
    """A legacy inline constant buffer."""
    storage = 0


class BackendDelegateInlineData:
    data = 0


class DataSegment:
    offset = 0
    size = 1


class SubsegmentOffsets:
    segment_index = 0
    offsets = 1


class NamedData:
    key = 0
    segment_index = 1


class KernelTypes(IntEnum):
    """Union ``KernelTypes`` (``EValue.val``); 0 is NONE."""
    NONE = 0
    Null = 1
    Int = 2
    Bool = 3
    Double = 4
    Tensor = 5
    String = 6
    IntList = 7
    DoubleList = 8
    BoolList = 9
    TensorList = 10
    OptionalTensorList = 11


class InstructionArguments(IntEnum):
    """Union ``InstructionArguments`` (``Instruction.instr_args``); 0 is NONE."""
    NONE = 0
    KernelCall = 1
    DelegateCall = 2
    MoveCall = 3
    JumpFalseCall = 4
    FreeCall = 5


class DataLocation(IntEnum):
    """``BackendDelegateDataReference.location``."""
    INLINE = 0
    SEGMENT = 1


class TensorDataLocation(IntEnum):
    """``ExtraTensorInfo.location``."""
    SEGMENT = 0
    EXTERNAL = 1


class TensorShapeDynamism(IntEnum):
    STATIC = 0
    DYNAMIC_BOUND = 1
    DYNAMIC_UNBOUND = 2


#: KernelTypes names by code, as shown in the values frame ("None" for NONE).
VALUE_TYPES = ("None", *(k.name for k in KernelTypes if k))
#: InstructionArguments names by code.
INSTRUCTION_TYPES = ("None", *(k.name for k in InstructionArguments if k))
#: List members of KernelTypes -> (numpy dtype, struct format, element size) of ``items``.
LIST_TYPES = {
    KernelTypes.IntList: ("<i8", "q", 8),
    KernelTypes.DoubleList: ("<f8", "d", 8),
    KernelTypes.BoolList: ("u1", "B", 1),
    KernelTypes.TensorList: ("<i4", "i", 4),
    KernelTypes.OptionalTensorList: ("<i4", "i", 4),
}
