"""Load-path profiler: how an artifact's weights get from the file into CPU and CUDA memory,
measured against the limits of this machine.

:func:`profile` runs every applicable load path of :mod:`workbench.loadpaths` — plain
``read``, ``readinto``, ``mmap`` variants, per-tensor copies and views, the ExecuTorch
runtime's loaders, ``torch.export.load``, host-to-device copies — each run in a **new
process** (so peak memory and page faults belong to that run alone; a native crash is a
row, not a crash of the caller), and the rooflines in the same run: reading a buffer once
from RAM (``ram_read``), a large ``memcpy``, the page-cache read bandwidth and, for CUDA, a
large pinned host-to-device copy.

Example:
    >>> import workbench as wb
    >>> prof = wb.profile("sample_models/mlp_portable.pte", repeat=3)   # doctest: +SKIP
    >>> prof.summary[["path", "load_s", "read_s", "gbps", "rss_anon_growth"]]   # doctest: +SKIP
    >>> prof.spread("wall_s")                                            # doctest: +SKIP
    >>> print(prof.table())                                              # doctest: +SKIP
    >>> prof.plot()                                                      # doctest: +SKIP
    >>> prof.to_csv("profile.csv")                                       # doctest: +SKIP

Reading the numbers:

* Every run has two timed phases: the **load** (``load_s``: the path's own work; for a
  zero-copy path, mapping the pages) and the **read** (``read_s``: every weight byte read
  once — a checksum the parent compares with the file's; for the runtime's loaders, the
  first ``forward``). ``wall_s`` is their sum: the same work for every path, so the paths
  compare like with like. ``gbps = read_bytes / wall_s``; ``load_gbps = bytes / load_s``
  is, for a zero-copy path, pages mapped per second — not a bandwidth.
* ``bytes`` is what the load makes available (every file for whole-file paths, the unique
  stored tensor ranges for per-tensor paths); ``read_bytes`` the weights read.
* ``peak_rss_growth`` is the high-water mark during the run over the RSS before it (the
  mark is reset first); ``rss_anon_growth`` / ``rss_file_growth`` split what is *held* at
  the end into private anonymous memory (copies) and file-backed pages (maps).
* ``cold=True`` evicts the files from the page cache before each run and checks with
  ``mincore`` what stayed resident: ``cold_achieved`` says whether it worked, and when it
  did not, ``cold_note`` says what stayed and the likely causes (pages the caller maps,
  tmpfs, other processes). A run that was not cold is never reported as cold.
* Times on a shared machine are noisy: ``repeat`` runs per path, :meth:`Profile.spread`
  and the plot's error bars show how much.

Importing this module is cheap (pandas, tqdm, matplotlib and torch load inside calls).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ._cols import missing as _missing

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from .artifact import Artifact
    from .loadpaths import LoadPath, Plan

__all__ = ["Profile", "profile", "make_plan", "close_workers"]

MiB = 1 << 20


# ------------------------------------------------------------------------------------------
# The plan: what workers need, computed once from the Artifact
# ------------------------------------------------------------------------------------------

def _pt2_kind(path: str) -> str | None:
    """``export`` | ``aoti`` | None, from the zip's central directory (nothing extracted)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (OSError, zipfile.BadZipFile):
        return None
    if any("data/aotinductor/" in n for n in names):
        return "aoti"
    if any("/models/" in f"/{n}" and n.endswith(".json") for n in names):
        return "export"
    return None


def _plan_from_artifact(art: Artifact, trusted: bool) -> Plan:
    from .loadpaths import Plan

    files = [os.path.abspath(f) for f in art.files]
    index = {f: i for i, f in enumerate(art.files)}
    ten = art.tensors
    stored = ten[ten["offset"].notna() & ten["file"].notna()]
    seen: set[tuple[str, int, int]] = set()
    tensors: list[list[Any]] = []
    for name, dtype, nbytes, file, offset in zip(stored["name"], stored["dtype"], stored["nbytes"],
                                                 stored["file"], stored["offset"]):
        key = (file, int(offset), int(nbytes))
        if key in seen or file not in index:
            continue
        seen.add(key)
        tensors.append([index[file], int(offset), int(nbytes), str(dtype), str(name)])
    methods = (art.frames["methods"]["method"].astype(str).tolist()
               if "methods" in art.frames else [])
    delegates = (sorted(set(art.frames["delegates"]["id"].astype(str)))
                 if "delegates" in art.frames else [])
    data_files = ([os.path.abspath(f) for f in art.info.get("data_files") or []]
                  if art.format == "pte" else [])
    return Plan(format=art.format, path=files[0], files=files,
                sizes=[os.path.getsize(f) for f in files], data_files=data_files,
                tensors=tensors, methods=methods, delegates=delegates,
                pt2_kind=_pt2_kind(files[0]) if art.format == "pt2" else None,
                trusted=trusted, open_data=data_files if art.format == "pte" else None)


