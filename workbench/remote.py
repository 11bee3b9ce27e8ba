"""Ranged reads of remote artifacts: a :class:`RemoteSource` with the interface of
:class:`~workbench.source.Source`, so no reader learns that a file is remote.

``http(s)://`` URLs are read with ranged ``GET`` requests on the aiohttp session of fsspec's
``HTTPFileSystem``; ``s3://`` with ranged ``GetObject`` calls through ``s3fs`` (``IfMatch``
the ETag seen first); any other fsspec URL with its file system's ``cat_file``.

The bytes live in a sparse anonymous map as large as the remote file: only the ranges that
were fetched hold data (the block cache; pages never fetched cost no memory). Opening
fetches the first :data:`HEAD_BYTES` (one request: it also tells the size, ETag and
Last-Modified); every checked read (:meth:`~RemoteSource.view`, ``u32``, ...) fetches what
is missing, rounded out to :data:`BLOCK`. Readers that read the map directly announce what
they will read with :meth:`RemoteSource.prefetch` / :meth:`RemoteSource.prefetch_many` (a
no-op on a local :class:`~workbench.source.Source`): the whole flatbuffer of a program, the
zip directory, the head of each delegate blob. Several ranges are fetched concurrently.

Faults are :class:`~workbench.errors.RemoteError` subclasses naming the URL with its
credentials masked: 404 (:class:`RemoteNotFoundError`), 401/403 (:class:`RemoteAccessError`),
416, 5xx, dropped connections and timeouts after :data:`RETRIES` retries with exponential
backoff (:class:`RemoteUnavailableError`), a server ignoring ``Range``
(:class:`RangeNotSupportedError` unless ``allow_full_download=True``), and an ETag,
Last-Modified or size change between requests (:class:`StaleFileError`). Credentials come
only from ``storage_options`` or the environment (fsspec / botocore read it) and never
appear in messages, frames or ``repr``.

Example:
    >>> from workbench.remote import RemoteSource
    >>> src = RemoteSource("https://host/models/mlp.pte")      # doctest: +SKIP
    >>> src.bytes(4, 4, "file identifier"), src.requests, src.fetched   # doctest: +SKIP
    (b'ET12', 1, 5408)
"""

from __future__ import annotations

import bisect
import mmap
import posixpath
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from .errors import (
    ArtifactError,
    RangeNotSupportedError,
    RemoteAccessError,
    RemoteError,
    RemoteNotFoundError,
    RemoteUnavailableError,
    StaleFileError,
    mask_url,
)
from .source import Source

__all__ = ["BLOCK", "HEAD_BYTES", "RETRIES", "BACKOFF", "TIMEOUT", "CONCURRENCY",
           "RemoteSource", "head_bytes", "is_url", "list_files", "local_path",
           "sibling_data_files"]

#: Bytes fetched by the first request (the header and, for most programs, the whole
#: flatbuffer).
HEAD_BYTES = 64 << 10
#: A missing range shorter than this is rounded out to this alignment (the block cache).
BLOCK = 16 << 10
#: Retries of a request answered 5xx / 416 / 429, dropped or timed out.
RETRIES = 3
#: Seconds before the first retry (doubled for each next one).
BACKOFF = 0.1
#: Seconds one request may take (connect + body) before it counts as timed out.
TIMEOUT = 60.0
#: Requests in flight at once for :meth:`RemoteSource.prefetch_many`.
CONCURRENCY = 32

_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_STAR_RANGE = re.compile(r"bytes\s+\*/(\d+)")
_LOCAL = ("file", "local")


def is_url(path: Any) -> bool:
    """Whether ``path`` is a URL read through fsspec (``file://`` counts as a local path).

    Example:
        >>> is_url("s3://bucket/m.pte"), is_url("models/m.pte"), is_url("file:///tmp/m.pte")
        (True, False, False)
    """
    if not isinstance(path, str) or "://" not in path:
        return False
    return path.split("://", 1)[0].lower() not in _LOCAL


def local_path(path: Any) -> Any:
    """``file:///x`` -> ``/x``; anything else unchanged."""
    if isinstance(path, str) and path.lower().startswith("file://"):
        return path[len("file://"):]
    return path


class _Reply(NamedTuple):
    start: int
    data: bytes
    total: int | None
    etag: str | None
    modified: str | None
    whole: bool  # the server sent the whole file (200) instead of the range


