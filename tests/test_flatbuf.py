"""workbench.flatbuf: the verifying flatbuffer reader, on buffers built here by hand
(struct.pack, exact control of every byte) and with the official ``flatbuffers.Builder``."""

from __future__ import annotations

import struct
import tempfile
import time
from pathlib import Path

import pytest
from helpers import deadline
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.errors import ArtifactError, CorruptError, OutOfBoundsError, TruncatedError
from workbench.flatbuf import FlatBuffer, Table
from workbench.source import Source


# -- a tiny layout builder: objects in order, forward references patched at the end ------------------
class Layout:
    def __init__(self) -> None:
        self.buf = bytearray()
        self.labels: dict[str, int] = {}
        self._refs: list[tuple[int, str]] = []
        self._soffsets: list[tuple[int, str]] = []

    def align(self, n: int) -> Layout:
        self.buf += bytes(-len(self.buf) % n)
        return self

    def mark(self, label: str) -> Layout:
        self.labels[label] = len(self.buf)
        return self

    def pack(self, fmt: str, *values) -> Layout:
        self.buf += struct.pack("<" + fmt, *values)
        return self

    def ref(self, label: str) -> Layout:
        self._refs.append((len(self.buf), label))
        return self.pack("I", 0)

    def soffset(self, vtable: str) -> Layout:
        self._soffsets.append((len(self.buf), vtable))
        return self.pack("i", 0)

    def string(self, label: str, raw: bytes, nul: bool = True) -> Layout:
        self.align(4).mark(label).pack("I", len(raw))
        self.buf += raw + (b"\0" if nul else b"")
        return self

    def finish(self) -> tuple[bytearray, dict[str, int]]:
        for at, label in self._refs:
            target = self.labels[label]
            assert target > at, f"reference to {label} must point forward"
            struct.pack_into("<I", self.buf, at, target - at)
        for at, label in self._soffsets:
            struct.pack_into("<i", self.buf, at, at - self.labels[label])
        return self.buf, self.labels


ROOT_FIELDS = [4, 8, 12, 16, 24, 20, 0, 32, 40, 44]  # field i -> offset in the root table
ROOT_SIZE = 48


def hand_built(*, string: bytes = b"hello", ident: bytes = b"TEST") -> tuple[bytearray, dict[str, int]]:
    """Root table fields: 0 u32 7 | 1 string | 2 [int] 1,2,3 | 3 Sub(i64 42) | 4 union type 1 |
    5 union value Sub(i64 99) | 6 absent | 7 f64 2.5 | 8 [Sub] (sub, union value) | 9 [string]."""
    L = Layout()
    L.ref("root").pack("4s", ident)
    L.mark("root_vt").pack("HH", 4 + 2 * len(ROOT_FIELDS), ROOT_SIZE)
    L.pack(f"{len(ROOT_FIELDS)}H", *ROOT_FIELDS)
    L.align(8).mark("root").soffset("root_vt")
    L.mark("f0").pack("I", 7)
    L.mark("f1").ref("str")
    L.mark("f2").ref("vec")
    L.mark("f3").ref("sub")
    L.mark("f5").ref("uni")
    L.mark("f4").pack("B", 1).pack("3x").pack("4x")
    L.mark("f7").pack("d", 2.5)
    L.mark("f8").ref("tvec")
    L.mark("f9").ref("svec")
    assert len(L.buf) - L.labels["root"] == ROOT_SIZE
    L.string("str", string)
    L.align(4).mark("vec").pack("I", 3).pack("3i", 1, 2, 3)
    L.mark("tvec").pack("I", 2).ref("sub").ref("uni")
    L.mark("svec").pack("I", 2).ref("s1").ref("s2")
    L.string("s1", b"ab").string("s2", b"xyz")
    L.align(2).mark("sub_vt").pack("HHH", 6, 16, 8)
    L.align(8).mark("sub").soffset("sub_vt").pack("4x").pack("q", 42)
    L.mark("uni").soffset("sub_vt").pack("4x").pack("q", 99)
    return L.finish()


