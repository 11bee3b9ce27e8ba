"""Weights and constants configs (``data/weights/<model>_weights_config.json``,
``data/constants/<model>_constants_config.json``: FQN -> storage member and view), read into
tensor rows.

Two paths give the same rows: :func:`_canonical_config`, regular expressions over a document
in torch's exact output form (the fast path), and :func:`_config_json`, :func:`json.loads` and
a walk over the entries (the general path, which also raises the precise error). Tests turn
the fast path off and require identical frames.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import TYPE_CHECKING, Any, NamedTuple

from ..._fmt import escape
from ..._json import loads as checked_loads
from ...errors import CorruptError, OutOfBoundsError
from .._zip import ZipDirectory, ZipEntry
from .columns import TensorRow
from .schema import (
    AS_INT,
    CONFIG_KEY,
    CONFIG_KINDS,
    DATA_DIR,
    DTYPE,
    IS_PARAM,
    ITEMSIZE,
    LIMIT,
    METADATA_LIMIT,
    PATH_NAME,
    REQUIRES_GRAD,
    SERDE_DTYPES,
    SIZES,
    STORAGE_COMPRESSED,
    STORAGE_OFFSET,
    STORAGE_PICKLE,
    STORAGE_ZIP,
    STRIDES,
    TENSOR_META,
    USE_PICKLE,
)

if TYPE_CHECKING:
    from .archive import Archive

_INT_ONLY = frozenset({int})

def contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """torch's ``is_contiguous``: row-major strides, ignoring dimensions of size 1."""
    if 0 in shape:
        return True
    expected = 1
    for n, st in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if st != expected:
                return False
            expected *= n
    return True


def extent(shape: tuple[int, ...], strides: tuple[int, ...], storage_offset: int) -> int:
    """Elements of storage a strided view reaches (0 for an empty view)."""
    if 0 in shape:
        return 0
    return storage_offset + 1 + sum((n - 1) * st for n, st in zip(shape, strides))


def numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _layout_facts(code: Any, shape: tuple, strides: tuple, offset: Any
                  ) -> tuple[str, int, int, bool, int] | None:
    """``(dtype, nbytes, bytes of storage reached, contiguous, offset in bytes)`` of a valid
    raw view, or ``None`` (then the slow path reports what is wrong).

    Example:
        >>> _layout_facts(7, (2, 3), (3, 1), 0)
        ('float32', 24, 24, True, 0)
    """
    if type(code) is not int or type(offset) is not int or offset < 0 or len(shape) != len(strides):
        return None
    if not {*map(type, shape + strides)} <= _INT_ONLY or min(shape + strides, default=0) < 0:
        return None
    dtype = SERDE_DTYPES.get(code)
    if dtype is None:
        return None
    itemsize = ITEMSIZE[dtype]
    count = numel(shape)
    reach = 0 if count == 0 else offset + 1 + sum([(n - 1) * t for n, t in zip(shape, strides)])
    if max(count, reach, offset) * itemsize >= LIMIT:
        return None
    return dtype, count * itemsize, reach * itemsize, contiguous(shape, strides), offset * itemsize


#: (at most 19 digits: longer numbers go to the JSON path, which bounds them)
_NUM = rb"(?:0|[1-9][0-9]{0,18})"
_AS_INTS = rb'((?:\{"as_int": ' + _NUM + rb'\}(?:, \{"as_int": ' + _NUM + rb'\})*)?)'
#: One config entry as torch writes it, loosely: ``"<fqn>": {"path_name": "<name>"<tail>}}``
#: and the separator; the tail is checked on its own (:data:`_CANONICAL_TAIL`).
# The FQN group runs of non-quote bytes are matched atomically ((?=(x*))\2: no backtracking
# into them), so a long string elsewhere in the document costs one scan, not one per byte.
# findall gives (fqn, run, run, path_name, tail).
_CANONICAL_ENTRY = re.compile(rb'"((?=([^"\\]*))\2(?:\\.(?=([^"\\]*))\3)*)": '
                              rb'\{"path_name": "([^"\\/]*)"([^}]*(?:\}[^}]+)*)\}\}(?:, |\}\}\Z)')
