"""``Artifact``: one opened artifact, its frames (built once, cached) and zero-copy tensors.

Every consumer (notebooks, CLI, compare, profiler) goes through this class; format readers
fill a :class:`Parsed` (frame builders: columns as lists, numpy arrays or ready pandas arrays,
built only when a frame is asked for) and never hand out copies of data.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from . import _tensor
from . import frames as _frames
from ._fmt import human_bytes, no_gc
from .formats.parsed import Parsed
from .vocab import SCAN_KINDS

if TYPE_CHECKING:
    import pandas as pd

    from .source import Source

__all__ = ["Artifact"]


class _Frames(Mapping):
    """A read-only mapping name -> DataFrame that builds each frame on first access."""

    def __init__(self, art: Artifact) -> None:
        self._art = art
        self._cache: dict[str, pd.DataFrame] = {}

    def __getitem__(self, name: str) -> pd.DataFrame:
        df = self._cache.get(name)
        if df is None:
            builder = self._art._parsed.builders[name]  # KeyError for unknown names
            with no_gc():
                df = _frames.build(name, self._art._columns(name, builder))
            self._cache[name] = df
        return df

    def __iter__(self) -> Iterator[str]:
        return iter(self._art._parsed.builders)

    def __len__(self) -> int:
        return len(self._art._parsed.builders)

    def __contains__(self, name: object) -> bool:  # without building the frame
        return name in self._art._parsed.builders

    def __repr__(self) -> str:
        return f"<frames {list(self)}>"


class Artifact:
    """An opened artifact. Create with :func:`workbench.open`.

    Attributes:
        path: the main file.
        format: ``"pte"`` | ``"ptd"`` | ``"bpte"`` | ``"pt2"``.
        frames: mapping of frame name to DataFrame (built on first access, then cached).
        info: format facts (version, header fields).

    Example:
        >>> import workbench as wb
        >>> art = wb.open("sample_models/mlp_portable.pte")            # doctest: +SKIP
        >>> art.segments[["name", "kind", "offset", "size"]]           # doctest: +SKIP
        >>> w = art.tensor("forward/0")  # zero-copy numpy view      # doctest: +SKIP
    """

    def __init__(self, parsed: Parsed) -> None:
        self._parsed = parsed
        self.path = parsed.path
        self.format = parsed.format
        self.info = parsed.info
        self.frames: Mapping[str, pd.DataFrame] = _Frames(self)
        self._cols: dict[str, dict[str, Any]] = {}
        self._by_name: dict[Any, tuple[str, int]] | None = None

    # -- frames ---------------------------------------------------------------------------
    def _columns(self, name: str, builder: Callable[[], dict[str, Any]] | None = None
                 ) -> dict[str, Any]:
        cols = self._cols.get(name)
        if cols is None:
            self.ensure_fresh(f"frame {name!r}")  # builders read the maps
            cols = (builder or self._parsed.builders[name])()
            self._cols[name] = cols
        return cols

    def columns(self, name: str) -> dict[str, list]:
        """The columns of frame ``name`` as Python lists, ``None`` for missing values, without
        building the DataFrame (built once; what :func:`workbench.scan` collects).

        Raises:
            KeyError: when this artifact has no frame ``name``.

        Example:
            >>> art.columns("tensors")["name"][:2]      # doctest: +SKIP
            ['forward/0', 'forward/1']
        """
        key = "plain:" + name
        cols = self._cols.get(key)
        if cols is None:
            from ._cols import plain

            cols = {c: plain(v) for c, v in self._columns(name).items()}
            self._cols[key] = cols
        return cols

    @property
    def segments(self) -> pd.DataFrame:
        """Every byte range of every file of the artifact (see :mod:`workbench.frames`)."""
        return self.frames["segments"]

    @property
    def tensors(self) -> pd.DataFrame:
        """One row per tensor the artifact describes (see :mod:`workbench.frames`)."""
        return self.frames["tensors"]

    @property
    def program(self) -> Artifact:
        """The program inside a ``.bpte`` as an artifact of its own (same map, no copy).

        Its offsets are absolute within the ``.bpte``; its ``segments`` cover only the
        embedded program's byte range.
        """
        inner = self._parsed.extra.get("program")
        if inner is None:
            raise AttributeError(f"{self.format} artifacts have no embedded program")
        prog = Artifact(inner)
        outer = self._reopen
        if outer is not None:
            prog._reopen = lambda: outer().program
        return prog

    def run_test_cases(self, rtol: float = 1e-3, atol: float = 1e-5) -> pd.DataFrame:
        """Run a ``.bpte``'s test cases on the ExecuTorch runtime; one row per output.

        Needs the ``executorch`` package. Portable kernels are not bit-exact, hence the
        tolerances (as in ``torch.allclose``).

        Example:
            >>> wb.open("sample_models/mlp.bpte").run_test_cases()   # doctest: +SKIP
        """
        if "test_cases" not in self._parsed.builders:
            raise AttributeError(f"{self.format} artifacts have no bundled test cases")
        from ._bundled import run_test_cases

        return run_test_cases(self, rtol=rtol, atol=atol)

    @property
    def files(self) -> list[str]:
        """Paths of the files that make up this artifact (the main file first)."""
        return list(self._parsed.sources)

    @property
    def sources(self) -> Mapping[str, Source]:
        """Read-only mapping path -> :class:`~workbench.source.Source` (the mapped file) for
        every file of the artifact, the main file first."""
        return MappingProxyType(self._parsed.sources)

    @property
    def findings(self) -> tuple[dict[str, Any], ...]:
        """What the reader noticed while parsing without refusing the file (dicts with
        ``severity``, ``category``, ``structure``, ``offset``, ``message``); :meth:`validate`
        gives these and its own checks as a frame."""
        return tuple(self._parsed.findings)

    def validate(self) -> pd.DataFrame:
        """Every finding about this artifact (severity, structure, offset, message).

        ``open`` raises only for what makes reading impossible; this lists everything else
        that is wrong or unusual (misaligned data, unused segments, missing external
        tensors, tensors outside their arena, ...). An empty frame means nothing was found.

        Example:
            >>> wb.open("sample_models/mlp_portable.pte").validate().empty   # doctest: +SKIP
            True
        """
        from .validate import validate

        self.ensure_fresh("validate()")
        return validate(self, self._parsed.extra)

    # -- live files ---------------------------------------------------------------------------
    #: How :meth:`reload` opens the file(s) again (set by :func:`workbench.open`).
    _reopen: Callable[[], Artifact] | None = None

    def ensure_fresh(self, what: str | None = None) -> None:
        """Raise :class:`~workbench.errors.StaleFileError` when a file of this artifact was
        rewritten in place or truncated since it was opened (one ``os.fstat`` per file).

        The workbench calls it before it reads a map (building a frame, ``validate()``,
        ``tensor()``); an atomically replaced file passes (its old map stays valid).

        Example:
            >>> art.ensure_fresh()      # doctest: +SKIP
        """
        for src in self._parsed.sources.values():
            src.ensure_fresh(what)

    def is_stale(self) -> bool:
        """Whether any file of this artifact changed on disk since it was opened: rewritten
        in place, truncated, atomically replaced or removed. Then :meth:`reload`.

        Example:
            >>> art.is_stale()          # doctest: +SKIP
            False
        """
        return any(src.is_stale() for src in self._parsed.sources.values())

    def reload(self) -> Artifact:
        """Open the file(s) again (same path, same ``data=`` choice) and refresh this artifact
        in place: frames, tensors and findings are rebuilt from the new bytes on first use.
        Returns ``self``.

        The old maps are released; views handed out earlier keep their old map alive (and
        fault if that file was truncated: copy what you keep, ``tensor(name, copy=True)``).
        If opening fails (the file is half-written, say), the error is raised and this
        artifact keeps its old state. Artifacts not made by :func:`workbench.open` raise
        ``TypeError``.

        Example:
            >>> art = wb.open("model.pte")          # doctest: +SKIP
            >>> # ... model.pte is re-exported ...
            >>> art.is_stale()                      # doctest: +SKIP
            True
            >>> art.reload().is_stale()             # doctest: +SKIP
            False
        """
        reopen = self._reopen
        if reopen is None:  # built by hand from a Parsed (the core never imports open())
            raise TypeError(f"{self.path}: this artifact was not made by workbench.open(); "
                            "open the file again instead")
        new = reopen()
        self.close()
        self.__dict__.clear()
        self.__init__(new._parsed)  # type: ignore[misc]
        self._reopen = reopen
        return self

    # -- tensor data ------------------------------------------------------------------------
    def _row(self, key: str | tuple[str, int]) -> tuple[str, int]:
        """(frame, row) of the first row named ``key`` (or ``(method, value)``)."""
        if self._by_name is None:
            index: dict[Any, tuple[str, int]] = {}
            for frame in self._parsed.tensor_frames:
                cols = self.columns(frame)
                names = cols["name"]
                for i, n in enumerate(names):
                    index.setdefault(n, (frame, i))
                if frame == "tensors" and "method" in cols and "value" in cols:
                    for i, (m, v) in enumerate(zip(cols["method"], cols["value"])):
                        if m is not None and v is not None:
                            index.setdefault((m, v), (frame, i))
            self._by_name = index
        try:
            return self._by_name[key]
        except (KeyError, TypeError):
            raise KeyError(f"{self.path}: no tensor named {key!r}") from None

    def tensor(self, key: str | tuple[str, int], *, copy: bool = False,
               dequantize: bool = False) -> Any:
        """The bytes of one tensor as an array with its dtype and shape.

        Args:
            key: a ``name`` from :attr:`tensors` (or from ``frames["delegate_tensors"]``: a
                constant inside a delegate's graph), or ``(method, value)`` for a .pte value.
            copy: return a private, writable copy instead of a read-only view of the map.
                The copy is read through the file descriptor (``os.preadv``), not the map,
                and the file's identity is checked before and after: it never faults.
            dequantize: return the values as a new float32 array of the logical shape:
                quantized delegate constants (per-tensor, per-channel int8/int4, groupwise
                int4) are scaled with their stored scales; float tensors are converted.

        Returns:
            A numpy array (read-only view unless ``copy``), or a torch tensor for dtypes
            numpy lacks (``bfloat16``, float8 types). Views follow ``dim_order``. Packed
            4-bit delegate data (dtype ``int4``) is returned as it is stored: ``uint8`` of
            shape ``(*shape[:-1], ceil(shape[-1] / 2))``, two values per byte; the frame
            keeps the logical shape.

        Warning:
            A view (``copy=False``) is the file's memory map. If the file is truncated
            while the view lives (a model re-exported in place), touching it kills the
            process with ``SIGBUS`` (in Jupyter: the kernel dies); no Python check can stop
            that. ``tensor()`` checks the file before handing a view out, but not later.
            Keep ``copy=True`` for data that outlives a re-export; use :meth:`is_stale` and
            :meth:`reload` to pick up a new file. An atomic replace (write a temporary
            file, then ``os.replace``) keeps old views valid.

        Raises:
            KeyError: no such tensor.
            MissingDataError: the tensor has no stored bytes (planned, or external data
                that was not found).
            OutOfBoundsError: its bytes lie outside the file.
            StaleFileError: the file was rewritten in place or truncated since it was
                opened (call :meth:`reload`).
            UnsupportedQuantizationError: ``dequantize`` for a tensor whose quantization
                cannot be undone here (dynamically quantized activations, integer tensors
                without scales).

        Example:
            >>> w = art.tensor("forward/0")     # doctest: +SKIP
            >>> w.shape, w.dtype, w.flags.writeable   # doctest: +SKIP
            ((32, 16), dtype('float32'), False)
            >>> q = wb.open("sample_models/wide_xnnpack_8da4w.pte")           # doctest: +SKIP
            >>> q.tensor("forward/delegate0/2").shape                        # doctest: +SKIP
            (32, 32)
            >>> q.tensor("forward/delegate0/2", dequantize=True).shape       # doctest: +SKIP
            (32, 64)
        """
        frame, i = self._row(key)
        cols = self.columns(frame)
        if dequantize:
            return self._dequantized(frame, i, cols, key)
        if cols["offset"][i] is None or cols["file"][i] is None:
            raise _tensor.no_bytes_error(self.path, self.info.get("data_files") or [], cols, i)
        src = self._parsed.sources[cols["file"][i]]
        return _tensor.read(_tensor.place(cols, i, src), src, copy)

    def _dequantized(self, frame: str, i: int, cols: dict[str, list], key: Any) -> Any:
        """``tensor(key, dequantize=True)``: float32 values of row ``i`` of ``frame``."""
        import numpy as np

        from .formats.delegates.quant import UnsupportedQuantizationError, dequantize

        name, dtype = cols["name"][i], cols["dtype"][i]
        if frame != "delegate_tensors" or cols["offset"][i] is None:
            if dtype in ("float32", "float64", "float16", "bfloat16") or cols["offset"][i] is None:
                values = self.tensor(key, copy=True)  # raises MissingDataError when unstored
                return np.asarray(values.float() if hasattr(values, "float") else values,
                                  np.float32)
            raise UnsupportedQuantizationError(
                f"tensor {name!r} ({dtype}) carries no quantization parameters",
                file=self.path, structure=f"tensor {name!r}")
        row = {c: v[i] for c, v in cols.items()}
        src = self._parsed.sources[row["file"]]
        what = f"delegate tensor {name!r}"
        data = src.readinto(int(row["offset"]), np.empty(int(row["nbytes"]), np.uint8), what)
        scales = None
        if row.get("scale_offset") is not None and row.get("scale_file") in self._parsed.sources:
            ssrc = self._parsed.sources[row["scale_file"]]
            scales = ssrc.readinto(int(row["scale_offset"]),
                                   np.empty(int(row["scale_nbytes"] or 0), np.uint8),
                                   f"scales of {what}")
        return dequantize(data, row, scales)

    # -- lifetime and display -----------------------------------------------------------------
    def close(self) -> None:
        """Unmap the files (views handed out earlier keep their memory alive)."""
        for src in self._parsed.sources.values():
            src.close()

    def __enter__(self) -> Artifact:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<workbench.Artifact {self.format} {self.path!r}>"

    def summary(self) -> dict[str, Any]:
        """Headline facts as a dict: the one summary of an artifact, computed from its plain
        columns (no DataFrame is built). The CLI, the notebook views and :func:`workbench.scan`
        all use it.

        Keys:
            * every column of the scan ``artifacts`` frame (``workbench.frames.SCHEMAS
              ["artifacts"]``): ``artifact`` (this path), ``format``, ``size`` (the main file),
              ``data_files``, ``data_bytes``, ``segments`` (rows of the main file),
              ``tensors``, ``stored_tensors``, ``stored_tensor_bytes``, ``external``,
              ``missing``, ``methods``, ``operators``, ``delegates`` (counts, ``None`` where
              the format has no such table), ``version``, ``findings``, ``<kind>_bytes``,
              ``other_bytes``, ``padding_pct``;
            * ``path``, ``files`` (path -> size), ``total_bytes``, ``bytes_by_kind`` (every
              file, kinds in order of appearance), ``tensors_by_storage`` (most first),
              ``method_names``, ``top_tensors`` (the 5 largest: name, dtype, shape, nbytes,
              storage);
            * the reader's scalar ``info`` facts (where no key above has the name).

        Example:
            >>> art.summary()["tensors"]     # doctest: +SKIP
            6
        """
        main = self.path
        sources = self._parsed.sources
        builders = self._parsed.builders
        seg = self.columns("segments")
        ten = self.columns("tensors")
        files = {f: src.size for f, src in sources.items()}
        size = files[main]
        by_kind_main = dict.fromkeys(SCAN_KINDS, 0)
        by_kind: dict[str, int] = {}
        other = nseg = 0
        for f, k, n in zip(seg["file"], seg["kind"], seg["size"]):
            by_kind[k] = by_kind.get(k, 0) + n
            if f != main:
                continue
            nseg += 1
            if k in by_kind_main:
                by_kind_main[k] += n
            else:
                other += n
        nbytes, offsets, storage = ten["nbytes"], ten["offset"], ten["storage"]
        stored = [nb for nb, off in zip(nbytes, offsets) if off is not None]
        counts: dict[str, int] = {}
        for st in storage:
            counts[st] = counts.get(st, 0) + 1
        methods = operators = delegates = None
        method_names: list[str] = []
        if "methods" in builders:
            method_names = [str(m) for m in self.columns("methods")["method"]]
            methods = len(method_names)
        if "operators" in builders:
            operators = len(set(self.columns("operators")["op"]))
        elif "graph" in builders:
            operators = len(set(self.columns("graph")["target"]))
        if "delegates" in builders:
            delegates = len(self.columns("delegates")["id"])
        version = self.info.get("version")
        others = [n for f, n in files.items() if f != main]
        top = sorted(range(len(nbytes)), key=lambda i: -nbytes[i])[:5]
        return {
            **{k: v for k, v in self.info.items() if isinstance(v, (int, str))},
            # the scan `artifacts` row
            "artifact": main, "format": self.format, "size": size,
            "data_files": len(others), "data_bytes": sum(others),
            "segments": nseg, "tensors": len(ten["name"]),
            "stored_tensors": len(stored), "stored_tensor_bytes": sum(stored),
            "external": sum(1 for st in storage if st == "external"),
            "missing": sum(1 for m in ten.get("missing", ()) if m),
            "methods": methods, "operators": operators, "delegates": delegates,
            "version": version if isinstance(version, int) and not isinstance(version, bool) else None,
            "findings": len(self._parsed.findings),
            **{f"{k}_bytes": v for k, v in by_kind_main.items()},
            "other_bytes": other,
            "padding_pct": 100.0 * by_kind_main["padding"] / size if size else 0.0,
            # every file of the artifact
            "path": main, "files": files, "total_bytes": sum(files.values()),
            "bytes_by_kind": by_kind,
            "tensors_by_storage": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
            "method_names": method_names,
            "top_tensors": [
                {"name": str(ten["name"][i]), "dtype": str(ten["dtype"][i]),
                 "shape": tuple(ten["shape"][i]), "nbytes": int(nbytes[i]),
                 "storage": str(storage[i])} for i in top],
        }

    def _repr_html_(self) -> str:
        """A compact overview for notebooks: files with a byte bar each, counts, top tensors."""
        import os

        from .vocab import KIND_COLORS, OTHER_COLOR

        esc = html.escape
        s = self.summary()
        seg = self.segments
        rows = []
        for f, size in s["files"].items():
            part = seg[seg["file"] == f]
            by_kind = part.groupby("kind", observed=True, sort=False)["size"].sum()
            spans = []
            for kind, n in by_kind.items():
                if not n:
                    continue
                kind = str(kind)
                fill = ("repeating-linear-gradient(45deg,#fff 0 2px,#999 2px 3px)"
                        if kind == "padding" else KIND_COLORS.get(kind, OTHER_COLOR))
                spans.append(f'<span title="{esc(kind)} {human_bytes(int(n))}" style="'
                             f'width:{100 * int(n) / max(size, 1):.3f}%;background:{fill}">'
                             "</span>")
            legend = " · ".join(f"{esc(str(k))} {human_bytes(int(n))}"
                                for k, n in by_kind.sort_values(ascending=False).items() if n)
            rows.append(
                f"<tr><td><code>{esc(os.path.basename(f))}</code></td>"
                f"<td style='text-align:right'>{human_bytes(size)}</td>"
                "<td><div style='display:flex;width:240px;height:12px;border:1px solid #888'>"
                f"{''.join(spans)}</div></td><td style='font-size:85%'>{legend}</td></tr>")
        storage = " · ".join(f"{esc(k)} {v}" for k, v in s["tensors_by_storage"].items())
        methods = s["method_names"]
        meth = ""
        if methods:
            shown = ", ".join(esc(m) for m in methods[:6]) + (" …" if len(methods) > 6 else "")
            meth = f"<br>methods ({len(methods)}): {shown}"
        finding = (f"<br>{s['findings']} reader finding(s): <code>art.validate()</code>"
                   if s["findings"] else "")
        top = "".join(
            f"<tr><td><code>{esc(t['name'])}</code></td><td>{esc(t['dtype'])}</td>"
            f"<td>{esc(str(list(t['shape'])))}</td>"
            f"<td style='text-align:right'>{human_bytes(t['nbytes'])}</td>"
            f"<td>{esc(t['storage'])}</td></tr>" for t in s["top_tensors"])
        n_files = len(s["files"])
        return (
            f"<div><b>{esc(os.path.basename(self.path))}</b> · {esc(self.format)} · "
            f"{n_files} file{'s' if n_files != 1 else ''} · {human_bytes(s['total_bytes'])}"
            f"<table>{''.join(rows)}</table>"
            f"{len(seg)} segments · {s['tensors']} tensors ({storage}) · stored tensor bytes "
            f"{human_bytes(s['stored_tensor_bytes'])}{meth}{finding}"
            f"<br>frames: {', '.join(esc(n) for n in self.frames)}"
            "<table><tr><th>largest tensors</th><th>dtype</th><th>shape</th><th>bytes</th>"
            f"<th>storage</th></tr>{top}</table></div>")
