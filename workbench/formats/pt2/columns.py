"""The frame builders of a ``.pt2`` archive (``tensors``, ``members``, ``segments``, ``models``,
``graph``) and the typed records they read: :class:`TensorRow` (one ``tensors`` row, as the
readers fill it) and :class:`Model` (one ``models`` row)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ..._cols import align, factorized, filled, ints, objects, string_array, strings
from ...errors import CorruptError
from .._zip import ZipEntry
from .graph_json import graph_nodes
from .schema import LEGACY_GRAPH, METADATA_LIMIT, MODEL_EXPORTED

if TYPE_CHECKING:
    from .archive import Archive


class TensorRow(NamedTuple):
    """One ``tensors`` row as a reader fills it: the frame's columns (``member`` holds the
    member's index, or ``None``), plus ``storage_key``: rows with the same key share bytes.
    The archive keeps these column by column (``Archive.rows``)."""

    fqn: Any
    model: Any
    kind: Any
    dtype: Any
    shape: Any
    strides: Any
    storage_offset: Any
    nbytes: Any
    storage: Any
    offset: Any
    requires_grad: Any
    member: Any
    pickled: Any
    contiguous: Any
    storage_key: Any


#: Fields of a tensor row, in order.
ROW_FIELDS = TensorRow._fields


@dataclass
class Model:
    """One ``models`` row: an exported program (counts from its graph) or an AOTInductor
    package (counts from its wrapper). ``entry`` is the graph member of an exported program."""

    name: str
    kind: str
    member: str | None
    nodes: int | None = None
    ops: int | None = None
    inputs: int | None = None
    outputs: int | None = None
    parameters: int | None = None
    buffers: int | None = None
    constants: int | None = None
    schema_version: str | None = None
    torch_version: str | None = None
    device: Any = None
    entry: ZipEntry | None = None


#: ``models`` columns, in order.
MODEL_COLUMNS = ("name", "kind", "member", "nodes", "ops", "inputs", "outputs", "parameters",
                 "buffers", "constants", "schema_version", "torch_version", "device")


def tensors_columns(arc: Archive) -> dict[str, Any]:
    """``tensors``: the archive's rows (see :class:`TensorRow`) with ``name``, ``storage_id``,
    ``shared`` (:meth:`Archive.name_rows`), ``file``, ``align`` and member names."""
    import numpy as np
    import pandas as pd

    cols: dict[str, Any] = {f: v for f, v in arc.rows.items() if f != "storage_key"}
    names = objects(arc.names)
    cols["name"] = strings(names)
    cols["fqn"] = strings(names.copy() if arc.names is cols["fqn"] else cols["fqn"])
    for c in ("model", "kind", "dtype", "storage"):
        cols[c] = factorized(cols[c])
    none = np.zeros(len(arc.storage_ids), bool)
    cols["storage_id"] = pd.arrays.IntegerArray(arc.storage_ids, none)
    cols["shared"] = pd.arrays.BooleanArray(arc.shared, none.copy())
    offsets = cols["offset"]
    missing = np.zeros(len(offsets), bool)
    if None in offsets:
        missing = np.equal(np.array(offsets, object), None)
        offsets = [0 if o is None else o for o in offsets]
    values = np.array(offsets, np.int64)
    cols["offset"] = ints(values, missing)
    cols["align"] = align(values)
    files = filled(len(values), arc.path)
    files[missing] = pd.NA
    cols["file"] = string_array(files)
    members = cols["member"]
    if None in members:
        cols["member"] = [None if m is None else arc.zip.names[m] for m in members]
    else:
        cols["member"] = strings(objects(arc.zip.names)[np.array(members, np.int64)]
                                  if members else [])
    return cols


def members_columns(arc: Archive) -> dict[str, Any]:
    """``members``: one row per zip member (the central directory's fields, its kind and
    model, and the tensors whose bytes it holds)."""
    import numpy as np

    a = arc.zip.arrays
    n = len(arc.roles)
    offsets = a["data_offset"]
    return {
        "index": np.arange(n, dtype=np.int64), "name": strings(arc.zip.names),
        "kind": factorized(arc.roles), "model": factorized(arc.models_of),
        "file": strings([arc.path] * n),
        "header_offset": a["header_offset"].copy(), "offset": offsets.copy(),
        "size": a["compressed_size"].copy(), "file_size": a["file_size"].copy(),
        "align": align(offsets), "method": a["method"].copy(),
        "compressed": a["compressed"].copy(), "crc32": a["crc32"].copy(),
        "pickled": np.array(arc.pickled, bool), "unsafe_name": np.array(arc.unsafe, bool),
        "used_by": strings(arc.used_text().copy()),
    }


def segments_columns(arc: Archive) -> dict[str, Any]:
    """Byte ranges covering the file: per member its local header, alignment padding,
    data (split around an AOTInductor ``.so``'s constants) and data descriptor; then the
    central directory and the end records. Gaps become ``padding`` rows (vectorised)."""
    import numpy as np

    zd = arc.zip
    a = zd.arrays
    n = len(zd.names)
    lho, data = a["header_offset"], a["data_offset"]
    size, desc = a["compressed_size"], a["descriptor_size"]
    pad = _paddings(arc, lho, data)
    # Four slots per member: header, padding, data, descriptor.
    starts = np.stack([lho, data - pad, data, data + size], axis=1).ravel()
    sizes = np.stack([data - pad - lho, pad, size, desc], axis=1).ravel()
    keep = np.ones((n, 4), bool)
    keep[:, 1] = pad > 0
    keep[:, 3] = desc > 0
    used_text = arc.used_text()
    # Object arrays of four slots per member, filled column-wise (no per-row Python).
    names_a = np.empty((n, 4), object)
    names_a[:, 0], names_a[:, 1], names_a[:, 3] = "local header", "padding", "data descriptor"
    names_a[:, 2] = zd.names
    kinds_a = np.empty((n, 4), object)
    kinds_a[:, 0], kinds_a[:, 1], kinds_a[:, 3] = "header", "padding", "data_descriptor"
    kinds_a[:, 2] = arc.roles
    used_a = np.full((n, 4), "", object)
    used_a[:, 2] = used_text
    extra = _extra_rows(arc, keep, used_text)
    flat = np.flatnonzero(keep.ravel())
    xs = list(zip(*extra))
    starts = np.concatenate([starts[flat], np.array(xs[0], np.int64)])
    sizes = np.concatenate([sizes[flat], np.array(xs[1], np.int64)])
    names = np.concatenate([names_a.ravel()[flat], objects(xs[2])])
    kinds = np.concatenate([kinds_a.ravel()[flat], objects(xs[3])])
    index = np.concatenate([flat // 4, np.array(xs[4], np.int64)])
    used = np.concatenate([used_a.ravel()[flat], objects(xs[5])])
    order = np.lexsort((sizes, starts))
    s_starts, s_ends = starts[order], (starts + sizes)[order]
    reach = np.maximum.accumulate(s_ends)
    prev = np.concatenate(([0], reach[:-1]))
    over = np.flatnonzero(s_starts < prev)
    if over.size:
        k = int(order[over[0]])
        raise CorruptError(f"{names[k]} [0x{s_starts[over[0]]:x}, 0x{s_ends[over[0]]:x}) "
                           f"overlaps the previous range (ends at 0x{prev[over[0]]:x})",
                           file=arc.path, structure=names[k], offset=int(s_starts[over[0]]))
    # Gaps (torch leaves none) become padding rows; bytes after the end records, trailing.
    gaps = np.flatnonzero(s_starts > prev)
    fill = [(int(prev[g]), int(s_starts[g] - prev[g]), "padding", "padding") for g in gaps]
    tail = int(reach[-1]) if len(reach) else 0
    if tail < arc.src.size:
        fill.append((tail, arc.src.size - tail, "trailing data", "trailing"))
    if fill:
        fs = list(zip(*fill))
        starts = np.concatenate([starts, np.array(fs[0], np.int64)])
        sizes = np.concatenate([sizes, np.array(fs[1], np.int64)])
        names = np.concatenate([names, objects(fs[2])])
        kinds = np.concatenate([kinds, objects(fs[3])])
        index = np.concatenate([index, np.full(len(fill), -1, np.int64)])
        used = np.concatenate([used, objects([""] * len(fill))])
        order = np.lexsort((sizes, starts))
    if not np.array_equal(order, np.arange(len(order))):
        names, kinds, index, used = names[order], kinds[order], index[order], used[order]
    offsets = starts[order]
    return {"file": strings([arc.path] * len(order)), "name": strings(names),
            "kind": factorized(kinds), "offset": offsets, "size": sizes[order],
            "align": align(offsets), "index": ints(index, index < 0),
            "used_by": strings(used)}


def _extra_rows(arc: Archive, keep: Any, used_text: Any) -> list[tuple]:
    """Segment rows outside the four slots per member: an AOTInductor ``.so`` split around
    its constants (its data slot is dropped from ``keep``), the central directory and the end
    records, as ``(start, size, name, kind, member index or -1, used_by)``."""
    zd = arc.zip
    n = len(zd.names)
    extra: list[tuple] = []
    for k, (start, end) in arc.so_regions.items():
        e = zd.entry(k)
        keep[k, 2] = False
        extra += [(e.data_offset, start - e.data_offset, e.name, "so", k, ""),
                  (start, end - start, f"{e.name} [constants]", "blob", k, used_text[k]),
                  (end, e.data_end - end, e.name, "so", k, "")]
    extra.append((zd.cd_offset, zd.cd_size, "central directory", "central_directory", -1,
                  f"{n} entries"))
    if zd.zip64_offset is not None:
        extra.append((zd.zip64_offset, zd.zip64_size, "zip64 end of central directory",
                      "end_record", -1, ""))
    if zd.locator_offset is not None:
        extra.append((zd.locator_offset, 20, "zip64 end of central directory locator",
                      "end_record", -1, ""))
    extra.append((zd.eocd_offset, zd.eocd_size, "end of central directory", "end_record",
                  -1, ""))
    return extra


def _paddings(arc: Archive, lho: Any, data: Any) -> Any:
    """Alignment padding at the end of each local header's extra field (torch's ``FB``
    field); vectorised for the common single-field case."""
    import numpy as np

    zd = arc.zip
    n = len(zd.names)
    x_len = zd.arrays["local_extra"]
    start = data - x_len
    u8 = np.frombuffer(arc.src.buf, np.uint8, count=zd.cd_offset)
    has = x_len >= 4
    at = np.where(has, start, 0)
    head = u8[at[:, None] + np.arange(4)].view("<u2").reshape(n, 2).astype(np.int64)
    single = has & (head[:, 0] == 0x4246) & (head[:, 1] + 4 == x_len)
    pad = np.where(single, head[:, 1], 0)
    for k in np.flatnonzero(has & ~single).tolist():
        pad[k] = zd.local_padding(zd.entry(k))
    return pad


def models_columns(arc: Archive) -> dict[str, list]:
    """``models``: one row per exported program (counts from :func:`graph_stats`) and per
    AOTInductor package (counts from its wrapper)."""
    out: dict[str, list] = {c: [] for c in MODEL_COLUMNS}
    for key, m in arc.models.items():
        row = {c: getattr(m, c) for c in MODEL_COLUMNS}
        row["name"] = key
        if m.kind == MODEL_EXPORTED:
            row.update(arc.graph(key)["summary"])
        for k in out:
            out[k].append(row[k])
    return out


def graph_columns(arc: Archive) -> dict[str, list]:
    """``graph``: per exported program, each operator target and its node count (most
    frequent first)."""
    out: dict[str, list] = {"model": [], "target": [], "count": []}
    for model, m in arc.models.items():
        if m.kind != MODEL_EXPORTED:
            continue
        targets = arc.graph(model)["targets"]
        for target, n in sorted(targets.items(), key=lambda kv: (-kv[1], kv[0])):
            out["model"].append(model)
            out["target"].append(target)
            out["count"].append(n)
    return out


def graph_nodes_columns(arc: Archive) -> dict[str, list]:
    """``graph_nodes``: the data flow of every exported program (see :func:`graph_nodes`),
    with its model name; an archive without ``models/`` but with the older
    ``serialized_exported_program.json`` member gives that graph."""
    out: dict[str, list] = {"model": []}
    graphs = [(model, m.entry) for model, m in arc.models.items() if m.kind == MODEL_EXPORTED]
    if not arc.models:
        # the layout torch.export.save wrote before models/<name>.json (torch 2.1-2.2)
        graphs = [(e.name.rsplit("/", 1)[-1][:-len(".json")], e) for e in arc.zip.entries
                  if e.name.rsplit("/", 1)[-1] == LEGACY_GRAPH]
    for model, e in graphs:
        try:
            rows = graph_nodes(arc.zip.content(e, METADATA_LIMIT), arc.path, e)
        except CorruptError as err:  # torch.export.load may still read it: a finding, no rows
            arc.find("warning", err.structure or f"zip member {e.name!r}",
                     f"graph of model {model!r} not drawn: {err.detail}", err.offset)
            continue
        for k, v in rows.items():
            out.setdefault(k, []).extend(v)
        out["model"].extend([model] * len(rows["name"]))
    return out
