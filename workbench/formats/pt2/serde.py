"""Data flow of a ``torch._export.serde`` graph (the JSON that ``.pt2`` archives and ETRecords
store): which values a node reads and writes, and each tensor value's dtype and shape.

Shared by the ``.pt2`` ``graph_nodes`` frame and the ETRecord ``nodes`` frame. Pure JSON
walking over an already checked document: nothing is imported from torch, nothing executed.
Arguments are ``{"as_tensor": {"name": n}}``, ``{"as_tensors": [{"name": n}, ...]}``,
``{"as_optional_tensors": [{"as_tensor": {...}} | {"as_none": ...}]}``, symbolic values
``{"as_sym_int": {"as_name": n}}`` and so on; every ``as_*`` key whose payload carries a
``name`` (or an ``as_name``) names a value. Anything else (ints, floats, strings) is a literal.

Example:
    >>> node = {"inputs": [{"name": "self", "arg": {"as_tensor": {"name": "x"}}},
    ...                    {"name": "k", "arg": {"as_int": 3}}],
    ...         "outputs": [{"as_tensor": {"name": "y"}}]}
    >>> node_io(node)
    (('x',), ('y',))
"""

from __future__ import annotations

from typing import Any

from .schema import AS_INT, SERDE_DTYPES, SIZES

__all__ = ["MAX_NAMES", "node_io", "tensor_meta", "value_names"]

#: At most this many value names are collected per node side (a hostile document cannot make
#: one node's tuple unbounded; the rest of the document is still read).
MAX_NAMES = 4096
_DTYPE = "dtype"


def value_names(arg: Any, out: list[str]) -> None:
    """Append every value name inside one serialized argument to ``out`` (iterative walk).

    Example:
        >>> names: list[str] = []
        >>> value_names({"as_tensors": [{"name": "a"}, {"name": "b"}]}, names)
        >>> names
        ['a', 'b']
    """
    stack = [arg]
    while stack and len(out) < MAX_NAMES:
        a = stack.pop()
        if isinstance(a, list):
            stack.extend(reversed(a))
        elif isinstance(a, dict):
            for k, v in a.items():
                if not (isinstance(k, str) and k.startswith("as_")):
                    continue
                if isinstance(v, dict) and isinstance(v.get("name"), str):
                    out.append(v["name"])
                elif isinstance(v, dict) and isinstance(v.get("as_name"), str):
                    out.append(v["as_name"])
                elif isinstance(v, list):  # as_tensors: [{"name": ...}, ...] (each its own arg)
                    stack.extend({"as_item": item} for item in reversed(v))
                elif isinstance(v, dict):
                    stack.append(v)


def node_io(node: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(names read, names written) of one serialized node, in argument order.

    Example:
        >>> node_io({"inputs": [{"arg": {"as_tensors": [{"name": "a"}, {"name": "b"}]}}],
        ...          "outputs": [{"as_tensor": {"name": "c"}}]})
        (('a', 'b'), ('c',))
    """
    reads: list[str] = []
    writes: list[str] = []
    inputs = node.get("inputs")
    if isinstance(inputs, list):
        for inp in inputs:
            if isinstance(inp, dict):
                value_names(inp.get("arg"), reads)
    value_names(node.get("outputs"), writes)
    return tuple(reads), tuple(writes)


def tensor_meta(values: Any, name: str) -> tuple[str | None, tuple[int, ...] | None]:
    """(torch dtype name, shape) of tensor value ``name`` in a graph's ``tensor_values`` map;
    ``(None, None)`` when it is not there or malformed; symbolic sizes read as -1.

    Example:
        >>> tensor_meta({"x": {"dtype": 7, "sizes": [{"as_int": 2}, {"as_expr": {}}]}}, "x")
        ('float32', (2, -1))
    """
    meta = values.get(name) if isinstance(values, dict) else None
    if not isinstance(meta, dict):
        return None, None
    code = meta.get(_DTYPE)
    dtype = SERDE_DTYPES.get(code) if isinstance(code, int) and not isinstance(code, bool) else None
    sizes = meta.get(SIZES)
    shape = None
    if isinstance(sizes, list):
        shape = tuple(s[AS_INT] if isinstance(s, dict) and isinstance(s.get(AS_INT), int)
                      and not isinstance(s.get(AS_INT), bool) else -1 for s in sizes)
    return dtype, shape
