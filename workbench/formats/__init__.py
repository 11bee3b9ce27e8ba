"""Format readers, one per format, each with ``FORMAT``, ``detect(head) -> bool`` and
``read(source) -> Parsed``. Picked by magic bytes, never by file extension: :func:`sniff` is
the one place that does it (``open``, ``scan`` and the notebook picker all ask it).

Example:
    >>> from workbench import formats
    >>> formats.sniff(b"\\x00\\x00\\x00\\x00ET12" + bytes(56)).FORMAT
    'pte'
    >>> formats.sniff(b"hello") is None
    True
"""

from __future__ import annotations

import os
from types import ModuleType

from . import bpte, etdump, etrecord, pt2, ptd, pte

__all__ = ["READERS", "HEAD", "sniff", "sniff_path"]

#: Readers in detection order (an ETRecord is a zip: it must be tried before .pt2).
READERS: tuple[ModuleType, ...] = (pte, ptd, bpte, etdump, etrecord, pt2)

#: Bytes of a file's head that detection looks at (every reader's magic is within them).
HEAD = 64


def sniff(head: bytes) -> ModuleType | None:
    """The reader module whose magic matches ``head`` (the first :data:`HEAD` bytes of a
    file), or ``None`` when no reader knows it."""
    for mod in READERS:
        if mod.detect(head):
            return mod
    return None


def sniff_path(path: str | os.PathLike[str]) -> ModuleType | None:
    """:func:`sniff` on the first :data:`HEAD` bytes of the file at ``path``.

    Raises:
        OSError: when the file cannot be read (callers decide what that means).
    """
    with open(path, "rb") as f:
        return sniff(f.read(HEAD))