def official_built() -> bytes:
    """The same shape of root table, written by the flatbuffers package's Builder."""
    import flatbuffers

    b = flatbuffers.Builder(0)
    s = b.CreateString("hello")
    s1, s2 = b.CreateString("ab"), b.CreateString("xyz")
    b.StartVector(4, 3, 4)
    for x in (3, 2, 1):
        b.PrependInt32(x)
    vec = b.EndVector()
    b.StartObject(1)
    b.PrependInt64Slot(0, 42, 0)
    sub = b.EndObject()
    b.StartObject(1)
    b.PrependInt64Slot(0, 99, 0)
    uni = b.EndObject()
    b.StartVector(4, 2, 4)
    b.PrependUOffsetTRelative(uni)
    b.PrependUOffsetTRelative(sub)
    tvec = b.EndVector()
    b.StartVector(4, 2, 4)
    b.PrependUOffsetTRelative(s2)
    b.PrependUOffsetTRelative(s1)
    svec = b.EndVector()
    b.StartObject(10)
    b.PrependUint32Slot(0, 7, 0)
    b.PrependUOffsetTRelativeSlot(1, s, 0)
    b.PrependUOffsetTRelativeSlot(2, vec, 0)
    b.PrependUOffsetTRelativeSlot(3, sub, 0)
    b.PrependUint8Slot(4, 1, 0)
    b.PrependUOffsetTRelativeSlot(5, uni, 0)
    b.PrependFloat64Slot(7, 2.5, 0)
    b.PrependUOffsetTRelativeSlot(8, tvec, 0)
    b.PrependUOffsetTRelativeSlot(9, svec, 0)
    root = b.EndObject()
    b.Finish(root, file_identifier=b"TEST")
    return bytes(b.Output())


_TMP = Path(tempfile.mkdtemp(prefix="wb-flatbuf-"))
_COUNTER = [0]


def fb_of(data: bytes, *, prefix: bytes = b"", suffix: bytes = b"", identifier=b"TEST",
          end: int | None = None) -> FlatBuffer:
    """A FlatBuffer over ``data`` written to a file (at offset len(prefix))."""
    _COUNTER[0] += 1
    p = _TMP / f"fb{_COUNTER[0] % 8}.bin"
    p.write_bytes(prefix + bytes(data) + suffix)
    src = Source(p)
    base = len(prefix)
    return FlatBuffer(src, base, base + len(data) if end is None else end, identifier=identifier,
                      name="Test")


def check_valid(root: Table) -> None:
    assert root.u32(0) == 7
    assert root.string(1) == "hello"
    assert root.scalars(2, "i") == (1, 2, 3)
    assert root.array(2, "<i4").tolist() == [1, 2, 3]
    sub = root.table(3)
    assert isinstance(sub, Table) and sub.i64(0) == 42
    t, uni = root.union(4, 3)
    assert t == 1 and uni.i64(0) == 99
    assert root.f64(7) == 2.5
    assert [x.i64(0) for x in root.tables(8)] == [42, 99]
    assert root.strings(9) == ["ab", "xyz"]


# -- valid buffers ----------------------------------------------------------------------------------
def test_hand_built_buffer_is_valid_for_the_official_reader():
    """Guard for the builder above: the flatbuffers package reads the same values."""
    from flatbuffers import table

    data, _ = hand_built()
    root = struct.unpack_from("<I", data, 0)[0]
    t = table.Table(bytearray(data), root)
    assert t.Get(__import__("flatbuffers").number_types.Uint32Flags, root + t.Offset(4)) == 7
    assert t.String(root + t.Offset(6)) == b"hello"
    assert t.VectorLen(t.Offset(8)) == 3


@pytest.mark.parametrize("maker", [lambda: hand_built()[0], official_built], ids=["hand", "official"])
def test_reads_every_field_kind(maker):
    fb = fb_of(maker())
    check_valid(fb.root("Root"))


