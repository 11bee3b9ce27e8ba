"""The archive: zip members classified by path (weights, constants, configs, graphs,
AOTInductor files, pickles, metadata), names checked, small metadata read, and the tensor
rows of every config and AOTInductor package collected.

This module owns :class:`Archive` and everything it holds: :mod:`.config` and :mod:`.aoti`
read members and hand their results to the archive's ``add_*`` / ``claim*`` methods, and
:mod:`.columns` only reads it (its two caches, :meth:`Archive.used_text` and
:meth:`Archive.graph`, live here too). No other module writes an archive's attributes.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ..._fmt import escape
from ..._json import loads as checked_loads
from ...errors import CorruptError, Finding
from ...source import Source
from .._zip import LOCAL_MAGIC, METHODS, ZipDirectory, ZipEntry
from .aoti import AotiPackage
from .columns import ROW_FIELDS, Model, TensorRow
from .config import read_config
from .graph_json import graph_stats
from .schema import (
    AOTI_BLOB_SUFFIX,
    AOTI_DIR,
    AOTI_SO_SUFFIX,
    AOTI_STORAGES,
    ARCHIVE_FORMAT,
    BYTEORDER,
    CONFIG_SUFFIX,
    CONSTANTS_DIR,
    DATA_DIR,
    GRAPH_SUFFIX,
    KIND_BLOB,
    KIND_CONFIG,
    KIND_CONSTANTS,
    KIND_GRAPH,
    KIND_METADATA,
    KIND_OTHER,
    KIND_PICKLE,
    KIND_SAMPLE_INPUTS,
    KIND_SO,
    KIND_SOURCE,
    KIND_WEIGHTS,
    LEGACY_LAYOUT,
    LEGACY_PROGRAM,
    METADATA_DIRS,
    METADATA_LIMIT,
    MODEL_EXPORTED,
    MODELS_DIR,
    PICKLE_PROTOCOLS,
    PICKLE_SUFFIX,
    PICKLED_CONSTANT_PREFIXES,
    SAMPLE_INPUTS_DIR,
    SMALL_LIMIT,
    SNIFFED_KINDS,
    SOURCE_SUFFIXES,
    TEXT_MEMBERS,
    WEIGHTS_DIR,
)

__all__ = ["Archive"]

#: Text members at the archive root (they are metadata).
_ROOT_TEXT = tuple(rel for rel in TEXT_MEMBERS.values() if "/" not in rel)

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
    if b0 == 0x80 and b1 in PICKLE_PROTOCOLS:
        return True
    if e.compressed_size >= 30 and buf[start:start + 4] == LOCAL_MAGIC:
        n = buf[start + 26] | (buf[start + 27] << 8)
        if 30 + n <= e.compressed_size:
            return bytes(buf[start + 30:start + 30 + n]).endswith(b".pkl")
    return False


class Archive:
    """Everything read from one archive; the builders of :mod:`.columns` turn it into
    columns."""

    def __init__(self, src: Source) -> None:
        self.src = src
        self.path = src.path
        self.zip = ZipDirectory(src)
        self.findings: list[Finding] = []
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
        self.models: dict[str, Model] = {}
        self.so_regions: dict[int, tuple[int, int]] = {}  # .so entry index -> constants range
        self._graphs: dict[str, dict[str, Any]] = {}  # see graph()
        self.aoti: dict[str, list[ZipEntry]] = {}  # data/aotinductor/<model>/ members
        self.program_members: list[int] = []  # graph and config members, in order
        self._used_text: Any = None  # see used_text()
        self._check_names()
        self._classify()
        self._metadata()
        self._exported_programs()
        self._aoti_packages()
        self._sniff_pickles()
        self.name_rows()

    # -- what the readers of configs and AOTInductor packages add ------------------------------
    def add_row(self, row: TensorRow) -> None:
        """Append one tensor row."""
        for col, value in zip(self.rows.values(), row):  # (rows: ROW_FIELDS in order)
            col.append(value)

    def add_rows(self, rows: TensorRow) -> None:
        """Append many tensor rows, given column by column (each field a list)."""
        for field, values in rows._asdict().items():
            self.rows[field].extend(values)

    def claim(self, member: int, model: str, fqn: str, pickled: bool = False) -> None:
        """Member ``member`` holds the bytes of tensor ``fqn`` of ``model`` (``pickled``: as
        a pickle, which makes it a pickle member)."""
        if pickled:
            self.pickled[member] = True
            self.roles[member] = KIND_PICKLE
        self.models_of[member] = self.models_of[member] or model
        self.use(member, fqn)

    def use(self, member: int, fqn: str) -> None:
        """Member ``member`` holds (some of) the bytes of tensor ``fqn``."""
        self.used_by.setdefault(member, []).append(fqn)

    def claim_many(self, members: list[int], model: str, fqns: list[str]) -> None:
        """:meth:`claim` (not pickled) for each ``(members[k], fqns[k])``, at once."""
        import numpy as np

        idx = np.array(members, np.int64)
        models_of = np.array(self.models_of, object)
        models_of[idx[np.equal(models_of[idx], None)]] = model
        self.models_of = models_of.tolist()
        used = self.used_by
        if len(set(members)) == len(members) and used.keys().isdisjoint(members):
            used.update(zip(members, map(list, zip(fqns))))
        else:
            for i, fqn in zip(members, fqns):
                users = used.get(i)
                if users is None:
                    used[i] = [fqn]
                else:
                    users.append(fqn)

    def add_model(self, name: str, info: Model) -> None:
        """Record an AOTInductor model (as ``<name>/aoti`` when an exported program already
        has ``name``)."""
        self.models[name if name not in self.models else f"{name}/aoti"] = info

    def add_so_region(self, member: int, start: int, end: int) -> None:
        """The constants of the shared object ``member`` lie at ``[start, end)``."""
        self.so_regions[member] = (start, end)

    # -- what the frame builders read (computed once) -------------------------------------------
    def used_text(self) -> Any:
        """Per member, the names of the tensors whose bytes it holds (``"; "``-joined), as
        an object array."""
        import numpy as np

        from ..._cols import objects

        text = self._used_text
        if text is None:
            text = self._used_text = np.full(len(self.roles), "", object)
            used = self.used_by
            if used:
                text[np.fromiter(used, np.int64, len(used))] = objects(
                    list(map("; ".join, used.values())))
        return text

    def graph(self, model: str) -> dict[str, Any]:
        """:func:`~.graph_json.graph_stats` of exported program ``model``'s graph member."""
        stats = self._graphs.get(model)
        if stats is None:
            e = self.models[model].entry
            stats = graph_stats(self.zip.content(e, METADATA_LIMIT), self.path, e)
            self._graphs[model] = stats
        return stats

    # -- findings ---------------------------------------------------------------------------
    def share_findings(self, findings: list[Finding]) -> None:
        """Move the findings so far into ``findings`` (the ``Parsed`` list) and keep adding
        there, so that frame builders running later (``graph_nodes``) report through it too."""
        findings.extend(self.findings)
        self.findings = findings

    def find(self, severity: str, structure: str, message: str,
             offset: int | None = None) -> None:
        """Record a finding (see :class:`~workbench.errors.Finding`)."""
        self.findings.append(Finding(severity, structure, offset, message))

    def _check_names(self) -> None:
        zd = self.zip
        for name in zd.duplicates:
            self.find("warning", f"zip member {escape(name)!r}",
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
                    self.find("warning", f"zip member {escape(names[i])!r}",
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
                self.find("warning", "zip central directory",
                           f"{outside} member(s) lie outside the archive folder "
                           f"{escape(self.root)!r}")

    # -- roles ----------------------------------------------------------------------------
    def _classify(self) -> None:
        """Each member's kind (``members.kind``) and model from its path; AOTInductor folders
        and the graph/config members of exported programs are collected."""
        prefix = self.root + "/" if self.root else ""
        cut = len(prefix)
        roles, models_of, pickled = self.roles, self.models_of, self.pickled
        programs = self.program_members
        w_config, c_config = CONFIG_SUFFIX[WEIGHTS_DIR], CONFIG_SUFFIX[CONSTANTS_DIR]
        # The common members first: raw weight storages, data/weights/<x>.
        weights = f"{prefix}{DATA_DIR}/{WEIGHTS_DIR}/"
        w_cut = len(weights)
        for i, name in enumerate(self.zip.names):
            if name.startswith(weights):
                base = name[w_cut:]
                if "/" not in base and not base.endswith((w_config, PICKLE_SUFFIX)):
                    roles[i] = KIND_WEIGHTS
                    continue
            elif not name.startswith(prefix):
                continue
            rel = name[cut:]
            top, _, rest = rel.partition("/")
            role, model = KIND_OTHER, None
            if top == DATA_DIR:
                role, model = self._data_member(i, rest, w_config, c_config)
            elif top == MODELS_DIR:
                if rest.endswith(GRAPH_SUFFIX) and "/" not in rest:
                    role, model = KIND_GRAPH, rest[:-len(GRAPH_SUFFIX)]
            elif rel in _ROOT_TEXT or top in METADATA_DIRS:
                role = KIND_METADATA
            roles[i] = role
            models_of[i] = model
            if role == KIND_PICKLE or (role == KIND_SAMPLE_INPUTS and rel.endswith(PICKLE_SUFFIX)):
                pickled[i] = True
            if model is not None and role in (KIND_GRAPH, KIND_CONFIG):
                programs.append(i)

    def _data_member(self, i: int, rest: str, w_config: str,
                     c_config: str) -> tuple[str, str | None]:
        """``(kind, model)`` of member ``i`` at ``data/<rest>``."""
        sub, _, base = rest.partition("/")
        role, model = KIND_OTHER, None
        if sub == WEIGHTS_DIR and "/" not in base:
            if base.endswith(w_config):
                role, model = KIND_CONFIG, base[:-len(w_config)]
            elif base.endswith(PICKLE_SUFFIX):
                role, model = KIND_PICKLE, base[:-len(PICKLE_SUFFIX)]
            else:
                role = KIND_WEIGHTS
        elif sub == CONSTANTS_DIR and "/" not in base:
            if base.endswith(c_config):
                role, model = KIND_CONFIG, base[:-len(c_config)]
            elif base.startswith(PICKLED_CONSTANT_PREFIXES) or base.endswith(PICKLE_SUFFIX):
                role = KIND_PICKLE
            else:
                role = KIND_CONSTANTS
        elif sub == SAMPLE_INPUTS_DIR:
            role = KIND_SAMPLE_INPUTS
            if base.endswith(PICKLE_SUFFIX) and "/" not in base:
                model = base[:-len(PICKLE_SUFFIX)]
        elif sub == AOTI_DIR:
            model, _, leaf = base.partition("/")
            if not leaf:
                model = None
            else:
                self.aoti.setdefault(model, []).append(self.zip.entry(i))
            if leaf.endswith(AOTI_SO_SUFFIX):
                role = KIND_SO
            elif leaf.endswith(AOTI_BLOB_SUFFIX):
                role = KIND_BLOB
            elif leaf.endswith(SOURCE_SUFFIXES):
                role = KIND_SOURCE
            elif leaf.endswith(".json"):
                role = KIND_METADATA
        return role, model

    def member(self, rel: str) -> ZipEntry | None:
        """The member at ``rel`` below the archive root, or ``None``."""
        return self.zip.get(f"{self.root}/{rel}" if self.root else rel)

    def text(self, e: ZipEntry, limit: int = METADATA_LIMIT) -> bytes:
        """The bytes of member ``e`` (at most ``limit``, decompressed if needed)."""
        return self.zip.read(e, limit)

    def json(self, e: ZipEntry) -> Any:
        """Member ``e`` parsed as JSON (:class:`CorruptError` when it is not JSON)."""
        return checked_loads(self.text(e), file=self.path, structure=f"zip member {e.name!r}",
                             offset=e.data_offset if not e.compressed else None)

    def _metadata(self) -> None:
        for key, rel in TEXT_MEMBERS.items():
            e = self.member(rel)
            if e is None:
                continue
            try:
                self.info[key] = self.text(e, SMALL_LIMIT).decode("utf-8").strip()
            except UnicodeDecodeError:
                raise CorruptError("is not UTF-8 text", file=self.path,
                                   structure=f"zip member {e.name!r}", offset=e.data_offset) from None
        fmt = self.info.get("archive_format")
        legacy = self.member(LEGACY_PROGRAM)
        if fmt is None and legacy is not None:
            # torch.export.save before the pt2 layout (torch <= 2.7): a flat zip whose
            # weights live in the pickled serialized_state_dict.pt.
            self.info["layout"] = LEGACY_LAYOUT
            self.find("info", "archive layout",
                      f"{LEGACY_LAYOUT}: the graph is {LEGACY_PROGRAM} and the weights are "
                      "pickled in serialized_state_dict.pt (listed, never unpickled), so no "
                      "tensor is listed", offset=legacy.header_offset)
        elif fmt is None:
            self.find("warning", "archive_format",
                       "no archive_format member: not a torch.export / AOTInductor archive "
                       "(members are listed, nothing else is read)")
        elif fmt != ARCHIVE_FORMAT:
            self.find("warning", "archive_format",
                      f"archive_format is {escape(fmt)!r}, expected {ARCHIVE_FORMAT!r}")
        order = self.info.get("byteorder")
        if order not in (None, BYTEORDER):
            self.find("warning", "byteorder", f"byteorder is {escape(order)!r}: tensor views "
                       "assume little-endian bytes")

    # -- torch.export programs ----------------------------------------------------------------
    def _exported_programs(self) -> None:
        names: list[str] = []
        for i in self.program_members:
            model = self.models_of[i]
            if model not in names:
                names.append(model)
        for model in names:
            graph = self.member(f"{MODELS_DIR}/{model}{GRAPH_SUFFIX}")
            if graph is not None:
                self.models[model] = Model(name=model, kind=MODEL_EXPORTED, member=graph.name,
                                           entry=graph)
            for kind_dir in (WEIGHTS_DIR, CONSTANTS_DIR):
                rel = f"{DATA_DIR}/{kind_dir}/{model}{CONFIG_SUFFIX[kind_dir]}"
                cfg = self.member(rel)
                if cfg is None:
                    pickled = self.member(f"{DATA_DIR}/{kind_dir}/{model}{PICKLE_SUFFIX}")
                    if graph is not None and pickled is not None:
                        # torch 2.8 wrote the pt2 layout with pickled weights and constants
                        self.find("info", f"model {escape(model)!r}",
                                  f"no {rel}: the {kind_dir} are pickled in {pickled.name} "
                                  "(torch 2.8 layout; listed, never unpickled)",
                                  offset=pickled.header_offset)
                    elif graph is not None:
                        self.find("warning", f"model {escape(model)!r}", f"no {rel}")
                    continue
                read_config(self, model, kind_dir, cfg)

    # -- AOTInductor packages -------------------------------------------------------------
    def _aoti_packages(self) -> None:
        for model, members in self.aoti.items():
            AotiPackage(self, model, members).read()

    def _sniff_pickles(self) -> None:
        buf = self.src.buf
        zd = self.zip
        roles, pickled, used = self.roles, self.pickled, self.used_by
        for i in range(len(roles)):
            if pickled[i] or i in used or roles[i] not in SNIFFED_KINDS:
                continue
            if _is_pickle(buf, zd.entry(i)):
                pickled[i] = True
                if roles[i] != KIND_SAMPLE_INPUTS:
                    roles[i] = KIND_PICKLE
        n = sum(pickled)
        if n:
            self.find("info", "zip central directory",
                       f"{n} pickled member(s) are listed but never unpickled "
                       "(torch.export.load would unpickle them: only load trusted files)")
        comp = zd.arrays["compressed"]
        if comp.any():
            first = zd.entry(int(comp.argmax()))
            self.find("info", "zip central directory",
                       f"{int(comp.sum())} compressed member(s) (e.g. {escape(first.name)!r}, "
                       f"{METHODS.get(first.method, first.method)}): not zero-copy")

    def name_rows(self) -> None:
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
                          f"{model}/aoti/{fqn}" if storage in AOTI_STORAGES else
                          f"{model}/{fqn}"
                          for fqn, model, storage in zip(fqns, rows["model"], rows["storage"])]
        n = len(keys)
        self.storage_ids = np.fromiter(map(ids.__getitem__, keys), np.int64, n)
        self.shared = np.zeros(n, bool) if users is None else \
            np.fromiter([users[k] > 1 for k in keys], bool, n)
