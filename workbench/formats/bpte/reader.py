"""ExecuTorch bundled programs (``.bpte``): a program plus test cases, in one flatbuffer.

Layout (facts from the format; field names follow ``bundled_program_schema.fbs``)::

    0   u32  root table offset
    4   4s   file identifier "BP08"          (no extended header)
    BundledProgram = version, method_test_suites [BundledMethodTestSuite], program [ubyte]
    BundledMethodTestSuite = method_name, test_cases [BundledMethodTestCase]
    BundledMethodTestCase = inputs [Value], expected_outputs [Value]
    Value = union ValueUnion { Tensor, Int, Bool, Double }
    Tensor = scalar_type, sizes [int], data [ubyte], dim_order [ubyte]

The ``program`` vector holds a whole ``.pte`` byte for byte. It is read *in place*: its
frames carry absolute offsets within the ``.bpte``, and nothing is copied.
"""

from __future__ import annotations

from typing import Any

from .._fmt import align_of
from ..dtypes import SCALAR_TYPES
from ..errors import CorruptError, OutOfBoundsError, TruncatedError, UnsupportedVersionError
from ..flatbuf import FlatBuffer, Table
from ..source import Source
from . import pte
from ._layout import cover, segments_frame
from .parsed import Parsed

__all__ = ["FORMAT", "MAGIC", "detect", "read"]

FORMAT = "bpte"
MAGIC = b"BP08"
VALUE_TYPES = ("None", "Tensor", "Int", "Bool", "Double")


def detect(head: bytes) -> bool:
    """True when ``head`` looks like a bundled program (``BP`` + two digits at byte 4).

    Example:
        >>> detect(b"\\x10\\x00\\x00\\x00BP08")
        True
    """
    return len(head) >= 8 and head[4:6] == b"BP" and head[6:8].isdigit()


def read(src: Source) -> Parsed:
    """Read the ``.bpte`` in ``src``: the embedded program in place, plus its test cases."""
    if src.size < 8:
        raise TruncatedError(f"{src.size} bytes is too short for a bundled program (needs 8)",
                             file=src.path, structure="file header", offset=0)
    ident = src.bytes(4, 4, "file identifier")
    if ident != MAGIC:
        raise UnsupportedVersionError(f"bundled program version {ident!r} is not supported "
                                      f"(expected {MAGIC!r})", file=src.path,
                                      structure="file identifier", offset=4)
    fb = FlatBuffer(src, 0, src.size, identifier=MAGIC, name="BundledProgram")
    root = fb.root("BundledProgram")
    version = root.u32(0)
    prog_start, prog_size = root.vector(2, 1, "program")
    if not prog_size:
        raise CorruptError("the bundled program holds no program", file=src.path,
                           structure="BundledProgram.program", offset=root.pos)
    inner = pte.read_program(src, prog_start, prog_start + prog_size, outer="pte")
    cases = _test_cases(root, src.path)

    parsed = Parsed(format=FORMAT, path=src.path, sources={src.path: src})
    parsed.info.update({"bundled_version": version, "program_offset": prog_start,
                        "program_size_in_bundle": prog_size})
    parsed.info.update({k: v for k, v in inner.info.items() if k not in ("data_files",)})
    parsed.builders.update(inner.builders)
    parsed.builders["segments"] = lambda: segments_frame(
        _segments(src, inner, prog_start, prog_size, cases))
    parsed.builders["test_cases"] = lambda: _cases_columns(cases, src.path)
    parsed.tensor_frames = ["tensors", "test_cases"]
    parsed.findings = inner.findings  # shared: the inner builders add findings lazily
    parsed.extra["program"] = inner
    return parsed


def _test_cases(root: Table, file: str) -> list[dict[str, Any]]:
    out = []
    for suite in root.tables(1, "method_test_suites"):
        method = suite.string(0, "method_name") or ""
        for case_idx, case in enumerate(suite.tables(1, "test_cases")):
            for io, field in (("input", 0), ("expected_output", 1)):
                for k, v in enumerate(case.tables(field, "inputs" if field == 0 else "expected_outputs")):
                    t, tab = v.union(0, len(VALUE_TYPES), "val")
                    row: dict[str, Any] = {
                        "method": method, "case": case_idx, "io": io, "index": k,
                        "kind": VALUE_TYPES[t], "dtype": None, "shape": None, "nbytes": None,
                        "offset": None, "value": None, "dim_order": None,
                    }
                    if t == 1 and tab is not None:
                        code = tab.i8(0)
                        dt = SCALAR_TYPES.get(code)
                        if dt is None:
                            raise CorruptError(f"scalar_type {code} is unknown", file=file,
                                               structure=f"{tab.path}.scalar_type", offset=tab.pos)
                        sizes = tuple(tab.scalars(1, "i", "sizes"))
                        if any(s < 0 for s in sizes):
                            raise CorruptError(f"negative size in {list(sizes)}", file=file,
                                               structure=f"{tab.path}.sizes", offset=tab.pos)
                        numel = 1
                        for s in sizes:
                            numel *= s
                        start, n = tab.vector(2, 1, "data")
                        if numel * dt.itemsize > n:
                            raise OutOfBoundsError(
                                f"{numel * dt.itemsize} bytes of test data expected, {n} stored",
                                file=file, structure=f"{tab.path}.data", offset=start)
                        row.update(dtype=dt.name, shape=sizes, nbytes=numel * dt.itemsize,
                                   offset=start, stored=n,
                                   dim_order=tuple(tab.scalars(3, "B", "dim_order")))
                    elif t == 2 and tab is not None:
                        row["value"] = str(tab.i64(0))
                    elif t == 3 and tab is not None:
                        row["value"] = str(tab.bool(0))
                    elif t == 4 and tab is not None:
                        row["value"] = repr(tab.f64(0))
                    out.append(row)
    return out


def case_name(row: dict[str, Any]) -> str:
    """Stable name of one test value, e.g. ``forward/0/input/1`` (method/case/io/index)."""
    return f"{row['method']}/{row['case']}/{row['io']}/{row['index']}"


def _cases_columns(cases: list[dict[str, Any]], file: str) -> dict[str, list]:
    cols: dict[str, list] = {c: [] for c in ("name", "method", "case", "io", "index", "kind", "dtype",
                                             "shape", "nbytes", "file", "offset", "align", "value",
                                             "dim_order")}
    for r in cases:
        cols["name"].append(case_name(r))
        for c in ("method", "case", "io", "index", "kind", "dtype", "shape", "nbytes", "offset",
                  "value", "dim_order"):
            cols[c].append(r[c])
        cols["file"].append(file if r["offset"] is not None else None)
        cols["align"].append(align_of(r["offset"]))
    return cols


def _segments(src: Source, inner: Parsed, start: int, size: int,
              cases: list[dict[str, Any]]) -> dict[str, list]:
    cols = inner.extra["segments_raw"]()
    rows = [(0, 8, "flatbuffer root", "header", None, "root offset + BP08")]
    rows += list(zip(cols["offset"].tolist(), cols["size"].tolist(),
                     [f"program: {n}" for n in cols["name"].tolist()], cols["kind"].tolist(),
                     cols["index"].tolist(), cols["used_by"].tolist()))
    for r in cases:
        if r["offset"] is not None:
            rows.append((r["offset"], r["stored"], f"test data {case_name(r)}", "test_data",
                         None, ""))
    fb = ("BundledProgram", "flatbuffer")
    return cover(rows, src.path, 0, src.size, gap=fb, tail=fb)
