"""Records and the bounded byte window shared by the delegate-blob parsers (private).

A parser sees one :class:`Blob`: the bytes ``[start, end)`` of a buffer (the whole mapped
file, or just the blob), with checked little-endian reads that never look outside the blob.
Parsers work in *window coordinates* (positions in the buffer); :attr:`Blob.shift` turns
them into absolute file offsets, and :func:`rebased` moves the offset of an error raised
inside a parser by the same amount, so every message names the absolute offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ...errors import ArtifactError, CorruptError, Finding, OutOfBoundsError, TruncatedError

__all__ = ["Blob", "BlobInfo", "Finding", "SubSegment", "rebased"]

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_I64 = struct.Struct("<q").unpack_from


class SubSegment(NamedTuple):
    """One byte range inside a delegate blob.

    ``kind`` uses the vocabulary of the ``segments`` frame: ``header``, ``flatbuffer``,
    ``constant`` (weights inside the blob), ``padding`` (alignment gaps), ``delegate``
    (backend payload the workbench does not take apart, e.g. a compiled command stream).
    ``offset`` is absolute in the file.

    Example:
        >>> SubSegment("header (XH00)", "header", 1536, 30).size
        30
    """

    name: str
    kind: str
    offset: int
    size: int


@dataclass
class BlobInfo:
    """What :func:`workbench.formats.delegates.inspect_blob` found in one delegate blob.

    Attributes:
        backend: short backend name (``xnnpack``, ``vulkan``, ``coreml``, ``mps``, ``qnn``,
            ``ethos-u``, ``vgf``, ``openvino``, ``aoti``, ``mlx``) or ``unknown``.
        backend_id: the delegate id the program gives (e.g. ``XnnpackBackend``).
        layout: what the bytes are, e.g. ``"XH00 header + XN01 flatbuffer + constant data"``.
        file, offset, size: where the blob is (absolute offset).
        method, index: the method and its delegate-table position the blob belongs to.
        header: header fields by their format's own names.
        subsegments: byte ranges covering ``[offset, offset + size)`` exactly, in order.
        tensors: columns of the ``delegate_tensors`` frame (numpy arrays; see
            :meth:`tensor_columns`), or ``None`` when the backend has no tensor table.
        nodes: columns of the ``delegate_nodes`` frame, or ``None``.
        findings: observations (unknown backend, odd padding, unresolved keys, ...).
        named_keys: named-data keys the blob refers to.

    Example:
        >>> info = BlobInfo("unknown", "FooBackend", "opaque", "a.pte", 128, 16, "forward", 0)
        >>> info.label
        'forward delegate 0 (FooBackend)'
    """

    backend: str
    backend_id: str
    layout: str
    file: str
    offset: int
    size: int
    method: str
    index: int
    header: dict[str, Any] = field(default_factory=dict)
    subsegments: list[SubSegment] = field(default_factory=list)
    tensors: dict[str, np.ndarray] | None = None
    nodes: dict[str, np.ndarray] | None = None
    findings: list[Finding] = field(default_factory=list)
    named_keys: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``"<method> delegate <index> (<backend id>)"``: the name the .pte reader uses."""
        return f"{self.method} delegate {self.index} ({self.backend_id})".strip()

    def segment_rows(self, index: int | None = None) -> list[tuple[int, int, str, str,
                                                                    int | None, str]]:
        """The sub-segments as rows ``(offset, size, name, kind, index, used_by)`` for the
        ``segments`` frame (``workbench.formats._layout.cover``): names prefixed with
        :attr:`label`, ``index`` (e.g. the blob's ``Program.segments`` index) on every row.

        Example:
            >>> BlobInfo("unknown", "X", "opaque", "a.pte", 0, 4, "forward", 0,
            ...          subsegments=[SubSegment("payload", "delegate", 0, 4)]).segment_rows(1)
            [(0, 4, 'forward delegate 0 (X): payload', 'delegate', 1, 'forward delegate 0 (X)')]
        """
        label = self.label
        return [(s.offset, s.size, f"{label}: {s.name}", s.kind, index, label)
                for s in self.subsegments]

    def tensor_columns(self) -> dict[str, Any]:
        """Pandas-ready columns for ``frames.build("delegate_tensors", ...)`` (empty when
        the backend has no tensor table)."""
        from ._columns import tensor_columns

        return tensor_columns([self])

    def node_columns(self) -> dict[str, Any]:
        """Pandas-ready columns for ``frames.build("delegate_nodes", ...)``."""
        from ._columns import node_columns

        return node_columns([self])


