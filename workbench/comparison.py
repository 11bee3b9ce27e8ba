"""Compare two artifacts: tensors matched across them, both layouts, byte accounting, duplicates.

The typical question: *what changed when the weights went external?* — or from portable to
XNNPACK, from ``.pte`` to ``.pt2``, from an AOTInductor ``.so`` with compiled-in constants to a
package with a separate weights blob.

>>> import workbench as wb
>>> cmp = wb.compare("sample_models/mlp_portable.pte",
...                  ["sample_models/mlp_external.pte", "sample_models/mlp_external.ptd"],
...                  hashes=True)                                     # doctest: +SKIP
>>> cmp.tensors[["name_a", "name_b", "match", "moved", "same_bytes"]]  # doctest: +SKIP
      name_a      name_b         match                moved  same_bytes
0  forward/0  fc1.weight  method_value  segment → external        True
...
>>> cmp.delta().loc["weights"]                                        # doctest: +SKIP

**Matching** (the ``match`` column of :attr:`Comparison.tensors`), tried in this order:

1. ``name`` — the fully qualified name where both sides have one (``fqn`` of a ``.pte``
   value; the name of a ``.ptd`` entry, named-data key or ``.pt2`` tensor). Synthetic
   ``.pte`` names like ``forward/0`` are *not* used for this rule.
2. ``method_value`` — the same ``(method, value index)`` in both programs, when dtype and
   shape agree too (two exports of one model keep their value tables).
3. ``content`` — equal SHA-256 of the stored bytes; only once hashes are computed
   (``hashes=True`` or :meth:`Comparison.hash`). Then ``content_copy`` pairs a leftover row
   with an already matched row holding the same bytes (e.g. the second copy of a tie that
   broke on one side).
4. ``dequantized`` — also only once hashed (it reads the values): a float weight and a
   quantized delegate constant of the same shape (an XNNPACK ``qcint8`` / ``qbint4`` / ...
   row of ``delegate_tensors``) whose dequantized values are the weight up to rounding (no
   element further than half a quantization step of its channel): which portable weight
   became which quantized constant, and in what dtype.

Delegate constants take part as rows of their own (``delegate_tensors`` names such as
``forward/delegate0/2``, with the graph's dtype and logical shape); a named-data entry that
one of them reads is shown as that constant.

Only tensors with stored bytes are matched (rows with an ``offset``, and external / pickled /
compressed rows without one); memory-planned activations (``planned``), ``unallocated``
inputs and ``folded`` constants hold no bytes and are left out.

**Hashing** reads the bytes (zero-copy, through the read-only map). Matching by content and
``same_bytes`` need every stored tensor hashed: that happens only on request. Duplicate
detection (the ``duplicates`` frame and the ``duplicates`` summary metric) always runs, but
cheaply: only byte ranges whose size occurs more than once on a side are candidates; a
sampled fingerprint (16 × 4 KiB) screens them; only ranges whose fingerprints collide are
hashed in full, and by default only up to :data:`DUPLICATE_HASH_CAP` bytes each
(``hash_cap=None`` lifts it; ``hashes=True`` hashes everything). Ranges are stored tensors
and delegate blobs (``delegate`` / ``so`` segments); rows sharing one location (a tie kept in
a portable ``.pte``, two methods using one constant) are one range, not duplicates.
"""

from __future__ import annotations

import hashlib
import html
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

from ._fmt import align_of, human_bytes
from .errors import ArtifactError
from .vocab import CLASSES, KIND_CLASS, NO_BYTES, byte_class

if TYPE_CHECKING:
    import pandas as pd

    from .artifact import Artifact

__all__ = ["Comparison", "compare", "duplicates", "byte_class", "CLASSES", "KIND_CLASS",
           "DUPLICATE_HASH_CAP"]

#: What :func:`compare` accepts for one side: a path, an opened artifact, or a list of paths
#: (the program first, then its data files: ``[pte, ptd, ...]``).
ArtifactLike = Union[str, "os.PathLike[str]", "Artifact", Sequence[Union[str, "os.PathLike[str]"]]]

#: Largest byte range hashed in full for duplicate detection unless asked (1 GiB: a big tied
#: embedding still fits). Only ranges whose sampled fingerprints already collide get there.
DUPLICATE_HASH_CAP = 1 << 30

#: Hash this many bytes or more behind a progress bar (``progress=None``).
PROGRESS_MIN = 256 << 20

#: Hashes read this much at a time through the descriptor into one buffer that stays in
#: cache (measured: 1 MiB hashes as fast as the map; 16 MiB was ~10-25 % slower).
_READ_CHUNK = 1 << 20
_SAMPLE = 4096
_SAMPLES = 16
_SIDES = ("a", "b")


# ------------------------------------------------------------------------------------------
# Opening
# ------------------------------------------------------------------------------------------

