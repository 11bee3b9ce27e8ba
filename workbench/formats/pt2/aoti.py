"""AOTInductor packages: the constants that the generated C++ wrapper declares
(``constants_info_[i].<field> = <value>;``), located in place in the shared object (between
two ELF symbols) or in the weights blob. Nothing is compiled, loaded or executed."""

from __future__ import annotations

import codecs
import re
import struct
from typing import TYPE_CHECKING, Any

from ..._fmt import escape
from ...errors import CorruptError
from .._zip import ZipEntry
from .columns import Model, TensorRow
from .config import contiguous, extent, numel
from .elf import elf_symbol_range
from .schema import (
    AOTI_ALIGN,
    AOTI_BLOB_SUFFIX,
    AOTI_CPP_SUFFIX,
    AOTI_DEVICE_KEY,
    AOTI_METADATA_SUFFIX,
    AOTI_SO_SUFFIX,
    AOTI_WRAPPER_SUFFIX,
    CINFO_BOOL_FIELDS,
    CINFO_INT_FIELDS,
    CINFO_INT_LIST_FIELDS,
    CINFO_NAMED_FIELDS,
    CINFO_STRING_FIELDS,
    CONSTANT_KIND,
    CONSTANTS_END,
    CONSTANTS_START,
    ITEMSIZE,
    LIMIT,
    MODEL_AOTI,
    STORAGE_BLOB,
    STORAGE_FOLDED,
    STORAGE_SO,
)

if TYPE_CHECKING:
    from .archive import Archive

_CINFO = re.compile(rb"constants_info_\[(\d+)\]\.(\w+)\s*=\s*([^;\n]*);")
_MODEL_BASE = re.compile(rb"AOTInductorModelBase\(\s*(\d+),\s*(\d+),\s*(\d+),")
_INTS = re.compile(rb"-?\d+")
#: One escape sequence of a C string literal (a backslash and what follows it, if anything).
_ESCAPE = re.compile(rb"\\(.?)", re.DOTALL)
_ESCAPED = frozenset(b"\\'\"abfnrtvx01234567\n")


def cvalue(field: str, value: bytes) -> Any:
    """Decode one ``constants_info_[i].<field> = <value>;`` right-hand side to the type the
    field has (``str``, ``int``, ``bool``, tuple of ``int``), or ``None`` when it does not
    have that form.

    Example:
        >>> cvalue("shape", b"{32, 16}"), cvalue("dtype", b"cached_torch_dtype_float32")
        ((32, 16), 'float32')
    """
    v = value.strip()
    if field in CINFO_STRING_FIELDS:
        if len(v) < 2 or not (v.startswith(b'"') and v.endswith(b'"')):
            return None
        if b"\\" in v and any(not m.group(1) or m.group(1)[0] not in _ESCAPED
                              for m in _ESCAPE.finditer(v, 1, len(v) - 1)):
            return None  # not a C escape: escape_decode would warn (and, some day, fail)
        try:
            return codecs.escape_decode(v[1:-1])[0].decode("utf-8", "replace")
        except ValueError:
            return None
    if field in CINFO_INT_LIST_FIELDS:
        if not re.fullmatch(rb"\{\s*(?:-?\d+\s*(?:,\s*-?\d+\s*)*,?\s*)?\}", v):
            return None
        return tuple(int(x) for x in _INTS.findall(v))
    if field in CINFO_INT_FIELDS:
        return int(v) if re.fullmatch(rb"-?\d{1,20}", v) else None
    if field in CINFO_BOOL_FIELDS:
        return {b"true": True, b"false": False}.get(v)
    prefix = CINFO_NAMED_FIELDS.get(field)
    if prefix is not None:
        k = v.find(prefix)
        return re.match(rb"\w*", v[k + len(prefix):]).group().decode() if k >= 0 else None
    return None


