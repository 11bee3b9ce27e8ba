"""Byte-range bookkeeping shared by the format readers (private)."""

from __future__ import annotations

from .._fmt import align_of
from ..errors import CorruptError


def cover(rows: list[tuple], file: str, start: int, end: int,
          gap: tuple[str, str] = ("padding", "padding"),
          tail: tuple[str, str] = ("trailing data", "trailing")) -> dict[str, list]:
    """Sort byte ranges and fill every gap with an explicit ``padding`` row.

    ``rows`` holds ``(offset, size, name, kind, index, used_by)``; the result covers
    ``[start, end)`` exactly (zero-size ranges are kept in place). ``gap`` is the
    ``(name, kind)`` given to the rows that fill gaps, ``tail`` to bytes after the last row.
    """
    rows = sorted(rows, key=lambda r: (r[0], r[1]))
    cols: dict[str, list] = {c: [] for c in ("file", "name", "kind", "offset", "size", "align",
                                             "index", "used_by")}

    def add(off: int, size: int, name: str, kind: str, index: int | None, used: str) -> None:
        cols["file"].append(file)
        cols["name"].append(name)
        cols["kind"].append(kind)
        cols["offset"].append(off)
        cols["size"].append(size)
        cols["align"].append(align_of(off))
        cols["index"].append(index)
        cols["used_by"].append(used)

    pos = start
    for off, size, name, kind, index, used in rows:
        if off > pos:
            add(pos, off - pos, gap[0], gap[1], None, "")
        elif off < pos:
            raise CorruptError(f"{name} [0x{off:x}, 0x{off + size:x}) overlaps the previous range "
                               f"(ends at 0x{pos:x})", file=file, structure=name, offset=off)
        add(off, size, name, kind, index, used)
        pos = max(pos, off + size)
    if pos < end:
        add(pos, end - pos, tail[0], tail[1], None, "")
    return cols


def concat_sorted(parts: list[dict[str, list]], keys: tuple[str, ...]) -> dict[str, list]:
    """Concatenate column dicts with the same columns and sort the rows by ``keys``."""
    if len(parts) == 1:
        return parts[0]
    names = list(parts[0])
    rows = [row for p in parts for row in zip(*(p[n] for n in names))]
    idx = [names.index(k) for k in keys]
    rows.sort(key=lambda r: tuple(r[i] for i in idx))
    return {n: [r[i] for r in rows] for i, n in enumerate(names)}


def named_data_role(key: str) -> str:
    """Role of a named-data key by convention: ``so_blob``/``weights_blob`` (the ExecuTorch
    CUDA/AOTI delegate's shared object and weights), else ``blob``.

    Example:
        >>> named_data_role("3f2a_so_blob"), named_data_role("ab12")
        ('so_blob', 'blob')
    """
    if key.endswith("_so_blob"):
        return "so_blob"
    if key.endswith("_weights_blob"):
        return "weights_blob"
    return "blob"