def make_plan(artifact: Artifact | str | os.PathLike[str], *,
              data: Sequence[str | os.PathLike[str]] | None = None,
              trusted: bool = False) -> Plan:
    """The :class:`~workbench.loadpaths.Plan` workers get: files, sizes, stored tensor ranges.

    A path is opened with :func:`workbench.open` (and closed again). A file workbench does not
    recognise is profiled as ``raw`` (whole-file paths only); a ``.pt2`` it cannot read yet
    keeps its format with no tensor table (the reason is in ``plan.unreadable``). A corrupt
    artifact raises its :class:`~workbench.ArtifactError`.

    Example:
        >>> plan = make_plan("sample_models/mlp_portable.pte")     # doctest: +SKIP
        >>> plan.format, len(plan.tensors), plan.tensor_bytes       # doctest: +SKIP
        ('pte', 4, 3232)
    """
    from ._open import open as wb_open
    from .artifact import Artifact
    from .errors import UnknownFormatError, UnsupportedVersionError
    from .loadpaths import Plan

    if isinstance(artifact, Artifact):
        if data is not None:
            raise TypeError("data= applies when profile() opens a path, not to an open Artifact")
        return _plan_from_artifact(artifact, trusted)
    path = os.path.abspath(os.fspath(artifact))
    try:
        art = wb_open(path, data=data)
    except UnknownFormatError as e:
        return Plan(format="raw", path=path, files=[path], sizes=[os.path.getsize(path)],
                    readable=False, unreadable=str(e), trusted=trusted)
    except UnsupportedVersionError as e:
        with open(path, "rb") as f:
            if f.read(4) != b"PK\x03\x04":
                raise
        return Plan(format="pt2", path=path, files=[path], sizes=[os.path.getsize(path)],
                    pt2_kind=_pt2_kind(path), readable=False, unreadable=str(e), trusted=trusted)
    try:
        return _plan_from_artifact(art, trusted)
    finally:
        art.close()


# ------------------------------------------------------------------------------------------
# Running workers
# ------------------------------------------------------------------------------------------

def _worker_env(tmp: str) -> dict[str, str]:
    """The parent's environment + its ``sys.path`` (so custom paths import) + a private TMPDIR."""
    env = dict(os.environ)
    here = [p for p in sys.path if p and os.path.isdir(p)]
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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

    from .loadpaths import BOOT

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

        from .loadpaths import SERVER_BOOT

        self.preload = preload
        self.pid_owner = os.getpid()
        self.home = tempfile.mkdtemp(prefix="workbench-forkserver-")
        self.log_path = os.path.join(self.home, "server.log")
        self._log = open(self.log_path, "wb")
        tmp = os.path.join(self.home, "tmp")
        os.mkdir(tmp)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER_BOOT, json.dumps(sorted(preload))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=_worker_env(tmp))
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


class _Runner:
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


def _identities(files: Iterable[str]) -> dict[str, tuple[int, int, int, int]]:
    """(size, mtime_ns, inode, device) of each file: what the plan was made from."""
    out = {}
    for f in files:
        st = os.stat(f)
        out[f] = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
    return out


def _ensure_unchanged(before: dict[str, tuple[int, int, int, int]]) -> None:
    """Raise :class:`~workbench.errors.StaleFileError` when a planned file changed on disk
    (workers would map a different file than the plan describes, and could fault)."""
    from .errors import StaleFileError

    for f, (size, mtime, ino, dev) in _identities(before).items():
        b = before[f]
        if (size, mtime, ino, dev) != b:
            what = [f"size {b[0]} -> {size}"] if size != b[0] else []
            what += [f"inode {b[2]} -> {ino}"] if (ino, dev) != (b[2], b[3]) else []
            what += ["mtime changed"] if mtime != b[1] else []
            raise StaleFileError(f"changed since it was planned: {', '.join(what)}; "
                                 "profile it again", file=f, structure="profile")


def _warm(files: Iterable[str]) -> None:
    """Read the files once through a small buffer (page cache warm, no memory kept)."""
    buf = bytearray(16 * MiB)
    mv = memoryview(buf)
    for f in dict.fromkeys(files):
        with open(f, "rb", buffering=0) as fh:
            while fh.readinto(mv):
                pass


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(total: int, enabled: bool, desc: str) -> Any:
    if not enabled:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc=desc, unit="run", leave=False)


