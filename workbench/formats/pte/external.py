"""Attaching ``.ptd`` data files to a program: which keys it wants, which files resolve them,
and where each external tensor then lies.

A program wants (1) the fully-qualified name of every external tensor, with its dtype and
shape, and (2) every content-hash key (64 hex digits, the XNNPACK convention) that one of its
delegate blobs mentions and that the program does not hold itself. Explicit data files are
always attached; siblings (best candidates first) only while they resolve a wanted key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..._cols import filled
from ...limits import DELEGATE_SCAN_MAX_BYTES
from ...source import Source
from ..parsed import Parsed
from .program import Method, NamedEntry
from .tensors import DTYPE_NAMES, EXTERNAL, Tensors

_HEX_KEY = re.compile(rb"[0-9a-f]{64}")
#: Delegate blobs larger than this are not scanned for keys.
MAX_SCANNED_BLOB = DELEGATE_SCAN_MAX_BYTES


class Want(NamedTuple):
    """What an external tensor needs of a data file's entry."""
    dtype: str
    shape: tuple
    nbytes: int


class ExternalPlacement(NamedTuple):
    """Where a method's external tensors are (tensors-frame columns ``file``, ``offset``,
    ``segment``, ``missing``: -1 not external, 0 found, 1 missing)."""
    file: np.ndarray
    offset: np.ndarray
    segment: np.ndarray
    missing: np.ndarray


class External:
    """The data files attached to one program and the keys they resolve."""

    def __init__(self, src: Source, methods: list[Method], named: list[NamedEntry]) -> None:
        self.src = src
        self.methods = methods
        self.named = named
        self.wants = self._external_wants()
        self.data: list[Parsed] = []
        self.data_choice: dict[str, tuple[str, int]] = {}
        self.key_users: dict[str, list[str]] = {}
        self._hex_key_cache: dict[str, list[str]] | None = None

    def _blobs(self) -> list[tuple[str, memoryview]]:
        """(label, bytes) of every delegate blob small enough to scan (up to 64 MiB)."""
        out = []
        for plan in self.methods:
            for k, d in enumerate(plan.delegates):
                if d.size <= MAX_SCANNED_BLOB:
                    out.append((f"{plan.name} delegate {k} ({d.id})",
                                self.src.buf[d.offset: d.offset + d.size]))
        return out

    def _hex_keys(self) -> dict[str, list[str]]:
        """Content-hash keys each blob mentions (the blobs are scanned once per program)."""
        found = self._hex_key_cache
        if found is None:
            found = {}
            for label, blob in self._blobs():
                for m in set(_HEX_KEY.findall(blob)):
                    found.setdefault(m.decode(), []).append(label)
            self._hex_key_cache = found
        return found

    def _delegate_keys(self, candidates: set[str]) -> dict[str, list[str]]:
        """key -> delegates whose processed blob mentions it (blobs up to 64 MiB are scanned)."""
        found = {k: v for k, v in self._hex_keys().items() if k in candidates}
        plain = [k for k in candidates
                 if k and not (len(k) == 64 and _HEX_KEY.fullmatch(k.encode()))]
        if plain and len(plain) <= 4096:
            for label, blob in self._blobs():
                raw = bytes(blob)
                for key in plain:
                    if key.encode() in raw:
                        found.setdefault(key, []).append(label)
        return found

    def _external_wants(self) -> dict[str, Want]:
        """fqn -> what every external tensor of the program needs."""
        out: dict[str, Want] = {}
        for plan in self.methods:
            t = plan.tensors
            for k in np.flatnonzero(t.storage == EXTERNAL).tolist():
                fqn = t.fqn[k]
                if fqn is not None:
                    out[fqn] = Want(DTYPE_NAMES[t.scalar_type[k]], t.shape[k], int(t.nbytes[k]))
        return out

    def attach(self, data: Sequence[Parsed], siblings: Iterable[Parsed]) -> None:
        """Choose the ``.ptd`` files that hold this program's external data.

        Explicit ``data`` files are always attached. ``siblings`` (best candidates first) are
        consumed lazily, only while some key is still unresolved, and attached only when they
        resolve one (see :meth:`resolves`). ``self.data_choice`` records, per attached file,
        how it came (``data`` or ``sibling``) and how many wanted keys it resolved.
        """
        own = {k for k, _ in self.named}
        self.hex_wanted = set(self._hex_keys()) - own
        self.data = list(data)
        unresolved = set(self.wants) | self.hex_wanted
        for p in data:
            hits = self.resolves(p)
            self.data_choice[p.path] = ("data", len(hits))
            unresolved -= hits
        if unresolved:
            for p in siblings:
                new = self.resolves(p) & unresolved
                if new:
                    self.data.append(p)
                    self.data_choice[p.path] = ("sibling", len(new))
                    unresolved -= new
                else:
                    p.sources[p.path].close()
                if not unresolved:
                    break
        keys = set(own)
        for p in self.data:
            keys.update(p.extra["ptd"].by_key)
        self.key_users = self._delegate_keys(keys)

    def resolves(self, p: Parsed) -> set[str]:
        """The keys this program wants that the parsed ``.ptd`` ``p`` holds: external tensors
        whose dtype/shape agree with the entry, and content-hash keys that a delegate blob
        mentions and the program does not hold itself."""
        ptd = p.extra["ptd"]
        by_key = ptd.by_key
        hits = {k for k, w in self.wants.items() if k in by_key and ptd.fits(by_key[k], *w)}
        return hits | (self.hex_wanted & set(by_key))

    def place(self, t: Tensors, file: str, findings: list[dict[str, Any]],
              matched: dict[str, set[str]]) -> ExternalPlacement:
        """Where the tensors of one method lie, each external one in the first data file whose
        entry fits it (``matched``: data file -> keys claimed, filled in; problems are added to
        ``findings``)."""
        n = len(t)
        datas = [(d.path, d.extra["ptd"]) for d in self.data]
        offset = t.offset.copy()
        segment = t.segment.copy()
        files = filled(n, None)
        files[offset >= 0] = file
        missing = np.full(n, -1, np.int8)  # -1: not external
        for k in np.flatnonzero(t.storage == EXTERNAL).tolist():
            fqn = t.fqn[k]
            hit = None
            if fqn is not None:  # the first data file whose entry fits the tensor
                want = self.wants[fqn]
                for path, ptd in datas:
                    row = ptd.by_key.get(fqn)
                    if row is not None and ptd.fits(row, *want):
                        hit = (path, ptd, row)
                        break
            missing[k] = hit is None
            if hit is None:
                holders = sorted({path for path, ptd in datas if fqn in ptd.by_key})
                if holders:
                    findings.append({
                        "severity": "warning", "structure": f"tensor {fqn!r}",
                        "offset": None, "message": "data files hold this key with another "
                        f"dtype/shape: {holders}"})
                continue
            path, ptd, row = hit
            matched.setdefault(path, set()).add(fqn)
            entry_off = int(ptd.cols["offset"][row])
            entry_size = int(ptd.cols["size"][row])
            if t.nbytes[k] > entry_size:
                findings.append({
                    "severity": "error", "structure": f"tensor {fqn!r}",
                    "offset": entry_off, "message": f"{int(t.nbytes[k])} bytes expected "
                    f"but the data file holds {entry_size}"})
                missing[k] = 1
                continue
            files[k], offset[k], segment[k] = path, entry_off, int(ptd.cols["segment"][row])
        return ExternalPlacement(files, offset, segment, missing)
