"""Load-path profiler: how an artifact's weights get from the file into CPU and CUDA memory,
measured against the limits of this machine.

:func:`profile` runs every applicable load path of :mod:`workbench.loadpaths` — plain
``read``, ``readinto``, ``mmap`` variants, per-tensor copies and views, the ExecuTorch
runtime's loaders, ``torch.export.load``, host-to-device copies — each run in a **fresh
subprocess** (so peak memory and page faults belong to that run alone; a native crash is a
row, not a crash of the caller), and the rooflines in the same run: a large ``memcpy``, the
page-cache read bandwidth and, for CUDA, a large pinned host-to-device copy.

Example:
    >>> import workbench as wb
    >>> prof = wb.profile("sample_models/mlp_portable.pte", repeat=1)   # doctest: +SKIP
    >>> prof.summary[["path", "gbps", "frac_roofline", "rss_anon_growth"]]   # doctest: +SKIP
    >>> print(prof.table())                                              # doctest: +SKIP
    >>> prof.plot()                                                      # doctest: +SKIP
    >>> prof.to_csv("profile.csv")                                       # doctest: +SKIP

Reading the numbers:

* ``bytes`` is what the path makes available (every file for whole-file paths, the unique
  stored tensor ranges for per-tensor paths); ``gbps = bytes / wall_s``.
* ``peak_rss_growth`` is the high-water mark during the load over the RSS before it (the
  mark is reset first); ``rss_anon_growth`` / ``rss_file_growth`` split what is *held* at
  the end into private anonymous memory (copies) and file-backed pages (maps).
* Zero-copy paths copy nothing: they can beat ``memcpy``; their ``rss_file_growth`` shows
  that the pages really were brought in. Copying paths cannot beat it.
* ``cold=True`` evicts the files from the page cache before each run and checks with
  ``mincore`` what stayed resident: ``cold_achieved`` says whether it worked (pages mapped
  by another process, or a hypervisor cache, can keep them warm).

Importing this module is cheap (pandas, tqdm, matplotlib and torch load inside calls).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from .artifact import Artifact
    from .loadpaths import LoadPath, Plan

__all__ = ["Profile", "profile", "make_plan"]

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


def _run_worker(plan_file: str, name: str, cold: bool, workdir: str, env: dict[str, str],
                timeout: float) -> dict[str, Any]:
    """Run one worker process; always returns a result dict (crashes become errors)."""
    import json
    import signal
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
    rc = proc.returncode
    if os.path.exists(result_file):
        with open(result_file) as f:
            res = json.load(f)
        os.unlink(result_file)
        res["rc"] = rc
        return res
    tail = _tail(proc.stderr)
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        error = f"worker killed by {sig} (rc {rc})"
    else:
        error = f"worker exited with code {rc} and no result"
    return {"status": "error", "error": f"{error}: {tail}" if tail else error, "rc": rc}


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
            trusted: bool = False, timeout: float = 600.0) -> Profile:
    """Profile the ways an artifact's bytes can be loaded; one fresh process per run.

    Args:
        artifact: an open :class:`~workbench.Artifact` or a path (opened, planned, closed).
        paths: load path names from :data:`workbench.loadpaths.PATHS` (or ``LoadPath``
            objects), run whatever their device; default: every registered path of
            ``device``. Paths that do not apply
            to the artifact (format, missing package, no GPU, untrusted) become ``skipped``
            rows with the reason.
        cold: evict the files from the page cache before each run (``posix_fadvise``) and
            report what ``mincore`` says stayed resident (``cold_achieved``). When False the
            files are read once first, so every run starts warm.
        repeat: runs per path (each in its own process); the summary takes medians.
        device: default path set: ``cpu`` | ``cuda`` | ``all``.
        data: ``.ptd`` files for a ``.pte`` path (as in :func:`workbench.open`).
        progress: show a ``tqdm`` progress bar (when tqdm is installed).
        trusted: allow paths that execute content from the file (``torch.export.load``
            unpickles; AOTInductor packages ``dlopen``). Never for files you did not make.
        timeout: seconds per run before the worker is killed (an ``error`` row).

    Returns:
        A :class:`Profile`: ``frame`` (one row per path and run), ``summary``, ``rooflines``,
        ``plot()``, ``table()``, ``to_csv()``.

    Example:
        >>> prof = profile("sample_models/mlp_external.pte", repeat=1, progress=False)  # doctest: +SKIP
        >>> prof.summary.set_index("path")["status"]["executorch_runtime"]           # doctest: +SKIP
        'ok'
    """
    import json
    import tempfile

    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    plan = make_plan(artifact, data=data, trusted=trusted)
    planned = _identities(plan.files)  # checked before every worker run
    selected = _select(paths, device)
    from .loadpaths import PATHS

    for lp in selected:
        if PATHS.get(lp.name) is not lp:
            plan.custom[lp.name] = lp.spec()
    reasons = {lp.name: _skip_reason(lp, plan) for lp in selected}
    runnable = [lp for lp in selected if reasons[lp.name] is None]
    want_cuda = any(lp.device == "cuda" for lp in runnable)
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
            bar.set_postfix_str("rooflines")
            from .loadpaths import ROOFLINE

            rl = _run_worker(plan_file, ROOFLINE + ("+cuda" if want_cuda else ""), False,
                             workdir, env, timeout)
            bar.update()
            rooflines = rl.get("rooflines") or [
                {"name": n, "device": d, "gbps": None, "bytes": 0, "seconds": None,
                 "note": f"roofline worker failed: {rl.get('error')}"}
                for n, d in (("memcpy", "cpu"), ("page_cache_read", "cpu"))]
            for lp in selected:
                if reasons[lp.name] is not None:
                    rows.append({"path": lp.name, "run": 0, "device": lp.device,
                                 "status": "skipped", "error": reasons[lp.name],
                                 "roofline": lp.roofline, "cold_requested": cold})
                    continue
                for run in range(repeat):
                    bar.set_postfix_str(f"{lp.name} {run + 1}/{repeat}")
                    _ensure_unchanged(planned)
                    res = _run_worker(plan_file, lp.name, cold, workdir, env, timeout)
                    res.update(path=lp.name, run=run, device=lp.device, roofline=lp.roofline,
                               cold_requested=cold)
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
        "plan": json.loads(plan.to_json()) if len(plan.tensors) <= 10_000 else None,
    }
    return Profile(_frame(rows, rooflines), _rooflines_frame(rooflines), info)


# ------------------------------------------------------------------------------------------
# Frames
# ------------------------------------------------------------------------------------------

_ROW_KEYS = ("path", "run", "device", "status", "wall_s", "bytes", "bytes_copied", "gbps",
             "peak_rss_growth", "rss_anon_growth", "rss_file_growth", "locked", "major_faults",
             "minor_faults", "cuda_peak_bytes", "resident_before", "cold_requested",
             "cold_achieved", "roofline", "roofline_gbps", "frac_roofline", "rc", "hwm_reset",
             "error", "note")


def _frame(rows: list[dict[str, Any]], rooflines: list[dict[str, Any]]) -> pd.DataFrame:
    from . import frames

    limits = {r["name"]: r.get("gbps") for r in rooflines}
    cols: dict[str, list] = {k: [] for k in _ROW_KEYS}
    for r in rows:
        r = dict(r)
        ok = r.get("status") == "ok"
        wall, nbytes = r.get("wall_s"), r.get("bytes")
        r["gbps"] = nbytes / wall / 1e9 if ok and wall and nbytes is not None else None
        lim = limits.get(r.get("roofline"))
        r["roofline_gbps"] = lim
        r["frac_roofline"] = r["gbps"] / lim if r["gbps"] is not None and lim else None
        r["cold_requested"] = bool(r.get("cold_requested"))
        if not r["cold_requested"]:
            r["cold_achieved"] = None
        r["note"] = r.get("note") or None
        for k in _ROW_KEYS:
            cols[k].append(r.get(k))
    return frames.build("profile", cols)


def _rooflines_frame(rooflines: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame(rooflines, columns=["name", "device", "gbps", "bytes", "seconds", "note"])
    return df.astype({"gbps": "float64", "seconds": "float64"})


def _summary(frame: pd.DataFrame, rooflines: pd.DataFrame) -> pd.DataFrame:
    from . import frames

    memcpy = rooflines.set_index("name")["gbps"].get("memcpy")
    names = list(dict.fromkeys(frame["path"]))
    cols: dict[str, list] = {c.name: [] for c in frames.SCHEMAS["profile_summary"]}
    med_cols = ("wall_s", "bytes", "bytes_copied", "gbps", "peak_rss_growth", "rss_anon_growth",
                "rss_file_growth", "locked", "major_faults", "minor_faults", "cuda_peak_bytes",
                "resident_before")
    for name in names:
        rows = frame[frame["path"] == name]
        ok = rows[rows["status"] == "ok"]
        first = rows.iloc[0]
        failed = rows[rows["status"] != "ok"]
        cols["path"].append(name)
        cols["device"].append(first["device"])
        cols["status"].append("ok" if len(ok) else first["status"])
        cols["runs"].append(len(ok))
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

def _missing(v: Any) -> bool:
    """None, NaN or pandas.NA."""
    if v is None:
        return True
    try:
        return bool(v != v)
    except TypeError:  # pandas.NA
        return True


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

        Example:
            >>> print(prof.table())        # doctest: +SKIP
        """
        from ._fmt import escape

        def mib(v: Any) -> str:
            return "" if _missing(v) else f"{v / MiB:,.1f}"

        def num(v: Any, fmt: str, scale: float = 1.0) -> str:
            return "" if _missing(v) else format(v * scale if scale != 1.0 else v, fmt)

        head = ("path", "status", "runs", "wall ms", "GB/s", "x roof", "roofline", "peak MiB",
                "anon MiB", "file MiB", "lock MiB", "majflt", "minflt", "cuda MiB",
                "note / error")
        lines = [head]
        for r in self.summary.itertuples(index=False):
            extra = r.note if _missing(r.error) else r.error
            extra = "" if _missing(extra) else escape(extra)
            lines.append((
                escape(r.path), str(r.status), str(r.runs), num(r.wall_s, ",.2f", 1e3),
                num(r.gbps, ",.2f"), num(r.frac_roofline, ".2f"), str(r.roofline),
                mib(r.peak_rss_growth), mib(r.rss_anon_growth), mib(r.rss_file_growth),
                mib(r.locked), num(r.major_faults, ","), num(r.minor_faults, ","),
                mib(r.cuda_peak_bytes), extra[:90]))
        widths = [max(len(row[i]) for row in lines) for i in range(len(head) - 1)]
        right = {2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13}
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
        return "\n".join([title, f"rooflines: {lim or 'not measured'}", *out])

    def __repr__(self) -> str:
        return (f"<workbench.Profile {os.path.basename(self.info['artifact'])!r}: "
                f"{self.frame['path'].nunique()} paths, {len(self.frame)} rows>")

    def _repr_html_(self) -> str:
        import html

        info = self.info
        cols = ["path", "status", "runs", "wall_s", "gbps", "frac_roofline", "roofline",
                "peak_rss_growth", "rss_anon_growth", "rss_file_growth", "locked", "major_faults",
                "minor_faults", "cuda_peak_bytes", "cold_achieved", "error", "note"]
        s = self.summary[cols].copy()
        for c in ("peak_rss_growth", "rss_anon_growth", "rss_file_growth", "locked",
                  "cuda_peak_bytes"):
            s[c] = (s[c].astype("Float64") / MiB).round(1)
        s = s.rename(columns={c: c.replace("growth", "growth_mib") for c in s.columns
                              if c.endswith("growth")}
                     | {"locked": "locked_mib", "cuda_peak_bytes": "cuda_peak_mib"})
        rl = ", ".join(f"<b>{html.escape(n)}</b> {g:,.2f} GB/s"
                       for n, g in zip(self.rooflines["name"], self.rooflines["gbps"]) if g == g)
        return (f"<div><b>workbench.Profile</b> · <code>{html.escape(info['artifact'])}</code> "
                f"[{html.escape(info['format'])}] · {info['bytes'] / MiB:,.1f} MiB · "
                f"cold={info['cold']} · repeat={info['repeat']}"
                f"<p>rooflines: {rl or 'not measured'}</p>"
                f"{s.to_html(index=False, na_rep='', float_format=lambda v: f'{v:,.3g}')}</div>")

    def plot(self) -> Figure:
        """Bars of GB/s per path with the rooflines as lines; peak RSS growth below.

        The second panel stacks what is held at the end (anonymous, file-backed) and marks
        the peak growth. Skipped and failed paths are labelled at zero. Returns a
        ``matplotlib.figure.Figure`` (no pyplot state; it displays in notebooks).

        Example:
            >>> fig = prof.plot(); fig.savefig("load_paths.png", dpi=120)   # doctest: +SKIP
        """
        import numpy as np
        from matplotlib.figure import Figure

        s = self.summary
        names = s["path"].tolist()
        x = np.arange(len(names))
        fig = Figure(figsize=(max(7.0, 0.55 * len(names) + 3), 7.5), layout="constrained")
        ax, ax2 = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
        gbps = s["gbps"].astype("float64").fillna(0).to_numpy()
        colors = {"page_cache_read": "tab:blue", "memcpy": "tab:orange", "h2d_pinned": "tab:green"}
        bar_colors = [colors.get(str(r), "tab:gray") if st == "ok" else "lightgray"
                      for r, st in zip(s["roofline"], s["status"])]
        zero_copy = (s["bytes_copied"].astype("Float64").fillna(-1) == 0).to_numpy(dtype=bool)
        ax.bar(x, gbps, color=bar_colors, hatch=["//" if z else "" for z in zero_copy],
               edgecolor="white")
        if zero_copy.any():
            from matplotlib.patches import Patch

            ax.add_artist(ax.legend(handles=[Patch(facecolor="tab:orange", hatch="//",
                                                   edgecolor="white",
                                                   label="zero-copy: pages mapped, none copied")],
                                    fontsize=8, loc="upper right"))
        for i, st in enumerate(s["status"]):
            if st != "ok":
                ax.text(i, 0, f" {st}", rotation=90, va="bottom", ha="center", fontsize=8,
                        color="dimgray")
        for name, g in zip(self.rooflines["name"], self.rooflines["gbps"]):
            if g == g and g:
                ax.axhline(g, color=colors.get(name, "black"), ls="--", lw=1.2,
                           label=f"{name} roofline {g:,.2f} GB/s")
        pos = gbps[gbps > 0]
        if len(pos) and pos.max() / max(pos.min(), 1e-9) > 50:
            ax.set_yscale("log")
        ax.set_ylabel("GB/s (median)")
        info = self.info
        ax.set_title(f"{os.path.basename(info['artifact'])} [{info['format']}] · "
                     f"{info['bytes'] / MiB:,.1f} MiB · cold={info['cold']}", fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper left")
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
