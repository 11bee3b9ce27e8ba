"""PyTorch ``.pt2`` archives: ``torch.export.save`` programs and AOTInductor packages.

Read without torch and without unpickling anything: the zip directory is verified
(:mod:`._zip`), member bytes are located in place, and only small JSON metadata is parsed.

Layout of a ``torch.export.save`` archive (every member under ``<root>/``, stored, data
64-aligned)::

    archive_format                       "pt2"
    archive_version, byteorder, .data/version, .data/serialization_id
    models/<model>.json                  the serialized graph (torch._export.serde schema)
    data/weights/<model>_weights_config.json     FQN -> {path_name, is_param, use_pickle,
    data/constants/<model>_constants_config.json         tensor_meta {dtype, sizes, strides,
                                                          storage_offset, requires_grad}}
    data/weights/weight_<n>, data/constants/tensor_<n>   raw storage bytes (shared by views)
    data/constants/custom_obj_<n>, opaque_obj_<n>        pickles
    data/sample_inputs/<model>.pt        torch.save (a zip holding data.pkl)

An AOTInductor package keeps ``data/aotinductor/<model>/``: the generated wrapper and kernel
sources (``*.cpp``), their metadata (``*.json``), the compiled ``*.so`` and, when constants
are not compiled into the ``.so``, a ``*_weights.blob``. The wrapper source declares every
constant (``constants_info_[i].name/dtype/offset/data_size/shape/stride/original_fqn``); the
constants are laid out in that order, each padded to 64 bytes, either in the ``.so`` between
the symbols ``_binary_constants_bin_start``/``_end`` or in the blob. Nothing is loaded.

Example:
    >>> import workbench as wb
    >>> art = wb.open("sample_models/tied.pt2")                     # doctest: +SKIP
    >>> art.tensors[["name", "member", "storage_id", "shared"]]    # doctest: +SKIP
    >>> art.frames["graph"]                                        # doctest: +SKIP
"""

from __future__ import annotations

import codecs
import json
import re
import struct
from collections import Counter
from collections.abc import Iterator
from typing import Any, NamedTuple

from .._cols import align, factorized, filled, ints, objects, strings
from .._fmt import escape
from ..dtypes import BY_NAME
from ..errors import CorruptError, OutOfBoundsError
from ..source import Source
from ._zip import LOCAL_MAGIC, METHODS, ZipDirectory, ZipEntry
from .parsed import Parsed

__all__ = ["FORMAT", "MAGIC", "SERDE_DTYPES", "detect", "read"]

FORMAT = "pt2"
MAGIC = LOCAL_MAGIC

#: ``torch._export.serde.schema.ScalarType`` numbers -> torch dtype names (0 is UNKNOWN).
SERDE_DTYPES: dict[int, str] = {
    1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32",
    8: "float64", 9: "complex32", 10: "complex64", 11: "complex128", 12: "bool", 13: "bfloat16",
    28: "uint16", 29: "float8_e4m3fn", 30: "float8_e5m2", 31: "float8_e4m3fnuz",
    32: "float8_e5m2fnuz", 33: "float8_e8m0fnu", 34: "uint32", 35: "uint64",
}
_ITEMSIZE: dict[str, int] = {**{d.name: d.itemsize for d in BY_NAME.values()}, "float8_e8m0fnu": 1}

#: Largest metadata member (JSON config, graph, generated source) read into memory.
METADATA_LIMIT = 256 << 20
_SMALL_LIMIT = 4096
#: AOTInductor pads each CPU constant to this many bytes (``ALIGN_BYTES``).
AOTI_ALIGN = 64

_PICKLE_PROTOCOLS = (2, 3, 4, 5)
_INT_ONLY = frozenset({int})
#: Sizes, offsets and byte counts must stay below this (they go to int64 columns).
_LIMIT = 1 << 62


def detect(head: bytes) -> bool:
    """True when ``head`` starts a zip archive (a local file header, ``PK\\x03\\x04``).

    Example:
        >>> detect(b"PK\\x03\\x04\\x00\\x00")
        True
    """
    return head[:4] == MAGIC


def read(src: Source) -> Parsed:
    """Read the ``.pt2`` archive in ``src`` (verified, zero-copy) into a :class:`Parsed`.

    Frames: ``segments``, ``tensors``, ``members``, ``models`` and ``graph``.

    Example:
        >>> from workbench.source import Source
        >>> parsed = read(Source("sample_models/mlp.pt2"))        # doctest: +SKIP
        >>> parsed.info["archive_format"]                         # doctest: +SKIP
        'pt2'
    """
    arc = _Archive(src)
    parsed = Parsed(format=FORMAT, path=src.path, sources={src.path: src})
    parsed.info.update(arc.info)
    parsed.findings.extend(arc.findings)
    parsed.builders.update({"segments": arc.segments_columns, "tensors": arc.tensors_columns,
                            "members": arc.members_columns, "models": arc.models_columns,
                            "graph": arc.graph_columns})
    parsed.extra["zip"] = arc.zip
    return parsed


# ------------------------------------------------------------------------------ helpers


#: An unsafe member name: absolute, drive-qualified, a backslash, a control character or a
#: ``..`` component (nothing is ever extracted; such names are flagged).
_UNSAFE = re.compile(r"^[/\\]|^[A-Za-z]:|\\|[\x00-\x1f\x7f-\x9f]|(?:^|/)\.\.(?:/|$)")
#: Control characters other than NUL (the separator of the joined names).
_CONTROL = re.compile(r"[\x01-\x1f\x7f-\x9f]")
#: The ASCII control characters of _CONTROL, for bytes.translate.
_ASCII_CONTROL = bytes([*range(1, 0x20), 0x7F])


def _has_control(text: str) -> bool:
    """``_CONTROL.search(text) is not None``; for ASCII text without a regex scan."""
    if text.isascii():
        raw = text.encode("ascii")
        return len(raw.translate(None, _ASCII_CONTROL)) != len(raw)
    return _CONTROL.search(text) is not None


def _is_pickle(buf: memoryview, e: ZipEntry) -> bool:
    """Pickle protocol 2-5 magic, or a torch.save zip whose first member is a ``.pkl``."""
    if e.compressed or e.compressed_size < 2:
        return False
    start = e.data_offset
    b0, b1 = buf[start], buf[start + 1]
    if b0 == 0x80 and b1 in _PICKLE_PROTOCOLS:
        return True
    if e.compressed_size >= 30 and buf[start:start + 4] == LOCAL_MAGIC:
        n = buf[start + 26] | (buf[start + 27] << 8)
        if 30 + n <= e.compressed_size:
            return bytes(buf[start + 30:start + 30 + n]).endswith(b".pkl")
    return False


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
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


def _extent(shape: tuple[int, ...], strides: tuple[int, ...], storage_offset: int) -> int:
    """Elements of storage a strided view reaches (0 for an empty view)."""
    if 0 in shape:
        return 0
    return storage_offset + 1 + sum((n - 1) * st for n, st in zip(shape, strides))


def _numel(shape: tuple[int, ...]) -> int:
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
    itemsize = _ITEMSIZE[dtype]
    numel = _numel(shape)
    reach = 0 if numel == 0 else offset + 1 + sum([(n - 1) * t for n, t in zip(shape, strides)])
    if max(numel, reach, offset) * itemsize >= _LIMIT:
        return None
    return dtype, numel * itemsize, reach * itemsize, _contiguous(shape, strides), offset * itemsize


