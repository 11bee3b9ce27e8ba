"""Seeded, format-aware mutation fuzzer over every sample artifact (.pte, .ptd, .bpte, .pt2,
and the runtime traces: ETDump .etdp with its debug buffer, ETRecord .etrecord).

Each input is one sample with one to five mutations (bit flips, truncation, inflated
u16/u32/u64 fields, zeroed or random byte runs, duplicated or removed ranges, copied
offsets, rewritten decimal numbers in JSON/C++ text), placed mostly where the readers look:
the first bytes, headers and flatbuffer tables, zip local headers, the central directory and
end records, JSON metadata, the AOTInductor wrapper's ``constants_info_`` lines and the ELF
headers and symbol tables of an embedded ``.so``. The mutant is opened with ``wb.open`` *in
this process* under a per-input timer and a hard watchdog (``SIGALRM``), and exercised the
way a user would: every frame, ``summary()``, ``validate()``, the embedded program of a
``.bpte``, and tensor reads that touch every byte of the view (``tensors`` and, for a
``.bpte``, ``test_cases``), once with ``copy=True``. A trace is opened with its debug buffer
(``<name>.debug.bin`` beside it; that buffer is mutated too, seen through its trace) and
joined to its program by :func:`workbench.timeline`, with and without its ETRecord; a
mutated ETRecord is joined to the intact program and trace the same way.

A failure is any exception that is not an :class:`~workbench.ArtifactError`, an input that
takes longer than ``--slow`` seconds (default 2), a hang (``--hang``, default 10 s), or a
crash of the process (segfault, abort, or a hang in native code the alarm cannot break).
Every failing input is saved as a folder ``<out>/failures/<id>/`` holding the mutant under
its original name, the intact sibling files it is opened with, and ``failure.json`` (seed,
iteration, mutations, exception, traceback, seconds). The run prints executions, exec/s,
outcomes by exception type, the slowest input, and the peak RSS (``VmHWM``) against the
target "interpreter + 2 × the largest file". It exits 1 when anything failed.

The inputs run in a worker process that the script supervises: a crash is recorded (the
in-flight mutant is regenerated from ``(seed, iteration)``) and fuzzing resumes with the
next iteration in a fresh worker. Every input is reproducible from ``--seed`` and its
iteration number (``--only I``).

Usage::

    .venv/bin/python bench/fuzz.py --seconds 600                  # every sample, 10 minutes
    .venv/bin/python bench/fuzz.py --seconds 60 --seed 7 --files 'sample_models/*.pt2'
    .venv/bin/python bench/fuzz.py --replay build/fuzz/failures   # which saved inputs still fail
    .venv/bin/python bench/fuzz.py --seed 0 --only 1234           # re-run one iteration
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import mmap
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "bench") not in sys.path:  # also when loaded by path (tests/test_fuzz_all_formats.py)
    sys.path.insert(0, str(ROOT / "bench"))
from _measure import reset_hwm, status_kb  # noqa: E402  (the benchmarks' /proc helpers)

SAMPLES = ROOT / "sample_models"
DEFAULT_GLOBS = ("sample_models/*.pte", "sample_models/*.ptd", "sample_models/*.bpte",
                 "sample_models/*.pt2", "sample_models/*.etdp", "sample_models/*.etrecord")
#: The debug buffer the runtime writes beside a trace (``<name>.etdp`` -> ``<name>.debug.bin``).
DEBUG_SUFFIX = ".debug.bin"

#: Values written into integer fields (the file size and the old value are added per input).
SPECIAL_U16 = (0, 1, 0x7FFF, 0x8000, 0xFFFF)
SPECIAL_U32 = (0, 1, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFF0, 0xFFFFFFFF)
SPECIAL_U64 = (0, 1, 2**31, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1)
DELTAS = (-64, -16, -8, -4, -2, -1, 1, 2, 4, 8, 16, 64)
#: Same-length replacements for a decimal number in JSON or C++ text (``9``: all nines).
NUMBER_SWAPS = ("9", "-1", "0", "-9", "1e9", "1.5", "NaN", "true", "null", "\"x\"")
#: Segment kinds (from ``art.segments``) that hold structure rather than payload.
STRUCT_KINDS = frozenset({"header", "flatbuffer", "central_directory", "end_record",
                          "data_descriptor"})
TEXT_KINDS = frozenset({"config", "graph", "metadata"})
#: Region classes and how often a position is drawn from each (when the target has one).
CLASS_WEIGHTS = {"head": 2.0, "struct": 5.0, "text": 2.0, "elf": 1.5, "any": 1.0}


# ------------------------------------------------------------------------------------------
# Targets: one sample (or one sample seen through a sibling) with its hot regions and fields
# ------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Field:
    """A known integer field of the original file: absolute position, width in bytes, name."""

    pos: int
    width: int
    name: str


@dataclasses.dataclass
class Target:
    """What the fuzzer mutates and how the mutant is opened.

    Attributes:
        key: a unique name (``mlp_external.ptd`` or ``mlp_external.ptd@mlp_external.pte``).
        path: the original sample.
        data: its bytes.
        fmt: ``pte`` | ``ptd`` | ``bpte`` | ``pt2``.
        regions: region class -> list of ``(start, end)`` ranges positions are drawn from.
        fields: known integer fields (headers, zip records, ELF tables).
        boundaries: structure boundaries where truncation is most interesting.
        texts: ``(start, end)`` ranges of decimal numbers inside text members.
        open_name: the file opened in the work folder (the mutant itself, or the ``.pte``
            that finds the mutated ``.ptd`` as its sibling).
        siblings: intact files copied next to the mutant.
        zip_like: fields are unaligned (zip, ELF) rather than 4-aligned (flatbuffers).
    """

    key: str
    path: Path
    data: bytes
    fmt: str
    regions: dict[str, list[tuple[int, int]]]
    fields: list[Field]
    boundaries: list[int]
    texts: list[tuple[int, int]]
    open_name: str
    siblings: list[Path]
    zip_like: bool

    @property
    def name(self) -> str:
        """The mutant's file name (the original's)."""
        return self.path.name


def _segment_regions(path: Path) -> tuple[dict[str, list[tuple[int, int]]], list[int], str]:
    """Hot regions from the *original* file's ``segments`` (valid samples, so trustworthy)."""
    import workbench as wb

    regions: dict[str, list[tuple[int, int]]] = {"struct": [], "text": []}
    bounds: set[int] = set()
    with wb.open(path, data=[]) if path.suffix == ".pte" else wb.open(path) as art:
        fmt = art.format
        seg = art.segments
        seg = seg[seg["file"] == str(path)]
        for kind, off, size in zip(seg["kind"], seg["offset"], seg["size"]):
            off, size = int(off), int(size)
            bounds.update((off, off + size))
            if not size:
                continue
            if kind in STRUCT_KINDS:
                regions["struct"].append((off, off + size))
            elif kind in TEXT_KINDS:
                regions["text"].append((off, off + size))
    return regions, sorted(bounds), fmt


