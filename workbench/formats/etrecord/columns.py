"""Frame builders of an ETRecord: ``segments``, ``tensors`` (empty), ``members``,
``programs``, ``nodes``, ``debug_handles`` and ``delegate_map`` (private; columns are
declared in :mod:`workbench.frames`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._cols import align, factorized, filled, ints, objects, strings
from .._layout import cover_arrays, segments_frame
from . import schema as S
from .reader import Archive, Node

_TENSOR_COLUMNS = ("name", "dtype", "shape", "nbytes", "storage", "file", "offset")


class RecordColumns:
    """The frames of one ETRecord archive."""

    def __init__(self, arc: Archive) -> None:
        self.arc = arc
        self.path = arc.path

    def segments_columns(self) -> dict[str, Any]:
        """Per member its local header, data and data descriptor; the central directory and
        end records; gaps as padding."""
        zd = self.arc.zip
        a = zd.arrays
        n = len(zd.names)
        lho, data = a["header_offset"], a["data_offset"]
        size, desc = a["compressed_size"], a["descriptor_size"]
        seg_kinds = objects([S.SEGMENT_KIND[k] for k in self.arc.kinds])
        off = [lho, data, data + size]
        sz = [data - lho, size, desc]
        name = [filled(n, "local header"), objects(zd.names), filled(n, "data descriptor")]
        kind = [filled(n, "header"), seg_kinds, filled(n, "data_descriptor")]
        index = [np.arange(n, dtype=np.int64)] * 3
        used = [objects(zd.names), filled(n, ""), objects(zd.names)]
        ok = ~zd.damaged
        keep = [ok, ok, (desc > 0) & ok]
        tail = [(zd.cd_offset, zd.cd_size, "central directory", "central_directory",
                 f"{n} entries")]
        if zd.zip64_offset is not None:
            tail.append((zd.zip64_offset, zd.zip64_size, "zip64 end of central directory",
                         "end_record", ""))
        if zd.locator_offset is not None:
            tail.append((zd.locator_offset, 20, "zip64 end of central directory locator",
                         "end_record", ""))
        tail.append((zd.eocd_offset, zd.eocd_size, "end of central directory", "end_record", ""))
        t_off, t_size, t_name, t_kind, t_used = zip(*tail)
        raw = cover_arrays(
            self.path, 0, zd.src.size,
            np.concatenate([o[k] for o, k in zip(off, keep)] + [np.array(t_off, np.int64)]),
            np.concatenate([s[k] for s, k in zip(sz, keep)] + [np.array(t_size, np.int64)]),
            np.concatenate([x[k] for x, k in zip(name, keep)] + [objects(t_name)]),
            np.concatenate([x[k] for x, k in zip(kind, keep)] + [objects(t_kind)]),
            np.concatenate([x[k] for x, k in zip(index, keep)]
                           + [np.full(len(tail), -1, np.int64)]),
            np.concatenate([x[k] for x, k in zip(used, keep)] + [objects(t_used)]))
        if not ok.all():
            _mark_damaged(raw, zd.names, lho, zd.damaged)
        return segments_frame(raw)

    def tensors_columns(self) -> dict[str, Any]:
        """No tensor is read from an ETRecord (its weights are pickles): an empty frame."""
        return {c: [] for c in _TENSOR_COLUMNS}

    def members_columns(self) -> dict[str, Any]:
        arc = self.arc
        zd = arc.zip
        a = zd.arrays
        n = len(zd.names)
        data = a["data_offset"]
        damaged = np.array(arc.damaged, bool)
        return {
            "index": np.arange(n, dtype=np.int64), "name": strings(objects(zd.names)),
            "kind": factorized(objects(arc.kinds)), "model": factorized(objects(arc.programs_of)),
            "file": strings(filled(n, self.path)), "header_offset": a["header_offset"],
            "offset": data, "size": a["compressed_size"], "file_size": a["file_size"],
            "align": align(data, damaged), "method": a["method"], "compressed": a["compressed"],
            "crc32": a["crc32"], "pickled": np.array(arc.pickled, bool),
            "unsafe_name": np.array(arc.unsafe, bool), "damaged": damaged,
        }

    def programs_columns(self) -> dict[str, list]:
        rows = [self.arc.program(p) for p in self.arc.program_names]
        return {
            "program": [p.member for p in rows], "stage": [p.stage for p in rows],
            "method": [p.method for p in rows], "nodes": [len(p.nodes) for p in rows],
            "ops": [len({nd.target for nd in p.nodes}) for p in rows],
            "debug_handles": [sum(nd.debug_handle is not None for nd in p.nodes) for p in rows],
            "schema_version": [p.schema_version for p in rows],
            "dialect": [p.dialect for p in rows],
        }

    def nodes_columns(self) -> dict[str, Any]:
        progs = [self.arc.program(p) for p in self.arc.program_names]
        nodes: list[Node] = [nd for p in progs for nd in p.nodes]
        program = objects([p.member for p in progs for _ in p.nodes])
        stage = objects([p.stage for p in progs for _ in p.nodes])
        method = objects([p.method for p in progs for _ in p.nodes])
        handle = np.array([-1 if nd.debug_handle is None else nd.debug_handle for nd in nodes],
                          np.int64)
        missing = np.array([nd.debug_handle is None for nd in nodes], bool)
        return {
            "program": factorized(program), "stage": factorized(stage),
            "method": factorized(method),
            "graph": strings(objects([nd.graph for nd in nodes])),
            "index": np.array([nd.index for nd in nodes], np.int64),
            "name": strings(objects([nd.name for nd in nodes])),
            "target": factorized(objects([nd.target for nd in nodes])),
            "op": factorized(objects([_short(nd.target) for nd in nodes])),
            "debug_handle": ints(handle, missing),
            "module": strings(objects([nd.module for nd in nodes])),
            "module_type": factorized(objects([nd.module_type for nd in nodes])),
            "module_stack": strings(objects([nd.module_stack for nd in nodes])),
            "stack_trace": strings(objects([nd.stack_trace for nd in nodes])),
            "torch_fn": strings(objects([nd.torch_fn for nd in nodes])),
            "inputs": objects([nd.inputs for nd in nodes]),
            "outputs": objects([nd.outputs for nd in nodes]),
            "dtypes": objects([nd.dtypes for nd in nodes]),
            "shapes": objects([nd.shapes for nd in nodes]),
        }

    def _by_handle(self) -> dict[tuple[str | None, int], list[Node]]:
        """(method, debug handle) -> the nodes of that method's edge program with it (a
        handle can name several nodes, e.g. ``permute_copy`` + ``addmm`` of one linear);
        ``(None, h)`` looks in the only edge program when there is exactly one."""
        out: dict[tuple[str | None, int], list[Node]] = {}
        edges = [self.arc.program(p) for p in self.arc.program_names
                 if S.program_stage(p)[0] == "edge"]
        for p in edges:
            for nd in p.nodes:
                if nd.debug_handle is not None:
                    out.setdefault((p.method, nd.debug_handle), []).append(nd)
                    if len(edges) == 1:
                        out.setdefault((None, nd.debug_handle), []).append(nd)
        return out

    def _explode(self, rows: list[tuple], method_at: int, handle_at: int
                 ) -> tuple[list[tuple], list, list]:
        """One row per node that has the row's handle (the row once, node missing, when
        none has it)."""
        by = self._by_handle()
        out, names, targets = [], [], []
        for r in rows:
            h = r[handle_at]
            found = by.get((r[method_at], h), ()) if h is not None else ()
            for nd in found or (None,):
                out.append(r)
                names.append(nd.name if nd else None)
                targets.append(nd.target if nd else None)
        return out, names, targets

    def debug_handles_columns(self) -> dict[str, Any]:
        rows, names, targets = self._explode(self.arc.debug_handles, 0, 3)
        return {
            "method": factorized(objects([r[0] for r in rows])),
            "instruction": np.array([r[1] for r in rows], np.int64),
            "position": np.array([r[2] for r in rows], np.int64),
            "debug_handle": np.array([r[3] for r in rows], np.int64),
            "node": strings(objects(names)), "target": factorized(objects(targets)),
            "op": factorized(objects([_short(t) if t else None for t in targets])),
        }

    def delegate_map_columns(self) -> dict[str, Any]:
        rows, names, targets = self._explode(self.arc.delegates, 0, 5)
        pos = np.array([-1 if r[4] is None else r[4] for r in rows], np.int64)
        handle = np.array([-1 if r[5] is None else r[5] for r in rows], np.int64)
        none = np.array([r[5] is None for r in rows], bool)
        return {
            "method": factorized(objects([r[0] for r in rows])),
            "instruction": np.array([r[1] for r in rows], np.int64),
            "backend": factorized(objects([r[2] for r in rows])),
            "delegate_debug_id": strings(objects([r[3] for r in rows])),
            "position": ints(pos, none), "debug_handle": ints(handle, none),
            "node": strings(objects(names)), "target": factorized(objects(targets)),
            "op": factorized(objects([_short(t) if t else None for t in targets])),
        }


def _mark_damaged(raw: dict[str, Any], names: list[str], lho: np.ndarray,
                  damaged: np.ndarray) -> None:
    """Relabel as ``damaged`` each gap (padding row) that holds, or ends at, the local header
    offset of a damaged member (whose header and bytes could not be located)."""
    off = np.asarray(raw["offset"], np.int64)
    end = off + np.asarray(raw["size"], np.int64)
    gap = (np.asarray(raw["index"]) == -1) & (np.asarray(raw["kind"], object) == "padding")
    where = lho[damaged]
    who = np.asarray(names, object)[damaged]
    for r in np.flatnonzero(gap).tolist():
        inside = (where >= off[r]) & (where <= end[r])
        if inside.any():
            raw["kind"][r] = "damaged"
            raw["name"][r] = "damaged members"
            raw["used_by"][r] = ", ".join(who[inside].tolist())


def _short(target: str) -> str:
    """``aten.linear.default`` from ``torch.ops.aten.linear.default`` or the edge dialect's
    ``executorch.exir.dialects.edge.ops.aten.linear.default``."""
    for prefix in S.TARGET_PREFIXES:
        if target.startswith(prefix):
            return target[len(prefix):]
    return target