_NUM = rb"(?:0|[1-9][0-9]*)"
_AS_INTS = rb'((?:\{"as_int": ' + _NUM + rb'\}(?:, \{"as_int": ' + _NUM + rb'\})*)?)'
#: One config entry as torch writes it, loosely: ``"<fqn>": {"path_name": "<name>"<tail>}}``
#: and the separator; the tail is checked on its own (:data:`_CANONICAL_TAIL`).
_CANONICAL_ENTRY = re.compile(rb'"([^"\\]*(?:\\.[^"\\]*)*)": \{"path_name": "([^"\\/]*)"'
                              rb'([^}]*(?:\}[^}]+)*)\}\}(?:, |\}\}\Z)')
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
    fqn_raw, path_raw, tails = zip(*found)
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
        n = v.get("as_int")
        if isinstance(n, int) and not isinstance(n, bool):
            return n
    return None


#: Fields of a tensor row (the ``tensors`` columns, plus ``storage_key``: rows with the same
#: key share bytes). ``member`` holds the member's index (or ``None``).
ROW_FIELDS = ("fqn", "model", "kind", "dtype", "shape", "strides", "storage_offset", "nbytes",
              "storage", "offset", "requires_grad", "member", "pickled", "contiguous",
              "storage_key")


# ------------------------------------------------------------------------------ the archive


