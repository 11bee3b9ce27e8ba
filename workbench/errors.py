"""The one error family raised for bad, unsupported or unsafe artifacts.

Every failure caused by the *content* of a file is an :class:`ArtifactError` (a
:class:`ValueError`) whose message names the file, the structure and the byte offset::

    mlp.pte: segment 2 at 0x1f00 runs past end of file (size 0x1e80)

Example:
    >>> import workbench as wb
    >>> try:
    ...     wb.open("not_an_artifact.txt")
    ... except wb.ArtifactError as e:
    ...     print(type(e).__name__, e.offset)  # doctest: +SKIP
    UnknownFormatError 0
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "Finding",
    "ArtifactError",
    "UnknownFormatError",
    "TruncatedError",
    "OutOfBoundsError",
    "CorruptError",
    "UnsupportedVersionError",
    "MissingDataError",
    "UnsafeContentError",
    "StaleFileError",
    "MissingKernelError",
    "RemoteError",
    "RemoteNotFoundError",
    "RemoteAccessError",
    "RemoteUnavailableError",
    "RangeNotSupportedError",
    "mask_url",
]


@dataclass(frozen=True, slots=True)
class Finding:
    """A non-fatal observation about an artifact: one row of the findings frame
    (``Artifact.validate()``). Readers, delegate parsers and checks all make these.

    Attributes:
        severity: ``info``, ``warning`` or ``error``.
        structure: what it is about, e.g. ``"Program.constant_buffer"`` or ``"tensor 'w'"``.
        offset: absolute byte offset in the file (or ``None``).
        message: what was noticed.

    Example:
        >>> f = Finding("warning", "Program.constant_buffer", 24, "legacy inline constants")
        >>> f.severity, f.as_dict()["offset"]
        ('warning', 24)
    """

    severity: str
    structure: str
    offset: int | None
    message: str

    def as_dict(self) -> dict[str, Any]:
        """The finding as a plain dict (``severity``, ``structure``, ``offset``, ``message``)."""
        return asdict(self)


class ArtifactError(ValueError):
    """Base of every error raised for a bad or unsupported artifact.

    Attributes:
        file: base name of the file (or ``None``).
        structure: the structure being read, e.g. ``"Program.execution_plan[0].values[3]"``.
        offset: absolute byte offset in ``file`` where the problem was found (or ``None``).
        detail: the message without the location prefix.

    Example:
        >>> e = ArtifactError("bad magic", file="/tmp/x.pte", structure="file header", offset=4)
        >>> str(e)
        'x.pte: file header at 0x4: bad magic'
    """

    def __init__(
        self,
        detail: str,
        *,
        file: str | os.PathLike[str] | None = None,
        structure: str | None = None,
        offset: int | None = None,
    ) -> None:
        self.file = _display(file) if file is not None else None
        self.structure = structure
        self.offset = offset
        self.detail = detail
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.structure:
            where.append(self.structure)
        if self.offset is not None:
            where.append(f"at 0x{self.offset:x}")
        loc = " ".join(where)
        head = self.file or "<artifact>"
        return f"{head}: {loc}: {self.detail}" if loc else f"{head}: {self.detail}"

    def __reduce__(self):  # keep the keyword-only fields when pickled (process pools)
        return (_rebuild, (type(self), self.detail, self.file, self.structure, self.offset))


def _display(file: str | os.PathLike[str]) -> str:
    """How an error names a file: its base name, or a whole URL with credentials masked."""
    text = os.fspath(file)
    return mask_url(text) if "://" in text else os.path.basename(text)


#: Query parameters whose values are secrets (pre-signed URLs, tokens): masked in messages.
_SECRET_PARAMS = ("signature", "token", "credential", "secret", "password", "key", "sig",
                  "auth")


def mask_url(url: str) -> str:
    """``url`` with its password and the values of secret-looking query parameters
    replaced by ``***`` (how URLs appear in messages, frames and ``repr``).

    Example:
        >>> mask_url("https://me:hunter2@host/m.pte?X-Amz-Signature=abc&v=1")
        'https://me:***@host/m.pte?X-Amz-Signature=***&v=1'
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, tail = rest.partition("/")
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        name = user.split(":", 1)[0]
        netloc = f"{name}:***@{host}" if ":" in user else f"***@{host}"
    path, q, query = tail.partition("?")
    if q:
        parts = []
        for item in query.split("&"):
            k, eq, _v = item.partition("=")
            secret = eq and any(w in k.lower() for w in _SECRET_PARAMS)
            parts.append(f"{k}=***" if secret else item)
        path = f"{path}?{'&'.join(parts)}"
    return f"{scheme}://{netloc}{slash}{path}"


def _rebuild(cls, detail, file, structure, offset):  # pragma: no cover - used by pickle
    return cls(detail, file=file, structure=structure, offset=offset)


class UnknownFormatError(ArtifactError):
    """The file's magic bytes match no format the workbench reads."""


class TruncatedError(ArtifactError):
    """The file ends before a structure that must be there."""


