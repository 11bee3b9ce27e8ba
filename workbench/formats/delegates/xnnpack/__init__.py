"""XNNPACK delegate blobs: the ``XH00`` header, the ``XNNGraph`` flatbuffer and its constants.

The blob's layout and the graph's slots are in :mod:`.schema`. :func:`parse` reads the
header, verifies the flatbuffer (vectorised for large graphs, one table at a time when
anything looks wrong, for an exact error) and returns every value (dtype, dims,
quantization, where its constant bytes are) and every node (op, input and output ids).

Example:
    >>> from workbench.formats.delegates import inspect_blob
    >>> import workbench as wb                                          # doctest: +SKIP
    >>> d = wb.open("sample_models/mlp_xnnpack.pte").frames["delegates"].iloc[0]  # doctest: +SKIP
    >>> raw = open("sample_models/mlp_xnnpack.pte", "rb").read()        # doctest: +SKIP
    >>> info = inspect_blob(memoryview(raw), file="mlp_xnnpack.pte", offset=d.offset,
    ...                     size=d["size"], backend_id=d.id)            # doctest: +SKIP
    >>> info.layout                                                     # doctest: +SKIP
    'XH00 header + XN01 flatbuffer + constant data'
"""

from __future__ import annotations

import numpy as np

from .... import readpath
from ...._vecfb import SlowPath, VecReader
from ....errors import CorruptError, TruncatedError, UnsupportedVersionError
from ....flatbuf import FlatBuffer
from .._base import Blob, BlobInfo
from .._columns import Batch, Coded
from . import _assemble, _graph
from . import schema as S

__all__ = ["BACKEND", "IDS", "detect", "parse", "parse_many"]

BACKEND = "xnnpack"
IDS = ("XnnpackBackend",)


def detect(blob: Blob) -> bool:
    """``XH00`` at bytes 4..8, or a bare graph flatbuffer (``XN01``/``XN00`` at 4..8)."""
    if blob.length < 8:
        return False
    tag = bytes(blob.buf[blob.start + 4:blob.start + 8])
    return tag == S.HEADER_MAGIC or tag in S.IDENTIFIERS


def _graph_range(blob: Blob, header: dict, parts: list) -> tuple[int, int, int, int, bytes]:
    """Header (if any) and the graph's identifier: flatbuffer start/size, constant-data
    start/size (window coordinates) and the identifier."""
    start, end = blob.start, blob.end
    if bytes(blob.buf[start + 4:start + 8]) == S.HEADER_MAGIC:
        fb_start, fb_size, cd_start, cd_size = _header(blob, header, parts)
    else:
        fb_start, fb_size, cd_start, cd_size = start, end - start, end, 0
    ident = bytes(blob.buf[fb_start + 4:fb_start + 8]) if fb_size >= 8 else b""
    if ident not in S.IDENTIFIERS:
        raise UnsupportedVersionError(
            f"XNNGraph file identifier is {ident!r}, expected one of "
            f"{', '.join(repr(i) for i in S.IDENTIFIERS)}", file=blob.path,
            structure="XNNGraph identifier", offset=fb_start + 4)
    return fb_start, fb_size, cd_start, cd_size, ident


def parse(blob: Blob) -> BlobInfo:
    """Read one XNNPACK blob (raises :class:`~workbench.ArtifactError` on corruption)."""
    header: dict[str, int | str] = {}
    parts: list[tuple[int, int, str, str]] = []
    fb_start, fb_size, cd_start, cd_size, ident = _graph_range(blob, header, parts)
    xn00 = ident == b"XN00"
    fb = FlatBuffer(blob, fb_start, fb_start + fb_size, identifier=ident, name="XNNGraph")
    root = fb.root("XNNGraph")
    raw = readpath.chosen().read(lambda: _graph.read_fast(fb, root, xn00),
                                 lambda: _graph.read_slow(fb, root, xn00))
    ctx = _assemble.Ctx([blob], [cd_start], [cd_size])
    const = _assemble.constants(ctx, raw)
    tensors = _assemble.values(ctx, raw, const)
    nodes = _assemble.nodes(ctx, raw)
    if raw.cols["b_start"].size and raw.cols["c_off"].size:
        blob.note("warning", "XNNGraph.constant_buffer", root.pos,
                  "both constant_buffer and constant_data are set; constant_data is used")
    return _info(blob, header, parts, raw, const, fb_start, fb_size, cd_start, cd_size, ident,
                 tensors, nodes, 0)