def _select(paths: Iterable[str | LoadPath] | None, device: str) -> list[LoadPath]:
    from .loadpaths import PATHS, LoadPath

    if device not in ("cpu", "cuda", "all"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'all', not {device!r}")
    if paths is None:  # CPU paths first, each device in registry order
        return sorted((lp for lp in PATHS.values() if device in ("all", lp.device)),
                      key=lambda lp: lp.device == "cuda")
    if isinstance(paths, str):
        paths = [paths]
    out: list[LoadPath] = []
    for p in paths:
        if isinstance(p, LoadPath):
            out.append(p)
        elif p in PATHS:
            out.append(PATHS[p])
        else:
            raise ValueError(f"unknown load path {p!r}; known: {', '.join(PATHS)}")
    return out


def _skip_reason(lp: LoadPath, plan: Plan) -> str | None:
    if lp.device == "cuda":
        from .loadpaths.cuda import cuda_unavailable

        reason = cuda_unavailable()
        if reason:
            return reason
    return lp.applies(plan)


def profile(artifact: Artifact | str | os.PathLike[str],
            paths: Iterable[str | LoadPath] | None = None, cold: bool = False,
            repeat: int = 3, device: str = "cpu",
            data: Sequence[str | os.PathLike[str]] | None = None, progress: bool = True, *,
            trusted: bool = False, timeout: float = 600.0,
            isolation: str = "fork",
            etdump: str | os.PathLike[str] | Artifact | pd.DataFrame | None = None) -> Profile:
    """Profile the ways an artifact's bytes can be loaded; one new process per run.

    Each run is timed in two phases: the load (``load_s``) and the read (``read_s``: every
    weight byte read once — a checksum the parent checks against the file's; for the
    runtime's loaders, the first ``forward``). ``wall_s`` is their sum, ``gbps`` the weight
    bytes over it: the same work for every path.

    Args:
        artifact: an open :class:`~workbench.Artifact` or a path (opened, planned, closed).
        paths: load path names from :data:`workbench.loadpaths.PATHS` (or ``LoadPath``
            objects), run whatever their device; default: every registered path of
            ``device``. Paths that do not apply
            to the artifact (format, missing package, no GPU, untrusted) become ``skipped``
            rows with the reason.
        cold: evict the files from the page cache before each run (``posix_fadvise``) and
            report what ``mincore`` says stayed resident (``cold_achieved``; when eviction
            did not work, ``cold_note`` says why it may have failed). When False the files
            are read once first, so every run starts warm.
        repeat: runs per path (each in its own process); the summary takes medians,
            :meth:`Profile.spread` the spread.
        device: default path set: ``cpu`` | ``cuda`` | ``all``.
        data: ``.ptd`` files for a ``.pte`` path (as in :func:`workbench.open`).
        progress: show a ``tqdm`` progress bar (when tqdm is installed).
        trusted: allow paths that execute content from the file (``torch.export.load``
            unpickles; AOTInductor packages ``dlopen``). Never for files you did not make.
        timeout: seconds per run before the worker is killed (an ``error`` row).
        isolation: ``fork`` (default where ``os.fork`` exists): runs are children forked
            from a server process that imported numpy, torch, ExecuTorch... once (kept
            between calls, see :func:`close_workers`); ``spawn``: a new interpreter per
            run (slower: every run imports again; nothing is shared).
        etdump: an ETDump of this program (``.etdp`` path, opened trace, or the frame
            :func:`workbench.run` returns): its load-phase events (``Program::load_method``,
            ``Method::init``) are added as rows ``etdump:<event>``, the runtime's own account
            next to the workbench's timing of ``executorch_runtime`` (see
            :meth:`Profile.with_etdump`; nanosecond ticks assumed).

    Returns:
        A :class:`Profile`: ``frame`` (one row per path and run), ``summary``, ``rooflines``,
        ``spread()``, ``plot()``, ``table()``, ``to_csv()``.

    Example:
        >>> prof = profile("sample_models/mlp_external.pte", repeat=1, progress=False)  # doctest: +SKIP
        >>> prof.summary.set_index("path")["status"]["executorch_runtime"]           # doctest: +SKIP
        'ok'
        >>> prof = profile("sample_models/mlp_portable.pte", paths=["executorch_runtime"],
        ...                etdump="sample_models/mlp_portable.etdp")                    # doctest: +SKIP
        >>> prof.summary.set_index("path")["load_s"]                                 # doctest: +SKIP
    """
    import json
    import tempfile

    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    if isolation not in ("fork", "spawn"):
        raise ValueError(f"isolation must be 'fork' or 'spawn', not {isolation!r}")
    if isolation == "fork" and not hasattr(os, "fork"):
        isolation = "spawn"
    plan = make_plan(artifact, data=data, trusted=trusted)
    import gc

    gc.collect()  # the plan's artifact: its maps go now, not when the collector runs
    planned = _identities(plan.files)  # checked before every worker run
    selected = _select(paths, device)
    from .loadpaths import PATHS, reference_checksum

    for lp in selected:
        if PATHS.get(lp.name) is not lp:
            plan.custom[lp.name] = lp.spec()
    reasons = {lp.name: _skip_reason(lp, plan) for lp in selected}
    runnable = [lp for lp in selected if reasons[lp.name] is None]
    want_cuda = any(lp.device == "cuda" for lp in runnable)
    preload = frozenset(m for lp in runnable for m in lp.preload)
    references: dict[tuple[str, ...], str] = {}

    def reference(lp: LoadPath) -> str:
        from .loadpaths import RunContext

        files = tuple(RunContext(plan, lp).files)
        if files not in references:
            references[files] = f"{reference_checksum(plan, list(files)):016x}"
        return references[files]

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="workbench-profile-") as workdir:
        tmp = os.path.join(workdir, "tmp")
        os.mkdir(tmp)
        env = _worker_env(tmp)
        plan_file = os.path.join(workdir, "plan.json")
        with open(plan_file, "w") as f:
            f.write(plan.to_json())
        if not cold:
            _warm(plan.files)
        bar = _bar(1 + len(runnable) * repeat, progress, f"profile {os.path.basename(plan.path)}")
        try:
            bar.set_postfix_str("starting workers" if isolation == "fork" else "rooflines")
            runner = _Runner(isolation, preload, workdir, env, timeout)
            bar.set_postfix_str("rooflines")
            from .loadpaths import ROOFLINE

            rl = runner.run(plan_file, ROOFLINE + ("+cuda" if want_cuda else ""), False)
            bar.update()
            rooflines = rl.get("rooflines") or [
                {"name": n, "device": d, "gbps": None, "bytes": 0, "seconds": None,
                 "note": f"roofline worker failed: {rl.get('error')}"}
                for n, d in (("ram_read", "cpu"), ("memcpy", "cpu"), ("page_cache_read", "cpu"))]
            for lp in selected:
                if reasons[lp.name] is not None:
                    rows.append({"path": lp.name, "run": 0, "device": lp.device,
                                 "status": "skipped", "error": reasons[lp.name],
                                 "roofline": lp.roofline, "cold_requested": cold})
                    continue
                for run in range(repeat):
                    bar.set_postfix_str(f"{lp.name} {run + 1}/{repeat}")
                    _ensure_unchanged(planned)
                    res = runner.run(plan_file, lp.name, cold)
                    res.update(path=lp.name, run=run, device=lp.device, roofline=lp.roofline,
                               cold_requested=cold)
                    _check_read(res, reference, lp)
                    if cold and res.get("status") != "skipped" and not res.get("cold_achieved"):
                        res["cold_note"] = _cold_note(plan.files, res.get("resident_before"))
                    rows.append(res)
                    bar.update()
        finally:
            bar.close()
    info = {
        "artifact": plan.path, "format": plan.format, "files": dict(zip(plan.files, plan.sizes)),
        "bytes": plan.total_bytes, "tensor_bytes": plan.tensor_bytes,
        "tensors": len(plan.tensors), "cold": cold, "repeat": repeat, "device": device,
        "trusted": trusted, "cpus": os.cpu_count(), "python": sys.version.split()[0],
        "platform": sys.platform, "readable": plan.readable, "unreadable": plan.unreadable,
        "isolation": isolation if runner.fallback is None else "spawn",
        "isolation_note": runner.fallback,
        "checksums": {",".join(os.path.basename(f) for f in k): v for k, v in references.items()},
        "plan": json.loads(plan.to_json()) if len(plan.tensors) <= 10_000 else None,
    }
    prof = Profile(_frame(rows, rooflines), _rooflines_frame(rooflines), info)
    return prof if etdump is None else prof.with_etdump(etdump)


