"""OpenVINO delegate blobs: a compiled model exported by ``CompiledModel.export_model``.

ExecuTorch's ``backends/openvino/preprocess.py`` stores the bytes of
``compiled.export_model()``. For the CPU plugin that is OpenVINO's ``StreamSerialize``
stream (``openvino/pass/serialize.hpp``), which starts with a ``DataHeader`` of six
``size_t`` (``u64``) fields, offsets from the start of the blob::

    custom_data_offset, custom_data_size    plugin XML (<cnndata>: inputs, outputs, ...)
    consts_offset, consts_size              the constants (weights)
    model_offset, model_size                the model XML (may be obfuscated)

There is no magic: the layout is tried only for the ``OpenvinoBackend`` id and only when
the six fields describe ranges after the header, inside the blob.

Example:
    >>> from workbench.formats.delegates import openvino
    >>> openvino.HEADER.size
    48
"""

from __future__ import annotations

import struct

from ._base import Blob, BlobInfo

__all__ = ["BACKEND", "IDS", "BY_ID", "detect", "parse"]

BACKEND = "openvino"
IDS = ("OpenvinoBackend",)
BY_ID = True
HEADER = struct.Struct("<6Q")
_PARTS = (("custom data (XML)", "header"), ("constants", "constant"), ("model (XML)", "delegate"))


def _fields(blob: Blob) -> tuple[int, ...] | None:
    if blob.length < HEADER.size:
        return None
    f = HEADER.unpack_from(blob.buf, blob.start)
    for off, size in zip(f[0::2], f[1::2]):
        if off < HEADER.size or off + size > blob.length:
            return None
    return f


def detect(blob: Blob) -> bool:
    """A ``DataHeader`` whose three ranges lie inside the blob."""
    return _fields(blob) is not None


def parse(blob: Blob) -> BlobInfo:
    """Header fields and the custom-data / constants / model ranges."""
    f = _fields(blob)
    assert f is not None  # detect() said so
    names = ("custom_data_offset", "custom_data_size", "consts_offset", "consts_size",
             "model_offset", "model_size")
    header = dict(zip(names, f))
    parts = [(blob.start, HEADER.size, "DataHeader", "header")]
    for (off, size), (name, kind) in zip(zip(f[0::2], f[1::2]), _PARTS):
        parts.append((blob.start + off, size, name, kind))
    head = bytes(blob.buf[blob.start + f[0]:blob.start + f[0] + min(f[1], 64)])
    header["custom_data_is_xml"] = head.lstrip().startswith(b"<")
    return blob.info(BACKEND, "StreamSerialize DataHeader + custom data + constants + model",
                     header=header, subsegments=blob.cover(parts))
