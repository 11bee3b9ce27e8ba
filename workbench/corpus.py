"""``workbench.corpus`` (``wb.scan``): every artifact under some folders, as one set of frames.

Each file found is opened by itself with :func:`workbench.open` (format by magic, sibling
``.ptd`` files attached as usual) and contributes:

* one row to ``artifacts`` (format, size, counts, bytes by segment kind, padding %, external
  and missing tensors, ...; see ``workbench.frames.SCHEMAS["artifacts"]``),
* its rows of the format frames asked for (``segments`` and ``tensors`` by default; any frame
  name in ``workbench.frames.SCHEMAS``), after a first column ``artifact``: the scanned file,
* or, when it cannot be read, one row to ``errors`` (the exception class, its message,
  structure and offset). A bad file never stops a scan.

A ``.ptd`` is an artifact of its own (it gets its own rows), and it is *also* attached to the
``.pte`` programs next to it: their ``segments``/``tensors`` rows name it in ``file`` while
``artifact`` stays the program. Select ``segments[segments.file == segments.artifact]`` to
count every byte once.

Which files: folders are walked recursively; glob patterns (``models/**/*.pte``) are expanded.
A file is scanned when its first bytes match a known format (never by extension alone), or
when it is named explicitly, or when its name ends in ``.pte/.ptd/.bpte/.pt2`` (so that an
empty or truncated artifact is reported in ``errors`` rather than skipped). Everything else
is skipped and listed in ``result.skipped``.

Backends (the same work, the same frames, dtypes and row order — sorted by path):

* ``jobs=1``: in this process;
* default: a ``concurrent.futures`` process pool of ``jobs`` workers (CPU count by default)
  over chunks of files. Workers start with ``forkserver`` (never ``fork``: the caller may
  hold threads), so a *script* that scans needs the usual ``if __name__ == "__main__":``
  guard; notebooks and the ``workbench scan`` command need nothing;
* ``scheduler=``: a ``dask.distributed.Client``, a cluster (anything with
  ``scheduler_address``) or a scheduler address such as ``"tcp://10.0.0.5:8786"``; chunks
  become Dask tasks. Workers need ``workbench`` installed and the files at the same paths
  (paths are made absolute before they are sent). ``as_dask=True`` leaves the frames on the
  cluster as Dask DataFrames (one partition per chunk) instead of gathering them.

Workers return plain columns (lists); frames are built once, from the schemas in
:mod:`workbench.frames`, so every backend gives identical frames.

Note: ``workbench.scan`` is the *function* (``import workbench as wb; wb.scan(...)``); its module is
``workbench.corpus`` (``from workbench.corpus import discover, write``).

Example:
    >>> import workbench as wb
    >>> res = wb.scan("sample_models/")                        # doctest: +SKIP
    >>> res["artifacts"][["artifact", "format", "size", "padding_pct"]]   # doctest: +SKIP
    >>> res["tensors"].groupby("dtype", observed=True)["nbytes"].sum()  # doctest: +SKIP
    >>> res["errors"]                                           # doctest: +SKIP
"""

from __future__ import annotations

import glob
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .errors import ArtifactError, mask_url
from .frames import SCHEMAS

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Scan", "discover", "scan", "write"]

#: Names that mark a file as meant to be an artifact even when its magic does not match.
ARTIFACT_SUFFIXES = (".pte", ".ptd", ".bpte", ".pt2")
#: Format frames collected by default.
DEFAULT_FRAMES = ("segments", "tensors")
_GLOB_CHARS = frozenset("*?[")
#: Not-required columns of these dtypes become nullable in scan frames (not every format has them).
_NULLABLE = {"int64": "Int64", "bool": "boolean"}

Columns = dict[str, list]


class Scan(dict):
    """What :func:`scan` returns: ``dict`` frame name -> DataFrame, plus facts about the run.

    Keys: ``"artifacts"``, the format frames asked for (``"segments"``, ``"tensors"``, ...)
    and ``"errors"``, in that order.

    Attributes:
        files: files considered (after walking folders and expanding globs).
        skipped: files skipped because they are not artifacts (by magic and name).
        seconds: wall time of the scan.
        backend: ``"in-process"``, ``"process pool of N workers"`` or ``"dask at ADDRESS"``.
    """

    files: int = 0
    skipped: list[str]
    seconds: float = 0.0
    backend: str = ""

    def __repr__(self) -> str:
        rows = ", ".join(f"{k}: {len(v)} rows" for k, v in self.items())
        return f"<workbench.Scan {self.files} files in {self.seconds:.2f} s ({self.backend}); {rows}>"


