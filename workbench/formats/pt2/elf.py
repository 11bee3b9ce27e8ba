"""A bounded ELF64 symbol reader: the file range between two symbols of a shared object held
in place inside an archive (no loader, no copy)."""

from __future__ import annotations

import struct
from typing import NamedTuple

from ...source import Source

__all__ = ["elf_symbol_range"]

_ELF_HEAD = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_SHT_SYMTAB, _SHT_DYNSYM, _SHT_NOBITS = 2, 11, 8


class _Section(NamedTuple):
    """An ELF64 section header (``Elf64_Shdr``)."""

    name: int
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int


def elf_symbol_range(src: Source, start: int, size: int, first: bytes,
                     last: bytes) -> tuple[int, int] | None:
    """Absolute file range between two symbols of the ELF64 little-endian image at
    ``[start, start + size)`` of ``src``, or ``None`` (not ELF64-LE, symbols absent, or
    anything out of bounds). Nothing is loaded; every read is bounded by the image.

    Example:
        >>> elf_symbol_range(src, so.data_offset, so.compressed_size,   # doctest: +SKIP
        ...                  CONSTANTS_START, CONSTANTS_END)
        (290688, 293888)
    """
    buf = src.buf
    src.prefetch(start, min(size, 64))  # (a remote source fetches what is read; else no-op)
    if size < 64 or bytes(buf[start:start + 6]) != b"\x7fELF\x02\x01":
        return None
    h = _ELF_HEAD.unpack_from(buf, start)
    shoff, shentsize, shnum = h[6], h[11], h[12]  # e_shoff, e_shentsize, e_shnum
    if shentsize != _SHDR.size or shnum == 0 or shoff + shnum * shentsize > size:
        return None
    src.prefetch(start + shoff, shnum * shentsize)
    sections = [_Section._make(_SHDR.unpack_from(buf, start + shoff + k * shentsize))
                for k in range(shnum)]
    found: dict[bytes, int] = {}
    for want_type in (_SHT_DYNSYM, _SHT_SYMTAB):
        for sh in sections:
            if sh.type != want_type or sh.entsize != _SYM.size or sh.link >= shnum:
                continue
            strtab = sections[sh.link]
            if sh.offset + sh.size > size or strtab.offset + strtab.size > size:
                return None
            src.prefetch_many([(start + strtab.offset, strtab.size),
                               (start + sh.offset, sh.size)])
            names = bytes(buf[start + strtab.offset: start + strtab.offset + strtab.size])
            targets = {}
            for want in (first, last):
                k = names.find(want + b"\0")
                while k >= 0:  # (linkers merge a name into another that ends with it)
                    targets[k] = want
                    k = names.find(want + b"\0", k + 1)
            if not targets:
                continue
            table = buf[start + sh.offset: start + sh.offset + sh.size - sh.size % _SYM.size]
            for st_name, _, _, shndx, value, _ in _SYM.iter_unpack(table):
                want = targets.get(st_name)
                if want is None or want in found or not 0 < shndx < shnum:
                    continue
                sec = sections[shndx]
                if sec.type == _SHT_NOBITS or not sec.addr <= value <= sec.addr + sec.size:
                    continue
                found[want] = value - sec.addr + sec.offset
            if first in found and last in found:
                break
        if first in found and last in found:
            break
    if first not in found or last not in found:
        return None
    lo, hi = found[first], found[last]
    if not 0 <= lo <= hi <= size:
        return None
    return start + lo, start + hi
