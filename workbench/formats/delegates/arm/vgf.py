"""Arm VGF delegate blobs (ML SDK for Vulkan): a 128-byte header and four sections.

ExecuTorch's ``backends/arm/vgf/backend.py`` passes the file written by the ML SDK model
converter through unchanged. Header facts from Arm's ``ai-ml-sdk-vgf-library``
(``src/header.hpp``), all little-endian::

    0   4s  magic "VGF1" (older files: u32 0xF0E1D2C3)
    4   u16 Vulkan header version     6  u16 reserved
    8   u8 major, u8 minor, u8 patch  11 u8 reserved    12  u32 reserved
    16  module section          (u64 offset, u64 size)   SPIR-V modules / shaders
    32  model sequence section  (u64 offset, u64 size)
    48  model resource section  (u64 offset, u64 size)
    64  constant section        (u64 offset, u64 size)   weights
    80  6 x u64 reserved

Example:
    >>> from workbench.formats.delegates.arm import vgf
    >>> vgf.MAGIC, vgf.HEADER_LENGTH
    (b'VGF1', 128)
"""

from __future__ import annotations

import struct

from ....errors import OutOfBoundsError, TruncatedError
from .._base import Blob, BlobInfo

__all__ = ["BACKEND", "IDS", "detect", "parse"]

BACKEND = "vgf"
IDS = ("VgfBackend",)
MAGIC = b"VGF1"
OLD_MAGIC = struct.pack("<I", 0xF0E1D2C3)
HEADER_LENGTH = 128
#: (name, offset of its (u64 offset, u64 size) entry, sub-segment kind)
SECTIONS = (("module section", 16, "delegate"), ("model sequence section", 32, "header"),
            ("model resource section", 48, "header"), ("constant section", 64, "constant"))


def detect(blob: Blob) -> bool:
    """``VGF1`` (or the old ``u32`` magic) at byte 0."""
    return blob.length >= 4 and bytes(blob.buf[blob.start:blob.start + 4]) in (MAGIC, OLD_MAGIC)


def parse(blob: Blob) -> BlobInfo:
    """Header fields and the four sections of one VGF file."""
    start, end = blob.start, blob.end
    size = end - start
    what = "VGF header"
    if size < HEADER_LENGTH:
        raise TruncatedError(f"{size} bytes is too short for the {HEADER_LENGTH}-byte VGF "
                             "header", file=blob.path, structure=what, offset=start)
    magic = bytes(blob.buf[start:start + 4])
    header: dict[str, int | str] = {
        "magic": "VGF1" if magic == MAGIC else "0xF0E1D2C3",
        "vk_header_version": blob.u16(start + 4, what),
        "version": ".".join(str(blob.buf[start + 8 + i]) for i in range(3)),
    }
    parts = [(start, HEADER_LENGTH, "header (VGF)", "header")]
    for name, at, kind in SECTIONS:
        off = blob.u64(start + at, what)
        length = blob.u64(start + at + 8, what)
        key = name.split(" section")[0].replace(" ", "_")
        header[f"{key}_offset"] = off
        header[f"{key}_size"] = length
        if (off < HEADER_LENGTH and length) or off + length > size:
            raise OutOfBoundsError(f"{name} [0x{off:x}, +0x{length:x}) lies outside the file "
                                   f"after the header (size 0x{size:x})", file=blob.path,
                                   structure=f"{what}.{key}", offset=start + at)
        parts.append((start + off, length, name, kind))
    return blob.info(BACKEND, "VGF header + module / sequence / resource / constant sections",
                     header=header, subsegments=blob.cover(parts))