def test_absent_fields_give_defaults():
    root = fb_of(hand_built()[0]).root("Root")
    assert not root.has(6) and root.has(0)
    assert root.u32(6) == 0 and root.u32(6, 5) == 5
    assert root.i64(6, -1) == -1 and root.f64(6, 1.5) == 1.5 and root.bool(6) is False
    assert root.string(6) is None and root.table(6) is None
    assert root.vector(6, 4) == (0, 0) and root.scalars(6, "i") == ()
    assert root.tables(6) == [] and root.strings(6) == [] and len(root.array(6, "<u8")) == 0
    assert root.union(6, 3) == (0, None)
    # fields past the end of the vtable (a newer schema's fields) are absent too
    assert not root.has(50) and root.u64(50) == 0 and root.string(50) is None
    assert root.struct(6, 8) == 0


def test_offsets_are_absolute_in_a_window(tmp_path):
    data, labels = hand_built()
    prefix = b"\xee" * 24
    fb = fb_of(data, prefix=prefix, suffix=b"\xee" * 8)
    root = fb.root("Root")
    check_valid(root)
    assert root.pos == len(prefix) + labels["root"]
    start, n = root.vector(2, 4)
    assert (start, n) == (len(prefix) + labels["vec"] + 4, 3)


def test_identifier_is_checked():
    with pytest.raises(CorruptError, match="identifier"):
        fb_of(hand_built(ident=b"NOPE")[0]).root("Root")
    fb_of(hand_built(ident=b"NOPE")[0], identifier=None).root("Root")  # not checked


@pytest.mark.parametrize("n", range(0, 8))
def test_too_short(n):
    with pytest.raises(TruncatedError):
        fb_of(hand_built()[0][:n]).root("Root")


# -- corrupt structures --------------------------------------------------------------------------------
def edited(edit) -> FlatBuffer:
    data, labels = hand_built()
    edit(data, labels)
    return fb_of(data)


def expect(cls, fn, *, offset: bool = True):
    with deadline(5):
        with pytest.raises(cls) as ei:
            fn()
    e = ei.value
    assert isinstance(e, ArtifactError)
    if offset:
        assert isinstance(e.offset, int) and e.offset >= 0 and f" at 0x{e.offset:x}: " in str(e)
    assert e.file and e.file.startswith("fb")
    return e


@pytest.mark.parametrize("value", [0xFFFFFFFF, 0x7FFFFFFF, "end", "end-2"], ids=str)
def test_root_offset_outside(value):
    def edit(d, L):
        v = {"end": len(d), "end-2": len(d) - 2}.get(value, value)
        struct.pack_into("<I", d, 0, v)
    fb = edited(edit)
    expect((OutOfBoundsError, TruncatedError), lambda: fb.root("Root"))


@pytest.mark.parametrize("soffset", [-0x80000000, -10_000], ids=hex)
def test_vtable_outside(soffset):
    fb = edited(lambda d, L: struct.pack_into("<i", d, L["root"], soffset))
    expect((OutOfBoundsError, TruncatedError), lambda: fb.root("Root"))


@pytest.mark.parametrize("soffset", [0x7FFFFFFF, 10_000], ids=hex)
def test_vtable_before_the_start(soffset):
    fb = edited(lambda d, L: struct.pack_into("<i", d, L["root"], soffset))
    expect((OutOfBoundsError, TruncatedError), lambda: fb.root("Root"))


@pytest.mark.parametrize("vtsize", [0, 2, 3, 5, 21], ids=str)
def test_vtable_size_odd_or_too_small(vtsize):
    fb = edited(lambda d, L: struct.pack_into("<H", d, L["root_vt"], vtsize))
    expect(CorruptError, lambda: fb.root("Root"))


def test_vtable_size_past_end():
    fb = edited(lambda d, L: struct.pack_into("<H", d, L["root_vt"], 0xFFFE))
    expect(ArtifactError, lambda: fb.root("Root"))


def test_vtable_odd_address():
    fb = edited(lambda d, L: struct.pack_into("<i", d, L["root"], L["root"] - L["root_vt"] - 1))
    expect(ArtifactError, lambda: fb.root("Root"))