def _check_read(res: dict[str, Any], reference: Any, lp: LoadPath) -> None:
    """A checksum that differs from the file's turns the row into an error: the path did not
    read the bytes the plan names (or read them wrong)."""
    if res.get("status") != "ok" or not res.get("checksum_comparable"):
        return
    if res.get("consume") not in ("checksum", "device_checksum") or not res.get("checksum"):
        return
    want = reference(lp)
    if res["checksum"] != want:
        res["status"] = "error"
        res["error"] = (f"read: checksum {res['checksum']} of the {res.get('read_bytes')} bytes "
                        f"read differs from the file's {want}")


def _mounts() -> list[tuple[str, str]]:
    out = []
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3:
                    out.append((parts[1].replace("\\040", " "), parts[2]))
    except OSError:
        pass
    return out


def _fs_type(path: str, mounts: list[tuple[str, str]]) -> str | None:
    real = os.path.realpath(path)
    best = None
    for point, kind in mounts:
        if (real == point or real.startswith(point.rstrip("/") + "/")) and \
                (best is None or len(point) >= len(best[0])):
            best = (point, kind)
    return best[1] if best else None


def _mapped_here(files: Iterable[str]) -> list[str]:
    """The files this (the parent) process maps: their pages cannot be evicted."""
    want = {os.path.realpath(f) for f in files}
    found = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].strip() in want:
                    found.add(parts[5].strip())
    except OSError:
        pass
    return sorted(found)


#: File systems whose pages are the file itself, or that may not honour FADV_DONTNEED.
_STICKY_FS = {"tmpfs": "tmpfs keeps files in memory: its pages are the file and cannot be "
                       "dropped", "ramfs": "ramfs keeps files in memory",
              "overlay": "overlayfs may pass the advice to a lower layer that ignores it",
              "fuse": "a FUSE file system may ignore the advice",
              "9p": "a 9p (VM-shared) file system caches on the host",
              "virtiofs": "virtiofs caches on the host"}


def _cold_note(files: list[str], resident: float | None) -> str:
    """Why a run that asked for a cold page cache did not get one (the ``cold_note``)."""
    if resident is None:
        head = "not cold: mincore could not tell which pages were resident"
    else:
        head = (f"not cold: {resident:.1%} of the files' pages were still in the page cache "
                "after posix_fadvise(POSIX_FADV_DONTNEED)")
    why = []
    if not hasattr(os, "posix_fadvise"):
        why.append("posix_fadvise is not available on this platform")
    mapped = _mapped_here(files)
    if mapped:
        why.append("the profiling process itself maps " + ", ".join(os.path.basename(m) for m in mapped)
                   + " (an open Artifact or tensor views: close them first)")
    mounts = _mounts()
    for kind in sorted({k for k in (_fs_type(f, mounts) for f in files) if k}):
        base = kind.split(".")[0]
        if base in _STICKY_FS:
            why.append(_STICKY_FS[base])
    why.append("pages that another process maps or locks stay resident")
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        why.append("dropping the whole cache (echo 1 > /proc/sys/vm/drop_caches) needs root")
    return f"{head}; possible causes: {'; '.join(why)}"


# ------------------------------------------------------------------------------------------
# Frames
# ------------------------------------------------------------------------------------------

_ROW_KEYS = ("path", "run", "device", "status", "wall_s", "load_s", "read_s", "steady_s",
             "bytes", "bytes_copied", "read_bytes", "gbps", "load_gbps", "consume", "checksum",
             "peak_rss_growth", "rss_anon_growth", "rss_file_growth", "locked", "major_faults",
             "minor_faults", "cuda_peak_bytes", "resident_before", "cold_requested",
             "cold_achieved", "cold_note", "roofline", "roofline_gbps", "frac_roofline", "rc",
             "hwm_reset", "error", "note")


def _rate(nbytes: Any, seconds: Any) -> float | None:
    if _missing(nbytes) or _missing(seconds) or not seconds or not nbytes:
        return None
    return nbytes / seconds / 1e9


def _frame(rows: list[dict[str, Any]], rooflines: list[dict[str, Any]]) -> pd.DataFrame:
    from . import frames

    limits = {r["name"]: r.get("gbps") for r in rooflines}
    cols: dict[str, list] = {k: [] for k in _ROW_KEYS}
    for r in rows:
        r = dict(r)
        ok = r.get("status") == "ok"
        r["gbps"] = _rate(r.get("read_bytes"), r.get("wall_s")) if ok else None
        r["load_gbps"] = _rate(r.get("bytes"), r.get("load_s")) if ok else None
        lim = limits.get(r.get("roofline"))
        r["roofline_gbps"] = lim
        r["frac_roofline"] = r["gbps"] / lim if r["gbps"] is not None and lim else None
        r["cold_requested"] = bool(r.get("cold_requested"))
        if not r["cold_requested"]:
            r["cold_achieved"] = None
        r["consume"] = r.get("consume") or ("none" if ok else None)
        for k in ("note", "cold_note", "checksum"):
            r[k] = r.get(k) or None
        for k in _ROW_KEYS:
            cols[k].append(r.get(k))
    return frames.build("profile", cols)


#: ``path`` prefix of the rows :meth:`Profile.with_etdump` adds: the runtime's own account
#: (drawn in ``_OWN_COLOR`` by :meth:`Profile.plot`).
ETDUMP_PREFIX = "etdump:"
_OWN_COLOR = "dimgray"


