"""A range-capable HTTP server on loopback for the remote-artifact tests and benchmark.

It serves the files of one folder (``GET`` with one ``Range``, ``HEAD``, an HTML index for
folders), counts requests and bytes sent per path, and injects latency, a bandwidth cap
and faults per path.

Example:
    >>> with RangeServer("sample_models") as srv:               # doctest: +SKIP
    ...     art = wb.open(srv.url("mlp_portable.pte"))
    ...     srv.requests["/mlp_portable.pte"]
    1
"""

from __future__ import annotations

import collections
import email.utils
import hashlib
import html
import os
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class RangeServer:
    """Serve ``root`` on ``127.0.0.1`` (a free port) from a thread.

    Attributes:
        requests / sent: per URL path, requests answered and body bytes sent.
        latency: seconds slept before each answer.
        bandwidth: bytes per second of bodies (``None``: unlimited).
        faults: URL path -> a list of faults, one used up per request (the last one
            stays): ``"404"``, ``"403"``, ``"500"``, ``"503"``, ``"416"``, ``"drop"`` (close the
            connection without answering), ``"hang"`` (answer after 30 s), ``"norange"``
            (ignore Range: 200 with the whole body), ``"etag"`` (serve a new ETag from now on),
            ``"ok"`` (no fault).
        require: ``(user, password)`` for Basic auth, or ``None``.
    """

    def __init__(self, root: str | os.PathLike[str], *, latency: float = 0.0,
                 bandwidth: float | None = None) -> None:
        self.root = os.fspath(root)
        self.latency = latency
        self.bandwidth = bandwidth
        self.faults: dict[str, list[str]] = {}
        self.require: tuple[str, str] | None = None
        self.requests: collections.Counter[str] = collections.Counter()
        self.sent: collections.Counter[str] = collections.Counter()
        self.headers_seen: list[dict[str, str]] = []
        self.generation: dict[str, int] = collections.defaultdict(int)
        self.inflight = 0
        #: the most requests that were being answered at the same time
        self.max_inflight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                server._answer(self, head=True)

            def do_GET(self) -> None:
                server._answer(self, head=False)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    # -- control ------------------------------------------------------------------------------
    def url(self, rel: str = "", auth: str = "") -> str:
        """The URL of ``rel`` under the root (``auth``: ``user:password`` to put in it)."""
        at = f"{auth}@" if auth else ""
        return f"http://{at}127.0.0.1:{self.port}/{urllib.parse.quote(rel)}"

    def reset(self) -> None:
        """Forget the counts and faults."""
        with self._lock:
            self.requests.clear()
            self.sent.clear()
            self.faults.clear()
            self.headers_seen.clear()
            self.max_inflight = 0

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def total_sent(self) -> int:
        return sum(self.sent.values())

    def __enter__(self) -> RangeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- serving ------------------------------------------------------------------------------
    def _fault(self, path: str) -> str:
        with self._lock:
            todo = self.faults.get(path)
            if not todo:
                return "ok"
            return todo.pop(0) if len(todo) > 1 else todo[0]

    def _answer(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        with self._lock:
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            self._serve(h, head)
        finally:
            with self._lock:
                self.inflight -= 1

    def _serve(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = urllib.parse.urlsplit(h.path).path
        with self._lock:
            self.requests[path] += 1
            self.headers_seen.append(dict(h.headers))
        if self.latency:
            time.sleep(self.latency)
        if self.require is not None:
            import base64

            want = "Basic " + base64.b64encode(":".join(self.require).encode()).decode()
            if h.headers.get("Authorization") != want:
                return self._status(h, 403)
        fault = self._fault(path)
        if fault in ("404", "403", "500", "503"):
            return self._status(h, int(fault))
        if fault == "drop":
            h.close_connection = True
            h.connection.shutdown(2)
            return None
        if fault == "hang":
            time.sleep(30)
        if fault == "etag":
            with self._lock:
                self.generation[path] += 1
                self.faults[path] = ["ok"]
        local = os.path.join(self.root, urllib.parse.unquote(path).lstrip("/"))
        if os.path.isdir(local):
            return self._index(h, path, local)
        if not os.path.isfile(local):
            return self._status(h, 404)
        size = os.path.getsize(local)
        st = os.stat(local)
        tag = hashlib.sha1(f"{st.st_mtime_ns}:{size}:{self.generation[path]}".encode())
        etag = f'"{tag.hexdigest()[:16]}"'
        modified = email.utils.formatdate(st.st_mtime + self.generation[path], usegmt=True)
        rng = h.headers.get("Range")
        start, end, status = 0, size, 200
        if fault == "416":
            h.send_response(416)
            h.send_header("Content-Range", f"bytes */{size}")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        if rng and fault != "norange":
            m = _RANGE.match(rng.strip())
            if not m:
                return self._status(h, 416)
            start = int(m.group(1))
            end = min(size, int(m.group(2)) + 1) if m.group(2) else size
            if start >= size:
                h.send_response(416)
                h.send_header("Content-Range", f"bytes */{size}")
                h.send_header("Content-Length", "0")
                h.end_headers()
                return None
            status = 206
        h.send_response(status)
        h.send_header("Content-Length", str(end - start))
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("ETag", etag)
        h.send_header("Last-Modified", modified)
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        h.end_headers()
        if head:
            return None
        with open(local, "rb") as f:
            f.seek(start)
            left = end - start
            piece = 64 << 10
            while left > 0:
                chunk = f.read(min(piece, left))
                if not chunk:
                    break
                try:
                    h.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    return None
                with self._lock:
                    self.sent[path] += len(chunk)
                left -= len(chunk)
                if self.bandwidth:
                    time.sleep(len(chunk) / self.bandwidth)
        return None

    def _status(self, h: BaseHTTPRequestHandler, code: int) -> None:
        body = f"{code}\n".encode()
        h.send_response(code)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _index(self, h: BaseHTTPRequestHandler, path: str, local: str) -> None:
        base = path if path.endswith("/") else path + "/"
        links = "".join(f'<a href="{html.escape(base + n)}">{html.escape(n)}</a>\n'
                        for n in sorted(os.listdir(local)))
        body = f"<html><body>\n{links}</body></html>\n".encode()
        h.send_response(200)
        h.send_header("Content-Type", "text/html")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