@pytest.mark.parametrize("tsize", [0, 2, 3])
def test_table_size_too_small(tsize):
    fb = edited(lambda d, L: struct.pack_into("<H", d, L["root_vt"] + 2, tsize))
    expect(CorruptError, lambda: fb.root("Root"))


def test_table_past_end():
    fb = edited(lambda d, L: struct.pack_into("<H", d, L["root_vt"] + 2, 0xFFF0))
    expect(ArtifactError, lambda: fb.root("Root"))


@pytest.mark.parametrize("field,offset", [(0, 2), (0, 1)])
def test_field_offset_over_the_soffset(field, offset):
    fb = edited(lambda d, L: struct.pack_into("<H", d, L["root_vt"] + 4 + 2 * field, offset))
    expect(CorruptError, lambda: fb.root("Root"))


def test_field_past_the_declared_size_is_bounded_by_the_buffer():
    # The official verifier bounds a field by the buffer, not by the table size its vtable
    # declares (older ExecuTorch writers left a trailing 8-byte field out of that size).
    fb = edited(lambda d, L: struct.pack_into("<H", d, L["root_vt"] + 2, 36))  # f7 at 32..40
    root = fb.root("Root")
    assert root.f64(7) == 2.5
    assert root.f64(7) == 2.5  # noted once per vtable and field
    (f,) = fb.findings
    assert f.severity == "info" and f.structure == "Root.field7"
    assert f.offset == root.pos + 32 and "declared size 36" in f.message
    assert root.u32(0) == 7 and not fb.findings[1:]  # fields inside the size: no finding


@pytest.mark.parametrize("offset", [0xFFFF, ROOT_SIZE])
def test_field_past_the_buffer(offset):
    data, labels = hand_built()
    struct.pack_into("<H", data, labels["root_vt"] + 4 + 2 * 7, offset)
    # the window ends where the field would start (+4): an 8-byte read runs past it
    fb = fb_of(data, end=min(len(data), labels["root"] + offset + 4))
    root = fb.root("Root")
    expect((OutOfBoundsError, TruncatedError), lambda: root.f64(7))


def test_misaligned_field_is_read():
    # f64 field 7 moved to offset 36: 8 bytes fit in the 48-byte table but are 4-aligned only;
    # ExecuTorch's runtime reads it (alignment is relative to the verified buffer's start,
    # which is not our window's base for size-prefixed buffers): no error, no finding
    fb = edited(lambda d, L: struct.pack_into("<H", d, L["root_vt"] + 4 + 2 * 7, 36))
    root = fb.root("Root")
    assert root.f64(7) == struct.unpack_from("<d", fb.buf, root.pos + 36)[0]
    assert fb.findings == []


@pytest.mark.parametrize("field,getter", [
    (1, lambda r: r.string(1)), (2, lambda r: r.scalars(2, "i")), (3, lambda r: r.table(3)),
    (5, lambda r: r.union(4, 3)), (8, lambda r: r.tables(8)), (9, lambda r: r.strings(9)),
])
@pytest.mark.parametrize("rel", [0x7FFFFFF0, "end"], ids=str)
def test_reference_past_end(field, getter, rel):
    def edit(d, L):
        at = L[f"f{field}"]
        struct.pack_into("<I", d, at, len(d) - at if rel == "end" else rel)
    root = edited(edit).root("Root")
    expect((OutOfBoundsError, TruncatedError), lambda: getter(root))


def test_string_without_nul():
    data, labels = hand_built()
    data[labels["str"] + 4 + 5] = ord("x")  # the NUL after "hello"
    root = fb_of(data).root("Root")
    expect(CorruptError, lambda: root.string(1))


def test_string_nul_beyond_window():
    data, labels = hand_built()
    end = labels["str"] + 4 + 5  # the window ends right before the NUL
    root = fb_of(data, end=end).root("Root")
    expect(ArtifactError, lambda: root.string(1))


@pytest.mark.parametrize("raw", [b"\xff", b"ab\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf8\x88\x80\x80\x80"],
                         ids=["ff", "cut", "surrogate", "overlong", "5byte"])