#: Bytes of a :data:`_CANONICAL_ENTRY` match outside its three groups.
_ENTRY_FIXED = len(b'"": {"path_name": ""}}, ')
#: The rest of an entry exactly as torch writes it (json.dumps defaults, raw tensor storage).
_CANONICAL_TAIL = re.compile(
    rb', "is_param": (true|false), "use_pickle": false, "tensor_meta": \{"dtype": (' + _NUM
    + rb'), "sizes": \[' + _AS_INTS + rb'\], "requires_grad": (true|false), "device": '
    rb'\{"type": "[^"\\]*", "index": (?:null|' + _NUM + rb')\}, "strides": \[' + _AS_INTS
    + rb'\], "storage_offset": \{"as_int": (' + _NUM + rb')\}, "layout": ' + _NUM)
_CONFIG_HEAD = b'{"config": {'
_DIGITS = re.compile(rb"[0-9]+")

class _Layout(NamedTuple):
    """Everything about a raw config entry but its FQN and member (shared by the entries
    that agree on it); ``reach`` and ``offset_bytes`` are in bytes of the storage."""

    kind: str
    dtype: str
    nbytes: int
    reach: int
    contiguous: bool
    offset_bytes: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    storage_offset: int
    requires_grad: bool


def _layout_of(kind: str, facts: tuple, shape: tuple, strides: tuple, off: int,
               requires_grad: bool) -> _Layout:
    """A :class:`_Layout` from :func:`_layout_facts`' tuple and the rest."""
    return _Layout(kind, *facts, shape, strides, off, requires_grad)


class _ConfigRows(NamedTuple):
    """The raw-tensor entries of one weights/constants config, columnar.

    ``fqns`` and ``members`` (member indices) have one item per entry; ``layout[k]`` is the
    index in ``layouts`` of entry ``k``'s :class:`_Layout`.
    """

    fqns: list[str]
    members: list[int]
    layout: list[int]
    layouts: list[_Layout]


def _decode_names(items: tuple[bytes, ...] | list[bytes], escaped: bool) -> list[str]:
    """UTF-8 names of a config, all at once (``\\`` escapes decoded when ``escaped``).

    Raises UnicodeDecodeError / ValueError for an invalid name."""
    joined = b"\0".join(items)  # (no NUL inside: control characters were rejected)
    if escaped and b"\\" in joined:
        return [json.loads(b'"' + s + b'"') if b"\\" in s else s.decode() for s in items]
    return joined.decode().split("\0") if items else []


