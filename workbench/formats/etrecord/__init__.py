"""ExecuTorch ETRecords: the ahead-of-time record (graphs, debug handle and delegate maps)
that names the events of an ETDump. Read without torch and without unpickling.

An ETRecord is a zip archive whose first member is the empty marker ``ETRECORD_V0`` (see
:mod:`.schema` for the members). It is detected by that marker, so it is never taken for a
``.pt2`` archive. The zip directory is verified by the shared zip layer; JSON members are
parsed within a size bound; ``torch.save`` members (state dicts, constants, example inputs,
reference outputs) are listed and flagged ``pickled``, never loaded.

Frames: ``segments`` (every byte of the archive), ``tensors`` (empty: an ETRecord's weights
are pickles), ``members``, ``programs`` (the serialized exported programs), ``nodes`` (their
graph nodes: name, target, debug handle, module, stack trace), ``debug_handles``
(instruction -> debug handles, with the edge-program node of each) and ``delegate_map``
(delegate instruction -> backend, delegate debug ids -> debug handles). Columns:
:mod:`workbench.frames`. The maps are read when the archive is opened; the programs when
``programs`` or ``nodes`` (or a join) is first built, so a corrupt program raises then.

Example:
    >>> import workbench as wb
    >>> rec = wb.open("sample_models/mlp_portable.etrecord")          # doctest: +SKIP
    >>> rec.frames["nodes"][["name", "op", "debug_handle", "module"]]  # doctest: +SKIP
    >>> rec.frames["debug_handles"]                                    # doctest: +SKIP
"""

from __future__ import annotations

import struct

from ...source import Source
from .._zip import LOCAL_MAGIC
from ..parsed import Parsed
from .columns import RecordColumns
from .reader import Archive
from .schema import MARKER

__all__ = ["FORMAT", "TAKES_DATA", "MAGIC", "detect", "read"]

FORMAT = "etrecord"
#: An ETRecord takes no ``data=``.
TAKES_DATA = False
MAGIC = MARKER.encode("ascii")
_NAME_LENGTH = struct.Struct("<H")
#: A zip local header is 30 bytes; the member name follows it.
_LOCAL_HEADER_SIZE = 30


def detect(head: bytes) -> bool:
    """True when ``head`` starts a zip archive whose first member is ``ETRECORD_V0``.

    Example:
        >>> head = b"PK\\x03\\x04" + bytes(22) + b"\\x0b\\x00\\x00\\x00" + b"ETRECORD_V0"
        >>> detect(head)
        True
    """
    end = _LOCAL_HEADER_SIZE + len(MAGIC)
    if len(head) < end or head[:4] != LOCAL_MAGIC:
        return False
    (n,) = _NAME_LENGTH.unpack_from(head, 26)
    return n == len(MAGIC) and head[_LOCAL_HEADER_SIZE:end] == MAGIC


def read(src: Source) -> Parsed:
    """Read the ETRecord in ``src`` (verified, zero-copy, nothing unpickled) into a
    :class:`Parsed`.

    Raises:
        ArtifactError: (a subclass of) for a bad archive or bad JSON in a map.

    Example:
        >>> from workbench.source import Source
        >>> parsed = read(Source("sample_models/mlp_xnnpack.etrecord"))   # doctest: +SKIP
        >>> parsed.info["programs"]                                        # doctest: +SKIP
        ['exported_program', 'edge_dialect_exported_program/forward']
    """
    arc = Archive(src)
    parsed = Parsed(format=FORMAT, path=src.path, sources={src.path: src})
    cols = RecordColumns(arc)
    parsed.info.update({
        "members": len(arc.zip.names), "programs": list(arc.program_names),
        "export_graph_id": arc.export_graph_id,
        "pickled_members": sum(arc.pickled),
    })
    parsed.findings.extend(arc.findings)
    parsed.builders.update({
        "segments": cols.segments_columns, "tensors": cols.tensors_columns,
        "members": cols.members_columns, "programs": cols.programs_columns,
        "nodes": cols.nodes_columns, "debug_handles": cols.debug_handles_columns,
        "delegate_map": cols.delegate_map_columns,
    })
    parsed.extra.zip = arc.zip
    parsed.extra.etrecord = arc
    return parsed
