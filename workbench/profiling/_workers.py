"""Running one profile run in a process of its own: the fork server (imports the heavy
modules once, forks one child per run, kept between :func:`~workbench.profiling.profile`
calls), the fallback of one new interpreter per run, and turning what a worker left behind
(its result file, exit code, stderr) into a result row.

This module owns the worker processes and :func:`close_workers`; nothing else in the
profiler starts a process.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

__all__ = ["close_workers", "worker_env", "Runner"]


def worker_env(tmp: str) -> dict[str, str]:
    """The parent's environment + its ``sys.path`` (so custom paths import) + a private TMPDIR."""
    env = dict(os.environ)
    here = [p for p in sys.path if p and os.path.isdir(p)]
    # the folder that holds the ``workbench`` package (this file is workbench/profiling/...)
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parts = [pkg_root, *here, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    env["TMPDIR"] = tmp
    return env


def _tail(text: bytes, lines: int = 3) -> str:
    out = [ln.strip() for ln in text.decode("utf-8", "replace").splitlines() if ln.strip()]
    return " | ".join(out[-lines:])[-400:]


def _result(result_file: str, rc: int | None, stderr: bytes) -> dict[str, Any]:
    """The worker's result file, or an error row built from its exit code and stderr."""
    import json
    import signal

    if os.path.exists(result_file):
        with open(result_file) as f:
            res = json.load(f)
        os.unlink(result_file)
        res["rc"] = rc
        return res
    tail = _tail(stderr)
    if rc is not None and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        error = f"worker killed by {sig} (rc {rc})"
    else:
        error = f"worker exited with code {rc} and no result"
    return {"status": "error", "error": f"{error}: {tail}" if tail else error, "rc": rc}


def _run_worker(plan_file: str, name: str, cold: bool, workdir: str, env: dict[str, str],
                timeout: float) -> dict[str, Any]:
    """Run one worker in a new interpreter; always returns a result dict (crashes become
    errors)."""
    import subprocess
    import uuid

    from ..loadpaths import BOOT

    result_file = os.path.join(workdir, f"result-{uuid.uuid4().hex}.json")
    cmd = [sys.executable, "-c", BOOT, plan_file, name, "1" if cold else "0", result_file]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, env=env,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "error", "error": f"timed out after {timeout:g} s", "rc": None}
    return _result(result_file, proc.returncode, proc.stderr)


class _ServerGone(Exception):
    """The fork server died or stopped answering: the caller falls back to new interpreters."""