def _canonical_config(raw: bytes | memoryview, prefix: str, kinds: tuple[str, str],
                      zd: ZipDirectory) -> _ConfigRows | None:
    """Config entries of a document in torch's exact output form, parsed by regular
    expressions over the whole document and over each *distinct* entry tail (much faster
    than :func:`json.loads` plus a walk over the dicts), or ``None`` when the document is not
    in that form, so the general path decides.

    Exact: the matches must tile the whole document, every tail must match the canonical
    form, FQNs must be unique (``json.loads`` keeps the last of duplicate keys) and every
    value must be valid; anything else returns ``None``. Every member must exist and every
    view be valid and fit its member, else ``None`` too (the JSON path then raises the
    precise error).

    Example:
        >>> _canonical_config(b'{"config": {}}', "", ("buffer", "parameter"), None) is None
        True
    """
    import numpy as np

    if raw[:len(_CONFIG_HEAD)] != _CONFIG_HEAD:
        return None
    u8 = np.frombuffer(raw, np.uint8)
    if u8.min() < 0x20:
        return None  # (control characters: invalid inside JSON strings; whitespace: not canonical)
    if u8.max() >= 0x80:
        try:  # json.loads rejects what is not UTF-8 anywhere in the document
            codecs.decode(raw, "utf-8")
        except UnicodeDecodeError:
            return None
    found = _CANONICAL_ENTRY.findall(raw, len(_CONFIG_HEAD))
    if not found:
        return None
    fqn_raw, _, _, path_raw, tails = zip(*found)
    n = len(found)
    if sum(map(len, fqn_raw)) + sum(map(len, path_raw)) + sum(map(len, tails)) + \
            n * _ENTRY_FIXED != len(raw) - len(_CONFIG_HEAD):
        return None  # the matches do not tile the document
    ids: dict[bytes, int] = dict(zip(dict.fromkeys(tails), range(n)))
    dims: dict[bytes, tuple[int, ...]] = {}
    layouts: list[_Layout] = []
    for tail in ids:
        m = _CANONICAL_TAIL.fullmatch(tail)
        if m is None:
            return None
        is_param, code, sizes, requires_grad, strides, off = m.groups()
        shape = dims.get(sizes)
        if shape is None:
            shape = dims[sizes] = tuple(map(int, _DIGITS.findall(sizes)))
        st = dims.get(strides)
        if st is None:
            st = dims[strides] = tuple(map(int, _DIGITS.findall(strides)))
        facts = _layout_facts(int(code), shape, st, int(off))
        if facts is None:
            return None
        layouts.append(_layout_of(kinds[is_param == b"true"], facts, shape, st, int(off),
                                  requires_grad == b"true"))
    try:
        fqns = _decode_names(fqn_raw, escaped=True)
        paths = _decode_names(path_raw, escaped=False)
    except (UnicodeDecodeError, ValueError):
        return None
    if len(set(fqns)) != n:
        return None
    members = list(map(zd.index.get, map(prefix.__add__, paths)))
    if None in members:
        return None
    layout = list(map(ids.__getitem__, tails))
    reach = np.array([lay.reach for lay in layouts], np.int64)[layout]
    if (reach > zd.arrays["file_size"][members]).any():
        return None
    return _ConfigRows(fqns, members, layout, layouts)


def _as_int(v: Any) -> int | None:
    """``{"as_int": n}`` -> n (``None`` for symbolic or malformed values)."""
    if isinstance(v, dict) and len(v) == 1:
        n = v.get(AS_INT)
        if isinstance(n, int) and not isinstance(n, bool):
            return n
    return None



# ---- reading a config into the archive's rows

def read_config(arc: Archive, model: str, kind_dir: str, cfg: ZipEntry) -> None:
    """Rows for every entry of a weights/constants config (``FQN -> payload meta``): the
    fast path when the document is in torch's exact form, else the general path."""
    raw = arc.zip.content(cfg, METADATA_LIMIT)  # (zero-copy when stored)
    folder = f"{DATA_DIR}/{kind_dir}/"
    prefix = f"{arc.root}/{folder}" if arc.root else folder
    kinds = CONFIG_KINDS[kind_dir]
    block = _canonical_config(raw, prefix, kinds, arc.zip)
    if block is None:
        block = _config_json(arc, model, kind_dir, cfg, raw, prefix, kinds)
    _add_rows(arc, model, cfg, block)