def test_string_invalid_utf8(raw):
    data, labels = hand_built(string=raw)
    root = fb_of(data).root("Root")
    e = expect(CorruptError, lambda: root.string(1))
    assert "UTF-8" in str(e)
    assert labels["str"] + 4 <= e.offset < labels["str"] + 4 + len(raw)


def test_strings_vector_with_invalid_utf8():
    data, labels = hand_built()
    data[labels["s2"] + 4] = 0xFF
    root = fb_of(data).root("Root")
    expect(CorruptError, lambda: root.strings(9))


@pytest.mark.parametrize("count", [2**31, 2**32 - 1, 2**20], ids=hex)
@pytest.mark.parametrize("label,getter", [
    ("str", lambda r: r.string(1)), ("vec", lambda r: r.scalars(2, "i")),
    ("vec", lambda r: r.array(2, "<i4")), ("vec", lambda r: r.vector(2, 4)),
    ("tvec", lambda r: r.tables(8)), ("svec", lambda r: r.strings(9)),
])
def test_vector_count_too_large(count, label, getter):
    fb = edited(lambda d, L: struct.pack_into("<I", d, L[label], count))
    root = fb.root("Root")
    t0 = time.perf_counter()
    expect(TruncatedError, lambda: getter(root))
    assert time.perf_counter() - t0 < 1


@pytest.mark.parametrize("tag", [3, 4, 255])
def test_union_type_unknown(tag):
    root = edited(lambda d, L: d.__setitem__(L["f4"], tag)).root("Root")
    e = expect(CorruptError, lambda: root.union(4, 3))
    assert "union" in str(e)


def test_union_value_missing():
    root = edited(lambda d, L: struct.pack_into("<H", d, L["root_vt"] + 4 + 2 * 5, 0)).root("Root")
    expect(CorruptError, lambda: root.union(4, 3))


def test_union_none():
    root = edited(lambda d, L: d.__setitem__(L["f4"], 0)).root("Root")
    assert root.union(4, 3) == (0, None)


def test_error_names_structure_path():
    fb = edited(lambda d, L: struct.pack_into("<I", d, L["svec"], 2**31))
    e = expect(TruncatedError, lambda: fb.root("Root").strings(9, "names"))
    assert "Root.names" in str(e)


# -- amplification ------------------------------------------------------------------------------------------
def _shared_big(n_refs: int, big: int, kind: str) -> tuple[bytes, dict]:
    """A root whose field 0 is a vector of ``n_refs`` references to ONE object: a table whose
    field 0 is a ``big``-byte vector (kind 'table') or a ``big``-byte string (kind 'string')."""
    L = Layout()
    L.ref("root").pack("4s", b"TEST")
    L.mark("root_vt").pack("HHH", 6, 8, 4)
    L.align(4).mark("root").soffset("root_vt").ref("refs")
    L.mark("refs").pack("I", n_refs)
    for _ in range(n_refs):
        L.ref("target")
    if kind == "table":
        L.mark("t_vt").pack("HHH", 6, 8, 4)
        L.align(4).mark("target").soffset("t_vt").ref("blob")
        L.align(4).mark("blob").pack("I", big)
        L.buf += bytes(big)
    else:
        L.string("target", b"a" * big)
    return L.finish()


@pytest.mark.parametrize("kind", ["table", "string"])
def test_amplification_budget(kind):
    data, _ = _shared_big(n_refs=1000, big=100_000, kind=kind)
    root = fb_of(data).root("Root")
    t0 = time.perf_counter()

    def walk():
        if kind == "table":
            for t in root.tables(0):
                t.vector(0, 1)
        else:
            root.strings(0)

    with deadline(10):
        with pytest.raises(CorruptError, match="amplification"):
            walk()
    assert time.perf_counter() - t0 < 2


def test_budget_allows_honest_rereads():
    """Reading every structure of a valid buffer a few times stays within the budget."""
    data, _ = _shared_big(n_refs=1, big=50_000, kind="table")
    root = fb_of(data).root("Root")
    for _ in range(2):
        for t in root.tables(0):
            assert t.vector(0, 1)[1] == 50_000
    fb = fb_of(hand_built()[0])
    for _ in range(20):
        check_valid(fb.root("Root"))


