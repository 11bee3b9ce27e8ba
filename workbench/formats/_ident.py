"""The one check every flatbuffer format starts with: enough bytes, and its file identifier."""

from __future__ import annotations

from ..errors import TruncatedError, UnsupportedVersionError
from ..source import Source


def expect_identifier(src: Source, magic: bytes, what: str) -> None:
    """Raise unless ``src`` holds at least 8 bytes with ``magic`` at byte 4.

    ``what`` names the format in the message ("bundled program", "FlatTensor"). Another
    identifier of the same family is an :class:`UnsupportedVersionError` naming it.

    Example:
        >>> expect_identifier(src, b"BP08", "bundled program")   # doctest: +SKIP
    """
    if src.size < 8:
        raise TruncatedError(f"{src.size} bytes is too short for a {what} file (needs 8)",
                             file=src.path, structure="file header", offset=0)
    ident = src.bytes(4, 4, "file identifier")
    if ident != magic:
        raise UnsupportedVersionError(f"{what} version {ident!r} is not supported "
                                      f"(expected {magic!r})", file=src.path,
                                      structure="file identifier", offset=4)
