"""Core ML delegate blobs: a flattened model directory, or a ``CMJR`` reference into named data.

Facts from ExecuTorch's ``backends/apple/coreml/compiler/coreml_preprocess.py`` and the
``executorchcoreml.flatten_directory_contents`` it calls (checked against that function
in the tests):

* **flattened directory** (one method): the files' bytes back to back, then a JSON index
  written *byte-reversed* at the very end, so a reader finds it from the last byte
  (``{``)::

      {"nodes": [{"name": ..., "kind": 0 (file) | 1 (folder),
                  "dataRegion": {"offset": ..., "size": ...}, "children": {name: index}}, ...]}

  The folder holds ``metadata.json`` (identifier, input/output names), the model
  (``model.mlpackage`` with ``Data/com.apple.CoreML/weights/weight.bin`` and
  ``model.mlmodel``, or a compiled ``model.mlmodelc``) and debug-info JSON files.
* **CMJR reference** (several methods sharing one model): ``b"CMJR"`` then UTF-8 JSON
  ``{"version": 1, "key": <named-data key>, "functionName": <method>}``; the flattened
  directory is stored once in the program's named data under ``key``.

Example:
    >>> from workbench.formats.delegates import coreml
    >>> coreml.REFERENCE_MAGIC
    b'CMJR'
"""

from __future__ import annotations

import json
from typing import Any

from ..._json import depth as json_depth
from ...errors import CorruptError, OutOfBoundsError
from ...limits import DELEGATE_INDEX_MAX_BYTES, DELEGATE_MAX_DEPTH, JSON_MAX_DEPTH
from ._base import Blob, BlobInfo

__all__ = ["BACKEND", "IDS", "detect", "parse"]

BACKEND = "coreml"
IDS = ("CoreMLBackend",)
REFERENCE_MAGIC = b"CMJR"
#: Largest JSON index / reference read (bytes).
MAX_INDEX = DELEGATE_INDEX_MAX_BYTES
_MAX_DEPTH = DELEGATE_MAX_DEPTH


def detect(blob: Blob) -> bool:
    """``CMJR`` at byte 0, or (for ``CoreMLBackend``) a blob ending in a reversed JSON index."""
    if blob.length >= 4 and bytes(blob.buf[blob.start:blob.start + 4]) == REFERENCE_MAGIC:
        return True
    return blob.backend_id in IDS and blob.length > 2 and blob.buf[blob.end - 1] == ord("{")


def parse(blob: Blob) -> BlobInfo:
    """Read a CMJR reference or a flattened model directory."""
    if bytes(blob.buf[blob.start:blob.start + 4]) == REFERENCE_MAGIC:
        return _reference(blob)
    return _directory(blob)


def _loads(text: str) -> Any:
    """:func:`json.loads` within the depth limit (a ValueError naming it when deeper)."""
    if json_depth(text.encode("utf-8", "surrogatepass"), JSON_MAX_DEPTH) > JSON_MAX_DEPTH:
        raise ValueError(f"JSON nests deeper than JSON_MAX_DEPTH={JSON_MAX_DEPTH}")
    return json.loads(text)


def _reference(blob: Blob) -> BlobInfo:
    start, end = blob.start, blob.end
    what = "Core ML reference (CMJR)"
    if end - start - 4 > MAX_INDEX:
        raise CorruptError(f"reference JSON of {end - start - 4} bytes is larger than "
                           f"{MAX_INDEX}", file=blob.path, structure=what, offset=start + 4)
    raw = blob.bytes(start + 4, end - start - 4, what)
    try:
        ref = _loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptError(f"reference is not UTF-8 JSON ({e})", file=blob.path,
                           structure=what, offset=start + 4) from None
    if not isinstance(ref, dict) or not isinstance(ref.get("key"), str):
        raise CorruptError("reference JSON has no string 'key'", file=blob.path,
                           structure=what, offset=start + 4)
    key = ref["key"]
    header: dict[str, Any] = {"magic": "CMJR", "version": ref.get("version"), "key": key,
                              "functionName": ref.get("functionName")}
    hit = blob.resolve(key)
    if hit is not None:
        header.update(model_file=hit[0], model_offset=hit[1], model_size=hit[2])
    elif blob.named is not None:
        blob.note("warning", what, start, f"named-data key {key!r} (the model) was not found")
    parts = [(start, 4, "magic (CMJR)", "header"),
             (start + 4, end - start - 4, "reference (JSON)", "header")]
    return blob.info(BACKEND, "CMJR + JSON reference to a model in named data", header=header,
                     subsegments=blob.cover(parts), named_keys=(key,))


