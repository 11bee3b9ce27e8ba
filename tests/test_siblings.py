"""Which ``.ptd`` next to a program gets attached, and that the artifact says which and why.

Rules (``wb.open`` docstring): candidates are the ``.ptd`` files in the program's folder,
the one named like the program first, then the others in name order; each is attached only
when it resolves keys still unresolved (same name, dtype and shape); ``validate()`` names the
attached file and every other candidate that would also have fitted.

The decoys here hold the same keys and layouts as the right file but other bytes (one weight
byte edited), so picking the wrong one shows in the tensor bytes too. Expected bytes come from
ExecuTorch's FlatTensor deserializer.
"""

from __future__ import annotations

import os
import shutil
import struct

import pytest
from helpers import ptd_halve_first_dim

import workbench as wb
from workbench.formats.pte import sibling_data_files

KEYS = ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]


def _raw(x) -> bytes:
    import numpy as np

    return np.ascontiguousarray(x).tobytes()


@pytest.fixture
def folder(tmp_path, sample, oracle):
    """``tmp_path`` with ``model.pte``; ``put(name, edited)`` adds a copy of its .ptd (with one
    byte of fc1.weight flipped when ``edited``) and returns the path."""
    ptd = sample("mlp_external.ptd")
    good = ptd.read_bytes()
    named = oracle.ptd_named_bytes(ptd)
    w = named["fc1.weight"]
    at = good.find(w)
    assert at > 0 and good.find(w, at + 1) < 0  # fc1.weight's bytes occur once
    shutil.copy(sample("mlp_external.pte"), tmp_path / "model.pte")

    def put(name: str, edited: bool = False) -> str:
        d = bytearray(good)
        if edited:
            d[at] ^= 0x40
        (tmp_path / name).write_bytes(bytes(d))
        return str(tmp_path / name)

    put.weight = w
    put.pte = str(tmp_path / "model.pte")
    return put


def _attached(art) -> set[str]:
    ext = art.tensors[art.tensors["storage"] == "external"]
    assert sorted(ext["name"]) == KEYS and not ext["missing"].any()
    return set(ext["file"])


def _notes(art) -> dict[str, str]:
    f = art.validate()
    assert set(f["severity"]) <= {"info"}, f
    return dict(zip(f["structure"], f["message"]))


def test_same_stem_wins_over_an_older_file_first_in_name_order(folder):
    right = folder("model.ptd")
    old = folder("a_old.ptd", edited=True)  # sorts before model.ptd
    with wb.open(folder.pte) as art:
        assert art.files == [folder.pte, right]
        assert art.info["data_files"] == [right]
        assert _attached(art) == {right}
        assert _raw(art.tensor("fc1.weight")) == folder.weight  # model.ptd's bytes, not a_old's
        notes = _notes(art)
        assert set(notes) == {"data file 'model.ptd'", "data file 'a_old.ptd'"}
        assert notes["data file 'model.ptd'"] == ("attached automatically (next to the program, "
                                                  "named like it): resolves 4 of the 4 keys the "
                                                  "program needs")
        assert notes["data file 'a_old.ptd'"].startswith(
            "also fits (4 of the 4 keys the program needs) but is not attached: 'model.ptd' was "
            "tried first (named like the program)")
    with wb.open(folder.pte, data=[old]) as art:  # the caller can still choose the old one
        assert art.files == [folder.pte, old] and _attached(art) == {old}
        assert _raw(art.tensor("fc1.weight")) != folder.weight
        assert _notes(art) == {}


def test_without_a_same_stem_file_the_first_fitting_one_in_name_order(folder):
    a = folder("a.ptd")
    folder("b.ptd", edited=True)
    with wb.open(folder.pte) as art:
        assert _attached(art) == {a} and art.files == [folder.pte, a]
        assert _raw(art.tensor("fc1.weight")) == folder.weight
        notes = _notes(art)
        assert notes["data file 'a.ptd'"].startswith("attached automatically (next to the "
                                                     "program, holds keys it needs)")
        assert "'a.ptd' was tried first (name order)" in notes["data file 'b.ptd'"]


def test_same_stem_file_that_does_not_fit_is_passed_over(folder):
    """model.ptd holds the same names with other shapes (another model's export): the
    fitting a_old.ptd is attached, and the decoy is neither attached nor named as fitting."""
    right = folder("a_old.ptd")
    decoy = folder("model.ptd")
    for key in KEYS:
        ptd_halve_first_dim(decoy, key)
    with wb.open(folder.pte) as art:
        assert _attached(art) == {right} and art.files == [folder.pte, right]
        assert list(_notes(art)) == ["data file 'a_old.ptd'"]


def test_keys_are_resolved_one_by_one(folder):
    """model.ptd fits three keys; fc1.weight comes from the next candidate that fits it."""
    other = folder("a_old.ptd")
    right = folder("model.ptd")
    ptd_halve_first_dim(right, "fc1.weight")
    with wb.open(folder.pte) as art:
        ext = art.tensors[art.tensors["storage"] == "external"].set_index("name")
        assert dict(ext["file"]) == {"fc1.bias": right, "fc1.weight": other, "fc2.bias": right,
                                     "fc2.weight": right}
        assert art.files == [folder.pte, right, other]
        notes = _notes(art)
        assert notes["data file 'model.ptd'"].endswith("resolves 3 of the 4 keys the program needs")
        assert notes["data file 'a_old.ptd'"].endswith("resolves 1 of the 4 keys the program needs")