class OutOfBoundsError(ArtifactError):
    """An offset or length points outside the file or its enclosing structure."""


class CorruptError(ArtifactError):
    """A structure is inconsistent: overlap, bad alignment, unknown union type, bad UTF-8, ..."""


class UnsupportedVersionError(ArtifactError):
    """The format is recognised, but this version of it is not supported."""


class MissingDataError(ArtifactError):
    """Bytes live in an external file (e.g. a ``.ptd``) that was not found or not given."""


class UnsafeContentError(ArtifactError):
    """Reading this would require executing content from the file (pickle, shared objects)."""


class StaleFileError(ArtifactError):
    """The file changed on disk since it was opened (rewritten in place or truncated).

    Reading its map now could fault (``SIGBUS`` past a new, shorter end) or mix old and new
    bytes, so the workbench refuses and says what changed. ``Artifact.reload()`` opens the
    file again. An atomic replace (``os.replace``) leaves the old map intact: reads keep
    serving the old, consistent bytes, and ``Artifact.is_stale()`` tells that a newer file
    is there.

    Example:
        >>> import workbench as wb
        >>> art = wb.open("model.pte")                       # doctest: +SKIP
        >>> # ... model.pte is re-exported in place ...
        >>> try:
        ...     art.tensor("forward/0", copy=True)           # doctest: +SKIP
        ... except wb.StaleFileError as e:
        ...     print(e)
        ...     art = art.reload()
        model.pte: changed since it was opened: size 5408 -> 120, mtime ...
    """


class RemoteError(ArtifactError):
    """A remote artifact (``http(s)://``, ``s3://``, any fsspec URL) could not be read as
    asked. The message names the URL with its credentials masked; the transport's own
    exception (aiohttp, botocore) is never raised or chained.

    Example:
        >>> import workbench as wb
        >>> try:
        ...     wb.open("https://example.invalid/m.pte")     # doctest: +SKIP
        ... except wb.RemoteError as e:
        ...     print(type(e).__name__)
        RemoteUnavailableError
    """


class RemoteNotFoundError(RemoteError):
    """The URL names no object (HTTP 404, S3 ``NoSuchKey``)."""


class RemoteAccessError(RemoteError):
    """The server refused access (HTTP 401/403, S3 ``AccessDenied``): check the
    credentials given in ``storage_options`` or the environment."""


class RemoteUnavailableError(RemoteError):
    """The server did not answer with the bytes asked for after a bounded number of retries
    with backoff: 5xx, 416 (range not satisfiable), a dropped connection or a timeout."""


class RangeNotSupportedError(RemoteError):
    """The server ignored ``Range`` and began sending the whole file; the workbench refuses
    to download it silently (``open(url, allow_full_download=True)`` accepts it)."""


class MissingKernelError(ArtifactError):
    """The program calls operators that the installed ExecuTorch runtime does not register
    (it would fail at ``load_method`` with error 0x14, OperatorMissing).

    Attributes:
        missing: ``ns::op.overload`` -> the kernel library that provides it (``None``: no
            library known to the workbench does), for every missing operator.

    Example:
        >>> e = MissingKernelError.of("x.pte", {"my_ns::scale.out": None})
        >>> e.missing
        {'my_ns::scale.out': None}
        >>> print(e)   # doctest: +NORMALIZE_WHITESPACE
        x.pte: operator table: the installed ExecuTorch runtime registers no kernel for 1
        operator the program calls: my_ns::scale.out (no known kernel library provides it)
    """

    def __init__(self, detail: str, *, missing: dict[str, str | None] | None = None,
                 **where: Any) -> None:
        self.missing = dict(missing or {})
        super().__init__(detail, **where)

    @classmethod
    def of(cls, file: str | os.PathLike[str], missing: dict[str, str | None],
           registry: Any = None) -> MissingKernelError:
        """The error for ``missing`` (op -> library), with what ``registry`` (a
        ``workbench.runtime.Registry``) says about each library's import."""
        parts = []
        for op, lib in missing.items():
            if lib is None:
                why = "no known kernel library provides it"
            else:
                module = getattr(registry, "modules", {}).get(lib)
                error = getattr(registry, "errors", {}).get(lib)
                why = f"provided by the {lib!r} kernel library" + (
                    f" (import {module})" if module else "")
                if error:
                    why += f", whose import failed here: {error}"
                elif registry is not None:
                    why += ", which does not register it in this installation"
            parts.append(f"{op} ({why})")
        n = len(missing)
        detail = (f"the installed ExecuTorch runtime registers no kernel for {n} operator"
                  f"{'s' if n != 1 else ''} the program calls: " + "; ".join(parts))
        return cls(detail, missing=missing, file=file, structure="operator table")

    def __reduce__(self):  # keep ``missing`` when pickled (process pools)
        return (_rebuild_missing, (self.detail, self.file, self.structure, self.offset,
                                   self.missing))


def _rebuild_missing(detail, file, structure, offset, missing):  # pragma: no cover - pickle
    return MissingKernelError(detail, missing=missing, file=file, structure=structure,
                              offset=offset)
