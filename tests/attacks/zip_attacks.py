"""The zip layer of a ``.pt2`` (and an ETRecord): overlapping entries, local headers that
disagree with the central directory, lying ZIP64 fields and counts, data descriptors,
encrypted or compressed weights, unsafe and duplicate names, a directory pointing inside a
member."""

from __future__ import annotations

import struct
from pathlib import Path

import workbench as wb
from workbench.limits import LimitError

from ._common import Case, central_entries, central_of, local_of, members, patch, put, rezip, sample, u32

PT2 = "mlp.pt2"
W0 = "data/weights/weight_0"


def _build(edit, name: str = "x.pt2", src: str = PT2):
    def build(tmp: Path) -> Path:
        return put(tmp, name, edit(sample(src)))
    return build


def _overlap(data: bytes) -> bytes:
    """Every central entry's local header offset set to the first member's: all entries
    overlap (the non-recursive zip bomb's trick)."""
    first = u32(data, central_entries(data)[0] + 42)
    for pos in central_entries(data):
        data = patch(data, pos + 42, "I", first)
    return data


def _local_name(data: bytes) -> bytes:
    lo = local_of(data, W0)
    b = bytearray(data)
    b[lo + 30] ^= 0x20  # the first letter of the local name changes case
    return bytes(b)


def _local_method(data: bytes) -> bytes:
    return patch(data, local_of(data, W0) + 8, "H", 8)


def _zip64_lie(data: bytes) -> bytes:
    """The central entry's sizes say 0xFFFFFFFF, a ZIP64 extra field (replacing the
    entry's extra) says 2^62."""
    cd = central_of(data, W0)
    n, m, k = struct.unpack_from("<HHH", data, cd + 28)
    extra = struct.pack("<HHQQ", 1, 16, 1 << 62, 1 << 62)
    head = bytearray(data[cd:cd + 46])
    struct.pack_into("<II", head, 20, 0xFFFFFFFF, 0xFFFFFFFF)
    struct.pack_into("<H", head, 30, len(extra))
    name = data[cd + 46:cd + 46 + n]
    new = bytes(head) + name + extra + data[cd + 46 + n + m:cd + 46 + n + m + k]
    rest = data[cd + 46 + n + m + k:]
    out = data[:cd] + new + rest
    eocd = out.rindex(b"PK\x05\x06")
    return patch(out, eocd + 12, "I", u32(out, eocd + 12) + len(new) - (46 + n + m + k))


def _count(n: int):
    def edit(data: bytes) -> bytes:
        eocd = data.rindex(b"PK\x05\x06")
        return patch(patch(data, eocd + 8, "H", n), eocd + 10, "H", n)
    return edit


def _flag(bit: int, suffix: str = W0):
    def edit(data: bytes) -> bytes:
        cd = central_of(data, suffix)
        lo = u32(data, cd + 42)
        flags = struct.unpack_from("<H", data, cd + 8)[0] | bit
        return patch(patch(data, cd + 8, "H", flags), lo + 6, "H", flags)
    return edit


def _renamed(new_name: str):
    def edit(data: bytes) -> bytes:
        return rezip([(new_name if n.endswith(W0) else n, c) for n, c in members(data)])
    return edit


def _duplicate(data: bytes) -> bytes:
    items = members(data)
    extra = [(n, b"\0" * len(c)) for n, c in items if n.endswith(W0)]
    return rezip(items + extra)


def _inside_member(data: bytes) -> bytes:
    """weight_1's central entry points into weight_0's data (a fake local header there)."""
    w0 = local_of(data, W0)
    n = struct.unpack_from("<H", data, w0 + 26)[0]
    inner = w0 + 30 + n + 64
    cd = central_of(data, "data/weights/weight_1")
    return patch(data, cd + 42, "I", inner)


def _past_eof(data: bytes) -> bytes:
    return patch(data, central_of(data, W0) + 42, "I", len(data) + 100)


def _cd_offset_past_eof(data: bytes) -> bytes:
    eocd = data.rindex(b"PK\x05\x06")
    return patch(data, eocd + 16, "I", 0xFFFFFFF0)


def _deflated(art: wb.Artifact) -> None:
    row = art.tensors.set_index("name").loc["fc1.weight"]
    assert row["storage"] == "compressed"


def _unreadable(art: wb.Artifact) -> None:
    """fc1.weight is listed, but reading it raises (its member is encrypted)."""
    try:
        art.tensor("fc1.weight")
    except wb.ArtifactError:
        return
    raise AssertionError("an encrypted member was read")


def _all_tensors(art: wb.Artifact) -> None:
    assert {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"} <= set(art.tensors["name"])


def _finds(text: str):
    """A check: validate() reports a finding whose message contains ``text``."""
    def check(art: wb.Artifact) -> None:
        assert art.validate()["message"].str.contains(text, regex=False).any()
    return check


CASES = [
    Case("zip_overlapping_entries", _build(_overlap), wb.CorruptError, "differs from the central"),
    Case("zip_local_name_disagrees", _build(_local_name), wb.CorruptError, "weight_0"),
    Case("zip_local_method_disagrees", _build(_local_method), wb.CorruptError, "weight_0"),
    Case("zip64_extra_lies", _build(_zip64_lie), wb.CorruptError, "zip64"),
    Case("zip_entry_count_too_high", _build(_count(0xFFFE)), None, check=_all_tensors),
    Case("zip_entry_count_too_low", _build(_count(1)), None, check=_all_tensors),
    Case("zip_data_descriptor_flag", _build(_flag(0x8)), None),
    Case("zip_encrypted_weight", _build(_flag(0x1)), None, check=_unreadable),
    Case("zip_deflated_weight", _build(lambda d: rezip(members(d), frozenset(
        n for n, _ in members(d) if n.endswith(W0)))), None, check=_deflated),
    Case("zip_dotdot_name", _build(_renamed("mlp/data/weights/../../../etc/weight_0")),
         wb.CorruptError, "names no member"),
    Case("zip_absolute_name", _build(_renamed("/mlp/data/weights/weight_0")), None,
         check=_finds("unsafe member name")),
    Case("zip_duplicate_names", _build(_duplicate), None, check=_finds("more than once")),
    Case("zip_cd_points_inside_member", _build(_inside_member), wb.CorruptError, "bad signature"),
    Case("zip_local_header_past_eof", _build(_past_eof), wb.OutOfBoundsError),
    Case("zip_cd_offset_past_eof", _build(_cd_offset_past_eof), None, check=_all_tensors),
    Case("etrecord_dotdot_name", _build(lambda d: rezip(
        [("../" + n if n == "debug_handle_map" else n, c) for n, c in members(d)]),
        name="x.etrecord", src="mlp_portable.etrecord"), wb.CorruptError),
    Case("etrecord_json_depth", _build(lambda d: rezip(
        [(n, b"[" * 100_000 + b"]" * 100_000 if n == "debug_handle_map" else c)
         for n, c in members(d)]), name="x.etrecord", src="mlp_portable.etrecord"),
         LimitError, "'debug_handle_map' at 0x7ea0: JSON nests deeper than JSON_MAX_DEPTH=256"),
]