def _part(column: np.ndarray | Coded, rows: slice) -> np.ndarray | Coded:
    return Coded(column.codes[rows], column.names) if isinstance(column, Coded) else column[rows]


def _info(blob: Blob, header: dict, parts: list, raw: _graph.RawGraph,
          const: _assemble.Constants, fb_start: int, fb_size: int, cd_start: int,
          cd_size: int, ident: bytes, tensors: dict, nodes: dict, owner: int) -> BlobInfo:
    parts.append((fb_start, fb_size, f"XNNGraph flatbuffer ({ident.decode()})", "flatbuffer"))
    parts.extend(_assemble.constant_parts(blob, raw, const, cd_start, cd_size, owner))
    base, count = int(const.base[owner]), int(const.count[owner])
    header.update({"identifier": ident.decode(), "version": raw.version or "",
                   "num_externs": raw.num_externs, "xvalues": len(tensors["value"]),
                   "xnodes": len(nodes["node"]), "constant_entries": count})
    layout = (f"XH00 header + {ident.decode()} flatbuffer + constant data" if header.get("magic")
              else f"{ident.decode()} flatbuffer (no header)")
    keys = tuple(dict.fromkeys(filter(None, const.key[base:base + count].tolist())))
    return blob.info(BACKEND, layout, header=header, subsegments=blob.cover(parts),
                     tensors=tensors, nodes=nodes, named_keys=keys)


def parse_many(blobs: list[Blob]) -> list[BlobInfo]:
    """Several ``XH00``/``XN01`` blobs of one buffer read in one vectorised pass.

    The records are the ones :func:`parse` gives for each blob; the pass raises
    :class:`~workbench._vecfb.SlowPath` (or an ArtifactError) whenever it cannot vouch for
    every blob, and the caller then parses them one by one (for exact errors and findings).
    """
    first = blobs[0]
    if not readpath.chosen().allows(readpath.Tier.BATCHED):
        raise SlowPath("the read path reads blob by blob")
    if any(b.buf is not first.buf or b.shift != first.shift for b in blobs):
        raise SlowPath("blobs of different buffers")
    heads = []
    for b in blobs:
        if bytes(b.buf[b.start + 4:b.start + 8]) != S.HEADER_MAGIC:
            raise SlowPath("no XH00 header")
        header: dict[str, int | str] = {}
        parts: list[tuple[int, int, str, str]] = []
        fb_start, fb_size, cd_start, cd_size, ident = _graph_range(b, header, parts)
        if ident != b"XN01":
            raise SlowPath("XN00 graph")
        root = FlatBuffer(b, fb_start, fb_start + fb_size, identifier=ident,
                          name="XNNGraph").root("XNNGraph")
        heads.append((header, parts, fb_start, fb_size, cd_start, cd_size, ident, root))
    lo = np.array([h[2] for h in heads], np.int64)
    hi = lo + np.array([h[3] for h in heads], np.int64)
    span = Blob(first.buf, first.path, int(lo.min()), int(hi.max()), first.shift,
                first.backend_id, first.method, first.index, first.named)
    vec = VecReader(FlatBuffer(span, span.start, span.end, name="XNNGraph"))
    raw = _graph.read_many(vec, [h[7] for h in heads], False, _graph.Home(vec, lo, hi))
    ctx = _assemble.Ctx(blobs, [h[4] for h in heads], [h[5] for h in heads])
    const = _assemble.constants(ctx, raw)
    tensors = _assemble.values(ctx, raw, const)
    nodes = _assemble.nodes(ctx, raw)
    v_base, v_count = _assemble._bases(raw.cols["vown"], len(blobs))
    n_base, n_count = _assemble._bases(raw.cols["nown"], len(blobs))
    out = []
    for k, (b, h) in enumerate(zip(blobs, heads)):
        header, parts, fb_start, fb_size, cd_start, cd_size, ident, root = h
        one = _graph.RawGraph()
        _graph._graph_scalars(one, root)
        raw.version, raw.num_externs = one.version, one.num_externs
        vs = slice(int(v_base[k]), int(v_base[k] + v_count[k]))
        ns = slice(int(n_base[k]), int(n_base[k] + n_count[k]))
        info = _info(b, header, parts, raw, const, fb_start, fb_size, cd_start, cd_size,
                     ident, {c: _part(v, vs) for c, v in tensors.items()},
                     {c: _part(v, ns) for c, v in nodes.items()}, k)
        # the columns of all the blobs, which the frames take whole instead of re-joining
        info._batch = Batch(tensors, nodes, vs, ns)  # type: ignore[attr-defined]
        out.append(info)
    return out


