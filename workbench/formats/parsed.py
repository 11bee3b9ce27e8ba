"""``Parsed``: what every format reader returns to :class:`workbench.artifact.Artifact`.

It lives with the formats (the readers fill it; the artifact only consumes it), so no reader
ever imports the artifact layer above it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import Finding
from ..source import Source

if TYPE_CHECKING:
    from ._zip import ZipDirectory
    from .etdump.columns import TraceColumns
    from .etrecord.reader import Archive as ETRecordArchive
    from .ptd.reader import PtdData
    from .pte.delegated import DelegateBlobs

__all__ = ["Extra", "FrameView", "Parsed"]


@dataclass(frozen=True)
class FrameView:
    """A frame computed from other frames of the same artifact (a view), not from the bytes:
    ``Artifact`` builds the frames named by ``inputs`` and passes them to ``compute``, which
    returns the columns. A reader registers it in ``Parsed.builders`` like any builder.

    Example:
        >>> import pandas as pd
        >>> v = FrameView(("tensors",), lambda t: {"n": [len(t)]})
        >>> v.compute(pd.DataFrame({"name": ["a", "b"]}))
        {'n': [2]}
    """

    inputs: tuple[str, ...]
    compute: Callable[..., dict[str, Any]]


@dataclass
class Extra:
    """The format-specific objects a reader hands on, beyond frames and facts: what other
    readers, ``Artifact`` and ``validate()`` need from it. Each is ``None`` (or empty) for a
    format that has none.

    Example:
        >>> Extra().span is None, Extra(span=(0, 64)).span
        (True, (0, 64))
    """

    # -- a program (.pte, or the one inside a .bpte) --------------------------------------
    #: the bytes of the file this program covers (``validate()`` checks the rows tile it)
    span: tuple[int, int] | None = None
    #: the segments frame's raw columns (a .bpte builds its own segments around them)
    segments_raw: Callable[[], dict[str, Any]] | None = None
    #: the program's delegate blobs, taken apart on first use (shared by several frames)
    delegate_blobs: DelegateBlobs | None = None
    #: attached ``.ptd`` path -> (how it came: ``"data"`` or ``"sibling"``, keys it resolved)
    data_choice: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: the keys a parsed ``.ptd`` would resolve (``validate()`` asks it of other siblings)
    resolves: Callable[[Parsed], set[str]] | None = None
    #: how many keys the program wants from data files (content-hash keys found on demand)
    wanted_keys: Callable[[], int] | None = None
    # -- a .ptd data file -----------------------------------------------------------------
    ptd: PtdData | None = None
    # -- a .bpte: the program inside it ---------------------------------------------------
    program: Parsed | None = None
    # -- an ETRecord: its zip directory and the archive reader ----------------------------
    zip: ZipDirectory | None = None
    etrecord: ETRecordArchive | None = None
    # -- an ETDump: its columns -----------------------------------------------------------
    etdump: TraceColumns | None = None


class Parsed:
    """What a format reader returns: sources, lazily built columns and facts (parsing itself
    needs no pandas).

    Attributes:
        format: ``"pte"``, ``"ptd"``, ``"bpte"`` or ``"pt2"``.
        path: the main file.
        sources: path -> :class:`Source` for every file of the artifact.
        builders: frame name -> callable returning ``dict[column, values]``: a list (``None``
            for missing), a numpy array or a ready pandas array per column (see
            :func:`workbench.frames.build`; ``Artifact.columns`` gives lists back); or a
            :class:`FrameView` computed from other frames.
        info: format facts for summaries (version, header fields, ...).
        findings: non-fatal observations (:class:`~workbench.errors.Finding`).
    """

    def __init__(self, format: str, path: str, sources: dict[str, Source]) -> None:
        self.format = format
        self.path = path
        self.sources = sources
        self.builders: dict[str, Callable[[], dict[str, Any]] | FrameView] = {}
        self.info: dict[str, Any] = {}
        self.findings: list[Finding] = []
        #: frames whose rows can be read with ``Artifact.tensor`` (name/dtype/shape/nbytes/
        #: file/offset columns), searched in order.
        self.tensor_frames: list[str] = ["tensors"]
        #: format-specific objects (e.g. the inner program of a .bpte).
        self.extra = Extra()
