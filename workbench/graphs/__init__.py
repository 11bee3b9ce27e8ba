"""The program as a graph: a view over an artifact's frames (never a second parse).

``wb.graph(artifact, method=None)`` returns a :class:`Graph` with ``nodes`` and ``edges``
frames. For a ``.pte``: one node per KernelCall / DelegateCall instruction plus input,
output and constant nodes; edges producer -> consumer from the value indices with the
tensor's name, dtype, shape and bytes; XNNPACK delegates expand into their own nodes inside
a group. For a ``.pt2``: the graph of ``models/<model>.json``; for an ETRecord: its edge
programs. ``wb.delegation(program)`` summarises per method what the delegates took.

Example:
    >>> import workbench as wb
    >>> g = wb.graph("sample_models/mlp_xnnpack.pte")                  # doctest: +SKIP
    >>> g.nodes.groupby("kind").size()                                  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._delegation import delegate_op_times, match_ops, node_times
from ._model import EDGE_COLUMNS, NODE_COLUMNS, Graph

if TYPE_CHECKING:
    import pandas as pd

    from ..artifact import Artifact

__all__ = ["EDGE_COLUMNS", "NODE_COLUMNS", "Graph", "as_artifact", "delegate_op_times",
           "delegation", "graph", "match_ops", "node_times"]


def as_artifact(artifact: Any) -> Artifact:
    """An opened :class:`~workbench.Artifact` (a path is opened; a ``.bpte`` gives its
    program; anything else with ``frames`` and ``format`` is taken as it is).

    Example:
        >>> as_artifact("sample_models/mlp.bpte").format                  # doctest: +SKIP
        'pte'
    """
    from .._open import open as wb_open
    from ..artifact import Artifact

    if isinstance(artifact, Artifact) or (hasattr(artifact, "frames")
                                          and hasattr(artifact, "format")):
        art = artifact
    else:
        art = wb_open(artifact)
    if art.format == "bpte":
        art = art.program
    return art


def graph(artifact: Any, method: str | None = None) -> Graph:
    """The graph of a ``.pte`` / ``.bpte`` program, a ``.pt2`` exported program or an
    ETRecord's edge programs (one per method); ``method`` picks one.

    Raises ``ArtifactError`` for a file the workbench cannot open (a defect inside an opened
    program is drawn: see :attr:`Graph.defects`), ``KeyError`` for an unknown method and
    ``ValueError`` for a format without a graph (``.ptd``, ``.etdp``).

    Example:
        >>> import workbench as wb
        >>> g = wb.graph("sample_models/mlp_portable.pte")                  # doctest: +SKIP
        >>> (g.nodes["kind"] == "kernel").sum()                             # doctest: +SKIP
        5
    """
    art = as_artifact(artifact)
    if art.format == "pte":
        from ._pte import pte_columns

        ncols, ecols, names = pte_columns(art, method)
        return Graph(source=str(art.path), format=art.format, methods=names,
                     columns=(ncols, ecols))
    if art.format in ("pt2", "etrecord"):
        from ._exported import exported_frames

        nodes, edges, names = exported_frames(art, method)
    else:
        raise ValueError(f"{art.path}: a {art.format} file has no graph (use a .pte, .bpte, "
                         ".pt2 or ETRecord)")
    return Graph(nodes, edges, str(art.path), art.format, names)


def delegation(program: Any, etdump: Any = None) -> pd.DataFrame:
    """Per method of a ``.pte``: operators and bytes inside delegates vs outside, partitions
    and the graph breaks between them, and (with an ETDump) the time share.

    Example:
        >>> import workbench as wb
        >>> wb.delegation("sample_models/llm_tiny.pte")[["method", "partitions"]]  # doctest: +SKIP
    """
    from ._delegation import delegation_frame

    return delegation_frame(as_artifact(program), etdump)
