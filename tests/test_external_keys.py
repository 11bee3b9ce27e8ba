"""Which named-data keys a delegate blob mentions (``formats/pte/external.py``): the run-based
scans give exactly what the plain definitions give (``re.findall`` of 64 hex digits; ``key in
blob`` per key), on random blobs built to hold keys, parts of keys and long runs."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.formats.pte.external import _hex_runs, _Substrings

_HEX_KEY = re.compile(rb"[0-9a-f]{64}")  # the oracle: what a regular expression finds

HEX = "0123456789abcdef"


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(HEX) for _ in range(n))


@st.composite
def hex_blobs(draw) -> bytes:
    """Hex runs of lengths around 64 and its multiples between arbitrary bytes."""
    parts = []
    for _ in range(draw(st.integers(0, 6))):
        n = draw(st.sampled_from([0, 1, 63, 64, 65, 100, 127, 128, 129, 200]))
        parts.append(_hex(random.Random(draw(st.integers(0, 2**16))), n).encode())
        parts.append(draw(st.binary(max_size=5)))
    return b"".join(parts)


_IDENT = re.compile(rb"[0-9A-Za-z_]*\Z")


def _oracle_keys(blob: bytes) -> set[str]:
    """What a regular expression finds, each hash extended to the longest flatbuffer string
    (u32 length, then identifier characters) that it ends."""
    out = set()
    for m in _HEX_KEY.finditer(blob):
        s, key = m.start(), m.group().decode()
        for k in range(min(64, s), 0, -1):
            prefix = blob[s - k:s]
            if s - k >= 4 and _IDENT.match(prefix) and \
                    int.from_bytes(blob[s - k - 4:s - k], "little") == k + 64:
                key = (prefix + m.group()).decode()
                break
        out.add(key)
    return out


@st.composite
def framed_keys(draw) -> bytes:
    """Flatbuffer strings of a prefix and a hash (``scale_<hash>``), hashes and other bytes."""
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        prefix = draw(st.sampled_from(["", "scale_", "x", "_A9", "F" * 63, "bad-"]))
        text = (prefix + _hex(random.Random(draw(st.integers(0, 2**16))), 64)).encode()
        n = len(text) + draw(st.sampled_from([0, 0, 1, -1]))  # a wrong length sometimes
        parts.append(draw(st.binary(max_size=3)) + n.to_bytes(4, "little") + text + b"\x00")
    return b"".join(parts)


@settings(max_examples=300, deadline=None)
@given(st.one_of(hex_blobs(), framed_keys()))
def test_hex_runs_find_what_findall_finds(blob):
    assert _hex_runs(memoryview(blob)) == _oracle_keys(blob)


def test_hex_runs_take_the_whole_flatbuffer_string():
    """XNNPACK keys the scales of a quantized weight ``scale_<hash>``: that is the key the
    runtime looks up, not the bare hash inside it."""
    h, g = "ab" * 32, "01" * 32

    def string(text: str) -> bytes:
        return len(text).to_bytes(4, "little") + text.encode() + b"\x00"

    blob = b"\x07" * 3 + string("scale_" + h) + string(g) + string("xscale_" + g)
    assert _hex_runs(memoryview(blob)) == {"scale_" + h, g, "xscale_" + g}
    # the length does not match: not a string, the bare hash stays
    assert _hex_runs(memoryview((5).to_bytes(4, "little") + b"scale_" + h.encode())) == {h}


def test_hex_runs_examples():
    a, b = "a" * 64, "0123456789abcdef" * 4
    assert _hex_runs(memoryview(b"")) == set()
    assert _hex_runs(memoryview(a.encode())) == {a}
    assert _hex_runs(memoryview((a + b).encode())) == {a, b}          # 128 digits: two keys
    assert _hex_runs(memoryview((a + "f" * 63).encode())) == {a}      # the rest is too short
    assert _hex_runs(memoryview(("F" + a + "g" + b[:63]).encode())) == {a}  # upper case: not hex
    assert _hex_runs(memoryview(b"\x00" + a.encode() + b"\x00")) == {a}


KEY_CHARS = "ab_1."


@st.composite
def keys_and_blob(draw) -> tuple[list[str], bytes]:
    """Keys of a few lengths over a small alphabet (so that they overlap and contain each
    other), and a blob of keys, pieces of keys and other bytes."""
    keys = draw(st.lists(st.text(KEY_CHARS, min_size=1, max_size=9), min_size=1, max_size=12,
                         unique=True))
    pieces = []
    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            pieces.append(draw(st.sampled_from(keys)).encode())
        elif kind == 1:
            k = draw(st.sampled_from(keys))
            pieces.append(k[: draw(st.integers(0, len(k)))].encode())
        elif kind == 2:
            pieces.append(draw(st.text(KEY_CHARS, max_size=30)).encode())
        else:
            pieces.append(draw(st.binary(max_size=4)))
    return keys, b"".join(pieces)


@settings(max_examples=400, deadline=None)
@given(keys_and_blob())
def test_substrings_find_what_in_finds(case):
    keys, blob = case
    got = _Substrings(keys).within(memoryview(blob))
    assert sorted(got) == sorted(k for k in keys if k.encode() in blob)
    assert len(got) == len(set(got))


@pytest.mark.parametrize("window_cost", [0, 10**9])
def test_substrings_both_strategies(monkeypatch, window_cost):
    """Windows of long runs (cost 0) and one scan per key (windows too dear) agree."""
    monkeypatch.setattr(_Substrings, "WINDOW_COST", window_cost)
    rng = random.Random(3)
    keys = [f"scale_{_hex(rng, 64)}" for _ in range(20)] + ["w.0", "weight", "eight"]
    inside = [keys[0], keys[5], "weights.0", f"x{keys[7]}y"]  # 'weight', 'eight' in 'weights'
    blob = b"\x00".join(k.encode() for k in inside) + bytes(rng.randrange(256) for _ in range(500))
    want = {keys[0], keys[5], keys[7], "weight", "eight"}
    assert set(_Substrings(keys).within(memoryview(blob))) == want


def test_xnnpack_program_keys_are_named_with_their_delegates(sample):
    """On a real XNNPACK program every named-data key the delegate reads (sha256 and
    ``scale_`` keys) is listed as used by that delegate, and only those."""
    import workbench as wb

    with wb.open(sample("wide_xnnpack_8da4w.pte")) as art:
        nd = art.frames["named_data"]
        dt = art.frames["delegate_tensors"]
        used = set(dt["named_key"].dropna()) | set(dt["scale_key"].dropna())
        assert used and any(re.fullmatch(r"scale_[0-9a-f]{64}", k) for k in used)
        users = dict(zip(nd["key"], nd["used_by"]))
        assert {k for k, u in users.items() if isinstance(u, str)} == used
        assert {u for u in users.values() if isinstance(u, str)} == {
            "forward delegate 0 (XnnpackBackend)"}