class Blob:
    """The bytes ``[start, end)`` of ``buf`` with checked reads (window coordinates).

    It is also a stand-in for :class:`~workbench.source.Source` (``path``, ``buf``,
    ``size``, ``check``), so :class:`~workbench.flatbuf.FlatBuffer` can read inside it.
    """

    __slots__ = ("buf", "path", "name", "size", "start", "end", "shift", "backend_id",
                 "method", "index", "named", "findings")

    def __init__(self, buf: memoryview, path: str, start: int, end: int, shift: int,
                 backend_id: str, method: str, index: int,
                 named: Any | None) -> None:
        self.buf = buf
        self.path = path
        self.name = path
        self.size = end  # Source.size: nothing past the blob is readable
        self.start = start
        self.end = end
        self.shift = shift
        self.backend_id = backend_id
        self.method = method
        self.index = index
        self.named = named
        self.findings: list[Finding] = []

    # -- Source protocol ------------------------------------------------------------------
    def check(self, offset: int, length: int, what: str, *, end: int | None = None) -> None:
        """Raise unless ``[offset, offset+length)`` lies inside the blob (or ``[start, end)``)."""
        limit = self.end if end is None else min(end, self.end)
        if offset < self.start or length < 0 or offset > limit:
            raise OutOfBoundsError(
                f"offset 0x{offset + self.shift:x} (length {length}) is outside the delegate "
                f"blob [0x{self.start + self.shift:x}, 0x{limit + self.shift:x})",
                file=self.path, structure=what, offset=offset)
        if offset + length > limit:
            raise TruncatedError(
                f"{length} bytes run past the end of the delegate blob "
                f"(0x{limit + self.shift:x})", file=self.path, structure=what, offset=offset)

    # -- reads (window coordinates) ---------------------------------------------------------
    def u16(self, pos: int, what: str) -> int:
        """Little-endian ``u16`` at ``pos``."""
        self.check(pos, 2, what)
        return _U16(self.buf, pos)[0]

    def u32(self, pos: int, what: str) -> int:
        """Little-endian ``u32`` at ``pos``."""
        self.check(pos, 4, what)
        return _U32(self.buf, pos)[0]

    def u64(self, pos: int, what: str) -> int:
        """Little-endian ``u64`` at ``pos``."""
        self.check(pos, 8, what)
        return _U64(self.buf, pos)[0]

    def i64(self, pos: int, what: str) -> int:
        """Little-endian ``i64`` at ``pos``."""
        self.check(pos, 8, what)
        return _I64(self.buf, pos)[0]

    def bytes(self, pos: int, n: int, what: str) -> bytes:
        """A private copy of ``n`` bytes at ``pos`` (headers only)."""
        self.check(pos, n, what)
        return bytes(self.buf[pos:pos + n])

    def view(self, pos: int, n: int, what: str) -> memoryview:
        """A zero-copy view of ``n`` bytes at ``pos``."""
        self.check(pos, n, what)
        return self.buf[pos:pos + n]

    @property
    def length(self) -> int:
        """Size of the blob in bytes."""
        return self.end - self.start

    # -- errors and findings ------------------------------------------------------------
    def corrupt(self, what: str, pos: int, detail: str) -> CorruptError:
        """A :class:`CorruptError` at window position ``pos`` (rebased by the registry)."""
        return CorruptError(detail, file=self.path, structure=what, offset=pos)

    def out_of_bounds(self, what: str, pos: int, detail: str) -> OutOfBoundsError:
        """An :class:`OutOfBoundsError` at window position ``pos``."""
        return OutOfBoundsError(detail, file=self.path, structure=what, offset=pos)

    def note(self, severity: str, what: str, pos: int | None, message: str) -> None:
        """Record a finding at window position ``pos`` (stored as an absolute offset)."""
        self.findings.append(Finding(severity, what, None if pos is None else pos + self.shift,
                                     message))

    def resolve(self, key: str) -> tuple[str, int, int] | None:
        """``(file, absolute offset, size)`` of a named-data key, or ``None``."""
        if self.named is None:
            return None
        hit = self.named.get(key)
        if hit is None:
            return None
        f, off, size = hit
        return str(f), int(off), int(size)

    # -- layout ---------------------------------------------------------------------------
    def cover(self, parts: list[tuple[int, int, str, str]]) -> list[SubSegment]:
        """Sub-segments covering the blob exactly from ``(pos, size, name, kind)`` parts in
        window coordinates: sorted, gaps filled with ``padding``; overlapping parts raise
        :class:`CorruptError`. Zero-size parts are dropped."""
        out: list[SubSegment] = []
        at = self.start
        for pos, size, name, kind in sorted((p for p in parts if p[1] > 0),
                                            key=lambda p: (p[0], p[1])):
            if pos < at:
                raise self.corrupt(name, pos, f"{name} [0x{pos + self.shift:x}, "
                                   f"+0x{size:x}) overlaps the range before it (ends at "
                                   f"0x{at + self.shift:x})")
            if pos + size > self.end:
                raise self.out_of_bounds(name, pos, f"{name} [0x{pos + self.shift:x}, +0x{size:x}) "
                                         f"runs past the end of the blob "
                                         f"(0x{self.end + self.shift:x})")
            if pos > at:
                out.append(SubSegment("padding", "padding", at + self.shift, pos - at))
            out.append(SubSegment(name, kind, pos + self.shift, size))
            at = pos + size
        if at < self.end:
            out.append(SubSegment("padding", "padding", at + self.shift, self.end - at))
        return out

    def info(self, backend: str, layout: str, **kw: Any) -> BlobInfo:
        """A :class:`BlobInfo` for this blob with its findings so far."""
        return BlobInfo(backend=backend, backend_id=self.backend_id, layout=layout,
                        file=self.path, offset=self.start + self.shift, size=self.length,
                        method=self.method, index=self.index, findings=self.findings, **kw)


def rebased(e: ArtifactError, shift: int, prefix: str) -> ArtifactError:
    """The same error with its offset moved by ``shift`` and ``prefix: `` before its structure.

    Example:
        >>> e = rebased(CorruptError("bad", file="a.pte", structure="XNNGraph", offset=4), 100, "d")
        >>> (e.structure, e.offset)
        ('d: XNNGraph', 104)
    """
    structure = f"{prefix}: {e.structure}" if e.structure else prefix
    offset = None if e.offset is None else e.offset + shift
    new = type(e)(e.detail, file=e.file, structure=structure, offset=offset)
    return new
