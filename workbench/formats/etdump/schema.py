"""The ETDump flatbuffer: table slots and enum codes, named once.

Written from the facts of ExecuTorch's ``devtools/etdump/etdump_schema_flatcc.fbs`` (schema
version 0, file identifier ``ED00``, extension ``.etdp``); every reader of this package uses
these names instead of bare numbers. A slot is a field's position in its table's vtable
(schema order); field names are the schema's own.

Tables and their slots (``=`` gives the default of an absent scalar)::

    ETDump          version: uint, run_data: [RunData]                       (root)
    RunData         name: string, bundled_input_index: int = -1,
                    allocators: [Allocator], events: [Event]
    Allocator       name: string
    Event           profile_event, allocation_event, debug_event    (exactly one is set)
    ProfileEvent    name: string, chain_index: int, instruction_id: int = -1,
                    delegate_debug_id_int: int = -1, delegate_debug_id_str: string,
                    delegate_debug_metadata: [ubyte], start_time: ulong, end_time: ulong
    AllocationEvent allocator_id: int, allocation_size: ulong
    DebugEvent      chain_index: ulong, instruction_id: int = -1, debug_entry: Value,
                    delegate_debug_id_int: int = -1, delegate_debug_id_str: string,
                    name: string
    Value           val: ValueType (byte enum), tensor: Tensor, tensor_list: TensorList,
                    int_value: Int, float_value: Float, double_value: Double,
                    bool_value: Bool, output: Bool
    Tensor          scalar_type: ScalarType (byte), sizes: [long], strides: [long],
                    offset: long                   (offset: byte offset in the debug buffer)
    TensorList      tensors: [Tensor]
    Int / Bool / Float / Double / String   one field each (long / bool / float / double /
                    string)

``ValueType`` is a plain byte enum (not a flatbuffer union): the value sits in the field of
its kind. ``String`` has a code but no field in ``Value``.

Example:
    >>> ProfileEvent.start_time, VALUE_TYPES[Value.TENSOR]
    (6, 'Tensor')
"""

from __future__ import annotations

__all__ = [
    "FILE_IDENTIFIER", "VERSION", "ETDump", "RunData", "Allocator", "Event", "ProfileEvent",
    "AllocationEvent", "DebugEvent", "Value", "Tensor", "TensorList", "Scalar", "VALUE_TYPES",
    "EVENT_TYPES", "EVENT_KINDS", "FRAMEWORK_CHAIN", "NOT_SET",
]

#: The 4-byte file identifier (at byte 8 of a size-prefixed file, at 4 of a plain one).
FILE_IDENTIFIER = b"ED00"
#: The schema version this package knows (``ETDump.version``).
VERSION = 0
#: ``instruction_id`` / ``delegate_debug_id_int`` / ``bundled_input_index`` when not set.
NOT_SET = -1
#: ``chain_index`` of events the runtime itself logs (load, init, execute): not an
#: instruction of any chain.
FRAMEWORK_CHAIN = -1


class ETDump:
    """Root table."""

    version = 0
    run_data = 1


class RunData:
    """One block of events (the runtime opens one per load and one per execution)."""

    name = 0
    bundled_input_index = 1
    allocators = 2
    events = 3


class Allocator:
    """A memory allocator the runtime profiled (``AllocationEvent.allocator_id`` indexes
    ``RunData.allocators``)."""

    name = 0


class Event:
    """A wrapper with exactly one of three event tables set."""

    profile_event = 0
    allocation_event = 1
    debug_event = 2


#: Event slot -> type name; an event with none of them set (or only unknown, newer slots)
#: is counted as ``unknown``.
EVENT_TYPES = ("profile", "allocation", "debug")


class ProfileEvent:
    """A timed span: an instruction, a kernel, a delegate call or a runtime phase."""

    name = 0
    chain_index = 1
    instruction_id = 2
    delegate_debug_id_int = 3
    delegate_debug_id_str = 4
    delegate_debug_metadata = 5
    start_time = 6
    end_time = 7


class AllocationEvent:
    """Bytes taken from one allocator."""

    allocator_id = 0
    allocation_size = 1


class DebugEvent:
    """A value the runtime logged: an intermediate output or a program output."""

    chain_index = 0
    instruction_id = 1
    debug_entry = 2
    delegate_debug_id_int = 3
    delegate_debug_id_str = 4
    name = 5


class Value:
    """A logged value: ``val`` says which of the other fields holds it.

    The upper-case attributes are the ``ValueType`` codes.
    """

    val = 0
    tensor = 1
    tensor_list = 2
    int_value = 3
    float_value = 4
    double_value = 5
    bool_value = 6
    output = 7

    NULL, INT, BOOL, FLOAT, DOUBLE, TENSOR, TENSOR_LIST, STRING = range(8)


#: ``ValueType`` code -> name (the codes are 0..7).
VALUE_TYPES = ("Null", "Int", "Bool", "Float", "Double", "Tensor", "TensorList", "String")


class Tensor:
    """Layout of a logged tensor; its bytes are in the debug buffer at ``offset``."""

    scalar_type = 0
    sizes = 1
    strides = 2
    offset = 3


class TensorList:
    """A list of logged tensors."""

    tensors = 0


class Scalar:
    """The one field of the scalar wrapper tables ``Int``, ``Bool``, ``Float``, ``Double``
    and ``String``."""

    value = 0


#: ``events.kind`` vocabulary, decided in this order:
#: ``delegate_op`` (an event a backend logged: a delegate debug id is set),
#: ``framework`` (chain -1: ``Program::load_method``, ``Method::init``, ``Method::execute``),
#: ``operator_call`` (``OPERATOR_CALL``: one kernel instruction, lookup and call),
#: ``kernel`` (``native_call_<op>``: the kernel body inside it),
#: ``delegate_call`` (``DELEGATE_CALL``: one delegate instruction), ``other``.
EVENT_KINDS = ("delegate_op", "framework", "operator_call", "kernel", "delegate_call", "other")
#: Event names the runtime gives instruction-level spans.
OPERATOR_CALL = "OPERATOR_CALL"
DELEGATE_CALL = "DELEGATE_CALL"
KERNEL_PREFIX = "native_call_"
