"""Qualcomm QNN delegate blobs: ExecuTorch's custom protocol around a QNN context binary.

Facts from ExecuTorch's ``backends/qualcomm/runtime/backends/QnnCustomProtocol.{h,cpp}``
(not in the Python wheel); all little-endian:

* context protocol, magic ``0x5678ABCD``: ``u32 magic, i64 signature, u64
  context_binary_size``, then the context binary (QNN's own format, opaque here). Newer
  writers pad the header to 256 bytes (``QNN_CTX_BIN_ALIGNMENT``) so the binary is aligned.
* QCIR protocol, magic ``0x1234ABCD`` (op validation / older flows): ``u32 magic,
  u32 qcir_fbs_size, u64 tensor_size``, then the QCIR flatbuffer, then the tensor data.

Example:
    >>> from workbench.formats.delegates import qnn
    >>> hex(qnn.CONTEXT_MAGIC), qnn.ALIGNED_HEADER
    ('0x5678abcd', 256)
"""

from __future__ import annotations

import struct

from ...errors import OutOfBoundsError, TruncatedError
from ._base import Blob, BlobInfo

__all__ = ["BACKEND", "IDS", "detect", "parse"]

BACKEND = "qnn"
IDS = ("QnnBackend",)
CONTEXT_MAGIC = 0x5678ABCD
QCIR_MAGIC = 0x1234ABCD
CONTEXT_HEADER = 20  # magic + signature + size
ALIGNED_HEADER = 256
QCIR_HEADER = 16  # magic + qcir_fbs_size + tensor_size
_MAGICS = (struct.pack("<I", CONTEXT_MAGIC), struct.pack("<I", QCIR_MAGIC))


def detect(blob: Blob) -> bool:
    """Either protocol magic (little-endian ``u32``) at byte 0."""
    return blob.length >= 4 and bytes(blob.buf[blob.start:blob.start + 4]) in _MAGICS


def parse(blob: Blob) -> BlobInfo:
    """Header fields and sub-segments of one QNN blob."""
    start, end = blob.start, blob.end
    size = end - start
    magic = blob.u32(start, "QNN custom protocol magic")
    if magic == QCIR_MAGIC:
        what = "QNN QCIR protocol header"
        if size < QCIR_HEADER:
            raise TruncatedError(f"{size} bytes is too short for the {QCIR_HEADER}-byte header",
                                 file=blob.path, structure=what, offset=start)
        fbs = blob.u32(start + 4, what)
        tensors = blob.u64(start + 8, what)
        if QCIR_HEADER + fbs + tensors > size:
            raise OutOfBoundsError(f"QCIR flatbuffer ({fbs} bytes) and tensor data ({tensors} "
                                   f"bytes) do not fit in the blob (size {size})",
                                   file=blob.path, structure=f"{what}.qcir_fbs_size",
                                   offset=start + 4)
        parts = [(start, QCIR_HEADER, "header (QCIR protocol)", "header"),
                 (start + QCIR_HEADER, fbs, "QCIR flatbuffer", "flatbuffer"),
                 (start + QCIR_HEADER + fbs, tensors, "tensor data", "constant")]
        header = {"magic": f"0x{magic:08x}", "protocol": "qcir", "qcir_fbs_size": fbs,
                  "tensor_size": tensors}
        return blob.info(BACKEND, "QCIR protocol header + QCIR flatbuffer + tensor data",
                         header=header, subsegments=blob.cover(parts))
    what = "QNN context protocol header"
    if size < CONTEXT_HEADER:
        raise TruncatedError(f"{size} bytes is too short for the {CONTEXT_HEADER}-byte header",
                             file=blob.path, structure=what, offset=start)
    signature = blob.i64(start + 4, what)
    binary = blob.u64(start + 12, what)
    if CONTEXT_HEADER + binary == size:
        at = CONTEXT_HEADER
    elif ALIGNED_HEADER + binary <= size:
        at = ALIGNED_HEADER
    else:
        raise OutOfBoundsError(f"context binary of {binary} bytes does not fit after the "
                               f"header in the blob (size {size})", file=blob.path,
                               structure=f"{what}.context_binary_size", offset=start + 12)
    parts = [(start, CONTEXT_HEADER, "header (context protocol)", "header"),
             (start + at, binary, "QNN context binary", "delegate")]
    header = {"magic": f"0x{magic:08x}", "protocol": "context", "signature": signature,
              "context_binary_size": binary, "context_binary_offset": at}
    return blob.info(BACKEND, "context protocol header + QNN context binary", header=header,
                     subsegments=blob.cover(parts))