class _Retry(Exception):
    """A transient failure (retried): the message says what happened."""


class _Transport:
    """How bytes are fetched: ``get(start, end)`` -> :class:`_Reply` (async where the file
    system is)."""

    loop: Any = None

    def __init__(self, url: str, fs: Any, owner: RemoteSource) -> None:
        self.url = url
        self.fs = fs
        self.owner = owner

    async def get(self, start: int, end: int) -> _Reply:  # pragma: no cover - abstract
        raise NotImplementedError

    def failure(self, e: Exception, start: int, end: int,
                status_of: Callable[[BaseException], int | None] | None = None) -> Exception:
        """Our exception for the transport exception ``e`` of a read of ``[start, end)``:
        not found / access denied / a classified HTTP status (``status_of``) as ArtifactErrors,
        anything else a :class:`_Retry` with the masked text. The caller raises it ``from
        None``: transport exceptions are never raised or chained."""
        status = (404 if isinstance(e, FileNotFoundError) else
                  403 if isinstance(e, PermissionError) else
                  status_of(e) if status_of is not None else None)
        if status is not None:
            try:
                self.owner._status(status, start, end, None)  # always raises
            except (ArtifactError, _Retry) as ours:
                return ours
        return _Retry(_describe(e, self.owner))

    def listing(self, folder: str) -> list[str]:
        """Names of the objects directly under ``folder`` (one listing request)."""
        return [posixpath.basename(p.rstrip("/")) for p in self.fs.ls(folder, detail=False)]


class _Http(_Transport):
    """Ranged GETs on fsspec's aiohttp session (headers and auth from ``storage_options``)."""

    def __init__(self, url: str, fs: Any, owner: RemoteSource) -> None:
        super().__init__(url, fs, owner)
        self.loop = fs.loop

    async def get(self, start: int, end: int) -> _Reply:
        import asyncio

        import aiohttp

        session = await self.fs.set_session()
        kw = dict(self.fs.kwargs)
        headers = dict(kw.pop("headers", None) or {})
        headers["Range"] = f"bytes={start}-{end - 1}"
        headers["Accept-Encoding"] = "identity"
        timeout = aiohttp.ClientTimeout(total=self.owner.timeout)
        try:
            async with session.get(self.url, headers=headers, timeout=timeout, **kw) as r:
                status = r.status
                etag = r.headers.get("ETag")
                modified = r.headers.get("Last-Modified")
                if status == 206:
                    m = _CONTENT_RANGE.match(r.headers.get("Content-Range", ""))
                    if not m:
                        raise RemoteUnavailableError(
                            "a 206 answer without a usable Content-Range "
                            f"({r.headers.get('Content-Range')!r})", file=self.owner.path,
                            structure=f"bytes [0x{start:x}, 0x{end:x})", offset=start)
                    data = await r.read()
                    total = None if m.group(3) == "*" else int(m.group(3))
                    return _Reply(int(m.group(1)), data, total, etag, modified, False)
                if status == 200:
                    length = r.content_length
                    if not self.owner.allow_full_download and (length is None
                                                              or length > end - start):
                        raise RangeNotSupportedError(
                            f"the server ignored Range and answered 200 with the whole file "
                            f"({'unknown size' if length is None else f'{length} bytes'}); "
                            "refusing to download it (open(url, allow_full_download=True) "
                            "accepts it)", file=self.owner.path,
                            structure=f"bytes [0x{start:x}, 0x{end:x})", offset=start)
                    data = await r.read()
                    return _Reply(0, data, len(data), etag, modified, True)
                total = None
                m = _STAR_RANGE.match(r.headers.get("Content-Range", ""))
                if m:
                    total = int(m.group(1))
                if status == 416 and total == 0 and start == 0:  # an empty file
                    return _Reply(0, b"", 0, etag, modified, False)
                self.owner._status(status, start, end, total)
                raise AssertionError("unreachable")  # pragma: no cover
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as e:
            raise _Retry(_describe(e, self.owner)) from None


