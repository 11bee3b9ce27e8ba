"""The serialized-graph scanner: node targets and signature counts of ``models/<model>.json``
(a ``torch._export.serde`` ExportedProgram) without building the document when it is large."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from ..._json import loads as checked_loads
from ...errors import CorruptError
from ...limits import JSON_MAX_DEPTH, LimitError
from .._zip import ZipEntry
from .schema import (
    CANONICAL_GRAPH_HEAD,
    CONSTANT_INPUTS,
    FULL_PARSE_LIMIT,
    GRAPH_MODULE,
    INPUT_KINDS,
    INPUT_SPECS,
    OUTPUT_SPECS,
    SCHEMA_VERSION,
    SIGNATURE,
    TARGET,
    TORCH_VERSION,
    USER_OUTPUT,
)
from .serde import node_io, tensor_meta, value_names

__all__ = ["FULL_PARSE_LIMIT", "NODE_COLUMNS", "graph_nodes", "graph_stats"]

_T = TARGET.encode()
_KINDS = "|".join(INPUT_KINDS).encode()
#: A ``"target"`` key right after ``{`` or ``", "`` and its string value (the look-behinds
#: come after the literal, so the search still runs at the speed of a literal search).
_TARGET_CANONICAL = re.compile(rb'"' + _T + rb'": "(?:(?<=, "' + _T + rb'": ")|(?<=\{"' + _T
                               + rb'": "))([^"\\]*(?:\\.[^"\\]*)*)"')
_STRING_VALUE = re.compile(rb'\s*:\s*"([^"\\]*(?:\\.[^"\\]*)*)"')
_LIST_VALUE = re.compile(rb"\s*:\s*\[")
#: A spec in a list written with json.dumps' default separators: '[{"kind": ' or ', {"kind": '.
_SPEC_KIND_CANONICAL = re.compile(rb'\{"(?:(?<=\[\{")|(?<=, \{"))(' + _KINDS + rb')": ')
_SPEC_KIND = re.compile(rb'\{\s*"(' + _KINDS + rb')"\s*:')
_TOP_KEYS = re.compile(rb'"(' + SCHEMA_VERSION.encode() + rb"|" + TORCH_VERSION.encode()
                       + rb')"\s*:\s*')
#: ``input_specs`` and ``output_specs`` share this tail; their heads tell them apart.
_SPECS_TAIL = b'put_specs"'
_SPECS_HEADS = ((b'"in', INPUT_SPECS), (b'"out', OUTPUT_SPECS))
assert all(h[1:] + _SPECS_TAIL == b"%s\"" % k.encode() for h, k in _SPECS_HEADS)


def _preceded_by_open(raw: bytes | memoryview, pos: int) -> bool:
    """The key at ``pos`` follows ``{`` or ``,`` (whitespace allowed): it starts a member."""
    i = pos - 1
    while i >= 0 and raw[i] in b" \t\r\n":
        i -= 1
    return i >= 0 and raw[i] in b"{,"


def _positions(raw: bytes | memoryview, needle: bytes, start: int = 0,
               stop: int | None = None) -> Iterator[int]:
    """Start of each non-overlapping ``needle`` in ``raw[start:stop]``: ``bytes.find`` on
    ``bytes`` (much faster than a regex scan over megabytes), a literal regular expression
    (the next fastest) on other buffers, which have no ``find``."""
    stop = len(raw) if stop is None else stop
    if isinstance(raw, bytes):
        pos = raw.find(needle, start, stop)
        while pos >= 0:
            yield pos
            pos = raw.find(needle, pos + len(needle), stop)
    else:
        for m in re.compile(re.escape(needle)).finditer(raw, start, stop):
            yield m.start()


def _keys(raw: bytes | memoryview, key: bytes, value: re.Pattern[bytes], start: int = 0,
          stop: int | None = None) -> list[re.Match[bytes]]:
    """Matches of ``value`` right after each object key ``"key"`` in ``raw[start:stop]``."""
    quoted = b'"' + key + b'"'
    out = []
    for pos in _positions(raw, quoted, start, stop):
        if _preceded_by_open(raw, pos):
            m = value.match(raw, pos + len(quoted))
            if m is not None:
                out.append(m)
    return out


def _spec_lists(raw: bytes | memoryview) -> dict[str, list[re.Match[bytes]]]:
    """``_keys(raw, key, _LIST_VALUE)`` for both ``input_specs`` and ``output_specs`` in one
    scan, for their common ``put_specs"``. (Where two ``"input_specs"`` would overlap, the
    second starts right after the first's ``s``, so it is not a key either way.)"""
    out: dict[str, list[re.Match[bytes]]] = {INPUT_SPECS: [], OUTPUT_SPECS: []}
    tail = _SPECS_TAIL
    for pos in _positions(raw, tail):
        for head, key in _SPECS_HEADS:
            start = pos - len(head)
            if start >= 0 and raw[start:pos] == head and _preceded_by_open(raw, start):
                m = _LIST_VALUE.match(raw, pos + len(tail))
                if m is not None:
                    out[key].append(m)
    return out


def _unescape(s: bytes) -> str:
    """A JSON string's raw bytes (between the quotes) decoded."""
    return json.loads(b'"' + s + b'"') if b"\\" in s else s.decode("utf-8", "replace")


def graph_stats(raw: bytes | memoryview, file: str = "", entry: ZipEntry | None = None,
                full_parse_limit: int = FULL_PARSE_LIMIT) -> dict[str, Any]:
    """Node targets and signature counts of a serialized ExportedProgram (``models/*.json``).

    Documents up to ``full_parse_limit`` bytes are parsed with :func:`json.loads`. Larger
    ones (a 5,000-parameter model writes ~5 MB, ~0.15 s to parse) are *scanned*, which is
    exact for valid JSON written to torch's schema: a ``"key":`` right after ``{`` or ``,``
    is an object key (quotes inside strings are escaped); only ``Node`` objects have a
    ``target`` key with a string value; ``GraphSignature`` is the only object with
    ``input_specs``/``output_specs`` lists, whose elements are one-key objects naming the
    spec kind. torch writes with ``json.dumps``' default separators, the same throughout a
    document, so there every ``target`` key reads ``"target": "``; other documents are
    scanned key by key. The version fields are decoded on their own. Both paths give the
    same result (nested subgraphs are included in the node counts); tests check that they
    agree.

    ``raw`` may be a zero-copy view of the member (the scan never copies the document).

    Returns:
        ``{"targets": Counter, "summary": {nodes, ops, inputs, outputs, parameters, buffers,
        constants, schema_version, torch_version}}``

    Example:
        >>> doc = (b'{"graph_module": {"graph": {"nodes": [{"target": "a"}]}, "signature": '
        ...        b'{"input_specs": [{"user_input": {}}], "output_specs": []}}}')
        >>> graph_stats(doc)["summary"]["nodes"], graph_stats(doc, full_parse_limit=0)["summary"]["inputs"]
        (1, 1)
    """
    where = f"zip member {entry.name!r}" if entry is not None else "graph JSON"
    offset = entry.data_offset if entry is not None else None

    def bad(msg: str) -> CorruptError:
        return CorruptError(msg, file=file or None, structure=where, offset=offset)

    targets: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    if len(raw) <= full_parse_limit:
        schema, version = _parse(raw, targets, kinds, bad)
    else:
        schema, version = _scan(raw, targets, kinds, bad)
    if isinstance(schema, dict):
        schema = f"{schema.get('major')}.{schema.get('minor')}"
    return {"targets": targets, "summary": {
        "nodes": sum(targets.values()), "ops": len(targets),
        "inputs": kinds["user_input"], "outputs": kinds[USER_OUTPUT],
        "parameters": kinds["parameter"], "buffers": kinds["buffer"],
        "constants": sum(kinds[k] for k in CONSTANT_INPUTS),
        "schema_version": schema if isinstance(schema, str) else None,
        "torch_version": version if isinstance(version, str) else None,
    }}


def _parse(raw: bytes | memoryview, targets: Counter[str], kinds: Counter[str],
           bad: Callable[[str], CorruptError]) -> tuple[Any, Any]:
    """The whole document through :func:`json.loads`: every string ``target`` counted into
    ``targets``, every signature spec kind into ``kinds``; returns the two version fields."""
    where = bad("")  # (the file, structure and offset of the document)
    doc = checked_loads(raw, file=where.file, structure=where.structure, offset=where.offset)
    if not isinstance(doc, dict):
        raise bad("expected a JSON object")
    stack: list[Any] = [doc]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            t = o.get(TARGET)
            if isinstance(t, str):
                targets[t] += 1
            stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)
    gm = doc.get(GRAPH_MODULE)
    signature = gm.get(SIGNATURE) if isinstance(gm, dict) else None
    if not isinstance(signature, dict):
        raise bad(f"{GRAPH_MODULE}.{SIGNATURE} is missing")
    for key in (INPUT_SPECS, OUTPUT_SPECS):
        for spec in signature.get(key) or ():
            if isinstance(spec, dict):
                kinds.update(spec.keys())
    return doc.get(SCHEMA_VERSION), doc.get(TORCH_VERSION)


