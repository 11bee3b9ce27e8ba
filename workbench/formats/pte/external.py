"""Attaching ``.ptd`` data files to a program: which keys it wants, which files resolve them,
and where each external tensor then lies.

A program wants (1) the fully-qualified name of every external tensor, with its dtype and
shape, and (2) every content-hash key (64 hex digits, the XNNPACK convention) that one of its
delegate blobs mentions and that the program does not hold itself. Explicit data files are
always attached; siblings (best candidates first) only while they resolve a wanted key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from typing import NamedTuple

import numpy as np

from ..._cols import filled
from ..._vecfb import ascii_rows, rows_at
from ...errors import Finding
from ...limits import DELEGATE_SCAN_MAX_BYTES
from ...source import Source
from ..parsed import Parsed
from .program import Method
from .tensors import DTYPE_NAMES, EXTERNAL, Tensors

#: Delegate blobs larger than this are not scanned for keys.
MAX_SCANNED_BLOB = DELEGATE_SCAN_MAX_BYTES


def _runs(raw: bytes, member: bytes, shortest: int) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` of every maximal run of ``raw``'s bytes that ``member`` (a
    256-byte translation table: 1 for a member byte, 0 otherwise) marks, at least
    ``shortest`` long."""
    if not raw:
        z = np.zeros(0, np.int64)
        return z, z
    edges = np.diff(np.frombuffer(raw.translate(member), np.int8), prepend=np.int8(0),
                    append=np.int8(0))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    keep = ends - starts >= shortest
    return starts[keep], ends[keep]


def _member_table(chars: bytes) -> bytes:
    """The :func:`_runs` table of the bytes in ``chars``."""
    table = bytearray(256)
    for c in chars:
        table[c] = 1
    return bytes(table)


_HEX_DIGITS = _member_table(b"0123456789abcdef")


def _hex_runs(blob: memoryview) -> set[str]:
    """The distinct content-hash keys in ``blob``: the 64-hex-digit hashes as
    ``re.findall(rb"[0-9a-f]{64}", blob)`` finds them (each run of hex digits holds
    ``len // 64``, one after the other from its start), each extended to the whole flatbuffer
    string it ends (``scale_<hash>``) where it ends one."""
    raw = bytes(blob)
    starts, ends = _runs(raw, _HEX_DIGITS, 64)
    counts = (ends - starts) // 64
    total = int(counts.sum())
    if not total:
        return set()
    first = np.repeat(starts, counts)  # the k-th key of a run starts 64 * k after the run
    first += 64 * (np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts))
    keys = ascii_rows(rows_at(np.frombuffer(raw, np.uint8), first, 64))
    # A hash that ends a longer flatbuffer string is that string: XNNPACK names the scales of
    # a quantized weight ``scale_<hash>`` (the runtime looks up the whole string, never the
    # bare hash). The string's u32 length sits right before its first character.
    ident = raw.translate(_KEY_CHARS)
    out = set()
    for at, key in zip(first.tolist(), keys):
        a = at
        while a > 0 and at - a < _MAX_KEY_PREFIX and ident[a - 1]:
            a -= 1
        while a < at and not (a >= 4 and int.from_bytes(raw[a - 4:a], "little") == at + 64 - a):
            a += 1
        out.add(raw[a:at + 64].decode("ascii") if a < at else key)
    return out