def _header(blob: Blob, header: dict, parts: list) -> tuple[int, int, int, int]:
    """Read and check the ``XH00`` header; returns the flatbuffer and constant-data ranges
    in window coordinates."""
    start, end = blob.start, blob.end
    what = "XNNPACK header (XH00)"
    if end - start < S.HEADER_LENGTH:
        raise TruncatedError(f"{end - start} bytes is too short for the {S.HEADER_LENGTH}-byte "
                             "XNNPACK header", file=blob.path, structure=what, offset=start)
    H = S.Header
    length = blob.u16(start + H.LENGTH, what)
    fb_off = blob.u32(start + H.FLATBUFFER_OFFSET, what)
    fb_size = blob.u32(start + H.FLATBUFFER_SIZE, what)
    cd_off = blob.u32(start + H.CONSTANT_DATA_OFFSET, what)
    cd_size = blob.u64(start + H.CONSTANT_DATA_SIZE, what)
    header.update({"magic": "XH00", "length": length, "flatbuffer_offset": fb_off,
                   "flatbuffer_size": fb_size, "constant_data_offset": cd_off,
                   "constant_data_size": cd_size})
    size = end - start
    if length < S.HEADER_LENGTH:
        raise CorruptError(f"header length {length} is shorter than {S.HEADER_LENGTH}",
                           file=blob.path, structure=f"{what}.length", offset=start + H.LENGTH)
    if fb_off < length or fb_off + fb_size > size or fb_size < 8:
        raise blob.out_of_bounds(f"{what}.flatbuffer_offset", start + H.FLATBUFFER_OFFSET,
                                 f"flatbuffer [0x{fb_off:x}, +0x{fb_size:x}) does not fit between "
                                 f"the header ({length} bytes) and the end of the blob "
                                 f"(size 0x{size:x})")
    if cd_off < fb_off + fb_size or cd_off + cd_size > size:
        raise blob.out_of_bounds(f"{what}.constant_data_offset", start + H.CONSTANT_DATA_OFFSET,
                                 f"constant data [0x{cd_off:x}, +0x{cd_size:x}) does not fit "
                                 f"between the flatbuffer (ends at 0x{fb_off + fb_size:x}) and "
                                 f"the end of the blob (size 0x{size:x})")
    if start + length > end:
        raise TruncatedError("header runs past the end of the blob", file=blob.path,
                             structure=what, offset=start)
    parts.append((start, length, "header (XH00)", "header"))
    if cd_off + cd_size < size:
        blob.note("info", what, start + cd_off + cd_size,
                  f"{size - cd_off - cd_size} bytes after the constant data")
    return start + fb_off, fb_size, start + cd_off, cd_size