def _scan(raw: bytes | memoryview, targets: Counter[str], kinds: Counter[str],
          bad: Callable[[str], CorruptError]) -> tuple[Any, Any]:
    """The same counts as :func:`_parse`, by scanning (see :func:`graph_stats`)."""
    # torch writes with json.dumps' default separators (", " and ": "), used throughout a
    # document: then every "target" key reads '"target": "'. Otherwise, the general scan.
    canonical = raw[:len(CANONICAL_GRAPH_HEAD)] == CANONICAL_GRAPH_HEAD
    if canonical:
        found_targets = Counter(_TARGET_CANONICAL.findall(raw))
    else:
        found_targets = Counter([m.group(1) for m in _keys(raw, _T, _STRING_VALUE)])
    for t, n in found_targets.items():
        targets[_unescape(t)] += n
    found = {}
    for key, ms in _spec_lists(raw).items():
        if len(ms) != 1:
            raise bad(f"expected one {key} list, found {len(ms)}")
        found[key] = ms[0].end() - 1
    lo, hi = found[INPUT_SPECS], found[OUTPUT_SPECS]
    if lo > hi:
        raise bad(f"{INPUT_SPECS} does not precede {OUTPUT_SPECS}")
    # output_specs follows input_specs; it ends where the signature ends.
    dec = json.JSONDecoder()
    try:
        outputs, _ = dec.raw_decode(bytes(raw[hi:]).decode("utf-8", "replace"))
    except ValueError as exc:
        raise bad(f"invalid JSON in {OUTPUT_SPECS} ({exc})") from None
    except RecursionError:
        raise _too_deep(bad(OUTPUT_SPECS)) from None
    if canonical:  # each spec is a list element: '[{"kind": ' or ', {"kind": '
        for kind, n in Counter(_SPEC_KIND_CANONICAL.findall(raw, lo, hi)).items():
            kinds[kind.decode()] = n
    else:
        for m in _SPEC_KIND.finditer(raw, lo, hi):
            # A spec is a list element: the "{" follows "[" or ",".
            i = m.start() - 1
            while raw[i] in b" \t\r\n":
                i -= 1
            if raw[i] in b"[,":
                kinds[m.group(1).decode()] += 1
    for spec in outputs if isinstance(outputs, list) else ():
        if isinstance(spec, dict):
            kinds.update(spec.keys())
    versions: dict[str, Any] = {}
    for m in _TOP_KEYS.finditer(raw, max(0, len(raw) - 4096)):
        if _preceded_by_open(raw, m.start()):
            try:
                text = bytes(raw[m.end():]).decode("utf-8")
                versions[m.group(1).decode()] = dec.raw_decode(text)[0]
            except ValueError:
                continue
            except RecursionError:
                raise _too_deep(bad(m.group(1).decode())) from None
    return versions.get(SCHEMA_VERSION), versions.get(TORCH_VERSION)


