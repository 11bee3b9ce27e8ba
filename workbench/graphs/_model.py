"""The :class:`Graph` record and the column order of its ``nodes`` / ``edges`` frames."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["EDGE_COLUMNS", "NODE_COLUMNS", "Graph", "frame"]

#: ``nodes`` columns. Attributes are named after the frame columns they come from.
NODE_COLUMNS: dict[str, str] = {
    "method": "string",          # method (.pte), model (.pt2) or program (ETRecord)
    "id": "string",              # unique within the method
    "label": "string",           # what a viewer shows
    "kind": "string",            # input | output | constant | state | kernel | delegate |
    #                              delegate_input | delegate_output | delegate_node |
    #                              delegate_constant | call | missing
    "namespace": "string",       # '' or the group (layer) path, e.g. 'delegate0'
    "instruction": "Int64",      # instruction id (instruction nodes only)
    "position": "Int64",         # execution position of the instruction
    "op": "string",              # operator / XNNPACK node type / call target
    "delegate_index": "Int64",   # delegate the node calls or belongs to
    "backend": "string",         # backend of that delegate
    "value": "Int64",            # value index of a tensor node (input, output, constant, ...)
    "name": "string",            # tensor / node name
    "dtype": "string",           # dtype of the (first) tensor the node holds or writes
    "shape": "object",           # its shape
    "bytes": "Int64",            # tensor bytes, or a delegate blob's size
    "bytes_read": "Int64",       # instruction nodes: tensor bytes read
    "bytes_written": "Int64",    # instruction nodes: tensor bytes written
    "storage": "string",         # where a tensor's bytes are (tensors.storage vocabulary)
    "quant": "string",           # delegate tensors: quantization scheme
    "lifetime": "string",        # 'first..last' instruction positions the tensor is live
    "debug_handle": "Int64",     # XNNPACK node / ETRecord node debug handle
    "defect": "string",          # why the node is drawn as a defect (missing: none)
}
#: ``edges`` columns: one row per (producer, consumer, value).
EDGE_COLUMNS: dict[str, str] = {
    "method": "string",
    "source": "string",          # node id of the producer
    "target": "string",          # node id of the consumer
    "value": "Int64",            # value index (.pte) / XNNPACK value id inside a delegate
    "name": "string",            # tensor name
    "dtype": "string",
    "shape": "object",
    "bytes": "Int64",
    "lifetime": "string",
    "defect": "string",          # dangling value index, read before written (cycle), ...
}


def frame(columns: dict[str, str], data: dict[str, Any]) -> pd.DataFrame:
    """A frame with exactly ``columns`` (missing ones filled with NA), in order and dtype.

    Example:
        >>> frame({"a": "Int64", "b": "string"}, {"a": [1]}).dtypes.tolist()
        [Int64Dtype(), string[python]]
    """
    import pandas as pd

    n = max((len(v) for v in data.values()), default=0)
    out = {}
    for name, dtype in columns.items():
        values = data.get(name)
        if values is None:
            values = [None] * n
        if dtype == "object":
            out[name] = pd.Series(list(values), dtype=object)
        elif dtype == "Int64":
            out[name] = pd.array([None if v is None or v is pd.NA else int(v) for v in values],
                                 dtype="Int64")
        else:
            out[name] = pd.array([None if v is None or v is pd.NA else str(v) for v in values],
                                 dtype=dtype)
    return pd.DataFrame(out)


class Graph:
    """A program as a graph: ``nodes`` and ``edges`` frames (one row per node / per
    producer -> consumer value), for every method (or the one asked for).

    ``source`` is the artifact's path, ``format`` its format. A node's attributes are its
    columns (see ``workbench.graphs.NODE_COLUMNS``); Model Explorer shows them as node
    attributes (``workbench.model_explorer``); :meth:`to_svg` draws a static picture.
    A graph built from column lists (``columns=``) makes its frames on first use.

    Example:
        >>> import workbench as wb
        >>> g = wb.graph("sample_models/mlp_xnnpack.pte")        # doctest: +SKIP
        >>> g.nodes[["id", "kind", "op", "instruction", "delegate_index"]]  # doctest: +SKIP
    """

    def __init__(self, nodes: pd.DataFrame | None = None, edges: pd.DataFrame | None = None,
                 source: str = "", format: str = "", methods: list[str] | None = None, *,
                 columns: tuple[dict[str, list], dict[str, list]] | None = None) -> None:
        if columns is None and (nodes is None or edges is None):
            raise TypeError("Graph needs nodes and edges frames, or columns=")
        self._nodes, self._edges = nodes, edges
        self._columns = columns
        self.source, self.format = source, format
        self.methods: list[str] = list(methods) if methods is not None else []

    @property
    def nodes(self) -> pd.DataFrame:
        """One row per node, columns :data:`NODE_COLUMNS`."""
        if self._nodes is None:
            self._nodes = frame(NODE_COLUMNS, self._columns[0])
        return self._nodes

    @property
    def edges(self) -> pd.DataFrame:
        """One row per producer -> consumer value, columns :data:`EDGE_COLUMNS`."""
        if self._edges is None:
            self._edges = frame(EDGE_COLUMNS, self._columns[1])
        return self._edges

    def raw_columns(self) -> tuple[dict[str, list], dict[str, list]] | None:
        """The (node, edge) column lists this graph was built from (plain Python values,
        None: missing), or None for a graph built from frames. For fast consumers (Model
        Explorer's adapter) that would otherwise convert the frames back to values. The lists
        are the graph's own, not copies: read them, do not modify them.

        Example:
            >>> ncols, ecols = wb.graph("sample_models/mlp_portable.pte").raw_columns()  # doctest: +SKIP
        """
        return self._columns

    def method(self, name: str) -> Graph:
        """The sub-graph of one method.

        Example:
            >>> g = wb.graph("sample_models/multi_method.pte").method("encode")  # doctest: +SKIP
        """
        n = self.nodes[self.nodes["method"] == name].reset_index(drop=True)
        e = self.edges[self.edges["method"] == name].reset_index(drop=True)
        return Graph(n, e, self.source, self.format, [name])

    @property
    def defects(self) -> pd.DataFrame:
        """Nodes and edges drawn with a defect (dangling value index, cycle, ...).

        Example:
            >>> wb.graph("sample_models/mlp_portable.pte").defects.empty   # doctest: +SKIP
            True
        """
        import pandas as pd

        n = self.nodes[self.nodes["defect"].notna()].assign(element="node")
        e = self.edges[self.edges["defect"].notna()].assign(element="edge")
        cols = ["element", "method", "defect"]
        return pd.concat([n[[*cols, "id"]], e[[*cols, "source", "target", "value"]]],
                         ignore_index=True)

    def to_svg(self, method: str | None = None, *, max_nodes: int = 400) -> str:
        """A static SVG of one method (the first by default): nodes in execution order,
        delegates framed, defects in red. For readers without a live viewer (GitHub).

        Example:
            >>> svg = wb.graph("sample_models/mlp_xnnpack.pte").to_svg()  # doctest: +SKIP
            >>> svg.startswith("<svg")                                    # doctest: +SKIP
            True
        """
        from ._svg import svg

        name = method if method is not None else (self.methods[0] if self.methods else "")
        return svg(self.method(name), max_nodes=max_nodes)

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def __repr__(self) -> str:
        return (f"Graph({self.source!r}, {self.format}: {len(self.methods)} method(s), "
                f"{len(self.nodes)} nodes, {len(self.edges)} edges)")
