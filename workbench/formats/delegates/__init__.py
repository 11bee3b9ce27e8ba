"""Inside delegate blobs: recognise a backend's processed bytes and take them apart.

:func:`inspect_blob` picks a parser by the blob's magic bytes (the delegate id the program
gives decides only where a backend has no magic) and returns a :class:`BlobInfo`: the
backend, its header fields, sub-segments that cover the blob exactly, and, where the
backend's format describes them, tensors (dtype, shape, quantization, where the bytes are)
and nodes. A blob nobody recognises stays one sub-segment, with a finding that names the
backend id. :func:`kernel_findings` says when a program's work runs in custom kernels
(Cadence, Cortex-M, ...) rather than in a delegate blob.

Backends: XNNPACK (:mod:`.xnnpack`), Vulkan, MPS, MLX, Core ML, QNN, Arm Ethos-U (Vela) and
VGF, OpenVINO, AOTInductor (CUDA/Metal) — see :data:`BACKENDS`.

Example:
    >>> from workbench.formats.delegates import inspect_blob
    >>> info = inspect_blob(memoryview(b"\\x00" * 16), file="a.pte", offset=4096,
    ...                     backend_id="FooBackend")
    >>> info.backend, [s.kind for s in info.subsegments], info.findings[0].severity
    ('unknown', ['delegate'], 'warning')
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping
from types import ModuleType

from ...errors import ArtifactError
from ._base import Blob, BlobInfo, Finding, SubSegment, rebased
from ._columns import node_columns, tensor_columns
from .quant import UnsupportedQuantizationError, dequantize

__all__ = ["BACKENDS", "BlobInfo", "Finding", "SubSegment", "UnsupportedQuantizationError",
           "dequantize", "inspect_blob", "inspect_blobs", "kernel_findings", "node_columns",
           "prefetch_blobs", "tensor_columns"]

#: Bytes fetched first from the head of each delegate blob of a remote program.
BLOB_HEAD = 8 << 10
#: Blob ranges less than this far apart are fetched in one request (cheaper than a round trip).
BLOB_GAP = 64 << 10
#: A blob without a header saying where its graph ends is fetched whole up to this size
#: (the inspectors may read any of its bytes; larger ones are read on demand, range by range).
BLOB_WHOLE = 64 << 20


def _needed(head: bytes, size: int) -> int:
    """How many leading bytes of a blob its inspector reads, from its first bytes: header and
    graph of an ``XH00`` (XNNPACK) blob (not its constant data), else the whole blob."""
    import struct

    if len(head) >= 24 and head[4:8] == b"XH00":
        fb_off, fb_size = struct.unpack_from("<II", head, 10)
        return min(size, fb_off + fb_size)
    return min(size, BLOB_WHOLE)


def prefetch_blobs(src: object, blobs: list[tuple[int, int]]) -> None:
    """Fetch what the inspectors read of each ``(offset, size)`` delegate blob of a remote
    source: the first :data:`BLOB_HEAD` bytes of every blob (concurrent requests; blobs
    less than :data:`BLOB_GAP` apart in one), then the rest of what its header says the
    inspector reads (a no-op for a mapped file).

    Example:
        >>> prefetch_blobs(src, [(0x10000, 52000), (0x30000, 9000)])   # doctest: +SKIP
    """
    ok = [(o, z) for o, z in blobs if 0 <= o and z > 0 and o + z <= src.size]  # type: ignore[attr-defined]
    src.prefetch_many([(o, min(z, BLOB_HEAD)) for o, z in ok],  # type: ignore[attr-defined]
                      gap=BLOB_GAP)
    more = []
    for o, z in ok:
        head = bytes(src.buf[o:o + min(z, 64)])  # type: ignore[attr-defined]
        need = _needed(head, z)
        if need > BLOB_HEAD:
            more.append((o + BLOB_HEAD, need - BLOB_HEAD))
    if more:
        src.prefetch_many(more, gap=BLOB_GAP)  # type: ignore[attr-defined]


def _backends() -> tuple[ModuleType, ...]:
    from . import aoti, arm, coreml, mlx, mps, openvino, qnn, vulkan, xnnpack

    return (xnnpack, vulkan, mps, mlx, coreml, qnn, arm.ethosu, arm.vgf, openvino, aoti)


#: Parser modules in detection order; each has ``BACKEND``, ``IDS`` (delegate ids it is
#: written for), ``detect(blob) -> bool`` (magic bytes) and ``parse(blob) -> BlobInfo``.
#: A module may set ``BY_ID = True``: it has no magic and is tried only for its own ids.
BACKENDS: tuple[ModuleType, ...] = _backends()


def inspect_blob(
    data: memoryview | bytes,
    *,
    file: str,
    offset: int = 0,
    size: int | None = None,
    backend_id: str = "",
    method: str = "",
    index: int = 0,
    named_data: Mapping[str, tuple[str, int, int]] | None = None,
) -> BlobInfo:
    """Recognise one delegate blob and describe it.

    Args:
        data: the bytes holding the blob: the whole mapped file (then ``offset`` and
            ``size`` select the blob), or the blob itself (``size`` omitted; ``offset`` is
            then where the blob starts in ``file``). Never copied.
        file: path of the file holding the blob (named in records and errors).
        offset: absolute offset of the blob in ``file``.
        size: blob length when ``data`` is the whole file.
        backend_id: the delegate id the program gives (``BackendDelegate.id``).
        method, index: the method and its delegate-table position (named in records).
        named_data: key -> ``(file, absolute offset, size)`` of the program's named data
            and of attached ``.ptd`` files; ``None`` when unknown (keys stay unresolved).

    Returns:
        A :class:`BlobInfo`; its sub-segments cover ``[offset, offset + blob size)`` exactly.

    Raises:
        ArtifactError: the blob claims a known layout and breaks it; the message names the
            file, the structure (prefixed with ``"<method> delegate <index> (<id>)"``) and
            the absolute offset.

    Example:
        >>> import struct
        >>> blob = struct.pack("<Iqq", 0x5678ABCD, 7, 4) + b"QNN!"   # a QNN context blob
        >>> info = inspect_blob(blob, file="m.pte", offset=1024, backend_id="QnnBackend")
        >>> [(s.name, s.offset, s.size) for s in info.subsegments]
        [('header (context protocol)', 1024, 20), ('QNN context binary', 1044, 4)]
    """
    buf = data if isinstance(data, memoryview) else memoryview(data)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    if size is None:
        start, end, shift = 0, len(buf), offset
    else:
        start, end, shift = offset, offset + size, 0
        if offset < 0 or size < 0 or end > len(buf):
            from ...errors import OutOfBoundsError

            raise OutOfBoundsError(f"delegate blob [0x{offset:x}, +0x{size:x}) lies outside the "
                                   f"buffer (size 0x{len(buf):x})", file=file,
                                   structure=f"{method} delegate {index} ({backend_id})".strip(),
                                   offset=offset)
    blob = Blob(buf, file, start, end, shift, backend_id, method, index, named_data)
    parser = _choose(blob)
    label = f"{method} delegate {index} ({backend_id})".strip()
    if parser is None:
        return _unknown(blob)
    try:
        info = parser.parse(blob)
    except ArtifactError as e:
        raise rebased(e, shift, label) from None
    return _checked_id(info, parser)


def _checked_id(info: BlobInfo, parser: ModuleType) -> BlobInfo:
    """Note when the program's delegate id is not one the recognised backend uses."""
    if info.backend_id and parser.IDS and info.backend_id not in parser.IDS:
        info.findings.append(Finding("info", info.label, info.offset,
                                     f"the program calls this {parser.BACKEND} blob "
                                     f"{info.backend_id!r} (expected {', '.join(parser.IDS)})"))
    return info