def _too_deep(where: CorruptError) -> LimitError:
    """The :class:`LimitError` for a value nested too deeply, at ``where``'s location."""
    return LimitError(f"JSON nests deeper than JSON_MAX_DEPTH={JSON_MAX_DEPTH}", file=where.file,
                      structure=where.structure, offset=where.offset, limit="JSON_MAX_DEPTH")


#: The columns of one ``graph_nodes`` row, in frame order (see ``workbench.frames``).
NODE_COLUMNS = ("graph", "index", "kind", "name", "target", "inputs", "outputs", "dtypes",
                "shapes", "fqn")


def _spec(spec: Any) -> tuple[str, str | None, str | None]:
    """(kind, value name, fully qualified name) of one signature input/output spec."""
    if not isinstance(spec, dict) or len(spec) != 1:
        return "unknown", None, None
    kind, body = next(iter(spec.items()))
    names: list[str] = []
    fqn = None
    if isinstance(body, dict):
        value_names(body.get("arg"), names)
        arg = body.get("arg")
        if not names and isinstance(arg, dict) and isinstance(arg.get("name"), str):
            names.append(arg["name"])
        for key in ("parameter_name", "buffer_name", "tensor_constant_name",
                    "custom_obj_name", "target"):
            if isinstance(body.get(key), str):
                fqn = body[key]
                break
    return str(kind), (names[0] if names else None), fqn


