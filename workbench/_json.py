"""The one checked JSON loader of the readers (.pt2 configs and graphs, ETRecord members).

:func:`loads` bounds what :func:`json.loads` may see: the size (:data:`~workbench.limits.
JSON_MAX_BYTES`) and the nesting depth (:data:`~workbench.limits.JSON_MAX_DEPTH`, measured by
a byte scan outside strings *before* parsing, so the C parser never recurses deeply), and
turns every failure into a :class:`~workbench.errors.CorruptError` naming the file, the
structure and the offset.

Policy (that of the reference reader, Python's :func:`json.loads`, which torch uses):
duplicate keys keep the last value; ``NaN``/``Infinity``/``-Infinity`` are accepted as
floats (torch writes them for infinite constants); integers longer than
:data:`~workbench.limits.JSON_MAX_INT_DIGITS` digits are refused.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .errors import CorruptError
from .limits import JSON_MAX_BYTES, JSON_MAX_DEPTH, JSON_MAX_INT_DIGITS, LimitError

__all__ = ["depth", "loads"]

#: A complete JSON string (escapes included).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_CHUNK = 1 << 22


def depth(raw: bytes | memoryview, stop: int | None = None) -> int:
    """The deepest nesting of ``[``/``{`` in a JSON document, outside strings (a byte scan
    in chunks, no recursion; stops once the depth passes ``stop``).

    Example:
        >>> depth(b'{"a": [[1], "[[[["]}')
        3
    """
    import numpy as np

    data = bytes(raw)
    if b'"' in data:
        data = _STRING.sub(b'""', data)
    u8 = np.frombuffer(data, np.uint8)
    best = level = 0
    for lo in range(0, len(u8), _CHUNK):
        c = u8[lo:lo + _CHUNK]
        step = ((c == 0x5B) | (c == 0x7B)).astype(np.int32) - ((c == 0x5D) | (c == 0x7D))
        run = np.cumsum(step, dtype=np.int64) + level
        best = max(best, int(run.max()))
        level = int(run[-1])
        if stop is not None and best > stop:
            break
    return best


def loads(raw: bytes | memoryview, *, file: str | None = None, structure: str = "JSON",
          offset: int | None = None, max_bytes: int = JSON_MAX_BYTES,
          max_depth: int = JSON_MAX_DEPTH) -> Any:
    """``json.loads(raw)``, bounded: a :class:`LimitError` when the document is larger than
    ``max_bytes`` or nests deeper than ``max_depth``, a :class:`CorruptError` when it is not
    valid UTF-8 JSON (offset: where the parser stopped, when ``offset`` is the document's).

    Example:
        >>> loads(b'{"a": [1, 2]}')
        {'a': [1, 2]}
        >>> loads(b"[" * 300 + b"]" * 300, file="x.pt2", structure="zip member 'm.json'")
        Traceback (most recent call last):
        ...
        workbench.limits.LimitError: x.pt2: zip member 'm.json': JSON nests deeper than JSON_MAX_DEPTH=256
    """
    size = len(raw)
    if size > max_bytes:
        raise LimitError(f"JSON document of {size} bytes is larger than JSON_MAX_BYTES={max_bytes}",
                         file=file, structure=structure, offset=offset, limit="JSON_MAX_BYTES")
    data = bytes(raw)
    if data.count(b"[") + data.count(b"{") > max_depth and depth(data, max_depth) > max_depth:
        raise LimitError(f"JSON nests deeper than JSON_MAX_DEPTH={max_depth}", file=file,
                         structure=structure, offset=offset, limit="JSON_MAX_DEPTH")
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        at = offset + exc.pos if offset is not None else None
        raise CorruptError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                           file=file, structure=structure, offset=at) from None
    except UnicodeDecodeError as exc:
        at = offset + exc.start if offset is not None else None
        raise CorruptError(f"JSON is not valid UTF-8 ({exc.reason})", file=file,
                           structure=structure, offset=at) from None
    except ValueError as exc:  # e.g. an integer longer than sys.get_int_max_str_digits()
        if "digits" not in str(exc):
            raise CorruptError(f"not valid JSON ({exc})", file=file, structure=structure,
                               offset=offset) from None
        raise LimitError(f"an integer has more digits than JSON_MAX_INT_DIGITS={JSON_MAX_INT_DIGITS}",
                         file=file, structure=structure, offset=offset,
                         limit="JSON_MAX_INT_DIGITS") from None
    except RecursionError:  # (not reached after the depth scan; kept as a second guard)
        raise LimitError(f"JSON nests deeper than JSON_MAX_DEPTH={max_depth}", file=file,
                         structure=structure, offset=offset, limit="JSON_MAX_DEPTH") from None