class _S3(_Transport):
    """Ranged ``GetObject`` through s3fs (credentials: ``storage_options`` / environment),
    ``IfMatch`` the ETag seen first."""

    def __init__(self, url: str, fs: Any, owner: RemoteSource) -> None:
        super().__init__(url, fs, owner)
        self.loop = fs.loop
        self.bucket, self.key, self.version = fs.split_path(url)

    async def get(self, start: int, end: int) -> _Reply:
        kw: dict[str, Any] = {"Bucket": self.bucket, "Key": self.key,
                              "Range": f"bytes={start}-{end - 1}"}
        if self.version:
            kw["VersionId"] = self.version
        if self.owner._etag:
            kw["IfMatch"] = self.owner._etag
        try:
            resp = await self.fs._call_s3("get_object", **kw)
            body = resp["Body"]
            try:
                data = await body.read()
            finally:
                body.close()
        except ArtifactError:
            raise
        except Exception as e:  # botocore / aiohttp / s3fs: classified, never re-raised
            raise self.failure(e, start, end, _s3_status) from None
        m = _CONTENT_RANGE.match(resp.get("ContentRange") or "")
        modified = resp.get("LastModified")
        modified = None if modified is None else str(modified)
        if m is None:  # the whole object
            if len(data) > end - start and not self.owner.allow_full_download:
                raise RangeNotSupportedError(
                    f"the server ignored Range and sent the whole object ({len(data)} bytes)",
                    file=self.owner.path, structure=f"bytes [0x{start:x}, 0x{end:x})",
                    offset=start)
            return _Reply(0, data, len(data), resp.get("ETag"), modified, True)
        return _Reply(int(m.group(1)), data, int(m.group(3)), resp.get("ETag"), modified, False)


class _Generic(_Transport):
    """Any other fsspec file system: ``info`` once, then ``cat_file`` ranges."""

    def __init__(self, url: str, fs: Any, owner: RemoteSource) -> None:
        super().__init__(url, fs, owner)
        self.path = fs._strip_protocol(url)
        self.info: dict | None = None
        self.loop = getattr(fs, "loop", None) if getattr(fs, "async_impl", False) else None

    async def get(self, start: int, end: int) -> _Reply:
        try:
            if self.info is None:
                self.info = await self._call("info", self.path)
                self.owner.requests += 1
            size = int(self.info.get("size") or 0)
            end = min(end, size)
            data = await self._call("cat_file", self.path, start=start, end=end) \
                if end > start else b""
        except ArtifactError:
            raise
        except Exception as e:
            raise self.failure(e, start, end) from None
        info = self.info
        etag = info.get("ETag") or info.get("etag")
        modified = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
        return _Reply(start, bytes(data), size, None if etag is None else str(etag),
                      None if modified is None else str(modified), False)

    async def _call(self, name: str, *args: Any, **kw: Any) -> Any:
        import asyncio

        if self.loop is not None:
            return await getattr(self.fs, "_" + name)(*args, **kw)
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: getattr(self.fs, name)(*args, **kw))


def _s3_status(e: BaseException) -> int | None:
    """The HTTP status of a botocore ``ClientError`` (also when s3fs wrapped it)."""
    for err in (e, e.__cause__, e.__context__, *getattr(e, "args", ())):
        resp = getattr(err, "response", None)
        if isinstance(resp, dict):
            code = resp.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code:
                return int(code)
    text = str(e)
    m = re.search(r"\b(412|416|429|5\d\d)\b", text)
    if m and ("Precondition" in text or "Range" in text or "Server" in text
              or "Slow" in text or m.group(1) != "412"):
        return int(m.group(1))
    return None


def _describe(e: BaseException, owner: RemoteSource) -> str:
    """A transport exception as text with every known secret masked."""
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return owner._scrub(text)


