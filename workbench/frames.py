"""The frame schemas — every column of every frame, its dtype and meaning — in ONE place.

Readers produce plain columns (``dict[str, list]``); :func:`build` turns them into pandas
DataFrames with the dtypes declared here, in the order declared here. Columns a format does
not have are simply absent; the *required* columns of ``segments`` and ``tensors`` (the
public contract) are always present.

Vocabularies:

* ``segments.kind``: ``header`` (fixed file/format headers), ``flatbuffer`` (the program or
  data-file flatbuffer), ``padding`` (gaps, alignment), ``trailing`` (bytes after the last
  declared structure), ``constant`` (a .pte constant segment), ``mutable_data`` (initial
  values of mutable buffers), ``delegate`` (a backend's processed blob), ``named_data``
  (data looked up by key, e.g. XNNPACK weights), ``unused`` (a segment nothing refers to).
* ``tensors.storage``: ``segment`` (the .pte constant segment), ``inline`` (legacy
  ``Program.constant_buffer`` inside the flatbuffer), ``external`` (bytes in a .ptd file),
  ``named_data`` (a keyed blob, raw bytes), ``mutable`` (a memory-planned buffer whose
  initial value is stored in a mutable-data segment), ``planned`` (memory-planned by the
  compiler; no stored bytes, placed in an arena at runtime), ``unallocated`` (neither stored
  nor planned: provided at runtime, e.g. unplanned inputs/outputs).
* ``segments.kind`` in a ``.bpte`` also has ``test_data`` (bytes of a bundled test tensor);
  the embedded program's rows are named ``program: ...``.

Example:
    >>> from workbench.frames import SCHEMAS
    >>> [c.name for c in SCHEMAS["segments"] if c.required]
    ['file', 'name', 'kind', 'offset', 'size']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Column", "SCHEMAS", "build", "describe"]


class Column(NamedTuple):
    """One column: ``name``, pandas ``dtype``, ``doc``, and whether every format has it."""

    name: str
    dtype: str
    doc: str
    required: bool = False


def _c(name: str, dtype: str, doc: str, required: bool = False) -> Column:
    return Column(name, dtype, doc, required)


SCHEMAS: dict[str, list[Column]] = {
    "segments": [
        _c("file", "string", "path of the file this byte range belongs to", True),
        _c("name", "string", "what the range holds (e.g. 'constant_segment', a named-data key)", True),
        _c("kind", "category", "header | flatbuffer | padding | trailing | constant | "
           "mutable_data | delegate | named_data | unused", True),
        _c("offset", "int64", "absolute offset in `file`", True),
        _c("size", "int64", "length in bytes (rows of one file sum to its size)", True),
        _c("align", "Int64", "largest power of two dividing `offset` (missing for offset 0)"),
        _c("index", "Int64", "the format's own index of the segment (e.g. Program.segments[i])"),
        _c("used_by", "string", "what refers to this range"),
    ],
    "tensors": [
        _c("name", "string", "fully qualified name, else a stable synthetic name "
           "('<method>/<value index>' in a .pte)", True),
        _c("dtype", "category", "torch dtype name: float32, bfloat16, int8, ...", True),
        _c("shape", "object", "tuple of int", True),
        _c("nbytes", "int64", "numel x element size (from the shape, not from offsets)", True),
        _c("storage", "category", "where the bytes are: segment | inline | external | "
           "named_data | mutable | planned | unallocated", True),
        _c("file", "string", "file holding the bytes (missing when none are stored)", True),
        _c("offset", "Int64", "absolute offset of the bytes in `file` (missing when none)", True),
        _c("align", "Int64", "largest power of two dividing `offset`"),
        _c("method", "category", "execution plan (.pte/.bpte) the value belongs to"),
        _c("value", "Int64", "index in the method's value table (.pte/.bpte)"),
        _c("fqn", "string", "fully qualified name stored in the artifact, if any"),
        _c("dim_order", "object", "tuple: memory order of the dimensions"),
        _c("segment", "Int64", "index of the segment holding the bytes"),
        _c("data_buffer_idx", "Int64", "Tensor.data_buffer_idx (0 = no constant data)"),
        _c("mem_id", "Int64", "memory-planned arena (AllocationDetails.memory_id)"),
        _c("mem_offset", "Int64", "offset inside the arena"),
        _c("shape_dynamism", "category", "static | dynamic_bound | dynamic_unbound"),
        _c("requires_grad", "boolean", "Tensor.requires_grad"),
        _c("has_layout", "boolean", "named data: a dtype/shape is stored (else raw uint8 bytes)"),
        _c("missing", "boolean", "external bytes were not found in any data file"),
        _c("used_by", "string", "delegates whose blobs refer to this named-data key"),
    ],
    "methods": [
        _c("method", "string", "execution plan name"),
        _c("index", "int64", "position in Program.execution_plan"),
        _c("values", "int64", "number of values (EValues)"),
        _c("tensors", "int64", "number of tensor values"),
        _c("inputs", "int64", "number of inputs"),
        _c("outputs", "int64", "number of outputs"),
        _c("chains", "int64", "number of chains"),
        _c("instructions", "int64", "instructions in all chains"),
        _c("kernel_calls", "int64", "KernelCall instructions"),
        _c("delegate_calls", "int64", "DelegateCall instructions"),
        _c("operators", "int64", "entries in the operator table"),
        _c("delegates", "int64", "backend delegates"),
        _c("planned_buffers", "int64", "memory-planned arenas (non_const_buffer_sizes[1:])"),
        _c("planned_bytes", "int64", "sum of the planned arena sizes"),
        _c("constant_bytes", "int64", "bytes of constant tensors (segment, inline, external)"),
        _c("constant_method", "bool", "no instructions: a constant method (returns stored values)"),
    ],
    "values": [
        _c("method", "category", "execution plan name"),
        _c("value", "int64", "index in the value table"),
        _c("type", "category", "Null | Int | Bool | Double | Tensor | String | IntList | ..."),
        _c("summary", "string", "a short rendering of the value"),
        _c("is_input", "bool", "listed in the method's inputs"),
        _c("is_output", "bool", "listed in the method's outputs"),
    ],
    "operators": [
        _c("method", "category", "execution plan name"),
        _c("index", "int64", "position in the method's operator table"),
        _c("name", "string", "operator name, e.g. aten::addmm"),
        _c("overload", "string", "overload name, e.g. out"),
        _c("op", "string", "name.overload"),
        _c("uses", "int64", "KernelCall instructions that call it"),
    ],
    "delegates": [
        _c("method", "category", "execution plan name"),
        _c("index", "int64", "position in the method's delegate table"),
        _c("id", "string", "backend id, e.g. XnnpackBackend"),
        _c("location", "category", "inline (in the flatbuffer) | segment"),
        _c("data_index", "int64", "index into backend_delegate_data or Program.segments"),
        _c("file", "string", "file holding the processed blob"),
        _c("offset", "int64", "absolute offset of the processed blob"),
        _c("size", "int64", "size of the processed blob"),
        _c("align", "Int64", "largest power of two dividing `offset`"),
        _c("compile_specs", "string", "compile spec keys, comma separated"),
        _c("calls", "int64", "DelegateCall instructions that call it"),
    ],
    "named_data": [
        _c("key", "string", "lookup key (XNNPACK uses the sha256 of the bytes)"),
        _c("segment", "int64", "segment index"),
        _c("file", "string", "file holding the bytes"),
        _c("offset", "int64", "absolute offset"),
        _c("size", "int64", "size in bytes"),
        _c("align", "Int64", "largest power of two dividing `offset`"),
        _c("has_layout", "boolean", "a tensor layout (dtype, sizes, dim order) is stored"),
        _c("role", "category", "tensor | blob | so_blob | weights_blob (AOTI delegate convention)"),
        _c("used_by", "string", "delegates whose blobs refer to this key"),
    ],
    "memory_plan": [
        _c("method", "category", "execution plan name"),
        _c("mem_id", "int64", "arena index (non_const_buffer_sizes index)"),
        _c("buffer_size", "Int64", "arena size in bytes (missing if mem_id is out of range)"),
        _c("value", "int64", "value index of the tensor"),
        _c("name", "string", "tensor name (fqn or synthetic)"),
        _c("dtype", "category", "torch dtype name"),
        _c("shape", "object", "tuple of int"),
        _c("offset", "int64", "offset inside the arena"),
        _c("nbytes", "int64", "tensor size (upper bound for dynamic shapes)"),
        _c("end", "int64", "offset + nbytes"),
        _c("storage", "category", "planned | mutable"),
        _c("fits", "bool", "the tensor lies inside its arena"),
    ],
    "test_cases": [
        _c("name", "string", "method/case/io/index, accepted by Artifact.tensor"),
        _c("method", "category", "method the test suite exercises"),
        _c("case", "int64", "test case index within the suite"),
        _c("io", "category", "input | expected_output"),
        _c("index", "int64", "position among the case's inputs or expected outputs"),
        _c("kind", "category", "Tensor | Int | Bool | Double"),
        _c("dtype", "category", "torch dtype name (tensors)"),
        _c("shape", "object", "tuple of int (tensors)"),
        _c("nbytes", "Int64", "tensor bytes"),
        _c("file", "string", "file holding the tensor bytes"),
        _c("offset", "Int64", "absolute offset of the tensor bytes"),
        _c("align", "Int64", "largest power of two dividing `offset`"),
        _c("value", "string", "scalar value (Int/Bool/Double)"),
        _c("dim_order", "object", "tuple: memory order of the dimensions"),
    ],
    "findings": [
        _c("severity", "category", "info | warning | error"),
        _c("structure", "string", "structure path"),
        _c("offset", "Int64", "absolute offset"),
        _c("message", "string", "what was found"),
    ],
}

_INDEX = {name: {c.name: c for c in cols} for name, cols in SCHEMAS.items()}


def build(name: str, columns: dict[str, list]) -> pd.DataFrame:
    """A DataFrame for frame ``name`` from plain columns, with the declared dtypes and order.

    Raises ``KeyError`` for a column the schema does not declare and ``ValueError`` when a
    required column is missing (both are programming errors, not artifact errors).

    Example:
        >>> df = build("named_data", {"key": ["a"], "segment": [0], "file": ["x.pte"],
        ...                           "offset": [128], "size": [4], "align": [128]})
        >>> df.dtypes["offset"]
        dtype('int64')
    """
    import pandas as pd

    schema = SCHEMAS[name]
    index = _INDEX[name]
    for col in columns:
        if col not in index:
            raise KeyError(f"frame {name!r} has no column {col!r} in workbench.frames.SCHEMAS")
    data = {}
    for col in schema:
        if col.name not in columns:
            if col.required:
                raise ValueError(f"frame {name!r} lacks required column {col.name!r}")
            continue
        data[col.name] = _CONVERT[col.dtype](columns[col.name])
    return pd.DataFrame(data, copy=False)


# -- fast converters from Python lists to pandas arrays (frames are built on hot paths) ------

def _int64(values: list) -> object:
    import numpy as np

    return np.array(values, dtype=np.int64)


def _bool(values: list) -> object:
    import numpy as np

    return np.array(values, dtype=bool)


def _object(values: list) -> object:
    import pandas as pd

    return pd.Series(values, dtype=object).array


def _nullable(values: list, kind: str) -> object:
    import numpy as np
    import pandas as pd

    dtype = np.int64 if kind == "Int64" else bool
    cls = pd.arrays.IntegerArray if kind == "Int64" else pd.arrays.BooleanArray
    n = len(values)
    if None not in values:
        return cls(np.array(values, dtype=dtype), np.zeros(n, bool))
    if values.count(None) == n:
        return cls(np.zeros(n, dtype=dtype), np.ones(n, bool))
    arr = np.array(values, dtype=object)
    mask = np.equal(arr, None)
    arr[mask] = 0
    return cls(arr.astype(dtype), mask)


def _string(values: list) -> object:
    import numpy as np
    import pandas as pd

    if None in values and values.count(None) == len(values):
        return pd.arrays.StringArray(np.full(len(values), pd.NA, dtype=object))
    arr = np.array(values, dtype=object) if values else np.empty(0, dtype=object)
    if None in values:
        arr[np.equal(arr, None)] = pd.NA
    return pd.arrays.StringArray(arr)


def _category(values: list) -> object:
    import numpy as np
    import pandas as pd

    if not values:
        return pd.Categorical([])
    codes, uniques = pd.factorize(np.array(values, dtype=object), use_na_sentinel=True)
    return pd.Categorical.from_codes(codes, categories=uniques, validate=False)


_CONVERT = {
    "int64": _int64,
    "bool": _bool,
    "object": _object,
    "string": _string,
    "category": _category,
    "Int64": lambda v: _nullable(v, "Int64"),
    "boolean": lambda v: _nullable(v, "boolean"),
}


def describe(name: str | None = None) -> pd.DataFrame:
    """The schema as a frame (frame, column, dtype, required, doc): documentation at hand.

    Example:
        >>> describe("tensors").query("required")["column"].tolist()
        ['name', 'dtype', 'shape', 'nbytes', 'storage', 'file', 'offset']
    """
    import pandas as pd

    rows = [(f, c.name, c.dtype, c.required, c.doc) for f, cols in SCHEMAS.items()
            if name in (None, f) for c in cols]
    return pd.DataFrame(rows, columns=["frame", "column", "dtype", "required", "doc"])
