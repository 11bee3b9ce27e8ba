"""The files being profiled, seen from the parent: their identity (a file that changes
between the plan and a run is a :class:`~workbench.errors.StaleFileError`), warming the page
cache before warm runs, and why a run that asked for a cold cache did not get one
(``cold_note``: pages this process maps, tmpfs, file systems that ignore the advice).

This module owns those checks; it starts no process and reads no tensor.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["identities", "ensure_unchanged", "warm", "cold_note"]

MiB = 1 << 20


def identities(files: Iterable[str]) -> dict[str, tuple[int, int, int, int]]:
    """(size, mtime_ns, inode, device) of each file: what the plan was made from."""
    out = {}
    for f in files:
        st = os.stat(f)
        out[f] = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
    return out


def ensure_unchanged(before: dict[str, tuple[int, int, int, int]]) -> None:
    """Raise :class:`~workbench.errors.StaleFileError` when a planned file changed on disk
    (workers would map a different file than the plan describes, and could fault)."""
    from ..errors import StaleFileError

    for f, (size, mtime, ino, dev) in identities(before).items():
        b = before[f]
        if (size, mtime, ino, dev) != b:
            what = [f"size {b[0]} -> {size}"] if size != b[0] else []
            what += [f"inode {b[2]} -> {ino}"] if (ino, dev) != (b[2], b[3]) else []
            what += ["mtime changed"] if mtime != b[1] else []
            raise StaleFileError(f"changed since it was planned: {', '.join(what)}; "
                                 "profile it again", file=f, structure="profile")


def warm(files: Iterable[str]) -> None:
    """Read the files once through a small buffer (page cache warm, no memory kept)."""
    buf = bytearray(16 * MiB)
    mv = memoryview(buf)
    for f in dict.fromkeys(files):
        with open(f, "rb", buffering=0) as fh:
            while fh.readinto(mv):
                pass


def _mounts() -> list[tuple[str, str]]:
    out = []
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3:
                    out.append((parts[1].replace("\\040", " "), parts[2]))
    except OSError:
        pass
    return out


def _fs_type(path: str, mounts: list[tuple[str, str]]) -> str | None:
    real = os.path.realpath(path)
    best = None
    for point, kind in mounts:
        if (real == point or real.startswith(point.rstrip("/") + "/")) and \
                (best is None or len(point) >= len(best[0])):
            best = (point, kind)
    return best[1] if best else None


def _mapped_here(files: Iterable[str]) -> list[str]:
    """The files this (the parent) process maps: their pages cannot be evicted."""
    want = {os.path.realpath(f) for f in files}
    found = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].strip() in want:
                    found.add(parts[5].strip())
    except OSError:
        pass
    return sorted(found)


#: File systems whose pages are the file itself, or that may not honour FADV_DONTNEED.
_STICKY_FS = {"tmpfs": "tmpfs keeps files in memory: its pages are the file and cannot be "
                       "dropped", "ramfs": "ramfs keeps files in memory",
              "overlay": "overlayfs may pass the advice to a lower layer that ignores it",
              "fuse": "a FUSE file system may ignore the advice",
              "9p": "a 9p (VM-shared) file system caches on the host",
              "virtiofs": "virtiofs caches on the host"}


def cold_note(files: list[str], resident: float | None) -> str:
    """Why a run that asked for a cold page cache did not get one (the ``cold_note``)."""
    if resident is None:
        head = "not cold: mincore could not tell which pages were resident"
    else:
        head = (f"not cold: {resident:.1%} of the files' pages were still in the page cache "
                "after posix_fadvise(POSIX_FADV_DONTNEED)")
    why = []
    if not hasattr(os, "posix_fadvise"):
        why.append("posix_fadvise is not available on this platform")
    mapped = _mapped_here(files)
    if mapped:
        why.append("the profiling process itself maps " + ", ".join(os.path.basename(m) for m in mapped)
                   + " (an open Artifact or tensor views: close them first)")
    mounts = _mounts()
    for kind in sorted({k for k in (_fs_type(f, mounts) for f in files) if k}):
        base = kind.split(".")[0]
        if base in _STICKY_FS:
            why.append(_STICKY_FS[base])
    why.append("pages that another process maps or locks stay resident")
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        why.append("dropping the whole cache (echo 1 > /proc/sys/vm/drop_caches) needs root")
    return f"{head}; possible causes: {'; '.join(why)}"
