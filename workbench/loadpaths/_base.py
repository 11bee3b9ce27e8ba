"""The load-path machinery shared by :mod:`.cpu`, :mod:`.cuda` and :mod:`.runtime`: :class:`Plan`,
:class:`LoadPath` and its registry :data:`PATHS`, :class:`RunContext`, :class:`Skip`, memory
measurement and :func:`run_once`. The path modules import it; they never import the package
(``workbench/loadpaths/__init__.py``), which imports them.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import json
import mmap
import os
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PAGE = mmap.PAGESIZE

#: Name of the pseudo path a worker runs to measure the rooflines (``+cuda``: with the
#: pinned host-to-device copy).
ROOFLINE = "__roofline__"

#: What a path's consuming pass is (the ``consume`` column): ``checksum`` (the CPU sums every
#: weight byte it made available, :func:`checksum`), ``device_checksum`` (the same sum computed
#: on the GPU over the device copy), ``forward`` (the first execution of the program's
#: ``forward``: it reads the weights it uses), ``none`` (the path offers no way to read them).
CONSUME_KINDS = ("checksum", "device_checksum", "forward", "none")


class Skip(Exception):
    """Raised by a path's setup or run when it cannot run here; the message is the reason."""


# ------------------------------------------------------------------------------------------
# What the parent hands to a worker
# ------------------------------------------------------------------------------------------

@dataclass
class Plan:
    """Everything a worker needs about the artifact, computed once by the parent (JSON-able).

    Attributes:
        format: ``pte`` | ``ptd`` | ``bpte`` | ``pt2`` | ``raw`` (a file workbench cannot read:
            only whole-file paths apply).
        path: the main file.
        files: every file of the artifact, the main file first (data files follow).
        sizes: their sizes in bytes.
        data_files: the ``.ptd`` files a ``.pte`` is loaded with (``data_path=``).
        tensors: unique stored byte ranges ``[file index, offset, nbytes, dtype, name]``
            (tied tensors and views counted once).
        methods: method names (``.pte``/``.bpte``).
        delegates: backend ids of the program's delegates.
        pt2_kind: ``export`` (``torch.export.save``) | ``aoti`` (AOTInductor package) | None.
        readable: workbench can open the file (its tensor names give views).
        unreadable: why not, when it cannot.
        trusted: the user allowed paths that execute content (unpickling, ``dlopen``).
        open_data: ``data=`` for ``workbench.open`` in a worker (None: the default lookup).
        custom: path name -> LoadPath fields, for paths not in :data:`PATHS`.
    """

    format: str
    path: str
    files: list[str]
    sizes: list[int]
    data_files: list[str] = field(default_factory=list)
    tensors: list[list[Any]] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)
    delegates: list[str] = field(default_factory=list)
    pt2_kind: str | None = None
    readable: bool = True
    unreadable: str = ""
    trusted: bool = False
    open_data: list[str] | None = None
    custom: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls(**json.loads(text))

    @property
    def total_bytes(self) -> int:
        """Bytes of every file."""
        return sum(self.sizes)

    @property
    def tensor_bytes(self) -> int:
        """Bytes of the unique stored tensor ranges."""
        return sum(int(t[2]) for t in self.tensors)

    def payload_bytes(self) -> int:
        """What a device path moves: the stored tensor bytes, or every file without a table."""
        return self.tensor_bytes if self.tensors else self.total_bytes


# ------------------------------------------------------------------------------------------
# Paths and the registry
# ------------------------------------------------------------------------------------------

#: Which files a path reads: every file of the artifact, only the main file, or the main
#: file plus the ``.ptd`` files it is loaded with.
FILES_CHOICES = ("all", "program", "program+data")

#: Rooflines a path can be compared with (measured in the same profile run). ``ram_read``
#: (:func:`checksum` over a large pre-faulted buffer: reading every byte once from RAM) is
#: what every CPU path's headline rate is compared with: no path can make the weights
#: available *and* read each byte once faster than reading them once from memory.
ROOFLINES = ("ram_read", "memcpy", "page_cache_read", "h2d_pinned")