def _open(x: ArtifactLike, data: Sequence[str | os.PathLike[str]] | None, which: str
          ) -> tuple[Artifact, bool]:
    """(artifact, opened_here) for one side."""
    from ._open import open as wb_open
    from .artifact import Artifact

    if isinstance(x, Artifact):
        if data is not None:
            raise TypeError(f"data_{which}= applies to a path, not to an opened Artifact")
        return x, False
    if isinstance(x, (list, tuple)):
        if not x:
            raise ValueError(f"side {which}: an empty list of files")
        if data is not None:
            raise TypeError(f"side {which}: give the data files in the list or in data_{which}=, "
                            "not both")
        first, *rest = x
        return wb_open(first, data=rest), True
    return wb_open(x, data=data), True


def compare(a: ArtifactLike, b: ArtifactLike, *,
            data_a: Sequence[str | os.PathLike[str]] | None = None,
            data_b: Sequence[str | os.PathLike[str]] | None = None,
            hashes: bool = False, hash_cap: int | None = DUPLICATE_HASH_CAP,
            progress: bool | None = None) -> Comparison:
    """Compare two artifacts: matched tensors, both layouts, byte accounting, duplicates.

    Args:
        a, b: a path, an opened :class:`~workbench.Artifact`, or a list of paths
            ``[program, data file, ...]`` (the first is opened with ``data=`` the rest).
        data_a, data_b: ``data=`` for :func:`workbench.open` of a path (``[]``: attach no
            ``.ptd``).
        hashes: hash every stored tensor now (content matching and ``same_bytes``);
            otherwise call :meth:`Comparison.hash` later.
        hash_cap: largest range hashed for duplicate detection without ``hashes``
            (``None``: no cap).
        progress: show a ``tqdm`` bar while hashing (``None``: when hashing 256 MiB or more).

    Returns:
        A :class:`Comparison`. Artifacts it opened are closed by ``Comparison.close()`` (or
        ``with``); artifacts passed in stay open.

    Example:
        >>> cmp = compare("sample_models/tied_portable.pte",
        ...               "sample_models/tied_xnnpack.pte")     # doctest: +SKIP
        >>> cmp.duplicates[["side", "nbytes", "copies", "names"]]   # doctest: +SKIP
          side  nbytes  copies                      names
        0    b    4096       2  forward/0; 443a9fa4ffb0...
    """
    art_a, own_a = _open(a, data_a, "a")
    try:
        art_b, own_b = _open(b, data_b, "b")
    except BaseException:
        if own_a:
            art_a.close()
        raise
    cmp = Comparison(art_a, art_b, hash_cap=hash_cap, progress=progress,
                     _owned=[x for x, own in ((art_a, own_a), (art_b, own_b)) if own])
    if hashes:
        cmp.hash()
    return cmp


# ------------------------------------------------------------------------------------------
# Byte ranges and hashing
# ------------------------------------------------------------------------------------------

# Hashes read through the file descriptor (Source.chunks / readinto), never through the map:
# a file truncated or rewritten under them gives StaleFileError, not SIGBUS.

def _sha256(art: Artifact, file: str, offset: int, nbytes: int, bar: Any = None) -> str:
    """SHA-256 of a stored byte range of ``art`` (bounds- and identity-checked)."""
    h = hashlib.sha256()
    for chunk in art.sources[file].chunks(offset, nbytes, "stored bytes", _READ_CHUNK):
        h.update(chunk)
        if bar is not None:
            bar.update(len(chunk))
    return h.hexdigest()


def _fingerprint(art: Artifact, file: str, offset: int, n: int) -> bytes:
    """Cheap screen: the size and 16 evenly spaced 4 KiB samples (all of a small range)."""
    src = art.sources[file]
    what = "stored bytes"
    if n <= _SAMPLE * _SAMPLES:
        return hashlib.sha256(src.readinto(offset, bytearray(n), what)).digest()
    src.check(offset, n, what)
    h = hashlib.sha256(n.to_bytes(8, "little"))
    step = (n - _SAMPLE) / (_SAMPLES - 1)
    buf = bytearray(_SAMPLE)
    for k in range(_SAMPLES):
        start = int(k * step)
        h.update(src.readinto(offset + start, buf, what))
    return h.digest()