# -- properties: nothing but ArtifactError, whatever the bytes ---------------------------------------
_OPS = (
    lambda t, i: t.u8(i), lambda t, i: t.i8(i), lambda t, i: t.bool(i), lambda t, i: t.i32(i),
    lambda t, i: t.u32(i), lambda t, i: t.i64(i), lambda t, i: t.u64(i), lambda t, i: t.f64(i),
    lambda t, i: t.scalar(i, "h"), lambda t, i: t.struct(i, 8), lambda t, i: t.has(i),
    lambda t, i: t.string(i), lambda t, i: t.table(i), lambda t, i: t.vector(i, 1),
    lambda t, i: t.vector(i, 8), lambda t, i: t.scalars(i, "i"), lambda t, i: t.scalars(i, "q"),
    lambda t, i: t.array(i, "<u2"), lambda t, i: t.tables(i), lambda t, i: t.strings(i),
    lambda t, i: t.union(i, 4),
)


def walk(t: Table, depth: int, seen: list | None = None) -> None:
    """Every accessor on every field of ``t`` (and of the tables it reaches, ``depth``
    levels down); a wrongly typed accessor may raise ArtifactError. Tables reached are
    appended to ``seen``."""
    for i in range(min(len(t.fields), 10) + 1):
        for op in _OPS:
            try:
                r = op(t, i)
            except ArtifactError:
                continue
            if not depth:
                continue
            found = [r] if isinstance(r, Table) else \
                [x for x in r[:3] if isinstance(x, Table)] if isinstance(r, list) else \
                [r[1]] if isinstance(r, tuple) and len(r) == 2 and isinstance(r[1], Table) else []
            for x in found:
                if seen is not None:
                    seen.append(x)
                walk(x, depth - 1, seen)


def read_all(data: bytes, identifier=b"TEST") -> None:
    """Open ``data`` and walk it with every accessor: for arbitrary bytes, only
    ArtifactError may come out (it is swallowed here; anything else fails the test)."""
    with deadline(10):
        try:
            fb = fb_of(data, identifier=identifier)
            walk(fb.root("Root"), 2)
        except ArtifactError:
            pass


def test_walk_reads_valid_buffers():
    """A valid buffer opens without any error, reads back its values, and the walk (which
    also applies wrongly typed accessors: those may raise ArtifactError, per field) reaches
    the nested tables; the right accessor of every field never raises."""
    for data in (bytes(hand_built()[0]), official_built()):
        with deadline(10):
            root = fb_of(data).root("Root")  # no ArtifactError allowed here
            check_valid(root)
            seen: list[Table] = []
            walk(root, 2, seen)
        assert {t.pos for t in seen} >= {root.table(3).pos, root.union(4, 3)[1].pos}
        check_valid(root)  # walking changed nothing


_SETTINGS = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(st.binary(max_size=300))
def test_random_bytes_only_raise_artifact_errors(data):
    read_all(data, identifier=None)


@_SETTINGS
@given(st.binary(min_size=8, max_size=200).map(lambda b: b[:4] + b"TEST" + b[8:]))
def test_random_bytes_with_identifier(data):
    read_all(data)


_VALID = [bytes(hand_built()[0]), official_built()]


@st.composite
def mutated(draw):
    data = bytearray(draw(st.sampled_from(_VALID)))
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["byte", "u16", "u32"]))
        if kind == "byte":
            data[pos] = draw(st.integers(0, 255))
        elif kind == "u16" and pos + 2 <= len(data):
            struct.pack_into("<H", data, pos, draw(st.sampled_from([0, 1, 3, 0xFFFF, 0x8000])))
        elif pos + 4 <= len(data):
            struct.pack_into("<I", data, pos, draw(st.sampled_from(
                [0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, len(data), len(data) - pos])))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_valid_buffers_only_raise_artifact_errors(data):
    read_all(data)