class _ForkServer:
    """A :func:`workbench.loadpaths.server_main` process: it imports the heavy modules once and
    forks one child per run. Kept between :func:`profile` calls (one per parent process,
    restarted when a profile needs modules it has not imported); ended at exit or by
    :func:`close_workers`."""

    def __init__(self, preload: frozenset[str], timeout: float) -> None:
        import json
        import subprocess
        import tempfile

        from ..loadpaths import SERVER_BOOT

        self.preload = preload
        self.pid_owner = os.getpid()
        self.home = tempfile.mkdtemp(prefix="workbench-forkserver-")
        self.log_path = os.path.join(self.home, "server.log")
        self._log = open(self.log_path, "wb")
        tmp = os.path.join(self.home, "tmp")
        os.mkdir(tmp)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER_BOOT, json.dumps(sorted(preload))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=worker_env(tmp))
        self._buf = b""
        msg = self._read(timeout)
        if not msg or not msg.get("ready"):
            self.close()
            raise _ServerGone("the fork server did not start")
        self.failed: dict[str, str] = msg.get("failed") or {}

    def _read(self, timeout: float) -> dict[str, Any] | None:
        """The next JSON line from the server (None: timeout or end of output)."""
        import json
        import select
        import time

        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line, self._buf = self._buf[:nl], self._buf[nl + 1:]
                try:
                    return json.loads(line)
                except ValueError:
                    continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk

    def alive(self) -> bool:
        return self.proc.poll() is None and os.getpid() == self.pid_owner

    def run(self, plan_file: str, name: str, cold: bool, workdir: str,
            timeout: float) -> dict[str, Any]:
        import json
        import signal
        import uuid

        tag = uuid.uuid4().hex
        result_file = os.path.join(workdir, f"result-{tag}.json")
        log = os.path.join(workdir, f"worker-{tag}.log")
        tmp = os.path.join(workdir, "tmp")
        req = {"plan": plan_file, "name": name, "cold": cold, "result": result_file, "log": log,
               "tmpdir": tmp, "sys_path": [p for p in sys.path if p and os.path.isdir(p)]}
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as e:
            raise _ServerGone(str(e)) from e
        msg = self._read(60.0)
        if not msg or "pid" not in msg:
            raise _ServerGone("no child started")
        pid = int(msg["pid"])
        msg = self._read(timeout)
        if msg is None:
            if self.proc.poll() is not None:
                raise _ServerGone("the fork server died")
            try:  # our own child, still unreaped (its rc line has not come)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._read(60.0)
            for f in (result_file, log):
                if os.path.exists(f):
                    os.unlink(f)
            return {"status": "error", "error": f"timed out after {timeout:g} s", "rc": None}
        stderr = b""
        if os.path.exists(log):
            with open(log, "rb") as f:
                stderr = f.read()
            os.unlink(log)
        return _result(result_file, msg.get("rc"), stderr)

    def close(self) -> None:
        import shutil
        import subprocess

        if os.getpid() != self.pid_owner:
            return
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()
        shutil.rmtree(self.home, ignore_errors=True)


_SERVER: _ForkServer | None = None
_SERVER_LOCK = threading.Lock()


def _server(preload: frozenset[str], timeout: float) -> _ForkServer:
    """The shared fork server, (re)started when it is gone or lacks a module of ``preload``."""
    import atexit

    global _SERVER
    srv = _SERVER
    if srv is not None and srv.alive() and preload <= srv.preload:
        return srv
    if srv is not None:
        srv.close()
        _SERVER = None
    first = srv is None
    _SERVER = _ForkServer(preload | (srv.preload if srv is not None else frozenset()), timeout)
    if first:
        atexit.register(close_workers)
    return _SERVER


def close_workers() -> None:
    """End the fork server that :func:`profile` keeps between calls (it holds the preloaded
    modules' memory); the next profile starts a new one. Also runs at interpreter exit.

    Example:
        >>> close_workers()
    """
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is not None:
            _SERVER.close()
            _SERVER = None


#: Imported by every fork server: what every run needs.
_BASE_PRELOAD = frozenset({"numpy", "workbench.loadpaths"})


class Runner:
    """Runs workers for one :func:`profile` call: forked from the shared server, or (spawn,
    or when the server cannot be used) new interpreters."""

    def __init__(self, isolation: str, preload: frozenset[str], workdir: str,
                 env: dict[str, str], timeout: float) -> None:
        self.isolation = isolation
        self.workdir, self.env, self.timeout = workdir, env, timeout
        self.server: _ForkServer | None = None
        self.fallback: str | None = None
        if isolation == "fork":
            try:
                with _SERVER_LOCK:
                    self.server = _server(_BASE_PRELOAD | preload, timeout)
            except (_ServerGone, OSError) as e:
                self.fallback = f"fork server unavailable ({e}): new interpreters"

    def run(self, plan_file: str, name: str, cold: bool) -> dict[str, Any]:
        if self.server is not None:
            try:
                with _SERVER_LOCK:
                    return self.server.run(plan_file, name, cold, self.workdir, self.timeout)
            except _ServerGone as e:
                self.server = None
                self.fallback = f"fork server lost ({e}): new interpreters"
                close_workers()
        return _run_worker(plan_file, name, cold, self.workdir, self.env, self.timeout)
