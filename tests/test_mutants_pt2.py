"""Behaviour of the .pt2 reader (ELF symbols, AOTInductor constants, configs, member kinds),
the zip directory's record walk, ``compare`` and ``validate``, pinned field by field: every
branch, every error's class, structure, offset and message, and every value returned.

Inputs are built here byte by byte (ELF images, zips, wrapper sources); where an oracle
exists (``zipfile``, ``readelf``/``ld`` for real shared objects) the expected facts come
from it.
"""

from __future__ import annotations

import hashlib
import html as _html
import io
import json
import os
import shutil
import struct
import subprocess
import types
import zipfile
import zlib

import numpy as np
import pytest
from test_pt2 import MIN_GRAPH, build_zip, pt2_members, tensor_meta

import workbench as wb
from workbench import comparison as cmpmod
from workbench._fmt import human_bytes
from workbench.comparison import StoredTensor, stored_tensors
from workbench.errors import CorruptError, OutOfBoundsError, TruncatedError
from workbench.formats._zip import ZipDirectory, ZipEntry
from workbench.formats.pt2 import columns as pt2_columns
from workbench.formats.pt2 import config as pt2_config
from workbench.formats.pt2 import elf as pt2_elf
from workbench.formats.pt2.aoti import cvalue
from workbench.formats.pt2.archive import Archive
from workbench.formats.pt2.elf import elf_symbol_range
from workbench.formats.pt2.schema import CONSTANTS_END as END
from workbench.formats.pt2.schema import CONSTANTS_START as START
from workbench.formats.pt2.schema import LIMIT
from workbench.source import Source
from workbench.vocab import CLASSES, byte_class

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
             table: str = "dyn", rodata_index: int = 1,
             rodata_bytes: bytes = bytes(range(256))) -> tuple[bytes, int]:
    """An image with a 256-byte ``.rodata`` at address 0x1000 and the two symbols at
    ``0x1000 + lo`` / ``0x1000 + hi`` in a ``.dynsym`` (``table="dyn"``) or ``.symtab``;
    returns the image and the file offset of ``.rodata``. ``rodata_index`` 1 or 2: where the
    constants section is in the section table."""
    strs, (a, b) = strtab(*names)
    null = {"type": 0}
    rodata = {"type": SHT_PROGBITS, "addr": RODATA, "data": rodata_bytes}
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
    """What :func:`elf_symbol_range` uses of a Source: its ``buf`` and prefetch hints."""
    return types.SimpleNamespace(buf=memoryview(data), prefetch=lambda start, size: None,
                                 prefetch_many=lambda ranges: None)  # a local Source: no-ops


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


def test_elf_range_name_after_a_non_nul_byte():
    """(A tail-merged name at offset 1 of a table.)"""
    strs = b"Z" + START + b"\0" + END + b"\0"
    image = elf_image(_secs(sym(1, 1, RODATA + 8) + sym(len(START) + 2, 1, RODATA + 24), strs))
    ro = offset_of(image, 1)
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


# --------------------------------------------------------------------------------------------
# weights/constants configs: view arithmetic, the JSON path's errors, the fast path's result
# --------------------------------------------------------------------------------------------

CFG = "arc/data/weights/model_weights_config.json"
CCFG = "arc/data/constants/model_constants_config.json"
W0 = "arc/data/weights/weight_0"


@pytest.mark.parametrize(("shape", "strides", "expected"), [
    ((), (), True), ((5,), (1,), True), ((5,), (2,), False), ((2, 3), (3, 1), True),
    ((2, 3), (1, 2), False), ((2, 3, 4), (12, 4, 1), True), ((2, 3, 4), (12, 4, 2), False),
    ((2, 3, 4), (4, 4, 1), False), ((1, 3), (7, 1), True), ((3, 1), (1, 9), True),
    ((2, 1, 3), (3, 99, 1), True), ((2, 2), (2, 1), True), ((2, 2), (1, 2), False),
    ((0, 3), (5, 7), True), ((3, 0), (0, 0), True), ((1,), (0,), True), ((4,), (0,), False),
    ((2, 5), (5, 1), True), ((5, 2), (2, 1), True), ((2, 2, 2), (4, 2, 1), True),
    ((2, 2, 2), (2, 2, 1), False), ((3, 2, 2), (4, 2, 1), True),
])
def test_contiguous(shape, strides, expected):
    assert pt2_config.contiguous(shape, strides) is expected


def test_extent_and_numel():
    assert pt2_config.extent((2, 3), (3, 1), 0) == 6
    assert pt2_config.extent((2, 3), (3, 1), 5) == 11
    assert pt2_config.extent((2, 3), (1, 2), 0) == 6
    assert pt2_config.extent((4,), (0,), 2) == 3
    assert pt2_config.extent((3, 0), (1, 1), 9) == 0
    assert pt2_config.extent((), (), 4) == 5
    assert pt2_config.extent((5, 2), (10, 3), 1) == 1 + 1 + 40 + 3
    assert pt2_config.numel(()) == 1 and pt2_config.numel((2, 3, 4)) == 24
    assert pt2_config.numel((7, 0)) == 0


