"""Vulkan delegate blobs: the ``VH00`` header, the ``VkGraph`` flatbuffer (``VK00``) and the
constant bytes.

Facts from ExecuTorch's ``backends/vulkan/serialization`` (``VulkanDelegateHeader``,
``schema.fbs``); slots are field positions, union members count from 1::

    0   4   zeros            4  4s  "VH00"        8  u16 header length (30)
    10  u32 flatbuffer offset    14  u32 flatbuffer size
    18  u32 bytes offset         22  u64 bytes size        (all from the start of the blob)
    the VkGraph flatbuffer (16-aligned), then the constant bytes (each constant 16-aligned)

``VkGraph``: version, chain [OperatorCall(node_id, name, args)], values [VkValue(union
GraphTypes)], input_ids, output_ids, constants [VkBytes(offset, length, named_key)],
shaders [VkBytes]. ``VkTensor``: datatype, dims, constant_id (-1: none), mem_obj_id,
storage_type, memory_layout. A constant whose offset is 2**64-1 lives in named data.

Example:
    >>> from workbench.formats.delegates import vulkan
    >>> vulkan.DATATYPES[5], vulkan.HEADER_MAGIC
    ('float32', b'VH00')
"""

from __future__ import annotations

import math

from ...errors import CorruptError, OutOfBoundsError, TruncatedError, UnsupportedVersionError
from ...flatbuf import FlatBuffer
from ._base import Blob, BlobInfo
from ._columns import MISSING, NODE_KINDS, TENSOR_KINDS, rows_to_columns

__all__ = ["BACKEND", "IDS", "detect", "parse"]

BACKEND = "vulkan"
IDS = ("VulkanBackend",)
HEADER_MAGIC = b"VH00"
IDENTIFIER = b"VK00"
HEADER_LENGTH = 30
NAMED_OFFSET = (1 << 64) - 1


class Header:
    """Byte offsets of the ``VH00`` header fields."""

    LENGTH = 8  # u16
    FLATBUFFER_OFFSET = 10  # u32
    FLATBUFFER_SIZE = 14  # u32
    BYTES_OFFSET = 18  # u32
    BYTES_SIZE = 22  # u64


class VkGraph:
    version = 0
    chain = 1
    values = 2
    input_ids = 3
    output_ids = 4
    constants = 5
    shaders = 6


class OperatorCall:
    node_id = 0
    name = 1
    args = 2


class VkValue:
    value_type = 0
    value = 1


class VkTensor:
    datatype = 0
    dims = 1
    constant_id = 2
    mem_obj_id = 3
    storage_type = 4
    memory_layout = 5


class VkBytes:
    offset = 0
    length = 1
    named_key = 2


#: GraphTypes union members (index = type).
GRAPH_TYPES = ("NONE", "Null", "Int", "Double", "Bool", "VkTensor", "IntList", "DoubleList",
               "BoolList", "ValueList", "String", "SymInt")
_TENSOR = GRAPH_TYPES.index("VkTensor")
#: VkDataType -> torch dtype name (127 = UNSET).
DATATYPES = {0: "bool", 1: "uint8", 2: "int8", 3: "int32", 4: "float16", 5: "float32",
             6: "float64", 7: "int64"}
_ITEMSIZE = {"bool": 1, "uint8": 1, "int8": 1, "int32": 4, "float16": 2, "float32": 4,
             "float64": 8, "int64": 8}


def detect(blob: Blob) -> bool:
    """``VH00`` at bytes 4..8 (or a bare ``VK00`` flatbuffer)."""
    tag = bytes(blob.buf[blob.start + 4:blob.start + 8]) if blob.length >= 8 else b""
    return tag in (HEADER_MAGIC, IDENTIFIER)


