"""MLX delegate blobs: a 24-byte ``MLX0`` header, the ``MLXGraph`` flatbuffer and an optional
constant data segment.

Facts from ExecuTorch's ``backends/mlx/serialization/mlx_graph_serialize.py``::

    0   4   zeros     4   4s  "MLX0"
    8   u64 data segment offset      16  u64 data segment size   (0, 0: no data segment)
    24  the MLXGraph flatbuffer (no file identifier), padded to 16; then the data segment

Constants normally live in named data (``MLXGraph.named_slots`` holds the keys).

Example:
    >>> from workbench.formats.delegates import mlx
    >>> mlx.MAGIC, mlx.HEADER_LENGTH
    (b'MLX0', 24)
"""

from __future__ import annotations

from ...errors import OutOfBoundsError, TruncatedError
from ...flatbuf import FlatBuffer
from ._base import Blob, BlobInfo

__all__ = ["BACKEND", "IDS", "detect", "parse"]

BACKEND = "mlx"
IDS = ("MLXBackend",)
MAGIC = b"MLX0"
HEADER_LENGTH = 24


class MLXGraph:
    version = 0
    num_constant_tensors = 1
    num_input_tensors = 2
    num_output_tensors = 3
    num_mutable_buffer_tensors = 4
    num_temp_tensors = 5
    num_values = 6
    instruction_chains = 7


def detect(blob: Blob) -> bool:
    """``MLX0`` at bytes 4..8."""
    return blob.length >= 8 and bytes(blob.buf[blob.start + 4:blob.start + 8]) == MAGIC


def parse(blob: Blob) -> BlobInfo:
    """Header fields and sub-segments of one MLX blob (graph counts from the flatbuffer)."""
    start, end = blob.start, blob.end
    size = end - start
    what = "MLX header (MLX0)"
    if size < HEADER_LENGTH + 8:
        raise TruncatedError(f"{size} bytes is too short for the MLX header and a flatbuffer",
                             file=blob.path, structure=what, offset=start)
    ds_off = blob.u64(start + 8, what)
    ds_size = blob.u64(start + 16, what)
    parts = [(start, HEADER_LENGTH, "header (MLX0)", "header")]
    if ds_off == 0 and ds_size == 0:
        fb_end = end
    else:
        if ds_off < HEADER_LENGTH + 8 or ds_off + ds_size > size:
            raise OutOfBoundsError(f"data segment [0x{ds_off:x}, +0x{ds_size:x}) does not fit "
                                   f"after the header in the blob (size 0x{size:x})",
                                   file=blob.path, structure=f"{what}.data_segment_offset",
                                   offset=start + 8)
        fb_end = start + ds_off
        if ds_size:
            parts.append((fb_end, ds_size, "data segment", "constant"))
    parts.append((start + HEADER_LENGTH, fb_end - start - HEADER_LENGTH,
                  "MLXGraph flatbuffer (+ padding)", "flatbuffer"))
    fb = FlatBuffer(blob, start + HEADER_LENGTH, fb_end, name="MLXGraph")
    root = fb.root("MLXGraph")
    header = {"magic": "MLX0", "data_segment_offset": ds_off, "data_segment_size": ds_size,
              "version": root.string(MLXGraph.version, "version") or ""}
    for name in ("num_constant_tensors", "num_input_tensors", "num_output_tensors",
                 "num_mutable_buffer_tensors", "num_temp_tensors", "num_values"):
        header[name] = root.u32(getattr(MLXGraph, name))
    header["instruction_chains"] = root.vector(MLXGraph.instruction_chains, 4,
                                               "instruction_chains")[1]
    return blob.info(BACKEND, "MLX0 header + MLXGraph flatbuffer + data segment", header=header,
                     subsegments=blob.cover(parts))
