"""ExecuTorch external data files (``.ptd``, FlatTensor): named tensors and blobs.

``FlatTensor`` = version, segments [DataSegment], named_data [NamedData(key, segment_index,
tensor_layout(scalar_type, sizes, dim_order))]. Entries written for external constants carry
a tensor layout; delegate blobs (e.g. XNNPACK weights) do not.

The package: :mod:`.header` (the ``FH01`` header and the byte layout), :mod:`.schema` (slots
of ``flat_tensor.fbs``), :mod:`.reader` (entries: fast and scalar path, :class:`PtdData`),
:mod:`.columns` (the frames).
"""

from __future__ import annotations

from ..._fmt import escape
from ...errors import Finding
from ...flatbuf import FlatBuffer
from ...source import Source
from .._ident import expect_identifier
from ..parsed import Parsed
from . import columns
from .header import HEADER_LENGTH, HEADER_MAGIC, FlatTensorHeader
from .reader import PtdData, read_entries, read_entries_v0
from .schema import V0_NAME, FlatTensor, FlatTensorV0

__all__ = ["FORMAT", "TAKES_DATA", "HEADER_LENGTH", "HEADER_MAGIC", "MAGIC", "FlatTensorHeader", "PtdData",
           "detect", "read"]

FORMAT = "ptd"
#: A data file takes no ``data=``.
TAKES_DATA = False
MAGIC = b"FT01"


def vars_of(table: type) -> list[str]:
    """The slot names of a schema table class."""
    return [k for k in vars(table) if not k.startswith("_")]


def detect(head: bytes) -> bool:
    """True when ``head`` looks like a FlatTensor data file (``FT`` + two characters at 4).

    Example:
        >>> detect(b"D\\x00\\x00\\x00FT01FH01")
        True
    """
    return len(head) >= 8 and head[4:6] == b"FT" and head[6:8].isalnum()


def read(src: Source) -> Parsed:
    """Read the ``.ptd`` in ``src`` (verified, zero-copy) into a :class:`Parsed`."""
    expect_identifier(src, MAGIC, "FlatTensor")
    h = FlatTensorHeader.read(src)
    fb_end = h.flatbuffer_offset + h.flatbuffer_size
    fb = FlatBuffer(src, 0, fb_end, identifier=MAGIC, name="FlatTensor")
    root = fb.root("FlatTensor")
    version = root.u32(FlatTensor.version)
    parsed = Parsed(format=FORMAT, path=src.path, sources={src.path: src})
    fb.findings = parsed.findings
    if len(root.fields) > len(vars_of(FlatTensor)):  # the earlier schema's wider root
        seg_off, seg_size, cols = read_entries_v0(src, root, h)
        parsed.info.update({"schema_version": V0_NAME,
                            "tensor_alignment": root.u32(FlatTensorV0.tensor_alignment)})
        parsed.findings.append(Finding(
            "info", "FlatTensor", root.pos,
            f"written with the earlier schema, {V0_NAME} (a root of {len(root.fields)} slots): "
            "read by that schema; today's ExecuTorch reads only the current FlatTensor schema"))
    else:
        seg_off, seg_size, cols = read_entries(src, fb, root, h)
    parsed.info.update({"version": version, "header": h,
                        "segment_base_offset": h.segment_base_offset})
    data = PtdData(src.path, h, seg_off, seg_size, cols, src.size)
    parsed.builders.update({"segments": lambda: columns.segments(data),
                            "tensors": lambda: columns.tensors(data),
                            "named_data": lambda: columns.named_data(data)})
    parsed.extra.ptd = data
    if len(data.by_key) < len(cols["key"]):  # a key repeats: the runtime finds the first
        seen: set[str] = set()
        for i, key in enumerate(cols["key"].tolist()):
            if key in seen:
                parsed.findings.append(Finding("warning", f"FlatTensor.named_data[{i}]", None,
                                               f"key {escape(key)!r} occurs more than once; "
                                               "the first entry is used (as by the runtime)"))
            seen.add(key)
    return parsed