def _add_rows(arc: Archive, model: str, cfg: ZipEntry, block: _ConfigRows) -> None:
    """The raw-tensor entries of one config added to the archive's rows, column by column
    (bounds checked against each storage member at once)."""
    import numpy as np

    fqns, members, layout, layouts = block
    n = len(fqns)
    if not n:
        return
    arrays = arc.zip.arrays
    idx = np.array(members, np.int64)

    def per_layout(field: str) -> list:
        values = [getattr(lt, field) for lt in layouts]
        return list(map(values.__getitem__, layout))

    reach = np.array(per_layout("reach"), np.int64)
    file_size = arrays["file_size"][idx]
    over = np.flatnonzero(reach > file_size)
    if over.size:
        k = int(over[0])
        member = arc.zip.entry(members[k])
        raise OutOfBoundsError(
            f"the view reaches {int(reach[k])} bytes of storage, member {member.name!r} "
            f"holds {member.file_size}", file=arc.path,
            structure=f"{cfg.name} config[{fqns[k]!r}]", offset=member.data_offset)
    compressed = arrays["compressed"][idx]
    empty = ~compressed & (file_size == 0)
    offsets = arrays["data_offset"][idx] + np.array(per_layout("offset_bytes"), np.int64)
    if compressed.any() or empty.any():
        storage = np.where(compressed, STORAGE_COMPRESSED, STORAGE_ZIP).tolist()
        offset: list = offsets.tolist()
        for k in np.flatnonzero(compressed | empty).tolist():
            offset[k] = None
        for k in np.flatnonzero(empty).tolist():
            arc.find("info", f"{cfg.name} config[{fqns[k]!r}]",
                       "storage member is empty: torch.export.load makes zeros")
    else:
        storage, offset = [STORAGE_ZIP] * n, offsets.tolist()
    arc.add_rows(TensorRow(
        fqn=fqns, model=[model] * n, kind=per_layout("kind"), dtype=per_layout("dtype"),
        shape=per_layout("shape"), strides=per_layout("strides"),
        storage_offset=per_layout("storage_offset"), nbytes=per_layout("nbytes"),
        storage=storage, offset=offset, requires_grad=per_layout("requires_grad"),
        member=members, pickled=[False] * n, contiguous=per_layout("contiguous"),
        storage_key=members))
    arc.claim_many(members, model, fqns)


def _config_json(arc: Archive, model: str, kind_dir: str, cfg: ZipEntry, raw: bytes | memoryview,
                 prefix: str, kinds: tuple[str, str]) -> _ConfigRows:
    """Config entries via :func:`json.loads`: raw tensors as columns for :func:`_add_rows`;
    pickled and unusual entries are handled (or rejected) by ``_entry_slow``."""
    doc = checked_loads(raw, file=arc.path, structure=f"zip member {cfg.name!r}",
                        offset=cfg.data_offset if not cfg.compressed else None)
    entries = doc.get(CONFIG_KEY) if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        raise CorruptError("expected an object with a 'config' object", file=arc.path,
                           structure=f"zip member {cfg.name!r}", offset=cfg.data_offset)
    index = arc.zip.index
    out = _ConfigRows([], [], [], [])
    ids: dict[_Layout, int] = {}
    facts_of: dict[tuple, tuple | None] = {}  # (dtype, sizes, strides, offset) -> facts
    for fqn, meta in entries.items():
        # The shape torch writes; anything else goes to _entry_slow, which accepts what
        # is optional and raises a precise error for what is wrong.
        try:
            path_name = meta[PATH_NAME]
            member = index[prefix + path_name]
            tm = meta[TENSOR_META]
            shape = tuple([d[AS_INT] for d in tm[SIZES]])
            st = tuple([d[AS_INT] for d in tm[STRIDES]])
            key = (tm[DTYPE], shape, st, tm[STORAGE_OFFSET][AS_INT])
            facts = facts_of.get(key)
            if facts is None and key not in facts_of:
                facts = facts_of[key] = _layout_facts(*key)
            ok = facts is not None and meta[USE_PICKLE] is False and "/" not in path_name
            kind = kinds[meta[IS_PARAM] is True]
        except (KeyError, TypeError, IndexError):
            ok = False
        if not ok:
            _entry_slow(arc, model, kind_dir, cfg, fqn, meta)
            continue
        lt = _layout_of(kind, facts, shape, st, key[3], tm.get(REQUIRES_GRAD) is True)
        k = ids.get(lt)
        if k is None:
            k = ids[lt] = len(out.layouts)
            out.layouts.append(lt)
        out.fqns.append(fqn)
        out.members.append(member)
        out.layout.append(k)
    return out


