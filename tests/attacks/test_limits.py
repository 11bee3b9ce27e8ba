"""The named limits and the checked JSON loader."""

from __future__ import annotations

import pickle

import pytest

import workbench as wb
from workbench import _json, limits
from workbench.formats.delegates import coreml
from workbench.formats.delegates.xnnpack import _graph
from workbench.formats.etdump import reader as etdump_reader
from workbench.formats.etrecord import reader as etrecord_reader
from workbench.formats.pt2 import schema as pt2_schema
from workbench.formats.pte import external, tensors


def test_readers_use_the_named_limits():
    assert pt2_schema.METADATA_LIMIT == etrecord_reader.JSON_LIMIT == limits.JSON_MAX_BYTES
    assert pt2_schema.SMALL_LIMIT == limits.ZIP_SMALL_MEMBER_BYTES
    assert pt2_schema.LIMIT == limits.BYTES_MAX
    assert pt2_schema.FULL_PARSE_LIMIT == limits.JSON_FULL_PARSE_BYTES
    assert tensors.MAX_TENSOR_BYTES == etdump_reader.MAX_TENSOR_BYTES == limits.TENSOR_MAX_BYTES
    assert external.MAX_SCANNED_BLOB == limits.DELEGATE_SCAN_MAX_BYTES
    assert coreml.MAX_INDEX == limits.DELEGATE_INDEX_MAX_BYTES
    assert _graph.MAX_NUMEL == limits.NUMEL_MAX
    assert set(limits.describe()["name"]) == set(limits.LIMITS)


def test_limit_error_names_the_limit_and_pickles():
    e = limits.LimitError.for_limit("JSON_MAX_DEPTH", "JSON nests deeper than", file="/a/x.pt2",
                                    structure="zip member 'm.json'", offset=16)
    assert str(e) == "x.pt2: zip member 'm.json' at 0x10: JSON nests deeper than JSON_MAX_DEPTH=256"
    back = pickle.loads(pickle.dumps(e))
    assert isinstance(back, wb.CorruptError) and back.limit == "JSON_MAX_DEPTH" and str(back) == str(e)


@pytest.mark.parametrize("doc, want", [
    (b"{}", 1), (b"[[], [[]]]", 3), (b'["[[[[", "\\"[[["]', 1), (b'{"a": "]]]", "b": [[1]]}', 3),
    (b"1", 0), (b'"[["', 0),
])
def test_depth_ignores_strings(doc, want):
    assert _json.depth(doc) == want


def test_loads_limits():
    assert _json.loads(b"[" * 256 + b"]" * 256)  # at the limit: read
    with pytest.raises(limits.LimitError, match="JSON_MAX_DEPTH=256"):
        _json.loads(b"[" * 257 + b"]" * 257)
    with pytest.raises(limits.LimitError, match="JSON_MAX_BYTES=8"):
        _json.loads(b"[1, 2, 3, 4]", max_bytes=8)
    with pytest.raises(limits.LimitError, match="JSON_MAX_INT_DIGITS"):
        _json.loads(b"1" * 5000)
    with pytest.raises(wb.CorruptError, match="at 0x16: not valid JSON"):
        _json.loads(b'{"a": ', file="x", offset=16)
    assert _json.loads(b'{"a": 1, "a": 2, "n": NaN}')["a"] == 2  # the last key wins; NaN read
