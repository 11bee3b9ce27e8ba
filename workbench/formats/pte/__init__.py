"""ExecuTorch programs (``.pte``): the ``ET12`` flatbuffer, its ``eh00`` extended header
and the segments appended after it (see :mod:`.header` for the byte layout).

The package: :mod:`.header` (identifier and extended header), :mod:`.schema` (slots and
codes of ``program.fbs``), :mod:`.program` (the flatbuffer walk), :mod:`.tensors` (where a
tensor is read and placed: fast and scalar path), :mod:`.external` (attaching ``.ptd`` data),
:mod:`.columns` (the frames).

:func:`read` verifies the header and every structure it visits, and returns a
:class:`~workbench.formats.parsed.Parsed` whose frame builders never touch weight bytes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from functools import partial

from ... import memory_plan
from ...errors import ArtifactError, Finding
from ...source import Source
from .._layout import segments_frame
from ..parsed import FrameView, Parsed
from .columns import Columns
from .delegated import DelegateBlobs
from .external import External
from .header import (
    EXTENDED_HEADER_LENGTH,
    EXTENDED_HEADER_MAGIC,
    EXTENDED_HEADER_MIN_LENGTH,
    MAGIC,
    ExtendedHeader,
)
from .instructions import InstructionColumns
from .program import ProgramReader
from .schema import VALUE_TYPES
from .tensors import STORAGES

__all__ = ["EXTENDED_HEADER_LENGTH", "EXTENDED_HEADER_MAGIC", "EXTENDED_HEADER_MIN_LENGTH",
           "FORMAT", "TAKES_DATA", "MAGIC", "STORAGES", "VALUE_TYPES", "ExtendedHeader", "ProgramReader",
           "detect", "read", "read_program", "sibling_data_files"]

FORMAT = "pte"
#: ``wb.open(path, data=[...])`` gives the program's ``.ptd`` files (parsed, to :func:`read`).
TAKES_DATA = True


def detect(head: bytes) -> bool:
    """True when ``head`` (the first bytes of a file) looks like an ExecuTorch program.

    Any ``ET``+two digits identifier counts, so unsupported versions get a clear error.

    Example:
        >>> detect(b"\\x20\\x00\\x00\\x00ET12eh00")
        True
    """
    return len(head) >= 8 and head[4:6] == b"ET" and head[6:8].isdigit()


def read(src: Source, data: Sequence[Parsed] = (), siblings: Iterable[Parsed] = ()) -> Parsed:
    """Read the ``.pte`` in ``src`` (verified, zero-copy) into a :class:`Parsed`.

    Args:
        src: the program file.
        data: parsed ``.ptd`` files given explicitly: always attached.
        siblings: parsed ``.ptd`` files found next to the program, best first (may be a lazy
            iterator: it is consumed only while the program has unresolved keys); attached
            only when they hold a key the program refers to (an external tensor's name and
            layout, or a content-hash key that a delegate blob mentions).
    """
    return read_program(src, 0, src.size, outer=FORMAT, data=data, siblings=siblings)


def read_program(src: Source, start: int, end: int, outer: str = FORMAT,
                 data: Sequence[Parsed] = (), siblings: Iterable[Parsed] = ()) -> Parsed:
    """Read a program stored in ``src[start:end)`` (``start`` > 0 for one embedded in a .bpte)."""
    r = ProgramReader(src, start, end)
    r.parse()
    ext = External(src, r.methods, r.named_keys.tolist())
    ext.attach(data, siblings)
    blobs = DelegateBlobs(r, ext)
    ext.parsed_keys = blobs.parsed_named_keys
    cols = Columns(r, ext, blobs)
    icols = InstructionColumns(r)
    sources = {r.file: src}
    for d in ext.data:
        sources.update(d.sources)
    p = Parsed(format=outer, path=r.file, sources=sources)
    p.info.update({
        "data_files": [d.path for d in ext.data],
        "version": r.version, "program_size": r.program_size,
        "segment_base_offset": (r.segment_base - r.start) if r.segment_base else 0,
        "extended_header": r.header,
    })
    p.builders.update({
        "segments": lambda: segments_frame(cols.segments_raw()),
        "tensors": cols.tensors,
        "methods": cols.methods,
        "values": cols.values,
        "operators": lambda: cols.operators(_kernel_keys(icols, r.findings)),
        "delegates": cols.delegates,
        "named_data": cols.named_data,
        "delegate_tensors": blobs.tensor_columns,
        "delegate_nodes": blobs.node_columns,
        "memory_plan": cols.memory_plan,
        "instructions": icols.instructions,
        "lifetimes": icols.lifetimes,
        # (an analysis of the plan: a view over the lifetimes frame, see workbench.memory_plan)
        "memory_efficiency": FrameView(("lifetimes",), partial(
            memory_plan.efficiency, arenas=[(m.name, m.buffer_sizes) for m in r.methods])),
    })
    p.tensor_frames.append("delegate_tensors")  # Artifact.tensor reads graph constants too
    p.extra.segments_raw = cols.segments_raw
    p.extra.delegate_blobs = blobs
    # for validate(): how each data file came, and whether other .ptd files fit too
    p.extra.data_choice = ext.data_choice
    p.extra.resolves = ext.resolves
    # (a callable: the content-hash keys are found by scanning the blobs, done on demand)
    p.extra.wanted_keys = lambda: len(ext.wants) + len(ext.hex_wanted)
    p.extra.span = (r.start, r.end)  # the bytes of the file this program covers
    p.findings = r.findings  # shared: frame builders add findings lazily
    return p


def _kernel_keys(icols: InstructionColumns, findings: list) -> list:
    """The operators' kernel keys; none (with a finding) when the instructions cannot be read:
    the operator table itself stays readable."""
    try:
        return icols.kernel_keys()
    except ArtifactError as e:
        findings.append(Finding("warning", e.structure or "instructions", e.offset,
                                "kernel keys not derived (the "
                                f"instructions cannot be read): {e.detail}"))
        return []


def sibling_data_files(path: str) -> list[str]:
    """``.ptd`` files in the same folder as ``path``, candidates for its external data: the
    one named like the program first, then the rest in name order."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    base = os.path.dirname(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    found = [n for n in names if n.endswith(".ptd") and os.path.isfile(os.path.join(folder, n))]
    found.sort(key=lambda n: n[:-4] != stem)
    return [os.path.join(base, n) for n in found]