def _entry_slow(arc: Archive, model: str, kind_dir: str, cfg: ZipEntry, fqn: str,
                meta: Any) -> None:
    """One config entry, validated field by field (pickled entries, optional fields)."""
    where = f"{cfg.name} config[{fqn!r}]"

    def bad(msg: str) -> CorruptError:
        return CorruptError(msg, file=arc.path, structure=where, offset=cfg.data_offset)

    if not isinstance(meta, dict) or not isinstance(meta.get(PATH_NAME), str):
        raise bad(f"expected an object with a string {PATH_NAME!r}")
    path_name = meta[PATH_NAME]
    member = arc.member(f"{DATA_DIR}/{kind_dir}/{path_name}")
    if member is None or "/" in path_name:
        raise bad(f"path_name {escape(path_name)!r} names no member of {DATA_DIR}/{kind_dir}/")
    if not isinstance(meta.get(USE_PICKLE, False), bool):
        raise bad(f"{USE_PICKLE} is not a boolean (torch would unpickle the member when truthy)")
    use_pickle = meta.get(USE_PICKLE) is True
    kind = CONFIG_KINDS[kind_dir][meta.get(IS_PARAM) is True]
    row: dict[str, Any] = {
        "fqn": fqn, "model": model, "kind": kind, "dtype": None, "shape": None, "strides": None,
        "storage_offset": None, "nbytes": 0, "storage": STORAGE_ZIP, "offset": None,
        "requires_grad": None, "member": member.index, "pickled": use_pickle,
        "contiguous": None, "storage_key": member.index,
    }
    tm = meta.get(TENSOR_META)
    if tm is not None:
        if not isinstance(tm, dict):
            raise bad("tensor_meta is not an object")
        code = tm.get(DTYPE)
        dtype = SERDE_DTYPES.get(code) if type(code) is int else None
        if dtype is None:
            raise bad(f"tensor_meta.dtype {code!r} is not a known ScalarType")
        sizes = tm.get(SIZES)
        strides = tm.get(STRIDES)
        if not isinstance(sizes, list) or not isinstance(strides, list) or \
                len(sizes) != len(strides):
            raise bad("tensor_meta.sizes/strides are not lists of the same length")
        shape = tuple(_as_int(v) for v in sizes)
        st = tuple(_as_int(v) for v in strides)
        off = _as_int(tm.get(STORAGE_OFFSET, {AS_INT: 0}))
        if None in shape or None in st or off is None:
            raise bad("sizes, strides and storage_offset must be {'as_int': n} integers")
        if any(n < 0 for n in shape) or any(s < 0 for s in st) or off < 0:
            raise bad(f"negative size, stride or storage offset ({list(shape)}, {list(st)}, {off})")
        itemsize = ITEMSIZE[dtype]
        if max(numel(shape), extent(shape, st, off), off) * itemsize >= LIMIT:
            raise bad(f"sizes {list(shape)} / strides {list(st)} / offset {off} are too large")
        row.update(dtype=dtype, shape=shape, strides=st, storage_offset=off,
                   nbytes=numel(shape) * itemsize, contiguous=contiguous(shape, st),
                   requires_grad=tm.get(REQUIRES_GRAD) is True)
        if not use_pickle:
            reach = extent(shape, st, off) * itemsize
            if reach > member.file_size:
                raise OutOfBoundsError(
                    f"the view reaches {reach} bytes of storage, member "
                    f"{member.name!r} holds {member.file_size}", file=arc.path,
                    structure=where, offset=member.data_offset)
            if member.compressed:
                row["storage"] = STORAGE_COMPRESSED
            elif member.file_size == 0:
                arc.find("info", where, "storage member is empty: torch.export.load "
                           "makes zeros")
            else:
                row["offset"] = member.data_offset + off * itemsize
    elif not use_pickle:
        raise bad("tensor_meta is missing for a raw (use_pickle: false) entry")
    if use_pickle:
        row["storage"] = STORAGE_PICKLE
    arc.claim(member.index, model, fqn, pickled=use_pickle)
    if tm is not None:  # custom objects (no tensor_meta) are members, not tensors
        arc.add_row(TensorRow(**row))

