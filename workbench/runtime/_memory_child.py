"""Memory measurement in the runtime child (task ``memory``; see ``workbench.runtime._child``).

Loads a program on ExecuTorch's Python runtime (``executorch.runtime.Runtime``), loads one
method and executes it once, reading ``/proc/self/status`` and ``/proc/self/smaps`` before
``load_program`` and after every phase. What is counted as the program's memory is the
growth of anonymous memory plus the resident pages of the artifact's own files; other
file-backed pages (the runtime's code, faulted in as it runs) are reported apart and taken
out of the peak. The peak is ``VmHWM`` after ``echo 5 > /proc/self/clear_refs`` resets it
just before ``load_program``.

Loaders the Python runtime can select: ``mmap`` (a path: ``MmapDataLoader`` with mlock,
errors ignored), ``mmap_nolock`` (a path, run with ``RLIMIT_MEMLOCK`` at 0 so that the
runtime's mlock fails and is ignored: only possible without ``CAP_IPC_LOCK``) and
``buffer`` (the whole file read into a ``bytes`` object first).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

#: Loaders this child can run.
LOADERS = ("mmap", "mmap_nolock", "buffer")


def status() -> dict[str, int]:
    """The ``kB`` lines of ``/proc/self/status`` that matter here, in bytes."""
    out: dict[str, int] = {}
    with open("/proc/self/status", encoding="ascii", errors="replace") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem", "VmLck"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def file_rss(paths: dict[str, str]) -> dict[str, int]:
    """Resident bytes (``Rss`` of ``/proc/self/smaps``) of the mappings of each file in
    ``paths`` (label -> real path), summed over its mappings."""
    wanted = {v: k for k, v in paths.items()}
    out = dict.fromkeys(paths, 0)
    current = None
    with open("/proc/self/smaps", encoding="utf-8", errors="replace") as f:
        for line in f:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping header line
                parts = line.split(None, 5)
                name = parts[5].strip() if len(parts) > 5 else ""
                current = wanted.get(name)
            elif current is not None and first == "Rss:":
                out[current] += int(line.split()[1]) * 1024
    return out


def snapshot(paths: dict[str, str]) -> dict[str, Any]:
    """``status()`` plus the artifact files' resident bytes (``files``)."""
    s: dict[str, Any] = status()
    s["files"] = file_rss(paths)
    return s


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(task: dict[str, Any], phase: Callable[[str], None]) -> dict[str, Any]:
    """Run the ``memory`` task: ``program``, ``data`` (or ``None``), ``method``, ``loader``,
    ``int_limit``; returns the snapshots ``before`` and after each phase (``load_program``,
    ``load_method``, ``execute``) and how the loader was run."""
    import resource

    import torch
    from executorch.runtime import Runtime

    from workbench.runtime._inputs import default_inputs

    loader = task.get("loader", "mmap")
    if loader not in LOADERS:
        raise ValueError(f"loader {loader!r} cannot be run from Python (runnable: {LOADERS})")
    program_path, data_path = task["program"], task.get("data")
    paths = {"program": os.path.realpath(program_path)}
    if data_path:
        paths["data"] = os.path.realpath(data_path)
    runtime = Runtime.get()
    if loader == "mmap_nolock":
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, 0))
    before = snapshot(paths)
    peak_reset = _reset_peak()
    snaps: dict[str, Any] = {}
    phase("load_program")
    if loader == "buffer":
        with open(program_path, "rb") as f:
            blob = f.read()
        program = runtime.load_program(blob, data_path=data_path)
        del blob  # the Program keeps its own reference
    else:
        program = runtime.load_program(program_path, data_path=data_path)
    snaps["load_program"] = snapshot(paths)
    phase("load_method")
    method = program.load_method(task["method"])
    snaps["load_method"] = snapshot(paths)
    phase("execute")
    inputs = default_inputs(method.metadata, task.get("int_limit"))
    with torch.no_grad():
        outputs = method.execute(inputs)
    snaps["execute"] = snapshot(paths)
    n_out = len(outputs) if isinstance(outputs, (list, tuple)) else 1
    del outputs, inputs
    return {"before": before, "after": snaps, "peak_reset": peak_reset, "loader": loader,
            "outputs": n_out, "euid": os.geteuid(),
            "memlock_limit": resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]}