def test_layout_facts():
    f = pt2_config._layout_facts
    assert f(7, (2, 3), (3, 1), 0) == ("float32", 24, 24, True, 0)
    assert f(7, (2, 3), (3, 1), 2) == ("float32", 24, 32, True, 8)
    assert f(6, (3, 2), (1, 3), 1) == ("float16", 12, 14, False, 2)
    assert f(1, (0, 4), (4, 1), 3) == ("uint8", 0, 0, True, 3)
    assert f(5, (), (), 0) == ("int64", 8, 8, True, 0)
    assert f(12, (4,), (0,), 0) == ("bool", 4, 1, False, 0)
    for bad in ((0, (2,), (1,), 0), (99, (2,), (1,), 0), (True, (2,), (1,), 0),
                (7.0, (2,), (1,), 0), (7, (2,), (1,), -1), (7, (2,), (1,), 1.0),
                (7, (2,), (1,), True), (7, (2, 3), (1,), 0), (7, (-1,), (1,), 0),
                (7, (2,), (-1,), 0), (7, (2.0,), (1,), 0), (7, (2,), (True,), 0)):
        assert f(*bad) is None, bad
    # sizes: below LIMIT bytes (uint8: one byte per element)
    assert f(1, (LIMIT - 1,), (1,), 0) == ("uint8", LIMIT - 1, LIMIT - 1, True, 0)
    assert f(1, (LIMIT,), (1,), 0) is None
    assert f(1, (2,), (LIMIT,), 0) is None  # reach
    assert f(1, (1,), (1,), LIMIT - 1) is None  # offset + 1 reaches LIMIT
    assert f(1, (1,), (1,), LIMIT - 2) == ("uint8", 1, LIMIT - 1, True, LIMIT - 2)
    assert f(7, (LIMIT // 4,), (1,), 0) is None
    assert f(7, (LIMIT // 4 - 1,), (1,), 0)[1] == LIMIT - 4
    assert f(1, (0,), (LIMIT * 2,), 0) == ("uint8", 0, 0, True, 0)


def pt2_file(tmp_path, members, name="t.pt2", **kw):
    data, _ = build_zip(members, **kw)
    p = tmp_path / name
    p.write_bytes(data)
    return p


def data_offset(path, name: str) -> int:
    """Where member ``name``'s data starts, from ``zipfile`` and its local header."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(name)
    raw = path.read_bytes()
    n, x = struct.unpack_from("<HH", raw, info.header_offset + 26)
    return info.header_offset + 30 + n + x


def row(art, name: str) -> dict:
    """One tensors row as plain Python values (missing: ``None``)."""
    import pandas as pd

    r = art.tensors.set_index("name").loc[name].to_dict()
    return {k: (None if not isinstance(v, (tuple, list)) and pd.isna(v) else v)
            for k, v in r.items()}


def finds(art) -> list[tuple]:
    return [(f.severity, f.structure, f.offset, f.message) for f in art._parsed.findings]


W6 = np.arange(6, dtype=np.float32).tobytes()


def entry(**over) -> dict:
    e = {"path_name": "weight_0", "is_param": True, "use_pickle": False,
         "tensor_meta": tensor_meta(7, [2, 3])}
    for k, v in over.items():
        if v is _DROP:
            e.pop(k)
        else:
            e[k] = v
    return e


_DROP = object()


def tm(**over) -> dict:
    t = tensor_meta(7, [2, 3])
    for k, v in over.items():
        if v is _DROP:
            t.pop(k)
        else:
            t[k] = v
    return t


_ERRORS = [
    ("not-object", "x", CorruptError, "expected an object with a string 'path_name'"),
    ("no-path", {"is_param": True}, CorruptError, "expected an object with a string 'path_name'"),
    ("path-int", entry(path_name=3), CorruptError, "expected an object with a string 'path_name'"),
    ("no-member", entry(path_name="nope\n"), CorruptError,
     "path_name 'nope\\\\x0a' names no member of data/weights/"),
    ("slash", entry(path_name="sub/w"), CorruptError,
     "path_name 'sub/w' names no member of data/weights/"),
    ("pickle-str", entry(use_pickle="yes"), CorruptError,
     "use_pickle is not a boolean (torch would unpickle the member when truthy)"),
    ("pickle-int", entry(use_pickle=0), CorruptError,
     "use_pickle is not a boolean (torch would unpickle the member when truthy)"),
    ("tm-list", entry(tensor_meta=[]), CorruptError, "tensor_meta is not an object"),
    ("dtype-0", entry(tensor_meta=tm(dtype=0)), CorruptError,
     "tensor_meta.dtype 0 is not a known ScalarType"),
    ("dtype-bool", entry(tensor_meta=tm(dtype=True)), CorruptError,
     "tensor_meta.dtype True is not a known ScalarType"),
    ("dtype-str", entry(tensor_meta=tm(dtype="7")), CorruptError,
     "tensor_meta.dtype '7' is not a known ScalarType"),
    ("dtype-none", entry(tensor_meta=tm(dtype=_DROP)), CorruptError,
     "tensor_meta.dtype None is not a known ScalarType"),
    ("sizes-dict", entry(tensor_meta=tm(sizes={})), CorruptError,
     "tensor_meta.sizes/strides are not lists of the same length"),
    ("no-strides", entry(tensor_meta=tm(strides=_DROP)), CorruptError,
     "tensor_meta.sizes/strides are not lists of the same length"),
    ("lengths", entry(tensor_meta=tm(strides=[{"as_int": 1}])), CorruptError,
     "tensor_meta.sizes/strides are not lists of the same length"),
    ("sym-size", entry(tensor_meta=tm(sizes=[{"as_expr": "s0"}, {"as_int": 3}])), CorruptError,
     "sizes, strides and storage_offset must be {'as_int': n} integers"),
    ("bool-size", entry(tensor_meta=tm(sizes=[{"as_int": True}, {"as_int": 3}])), CorruptError,
     "sizes, strides and storage_offset must be {'as_int': n} integers"),
    ("float-off", entry(tensor_meta=tm(storage_offset={"as_int": 1.0})), CorruptError,
     "sizes, strides and storage_offset must be {'as_int': n} integers"),
    ("neg-size", entry(tensor_meta=tm(sizes=[{"as_int": 2}, {"as_int": -3}])), CorruptError,
     "negative size, stride or storage offset ([2, -3], [3, 1], 0)"),
    ("neg-stride", entry(tensor_meta=tm(strides=[{"as_int": -3}, {"as_int": 1}])), CorruptError,
     "negative size, stride or storage offset ([2, 3], [-3, 1], 0)"),
    ("neg-off", entry(tensor_meta=tm(storage_offset={"as_int": -1})), CorruptError,
     "negative size, stride or storage offset ([2, 3], [3, 1], -1)"),
    ("huge", entry(tensor_meta=tensor_meta(1, [LIMIT])), CorruptError,
     f"sizes [{LIMIT}] / strides [1] / offset 0 are too large"),
    ("huge-f32", entry(tensor_meta=tensor_meta(7, [LIMIT // 4])), CorruptError,
     f"sizes [{LIMIT // 4}] / strides [1] / offset 0 are too large"),
    ("huge-off", entry(tensor_meta=tensor_meta(1, [1], offset=LIMIT - 1)), CorruptError,
     f"sizes [1] / strides [1] / offset {LIMIT - 1} are too large"),
    ("past", entry(tensor_meta=tensor_meta(7, [2, 3], offset=1)), OutOfBoundsError,
     "the view reaches 28 bytes of storage, member 'arc/data/weights/weight_0' holds 24"),
    ("past-big", entry(tensor_meta=tensor_meta(1, [LIMIT - 1])), OutOfBoundsError,
     f"the view reaches {LIMIT - 1} bytes of storage, member 'arc/data/weights/weight_0' "
     "holds 24"),
    ("no-meta", entry(tensor_meta=_DROP), CorruptError,
     "tensor_meta is missing for a raw (use_pickle: false) entry"),
    ("none-meta", entry(tensor_meta=None), CorruptError,
     "tensor_meta is missing for a raw (use_pickle: false) entry"),
]


@pytest.mark.parametrize("path", ["json", "slow"])
@pytest.mark.parametrize(("meta", "cls", "detail"), [c[1:] for c in _ERRORS],
                         ids=[c[0] for c in _ERRORS])
def test_config_entry_errors(tmp_path, meta, cls, detail, path):
    """Each wrong entry: the error class, its message, the structure and the offset (the
    config's data, or the storage member's for a view past its end); the same whether the
    entry is otherwise torch's form or lacks an optional key (``use_pickle``)."""
    if path == "slow" and isinstance(meta, dict):
        meta = {k: v for k, v in meta.items() if k != "use_pickle"} \
            if meta.get("use_pickle") is False else meta
    files = {"data/weights/weight_0": W6, "data/weights/sub/w": W6}
    p = pt2_file(tmp_path, pt2_members(weights={"w": meta}, files=files))
    with pytest.raises(cls) as ei:
        wb.open(p)
    e = ei.value
    assert type(e) is cls
    assert e.detail == detail
    assert e.file == "t.pt2"
    assert e.structure == f"{CFG} config['w']"
    where = W0 if cls is OutOfBoundsError else CFG
    assert e.offset == data_offset(p, where)


def test_config_size_with_a_second_key_is_refused(tmp_path):
    """``{"as_int": n, "x": ...}`` is not a SymInt: refused on the field-by-field path."""
    meta = entry(tensor_meta=tm(strides=[{"as_int": 3, "x": 0}, {"as_int": 1}]))
    meta.pop("use_pickle")
    p = pt2_file(tmp_path, pt2_members(weights={"w": meta}, files={"data/weights/weight_0": W6}))
    with pytest.raises(CorruptError) as ei:
        wb.open(p)
    assert ei.value.detail == "sizes, strides and storage_offset must be {'as_int': n} integers"
    assert (ei.value.structure, ei.value.offset) == (f"{CFG} config['w']", data_offset(p, CFG))


def test_config_errors_name_the_constants_folder(tmp_path):
    p = pt2_file(tmp_path, pt2_members(constants={"c": entry(path_name="tensor_9")}))
    with pytest.raises(CorruptError) as ei:
        wb.open(p)
    assert ei.value.detail == "path_name 'tensor_9' names no member of data/constants/"
    assert ei.value.structure == f"{CCFG} config['c']"
    assert ei.value.offset == data_offset(p, CCFG)


def test_config_not_an_object(tmp_path):
    for doc in (b"[]", b'{"config": []}', b'{"x": {}}', b"3"):
        ms = pt2_members()
        ms[3]["data"] = doc
        p = pt2_file(tmp_path, ms)
        with pytest.raises(CorruptError) as ei:
            wb.open(p)
        assert ei.value.detail == "expected an object with a 'config' object"
        assert ei.value.structure == f"zip member {CFG!r}"
        assert ei.value.offset == data_offset(p, CFG)


def _open_rows(tmp_path, weights, files, constants=None, **kw):
    p = pt2_file(tmp_path, pt2_members(weights=weights, constants=constants, files=files), **kw)
    return p, wb.open(p)


@pytest.mark.parametrize("optional", [False, True])
def test_config_rows(tmp_path, optional):
    """Raw views of one storage (torch's form, or with the optional keys left out, which
    takes the field-by-field path): every column."""
    w = np.arange(12, dtype=np.float32).tobytes()
    a = entry(tensor_meta=tensor_meta(7, [3, 2], [1, 3], offset=2, requires_grad=True))
    b = entry(is_param=False, tensor_meta=tensor_meta(7, [4]))
    c = entry(tensor_meta=tensor_meta(6, [2, 2]), path_name="weight_1")
    if optional:
        for e in (a, b, c):
            e.pop("use_pickle")
        b.pop("is_param")
        c["tensor_meta"].pop("requires_grad")
    p, art = _open_rows(tmp_path, {"a": a, "b": b, "c": c},
                        {"data/weights/weight_0": w, "data/weights/weight_1": bytes(8)})
    with art:
        base, base1 = data_offset(p, W0), data_offset(p, "arc/data/weights/weight_1")
        common = {"file": str(p), "model": "model", "pickled": False, "storage": "zip"}
        assert row(art, "a") == {**common, "dtype": "float32", "shape": (3, 2), "nbytes": 24,
                                 "offset": base + 8, "align": 8, "fqn": "a",
                                 "requires_grad": True, "kind": "parameter", "strides": (1, 3),
                                 "storage_offset": 2, "contiguous": False, "member": W0,
                                 "storage_id": 0, "shared": True}
        assert row(art, "b") == {**common, "dtype": "float32", "shape": (4,), "nbytes": 16,
                                 "offset": base, "align": base & -base, "fqn": "b",
                                 "requires_grad": False,
                                 "kind": "buffer", "strides": (1,), "storage_offset": 0,
                                 "contiguous": True, "member": W0, "storage_id": 0,
                                 "shared": True}
        assert row(art, "c") == {**common, "dtype": "float16", "shape": (2, 2), "nbytes": 8,
                                 "offset": base1, "align": base1 & -base1, "fqn": "c",
                                 "requires_grad": False, "kind": "parameter", "strides": (2, 1),
                                 "storage_offset": 0, "contiguous": True,
                                 "member": "arc/data/weights/weight_1", "storage_id": 1,
                                 "shared": False}
        m = art.frames["members"].set_index("name")
        assert m.loc[W0, "used_by"] == "a; b" and m.loc[W0, "model"] == "model"
        assert m.loc["arc/data/weights/weight_1", "used_by"] == "c"
        assert finds(art) == []
        np.testing.assert_array_equal(art.tensor("a"), np.arange(12, dtype=np.float32)[2:8]
                                      .reshape(2, 3).T)


def test_config_pickled_and_custom_entries(tmp_path):
    pk = b"\x80\x04K\x01."
    weights = {"p": {"path_name": "model.pt2w", "is_param": False, "use_pickle": True,
                     "tensor_meta": tensor_meta(7, [2])}}
    constants = {"obj": {"path_name": "custom_obj_0", "use_pickle": True},
                 "t": {"path_name": "tensor_0", "use_pickle": True,
                       "tensor_meta": tensor_meta(5, [3], offset=1)}}
    _p, art = _open_rows(tmp_path, weights, {"data/weights/model.pt2w": pk,
                                            "data/constants/custom_obj_0": pk,
                                            "data/constants/tensor_0": b"not a pickle"},
                        constants=constants)
    with art:
        assert list(art.tensors["name"]) == ["p", "t"]  # the custom object has no row
        common = {"file": None, "offset": None, "align": None, "model": "model",
                  "pickled": True, "storage": "pickle", "shared": False, "requires_grad": False}
        assert row(art, "p") == {**common, "dtype": "float32", "shape": (2,), "nbytes": 8,
                                 "fqn": "p", "kind": "buffer", "strides": (1,),
                                 "storage_offset": 0, "contiguous": True,
                                 "member": "arc/data/weights/model.pt2w", "storage_id": 0}
        assert row(art, "t") == {**common, "dtype": "int64", "shape": (3,), "nbytes": 24,
                                 "fqn": "t", "kind": "constant", "strides": (1,),
                                 "storage_offset": 1, "contiguous": True,
                                 "member": "arc/data/constants/tensor_0", "storage_id": 1}
        m = art.frames["members"].set_index("name")
        for name, used in (("arc/data/weights/model.pt2w", "p"),
                           ("arc/data/constants/custom_obj_0", "obj"),
                           ("arc/data/constants/tensor_0", "t")):
            assert (m.loc[name, "kind"], m.loc[name, "model"], m.loc[name, "pickled"],
                    m.loc[name, "used_by"]) == ("pickle", "model", True, used), name
        assert finds(art) == [("info", "zip central directory", None,
                               "3 pickled member(s) are listed but never unpickled "
                               "(torch.export.load would unpickle them: only load trusted "
                               "files)")]


@pytest.mark.parametrize("optional", [False, True])
def test_config_empty_and_compressed_storage(tmp_path, optional):
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflated = comp.compress(W6) + comp.flush()
    weights = {"e": entry(tensor_meta=tensor_meta(7, [0, 3]), path_name="empty"),
               "z": entry(path_name="zipped")}
    if optional:
        for e in weights.values():
            e.pop("use_pickle")
    files = {"data/weights/empty": b"",
             "data/weights/zipped": {"data": deflated, "method": 8, "file_size": 24}}
    _p, art = _open_rows(tmp_path, weights, files)
    with art:
        e, z = row(art, "e"), row(art, "z")
        assert (e["storage"], e["offset"], e["nbytes"], e["shape"]) == ("zip", None, 0, (0, 3))
        assert (z["storage"], z["offset"], z["nbytes"]) == ("compressed", None, 24)
        assert finds(art)[0] == ("info", f"{CFG} config['e']", None,
                                 "storage member is empty: torch.export.load makes zeros")
        assert len([f for f in finds(art) if "empty" in f[3]]) == 1
        with pytest.raises(wb.MissingDataError) as ei:
            art.tensor("z")
        assert ei.value.detail == ("tensor 'z' lives in a compressed zip member: no zero-copy "
                                   "view exists, and the workbench never inflates members")


def _canonical(tmp_path, weights: dict, files: dict, doc: bytes | None = None):
    ms = pt2_members(weights=weights, files=files)
    if doc is not None:
        ms[3]["data"] = doc
    p = pt2_file(tmp_path, ms)
    src = Source(p)
    zd = ZipDirectory(src)
    raw = zd.read(zd.get(CFG), 1 << 20)
    return raw, zd, pt2_config._canonical_config(raw, "arc/data/weights/", ("buffer", "parameter"),
                                                 zd)


def test_canonical_config_rows(tmp_path):
    """The fast path's result for torch's exact form: one layout per distinct tail, FQNs
    decoded (escapes too), members by index."""
    w = np.arange(12, dtype=np.float32).tobytes()
    weights = {"a\\\"b": entry(), "c": entry(is_param=False, tensor_meta=tensor_meta(7, [2, 3],
                                                                                 offset=6)),
               "d\u00e9": entry(), "e": entry(path_name="weight_1",
                                             tensor_meta=tensor_meta(13, [3, 1, 2], [2, 7, 1],
                                                                     requires_grad=True))}
    raw, zd, out = _canonical(tmp_path, weights, {"data/weights/weight_0": w,
                                                  "data/weights/weight_1": bytes(12)})
    assert json.loads(bytes(raw))["config"].keys() == weights.keys()
    assert out is not None
    L = pt2_config._Layout
    i0, i1 = zd.index[W0], zd.index["arc/data/weights/weight_1"]
    assert out.fqns == ["a\\\"b", "c", "d\u00e9", "e"]
    assert out.members == [i0, i0, i0, i1]
    assert out.layout == [0, 1, 0, 2]
    assert out.layouts == [
        L("parameter", "float32", 24, 24, True, 0, (2, 3), (3, 1), 0, False),
        L("buffer", "float32", 24, 48, True, 24, (2, 3), (3, 1), 6, False),
        L("parameter", "bfloat16", 12, 12, True, 0, (3, 1, 2), (2, 7, 1), 0, True)]


def test_canonical_config_declines(tmp_path):
    """Anything but torch's exact form (or a view that does not fit) goes to the JSON path:
    ``None``."""
    files = {"data/weights/weight_0": W6}
    good = json.dumps({"config": {"w": entry()}}).encode()
    assert _canonical(tmp_path, {"w": entry()}, files)[2] is not None
    for doc in (b'{"config": {}}', good.replace(b", ", b",  ", 1), good + b" ",
                good.replace(b'{"config": {', b'{"config":{'), good.replace(b"false", b"true"),
                good.replace(b'"w"', b'"\xff"'),
                good.replace(b'"w"', b'"w\n"'), good.replace(b'"dtype": 7', b'"dtype": 0'),
                good.replace(b'"weight_0"', b'"weight_9"'),
                good.replace(b'"storage_offset": {"as_int": 0}', b'"storage_offset": {"as_int": 1}'),
                good[:-2] + b', "w": ' + json.dumps(entry()).encode() + b"}}"):
        assert _canonical(tmp_path, {"w": entry()}, files, doc)[2] is None, doc
    two = json.dumps({"config": {"w": entry(), "v": entry()}}).encode()
    assert _canonical(tmp_path, {}, files, two)[2].fqns == ["w", "v"]
    assert _canonical(tmp_path, {}, files, two.replace(b'"v"', b'"w"'))[2] is None
    assert _canonical(tmp_path, {}, files, good.replace(b'"w"', b'"w\\u0001"'))[2].fqns == \
        ["w\x01"]
    utf = good.replace(b'"w"', '"\u00e9"'.encode())
    assert _canonical(tmp_path, {}, files, utf)[2].fqns == ["\u00e9"]


# --------------------------------------------------------------------------------------------
# archive members: kind and model of every path shape, and the members frame
# --------------------------------------------------------------------------------------------


#: rel path -> (kind, model, pickled)
KINDS = {
    "archive_format": ("metadata", None, False),
    "archive_version": ("metadata", None, False),
    "byteorder": ("metadata", None, False),
    ".data/version": ("metadata", None, False),
    ".data/serialization_id": ("metadata", None, False),
    "extra/notes/a.txt": ("metadata", None, False),
    "models/model.json": ("graph", "model", False),
    "models/sub/x.json": ("other", None, False),
    "models/notes.txt": ("other", None, False),
    "models/json": ("other", None, False),
    "data/weights/weight_0": ("weights", None, False),
    "data/weights/model_weights_config.json": ("config", "model", False),
    "data/weights/other_weights_config.json": ("config", "other", False),
    "data/weights/model.pt": ("pickle", "model", True),
    "data/weights/sub/x": ("other", None, False),
    "data/weights/sub/x_weights_config.json": ("other", None, False),
    "data/constants/model_constants_config.json": ("config", "model", False),
    "data/constants/custom_obj_0": ("pickle", None, True),
    "data/constants/opaque_obj_1": ("pickle", None, True),
    "data/constants/thing.pt": ("pickle", None, True),
    "data/constants/tensor_0": ("constants", None, False),
    "data/constants/x_weights_config.json": ("constants", None, False),
    "data/constants/sub/custom_obj_2": ("other", None, False),
    "data/constants/model_weights_config.json.pt": ("pickle", None, True),
    "data/sample_inputs/model.pt": ("sample_inputs", "model", True),
    "data/sample_inputs/other.bin": ("sample_inputs", None, False),
    "data/sample_inputs/sub/m.pt": ("sample_inputs", None, True),
    "data/aotinductor/m/x.wrapper.so": ("so", "m", False),
    "data/aotinductor/m/x_weights.blob": ("blob", "m", False),
    "data/aotinductor/m/x.wrapper.cpp": ("source", "m", False),
    "data/aotinductor/m/k.cu": ("source", "m", False),
    "data/aotinductor/m/k.h": ("source", "m", False),
    "data/aotinductor/m/k.hpp": ("source", "m", False),
    "data/aotinductor/m/k.c": ("source", "m", False),
    "data/aotinductor/m/k.S": ("source", "m", False),
    "data/aotinductor/m/x_metadata.json": ("metadata", "m", False),
    "data/aotinductor/m/sub/y.json": ("metadata", "m", False),
    "data/aotinductor/m/readme.txt": ("other", "m", False),
    "data/aotinductor/lonely.so": ("other", None, False),
    "data/other/x": ("other", None, False),
    "data/x": ("other", None, False),
    "data": ("other", None, False),
    "weird.txt": ("other", None, False),
    "archive_format/x": ("other", None, False),
    "extra": ("metadata", None, False),
}


def _kinds_archive(tmp_path, root: str = "arc"):
    files = {}
    for rel in KINDS:
        if rel.endswith(".json") and "aotinductor" in rel:
            files[rel] = b"{}"
        elif rel.endswith("_config.json"):
            files[rel] = b'{"config": {}}'
        elif rel == "models/model.json":
            files[rel] = json.dumps(MIN_GRAPH).encode()
        elif rel.endswith(".json"):
            files[rel] = b"{}"
        else:
            files[rel] = rel.encode()
    files["archive_format"] = b"pt2"
    files["byteorder"] = b"little"
    prefix = f"{root}/" if root else ""
    ms = [{"name": prefix + rel, "data": data} for rel, data in files.items()]
    ms.append({"name": "outside/x.txt", "data": b"x"})
    return pt2_file(tmp_path, ms)


@pytest.mark.parametrize("root", ["arc", ""])
def test_member_kind_and_model_of_every_path(tmp_path, root):
    p = _kinds_archive(tmp_path, root)
    with wb.open(p) as art:
        m = art.frames["members"]
        prefix = f"{root}/" if root else ""
        got = {n: (k, None if mo is None or mo != mo else mo, bool(pk))
               for n, k, mo, pk in zip(m["name"], m["kind"], m["model"], m["pickled"])}
        want = {prefix + rel: v for rel, v in KINDS.items()}
        want["outside/x.txt"] = ("other", None, False)
        assert got == want
        models = art.frames["models"]
        assert list(models["name"]) == ["model", "m"]  # ("other" has a config, no graph)
        assert list(models["kind"]) == ["exported_program", "aoti"]


def test_members_frame_columns_match_zipfile(tmp_path):
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflated = comp.compress(b"hello " * 40) + comp.flush()
    w = np.arange(6, dtype=np.float32).tobytes()
    ms = pt2_members(weights={"w": entry(), "v": entry(is_param=False)},
                     files={"data/weights/weight_0": w,
                            "extra/z.txt": {"data": deflated, "method": 8, "file_size": 240},
                            "data/sample_inputs/model.pt": b"\x80\x05K\x01.",
                            "../evil": b"e"})
    p = pt2_file(tmp_path, ms)
    with wb.open(p) as art, zipfile.ZipFile(p) as z:
        m = art.frames["members"]
        infos = z.infolist()
        assert list(m.columns) == ["index", "name", "kind", "model", "file", "header_offset",
                                   "offset", "size", "file_size", "align", "method",
                                   "compressed", "crc32", "pickled", "unsafe_name", "used_by"]
        assert list(m["index"]) == list(range(len(infos)))
        assert list(m["name"]) == [i.filename for i in infos]
        assert list(m["file"]) == [str(p)] * len(infos)
        assert list(m["header_offset"]) == [i.header_offset for i in infos]
        offsets = [data_offset(p, i.filename) for i in infos]
        assert list(m["offset"]) == offsets
        assert list(m["align"]) == [o & -o for o in offsets]
        assert list(m["size"]) == [i.compress_size for i in infos]
        assert list(m["file_size"]) == [i.file_size for i in infos]
        assert list(m["method"]) == [i.compress_type for i in infos]
        assert list(m["compressed"]) == [i.compress_type != 0 for i in infos]
        assert list(m["crc32"]) == [i.CRC for i in infos]
        assert list(m["pickled"]) == [i.filename.endswith("model.pt") for i in infos]
        assert list(m["unsafe_name"]) == [i.filename == "arc/../evil" for i in infos]
        assert list(m["used_by"]) == ["w; v" if i.filename == W0 else "" for i in infos]
        assert {c: str(t) for c, t in m.dtypes.items()} == {
            "index": "int64", "name": "string", "kind": "category", "model": "category",
            "file": "string", "header_offset": "int64", "offset": "int64", "size": "int64",
            "file_size": "int64", "align": "Int64", "method": "int64", "compressed": "bool",
            "crc32": "int64", "pickled": "bool", "unsafe_name": "bool", "used_by": "string"}


def test_members_columns_of_an_empty_zip(tmp_path):
    """No members: every column is empty and keeps its type."""
    p = tmp_path / "empty.zip"
    with zipfile.ZipFile(p, "w"):
        pass
    with Source(p) as src:
        arc = Archive(src)
        cols = pt2_columns.members_columns(arc)
        assert {k: len(v) for k, v in cols.items()} == dict.fromkeys(cols, 0)
        for k in ("pickled", "unsafe_name", "compressed"):
            assert cols[k].dtype == np.bool_, k
        for k in ("index", "header_offset", "offset", "size", "file_size", "method", "crc32"):
            assert cols[k].dtype == np.int64, k
        assert [x.as_dict() for x in arc.findings] == [{"severity": "warning", "structure": "archive_format",
                                 "offset": None, "message": "no archive_format member: not a "
                                 "torch.export / AOTInductor archive (members are listed, "
                                 "nothing else is read)"}]


# --------------------------------------------------------------------------------------------
# AOTInductor packages: the wrapper's values, the constants' layout and where they are
# --------------------------------------------------------------------------------------------

T = "static_cast<int32_t>(torch::aot_inductor::ConstantType::{})"


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("name", b'"abc"', "abc"), ("name", b'  "abc" \t', "abc"), ("original_fqn", b'"a.b"', "a.b"),
    ("name", b'""', ""), ("name", b'"', None), ("name", b"abc", None), ("name", b'"abc', None),
    ("name", b'abc"', None), ("name", b"'abc'", None), ("name", b'"\\x41"', "A"),
    ("name", b'"\\101\\060"', "A0"), ("name", b'"a\\tb\\n"', "a\tb\n"), ("name", b'"\\q"', None),
    ("name", b'"a\\\\"', "a\\"), ("name", b'"\\"q\\""', '"q"'), ("name", b'"\\xZZ"', None),
    ("name", b'"\\xc3\\xa9"', "\u00e9"), ("name", b'"\\xff"', "\ufffd"),
    ("name", b'"a\\\nb"', "ab"), ("name", b'"\\\'"', "'"), ("name", b'"x\\"', None),
    ("shape", b"{32, 16}", (32, 16)), ("shape", b"{}", ()), ("shape", b"{ }", ()),
    ("shape", b"{-1, 2,}", (-1, 2)), ("shape", b"{1 2}", None), ("shape", b"32", None),
    ("shape", b"{1,,2}", None), ("shape", b"{a}", None), ("shape", b" {7} ", (7,)),
    ("stride", b"{1}", (1,)), ("stride", b"{1, 2", None),
    ("offset", b"12", 12), ("offset", b"-3", -3), ("offset", b"1" * 20, int(b"1" * 20)),
    ("offset", b"1" * 21, None), ("offset", b"0x10", None), ("offset", b"", None),
    ("offset", b" 7 ", 7), ("data_size", b"64", 64), ("data_size", b"6.4", None),
    ("from_folded", b"true", True), ("from_folded", b"false", False),
    ("from_folded", b"1", None), ("from_folded", b"True", None),
    ("dtype", b"cached_torch_dtype_float32", "float32"),
    ("dtype", b"static_cast<int32_t>(cached_torch_dtype_bfloat16)", "bfloat16"),
    ("dtype", b"float32", None), ("dtype", b"cached_torch_dtype_", ""),
    ("device_type", b"cached_torch_device_type_cuda", "cuda"),
    ("layout", b"static_cast<int32_t>(cached_torch_layout_strided)", "strided"),
    ("type", T.format("Parameter").encode(), "Parameter"),
    ("type", T.format("Buffer").encode(), "Buffer"), ("type", b"Buffer", None),
    ("unknown", b"1", None), ("index", b"1", None),
])
def test_cvalue(field, value, expected):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = cvalue(field, value)
    assert got == expected and type(got) is type(expected)


STEM = "pkg/data/aotinductor/model/cabc.wrapper"


def wrapper_src(consts: list[dict], declared: int | None = -1, inputs: int = 2,
                outputs: int = 3) -> bytes:
    """A generated wrapper declaring ``consts`` (dicts of raw right-hand sides, by field)."""
    lines = []
    if declared is not None:
        n = len(consts) if declared == -1 else declared
        lines.append(f"    : AOTInductorModelBase({inputs},\n  {outputs},\n  {n},\n  device_str) {{")
    for i, c in enumerate(consts):
        for field, value in c.items():
            lines.append(f"    constants_info_[{c.get('_index', i)}].{field} = {value};")
    return "\n".join(line for line in lines if "._index =" not in line).encode()


def const(name: str, shape, stride, data_size: int, *, dtype: str = "float32",
          device: str = "cpu", offset: int = 0, folded: bool = False, type_: str = "Parameter",
          fqn: str | None = None, layout: str = "strided") -> dict:
    c = {"name": f'"{name}"', "dtype": f"static_cast<int32_t>(cached_torch_dtype_{dtype})",
         "device_type": f"static_cast<int32_t>(cached_torch_device_type_{device})",
         "offset": str(offset), "data_size": str(data_size),
         "from_folded": "true" if folded else "false", "type": T.format(type_),
         "shape": "{" + ", ".join(map(str, shape)) + "}",
         "stride": "{" + ", ".join(map(str, stride)) + "}",
         "layout": f"static_cast<int32_t>(cached_torch_layout_{layout})"}
    if fqn is not None:
        c["original_fqn"] = f'"{fqn}"'
    return c


def aoti_file(tmp_path, src: bytes | None, *, so: bytes | None = None, blob: bytes | None = None,
              meta: bytes | None = b'{"AOTI_DEVICE_KEY": "cpu"}', extra: list[dict] = (),
              name: str = "a.pt2", so_method: int = 0, blob_method: int = 0):
    ms = [{"name": "pkg/archive_format", "data": b"pt2"}, *extra]
    if src is not None:
        ms.append({"name": f"{STEM}.cpp", "data": src})
    if meta is not None:
        ms.append({"name": f"{STEM}_metadata.json", "data": meta})
    if blob is not None:
        ms.append({"name": f"{STEM}_weights.blob", "data": blob, "method": blob_method})
    if so is not None:
        ms.append({"name": f"{STEM}.so", "data": so, "method": so_method})
    return pt2_file(tmp_path, ms, name=name)


def model_row(art, key: str = "model") -> dict:
    import pandas as pd

    m = art.frames["models"].set_index("name").loc[key].to_dict()
    return {k: (None if pd.isna(v) else v) for k, v in m.items()}


def test_aoti_blob_rows_and_model(tmp_path):
    """CPU constants in the blob, each padded to 64 bytes, in wrapper order; every column of
    every row; the model row from the wrapper and the metadata."""
    a = np.arange(6, dtype=np.float32)
    b = np.arange(5, dtype=np.int64)
    blob = a.tobytes().ljust(64, b"\0") + b.tobytes().ljust(64, b"\0") + bytes(64)
    consts = [const("a", [3, 2], [1, 3], 24, fqn="sub.a"),
              const("b", [4], [1], 40, dtype="int64", offset=1, type_="Buffer"),
              const("f", [2], [1], 8, folded=True, type_="FoldedConstant"),
              const("c", [2, 2], [2, 1], 16, dtype="float16", type_="TensorConstant")]
    p = aoti_file(tmp_path, wrapper_src(consts), blob=blob)
    blob_name, base = f"{STEM}_weights.blob", data_offset(p, f"{STEM}_weights.blob")
    with wb.open(p) as art:
        assert list(art.tensors["name"]) == ["sub.a", "b", "f", "c"]
        common = {"file": str(p), "model": "model", "pickled": False, "requires_grad": None,
                  "member": blob_name, "storage": "blob", "shared": False}
        assert row(art, "sub.a") == {
            **common, "dtype": "float32", "shape": (3, 2), "nbytes": 24, "offset": base,
            "align": base & -base, "fqn": "sub.a", "kind": "parameter", "strides": (1, 3),
            "storage_offset": 0, "contiguous": False, "storage_id": 0}
        assert row(art, "b") == {
            **common, "dtype": "int64", "shape": (4,), "nbytes": 32, "offset": base + 72,
            "align": 8, "fqn": "b", "kind": "buffer", "strides": (1,), "storage_offset": 1,
            "contiguous": True, "storage_id": 1}
        assert row(art, "f") == {
            **common, "dtype": "float32", "shape": (2,), "nbytes": 8, "offset": None,
            "align": None, "file": None, "fqn": "f", "kind": "constant", "strides": (1,),
            "storage_offset": 0, "contiguous": True, "storage": "folded", "member": None,
            "storage_id": 2}
        assert row(art, "c") == {
            **common, "dtype": "float16", "shape": (2, 2), "nbytes": 8, "offset": base + 128,
            "align": (base + 128) & -(base + 128), "fqn": "c", "kind": "constant",
            "strides": (2, 1), "storage_offset": 0, "contiguous": True, "storage_id": 3}
        np.testing.assert_array_equal(art.tensor("sub.a"), a.reshape(2, 3).T)
        np.testing.assert_array_equal(art.tensor("b"), b[1:])
        assert model_row(art) == {"kind": "aoti", "member": None, "nodes": None, "ops": None,
                                  "inputs": 2, "outputs": 3, "parameters": 1, "buffers": 1,
                                  "constants": 2, "schema_version": None, "torch_version": None,
                                  "device": "cpu"}
        m = art.frames["members"].set_index("name")
        assert m.loc[blob_name, "used_by"] == "sub.a; b; c"
        assert m.loc[blob_name, "kind"] == "blob" and m.loc[blob_name, "model"] == "model"
        assert finds(art) == []


@pytest.mark.parametrize(("devices", "offsets"), [
    (("cpu", "cpu", "cpu"), (0, 64, 128)),
    (("cuda", "cuda", "cuda"), (0, 24, 32)),
    (("cuda", "cpu", "cuda"), (0, 64, 128)),
])
def test_aoti_blob_padding_by_device(tmp_path, devices, offsets):
    """Each CPU constant is padded to 64 bytes; when every stored constant is on CUDA they
    are packed (folded constants take no room and do not count)."""
    consts = [const("x", [6], [1], 24, device=devices[0]),
              const("y", [2], [1], 8, device=devices[1]),
              const("skip", [4], [1], 16, device="cpu", folded=True),
              const("z", [1], [1], 4, device=devices[2])]
    blob = bytes(range(256)) * 2
    p = aoti_file(tmp_path, wrapper_src(consts), blob=blob)
    base = data_offset(p, f"{STEM}_weights.blob")
    with wb.open(p) as art:
        got = tuple(row(art, n)["offset"] - base for n in ("x", "y", "z"))
        assert got == offsets
        assert row(art, "skip")["offset"] is None
        assert finds(art) == []


def test_aoti_blob_too_small_or_compressed(tmp_path):
    consts = [const("x", [6], [1], 24), const("y", [2], [1], 8)]  # needs 64 + 64 bytes
    p = aoti_file(tmp_path, wrapper_src(consts), blob=bytes(127))
    with wb.open(p) as art:
        assert [row(art, n)["offset"] for n in ("x", "y")] == [None, None]
        assert [row(art, n)["storage"] for n in ("x", "y")] == ["blob", "blob"]
        assert finds(art) == [("warning", "AOTInductor model 'model'",
                               data_offset(p, f"{STEM}_weights.blob"),
                               "constants need 128 bytes, the blob holds 127")]
    p = aoti_file(tmp_path, wrapper_src(consts), blob=bytes(128))
    with wb.open(p) as art:
        assert finds(art) == []
        assert row(art, "y")["offset"] == data_offset(p, f"{STEM}_weights.blob") + 64
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflated = comp.compress(bytes(128)) + comp.flush()
    ms = [{"name": "pkg/archive_format", "data": b"pt2"},
          {"name": f"{STEM}.cpp", "data": wrapper_src(consts)},
          {"name": f"{STEM}_weights.blob", "data": deflated, "method": 8, "file_size": 128}]
    p = pt2_file(tmp_path, ms, name="c.pt2")
    with wb.open(p) as art:
        assert [row(art, n)["offset"] for n in ("x", "y")] == [None, None]
        assert [row(art, n)["storage"] for n in ("x", "y")] == ["blob", "blob"]
        assert [row(art, n)["member"] for n in ("x", "y")] == [f"{STEM}_weights.blob"] * 2
        assert [f[:3] for f in finds(art)] == [("info", "zip central directory", None)]


def test_aoti_view_checks(tmp_path):
    """A view past its data_size, a non-strided layout or an unknown dtype gets no offset;
    a view that reaches exactly data_size does."""
    consts = [const("exact", [2, 3], [3, 1], 24),
              const("past", [2, 3], [3, 1], 20),
              const("off", [4], [1], 16, offset=1),
              const("sparse", [2], [1], 8, layout="sparse_coo"),
              const("odd", [2], [1], 8, dtype="weird")]
    p = aoti_file(tmp_path, wrapper_src(consts), blob=bytes(64 * 5))
    base = data_offset(p, f"{STEM}_weights.blob")
    with wb.open(p) as art:
        assert row(art, "exact")["offset"] == base
        for n in ("past", "off", "sparse", "odd"):
            assert row(art, n)["offset"] is None, n
        assert row(art, "odd")["nbytes"] == 0 and row(art, "odd")["dtype"] == "weird"
        assert row(art, "sparse")["nbytes"] == 8
        assert finds(art) == [
            ("warning", "AOTInductor model 'model' constant 'past'", None,
             "view reaches 24 bytes, data_size is 20"),
            ("warning", "AOTInductor model 'model' constant 'off'", None,
             "view reaches 20 bytes, data_size is 16")]


def test_aoti_names_and_missing_fields(tmp_path):
    """The row name: original_fqn, else name, else ``constant_<i>``; a constant without an
    offset gets no byte offset; the storage key is per model and index."""
    c0 = const("n0", [1], [1], 4, fqn="fq0")
    c1 = const("n1", [1], [1], 4)
    c2 = const("n2", [1], [1], 4)
    del c2["name"]
    c3 = const("n3", [1], [1], 4)
    del c3["offset"]
    p = aoti_file(tmp_path, wrapper_src([c0, c1, c2, c3]), blob=bytes(256))
    with wb.open(p) as art:
        assert list(art.tensors["name"]) == ["fq0", "n1", "constant_2", "n3"]
        assert row(art, "n3")["offset"] is None and row(art, "n3")["storage_offset"] is None
        assert list(art.tensors["storage_id"]) == [0, 1, 2, 3]
        assert art._parsed.builders  # (built)
        assert [r for r in art.frames["tensors"]["shared"]] == [False] * 4


def test_aoti_declared_count(tmp_path):
    consts = [const("x", [1], [1], 4), const("y", [1], [1], 4)]
    # more described than declared: an index past the count is corrupt
    src = wrapper_src(consts, declared=1)
    p = aoti_file(tmp_path, src, blob=bytes(128))
    with pytest.raises(CorruptError) as ei:
        wb.open(p)
    e = ei.value
    assert e.detail == "constants_info_[1] is out of range (1 constants)"
    assert e.structure == f"zip member '{STEM}.cpp'"
    assert e.offset == data_offset(p, f"{STEM}.cpp")
    # fewer described than declared: a warning
    p = aoti_file(tmp_path, wrapper_src(consts, declared=3), blob=bytes(128))
    with wb.open(p) as art:
        assert finds(art) == [("warning", f"zip member '{STEM}.cpp'", None,
                               "3 constants declared, 2 described")]
        assert list(art.tensors["name"]) == ["x", "y"]
        assert (model_row(art)["inputs"], model_row(art)["outputs"]) == (2, 3)
    # no model base, or absurd counts: nothing declared, nothing checked
    for src in (wrapper_src(consts, declared=None),
                wrapper_src(consts, declared=1, inputs=LIMIT)):
        p = aoti_file(tmp_path, src, blob=bytes(128))
        with wb.open(p) as art:
            assert list(art.tensors["name"]) == ["x", "y"]
            assert (model_row(art)["inputs"], model_row(art)["outputs"]) == (None, None)
            assert finds(art) == []
    p = aoti_file(tmp_path, wrapper_src(consts, declared=1, outputs=LIMIT - 1), blob=bytes(128))
    with pytest.raises(CorruptError):
        wb.open(p)


def test_aoti_inconsistent_constants_are_skipped(tmp_path):
    def skipped(i: int) -> str:
        return (f"constants_info_[{i}] has a negative, oversized or inconsistent shape, stride, "
                "offset or data_size: skipped")

    ok = const("ok", [1], [1], 4)
    no_shape = const("no_shape", [1], [1], 4)
    del no_shape["shape"]
    no_stride = const("no_stride", [1], [1], 4)
    del no_stride["stride"]
    bad_shape = const("bad_shape", [1], [1], 4)
    bad_shape["shape"] = "{1, x}"
    cases = [ok, no_shape, no_stride, bad_shape,
             const("ranks", [2, 2], [1], 16),
             const("neg_size", [-1], [1], 4), const("neg_stride", [2], [-1], 8),
             const("neg_off", [1], [1], 4, offset=-1), const("neg_data", [1], [1], -4),
             const("limit_data", [1], [1], LIMIT), const("limit_dim", [LIMIT], [1], 4),
             const("limit_stride", [1], [LIMIT], 4), const("limit_off", [1], [1], 4, offset=LIMIT),
             const("bytes", [LIMIT // 4], [1], 4), const("bytes8", [LIMIT // 8], [1], 4,
                                                        dtype="int64"),
             const("under", [LIMIT // 8 - 1], [1], LIMIT - 1, dtype="int64"),
             const("under_u8", [LIMIT - 1], [1], LIMIT - 1, dtype="uint8")]
    p = aoti_file(tmp_path, wrapper_src(cases), blob=bytes(64))
    where, off = f"zip member '{STEM}.cpp'", data_offset(p, f"{STEM}.cpp")
    with wb.open(p) as art:
        assert list(art.tensors["name"]) == ["ok", "under", "under_u8"]
        warnings_ = [f for f in finds(art) if f[3].endswith("skipped")]
        assert warnings_ == [("warning", where, off, skipped(i)) for i in range(1, 15)]
        assert model_row(art)["parameters"] == 3
        assert row(art, "under")["nbytes"] == (LIMIT // 8 - 1) * 8


def test_aoti_model_counts_and_metadata(tmp_path):
    consts = [const("p", [1], [1], 4), const("b", [1], [1], 4, type_="Buffer"),
              const("c", [1], [1], 4, type_="TensorConstant"), const("q", [1], [1], 4)]
    for meta, device, found in (
            (b'{"AOTI_DEVICE_KEY": "cuda"}', "cuda", []),
            (b'{"other": 1}', None, []),
            (b"[1, 2]", None, []),
            (b'{"AOTI_DEVICE_KEY": 3}', None,
             [("warning", "AOTInductor model 'model'", "meta",
               "metadata: 'AOTI_DEVICE_KEY' is not a string")]),
            (b"{bad json", None, [("warning", "AOTInductor model 'model'", "meta", "json")]),
            (None, None, [])):
        p = aoti_file(tmp_path, wrapper_src(consts), blob=bytes(256), meta=meta)
        with wb.open(p) as art:
            r = model_row(art)
            assert (r["device"], r["parameters"], r["buffers"], r["constants"]) == \
                (device, 2, 1, 1), meta
            got = finds(art)
            if found and found[0][3] == "json":
                assert len(got) == 1 and got[0][:3] == (
                    "warning", "AOTInductor model 'model'", data_offset(p, f"{STEM}_metadata.json"))
                assert got[0][3].startswith("metadata: ") and "JSON" in got[0][3]
            else:
                assert got == [(s, w, data_offset(p, f"{STEM}_metadata.json"), m)
                               for s, w, _, m in found], meta


def test_aoti_no_wrapper_and_other_sources(tmp_path):
    # no generated source: a warning, the model row without counts
    p = aoti_file(tmp_path, None, blob=bytes(64), so=b"\x7fELF" + bytes(60))
    with wb.open(p) as art:
        assert len(art.tensors) == 0
        assert finds(art) == [("warning", "AOTInductor model 'model'", None,
                               "no generated wrapper source: constants cannot be listed")]
        assert model_row(art) == {"kind": "aoti", "member": f"{STEM}.so", "nodes": None,
                                  "ops": None, "inputs": None, "outputs": None,
                                  "parameters": None, "buffers": None, "constants": None,
                                  "schema_version": None, "torch_version": None,
                                  "device": "cpu"}
    # a wrapper with no constants: counts are zero, nothing is located
    p = aoti_file(tmp_path, wrapper_src([]))
    with wb.open(p) as art:
        r = model_row(art)
        assert (r["parameters"], r["buffers"], r["constants"], r["inputs"]) == (0, 0, 0, 2)
        assert finds(art) == []
    # no "wrapper.cpp": another .cpp is the wrapper; the .so and blob named like it win
    consts = [const("x", [1], [1], 4)]
    ms = [{"name": "pkg/archive_format", "data": b"pt2"},
          {"name": "pkg/data/aotinductor/model/other_weights.blob", "data": bytes(64)},
          {"name": "pkg/data/aotinductor/model/other.so", "data": b"x"},
          {"name": "pkg/data/aotinductor/model/gen.cpp", "data": wrapper_src(consts)},
          {"name": "pkg/data/aotinductor/model/gen_weights.blob", "data": bytes(64)},
          {"name": "pkg/data/aotinductor/model/gen.so", "data": b"y"}]
    p = pt2_file(tmp_path, ms, name="g.pt2")
    with wb.open(p) as art:
        assert row(art, "x")["member"] == "pkg/data/aotinductor/model/gen_weights.blob"
        assert row(art, "x")["offset"] == data_offset(p, "pkg/data/aotinductor/model/gen_weights.blob")
        assert model_row(art)["member"] == "pkg/data/aotinductor/model/gen.so"
        assert model_row(art)["device"] is None
    # no stem match: the first of each kind
    ms = [{"name": "pkg/archive_format", "data": b"pt2"},
          {"name": "pkg/data/aotinductor/model/gen.wrapper.cpp", "data": wrapper_src(consts)},
          {"name": "pkg/data/aotinductor/model/k1_weights.blob", "data": bytes(64)},
          {"name": "pkg/data/aotinductor/model/k2_weights.blob", "data": bytes(64)},
          {"name": "pkg/data/aotinductor/model/k1_metadata.json", "data": b'{"AOTI_DEVICE_KEY": "a"}'},
          {"name": "pkg/data/aotinductor/model/k2_metadata.json", "data": b'{"AOTI_DEVICE_KEY": "b"}'}]
    p = pt2_file(tmp_path, ms, name="h.pt2")
    with wb.open(p) as art:
        assert row(art, "x")["member"] == "pkg/data/aotinductor/model/k1_weights.blob"
        assert model_row(art)["device"] == "a"


def test_aoti_model_next_to_an_exported_program_of_the_same_name(tmp_path):
    consts = [const("x", [1], [1], 4)]
    ms = [*pt2_members(root="pkg"), {"name": f"{STEM}.cpp", "data": wrapper_src(consts)},
          {"name": f"{STEM}_weights.blob", "data": bytes(64)}]
    p = pt2_file(tmp_path, ms)
    with wb.open(p) as art:
        models = art.frames["models"]
        assert list(models["name"]) == ["model", "model/aoti"]
        assert list(models["kind"]) == ["exported_program", "aoti"]
        assert list(art.tensors["name"]) == ["x"]


MAGIC = 0x1234_5678_9ABC_DEF0  # what the appended-weights trailer repeats


def so_with_region(consts: bytes, lo: int = 0x10) -> tuple[bytes, int]:
    """An ELF image whose ``.rodata`` holds ``consts`` between the two symbols (at ``lo``);
    returns it and the constants' offset in it."""
    rodata = bytes(lo) + consts + bytes(16)
    image, ro = standard(lo, lo + len(consts), rodata_bytes=rodata)
    return image, ro + lo


def so_rows(art) -> list[tuple]:
    seg = art.segments
    sel = seg[seg["name"].str.startswith(f"{STEM}.so")]
    return list(zip(sel["name"], sel["kind"], sel["offset"], sel["size"], sel["used_by"]))


def test_aoti_constants_in_the_shared_object(tmp_path):
    x = np.arange(6, dtype=np.float32)
    y = np.arange(3, dtype=np.int32)
    consts_bytes = x.tobytes().ljust(64, b"\0") + y.tobytes().ljust(64, b"\0")
    image, at = so_with_region(consts_bytes + bytes(8))  # (the region may be larger)
    consts = [const("x", [2, 3], [3, 1], 24), const("y", [3], [1], 12, dtype="int32")]
    p = aoti_file(tmp_path, wrapper_src(consts), so=image)
    so_name = f"{STEM}.so"
    base = data_offset(p, so_name)
    with wb.open(p) as art:
        assert finds(art) == []
        for n, off in (("x", 0), ("y", 64)):
            r = row(art, n)
            assert (r["storage"], r["member"], r["offset"]) == ("so", so_name, base + at + off)
        np.testing.assert_array_equal(art.tensor("x"), x.reshape(2, 3))
        np.testing.assert_array_equal(art.tensor("y"), y)
        assert model_row(art)["member"] == so_name
        assert so_rows(art) == [(so_name, "so", base, at, ""),
                                (f"{so_name} [constants]", "blob", base + at, 128, "x; y"),
                                (so_name, "so", base + at + 128, len(image) - at - 128, "")]
        assert art.frames["members"].set_index("name").loc[so_name, "used_by"] == "x; y"


def test_aoti_shared_object_region_too_small(tmp_path):
    image, at = so_with_region(bytes(100))
    consts = [const("x", [2, 3], [3, 1], 24), const("y", [3], [1], 12, dtype="int32")]
    p = aoti_file(tmp_path, wrapper_src(consts), so=image)
    base = data_offset(p, f"{STEM}.so")
    with wb.open(p) as art:
        assert finds(art) == [("warning", "AOTInductor model 'model'", base + at,
                               "constants need 128 bytes, the shared object's constants region "
                               "holds 100: offsets unknown")]
        assert [row(art, n)["offset"] for n in ("x", "y")] == [None, None]
        assert [row(art, n)["member"] for n in ("x", "y")] == [f"{STEM}.so"] * 2
        assert so_rows(art) == [(f"{STEM}.so", "so", base, len(image), "x; y")]


def _appended(total: int, *, size_plus: int | None = None, magic_tail: int = MAGIC,
              region: int = 16, payload: bytes | None = None) -> tuple[bytes, int, int]:
    """A .so whose constants region is the 16-byte (size + 8, magic) record, the constants
    appended after the image, then the magic again; returns the bytes, the record's offset
    and the appended constants' offset."""
    rec = struct.pack("<qq", total + 8 if size_plus is None else size_plus, MAGIC)
    image, at = so_with_region(rec.ljust(region, b"\0"))
    payload = bytes(total) if payload is None else payload
    return image + payload + struct.pack("<q", magic_tail), at, len(image)


def test_aoti_appended_weights(tmp_path):
    x = np.arange(16, dtype=np.float32)
    consts = [const("x", [16], [1], 64), const("y", [4], [1], 16, offset=0)]
    payload = x.tobytes() + bytes(range(64))
    data, _at, appended = _appended(128, payload=payload)
    p = aoti_file(tmp_path, wrapper_src(consts), so=data)
    so_name = f"{STEM}.so"
    base = data_offset(p, so_name)
    with wb.open(p) as art:
        assert finds(art) == []
        assert row(art, "x")["offset"] == base + appended
        assert row(art, "y")["offset"] == base + appended + 64
        np.testing.assert_array_equal(art.tensor("x"), x)
        assert so_rows(art) == [(so_name, "so", base, appended, ""),
                                (f"{so_name} [constants]", "blob", base + appended, 136,
                                 "x; y"),
                                (so_name, "so", base + appended + 136, 0, "")]


@pytest.mark.parametrize("how", ["size", "magic", "region", "before"])
def test_aoti_appended_weights_that_do_not_check_out(tmp_path, how):
    consts = [const("x", [16], [1], 64), const("y", [4], [1], 16)]
    kw = {"size": {"size_plus": 128}, "magic": {"magic_tail": MAGIC + 1},
          "region": {"region": 24}, "before": {"size_plus": 128 + 8}}[how]
    data, at, _ = _appended(128, **kw)
    need = 128
    if how == "before":  # the trailer claims more bytes than lie before it in the .so
        image, at = so_with_region(bytes(16))
        need = -(-(len(image) + 64) // 64) * 64
        image, at = so_with_region(struct.pack("<qq", need + 8, MAGIC))
        data = image + struct.pack("<q", MAGIC)
        consts = [const("x", [1], [1], need)]
    p = aoti_file(tmp_path, wrapper_src(consts), so=data)
    base = data_offset(p, f"{STEM}.so")
    with wb.open(p) as art:
        holds = 24 if how == "region" else 16
        assert finds(art) == [("warning", "AOTInductor model 'model'", base + at,
                               f"constants need {need} bytes, the shared object's constants "
                               f"region holds {holds}: offsets unknown")]
        assert art.tensors["offset"].isna().all()


def test_aoti_shared_object_without_the_symbols(tmp_path):
    consts = [const("x", [1], [1], 4)]
    info = ("info", "AOTInductor model 'model'", None,
            "constants region of the shared object not found (not an ELF64 file with "
            "_binary_constants_bin_start): offsets unknown")
    image, _ = standard(names=(b"other_start", b"other_end"))
    for so in (b"\x7fELF" + bytes(60), image):
        p = aoti_file(tmp_path, wrapper_src(consts), so=so)
        with wb.open(p) as art:
            assert finds(art) == [info]
            r = row(art, "x")
            assert (r["storage"], r["member"], r["offset"]) == ("so", f"{STEM}.so", None)
    # a compressed .so is not searched
    image, _ = so_with_region(bytes(64))
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflated = comp.compress(image) + comp.flush()
    ms = [{"name": "pkg/archive_format", "data": b"pt2"},
          {"name": f"{STEM}.cpp", "data": wrapper_src(consts)},
          {"name": f"{STEM}.so", "data": deflated, "method": 8, "file_size": len(image)}]
    p = pt2_file(tmp_path, ms, name="z.pt2")
    with wb.open(p) as art:
        assert finds(art)[0] == info
        assert row(art, "x")["offset"] is None


def test_aoti_without_shared_object_or_blob(tmp_path):
    consts = [const("x", [1], [1], 4)]
    p = aoti_file(tmp_path, wrapper_src(consts))
    with wb.open(p) as art:
        assert finds(art) == [("warning", "AOTInductor model 'model'", None,
                               "no shared object: constant offsets are unknown")]
        r = row(art, "x")
        assert (r["storage"], r["member"], r["offset"]) == ("so", None, None)
        assert model_row(art)["member"] is None


def test_aoti_blob_wins_over_the_shared_object(tmp_path):
    image, _ = so_with_region(bytes(64))
    consts = [const("x", [1], [1], 4)]
    p = aoti_file(tmp_path, wrapper_src(consts), so=image, blob=bytes(64))
    with wb.open(p) as art:
        r = row(art, "x")
        assert (r["storage"], r["member"], r["offset"]) == \
            ("blob", f"{STEM}_weights.blob", data_offset(p, f"{STEM}_weights.blob"))
        assert so_rows(art) == [(f"{STEM}.so", "so", data_offset(p, f"{STEM}.so"), len(image), "")]
        assert finds(art) == []


# --------------------------------------------------------------------------------------------
# the zip central directory walked record by record (the general path)
# --------------------------------------------------------------------------------------------

def zip_bytes(members: list[tuple], *, comment: bytes = b"", force_zip64: bool = False) -> bytes:
    """An archive written by ``zipfile``: (name, data[, method]) per member."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.comment = comment
        for m in members:
            info = zipfile.ZipInfo(m[0], (2020, 1, 1, 0, 0, 0))
            info.compress_type = m[2] if len(m) > 2 else zipfile.ZIP_STORED
            with z.open(info, "w", force_zip64=force_zip64) as f:
                f.write(m[1])
    return out.getvalue()


def central_records(data: bytes) -> tuple[int, int, list[int]]:
    """(directory offset, directory end, record offsets) of a classic archive."""
    eocd = data.rindex(b"PK\x05\x06")
    n, size, off = struct.unpack_from("<HII", data, eocd + 10)
    recs, pos = [], off
    for _ in range(n):
        recs.append(pos)
        n_len, x_len, c_len = struct.unpack_from("<HHH", data, pos + 28)
        pos += 46 + n_len + x_len + c_len
    return off, off + size, recs


def directory(tmp_path, data: bytes, scalar: bool, monkeypatch, name: str = "z.zip"):
    p = tmp_path / name
    p.write_bytes(data)
    with monkeypatch.context() as mp:
        if scalar:
            mp.setattr(ZipDirectory, "_central_fast", lambda self: None)
        src = Source(p)
        return ZipDirectory(src), p


def _zip_cases() -> dict[str, bytes]:
    cases = {
        "plain": zip_bytes([("a.txt", b"alpha"), ("dir/b.bin", bytes(300)), ("c", b"")]),
        "deflate": zip_bytes([("x", b"hello " * 100, zipfile.ZIP_DEFLATED), ("y", b"y")]),
        "local64": zip_bytes([("big", b"q" * 70), ("small", b"s")], force_zip64=True),
        "utf8": zip_bytes([("caf\u00e9/\u00fc.txt", b"u"), ("plain", b"p")]),
        "comment": zip_bytes([("a", b"1")], comment=b"a comment PK\x01\x02 inside"),
        "empty": zip_bytes([]),
    }
    # a name with a high byte and no UTF-8 flag (cp437), and a comment per record
    data, _ = build_zip([{"name": b"r\x81sum\xe9", "data": b"cp", "flags": 0},
                         {"name": "n", "data": b"n", "flags": 0}], align=0)
    cases["cp437"] = data
    cases["central64"] = build_zip([{"name": "a", "data": b"abc"}, {"name": "b", "data": b"d"}],
                                   zip64=True)[0]
    return cases


@pytest.mark.parametrize("case", list(_zip_cases()))
def test_central_directory_walk_matches_zipfile(tmp_path, monkeypatch, case):
    data = _zip_cases()[case]
    fast, p = directory(tmp_path, data, False, monkeypatch)
    slow, _ = directory(tmp_path, data, True, monkeypatch, "s.zip")
    with zipfile.ZipFile(p) as z:
        infos = z.infolist()
    assert slow.names == fast.names == [i.filename for i in infos]
    assert list(slow.arrays) == list(fast.arrays)
    for k, v in slow.arrays.items():
        np.testing.assert_array_equal(v, fast.arrays[k], err_msg=k)
        assert v.dtype == fast.arrays[k].dtype, k
    a = slow.arrays
    assert a["header_offset"].tolist() == [i.header_offset for i in infos]
    assert a["compressed_size"].tolist() == [i.compress_size for i in infos]
    assert a["file_size"].tolist() == [i.file_size for i in infos]
    assert a["method"].tolist() == [i.compress_type for i in infos]
    assert a["crc32"].tolist() == [i.CRC for i in infos]
    assert a["flags"].tolist() == [i.flag_bits for i in infos]
    assert a["compressed"].tolist() == [i.compress_type != 0 for i in infos]
    if case != "central64":
        _, end, recs = central_records(data)
        assert a["central_offset"].tolist() == recs
        assert a["central_size"].tolist() == [b - a_ for a_, b in zip(recs, [*recs[1:], end])]
    assert a["zip64"].tolist() == [case == "central64"] * len(infos)
    assert a["data_offset"].tolist() == [data_offset(p, i.filename) for i in infos]


def _edit(data: bytes, at: int, fmt: str, value: int) -> bytes:
    d = bytearray(data)
    struct.pack_into(fmt, d, at, value)
    return bytes(d)


@pytest.mark.parametrize("scalar", [False, True])
def test_central_directory_record_errors(tmp_path, monkeypatch, scalar):
    data = zip_bytes([("first.txt", b"1" * 10), ("second.txt", b"2" * 20)])
    _, end, (r0, r1) = central_records(data)

    def fails(d: bytes, cls):
        with pytest.raises(cls) as ei:
            directory(tmp_path, d, scalar, monkeypatch)
        assert type(ei.value) is cls and ei.value.file == "z.zip"
        return ei.value

    # record 0 swallows the directory (its comment runs to the end): no room for record 1
    e = fails(_edit(data, r0 + 32, "<H", end - r0 - 46 - 9), TruncatedError)
    assert (e.detail, e.structure, e.offset) == (
        f"central directory entry 1 of 2 runs past the directory end at 0x{end:x}",
        "zip central directory entry 1", end)
    # record 1's comment runs past the directory end
    e = fails(_edit(data, r1 + 32, "<H", 1), TruncatedError)
    assert (e.detail, e.structure, e.offset) == (
        f"name/extra/comment (10+0+1 bytes) run past the directory end at 0x{end:x}",
        "zip central directory entry 1", r1)
    e = fails(_edit(data, r0 + 30, "<H", 0xFFFF), TruncatedError)
    assert (e.detail, e.structure, e.offset) == (
        f"name/extra/comment (9+65535+0 bytes) run past the directory end at 0x{end:x}",
        "zip central directory entry 0", r0)
    # a bad signature
    e = fails(_edit(data, r1, "<I", 0x02014B51), wb.CorruptError)
    assert (e.detail, e.structure, e.offset) == (
        "bad signature 0x02014b51 (expected 0x02014b50)", "zip central directory entry 1", r1)
    # a member on another disk
    e = fails(_edit(data, r1 + 34, "<H", 3), wb.UnsupportedVersionError)
    assert (e.detail, e.structure, e.offset) == (
        "member 'second.txt' starts on disk 3", "zip central directory entry 1", r1)
    # a name that is not UTF-8 although the flag says so
    d = bytearray(_edit(data, r1 + 8, "<H", 0x0800))
    d[r1 + 46 + 2] = 0xFF
    e = fails(bytes(d), wb.CorruptError)
    assert (e.detail, e.structure, e.offset) == (
        "member name is not valid UTF-8 (invalid start byte at byte 2) although flag bit 11 "
        "says so", "zip central directory entry 1", r1 + 46 + 2)
    # 0xFFFFFFFF sizes without a zip64 field
    e = fails(_edit(data, r0 + 20, "<I", 0xFFFFFFFF), wb.CorruptError)
    assert (e.detail, e.structure, e.offset) == (
        "sizes or offset hold 0xFFFFFFFF but there is no zip64 extra field",
        "zip central directory entry 0 ('first.txt') zip64 extra", r0 + 46 + 9)


def test_central_directory_names_without_the_utf8_flag(tmp_path, monkeypatch):
    for scalar in (False, True):
        data, _ = build_zip([{"name": b"r\x81sum\xe9", "data": b"cp", "flags": 0},
                             {"name": b"ascii", "data": b"a", "flags": 0},
                             {"name": "caf\u00e9", "data": b"u"}], align=0)
        zd, p = directory(tmp_path, data, scalar, monkeypatch)
        with zipfile.ZipFile(p) as z:
            assert zd.names == [i.filename for i in z.infolist()] == \
                ["r\u00fcsum\u0398", "ascii", "caf\u00e9"]


# --------------------------------------------------------------------------------------------
# compare: delta, the HTML summary, quantized matches, fingerprints, delegate constants
# --------------------------------------------------------------------------------------------

METRICS = ("size", *CLASSES, "tensors", "stored_tensors", "duplicates")


def _weights_archive(tmp_path, name: str, tensors: dict[str, tuple[str, bytes, list[int]]]):
    weights = {fqn: entry(path_name=member, tensor_meta=tensor_meta(7, shape))
               for fqn, (member, _, shape) in tensors.items()}
    files = {f"data/weights/{member}": data for member, data, _ in tensors.values()}
    return pt2_file(tmp_path, pt2_members(weights=weights, files=files), name=name)


LONG = "encoder.layers.0.self_attention.query_projection.weight"  # 55 characters
WA = np.arange(6, dtype=np.float32).tobytes()
WL = np.arange(4, dtype=np.float32).tobytes()


@pytest.fixture
def pair(tmp_path):
    """a: w, LONG; b: w (same bytes), LONG (other bytes), v (a copy of w's bytes)."""
    a = _weights_archive(tmp_path, "a&1.pt2", {"w": ("weight_0", WA, [2, 3]),
                                               LONG: ("weight_1", WL, [4])})
    b = _weights_archive(tmp_path, "b.pt2", {"w": ("weight_0", WA, [2, 3]),
                                             LONG: ("weight_1", WL[::-1], [4]),
                                             "v": ("weight_2", WA, [2, 3])})
    return a, b


def _side_bytes(path, dup_wasted: int) -> dict[str, int]:
    """Whole-side bytes per metric, from the segments and tensors frames."""
    with wb.open(path) as art:
        seg = art.segments
        out = dict.fromkeys(METRICS, 0)
        out["size"] = os.path.getsize(path)
        assert int(seg["size"].sum()) == out["size"]
        for k, n, s in zip(seg["kind"], seg["name"], seg["size"]):
            out[byte_class(str(k), str(n))] += int(s)
        t = art.tensors
        out["tensors"] = int(t["nbytes"].sum())
        out["stored_tensors"] = int(t.loc[t["offset"].notna(), "nbytes"].sum())
        out["duplicates"] = dup_wasted
    return out


def test_delta(pair):
    import pandas as pd

    a, b = pair
    with wb.compare(a, b) as cmp:
        d = cmp.delta()
        ea, eb = _side_bytes(a, 0), _side_bytes(b, 24)
        want = pd.DataFrame({"a": [ea[m] for m in METRICS], "b": [eb[m] for m in METRICS]},
                            index=pd.Index(METRICS, name="metric").astype(str), dtype="Int64")
        want["change"] = want["b"] - want["a"]
        pd.testing.assert_frame_equal(d, want)
        assert list(d.columns) == ["a", "b", "change"]
        assert d.loc["weights"].tolist() == [40, 64, 24]
        assert d.loc["stored_tensors"].tolist() == [40, 64, 24]
        assert d.loc["duplicates"].tolist() == [0, 24, 24]


def _table_html(rows: list[tuple]) -> str:
    import pandas as pd

    df = pd.DataFrame(rows, columns=["side", "match", "name_a", "name_b", "dtype", "shape",
                                     "nbytes", "moved", "same_bytes"])
    df["same_bytes"] = df["same_bytes"].astype("boolean")
    return df.to_html(index=False, escape=True)


def test_repr_html_exact(pair):
    a, b = pair
    short = LONG[:39] + "\u2026"
    ea, eb = _side_bytes(a, 0), _side_bytes(b, 24)

    def rows_html(x: dict, y: dict) -> str:
        out = ""
        for m in METRICS:
            if x[m] == 0 and y[m] == 0:
                continue
            ch = y[m] - x[m]
            out += (f"<tr><td>{m}</td><td>{human_bytes(x[m])}</td><td>{human_bytes(y[m])}</td>"
                    f"<td>{'+' if ch > 0 else ''}{human_bytes(ch)}</td></tr>")
        return out

    head = ("<div><b>workbench.Comparison</b><ul><li><b>a</b> [pt2] <code>a&amp;1.pt2</code></li>"
            "<li><b>b</b> [pt2] <code>b.pt2</code></li></ul>"
            "<table><tr><th>bytes</th><th>a</th><th>b</th><th>change</th></tr>")
    with wb.compare(a, b) as cmp:
        got = cmp._repr_html_()
        body = rows_html(ea, eb)
        assert "<tr><td>weights</td><td>40 B</td><td>64 B</td><td>+24 B</td></tr>" in body
        assert "<tr><td>duplicates</td><td>0 B</td><td>24 B</td><td>+24 B</td></tr>" in body
        assert "<td>delegate</td>" not in body and "<td>other</td>" not in body
        dup = "b: 24 B \u00d7 2 (w; v)"
        assert got == (
            head + body + "</table>"
            "<p>tensors: 2 matched (name 2), 0 only in a, 1 only in b; 0 moved; bytes not "
            "hashed yet: <code>cmp.hash()</code></p>"
            f"<p>duplicates: {dup}</p>"
            + _table_html([("both", "name", "w", "w", "float32", (2, 3), 24, "", None),
                           ("both", "name", short, short, "float32", (4,), 16, "", None),
                           ("b_only", None, None, "v", "float32", (2, 3), 24, "", None)])
            + "</div>")
        got = cmp.hash()._repr_html_()
        assert got == (
            head + body + "</table>"
            "<p>tensors: 3 matched (name 2, content_copy 1), 0 only in a, 0 only in b; 0 moved; "
            "same bytes: 2 of 3 matched</p>"
            f"<p>duplicates: {dup}</p>"
            + _table_html([("both", "name", "w", "w", "float32", (2, 3), 24, "", True),
                           ("both", "content_copy", "w", "v", "float32", (2, 3), 24, "", True),
                           ("both", "name", short, short, "float32", (4,), 16, "", False)])
            + "</div>")
    # the other way round: changes are negative, without a sign
    with wb.compare(b, a) as cmp:
        got = cmp._repr_html_()
        assert rows_html(eb, ea) in got
        assert "<tr><td>weights</td><td>64 B</td><td>40 B</td><td>-24 B</td></tr>" in got
        assert "+" not in rows_html(eb, ea)
        assert "<p>tensors: 2 matched (name 2), 1 only in a, 0 only in b; 0 moved;" in got


def test_repr_html_shows_a_metric_that_is_zero_on_one_side(tmp_path):
    """A row is left out only when both sides have 0 bytes of it."""
    a = _weights_archive(tmp_path, "a.pt2", {"w": ("weight_0", WA, [2, 3])})
    ms = pt2_members()
    b = pt2_file(tmp_path, ms, name="b.pt2")
    with wb.compare(a, b) as cmp:
        got = cmp._repr_html_()
        assert "<tr><td>weights</td><td>24 B</td><td>0 B</td><td>-24 B</td></tr>" in got
        assert "<tr><td>tensors</td><td>24 B</td><td>0 B</td><td>-24 B</td></tr>" in got
        assert "<td>duplicates</td>" not in got and "<td>delegate</td>" not in got
        assert "<p>tensors: 0 matched (), 1 only in a, 0 only in b; 0 moved;" in got
    with wb.compare(b, a) as cmp:
        got = cmp._repr_html_()
        assert "<tr><td>weights</td><td>0 B</td><td>24 B</td><td>+24 B</td></tr>" in got


def test_repr_html_escapes_and_shortens(tmp_path):
    name = "<b>&" + "x" * 70
    a = _weights_archive(tmp_path, "a.pt2", {name: ("weight_0", WA, [2, 3]),
                                             "t2": ("weight_1", WA, [2, 3])})
    with wb.compare(a, a) as cmp:
        got = cmp.hash()._repr_html_()
        assert _html.escape(name) not in got
        assert "&lt;b&gt;&amp;" + "x" * 35 + "\u2026" in got  # table: 40 characters
        # duplicates: up to 60 characters of the names
        names = f"{name}; t2"
        assert "(" + _html.escape(names[:59] + "\u2026") + ")" in got
        assert got.count("24 B \u00d7 2") == 2  # one line per side


class _FakeArt:
    """What :func:`_dequantized_close` reads of an artifact: ``tensor(key, ...)``."""

    def __init__(self, tensors: dict) -> None:
        self.tensors = tensors
        self.calls: list[tuple] = []

    def tensor(self, key, copy: bool = False, dequantize: bool = False):
        self.calls.append((key, copy, dequantize))
        v = self.tensors[key]
        if isinstance(v, Exception):
            raise v
        return v


def _st(name: str, dtype: str, shape: tuple, *, mv=None, quant=None) -> StoredTensor:
    return StoredTensor(0, {"name": name, "fqn": None, "method": mv[0] if mv else None,
                            "value": mv[1] if mv else None, "dtype": dtype, "shape": shape,
                            "nbytes": 0, "storage": "x", "file": None, "offset": None,
                            "quant_row": quant})


def _close(ref, got, quant=None, qdtype="int8", mv=None):
    f = _st("f", "float32", tuple(np.shape(ref)), mv=mv)
    q = _st("q", qdtype, tuple(np.shape(got)), quant=quant or {"quant": "per_channel",
                                                               "channel_dim": 0})
    key = mv if mv is not None else "f"
    af, aq = _FakeArt({key: ref}), _FakeArt({"q": got})
    out = cmpmod._dequantized_close(af, f, aq, q)
    assert af.calls == [(key, True, True)] and aq.calls == [("q", False, True)]
    return out


def _reference_close(ref, got, quant: dict, qmax: int) -> bool:
    ref = np.asarray(ref, np.float64)
    got = np.asarray(got, np.float64)
    if ref.shape != got.shape or not ref.size:
        return False
    cd = quant.get("channel_dim")
    cd = int(cd) if cd is not None and 0 <= int(cd) < ref.ndim else 0
    if quant.get("quant") == "per_tensor":
        step = np.abs(ref).max() / qmax
    else:
        axes = tuple(k for k in range(ref.ndim) if k != cd)
        step = np.abs(ref).max(axis=axes, keepdims=True) / qmax
    return bool(np.all(np.abs(ref - got) <= 0.5 * step * 1.05 + 1e-12) and np.any(ref))


def test_dequantized_close_per_channel_and_per_tensor():
    ref = np.array([[100.0, 50.0], [0.01, 0.02]], np.float32)
    off = ref + np.array([[0.3, 0.0], [0.1, 0.0]], np.float32)  # fine per tensor only
    per_channel = {"quant": "per_channel", "channel_dim": 0}
    per_tensor = {"quant": "per_tensor", "channel_dim": 0}
    assert _close(ref, ref) is True
    assert _close(ref, off, per_channel) is False
    assert _close(ref, off, per_tensor) is True
    assert _close(ref, off, {"quant": "per_channel_group", "channel_dim": 0}) is False
    # channels along dimension 1
    ref2 = np.array([[100.0, 0.01], [50.0, 0.02]], np.float32)
    off2 = ref2 + np.array([[0.3, 0.1], [0.0, 0.0]], np.float32)
    assert _close(ref2, off2, {"quant": "per_channel", "channel_dim": 1}) is False
    assert _close(ref2, off2, {"quant": "per_channel", "channel_dim": 0}) is True
    # a channel_dim out of range or missing is 0
    for cd in (None, 2, -1):
        assert _close(ref, off, {"quant": "per_channel", "channel_dim": cd}) is False
        assert _close(ref2, off2, {"quant": "per_channel", "channel_dim": cd}) is True


def test_dequantized_close_edges():
    ref = np.array([1.0, -2.0, 0.5], np.float32)
    assert _close(ref, ref[:2]) is False  # shapes differ
    assert _close(np.zeros((0, 3), np.float32), np.zeros((0, 3))) is False  # empty
    assert _close(np.zeros(3, np.float32), np.zeros(3)) is False  # all zero weights
    pt = {"quant": "per_tensor"}
    r64 = ref.astype(np.float64)
    step = 2.0 / 127
    assert _close(ref, r64 + 0.5 * step * 1.04, pt) is True
    assert _close(ref, r64 + 0.5 * step * 1.06, pt) is False
    # per channel along the only dimension: each element its own step
    assert _close(ref, r64 + 0.5 * (0.5 / 127) * 1.04) is True
    assert _close(ref, r64 + 0.5 * (0.5 / 127) * 1.06) is False
    # the largest value per element type
    for qdtype, qmax in (("int8", 127), ("int4", 7), ("uint8", 255), ("int32", 2**31 - 1),
                         ("int16", 127)):
        s = 2.0 / qmax
        assert _close(ref, r64 + 0.5 * s * 1.04, pt, qdtype=qdtype) is True, qdtype
        assert _close(ref, r64 + 0.5 * s * 1.06, pt, qdtype=qdtype) is False, qdtype
    # a tensor that cannot be read does not match
    f, q = _st("f", "float32", (3,)), _st("q", "int8", (3,), quant={"quant": "per_tensor"})
    for bad_f, bad_q in ((wb.ArtifactError("x"), ref), (ref, wb.ArtifactError("x")),
                         (KeyError("x"), ref)):
        assert cmpmod._dequantized_close(_FakeArt({"f": bad_f}), f, _FakeArt({"q": bad_q}),
                                         q) is False
    assert cmpmod._dequantized_close(_FakeArt({}), f, _FakeArt({"q": ref}), q) is False
    with pytest.raises(ValueError):
        cmpmod._dequantized_close(_FakeArt({"f": ValueError("x")}), f, _FakeArt({"q": ref}), q)


def test_dequantized_close_reads_the_float_tensor_by_method_and_value():
    ref = np.array([1.0, 2.0], np.float32)
    assert _close(ref, ref, mv=("forward", 3)) is True
    f = _st("f", "float32", (2,), mv=("forward", 3))
    q = _st("q", "int8", (2,), quant={"quant": "per_tensor"})
    af = _FakeArt({"f": ref, ("forward", 3): ref * 10})
    assert cmpmod._dequantized_close(af, f, _FakeArt({"q": ref}), q) is False
    assert af.calls == [(("forward", 3), True, True)]


def test_dequantized_close_computes_in_float64():
    """Half-precision weights: the bound is computed in float64, not in float16 (whose
    rounding moves it); the result equals a float64 reference everywhere near the bound."""
    rng_ = np.random.default_rng(0)
    differs = 0
    for _ in range(300):
        ref = rng_.normal(size=(3, 4)).astype(np.float16)
        quant = {"quant": ["per_channel", "per_tensor"][_ % 2], "channel_dim": _ % 3 - 1}
        scale = np.abs(ref.astype(np.float64)).max() / 127
        got = ref.astype(np.float64) + rng_.choice([-1, 1], ref.shape) * scale * \
            rng_.uniform(0.5249, 0.5251)
        want = _reference_close(ref, got, quant, 127)
        assert _close(ref, got, quant) is want
        half = np.abs(ref).max(axis=None) / np.float16(127)
        differs += bool(np.all(np.abs(ref - got) <= 0.5 * half * 1.05 + 1e-12)) != want
    assert differs  # (float16 arithmetic would have answered otherwise somewhere)


def test_fingerprint(tmp_path):
    data = bytes(range(256)) * 1024 + b"\x07" * 300  # 262,444 bytes
    p = tmp_path / "blob.bin"
    p.write_bytes(data)
    with Source(p) as src:
        art = types.SimpleNamespace(sources={"f": src})
        for off, n in ((0, 10), (5, 0), (3, 65536), (0, 65537), (100, 200_000), (0, len(data))):
            if n <= 4096 * 16:
                want = hashlib.sha256(data[off:off + n]).digest()
            else:
                h = hashlib.sha256(n.to_bytes(8, "little"))
                step = (n - 4096) / 15
                for k in range(16):
                    s = off + int(k * step)
                    h.update(data[s:s + 4096])
                want = h.digest()
            assert cmpmod._fingerprint(art, "f", off, n) == want, (off, n)
        # equal samples, different sizes: different fingerprints
        zeros = tmp_path / "zeros.bin"
        zeros.write_bytes(bytes(300_000))
        with Source(zeros) as z:
            za = types.SimpleNamespace(sources={"f": z})
            assert cmpmod._fingerprint(za, "f", 0, 200_000) != cmpmod._fingerprint(za, "f", 0, 200_001)
        with pytest.raises(wb.ArtifactError) as ei:
            cmpmod._fingerprint(art, "f", len(data) - 100, 100_000)
        assert ei.value.structure == "stored bytes"
        with pytest.raises(wb.ArtifactError):
            cmpmod._fingerprint(art, "f", len(data) - 5, 10)


def _plain(r: StoredTensor) -> dict:
    return {k: getattr(r, k) for k in StoredTensor.__slots__}


def _na_dict(row) -> dict:
    import pandas as pd

    out = {}
    for k, v in row.items():
        if isinstance(v, (tuple, list, str)) or v is None:
            out[k] = v
        elif pd.isna(v):
            out[k] = None
        else:
            out[k] = v.item() if hasattr(v, "item") else v
    return out


def test_delegate_constants_inside_the_blob_are_rows_of_their_own(sample):
    with wb.open(sample("mlp_xnnpack_inline.pte")) as art:
        rows = stored_tensors(art)
        t = art.tensors
        dt = art.frames["delegate_tensors"]
        dt = dt[dt["offset"].notna()].reset_index(drop=True)
        plain = t[t["offset"].notna()]
        assert len(plain) == 0 and len(dt) == 4
        assert [_plain(r) for r in rows] == [
            {"i": len(t) + j, "name": d["name"], "qual": d["name"], "mv": None,
             "dtype": d["dtype"], "shape": tuple(d["shape"]), "nbytes": int(d["nbytes"]),
             "storage": d["storage"], "file": d["file"], "offset": int(d["offset"]),
             "align": int(d["offset"]) & -int(d["offset"]),
             "key": (d["file"], int(d["offset"]), int(d["nbytes"])), "quant": None}
            for j, d in dt.iterrows()]
        assert [r.storage for r in rows] == ["blob"] * 4


def test_delegate_constants_take_over_their_named_data_rows(sample):
    with wb.open(sample("mlp_xnnpack_qc8.pte")) as art:
        rows = stored_tensors(art)
        t = art.tensors
        dt = art.frames["delegate_tensors"]
        dt = dt[dt["offset"].notna()]
        by_key = {(d["file"], int(d["offset"]), int(d["nbytes"])): d for _, d in dt.iterrows()}
        want = []
        for i, r in t.iterrows():
            if pd_na(r["offset"]) and r["storage"] in cmpmod.NO_BYTES:
                continue
            key = (r["file"], int(r["offset"]), int(r["nbytes"]))
            d = by_key.get(key) if r["storage"] == "named_data" else None
            src = d if d is not None else r
            q = d is not None and d["quant"] in ("per_tensor", "per_channel", "per_channel_group")
            want.append({"i": i, "name": src["name"],
                         "qual": src["name"] if d is not None else
                         r["fqn"] if "fqn" in r and not pd_na(r["fqn"]) else
                         None if not pd_na(r["method"]) else r["name"],
                         "mv": None if d is not None or pd_na(r["value"]) else
                         (r["method"], int(r["value"])),
                         "dtype": src["dtype"], "shape": tuple(src["shape"]),
                         "nbytes": int(src["nbytes"]), "storage": r["storage"],
                         "file": r["file"], "offset": int(r["offset"]),
                         "align": int(r["offset"]) & -int(r["offset"]), "key": key,
                         "quant": _na_dict(d) if q else None})
        got = [_plain(r) for r in rows]
        assert len(got) == len(want) == 6
        for g, w in zip(got, want):
            assert g == w
        assert sum(r.quant is not None for r in rows) == 2


def pd_na(x) -> bool:
    import pandas as pd

    return x is None or bool(pd.isna(x))


# --------------------------------------------------------------------------------------------
# the zip directory: local headers of an empty archive, tolerant reads, member contents
# --------------------------------------------------------------------------------------------

def test_empty_archive_arrays(tmp_path, monkeypatch):
    for scalar in (False, True):
        zd, _ = directory(tmp_path, zip_bytes([]), scalar, monkeypatch)
        assert zd.names == [] and len(zd) == 0 and zd.entries == []
        assert list(zd.arrays) == list(ZipEntry._fields[2:])
        for k, v in zd.arrays.items():
            assert v.shape == (0,), k
            assert v.dtype == (np.bool_ if k in ("compressed", "zip64") else np.int64), k
        assert zd.damaged.shape == (0,) and zd.damaged.dtype == np.bool_


def _cd_only(prefix: bytes, lho: int = 0, name: bytes = b"a.txt") -> bytes:
    """A central directory (one record, whose local header cannot be before it) right after
    ``prefix``."""
    rec = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, 0, 3, 3, len(name),
                      0, 0, 0, 0, 0, lho) + name
    return prefix + rec + struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(rec),
                                      len(prefix), 0)


@pytest.mark.parametrize("prefix", [b"", b"ab", b"abcd", b"abcde", b"abcdefgh"],
                         ids=lambda b: f"before{len(b)}")
def test_tolerant_directory_right_at_the_start(tmp_path, prefix):
    """Tolerant: a member whose local header cannot lie before the directory is damaged,
    however few bytes precede the directory (none at all included)."""
    p = tmp_path / "cd.zip"
    p.write_bytes(_cd_only(prefix))
    zd = ZipDirectory(Source(p), tolerant=True)
    assert zd.damaged.tolist() == [True]
    assert zd.arrays["data_offset"].tolist() == [-1]
    assert zd.arrays["descriptor_size"].tolist() == [0]
    assert zd.arrays["local_extra"].tolist() == [0]
    [(k, err)] = zd.problems
    assert k == 0 and type(err) is OutOfBoundsError
    assert err.detail == (f"local header offset 0x0 (+30) is not before the central directory "
                          f"at 0x{len(prefix):x}")
    assert (err.structure, err.offset) == ("zip local header of 'a.txt'", len(prefix) + 42)
    with pytest.raises(OutOfBoundsError) as ei:
        zd.view(zd.entry(0))
    assert ei.value is err
    with pytest.raises(OutOfBoundsError) as ei:
        ZipDirectory(Source(p))
    assert ei.value.detail == err.detail


def test_tolerant_view_raises_each_members_own_error(tmp_path):
    data = zip_bytes([("a", b"A" * 10), ("b", b"B" * 10), ("c", b"C" * 10)])
    d = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        lho_b = z.getinfo("b").header_offset
        lho_c = z.getinfo("c").header_offset
    d[lho_b] ^= 0xFF  # bad signature
    d[lho_c + 8] = 8  # local method differs
    p = tmp_path / "t.zip"
    p.write_bytes(bytes(d))
    zd = ZipDirectory(Source(p), tolerant=True)
    assert zd.damaged.tolist() == [False, True, True]
    assert [k for k, _ in zd.problems] == [1, 2]
    errs = dict(zd.problems)
    assert errs[1].detail.startswith("bad signature 0x04034baf") and errs[1].offset == lho_b
    assert errs[2].detail == "compression method 8 differs from the central directory's 0"
    assert errs[2].offset == lho_c + 8
    for k in (1, 2):
        with pytest.raises(wb.ArtifactError) as ei:
            zd.view(zd.entry(k))
        assert ei.value is errs[k]
    assert bytes(zd.view(zd.entry(0))) == b"A" * 10
    # a damaged member without a recorded problem: the generic error
    e = zd.entry(1)
    zd.problems = []
    with pytest.raises(CorruptError) as ei:
        zd.view(e)
    assert (ei.value.detail, ei.value.structure, ei.value.offset) == (
        "the member's bytes could not be located", "zip member 'b'", lho_b)


def test_member_content(tmp_path):
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    text = b"metadata " * 50
    deflated = comp.compress(text) + comp.flush()
    ms = [{"name": "stored", "data": b"plain"},
          {"name": "deflated", "data": deflated, "method": 8, "file_size": len(text)},
          {"name": "encrypted", "data": b"xx", "flags": 0x0801},
          {"name": "bzip2", "data": b"BZh", "method": 12, "file_size": 3},
          {"name": "method77", "data": b"??", "method": 77, "file_size": 2},
          {"name": "corrupt", "data": b"\xff\xff\xff", "method": 8, "file_size": 3},
          {"name": "longer", "data": deflated, "method": 8, "file_size": len(text) - 1},
          {"name": "shorter", "data": deflated, "method": 8, "file_size": len(text) + 1},
          {"name": "sizes", "data": b"abc", "file_size": 4}]
    p = pt2_file(tmp_path, ms, name="m.zip")
    zd = ZipDirectory(Source(p))

    def err(name: str, limit: int = 1 << 20):
        e = zd.get(name)
        with pytest.raises(wb.ArtifactError) as ei:
            zd.content(e, limit)
        x = ei.value
        assert (x.file, x.structure, x.offset) == ("m.zip", f"zip member {name!r}", e.data_offset)
        with pytest.raises(type(x)):
            zd.read(e, limit)
        return type(x), x.detail

    out = zd.content(zd.get("stored"), 5)
    assert isinstance(out, memoryview) and bytes(out) == b"plain"
    assert zd.read(zd.get("stored"), 5) == b"plain" and type(zd.read(zd.get("stored"), 5)) is bytes
    assert zd.content(zd.get("deflated"), len(text)) == text
    assert zd.read(zd.get("deflated"), len(text)) == text
    assert err("stored", 4) == (CorruptError, "declared size 5 exceeds the 4-byte limit for metadata")
    assert err("deflated", len(text) - 1) == (
        CorruptError, f"declared size {len(text)} exceeds the {len(text) - 1}-byte limit for metadata")
    assert err("encrypted") == (wb.UnsupportedVersionError, "the member is encrypted")
    assert err("bzip2") == (wb.UnsupportedVersionError,
                            "compression method 12 (bzip2) is not supported for metadata")
    assert err("method77") == (wb.UnsupportedVersionError,
                               "compression method 77 (unknown) is not supported for metadata")
    cls, detail = err("corrupt")
    assert cls is CorruptError and detail.startswith("deflate stream is corrupt (Error -3 ")
    assert err("longer") == (CorruptError, f"inflates to more than {len(text)} bytes, "
                                           f"{len(text) - 1} declared")
    assert err("shorter") == (CorruptError, f"inflates to {len(text)} bytes, {len(text) + 1} declared")
    assert err("sizes") == (CorruptError, "stored member sizes differ (3 stored, 4 declared)")


# --------------------------------------------------------------------------------------------
# the zip end records
# --------------------------------------------------------------------------------------------

def _zd(tmp_path, data: bytes, name: str = "e.zip") -> ZipDirectory:
    p = tmp_path / name
    p.write_bytes(data)
    return ZipDirectory(Source(p))


def _zd_fails(tmp_path, data: bytes, cls) -> wb.ArtifactError:
    with pytest.raises(cls) as ei:
        _zd(tmp_path, data)
    assert type(ei.value) is cls and ei.value.file == "e.zip"
    return ei.value


def test_end_record_facts(tmp_path):
    data = zip_bytes([("a", b"1"), ("bb", b"22")])
    zd = _zd(tmp_path, data)
    eocd = len(data) - 22
    cd = struct.unpack_from("<I", data, eocd + 16)[0]
    assert (zd.count, zd.cd_offset, zd.cd_size, zd.eocd_offset, zd.eocd_size) == \
        (2, cd, eocd - cd, eocd, 22)
    assert (zd.zip64, zd.zip64_offset, zd.zip64_size, zd.locator_offset, zd.prepended) == \
        (False, None, 0, None, 0)
    # the smallest archive: the end record alone, at offset 0
    zd = _zd(tmp_path, zip_bytes([]))
    assert (zd.count, zd.cd_offset, zd.cd_size, zd.eocd_offset, zd.eocd_size) == (0, 0, 0, 0, 22)


@pytest.mark.parametrize("comment", [0, 1, 1000, 65535])
def test_end_record_with_a_comment(tmp_path, comment):
    text = b"c" * comment
    data = zip_bytes([("a", b"1")], comment=text)
    zd = _zd(tmp_path, data)
    assert zd.names == ["a"] and zd.eocd_size == 22 + comment
    assert zd.eocd_offset == len(data) - 22 - comment
    with zipfile.ZipFile(tmp_path / "e.zip") as z:
        assert z.comment == text


def test_end_record_followed_by_other_bytes(tmp_path):
    """Bytes after the end record (its comment length does not reach the end): the last
    record that fits is used, as zipfile does."""
    data = zip_bytes([("a", b"1")]) + b"trailing junk"
    zd = _zd(tmp_path, data)
    assert zd.names == ["a"] and zd.eocd_offset == len(data) - 13 - 22 and zd.eocd_size == 22
    # a signature in the last 21 bytes cannot start a record: skipped
    data = zip_bytes([("a", b"1")]) + b"PK\x05\x06" + bytes(10)
    assert _zd(tmp_path, data).eocd_offset == len(data) - 14 - 22


def test_end_record_missing(tmp_path):
    e = _zd_fails(tmp_path, bytes(21), TruncatedError)
    assert (e.detail, e.structure, e.offset) == (
        "21 bytes is too short for a zip archive (needs 22)", "zip end of central directory", 0)
    e = _zd_fails(tmp_path, bytes(100), CorruptError)
    assert (e.detail, e.structure, e.offset) == (
        "no end of central directory record (PK\\x05\\x06) in the last 100 bytes",
        "zip end of central directory", 0)
    # the record lies before the 64 KiB + 22 bytes searched
    data = zip_bytes([("a", b"1")]) + bytes(65536)
    e = _zd_fails(tmp_path, data, CorruptError)
    assert (e.detail, e.offset) == (
        "no end of central directory record (PK\\x05\\x06) in the last 65557 bytes",
        len(data) - 65557)
    data = zip_bytes([("a", b"1")]) + bytes(65535 - 22)  # (just inside: found)
    assert _zd(tmp_path, data).names == ["a"]


def test_end_record_checks(tmp_path):
    data = zip_bytes([("a", b"1"), ("bb", b"22")])
    eocd = len(data) - 22
    cd = struct.unpack_from("<I", data, eocd + 16)[0]
    what = "zip end of central directory"
    for at, fmt, value in ((8, "<H", 0xFFFF), (10, "<H", 0xFFFF), (12, "<I", 0xFFFFFFFF),
                           (16, "<I", 0xFFFFFFFF)):
        e = _zd_fails(tmp_path, _edit(data, eocd + at, fmt, value), CorruptError)
        assert (e.detail, e.structure, e.offset) == (
            "fields hold ZIP64 markers but there is no ZIP64 locator", what, eocd)
    for at, value in ((4, 1), (6, 1), (8, 1)):
        e = _zd_fails(tmp_path, _edit(data, eocd + at, "<H", value), wb.UnsupportedVersionError)
        assert (e.detail, e.structure, e.offset) == (
            "multi-disk zip archives are not supported", what, eocd)
    e = _zd_fails(tmp_path, _edit(data, eocd + 16, "<I", eocd + 1), OutOfBoundsError)
    assert (e.detail, e.structure, e.offset) == (
        f"central directory [0x{eocd + 1:x}, +0x{eocd - cd:x}) runs past the end records at "
        f"0x{eocd:x}", what, eocd)
    e = _zd_fails(tmp_path, _edit(data, eocd + 12, "<I", eocd - cd + 1), OutOfBoundsError)
    assert e.detail == (f"central directory [0x{cd:x}, +0x{eocd - cd + 1:x}) runs past the end "
                        f"records at 0x{eocd:x}")
    # the directory starts exactly at the end record: empty, fine
    zd = _zd(tmp_path, _edit(_edit(_edit(_edit(data, eocd + 16, "<I", eocd), eocd + 12, "<I", 0),
                                   eocd + 8, "<H", 0), eocd + 10, "<H", 0))
    assert zd.names == [] and zd.cd_offset == eocd
    d = _edit(_edit(data, eocd + 8, "<H", 3), eocd + 10, "<H", 3)
    zd_size = eocd - cd
    assert 3 * 46 > zd_size
    e = _zd_fails(tmp_path, d, CorruptError)
    assert (e.detail, e.structure, e.offset) == (
        f"3 entries cannot fit a {zd_size}-byte central directory (46 bytes each at least)",
        what, eocd)


def test_prepended_bytes_shift_every_offset_as_zipfile_does(tmp_path):
    stub = b"#!/bin/sh\nexit 0\n" + bytes(100)
    data = stub + zip_bytes([("a", b"alpha"), ("b", b"beta")])
    zd = _zd(tmp_path, data)
    assert zd.prepended == len(stub)
    with zipfile.ZipFile(tmp_path / "e.zip") as z:
        infos = z.infolist()
        assert zd.arrays["header_offset"].tolist() == [i.header_offset for i in infos]
        assert [bytes(zd.view(zd.entry(k))) for k in range(2)] == [z.read(i) for i in infos]


def _z64(members=None):
    data, where = build_zip(members or [{"name": "a", "data": b"abc"}], zip64=True)
    eocd = where["eocd"]
    loc = eocd - 20
    z64 = struct.unpack_from("<Q", data, loc + 8)[0]
    return data, z64, loc, eocd, where["cd_offset"]


def test_zip64_end_records(tmp_path):
    data, z64, loc, eocd, cd = _z64()
    zd = _zd(tmp_path, data)
    assert (zd.zip64, zd.zip64_offset, zd.zip64_size, zd.locator_offset) == (True, z64, 56, loc)
    assert (zd.count, zd.cd_offset, zd.cd_size, zd.eocd_offset) == (1, cd, z64 - cd, eocd)
    assert zd.names == ["a"]
    loc_what, what = "zip64 end of central directory locator", "zip64 end of central directory"
    for at, value, n in ((4, 1, 1), (16, 2, 2)):
        e = _zd_fails(tmp_path, _edit(data, loc + at, "<I", value), wb.UnsupportedVersionError)
        assert (e.detail, e.structure, e.offset) == (
            f"multi-disk zip archives are not supported ({n} disks)", loc_what, loc)
    assert _zd(tmp_path, _edit(data, loc + 16, "<I", 0)).names == ["a"]  # 0 disks: as 1
    e = _zd_fails(tmp_path, _edit(data, loc + 8, "<Q", loc - 55), OutOfBoundsError)
    assert (e.detail, e.structure, e.offset) == (
        f"zip64 end of central directory offset 0x{loc - 55:x} is not before its locator at "
        f"0x{loc:x}", loc_what, loc + 8)
    e = _zd_fails(tmp_path, _edit(data, z64, "<I", 0x06064B51), CorruptError)
    assert (e.detail, e.structure, e.offset) == (
        "bad signature 0x06064b51 (expected 0x06064b50)", what, z64)
    for size in (43, 45):
        e = _zd_fails(tmp_path, _edit(data, z64 + 4, "<Q", size), CorruptError)
        assert (e.detail, e.structure, e.offset) == (
            f"record size {size} does not fit before the locator at 0x{loc:x}", what, z64 + 4)
    for at, value in ((16, 1), (20, 1)):
        e = _zd_fails(tmp_path, _edit(data, z64 + at, "<I", value), wb.UnsupportedVersionError)
        assert (e.detail, e.structure, e.offset) == (
            "multi-disk zip archives are not supported", what, eocd)
    e = _zd_fails(tmp_path, _edit(data, z64 + 24, "<Q", 2), wb.UnsupportedVersionError)
    e = _zd_fails(tmp_path, _edit(data, z64 + 48, "<Q", z64 + 1), OutOfBoundsError)
    assert (e.detail, e.structure, e.offset) == (
        f"central directory [0x{z64 + 1:x}, +0x{z64 - cd:x}) runs past the end records at "
        f"0x{z64:x}", what, eocd)
    d = _edit(_edit(data, z64 + 24, "<Q", 5), z64 + 32, "<Q", 5)
    e = _zd_fails(tmp_path, d, CorruptError)
    assert (e.detail, e.structure, e.offset) == (
        f"5 entries cannot fit a {z64 - cd}-byte central directory (46 bytes each at least)",
        what, eocd)


# --------------------------------------------------------------------------------------------
# local extra fields and data descriptors, the legacy flat layout, the graph JSON scanner,
# configs read on the JSON path
# --------------------------------------------------------------------------------------------

def _descriptor_zip(local_extra: bytes, data: bytes, descriptor: bytes) -> bytes:
    """One stored member ``a`` with flag bit 3 (sizes in a data descriptor): its local header
    (zero CRC and sizes, the given extra field), the data, ``descriptor``, then a central
    directory whose record has no extra field, and the end record."""
    crc = zlib.crc32(data)
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0x0808, 0, 0, 0, 0, 0, 0, 1,
                        len(local_extra)) + b"a" + local_extra
    body = local + data + descriptor
    rec = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0x0808, 0, 0, 0, crc, len(data),
                      len(data), 1, 0, 0, 0, 0, 0, 0) + b"a"
    return body + rec + struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(rec), len(body), 0)


@pytest.mark.parametrize("zip64", [False, True], ids=["trailing-bytes", "second-field"])
def test_local_zip64_field_after_another_extra_field(tmp_path, zip64):
    """The local extra field is walked field by field up to its end: a ZIP64 field in second
    place makes the descriptor's sizes 8 bytes (24 with the signature), while 2 trailing bytes
    after the last whole field (here 01 00, the ZIP64 id) are not a field (descriptor 16)."""
    data = b"hello"
    crc = zlib.crc32(data)
    first = struct.pack("<HH", 0xCAFE, 0)
    if zip64:
        extra = first + struct.pack("<HHQQ", 1, 16, len(data), len(data))
        descriptor = b"PK\x07\x08" + struct.pack("<IQQ", crc, len(data), len(data))
    else:
        extra = first + b"\x01\x00"
        descriptor = b"PK\x07\x08" + struct.pack("<III", crc, len(data), len(data))
    raw = _descriptor_zip(extra, data, descriptor)
    p = tmp_path / "d.zip"
    p.write_bytes(raw)
    with zipfile.ZipFile(p) as z:  # the oracle reads the member
        assert z.read("a") == data and z.getinfo("a").flag_bits == 0x0808
    zd = ZipDirectory(Source(p))
    a = zd.arrays
    assert a["local_extra"].tolist() == [len(extra)]
    assert a["data_offset"].tolist() == [30 + 1 + len(extra)]
    assert a["zip64"].tolist() == [False]  # (the central record has no ZIP64 field)
    assert a["descriptor_size"].tolist() == [len(descriptor)] == [24 if zip64 else 16]
    assert zd.entry(0).data_end + len(descriptor) == zd.cd_offset


def test_legacy_flat_layout_finding(tmp_path):
    """torch.export's flat zip (no archive_format, a serialized_exported_program.json) is named
    by an info finding at that member's local header; no tensor is listed."""
    data = zip_bytes([("version", b"1"), ("serialized_exported_program.json", b"{}"),
                      ("serialized_state_dict.pt", b"\x80\x04}q\x00."),
                      ("serialized_constants.pt", b"\x80\x04}q\x00.")])
    p = tmp_path / "legacy.pt2"
    p.write_bytes(data)
    with zipfile.ZipFile(p) as z:
        at = z.getinfo("serialized_exported_program.json").header_offset
    assert at > 0
    with wb.open(p) as art:
        assert art.info["layout"] == "torch.export legacy flat layout (torch <= 2.7)"
        assert finds(art)[0] == (
            "info", "archive layout", at,
            "torch.export legacy flat layout (torch <= 2.7): the graph is "
            "serialized_exported_program.json and the weights are pickled in "
            "serialized_state_dict.pt (listed, never unpickled), so no tensor is listed")
        assert len(art.tensors) == 0


def _escaped_graph(indent: int | None) -> bytes:
    """A graph whose node targets need JSON escapes (written by ``json.dumps``: ``\\"``,
    ``\\\\`` and ``\\u00e9``)."""
    doc = json.loads(json.dumps(MIN_GRAPH))
    nodes = doc["graph_module"]["graph"]["nodes"]
    for t in ('my.op"quoted"', "back\\slash", "caf\u00e9", "caf\u00e9", "plain"):
        nodes.append({"target": t, "inputs": [], "outputs": [], "metadata": {}})
    return json.dumps(doc, indent=indent).encode()


@pytest.mark.parametrize("indent", [None, 1], ids=["torch-form", "indented"])
def test_graph_scan_decodes_escaped_targets(indent):
    """The scan of a large graph (full parse off) decodes escaped node targets exactly as
    ``json.loads`` does: the same counts under the same names."""
    from workbench.formats.pt2.graph_json import graph_stats

    raw = _escaped_graph(indent)
    assert b'\\"' in raw and b"\\\\" in raw and b"\\u00e9" in raw
    want = {"torch.ops.aten.relu.default": 1, 'my.op"quoted"': 1, "back\\slash": 1,
            "caf\u00e9": 2, "plain": 1}
    scanned = graph_stats(raw, full_parse_limit=0)
    assert dict(scanned["targets"]) == want
    assert scanned == graph_stats(raw, full_parse_limit=len(raw))
    assert scanned["summary"]["nodes"] == 6 and scanned["summary"]["ops"] == 5


def test_graph_positions_and_keys_honour_start_and_stop():
    """``_positions`` / ``_keys`` look in ``raw[start:stop]`` only, the same on ``bytes``
    (``bytes.find``) and on a memoryview (a regular expression)."""
    from workbench.formats.pt2.graph_json import _STRING_VALUE, _keys, _positions

    raw = b'{"k": "a", "k": "b", "k": "c"}'
    k = b'"k"'
    assert [raw.index(k, i) for i in (0, 2, 12)] == [1, 11, 21]
    for buf in (raw, memoryview(raw)):
        assert list(_positions(buf, k)) == [1, 11, 21]
        assert list(_positions(buf, k, 2)) == [11, 21]
        assert list(_positions(buf, k, 2, 24)) == [11, 21]
        assert list(_positions(buf, k, 2, 23)) == [11]
        assert list(_positions(buf, k, 12)) == [21]
        assert list(_positions(buf, k, 22)) == []
        assert [m.group(1) for m in _keys(buf, b"k", _STRING_VALUE, 2)] == [b"b", b"c"]
        assert [m.group(1) for m in _keys(buf, b"k", _STRING_VALUE, 2, 20)] == [b"b"]


def test_json_config_reads_raw_entries_as_one_block(tmp_path, monkeypatch):
    """A config off torch's exact form (one pickled entry) takes the JSON path: its raw views
    are read together as columns, and only the pickled entry is checked field by field."""
    walked = []
    slow = pt2_config._entry_slow

    def spy(arc, model, kind_dir, cfg, fqn, meta):
        walked.append(fqn)
        return slow(arc, model, kind_dir, cfg, fqn, meta)

    monkeypatch.setattr(pt2_config, "_entry_slow", spy)
    pk = b"\x80\x04K\x01."
    w = np.arange(12, dtype=np.float32).tobytes()
    weights = {"a": entry(tensor_meta=tensor_meta(7, [2, 3])),
               "p": {"path_name": "model.pt2w", "is_param": False, "use_pickle": True,
                     "tensor_meta": tensor_meta(7, [2])},
               "b": entry(is_param=False, tensor_meta=tensor_meta(7, [3], offset=3))}
    p, art = _open_rows(tmp_path, weights, {"data/weights/weight_0": w,
                                           "data/weights/model.pt2w": pk})
    with art:
        assert walked == ["p"]
        base = data_offset(p, W0)
        assert sorted(art.tensors["name"]) == ["a", "b", "p"]
        a, b, pr = row(art, "a"), row(art, "b"), row(art, "p")
        assert (a["kind"], a["shape"], a["offset"], a["nbytes"], a["storage"]) == \
            ("parameter", (2, 3), base, 24, "zip")
        assert (b["kind"], b["shape"], b["offset"], b["nbytes"], b["storage_offset"]) == \
            ("buffer", (3,), base + 12, 12, 3)
        assert (pr["storage"], pr["pickled"], pr["offset"]) == ("pickle", True, None)
        m = art.frames["members"].set_index("name")
        assert m.loc[W0, "used_by"] == "a; b"
        np.testing.assert_array_equal(art.tensor("b"), np.arange(3, 6, dtype=np.float32))
