"""workbench: look inside PyTorch and ExecuTorch deployment artifacts.

Open an artifact by its magic bytes, get pandas frames of its byte layout and its tensors,
and zero-copy views of tensor data — without executing or copying anything from the file.

Example:
    >>> import workbench as wb
    >>> art = wb.open("sample_models/mlp_portable.pte")     # doctest: +SKIP
    >>> art.format
    'pte'
    >>> art.segments.groupby("kind")["size"].sum()          # doctest: +SKIP
    >>> art.tensor("0.weight").shape                        # doctest: +SKIP
    (32, 16)
"""

from __future__ import annotations

import os

from .artifact import Artifact
from .errors import (
    ArtifactError,
    CorruptError,
    MissingDataError,
    OutOfBoundsError,
    TruncatedError,
    UnknownFormatError,
    UnsafeContentError,
    UnsupportedVersionError,
)

__version__ = "0.1.0"

__all__ = [
    "open",
    "Artifact",
    "ArtifactError",
    "UnknownFormatError",
    "TruncatedError",
    "OutOfBoundsError",
    "CorruptError",
    "UnsupportedVersionError",
    "MissingDataError",
    "UnsafeContentError",
    "__version__",
]


def open(path: str | os.PathLike[str]) -> Artifact:  # noqa: A001 - the public verb
    """Open the artifact at ``path``; its format is detected from its first bytes.

    The file is memory-mapped read-only; opening verifies headers and every structure it
    reads, but never reads weight bytes, never executes content and never writes.

    Args:
        path: a ``.pte`` file (more formats follow: ``.ptd``, ``.bpte``, ``.pt2``).

    Returns:
        An :class:`Artifact` with ``format``, ``segments``, ``tensors``, ``frames`` and
        ``tensor(name)``.

    Raises:
        ArtifactError: (a subclass of) for anything wrong with the file: unknown format,
            truncated, out of bounds, corrupt, unsupported version.
        FileNotFoundError / IsADirectoryError / PermissionError: as ``open()`` would.

    Example:
        >>> art = open("sample_models/mlp_portable.pte")   # doctest: +SKIP
        >>> art.tensors[["name", "dtype", "shape", "storage", "offset"]]   # doctest: +SKIP
    """
    from . import formats
    from .source import Source

    src = Source(path)
    try:
        head = src.head(64)
        reader = formats.detect(head)
        if reader is None:
            known = formats.recognised_unreadable(head)
            if known:
                raise UnsupportedVersionError(f"{known} files are recognised but not readable yet",
                                              file=src.path, structure="file header", offset=0)
            raise UnknownFormatError(
                f"not a known artifact (first bytes {head[:8]!r}); expected a .pte (ET12)",
                file=src.path, structure="file header", offset=0)
        return Artifact(reader.read(src))
    except BaseException:
        src.close()
        raise