#: Characters of a key prefix before a content hash (``scale_``), and the longest prefix.
_KEY_CHARS = _member_table(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_MAX_KEY_PREFIX = 64


class _Substrings:
    """Which of many keys occur in a byte string, in time that grows with the string and not
    with the number of keys (``key in blob`` per key costs keys x blob).

    Every occurrence of a key lies inside a maximal run of bytes that occur in some key, so
    only those runs (at least as long as the shortest key) are looked at: a run that is a key
    is found by one set lookup, a longer run by its windows of every key length. When long
    runs would cost more than scanning the string once per key, the string is scanned per key.
    """

    #: the Python work of one window lookup, in units of one byte scanned by ``bytes.find``
    WINDOW_COST = 64

    def __init__(self, keys: list[str]) -> None:
        self.keys = {k.encode(): k for k in keys}
        self.lengths = sorted({len(b) for b in self.keys})
        table = np.zeros(256, np.uint8)
        table[np.frombuffer(b"".join(self.keys), np.uint8)] = 1
        self.member = table.tobytes()

    def within(self, blob: memoryview) -> list[str]:
        """The keys that occur in ``blob`` (in the order of the runs that hold them)."""
        keys, shortest = self.keys, self.lengths[0]
        raw = bytes(blob)
        starts, ends = _runs(raw, self.member, shortest)
        hits = dict.fromkeys(self._whole_runs(raw, starts, ends))
        long_runs = [raw[a:b] for a, b in zip(*(x[ends - starts > shortest].tolist()
                                                for x in (starts, ends)))]
        work = sum(len(r) for r in long_runs) * len(self.lengths) * self.WINDOW_COST
        if work > len(keys) * len(raw):
            return [k for b, k in keys.items() if b in raw]
        for run in long_runs:
            for n in self.lengths:
                if n >= len(run):
                    break
                for i in range(len(run) - n + 1):
                    w = run[i:i + n]
                    if w in keys:
                        hits[w] = None
        return [keys[b] for b in hits]

    def _whole_runs(self, raw: bytes, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
        """The runs that are a key as a whole, in run order: the runs of each key length
        gathered as one block of fixed-width byte strings, looked up together."""
        keys = self.keys
        if self.member[0]:  # a key holds a NUL, which fixed-width byte strings drop
            return [r for r in (raw[a:b] for a, b in zip(starts.tolist(), ends.tolist()))
                    if r in keys]
        u8 = np.frombuffer(raw, np.uint8)
        span = ends - starts
        found: list[tuple[int, bytes]] = []
        for n in self.lengths:
            rows = np.flatnonzero(span == n)
            if not len(rows):
                continue
            runs = rows_at(u8, starts[rows], n).view(f"S{n}").reshape(-1).tolist()
            hit = np.fromiter(map(keys.__contains__, runs), bool, len(runs))
            found.extend(zip(rows[hit].tolist(), (runs[k] for k in np.flatnonzero(hit).tolist())))
        found.sort()
        return [r for _, r in found]


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

    def __init__(self, src: Source, methods: list[Method], named: list[str]) -> None:
        """``named``: the keys of the program's own named data."""
        self.src = src
        self.methods = methods
        self.named = named
        self.wants = self._external_wants()
        self.data: list[Parsed] = []
        self.data_choice: dict[str, tuple[str, int]] = {}
        self._key_users: dict[str, list[str]] | None = None
        self._user_text: dict[str, str] | None = None
        self._hits: list[tuple[str, list[str]]] | None = None
        self._hex_sets: list[set[str]] | None = None
        self._hex_wanted: set[str] | None = None
        #: ``(method, delegate) -> keys`` of a blob whose parser lists every named-data key
        #: its graph refers to (``None``: unknown, the blob's bytes are scanned instead);
        #: set by the program reader once it can take the blobs apart.
        self.parsed_keys: Callable[[int, int], tuple[str, ...] | None] | None = None

    def _blobs(self) -> list[tuple[str, memoryview | None, int, int]]:
        """(label, bytes, method, delegate) of every delegate blob; the bytes are ``None``
        for a blob too large to scan (over 64 MiB)."""
        out = []
        for m, plan in enumerate(self.methods):
            for k, d in enumerate(plan.delegates):
                view = (self.src.buf[d.offset: d.offset + d.size] if d.size <= MAX_SCANNED_BLOB
                        else None)
                out.append((f"{plan.name} delegate {k} ({d.id})", view, m, k))
        return out

    def _hex_in(self) -> list[set[str]]:
        """The content-hash keys each blob mentions (empty for one too large to scan); the
        blobs are scanned once per program."""
        if self._hex_sets is None:
            self.src.prefetch_many([(d.offset, d.size) for plan in self.methods  # (remote)
                                    for d in plan.delegates if d.size <= MAX_SCANNED_BLOB],
                                   gap=64 << 10)
            self._hex_sets = [set() if view is None else _hex_runs(view)
                              for _, view, _, _ in self._blobs()]
        return self._hex_sets

    @property
    def hex_wanted(self) -> set[str]:
        """Content-hash keys that a blob mentions and the program does not hold itself (what a
        data file may resolve; worked out on first use)."""
        if self._hex_wanted is None:
            own = set(self.named)
            self._hex_wanted = {k for keys in self._hex_in() for k in keys} - own
        return self._hex_wanted

    def _blob_hits(self) -> list[tuple[str, list[str]]]:
        """Per delegate blob: its label and the named-data keys (of the program and of the
        attached data files) it refers to: the keys its parser lists (see
        :attr:`parsed_keys`), else the keys its bytes mention (blobs up to 64 MiB). Worked
        out once."""
        if self._hits is not None:
            return self._hits
        candidates = set(self.named)
        for p in self.data:
            candidates.update(p.extra.ptd.by_key)
        out = []
        search: _Substrings | bool | None = None
        parsed = self.parsed_keys
        for i, (label, view, m, k) in enumerate(self._blobs()):
            keys = None if parsed is None else parsed(m, k)
            if keys is None:
                if view is None:
                    continue
                if search is None:
                    search = self._plain_search(candidates)
                keys = list(self._hex_in()[i])
                if search is not False:
                    keys += search.within(view)
            out.append((label, list(keys) if candidates.issuperset(keys)  # (the usual case)
                        else [key for key in keys if key in candidates]))
        self._hits = out
        return out

    @staticmethod
    def _plain_search(candidates: set[str]) -> _Substrings | bool:
        """The search for the keys that are not 64 hex digits (``False``: none, or more than
        4,096 of them, which are then not searched for)."""
        plain = [k for k in candidates  # (strip: empty when every character is a hex digit)
                 if k and (len(k) != 64 or k.strip("0123456789abcdef"))]
        return _Substrings(plain) if plain and len(plain) <= 4096 else False

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
        self.data = list(data)
        peeked = None
        if not self.data:
            if not self.wants and not any(plan.delegates for plan in self.methods):
                return  # nothing that a data file could resolve
            rest = iter(siblings)
            peeked = next(rest, None)
            if peeked is None:  # no data file at all: the blobs need not be scanned now
                return
            siblings = chain((peeked,), rest)
        unresolved = set(self.wants) | self.hex_wanted
        if not unresolved and peeked is not None:
            peeked.sources[peeked.path].close()
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

    @property
    def key_users(self) -> dict[str, list[str]]:
        """key -> delegates whose blob refers to it, for every named-data key of the program
        and of the attached data files (worked out on first use)."""
        users = self._key_users
        if users is None:
            users = self._key_users = {}
            for label, keys in self._blob_hits():
                for key in keys:
                    users.setdefault(key, []).append(label)
        return users

    def key_user_text(self) -> dict[str, str]:
        """key -> its :attr:`key_users` joined by ``'; '`` (the ``used_by`` column)."""
        text = self._user_text
        if text is None:
            text = self._user_text = {}
            for label, keys in self._blob_hits():
                if text and not text.keys().isdisjoint(keys):  # a key of several blobs
                    again = [key for key in keys if key in text]
                    for key in again:
                        text[key] = f"{text[key]}; {label}"
                    seen = set(again)
                    keys = [key for key in keys if key not in seen]
                text.update(dict.fromkeys(keys, label))
        return text

    def resolves(self, p: Parsed) -> set[str]:
        """The keys this program wants that the parsed ``.ptd`` ``p`` holds: external tensors
        whose dtype/shape agree with the entry, and content-hash keys that a delegate blob
        mentions and the program does not hold itself."""
        ptd = p.extra.ptd
        by_key = ptd.by_key
        hits = {k for k, w in self.wants.items() if k in by_key and ptd.fits(by_key[k], *w)}
        return hits | (self.hex_wanted & set(by_key))

    def place(self, t: Tensors, file: str, findings: list[Finding],
              matched: dict[str, set[str]]) -> ExternalPlacement:
        """Where the tensors of one method lie, each external one in the first data file whose
        entry fits it (``matched``: data file -> keys claimed, filled in; problems are added to
        ``findings``)."""
        n = len(t)
        datas = [(d.path, d.extra.ptd) for d in self.data]
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
                    findings.append(Finding("warning", f"tensor {fqn!r}", None,
                                            "data files hold this key with another "
                                            f"dtype/shape: {holders}"))
                continue
            path, ptd, row = hit
            matched.setdefault(path, set()).add(fqn)
            entry_off = int(ptd.cols["offset"][row])
            entry_size = int(ptd.cols["size"][row])
            if t.nbytes[k] > entry_size:
                findings.append(Finding("error", f"tensor {fqn!r}", entry_off,
                                        f"{int(t.nbytes[k])} bytes expected "
                                        f"but the data file holds {entry_size}"))
                missing[k] = 1
                continue
            files[k], offset[k], segment[k] = path, entry_off, int(ptd.cols["segment"][row])
        return ExternalPlacement(files, offset, segment, missing)