def _always(plan: Plan) -> str | None:
    return None


@dataclass(frozen=True)
class LoadPath:
    """One way of loading the bytes.

    Attributes:
        name: registry key, the ``path`` column of the profile frame.
        run: ``run(ctx)`` — the timed load; must leave what it loaded in ``ctx.keep`` and
            offer the bytes to the consuming pass (``ctx.file_buffers`` or
            ``ctx.weight_buffers``).
        device: ``cpu`` | ``cuda``.
        roofline: the limit its headline rate (every weight byte read once) is compared
            with: ``ram_read`` (CPU paths) | ``h2d_pinned`` (CUDA) | ``memcpy`` |
            ``page_cache_read``.
        applies: ``applies(plan) -> reason | None``, evaluated in the parent: a reason makes
            the path a ``skipped`` row (wrong format, missing package, untrusted file).
        setup: ``setup(ctx)``, untimed, before eviction and the baseline (imports, CUDA
            context).
        files: ``all`` | ``program`` | ``program+data`` (see :data:`FILES_CHOICES`).
        copies: whether the path copies the bytes (False: zero-copy, pages are mapped).
        doc: one line for tables and ``--help``.
        consume: ``consume(ctx)``, timed after ``run``: read every weight byte once and
            record it with ``ctx.consumed`` (default :func:`consume_checksum`: the CPU sums
            the buffers ``run`` offered). ``None``: no consuming pass (``consume = none``).
        preload: modules a fork server imports once for all runs of the path (the import
            is never timed; it only saves the time of importing it again per run).
    """

    name: str
    run: Callable[[RunContext], None]
    device: str = "cpu"
    roofline: str = "ram_read"
    applies: Callable[[Plan], str | None] = _always
    setup: Callable[[RunContext], None] | None = None
    files: str = "all"
    copies: bool = True
    doc: str = ""
    consume: Callable[[RunContext], None] | None = field(default=None, repr=False)
    preload: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', not {self.device!r}")
        if self.roofline not in ROOFLINES:
            raise ValueError(f"roofline must be one of {ROOFLINES}, not {self.roofline!r}")
        if self.files not in FILES_CHOICES:
            raise ValueError(f"files must be one of {FILES_CHOICES}, not {self.files!r}")

    @property
    def consumer(self) -> Callable[[RunContext], None] | None:
        """The consuming pass that runs: :attr:`consume`, else :func:`consume_checksum` for CPU
        paths (None for a CUDA path that names none).

        Example:
            >>> PATHS["read"].consumer.__name__                  # doctest: +SKIP
            'consume_checksum'
        """
        if self.consume is not None:
            return self.consume
        return consume_checksum if self.device == "cpu" else None

    def spec(self) -> dict[str, Any]:
        """The JSON-able description a worker rebuilds this path from (custom paths)."""
        return {"run": _target(self.run), "setup": _target(self.setup) if self.setup else None,
                "consume": _target(self.consume) if self.consume else None,
                "device": self.device, "roofline": self.roofline, "files": self.files,
                "copies": self.copies, "doc": self.doc, "preload": list(self.preload)}


#: name -> LoadPath, in registration order (CPU paths, then runtime, then CUDA).
PATHS: dict[str, LoadPath] = {}