def _flat_fields(data: bytes, base: int = 0) -> list[Field]:
    """Root offset and the ``eh00``/``FH01`` header fields of a flatbuffer file at ``base``."""
    out = [Field(base, 4, "root offset")]
    tag = data[base + 8 : base + 12]
    if tag in (b"eh00", b"FH01") and len(data) >= base + 16:
        out.append(Field(base + 12, 4, f"{tag.decode()} length"))
        (length,) = struct.unpack_from("<I", data, base + 12)
        for k in range(16, min(8 + length, 48), 8):
            if base + k + 8 <= len(data):
                out.append(Field(base + k, 8, f"{tag.decode()} u64 at +{k}"))
    return out


def _zip_fields(data: bytes) -> tuple[list[Field], list[tuple[int, int]], list[int]]:
    """Fields of a zip's end records, central records, extras and local headers.

    Parsed here independently of workbench (tolerantly: a sample is a valid zip).
    Returns fields, structure ranges and boundaries.
    """
    fields: list[Field] = []
    ranges: list[tuple[int, int]] = []
    bounds: list[int] = []
    eocd = data.rfind(b"PK\x05\x06")
    if eocd < 0:
        return fields, ranges, bounds
    fields += [Field(eocd + 8, 2, "eocd entries on disk"), Field(eocd + 10, 2, "eocd entries"),
               Field(eocd + 12, 4, "eocd cd size"), Field(eocd + 16, 4, "eocd cd offset"),
               Field(eocd + 20, 2, "eocd comment length")]
    ranges.append((eocd, len(data)))
    _, _, _, _, n, cd_size, cd_off, _ = struct.unpack_from("<4sHHHHIIH", data, eocd)
    loc = eocd - 20
    if loc >= 0 and data[loc : loc + 4] == b"PK\x06\x07":
        fields += [Field(loc + 8, 8, "zip64 locator offset"), Field(loc + 16, 4, "zip64 disks")]
        (z64,) = struct.unpack_from("<Q", data, loc + 8)
        if data[z64 : z64 + 4] == b"PK\x06\x06":
            fields += [Field(z64 + 4, 8, "zip64 eocd size"), Field(z64 + 24, 8, "zip64 entries disk"),
                       Field(z64 + 32, 8, "zip64 entries"), Field(z64 + 40, 8, "zip64 cd size"),
                       Field(z64 + 48, 8, "zip64 cd offset")]
            ranges.append((z64, loc + 20))
            n, cd_size, cd_off = struct.unpack_from("<QQQ", data, z64 + 32)
    ranges.append((cd_off, cd_off + cd_size))
    bounds += [cd_off, cd_off + cd_size, eocd, eocd + 22]
    p = cd_off
    for k in range(n):
        if data[p : p + 4] != b"PK\x01\x02":
            break
        csize, _usize, nl, xl, cl = struct.unpack_from("<IIHHH", data, p + 20)
        (lho,) = struct.unpack_from("<I", data, p + 42)
        fields += [Field(p + 8, 2, f"central[{k}] flags"), Field(p + 10, 2, f"central[{k}] method"),
                   Field(p + 20, 4, f"central[{k}] csize"), Field(p + 24, 4, f"central[{k}] usize"),
                   Field(p + 28, 2, f"central[{k}] name length"),
                   Field(p + 30, 2, f"central[{k}] extra length"),
                   Field(p + 32, 2, f"central[{k}] comment length"),
                   Field(p + 34, 2, f"central[{k}] disk"), Field(p + 42, 4, f"central[{k}] lho")]
        x = p + 46 + nl
        fields += _extra_fields(data, x, x + xl, f"central[{k}]")
        if data[lho : lho + 4] == b"PK\x03\x04":
            lnl, lxl = struct.unpack_from("<HH", data, lho + 26)
            fields += [Field(lho + 6, 2, f"local[{k}] flags"), Field(lho + 8, 2, f"local[{k}] method"),
                       Field(lho + 18, 4, f"local[{k}] csize"), Field(lho + 22, 4, f"local[{k}] usize"),
                       Field(lho + 26, 2, f"local[{k}] name length"),
                       Field(lho + 28, 2, f"local[{k}] extra length")]
            lx = lho + 30 + lnl
            fields += _extra_fields(data, lx, lx + lxl, f"local[{k}]")
            ranges.append((lho, lx + lxl))
            start = lx + lxl
            bounds += [lho, start, start + csize]
            fields += _elf_fields(data, start, csize, f"member[{k}]")
            d = start + csize
            if data[d : d + 4] == b"PK\x07\x08":
                fields += [Field(d + 8, 4, f"descriptor[{k}] csize"),
                           Field(d + 12, 4, f"descriptor[{k}] usize")]
        p = x + xl + cl
    return fields, ranges, sorted(set(bounds))


def _extra_fields(data: bytes, start: int, end: int, what: str) -> list[Field]:
    """The header (id, length) and, for ZIP64 extras, the u64 values of each extra block."""
    out: list[Field] = []
    p = start
    while p + 4 <= end:
        xid, xlen = struct.unpack_from("<HH", data, p)
        out += [Field(p, 2, f"{what} extra id"), Field(p + 2, 2, f"{what} extra length")]
        if xid == 1:
            out += [Field(q, 8, f"{what} zip64 value") for q in range(p + 4, p + 4 + xlen - 7, 8)]
        p += 4 + xlen
    return out


_ELF64 = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")