def parse(blob: Blob) -> BlobInfo:
    """Read one Vulkan blob: header, graph values and operator chain, constants."""
    start, end = blob.start, blob.end
    header: dict[str, int | str] = {}
    parts: list[tuple[int, int, str, str]] = []
    if bytes(blob.buf[start + 4:start + 8]) == HEADER_MAGIC:
        what = "Vulkan header (VH00)"
        if end - start < HEADER_LENGTH:
            raise TruncatedError(f"{end - start} bytes is too short for the Vulkan header",
                                 file=blob.path, structure=what, offset=start)
        length = blob.u16(start + Header.LENGTH, what)
        fb_off = blob.u32(start + Header.FLATBUFFER_OFFSET, what)
        fb_size = blob.u32(start + Header.FLATBUFFER_SIZE, what)
        b_off = blob.u32(start + Header.BYTES_OFFSET, what)
        b_size = blob.u64(start + Header.BYTES_SIZE, what)
        header.update(magic="VH00", length=length, flatbuffer_offset=fb_off,
                      flatbuffer_size=fb_size, bytes_offset=b_off, bytes_size=b_size)
        size = end - start
        if length < HEADER_LENGTH or fb_off < length or fb_size < 8 or fb_off + fb_size > size:
            raise OutOfBoundsError(f"flatbuffer [0x{fb_off:x}, +0x{fb_size:x}) does not fit "
                                   f"between the header ({length} bytes) and the end of the "
                                   f"blob (size 0x{size:x})", file=blob.path,
                                   structure=f"{what}.flatbuffer_offset",
                                   offset=start + Header.FLATBUFFER_OFFSET)
        if b_off < fb_off + fb_size or b_off + b_size > size:
            raise OutOfBoundsError(f"bytes [0x{b_off:x}, +0x{b_size:x}) do not fit after the "
                                   f"flatbuffer in the blob (size 0x{size:x})", file=blob.path,
                                   structure=f"{what}.bytes_offset",
                                   offset=start + Header.BYTES_OFFSET)
        parts.append((start, length, "header (VH00)", "header"))
        fb_start, bytes_start, bytes_size = start + fb_off, start + b_off, b_size
    else:
        fb_start, fb_size, bytes_start, bytes_size = start, end - start, end, 0
    ident = bytes(blob.buf[fb_start + 4:fb_start + 8])
    if ident != IDENTIFIER:
        raise UnsupportedVersionError(f"VkGraph file identifier is {ident!r}, expected "
                                      f"{IDENTIFIER!r}", file=blob.path,
                                      structure="VkGraph identifier", offset=fb_start + 4)
    fb = FlatBuffer(blob, fb_start, fb_start + fb_size, identifier=IDENTIFIER, name="VkGraph")
    root = fb.root("VkGraph")
    parts.append((fb_start, fb_size, "VkGraph flatbuffer (VK00)", "flatbuffer"))
    consts = []
    for k, c in enumerate(root.tables(VkGraph.constants, "constants")):
        off, length = c.u64(VkBytes.offset), c.u64(VkBytes.length)
        key = c.string(VkBytes.named_key, "named_key") or None
        if length >= 1 << 62:
            raise CorruptError(f"length {length} is larger than any blob", file=blob.path,
                               structure=f"VkGraph.constants[{k}].length", offset=c.pos)
        if off == NAMED_OFFSET:
            hit = blob.resolve(key) if key else None
            storage = "named_data" if hit is None or hit[0] == blob.path else "external"
            consts.append((storage, hit[0] if hit else None, hit[1] if hit else None, length, key,
                           None if blob.named is None else hit is None))
            continue
        if off + length > bytes_size:
            raise OutOfBoundsError(f"constant [0x{off:x}, +0x{length:x}) runs past the bytes "
                                   f"section (size 0x{bytes_size:x})", file=blob.path,
                                   structure=f"VkGraph.constants[{k}]", offset=c.pos)
        consts.append(("blob", blob.path, bytes_start + off + blob.shift, length, None, False))
        if length:
            parts.append((bytes_start + off, length, f"constants[{k}]", "constant"))
    prefix = f"{blob.method}/delegate{blob.index}/"
    inputs = set(root.scalars(VkGraph.input_ids, "I", "input_ids"))
    outputs = set(root.scalars(VkGraph.output_ids, "I", "output_ids"))
    rows = []
    for i, v in enumerate(root.tables(VkGraph.values, "values")):
        t, tab = v.union(VkValue.value_type, len(GRAPH_TYPES), "value")
        if t != _TENSOR or tab is None:
            continue
        code = tab.i8(VkTensor.datatype)
        dtype = DATATYPES.get(code)
        if dtype is None:
            raise CorruptError(f"datatype {code} is unknown", file=blob.path,
                               structure=f"{tab.path}.datatype", offset=tab.pos)
        dims = tuple(tab.scalars(VkTensor.dims, "I", "dims"))
        numel = math.prod(dims)
        if numel >= 1 << 59:  # x 8 bytes must fit an int64
            raise CorruptError(f"dims {list(dims)[:8]} are too large", file=blob.path,
                               structure=f"{tab.path}.dims", offset=tab.pos)
        cid = tab.i32(VkTensor.constant_id)
        row = {"name": prefix + str(i), "value": i, "dtype": dtype, "backend_dtype": dtype,
               "shape": dims, "numel": numel, "nbytes": numel * _ITEMSIZE[dtype],
               "quant": "none", "flags": 0, "storage": "runtime",
               "role": "input" if i in inputs else "output" if i in outputs else "internal"}
        if cid >= 0:
            if cid >= len(consts):
                raise OutOfBoundsError(f"constant_id {cid} is out of range ({len(consts)} "
                                       "constants)", file=blob.path,
                                       structure=f"{tab.path}.constant_id", offset=tab.pos)
            storage, f, off, length, key, missing = consts[cid]
            row.update(role="constant", storage=storage, file=f, offset=off, data_size=length,
                       named_key=key, constant_index=cid, missing=missing)
        rows.append(row)
    nodes = []
    for k, op in enumerate(root.tables(VkGraph.chain, "chain")):
        nodes.append({"node": k, "op": op.string(OperatorCall.name, "name") or "",
                      "inputs": tuple(op.scalars(OperatorCall.args, "i", "args")),
                      "outputs": (), "flags": 0, "debug_handle": op.u32(OperatorCall.node_id)})
    header.update(identifier="VK00", version=root.string(VkGraph.version, "version") or "",
                  values=len(rows), chain=len(nodes), constants=len(consts),
                  shaders=len(root.tables(VkGraph.shaders, "shaders")))
    blob.note("info", "VkGraph.chain", root.pos,
              "OperatorCall.args lists every argument value id (inputs and outputs together); "
              "delegate_nodes shows them as inputs")
    keys = tuple(dict.fromkeys(c[4] for c in consts if c[4]))
    layout = ("VH00 header + VK00 flatbuffer + constant bytes" if header.get("magic")
              else "VK00 flatbuffer (no header)")
    for r in rows:
        r.setdefault("offset", MISSING)
    return blob.info(BACKEND, layout, header=header, subsegments=blob.cover(parts),
                     tensors=rows_to_columns(rows, TENSOR_KINDS),
                     nodes=rows_to_columns(nodes, NODE_KINDS), named_keys=keys)
