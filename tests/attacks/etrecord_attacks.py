"""Hostile ETRecords, rebuilt from the sample records: the marker member carrying hostile
JSON (it is never parsed), JSON maps with depth bombs, huge numbers and wrong types, pickled
members that must never be loaded (a pickle whose loading would write a file), and
duplicate member names (the first is used, a finding says so).

Each record that opens is also joined, with its trace, to its program by
:func:`workbench.timeline` (the ETRecord names the nodes of each instruction).
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import workbench as wb
from workbench.limits import LimitError

from ._common import SAMPLES, Case, members, put, rezip, sample

REC = "mlp_portable.etrecord"
XNN = "mlp_xnnpack.etrecord"
DEEP = 100_000
#: Where the hostile pickles would write if anything loaded them (checked after every case).
PWNED = Path(os.environ.get("TMPDIR", "/tmp")) / "workbench-etrecord-pickle-was-loaded"


class _Evil:
    """Unpickling this calls ``open(PWNED, "w")``: the file appears if a pickle is loaded."""

    def __reduce__(self):
        return (open, (str(PWNED), "w"))


EVIL = pickle.dumps(_Evil(), protocol=2)


def _items(src: str = REC) -> list[tuple[str, bytes]]:
    return members(sample(src))


def _rebuilt(edit: Callable[[list[tuple[str, bytes]]], list[tuple[str, bytes]]],
             src: str = REC) -> Callable[[Path], Path]:
    """A builder: the sample's members, changed by ``edit``, in a fresh archive."""
    def build(tmp: Path) -> Path:
        PWNED.unlink(missing_ok=True)
        return put(tmp, "x.etrecord", rezip(edit(_items(src))))
    return build


def _member(name: str, content: bytes | Callable[[bytes], bytes], src: str = REC
            ) -> Callable[[Path], Path]:
    """The member ``name`` replaced by ``content`` (or ``content(old)``)."""
    def edit(items):
        return [(n, (content(old) if callable(content) else content) if n == name else old)
                for n, old in items]
    return _rebuilt(edit, src)


def _dumps(doc) -> bytes:
    return json.dumps(doc).encode()


# -- checks ----------------------------------------------------------------------------------

def _joins(art: wb.Artifact) -> None:
    """The record names the portable trace's instructions; nothing was unpickled."""
    t = wb.timeline(SAMPLES / "mlp_portable.pte", SAMPLES / "mlp_portable.etdp", art)
    assert len(t) == len(wb.open(SAMPLES / "mlp_portable.etdp").frames["events"])
    assert not PWNED.exists(), "a pickled member was loaded"


def _rows(art: wb.Artifact, frame: str, cols: tuple[str, ...]) -> list[tuple]:
    df = art.frames[frame]
    return [tuple(r) for r in df[list(cols)].astype(object).itertuples(index=False)]


def _intact(art: wb.Artifact) -> None:
    """The maps and nodes read as from the intact sample."""
    want = wb.open(SAMPLES / REC)
    for frame, cols in (("debug_handles", ("method", "instruction", "debug_handle", "node")),
                        ("delegate_map", ("method", "instruction", "debug_handle")),
                        ("nodes", ("program", "name", "target", "debug_handle"))):
        assert _rows(art, frame, cols) == _rows(want, frame, cols), frame
    _joins(art)


def _unloaded(art: wb.Artifact) -> None:
    m = art.frames["members"]
    names = m["name"].astype(object)
    evil = m[names.isin(["reference_outputs", "representative_inputs"])
             | names.str.endswith("_state_dict")]
    assert len(evil) == 4 and evil["pickled"].all()
    _intact(art)


def _pickle_program(art: wb.Artifact) -> None:
    """A program member that holds a pickle: an ``other`` member, never parsed or loaded."""
    m = art.frames["members"]
    row = m[m["name"].astype(object) == "exported_program"].iloc[0]
    assert str(row["kind"]) == "other" and bool(row["pickled"])
    assert "exported_program" not in set(art.frames["nodes"]["program"].astype(object))
    _joins(art)


def _first_map_used(art: wb.Artifact) -> None:
    assert "occurs more than once" in " ".join(art.validate()["message"])
    _intact(art)


def _no_graph_id(art: wb.Artifact) -> None:
    assert art.info["export_graph_id"] is None
    _intact(art)


def _dup_key_last_wins(art: wb.Artifact) -> None:
    dh = art.frames["debug_handles"]
    assert dh.loc[dh["instruction"] == 0, "debug_handle"].tolist() == [99]
    _joins(art)


# -- hostile contents ------------------------------------------------------------------------

def _bomb(n: int = DEEP) -> bytes:
    return b"[" * n + b"]" * n


def _duplicate(name: str, second: bytes | None = None):
    """``name`` written twice (the second copy ``second``, default the same bytes)."""
    def edit(items):
        out = []
        for n, old in items:
            out.append((n, old))
            if n == name:
                out.append((n, old if second is None else second))
        return out
    return edit