class _Hasher:
    """SHA-256 of byte ranges, cached by ``(file, offset, nbytes)`` (files are read-only)."""

    def __init__(self, progress: bool | None) -> None:
        self.progress = progress
        self.digests: dict[tuple[str, int, int], str] = {}

    def get(self, key: tuple[str, int, int]) -> str | None:
        return self.digests.get(key)

    def hash_all(self, items: Iterable[tuple[Artifact, tuple[str, int, int]]]) -> None:
        todo = {key: art for art, key in items if key not in self.digests}
        if not todo:
            return
        total = sum(k[2] for k in todo)
        bar = None
        show = self.progress if self.progress is not None else total >= PROGRESS_MIN
        if show:
            try:
                from tqdm.auto import tqdm
            except ImportError:  # pragma: no cover - tqdm is in the notebook/dev extras
                tqdm = None
            if tqdm is not None:
                bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                           desc="sha256")
        try:
            for key, art in todo.items():
                self.digests[key] = _sha256(art, *key, bar)
        finally:
            if bar is not None:
                bar.close()


def _na(x: Any) -> Any:
    """``None`` for pandas/numpy missing values, else ``x`` (plain ints for numpy ints)."""
    import pandas as pd

    if x is None or x is pd.NA:
        return None
    if isinstance(x, (tuple, list, str)):
        return x
    try:
        if pd.isna(x):
            return None
    except (TypeError, ValueError):  # tuples, arrays
        return x
    return x.item() if hasattr(x, "item") else x


class StoredTensor:
    """One tensor row of one side, reduced to what matching and display need."""

    __slots__ = ("i", "name", "qual", "mv", "dtype", "shape", "nbytes", "storage", "file",
                 "offset", "align", "key", "quant")

    def __init__(self, i: int, rec: dict[str, Any]) -> None:
        self.i = i
        self.name: str = rec["name"]
        fqn = rec.get("fqn")
        method = rec.get("method")
        value = rec.get("value")
        #: name-rule key: a real fqn, or the name when the format has no synthetic names
        self.qual: str | None = fqn if fqn is not None else (None if method is not None else self.name)
        self.mv = (method, value) if method is not None and value is not None else None
        self.dtype: str = rec["dtype"]
        self.shape = tuple(rec["shape"]) if rec["shape"] is not None else ()
        self.nbytes: int = int(rec["nbytes"])
        self.storage: str = rec["storage"]
        self.file: str | None = rec["file"]
        self.offset: int | None = rec["offset"]
        self.align: int | None = rec.get("align")
        self.key = (self.file, self.offset, self.nbytes) if (
            self.file is not None and self.offset is not None) else None
        #: the delegate_tensors row of a quantized delegate constant (for ``dequantized``)
        self.quant: dict[str, Any] | None = rec.get("quant_row")


def stored_tensors(art: Artifact) -> list[StoredTensor]:
    """The rows of ``art.tensors`` that hold bytes (see :data:`NO_BYTES`), with the
    constants of delegate graphs (``frames["delegate_tensors"]``) folded in: a named-data row
    whose bytes a delegate tensor reads takes that tensor's name, dtype and shape (so a
    comparison says which portable weight became which XNNPACK constant, in what dtype), and
    constants stored inside a blob (or inline in its graph) are rows of their own.

    Example:
        >>> [r.name for r in stored_tensors(wb.open("sample_models/mlp_xnnpack.pte"))][:1]  # doctest: +SKIP
        ['forward/delegate0/1']
    """
    ten = art.tensors
    cols = [c for c in ("name", "fqn", "method", "value", "dtype", "shape", "nbytes", "storage",
                        "file", "offset", "align") if c in ten.columns]
    data = {c: [_na(v) for v in ten[c].tolist()] for c in cols}
    rows = []
    for i in range(len(ten)):
        rec = {c: data[c][i] for c in cols}
        if rec["offset"] is None and rec["storage"] in NO_BYTES:
            continue
        rows.append(StoredTensor(i, rec))
    if "delegate_tensors" in art.frames:
        rows = _with_delegate_constants(art, rows)
    return rows


def _with_delegate_constants(art: Artifact, rows: list[StoredTensor]) -> list[StoredTensor]:
    """:func:`stored_tensors`' rows with every stored delegate-graph constant folded in."""
    dt = art.frames["delegate_tensors"]
    dt = dt[dt["offset"].notna()]
    if not len(dt):
        return rows
    named = {r.key: k for k, r in enumerate(rows) if r.key is not None and r.storage == "named_data"}
    out = list(rows)
    base = len(art.tensors)
    taken: set[int] = set()
    quantized = dt["quant"].isin(_DEQUANTIZABLE).tolist()
    for j, (name, dtype, shape, nbytes, storage, file, offset) in enumerate(zip(
            dt["name"], dt["dtype"], dt["shape"], dt["nbytes"], dt["storage"], dt["file"],
            dt["offset"])):
        rec = {"name": str(name), "fqn": None, "method": None, "value": None,
               "dtype": str(dtype), "shape": tuple(shape), "nbytes": int(nbytes),
               "storage": str(storage), "file": _na(file), "offset": int(offset),
               "align": align_of(int(offset)),
               "quant_row": ({c: _na(v) for c, v in dt.iloc[j].items()} if quantized[j] else None)}
        k = named.get((rec["file"], rec["offset"], rec["nbytes"]))
        if k is not None and k not in taken:  # the named-data entry this constant reads
            taken.add(k)
            rec["storage"] = rows[k].storage  # where the bytes are, as the tensors frame says
            out[k] = StoredTensor(rows[k].i, rec)
        else:
            out.append(StoredTensor(base + j, rec))
    return out


