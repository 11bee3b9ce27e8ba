"""Format readers, one module per format, each with ``detect(head) -> bool`` and
``read(source) -> Parsed``. Picked by magic bytes, never by file extension."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from . import bpte, etdump, etrecord, pt2, ptd, pte

#: Readers in detection order (an ETRecord is a zip: it must be tried before .pt2).
READERS: tuple[ModuleType, ...] = (pte, ptd, bpte, etdump, etrecord, pt2)

#: Formats recognised by magic but not (yet) readable: (name, detect).
_KNOWN_UNREADABLE: tuple[tuple[str, Callable[[bytes], bool]], ...] = ()


def detect(head: bytes) -> ModuleType | None:
    """The reader module whose magic matches ``head``, or ``None``."""
    for mod in READERS:
        if mod.detect(head):
            return mod
    return None


def recognised_unreadable(head: bytes) -> str | None:
    """Name of a format we recognise by magic but cannot read yet."""
    for name, det in _KNOWN_UNREADABLE:
        if det(head):
            return name
    return None