def _evil_pickles(items):
    return [(n, EVIL if n.endswith("_state_dict") else old) for n, old in items] + [
        ("reference_outputs", EVIL), ("representative_inputs", EVIL)]


def _evil_program(items):
    return [(n, EVIL if n == "exported_program" else old) for n, old in items]


_MAP = "debug_handle_map"
_DELEGATES = "delegate_map"
_GRAPH_ID = "export_graph_id"

CASES = [
    # the marker: its content is never parsed (detection needs only its name)
    Case("etrecord_marker_json_bomb", _member("ETRECORD_V0", _bomb()), None, check=_intact),
    Case("etrecord_marker_huge_number", _member("ETRECORD_V0", b"9" * 100_000), None,
         check=_intact),
    Case("etrecord_marker_wrong_types", _member("ETRECORD_V0", _dumps({"version": [None, {}]})),
         None, check=_intact),
    # JSON maps: depth bombs, huge numbers, wrong types
    Case("etrecord_map_depth_bomb", _member(_MAP, _bomb()), LimitError, "JSON_MAX_DEPTH"),
    Case("etrecord_map_object_bomb", _member(_MAP, b'{"a":' * DEEP + b"1" + b"}" * DEEP),
         LimitError, "JSON_MAX_DEPTH"),
    Case("etrecord_delegate_map_depth_bomb", _member(_DELEGATES, _bomb()), LimitError,
         "JSON_MAX_DEPTH"),
    Case("etrecord_map_huge_integer", _member(_MAP, b'{"forward": {"0": [' + b"9" * 5000 + b"]}}"),
         wb.CorruptError),
    Case("etrecord_map_huge_instruction_key", _member(_MAP, _dumps({"forward": {"9" * 40: [1]}})),
         wb.CorruptError, "is not a non-negative integer"),
    Case("etrecord_map_negative_instruction", _member(_MAP, _dumps({"forward": {"-1": [1]}})),
         wb.CorruptError, "is not a non-negative integer"),
    Case("etrecord_map_handle_float", _member(_MAP, b'{"forward": {"0": [1e308]}}'),
         wb.CorruptError, "is not an integer"),
    Case("etrecord_map_handle_nan", _member(_MAP, b'{"forward": {"0": [NaN]}}'),
         wb.CorruptError, "is not an integer"),
    Case("etrecord_map_handle_string", _member(_MAP, _dumps({"forward": {"0": ["1"]}})),
         wb.CorruptError, "is not an integer"),
    Case("etrecord_map_handle_bool", _member(_MAP, _dumps({"forward": {"0": [True]}})),
         wb.CorruptError, "is not an integer"),
    Case("etrecord_map_is_a_list", _member(_MAP, b"[1, 2, 3]"), wb.CorruptError,
         "expected a JSON object"),
    Case("etrecord_map_not_json", _member(_MAP, b"\x80\x02}q\x00."), wb.CorruptError),
    Case("etrecord_map_duplicate_keys", _member(
        _MAP, b'{"forward": {"0": [1], "0": [99]}}'), None, check=_dup_key_last_wins),
    Case("etrecord_delegate_entry_wrong_types",
         _member(_DELEGATES, _dumps({"forward": {"0": {"name": 7, "delegate_map": {}}}}), XNN),
         wb.CorruptError, "backend name is not a string"),
    Case("etrecord_delegate_inner_map_a_list",
         _member(_DELEGATES, _dumps({"forward": {"0": {"name": "X", "delegate_map": [1]}}}), XNN),
         wb.CorruptError, "delegate_map is not a JSON object"),
    Case("etrecord_graph_id_huge", _member(_GRAPH_ID, b"9" * 4000), None, check=_intact),
    Case("etrecord_graph_id_wrong_type", _member(_GRAPH_ID, b'[{"id": 1}]'), None,
         check=_no_graph_id),
    Case("etrecord_program_depth_bomb", _member("edge_dialect_exported_program/forward",
                                                b'{"graph_module": ' + _bomb() + b"}"),
         LimitError, "JSON_MAX_DEPTH"),
    Case("etrecord_program_nodes_wrong_type", _member(
        "edge_dialect_exported_program/forward",
        _dumps({"graph_module": {"graph": {"nodes": {"a": 1}}}})), wb.CorruptError,
        "nodes is not a list"),
    # pickles: listed, never loaded
    Case("etrecord_pickles_never_loaded", _rebuilt(_evil_pickles), None, check=_unloaded),
    Case("etrecord_program_is_a_pickle", _rebuilt(_evil_program), None, check=_pickle_program),
    # duplicate member names
    Case("etrecord_duplicate_map", _rebuilt(_duplicate(_MAP, _dumps({"forward": {"0": ["x"]}}))),
         None, check=_first_map_used),
    Case("etrecord_duplicate_marker", _rebuilt(_duplicate("ETRECORD_V0", _bomb(1000))), None,
         check=_first_map_used),
    Case("etrecord_duplicate_program", _rebuilt(_duplicate(
        "edge_dialect_exported_program/forward", _bomb())), None, check=_first_map_used),
]