def inspect_blobs(
    data: memoryview | bytes,
    blobs: Iterable[tuple[int, int, str, str, int]],
    *,
    file: str,
    named_data: Mapping[str, tuple[str, int, int]] | None = None,
) -> list[BlobInfo]:
    """:func:`inspect_blob` for every ``(offset, size, backend_id, method, index)`` of one
    file, with the same results; XNNPACK graphs are read in one vectorised pass (a program
    cut into many small blobs costs about what one blob of the same size costs).

    Example:
        >>> import struct
        >>> qnn = struct.pack("<Iqq", 0x5678ABCD, 7, 4) + b"QNN!"
        >>> [i.backend for i in inspect_blobs(qnn + qnn, [(0, 24, "QnnBackend", "f", 0),
        ...                                              (24, 24, "QnnBackend", "f", 1)],
        ...                                   file="m.pte")]
        ['qnn', 'qnn']
    """
    from ..._vecfb import SlowPath
    from . import xnnpack

    buf = data if isinstance(data, memoryview) else memoryview(data)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    items = [(int(o), int(z), str(b), str(m), int(i)) for o, z, b, m, i in blobs]
    out: list[BlobInfo | None] = [None] * len(items)
    batch = [k for k, (o, z, *_rest) in enumerate(items)
             if 0 <= o and z >= 8 and o + z <= len(buf) and bytes(buf[o + 4:o + 8]) == b"XH00"]
    if len(batch) > 1:
        group = [Blob(buf, file, items[k][0], items[k][0] + items[k][1], 0, items[k][2],
                      items[k][3], items[k][4], named_data) for k in batch]
        # The pass makes tens of thousands of small tuples and strings at once; a full
        # collection in the middle would walk every object of the process for nothing.
        collecting = gc.isenabled()
        gc.disable()
        try:
            for k, info in zip(batch, xnnpack.parse_many(group)):
                out[k] = _checked_id(info, xnnpack)
        except (SlowPath, ArtifactError):
            out = [None] * len(items)  # one by one below: exact errors and findings
        finally:
            if collecting:
                gc.enable()
    for k, (o, z, b, m, i) in enumerate(items):
        if out[k] is None:
            out[k] = inspect_blob(buf, file=file, offset=o, size=z, backend_id=b, method=m,
                                  index=i, named_data=named_data)
    return out  # type: ignore[return-value]