def register(name: str, *, device: str = "cpu", roofline: str | None = None,
             applies: Callable[[Plan], str | None] | None = None,
             setup: Callable[[RunContext], None] | None = None, files: str = "all",
             copies: bool = True, doc: str = "",
             consume: Callable[[RunContext], None] | None = None,
             preload: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """Decorator: register ``fn`` as load path ``name`` in :data:`PATHS` (see the module doc).

    The same function may be registered under several names (with different ``applies``).
    ``roofline`` defaults to ``ram_read`` for CPU paths and ``h2d_pinned`` for CUDA paths.

    Example:
        >>> @register("read_head", doc="first 4 KiB of each file")      # doctest: +SKIP
        ... def read_head(ctx): ...
    """

    def deco(fn: Callable[[RunContext], None]) -> Callable[[RunContext], None]:
        limit = roofline or ("h2d_pinned" if device == "cuda" else "ram_read")
        PATHS[name] = LoadPath(name, fn, device=device, roofline=limit,
                               applies=applies or _always, setup=setup, files=files,
                               copies=copies, doc=doc or (fn.__doc__ or "").strip().split("\n")[0],
                               consume=consume, preload=tuple(preload))
        return fn

    return deco


def _target(fn: Callable) -> str:
    mod = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", "")
    if not mod or mod == "__main__" or "<" in qual:
        raise ValueError(f"load path function {fn!r} must be a module-level function of an "
                         "importable module (workers import it by name)")
    return f"{mod}:{qual}"


def _load_target(target: str) -> Callable:
    mod, _, qual = target.partition(":")
    obj: Any = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def resolve(name: str, plan: Plan) -> LoadPath:
    """The path called ``name``: from :data:`PATHS`, else from the plan's custom specs."""
    lp = PATHS.get(name)
    if lp is not None:
        return lp
    spec = plan.custom.get(name)
    if spec is None:
        raise KeyError(f"unknown load path {name!r}; known: {', '.join(PATHS)}")
    return LoadPath(name, _load_target(spec["run"]), device=spec["device"],
                    roofline=spec["roofline"],
                    setup=_load_target(spec["setup"]) if spec.get("setup") else None,
                    files=spec["files"], copies=spec["copies"], doc=spec.get("doc", ""),
                    consume=_load_target(spec["consume"]) if spec.get("consume") else None,
                    preload=tuple(spec.get("preload") or ()))


# ------------------------------------------------------------------------------------------
# The context a path runs in
# ------------------------------------------------------------------------------------------

class RunContext:
    """What a path sees: the plan, its files, and where it records what it did.

    Attributes:
        plan: the :class:`Plan`.
        files: the files this path reads (see :attr:`LoadPath.files`).
        state: scratch space from ``setup`` to ``run`` (imports, buffers).
        bytes / bytes_copied: set by :meth:`moved`.
        file_buffers: set by ``run``: file -> a buffer holding that file's bytes (``bytes``,
            ``bytearray``, ``mmap``); the consuming pass reads the weight extents out of it.
        weight_buffers: set by ``run`` instead: one buffer (anything with the buffer
            protocol, or a dense numpy array / torch tensor) per weight extent.
        checksum_comparable: the buffers are exactly :meth:`extents` (so the checksum must
            equal the one the parent computes from the files); False for a path whose
            buffers are the loader's own tensors (e.g. ``torch.export.load``).
        again: set by a ``forward`` consumer: a second execution, timed as ``steady_s``.
        read_bytes / checksum / consume_kind: set by :meth:`consumed`.
        notes: short remarks that end up in the ``note`` column.
    """

    def __init__(self, plan: Plan, path: LoadPath) -> None:
        self.plan = plan
        self.path = path
        if path.files == "program":
            self.files = [plan.path]
        elif path.files == "program+data":
            self.files = [plan.path, *plan.data_files]
        else:
            self.files = list(plan.files)
        self.state: dict[str, Any] = {}
        self.bytes: int | None = None
        self.bytes_copied: int | None = None
        self.file_buffers: dict[str, Any] | None = None
        self.weight_buffers: list[Any] | None = None
        self.checksum_comparable = True
        self.again: Callable[[], Any] | None = None
        self.read_bytes: int | None = None
        self.checksum: int | None = None
        self.consume_kind = "none"
        self.notes: list[str] = []
        self._kept: list[Any] = []

    def keep(self, obj: Any) -> Any:
        """Hold ``obj`` alive until the measurement is taken; returns it."""
        self._kept.append(obj)
        return obj

    def moved(self, nbytes: int, copied: int = 0) -> None:
        """Record the bytes made available and how many of them were copied."""
        self.bytes = int(nbytes)
        self.bytes_copied = int(copied)

    def consumed(self, nbytes: int, checksum: int | None = None, kind: str = "checksum") -> None:
        """Record what the consuming pass read: ``nbytes``, its :func:`checksum`, its kind
        (one of :data:`CONSUME_KINDS`).

        Example:
            >>> ctx.consumed(4096, checksum(buf), "checksum")     # doctest: +SKIP
        """
        if kind not in CONSUME_KINDS:
            raise ValueError(f"consume kind must be one of {CONSUME_KINDS}, not {kind!r}")
        self.read_bytes = int(nbytes)
        self.checksum = None if checksum is None else int(checksum) % WRAP
        self.consume_kind = kind

    def note(self, text: str) -> None:
        """Add a remark to the row's ``note`` column."""
        self.notes.append(text)

    def size(self, file: str) -> int:
        try:
            return self.plan.sizes[self.plan.files.index(file)]
        except ValueError:
            return os.path.getsize(file)

    def tensor_ranges(self) -> list[tuple[str, int, int, str, str]]:
        """Unique stored ranges ``(file, offset, nbytes, dtype, name)`` of this path's files."""
        files = self.plan.files
        mine = set(self.files)
        return [(files[t[0]], int(t[1]), int(t[2]), t[3], t[4]) for t in self.plan.tensors
                if files[t[0]] in mine]

    def extents(self) -> list[tuple[str, int, int]]:
        """The weight bytes: stored tensor ranges of this path's files (whole files without
        a tensor table). Device paths move them; the consuming pass reads them."""
        return plan_extents(self.plan, self.files)

    def maps(self) -> dict[str, mmap.mmap]:
        """A read-only map of each of this path's non-empty files (kept alive)."""
        out = {}
        for f in dict.fromkeys(self.files):
            if self.size(f) == 0:
                continue
            with open(f, "rb") as fh:
                out[f] = self.keep(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
        return out


def plan_extents(plan: Plan, files: list[str]) -> list[tuple[str, int, int]]:
    """``(file, offset, nbytes)`` of the weights in ``files``: the plan's stored tensor
    ranges there (non-empty ones), or each whole non-empty file when the plan has no
    tensor table.

    Example:
        >>> p = Plan("raw", "w.bin", ["w.bin"], [10])
        >>> plan_extents(p, ["w.bin"])
        [('w.bin', 0, 10)]
    """
    if plan.tensors:
        mine = set(files)
        return [(plan.files[t[0]], int(t[1]), int(t[2])) for t in plan.tensors
                if plan.files[t[0]] in mine and int(t[2]) > 0]
    sizes = dict(zip(plan.files, plan.sizes))
    return [(f, 0, sizes[f]) for f in dict.fromkeys(files) if sizes.get(f, 0) > 0]


# ------------------------------------------------------------------------------------------
# The consuming pass: every weight byte read once
# ------------------------------------------------------------------------------------------

#: Checksums are sums modulo 2**64.
WRAP = 1 << 64


def checksum(buf: Any, offset: int = 0, nbytes: int | None = None) -> int:
    """Sum of ``buf[offset:offset+nbytes]`` read as little-endian ``uint64`` words (the last
    word zero-padded), modulo 2**64.

    Every byte is read (the CPU cannot skip any of them), and the sum of the checksums of
    pieces cut at multiples of 8 bytes is the checksum of the whole, so a device copy or a
    chunked read gives the same number. ``buf`` is anything with the buffer protocol or a
    dense numpy array (its bytes).

    Example:
        >>> checksum(bytes([1, 0, 0, 0, 0, 0, 0, 0, 2]))
        3
        >>> checksum(b"\\x01" * 16) == 2 * 0x0101010101010101
        True
    """
    import numpy as np

    if isinstance(buf, np.ndarray):
        buf = _bytes_of(buf)
    a = np.frombuffer(buf, dtype=np.uint8, count=-1 if nbytes is None else nbytes,
                      offset=offset)
    body = a.size - a.size % 8
    total = int(np.add.reduce(a[:body].view("<u8"), dtype=np.uint64)) if body else 0
    if body < a.size:
        total += int.from_bytes(a[body:].tobytes(), "little")
    return total % WRAP


def _bytes_of(v: Any) -> Any:
    """The bytes under a dense numpy array or torch tensor, as a flat ``uint8`` array (no copy)."""
    import numpy as np

    if not isinstance(v, np.ndarray):  # a torch tensor
        import torch

        t = v if v.is_contiguous() else v.contiguous()
        return t.reshape(-1).view(torch.uint8).numpy()
    if not (v.flags.c_contiguous or v.flags.f_contiguous):
        v = np.ascontiguousarray(v)
    return v.ravel(order="K").view(np.uint8)


def consume_checksum(ctx: RunContext) -> None:
    """The default consuming pass of a CPU path: :func:`checksum` over every weight byte.

    Reads ``ctx.weight_buffers`` (one buffer per extent), else the extents of
    ``ctx.file_buffers``; a path that offers neither fails with a clear error.

    Example:
        >>> ctx.weight_buffers = [b"\\x01" + bytes(7)]       # doctest: +SKIP
        >>> consume_checksum(ctx); ctx.read_bytes, ctx.checksum   # doctest: +SKIP
        (8, 1)
    """
    total = n = 0
    if ctx.weight_buffers is not None:
        for b in ctx.weight_buffers:
            raw = b if isinstance(b, (bytes, bytearray, memoryview, mmap.mmap)) else _bytes_of(b)
            total += checksum(raw)
            n += int(raw.nbytes) if hasattr(raw, "nbytes") else len(raw)
    elif ctx.file_buffers is not None:
        for f, off, k in ctx.extents():
            total += checksum(ctx.file_buffers[f], off, k)
            n += k
    else:
        raise RuntimeError(f"load path {ctx.path.name!r} set neither ctx.file_buffers nor "
                           "ctx.weight_buffers: nothing to read")
    ctx.consumed(n, total, "checksum")


def consume_none(ctx: RunContext) -> None:
    """A consuming pass that reads nothing (``consume = none``): for loaders whose weights
    Python cannot reach.

    Example:
        >>> LoadPath("load_only", my_loader, consume=consume_none)     # doctest: +SKIP
    """
    ctx.consumed(0, None, "none")


def reference_checksum(plan: Plan, files: list[str]) -> int:
    """:func:`checksum` of the weight extents of ``files``, read with ``pread`` in chunks (no
    map is left behind: the parent must not keep pages of a cold run resident).

    Example:
        >>> reference_checksum(make_plan("sample_models/mlp_portable.pte"), ...)  # doctest: +SKIP
    """
    chunk = 64 << 20
    total = 0
    fds: dict[str, int] = {}
    try:
        for f, off, n in plan_extents(plan, files):
            fd = fds.get(f)
            if fd is None:
                fd = fds[f] = os.open(f, os.O_RDONLY)
            done = 0
            while done < n:
                k = min(chunk, n - done)
                data = os.pread(fd, k, off + done)
                if len(data) != k:
                    raise OSError(f"{f}: short read at {off + done:#x}")
                total += checksum(data)
                done += k
    finally:
        for fd in fds.values():
            os.close(fd)
    return total % WRAP


# ------------------------------------------------------------------------------------------
# What the OS tells about memory and the page cache (Linux; None elsewhere)
# ------------------------------------------------------------------------------------------

_STATUS_KEYS = ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem", "VmLck")


def _read_kb_table(path: str, keys: tuple[str, ...] | None = None) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(":")
                parts = v.split()
                if len(parts) == 2 and parts[1] == "kB" and (keys is None or k in keys):
                    out[k] = int(parts[0]) * 1024
    except OSError:
        pass
    return out


def memory_snapshot() -> dict[str, int | None]:
    """Bytes: ``hwm``, ``rss``, ``anon``, ``file`` (file-backed + shmem), ``locked``.

    From ``/proc/self/status``; ``anon``/``file`` fall back to ``/proc/self/smaps_rollup``
    (``Anonymous``, ``Rss - Anonymous``) on kernels without ``RssAnon``; ``None`` where the
    OS tells nothing.

    Example:
        >>> snap = memory_snapshot()
        >>> sorted(snap)
        ['anon', 'file', 'hwm', 'locked', 'rss']
    """
    st = _read_kb_table("/proc/self/status", _STATUS_KEYS)
    anon = st.get("RssAnon")
    file = None if "RssFile" not in st else st["RssFile"] + st.get("RssShmem", 0)
    if anon is None or file is None:
        roll = _read_kb_table("/proc/self/smaps_rollup", ("Rss", "Anonymous", "Locked"))
        if "Anonymous" in roll and "Rss" in roll:
            anon = roll["Anonymous"]
            file = roll["Rss"] - roll["Anonymous"]
    hwm = st.get("VmHWM")
    if hwm is None:
        hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"hwm": hwm, "rss": st.get("VmRSS"), "anon": anon, "file": file,
            "locked": st.get("VmLck")}


def reset_peak() -> bool:
    """Reset the RSS high-water mark (``echo 5 > /proc/self/clear_refs``); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


_libc: Any = None


def _c() -> Any:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                             ctypes.c_int, ctypes.c_long]
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        _libc = lib
    return _libc


def _resident_pages(path: str) -> tuple[int, int] | None:
    """(resident pages, pages) of ``path`` in the page cache, via ``mincore`` on a fresh map.

    The map is made with libc's ``mmap`` and never touched, so the check faults nothing in.
    """
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    try:
        lib = _c()
    except OSError:
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = lib.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            return None
        try:
            pages = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            if lib.mincore(addr, size, vec) != 0:
                return None
            return sum(b & 1 for b in bytes(vec)), pages
        finally:
            lib.munmap(addr, size)
    finally:
        os.close(fd)


def resident_fraction(paths: list[str]) -> float | None:
    """Fraction of the pages of ``paths`` that are in the page cache (None: cannot tell).

    Example:
        >>> 0.0 <= resident_fraction(["sample_models/mlp_portable.pte"]) <= 1.0   # doctest: +SKIP
        True
    """
    res = tot = 0
    for p in dict.fromkeys(paths):
        r = _resident_pages(p)
        if r is None:
            return None
        res += r[0]
        tot += r[1]
    return res / tot if tot else 0.0


def evict(paths: list[str]) -> None:
    """Ask the kernel to drop the files' pages from the page cache.

    ``fsync`` first (dirty pages cannot be dropped), then
    ``posix_fadvise(POSIX_FADV_DONTNEED)``. Pages another process still maps stay resident:
    check with :func:`resident_fraction` (the profiler reports what it achieved).
    """
    advise = getattr(os, "posix_fadvise", None)
    for p in dict.fromkeys(paths):
        fd = os.open(p, os.O_RDONLY)
        try:
            try:
                os.fsync(fd)
            except OSError:
                pass
            if advise is not None:
                advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# ------------------------------------------------------------------------------------------
# The worker: one path, one run, one fresh process
# ------------------------------------------------------------------------------------------

#: A worker counts as cold when at most this fraction of its files' pages is resident.
COLD_THRESHOLD = 0.02


def _error_text(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0] if msg else ''}"[:500]


def _cuda_torch(lp: LoadPath) -> Any:
    if lp.device != "cuda":
        return None
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch
