"""A small *verifying* flatbuffer reader over a :class:`~workbench.source.Source`.

Written from the flatbuffers wire format (all little-endian):

* a buffer starts with a ``u32`` offset to the root table, optionally followed by a
  4-byte file identifier;
* a table starts with an ``i32`` *soffset*; its vtable sits at ``table - soffset`` and is
  ``u16 vtable_size, u16 table_size, u16 field_offset[...]`` (0 = field absent);
* references (tables, vectors, strings) are ``u32`` offsets relative to where they are stored;
* a vector is ``u32 count`` followed by the elements; a string is a vector of bytes with a
  NUL terminator; a union is a ``u8`` type field followed by a reference field.

Every offset and length is checked against the window ``[base, end)`` before use, vector
lengths are bounded by the bytes that remain *before* anything is allocated, and the total
number of elements read is bounded by the window size (shared sub-structures cannot make
the reader do quadratic work). Failures raise :mod:`workbench.errors` subclasses naming the
file, the structure path and the byte offset.

Example:
    >>> from workbench.source import Source
    >>> from workbench.flatbuf import FlatBuffer
    >>> src = Source("sample_models/mlp_portable.pte")            # doctest: +SKIP
    >>> fb = FlatBuffer(src, 0, src.size, identifier=b"ET12")      # doctest: +SKIP
    >>> program = fb.root("Program")                               # doctest: +SKIP
    >>> program.u32(0)   # Program.version                         # doctest: +SKIP
    0
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from .errors import CorruptError, Finding, OutOfBoundsError, TruncatedError

if TYPE_CHECKING:
    import numpy as np

    from .source import Source

__all__ = ["FlatBuffer", "Table"]

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from
_HH = struct.Struct("<HH").unpack_from

# scalar read helpers: format char -> (size, unpack_from)
_SCALARS = {c: (struct.calcsize("<" + c), struct.Struct("<" + c).unpack_from) for c in "bB?hHiIqQfd"}
_VEC_STRUCTS: dict[tuple[str, int], struct.Struct] = {}


def _vec_struct(fmt: str, n: int) -> struct.Struct:
    key = (fmt, n)
    st = _VEC_STRUCTS.get(key)
    if st is None:
        st = struct.Struct(f"<{n}{fmt}")
        if len(_VEC_STRUCTS) < 256:
            _VEC_STRUCTS[key] = st
    return st


class FlatBuffer:
    """A verifying reader over the bytes ``[base, end)`` of a source.

    Args:
        src: the mapped file.
        base: absolute offset where the flatbuffer starts (its offsets are relative to it).
        end: absolute offset one past its last byte.
        identifier: the expected 4-byte file identifier at ``base + 4`` (checked by
            :meth:`root` when given).
        name: a label used in error messages (e.g. ``"Program"``).

    Offsets handed out by :class:`Table` methods are absolute file offsets.
    """

    __slots__ = ("src", "buf", "base", "end", "identifier", "name", "findings", "_vtables",
                 "_budget", "_noted")

    def __init__(
        self,
        src: Source,
        base: int,
        end: int,
        *,
        identifier: bytes | None = None,
        name: str = "flatbuffer",
        findings: list[Finding] | None = None,
    ) -> None:
        src.check(base, end - base, f"{name} flatbuffer")
        prefetch = getattr(src, "prefetch", None)
        if prefetch is not None:  # a remote source fetches the whole table region now
            prefetch(base, end - base)
        self.src = src
        self.buf = src.buf
        self.base = base
        self.end = end
        self.identifier = identifier
        self.name = name
        self._vtables: dict[int, tuple[int, tuple[int, ...]]] = {}
        #: oddities the official verifier accepts (dicts: severity, structure, offset,
        #: message); pass the reader's own list to collect them there.
        self.findings: list[Finding] = [] if findings is None else findings
        self._noted: set[tuple[int, int, int]] = set()  # (vtable, field, kind) already noted
        # Upper bound on vector elements read in total: a well-formed buffer stores each
        # element once, so 2x its size (+ slack) is never reached unless data is shared
        # maliciously to amplify work.
        self._budget = 2 * (end - base) + 65536

    # -- errors -----------------------------------------------------------------------------
    def _corrupt(self, what: str, offset: int, detail: str) -> CorruptError:
        return CorruptError(detail, file=self.src.path, structure=what, offset=offset)

    def _bounds(self, what: str, offset: int, length: int) -> None:
        """Raise unless ``[offset, offset+length)`` is inside the window."""
        if offset < self.base or offset > self.end:
            raise OutOfBoundsError(
                f"points outside the {self.name} flatbuffer "
                f"[0x{self.base:x}, 0x{self.end:x}) (length {length})",
                file=self.src.path, structure=what, offset=offset,
            )
        if offset + length > self.end:
            raise TruncatedError(
                f"{length} bytes run past the end of the {self.name} flatbuffer (0x{self.end:x})",
                file=self.src.path, structure=what, offset=offset,
            )

    def lenient_field(self, table: Table, i: int, off: int, size: int) -> int:
        """Field ``i`` of ``table`` at table offset ``off`` runs past the table size its
        vtable declares: check it by the official verifier's rule and note the oddity (once
        per vtable and field) as a finding. Returns its absolute offset.

        The official verifier (``VerifyField<T>``) bounds a field by the *buffer*, not by the
        table's declared size (older ExecuTorch writers declared sizes that leave out a
        trailing 8-byte field; ExecuTorch's runtime and Python deserializer read them). Its
        alignment check (``check_alignment``) is relative to the start of the verified
        buffer, which for size-prefixed buffers (ETDump) is not our window's base, and
        ExecuTorch's runtime reads unaligned fields: alignment is not checked here.
        """
        pos = table.pos + off
        what = f"{table.path}.field{i}"
        if pos + size > self.end:
            self._bounds(what, pos, size)
        vt = table.pos - _I32(self.buf, table.pos)[0]
        if off + size > table.tsize and (vt, i, 0) not in self._noted:
            self._note((vt, i, 0), "info", what, pos,
                       f"{size}-byte field at table offset {off} lies past the table's declared "
                       f"size {table.tsize} (older writers; the FlatBuffers verifier bounds it "
                       "by the buffer)")
        return pos

    def _note(self, key: tuple[int, int, int], severity: str, what: str, pos: int,
              message: str) -> None:
        self._noted.add(key)
        if len(self.findings) < 1000:
            self.findings.append(Finding(severity, what, pos, message))

    def charge(self, n: int, what: str, offset: int) -> None:
        """Account for ``n`` elements about to be read (guards against amplification)."""
        self._budget -= n
        if self._budget < 0:
            raise self._corrupt(
                what, offset,
                "structures are shared so often that reading them would take more work "
                "than the buffer's size allows (amplification)",
            )

    # -- entry points -------------------------------------------------------------------------
    def root(self, type_name: str) -> Table:
        """The root table (checks the file identifier when one was given)."""
        if self.end - self.base < 8:
            raise TruncatedError(
                f"{self.end - self.base} bytes is too short for a flatbuffer (needs 8)",
                file=self.src.path, structure=f"{self.name} header", offset=self.base,
            )
        if self.identifier is not None:
            got = bytes(self.buf[self.base + 4 : self.base + 8])
            if got != self.identifier:
                raise CorruptError(
                    f"file identifier is {got!r}, expected {self.identifier!r}",
                    file=self.src.path, structure=f"{self.name} header", offset=self.base + 4,
                )
        (rel,) = _U32(self.buf, self.base)
        return self.table_at(self.base + rel, type_name, self.base)

    def table_at(self, pos: int, path: str, ref_at: int) -> Table:
        """The table at absolute ``pos`` (referenced from ``ref_at``), verified."""
        end = self.end
        buf = self.buf
        if pos < self.base or pos + 4 > end:
            self._bounds(path, pos, 4)
        (soff,) = _I32(buf, pos)
        vt = pos - soff
        cached = self._vtables.get(vt)
        if cached is None:
            cached = self._read_vtable(vt, path, pos)
        tsize, fields = cached
        if pos + tsize > end:
            self._bounds(path, pos, tsize)
        return Table(self, pos, tsize, fields, path, -1)

    def _read_vtable(self, vt: int, path: str, pos: int) -> tuple[int, tuple[int, ...]]:
        what = f"{path} vtable"
        if vt < self.base:
            # name the table's soffset field: the vtable's own position may be negative
            raise OutOfBoundsError(
                f"vtable at {'-' if vt < 0 else ''}0x{abs(vt):x} (soffset {pos - vt}) lies "
                f"before the {self.name} flatbuffer [0x{self.base:x}, 0x{self.end:x})",
                file=self.src.path, structure=what, offset=pos)
        if vt + 4 > self.end:
            self._bounds(what, vt, 4)
        if vt & 1:
            raise self._corrupt(what, vt, "vtable is not 2-byte aligned")
        vtsize, tsize = _HH(self.buf, vt)
        if vtsize < 4 or vtsize & 1:
            raise self._corrupt(what, vt, f"vtable size {vtsize} is invalid (must be even and >= 4)")
        if tsize < 4:
            raise self._corrupt(what, vt, f"table size {tsize} is invalid (must be >= 4)")
        self._bounds(what, vt, vtsize)
        n = (vtsize - 4) // 2
        fields = _vec_struct("H", n).unpack_from(self.buf, vt + 4) if n else ()
        for i, off in enumerate(fields):
            # a field past the declared size is bounded by the buffer when read (field_pos)
            if off and off < 4:
                raise self._corrupt(
                    what, vt + 4 + 2 * i,
                    f"field {i} offset {off} overlaps the table's soffset (must be >= 4)",
                )
        result = (tsize, tuple(fields))
        if len(self._vtables) < 100_000:
            self._vtables[vt] = result
        return result

    def deref(self, at: int, what: str) -> int:
        """Follow the ``u32`` reference stored at absolute ``at``; returns the target offset."""
        (rel,) = _U32(self.buf, at)
        target = at + rel
        if target >= self.end:
            self._bounds(what, target, 4)
        return target

    def vector_at(self, pos: int, elem_size: int, what: str) -> tuple[int, int]:
        """``(first element offset, count)`` of the vector at ``pos``, bounds-checked."""
        if pos + 4 > self.end or pos < self.base:
            self._bounds(what, pos, 4)
        (count,) = _U32(self.buf, pos)
        start = pos + 4
        if count * elem_size > self.end - start:
            raise TruncatedError(
                f"vector of {count} x {elem_size}-byte elements runs past the end of the "
                f"{self.name} flatbuffer (0x{self.end:x})",
                file=self.src.path, structure=what, offset=pos,
            )
        self.charge(count, what, pos)
        return start, count

    def string_at(self, pos: int, what: str) -> str:
        """The UTF-8 string at ``pos`` (length-prefixed, NUL-terminated), decoded."""
        start, n = self.vector_at(pos, 1, what)
        if start + n >= self.end or self.buf[start + n] != 0:
            raise self._corrupt(what, pos, "string is not NUL-terminated")
        raw = self.buf[start : start + n]
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as e:
            raise self._corrupt(what, start + e.start, f"string is not valid UTF-8 ({e.reason})") from None


class Table:
    """One verified flatbuffer table. Field ``i`` is the i-th field in schema order.

    Scalar getters return the schema default (``0``/``False`` unless given) for absent fields.
    Reference getters return ``None`` for absent fields. All offsets are absolute.

    Example:
        >>> plan = program.tables(1, "ExecutionPlan")[0]   # doctest: +SKIP
        >>> plan.string(0)                                  # doctest: +SKIP
        'forward'
    """

    __slots__ = ("fb", "pos", "tsize", "fields", "_path", "_idx")

    def __init__(
        self, fb: FlatBuffer, pos: int, tsize: int, fields: tuple[int, ...], path: str, idx: int
    ) -> None:
        self.fb = fb
        self.pos = pos
        self.tsize = tsize
        self.fields = fields
        self._path = path
        self._idx = idx

    @property
    def path(self) -> str:
        """The structure path used in error messages, e.g. ``Program.execution_plan[0]``."""
        return self._path if self._idx < 0 else f"{self._path}[{self._idx}]"

    def __repr__(self) -> str:
        return f"<Table {self.path} at 0x{self.pos:x}>"

    # -- raw field access ---------------------------------------------------------------
    def field_pos(self, i: int, size: int) -> int:
        """Absolute offset of field ``i`` (0 when absent).

        The official verifier's rule: the field lies within the buffer (an error
        otherwise); one past the table's declared size is a finding
        (:meth:`FlatBuffer.lenient_field`).
        """
        fields = self.fields
        if i >= len(fields):
            return 0
        off = fields[i]
        if not off:
            return 0
        pos = self.pos + off
        if off + size > self.tsize:
            return self.fb.lenient_field(self, i, off, size)
        return pos

    def has(self, i: int) -> bool:
        """Whether field ``i`` is present."""
        return i < len(self.fields) and self.fields[i] != 0

    def scalar(self, i: int, fmt: str, default: int | float | bool = 0) -> int | float | bool:
        """Scalar field ``i`` with struct format char ``fmt`` (``'I'``, ``'q'``, ``'d'`` ...)."""
        size, unpack = _SCALARS[fmt]
        p = self.field_pos(i, size)
        return unpack(self.fb.buf, p)[0] if p else default

    def u8(self, i: int, default: int = 0) -> int:
        """``ubyte`` field ``i``."""
        return self.scalar(i, "B", default)  # type: ignore[return-value]

    def i8(self, i: int, default: int = 0) -> int:
        """``byte`` field ``i``."""
        return self.scalar(i, "b", default)  # type: ignore[return-value]

    def bool(self, i: int, default: bool = False) -> bool:
        """``bool`` field ``i``."""
        return bool(self.scalar(i, "B", default))

    def i32(self, i: int, default: int = 0) -> int:
        """``int`` field ``i``."""
        return self.scalar(i, "i", default)  # type: ignore[return-value]

    def u32(self, i: int, default: int = 0) -> int:
        """``uint`` field ``i``."""
        return self.scalar(i, "I", default)  # type: ignore[return-value]

    def i64(self, i: int, default: int = 0) -> int:
        """``long`` field ``i``."""
        return self.scalar(i, "q", default)  # type: ignore[return-value]

    def u64(self, i: int, default: int = 0) -> int:
        """``ulong`` field ``i``."""
        return self.scalar(i, "Q", default)  # type: ignore[return-value]

    def f64(self, i: int, default: float = 0.0) -> float:
        """``double`` field ``i``."""
        return self.scalar(i, "d", default)  # type: ignore[return-value]

    def struct(self, i: int, size: int) -> int:
        """Absolute offset of an inline struct field of ``size`` bytes (0 when absent)."""
        return self.field_pos(i, size)

    # -- references -----------------------------------------------------------------------
    def _ref(self, i: int, what: str) -> int:
        p = self.field_pos(i, 4)
        return self.fb.deref(p, what) if p else 0

    def string(self, i: int, name: str = "") -> str | None:
        """String field ``i`` (``None`` when absent)."""
        what = f"{self.path}.{name or f'field{i}'}"
        p = self._ref(i, what)
        return self.fb.string_at(p, what) if p else None

    def table(self, i: int, name: str = "") -> Table | None:
        """Sub-table field ``i`` (``None`` when absent)."""
        what = f"{self.path}.{name or f'field{i}'}"
        p = self._ref(i, what)
        return self.fb.table_at(p, what, self.pos) if p else None

    def vector(self, i: int, elem_size: int, name: str = "") -> tuple[int, int]:
        """``(first element offset, count)`` of vector field ``i``; ``(0, 0)`` when absent."""
        what = f"{self.path}.{name or f'field{i}'}"
        p = self._ref(i, what)
        return self.fb.vector_at(p, elem_size, what) if p else (0, 0)

    def scalars(self, i: int, fmt: str, name: str = "") -> tuple:
        """Vector field ``i`` of scalars (struct format char ``fmt``) as a tuple."""
        size = _SCALARS[fmt][0]
        start, n = self.vector(i, size, name)
        if not n:
            return ()
        return _vec_struct(fmt, n).unpack_from(self.fb.buf, start)

    def array(self, i: int, dtype: str, name: str = "") -> np.ndarray:
        """Vector field ``i`` of scalars as a zero-copy read-only numpy view (dtype like ``'<u8'``)."""
        import numpy as np

        dt = np.dtype(dtype)
        start, n = self.vector(i, dt.itemsize, name)
        if not n:
            return np.empty(0, dt)
        return np.frombuffer(self.fb.buf, dt, n, start)

    def tables(self, i: int, name: str = "") -> list[Table]:
        """Vector field ``i`` of tables as a list of verified tables (empty when absent)."""
        what = f"{self.path}.{name or f'field{i}'}"
        start, n = self.vector(i, 4, name)
        if not n:
            return []
        fb = self.fb
        buf = fb.buf
        end = fb.end
        base = fb.base
        vtables = fb._vtables
        rels = _vec_struct("I", n).unpack_from(buf, start)
        out = []
        append = out.append
        at = start
        for k, rel in enumerate(rels):
            pos = at + rel
            at += 4
            if pos + 4 > end or pos < base:
                fb._bounds(f"{what}[{k}]", pos, 4)
            (soff,) = _I32(buf, pos)
            vt = pos - soff
            cached = vtables.get(vt)
            if cached is None:
                cached = fb._read_vtable(vt, f"{what}[{k}]", pos)
            tsize, fields = cached
            if pos + tsize > end:
                fb._bounds(f"{what}[{k}]", pos, tsize)
            append(Table(fb, pos, tsize, fields, what, k))
        return out

    def strings(self, i: int, name: str = "") -> list[str]:
        """Vector field ``i`` of strings."""
        what = f"{self.path}.{name or f'field{i}'}"
        start, n = self.vector(i, 4, name)
        fb = self.fb
        return [fb.string_at(fb.deref(start + 4 * k, f"{what}[{k}]"), f"{what}[{k}]") for k in range(n)]

    def union(self, type_field: int, n_types: int, name: str = "") -> tuple[int, Table | None]:
        """Union stored as ``u8`` type at field ``type_field`` and its value at the next field.

        Returns ``(type, table)``; type 0 (NONE) gives ``(0, None)``. A type ``>= n_types``
        is a :class:`CorruptError`.
        """
        t = self.u8(type_field)
        what = f"{self.path}.{name or f'field{type_field + 1}'}"
        if t == 0:
            return 0, None
        if t >= n_types:
            raise self.fb._corrupt(
                what, self.field_pos(type_field, 1), f"union type {t} is unknown (max {n_types - 1})"
            )
        p = self._ref(type_field + 1, what)
        if not p:
            raise self.fb._corrupt(what, self.pos, f"union type {t} is set but its value is missing")
        return t, self.fb.table_at(p, what, self.pos)
