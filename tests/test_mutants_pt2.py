"""Behaviour of the .pt2 reader (ELF symbols, AOTInductor constants, configs, member kinds),
the zip directory's record walk, ``compare`` and ``validate``, pinned field by field: every
branch, every error's class, structure, offset and message, and every value returned.

Inputs are built here byte by byte (ELF images, zips, wrapper sources); where an oracle
exists (``zipfile``, ``readelf``/``ld`` for real shared objects) the expected facts come
from it.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import types

import pytest

from workbench.formats.pt2 import elf as pt2_elf
from workbench.formats.pt2.elf import elf_symbol_range
from workbench.formats.pt2.schema import CONSTANTS_END as END
from workbench.formats.pt2.schema import CONSTANTS_START as START

# --------------------------------------------------------------------------------------------
# ELF64 images built by hand
# --------------------------------------------------------------------------------------------

SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_DYNSYM, SHT_NOBITS = 1, 2, 3, 11, 8


def shdr(type_: int = 0, addr: int = 0, offset: int = 0, size: int = 0, link: int = 0,
         entsize: int = 0, name: int = 0) -> bytes:
    """One ``Elf64_Shdr``."""
    return struct.pack("<IIQQQQIIQQ", name, type_, 0, addr, offset, size, link, 0, 8, entsize)


def sym(name: int, shndx: int, value: int) -> bytes:
    """One ``Elf64_Sym`` (global object)."""
    return struct.pack("<IBBHQQ", name, 0x11, 0, shndx, value, 0)


def strtab(*names: bytes) -> tuple[bytes, list[int]]:
    """A string table (leading NUL) and each name's offset."""
    out, offs = bytearray(b"\0"), []
    for n in names:
        offs.append(len(out))
        out += n + b"\0"
    return bytes(out), offs


def elf_image(sections: list[dict], *, ident: bytes = b"\x7fELF\x02\x01\x01",
              shnum: int | None = None, shentsize: int = 64, shstrndx: int = 0,
              shoff: int | None = None) -> bytes:
    """An ELF64 image: a 64-byte header, each section's ``data`` (8-aligned, unless the
    section gives ``offset``), then the section header table. A section is a dict: ``type``,
    ``data``, ``addr``, ``link``, ``entsize``, and optionally ``offset``/``size`` (overriding
    where the data went and its length)."""
    body = bytearray(64)
    placed = []
    for s in sections:
        body += bytes(-len(body) % 8)
        placed.append(len(body))
        body += s.get("data", b"")
    body += bytes(-len(body) % 8)
    table = len(body)
    for s, at in zip(sections, placed):
        body += shdr(s.get("type", 0), s.get("addr", 0), s.get("offset", at),
                     s.get("size", len(s.get("data", b""))), s.get("link", 0), s.get("entsize", 0))
    head = struct.pack("<16sHHIQQQIHHHHHH", ident.ljust(16, b"\0"), 3, 62, 1, 0, 0,
                       table if shoff is None else shoff, 0, 64, 0, 0, shentsize,
                       len(sections) if shnum is None else shnum, shstrndx)
    body[:64] = head
    return bytes(body)


def offset_of(image: bytes, k: int) -> int:
    """The file offset of section ``k`` (read back from the section header table)."""
    shoff = struct.unpack_from("<Q", image, 0x28)[0]
    return struct.unpack_from("<Q", image, shoff + 64 * k + 24)[0]


RODATA = 0x1000  # the virtual address of the constants section


def standard(lo: int = 0x10, hi: int = 0x50, *, names: tuple[bytes, bytes] = (START, END),
             table: str = "dyn", rodata_index: int = 1) -> tuple[bytes, int]:
    """An image with a 256-byte ``.rodata`` at address 0x1000 and the two symbols at
    ``0x1000 + lo`` / ``0x1000 + hi`` in a ``.dynsym`` (``table="dyn"``) or ``.symtab``;
    returns the image and the file offset of ``.rodata``. ``rodata_index`` 1 or 2: where the
    constants section is in the section table."""
    strs, (a, b) = strtab(*names)
    null = {"type": 0}
    rodata = {"type": SHT_PROGBITS, "addr": RODATA, "data": bytes(range(256))}
    if rodata_index == 1:
        secs = [null, rodata, {"type": SHT_PROGBITS, "data": b"pad!"}]
    else:
        secs = [null, {"type": SHT_PROGBITS, "data": b"pad!"}, rodata]
    syms = sym(0, 0, 0) + sym(a, rodata_index, RODATA + lo) + sym(b, rodata_index, RODATA + hi)
    secs += [{"type": SHT_STRTAB, "data": strs},
             {"type": SHT_DYNSYM if table == "dyn" else SHT_SYMTAB, "data": syms, "link": 3,
              "entsize": 24}]
    image = elf_image(secs)
    return image, offset_of(image, rodata_index)


