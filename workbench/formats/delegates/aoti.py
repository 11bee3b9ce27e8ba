"""AOTInductor delegates (CUDA, Metal): the blob only names two named-data entries.

ExecuTorch's ``backends/aoti/aoti_backend.py`` stores the compiled ``.so`` and the weights
blob as named data (keys ``<sha256>_so_blob`` and ``<sha256>_weights_blob``; the weights
may go to a ``.ptd``) and writes ``b"<so key>\\n<weights key>"`` as the processed bytes.

Example:
    >>> from workbench.formats.delegates import aoti
    >>> aoti.SO_SUFFIX, aoti.WEIGHTS_SUFFIX
    ('_so_blob', '_weights_blob')
"""

from __future__ import annotations

import re
from typing import Any

from ._base import Blob, BlobInfo

__all__ = ["BACKEND", "IDS", "detect", "parse"]

BACKEND = "aoti"
IDS = ("CudaBackend", "MetalBackend", "AotiBackend")
SO_SUFFIX = "_so_blob"
WEIGHTS_SUFFIX = "_weights_blob"
_REF = re.compile(rb"[0-9a-f]{64}_so_blob(\n[0-9a-f]{64}_weights_blob)?")


def detect(blob: Blob) -> bool:
    """The whole blob is ``<hex>_so_blob`` optionally followed by ``\\n<hex>_weights_blob``."""
    return 0 < blob.length <= 256 and _REF.fullmatch(bytes(blob.buf[blob.start:blob.end])) \
        is not None


def parse(blob: Blob) -> BlobInfo:
    """The two keys, resolved against the program's named data when given."""
    keys = bytes(blob.buf[blob.start:blob.end]).decode("ascii").split("\n")
    header: dict[str, Any] = {}
    for key in keys:
        role = "so" if key.endswith(SO_SUFFIX) else "weights"
        header[f"{role}_key"] = key
        hit = blob.resolve(key)
        if hit is not None:
            header[f"{role}_file"], header[f"{role}_offset"], header[f"{role}_size"] = hit
        elif blob.named is not None:
            blob.note("warning", "AOTI delegate reference", blob.start,
                      f"{role} key {key!r} was not found in named data or attached data files")
    parts = [(blob.start, blob.length, "named-data references (text)", "header")]
    return blob.info(BACKEND, "text: named-data keys of the .so and the weights blob",
                     header=header, subsegments=blob.cover(parts), named_keys=tuple(keys))
