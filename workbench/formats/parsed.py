"""``Parsed``: what every format reader returns to :class:`workbench.artifact.Artifact`.

It lives with the formats (the readers fill it; the artifact only consumes it), so no reader
ever imports the artifact layer above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..source import Source

__all__ = ["Parsed"]


class Parsed:
    """What a format reader returns: sources, lazily built columns and facts (parsing itself
    needs no pandas).

    Attributes:
        format: ``"pte"``, ``"ptd"``, ``"bpte"`` or ``"pt2"``.
        path: the main file.
        sources: path -> :class:`Source` for every file of the artifact.
        builders: frame name -> callable returning ``dict[column, values]``: a list (``None``
            for missing), a numpy array or a ready pandas array per column (see
            :func:`workbench.frames.build`; ``Artifact.columns`` gives lists back).
        info: format facts for summaries (version, header fields, ...).
        findings: non-fatal observations (dicts with severity, structure, offset, message).
    """

    def __init__(self, format: str, path: str, sources: dict[str, Source]) -> None:
        self.format = format
        self.path = path
        self.sources = sources
        self.builders: dict[str, Callable[[], dict[str, Any]]] = {}
        self.info: dict[str, Any] = {}
        self.findings: list[dict[str, Any]] = []
        #: frames whose rows can be read with ``Artifact.tensor`` (name/dtype/shape/nbytes/
        #: file/offset columns), searched in order.
        self.tensor_frames: list[str] = ["tensors"]
        #: format-specific objects (e.g. the inner program of a .bpte).
        self.extra: dict[str, Any] = {}