def _trace_events(etdump: str | os.PathLike[str] | Artifact | pd.DataFrame
                  ) -> tuple[pd.DataFrame, str | None]:
    """The events frame of ``etdump`` and the trace's file name (None for a frame)."""
    import pandas as pd

    from ._open import open as wb_open
    from .errors import UnknownFormatError

    if isinstance(etdump, pd.DataFrame):
        lacking = [c for c in ("run", "block", "name", "kind", "start", "end", "duration")
                   if c not in etdump.columns]
        if lacking:
            raise ValueError(f"not an ETDump events or wb.timeline frame: no {', '.join(lacking)}")
        return etdump, None
    art = wb_open(etdump) if isinstance(etdump, (str, os.PathLike)) else etdump
    try:
        name = os.path.basename(art.path)
        if art.format != "etdump":
            raise UnknownFormatError(f"an ETDump (.etdp) is wanted, not {art.format}", file=name)
        return art.frames["events"], name
    finally:
        if art is not etdump:
            art.close()


def _etdump_rows(events: pd.DataFrame, source: str | None, tick_s: float,
                 first_run: dict[str, int]) -> list[dict[str, Any]]:
    """One ``profile`` row per framework event outside the ``Execute`` blocks (the load
    phase: ``Program::load_method``, ``Method::init``), its duration in seconds as
    ``load_s``; ``first_run``: path -> rows it already has."""
    from .errors import MissingDataError

    kind, block = events["kind"].astype(str), events["block"].astype(str)
    load = events[(kind == "framework") & (block != "Execute")]
    if not len(load):
        raise MissingDataError("no load-phase events (framework events outside the Execute "
                               "blocks: Program::load_method, Method::init); the runtime records "
                               "them only when ETDump is on while the method loads",
                               file=source, structure="ETDump.run_data")
    load = load.assign(_start=load["start"].astype("int64"), _end=-load["end"].astype("int64"))
    load = load.sort_values(["run", "_start", "_end"], kind="stable")  # outer events first
    spans = [(int(r.run), str(r.name), int(r.start), int(r.end))
             for r in load.itertuples(index=False)]
    where = f"ETDump {source}" if source else "the ETDump frame given"
    rows = []
    seen = dict(first_run)
    for r, (run, name, start, end) in zip(load.itertuples(index=False), spans):
        path = ETDUMP_PREFIX + name
        k = seen[path] = seen.get(path, -1) + 1
        inner = [n for (ru, n, s, e) in spans if ru == run and start <= s and e <= end
                 and (s, e) != (start, end)]
        ok = not _missing(r.duration)
        note = (f"measured by the runtime itself: {where}, {r.block} block (run {run}), "
                f"{int(r.duration) if ok else '?'} ticks x {tick_s:g} s")
        if inner:
            note += f"; contains {', '.join(dict.fromkeys(inner))} (nested: do not add them)"
        rows.append({"path": path, "run": k, "device": "cpu", "status": "ok" if ok else "error",
                     "load_s": int(r.duration) * tick_s if ok else None, "note": note,
                     "error": None if ok else "the event has no duration (end before start)"})
    return rows