def _choose(blob: Blob) -> ModuleType | None:
    for mod in BACKENDS:
        if not getattr(mod, "BY_ID", False) and mod.detect(blob):
            return mod
    for mod in BACKENDS:
        if getattr(mod, "BY_ID", False) and blob.backend_id in mod.IDS and mod.detect(blob):
            return mod
    return None


def _unknown(blob: Blob) -> BlobInfo:
    head = bytes(blob.buf[blob.start:min(blob.end, blob.start + 8)])
    blob.note("warning", f"{blob.method} delegate {blob.index} ({blob.backend_id})".strip(),
              blob.start,
              f"no parser for backend id {blob.backend_id!r} (first bytes {head.hex(' ')}): the "
              "blob is shown as one opaque range")
    parts = [(blob.start, blob.length, "payload", "delegate")]
    return blob.info("unknown", "opaque", subsegments=blob.cover(parts))


#: Operator namespaces of kernel libraries that replace a delegate: their programs carry
#: no blob, the work is in KernelCalls to these operators.
KERNEL_LIBRARIES: dict[str, str] = {
    "cadence": "Cadence (Xtensa HiFi / Fusion DSP kernels)",
    "cortex_m": "Arm Cortex-M (CMSIS-NN kernels)",
    "quantized_decomposed": "quantized kernels (quantize / dequantize ops)",
    "llama": "ExecuTorch LLM custom ops (sdpa_with_kv_cache, update_cache, ...)",
    "torchao": "torchao low-bit kernels",
    "qnn_custom": "Qualcomm custom ops",
    "executorch_cuda": "ExecuTorch CUDA custom ops",
}


def kernel_findings(operators: Iterable[str], delegate_ids: Iterable[str] = ()) -> list[Finding]:
    """Program-level findings for backends that run as custom kernels, not blobs.

    Args:
        operators: operator names of the program (``namespace::name``).
        delegate_ids: the program's delegate ids (used to say "no delegate blob" when empty).

    Example:
        >>> f = kernel_findings(["cadence::quantized_linear", "aten::add"])[0]
        >>> f.message.split(" (")[0], f.message.endswith("carries no delegate blob")
        ('1 of 2 operators are cadence:: kernels', True)
    """
    ops = list(operators)
    counts: dict[str, int] = {}
    for op in ops:
        ns = op.split("::", 1)[0] if "::" in op else ""
        if ns in KERNEL_LIBRARIES:
            counts[ns] = counts.get(ns, 0) + 1
    has_blob = any(True for _ in delegate_ids)
    out = []
    for ns, k in counts.items():
        tail = "" if has_blob else "; this program carries no delegate blob"
        out.append(Finding("info", "Program.execution_plan.operators", None,
                           f"{k} of {len(ops)} operators are {ns}:: kernels "
                           f"({KERNEL_LIBRARIES[ns]}){tail}"))
    return out
