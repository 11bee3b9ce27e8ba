"""ExecuTorch runtime traces (ETDump, ``.etdp``): profiling, allocation and debug events,
read zero-copy without ``flatc`` and without torch.

Layout (facts from the format; table and field names are the schema's, see
:mod:`.schema`)::

    0   u32  size prefix: length of the flatbuffer that follows        (the runtime writes it)
    4   u32  root table offset (relative to byte 4)                    \\
    8   4s   file identifier "ED00"                                      |  the ETDump flatbuffer
    ... ETDump(version, run_data [RunData(name, bundled_input_index,     |  [4, 4 + size prefix)
        allocators, events [Event(profile | allocation | debug)])])    /
    anything after it: trailing bytes

A file written by ``flatc`` without ``--size-prefixed`` has the identifier at byte 4 and is
read the same way. The runtime opens one ``RunData`` block per phase: ``Default`` holds the
load (``Program::load_method``, ``Method::init``), each ``Execute`` block one execution.

Logged values (intermediate outputs with ``debug_buffer_size > 0``) store only a layout
and an offset; their bytes are in the *debug buffer* file the runtime writes next to the
trace. Pass it as ``data=[debug_buffer]`` (``wb.open(etdp, data=[...])`` or
:func:`read`) and ``art.tensor("<run>/<event index>")`` returns a zero-copy view.

Frames: ``segments``, ``runs``, ``events`` (profile events), ``allocations``,
``debug_values`` and ``tensors`` (the logged tensors whose bytes are attached; empty
without a debug buffer). Columns: :mod:`workbench.frames`.

Example:
    >>> import workbench as wb
    >>> art = wb.open("sample_models/mlp_portable.etdp",
    ...               data=["sample_models/mlp_portable.debug.bin"])   # doctest: +SKIP
    >>> art.frames["events"].groupby("name")["duration"].median()       # doctest: +SKIP
    >>> art.tensor("1/0")                                               # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ...errors import Finding
from ...flatbuf import FlatBuffer
from ...source import Source
from ..parsed import Parsed
from .columns import TraceColumns
from .reader import Header, read_records
from .schema import FILE_IDENTIFIER, VERSION, ETDump

__all__ = ["FORMAT", "MAGIC", "TAKES_DATA", "detect", "read"]

FORMAT = "etdump"
#: ``wb.open(path, data=[debug_buffer])`` passes the debug buffer to :func:`read`.
TAKES_DATA = True
MAGIC = FILE_IDENTIFIER


def detect(head: bytes) -> bool:
    """True when ``head`` starts an ETDump: ``ED00`` at bytes 8-12 (after the size prefix
    the runtime writes), or at 4-8 (a plain flatbuffer).

    Example:
        >>> detect(b"\\x10\\x00\\x00\\x00\\x08\\x00\\x00\\x00ED00")
        True
    """
    return head[8:12] == MAGIC or head[4:8] == MAGIC


def read(src: Source, data: Sequence[str | os.PathLike[str]] | None = None) -> Parsed:
    """Read the ETDump in ``src`` (verified, zero-copy) into a :class:`Parsed`.

    Args:
        src: the mapped ``.etdp`` file.
        data: at most one path: the debug buffer the runtime wrote with the trace
            (``write_etdump_result_to_file(etdump_path, debug_buffer_path)``). Its bytes
            are never read to list the trace; ``Artifact.tensor`` views them.

    Raises:
        ArtifactError: (a subclass of) for a bad trace.
        ValueError: more than one debug buffer was given.

    Example:
        >>> from workbench.source import Source
        >>> parsed = read(Source("sample_models/mlp_portable.etdp"))    # doctest: +SKIP
        >>> parsed.info["runs"], parsed.info["profile_events"]           # doctest: +SKIP
        (4, 53)
    """
    paths = [os.fspath(p) for p in (data or ())]
    if len(paths) > 1:
        raise ValueError(f"an ETDump takes one debug buffer, got {len(paths)}: {paths}")
    header = Header(src)
    fb = FlatBuffer(src, header.base, header.end, identifier=MAGIC, name="ETDump")
    root = fb.root("ETDump")
    version = root.u32(ETDump.version)
    records = read_records(src, fb, root)
    parsed = Parsed(format=FORMAT, path=src.path, sources={src.path: src})
    debug = Source(paths[0]) if paths else None
    try:
        if debug is not None:
            parsed.sources[debug.path] = debug
        cols = TraceColumns(src.path, src.size, header, records,
                            debug.path if debug else None, debug.size if debug else 0)
        _findings(parsed, src, header, version, records, debug)
    except BaseException:
        if debug is not None:
            debug.close()
        raise
    parsed.info.update({
        "version": version, "size_prefixed": header.size_prefixed,
        "flatbuffer_size": header.end - header.base,
        "runs": len(records.runs["pos"]), "profile_events": len(records.profile["run"]),
        "allocation_events": len(records.alloc["run"]),
        "debug_values": len(records.debug["run"]),
        "debug_buffer": debug.path if debug else None,
    })
    parsed.builders.update({
        "segments": cols.segments_columns, "tensors": cols.tensors_columns,
        "runs": cols.runs_columns, "events": cols.events_columns,
        "allocations": cols.allocations_columns, "debug_values": cols.debug_values_columns,
    })
    parsed.extra.etdump = cols
    return parsed


def _findings(parsed: Parsed, src: Source, header: Header, version: int, records: object,
              debug: Source | None) -> None:
    """Non-fatal observations: a newer schema version, events of unknown type, logged
    tensors that do not fit the attached debug buffer."""
    find = parsed.findings
    if version != VERSION:
        find.append(Finding("warning", "ETDump.version", header.base,
                            f"schema version {version} is newer than the known version "
                            f"{VERSION}; fields may be misread"))
    runs = records.runs  # type: ignore[attr-defined]
    unknown = int(runs["unknown"].sum())
    if unknown:
        find.append(Finding("warning", "ETDump.run_data[].events", None,
                            f"{unknown} events have none of profile_event, "
                            "allocation_event, debug_event set (a newer event type?): not listed"))
    d = records.debug  # type: ignore[attr-defined]
    if debug is not None:
        has = d["code"] >= 0
        past = has & (d["offset"] + d["nbytes"] > debug.size)
        if past.any():
            k = int(past.argmax())
            find.append(Finding("error", f"debug value {d['run'][k]}/{d['index'][k]}",
                                int(d["offset"][k]),
                                f"{int(past.sum())} logged tensors run past the end of the "
                                f"debug buffer {debug.name} (size 0x{debug.size:x}): wrong file?"))
