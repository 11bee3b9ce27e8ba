"""The columnar helpers behind the fast frame builders (workbench._cols, workbench._vecfb)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import workbench as wb
from workbench import _cols
from workbench._vecfb import SlowPath, VecReader, groups, unique_tuples
from workbench.flatbuf import FlatBuffer
from workbench.formats.pte.columns import list_texts
from workbench.source import Source


def test_strings_never_changes_its_input():
    arr = np.array(["a", None, "c"], dtype=object)
    out = _cols.strings(arr)
    assert out.isna().tolist() == [False, True, False]
    assert arr[1] is None  # StringArray turns None into <NA> in place: not in OUR array


def test_filled_shares_one_object_and_keeps_tuples_whole():
    a = _cols.filled(3, (0, 1))
    assert a.shape == (3,) and a[0] == (0, 1) and a[0] is a[2]


def test_categorical_first_appearance_missing_and_duplicate_names():
    cat = _cols.categorical(np.array([2, 0, 2, -1, 1]), ["x", "y", "x"])
    # codes 2 and 0 share the name "x": one category, in order of first appearance
    assert cat.categories.tolist() == ["x", "y"]
    assert [None if v is np.nan or pd.isna(v) else v for v in cat] == ["x", "x", "x", None, "y"]
    big = _cols.categorical(np.array([5000, 3, 5000]), {5000: "a", 3: "b"})
    assert big.tolist() == ["a", "b", "a"]
    assert len(_cols.categorical(np.array([], np.int64), [])) == 0


def test_plain_gives_none_for_missing():
    assert _cols.plain(_cols.ints(np.array([1, 2]), np.array([False, True]))) == [1, None]
    assert _cols.plain(_cols.strings(["a", None])) == ["a", None]
    assert _cols.plain(_cols.categorical(np.array([0, -1]), ["k"])) == ["k", None]
    assert _cols.plain([1, None]) == [1, None]


def test_align_is_missing_for_zero_and_missing_offsets():
    got = _cols.align(np.array([0x1F00, 48, 0, 64]), np.array([False, False, False, True]))
    assert _cols.plain(got) == [256, 16, None, None]


@pytest.mark.parametrize("seed", range(5))
def test_unique_tuples_and_groups_agree_with_python(seed):
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 4, 300)
    # small values, and huge ones that need ranking before they can be combined
    flat = rng.choice(np.array([0, 1, 7, -3, 2**40, -(2**40)]), int(counts.sum()))
    tuples, ids, uniques = unique_tuples(flat, counts)
    expect, pos = [], 0
    for c in counts.tolist():
        expect.append(tuple(flat[pos:pos + c].tolist()))
        pos += c
    assert tuples.tolist() == expect
    assert all(uniques[i] == t for i, t in zip(ids.tolist(), expect))
    assert len(set(ids.tolist())) == len(set(expect)) == len(uniques)
    key = rng.integers(-(2**62), 2**62, 500) if seed % 2 else rng.integers(0, 9, 500)
    rep, inv = groups(key)
    assert (key[rep[inv]] == key).all() and len(rep) == len(np.unique(key))


def test_list_texts_renders_like_python():
    items = _cols.objects(["1", "2", "3", "4"])
    got = list_texts(items, np.array([2, 0, 1, 1]), np.array([2, 0, 20, 1])).tolist()
    assert got == ["[1, 2]", "[]", "[3, ... (20 items)]", "[4]"]
    assert list_texts(_cols.objects([]), np.array([0, 0]), np.array([0, 0])).tolist() == ["[]",
                                                                                            "[]"]


def _strings_buffer(tmp_path, payloads: list[bytes]):
    """A flatbuffer-like blob: root offset, then length-prefixed strings; returns their refs."""
    body = bytearray(b"\x00" * 8)
    refs = []
    for p in payloads:
        refs.append(len(body))
        body += len(p).to_bytes(4, "little") + p + b"\x00"
        while len(body) % 4:
            body += b"\x00"
    path = tmp_path / "s.bin"
    path.write_bytes(bytes(body))
    src = Source(str(path))
    return VecReader(FlatBuffer(src, 0, src.size, name="T")), np.array(refs, np.int64)


def test_vector_strings_decode_and_refuse_bad_input(tmp_path):
    vec, refs = _strings_buffer(tmp_path, [b"alpha", b"", "\u00e9t\u00e9".encode()])
    got = vec.strings(np.concatenate([refs, [0]]))
    assert got.tolist() == ["alpha", "", "\u00e9t\u00e9", None]
    vec, refs = _strings_buffer(tmp_path, [b"a\x00b"])  # a NUL inside: the scalar path decides
    with pytest.raises(SlowPath):
        vec.strings(refs)
    vec, refs = _strings_buffer(tmp_path, [b"\xff\xfe"])  # not UTF-8
    with pytest.raises(SlowPath):
        vec.strings(refs)


@pytest.mark.parametrize("count", [3, 200])  # few rows: fancy index; many: window view
@pytest.mark.parametrize("widths", [(5,), (0, 7, 64), tuple(range(1, 12))])
def test_vector_strings_fixed_width_and_general_paths_agree(tmp_path, count, widths):
    """Many ASCII strings of a few lengths (the block path), of many lengths or holding
    non-ASCII text (the general path): the same strings, in order; a NUL inside any of them
    is refused on both paths."""
    import random

    rng = random.Random(count * 31 + len(widths))
    texts = ["".join(rng.choice("abcxyz_0123") for _ in range(rng.choice(widths)))
             for _ in range(count)]
    vec, refs = _strings_buffer(tmp_path, [t.encode() for t in texts])
    assert vec.strings(refs).tolist() == texts
    mixed = [*texts[:-1], "\u00e9" * max(1, len(texts[-1]) // 2)]
    vec, refs = _strings_buffer(tmp_path, [t.encode() for t in mixed])
    assert vec.strings(refs).tolist() == mixed
    bad = [*texts[:-1], "a\x00b"]
    vec, refs = _strings_buffer(tmp_path, [t.encode() for t in bad])
    with pytest.raises(SlowPath):
        vec.strings(refs)


@pytest.mark.parametrize("count", [1, 63, 64, 500])
def test_rows_at_equals_slicing(count):
    """``rows_at`` (fancy index or window view) gives ``u8[s:s + w]`` for every start."""
    from workbench._vecfb import rows_at

    rng = np.random.default_rng(count)
    u8 = rng.integers(0, 256, 4096, dtype=np.uint8)
    for width in (1, 2, 8, 69):
        starts = rng.integers(0, len(u8) - width + 1, count).astype(np.int64)
        got = rows_at(u8, starts, width)
        assert got.shape == (count, width)
        assert [bytes(r) for r in got] == [u8[s:s + width].tobytes() for s in starts.tolist()]


def test_editing_one_frame_does_not_leak_into_another(samples_dir):
    """Readers share arrays between frames and with their own records: frames are copies."""
    art = wb.open(samples_dir / "mlp_portable.pte")
    tensors = art.tensors
    tensors.loc[:, "shape"] = [("edited",)] * len(tensors)
    tensors.loc[:, "name"] = "edited"
    summary = art.frames["values"]["summary"]
    assert not summary.str.contains("edited").any()
    assert art.tensor("forward/0").shape == wb.open(samples_dir / "mlp_portable.pte").tensor(
        "forward/0").shape
    ptd = wb.open(samples_dir / "mlp_external.ptd")
    ptd.tensors.loc[:, "shape"] = [("edited",)] * len(ptd.tensors)
    assert all(isinstance(s, tuple) and "edited" not in s
               for s in ptd._parsed.extra.ptd.cols["shape"])
    prog = wb.open(samples_dir / "mlp_external.pte", data=[samples_dir / "mlp_external.ptd"])
    assert not prog.tensors["missing"].any()


def _tables_buffer(tmp_path, nvt: int, rows: int, edit=None):
    """``rows`` tables (three u32 fields: k, 7 * k, 3 absent in every other vtable) over
    ``nvt`` distinct vtables (row k uses vtable k % nvt, some with a 4th field slot), each
    vtable written by ``struct``; ``edit(buf, vtable positions)`` may corrupt them."""
    import struct

    body = bytearray(b"\x00" * 8)
    vts = []
    for j in range(nvt):
        nf = 3 + (j % 2)  # some vtables list a fourth (absent) field
        vts.append(len(body))
        fields = [4, 8, 0 if j % 3 == 0 else 12][:3] + [0] * (nf - 3)
        body += struct.pack(f"<HH{nf}H", 4 + 2 * nf, 16, *fields)
        while len(body) % 4:
            body += b"\x00"
    pos = []
    for k in range(rows):
        at = len(body)
        vt = vts[k % nvt]
        body += struct.pack("<iIII", at - vt, k, 7 * k, 3)
        pos.append(at)
    if edit is not None:
        edit(body, vts)
    path = tmp_path / "t.bin"
    path.write_bytes(bytes(body))
    src = Source(str(path))
    return VecReader(FlatBuffer(src, 0, src.size, name="T")), np.array(pos, np.int64)


@pytest.mark.parametrize("nvt", [1, 3, 4, 5, 40])  # one by one up to 4, more in one pass
def test_tables_over_many_vtables(tmp_path, nvt):
    vec, pos = _tables_buffer(tmp_path, nvt, 300)
    T = vec.tables(pos, "T")
    k = np.arange(300)
    assert T.scalar(0, "<u4").tolist() == k.tolist()
    assert T.scalar(1, "<u4").tolist() == (7 * k).tolist()
    third = np.where((k % nvt) % 3 == 0, 99, 3)
    assert T.scalar(2, "<u4", default=99).tolist() == third.tolist()
    assert T.scalar(3, "<u4", default=5).tolist() == [5] * 300
    assert T.vt.tolist() == (pos - vec.gather(pos, "<i4")).tolist()
    rows = T.inv if T.inv is not None else np.zeros(300, np.int64)
    assert (T.vtsize[rows] == 4 + 2 * (3 + (k % nvt) % 2)).all()


@pytest.mark.parametrize("corrupt", ["odd size", "short table", "soffset field", "past end"])
@pytest.mark.parametrize("nvt", [3, 40])
def test_bad_vtables_are_left_to_the_scalar_reader(tmp_path, nvt, corrupt):
    import struct

    def edit(buf, vts):
        vt = vts[-1]
        if corrupt == "odd size":
            struct.pack_into("<H", buf, vt, 7)
        elif corrupt == "short table":
            struct.pack_into("<H", buf, vt + 2, 2)
        elif corrupt == "soffset field":
            struct.pack_into("<H", buf, vt + 4, 2)
        else:
            struct.pack_into("<H", buf, vt, 60000)  # more fields than the buffer holds

    vec, pos = _tables_buffer(tmp_path, nvt, 100, edit)
    with pytest.raises(SlowPath):
        vec.tables(pos, "T")


def test_spans_behave_as_a_list_of_spans():
    """``pte.tensors.Spans`` (the program's segments, kept as two columns) answers as the
    list of :class:`Span` it replaces: items, negative items, slices, iteration, length,
    equality, and IndexError past either end."""
    from workbench.formats.pte.tensors import Span, Spans

    off, size = np.array([64, 128, 4096], np.int64), np.array([8, 0, 16], np.int64)
    spans = Spans(off, size)
    as_list = [Span(64, 8), Span(128, 0), Span(4096, 16)]
    assert len(spans) == 3 and list(spans) == as_list and spans == as_list
    assert spans[0] == as_list[0] and spans[-1] == as_list[-1] and spans[1:] == as_list[1:]
    assert type(spans[1].offset) is int and spans[2] != as_list[1]
    off_, size_ = spans[2]
    assert (off_, size_) == (4096, 16)
    for bad in (3, -4):
        with pytest.raises(IndexError):
            spans[bad]
    assert spans != as_list[:2] and Spans(off[:0], size[:0]) == []


def test_isin_few_equals_numpy():
    """``_cols.isin_few`` (one comparison per item up to ``FEW_ITEMS``) answers as ``np.isin``
    on both sides of the cut, for empty inputs, narrow dtypes and values beyond int32."""
    rng = np.random.default_rng(5)
    values = np.concatenate([rng.integers(-40, 40, 300), [2**40, -2**40]]).astype(np.int64)
    for n in (0, 1, 2, _cols.FEW_ITEMS, _cols.FEW_ITEMS + 1, 50):
        items = tuple(int(x) for x in rng.integers(-40, 40, n))
        for v in (values, values[:0], (values % 100).astype(np.int8)):
            want = np.isin(v, np.asarray(items, np.int64))
            assert np.array_equal(_cols.isin_few(v, items), want), (n, v.dtype)


@pytest.mark.parametrize("values", [["a"], ["b", "a", None, "b"], [None, None], ["x", 1],
                                    ["ü", "a"], ["a"] * 5, ["", "a"], [1.5, None]])
def test_category_lists_as_pandas_factorize(values):
    """``frames._category`` (names coded in Python, the usual case) gives what
    ``pandas.factorize`` gives: codes, categories and their dtype, ``None`` missing."""
    from workbench import frames

    codes, uniques = pd.factorize(np.array(values, dtype=object), use_na_sentinel=True)
    want = pd.Categorical.from_codes(codes, categories=uniques, validate=False)
    got = frames._category(values)
    pd.testing.assert_extension_array_equal(got, want)
    assert got.categories.dtype == want.categories.dtype


@pytest.mark.parametrize("name", ["mlp_xnnpack.pte", "mlp.pt2", "mlp.bpte", "mlp_external.ptd",
                                  "mlp_portable.etdp", "mlp_portable.etrecord"])
def test_every_string_column_answers_isin(name):
    """pandas 3 gives a bare StringArray the pyarrow dtype while it holds Python strings:
    ``Series.isin`` then failed with a bare AssertionError. Every string column of every frame
    of every format answers ``isin`` (and its dtype says python storage)."""
    import pathlib

    path = pathlib.Path(__file__).resolve().parent.parent / "sample_models" / name
    art = wb.open(path)
    checked = 0
    for frame in art.frames:
        df = art.frames[frame]
        for col in df.columns:
            if isinstance(df[col].dtype, pd.StringDtype):
                first = df[col].dropna().head(1).tolist()
                got = df[col].isin([*first, "\0 not a value"])
                assert int(got.sum()) == int((df[col] == first[0]).sum()) if first else True
                checked += 1
    assert checked >= 3