class AotiPackage:
    """One ``data/aotinductor/<model>/`` folder: the wrapper's constants, located in place."""

    def __init__(self, arc: Archive, model: str, members: list[ZipEntry]) -> None:
        self.arc = arc
        self.model = model
        self.members = members

    def _pick(self, suffix: str, stem: str | None) -> ZipEntry | None:
        cands = [e for e in self.members if e.name.endswith(suffix)]
        if stem is not None:
            for e in cands:
                if e.name.startswith(stem):
                    return e
        return cands[0] if cands else None

    def read(self) -> None:
        """Add this package's model row and one tensor row per declared constant to the
        archive."""
        arc = self.arc
        where = f"AOTInductor model {escape(self.model)!r}"
        wrapper = self._pick(AOTI_WRAPPER_SUFFIX, None) or self._pick(AOTI_CPP_SUFFIX, None)
        stem = wrapper.name[:-len(AOTI_CPP_SUFFIX)] if wrapper is not None else None
        so = self._pick(AOTI_SO_SUFFIX, stem)
        blob = self._pick(AOTI_BLOB_SUFFIX, stem)
        info = Model(name=self.model, kind=MODEL_AOTI, member=so.name if so is not None else None)
        meta = self._pick(AOTI_METADATA_SUFFIX, stem)
        if meta is not None:
            try:
                doc = arc.json(meta)
                device = doc.get(AOTI_DEVICE_KEY) if isinstance(doc, dict) else None
                if device is not None and not isinstance(device, str):
                    arc.find("warning", where, f"metadata: {AOTI_DEVICE_KEY!r} is not a string",
                             meta.data_offset)
                    device = None
                info.device = device
            except CorruptError as exc:
                arc.find("warning", where, f"metadata: {exc.detail}", meta.data_offset)
        arc.add_model(self.model, info)
        if wrapper is None:
            arc.find("warning", where, "no generated wrapper source: constants cannot be listed")
            return
        consts = self._constants(arc.text(wrapper), wrapper, info)
        info.parameters = sum(c.get("type") == "Parameter" for c in consts)
        info.buffers = sum(c.get("type") == "Buffer" for c in consts)
        info.constants = len(consts) - info.parameters - info.buffers
        if not consts:
            return
        stored = [c for c in consts if not c.get("from_folded")]
        all_cuda = bool(stored) and all(c.get("device_type") == "cuda" for c in stored)
        pos = 0
        for c in stored:
            c["blob_offset"] = pos
            size = c.get("data_size") or 0
            pos += size if all_cuda else -(-size // AOTI_ALIGN) * AOTI_ALIGN
        storage, base, holder = self._locate(so, blob, pos, where)
        for c in consts:
            self._add(c, storage, base, holder, where)

    def _add(self, c: dict[str, Any], storage: str, base: int | None, holder: ZipEntry | None,
             where: str) -> None:
        """The tensor row of one declared constant ``c`` (its ``constants_info_`` fields)."""
        arc = self.arc
        dtype = c.get("dtype")
        shape = tuple(c.get("shape") or ())
        strides = tuple(c.get("stride") or ())
        itemsize = ITEMSIZE.get(dtype) if dtype else None
        folded = bool(c.get("from_folded"))
        fqn = c.get("original_fqn") or c.get("name") or f"constant_{c['index']}"
        offset = None
        if not folded and base is not None and itemsize and c.get("offset") is not None \
                and c.get("layout", "strided") == "strided" and len(shape) == len(strides):
            reach = extent(shape, strides, c["offset"]) * itemsize
            if reach <= (c.get("data_size") or 0):
                offset = base + c["blob_offset"] + c["offset"] * itemsize
            else:
                arc.find("warning", f"{where} constant {escape(fqn)!r}",
                         f"view reaches {reach} bytes, data_size is {c.get('data_size')}")
        if holder is not None and not folded:
            arc.use(holder.index, fqn)
        arc.add_row(TensorRow(
            fqn=fqn, model=self.model, kind=CONSTANT_KIND.get(c.get("type"), "constant"),
            dtype=dtype, shape=shape, strides=strides, storage_offset=c.get("offset"),
            nbytes=numel(shape) * itemsize if itemsize else 0,
            storage=STORAGE_FOLDED if folded else storage, offset=offset, requires_grad=None,
            member=None if folded or holder is None else holder.index, pickled=False,
            contiguous=contiguous(shape, strides) if len(shape) == len(strides) else None,
            storage_key=f"{self.model}/aoti/{c['index']}"))

    def _constants(self, src: bytes, wrapper: ZipEntry, info: Model) -> list[dict[str, Any]]:
        """The declared constants, by index: each a dict of its decoded ``constants_info_``
        fields (and ``index``); inconsistent ones are skipped with a finding."""
        arc = self.arc
        m = _MODEL_BASE.search(src)
        declared = None
        if m is not None:
            n_in, n_out, n_const = (int(x) for x in m.groups())
            if max(n_in, n_out, n_const) < LIMIT:
                info.inputs, info.outputs, declared = n_in, n_out, n_const
        by_index: dict[int, dict[str, Any]] = {}
        for k, field, value in _CINFO.findall(src):
            i = int(k)
            if declared is not None and i >= declared:
                raise CorruptError(f"constants_info_[{i}] is out of range ({declared} constants)",
                                   file=arc.path, structure=f"zip member {wrapper.name!r}",
                                   offset=wrapper.data_offset)
            f = field.decode()
            by_index.setdefault(i, {"index": i})[f] = cvalue(f, value)
        if declared is not None and len(by_index) != declared:
            arc.find("warning", f"zip member {escape(wrapper.name)!r}",
                      f"{declared} constants declared, {len(by_index)} described")
        out = []
        for i in sorted(by_index):
            c = by_index[i]
            shape, stride = c.get("shape"), c.get("stride")
            itemsize = ITEMSIZE.get(c.get("dtype") or "", 1)
            numbers = [*(shape or ()), *(stride or ()), c.get("offset") or 0,
                       c.get("data_size") or 0]
            if shape is None or stride is None or len(shape) != len(stride) or \
                    min(numbers) < 0 or max(numbers) >= LIMIT or numel(shape) * itemsize >= LIMIT:
                arc.find("warning", f"zip member {escape(wrapper.name)!r}",
                          f"constants_info_[{i}] has a negative, oversized or inconsistent "
                         "shape, stride, offset or data_size: skipped", wrapper.data_offset)
                continue
            out.append(c)
        return out

    def _locate(self, so: ZipEntry | None, blob: ZipEntry | None, total: int,
                where: str) -> tuple[str, int | None, ZipEntry | None]:
        """Where the constants are: ``(storage, absolute base offset or None, member)``."""
        arc = self.arc
        region = None
        if so is not None and not so.compressed:
            region = elf_symbol_range(arc.src, so.data_offset, so.compressed_size,
                                      CONSTANTS_START, CONSTANTS_END)
        if blob is not None:
            if blob.compressed:
                return STORAGE_BLOB, None, blob
            if blob.compressed_size < total:
                arc.find("warning", where, f"constants need {total} bytes, the blob holds "
                          f"{blob.compressed_size}", blob.data_offset)
                return STORAGE_BLOB, None, blob
            return STORAGE_BLOB, blob.data_offset, blob
        if so is None:
            arc.find("warning", where, "no shared object: constant offsets are unknown")
            return STORAGE_SO, None, None
        if region is None:
            arc.find("info", where, "constants region of the shared object not found "
                      "(not an ELF64 file with _binary_constants_bin_start): offsets unknown")
            return STORAGE_SO, None, so
        start, end = region
        if end - start >= total:
            arc.add_so_region(so.index, start, start + total)
            return STORAGE_SO, start, so
        if end - start == 16:
            # Large weights (> 2 GB) are appended to the .so, page-aligned, followed by a magic
            # number; the embedded 16 bytes are (size + 8, magic).
            size_plus, magic = struct.unpack_from("<qq", arc.src.buf, start)
            tail = so.data_end - 8
            if size_plus - 8 == total and tail - total >= so.data_offset and \
                    struct.unpack_from("<q", arc.src.buf, tail)[0] == magic:
                arc.add_so_region(so.index, tail - total, so.data_end)
                return STORAGE_SO, tail - total, so
        arc.find("warning", where, f"constants need {total} bytes, the shared object's "
                  f"constants region holds {end - start}: offsets unknown", start)
        return STORAGE_SO, None, so
