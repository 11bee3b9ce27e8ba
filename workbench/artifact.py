"""``Artifact``: one opened artifact, its frames (built once, cached) and zero-copy tensors.

Every consumer (notebooks, CLI, compare, profiler) goes through this class; format readers
fill a :class:`Parsed` (plain columns, no pandas) and never hand out copies of data.
"""

from __future__ import annotations

import html
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from . import frames as _frames
from ._fmt import human_bytes, no_gc
from .dtypes import BY_NAME
from .errors import ArtifactError, MissingDataError, OutOfBoundsError
from .source import Source

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Artifact", "Parsed"]


class Parsed:
    """What a format reader returns: sources, lazily built columns and facts (no pandas).

    Attributes:
        format: ``"pte"``, ``"ptd"``, ``"bpte"`` or ``"pt2"``.
        path: the main file.
        sources: path -> :class:`Source` for every file of the artifact.
        builders: frame name -> callable returning ``dict[column, list]``.
        info: format facts for summaries (version, header fields, ...).
        findings: non-fatal observations (dicts with severity, structure, offset, message).
    """

    def __init__(self, format: str, path: str, sources: dict[str, Source]) -> None:
        self.format = format
        self.path = path
        self.sources = sources
        self.builders: dict[str, Callable[[], dict[str, list]]] = {}
        self.info: dict[str, Any] = {}
        self.findings: list[dict[str, Any]] = []
        #: frames whose rows can be read with ``Artifact.tensor`` (name/dtype/shape/nbytes/
        #: file/offset columns), searched in order.
        self.tensor_frames: list[str] = ["tensors"]
        #: format-specific objects (e.g. the inner program of a .bpte).
        self.extra: dict[str, Any] = {}


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
        >>> w = art.tensor("0.weight")   # zero-copy numpy view       # doctest: +SKIP
    """

    def __init__(self, parsed: Parsed) -> None:
        self._parsed = parsed
        self.path = parsed.path
        self.format = parsed.format
        self.info = parsed.info
        self.frames: Mapping[str, pd.DataFrame] = _Frames(self)
        self._cols: dict[str, dict[str, list]] = {}
        self._by_name: dict[Any, tuple[str, int]] | None = None

    # -- frames ---------------------------------------------------------------------------
    def _columns(self, name: str, builder: Callable[[], dict[str, list]] | None = None
                 ) -> dict[str, list]:
        cols = self._cols.get(name)
        if cols is None:
            cols = (builder or self._parsed.builders[name])()
            self._cols[name] = cols
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
        return Artifact(inner)

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

        return validate(self)

    # -- tensor data ------------------------------------------------------------------------
    def _row(self, key: str | tuple[str, int]) -> tuple[str, int]:
        """(frame, row) of the first row named ``key`` (or ``(method, value)``)."""
        if self._by_name is None:
            index: dict[Any, tuple[str, int]] = {}
            for frame in self._parsed.tensor_frames:
                cols = self._columns(frame)
                names = cols["name"]
                for i, n in enumerate(names):
                    index.setdefault(n, (frame, i))
                if "method" in cols and "value" in cols:
                    for i, (m, v) in enumerate(zip(cols["method"], cols["value"])):
                        if m is not None and v is not None:
                            index.setdefault((m, v), (frame, i))
            self._by_name = index
        try:
            return self._by_name[key]
        except (KeyError, TypeError):
            raise KeyError(f"{self.path}: no tensor named {key!r}") from None

    def tensor(self, key: str | tuple[str, int], *, copy: bool = False) -> Any:
        """The bytes of one tensor as an array with its dtype and shape.

        Args:
            key: a ``name`` from :attr:`tensors`, or ``(method, value)`` for a .pte value.
            copy: return a private, writable copy instead of a read-only view of the map.

        Returns:
            A numpy array (read-only view unless ``copy``), or a torch tensor for dtypes
            numpy lacks (``bfloat16``, float8 types). Views follow ``dim_order``.

        Raises:
            KeyError: no such tensor.
            MissingDataError: the tensor has no stored bytes (planned, or external data
                that was not found).
            OutOfBoundsError: its bytes lie outside the file.

        Example:
            >>> w = art.tensor("0.weight")      # doctest: +SKIP
            >>> w.shape, w.dtype, w.flags.writeable   # doctest: +SKIP
            ((32, 16), dtype('float32'), False)
        """
        frame, i = self._row(key)
        cols = self._columns(frame)
        name = cols["name"][i]
        offset = cols["offset"][i]
        file = cols["file"][i]
        if offset is None or file is None:
            storage = cols["storage"][i] if "storage" in cols else "unknown"
            if storage == "external":
                files = self.info.get("data_files") or []
                where = f"in the data files {files}" if files else "(no .ptd data file attached)"
                detail = f"external tensor {name!r} was not found {where}; pass data=[...] to open()"
            else:
                detail = f"tensor {name!r} has no stored bytes (storage: {storage})"
            raise MissingDataError(detail, file=self.path, structure=f"tensor {name!r}")
        src = self._parsed.sources[file]
        nbytes = cols["nbytes"][i]
        shape = tuple(cols["shape"][i])
        dim_order = tuple(cols["dim_order"][i]) if "dim_order" in cols else tuple(range(len(shape)))
        dt = BY_NAME.get(cols["dtype"][i])
        if dt is None:  # pragma: no cover - readers only emit known dtypes
            raise ArtifactError(f"dtype {cols['dtype'][i]!r} is unknown", file=file)
        if offset < 0 or offset + nbytes > src.size:
            raise OutOfBoundsError(
                f"{nbytes} bytes of tensor {name!r} run past the end of the file "
                f"(size 0x{src.size:x})", file=file, structure=f"tensor {name!r}", offset=offset)
        if len(dim_order) != len(shape) or sorted(dim_order) != list(range(len(shape))):
            dim_order = tuple(range(len(shape)))
        physical = tuple(shape[d] for d in dim_order)
        inverse = tuple(dim_order.index(k) for k in range(len(shape)))
        numel = nbytes // dt.itemsize if dt.itemsize else 0
        if dt.numpy is not None:
            import numpy as np

            arr = np.frombuffer(src.buf, dtype=dt.numpy, count=numel, offset=offset)
            arr = arr.reshape(physical).transpose(inverse)
            return arr.copy() if copy else arr
        import torch

        tdtype = getattr(torch, dt.name, None)
        if tdtype is None:
            raise ArtifactError(f"dtype {dt.name} cannot be viewed with this torch",
                                file=file, structure=f"tensor {name!r}", offset=offset)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not writable.*")
            t = torch.frombuffer(src.buf, dtype=torch.uint8, count=nbytes, offset=offset)
        t = t.view(tdtype).reshape(physical).permute(inverse)
        return t.clone() if copy else t

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
        """Headline facts: format, files with sizes, frame row counts, bytes by storage.

        Example:
            >>> art.summary()["tensors"]     # doctest: +SKIP
            6
        """
        seg = self.segments
        ten = self.tensors
        stored = ten[ten["offset"].notna()]
        return {
            "format": self.format,
            "path": self.path,
            "files": {f: src.size for f, src in self._parsed.sources.items()},
            "tensors": len(ten),
            "stored_tensor_bytes": int(stored["nbytes"].sum()),
            "bytes_by_kind": {str(k): int(v) for k, v in
                              seg.groupby("kind", observed=True)["size"].sum().items()},
            "tensors_by_storage": {str(k): int(v) for k, v in
                                   ten["storage"].value_counts().items() if v},
            **{k: v for k, v in self.info.items() if isinstance(v, (int, str))},
        }

    def _repr_html_(self) -> str:
        s = self.summary()
        files = "".join(f"<li><code>{html.escape(f)}</code>: {human_bytes(n)}</li>"
                        for f, n in s["files"].items())
        kinds = ", ".join(f"{html.escape(k)} {human_bytes(v)}" for k, v in s["bytes_by_kind"].items())
        storage = ", ".join(f"{html.escape(k)}: {v}" for k, v in s["tensors_by_storage"].items())
        top = (self.tensors.sort_values("nbytes", ascending=False)
               .head(5)[["name", "dtype", "shape", "nbytes", "storage"]])
        return (f"<div><b>workbench.Artifact</b> · format <b>{self.format}</b>"
                f"<ul>{files}</ul><p>bytes by kind: {kinds}</p>"
                f"<p>{s['tensors']} tensors ({storage})</p>"
                f"<p>frames: {', '.join(html.escape(n) for n in self.frames)}</p>"
                f"{top.to_html(index=False)}</div>")
