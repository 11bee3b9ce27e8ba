"""A program's delegate blobs taken apart: sub-segments, graph tensors and nodes.

:class:`DelegateBlobs` runs :func:`workbench.formats.delegates.inspect_blobs` once, on first
use, over every ``BackendDelegate`` of every method (blobs in segments and inline ones),
with the program's named data and the attached ``.ptd`` files as the key map, and keeps one
:class:`~workbench.formats.delegates.BlobInfo` per delegate. The ``.pte`` frames read it:

* ``segments``: a delegate segment that one delegate uses is split into the blob's
  sub-segments (header, graph flatbuffer, constant data, padding), which cover it exactly;
* ``delegate_tensors`` / ``delegate_nodes``: the backend graph's values and operations;
* ``delegates``: the backend each blob was recognised as, and its layout;
* ``named_data``: the dtype, shape and quantization of the graph tensor that uses a key.

A blob that claims a known layout and breaks it does not make the program unreadable (the
runtime would load the program and fail only in the backend's ``init``): its delegate gets
no record, its segment stays one range, and the error becomes an ``error`` finding naming
the blob's structure and absolute offset.

Example:
    >>> import workbench as wb
    >>> art = wb.open("sample_models/mlp_xnnpack.pte")            # doctest: +SKIP
    >>> art.frames["delegate_tensors"][["name", "dtype", "shape", "storage"]]   # doctest: +SKIP
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

import numpy as np

from ..._cols import filled, objects
from ...errors import ArtifactError, Finding
from ..delegates import BlobInfo, inspect_blob, inspect_blobs, kernel_findings, prefetch_blobs
from ..delegates._columns import MISSING, _whole, node_columns, tensor_columns
from .external import External
from .program import ProgramReader

__all__ = ["DelegateBlobs"]

#: Backends whose parser lists every named-data key a blob refers to (``named_keys``).
_LISTS_ALL_KEYS = frozenset({"xnnpack"})


class DelegateBlobs:
    """Every delegate blob of one program, inspected once (lazily)."""

    def __init__(self, r: ProgramReader, ext: External) -> None:
        self.r = r
        self.ext = ext
        self._infos: list[BlobInfo | None] | None = None
        #: (method index, delegate index) -> position in :attr:`infos`
        self._where: dict[tuple[int, int], int] = {}
        self._layout_table: tuple[dict[str, int], list[np.ndarray]] | None = None

    def named_map(self) -> dict[str, tuple[str, int, int]]:
        """key -> ``(file, absolute offset, size)`` of the program's named data, then of
        each attached data file (the first holder of a key wins, as in the runtime's lookup
        order: the program's own named data first)."""
        r = self.r
        seg = r.named_seg  # (the reader checked every index)
        keys = r.named_keys.tolist()
        out: dict[str, tuple[str, int, int]] = dict(zip(
            keys, zip(repeat(r.file), r.seg_off[seg].tolist(), r.seg_size[seg].tolist())))
        if len(out) < len(keys):  # a key listed twice: its first entry wins
            out = {}
            for key, at in zip(keys, seg.tolist()):
                if key not in out:
                    out[key] = (r.file, *r.segments[at])
        for d in self.ext.data:
            c = d.extra.ptd.cols
            path = d.path
            for key, off, size in zip(c["key"].tolist(), c["offset"].tolist(), c["size"].tolist()):
                if key not in out:
                    out[key] = (path, off, size)
        return out

    @property
    def infos(self) -> list[BlobInfo | None]:
        """One record per delegate (methods in order, delegates in table order); ``None``
        where the blob could not be read (see the findings)."""
        if self._infos is None:
            self._infos = self._inspect()
        return self._infos

    def info(self, method: int, index: int) -> BlobInfo | None:
        """The record of delegate ``index`` of method ``method`` (``None``: unreadable)."""
        infos = self.infos
        k = self._where.get((method, index))
        return None if k is None else infos[k]

    def _inspect(self) -> list[BlobInfo | None]:
        r = self.r
        items = []
        for m, plan in enumerate(r.methods):
            for k, d in enumerate(plan.delegates):
                self._where[(m, k)] = len(items)
                items.append((d.offset, d.size, d.id, plan.name, k))
        if not items:
            self._kernel_findings()
            return []
        if r.src.remote:  # fetch what the inspectors read: each blob's head, then its graph
            prefetch_blobs(r.src, [(off, size) for off, size, *_ in items])
        buf = r.src.buf
        named = self.named_map()
        infos: list[BlobInfo | None]
        try:
            infos = list(inspect_blobs(buf, items, file=r.file, named_data=named))
        except ArtifactError:  # one by one: every readable blob still gets its record
            infos = []
            for off, size, bid, method, k in items:
                try:
                    infos.append(inspect_blob(buf, file=r.file, offset=off, size=size,
                                              backend_id=bid, method=method, index=k,
                                              named_data=named))
                except ArtifactError as e:
                    infos.append(None)
                    r.findings.append(Finding("error", e.structure or f"{method} delegate {k}", e.offset,
                                              f"the delegate blob cannot be taken apart: {e.detail} "
                                              "(shown as one opaque range)"))
        for info in infos:
            if info is not None:
                r.findings.extend(info.findings)
        self._kernel_findings()
        return infos

    def _kernel_findings(self) -> None:
        ops = [name for plan in self.r.methods for name, _ in plan.operators]
        ids = [d.id for plan in self.r.methods for d in plan.delegates]
        self.r.findings.extend(kernel_findings(ops, ids))

    # -- what the frames take ---------------------------------------------------------------
    def parsed_named_keys(self, method: int, index: int) -> tuple[str, ...] | None:
        """Every named-data key that the graph of delegate ``index`` of method ``method``
        refers to, when its parser lists them all (XNNPACK: the ``constant_data`` keys);
        ``None`` otherwise (unreadable blob, or a backend whose keys are not all known)."""
        info = self.info(method, index)
        if info is None or info.backend not in _LISTS_ALL_KEYS:
            return None
        return info.named_keys

    def segment_rows(self, segment: int, method: int, index: int) -> list[tuple] | None:
        """Sub-segment rows ``(offset, size, name, kind, index, used_by)`` of the blob that
        delegate ``index`` of method ``method`` keeps in ``Program.segments[segment]``, or
        ``None`` when the blob stays one range (unreadable, or nothing to split)."""
        info = self.info(method, index)
        if info is None or len(info.subsegments) < 2:
            return None
        return info.segment_rows(segment)

    def tensor_columns(self) -> dict[str, Any]:
        """Columns of the ``delegate_tensors`` frame."""
        return tensor_columns([i for i in self.infos if i is not None])

    def node_columns(self) -> dict[str, Any]:
        """Columns of the ``delegate_nodes`` frame."""
        return node_columns([i for i in self.infos if i is not None])

    def backends(self) -> list[tuple[str | None, str | None]]:
        """``(backend, layout)`` per delegate, in the order of the ``delegates`` frame."""
        return [(None, None) if i is None else (i.backend, i.layout) for i in self.infos]

    def key_layouts(self) -> dict[str, tuple]:
        """named-data key -> what the first graph tensor stored under it says:
        ``(tensor name, dtype, shape, quant, group_size)`` (group size -1: none); scales
        stored under a key of their own get ``'<name> (scales)'`` and their ``scale_dtype``.

        Example:
            >>> blobs.key_layouts()["9eed80..."][1]      # doctest: +SKIP
            'float32'
        """
        row_of, cols = self._key_layout_table()
        keys, first = zip(*sorted(row_of.items(), key=lambda kv: kv[1])) if row_of else ((), ())
        return dict(zip(keys, zip(*(c[list(first)].tolist() for c in cols))))

    def key_layout_columns(self, keys: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """:meth:`key_layouts` joined to ``keys`` (an object array) as columns
        ``(tensor, dtype, shape, quant, group_size)``: object arrays (``None`` where no graph
        tensor uses a key) and an int64 group size (-1: none); ``None`` when no graph tensor
        is stored under a key at all."""
        row_of, cols = self._key_layout_table()
        if not row_of:
            return None
        at = np.fromiter(map(row_of.get, keys.tolist(), repeat(-1)), np.int64, len(keys))
        miss = at < 0
        at = np.where(miss, 0, at)
        out = []
        for c in cols:
            col = c[at]
            if miss.any():
                col[miss] = -1 if col.dtype != object else None
            out.append(col)
        return tuple(out)

    def _key_layout_table(self) -> tuple[dict[str, int], list[np.ndarray]]:
        """The rows of every graph tensor stored under a key (a tensor's own key, then the
        keys of scales), as five layout columns, and per distinct key its first row (first
        use wins)."""
        if self._layout_table is not None:
            return self._layout_table
        parts: list[list[np.ndarray]] = []  # key, tensor, dtype, shape, quant, group
        scale_parts: list[list[np.ndarray]] = []
        present = [i for i in self.infos if i is not None and i.tensors is not None]
        whole = _whole(present, "tensors")  # blobs read in one pass: their columns at once
        for cols in [whole] if whole is not None else [i.tensors for i in present]:
            if not cols or not len(cols["value"]):
                continue
            names = _values(cols["name"])
            keys = _values(cols["named_key"])
            rows = np.flatnonzero(np.not_equal(keys, None))
            group = cols["group_size"][rows]
            parts.append([keys[rows], names[rows], _values(cols["dtype"])[rows],
                          np.asarray(cols["shape"], object)[rows],  # (tuples, every parser)
                          _values(cols["quant"])[rows],
                          np.where(group == MISSING, -1, group).astype(np.int64)])
            skeys = _values(cols["scale_key"])
            rows = np.flatnonzero(np.not_equal(skeys, None))
            counts, inverse = np.unique(cols["num_scales"][rows], return_inverse=True)
            shapes = objects([None if k == MISSING else (k,) for k in counts.tolist()])
            scale_parts.append([
                skeys[rows], objects(list(map("{} (scales)".format, names[rows].tolist()))),
                _values(cols["scale_dtype"])[rows], shapes[inverse.reshape(-1)],
                filled(len(rows), None), np.full(len(rows), -1, np.int64)])
        every = parts + scale_parts
        if not every:
            table: tuple[dict[str, int], list[np.ndarray]] = ({}, [])
        else:
            cat = [np.concatenate([p[j] for p in every]) for j in range(6)]
            keys = cat[0].tolist()
            # the first row of each key: later rows are overwritten by earlier ones
            table = (dict(zip(reversed(keys), range(len(keys) - 1, -1, -1))), cat[1:])
        self._layout_table = table
        return table


def _values(col: Any) -> np.ndarray:
    """A per-blob column as an object array (a ``Coded`` category column decoded)."""
    values = getattr(col, "values", None)
    return values() if callable(values) else np.asarray(col, object)
