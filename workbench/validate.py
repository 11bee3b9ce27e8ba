"""``Artifact.validate()``: everything noticeably wrong or unusual about an artifact, at once.

``open`` raises only for what makes reading impossible; ``validate`` lists every finding —
problems the reader noted while parsing plus checks over the frames — as a frame with
``severity`` (``error`` | ``warning`` | ``info``), ``structure``, ``offset`` and ``message``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from .artifact import Artifact

__all__ = ["validate"]

#: ExecuTorch aligns constant tensor data to this many bytes (schema: @executorch-tensor-alignment).
TENSOR_ALIGNMENT = 16


def validate(art: Artifact) -> pd.DataFrame:
    """Run every check on ``art``; returns the findings frame (empty when all is well).

    Example:
        >>> wb.open("sample_models/mlp_external.pte", data=[]).validate()  # doctest: +SKIP
          severity        structure  offset  message
        0  warning  tensor 'fc1.weight'  <NA>  external tensor not found in any data file
    """
    from . import frames as _frames

    frames = art.frames
    for name in frames:  # builders may add findings while they run
        frames[name]
    found: list[dict[str, Any]] = list(art._parsed.findings)
    seg = frames["segments"]
    for file, group in seg.groupby("file", sort=False):
        size = art._parsed.sources[file].size if file in art._parsed.sources else None
        total = int(group["size"].sum())
        if size is not None and total != size:
            found.append(_f("error", f"segments of {file}", None,
                            f"rows cover {total} bytes of a {size}-byte file"))
        for r in group.itertuples():
            if r.kind == "unused" and r.size:
                found.append(_f("warning", r.name, r.offset,
                                f"{r.size} bytes in a segment that nothing refers to"))
            elif r.kind == "trailing" and r.size:
                found.append(_f("info", r.name, r.offset,
                                f"{r.size} bytes after the last declared structure"))
        pad = int(group.loc[group["kind"] == "padding", "size"].sum())
        if size and pad > 0.25 * size and size > 1 << 20:
            found.append(_f("warning", f"layout of {file}", None,
                            f"{pad} bytes ({100 * pad / size:.0f}%) of the file are padding"))
    ten = frames["tensors"]
    stored = ten[ten["offset"].notna()]
    for r in stored.itertuples():
        src = art._parsed.sources.get(r.file)
        strided = "strides" in ten.columns and r.strides is not None
        if src is not None and not strided and int(r.offset) + int(r.nbytes) > src.size:
            found.append(_f("error", f"tensor {r.name!r}", int(r.offset),
                            f"{r.nbytes} bytes run past the end of {r.file}"))
        if r.storage in ("segment", "mutable", "inline") and int(r.offset) % TENSOR_ALIGNMENT:
            found.append(_f("warning", f"tensor {r.name!r}", int(r.offset),
                            f"data is not {TENSOR_ALIGNMENT}-byte aligned"))
    if "missing" in ten.columns:
        for r in ten[ten["missing"].fillna(False).astype(bool)].itertuples():
            found.append(_f("warning", f"tensor {r.name!r}", None,
                            "external tensor not found in any data file"))
    if "memory_plan" in frames:
        plan = frames["memory_plan"]
        for r in plan[~plan["fits"]].itertuples():
            found.append(_f("error", f"{r.method} value {r.value}", None,
                            f"planned at [{r.offset}, {r.end}) outside arena {r.mem_id} "
                            f"of {r.buffer_size} bytes"))
    return _frames.build("findings", {
        "severity": [x["severity"] for x in found],
        "structure": [x["structure"] for x in found],
        "offset": [x.get("offset") for x in found],
        "message": [x["message"] for x in found],
    })


def _f(severity: str, structure: str, offset: int | None, message: str) -> dict[str, Any]:
    return {"severity": severity, "structure": structure,
            "offset": None if offset is None else int(offset), "message": message}