class RemoteSource(Source):
    """A :class:`~workbench.source.Source` over a URL: checked reads fetch the bytes they
    need with ranged requests into a sparse map (the block cache).

    Args:
        url: ``http(s)://``, ``s3://`` or any fsspec URL.
        storage_options: passed to the fsspec file system (``client_kwargs``,
            ``headers``, ``key``/``secret``, ``anon``, ...). Credentials come only from
            here or the environment.
        allow_full_download: accept a server that ignores ``Range`` (the whole file is then
            fetched once); otherwise that is a :class:`RangeNotSupportedError`.
        timeout: seconds one request may take.

    Attributes:
        path: the URL with its credentials masked (what errors and frames show).
        requests: requests made so far (retries included).
        fetched: bytes received so far.

    Example:
        >>> src = RemoteSource("s3://bucket/m.pte",
        ...                    storage_options={"anon": True})   # doctest: +SKIP
        >>> src.size, src.requests, src.fetched                   # doctest: +SKIP
        (403046912, 1, 65536)
    """

    __slots__ = ("_url", "_fs", "_io", "_filled", "_lock", "_etag", "_modified", "_stale",
                 "_secrets", "allow_full_download", "timeout", "requests", "fetched",
                 "storage_options")
    remote = True

    def __init__(self, url: str, *, storage_options: dict | None = None,
                 allow_full_download: bool = False, timeout: float = TIMEOUT) -> None:
        import fsspec

        self._fd = -1
        self._mm = None
        self.buf = memoryview(b"")
        self.size = 0
        self._url = url
        self.path = mask_url(url)
        self.name = posixpath.basename(self.path.split("?", 1)[0]) or self.path
        self.storage_options = dict(storage_options or {})
        self._secrets = _secrets_of(url, self.storage_options)
        self.allow_full_download = allow_full_download
        self.timeout = timeout
        self.requests = 0
        self.fetched = 0
        self._filled: list[int] = []  # sorted, disjoint [start, end) pairs, flattened
        self._lock = threading.Lock()
        self._etag: str | None = None
        self._modified: str | None = None
        self._stale: str | None = None
        protocol = url.split("://", 1)[0].lower()
        try:
            fs = fsspec.filesystem(protocol, **self.storage_options)
        except ImportError as e:
            raise RemoteError(f"no fsspec file system for {protocol}:// is installed "
                              f"({self._scrub(str(e))}); pip install 'workbench[remote]'",
                              file=self.path) from None
        except (TypeError, ValueError) as e:
            raise RemoteError(f"storage_options do not fit {protocol}://: "
                              f"{self._scrub(str(e))}", file=self.path) from None
        self._fs = fs
        if protocol in ("http", "https"):
            self._io: _Transport = _Http(url, fs, self)
        elif protocol in ("s3", "s3a"):
            self._io = _S3(url, fs, self)
        else:
            self._io = _Generic(url, fs, self)
        first = self._fetch_all([(0, HEAD_BYTES)], opening=True)[0]
        size = first.total if first.total is not None else len(first.data)
        self.size = size
        self._etag, self._modified = first.etag, first.modified
        if size:
            flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20) \
                | getattr(mmap, "MAP_NORESERVE", 0)
            self._mm = mmap.mmap(-1, size, flags=flags)
            self.buf = memoryview(self._mm).toreadonly()
        self._store(first)

    # -- what the artifact reports ---------------------------------------------------------
    @property
    def url(self) -> str:
        """The URL with its credentials masked (same as :attr:`path`)."""
        return self.path

    @property
    def transfer(self) -> dict[str, int]:
        """``{"requests": ..., "bytes": ...}`` made and received so far for this file.

        Example:
            >>> art.sources[art.path].transfer                   # doctest: +SKIP
            {'requests': 2, 'bytes': 131072}
        """
        return {"requests": self.requests, "bytes": self.fetched}

    @property
    def cached(self) -> int:
        """Bytes of the file held in the block cache."""
        f = self._filled
        return sum(f[i + 1] - f[i] for i in range(0, len(f), 2))

    def __repr__(self) -> str:
        return (f"RemoteSource({self.path!r}, size={self.size}, requests={self.requests}, "
                f"fetched={self.fetched})")

    # -- fetching --------------------------------------------------------------------------
    def _missing(self, start: int, end: int) -> list[tuple[int, int]]:
        f = self._filled
        out = []
        i = bisect.bisect_right(f, start)
        pos = start
        if i % 2:  # inside a filled range
            pos = f[i]
            i += 1
        while pos < end:
            if i >= len(f) or f[i] >= end:
                out.append((pos, end))
                break
            if f[i] > pos:
                out.append((pos, f[i]))
            pos = f[i + 1]
            i += 2
        return out

    def _mark(self, start: int, end: int) -> None:
        f = self._filled
        i = bisect.bisect_left(f, start)
        j = bisect.bisect_right(f, end)
        new = []
        if i % 2 == 0:
            new.append(start)
        if j % 2 == 0:
            new.append(end)
        f[i:j] = new

    def _store(self, r: _Reply) -> None:
        n = min(len(r.data), self.size - r.start)
        if n <= 0:
            return
        self._mm[r.start:r.start + n] = r.data[:n]
        self._mark(r.start, r.start + n)

    def _plan(self, ranges: Iterable[tuple[int, int]], gap: int = 0) -> list[tuple[int, int]]:
        """Missing pieces of ``(offset, length)`` ranges: short ones rounded out to
        :data:`BLOCK`, ones less than ``gap`` bytes apart merged (the bytes between are
        fetched too: cheaper than another round trip)."""
        wanted = []
        for off, length in ranges:
            start, end = max(0, off), min(self.size, off + length)
            if end <= start:
                continue
            if end - start < BLOCK:
                start = start - start % BLOCK
                end = min(self.size, -(-end // BLOCK) * BLOCK)
            wanted.extend(self._missing(start, end))
        wanted.sort()
        merged: list[list[int]] = []
        for a, b in wanted:
            if merged and a <= merged[-1][1] + gap:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return [(a, b) for a, b in merged]

    def prefetch(self, offset: int, length: int) -> None:
        """Fetch ``[offset, offset+length)`` (clipped to the file) unless cached.

        Example:
            >>> src.prefetch(0, 1 << 20)                          # doctest: +SKIP
        """
        self.prefetch_many([(offset, length)])

    def prefetch_many(self, ranges: Iterable[tuple[int, int]], gap: int = 0) -> None:
        """Fetch every ``(offset, length)`` range not cached yet, with concurrent requests
        (pieces less than ``gap`` bytes apart in one request).

        Example:
            >>> src.prefetch_many([(0x10000, 4096), (0x90000, 4096)])   # doctest: +SKIP
        """
        self._ensure_ok()
        with self._lock:
            plan = self._plan(ranges, gap)
            if plan:
                for r in self._fetch_all(plan):
                    self._store(r)

    def _fetch_all(self, plan: list[tuple[int, int]], opening: bool = False) -> list[_Reply]:
        coro = self._gather(plan, opening)
        if self._io.loop is not None:
            from fsspec.asyn import sync

            return sync(self._io.loop, lambda: coro)
        return _run(coro)

    async def _gather(self, plan: list[tuple[int, int]], opening: bool) -> list[_Reply]:
        import asyncio

        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(a: int, b: int) -> _Reply:
            async with gate:
                return await self._get(a, b, opening)

        return list(await asyncio.gather(*(one(a, b) for a, b in plan)))

    async def _get(self, start: int, end: int, opening: bool) -> _Reply:
        import asyncio

        delay = BACKOFF
        why = ""
        for attempt in range(RETRIES + 1):
            if attempt:
                await asyncio.sleep(delay)
                delay *= 2
            self.requests += 1
            try:
                r = await self._io.get(start, end)
            except _Retry as e:
                why = str(e)
                continue
            self.fetched += len(r.data)
            if not opening:
                self._check_same(r, start)
            if r.whole:
                if not opening:
                    self._store_whole(r)
                return _Reply(0, r.data, len(r.data), r.etag, r.modified, True)
            want = min(end, r.total) - start if r.total is not None else end - start
            if r.start != start or len(r.data) < want:
                why = (f"asked for {end - start} bytes at 0x{start:x}, got {len(r.data)} at "
                       f"0x{r.start:x}")
                continue
            return r
        raise RemoteUnavailableError(
            f"no answer after {RETRIES + 1} tries with backoff ({why})", file=self.path,
            structure=f"bytes [0x{start:x}, 0x{end:x})", offset=start)

    def _store_whole(self, r: _Reply) -> None:
        if len(r.data) != self.size:
            self._stale_error(f"size {self.size} -> {len(r.data)}", 0)
        self._mm[:] = r.data
        self._filled[:] = [0, self.size]

    def _check_same(self, r: _Reply, offset: int) -> None:
        parts = []
        if r.total is not None and r.total != self.size:
            parts.append(f"size {self.size} -> {r.total}")
        if r.etag and self._etag and r.etag != self._etag:
            parts.append(f"ETag {self._etag} -> {r.etag}")
        if r.modified and self._modified and r.modified != self._modified:
            parts.append(f"Last-Modified {self._modified} -> {r.modified}")
        if parts:
            self._stale_error(", ".join(parts), offset)

    def _stale_error(self, what: str, offset: int | None) -> None:
        self._stale = what
        raise StaleFileError(f"changed since it was opened: {what}; reload it "
                             "(Artifact.reload())", file=self.path, offset=offset)

    def _status(self, status: int, start: int, end: int, total: int | None) -> None:
        """Raise the error for an HTTP ``status`` (transient ones as :class:`_Retry`)."""
        where = {"file": self.path, "structure": f"bytes [0x{start:x}, 0x{end:x})",
                 "offset": start}
        if status == 404:
            raise RemoteNotFoundError("not found (HTTP 404)", **where)
        if status in (401, 403):
            raise RemoteAccessError(f"access denied (HTTP {status}): check the credentials "
                                    "in storage_options or the environment", **where)
        if status == 412:
            self._stale_error("ETag no longer matches (HTTP 412)", start)
        if status == 416 and total is not None and self.size and total != self.size:
            self._stale_error(f"size {self.size} -> {total}", start)
        if status in (408, 416, 429) or status >= 500:
            raise _Retry(f"HTTP {status}")
        raise RemoteError(f"unexpected HTTP {status}", **where)

    def _scrub(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, "***")
        return text

    def _ensure(self, offset: int, length: int) -> None:
        f = self._filled
        if len(f) >= 2 and f[0] <= offset and offset + length <= f[1]:
            return
        if length > 0 and self._missing(max(0, offset), min(self.size, offset + length)):
            self.prefetch_many([(offset, length)])

    # -- the Source interface ----------------------------------------------------------------
    def _read(self, st: Any, offset: int, what: str) -> int:
        if offset < 0 or offset + st.size > self.size:
            self.check(offset, st.size, what)
        self._ensure(offset, st.size)
        return st.unpack_from(self.buf, offset)[0]

    def view(self, offset: int, length: int, what: str = "range") -> memoryview:
        """A read-only ``memoryview`` of ``length`` bytes at ``offset`` (checked, fetched)."""
        self.check(offset, length, what)
        self._ensure(offset, length)
        return self.buf[offset:offset + length]

    def head(self, n: int = 64) -> bytes:
        """The first ``min(n, size)`` bytes (fetched at open)."""
        n = min(n, self.size)
        self._ensure(0, n)
        return bytes(self.buf[:n])

    @property
    def identity(self) -> tuple[Any, ...]:
        """``(size, ETag, Last-Modified)`` of the object when it was opened."""
        return (self.size, self._etag, self._modified)

    def _ensure_ok(self) -> None:
        if self._stale is not None:
            raise StaleFileError(f"changed since it was opened: {self._stale}; reload it "
                                 "(Artifact.reload())", file=self.path)

    def ensure_fresh(self, what: str | None = None, offset: int | None = None) -> None:
        """Raise :class:`StaleFileError` once a response showed that the object changed
        (no request of its own: every ranged response is compared with the first)."""
        if self._stale is not None:
            raise StaleFileError(f"changed since it was opened: {self._stale}; reload it "
                                 "(Artifact.reload())", file=self.path, structure=what,
                                 offset=offset)

    def changes(self) -> str | None:
        """What changed about the object since it was opened, or ``None`` (one request).

        Example:
            >>> src.changes()                           # doctest: +SKIP
            'ETag "a1" -> "b2"'
        """
        if self._stale is not None:
            return self._stale
        if not self.size:
            return None
        try:
            self._fetch_all([(0, 1)])
        except StaleFileError:
            return self._stale
        except RemoteNotFoundError:
            return "the URL no longer names an object"
        return None

    def readinto(self, offset: int, out: Any, what: str = "range") -> Any:
        """Copy ``len(out)`` bytes at ``offset`` into ``out`` (checked, fetched)."""
        mv = memoryview(out).cast("B")
        n = len(mv)
        self.check(offset, n, what)
        self.ensure_fresh(what, offset)
        if n:
            self._ensure(offset, n)
            mv[:] = self.buf[offset:offset + n]
        return out

    def chunks(self, offset: int, length: int, what: str = "range",
               chunk: int = 16 << 20) -> Iterator[memoryview]:
        """The bytes of ``[offset, offset+length)`` as consecutive chunks, fetched chunk by
        chunk."""
        self.check(offset, length, what)
        end = offset + length
        pos = offset
        while pos < end:
            n = min(chunk, end - pos)
            self._ensure(pos, n)
            yield self.buf[pos:pos + n]
            pos += n
        self.ensure_fresh(what, offset)


def _secrets_of(url: str, options: dict) -> list[str]:
    """Strings that must never appear in text the workbench shows."""
    out = []
    rest = url.split("://", 1)[-1]
    netloc = rest.split("/", 1)[0]
    if "@" in netloc:
        user = netloc.rpartition("@")[0]
        if ":" in user:
            out.append(user.split(":", 1)[1])
    if "?" in url:
        for item in url.split("?", 1)[1].split("&"):
            _k, _, v = item.partition("=")
            if v and mask_url(f"x://h/?{item}") != f"x://h/?{item}":
                out.append(v)

    def walk(o: Any, key: str = "") -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, str(k).lower())
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v, key)
        elif isinstance(o, str) and len(o) >= 4 and any(
                w in key for w in ("secret", "token", "key", "password", "auth", "credential")):
            out.append(o)
        elif hasattr(o, "password") and isinstance(getattr(o, "password", None), str):
            out.append(o.password)  # aiohttp.BasicAuth

    walk(options)
    return sorted({s for s in out if s}, key=len, reverse=True)