# -- discovery ---------------------------------------------------------------------------------

def discover(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
             absolute: bool = True,
             storage_options: dict[str, Any] | None = None) -> list[tuple[str, bool]]:
    """The files to scan, sorted, as ``(path, named explicitly)``.

    Folders are walked recursively (symlinked folders are not followed); strings with
    ``*``, ``?`` or ``[`` that are not existing paths are glob patterns (``**`` recurses).
    A path that does not exist is returned as explicit, so that the scan reports it.
    Paths are absolute unless ``absolute=False`` (then as joined from what was given).
    URLs (``s3://bucket/prefix/``, any fsspec URL): one ending in ``/`` or holding a glob
    character is listed recursively through fsspec (``storage_options``), any other is a file.

    Example:
        >>> [os.path.basename(p) for p, _ in discover("sample_models")][:2]   # doctest: +SKIP
        ['README.md', 'kv_cache.pte']
    """
    from .remote import is_url, list_files, local_path

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: dict[str, bool] = {}
    norm = os.path.abspath if absolute else os.path.normpath

    def walk(folder: str) -> None:
        for root, dirs, names in os.walk(folder):
            dirs.sort()
            for n in names:
                p = os.path.join(root, n)
                if os.path.isfile(p):
                    found.setdefault(norm(p), False)

    for raw in paths:
        p = os.fspath(raw)
        if is_url(p):
            if p.endswith("/") or _GLOB_CHARS & set(p):
                for u in list_files(p, storage_options):
                    found.setdefault(u, False)
            else:
                found[p] = True
            continue
        p = local_path(p)
        if os.path.isdir(p):
            walk(p)
        elif os.path.exists(p):
            found[norm(p)] = True
        elif _GLOB_CHARS & set(p):
            for m in sorted(glob.glob(p, recursive=True)):
                if os.path.isdir(m):
                    walk(m)
                elif os.path.isfile(m):
                    found.setdefault(norm(m), False)
        else:
            found[norm(p)] = True
    return sorted(found.items())


# -- the work of one chunk (runs in workers: plain columns only, no pandas) ---------------------

def _empty(name: str) -> Columns:
    return {"artifact": [], **{c.name: [] for c in SCHEMAS[name]}}


def _append(dest: Columns, path: str, cols: dict[str, Any]) -> None:
    """Append one file's rows of a frame to ``dest``, filling columns it lacks with None."""
    n = len(next(iter(cols.values()))) if cols else 0
    if not n:
        return
    dest["artifact"].extend([path] * n)
    for name, values in dest.items():
        if name == "artifact":
            continue
        got = cols.get(name)
        if got is None:
            values.extend([None] * n)
        else:
            values.extend(got.tolist() if hasattr(got, "tolist") else got)


def artifact_row(art: Any, path: str) -> dict[str, Any]:
    """The ``artifacts`` row of one opened artifact (:meth:`Artifact.summary`, keyed by the
    scanned ``path``, with exactly the columns of ``frames.SCHEMAS["artifacts"]``)."""
    s = art.summary()
    row = {c.name: s.get(c.name) for c in SCHEMAS["artifacts"]}
    row["artifact"] = path
    return row


def _error_row(path: str, e: BaseException) -> dict[str, Any]:
    from .errors import ArtifactError

    if isinstance(e, ArtifactError):
        return {"artifact": path, "error": type(e).__name__, "message": str(e),
                "structure": e.structure, "offset": e.offset}
    if isinstance(e, OSError):
        msg = f"{os.path.basename(path)}: {e.strerror or e}"
    else:  # a reader bug: report it, keep scanning
        msg = f"{os.path.basename(path)}: internal error: {type(e).__name__}: {e}"
    return {"artifact": path, "error": type(e).__name__, "message": msg,
            "structure": None, "offset": None}


def is_candidate(path: str, explicit: bool,
                 storage_options: dict[str, Any] | None = None) -> bool:
    """Whether ``path`` is scanned: named explicitly, named like an artifact, or its first
    bytes match a known format (:func:`workbench.formats.sniff_path`; for a URL one ranged
    read of those bytes)."""
    from . import formats
    from .remote import head_bytes, is_url

    if explicit or path.lower().endswith(ARTIFACT_SUFFIXES):
        return True
    try:
        if is_url(path):
            return formats.sniff(head_bytes(path, formats.HEAD, storage_options)) is not None
        return formats.sniff_path(path) is not None
    except (OSError, ArtifactError):
        return True  # let open() report it


