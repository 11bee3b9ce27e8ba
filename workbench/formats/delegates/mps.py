"""Apple MPS delegate blobs: an optional 24-byte ``MP00`` header, the ``MPSGraph``
flatbuffer (identifier ``MP00``) and the constant segment.

Facts from ExecuTorch's ``backends/apple/mps`` (``mps_preprocess.py``,
``MPSDelegateHeader``, ``serialization/schema.fbs``; the backend is not in the 1.5.1
wheel)::

    0   4   zeros        4   4s  "MP00"
    8   u64 constant data offset     16  u64 constant data size
    24  the MPSGraph flatbuffer, padded to 16; then the constant data

Older blobs are the bare flatbuffer (its identifier ``MP00`` also sits at bytes 4..8; the
first four bytes are then its non-zero root offset) with constants inline in
``MPSTensor.constant_buffer``. ``MPSGraph``: version, mps_nodes, mps_values [MPSTensor],
input_ids, output_ids, constant_ids, graph_type, constant_segment. ``MPSTensor``:
datatype, num_dims, dims, constant_buffer_size, constant_buffer (Buffer), segment_offset.

Example:
    >>> from workbench.formats.delegates import mps
    >>> mps.DATATYPES[2]
    'float32'
"""

from __future__ import annotations

import math

from ...errors import CorruptError, OutOfBoundsError, TruncatedError
from ...flatbuf import FlatBuffer
from ._base import Blob, BlobInfo
from ._columns import NODE_KINDS, TENSOR_KINDS, rows_to_columns

__all__ = ["BACKEND", "IDS", "detect", "parse"]

BACKEND = "mps"
IDS = ("MPSBackend",)
MAGIC = b"MP00"
HEADER_LENGTH = 24


class MPSGraph:
    version = 0
    mps_nodes = 1
    mps_values = 2
    input_ids = 3
    output_ids = 4
    constant_ids = 5
    graph_type = 6
    constant_segment = 7


class MPSTensor:
    datatype = 0
    num_dims = 1
    dims = 2
    constant_buffer_size = 3
    constant_buffer = 4
    segment_offset = 5


class MPSNode:
    mpsnode_union_type = 0
    mpsnode_union = 1


#: MPSDataType -> torch dtype name.
DATATYPES = {1: "float16", 2: "float32", 3: "bfloat16", 4: "int8", 5: "int16", 6: "int32",
             7: "int64", 8: "uint8", 9: "bool", 10: "complex32", 11: "complex64"}
_ITEMSIZE = {"float16": 2, "float32": 4, "bfloat16": 2, "int8": 1, "int16": 2, "int32": 4,
             "int64": 8, "uint8": 1, "bool": 1, "complex32": 4, "complex64": 8}


def detect(blob: Blob) -> bool:
    """``MP00`` at bytes 4..8."""
    return blob.length >= 8 and bytes(blob.buf[blob.start + 4:blob.start + 8]) == MAGIC


