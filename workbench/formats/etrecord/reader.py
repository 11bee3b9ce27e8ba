"""Reading an ETRecord archive: its zip directory, member classes, the JSON maps and the
graph nodes of its serialized exported programs (private).

Nothing is unpickled and torch is never imported: pickled members are recognised by their
first bytes and listed. JSON members are parsed with :mod:`json` within a size bound; any
problem (bad JSON, wrong types, too deep nesting) is a :class:`~workbench.errors.CorruptError`
naming the member and where in it.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

from ..._json import loads as checked_loads
from ...errors import CorruptError, Finding
from ...limits import JSON_MAX_BYTES
from ...source import Source
from .._zip import LOCAL_MAGIC, ZipDirectory, ZipEntry
from ..pt2.serde import node_io, tensor_meta
from . import schema as S

#: Largest JSON member parsed (a graph with ~100k nodes and stack traces is far smaller).
JSON_LIMIT = JSON_MAX_BYTES
_PICKLE_PROTOCOLS = (2, 3, 4, 5)
#: Absolute, drive-qualified, backslash, control character or a ``..`` component.
_UNSAFE = re.compile(r"^[/\\]|^[A-Za-z]:|\\|[\x00-\x1f\x7f-\x9f]|(?:^|/)\.\.(?:/|$)")


class Node:
    """One graph node (a row of the ``nodes`` frame)."""

    __slots__ = ("debug_handle", "dtypes", "graph", "index", "inputs", "module", "module_stack",
                 "module_type", "name", "outputs", "shapes", "stack_trace", "target", "torch_fn")

    def __init__(self, graph: str, index: int, name: str, target: str, debug_handle: int | None,
                 module_stack: str | None, stack_trace: str | None, torch_fn: str | None) -> None:
        self.graph = graph
        self.index = index
        self.name = name
        self.target = target
        self.debug_handle = debug_handle
        self.module_stack = module_stack
        self.module, self.module_type = _innermost_module(module_stack)
        self.stack_trace = stack_trace
        self.torch_fn = torch_fn
        #: value names read / written (see :mod:`workbench.formats.pt2.serde`) and the
        #: dtype / shape of each written value (None where the graph does not say)
        self.inputs: tuple[str, ...] = ()
        self.outputs: tuple[str, ...] = ()
        self.dtypes: tuple[str | None, ...] = ()
        self.shapes: tuple[tuple[int, ...] | None, ...] = ()


class Program:
    """A serialized exported program member: facts and (after :meth:`Archive.program`) nodes."""

    __slots__ = ("dialect", "member", "method", "nodes", "schema_version", "stage")

    def __init__(self, member: str) -> None:
        self.member = member
        self.stage, self.method = S.program_stage(member)
        self.nodes: list[Node] = []
        self.schema_version: str | None = None
        self.dialect: str | None = None


class Archive:
    """The verified directory and JSON maps of one ETRecord (programs are parsed on demand).

    Attributes:
        zip: the :class:`~workbench.formats._zip.ZipDirectory`.
        kinds, programs_of: per member, its kind and the program it belongs to.
        pickled: per member, whether its content is a pickle (never loaded).
        debug_handles: rows ``(method, instruction, position, debug_handle)``.
        delegates: rows ``(method, instruction, backend, delegate_debug_id, position,
            debug_handle)`` (id and handle ``None`` for a delegate without a map).
        export_graph_id: the ``export_graph_id`` member's value, if any.
        damaged: per member, its local header or data cannot be located (the zip layer is
            tolerant here, as Python's ``zipfile`` is: the archive opens, each damaged member
            is an ``error`` finding, and what is built from it is empty).
        findings: non-fatal observations.
    """

    def __init__(self, src: Source) -> None:
        self.src = src
        self.path = src.path
        self.zip = ZipDirectory(src, tolerant=True)
        if S.MARKER not in self.zip.index:
            raise CorruptError(f"no {S.MARKER} marker member: not an ETRecord",
                               file=self.path, structure="zip central directory",
                               offset=self.zip.cd_offset)
        self.findings: list[Finding] = []
        self.kinds: list[str] = []
        self.programs_of: list[str | None] = []
        self.pickled: list[bool] = []
        self.unsafe: list[bool] = []
        self.damaged: list[bool] = self.zip.damaged.tolist()
        for i, err in self.zip.problems:
            self.findings.append(Finding("error", err.structure, err.offset,
                                         f"member {self.zip.names[i]!r} cannot be read (nor by Python's "
                                         f"zipfile): {err.detail}; frames built from it are empty"))
        for i, name in enumerate(self.zip.names):
            kind, program = S.member_kind(name)
            e = self.zip.entry(i)
            if self.damaged[i]:
                pickled = False
            else:
                pickled = self._is_pickle(e)
            if kind == "program" and not self.damaged[i] and not self._looks_like_json(e):
                kind, program = "other", None
            self.kinds.append(kind)
            self.programs_of.append(program)
            self.pickled.append(pickled or kind in ("state_dict", "constants", "example_inputs",
                                                    "reference_outputs", "representative_inputs"))
            self.unsafe.append(_UNSAFE.search(name) is not None)
        for name in self.zip.duplicates:
            self.findings.append(Finding("warning", f"zip member {name!r}", None,
                                         "the name occurs more than once; "
                                         "the first member is used"))
        self._programs: dict[str, Program] = {}
        index = self.zip.index
        self.program_names = [n for i, (n, k) in enumerate(zip(self.zip.names, self.kinds))
                              if k == "program" and index[n] == i]
        self.debug_handles = self._debug_handle_map()
        self.delegates = self._delegate_map()
        gid = self._json_member(S.EXPORT_GRAPH_ID)
        self.export_graph_id = gid if isinstance(gid, int) and not isinstance(gid, bool) else None

    # -- members ------------------------------------------------------------------------------
    def _is_pickle(self, e: ZipEntry) -> bool:
        """Pickle protocol 2-5, or a ``torch.save`` zip (which holds a ``data.pkl``)."""
        if e.compressed or e.compressed_size < 2:
            return False
        buf = self.src.buf
        start = e.data_offset
        if buf[start] == 0x80 and buf[start + 1] in _PICKLE_PROTOCOLS:
            return True
        return e.compressed_size >= 4 and bytes(buf[start:start + 4]) == LOCAL_MAGIC

    def _looks_like_json(self, e: ZipEntry) -> bool:
        """The first non-blank byte of a stored member is ``{`` (compressed: assumed)."""
        if e.compressed:
            return True
        head = bytes(self.src.buf[e.data_offset:e.data_offset + min(e.compressed_size, 64)])
        return head.lstrip()[:1] == b"{"

    def _corrupt(self, e: ZipEntry, where: str, detail: str, offset: int | None = None
                 ) -> CorruptError:
        what = f"zip member {e.name!r}" + (f" {where}" if where else "")
        return CorruptError(detail, file=self.path, structure=what,
                            offset=e.data_offset if offset is None else offset)

    def _json(self, e: ZipEntry) -> Any:
        """The member's JSON value (bounded size; every failure a CorruptError)."""
        raw = self.zip.content(e, JSON_LIMIT)
        return checked_loads(raw, file=self.path, structure=f"zip member {e.name!r}",
                             offset=e.data_offset if not e.compressed else None)

    def _json_member(self, name: str) -> Any:
        e = self._readable(name)
        return None if e is None else self._json(e)

    def _readable(self, name: str) -> ZipEntry | None:
        """The (first) member ``name`` unless it is absent or damaged."""
        e = self.zip.get(name)
        return None if e is None or self.damaged[e.index] else e

    # -- maps ---------------------------------------------------------------------------------
    def _method_level(self, e: ZipEntry, value: Any, flat: tuple[str, ...]
                      ) -> list[tuple[str | None, dict]]:
        """``[(method, {instruction: ...})]`` from ``{method: {...}}``, or ``[(None, value)]``
        for a map without the method level (older writers): there the values are not
        objects, or are objects with one of the ``flat`` keys."""
        if not isinstance(value, dict):
            raise self._corrupt(e, "", f"expected a JSON object, got {type(value).__name__}")
        if all(isinstance(v, dict) and not any(k in v for k in flat) for v in value.values()):
            return [(str(m), v) for m, v in value.items()]
        return [(None, value)]

    def _instruction(self, e: ZipEntry, method: str | None, key: str) -> int:
        if not (key.isascii() and key.isdigit() and len(key) < 19):
            raise self._corrupt(e, f"[{method!r}]" if method else "",
                                f"instruction key {key[:40]!r} is not a non-negative integer")
        return int(key)

    def _handles(self, e: ZipEntry, where: str, value: Any) -> list[int]:
        items = value if isinstance(value, list) else [value]
        for h in items:
            if not isinstance(h, int) or isinstance(h, bool):
                raise self._corrupt(e, where, f"debug handle {str(h)[:40]!r} is not an integer")
            if not -2**63 <= h < 2**63:
                raise self._corrupt(e, where, f"debug handle {str(h)[:40]!r} does not fit in "
                                    "64 bits")
        return items

    def _debug_handle_map(self) -> list[tuple]:
        e = self._readable(S.DEBUG_HANDLE_MAP)
        if e is None:
            return []
        rows = []
        for method, m in self._method_level(e, self._json(e), ()):
            for key, value in m.items():
                instr = self._instruction(e, method, key)
                for pos, h in enumerate(self._handles(e, f"[{method!r}][{key!r}]", value)):
                    rows.append((method, instr, pos, h))
        return rows

    def _delegate_map(self) -> list[tuple]:
        e = self._readable(S.DELEGATE_MAP)
        if e is None:
            return []
        rows = []
        for method, m in self._method_level(e, self._json(e), ("name", "delegate_map")):
            for key, value in m.items():
                where = f"[{method!r}][{key!r}]"
                instr = self._instruction(e, method, key)
                if not isinstance(value, dict):
                    raise self._corrupt(e, where, "a delegate entry is not a JSON object")
                backend = value.get("name")
                inner = value.get("delegate_map") or {}
                if backend is not None and not isinstance(backend, str):
                    raise self._corrupt(e, where, "the backend name is not a string")
                if not isinstance(inner, dict):
                    raise self._corrupt(e, where, "delegate_map is not a JSON object")
                if not inner:
                    rows.append((method, instr, backend, None, None, None))
                for ident, handles in inner.items():
                    for pos, h in enumerate(self._handles(e, f"{where}[{ident!r}]", handles)):
                        rows.append((method, instr, backend, str(ident), pos, h))
        return rows

    # -- programs -----------------------------------------------------------------------------
    def program(self, name: str) -> Program:
        """The program member ``name`` with its nodes (parsed once)."""
        p = self._programs.get(name)
        if p is None:
            p = self._read_program(name)
            self._programs[name] = p
        return p

    def _read_program(self, name: str) -> Program:
        e = self.zip.get(name)
        assert e is not None
        p = Program(name)
        if self.damaged[e.index]:
            return p  # no nodes: the finding says why
        j = self._json(e)
        if not isinstance(j, dict):
            raise self._corrupt(e, "", "the serialized program is not a JSON object")
        sv = j.get(S.SCHEMA_VERSION)
        if isinstance(sv, dict):
            p.schema_version = f"{sv.get('major')}.{sv.get('minor')}"
        elif isinstance(sv, (int, str)) and not isinstance(sv, bool):
            p.schema_version = str(sv)
        dialect = j.get(S.DIALECT)
        p.dialect = dialect if isinstance(dialect, str) else None
        gm = j.get(S.GRAPH_MODULE)
        if not isinstance(gm, dict) or not isinstance(gm.get(S.GRAPH), dict):
            raise self._corrupt(e, S.GRAPH_MODULE, "graph_module.graph is missing or not an object")
        queue: deque[tuple[str, Any, str]] = deque([("", gm[S.GRAPH], "graph_module.graph")])
        while queue:
            gname, graph, where = queue.popleft()
            if not isinstance(graph, dict):
                raise self._corrupt(e, where, "a graph is not a JSON object")
            nodes = graph.get(S.NODES, [])
            if not isinstance(nodes, list):
                raise self._corrupt(e, f"{where}.nodes", "nodes is not a list")
            values = graph.get("tensor_values")
            for i, node in enumerate(nodes):
                nd = self._node(e, f"{where}.nodes[{i}]", gname, i, node, queue)
                nd.inputs, nd.outputs = node_io(node)
                metas = [tensor_meta(values, name) for name in nd.outputs]
                nd.dtypes = tuple(m[0] for m in metas)
                nd.shapes = tuple(m[1] for m in metas)
                p.nodes.append(nd)
        return p

    def _node(self, e: ZipEntry, where: str, gname: str, i: int, node: Any,
              queue: deque) -> Node:
        if not isinstance(node, dict):
            raise self._corrupt(e, where, "a node is not a JSON object")
        target = node.get(S.NODE_TARGET)
        if not isinstance(target, str):
            raise self._corrupt(e, where, "the node target is not a string")
        meta = node.get(S.NODE_METADATA)
        if meta is None:
            meta = {}
        elif not isinstance(meta, dict):
            raise self._corrupt(e, f"{where}.metadata", "metadata is not a JSON object")
        name = node.get(S.NODE_NAME)
        if not isinstance(name, str):
            name = _output_name(node.get(S.NODE_OUTPUTS))
        inputs = node.get(S.NODE_INPUTS) or []
        if isinstance(inputs, list):
            for k, arg in enumerate(inputs):
                a = arg.get("arg") if isinstance(arg, dict) else None
                sub = a.get(S.AS_GRAPH) if isinstance(a, dict) else None
                if isinstance(sub, dict):
                    sub_name = sub.get("name")
                    label = sub_name if isinstance(sub_name, str) else f"{name}.{k}"
                    queue.append((f"{gname}/{label}" if gname else label, sub.get(S.GRAPH),
                                  f"{where}.inputs[{k}].arg.as_graph.graph"))

        def text(key: str) -> str | None:
            v = meta.get(key)
            return v if isinstance(v, str) else None

        return Node(gname, i, name, target, _handle(meta.get(S.META_DEBUG_HANDLE)),
                    text(S.META_MODULE_STACK), text(S.META_STACK_TRACE), text(S.META_TORCH_FN))


def _handle(v: Any) -> int | None:
    """A node's debug handle: an int, or the decimal string the serializer writes."""
    if isinstance(v, bool):
        return None
    if isinstance(v, str) and v.strip().lstrip("-").isdigit() and len(v) < 21:
        v = int(v)
    if isinstance(v, int) and -2**63 <= v < 2**63:  # (a handle past int64 is no handle)
        return v
    return None


def _output_name(outputs: Any) -> str:
    """The name of a node's first output (nodes of older serializers have no ``name``)."""
    if isinstance(outputs, list) and outputs and isinstance(outputs[0], dict):
        for v in outputs[0].values():
            if isinstance(v, dict) and isinstance(v.get("name"), str):
                return v["name"]
            if isinstance(v, list) and v and isinstance(v[0], dict) \
                    and isinstance(v[0].get("name"), str):
                return v[0]["name"]
    return ""


def _innermost_module(stack: str | None) -> tuple[str | None, str | None]:
    """(path, type) of the innermost module of a serialized ``nn_module_stack``:
    ``key,path,type`` entries joined by ``;``.

    Example:
        >>> _innermost_module("L__self__,,m.MLP;L__self__fc1,fc1,torch.nn.Linear")
        ('fc1', 'torch.nn.Linear')
    """
    if not stack:
        return None, None
    last = stack.rsplit(";", 1)[-1]
    parts = last.split(",", 2)
    if len(parts) != 3:
        return None, None
    return parts[1], parts[2]