def scan_chunk(files: Sequence[tuple[str, bool]], frames: Sequence[str],
               storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Scan some files; returns plain columns per frame (what workers send back).

    Returns ``{"artifacts": cols, "errors": cols, <frame>: cols, ..., "skipped": [paths]}``
    where ``cols`` is ``dict[column, list]`` with every schema column and ``artifact``.

    Example:
        >>> out = scan_chunk([("/abs/model.pte", True)], ["segments"])   # doctest: +SKIP
        >>> len(out["artifacts"]["artifact"])                             # doctest: +SKIP
        1
    """
    from ._fmt import no_gc
    from ._open import open as wb_open
    from .remote import is_url

    out: dict[str, Any] = {"artifacts": {c.name: [] for c in SCHEMAS["artifacts"]},
                           "errors": {c.name: [] for c in SCHEMAS["errors"]}, "skipped": []}
    for name in frames:
        out[name] = _empty(name)
    for url, explicit in files:
        path = mask_url(url)  # what rows show (no credentials)
        if not is_candidate(url, explicit, storage_options):
            out["skipped"].append(path)
            continue
        try:
            art = wb_open(url, storage_options=storage_options) if is_url(url) else wb_open(url)
        except Exception as e:  # every failure becomes an errors row
            _add_row(out["errors"], _error_row(path, e))
            continue
        try:
            with no_gc():
                row = artifact_row(art, path)
                got = {name: art.columns(name) for name in frames if name in art.frames}
                # append only when the whole file succeeded: no partial rows
                _add_row(out["artifacts"], row)
                for name, cols in got.items():
                    _append(out[name], path, cols)
        except Exception as e:
            _add_row(out["errors"], _error_row(path, e))
        finally:
            art.close()
    return out


def _add_row(dest: Columns, row: dict[str, Any]) -> None:
    for k, v in dest.items():
        v.append(row.get(k))


def _scan_chunk_frames(files: Sequence[tuple[str, bool]], frames: Sequence[str],
                      storage_options: dict[str, Any] | None = None
                       ) -> dict[str, pd.DataFrame]:
    """:func:`scan_chunk`, with the frames built (the partitions of ``as_dask=True``)."""
    got = scan_chunk(files, frames, storage_options)
    return {name: _build(name, got[name]) for name in ("artifacts", *frames, "errors")}


def _pick(d: dict, key: str) -> Any:
    return d[key]


# -- assembling frames (in the caller) ----------------------------------------------------------

def _build(name: str, cols: Columns) -> pd.DataFrame:
    """A scan frame from merged plain columns, with the same dtypes whatever the backend."""
    import pandas as pd

    from . import frames as _frames

    schema = SCHEMAS[name]
    if name in ("artifacts", "errors"):
        df = _frames.build(name, cols)
        data: dict[str, Any] = {}
    else:
        plain = {c.name: cols[c.name] for c in schema if c.required or c.dtype not in _NULLABLE}
        df = _frames.build(name, plain)
        data = {"artifact": pd.array(cols["artifact"], dtype="string")}
    for c in schema:
        if c.name not in df.columns:
            data[c.name] = pd.array(cols[c.name], dtype=_NULLABLE[c.dtype])
        elif c.dtype == "category":
            # categories are always strings (an empty or all-missing column would otherwise
            # get object categories, which chunks, Dask and parquet do not concatenate)
            col = df[c.name]
            cats = col.cat.categories
            data[c.name] = pd.Categorical.from_codes(
                col.cat.codes, categories=pd.Index(cats.astype(str), dtype="str"), validate=False)
        else:
            data[c.name] = df[c.name]
    return pd.DataFrame(data, copy=False)


def _merge(results: Iterable[dict[str, Any]], frames: Sequence[str]) -> tuple[dict[str, Columns], list]:
    merged: dict[str, Columns] = {"artifacts": {c.name: [] for c in SCHEMAS["artifacts"]},
                                  "errors": {c.name: [] for c in SCHEMAS["errors"]}}
    for name in frames:
        merged[name] = _empty(name)
    skipped: list[str] = []
    for res in results:
        skipped.extend(res["skipped"])
        for name, cols in merged.items():
            for k, v in cols.items():
                v.extend(res[name][k])
    return merged, skipped


def _chunks(files: list, workers: int, chunksize: int | None) -> list[list]:
    if chunksize is None:
        chunksize = max(1, min(64, -(-len(files) // (max(workers, 1) * 4))))
    return [files[i:i + chunksize] for i in range(0, len(files), chunksize)]


# -- backends -----------------------------------------------------------------------------------

def _run_local(chunks: list[list], frames: Sequence[str], jobs: int,
               tick: Callable[[int], None],
               options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    if jobs <= 1 or len(chunks) <= 1:
        out = []
        for c in chunks:
            out.append(scan_chunk(c, frames, options))
            tick(len(c))
        return out
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # forkserver/spawn, not fork: the caller may hold threads (a Dask client, a progress bar)
    method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    results: list[dict[str, Any] | None] = [None] * len(chunks)
    with ProcessPoolExecutor(max_workers=min(jobs, len(chunks)),
                             mp_context=mp.get_context(method)) as pool:
        futs = {pool.submit(scan_chunk, c, tuple(frames), options): i
                for i, c in enumerate(chunks)}
        for f in as_completed(futs):
            i = futs[f]
            results[i] = f.result()
            tick(len(chunks[i]))
    return results  # type: ignore[return-value]


def _client(scheduler: Any) -> tuple[Any, bool]:
    """``(Client, created_here)`` for a Client, a cluster or an address."""
    from distributed import Client

    if isinstance(scheduler, Client):
        return scheduler, False
    if isinstance(scheduler, str) or hasattr(scheduler, "scheduler_address"):
        return Client(scheduler, set_as_default=False), True
    raise TypeError(f"scheduler must be a dask.distributed Client, a cluster or an address, "
                    f"not {type(scheduler).__name__}")


def _run_dask(client: Any, chunks: list[list], frames: Sequence[str],
              tick: Callable[[int], None],
              options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    from distributed import as_completed

    futs = client.map(scan_chunk, chunks, frames=tuple(frames), storage_options=options,
                      pure=False)
    index = {f.key: i for i, f in enumerate(futs)}
    results: list[dict[str, Any] | None] = [None] * len(chunks)
    for f, res in as_completed(futs, with_results=True):  # results gathered in batches
        i = index[f.key]
        results[i] = res
        tick(len(chunks[i]))
        f.release()
    return results  # type: ignore[return-value]


def _as_dask(client: Any, chunks: list[list], frames: Sequence[str],
             options: dict[str, Any] | None = None) -> dict[str, Any]:
    import dask
    import dask.dataframe as dd
    from dask.dataframe.utils import clear_known_categories

    names = ("artifacts", *frames, "errors")
    if not chunks:
        chunks = [[]]
    parts = client.map(_scan_chunk_frames, chunks, frames=tuple(frames),
                       storage_options=options, pure=False)
    out = {}
    for name in names:
        meta = clear_known_categories(_build(name, _merge([], frames)[0][name]))
        sub = [client.submit(_pick, p, name, pure=False) for p in parts]
        # keep the dtypes of the pandas result: no conversion of object columns (shape
        # tuples) to Arrow strings
        with dask.config.set({"dataframe.convert-string": False}):
            out[name] = dd.from_delayed(sub, meta=meta, verify_meta=False)
    return out


# -- the public entry point ---------------------------------------------------------------------

def scan(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    jobs: int | None = None,
    scheduler: Any = None,
    as_dask: bool = False,
    *,
    frames: Sequence[str] = DEFAULT_FRAMES,
    progress: bool | None = False,
    chunksize: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Scan:
    """Scan every artifact under ``paths`` into one frame per kind (see the module doc).

    Args:
        paths: files, folders (walked recursively) and glob patterns; or URLs:
            ``s3://bucket/prefix/`` (any fsspec URL ending in ``/``) is listed recursively
            and each artifact read with ranged requests (metadata only), with the same
            frames as a local scan (``artifact`` and ``file`` columns hold the URLs,
            credentials masked).
        jobs: worker processes for the local pool (default: the CPU count, but no more than
            one per 32 files; ``1`` runs in this process). With a Dask scheduler: only used
            to size chunks (default: the cluster's threads).
        scheduler: a ``dask.distributed.Client``, a cluster or a scheduler address; the
            chunks run as Dask tasks there. Default: a local process pool.
        as_dask: return Dask DataFrames left on the cluster (needs ``scheduler`` or a
            default Dask client); no progress bar, ``skipped`` is not known.
        frames: format frames to collect besides ``artifacts`` and ``errors``.
        progress: a tqdm progress bar on stderr (``None``: only when stderr is a terminal).
        chunksize: files per task (default: about four tasks per worker, at most 64 files).
        storage_options: for URLs: options of the fsspec file system (credentials come
            only from here or the environment); passed to every worker.

    Returns:
        A :class:`Scan` (a dict): ``artifacts``, each of ``frames``, ``errors`` — pandas
        DataFrames (Dask DataFrames with ``as_dask``), rows sorted by ``artifact``.

    Example:
        >>> res = scan(["sample_models/"], jobs=2)                        # doctest: +SKIP
        >>> res["artifacts"].set_index("artifact")["padding_pct"].max()   # doctest: +SKIP
        >>> from distributed import Client                                # doctest: +SKIP
        >>> res = scan("/corpus", scheduler=Client("tcp://10.0.0.5:8786"))  # doctest: +SKIP
        >>> res = scan("s3://bucket/models/", storage_options={"anon": True})  # doctest: +SKIP
    """
    frames = tuple(frames)
    for name in frames:
        if name not in SCHEMAS or name in ("artifacts", "errors"):
            raise ValueError(f"unknown frame {name!r}; scan collects format frames such as "
                             f"segments, tensors, operators")
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be >= 1, not {jobs}")
    t0 = time.perf_counter()
    files = discover(paths, storage_options=storage_options)
    result = Scan()
    result.files = len(files)
    result.skipped = []

    if as_dask:
        if scheduler is None:
            from distributed import default_client

            try:
                client = default_client()
            except ValueError:
                raise ValueError("as_dask=True needs a Dask scheduler: pass scheduler=Client(...) "
                                 "or an address") from None
        else:
            client, _ = _client(scheduler)  # kept open: the frames live on it
        workers = jobs or max(1, sum(client.nthreads().values()))
        result.update(_as_dask(client, _chunks(files, workers, chunksize), frames,
                               storage_options))
        result.backend = f"dask at {client.scheduler.address}"
        result.seconds = time.perf_counter() - t0
        return result

    from tqdm.auto import tqdm

    bar = tqdm(total=len(files), unit="file", desc="scan", file=sys.stderr, leave=False,
               disable=(None if progress is None else not progress), dynamic_ncols=True)
    try:
        if scheduler is not None:
            client, own = _client(scheduler)
            try:
                workers = jobs or max(1, sum(client.nthreads().values()))
                chunks = _chunks(files, workers, chunksize)
                results = _run_dask(client, chunks, frames, bar.update, storage_options)
                result.backend = f"dask at {client.scheduler.address}"
            finally:
                if own:
                    client.close()
        else:
            # by default a process per ~32 files at most: starting one costs more than that
            workers = jobs or max(1, min(os.cpu_count() or 1, len(files) // 32))
            chunks = _chunks(files, workers, chunksize)
            results = _run_local(chunks, frames, workers, bar.update, storage_options)
            result.backend = ("in-process" if workers == 1 or len(chunks) <= 1
                              else f"process pool of {min(workers, len(chunks))} workers")
    finally:
        bar.close()
    merged, skipped = _merge(results, frames)
    result.skipped = skipped
    for name in ("artifacts", *frames, "errors"):
        result[name] = _build(name, merged[name])
    result.seconds = time.perf_counter() - t0
    return result


# -- output ------------------------------------------------------------------------------------

def write(result: dict[str, Any], out: str | os.PathLike[str]) -> list[str]:
    """Write scan frames to files; returns the paths written.

    The layout, chosen so that each frame stays a plain table any tool can read:

    * ``corpus.parquet`` -> ``corpus.artifacts.parquet``, ``corpus.segments.parquet``,
      ``corpus.tensors.parquet``, ``corpus.errors.parquet`` (one file per frame, next to
      each other; ``.csv`` likewise);
    * an existing folder, or a path ending in ``/`` -> ``<folder>/artifacts.parquet``, ...

    Every frame is written, ``errors`` too when it is empty, so a corpus always has the same
    files. Parquet keeps the dtypes (categories, nullable ints); tuple columns (``shape``)
    become lists.

    Example:
        >>> write(wb.scan("sample_models/"), "corpus.parquet")   # doctest: +SKIP
        ['corpus.artifacts.parquet', 'corpus.segments.parquet', ...]
    """
    out = os.fspath(out)
    if out.endswith(("/", os.sep)) or os.path.isdir(out):
        os.makedirs(out, exist_ok=True)
        paths = {name: os.path.join(out, f"{name}.parquet") for name in result}
    else:
        stem, ext = os.path.splitext(out)
        if ext not in (".parquet", ".csv"):
            raise ValueError(f"--out must end in .parquet or .csv, or be a folder: {out!r}")
        paths = {name: f"{stem}.{name}{ext}" for name in result}
    written = []
    for name, df in result.items():
        p = paths[name]
        if hasattr(df, "compute"):
            df = df.compute()
        if p.endswith(".csv"):
            df.to_csv(p, index=False)
        else:
            df.to_parquet(p, index=False)
        written.append(p)
    return written
