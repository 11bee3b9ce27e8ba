"""``open()``: a path -> :class:`Source` -> :func:`formats.sniff` -> the format's reader ->
:class:`Artifact` (for a ``.pte``: its ``.ptd`` data files, given or found next to it).

Views (``comparison``, ``profiling``, ``corpus``, ``cli``, ``widgets``, ``loadpaths``) import
``open`` from here, never from the package: the package imports them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from . import formats
from ._fmt import no_gc
from .artifact import Artifact
from .errors import ArtifactError, UnknownFormatError
from .source import Source

__all__ = ["open"]


def open(  # noqa: A001 - the public verb
    path: str | os.PathLike[str],
    *,
    data: Sequence[str | os.PathLike[str]] | None = None,
    storage_options: dict[str, Any] | None = None,
    allow_full_download: bool = False,
    timeout: float | None = None,
) -> Artifact:
    """Open the artifact at ``path``; its format is detected from its first bytes.

    The file is memory-mapped read-only; opening verifies headers and every structure it
    reads, but never reads weight bytes, never executes content and never writes.

    Args:
        path: a ``.pte`` program, a ``.ptd`` data file, a ``.bpte`` bundled program or a
            ``.pt2`` archive (``torch.export.save`` or an AOTInductor package; read as a zip
            without torch: pickled members are listed, never unpickled, and the ``.so`` is
            never loaded).
        data: for a ``.pte``: the ``.ptd`` files holding its external data. When omitted,
            ``.ptd`` files in the same folder are tried (the one named like the program
            first, then in name order, only while keys are unresolved) and attached when
            they hold a key the program refers to with a matching dtype and shape; the
            attached files are in ``files`` and the tensors' ``file`` column, and
            ``validate()`` says which were attached and which others would also have fitted.
            Pass ``data=[]`` to attach none.
            For an ETDump (``.etdp``): one path, the debug buffer the runtime wrote with
            it; ``tensor('<run>/<event>')`` then views the logged values.
        storage_options: for a URL (``http(s)://``, ``s3://``, any fsspec URL): options
            of its fsspec file system (``client_kwargs``, ``headers``, ``key``/``secret``,
            ``anon``, ...). A URL is read with ranged requests (see :mod:`workbench.remote`):
            opening fetches headers and metadata only, ``tensor(name)`` just that tensor's
            bytes; ``art.sources[url].transfer`` counts the requests and bytes. The ``.ptd``
            files next to a remote program are found the same way as local ones.
        allow_full_download: accept a server that ignores ``Range`` (the whole file is
            downloaded once); otherwise that is a :class:`~workbench.RangeNotSupportedError`.
        timeout: for a URL: seconds one request may take (default
            :data:`workbench.remote.TIMEOUT`); a timed-out request is retried, then reported.

    Returns:
        An :class:`Artifact` with ``format``, ``segments``, ``tensors``, ``frames`` and
        ``tensor(name)``.

    Raises:
        ArtifactError: (a subclass of) for anything wrong with the file: unknown format,
            truncated, out of bounds, corrupt, unsupported version.
        FileNotFoundError / IsADirectoryError / PermissionError: as ``open()`` would.

    Example:
        >>> art = open("sample_models/mlp_external.pte")   # doctest: +SKIP
        >>> art.tensors[["name", "storage", "file", "offset"]]   # doctest: +SKIP
        >>> pt2 = open("sample_models/tied.pt2")            # doctest: +SKIP
        >>> pt2.tensors[["name", "member", "storage_id", "shared"]]   # doctest: +SKIP
        >>> pt2.frames["members"], pt2.frames["models"], pt2.frames["graph"]   # doctest: +SKIP
        >>> url = open("s3://bucket/llm.pte", storage_options={"anon": True})   # doctest: +SKIP
        >>> url.segments; url.sources["s3://bucket/llm.pte"].transfer   # doctest: +SKIP
        {'requests': 2, 'bytes': 372736}
    """
    remote: dict[str, Any] = {"storage_options": storage_options,
                              "allow_full_download": allow_full_download}
    if timeout is not None:
        remote["timeout"] = timeout
    src = _source(path, remote)
    opened: list[Source] = [src]
    try:
        head = src.head(formats.HEAD)
        reader = formats.sniff(head)
        if reader is None:
            raise UnknownFormatError(
                f"not a known artifact (first bytes {head[:8]!r}); expected .pte (ET12), "
                ".ptd (FT01), .bpte (BP08) or .pt2 (zip)", file=src.path,
                structure="file header", offset=0)
        if reader is not formats.pte:
            if data and not reader.TAKES_DATA:
                raise TypeError(f"data= applies to .pte programs and ETDump traces, not to "
                                f"{reader.FORMAT} files")
            if src.remote and reader.FORMAT not in _HINTED \
                    and src.size <= EAGER_BYTES:
                src.prefetch(0, src.size)  # readers without ranged-read hints: one request
            with no_gc():
                return _reopenable(
                    Artifact(reader.read(src, data=data) if data else reader.read(src)), path,
                    data, remote)
        explicit = [_open_data(p, opened, remote) for p in (data or ())]

        def siblings() -> Iterator[Any]:  # parsed lazily, only while keys are unresolved
            if data is not None:
                return
            if src.remote:
                from .remote import sibling_data_files

                found = sibling_data_files(src)  # type: ignore[arg-type]
            else:
                found = formats.pte.sibling_data_files(src.path)
            for p in found:
                try:
                    yield _open_data(p, opened, remote)
                except (ArtifactError, OSError):
                    continue  # a broken neighbour is not this program's problem

        with no_gc():
            return _reopenable(
                Artifact(formats.pte.read(src, data=explicit, siblings=siblings())), path, data,
                remote)
    except BaseException:
        for s in opened:
            s.close()
        raise


#: Formats whose readers announce every range they read (:meth:`Source.prefetch`); a remote
#: file of another format up to :data:`EAGER_BYTES` is fetched whole in one request first.
_HINTED = ("pte", "ptd", "bpte")
#: See :data:`_HINTED` (larger files of those formats rely on the readers' checked reads).
EAGER_BYTES = 16 << 20


def _source(path: str | os.PathLike[str], remote: dict[str, Any]) -> Source:
    """A mapped :class:`Source` for a path, a :class:`~workbench.remote.RemoteSource` for a
    URL (``file://`` URLs are paths)."""
    from .remote import is_url, local_path

    if is_url(path):
        from .remote import RemoteSource

        return RemoteSource(str(path), **remote)
    return Source(local_path(path))


def _reopenable(art: Artifact, path: str | os.PathLike[str],
                data: Sequence[str | os.PathLike[str]] | None,
                remote: dict[str, Any]) -> Artifact:
    """Record how to open ``art`` again (``Artifact.reload``: same path, same ``data=``)."""
    again = None if data is None else list(data)
    art._reopen = lambda: open(path, data=again, **remote)
    return art


def _open_data(path: str | os.PathLike[str], opened: list, remote: dict[str, Any]) -> Any:
    """Parse one ``.ptd`` (tracking its source in ``opened`` for cleanup on failure)."""
    from .formats import ptd

    s = _source(path, remote)
    try:
        if not ptd.detect(s.head(8)):
            raise UnknownFormatError("not a .ptd data file (expected FT01 at byte 4)",
                                     file=s.path, structure="file header", offset=4)
        parsed = ptd.read(s)
    except BaseException:
        s.close()
        raise
    opened.append(s)
    return parsed