def _rooflines_frame(rooflines: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame(rooflines, columns=["name", "device", "gbps", "bytes", "seconds", "note"])
    return df.astype({"gbps": "float64", "seconds": "float64"})


def _summary(frame: pd.DataFrame, rooflines: pd.DataFrame) -> pd.DataFrame:
    from . import frames

    memcpy = rooflines.set_index("name")["gbps"].get("memcpy")
    names = list(dict.fromkeys(frame["path"]))
    cols: dict[str, list] = {c.name: [] for c in frames.SCHEMAS["profile_summary"]}
    med_cols = ("wall_s", "load_s", "read_s", "steady_s", "bytes", "bytes_copied", "read_bytes",
                "gbps", "load_gbps", "peak_rss_growth", "rss_anon_growth", "rss_file_growth",
                "locked", "major_faults", "minor_faults", "cuda_peak_bytes", "resident_before")
    for name in names:
        rows = frame[frame["path"] == name]
        ok = rows[rows["status"] == "ok"]
        first = rows.iloc[0]
        failed = rows[rows["status"] != "ok"]
        cols["path"].append(name)
        cols["device"].append(first["device"])
        cols["status"].append("ok" if len(ok) else first["status"])
        cols["runs"].append(len(ok))
        cols["consume"].append(str(ok["consume"].iloc[0]) if len(ok) and
                               not _missing(ok["consume"].iloc[0]) else None)
        for c in med_cols:
            s = ok[c].dropna()
            v = s.median() if len(s) else None
            if v is not None and str(frame[c].dtype) == "Int64":
                v = round(float(v))
            cols[c].append(v)
        gbps = cols["gbps"][-1]
        lim = first["roofline_gbps"]
        cols["roofline"].append(first["roofline"])
        cols["roofline_gbps"].append(None if lim is None or lim != lim else float(lim))
        cols["frac_roofline"].append(gbps / lim if gbps is not None and lim and lim == lim
                                     else None)
        cols["frac_memcpy"].append(gbps / memcpy if gbps is not None and memcpy and memcpy == memcpy
                                   else None)
        ach = rows["cold_achieved"].dropna()
        cols["cold_achieved"].append(bool(ach.all()) if len(ach) else None)
        cn = rows["cold_note"].dropna()
        cols["cold_note"].append(str(cn.iloc[0]) if len(cn) else None)
        err = None
        if len(failed):
            e = failed.iloc[0]["error"]
            e = None if e is None or e != e else str(e)
            err = e if not len(ok) else f"{len(failed)} of {len(rows)} runs failed: {e}"
        cols["error"].append(err)
        notes = ok["note"].dropna()
        cols["note"].append(str(notes.iloc[0]) if len(notes) else None)
    return frames.build("profile_summary", cols)


# ------------------------------------------------------------------------------------------
# The result
# ------------------------------------------------------------------------------------------

class Profile:
    """The result of :func:`profile`.

    Attributes:
        frame: one row per (path, run) — schema ``"profile"`` in :mod:`workbench.frames`.
        rooflines: ``name, device, gbps, bytes, seconds, note`` — the limits measured in the
            same run (``memcpy``, ``page_cache_read``, ``h2d_pinned``).
        info: the artifact, its files and sizes, and how the profile was run.

    Example:
        >>> prof = wb.profile("sample_models/mlp_portable.pte", repeat=1)   # doctest: +SKIP
        >>> prof.summary.query("status == 'ok'")[["path", "gbps"]]          # doctest: +SKIP
    """

    def __init__(self, frame: pd.DataFrame, rooflines: pd.DataFrame, info: dict[str, Any]) -> None:
        self.frame = frame
        self.rooflines = rooflines
        self.info = info
        self._summary: pd.DataFrame | None = None

    @property
    def summary(self) -> pd.DataFrame:
        """Medians per path over its ok runs, with fractions of its roofline and of memcpy
        (schema ``"profile_summary"``)."""
        if self._summary is None:
            self._summary = _summary(self.frame, self.rooflines)
        return self._summary

    def roofline(self, name: str) -> float | None:
        """GB/s of roofline ``name`` (None when it was not measured)."""
        s = self.rooflines.set_index("name")["gbps"]
        v = s.get(name)
        return None if v is None or v != v else float(v)

    def spread(self, column: str = "wall_s") -> pd.DataFrame:
        """The spread of ``column`` over each path's ok runs: ``runs, min, median, max`` (and
        ``rel_spread`` = (max - min) / median), one row per path that has ok runs.

        Example:
            >>> prof.spread("wall_s")[["min", "median", "max"]]        # doctest: +SKIP
        """
        import pandas as pd

        f = self.frame
        ok = f[f["status"] == "ok"]
        rows = []
        for path in dict.fromkeys(ok["path"]):
            v = ok.loc[ok["path"] == path, column].astype("float64").dropna()
            if not len(v):
                continue
            med = float(v.median())
            rows.append({"path": path, "runs": len(v), "min": float(v.min()), "median": med,
                         "max": float(v.max()),
                         "rel_spread": (float(v.max()) - float(v.min())) / med if med else None})
        return pd.DataFrame(rows, columns=["path", "runs", "min", "median", "max", "rel_spread"]
                            ).set_index("path")

    def with_etdump(self, etdump: str | os.PathLike[str] | Artifact | pd.DataFrame, *,
                    tick_s: float = 1e-9) -> Profile:
        """This profile plus the runtime's own account of its load phase, from an ETDump.

        Every framework event of the trace outside its ``Execute`` blocks — the load:
        ``Program::load_method`` and, nested inside it, ``Method::init`` — becomes one row
        of :attr:`frame` with ``path`` ``"etdump:<event name>"`` (``etdump:Program::load_method``),
        its duration as ``load_s`` (``wall_s``, ``read_s`` and the byte and memory columns
        missing: the runtime timed its load only, nothing was read) and a ``note`` saying
        where it comes from. The summary, :meth:`spread` (of ``load_s``), :meth:`table` and
        :meth:`plot` then show the workbench's timing of ``executorch_runtime`` (its
        ``load_s``: ``load_program`` + ``load_method`` seen from Python, in a fresh process)
        next to the runtime's own. The trace is taken to be of this program (an ETDump does
        not name it): record it with :func:`workbench.run` (``etdump="x.etdp"``) or
        ``_load_for_executorch(..., enable_etdump=True)``.

        Args:
            etdump: the ``.etdp`` path, an opened ETDump, its ``events`` frame, or the frame
                :func:`workbench.run` / :func:`workbench.timeline` returns.
            tick_s: seconds per tick of the trace's timestamps. ETDump stores raw runtime
                ticks and no unit (``workbench.frames``: "raw runtime units, ns with the
                default clock"); ExecuTorch's default clock counts nanoseconds: 1e-9.

        Returns:
            A new :class:`Profile` (this one is unchanged).

        Raises:
            UnknownFormatError: ``etdump`` is a file of another format.
            MissingDataError: the trace holds no load-phase event.

        Example:
            >>> prof = wb.profile("sample_models/mlp_portable.pte",
            ...                   paths=["executorch_runtime"], repeat=1)      # doctest: +SKIP
            >>> both = prof.with_etdump("sample_models/mlp_portable.etdp")     # doctest: +SKIP
            >>> (both.summary.set_index("path")["load_s"] * 1e3).round(3)      # doctest: +SKIP
            executorch_runtime                 1.266
            etdump:Program::load_method        0.027
            etdump:Method::init                0.023
        """
        from . import frames

        if not (tick_s > 0 and tick_s != float("inf")):
            raise ValueError(f"tick_s must be a positive number of seconds, not {tick_s!r}")
        events, source = _trace_events(etdump)
        have = self.frame["path"].value_counts()
        added = _frame(_etdump_rows(events, source, tick_s,
                                    {str(p): int(n) - 1 for p, n in have.items()}), [])
        cols = {c.name: [None if _missing(v) else v for v in self.frame[c.name].tolist()]
                + [None if _missing(v) else v for v in added[c.name].tolist()]
                for c in frames.SCHEMAS["profile"]}
        info = dict(self.info, etdump=[*self.info.get("etdump", []), source or "<frame>"])
        return Profile(frames.build("profile", cols), self.rooflines, info)

    @property
    def cold_notes(self) -> list[str]:
        """The distinct ``cold_note`` texts: why runs that asked for a cold cache were warm.

        Example:
            >>> wb.profile(p, cold=True).cold_notes       # doctest: +SKIP
            []
        """
        return list(dict.fromkeys(self.frame["cold_note"].dropna().astype(str)))

    # -- output ------------------------------------------------------------------------------
    def to_csv(self, path: str | os.PathLike[str] | None = None, *, summary: bool = False
               ) -> str | None:
        """Write :attr:`frame` (or :attr:`summary`) as CSV; return the text when ``path`` is None.

        Example:
            >>> prof.to_csv("load_paths.csv")            # doctest: +SKIP
            >>> text = prof.to_csv(summary=True)         # doctest: +SKIP
        """
        df = self.summary if summary else self.frame
        return df.to_csv(path, index=False)

    def table(self) -> str:
        """The summary as a plain-text table for terminals (names escaped).

        ``load ms`` is the load alone, ``read ms`` the pass that reads every weight byte once
        (runtime paths: the first forward), ``total ms`` their sum with the min-max over runs.

        Example:
            >>> print(prof.table())        # doctest: +SKIP
        """
        from ._fmt import escape

        def mib(v: Any) -> str:
            return "" if _missing(v) else f"{v / MiB:,.1f}"

        def num(v: Any, fmt: str, scale: float = 1.0) -> str:
            return "" if _missing(v) else format(v * scale if scale != 1.0 else v, fmt)

        spread = self.spread("wall_s")
        head = ("path", "status", "runs", "load ms", "read ms", "total ms", "min-max ms", "GB/s",
                "x roof", "roofline", "peak MiB", "anon MiB", "file MiB", "lock MiB", "majflt",
                "minflt", "cuda MiB", "note / error")
        lines = [head]
        for r in self.summary.itertuples(index=False):
            extra = r.note if _missing(r.error) else r.error
            extra = "" if _missing(extra) else escape(extra)
            rng = (f"{spread.loc[r.path, 'min'] * 1e3:,.2f}-{spread.loc[r.path, 'max'] * 1e3:,.2f}"
                   if r.path in spread.index else "")
            lines.append((
                escape(r.path), str(r.status), str(r.runs), num(r.load_s, ",.2f", 1e3),
                num(r.read_s, ",.2f", 1e3), num(r.wall_s, ",.2f", 1e3), rng,
                num(r.gbps, ",.2f"), num(r.frac_roofline, ".2f"),
                "" if _missing(r.roofline) else str(r.roofline),
                mib(r.peak_rss_growth), mib(r.rss_anon_growth), mib(r.rss_file_growth),
                mib(r.locked), num(r.major_faults, ","), num(r.minor_faults, ","),
                mib(r.cuda_peak_bytes), extra[:90]))
        widths = [max(len(row[i]) for row in lines) for i in range(len(head) - 1)]
        right = {2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16}
        out = []
        for row in lines:
            cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in
                     enumerate(zip(row, widths))]
            out.append("  ".join(cells) + "  " + row[-1])
        lim = ", ".join(f"{n} {g:,.2f} GB/s" for n, g in zip(self.rooflines["name"],
                                                            self.rooflines["gbps"]) if g == g)
        info = self.info
        title = (f"{escape(os.path.basename(info['artifact']))} [{info['format']}] "
                 f"{info['bytes'] / MiB:,.1f} MiB in {len(info['files'])} file(s), "
                 f"{info['tensors']} stored tensor ranges; cold={info['cold']}, "
                 f"repeat={info['repeat']}")
        tail = [escape(n) for n in self.cold_notes[:1]]
        return "\n".join([title, f"rooflines: {lim or 'not measured'}", *out, *tail])

    def __repr__(self) -> str:
        return (f"<workbench.Profile {os.path.basename(self.info['artifact'])!r}: "
                f"{self.frame['path'].nunique()} paths, {len(self.frame)} rows>")

    def _repr_html_(self) -> str:
        import html

        info = self.info
        cols = ["path", "status", "runs", "consume", "load_s", "read_s", "wall_s", "gbps",
                "frac_roofline", "roofline", "peak_rss_growth", "rss_anon_growth",
                "rss_file_growth", "locked", "major_faults", "minor_faults", "cuda_peak_bytes",
                "cold_achieved", "error", "note"]
        s = self.summary[cols].copy()
        for c in ("peak_rss_growth", "rss_anon_growth", "rss_file_growth", "locked",
                  "cuda_peak_bytes"):
            s[c] = (s[c].astype("Float64") / MiB).round(1)
        s = s.rename(columns={c: c.replace("growth", "growth_mib") for c in s.columns
                              if c.endswith("growth")}
                     | {"locked": "locked_mib", "cuda_peak_bytes": "cuda_peak_mib"})
        rl = ", ".join(f"<b>{html.escape(n)}</b> {g:,.2f} GB/s"
                       for n, g in zip(self.rooflines["name"], self.rooflines["gbps"]) if g == g)
        cold = "".join(f"<p><b>{html.escape(n)}</b></p>" for n in self.cold_notes[:1])
        return (f"<div><b>workbench.Profile</b> · <code>{html.escape(info['artifact'])}</code> "
                f"[{html.escape(info['format'])}] · {info['bytes'] / MiB:,.1f} MiB · "
                f"cold={info['cold']} · repeat={info['repeat']}"
                f"<p>rooflines: {rl or 'not measured'}</p>{cold}"
                f"{s.to_html(index=False, na_rep='', float_format=lambda v: f'{v:,.3g}')}</div>")

    def plot(self) -> Figure:
        """Time until every weight byte was read once, per path; memory held below.

        Each bar stacks the load (solid: orange for copying paths, blue for zero-copy ones,
        dark gray for the runtime's own account from an ETDump, see :meth:`with_etdump`) and
        the read (light: the checksum of every weight byte, or the first forward for the
        runtime's loaders); the error bar spans the fastest to the slowest run (min-max of
        ``wall_s``); a black tick marks the floor, the path's weight bytes at the ``ram_read``
        roofline; each bar is labelled with its GB/s. The second panel stacks what is held at
        the end (anonymous, file-backed) and marks the peak growth. Skipped and failed paths
        are labelled at zero. Returns a ``matplotlib.figure.Figure`` (no pyplot state).

        Example:
            >>> fig = prof.plot(); fig.savefig("load_paths.png", dpi=120)   # doctest: +SKIP
        """
        import numpy as np
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch

        s = self.summary
        names = s["path"].tolist()
        x = np.arange(len(names))
        fig = Figure(figsize=(max(7.0, 0.6 * len(names) + 3), 7.5), layout="constrained")
        ax, ax2 = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
        ok = (s["status"] == "ok").to_numpy()
        load = s["load_s"].astype("float64").fillna(0).to_numpy() * 1e3
        read = s["read_s"].astype("float64").fillna(0).to_numpy() * 1e3
        copying = (s["bytes_copied"].astype("Float64").fillna(0) > 0).to_numpy(dtype=bool)
        color = np.where(copying, "tab:orange", "tab:blue")
        color = np.where(s["device"].astype(str).to_numpy() == "cuda", "tab:green", color)
        own = s["path"].astype(str).str.startswith(ETDUMP_PREFIX).to_numpy(dtype=bool)
        color = np.where(own, _OWN_COLOR, color)
        color = np.where(ok, color, "lightgray")
        ax.bar(x, load, color=color, edgecolor="white")
        ax.bar(x, read, bottom=load, color=color, alpha=0.35, edgecolor="white", hatch="..")
        spread = self.spread("wall_s")
        lo = np.array([spread.loc[n, "min"] * 1e3 if n in spread.index else np.nan for n in names])
        hi = np.array([spread.loc[n, "max"] * 1e3 if n in spread.index else np.nan for n in names])
        total = load + read
        has = ok & ~np.isnan(lo)
        if has.any():
            ax.errorbar(x[has], total[has], yerr=[np.clip(total[has] - lo[has], 0, None),
                                                  np.clip(hi[has] - total[has], 0, None)],
                        fmt="none", ecolor="black", capsize=3, lw=1)
        ram = self.roofline("ram_read")
        floor = s["read_bytes"].astype("float64").to_numpy() / (ram * 1e9) * 1e3 if ram else None
        if floor is not None and np.isfinite(floor[ok]).any():
            ax.scatter(x[ok], floor[ok], marker="_", s=400, color="black", zorder=3,
                       label=f"floor: weight bytes at ram_read {ram:,.2f} GB/s")
        for i, (st, g) in enumerate(zip(s["status"], s["gbps"])):
            if st != "ok":
                ax.text(i, 0, f" {st}", rotation=90, va="bottom", ha="center", fontsize=8,
                        color="dimgray")
            elif not _missing(g):
                ax.text(i, (hi[i] if np.isfinite(hi[i]) else total[i]), f"{g:,.2f}\nGB/s",
                        va="bottom", ha="center", fontsize=7)
        handles = [Patch(facecolor="tab:orange", label="load: copying"),
                   Patch(facecolor="tab:blue", label="load: zero-copy (pages mapped)"),
                   Patch(facecolor="gray", alpha=0.35, hatch="..",
                         label="read: every weight byte once / first forward")]
        if (s["device"].astype(str) == "cuda").any():
            handles.insert(2, Patch(facecolor="tab:green", label="load: to the GPU"))
        if own.any():
            handles.insert(2, Patch(facecolor=_OWN_COLOR,
                                    label="load: the runtime's own account (ETDump)"))
        ax.add_artist(ax.legend(handles=handles, fontsize=8, loc="upper right"))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper left")
        pos = total[ok & (total > 0)]
        if len(pos) and pos.max() / max(pos.min(), 1e-9) > 50:
            ax.set_yscale("log")
        elif len(pos):
            top = np.nanmax(np.where(np.isfinite(hi), np.maximum(hi, total), total)[ok])
            ax.set_ylim(0, top * 1.3)
        ax.set_ylabel("ms until every weight byte was read\n(median; bars: min-max of runs)")
        info = self.info
        cold = f"cold={info['cold']}"
        if info["cold"]:
            ach = s["cold_achieved"].dropna()
            cold += " (achieved)" if len(ach) and bool(ach.all()) else " (NOT achieved: see cold_note)"
        ax.set_title(f"{os.path.basename(info['artifact'])} [{info['format']}] · "
                     f"{info['bytes'] / MiB:,.1f} MiB · {cold} · {info['repeat']} run(s) each",
                     fontsize=10)
        anon = s["rss_anon_growth"].astype("float64").fillna(0).clip(lower=0).to_numpy() / MiB
        file = s["rss_file_growth"].astype("float64").fillna(0).clip(lower=0).to_numpy() / MiB
        peak = s["peak_rss_growth"].astype("float64").to_numpy() / MiB
        ax2.bar(x, anon, color="tab:red", label="anonymous (private) held")
        ax2.bar(x, file, bottom=anon, color="tab:purple", label="file-backed held")
        ax2.scatter(x, peak, marker="_", s=300, color="black", zorder=3, label="peak growth")
        locked = s["locked"].astype("float64").fillna(0).to_numpy() / MiB
        if (locked > 1).any():
            ax2.scatter(x[locked > 1], locked[locked > 1], marker="x", color="black", zorder=3,
                        label="locked (mlock)")
        ax2.set_ylabel("RSS growth (MiB)")
        ax2.legend(fontsize=8, loc="upper left")
        ax2.set_xticks(x, names, rotation=45, ha="right", fontsize=8)
        return fig