def _elf_fields(data: bytes, start: int, size: int, what: str) -> list[Field]:
    """The ELF header, section headers and the symbols AOTInductor's constants use."""
    if size < 64 or data[start : start + 4] != b"\x7fELF" or data[start + 4] != 2:
        return []
    h = _ELF64.unpack_from(data, start)
    shoff, shentsize, shnum = h[6], h[11], h[12]
    out = [Field(start + 0x20, 8, f"{what} e_phoff"), Field(start + 0x28, 8, f"{what} e_shoff"),
           Field(start + 0x3A, 2, f"{what} e_shentsize"), Field(start + 0x3C, 2, f"{what} e_shnum"),
           Field(start + 0x3E, 2, f"{what} e_shstrndx")]
    if shentsize != _SHDR.size or shoff + shnum * shentsize > size:
        return out
    sections = [_SHDR.unpack_from(data, start + shoff + k * shentsize) for k in range(shnum)]
    for k in range(shnum):
        q = start + shoff + k * shentsize
        out += [Field(q + 4, 4, f"{what} sh[{k}].type"), Field(q + 16, 8, f"{what} sh[{k}].addr"),
                Field(q + 24, 8, f"{what} sh[{k}].offset"), Field(q + 32, 8, f"{what} sh[{k}].size"),
                Field(q + 40, 4, f"{what} sh[{k}].link"), Field(q + 56, 8, f"{what} sh[{k}].entsize")]
    for sh in sections:
        if sh[1] not in (2, 11) or sh[9] != _SYM.size or sh[6] >= shnum:
            continue
        strtab = sections[sh[6]]
        names = data[start + strtab[4] : start + strtab[4] + strtab[5]]
        for j in range(sh[5] // _SYM.size):
            q = start + sh[4] + j * _SYM.size
            st_name = _SYM.unpack_from(data, q)[0]
            if b"constants" in names[st_name : st_name + 64].split(b"\0", 1)[0]:
                out += [Field(q, 4, f"{what} sym.name"), Field(q + 6, 2, f"{what} sym.shndx"),
                        Field(q + 8, 8, f"{what} sym.value"), Field(q + 16, 8, f"{what} sym.size")]
    return out


def _elf_regions(fields: list[Field]) -> list[tuple[int, int]]:
    """Small ranges around every ELF field (so bit flips and runs land near them too)."""
    return [(f.pos, f.pos + f.width) for f in fields if " e_" in f.name or " sh[" in f.name
            or " sym." in f.name]


_NUMBER = re.compile(rb"-?\d+")


def _text_numbers(data: bytes, regions: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Decimal numbers inside text regions and AOTInductor ``constants_info_`` lines."""
    out: list[tuple[int, int]] = []
    for a, b in regions:
        out += [(a + m.start(), a + m.end()) for m in _NUMBER.finditer(data, a, b)]
    for m in re.finditer(rb"constants_info_\[\d+\]\.\w+ = [^;\n]{0,80};", data):
        out += [(m.start() + n.start(), m.start() + n.end())
                for n in _NUMBER.finditer(m.group())]
    return out


def _base(path: Path) -> str:
    """A sample's name up to its first dot (``mlp_portable.debug.bin`` -> ``mlp_portable``)."""
    return path.name.split(".", 1)[0]


def _partners(path: Path) -> list[Path]:
    """The intact files a trace or an ETRecord is used with: its program, its debug buffer,
    its ETRecord or trace (those that exist beside it)."""
    base = path.parent / _base(path)
    names = [".pte", DEBUG_SUFFIX, ".etrecord", ".etdp"]
    return [q for q in (base.with_name(base.name + n) for n in names)
            if q.is_file() and q != path]


def _debug_buffer_target(etdp: Target, debug: Path) -> Target:
    """The debug buffer (raw tensor bytes, no structure) mutated, seen through its trace:
    truncations and edits of the bytes the logged tensors point at."""
    data = debug.read_bytes()
    return Target(key=f"{debug.name}@{etdp.name}", path=debug, data=data, fmt="debug_buffer",
                  regions={"head": [(0, min(64, len(data)))], "any": [(0, len(data))]},
                  fields=[], boundaries=[0, len(data)], texts=[], open_name=etdp.name,
                  siblings=[p for p in _partners(etdp.path) if p != debug] + [etdp.path],
                  zip_like=False)


def analyse(path: Path, fmt_hint: str | None = None) -> list[Target]:
    """Targets for one sample: the file itself, and for a ``.ptd`` with a program of the same
    stem, the ``.ptd`` seen through that program (its sibling); for a trace with a debug
    buffer, that buffer seen through the trace."""
    data = path.read_bytes()
    regions, bounds, fmt = _segment_regions(path)
    fields: list[Field] = []
    if fmt == "etdump":  # a size prefix, then the flatbuffer (its offsets relative to byte 4)
        fields = [Field(0, 4, "size prefix"), Field(4, 4, "root offset")]
    elif fmt in ("pte", "ptd"):
        fields = _flat_fields(data)
    elif fmt == "bpte":
        fields = [Field(0, 4, "root offset")]
        k = data.find(b"ET12")
        if k >= 4:  # the embedded program (its vector's u32 length precedes it)
            fields += [Field(k - 8, 4, "program vector length"), *_flat_fields(data, k - 4)]
    elif fmt in ("pt2", "etrecord"):
        zfields, zranges, zbounds = _zip_fields(data)
        fields = zfields
        regions["struct"] += zranges
        bounds = sorted(set(bounds) | set(zbounds))
    elf = _elf_regions(fields)
    if elf:
        regions["elf"] = elf
    texts = _text_numbers(data, regions.get("text", []))
    if fmt == "pt2":  # the AOTInductor wrapper's constants_info_ lines are text too
        regions["text"] += [(max(a - 40, 0), min(b + 40, len(data))) for a, b in texts
                            if not any(x <= a < y for x, y in regions["text"])][:2000]
    regions["head"] = [(0, min(64, len(data)))]
    regions["any"] = [(0, len(data))]
    regions = {k: v for k, v in regions.items() if v}
    siblings: list[Path] = []
    if fmt == "pte":
        ptd = path.with_suffix(".ptd")
        if ptd.is_file():
            siblings.append(ptd)
    elif fmt in ("etdump", "etrecord"):
        siblings = _partners(path)
    base = Target(key=path.name, path=path, data=data, fmt=fmt, regions=regions, fields=fields,
                  boundaries=bounds, texts=texts, open_name=path.name, siblings=siblings,
                  zip_like=fmt in ("pt2", "etrecord"))
    out = [base]
    debug = path.parent / (_base(path) + DEBUG_SUFFIX)
    if fmt == "etdump" and debug.is_file():
        out.append(_debug_buffer_target(base, debug))
    if fmt == "ptd":
        pte = path.with_suffix(".pte")
        if pte.is_file():
            out.append(dataclasses.replace(base, key=f"{path.name}@{pte.name}", open_name=pte.name,
                                           siblings=[pte]))
    return out


def discover(globs: Sequence[str]) -> list[Path]:
    """Sample files matching ``globs`` (relative to the repository root or absolute)."""
    found: set[Path] = set()
    for g in globs:
        pattern = g if os.path.isabs(g) else str(ROOT / g)
        found.update(Path(p).resolve() for p in glob.glob(pattern) if os.path.isfile(p))
    return sorted(found)


# ------------------------------------------------------------------------------------------
# Mutations
# ------------------------------------------------------------------------------------------

def _pick_class(t: Target, rng: random.Random) -> str:
    classes = [c for c in CLASS_WEIGHTS if c in t.regions]
    return rng.choices(classes, [CLASS_WEIGHTS[c] for c in classes])[0]


def _position(t: Target, rng: random.Random, n: int, width: int = 1, align: int = 1) -> int:
    """A position for a ``width``-byte edit in a mutant of current length ``n``."""
    ranges = t.regions[_pick_class(t, rng)]
    a, b = rng.choices(ranges, [max(e - s, 1) ** 0.5 for s, e in ranges])[0]
    b = min(b, n)
    a = min(a, max(b - 1, 0))
    p = rng.randrange(a, max(b - width + 1, a + 1))
    p -= p % align
    return max(0, min(p, max(n - width, 0)))


def _int_value(rng: random.Random, width: int, old: int, n: int) -> int:
    """An interesting value for an integer field that held ``old`` (file length ``n``)."""
    mask = (1 << (8 * width)) - 1
    special = {2: SPECIAL_U16, 4: SPECIAL_U32, 8: SPECIAL_U64}[width]
    r = rng.random()
    if r < 0.35:
        v = rng.choice(special)
    elif r < 0.65:
        v = old + rng.choice(DELTAS)
    elif r < 0.8:
        v = n + rng.choice((-1, 0, 1, 8, 4096))
    elif r < 0.9:
        v = old * rng.choice((2, 16, 256, 65536))
    else:
        v = rng.getrandbits(8 * width)
    return v & mask


_FMT = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}


def mutate_once(t: Target, d: bytearray, rng: random.Random) -> dict[str, Any]:
    """Apply one mutation to ``d`` in place; returns its description."""
    n = len(d)
    if n == 0:
        d += bytes([rng.randrange(256)])
        return {"op": "append byte"}
    kind = rng.choices(
        ("bitflip", "field", "int", "byte", "truncate", "zeros", "random", "duplicate", "remove",
         "copy_u32", "number"),
        (10, 16, 12, 6, 6, 5, 4, 4, 4, 5, 6 if t.texts else 0))[0]
    if kind == "bitflip":
        flips = []
        for _ in range(rng.choice((1, 1, 2, 4))):
            p, bit = _position(t, rng, n), rng.randrange(8)
            d[p] ^= 1 << bit
            flips.append((p, bit))
        return {"op": "bitflip", "at": flips}
    if kind in ("field", "int"):
        live = [f for f in t.fields if f.pos + f.width <= n] if kind == "field" else []
        if live:
            f = rng.choice(live)
            p, w, what = f.pos, f.width, f.name
        else:
            w = rng.choices((2, 4, 8), (2, 6, 3))[0]
            align = 1 if t.zip_like or rng.random() < 0.3 else min(w, 4)
            p, what = _position(t, rng, n, w, align), None
        if p + w > n:
            return {"op": "noop"}
        (old,) = struct.unpack_from(_FMT[w], d, p)
        v = _int_value(rng, w, old, n)
        struct.pack_into(_FMT[w], d, p, v)
        out = {"op": f"u{8 * w}", "at": p, "old": old, "new": v}
        if what:
            out["field"] = what
        return out
    if kind == "byte":
        p = _position(t, rng, n)
        d[p] = rng.choice((0, 0xFF, 0x80, 0x7F, rng.randrange(256)))
        return {"op": "byte", "at": p, "new": d[p]}
    if kind == "truncate":
        r = rng.random()
        if r < 0.35 and t.boundaries:
            cut = rng.choice(t.boundaries) + rng.choice((-2, -1, 0, 0, 1, 2))
        elif r < 0.65:
            cut = n - rng.choice((1, 2, 4, 8, 20, 22, 23, 64, 200))
        else:
            cut = rng.randrange(n)
        cut = max(0, min(cut, n - 1))
        del d[cut:]
        return {"op": "truncate", "at": cut}
    if kind in ("zeros", "random"):
        p = _position(t, rng, n)
        k = min(rng.choice((1, 2, 4, 8, 16, 64, 256)), n - p)
        d[p : p + k] = bytes(k) if kind == "zeros" else rng.randbytes(k)
        return {"op": kind, "at": p, "len": k}
    if kind == "duplicate":
        a = _position(t, rng, n)
        k = min(rng.choice((1, 4, 8, 16, 64, 512)), n - a)
        b = _position(t, rng, n)
        d[b:b] = d[a : a + k]
        return {"op": "duplicate", "from": a, "len": k, "to": b}
    if kind == "remove":
        a = _position(t, rng, n)
        k = min(rng.choice((1, 4, 8, 16, 64, 512)), n - a)
        del d[a : a + k]
        return {"op": "remove", "at": a, "len": k}
    if kind == "copy_u32":
        a, b = _position(t, rng, n, 4, 4), _position(t, rng, n, 4, 1 if t.zip_like else 4)
        d[b : b + 4] = d[a : a + 4]
        return {"op": "copy_u32", "from": a, "to": b}
    # number: rewrite a decimal in JSON / C++ text, keeping the length (zip sizes stay valid)
    a, b = rng.choice(t.texts)
    if b > n:
        return {"op": "noop"}
    k = b - a
    new = rng.choice(NUMBER_SWAPS)
    new = ("9" * k if new == "9" else new)[:k].ljust(k)
    if rng.random() < 0.3 and k >= 2:
        new = "-" + "9" * (k - 1)
    old = bytes(d[a:b])
    d[a:b] = new.encode()
    return {"op": "number", "at": a, "old": old.decode("latin-1"), "new": new}


def mutant(t: Target, seed: int, i: int) -> tuple[list[dict[str, Any]], bytes]:
    """Input ``i`` of the run seeded ``seed``: deterministic, independent of other inputs."""
    rng = random.Random(f"{seed}/{i}/{t.key}")
    d = bytearray(t.data)
    count = rng.choices((1, 2, 3, 5), (60, 22, 10, 8))[0]
    muts = [mutate_once(t, d, rng) for _ in range(count)]
    return muts, bytes(d)


# ------------------------------------------------------------------------------------------
# Running one input
# ------------------------------------------------------------------------------------------

class Hang(BaseException):
    """Raised by the watchdog in the middle of an input that runs too long (not an
    ``Exception``: a library's ``except Exception`` must not swallow it)."""


@contextmanager
def watchdog(seconds: float, hard: float | None = None) -> Iterator[None]:
    """Raise :class:`Hang` after ``seconds`` (``SIGALRM``); with ``hard``, also dump the
    stacks and exit the process after ``hard`` seconds (a hang in native code)."""
    import faulthandler

    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"still running after {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    if hard:
        faulthandler.dump_traceback_later(hard, exit=True)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if hard:
            faulthandler.cancel_dump_traceback_later()


def _key(row: Any) -> Any:
    """The key ``Artifact.tensor`` takes for a row: ``(method, value)`` or the name."""
    method, value = getattr(row, "method", None), getattr(row, "value", None)
    if isinstance(method, str) and value is not None and value == value:
        try:
            return (method, int(value))
        except (TypeError, ValueError):
            pass
    return str(row.name)


#: Views larger than this are touched at their first and last element only (a stride-0 view
#: of a few bytes can describe terabytes; copying it would measure the fuzzer, not workbench).
TOUCH_LIMIT = 64 << 20


def _touch(x: Any) -> int:
    """Read every byte a tensor view covers (a view past the map would crash here).

    Torch views are reinterpreted as integers of the same width first, so dtypes whose
    kernels are missing (``qint8`` without a quantizer, float8) can be read too.
    """
    if hasattr(x, "numpy") and not hasattr(x, "__array_interface__"):  # torch
        import torch

        ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        if x.element_size() in ints:
            x = x.view(ints[x.element_size()])
        n, size = x.numel(), x.numel() * x.element_size()
        if n and size > TOUCH_LIMIT:
            return int(x[(0,) * x.dim()].item() != x[(-1,) * x.dim()].item()) + 2
        return int(x.clone().numel())  # clone reads every element through the strides
    import numpy as np

    if x.size and x.nbytes > TOUCH_LIMIT:
        return int(x[(0,) * x.ndim] != x[(-1,) * x.ndim]) + 2
    return int(np.array(x, copy=True).size)


def exercise(path: str | os.PathLike[str], max_tensors: int = 8) -> None:
    """Everything a user would do with an opened artifact; only ArtifactError may escape.

    Open, build every frame, ``summary()``, ``validate()``, the embedded program of a
    ``.bpte`` (frames and validate), and read up to ``max_tensors`` stored tensors of each
    tensor frame (``tensors``; ``test_cases`` for a ``.bpte``), touching all their bytes,
    the first one also with ``copy=True``.
    """
    import workbench as wb

    path = Path(path)
    partners = {q.name[len(_base(path)):]: q for q in _partners(path)}
    debug = partners.get(DEBUG_SUFFIX)
    art = wb.open(path) if debug is None or path.suffix != ".etdp" else wb.open(path,
                                                                                  data=[debug])
    try:
        for name in list(art.frames):
            art.frames[name]
        art.summary()
        art.validate()
        _join_traces(art, partners)
        if art.format == "bpte":
            inner = art.program
            for name in list(inner.frames):
                inner.frames[name]
            inner.validate()
        for frame in ("tensors", "test_cases"):
            if frame not in art.frames:
                continue
            df = art.frames[frame]
            stored = df[df["offset"].notna()]
            for k, row in enumerate(stored.head(max_tensors).itertuples(index=False)):
                key = (str(row.name) if frame == "test_cases" else _key(row))
                _touch(art.tensor(key))
                if k == 0:
                    _touch(art.tensor(key, copy=True))
    finally:
        art.close()


def _join_traces(art: Any, partners: dict[str, Path]) -> None:
    """A trace joined to its program by ``wb.timeline`` (by event and by instruction; with its
    ETRecord by event), an ETRecord joined to its program and trace the same way. The intact
    partners are opened once."""
    import workbench as wb

    if ".pte" not in partners or art.format not in ("etdump", "etrecord"):
        return
    if art.format == "etrecord" and ".etdp" not in partners:
        return
    opened = [wb.open(partners[".pte"])]
    try:
        if art.format == "etdump":
            joins = [(art, None)]
            if ".etrecord" in partners:
                opened.append(wb.open(partners[".etrecord"]))
                joins.append((art, opened[-1]))
        else:
            opened.append(wb.open(partners[".etdp"]))
            joins = [(opened[-1], art)]
        for k, (trace, record) in enumerate(joins):
            for by in ("event", "instruction") if k == 0 else ("event",):
                wb.timeline(opened[0], trace, record, by=by)
    finally:
        for a in opened:
            a.close()


@dataclasses.dataclass
class Outcome:
    """The result of one input: ``kind`` is ``ok``, ``artifact_error``, ``error`` or ``hang``."""

    kind: str
    exc_type: str
    seconds: float
    message: str = ""
    tb: str = ""
    where: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in ("error", "hang")


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost workbench frame of ``exc`` (for grouping failures)."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if "/workbench/" in f.filename] or frames
    if not inside:
        return "?"
    f = inside[-1]
    return f"{f.filename.rsplit('/workbench/', 1)[-1]}:{f.lineno}"


def run_one(path: str | os.PathLike[str], hang: float = 10.0, hard: float | None = None,
            max_tensors: int = 8) -> Outcome:
    """Exercise one input under the watchdog and classify what happened."""
    import workbench as wb

    t0 = time.perf_counter()
    try:
        with watchdog(hang, hard):
            exercise(path, max_tensors)
    except wb.ArtifactError as e:
        return Outcome("artifact_error", type(e).__name__, time.perf_counter() - t0, str(e)[:300])
    except Hang as e:
        return Outcome("hang", "Hang", time.perf_counter() - t0, str(e), traceback.format_exc(),
                       _where(e))
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # every other exception is the bug we look for
        return Outcome("error", type(e).__name__, time.perf_counter() - t0, str(e)[:500],
                       traceback.format_exc(), _where(e))
    return Outcome("ok", "ok", time.perf_counter() - t0)


# ------------------------------------------------------------------------------------------
# Memory figures
# ------------------------------------------------------------------------------------------

def proc_status(field: str) -> int:
    """``VmHWM`` / ``VmRSS`` ... of this process in bytes (0 where /proc is missing)."""
    return (status_kb(field) or 0) * 1024


# ------------------------------------------------------------------------------------------
# The worker: runs inputs until the deadline, saves failures, writes stats snapshots
# ------------------------------------------------------------------------------------------

def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)[:60]


