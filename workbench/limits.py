"""Every size, count and depth limit the readers enforce, named once.

A file that goes past one of these raises :class:`LimitError` (a
:class:`~workbench.errors.CorruptError`) whose message names the limit and its value, e.g.::

    x.pt2: zip member 'data/weights/model_weights_config.json' at 0x3a: JSON nests deeper
    than JSON_MAX_DEPTH=256

The readers import their limits from here (a reader module may keep a local alias with its
historical name, e.g. ``pt2.schema.METADATA_LIMIT`` is :data:`JSON_MAX_BYTES`). No parser
recurses on a depth the input controls: the JSON members go through
:func:`workbench._json.loads` (a byte scan for nesting depth before :func:`json.loads`), the
flatbuffer readers follow offsets iteratively, and nested structures of delegate payloads are
bounded by :data:`DELEGATE_MAX_DEPTH`.

Example:
    >>> LimitError.for_limit("JSON_MAX_DEPTH", "JSON nests deeper than", file="x.pt2").limit
    'JSON_MAX_DEPTH'
"""

from __future__ import annotations

import os

from .errors import CorruptError

__all__ = [
    "BYTES_MAX",
    "DELEGATE_INDEX_MAX_BYTES",
    "DELEGATE_MAX_DEPTH",
    "DELEGATE_SCAN_MAX_BYTES",
    "JSON_FULL_PARSE_BYTES",
    "JSON_MAX_BYTES",
    "JSON_MAX_DEPTH",
    "JSON_MAX_INT_DIGITS",
    "LIMITS",
    "LimitError",
    "NUMEL_MAX",
    "TENSOR_MAX_BYTES",
    "ZIP_MAX_COMMENT",
    "ZIP_SMALL_MEMBER_BYTES",
    "describe",
]

# -- JSON (.pt2 configs and graphs, ETRecord members, delegate indexes) -----------------------
#: Largest JSON document read into memory (a 5,000-parameter graph is ~5 MB).
JSON_MAX_BYTES = 256 << 20
#: Deepest nesting of arrays/objects accepted in a JSON document (torch's graphs nest < 40).
JSON_MAX_DEPTH = 256
#: Longest integer literal (digits) in a JSON document (Python's own default cap is 4300).
JSON_MAX_INT_DIGITS = 4300
#: Graph JSON documents above this size are scanned instead of fully parsed.
JSON_FULL_PARSE_BYTES = 1 << 20

# -- zip (.pt2, ETRecord) -----------------------------------------------------------------------
#: Largest small text member (``archive_format``, ``byteorder``, ...).
ZIP_SMALL_MEMBER_BYTES = 4096
#: Longest end-of-central-directory comment (the format's own maximum).
ZIP_MAX_COMMENT = 0xFFFF

# -- sizes that go to int64 columns -------------------------------------------------------------
#: Sizes, offsets and byte counts must stay below this (they go to int64 columns).
BYTES_MAX = 1 << 62
#: A tensor of this many bytes or more is corrupt (.pte, ETDump).
TENSOR_MAX_BYTES = 1 << 62
#: A delegate tensor with this many elements or more is corrupt (XNNPACK graphs).
NUMEL_MAX = 1 << 60

# -- delegate payloads ----------------------------------------------------------------------------
#: Delegate blobs larger than this are not scanned for external-data keys.
DELEGATE_SCAN_MAX_BYTES = 64 << 20
#: Largest JSON index of a delegate payload (Core ML).
DELEGATE_INDEX_MAX_BYTES = 16 << 20
#: Deepest nesting followed inside a delegate payload (Core ML model folders).
DELEGATE_MAX_DEPTH = 64

#: Every limit above: name -> value (``describe()`` shows them as a table).
LIMITS: dict[str, int] = {name: globals()[name] for name in __all__
                          if name.isupper() and name != "LIMITS"}


class LimitError(CorruptError):
    """A file goes past one of the named limits of :mod:`workbench.limits`.

    Attributes:
        limit: the name of the limit (a key of :data:`LIMITS`), or ``None``.
    """

    def __init__(self, detail: str, *, file: str | os.PathLike[str] | None = None,
                 structure: str | None = None, offset: int | None = None,
                 limit: str | None = None) -> None:
        self.limit = limit
        super().__init__(detail, file=file, structure=structure, offset=offset)

    @classmethod
    def for_limit(cls, limit: str, what: str, *, file: str | os.PathLike[str] | None = None,
                  structure: str | None = None, offset: int | None = None) -> LimitError:
        """``LimitError("<what> LIMIT=value")`` for the named limit."""
        return cls(f"{what} {limit}={LIMITS[limit]}", file=file, structure=structure,
                   offset=offset, limit=limit)

    def __reduce__(self):  # keep the limit's name when pickled (process pools)
        return (_rebuild, (self.detail, self.file, self.structure, self.offset, self.limit))


def _rebuild(detail, file, structure, offset, limit):  # pragma: no cover - used by pickle
    return LimitError(detail, file=file, structure=structure, offset=offset, limit=limit)


def describe():
    """The limits as a DataFrame: ``name, value``.

    Example:
        >>> describe().set_index("name").loc["JSON_MAX_DEPTH", "value"]
        256
    """
    import pandas as pd

    return pd.DataFrame({"name": list(LIMITS), "value": list(LIMITS.values())})