def src_of(data: bytes) -> types.SimpleNamespace:
    """What :func:`elf_symbol_range` reads of a Source: its ``buf``."""
    return types.SimpleNamespace(buf=memoryview(data))


def rng(data: bytes, start: int = 0, size: int | None = None, first: bytes = START,
        last: bytes = END):
    return elf_symbol_range(src_of(data), start, len(data) - start if size is None else size,
                            first, last)


@pytest.mark.parametrize("index", [1, 2])
@pytest.mark.parametrize("table", ["dyn", "sym"])
def test_elf_range_between_two_symbols(index, table):
    image, ro = standard(table=table, rodata_index=index)
    assert rng(image) == (ro + 0x10, ro + 0x50)
    # the image inside a larger file: offsets are absolute, reads stay inside the image
    framed = b"Q" * 100 + image + b"T" * 7
    assert rng(framed, 100, len(image)) == (100 + ro + 0x10, 100 + ro + 0x50)
    # the symbols asked for, either way round
    assert rng(image, first=END, last=START) is None  # end before start
    assert rng(image, first=START, last=START) == (ro + 0x10, ro + 0x10)


def test_elf_range_at_the_section_edges():
    image, ro = standard(0, 256)  # start at the first byte, end one past the last
    assert rng(image) == (ro, ro + 256)
    image, ro = standard(0, 257)  # past the section: the end symbol is not in it
    assert rng(image) is None


def test_elf_range_may_start_at_file_offset_zero():
    """A section whose file offset is 0 (a symbol at file offset 0 of the image)."""
    strs, (a, b) = strtab(START, END)
    secs = [{"type": 0}, {"type": SHT_PROGBITS, "addr": 0x400, "offset": 0, "size": 64},
            {"type": SHT_STRTAB, "data": strs},
            {"type": SHT_DYNSYM, "data": sym(0, 0, 0) + sym(a, 1, 0x400) + sym(b, 1, 0x420),
             "link": 2, "entsize": 24}]
    image = elf_image(secs)
    assert rng(image) == (0, 0x20)
    framed = bytes(8) + image
    assert rng(framed, 8, len(image)) == (8, 8 + 0x20)


@pytest.mark.parametrize("ident", [b"\x7fELF\x01\x01", b"\x7fELF\x02\x02", b"\x7fELG\x02\x01",
                                   b"\0ELF\x02\x01"])
def test_elf_range_needs_elf64_little_endian(ident):
    image, _ = standard()
    bad = ident + image[len(ident):]
    assert rng(bad) is None
    assert rng(image) is not None


def test_elf_range_needs_64_bytes():
    image, _ = standard()
    assert rng(image, 0, 64) is None  # the section table lies past 64 bytes
    assert rng(image[:63] + b"", 0, 63) is None
    assert elf_symbol_range(src_of(image), 0, 63, START, END) is None


def test_elf_range_section_table_checks():
    image, ro = standard()
    shoff = struct.unpack_from("<Q", image, 0x28)[0]
    shnum = struct.unpack_from("<H", image, 0x3C)[0]

    def edit(fmt: str, at: int, value: int) -> bytes:
        d = bytearray(image)
        struct.pack_into(fmt, d, at, value)
        return bytes(d)

    assert rng(edit("<H", 0x3A, 40)) is None  # e_shentsize not 64
    assert rng(edit("<H", 0x3C, 0)) is None  # no sections
    assert rng(edit("<H", 0x3C, shnum + 1)) is None  # the table runs past the image
    assert rng(edit("<Q", 0x28, shoff + 1)) is None
    assert rng(image, 0, len(image) - 1) is None  # the image is one byte shorter
    # e_shstrndx is not the number of sections
    assert rng(edit("<H", 0x3E, 0)) == (ro + 0x10, ro + 0x50)
    assert rng(edit("<H", 0x3E, shnum + 3)) == (ro + 0x10, ro + 0x50)
    # fewer sections declared: the symbol table (last) is not seen
    assert rng(edit("<H", 0x3C, shnum - 1)) is None


def _secs(syms: bytes, strs: bytes, *, sym_type: int = SHT_DYNSYM, link: int = 3,
          entsize: int = 24, extra: list[dict] | None = None, **over) -> list[dict]:
    return [{"type": 0}, {"type": SHT_PROGBITS, "addr": RODATA, "data": bytes(256)},
            {"type": SHT_NOBITS, "addr": 0x2000, "offset": 0, "size": 0x100},
            {"type": SHT_STRTAB, "data": strs},
            {"type": sym_type, "data": syms, "link": link, "entsize": entsize, **over},
            *(extra or [])]