def save_failure(out: Path, t: Target, seed: int, i: int, muts: list[dict[str, Any]], data: bytes,
                 outcome: Outcome, reason: str) -> Path:
    """Save the input as ``<out>/failures/<id>/`` (mutant, intact siblings, failure.json)."""
    d = out / "failures" / f"{_slug(t.key)}-{seed}-{i}"
    d.mkdir(parents=True, exist_ok=True)
    (d / t.name).write_bytes(data)
    for s in t.siblings:
        shutil.copyfile(s, d / s.name)
    info = {"reason": reason, "target": t.key, "original": str(t.path), "format": t.fmt,
            "open": t.open_name, "seed": seed, "iteration": i, "mutations": muts,
            "exc_type": outcome.exc_type, "message": outcome.message, "where": outcome.where,
            "seconds": round(outcome.seconds, 4), "traceback": outcome.tb,
            "reproduce": f".venv/bin/python bench/fuzz.py --replay {d}"}
    (d / "failure.json").write_text(json.dumps(info, indent=1, default=str))
    return d


@dataclasses.dataclass
class Stats:
    """Counters of one run (merged across worker restarts)."""

    executions: int = 0
    fuzz_seconds: float = 0.0
    exec_seconds: float = 0.0
    outcomes: Counter = dataclasses.field(default_factory=Counter)
    by_target: Counter = dataclasses.field(default_factory=Counter)
    ops: Counter = dataclasses.field(default_factory=Counter)
    warnings: Counter = dataclasses.field(default_factory=Counter)
    slowest: dict[str, Any] = dataclasses.field(default_factory=dict)
    failures: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    hwm: int = 0
    hwm_at_start: int = 0
    baseline_rss: int = 0
    final_rss: int = 0
    hwm_jumps: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    last_iteration: int = -1
    workers: int = 0
    #: ``[seconds since the worker's warm-up, VmRSS]`` every few seconds (leak or plateau?)
    rss_trace: list[list[float]] = dataclasses.field(default_factory=list)
    target_seconds: Counter = dataclasses.field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        return {f.name: (dict(v) if isinstance(v, Counter) else v)
                for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Stats:
        s = cls(**{k: v for k, v in d.items() if k in {f.name for f in dataclasses.fields(cls)}})
        for k in ("outcomes", "by_target", "ops", "warnings", "target_seconds"):
            setattr(s, k, Counter(getattr(s, k)))
        return s

    def merge(self, o: Stats) -> None:
        self.executions += o.executions
        self.fuzz_seconds += o.fuzz_seconds
        self.exec_seconds += o.exec_seconds
        for k in ("outcomes", "by_target", "ops", "warnings", "target_seconds"):
            getattr(self, k).update(getattr(o, k))
        self.rss_trace += o.rss_trace
        if o.slowest.get("seconds", 0) > self.slowest.get("seconds", -1):
            self.slowest = o.slowest
        self.failures += o.failures
        self.hwm = max(self.hwm, o.hwm)
        self.hwm_at_start = max(self.hwm_at_start, o.hwm_at_start)
        self.baseline_rss = max(self.baseline_rss, o.baseline_rss)
        self.final_rss = max(self.final_rss, o.final_rss)
        self.hwm_jumps = sorted(self.hwm_jumps + o.hwm_jumps, key=lambda j: -j["grew"])[:5]
        self.last_iteration = max(self.last_iteration, o.last_iteration)
        self.workers += o.workers


def load_targets(globs: Sequence[str]) -> list[Target]:
    """Every target of every sample matching ``globs``."""
    return [t for p in discover(globs) for t in analyse(p)]


def _work_dirs(out: Path, targets: list[Target]) -> dict[str, Path]:
    """One folder per target holding its intact siblings; the mutant is written there."""
    dirs = {}
    for t in targets:
        d = out / "work" / _slug(t.key)
        d.mkdir(parents=True, exist_ok=True)
        for s in t.siblings:
            shutil.copyfile(s, d / s.name)
        dirs[t.key] = d
    return dirs


def _write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` (maps of an earlier mutant keep their own inode)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


#: Exit status of a worker that failed itself (a bug in this script, not in workbench).
FUZZER_BUG = 3


def worker(args: argparse.Namespace) -> int:
    """Fuzz from iteration ``args.start`` until ``args.until`` (epoch seconds).

    Exits with :data:`FUZZER_BUG` when the fuzzer's own code fails (outside ``run_one``).
    """
    try:
        return _worker(args)
    except Exception:
        traceback.print_exc()
        return FUZZER_BUG


def _worker(args: argparse.Namespace) -> int:
    import faulthandler

    warnings.simplefilter("always")
    faulthandler.enable()
    out = Path(args.out)
    targets = load_targets(args.files)
    if not targets:
        print("no sample files match", args.files, file=sys.stderr)
        return 2
    dirs = _work_dirs(out, targets)
    with open(out / "work" / "inflight", "r+b") as f:
        inflight = mmap.mmap(f.fileno(), 8)
    stats = Stats(workers=1)
    # warm-up: the originals must pass, and the imports (pandas, torch) happen here
    for t in targets:
        _write_atomic(dirs[t.key] / t.name, t.data)
        o = run_one(dirs[t.key] / t.open_name, args.hang)
        if o.kind != "ok":
            print(f"warning: original {t.key} gives {o.exc_type}: {o.message}", file=sys.stderr)
    # the baseline ("the interpreter") is taken after the first --warmup inputs too: they load
    # the code paths, pandas/numpy caches and allocator pools that every later input reuses
    stats.hwm_at_start = proc_status("VmHWM")
    stats.baseline_rss = proc_status("VmRSS")
    hwm = stats.hwm_at_start
    saved: Counter = Counter()
    t_start = time.time()
    last_snap = t_start
    i = args.start
    snap = out / "work" / f"stats-{args.start}.json"
    while time.time() < args.until:
        struct.pack_into("<q", inflight, 0, i)
        t = targets[i % len(targets)]
        muts, data = mutant(t, args.seed, i)
        _write_atomic(dirs[t.key] / t.name, data)
        with warnings.catch_warnings(record=True) as caught:
            o = run_one(dirs[t.key] / t.open_name, args.hang, args.hang + 20)
        for w in caught:
            stats.warnings[f"{w.category.__name__}: {str(w.message)[:80]}"] += 1
        stats.executions += 1
        stats.exec_seconds += o.seconds
        stats.outcomes[o.exc_type if o.kind != "error" else f"!{o.exc_type}"] += 1
        stats.by_target[t.key] += 1
        stats.target_seconds[t.key] += o.seconds
        for m in muts:
            stats.ops[m["op"]] += 1
        if o.seconds > stats.slowest.get("seconds", -1):
            stats.slowest = {"seconds": round(o.seconds, 4), "target": t.key, "iteration": i,
                             "outcome": o.exc_type, "mutations": muts}
        reason = ("hang" if o.kind == "hang" else "exception" if o.kind == "error"
                  else "slow" if o.seconds > args.slow else None)
        if reason:
            sig = f"{reason}:{o.exc_type}:{o.where}" if reason != "slow" else f"slow:{t.key}"
            saved[sig] += 1
            rec = {"signature": sig, "reason": reason, "target": t.key, "iteration": i,
                   "exc_type": o.exc_type, "message": o.message[:200], "where": o.where,
                   "seconds": round(o.seconds, 3)}
            if saved[sig] <= args.keep:
                rec["saved"] = str(save_failure(out, t, args.seed, i, muts, data, o, reason))
            stats.failures.append(rec)
            print(f"FAIL [{reason}] {t.key} #{i}: {o.exc_type}: {o.message[:120]} ({o.where})",
                  file=sys.stderr, flush=True)
        if stats.executions == args.warmup:
            stats.hwm_at_start = proc_status("VmHWM")
            stats.baseline_rss = proc_status("VmRSS")
            reset_hwm()
            hwm = proc_status("VmHWM")
        now_hwm = proc_status("VmHWM")
        if now_hwm > hwm and stats.executions > args.warmup:
            jump = {"grew": now_hwm - hwm, "target": t.key, "iteration": i, "hwm": now_hwm}
            stats.hwm_jumps = sorted([*stats.hwm_jumps, jump], key=lambda j: -j["grew"])[:5]
            hwm = now_hwm
        stats.last_iteration = i
        i += 1
        now = time.time()
        if now - last_snap > 5:
            stats.fuzz_seconds = now - t_start
            stats.hwm = hwm
            stats.final_rss = proc_status("VmRSS")
            stats.rss_trace.append([round(now - t_start, 1), stats.final_rss])
            _write_json(snap, stats.to_json())
            last_snap = now
            if args.progress:
                print(f"  {stats.executions} execs, {stats.executions / stats.fuzz_seconds:.0f}/s, "
                      f"{len(stats.failures)} failures", file=sys.stderr, flush=True)
    stats.fuzz_seconds = time.time() - t_start
    stats.hwm = max(hwm, proc_status("VmHWM"))
    stats.final_rss = proc_status("VmRSS")
    stats.last_iteration = i - 1
    _write_json(snap, {**stats.to_json(), "done": True})
    return 0


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, default=str))
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------
# The supervisor: restarts the worker after a crash and records the in-flight input
# ------------------------------------------------------------------------------------------

def supervise(args: argparse.Namespace) -> int:
    out = Path(args.out)
    shutil.rmtree(out / "work", ignore_errors=True)
    (out / "work").mkdir(parents=True)
    (out / "work" / "inflight").write_bytes(struct.pack("<q", -1))
    targets = load_targets(args.files)
    if not targets:
        print(f"no sample files match {args.files}", file=sys.stderr)
        return 2
    largest = max(t.path.stat().st_size for t in targets)
    until = time.time() + args.seconds
    total = Stats()
    start = args.start
    t0 = time.time()
    print(f"fuzzing {len(targets)} targets from {len({t.path for t in targets})} files for "
          f"{args.seconds:g} s, seed {args.seed}", flush=True)
    while time.time() < until:
        err_path = out / "work" / f"worker-{start}.stderr"
        cmd = [sys.executable, "-X", "faulthandler", os.path.abspath(__file__), "--worker",
               "--seed", str(args.seed), "--start", str(start), "--until", repr(until),
               "--out", str(out), "--hang", str(args.hang), "--slow", str(args.slow),
               "--keep", str(args.keep), "--warmup", str(args.warmup),
               *(["--progress"] if args.progress else []),
               "--files", *args.files]
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
            assert proc.stderr is not None
            for line in proc.stderr:  # pass through, keep a copy for crash reports
                sys.stderr.buffer.write(line)
                sys.stderr.flush()
                err.write(line)
            rc = proc.wait()
        snap = out / "work" / f"stats-{start}.json"
        part = json.loads(snap.read_text()) if snap.exists() else {}
        s = Stats.from_json(part) if part else Stats(workers=1)
        total.merge(s)
        if rc == 0 and part.get("done"):
            break
        if rc == FUZZER_BUG:
            print("the fuzzer itself failed (see above); stopping", file=sys.stderr)
            return 2
        # the worker died: the in-flight input is the crash
        with open(out / "work" / "inflight", "rb") as f:
            (i,) = struct.unpack("<q", f.read(8))
        tail = err_path.read_bytes().decode("utf-8", "replace")[-6000:]
        if i < 0:
            print(f"worker exited with {rc} before fuzzing:\n{tail}", file=sys.stderr)
            return 2
        t = targets[i % len(targets)]
        muts, data = mutant(t, args.seed, i)
        how = f"signal {-rc}" if rc < 0 else f"exit {rc}"
        o = Outcome("error", f"crash ({how})", 0.0, f"worker died ({how})", tail, "?")
        sig = f"crash:{how}:{t.key}"
        rec = {"signature": sig, "reason": "crash", "target": t.key, "iteration": i,
               "exc_type": o.exc_type, "message": o.message, "where": "?", "seconds": None,
               "saved": str(save_failure(out, t, args.seed, i, muts, data, o, "crash"))}
        total.failures.append(rec)
        total.executions += 1
        total.outcomes[f"!{o.exc_type}"] += 1
        print(f"FAIL [crash] {t.key} #{i}: worker died ({how}); restarting", file=sys.stderr)
        start = i + 1
    wall = time.time() - t0
    report = _report(total, wall, largest, args)
    _write_json(out / "report.json", report)
    _print_report(report)
    return 1 if total.failures else 0


def _report(s: Stats, wall: float, largest: int, args: argparse.Namespace) -> dict[str, Any]:
    artifact_errors = {k: v for k, v in s.outcomes.items() if not k.startswith("!") and k != "ok"}
    others = {k[1:]: v for k, v in s.outcomes.items() if k.startswith("!")}
    budget = s.baseline_rss + 2 * largest
    groups: dict[str, dict[str, Any]] = {}
    for f in s.failures:
        g = groups.setdefault(f["signature"], {"count": 0, "first": f})
        g["count"] += 1
    return {
        "command": " ".join([os.path.relpath(sys.executable, ROOT), "bench/fuzz.py", *sys.argv[1:]]),
        "seed": args.seed, "wall_seconds": round(wall, 1), "fuzz_seconds": round(s.fuzz_seconds, 1),
        "executions": s.executions,
        "exec_per_second": round(s.executions / s.fuzz_seconds, 1) if s.fuzz_seconds else 0.0,
        "mean_ms": round(1000 * s.exec_seconds / max(s.executions, 1), 2),
        "ok": s.outcomes.get("ok", 0), "artifact_errors": dict(sorted(artifact_errors.items())),
        "other_exceptions": others, "hangs": s.outcomes.get("Hang", 0),
        "slow_inputs": sum(1 for f in s.failures if f["reason"] == "slow"),
        "slowest": s.slowest, "failures": len(s.failures), "failure_groups": groups,
        "by_target": {k: {"executions": v, "mean_ms": round(1000 * s.target_seconds[k] / v, 2)}
                      for k, v in sorted(s.by_target.items())},
        "mutations": dict(s.ops.most_common()),
        "warnings": dict(s.warnings.most_common(10)),
        "peak_rss": s.hwm, "peak_rss_during_startup": s.hwm_at_start,
        "baseline_rss": s.baseline_rss, "final_rss": s.final_rss, "largest_file": largest,
        "rss_budget": budget, "rss_within_budget": s.hwm <= budget, "hwm_jumps": s.hwm_jumps,
        "workers": s.workers, "rss_trace": s.rss_trace, "warmup": args.warmup,
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _print_report(r: dict[str, Any]) -> None:
    print(f"\n== fuzz report ({r['command']})")
    print(f"executions      {r['executions']} in {r['fuzz_seconds']} s: {r['exec_per_second']}/s "
          f"(mean {r['mean_ms']} ms per input), {r['workers']} worker(s)")
    print(f"ok              {r['ok']}")
    print(f"ArtifactError   {sum(r['artifact_errors'].values())}: " +
          ", ".join(f"{k} {v}" for k, v in r["artifact_errors"].items()))
    print(f"other           {sum(r['other_exceptions'].values())}: " +
          (", ".join(f"{k} {v}" for k, v in r["other_exceptions"].items()) or "none"))
    sl = r["slowest"]
    if sl:
        print(f"slowest input   {sl['seconds']} s: {sl['target']} #{sl['iteration']} -> {sl['outcome']} "
              f"({'; '.join(m['op'] for m in sl['mutations'])})")
    print(f"inputs > slow   {r['slow_inputs']}; hangs {r['hangs']}")
    print(f"peak RSS        {_mib(r['peak_rss'])} (VmHWM reset after {r['warmup']} warm-up inputs; "
          f"peak until then "
          f"{_mib(r['peak_rss_during_startup'])}); baseline after warm-up "
          f"{_mib(r['baseline_rss'])}, final "
          f"{_mib(r['final_rss'])}; budget baseline + 2 x {_mib(r['largest_file'])} = "
          f"{_mib(r['rss_budget'])} -> {'OK' if r['rss_within_budget'] else 'OVER'}")
    trace = r["rss_trace"]
    if len(trace) >= 2:
        k = len(trace) // 10
        print(f"RSS over time   {_mib(int(trace[0][1]))} at {trace[0][0]:g} s, "
              f"{_mib(int(trace[k][1]))} at {trace[k][0]:g} s, {_mib(int(trace[-1][1]))} at "
              f"{trace[-1][0]:g} s")
    print("per target      " + ", ".join(f"{k} {v['executions']} x {v['mean_ms']} ms"
                                         for k, v in r["by_target"].items()))
    if r["warnings"]:
        print("warnings        " + "; ".join(f"{k} x{v}" for k, v in list(r["warnings"].items())[:5]))
    print(f"failures        {r['failures']} in {len(r['failure_groups'])} group(s)")
    for sig, g in r["failure_groups"].items():
        f = g["first"]
        print(f"  {g['count']:5d}  {sig}\n         e.g. {f.get('saved', '(not saved)')}: "
              f"{f['exc_type']}: {f['message'][:150]}")


# ------------------------------------------------------------------------------------------
# Replay saved failures
# ------------------------------------------------------------------------------------------

def replay(paths: Sequence[str], hang: float, slow: float) -> int:
    """Re-run saved failure folders (or a folder of them); 1 if any still fails."""
    folders: list[Path] = []
    for p in map(Path, paths):
        if (p / "failure.json").is_file():
            folders.append(p)
        else:
            folders += sorted(q.parent for q in p.glob("*/failure.json"))
    still = 0
    for d in folders:
        info = json.loads((d / "failure.json").read_text())
        o = run_one(d / info["open"], hang)
        bad = o.failed or o.seconds > slow
        still += bad
        print(f"{'FAILS' if bad else 'fixed'}  {d.name}: was {info['exc_type']} ({info['reason']}); "
              f"now {o.exc_type} in {o.seconds:.3f} s {o.where}")
        if bad and o.tb:
            print("    " + o.tb.strip().splitlines()[-1])
    print(f"{still} of {len(folders)} saved inputs still fail")
    return 1 if still else 0


def only(args: argparse.Namespace) -> int:
    """Re-run iteration ``args.only`` of seed ``args.seed`` in this process and explain it."""
    targets = load_targets(args.files)
    t = targets[args.only % len(targets)]
    muts, data = mutant(t, args.seed, args.only)
    d = Path(args.out) / "only"
    d.mkdir(parents=True, exist_ok=True)
    for s in t.siblings:
        shutil.copyfile(s, d / s.name)
    (d / t.name).write_bytes(data)
    o = run_one(d / t.open_name, args.hang)
    print(json.dumps({"target": t.key, "mutations": muts, "outcome": o.exc_type,
                      "seconds": round(o.seconds, 4), "message": o.message}, indent=1, default=str))
    if o.tb:
        print(o.tb)
    return 1 if o.failed or o.seconds > args.slow else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz (default 60)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the run (default 0)")
    ap.add_argument("--out", default=str(ROOT / "build" / "fuzz"),
                    help="folder for failures and the report (default build/fuzz)")
    ap.add_argument("--files", nargs="+", default=list(DEFAULT_GLOBS), metavar="GLOB",
                    help="sample files to mutate (default: every .pte/.ptd/.bpte/.pt2 sample)")
    ap.add_argument("--slow", type=float, default=2.0, help="an input slower than this fails (s)")
    ap.add_argument("--hang", type=float, default=10.0, help="watchdog per input (s)")
    ap.add_argument("--keep", type=int, default=20,
                    help="inputs saved per distinct failure (default 20; all are counted)")
    ap.add_argument("--warmup", type=int, default=1000,
                    help="inputs run before the RSS baseline is taken and VmHWM reset (default 1000)")
    ap.add_argument("--start", type=int, default=0, help="first iteration number")
    ap.add_argument("--progress", action="store_true", help="print counts every 5 s")
    ap.add_argument("--replay", nargs="+", metavar="DIR",
                    help="re-run saved failures (folders, or folders of them) and exit")
    ap.add_argument("--only", type=int, metavar="I", help="re-run one iteration and exit")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--until", type=float, default=math.inf, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.replay:
        return replay(args.replay, args.hang, args.slow)
    if args.only is not None:
        return only(args)
    if args.worker:
        return worker(args)
    return supervise(args)


if __name__ == "__main__":
    sys.exit(main())