def _index(blob: Blob) -> tuple[dict, int]:
    """The reversed JSON index at the end of the blob and its length in bytes."""
    start, end = blob.start, blob.end
    dec = json.JSONDecoder()
    k = min(end - start, 1 << 16)
    while True:
        tail = bytes(blob.buf[end - k:end])[::-1].decode("latin-1")
        try:
            _, n = dec.raw_decode(tail)
            break
        except ValueError as e:
            # a window cut inside a string fails where the string starts
            cut = e.pos >= len(tail) - 8 or e.msg.startswith("Unterminated string")
            if k >= min(end - start, MAX_INDEX) or not cut:
                raise CorruptError(f"the byte-reversed JSON index at the end does not parse "
                                   f"({e.msg} at {e.pos})", file=blob.path,
                                   structure="Core ML directory index", offset=end - 1) from None
            k = min(k * 4, end - start, MAX_INDEX)
        except RecursionError:
            raise CorruptError(f"the byte-reversed JSON index nests deeper than JSON_MAX_DEPTH="
                               f"{JSON_MAX_DEPTH}", file=blob.path,
                               structure="Core ML directory index", offset=end - 1) from None
    try:
        index = _loads(tail[:n].encode("latin-1").decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptError(f"the directory index is not UTF-8 JSON ({e})", file=blob.path,
                           structure="Core ML directory index", offset=end - n) from None
    if not isinstance(index, dict) or not isinstance(index.get("nodes"), list):
        raise CorruptError("the directory index has no 'nodes' list", file=blob.path,
                           structure="Core ML directory index", offset=end - n)
    return index, n


def _directory(blob: Blob) -> BlobInfo:
    start, end = blob.start, blob.end
    index, n = _index(blob)
    data_end = end - n
    nodes = index["nodes"]
    what = "Core ML directory index"
    children: set[int] = set()
    for k, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise CorruptError(f"node {k} is not an object", file=blob.path, structure=what,
                               offset=data_end)
        kids = node.get("children") or {}
        if not isinstance(kids, dict) or not all(isinstance(i, int) and 0 <= i < len(nodes)
                                                 for i in kids.values()):
            raise CorruptError(f"node {k} has children outside the node list", file=blob.path,
                               structure=what, offset=data_end)
        children.update(kids.values())
    roots = [k for k in range(len(nodes)) if k not in children]
    files: list[tuple[str, int, int]] = []
    seen: set[int] = set()

    def walk(k: int, path: str, depth: int) -> None:
        if k in seen or depth > _MAX_DEPTH:
            raise CorruptError(f"node {k} is reached twice or too deep (a cycle)",
                               file=blob.path, structure=what, offset=data_end)
        seen.add(k)
        node = nodes[k]
        name = str(node.get("name", ""))
        here = f"{path}/{name}" if path else name
        if node.get("kind") == 0:
            region = node.get("dataRegion") or {}
            off, size = region.get("offset"), region.get("size")
            if not (isinstance(off, int) and isinstance(size, int)) or off < 0 or size < 0 \
                    or off + size > data_end - start:
                raise OutOfBoundsError(f"file {here!r} region [{off}, +{size}) lies outside the "
                                       f"file data (size 0x{data_end - start:x})",
                                       file=blob.path, structure=what, offset=data_end)
            files.append((here, off, size))
        for child in sorted((node.get("children") or {}).values()):
            walk(child, here, depth + 1)

    for r in roots:
        walk(r, "", 0)
    parts = [(start + off, size, path, "constant" if path.endswith("weight.bin") else "delegate")
             for path, off, size in files]
    parts.append((data_end, n, "directory index (JSON, byte-reversed)", "header"))
    header: dict[str, Any] = {"files": len(files), "index_size": n,
                              "root": str(nodes[roots[0]].get("name", "")) if roots else ""}
    meta = next(((o, z) for p, o, z in files if p.endswith("/metadata.json")
                 or p == "metadata.json"), None)
    if meta is not None and meta[1] <= 1 << 20:
        try:
            m = _loads(blob.bytes(start + meta[0], meta[1], "metadata.json").decode("utf-8"))
            if isinstance(m, dict):
                header.update({k: m[k] for k in ("identifier", "inputNames", "outputNames")
                               if k in m})
        except (UnicodeDecodeError, ValueError):
            blob.note("warning", "metadata.json", start + meta[0], "metadata.json is not JSON")
    return blob.info(BACKEND, "flattened model directory + byte-reversed JSON index",
                     header=header, subsegments=blob.cover(parts))
