"""What every attack module shares: the :class:`Case` record, sample bytes, zip rebuilding
and header edits, flatbuffer field positions, and :func:`exercise` (every entry point)."""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import workbench as wb
from workbench.flatbuf import FlatBuffer, Table
from workbench.source import Source

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"


@dataclass(frozen=True)
class Case:
    """One hostile file: ``build(tmp)`` writes it (returns its path; ``data``: names of files
    that ``build`` wrote next to it, attached); ``expect`` is the ArtifactError subclass it
    must raise (``None``: it must be read correctly, then ``check(art)`` holds), and
    ``match`` a substring of the message."""

    id: str
    build: Callable[[Path], Path]
    expect: type[wb.ArtifactError] | None
    match: str | None = None
    check: Callable[[wb.Artifact], None] | None = None
    data: tuple[str, ...] | None = field(default=None)


def sample(name: str) -> bytes:
    """The bytes of ``sample_models/<name>``."""
    return (SAMPLES / name).read_bytes()


def put(tmp: Path, name: str, data: bytes) -> Path:
    """``data`` written to ``tmp/name``."""
    p = tmp / name
    p.write_bytes(data)
    return p


def patch(data: bytes, at: int, fmt: str, value: int) -> bytes:
    """``data`` with ``struct.pack('<' + fmt, value)`` written at ``at``."""
    b = bytearray(data)
    struct.pack_into("<" + fmt, b, at, value)
    return bytes(b)


def u32(data: bytes, at: int) -> int:
    return struct.unpack_from("<I", data, at)[0]


# -- zip ------------------------------------------------------------------------------------------

def members(data: bytes) -> list[tuple[str, bytes]]:
    """``(name, content)`` of every member, in order."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(i.filename, z.read(i)) for i in z.infolist()]


def rezip(items: list[tuple[str, bytes]], deflate: frozenset[str] = frozenset()) -> bytes:
    """A fresh archive of ``items`` (stored, names in ``deflate`` deflated)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, content in items:
            info = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED
            z.writestr(info, content)
    return out.getvalue()


def replace_member(data: bytes, suffix: str, content: bytes | Callable[[bytes], bytes]) -> bytes:
    """The archive with the member whose name ends with ``suffix`` replaced."""
    items = []
    for name, old in members(data):
        if name.endswith(suffix):
            old = content(old) if callable(content) else content
        items.append((name, old))
    return rezip(items)


def central_entries(data: bytes) -> list[int]:
    """Offsets of the central directory headers (``PK\\1\\2``), in order."""
    eocd = data.rindex(b"PK\x05\x06")
    cd = u32(data, eocd + 16)
    out, pos = [], cd
    while data[pos:pos + 4] == b"PK\x01\x02":
        out.append(pos)
        n, m, k = struct.unpack_from("<HHH", data, pos + 28)
        pos += 46 + n + m + k
    return out


def central_of(data: bytes, suffix: str) -> int:
    """The central header of the member whose name ends with ``suffix``."""
    for pos in central_entries(data):
        n = struct.unpack_from("<H", data, pos + 28)[0]
        if data[pos + 46:pos + 46 + n].decode().endswith(suffix):
            return pos
    raise KeyError(suffix)


def local_of(data: bytes, suffix: str) -> int:
    """The local header of that member."""
    return u32(data, central_of(data, suffix) + 42)


# -- flatbuffers ----------------------------------------------------------------------------------

def root_table(path: Path, ident: bytes, name: str, base: int = 0) -> Table:
    """The verified root table of the flatbuffer at ``base`` in ``path``."""
    src = Source(path)
    return FlatBuffer(src, base, src.size, identifier=ident, name=name).root(name)


def ref(table: Table, slot: int) -> tuple[int, int]:
    """``(position of the uoffset field, absolute target)`` of reference field ``slot``."""
    pos = table.field_pos(slot, 4)
    assert pos, f"field {slot} absent"
    return pos, pos + u32(table.fb.buf, pos)


# -- the entry points -----------------------------------------------------------------------------

def exercise(path: Path, data: tuple[str, ...] | None = None) -> wb.Artifact:
    """Every entry point over ``path``: open, every frame, validate(), summary, the first 64
    tensors (a MissingDataError is allowed there: a tensor without stored bytes), and
    compare with itself. ``data`` names files next to ``path`` to attach."""
    art = wb.open(path) if data is None else wb.open(path, data=[path.parent / d for d in data])
    for name in list(art.frames):
        art.frames[name]
    art.validate()
    art.summary()
    for name in art.tensors["name"].head(64):
        try:
            art.tensor(name)
        except wb.MissingDataError:
            pass  # (planned, external without data, or in a compressed member: said so)
    wb.compare(path, path).delta()
    return art