#: Quantizations whose constants :func:`_dequantized_close` can compare with float weights.
_DEQUANTIZABLE = ("per_tensor", "per_channel", "per_channel_group")
_FLOATS = ("float32", "float16", "bfloat16", "float64")
#: Largest quantized value by element type (symmetric weights: scale ≈ max |w| / QMAX).
_QMAX = {"int8": 127, "int4": 7, "uint8": 255, "int32": 2 ** 31 - 1}


def _dequantized_close(art_f: Artifact, f: StoredTensor, art_q: Artifact, q: StoredTensor) -> bool:
    """Whether the quantized delegate constant ``q``, dequantized with its own scales, is the
    float tensor ``f`` up to rounding: along every output channel, no value is further from
    ``f`` than half a quantization step of that channel (a step being the channel's largest
    magnitude over the type's largest value), with 5 % slack. Reads both tensors."""
    import numpy as np

    try:
        ref = np.asarray(art_f.tensor(f.name if f.mv is None else f.mv, copy=True, dequantize=True),
                         np.float64)
        got = np.asarray(art_q.tensor(q.name, dequantize=True), np.float64)
    except (ArtifactError, KeyError):  # a tensor that cannot be read does not match
        return False
    if ref.shape != got.shape or not ref.size:
        return False
    cd = q.quant.get("channel_dim") if q.quant else None
    cd = int(cd) if cd is not None and 0 <= int(cd) < ref.ndim else 0
    axes = tuple(k for k in range(ref.ndim) if k != cd) if q.quant.get("quant") != "per_tensor" \
        else tuple(range(ref.ndim))
    qmax = _QMAX.get(q.dtype, 127)
    step = np.max(np.abs(ref), axis=axes, keepdims=True) / qmax
    err = np.abs(ref - got)
    return bool(np.all(err <= 0.5 * step * 1.05 + 1e-12)) and bool(np.any(ref))


def _ranges(art: Artifact, rows: list[StoredTensor]) -> dict[tuple[str, int, int], list[str]]:
    """Distinct stored byte ranges -> names: tensor bytes and delegate blobs (size > 0)."""
    out: dict[tuple[str, int, int], list[str]] = {}
    for r in rows:
        if r.key is not None and r.nbytes > 0:
            out.setdefault(r.key, []).append(r.name)
    seg = art.segments
    blobs = seg[[byte_class(str(k), str(n)) == "delegate"
                 for k, n in zip(seg["kind"], seg["name"])]]
    found = list(zip(blobs["file"], blobs["offset"], blobs["size"], blobs["name"]))
    if "delegates" in art.frames:  # whole blobs, also those shown as their sub-segments
        d = art.frames["delegates"]
        found += [(f, o, s, f"{m} delegate {k} ({i})") for f, o, s, m, k, i in zip(
            d["file"], d["offset"], d["size"], d["method"], d["index"], d["id"])]
    for f, o, s, n in found:
        if s > 0:
            names = out.setdefault((str(f), int(o), int(s)), [])
            if str(n) not in names and not any(str(n).startswith(x + ":") for x in names):
                names.append(str(n))
    return out


def _duplicate_groups(art: Artifact, side: str, rows: list[StoredTensor], hasher: _Hasher,
                      cap: int | None, everything: bool) -> dict[str, list]:
    """Columns of the duplicates frame for one side (see the module doc for the screening)."""
    ranges = _ranges(art, rows)
    by_size: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
    for key in ranges:
        by_size[key[2]].append(key)
    candidates = [k for size, keys in by_size.items() if len(keys) > 1
                  and (everything or cap is None or size <= cap) for k in keys]
    if not everything:
        fps: dict[tuple[int, bytes], list[tuple[str, int, int]]] = defaultdict(list)
        for key in candidates:
            fps[(key[2], _fingerprint(art, *key))].append(key)
        candidates = [k for keys in fps.values() if len(keys) > 1 for k in keys]
    hasher.hash_all((art, k) for k in candidates)
    groups: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for key in candidates:
        groups[hasher.get(key) or ""].append(key)
    cols: dict[str, list] = {c: [] for c in ("side", "sha256", "nbytes", "copies", "wasted",
                                             "files", "names", "locations")}
    for digest, keys in sorted(groups.items(), key=lambda kv: (-kv[1][0][2], kv[0])):
        if len(keys) < 2:
            continue
        keys.sort()
        size = keys[0][2]
        cols["side"].append(side)
        cols["sha256"].append(digest)
        cols["nbytes"].append(size)
        cols["copies"].append(len(keys))
        cols["wasted"].append(size * (len(keys) - 1))
        cols["files"].append(len({k[0] for k in keys}))
        cols["names"].append("; ".join(n for k in keys for n in ranges[k]))
        cols["locations"].append("; ".join(f"{os.path.basename(k[0])}@0x{k[1]:x}" for k in keys))
    return cols