def parse(blob: Blob) -> BlobInfo:
    """Read one MPS blob: header, tensors (dtype, dims, constant bytes)."""
    start, end = blob.start, blob.end
    size = end - start
    header: dict[str, int | str] = {}
    parts: list[tuple[int, int, str, str]] = []
    headed = bytes(blob.buf[start:start + 4]) == b"\0\0\0\0"
    if headed:
        what = "MPS header (MP00)"
        if size < HEADER_LENGTH + 8:
            raise TruncatedError(f"{size} bytes is too short for the MPS header and a "
                                 "flatbuffer", file=blob.path, structure=what, offset=start)
        cd_off = blob.u64(start + 8, what)
        cd_size = blob.u64(start + 16, what)
        header.update(magic="MP00", constant_data_offset=cd_off, constant_data_size=cd_size)
        if cd_off < HEADER_LENGTH + 8 or cd_off + cd_size > size:
            raise OutOfBoundsError(f"constant data [0x{cd_off:x}, +0x{cd_size:x}) does not fit "
                                   f"after the header in the blob (size 0x{size:x})",
                                   file=blob.path, structure=f"{what}.constant_data_offset",
                                   offset=start + 8)
        parts.append((start, HEADER_LENGTH, "header (MP00)", "header"))
        fb_start, fb_end = start + HEADER_LENGTH, start + cd_off
        cd_start = start + cd_off
        parts.append((fb_start, fb_end - fb_start, "MPSGraph flatbuffer (+ padding)",
                      "flatbuffer"))
        if cd_size:
            parts.append((cd_start, cd_size, "constant data", "constant"))
    else:
        fb_start, fb_end, cd_start, cd_size = start, end, end, 0
        parts.append((start, size, "MPSGraph flatbuffer (MP00)", "flatbuffer"))
    fb = FlatBuffer(blob, fb_start, fb_end, identifier=MAGIC, name="MPSGraph")
    root = fb.root("MPSGraph")
    prefix = f"{blob.method}/delegate{blob.index}/"
    inputs = set(root.scalars(MPSGraph.input_ids, "i", "input_ids"))
    outputs = set(root.scalars(MPSGraph.output_ids, "i", "output_ids"))
    rows = []
    for i, t in enumerate(root.tables(MPSGraph.mps_values, "mps_values")):
        code = t.scalar(MPSTensor.datatype, "h")
        dtype = DATATYPES.get(code)
        if dtype is None:
            raise CorruptError(f"datatype {code} is unknown", file=blob.path,
                               structure=f"{t.path}.datatype", offset=t.pos)
        dims = tuple(t.scalars(MPSTensor.dims, "i", "dims"))
        if any(d < 0 for d in dims) or math.prod(dims) >= 1 << 59:
            raise CorruptError(f"dims {list(dims)[:8]} are invalid", file=blob.path,
                               structure=f"{t.path}.dims", offset=t.pos)
        numel = math.prod(dims)
        nbytes = t.u64(MPSTensor.constant_buffer_size)
        row = {"name": prefix + str(i), "value": i, "dtype": dtype, "backend_dtype": dtype,
               "shape": dims, "numel": numel, "nbytes": numel * _ITEMSIZE[dtype],
               "quant": "none", "flags": 0, "storage": "runtime",
               "role": "input" if i in inputs else "output" if i in outputs else "internal"}
        if nbytes:
            buf = t.table(MPSTensor.constant_buffer, "constant_buffer")
            bstart, bcount = buf.vector(0, 1, "storage") if buf is not None else (0, 0)
            if bcount:
                row.update(storage="inline", file=blob.path, offset=bstart + blob.shift,
                           data_size=bcount)
            else:
                seg = t.u64(MPSTensor.segment_offset)
                if seg + nbytes > cd_size:
                    raise OutOfBoundsError(f"constant [0x{seg:x}, +0x{nbytes:x}) runs past the "
                                           f"constant data (size 0x{cd_size:x})",
                                           file=blob.path, structure=f"{t.path}.segment_offset",
                                           offset=t.pos)
                row.update(storage="blob", file=blob.path,
                           offset=cd_start + seg + blob.shift, data_size=nbytes)
            row.update(role="constant", missing=False)
        rows.append(row)
    nodes = root.tables(MPSGraph.mps_nodes, "mps_nodes")
    header.update(identifier="MP00", version=root.string(MPSGraph.version, "version") or "",
                  values=len(rows), nodes=len(nodes),
                  graph_type=root.scalar(MPSGraph.graph_type, "h"))
    layout = ("MP00 header + MPSGraph flatbuffer + constant data" if headed
              else "MPSGraph flatbuffer (no header)")
    node_rows = [{"node": k, "op": f"MPSNodeUnion[{n.u8(MPSNode.mpsnode_union_type)}]",
                  "flags": 0} for k, n in enumerate(nodes)]
    return blob.info(BACKEND, layout, header=header, subsegments=blob.cover(parts),
                     tensors=rows_to_columns(rows, TENSOR_KINDS),
                     nodes=rows_to_columns(node_rows, NODE_KINDS))