class _Archive:
    """Everything read from one archive; builders turn it into columns."""

    def __init__(self, src: Source) -> None:
        self.src = src
        self.path = src.path
        self.zip = ZipDirectory(src)
        self.findings: list[dict[str, Any]] = []
        names = self.zip.names
        n = len(names)
        self.info: dict[str, Any] = {"members": n, "zip64": self.zip.zip64}
        self.root = names[0].split("/", 1)[0] if names and "/" in names[0] else ""
        self.info["archive_root"] = self.root
        self.roles: list[str] = ["other"] * n
        self.models_of: list[str | None] = [None] * n
        self.pickled: list[bool] = [False] * n
        self.used_by: dict[int, list[str]] = {}
        #: tensor rows, one list per field of ROW_FIELDS
        self.rows: dict[str, list] = {f: [] for f in ROW_FIELDS}
        self.models: dict[str, dict[str, Any]] = {}
        self.so_regions: dict[int, tuple[int, int]] = {}  # .so entry index -> constants range
        self._graph_cache: dict[str, dict[str, Any]] = {}
        self.aoti: dict[str, list[ZipEntry]] = {}  # data/aotinductor/<model>/ members
        self._program_members: list[int] = []  # graph and config members, in order
        self._used_cache: Any = None  # see _used_text
        self._check_names()
        self._classify()
        self._metadata()
        self._exported_programs()
        self._aoti_packages()
        self._sniff_pickles()
        self._name_rows()

    def _add_row(self, row: dict[str, Any]) -> None:
        """Append one tensor row (a dict with every field of :data:`ROW_FIELDS`)."""
        for f, col in self.rows.items():
            col.append(row[f])

    # -- findings ---------------------------------------------------------------------------
    def _find(self, severity: str, structure: str, message: str, offset: int | None = None) -> None:
        self.findings.append({"severity": severity, "structure": structure, "offset": offset,
                              "message": message})

    def _check_names(self) -> None:
        zd = self.zip
        for name in zd.duplicates:
            self._find("warning", f"zip member {escape(name)!r}",
                       "the name occurs more than once; the first entry is used")
        names = zd.names
        joined = "\0".join(names)
        no_nul = joined.count("\0") == max(len(names) - 1, 0)
        # Cheap substring tests over all names at once; per name only when one fires.
        if ".." in joined or "\\" in joined or ":" in joined or joined.startswith("/") or \
                "\0/" in joined or _has_control(joined) or not no_nul:
            self.unsafe = [_UNSAFE.search(n) is not None for n in names]
        else:
            self.unsafe = [False] * len(names)
        if True in self.unsafe:
            for i, unsafe in enumerate(self.unsafe):
                if unsafe:
                    self._find("warning", f"zip member {escape(names[i])!r}",
                               "unsafe member name (absolute path, '..', backslash or control "
                               "character); nothing is extracted",
                               int(zd.arrays["header_offset"][i]))
        if self.root:
            prefix = self.root + "/"
            if no_nul:  # every name starts after a NUL of "\0" + joined
                outside = len(names) - ("\0" + joined).count("\0" + prefix)
            else:
                outside = sum(not n.startswith(prefix) for n in names)
            if outside:
                self._find("warning", "zip central directory",
                           f"{outside} member(s) lie outside the archive folder "
                           f"{escape(self.root)!r}")

    # -- roles ----------------------------------------------------------------------------
    def _classify(self) -> None:
        prefix = self.root + "/" if self.root else ""
        cut = len(prefix)
        roles, models_of, pickled = self.roles, self.models_of, self.pickled
        programs = self._program_members
        # The common members first: raw weight storages, data/weights/<x>.
        weights = f"{prefix}data/weights/"
        w_cut = len(weights)
        for i, name in enumerate(self.zip.names):
            if name.startswith(weights):
                base = name[w_cut:]
                if "/" not in base and not base.endswith(("_weights_config.json", ".pt")):
                    roles[i] = "weights"
                    continue
            elif not name.startswith(prefix):
                continue
            rel = name[cut:]
            top, _, rest = rel.partition("/")
            role, model = "other", None
            if top == "data":
                sub, _, base = rest.partition("/")
                if sub == "weights" and "/" not in base:
                    if base.endswith("_weights_config.json"):
                        role, model = "config", base[:-len("_weights_config.json")]
                    elif base.endswith(".pt"):
                        role, model = "pickle", base[:-3]
                    else:
                        role = "weights"
                elif sub == "constants" and "/" not in base:
                    if base.endswith("_constants_config.json"):
                        role, model = "config", base[:-len("_constants_config.json")]
                    elif base.startswith(("custom_obj_", "opaque_obj_")) or base.endswith(".pt"):
                        role = "pickle"
                    else:
                        role = "constants"
                elif sub == "sample_inputs":
                    role = "sample_inputs"
                    if base.endswith(".pt") and "/" not in base:
                        model = base[:-3]
                elif sub == "aotinductor":
                    model, _, leaf = base.partition("/")
                    if not leaf:
                        model = None
                    else:
                        self.aoti.setdefault(model, []).append(self.zip.entry(i))
                    if leaf.endswith(".so"):
                        role = "so"
                    elif leaf.endswith(".blob"):
                        role = "blob"
                    elif leaf.endswith((".cpp", ".h", ".hpp", ".c", ".cu", ".S")):
                        role = "source"
                    elif leaf.endswith(".json"):
                        role = "metadata"
            elif top == "models":
                if rest.endswith(".json") and "/" not in rest:
                    role, model = "graph", rest[:-len(".json")]
            elif rel in ("archive_format", "archive_version", "byteorder") or \
                    top in (".data", "extra"):
                role = "metadata"
            roles[i] = role
            models_of[i] = model
            if role == "pickle" or (role == "sample_inputs" and rel.endswith(".pt")):
                pickled[i] = True
            if model is not None and role in ("graph", "config"):
                programs.append(i)

    def _member(self, rel: str) -> ZipEntry | None:
        return self.zip.get(f"{self.root}/{rel}" if self.root else rel)

    def _text(self, e: ZipEntry, limit: int = METADATA_LIMIT) -> bytes:
        return self.zip.read(e, limit)

    def _json(self, e: ZipEntry) -> Any:
        raw = self._text(e)
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise CorruptError(f"invalid JSON ({exc})", file=self.path,
                               structure=f"zip member {e.name!r}", offset=e.data_offset) from None

    def _metadata(self) -> None:
        for key, rel in (("archive_format", "archive_format"), ("archive_version", "archive_version"),
                         ("byteorder", "byteorder"), ("data_version", ".data/version")):
            e = self._member(rel)
            if e is None:
                continue
            try:
                self.info[key] = self._text(e, _SMALL_LIMIT).decode("utf-8").strip()
            except UnicodeDecodeError:
                raise CorruptError("is not UTF-8 text", file=self.path,
                                   structure=f"zip member {e.name!r}", offset=e.data_offset) from None
        fmt = self.info.get("archive_format")
        if fmt is None:
            self._find("warning", "archive_format",
                       "no archive_format member: not a torch.export / AOTInductor archive "
                       "(members are listed, nothing else is read)")
        elif fmt != "pt2":
            self._find("warning", "archive_format", f"archive_format is {escape(fmt)!r}, expected 'pt2'")
        order = self.info.get("byteorder")
        if order not in (None, "little"):
            self._find("warning", "byteorder", f"byteorder is {escape(order)!r}: tensor views "
                       "assume little-endian bytes")

    # -- torch.export programs ----------------------------------------------------------------
    def _exported_programs(self) -> None:
        names: list[str] = []
        for i in self._program_members:
            model = self.models_of[i]
            if model not in names:
                names.append(model)
        for model in names:
            graph = self._member(f"models/{model}.json")
            if graph is not None:
                self.models[model] = {"name": model, "kind": "exported_program",
                                      "member": graph.name, "entry": graph}
            for kind_dir, what in (("weights", "weights"), ("constants", "constants")):
                cfg = self._member(f"data/{kind_dir}/{model}_{what}_config.json")
                if cfg is None:
                    if graph is not None:
                        self._find("warning", f"model {escape(model)!r}",
                                   f"no data/{kind_dir}/{model}_{what}_config.json")
                    continue
                self._config(model, kind_dir, cfg)

    def _config(self, model: str, kind_dir: str, cfg: ZipEntry) -> None:
        """Rows for every entry of a weights/constants config (``FQN -> payload meta``),
        added column by column."""
        import numpy as np

        raw = self.zip.content(cfg, METADATA_LIMIT)  # (zero-copy when stored)
        prefix = f"{self.root}/data/{kind_dir}/" if self.root else f"data/{kind_dir}/"
        kinds = ("constant", "constant") if kind_dir == "constants" else ("buffer", "parameter")
        block = _canonical_config(raw, prefix, kinds, self.zip)
        if block is None:
            block = self._config_json(model, kind_dir, cfg, raw, prefix, kinds)
        fqns, members, layout, layouts = block
        n = len(fqns)
        if not n:
            return
        arrays = self.zip.arrays
        idx = np.array(members, np.int64)

        def per_layout(field: str) -> list:
            values = [getattr(lt, field) for lt in layouts]
            return list(map(values.__getitem__, layout))

        reach = np.array(per_layout("reach"), np.int64)
        file_size = arrays["file_size"][idx]
        over = np.flatnonzero(reach > file_size)
        if over.size:
            k = int(over[0])
            member = self.zip.entry(members[k])
            raise OutOfBoundsError(
                f"the view reaches {int(reach[k])} bytes of storage, member {member.name!r} "
                f"holds {member.file_size}", file=self.path,
                structure=f"{cfg.name} config[{fqns[k]!r}]", offset=member.data_offset)
        compressed = arrays["compressed"][idx]
        empty = ~compressed & (file_size == 0)
        offsets = arrays["data_offset"][idx] + np.array(per_layout("offset_bytes"), np.int64)
        if compressed.any() or empty.any():
            storage = np.where(compressed, "compressed", "zip").tolist()
            offset: list = offsets.tolist()
            for k in np.flatnonzero(compressed | empty).tolist():
                offset[k] = None
            for k in np.flatnonzero(empty).tolist():
                self._find("info", f"{cfg.name} config[{fqns[k]!r}]",
                           "storage member is empty: torch.export.load makes zeros")
        else:
            storage, offset = ["zip"] * n, offsets.tolist()
        rows = self.rows
        for field, values in (
                ("fqn", fqns), ("model", [model] * n), ("kind", per_layout("kind")),
                ("dtype", per_layout("dtype")), ("shape", per_layout("shape")),
                ("strides", per_layout("strides")),
                ("storage_offset", per_layout("storage_offset")),
                ("nbytes", per_layout("nbytes")), ("storage", storage), ("offset", offset),
                ("requires_grad", per_layout("requires_grad")), ("member", members),
                ("pickled", [False] * n), ("contiguous", per_layout("contiguous")),
                ("storage_key", members)):
            rows[field].extend(values)
        models_of = np.array(self.models_of, object)
        models_of[idx[np.equal(models_of[idx], None)]] = model
        self.models_of = models_of.tolist()
        used = self.used_by
        if len(set(members)) == n and used.keys().isdisjoint(members):
            used.update(zip(members, map(list, zip(fqns))))
        else:
            for i, fqn in zip(members, fqns):
                users = used.get(i)
                if users is None:
                    used[i] = [fqn]
                else:
                    users.append(fqn)

    def _config_json(self, model: str, kind_dir: str, cfg: ZipEntry, raw: bytes | memoryview,
                     prefix: str, kinds: tuple[str, str]) -> _ConfigRows:
        """Config entries via :func:`json.loads`: raw tensors as columns for ``_config``;
        pickled and unusual entries are handled (or rejected) by ``_entry_slow``."""
        try:
            doc = json.loads(bytes(raw))
        except ValueError as exc:
            raise CorruptError(f"invalid JSON ({exc})", file=self.path,
                               structure=f"zip member {cfg.name!r}", offset=cfg.data_offset) from None
        entries = doc.get("config") if isinstance(doc, dict) else None
        if not isinstance(entries, dict):
            raise CorruptError("expected an object with a 'config' object", file=self.path,
                               structure=f"zip member {cfg.name!r}", offset=cfg.data_offset)
        index = self.zip.index
        out = _ConfigRows([], [], [], [])
        ids: dict[_Layout, int] = {}
        facts_of: dict[tuple, tuple | None] = {}  # (dtype, sizes, strides, offset) -> facts
        for fqn, meta in entries.items():
            # The shape torch writes; anything else goes to _entry_slow, which accepts what
            # is optional and raises a precise error for what is wrong.
            try:
                path_name = meta["path_name"]
                member = index[prefix + path_name]
                tm = meta["tensor_meta"]
                shape = tuple([d["as_int"] for d in tm["sizes"]])
                st = tuple([d["as_int"] for d in tm["strides"]])
                key = (tm["dtype"], shape, st, tm["storage_offset"]["as_int"])
                facts = facts_of.get(key)
                if facts is None and key not in facts_of:
                    facts = facts_of[key] = _layout_facts(*key)
                ok = facts is not None and meta["use_pickle"] is False and "/" not in path_name
                kind = kinds[meta["is_param"] is True]
            except (KeyError, TypeError, IndexError):
                ok = False
            if not ok:
                self._entry_slow(model, kind_dir, cfg, fqn, meta)
                continue
            lt = _layout_of(kind, facts, shape, st, key[3], tm.get("requires_grad") is True)
            k = ids.get(lt)
            if k is None:
                k = ids[lt] = len(out.layouts)
                out.layouts.append(lt)
            out.fqns.append(fqn)
            out.members.append(member)
            out.layout.append(k)
        return out

    def _entry_slow(self, model: str, kind_dir: str, cfg: ZipEntry, fqn: str, meta: Any) -> None:
        """One config entry, validated field by field (pickled entries, optional fields)."""
        where = f"{cfg.name} config[{fqn!r}]"

        def bad(msg: str) -> CorruptError:
            return CorruptError(msg, file=self.path, structure=where, offset=cfg.data_offset)

        if not isinstance(meta, dict) or not isinstance(meta.get("path_name"), str):
            raise bad("expected an object with a string 'path_name'")
        path_name = meta["path_name"]
        member = self._member(f"data/{kind_dir}/{path_name}")
        if member is None or "/" in path_name:
            raise bad(f"path_name {escape(path_name)!r} names no member of data/{kind_dir}/")
        use_pickle = meta.get("use_pickle") is True
        is_param = meta.get("is_param") is True
        kind = "constant" if kind_dir == "constants" else ("parameter" if is_param else "buffer")
        row: dict[str, Any] = {
            "fqn": fqn, "model": model, "kind": kind, "dtype": None, "shape": None, "strides": None,
            "storage_offset": None, "nbytes": 0, "storage": "zip", "offset": None,
            "requires_grad": None, "member": member.index, "pickled": use_pickle,
            "contiguous": None, "storage_key": member.index,
        }
        tm = meta.get("tensor_meta")
        if tm is not None:
            if not isinstance(tm, dict):
                raise bad("tensor_meta is not an object")
            code = tm.get("dtype")
            dtype = SERDE_DTYPES.get(code) if type(code) is int else None
            if dtype is None:
                raise bad(f"tensor_meta.dtype {code!r} is not a known ScalarType")
            sizes = tm.get("sizes")
            strides = tm.get("strides")
            if not isinstance(sizes, list) or not isinstance(strides, list) or \
                    len(sizes) != len(strides):
                raise bad("tensor_meta.sizes/strides are not lists of the same length")
            shape = tuple(_as_int(v) for v in sizes)
            st = tuple(_as_int(v) for v in strides)
            off = _as_int(tm.get("storage_offset", {"as_int": 0}))
            if None in shape or None in st or off is None:
                raise bad("sizes, strides and storage_offset must be {'as_int': n} integers")
            if any(n < 0 for n in shape) or any(s < 0 for s in st) or off < 0:
                raise bad(f"negative size, stride or storage offset ({list(shape)}, {list(st)}, {off})")
            itemsize = _ITEMSIZE[dtype]
            if max(_numel(shape), _extent(shape, st, off), off) * itemsize >= _LIMIT:
                raise bad(f"sizes {list(shape)} / strides {list(st)} / offset {off} are too large")
            row.update(dtype=dtype, shape=shape, strides=st, storage_offset=off,
                       nbytes=_numel(shape) * itemsize, contiguous=_contiguous(shape, st),
                       requires_grad=tm.get("requires_grad") is True)
            if not use_pickle:
                extent = _extent(shape, st, off) * itemsize
                if extent > member.file_size:
                    raise OutOfBoundsError(
                        f"the view reaches {extent} bytes of storage, member "
                        f"{member.name!r} holds {member.file_size}", file=self.path,
                        structure=where, offset=member.data_offset)
                if member.compressed:
                    row["storage"] = "compressed"
                elif member.file_size == 0:
                    self._find("info", where, "storage member is empty: torch.export.load "
                               "makes zeros")
                else:
                    row["offset"] = member.data_offset + off * itemsize
        elif not use_pickle:
            raise bad("tensor_meta is missing for a raw (use_pickle: false) entry")
        if use_pickle:
            row["storage"] = "pickle"
            self.pickled[member.index] = True
            self.roles[member.index] = "pickle"
        self.models_of[member.index] = self.models_of[member.index] or model
        self.used_by.setdefault(member.index, []).append(fqn)
        if tm is not None:  # custom objects (no tensor_meta) are members, not tensors
            self._add_row(row)

    # -- AOTInductor packages -------------------------------------------------------------
    def _aoti_packages(self) -> None:
        for model, members in self.aoti.items():
            _AotiPackage(self, model, members).read()

    def _sniff_pickles(self) -> None:
        buf = self.src.buf
        zd = self.zip
        roles, pickled, used = self.roles, self.pickled, self.used_by
        sniffed = ("other", "sample_inputs", "metadata", "weights", "constants")
        for i in range(len(roles)):
            if pickled[i] or i in used or roles[i] not in sniffed:
                continue
            if _is_pickle(buf, zd.entry(i)):
                pickled[i] = True
                if roles[i] != "sample_inputs":
                    roles[i] = "pickle"
        n = sum(pickled)
        if n:
            self._find("info", "zip central directory",
                       f"{n} pickled member(s) are listed but never unpickled "
                       "(torch.export.load would unpickle them: only load trusted files)")
        comp = zd.arrays["compressed"]
        if comp.any():
            first = zd.entry(int(comp.argmax()))
            self._find("info", "zip central directory",
                       f"{int(comp.sum())} compressed member(s) (e.g. {escape(first.name)!r}, "
                       f"{METHODS.get(first.method, first.method)}): not zero-copy")

    def _name_rows(self) -> None:
        """Give each tensor row a unique ``name`` (its FQN, qualified by model when the FQN
        occurs more than once), a ``storage_id`` and the ``shared`` flag."""
        import numpy as np

        rows = self.rows
        fqns, keys = rows["fqn"], rows["storage_key"]
        counts = Counter(fqns) if len(set(fqns)) != len(fqns) else None
        ids = dict(zip(dict.fromkeys(keys), range(len(keys))))
        users = Counter(keys) if len(ids) != len(keys) else None
        if counts is None:
            self.names = fqns
        else:
            self.names = [fqn if counts[fqn] == 1 else
                          f"{model}/aoti/{fqn}" if storage in ("so", "blob", "folded") else
                          f"{model}/{fqn}"
                          for fqn, model, storage in zip(fqns, rows["model"], rows["storage"])]
        n = len(keys)
        self.storage_ids = np.fromiter(map(ids.__getitem__, keys), np.int64, n)
        self.shared = np.zeros(n, bool) if users is None else \
            np.fromiter([users[k] > 1 for k in keys], bool, n)

    # -- frames ---------------------------------------------------------------------------
    def tensors_columns(self) -> dict[str, Any]:
        import numpy as np
        import pandas as pd

        cols: dict[str, Any] = {f: v for f, v in self.rows.items() if f != "storage_key"}
        names = objects(self.names)
        cols["name"] = strings(names)
        cols["fqn"] = strings(names.copy() if self.names is cols["fqn"] else cols["fqn"])
        for c in ("model", "kind", "dtype", "storage"):
            cols[c] = factorized(cols[c])
        none = np.zeros(len(self.storage_ids), bool)
        cols["storage_id"] = pd.arrays.IntegerArray(self.storage_ids, none)
        cols["shared"] = pd.arrays.BooleanArray(self.shared, none.copy())
        offsets = cols["offset"]
        missing = np.zeros(len(offsets), bool)
        if None in offsets:
            missing = np.equal(np.array(offsets, object), None)
            offsets = [0 if o is None else o for o in offsets]
        values = np.array(offsets, np.int64)
        cols["offset"] = ints(values, missing)
        cols["align"] = align(values)
        files = filled(len(values), self.path)
        files[missing] = pd.NA
        cols["file"] = pd.arrays.StringArray(files)
        members = cols["member"]
        if None in members:
            cols["member"] = [None if m is None else self.zip.names[m] for m in members]
        else:
            cols["member"] = strings(objects(self.zip.names)[np.array(members, np.int64)]
                                      if members else [])
        return cols

    def _used_text(self) -> Any:
        """Per member, the names of the tensors whose bytes it holds (``"; "``-joined), as
        an object array."""
        import numpy as np

        text = self._used_cache
        if text is None:
            text = self._used_cache = np.full(len(self.roles), "", object)
            used = self.used_by
            if used:
                text[np.fromiter(used, np.int64, len(used))] = objects(
                    list(map("; ".join, used.values())))
        return text

    def members_columns(self) -> dict[str, Any]:
        import numpy as np

        a = self.zip.arrays
        n = len(self.roles)
        offsets = a["data_offset"]
        return {
            "index": np.arange(n, dtype=np.int64), "name": strings(self.zip.names),
            "kind": factorized(self.roles), "model": factorized(self.models_of),
            "file": strings([self.path] * n),
            "header_offset": a["header_offset"].copy(), "offset": offsets.copy(),
            "size": a["compressed_size"].copy(), "file_size": a["file_size"].copy(),
            "align": align(offsets), "method": a["method"].copy(),
            "compressed": a["compressed"].copy(), "crc32": a["crc32"].copy(),
            "pickled": np.array(self.pickled, bool), "unsafe_name": np.array(self.unsafe, bool),
            "used_by": strings(self._used_text().copy()),
        }

    def segments_columns(self) -> dict[str, Any]:
        """Byte ranges covering the file: per member its local header, alignment padding,
        data (split around an AOTInductor ``.so``'s constants) and data descriptor; then the
        central directory and the end records. Gaps become ``padding`` rows (vectorised)."""
        import numpy as np

        zd = self.zip
        a = zd.arrays
        n = len(zd.names)
        lho, data = a["header_offset"], a["data_offset"]
        size, desc = a["compressed_size"], a["descriptor_size"]
        pad = self._paddings(lho, data)
        # Four slots per member: header, padding, data, descriptor.
        starts = np.stack([lho, data - pad, data, data + size], axis=1).ravel()
        sizes = np.stack([data - pad - lho, pad, size, desc], axis=1).ravel()
        keep = np.ones((n, 4), bool)
        keep[:, 1] = pad > 0
        keep[:, 3] = desc > 0
        used_text = self._used_text()
        # Object arrays of four slots per member, filled column-wise (no per-row Python).
        names_a = np.empty((n, 4), object)
        names_a[:, 0], names_a[:, 1], names_a[:, 3] = "local header", "padding", "data descriptor"
        names_a[:, 2] = zd.names
        kinds_a = np.empty((n, 4), object)
        kinds_a[:, 0], kinds_a[:, 1], kinds_a[:, 3] = "header", "padding", "data_descriptor"
        kinds_a[:, 2] = self.roles
        used_a = np.full((n, 4), "", object)
        used_a[:, 2] = used_text
        extra: list[tuple] = []  # (start, size, name, kind, member index or -1, used_by)
        for k, (start, end) in self.so_regions.items():
            e = zd.entry(k)
            keep[k, 2] = False
            extra += [(e.data_offset, start - e.data_offset, e.name, "so", k, ""),
                      (start, end - start, f"{e.name} [constants]", "blob", k, used_text[k]),
                      (end, e.data_end - end, e.name, "so", k, "")]
        extra.append((zd.cd_offset, zd.cd_size, "central directory", "central_directory", -1,
                      f"{n} entries"))
        if zd.zip64_offset is not None:
            extra.append((zd.zip64_offset, zd.zip64_size, "zip64 end of central directory",
                          "end_record", -1, ""))
        if zd.locator_offset is not None:
            extra.append((zd.locator_offset, 20, "zip64 end of central directory locator",
                          "end_record", -1, ""))
        extra.append((zd.eocd_offset, zd.eocd_size, "end of central directory", "end_record",
                      -1, ""))
        flat = np.flatnonzero(keep.ravel())
        xs = list(zip(*extra))
        starts = np.concatenate([starts[flat], np.array(xs[0], np.int64)])
        sizes = np.concatenate([sizes[flat], np.array(xs[1], np.int64)])
        names = np.concatenate([names_a.ravel()[flat], objects(xs[2])])
        kinds = np.concatenate([kinds_a.ravel()[flat], objects(xs[3])])
        index = np.concatenate([flat // 4, np.array(xs[4], np.int64)])
        used = np.concatenate([used_a.ravel()[flat], objects(xs[5])])
        order = np.lexsort((sizes, starts))
        s_starts, s_ends = starts[order], (starts + sizes)[order]
        reach = np.maximum.accumulate(s_ends)
        prev = np.concatenate(([0], reach[:-1]))
        over = np.flatnonzero(s_starts < prev)
        if over.size:
            k = int(order[over[0]])
            raise CorruptError(f"{names[k]} [0x{s_starts[over[0]]:x}, 0x{s_ends[over[0]]:x}) "
                               f"overlaps the previous range (ends at 0x{prev[over[0]]:x})",
                               file=self.path, structure=names[k], offset=int(s_starts[over[0]]))
        # Gaps (torch leaves none) become padding rows; bytes after the end records, trailing.
        gaps = np.flatnonzero(s_starts > prev)
        fill = [(int(prev[g]), int(s_starts[g] - prev[g]), "padding", "padding") for g in gaps]
        tail = int(reach[-1]) if len(reach) else 0
        if tail < self.src.size:
            fill.append((tail, self.src.size - tail, "trailing data", "trailing"))
        if fill:
            fs = list(zip(*fill))
            starts = np.concatenate([starts, np.array(fs[0], np.int64)])
            sizes = np.concatenate([sizes, np.array(fs[1], np.int64)])
            names = np.concatenate([names, objects(fs[2])])
            kinds = np.concatenate([kinds, objects(fs[3])])
            index = np.concatenate([index, np.full(len(fill), -1, np.int64)])
            used = np.concatenate([used, objects([""] * len(fill))])
            order = np.lexsort((sizes, starts))
        if not np.array_equal(order, np.arange(len(order))):
            names, kinds, index, used = names[order], kinds[order], index[order], used[order]
        offsets = starts[order]
        return {"file": strings([self.path] * len(order)), "name": strings(names),
                "kind": factorized(kinds), "offset": offsets, "size": sizes[order],
                "align": align(offsets), "index": ints(index, index < 0),
                "used_by": strings(used)}

    def _paddings(self, lho: Any, data: Any) -> Any:
        """Alignment padding at the end of each local header's extra field (torch's ``FB``
        field); vectorised for the common single-field case."""
        import numpy as np

        zd = self.zip
        n = len(zd.names)
        x_len = zd.arrays["local_extra"]
        start = data - x_len
        u8 = np.frombuffer(self.src.buf, np.uint8, count=zd.cd_offset)
        has = x_len >= 4
        at = np.where(has, start, 0)
        head = u8[at[:, None] + np.arange(4)].view("<u2").reshape(n, 2).astype(np.int64)
        single = has & (head[:, 0] == 0x4246) & (head[:, 1] + 4 == x_len)
        pad = np.where(single, head[:, 1], 0)
        for k in np.flatnonzero(has & ~single).tolist():
            pad[k] = zd.local_padding(zd.entry(k))
        return pad

    def _graph(self, model: str) -> dict[str, Any]:
        stats = self._graph_cache.get(model)
        if stats is None:
            e = self.models[model]["entry"]
            stats = graph_stats(self.zip.content(e, METADATA_LIMIT), self.path, e)
            self._graph_cache[model] = stats
        return stats

    def models_columns(self) -> dict[str, list]:
        out: dict[str, list] = {c: [] for c in (
            "name", "kind", "member", "nodes", "ops", "inputs", "outputs", "parameters", "buffers",
            "constants", "schema_version", "torch_version", "device")}
        for model, m in self.models.items():
            row = dict.fromkeys(out)
            row.update(name=model, kind=m["kind"], member=m["member"])
            if m["kind"] == "exported_program":
                row.update(self._graph(model)["summary"])
            else:
                row.update({k: m.get(k) for k in ("inputs", "outputs", "parameters", "buffers",
                                                   "constants", "device")})
            for k in out:
                out[k].append(row[k])
        return out

    def graph_columns(self) -> dict[str, list]:
        out: dict[str, list] = {"model": [], "target": [], "count": []}
        for model, m in self.models.items():
            if m["kind"] != "exported_program":
                continue
            targets = self._graph(model)["targets"]
            for target, n in sorted(targets.items(), key=lambda kv: (-kv[1], kv[0])):
                out["model"].append(model)
                out["target"].append(target)
                out["count"].append(n)
        return out


# ------------------------------------------------------------------------------ graph JSON

#: A ``"target"`` key right after ``{`` or ``", "`` and its string value (the look-behinds
#: come after the literal, so the search still runs at the speed of a literal search).
_TARGET_CANONICAL = re.compile(rb'"target": "(?:(?<=, "target": ")|(?<=\{"target": "))'
                               rb'([^"\\]*(?:\\.[^"\\]*)*)"')
_STRING_VALUE = re.compile(rb'\s*:\s*"([^"\\]*(?:\\.[^"\\]*)*)"')
_LIST_VALUE = re.compile(rb"\s*:\s*\[")
_INPUT_KINDS = ("user_input", "parameter", "buffer", "tensor_constant", "custom_obj", "token",
                "constant_input")
#: A spec in a list written with json.dumps' default separators: '[{"kind": ' or ', {"kind": '.
_SPEC_KIND_CANONICAL = re.compile(rb'\{"(?:(?<=\[\{")|(?<=, \{"))(user_input|parameter|buffer|'
                                  rb'tensor_constant|custom_obj|token|constant_input)": ')
_SPEC_KIND = re.compile(rb'\{\s*"(user_input|parameter|buffer|tensor_constant|custom_obj|token|'
                        rb'constant_input)"\s*:')
_TOP_KEYS = re.compile(rb'"(schema_version|torch_version)"\s*:\s*')
#: Above this size a graph JSON is scanned instead of fully parsed (see graph_stats).
FULL_PARSE_LIMIT = 1 << 20


def _preceded_by_open(raw: bytes | memoryview, pos: int) -> bool:
    """The key at ``pos`` follows ``{`` or ``,`` (whitespace allowed): it starts a member."""
    i = pos - 1
    while i >= 0 and raw[i] in b" \t\r\n":
        i -= 1
    return i >= 0 and raw[i] in b"{,"


def _positions(raw: bytes | memoryview, needle: bytes, start: int = 0,
               stop: int | None = None) -> Iterator[int]:
    """Start of each non-overlapping ``needle`` in ``raw[start:stop]``: ``bytes.find`` on
    ``bytes`` (much faster than a regex scan over megabytes), a literal regular expression
    (the next fastest) on other buffers, which have no ``find``."""
    stop = len(raw) if stop is None else stop
    if isinstance(raw, bytes):
        pos = raw.find(needle, start, stop)
        while pos >= 0:
            yield pos
            pos = raw.find(needle, pos + len(needle), stop)
    else:
        for m in re.compile(re.escape(needle)).finditer(raw, start, stop):
            yield m.start()


def _keys(raw: bytes | memoryview, key: bytes, value: re.Pattern[bytes], start: int = 0,
          stop: int | None = None) -> list[re.Match[bytes]]:
    """Matches of ``value`` right after each object key ``"key"`` in ``raw[start:stop]``."""
    quoted = b'"' + key + b'"'
    out = []
    for pos in _positions(raw, quoted, start, stop):
        if _preceded_by_open(raw, pos):
            m = value.match(raw, pos + len(quoted))
            if m is not None:
                out.append(m)
    return out


def _spec_lists(raw: bytes | memoryview) -> dict[str, list[re.Match[bytes]]]:
    """``_keys(raw, key, _LIST_VALUE)`` for both ``input_specs`` and ``output_specs`` in one
    scan, for their common ``put_specs"``. (Where two ``"input_specs"`` would overlap, the
    second starts right after the first's ``s``, so it is not a key either way.)"""
    out: dict[str, list[re.Match[bytes]]] = {"input_specs": [], "output_specs": []}
    tail = b'put_specs"'
    for pos in _positions(raw, tail):
        for head, key in ((b'"in', "input_specs"), (b'"out', "output_specs")):
            start = pos - len(head)
            if start >= 0 and raw[start:pos] == head and _preceded_by_open(raw, start):
                m = _LIST_VALUE.match(raw, pos + len(tail))
                if m is not None:
                    out[key].append(m)
    return out


def _unescape(s: bytes) -> str:
    return json.loads(b'"' + s + b'"') if b"\\" in s else s.decode("utf-8", "replace")


def graph_stats(raw: bytes | memoryview, file: str = "", entry: ZipEntry | None = None,
                full_parse_limit: int = FULL_PARSE_LIMIT) -> dict[str, Any]:
    """Node targets and signature counts of a serialized ExportedProgram (``models/*.json``).

    Documents up to ``full_parse_limit`` bytes are parsed with :func:`json.loads`. Larger
    ones (a 5,000-parameter model writes ~5 MB, ~0.15 s to parse) are *scanned*, which is
    exact for valid JSON written to torch's schema: a ``"key":`` right after ``{`` or ``,``
    is an object key (quotes inside strings are escaped); only ``Node`` objects have a
    ``target`` key with a string value; ``GraphSignature`` is the only object with
    ``input_specs``/``output_specs`` lists, whose elements are one-key objects naming the
    spec kind. torch writes with ``json.dumps``' default separators, the same throughout a
    document, so there every ``target`` key reads ``"target": "``; other documents are
    scanned key by key. The version fields are decoded on their own. Both paths give the
    same result (nested subgraphs are included in the node counts); tests check that they
    agree.

    ``raw`` may be a zero-copy view of the member (the scan never copies the document).

    Returns:
        ``{"targets": Counter, "summary": {nodes, ops, inputs, outputs, parameters, buffers,
        constants, schema_version, torch_version}}``

    Example:
        >>> doc = (b'{"graph_module": {"graph": {"nodes": [{"target": "a"}]}, "signature": '
        ...        b'{"input_specs": [{"user_input": {}}], "output_specs": []}}}')
        >>> graph_stats(doc)["summary"]["nodes"], graph_stats(doc, full_parse_limit=0)["summary"]["inputs"]
        (1, 1)
    """
    where = f"zip member {entry.name!r}" if entry is not None else "graph JSON"
    offset = entry.data_offset if entry is not None else None

    def bad(msg: str) -> CorruptError:
        return CorruptError(msg, file=file or None, structure=where, offset=offset)

    targets: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    if len(raw) <= full_parse_limit:
        try:
            doc = json.loads(bytes(raw))
        except ValueError as exc:
            raise bad(f"invalid JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise bad("expected a JSON object")
        stack: list[Any] = [doc]
        while stack:
            o = stack.pop()
            if isinstance(o, dict):
                t = o.get("target")
                if isinstance(t, str):
                    targets[t] += 1
                stack.extend(o.values())
            elif isinstance(o, list):
                stack.extend(o)
        gm = doc.get("graph_module")
        signature = gm.get("signature") if isinstance(gm, dict) else None
        if not isinstance(signature, dict):
            raise bad("graph_module.signature is missing")
        for key in ("input_specs", "output_specs"):
            for spec in signature.get(key) or ():
                if isinstance(spec, dict):
                    kinds.update(spec.keys())
        schema, version = doc.get("schema_version"), doc.get("torch_version")
    else:
        # torch writes with json.dumps' default separators (", " and ": "), used throughout a
        # document: then every "target" key reads '"target": "'. Otherwise, the general scan.
        head = b'{"graph_module": {"graph": {"inputs": '
        canonical = raw[:len(head)] == head
        if canonical:
            found_targets = Counter(_TARGET_CANONICAL.findall(raw))
        else:
            found_targets = Counter([m.group(1) for m in _keys(raw, b"target", _STRING_VALUE)])
        for t, n in found_targets.items():
            targets[_unescape(t)] += n
        found = {}
        for key, ms in _spec_lists(raw).items():
            if len(ms) != 1:
                raise bad(f"expected one {key} list, found {len(ms)}")
            found[key] = ms[0].end() - 1
        if found["input_specs"] > found["output_specs"]:
            raise bad("input_specs does not precede output_specs")
        # output_specs follows input_specs; it ends where the signature ends.
        dec = json.JSONDecoder()
        try:
            outputs, _ = dec.raw_decode(bytes(raw[found["output_specs"]:]).decode("utf-8",
                                                                                  "replace"))
        except ValueError as exc:
            raise bad(f"invalid JSON in output_specs ({exc})") from None
        lo, hi = found["input_specs"], found["output_specs"]
        if canonical:  # each spec is a list element: '[{"kind": ' or ', {"kind": '
            for kind, n in Counter(_SPEC_KIND_CANONICAL.findall(raw, lo, hi)).items():
                kinds[kind.decode()] = n
        else:
            for m in _SPEC_KIND.finditer(raw, lo, hi):
                # A spec is a list element: the "{" follows "[" or ",".
                i = m.start() - 1
                while raw[i] in b" \t\r\n":
                    i -= 1
                if raw[i] in b"[,":
                    kinds[m.group(1).decode()] += 1
        for spec in outputs if isinstance(outputs, list) else ():
            if isinstance(spec, dict):
                kinds.update(spec.keys())
        versions: dict[str, Any] = {}
        for m in _TOP_KEYS.finditer(raw, max(0, len(raw) - 4096)):
            if _preceded_by_open(raw, m.start()):
                try:
                    text = bytes(raw[m.end():]).decode("utf-8")
                    versions[m.group(1).decode()] = dec.raw_decode(text)[0]
                except ValueError:
                    continue
        schema, version = versions.get("schema_version"), versions.get("torch_version")
    if isinstance(schema, dict):
        schema = f"{schema.get('major')}.{schema.get('minor')}"
    return {"targets": targets, "summary": {
        "nodes": sum(targets.values()), "ops": len(targets),
        "inputs": kinds["user_input"], "outputs": kinds["user_output"],
        "parameters": kinds["parameter"], "buffers": kinds["buffer"],
        "constants": kinds["tensor_constant"] + kinds["custom_obj"] + kinds["constant_input"],
        "schema_version": schema if isinstance(schema, str) else None,
        "torch_version": version if isinstance(version, str) else None,
    }}


# ------------------------------------------------------------------------------ AOTInductor

_CINFO = re.compile(rb"constants_info_\[(\d+)\]\.(\w+)\s*=\s*([^;\n]*);")
_MODEL_BASE = re.compile(rb"AOTInductorModelBase\(\s*(\d+),\s*(\d+),\s*(\d+),")
_INTS = re.compile(rb"-?\d+")
_CONSTANT_KIND = {"Parameter": "parameter", "Buffer": "buffer"}


_STRING_FIELDS = ("name", "original_fqn")
#: One escape sequence of a C string literal (a backslash and what follows it, if anything).
_ESCAPE = re.compile(rb"\\(.?)", re.DOTALL)
_ESCAPED = frozenset(b"\\'\"abfnrtvx01234567\n")
_NAMED_FIELDS = {"dtype": b"cached_torch_dtype_", "device_type": b"cached_torch_device_type_",
                 "layout": b"cached_torch_layout_", "type": b"ConstantType::"}


def _cvalue(field: str, value: bytes) -> Any:
    """Decode one ``constants_info_[i].<field> = <value>;`` right-hand side to the type the
    field has (``str``, ``int``, ``bool``, tuple of ``int``), or ``None`` when it does not
    have that form.

    Example:
        >>> _cvalue("shape", b"{32, 16}"), _cvalue("dtype", b"cached_torch_dtype_float32")
        ((32, 16), 'float32')
    """
    v = value.strip()
    if field in _STRING_FIELDS:
        if len(v) < 2 or not (v.startswith(b'"') and v.endswith(b'"')):
            return None
        if b"\\" in v and any(not m.group(1) or m.group(1)[0] not in _ESCAPED
                              for m in _ESCAPE.finditer(v, 1, len(v) - 1)):
            return None  # not a C escape: escape_decode would warn (and, some day, fail)
        try:
            return codecs.escape_decode(v[1:-1])[0].decode("utf-8", "replace")
        except ValueError:
            return None
    if field in ("shape", "stride"):
        if not re.fullmatch(rb"\{\s*(?:-?\d+\s*(?:,\s*-?\d+\s*)*,?\s*)?\}", v):
            return None
        return tuple(int(x) for x in _INTS.findall(v))
    if field in ("offset", "data_size"):
        return int(v) if re.fullmatch(rb"-?\d{1,20}", v) else None
    if field == "from_folded":
        return {b"true": True, b"false": False}.get(v)
    prefix = _NAMED_FIELDS.get(field)
    if prefix is not None:
        k = v.find(prefix)
        return re.match(rb"\w*", v[k + len(prefix):]).group().decode() if k >= 0 else None
    return None


class _AotiPackage:
    """One ``data/aotinductor/<model>/`` folder: the wrapper's constants, located in place."""

    def __init__(self, arc: _Archive, model: str, members: list[ZipEntry]) -> None:
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
        arc = self.arc
        where = f"AOTInductor model {escape(self.model)!r}"
        wrapper = self._pick("wrapper.cpp", None) or self._pick(".cpp", None)
        stem = wrapper.name[:-len(".cpp")] if wrapper is not None else None
        so = self._pick(".so", stem)
        blob = self._pick(".blob", stem)
        info: dict[str, Any] = {"name": self.model, "kind": "aoti",
                                "member": so.name if so is not None else None}
        meta = self._pick("_metadata.json", stem)
        if meta is not None:
            try:
                doc = arc._json(meta)
                info["device"] = doc.get("AOTI_DEVICE_KEY") if isinstance(doc, dict) else None
            except CorruptError as exc:
                arc._find("warning", where, f"metadata: {exc.detail}", meta.data_offset)
        arc.models[f"{self.model}" if self.model not in arc.models else f"{self.model}/aoti"] = info
        if wrapper is None:
            arc._find("warning", where, "no generated wrapper source: constants cannot be listed")
            return
        src = arc._text(wrapper)
        consts = self._constants(src, wrapper, info)
        info["parameters"] = sum(c.get("type") == "Parameter" for c in consts)
        info["buffers"] = sum(c.get("type") == "Buffer" for c in consts)
        info["constants"] = len(consts) - info["parameters"] - info["buffers"]
        if not consts:
            return
        stored = [c for c in consts if not c.get("from_folded")]
        all_cuda = bool(stored) and all(c.get("device_type") == "cuda" for c in stored)
        pos = 0
        for c in stored:
            c["blob_offset"] = pos
            size = c.get("data_size") or 0
            pos += size if all_cuda else -(-size // AOTI_ALIGN) * AOTI_ALIGN
        total = pos
        storage, base, holder = self._locate(so, blob, total, where)
        for c in consts:
            dtype = c.get("dtype")
            shape = c.get("shape") or ()
            strides = c.get("stride") or ()
            itemsize = _ITEMSIZE.get(dtype) if dtype else None
            folded = bool(c.get("from_folded"))
            row: dict[str, Any] = {
                "fqn": c.get("original_fqn") or c.get("name") or f"constant_{c['index']}",
                "model": self.model, "kind": _CONSTANT_KIND.get(c.get("type"), "constant"),
                "dtype": dtype, "shape": tuple(shape), "strides": tuple(strides),
                "storage_offset": c.get("offset"),
                "nbytes": _numel(shape) * itemsize if itemsize else 0,
                "storage": "folded" if folded else storage, "offset": None,
                "requires_grad": None, "pickled": False,
                "member": None if folded or holder is None else holder.index,
                "contiguous": _contiguous(tuple(shape), tuple(strides))
                if len(shape) == len(strides) else None,
                "storage_key": f"{self.model}/aoti/{c['index']}",
            }
            if not folded and base is not None and itemsize and c.get("offset") is not None \
                    and c.get("layout", "strided") == "strided" and len(shape) == len(strides):
                reach = _extent(tuple(shape), tuple(strides), c["offset"]) * itemsize
                if reach <= (c.get("data_size") or 0):
                    row["offset"] = base + c["blob_offset"] + c["offset"] * itemsize
                else:
                    arc._find("warning", f"{where} constant {escape(row['fqn'])!r}",
                              f"view reaches {reach} bytes, data_size is {c.get('data_size')}")
            if holder is not None and not folded:
                arc.used_by.setdefault(holder.index, []).append(row["fqn"])
            arc._add_row(row)

    def _constants(self, src: bytes, wrapper: ZipEntry, info: dict[str, Any]) -> list[dict]:
        arc = self.arc
        m = _MODEL_BASE.search(src)
        declared = None
        if m is not None:
            n_in, n_out, n_const = (int(x) for x in m.groups())
            if max(n_in, n_out, n_const) < _LIMIT:
                info["inputs"], info["outputs"], declared = n_in, n_out, n_const
        by_index: dict[int, dict[str, Any]] = {}
        for k, field, value in _CINFO.findall(src):
            i = int(k)
            if declared is not None and i >= declared:
                raise CorruptError(f"constants_info_[{i}] is out of range ({declared} constants)",
                                   file=arc.path, structure=f"zip member {wrapper.name!r}",
                                   offset=wrapper.data_offset)
            f = field.decode()
            by_index.setdefault(i, {"index": i})[f] = _cvalue(f, value)
        if declared is not None and len(by_index) != declared:
            arc._find("warning", f"zip member {escape(wrapper.name)!r}",
                      f"{declared} constants declared, {len(by_index)} described")
        out = []
        for i in sorted(by_index):
            c = by_index[i]
            shape, stride = c.get("shape"), c.get("stride")
            itemsize = _ITEMSIZE.get(c.get("dtype") or "", 1)
            numbers = [*(shape or ()), *(stride or ()), c.get("offset") or 0,
                       c.get("data_size") or 0]
            if shape is None or stride is None or len(shape) != len(stride) or \
                    min(numbers) < 0 or max(numbers) >= _LIMIT or _numel(shape) * itemsize >= _LIMIT:
                arc._find("warning", f"zip member {escape(wrapper.name)!r}",
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
                                      b"_binary_constants_bin_start", b"_binary_constants_bin_end")
        if blob is not None:
            if blob.compressed:
                return "blob", None, blob
            if blob.compressed_size < total:
                arc._find("warning", where, f"constants need {total} bytes, the blob holds "
                          f"{blob.compressed_size}", blob.data_offset)
                return "blob", None, blob
            return "blob", blob.data_offset, blob
        if so is None:
            arc._find("warning", where, "no shared object: constant offsets are unknown")
            return "so", None, None
        if region is None:
            arc._find("info", where, "constants region of the shared object not found "
                      "(not an ELF64 file with _binary_constants_bin_start): offsets unknown")
            return "so", None, so
        start, end = region
        if end - start >= total:
            arc.so_regions[so.index] = (start, start + total)
            return "so", start, so
        if end - start == 16:
            # Large weights (> 2 GB) are appended to the .so, page-aligned, followed by a magic
            # number; the embedded 16 bytes are (size + 8, magic).
            size_plus, magic = struct.unpack_from("<qq", arc.src.buf, start)
            tail = so.data_end - 8
            if size_plus - 8 == total and tail - total >= so.data_offset and \
                    struct.unpack_from("<q", arc.src.buf, tail)[0] == magic:
                arc.so_regions[so.index] = (tail - total, so.data_end)
                return "so", tail - total, so
        arc._find("warning", where, f"constants need {total} bytes, the shared object's "
                  f"constants region holds {end - start}: offsets unknown", start)
        return "so", None, so


# ------------------------------------------------------------------------------ ELF symbols

_ELF_HEAD = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_SHT_SYMTAB, _SHT_DYNSYM, _SHT_NOBITS = 2, 11, 8


def elf_symbol_range(src: Source, start: int, size: int, first: bytes,
                     last: bytes) -> tuple[int, int] | None:
    """Absolute file range between two symbols of the ELF64 little-endian image at
    ``[start, start + size)`` of ``src``, or ``None`` (not ELF64-LE, symbols absent, or
    anything out of bounds). Nothing is loaded; every read is bounded by the image.

    Example:
        >>> elf_symbol_range(src, so.data_offset, so.compressed_size,   # doctest: +SKIP
        ...                  b"_binary_constants_bin_start", b"_binary_constants_bin_end")
        (290688, 293888)
    """
    buf = src.buf
    if size < 64 or bytes(buf[start:start + 6]) != b"\x7fELF\x02\x01":
        return None
    h = _ELF_HEAD.unpack_from(buf, start)
    shoff, shentsize, shnum = h[6], h[11], h[12]
    if shentsize != _SHDR.size or shnum == 0 or shoff + shnum * shentsize > size:
        return None
    sections = [_SHDR.unpack_from(buf, start + shoff + k * shentsize) for k in range(shnum)]
    found: dict[bytes, int] = {}
    for want_type in (_SHT_DYNSYM, _SHT_SYMTAB):
        for sh in sections:
            if sh[1] != want_type or sh[9] != _SYM.size or sh[6] >= shnum:
                continue
            strtab = sections[sh[6]]
            if sh[4] + sh[5] > size or strtab[4] + strtab[5] > size:
                return None
            names = bytes(buf[start + strtab[4]: start + strtab[4] + strtab[5]])
            targets = {}
            for want in (first, last):
                k = names.find(want + b"\0")
                while k >= 0:
                    if k == 0 or names[k - 1] == 0:
                        targets[k] = want
                    k = names.find(want + b"\0", k + 1)
            if not targets:
                continue
            table = buf[start + sh[4]: start + sh[4] + sh[5] - sh[5] % _SYM.size]
            for st_name, _, _, shndx, value, _ in _SYM.iter_unpack(table):
                want = targets.get(st_name)
                if want is None or want in found or not 0 < shndx < shnum:
                    continue
                sec = sections[shndx]
                if sec[1] == _SHT_NOBITS or not sec[3] <= value <= sec[3] + sec[5]:
                    continue
                found[want] = value - sec[3] + sec[4]
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