def duplicates(art: Artifact, *, hashes: bool = False, hash_cap: int | None = DUPLICATE_HASH_CAP,
               progress: bool | None = None, side: str = "a") -> pd.DataFrame:
    """Byte ranges stored more than once in one artifact (any of its files).

    Same screening as in :func:`compare` (see the module doc); ``side`` only fills the
    ``side`` column.

    Example:
        >>> duplicates(wb.open("sample_models/tied_xnnpack.pte"))[["nbytes", "copies"]]  # doctest: +SKIP
           nbytes  copies
        0    4096       2
    """
    from . import frames as _frames

    cols = _duplicate_groups(art, side, stored_tensors(art), _Hasher(progress), hash_cap, hashes)
    return _frames.build("compare_duplicates", cols)


# ------------------------------------------------------------------------------------------
# The comparison
# ------------------------------------------------------------------------------------------

class _LazyFrames(Mapping):
    """name -> DataFrame, each built on first access and cached until the hashes change."""

    NAMES = ("tensors", "summary", "segments", "duplicates")

    def __init__(self, cmp: Comparison) -> None:
        self._cmp = cmp
        self._cache: dict[str, pd.DataFrame] = {}

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self.NAMES:
            raise KeyError(name)
        df = self._cache.get(name)
        if df is None:
            df = getattr(self._cmp, f"_build_{name}")()
            self._cache[name] = df
        return df

    def __iter__(self) -> Iterator[str]:
        return iter(self.NAMES)

    def __len__(self) -> int:
        return len(self.NAMES)

    def clear(self) -> None:
        self._cache.clear()

    def __repr__(self) -> str:
        return f"<comparison frames {list(self.NAMES)}>"


def _loc_label(storage: str, file: str | None) -> str:
    ext = os.path.splitext(file)[1] if file else ""
    return f"{storage} ({ext})" if ext else storage


def _moved(ra: StoredTensor, rb: StoredTensor) -> str:
    """``""`` when the bytes stay in the same storage and kind of file, else ``"x → y"``."""
    ext_a = os.path.splitext(ra.file)[1] if ra.file else ""
    ext_b = os.path.splitext(rb.file)[1] if rb.file else ""
    if ra.storage != rb.storage:
        return f"{ra.storage} → {rb.storage}"
    if ext_a != ext_b:
        return f"{_loc_label(ra.storage, ra.file)} → {_loc_label(rb.storage, rb.file)}"
    return ""


