"""Format readers, one per format: each format's package is a :class:`Reader` (``FORMAT``,
``TAKES_DATA``, ``detect(head) -> bool`` and ``read(source) -> Parsed``). Picked by magic
bytes, never by file extension: :func:`sniff` is the one place that does it (``open``,
``scan`` and the notebook picker all ask it).

Example:
    >>> from workbench import formats
    >>> formats.sniff(b"\\x00\\x00\\x00\\x00ET12" + bytes(56)).FORMAT
    'pte'
    >>> formats.sniff(b"hello") is None
    True
"""

from __future__ import annotations

import os
from typing import Any, Protocol, runtime_checkable

from ..source import Source
from . import bpte, etdump, etrecord, pt2, ptd, pte
from .parsed import Parsed

__all__ = ["READERS", "HEAD", "Reader", "sniff", "sniff_path"]


@runtime_checkable
class Reader(Protocol):
    """What every format package provides (the package itself is the reader: ``formats.pte``,
    ``formats.ptd``, ...).

    Attributes:
        FORMAT: the name ``Artifact.format`` reports (``"pte"``, ``"ptd"``, ...).
        TAKES_DATA: whether ``wb.open(path, data=[...])`` applies: the reader's ``read`` then
            takes ``data=`` (a program's ``.ptd`` files, an ETDump's debug buffer).

    Example:
        >>> from workbench import formats
        >>> all(isinstance(r, formats.Reader) for r in formats.READERS)
        True
        >>> [r.FORMAT for r in formats.READERS if r.TAKES_DATA]
        ['pte', 'etdump']
    """

    FORMAT: str
    TAKES_DATA: bool

    def detect(self, head: bytes) -> bool:
        """Whether ``head`` (the first :data:`HEAD` bytes of a file) is this format's."""
        ...

    def read(self, src: Source, *args: Any, **kwargs: Any) -> Parsed:
        """Parse the artifact in ``src`` (``data=`` only where :attr:`TAKES_DATA`)."""
        ...


#: Readers in detection order (an ETRecord is a zip: it must be tried before .pt2).
READERS: tuple[Reader, ...] = (pte, ptd, bpte, etdump, etrecord, pt2)  # type: ignore[assignment]

#: Bytes of a file's head that detection looks at (every reader's magic is within them).
HEAD = 64


def sniff(head: bytes) -> Reader | None:
    """The reader module whose magic matches ``head`` (the first :data:`HEAD` bytes of a
    file), or ``None`` when no reader knows it."""
    for mod in READERS:
        if mod.detect(head):
            return mod
    return None


def sniff_path(path: str | os.PathLike[str]) -> Reader | None:
    """:func:`sniff` on the first :data:`HEAD` bytes of the file at ``path``.

    Raises:
        OSError: when the file cannot be read (callers decide what that means).
    """
    with open(path, "rb") as f:
        return sniff(f.read(HEAD))
