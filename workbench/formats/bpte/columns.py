"""The frames a bundled program adds to its program's: ``test_cases`` and the ``segments``
of the whole file (the program's rows, then the test data)."""

from __future__ import annotations

from typing import Any

from ..._fmt import align_of
from ...source import Source
from .._layout import cover
from ..parsed import Parsed
from .reader import TestValue, case_name

__all__ = ["segments_raw", "test_cases"]

_CASE_COLUMNS = ("method", "case", "io", "index", "kind", "dtype", "shape", "nbytes", "offset",
                 "value", "dim_order")


def test_cases(cases: list[TestValue], file: str) -> dict[str, list]:
    """The test_cases frame: one row per test value."""
    cols: dict[str, list] = {c: [] for c in ("name", "method", "case", "io", "index", "kind",
                                             "dtype", "shape", "nbytes", "file", "offset",
                                             "align", "value", "dim_order")}
    for r in cases:
        cols["name"].append(case_name(r))
        for c in _CASE_COLUMNS:
            cols[c].append(getattr(r, c))
        cols["file"].append(file if r.offset is not None else None)
        cols["align"].append(align_of(r.offset))
    return cols


def segments_raw(src: Source, inner: Parsed, cases: list[TestValue]) -> dict[str, Any]:
    """Raw segment columns of the .bpte: its root, the program's rows, the test data."""
    cols = inner.extra.segments_raw()
    rows = [(0, 8, "flatbuffer root", "header", None, "root offset + BP08")]
    rows += list(zip(cols["offset"].tolist(), cols["size"].tolist(),
                     [f"program: {n}" for n in cols["name"].tolist()], cols["kind"].tolist(),
                     cols["index"].tolist(), cols["used_by"].tolist()))
    for r in cases:
        if r.offset is not None:
            rows.append((r.offset, r.stored, f"test data {case_name(r)}", "test_data", None, ""))
    fb = ("BundledProgram", "flatbuffer")
    return cover(rows, src.path, 0, src.size, gap=fb, tail=fb)