class Comparison:
    """Two artifacts side by side. Create with :func:`workbench.compare`.

    Attributes:
        a, b: the two :class:`~workbench.Artifact` objects.
        frames: mapping ``tensors`` | ``summary`` | ``segments`` | ``duplicates`` ->
            DataFrame (schemas ``compare_*`` in :mod:`workbench.frames`), built lazily.
        hashed: every stored tensor of both sides has been hashed.

    Example:
        >>> cmp = wb.compare("sample_models/mlp_portable.pte",
        ...                  "sample_models/mlp_external.pte")   # doctest: +SKIP
        >>> cmp.tensors["moved"].value_counts()                  # doctest: +SKIP
        >>> cmp.hash().tensors["same_bytes"].all()              # doctest: +SKIP
        True
    """

    def __init__(self, a: Artifact, b: Artifact, *, hash_cap: int | None = DUPLICATE_HASH_CAP,
                 progress: bool | None = None, _owned: Sequence[Artifact] = ()) -> None:
        self.a = a
        self.b = b
        self.hash_cap = hash_cap
        self.hashed = False
        self._hasher = _Hasher(progress)
        self._owned = list(_owned)
        self._rows: dict[str, list[StoredTensor]] = {}
        self.frames: _LazyFrames = _LazyFrames(self)

    # -- sides ------------------------------------------------------------------------------
    def side(self, which: str) -> Artifact:
        """The artifact of side ``"a"`` or ``"b"``."""
        if which not in _SIDES:
            raise ValueError(f"side must be 'a' or 'b', not {which!r}")
        return self.a if which == "a" else self.b

    def _stored(self, which: str) -> list[StoredTensor]:
        rows = self._rows.get(which)
        if rows is None:
            rows = self._rows[which] = stored_tensors(self.side(which))
        return rows

    def hash(self, progress: bool | None = None) -> Comparison:
        """Hash every stored tensor of both sides (SHA-256, zero-copy reads); returns ``self``.

        Enables ``content`` matching and fills ``same_bytes``/``sha256_*``; duplicates are
        then searched without the size cap. Frames are rebuilt on next access.

        Example:
            >>> cmp.hash().tensors["same_bytes"].all()     # doctest: +SKIP
            True
        """
        if progress is not None:
            self._hasher.progress = progress
        self._hasher.hash_all((self.side(w), r.key) for w in _SIDES for r in self._stored(w)
                              if r.key is not None)
        self.hashed = True
        self.frames.clear()
        return self

    # -- frames ----------------------------------------------------------------------------
    @property
    def tensors(self) -> pd.DataFrame:
        """One row per stored tensor, matched across the sides (schema ``compare_tensors``)."""
        return self.frames["tensors"]

    @property
    def summary(self) -> pd.DataFrame:
        """Byte accounting per side and file, tidy (schema ``compare_summary``)."""
        return self.frames["summary"]

    @property
    def segments(self) -> pd.DataFrame:
        """Both layouts: ``side`` + the segments columns (schema ``compare_segments``)."""
        return self.frames["segments"]

    @property
    def duplicates(self) -> pd.DataFrame:
        """Byte ranges stored more than once within a side (schema ``compare_duplicates``)."""
        return self.frames["duplicates"]

    def delta(self) -> pd.DataFrame:
        """Whole-side bytes per metric: columns ``a``, ``b``, ``change`` (= b − a).

        A pivot of :attr:`summary` (rows with no ``file``), indexed by metric.

        Example:
            >>> cmp.delta().loc[["size", "weights"]]      # doctest: +SKIP
                        a     b  change
            size     5408  5968     560
            weights  3232  3232       0
        """
        s = self.summary
        whole = s[s["file"].isna()]
        p = whole.pivot(index="metric", columns="side", values="bytes")
        p = p.reindex(index=[m for m in _METRICS if m in p.index], columns=list(_SIDES))
        p = p.astype("Int64")
        p["change"] = p["b"] - p["a"]
        p.columns.name = None
        p.index = p.index.astype(str)
        return p

    def _match(self) -> list[tuple[str, str | None, StoredTensor | None, StoredTensor | None]]:
        """(side, rule, row a, row b) in display order."""
        ra, rb = self._stored("a"), self._stored("b")
        free_a = set(range(len(ra)))
        free_b = set(range(len(rb)))
        pair_of: dict[int, tuple[int, str]] = {}

        def pair(key_a: Any, key_b: Any, rule: str, check: Any = None) -> None:
            index: dict[Any, list[int]] = defaultdict(list)
            for j in sorted(free_b):
                k = key_b(rb[j])
                if k is not None:
                    index[k].append(j)
            for i in sorted(free_a):
                k = key_a(ra[i])
                if k is None or not index.get(k):
                    continue
                for pos, j in enumerate(index[k]):
                    if check is None or check(ra[i], rb[j]):
                        index[k].pop(pos)
                        pair_of[i] = (j, rule)
                        free_a.discard(i)
                        free_b.discard(j)
                        break

        pair(lambda r: r.qual, lambda r: r.qual, "name")
        pair(lambda r: r.mv, lambda r: r.mv, "method_value",
             lambda x, y: x.dtype == y.dtype and x.shape == y.shape)
        out: list[tuple[str, str | None, StoredTensor | None, StoredTensor | None]] = []
        extra_a: list[tuple[int, int]] = []
        extra_b: list[tuple[int, int]] = []
        if self.hashed:
            def digest(r: StoredTensor) -> str | None:
                return self._hasher.get(r.key) if r.key is not None else None

            pair(digest, digest, "content")
            all_a: dict[str, int] = {}
            for i, r in enumerate(ra):
                d = digest(r)
                if d is not None:
                    all_a.setdefault(d, i)
            all_b: dict[str, int] = {}
            for j, r in enumerate(rb):
                d = digest(r)
                if d is not None:
                    all_b.setdefault(d, j)
            for j in sorted(free_b):
                d = digest(rb[j])
                if d is not None and d in all_a:
                    extra_b.append((all_a[d], j))
                    free_b.discard(j)
            for i in sorted(free_a):
                d = digest(ra[i])
                if d is not None and d in all_b:
                    extra_a.append((i, all_b[d]))
                    free_a.discard(i)
            self._pair_dequantized(ra, rb, free_a, free_b, pair_of)
        copies_a: dict[int, list[int]] = defaultdict(list)
        for i, j in extra_b:
            copies_a[i].append(j)
        copy_of_a = dict(extra_a)
        for i, r in enumerate(ra):
            if i in pair_of:
                j, rule = pair_of[i]
                out.append(("both", rule, r, rb[j]))
            elif i in copy_of_a:
                out.append(("both", "content_copy", r, rb[copy_of_a[i]]))
            else:
                out.append(("a_only", None, r, None))
            for j in copies_a.get(i, ()):
                out.append(("both", "content_copy", r, rb[j]))
        out.extend(("b_only", None, None, rb[j]) for j in sorted(free_b))
        return out

    def _pair_dequantized(self, ra: list[StoredTensor], rb: list[StoredTensor], free_a: set[int],
                          free_b: set[int], pair_of: dict[int, tuple[int, str]]) -> None:
        """The ``dequantized`` rule: a float weight left unmatched on one side and a quantized
        delegate constant of the same shape left on the other, when dequantizing the
        constant gives the weight back up to rounding (:func:`_dequantized_close`)."""
        for i in sorted(free_a):
            for j in sorted(free_b):
                x, y = ra[i], rb[j]
                if x.shape != y.shape or not x.shape:
                    continue
                if y.quant is not None and x.quant is None and x.dtype in _FLOATS:
                    ok = _dequantized_close(self.a, x, self.b, y)
                elif x.quant is not None and y.quant is None and y.dtype in _FLOATS:
                    ok = _dequantized_close(self.b, y, self.a, x)
                else:
                    continue
                if ok:
                    pair_of[i] = (j, "dequantized")
                    free_a.discard(i)
                    free_b.discard(j)
                    break

    def _build_tensors(self) -> pd.DataFrame:
        from . import frames as _frames

        names = [c.name for c in _frames.SCHEMAS["compare_tensors"]]
        cols: dict[str, list] = {c: [] for c in names}
        h = self._hasher
        for side, rule, ra, rb in self._match():
            main = ra if ra is not None else rb
            assert main is not None
            other = rb if ra is not None else None
            da = h.get(ra.key) if (self.hashed and ra is not None and ra.key) else None
            db = h.get(rb.key) if (self.hashed and rb is not None and rb.key) else None
            differs = other is not None and (other.dtype != main.dtype or other.shape != main.shape)
            row = {
                "side": side, "match": rule,
                "name_a": ra.name if ra else None, "name_b": rb.name if rb else None,
                "dtype": main.dtype, "shape": main.shape, "nbytes": main.nbytes,
                "dtype_b": other.dtype if differs and other else None,
                "shape_b": other.shape if differs and other else None,
                "nbytes_b": other.nbytes if other is not None and other.nbytes != main.nbytes
                else None,
                "storage_a": ra.storage if ra else None, "storage_b": rb.storage if rb else None,
                "file_a": ra.file if ra else None, "file_b": rb.file if rb else None,
                "offset_a": ra.offset if ra else None, "offset_b": rb.offset if rb else None,
                "align_a": ra.align if ra else None, "align_b": rb.align if rb else None,
                "moved": _moved(ra, rb) if ra is not None and rb is not None else "",
                "same_bytes": (da == db) if da is not None and db is not None else None,
                "sha256_a": da, "sha256_b": db,
            }
            for c in names:
                cols[c].append(row[c])
        return _frames.build("compare_tensors", cols)

    def _build_segments(self) -> pd.DataFrame:
        from . import frames as _frames

        names = [c.name for c in _frames.SCHEMAS["compare_segments"]]
        cols: dict[str, list] = {c: [] for c in names}
        for which in _SIDES:
            seg = self.side(which).segments
            n = len(seg)
            cols["side"].extend([which] * n)
            for c in names[1:]:
                if c in seg.columns:
                    cols[c].extend(_na(v) for v in seg[c].tolist())
                else:
                    cols[c].extend([None] * n)
        present = {c for c in names[1:] if any(c in self.side(w).segments.columns for w in _SIDES)}
        return _frames.build("compare_segments",
                             {c: v for c, v in cols.items() if c == "side" or c in present})

    def _dup_columns(self) -> dict[str, list]:
        cols: dict[str, list] = {}
        for which in _SIDES:
            part = _duplicate_groups(self.side(which), which, self._stored(which), self._hasher,
                                     self.hash_cap, self.hashed)
            for c, v in part.items():
                cols.setdefault(c, []).extend(v)
        return cols

    def _build_duplicates(self) -> pd.DataFrame:
        from . import frames as _frames

        return _frames.build("compare_duplicates", self._dup_columns())

    def _build_summary(self) -> pd.DataFrame:
        from . import frames as _frames

        cols: dict[str, list] = {c: [] for c in ("side", "file", "metric", "bytes", "count",
                                                  "share")}

        def add(side: str, file: str | None, metric: str, nbytes: int | None,
                count: int | None, total: int) -> None:
            cols["side"].append(side)
            cols["file"].append(file)
            cols["metric"].append(metric)
            cols["bytes"].append(nbytes)
            cols["count"].append(count)
            cols["share"].append(nbytes / total if nbytes is not None and total else None)

        dups = self.duplicates
        for which in _SIDES:
            art = self.side(which)
            seg = art.segments
            classes = [byte_class(str(k), str(n)) for k, n in zip(seg["kind"], seg["name"])]
            sizes: dict[str, int] = dict.fromkeys(art.files, 0)
            for f, size in zip(seg["file"], seg["size"]):  # rows of a file sum to its size
                sizes[str(f)] = sizes.get(str(f), 0) + int(size)
            files = list(sizes)
            total = sum(sizes.values())
            per: dict[tuple[str | None, str], list[int]] = defaultdict(lambda: [0, 0])
            for f, cl, size in zip(seg["file"], classes, seg["size"]):
                for key in ((str(f), cl), (None, cl)):
                    per[key][0] += int(size)
                    per[key][1] += 1
            add(which, None, "size", total, len(files), total)
            for cl in CLASSES:
                nb, cnt = per.get((None, cl), (0, 0))
                add(which, None, cl, nb, cnt, total)
            ten = art.tensors
            add(which, None, "tensors", int(ten["nbytes"].sum()), len(ten), total)
            rows = self._stored(which)
            stored = {r.key: r.nbytes for r in rows if r.key is not None}
            add(which, None, "stored_tensors", sum(stored.values()), len(rows), total)
            d = dups[dups["side"] == which]
            add(which, None, "duplicates", int(d["wasted"].sum()), len(d), total)
            for f in files:
                fsize = sizes[f]
                add(which, f, "size", fsize, 1, fsize)
                for cl in CLASSES:
                    nb, cnt = per.get((f, cl), (0, 0))
                    add(which, f, cl, nb, cnt, fsize)
        return _frames.build("compare_summary", cols)

    # -- lifetime and display --------------------------------------------------------------
    def close(self) -> None:
        """Close the artifacts this comparison opened (not those passed in)."""
        for art in self._owned:
            art.close()
        self._owned = []

    def __enter__(self) -> Comparison:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<workbench.Comparison a={self.a.format} {self.a.path!r} "
                f"b={self.b.format} {self.b.path!r}>")

    def _repr_html_(self) -> str:
        import pandas as pd

        esc = html.escape
        d = self.delta()
        t = self.tensors
        head = []
        for which in _SIDES:
            art = self.side(which)
            files = ", ".join(f"<code>{esc(os.path.basename(f))}</code>" for f in art.files)
            head.append(f"<li><b>{which}</b> [{esc(art.format)}] {files}</li>")
        rows = "".join(
            f"<tr><td>{esc(m)}</td><td>{human_bytes(int(r['a']))}</td>"
            f"<td>{human_bytes(int(r['b']))}</td>"
            f"<td>{'+' if int(r['change']) > 0 else ''}{human_bytes(int(r['change']))}</td></tr>"
            for m, r in d.iterrows() if not (int(r["a"]) == 0 and int(r["b"]) == 0))
        rules = t["match"].value_counts()
        matched = ", ".join(f"{esc(str(k))} {int(v)}" for k, v in rules.items() if v)
        moved = int((t["moved"] != "").sum())
        sides = t["side"].value_counts()
        dup = self.duplicates
        dup_txt = "; ".join(f"{esc(str(r.side))}: {human_bytes(int(r.nbytes))} × {int(r.copies)} "
                            f"({esc(_short(str(r.names), 60))})" for r in dup.head(5).itertuples())
        same = t["same_bytes"]
        same_txt = (f"same bytes: {int(same.sum())} of {int(same.notna().sum())} matched"
                    if self.hashed else "bytes not hashed yet: <code>cmp.hash()</code>")
        show = t[["side", "match", "name_a", "name_b", "dtype", "shape", "nbytes", "moved",
                  "same_bytes"]].head(12).copy()
        for c in ("name_a", "name_b"):
            show[c] = [None if pd.isna(x) else _short(str(x), 40) for x in show[c]]
        return (
            "<div><b>workbench.Comparison</b><ul>" + "".join(head) + "</ul>"
            "<table><tr><th>bytes</th><th>a</th><th>b</th><th>change</th></tr>" + rows +
            "</table>"
            f"<p>tensors: {int(sides.get('both', 0))} matched ({matched}), "
            f"{int(sides.get('a_only', 0))} only in a, {int(sides.get('b_only', 0))} only in b; "
            f"{moved} moved; {same_txt}</p>"
            f"<p>duplicates: {dup_txt or 'none found'}</p>"
            f"{show.to_html(index=False, escape=True)}</div>")


#: Display order of the summary metrics.
_METRICS = ("size", *CLASSES, "tensors", "stored_tensors", "duplicates")


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