def test_elf_range_symbol_table_checks():
    strs, (a, b) = strtab(START, END)
    good = sym(0, 0, 0) + sym(a, 1, RODATA + 8) + sym(b, 1, RODATA + 24)
    image = elf_image(_secs(good, strs))
    ro = offset_of(image, 1)
    assert rng(image) == (ro + 8, ro + 24)
    assert rng(elf_image(_secs(good, strs, entsize=16))) is None  # not Elf64_Sym entries
    assert rng(elf_image(_secs(good, strs, link=5))) is None  # link past the table
    assert rng(elf_image(_secs(good, strs, sym_type=SHT_PROGBITS))) is None
    # a symbol table or its string table past the image: nothing is trusted
    image = elf_image(_secs(good, strs, size=10_000))
    assert rng(image) is None
    d = bytearray(elf_image(_secs(good, strs)))
    shoff = struct.unpack_from("<Q", d, 0x28)[0]
    struct.pack_into("<Q", d, shoff + 64 * 3 + 32, len(d))  # the strtab's size
    assert rng(bytes(d)) is None
    # a trailing partial entry is ignored (the table is read in whole entries)
    for junk in (1, 5, 23):
        image = elf_image(_secs(good + b"\xff" * junk, strs))
        assert rng(image) == (ro + 8, ro + 24), junk


def test_elf_range_skips_unusable_symbols():
    strs, (a, b) = strtab(START, END)
    ok_b = sym(b, 1, RODATA + 24)
    for bad_a in (sym(a, 0, RODATA + 8),           # undefined
                  sym(a, 6, RODATA + 8),           # section index past the table
                  sym(a, 0xFFF1, RODATA + 8),      # absolute
                  sym(a, 2, 0x2008),               # in a NOBITS section
                  sym(a, 1, RODATA - 1),           # before its section
                  sym(a, 1, RODATA + 257)):        # past its section
        image = elf_image(_secs(sym(0, 0, 0) + bad_a + ok_b, strs))
        assert rng(image) is None
        # a later, valid definition of the same name is used
        image = elf_image(_secs(sym(0, 0, 0) + bad_a + ok_b + sym(a, 1, RODATA + 2), strs))
        ro = offset_of(image, 1)
        assert rng(image) == (ro + 2, ro + 24)
    # the first valid definition wins
    image = elf_image(_secs(sym(0, 0, 0) + sym(a, 1, RODATA + 4) + ok_b
                            + sym(a, 1, RODATA + 6), strs))
    ro = offset_of(image, 1)
    assert rng(image) == (ro + 4, ro + 24)
    # a symbol whose name is another string is not ours
    strs2, (_, b2, c2) = strtab(START, END, START + b"_not")
    image = elf_image(_secs(sym(0, 0, 0) + sym(c2, 1, RODATA) + sym(b2, 1, RODATA + 24), strs2))
    assert rng(image) is None


def test_elf_range_name_shared_as_a_suffix():
    """Linkers merge a name that is the tail of another into it: the symbol's st_name then
    points inside the longer string, and it still is that name."""
    strs = b"\0x" + START + b"\0y" + END + b"\0"
    a, b = 2, 3 + len(START) + 1
    assert strs[a:].startswith(START + b"\0") and strs[b:].startswith(END + b"\0")
    image = elf_image(_secs(sym(0, 0, 0) + sym(a - 1, 1, RODATA + 1) + sym(a, 1, RODATA + 8)
                            + sym(b, 1, RODATA + 24), strs))
    ro = offset_of(image, 1)
    assert rng(image) == (ro + 8, ro + 24)
    # and the longer names themselves are not the symbols
    image = elf_image(_secs(sym(0, 0, 0) + sym(a - 1, 1, RODATA + 8) + sym(b - 1, 1, RODATA + 24),
                            strs))
    assert rng(image) is None


def test_elf_range_name_at_offset_zero_of_its_table():
    """A string table need not start with a NUL: a name at offset 0 counts."""
    strs = START + b"\0" + END + b"\0tail"  # (no trailing NUL either)
    image = elf_image(_secs(sym(0, 1, RODATA + 8) + sym(len(START) + 1, 1, RODATA + 24), strs))
    ro = offset_of(image, 1)
    assert rng(image) == (ro + 8, ro + 24)
    strs = b"Z" + START + b"\0" + END + b"\0"
    image = elf_image(_secs(sym(1, 1, RODATA + 8) + sym(len(START) + 2, 1, RODATA + 24), strs))
    assert rng(image) == (ro + 8, ro + 24)


