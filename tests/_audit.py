"""An audit hook (:func:`sys.addaudithook`) for tests that must prove the workbench never
writes, never maps a file writable, never unpickles, never ``dlopen``s and never starts a
process: ``with watching(root) as seen: ...`` then assert on ``seen``.

The hook is installed once per process (it cannot be removed) and records only inside
``watching``. It sees this process only: subprocesses (CLI, profile workers) are checked by
their effects instead.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["Seen", "watching", "EXECUTION_EVENTS"]

#: os.open flags that write or create.
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: Audit events that change the file system (their first arguments are paths).
_FS_EVENTS = frozenset({"os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.truncate",
                        "os.chmod", "os.chown", "os.utime", "os.link", "os.symlink",
                        "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.move",
                        "shutil.rmtree", "shutil.copytree"})
#: Events that would mean content of a file is being executed or a process started.
EXECUTION_EVENTS = frozenset({"pickle.find_class", "ctypes.dlopen", "subprocess.Popen",
                              "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                              "os.forkpty"})


@dataclass
class Seen:
    """What the hook saw while active.

    Attributes:
        root: the watched folder (``None``: writes anywhere are recorded).
        writes: write-mode opens and file-system changes (under ``root``).
        maps: ``(path, access)`` of every ``mmap`` of a file (under ``root``).
        executions: ``(event, args)`` of :data:`EXECUTION_EVENTS`.
    """

    root: str | None
    writes: list[tuple] = field(default_factory=list)
    maps: list[tuple[str, int]] = field(default_factory=list)
    executions: list[tuple[str, tuple]] = field(default_factory=list)

    def within(self, path: object) -> str | None:
        """The absolute path when ``path`` (str, bytes, PathLike) lies under ``root``."""
        if isinstance(path, int) or path is None:
            return None
        try:
            p = os.path.abspath(os.fsdecode(os.fspath(path)))  # type: ignore[arg-type]
        except TypeError:
            return None
        if self.root is None:
            return p
        return p if p == self.root or p.startswith(self.root + os.sep) else None


_active: list[Seen] = []
_guard = threading.local()
_installed = False


def _hook(event: str, args: tuple) -> None:
    if not _active or getattr(_guard, "busy", False):
        return
    _guard.busy = True
    try:
        seen = _active[-1]
        if event == "open":
            path, mode, flags = (*args, None, None)[:3]
            p = seen.within(path)
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(flags, int) and flags & _WRITE_FLAGS)
            if p is not None and writes:
                seen.writes.append((event, p, mode, flags))
        elif event in _FS_EVENTS:
            paths = [p for p in map(seen.within, args[:2]) if p is not None]
            if paths:
                seen.writes.append((event, *paths))
        elif event == "mmap.__new__":
            fileno, _length, access, _offset = args
            if fileno is None or fileno < 0:
                return
            try:
                target = os.readlink(f"/proc/self/fd/{fileno}")
            except OSError:
                return
            p = seen.within(target)
            if p is not None:
                seen.maps.append((p, access))
        elif event in EXECUTION_EVENTS:
            seen.executions.append((event, tuple(repr(a)[:200] for a in args)))
    finally:
        _guard.busy = False


@contextmanager
def watching(root: str | os.PathLike[str] | None = None) -> Iterator[Seen]:
    """Record writes, maps and execution events (see :class:`Seen`) while the block runs."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True
    seen = Seen(None if root is None else os.path.abspath(root))
    _active.append(seen)
    try:
        yield seen
    finally:
        _active.remove(seen)