def _run(coro: Any) -> Any:
    """Run ``coro`` to completion on a private event loop (file systems without one)."""
    import asyncio

    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["out"] = asyncio.run(coro)
        except BaseException as e:
            box["err"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join()
    if "err" in box:
        raise box["err"]
    return box["out"]


def _parent(url: str) -> str:
    base = url.split("?", 1)[0]
    return base.rsplit("/", 1)[0] + "/"


def sibling_data_files(src: RemoteSource) -> list[str]:
    """``.ptd`` URLs next to the program ``src`` (same prefix): the one named like the
    program first, then the rest in name order. Lists the prefix (one request); where the
    server cannot list (plain HTTP without an index page) only ``<stem>.ptd`` is tried.

    Example:
        >>> sibling_data_files(RemoteSource("s3://b/m/prog.pte"))   # doctest: +SKIP
        ['s3://b/m/prog.ptd', 's3://b/m/other.ptd']
    """
    url = src._url
    base = url.split("?", 1)[0]
    stem = posixpath.splitext(posixpath.basename(base))[0]
    folder = _parent(url)
    own = folder + stem + ".ptd"
    try:
        src.requests += 1
        names = src._io.listing(folder)
    except Exception:
        return [own]
    found = sorted(n for n in names if n.endswith(".ptd"))
    found.sort(key=lambda n: n[:-4] != stem)
    return [folder + n for n in found]


def head_bytes(url: str, n: int, storage_options: dict | None = None) -> bytes:
    """The first ``n`` bytes of the object at ``url`` (one ranged read; for format sniffing
    before a scan decides to open a file).

    Example:
        >>> head_bytes("s3://bucket/m/model.bin", 64)          # doctest: +SKIP
        b'\\x1c\\x00\\x00\\x00ET12...'
    """
    import fsspec

    protocol = url.split("://", 1)[0].lower()
    try:
        fs = fsspec.filesystem(protocol, **(storage_options or {}))
        return bytes(fs.cat_file(url, start=0, end=n))
    except Exception as e:  # transport errors become ours
        raise _call_error(e, url, "not found", "access denied", "cannot read") from None


def _call_error(e: Exception, url: str, not_found: str, denied: str, other: str
                ) -> RemoteError:
    """The RemoteError for a failed one-off fsspec call on ``url`` (the caller raises it
    ``from None``); the transport exception's text is not kept (it may hold secrets)."""
    if isinstance(e, FileNotFoundError):
        return RemoteNotFoundError(not_found, file=mask_url(url))
    if isinstance(e, PermissionError):
        return RemoteAccessError(denied, file=mask_url(url))
    return RemoteUnavailableError(f"{other} ({type(e).__name__})", file=mask_url(url))


def list_files(url: str, storage_options: dict | None = None,
               pattern: str | None = None) -> list[str]:
    """Every object under the prefix ``url`` (recursively), as URLs, in name order.

    Example:
        >>> list_files("s3://bucket/models/")                 # doctest: +SKIP
        ['s3://bucket/models/a.pte', 's3://bucket/models/sub/b.ptd']
    """
    import fsspec

    protocol = url.split("://", 1)[0].lower()
    try:
        fs = fsspec.filesystem(protocol, **(storage_options or {}))
        found = fs.find(url)
    except Exception as e:
        raise _call_error(e, url, "nothing under this prefix", "listing refused: check the "
                          "credentials in storage_options or the environment",
                          "cannot list") from None
    out = []
    for p in found:
        if "://" not in p:
            p = f"{protocol}://{p.lstrip('/') if protocol not in ('http', 'https') else p}"
        out.append(p)
    return sorted(out)

