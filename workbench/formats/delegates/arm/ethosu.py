"""Arm Ethos-U delegate blobs: the Vela binary stream.

Facts from ExecuTorch's ``backends/arm/arm_vela.py`` (``vela_compile``): a sequence of
blocks, each ``16s name`` (NUL-padded), ``u32 length`` (unpadded), ``u8 external``
(1: the data is the 64-hex-digit named-data key of the real payload), 11 reserved bytes,
then ``length`` data bytes padded to 16. The stream starts with an empty
``vela_bin_stream`` block and ends with an empty ``vela_end_stream`` block. Known blocks:
``cmd_data`` (the NPU command stream), ``weight_data``, ``scratch_size`` (``u32``),
``inputs`` / ``outputs`` (``i32 count``, then per tensor ``i32 shape[6], elem_size,
offset, region``).

Example:
    >>> from workbench.formats.delegates.arm import ethosu
    >>> ethosu.STREAM_HEADER, ethosu.BLOCK_HEADER.size
    (b'vela_bin_stream', 32)
"""

from __future__ import annotations

import math
import struct
from typing import Any

from ....errors import CorruptError, TruncatedError
from .._base import Blob, BlobInfo
from .._columns import TENSOR_KINDS, rows_to_columns

__all__ = ["BACKEND", "IDS", "detect", "parse"]

BACKEND = "ethos-u"
IDS = ("EthosUBackend", "ArmBackendEthosU")
STREAM_HEADER = b"vela_bin_stream"
STREAM_FOOTER = b"vela_end_stream"
BLOCK_HEADER = struct.Struct("<16sIB11s")
BLOCK_ALIGNMENT = 16
EXTERNAL = 1
_IO = struct.Struct("<9i")  # shape[6], elem_size, offset, region
_KINDS = {b"cmd_data": "delegate", b"weight_data": "constant"}
_ELEM = {1: "int8", 2: "int16", 4: "int32"}


def detect(blob: Blob) -> bool:
    """A ``vela_bin_stream`` block name at byte 0."""
    return blob.length >= 16 and bytes(blob.buf[blob.start:blob.start + 16]) == \
        STREAM_HEADER + b"\0"


def parse(blob: Blob) -> BlobInfo:
    """Every block of the stream as sub-segments; inputs/outputs as tensor rows."""
    at, end = blob.start, blob.end
    parts: list[tuple[int, int, str, str]] = []
    header: dict[str, Any] = {"blocks": []}
    rows: list[dict[str, Any]] = []
    keys: list[str] = []
    ended = False
    while at < end and not ended:
        what = f"Vela block at +0x{at - blob.start:x}"
        if end - at < BLOCK_HEADER.size:
            raise TruncatedError(f"{end - at} bytes left, a block header needs "
                                 f"{BLOCK_HEADER.size}", file=blob.path, structure=what, offset=at)
        raw_name, length, external, _ = BLOCK_HEADER.unpack_from(blob.buf, at)
        name = raw_name.split(b"\0", 1)[0]
        label = name.decode("ascii", "replace")
        padded = -(-length // BLOCK_ALIGNMENT) * BLOCK_ALIGNMENT
        data = at + BLOCK_HEADER.size
        blob.check(data, padded, f"Vela block {label!r}")
        parts.append((at, BLOCK_HEADER.size, f"block header {label!r}", "header"))
        if external == EXTERNAL:
            key = bytes(blob.buf[data:data + length]).decode("ascii", "replace")
            keys.append(key)
            hit = blob.resolve(key)
            if hit is None and blob.named is not None:
                blob.note("warning", f"Vela block {label!r}", data,
                          f"external payload key {key!r} was not found in named data")
            parts.append((data, length, f"{label} (named-data key)", "header"))
        elif length:
            parts.append((data, length, label, _KINDS.get(name, "delegate")))
        header["blocks"].append(label)
        if name == b"scratch_size" and length >= 4:
            header["scratch_size"] = blob.u32(data, "scratch_size")
        elif name in (b"inputs", b"outputs") and external != EXTERNAL:
            rows.extend(_io(blob, data, length, name.decode()))
        ended = name == STREAM_FOOTER
        at = data + padded
    if not ended:
        blob.note("warning", "Vela stream", end, "the stream has no vela_end_stream block")
    elif at < end:
        blob.note("info", "Vela stream", at, f"{end - at} bytes after vela_end_stream")
    header["io"] = [{"name": r["name"], "shape": r["shape"], "elem_size": r.pop("io_elem"),
                     "offset": r.pop("io_offset"), "region": r.pop("io_region")} for r in rows]
    return blob.info(BACKEND, "Vela binary stream (blocks)", header=header,
                     subsegments=blob.cover(parts), tensors=rows_to_columns(rows, TENSOR_KINDS),
                     named_keys=tuple(keys))


def _io(blob: Blob, data: int, length: int, kind: str) -> list[dict[str, Any]]:
    what = f"Vela block {kind!r}"
    if length < 4:
        raise TruncatedError(f"{length} bytes cannot hold the tensor count", file=blob.path,
                             structure=what, offset=data)
    (count,) = struct.unpack_from("<i", blob.buf, data)
    if count < 0 or 4 + count * _IO.size > length:
        raise CorruptError(f"{count} tensors of {_IO.size} bytes do not fit in {length} bytes",
                           file=blob.path, structure=what, offset=data)
    role = "input" if kind == "inputs" else "output"
    prefix = f"{blob.method}/delegate{blob.index}/{kind}"
    out = []
    for k in range(count):
        *shape, elem, offset, region = _IO.unpack_from(blob.buf, data + 4 + k * _IO.size)
        if any(d < 0 for d in shape) or elem <= 0 or math.prod(shape) * elem >= 1 << 62:
            raise CorruptError(f"{kind}[{k}] has shape {shape} and element size {elem}",
                               file=blob.path, structure=what, offset=data + 4 + k * _IO.size)
        numel = math.prod(shape)
        dtype = _ELEM.get(elem, f"{elem}-byte")
        out.append({"name": f"{prefix}{k}", "value": k, "dtype": dtype,
                    "backend_dtype": f"{elem}-byte", "shape": tuple(shape), "numel": numel,
                    "nbytes": numel * elem, "role": role, "quant": "none", "flags": 0,
                    "storage": "runtime", "io_elem": elem, "io_offset": offset,
                    "io_region": region})
    return out