def graph_nodes(raw: bytes | memoryview, file: str = "", entry: ZipEntry | None = None
                ) -> dict[str, list]:
    """The data flow of a serialized ExportedProgram: one row per graph input (``kind`` is
    its signature spec: ``parameter``, ``buffer``, ``user_input``, ...), per call node
    (``kind`` ``call``; nested subgraphs under their path in ``graph``) and per graph output
    (``user_output``, ``buffer_mutation``, ...). ``inputs``/``outputs`` name the values read
    and written; ``dtypes``/``shapes`` describe the written ones.

    The document is parsed with the checked JSON loader (depth and size limits).

    Example:
        >>> doc = (b'{"graph_module": {"graph": {"inputs": [{"as_tensor": {"name": "x"}}],'
        ...        b'"outputs": [{"as_tensor": {"name": "y"}}], "nodes": [{"target": "relu",'
        ...        b'"inputs": [{"arg": {"as_tensor": {"name": "x"}}}], "outputs": [{"as_tensor":'
        ...        b'{"name": "y"}}]}], "tensor_values": {}}, "signature": {"input_specs": [],'
        ...        b'"output_specs": []}}}')
        >>> rows = graph_nodes(doc)
        >>> rows["kind"], rows["inputs"][1]
        (['user_input', 'call', 'user_output'], ('x',))
    """
    where = f"zip member {entry.name!r}" if entry is not None else "graph JSON"
    offset = entry.data_offset if entry is not None else None

    def bad(msg: str) -> CorruptError:
        return CorruptError(msg, file=file or None, structure=where, offset=offset)

    doc = checked_loads(raw, file=file or None, structure=where, offset=offset)
    gm = doc.get(GRAPH_MODULE) if isinstance(doc, dict) else None
    graph = gm.get("graph") if isinstance(gm, dict) else None
    if not isinstance(graph, dict):
        raise bad(f"{GRAPH_MODULE}.graph is missing or not an object")
    signature = gm.get(SIGNATURE) if isinstance(gm.get(SIGNATURE), dict) else {}
    out: dict[str, list] = {c: [] for c in NODE_COLUMNS}

    def row(gname: str, index: int, kind: str, name: str, target: str, inputs: tuple,
            outputs: tuple, values: Any, fqn: str | None) -> None:
        metas = [tensor_meta(values, n) for n in outputs]
        for c, v in zip(NODE_COLUMNS, (gname, index, kind, name, target, inputs, outputs,
                                       tuple(m[0] for m in metas), tuple(m[1] for m in metas),
                                       fqn)):
            out[c].append(v)

    values = graph.get("tensor_values")
    in_specs = {}
    for spec in signature.get(INPUT_SPECS) or ():
        kind, name, fqn = _spec(spec)
        if name is not None:
            in_specs[name] = (kind, fqn)
    inputs: list[str] = []
    value_names(graph.get("inputs"), inputs)
    for i, name in enumerate(inputs):
        kind, fqn = in_specs.get(name, ("user_input", None))
        row("", i, kind, name, "placeholder", (), (name,), values, fqn)
    queue: list[tuple[str, Any, str]] = [("", graph, f"{GRAPH_MODULE}.graph")]
    while queue:
        gname, g, gwhere = queue.pop(0)
        if not isinstance(g, dict):
            raise bad(f"{gwhere} is not a JSON object")
        nodes = g.get("nodes", [])
        if not isinstance(nodes, list):
            raise bad(f"{gwhere}.nodes is not a list")
        gvalues = g.get("tensor_values", values)
        for i, node in enumerate(nodes):
            if not isinstance(node, dict) or not isinstance(node.get(TARGET), str):
                raise bad(f"{gwhere}.nodes[{i}] is not a node with a string target")
            reads, writes = node_io(node)
            name = node.get("name") if isinstance(node.get("name"), str) else (
                writes[0] if writes else f"node{i}")
            row(gname, i, "call", name, node[TARGET], reads, writes, gvalues, None)
            for k, inp in enumerate(node.get("inputs") or ()):
                a = inp.get("arg") if isinstance(inp, dict) else None
                sub = a.get("as_graph") if isinstance(a, dict) else None
                if isinstance(sub, dict):
                    label = sub.get("name") if isinstance(sub.get("name"), str) else f"{name}.{k}"
                    queue.append((f"{gname}/{label}" if gname else label, sub.get("graph"),
                                  f"{gwhere}.nodes[{i}].inputs[{k}].arg.as_graph.graph"))
    out_specs = [_spec(s) for s in signature.get(OUTPUT_SPECS) or ()]
    outputs: list[str] = []
    value_names(graph.get("outputs"), outputs)
    by_name = {name: (kind, fqn) for kind, name, fqn in out_specs if name is not None}
    for i, name in enumerate(outputs):
        kind, fqn = by_name.get(name, (USER_OUTPUT, None))
        row("", i, kind, f"output:{name}", "output", (name,), (), values, fqn)
    return out