def test_only_an_old_file_is_still_attached(folder):
    old = folder("a_old.ptd", edited=True)
    with wb.open(folder.pte) as art:
        assert _attached(art) == {old}
        assert _raw(art.tensor("fc1.weight")) != folder.weight


def test_candidate_order(tmp_path):
    for n in ("b.ptd", "model.ptd", "a.ptd", "model.ptd.bak", "model.pte", "c.PTD"):
        (tmp_path / n).write_bytes(b"")
    (tmp_path / "dir.ptd").mkdir()
    got = sibling_data_files(str(tmp_path / "model.pte"))
    assert [os.path.basename(p) for p in got] == ["model.ptd", "a.ptd", "b.ptd"]
    assert all(os.path.dirname(p) == str(tmp_path) for p in got)


def test_data_choice_needs_no_parse_of_later_candidates(folder, monkeypatch):
    """Once model.ptd resolves everything, a_old.ptd is not parsed at open (only validate()
    looks at it)."""
    import workbench.formats.ptd as ptd

    folder("model.ptd")
    folder("a_old.ptd", edited=True)
    seen = []
    real = ptd.read
    monkeypatch.setattr(ptd, "read", lambda src: seen.append(os.path.basename(src.path)) or real(src))
    with wb.open(folder.pte) as art:
        assert seen == ["model.ptd"]
        art.validate()
        assert seen == ["model.ptd", "a_old.ptd"]


def test_struct_layout_of_the_edit(folder):
    """Guard for the fixture: the edited copy differs in exactly one byte."""
    a = open(folder("x.ptd"), "rb").read()
    b = open(folder("y.ptd", edited=True), "rb").read()
    assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1
    assert struct.unpack_from("<4s", a, 4)[0] == b"FT01"


def test_siblings_given_as_a_list_are_each_tried_once(folder, monkeypatch):
    """``formats.pte.read`` takes any iterable of candidates; a list is tried in order, each
    candidate once (the first one is looked at before the blobs are scanned)."""
    from workbench.formats import ptd, pte
    from workbench.formats.pte.external import External
    from workbench.source import Source

    wrong = folder("a_wrong.ptd", edited=True)
    ptd_halve_first_dim(wrong, "fc1.weight")  # another shape: it resolves the other keys
    right = folder("model.ptd")
    tried = []
    real = External.resolves
    monkeypatch.setattr(External, "resolves",
                        lambda self, p: tried.append(os.path.basename(p.path)) or real(self, p))
    cands = [ptd.read(Source(path)) for path in (wrong, right)]
    p = pte.read(Source(folder.pte), siblings=cands)
    assert p.info["data_files"] == [wrong, right]
    assert tried == ["a_wrong.ptd", "model.ptd"]


def test_no_candidate_no_blob_scan(tmp_path, sample, monkeypatch):
    """A delegated program with no data file beside it opens without scanning its blobs for
    content-hash keys (its frames get the keys from the parsed graphs)."""
    from workbench.formats.pte import external

    shutil.copy(sample("mlp_xnnpack.pte"), tmp_path / "m.pte")
    scanned = []
    real = external._hex_runs
    monkeypatch.setattr(external, "_hex_runs", lambda blob: scanned.append(1) or real(blob))
    with wb.open(tmp_path / "m.pte") as art:
        assert not scanned
        assert art.frames["named_data"]["used_by"].notna().all()
        assert not scanned
        assert art._parsed.extra.wanted_keys() == 0
        assert scanned  # the count of wanted keys is worked out on demand


def test_key_users_of_keys_shared_by_blobs_and_keys_not_held():
    """``used_by`` text and lists: a key several blobs list names each blob once, in blob
    order; a key a parser lists that neither the program nor a data file holds is dropped
    (the filter and the shared-key join are short-cut in the usual case: all held, none
    shared)."""
    from workbench.formats.pte.external import External

    class D:  # a delegate of a method: only what _blobs reads
        def __init__(self, k):
            self.offset, self.size, self.id = 8 * k, 8, f"B{k}"

    class M:
        def __init__(self, name, n):
            self.name, self.delegates = name, [D(k) for k in range(n)]

    class Src:
        buf = memoryview(bytes(64))

    lists = {(0, 0): ("k1", "k2"), (0, 1): ("k2", "k3", "gone"), (1, 0): ("k1",),
             (1, 1): ("k4",)}
    ext = External.__new__(External)
    ext.src, ext.methods, ext.named = Src(), [M("f", 2), M("g", 2)], ["k1", "k2", "k3", "k4"]
    ext.data, ext._key_users, ext._user_text, ext._hits = [], None, None, None
    ext._hex_sets = ext._hex_wanted = None
    ext.parsed_keys = lambda m, k: lists[m, k]
    a, b, c, d = "f delegate 0 (B0)", "f delegate 1 (B1)", "g delegate 0 (B0)", "g delegate 1 (B1)"
    assert ext._blob_hits() == [(a, ["k1", "k2"]), (b, ["k2", "k3"]), (c, ["k1"]), (d, ["k4"])]
    assert ext.key_user_text() == {"k1": f"{a}; {c}", "k2": f"{a}; {b}", "k3": b, "k4": d}
    assert ext.key_users == {"k1": [a, c], "k2": [a, b], "k3": [b], "k4": [d]}