def test_elf_range_dynsym_first_then_symtab():
    strs, (a, b) = strtab(START, END)
    dyn_both = sym(0, 0, 0) + sym(a, 1, RODATA + 8) + sym(b, 1, RODATA + 24)
    sym_both = sym(0, 0, 0) + sym(a, 1, RODATA + 40) + sym(b, 1, RODATA + 80)
    symtab = {"type": SHT_SYMTAB, "data": sym_both, "link": 3, "entsize": 24}
    # .symtab listed first, but .dynsym is searched first
    image = elf_image(_secs(sym_both, strs, sym_type=SHT_SYMTAB,
                            extra=[{"type": SHT_DYNSYM, "data": dyn_both, "link": 3,
                                    "entsize": 24}]))
    ro = offset_of(image, 1)
    assert rng(image) == (ro + 8, ro + 24)
    # one symbol in .dynsym, the other only in .symtab: both found
    dyn_start = sym(0, 0, 0) + sym(a, 1, RODATA + 8)
    image = elf_image(_secs(dyn_start, strs, extra=[symtab]))
    assert rng(image) == (ro + 8, ro + 80)
    dyn_end = sym(0, 0, 0) + sym(b, 1, RODATA + 24)
    image = elf_image(_secs(dyn_end, strs, extra=[symtab]))
    assert rng(image) is None  # start (.symtab, 40) lies after end (.dynsym, 24)
    # a second .dynsym is searched when the first lacks a name
    image = elf_image(_secs(dyn_start, strs, extra=[
        {"type": SHT_DYNSYM, "data": sym(0, 0, 0) + sym(b, 1, RODATA + 30), "link": 3,
         "entsize": 24}, symtab]))
    assert rng(image) == (ro + 8, ro + 30)
    # a table whose strings lack both names is skipped
    other, _ = strtab(b"foo", b"bar")
    image = elf_image(_secs(sym_both, strs, sym_type=SHT_SYMTAB, extra=[
        {"type": SHT_STRTAB, "data": other},
        {"type": SHT_DYNSYM, "data": sym(0, 0, 0) + sym(1, 1, RODATA), "link": 5,
         "entsize": 24}]))
    assert rng(image) == (ro + 40, ro + 80)


@pytest.fixture(scope="module")
def real_so(tmp_path_factory):
    """A shared object linked by the system toolchain around ``ld -b binary`` constants (the
    way AOTInductor embeds them), with a symbol whose name has ours as its tail."""
    if not (shutil.which("ld") and shutil.which("gcc") and shutil.which("readelf")):
        pytest.skip("no toolchain")
    d = tmp_path_factory.mktemp("so")
    (d / "constants.bin").write_bytes(bytes(range(200)) * 3)
    (d / "x.c").write_text("const char x_binary_constants_bin_start[] = \"tail\";\n"
                           "int f(void) { return 1; }\n")
    subprocess.run(["ld", "-r", "-b", "binary", "-o", "c.o", "constants.bin"], cwd=d, check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", "lib.so", "x.c", "c.o"], cwd=d, check=True)
    return d / "lib.so"


def _readelf_file_offset(so, name: str) -> int:
    """The file offset of symbol ``name`` per ``readelf`` (its value mapped through the
    section it is defined in)."""
    out = subprocess.run(["readelf", "-W", "-s", str(so)], capture_output=True, text=True,
                         check=True).stdout
    value, ndx = next((int(p[1], 16), int(p[6])) for p in
                      (line.split() for line in out.splitlines())
                      if len(p) >= 8 and p[7] == name and p[6].isdigit())
    sec = subprocess.run(["readelf", "-W", "-S", str(so)], capture_output=True, text=True,
                         check=True).stdout
    for line in sec.splitlines():
        line = line.replace("[ ", "[")
        parts = line.split()
        if parts and parts[0] == f"[{ndx}]":
            addr, off = int(parts[3], 16), int(parts[4], 16)
            return value - addr + off
    raise AssertionError(name)


def test_elf_range_of_a_linked_shared_object(real_so):
    data = real_so.read_bytes()
    lo = _readelf_file_offset(real_so, START.decode())
    hi = _readelf_file_offset(real_so, END.decode())
    assert hi - lo == 600 and data[lo:hi] == bytes(range(200)) * 3
    assert rng(data) == (lo, hi)
    framed = b"\0" * 24 + data
    assert rng(framed, 24, len(data)) == (24 + lo, 24 + hi)


def test_elf_module_constants():
    assert pt2_elf._SHT_SYMTAB == SHT_SYMTAB and pt2_elf._SHT_DYNSYM == SHT_DYNSYM
    assert pt2_elf._SHT_NOBITS == SHT_NOBITS
    assert (pt2_elf._ELF_HEAD.size, pt2_elf._SHDR.size, pt2_elf._SYM.size) == (64, 64, 24)
