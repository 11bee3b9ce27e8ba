"""Generate and cache real ExecuTorch ``.pte`` files for the benchmarks.

The files are made with the installed ``torch``/``executorch`` via the portable
path (``torch.export.export`` -> ``executorch.exir.to_edge`` ->
``.to_executorch()``) and cached outside the repository in
``${WORKBENCH_BENCH_CACHE:-~/.cache/workbench-bench}/<key>/`` where ``<key>``
names the executorch and torch versions, so each file is exported once per
toolchain.  Files are written to a temporary name and renamed into place, so an
interrupted export never leaves a truncated file in the cache.

Run as a script to (re)generate artifacts up front, e.g. in the background::

    .venv/bin/python bench/_artifacts.py big many
    .venv/bin/python bench/_artifacts.py --quick big many
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class Spec:
    """Recipe for one generated artifact."""

    name: str  # file name inside the cache dir
    kind: str  # "linear" (stack of Linear(width)) or "blocks" (Linear+LayerNorm)
    count: int  # number of Linear layers / Linear+LayerNorm blocks
    width: int  # feature width
    external: bool = False  # weights to a sibling .ptd (ExecutorchBackendConfig(external_constants))

    def describe(self) -> str:
        if self.kind == "linear":
            return f"{self.count} x Linear({self.width}, {self.width})"
        return f"{self.count} x [Linear({self.width}, {self.width}) + LayerNorm({self.width})]"


#: Full-size artifacts, keyed by the ``--only`` selector names.
SPECS: dict[str, Spec] = {
    "big": Spec("big_400mb.pte", "linear", 24, 2048),
    "many": Spec("many_5000.pte", "blocks", 1300, 16),
    "big_external": Spec("big_400mb_external.pte", "linear", 24, 2048, external=True),
    "many_external": Spec("many_5000_external.pte", "blocks", 1300, 16, external=True),
}

#: Small stand-ins for smoke tests (``--quick``).
QUICK_SPECS: dict[str, Spec] = {
    "big": Spec("big_quick.pte", "linear", 4, 512),
    "many": Spec("many_quick.pte", "blocks", 100, 16),
    "big_external": Spec("big_quick_external.pte", "linear", 4, 512, external=True),
    "many_external": Spec("many_quick_external.pte", "blocks", 100, 16, external=True),
}


def cache_root() -> Path:
    """Return the cache directory root (not versioned)."""
    env = os.environ.get("WORKBENCH_BENCH_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "workbench-bench"


def cache_dir() -> Path:
    """Return the versioned cache directory for the installed toolchain."""
    et = metadata.version("executorch")
    th = metadata.version("torch")
    return cache_root() / f"executorch-{et}_torch-{th}"


def artifact_path(spec: Spec) -> Path:
    """Return where ``spec`` is (or will be) cached."""
    return cache_dir() / spec.name


def meta_path(spec: Spec) -> Path:
    """Return the JSON sidecar recording how ``spec``'s file was generated."""
    return cache_dir() / f"{spec.name}.meta.json"


def read_meta(spec: Spec) -> dict | None:
    """Return the generation metadata for ``spec``, or None if unavailable."""
    try:
        return json.loads(meta_path(spec).read_text())
    except (OSError, ValueError):
        return None


def _build_model(spec: Spec):
    import torch
    from torch import nn

    torch.manual_seed(0)
    if spec.kind == "linear":
        layers = [nn.Linear(spec.width, spec.width) for _ in range(spec.count)]
    elif spec.kind == "blocks":
        layers = []
        for _ in range(spec.count):
            layers += [nn.Linear(spec.width, spec.width), nn.LayerNorm(spec.width)]
    else:  # pragma: no cover - specs are fixed above
        raise ValueError(f"unknown kind {spec.kind!r}")
    return nn.Sequential(*layers).eval()


def _log(msg: str) -> None:
    print(f"[artifacts {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def generate(spec: Spec, dest: Path) -> float:
    """Export ``spec`` to ``dest`` atomically; return the wall time in seconds."""
    import torch
    from executorch.exir import to_edge

    t0 = time.perf_counter()
    dest.parent.mkdir(parents=True, exist_ok=True)
    _log(f"{spec.name}: building {spec.describe()}")
    model = _build_model(spec)
    n_params = sum(1 for _ in model.parameters())
    example = (torch.randn(1, spec.width),)
    with torch.no_grad():
        _log(f"{spec.name}: torch.export.export ({n_params} parameter tensors)")
        ep = torch.export.export(model, example, strict=False)
        del model  # the exported program holds the weights now
        _log(f"{spec.name}: to_edge ({time.perf_counter() - t0:.1f}s so far)")
        edge = to_edge(ep)
        del ep
        _log(f"{spec.name}: to_executorch ({time.perf_counter() - t0:.1f}s so far)")
        if spec.external:
            from executorch.exir import ExecutorchBackendConfig

            et_prog = edge.to_executorch(ExecutorchBackendConfig(external_constants=True))
        else:
            et_prog = edge.to_executorch()
        del edge
    _log(f"{spec.name}: serializing ({time.perf_counter() - t0:.1f}s so far)")
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            # Prefer streaming the serialized program over materializing it
            # twice; fall back to ``.buffer`` for executorch versions without it.
            write_to_file = getattr(et_prog, "write_to_file", None)
            if write_to_file is not None:
                write_to_file(f)
            else:
                f.write(et_prog.buffer)
            f.flush()
            os.fsync(f.fileno())
        if spec.external:
            _write_ptd(et_prog, dest.with_suffix(".ptd"))
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    elapsed = time.perf_counter() - t0
    size_mb = dest.stat().st_size / 1e6
    _log(f"{spec.name}: wrote {dest} ({size_mb:.1f} MB) in {elapsed:.1f}s")
    meta = {
        "spec": spec.describe(),
        "parameter_tensors": n_params,
        "size_bytes": dest.stat().st_size,
        "generation_s": round(elapsed, 2),
        # Process-lifetime peak, so it may include earlier artifacts of this run.
        "generator_max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "executorch": metadata.version("executorch"),
        "torch": metadata.version("torch"),
    }
    meta_tmp = tmp.with_suffix(".meta.tmp")
    meta_tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(meta_tmp, dest.with_name(f"{dest.name}.meta.json"))
    return elapsed


def _write_ptd(et_prog, dest: Path) -> None:
    """Write the program's external data to ``dest`` (one tag -> one .ptd), atomically."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=dest.parent) as tmpdir:
        et_prog.write_tensor_data_to_file(tmpdir)
        written = sorted(Path(tmpdir).glob("*.ptd"))
        if len(written) != 1:
            raise RuntimeError(f"expected one .ptd, got {[p.name for p in written]}")
        os.replace(written[0], dest)


def ensure(spec: Spec) -> Path:
    """Return the cached path for ``spec``, exporting it first if missing."""
    path = artifact_path(spec)
    if path.is_file():
        return path
    generate(spec, path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="*", choices=sorted(SPECS), default=sorted(SPECS))
    parser.add_argument("--quick", action="store_true", help="generate the small variants")
    parser.add_argument("--force", action="store_true", help="regenerate even if cached")
    args = parser.parse_args(argv)
    specs = QUICK_SPECS if args.quick else SPECS
    for key in args.which:
        spec = specs[key]
        path = artifact_path(spec)
        if args.force or not path.is_file():
            generate(spec, path)
        print(f"{key}\t{path}\t{path.stat().st_size}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
