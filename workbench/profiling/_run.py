"""One :func:`profile` call from start to end: pick the load paths, make the plan, measure
the rooflines, run every applicable path ``repeat`` times (each run in its own process, the
files checked unchanged before each), check what each run read against the file's checksum,
and hand the rows to :class:`~workbench.profiling.Profile`.

This module owns :func:`profile`; the processes are :mod:`._workers`', the tables
:mod:`._tables`', the result :mod:`._result`'s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ._files import cold_note, ensure_unchanged, identities, warm
from ._plan import make_plan
from ._result import Profile
from ._tables import _frame, _rooflines_frame
from ._workers import Runner, worker_env

if TYPE_CHECKING:
    import pandas as pd

    from ..artifact import Artifact
    from ..loadpaths import LoadPath, Plan

__all__ = ["profile"]


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
    from ..loadpaths import PATHS, LoadPath

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
        from ..loadpaths.cuda import cuda_unavailable

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
    planned = identities(plan.files)  # checked before every worker run
    selected = _select(paths, device)
    from ..loadpaths import PATHS, reference_checksum

    for lp in selected:
        if PATHS.get(lp.name) is not lp:
            plan.custom[lp.name] = lp.spec()
    reasons = {lp.name: _skip_reason(lp, plan) for lp in selected}
    runnable = [lp for lp in selected if reasons[lp.name] is None]
    want_cuda = any(lp.device == "cuda" for lp in runnable)
    preload = frozenset(m for lp in runnable for m in lp.preload)
    references: dict[tuple[str, ...], str] = {}

    def reference(lp: LoadPath) -> str:
        from ..loadpaths import RunContext

        files = tuple(RunContext(plan, lp).files)
        if files not in references:
            references[files] = f"{reference_checksum(plan, list(files)):016x}"
        return references[files]

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="workbench-profile-") as workdir:
        tmp = os.path.join(workdir, "tmp")
        os.mkdir(tmp)
        env = worker_env(tmp)
        plan_file = os.path.join(workdir, "plan.json")
        with open(plan_file, "w") as f:
            f.write(plan.to_json())
        if not cold:
            warm(plan.files)
        bar = _bar(1 + len(runnable) * repeat, progress, f"profile {os.path.basename(plan.path)}")
        try:
            bar.set_postfix_str("starting workers" if isolation == "fork" else "rooflines")
            runner = Runner(isolation, preload, workdir, env, timeout)
            bar.set_postfix_str("rooflines")
            from ..loadpaths import ROOFLINE

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
                    ensure_unchanged(planned)
                    res = runner.run(plan_file, lp.name, cold)
                    res.update(path=lp.name, run=run, device=lp.device, roofline=lp.roofline,
                               cold_requested=cold)
                    _check_read(res, reference, lp)
                    if cold and res.get("status") != "skipped" and not res.get("cold_achieved"):
                        res["cold_note"] = cold_note(plan.files, res.get("resident_before"))
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
