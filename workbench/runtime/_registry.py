"""Which operators the installed ExecuTorch runtime registers, and the child-process runner
(:func:`run_child`). Takes opened artifacts only (it never opens a path), so that the core
(``validate``, bundled runs) can use it; :mod:`workbench.runtime` adds the path-taking API."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import operators
from ..errors import MissingKernelError

if TYPE_CHECKING:
    from ..artifact import Artifact

#: The library whose kernels every runtime has (nothing to import).
BASE = "portable"
#: Seconds the child may take to list the registered operators.
REGISTRY_TIMEOUT = 300.0


class RuntimeFailure(RuntimeError):
    """The ExecuTorch runtime failed or crashed in the child process.

    Attributes:
        phase: the phase it was in (``import``, ``load_program``, ``load_method``, ``execute``,
            ...), ``None`` when it never started.
        returncode: the child's exit status (negative: killed by that signal).
        tail: the last lines the child printed.
    """

    def __init__(self, message: str, *, phase: str | None, returncode: int | None,
                 tail: str = "") -> None:
        super().__init__(message)
        self.phase, self.returncode, self.tail = phase, returncode, tail


# -- the child process -------------------------------------------------------------------------

def _child_env() -> dict[str, str]:
    """The environment of the child: this workbench importable, quiet torch/ExecuTorch."""
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def run_child(task: Mapping[str, Any], *, timeout: float = 600.0, what: str = "") -> dict[str, Any]:
    """Run one task (see ``workbench.runtime._child``) in a new Python process and return its
    result.

    Args:
        task: the JSON task: ``task`` (``registered``, ``run``, ``bundled``, ``memory``), ``load``
            (library -> module to import first) and the task's own arguments.
        timeout: seconds before the child is stopped.
        what: what is being run, for messages (e.g. the program's path).

    Raises:
        RuntimeFailure: the child failed, crashed or timed out; the message names the phase.

    Example:
        >>> run_child({"task": "registered", "libraries": {}})["base"][:1]   # doctest: +SKIP
        ['aten::_adaptive_avg_pool2d.out']
    """
    from ._protocol import PHASE, RESULT

    cmd = [sys.executable, "-m", "workbench.runtime._child"]
    label = what or task.get("program") or task.get("path") or task["task"]
    try:
        proc = subprocess.run(cmd, input=json.dumps(dict(task)), capture_output=True, text=True,
                              timeout=timeout, env=_child_env())
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        phase = _last_phase(out, PHASE)
        raise RuntimeFailure(f"{label}: the ExecuTorch runtime did not finish within {timeout:g} s "
                             f"(phase: {phase})", phase=phase, returncode=None) from None
    phase = _last_phase(proc.stdout, PHASE)
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT):
            result = json.loads(line[len(RESULT):])
    if proc.returncode != 0 or result is None:
        lines = [x for x in (proc.stderr or "").strip().splitlines()
                 if x.strip() and not x.startswith(("W1", "I1", "Failed to load"))]
        tail = " | ".join(lines[-3:])
        if proc.returncode < 0:
            import signal

            try:
                name = signal.Signals(-proc.returncode).name
            except ValueError:
                name = "?"
            how = f"killed by signal {-proc.returncode} ({name})"
        else:
            how = f"exit {proc.returncode}"
        raise RuntimeFailure(f"{label}: the ExecuTorch runtime failed in phase {phase!r} ({how})"
                             + (f": {tail}" if tail else ""), phase=phase,
                             returncode=proc.returncode, tail=tail)
    return result


def _last_phase(out: str, prefix: str) -> str | None:
    phase = None
    for line in out.splitlines():
        if line.startswith(prefix):
            phase = line[len(prefix):].strip()
    return phase


# -- which operators the runtime registers -------------------------------------------------------

@dataclass
class Registry:
    """The operators the installed ExecuTorch runtime registers.

    Attributes:
        base: registered without importing any kernel library.
        by_library: library -> the operators its import adds.
        errors: library -> why its import failed.
        modules: library -> its module.
        version: the installed executorch version.
    """

    base: frozenset[str]
    by_library: dict[str, frozenset[str]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)
    version: str | None = None

    def registered(self, op: str, libraries: Any = None) -> bool:
        """Whether ``op`` is registered with the base runtime plus ``libraries`` (default: every
        library that imports)."""
        names = {op, op + ".default"} if "." not in op.partition("::")[2] else {op}
        if not names.isdisjoint(self.base):
            return True
        libs = self.by_library if libraries is None else {k: self.by_library.get(k, frozenset())
                                                          for k in libraries}
        return any(not names.isdisjoint(v) for v in libs.values())

    def provider(self, op: str) -> str | None:
        """The library whose import registers ``op`` here (``BASE`` when none is needed)."""
        names = {op, op + ".default"}
        if not names.isdisjoint(self.base):
            return BASE
        for lib, ops in self.by_library.items():
            if not names.isdisjoint(ops):
                return lib
        return None


_REGISTRY: dict[str, Registry | None] = {}


def _executorch_files() -> list[str] | None:
    """The installed runtime's shared libraries (their identity keys the cache); ``None``
    when executorch is not installed. Nothing is imported."""
    import importlib.util

    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = next(iter(spec.submodule_search_locations))
    found = []
    for sub in ("extension/pybindings", "kernels/quantized", "extension/llm/custom_ops", "lib"):
        folder = os.path.join(root, sub)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        found += [os.path.join(folder, n) for n in names if ".so" in n]
    return found


def _cache_dir() -> str:
    base = os.environ.get("WORKBENCH_CACHE_DIR")
    if base:
        return base
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "workbench")


def registered_operators(refresh: bool = False) -> Registry | None:
    """The operators the installed ExecuTorch runtime registers, with and without each kernel
    library of :func:`workbench.operators.library_modules` (asked of the runtime in a child
    process once; cached in memory and in ``~/.cache/workbench``, keyed by the installed
    shared libraries). ``None`` when ExecuTorch is not installed.

    Raises:
        RuntimeFailure: the runtime could not be asked (it crashed or failed to import).

    Example:
        >>> reg = registered_operators()                     # doctest: +SKIP
        >>> "llama::custom_sdpa.out" in reg.by_library["llm_custom_ops"]   # doctest: +SKIP
        True
    """
    files = _executorch_files()
    if files is None:
        return None
    modules = operators.library_modules()
    modules.pop(BASE, None)
    h = hashlib.sha256(json.dumps([sys.executable, modules]).encode())
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            continue
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    key = h.hexdigest()[:32]
    if not refresh and key in _REGISTRY:
        return _REGISTRY[key]
    path = os.path.join(_cache_dir(), f"registered-operators-{key}.json")
    data = None
    if not refresh:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = None
    if data is None:
        data = run_child({"task": "registered", "libraries": modules},
                         timeout=REGISTRY_TIMEOUT, what="listing the registered operators")
        try:  # only a cache: a folder we cannot write just means asking again next time
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(path), delete=False,
                                             suffix=".tmp", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(f.name, path)
        except OSError:
            pass
    libs = data["libraries"]
    reg = Registry(base=frozenset(data["base"]),
                   by_library={k: frozenset(v["added"]) for k, v in libs.items()},
                   errors={k: v["error"] for k, v in libs.items() if v.get("error")},
                   modules={k: v["module"] for k, v in libs.items()},
                   version=data.get("executorch"))
    _REGISTRY[key] = reg
    return reg


# -- what an opened program needs ----------------------------------------------------------------

def program_of(art: Artifact) -> Artifact:
    """The program of ``art`` (the embedded one of a ``.bpte``)."""
    if art.format == "bpte":
        art = art.program
    if art.format != "pte":
        raise TypeError(f"an ExecuTorch program (.pte or .bpte) is needed, not {art.format}")
    return art


def kernel_ops(art: Artifact) -> dict[str, dict[str, Any]]:
    """op -> {"uses": kernel calls, "methods": [...], "kernel_keys": [...]} over every method's
    kernel (non-delegated) instructions of the opened program ``art``."""
    ops = program_of(art).frames["operators"]
    out: dict[str, dict[str, Any]] = {}
    keys = ops["kernel_keys"] if "kernel_keys" in ops.columns else [()] * len(ops)
    for m, op, uses, kk in zip(ops["method"].astype(str), ops["op"].astype(object), ops["uses"],
                               keys):
        if not isinstance(op, str):
            continue
        e = out.setdefault(op, {"uses": 0, "methods": [], "kernel_keys": []})
        e["uses"] += int(uses)
        if m not in e["methods"]:
            e["methods"].append(m)
        e["kernel_keys"] += [k for k in kk if k not in e["kernel_keys"]]
    return out


def libraries_of(art: Artifact) -> dict[str, str]:
    """The kernel libraries (name -> module) the opened program ``art`` needs besides the
    portable kernels."""
    modules = operators.library_modules()
    reg = registered_operators()
    libs: dict[str, str] = {}
    for op in sorted(kernel_ops(art)):
        lib = (reg.provider(op) if reg is not None else None) or operators.library(op)
        if lib is not None and lib != BASE and lib in modules:
            libs[lib] = modules[lib]
    return dict(sorted(libs.items()))


def missing_of(art: Artifact) -> dict[str, str | None] | None:
    """op -> library (``None``: none known) for every operator of the opened program's kernel
    calls that the installed runtime does not register with every library imported; ``None``
    when ExecuTorch is not installed."""
    reg = registered_operators()
    if reg is None:
        return None
    return {op: operators.library(op) for op in sorted(kernel_ops(art)) if not reg.registered(op)}


def check_of(art: Artifact) -> dict[str, str]:
    """:func:`libraries_of` the opened program, after checking that the runtime registers every
    kernel it calls (raises :class:`MissingKernelError` naming the missing ones)."""
    missing = missing_of(art)
    if missing:
        raise MissingKernelError.of(program_of(art).path, missing, registered_operators())
    return libraries_of(art)
