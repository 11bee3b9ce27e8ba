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

from ...errors import CorruptError
from ...flatbuf import FlatBuffer
from ...source import Source
from .. import pte
from .._ident import expect_identifier
from .._layout import segments_frame
from ..parsed import Parsed
from . import columns
from .reader import case_name, test_cases
from .schema import BundledProgram

__all__ = ["FORMAT", "TAKES_DATA", "MAGIC", "case_name", "detect", "read"]

FORMAT = "bpte"
#: A bundled program takes no ``data=``.
TAKES_DATA = False
MAGIC = b"BP08"


def detect(head: bytes) -> bool:
    """True when ``head`` looks like a bundled program (``BP`` + two digits at byte 4).

    Example:
        >>> detect(b"\\x10\\x00\\x00\\x00BP08")
        True
    """
    return len(head) >= 8 and head[4:6] == b"BP" and head[6:8].isdigit()


def read(src: Source) -> Parsed:
    """Read the ``.bpte`` in ``src``: the embedded program in place, plus its test cases."""
    expect_identifier(src, MAGIC, "bundled program")
    fb = FlatBuffer(src, 0, src.size, identifier=MAGIC, name="BundledProgram")
    root = fb.root("BundledProgram")
    version = root.u32(BundledProgram.version)
    prog_start, prog_size = root.vector(BundledProgram.program, 1, "program")
    if not prog_size:
        raise CorruptError("the bundled program holds no program", file=src.path,
                           structure="BundledProgram.program", offset=root.pos)
    inner = pte.read_program(src, prog_start, prog_start + prog_size, outer="pte")
    cases = test_cases(root, src.path)

    parsed = Parsed(format=FORMAT, path=src.path, sources={src.path: src})
    parsed.info.update({"bundled_version": version, "program_offset": prog_start,
                        "program_size_in_bundle": prog_size})
    parsed.info.update({k: v for k, v in inner.info.items() if k not in ("data_files",)})
    parsed.builders.update(inner.builders)
    parsed.builders["segments"] = lambda: segments_frame(columns.segments_raw(src, inner, cases))
    parsed.builders["test_cases"] = lambda: columns.test_cases(cases, src.path)
    parsed.tensor_frames = ["tensors", "test_cases"]
    parsed.findings = inner.findings  # shared: the inner builders add findings lazily
    parsed.extra.program = inner
    return parsed
