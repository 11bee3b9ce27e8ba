"""Benchmark reading XNNPACK delegate blobs against ExecuTorch's own XNNPACK (de)serialization.

What is measured
----------------
Real ``.pte`` files exported with the installed toolchain (cached under
``${WORKBENCH_BENCH_CACHE:-~/.cache/workbench-bench}/executorch-<v>_torch-<v>/``): a stack of
``Linear`` layers quantized with torchao's ``quantize_(model,
Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))``
("8da4w") and lowered with ``XnnpackPartitioner``. Every layer becomes an XNNPACK ``Convert`` +
``FullyConnected`` pair over a ``qbint4`` weight with bfloat16 scales (named data):

* ``q2000``      -- 2,000 x ``Linear(64, 64)`` as 10 methods of 200 layers (10 blobs): the
  size target (>= 100x faster). One 2,000-layer graph cannot be lowered here: ExecuTorch's
  lowering passes grew past 23 GB and were OOM-killed.
* ``q200``       -- 200 x ``Linear(64, 64)``: a tenth of the metadata.
* ``q200_wide``  -- 200 x ``Linear(512, 512)``: the same metadata as ``q200``, 64x the weights.

The first export of ``q2000`` takes about 30-60 minutes on a 2-core machine (the lowering
passes cost ~1 s per layer); files are cached.

For each file four sides are timed, each in fresh subprocesses (medians over ``--repeat``;
the sides take turns, run by run):

* **ours** (blobs): map the file (``Source``), ``inspect_blobs`` on every delegate blob
  (header, graph, constants resolved against the named data) and the ``delegate_tensors`` +
  ``delegate_nodes`` frames built from the records. Given for free, like the reference: the
  blobs' byte ranges and the named-data index (key -> file, offset, size).
* **reference** (blobs): ExecuTorch's Python XNNPACK deserialization of the same blobs: read
  the file, ``XNNHeader.from_bytes`` on each blob, then the graph flatbuffer decoded the way
  ExecuTorch's serialization modules do it (``_flatc_decompile`` with the XNNPACK
  ``schema.fbs`` -> JSON -> ``_json_to_dataclass(..., XNNGraph)``, as
  ``vulkan_graph_serialize.flatbuffer_to_vk_graph`` does for Vulkan; the XNNPACK module has
  only the serializing half). flatc writes bare ``inf``; the reference's JSON gets a cheap
  fix-up first.
* **ours_open** / **reference_open** (end to end, from the file): ``workbench.open`` and
  **every frame** the program has (segments with the blobs' sub-segments, tensors, named data
  with the graph's dtypes, delegate_tensors, delegate_nodes, instructions, ...), against
  ``deserialize_pte_binary`` (which finds the blobs) + the reference decoding above.

Imports are not timed; each worker first runs its operation once, untimed, on
``sample_models/wide_xnnpack_8da4w.pte`` (lazy library set-up): the blob sides on its blob
listed twice (the one-blob and the many-blob code paths), the open sides on the file as it
is (one method, one blob: the many-method and many-blob paths run first in the timed call;
in a fresh process a full collection of the garbage collector may then fall in the timed
call too, ~15-20 ms, depending on what the process allocated before), then resets the RSS
high-water mark and times one call. RSS growth = ``VmHWM`` after minus ``VmRSS`` before.
The parent warms the page cache first. This machine sets ``PYTHONDONTWRITEBYTECODE=1``;
the workers unset it so a fresh process does not recompile the package.

Usage (from the repository root)::

    .venv/bin/python bench/bench_xnnpack.py                  # all files, 5 repeats
    .venv/bin/python bench/bench_xnnpack.py --only q200 q200_wide --repeat 3
    .venv/bin/python bench/bench_xnnpack.py --generate       # export the files and stop
    .venv/bin/python bench/bench_xnnpack.py --check          # exit 1 if a target is missed
    .venv/bin/python bench/bench_xnnpack.py --only q2000 --breakdown --repeat 15
                                                             # where our time goes, warm
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from _artifacts import cache_dir
from _measure import maxrss_kb, reset_hwm, status_kb

REPO_ROOT = Path(__file__).resolve().parent.parent
WARMUP = str(REPO_ROOT / "sample_models" / "wide_xnnpack_8da4w.pte")
RESULT_MARKER = "@@BENCH_RESULT "
SIDES = ("ours", "reference")
#: key -> minimum speed-up over the reference (blobs; and end to end, from the file)
TARGETS = {"q2000": 100.0}
TARGETS_OPEN = {"q2000": 100.0}


@dataclass(frozen=True)
class QSpec:
    """``count`` 8da4w-quantized ``Linear(width, width)`` lowered to XNNPACK, as ``methods``
    methods (each a stack of ``count / methods`` layers with its own weights and blob)."""

    name: str
    count: int
    width: int
    methods: int = 1

    def describe(self) -> str:
        per = f" in {self.methods} methods" if self.methods > 1 else ""
        return f"{self.count} x 8da4w Linear({self.width}, {self.width}){per} -> XNNPACK"


SPECS = {
    "q2000": QSpec("xnnpack_8da4w_2000x64_10m.pte", 2000, 64, methods=10),
    "q200": QSpec("xnnpack_8da4w_200x64.pte", 200, 64),
    "q200_wide": QSpec("xnnpack_8da4w_200x512.pte", 200, 512),
}


def _log(msg: str) -> None:
    print(f"[bench_xnnpack {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def generate(spec: QSpec, dest: Path) -> None:
    """Export ``spec`` to ``dest`` (atomically, with a ``.meta.json`` sidecar)."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torch import nn
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    t0 = time.perf_counter()
    torch.manual_seed(0)
    per = spec.count // spec.methods
    programs = {}
    for m in range(spec.methods):
        model = nn.Sequential(*[nn.Linear(spec.width, spec.width) for _ in range(per)]).eval()
        quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4,
                                                               weight_granularity=PerGroup(32)))
        with torch.no_grad():
            name = "forward" if spec.methods == 1 else f"stack{m}"
            programs[name] = torch.export.export(model, (torch.randn(1, spec.width),),
                                                 strict=False)
    with torch.no_grad():
        _log(f"{spec.name}: exported ({time.perf_counter() - t0:.0f}s); lowering to XNNPACK")
        edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()])
        _log(f"{spec.name}: lowered ({time.perf_counter() - t0:.0f}s); to_executorch")
        program = edge.to_executorch()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(program.buffer)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    meta = {"spec": spec.describe(), "size_bytes": dest.stat().st_size,
            "generation_s": round(time.perf_counter() - t0, 1)}
    dest.with_name(dest.name + ".meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    _log(f"{spec.name}: wrote {dest} ({meta['size_bytes'] / 1e6:.1f} MB) in "
         f"{meta['generation_s']:.0f}s")


def ensure(spec: QSpec) -> Path:
    """The cached file of ``spec``, exported first when missing."""
    path = cache_dir() / spec.name
    if not path.is_file():
        generate(spec, path)
    return path


# --------------------------------------------------------------------------
# Worker side: a fresh interpreter, one timed operation, one marked JSON line.
# --------------------------------------------------------------------------

def _layout(path: str) -> dict:
    """What the blobs-only sides get for free: every delegate's (offset, size, id, method,
    index) and the named-data index key -> (file, offset, size)."""
    import workbench

    with workbench.open(path) as art:
        d = art.frames["delegates"]
        nd = art.frames["named_data"]
        return {
            "blobs": [(int(o), int(s), str(i), str(m), int(k)) for o, s, i, m, k in
                      zip(d["offset"], d["size"], d["id"], d["method"], d["index"])],
            "named": {k: (f, int(o), int(s)) for k, f, o, s in
                      zip(nd["key"], nd["file"], nd["offset"], nd["size"])},
        }


def _ours(with_open: bool):
    import numpy  # noqa: F401
    import pandas  # noqa: F401

    import workbench
    from workbench.formats.delegates import inspect_blobs, node_columns, tensor_columns
    from workbench.frames import build
    from workbench.source import Source

    def op(p: str, layout: dict):
        if with_open:  # what a user does: open the file, then build every frame it has
            art = workbench.open(p)
            frames = {name: art.frames[name] for name in art.frames}
            return art, len(art.frames["delegates"]), frames["delegate_tensors"], \
                frames["delegate_nodes"]
        src = Source(p)
        infos = inspect_blobs(src.buf, layout["blobs"], file=p, named_data=layout["named"])
        tensors = build("delegate_tensors", tensor_columns(infos))
        nodes = build("delegate_nodes", node_columns(infos))
        return src, len(infos), tensors, nodes

    def describe(res) -> dict:
        _, blobs, tensors, nodes = res
        return {"blobs": blobs, "tensors": len(tensors), "nodes": len(nodes),
                "named_constants": int(tensors["named_key"].notna().sum())}

    return op, describe


def _reference(with_open: bool):
    import tempfile

    from executorch.backends.xnnpack.serialization.xnnpack_graph_schema import XNNGraph
    from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import (
        XNNHeader,
        _get_schema_bytes,
    )
    from executorch.exir._serialize._dataclass import _json_to_dataclass
    from executorch.exir._serialize._flatbuffer import _flatc_decompile
    from executorch.exir._serialize._program import deserialize_pte_binary

    def decode(blob: bytes) -> XNNGraph:
        h = XNNHeader.from_bytes(blob[:XNNHeader.EXPECTED_LENGTH])
        fb = blob[h.flatbuffer_offset:h.flatbuffer_offset + h.flatbuffer_size]
        with tempfile.TemporaryDirectory() as d:
            schema = os.path.join(d, "schema.fbs")
            with open(schema, "wb") as f:
                f.write(_get_schema_bytes())
            binary = os.path.join(d, "schema.bin")
            with open(binary, "wb") as f:
                f.write(fb)
            _flatc_decompile(d, schema, binary, ["--raw-binary"])
            with open(os.path.join(d, "schema.json"), "rb") as f:
                return _json_to_dataclass(json.loads(_json_floats(f.read())), XNNGraph)

    def op(p: str, layout: dict):
        with open(p, "rb") as f:
            data = f.read()
        if with_open:  # ExecuTorch's own reading of the program gives the blobs
            program = deserialize_pte_binary(data).program
            blobs = [program.backend_delegate_data[d.processed.index].data
                     for plan in program.execution_plan for d in plan.delegates
                     if d.id == "XnnpackBackend"]
        else:
            blobs = [data[o:o + s] for o, s, i, _, _ in layout["blobs"] if i == "XnnpackBackend"]
        return [decode(b) for b in blobs]

    def describe(res) -> dict:
        return {"blobs": len(res), "tensors": sum(len(g.xvalues) for g in res),
                "nodes": sum(len(g.xnodes) for g in res)}

    return op, describe


#: side -> (maker, with_open)
SIDE_MAKERS = {"ours": (_ours, False), "reference": (_reference, False),
               "ours_open": (_ours, True), "reference_open": (_reference, True)}


def _worker(side: str, path: str, layout_file: str) -> dict:
    maker, with_open = SIDE_MAKERS[side]
    op, describe = maker(with_open)
    layout = json.loads(Path(layout_file).read_text())
    warm = json.loads(Path(layout_file + ".warmup").read_text())
    op(WARMUP, warm)  # untimed: lazy library set-up on a tiny sample
    hwm_reset = reset_hwm()
    rss_before = status_kb("VmRSS")
    maxrss_before = maxrss_kb()
    t0 = time.perf_counter()
    res = op(path, layout)
    elapsed = time.perf_counter() - t0
    hwm_after = status_kb("VmHWM")
    if hwm_reset and rss_before is not None and hwm_after is not None:
        growth_kb = hwm_after - rss_before
    else:
        growth_kb = maxrss_kb() - maxrss_before
    out = {"time_s": elapsed, "rss_growth_mb": max(growth_kb, 0) / 1024}
    out.update(describe(res))
    return out


def _json_floats(raw: bytes) -> str:
    """flatc writes bare ``inf``/``nan`` for float fields; make them Python-JSON tokens
    (cheap replacements first, a regex only where a value sits elsewhere, e.g. in a list)."""
    text = raw.decode()
    for bare, token in ((": -inf", ": -Infinity"), (": inf", ": Infinity"),
                        (": -nan", ": NaN"), (": nan", ": NaN")):
        text = text.replace(bare, token)
    if "inf" in text or "nan" in text:
        import re

        text = re.sub(r"(?<=[\[,\s])(-?)inf\b", r"\1Infinity", text)
        text = re.sub(r"(?<=[\[,\s])-?nan\b", "NaN", text)
    return text


# --------------------------------------------------------------------------
# Driver side.
# --------------------------------------------------------------------------

def _run_worker(side: str, path: Path, layout_file: str, timeout: float) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", side, str(path),
           layout_file]
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER):])
    tail = (proc.stderr.strip().splitlines() or ["<no stderr>"])[-1]
    return {"error": f"exit {proc.returncode}: {tail}"}


def _bench(key: str, repeat: int, timeout: float, sides: tuple[str, ...]) -> dict:
    import tempfile

    spec = SPECS[key]
    path = ensure(spec)
    path.read_bytes()  # warm the page cache
    layout = _layout(str(path))
    result: dict = {"key": key, "path": str(path), "size_bytes": path.stat().st_size,
                    "spec": spec.describe(), "blobs": len(layout["blobs"])}
    with tempfile.TemporaryDirectory() as tmp:
        layout_file = os.path.join(tmp, "layout.json")
        Path(layout_file).write_text(json.dumps(layout))
        warm = _layout(WARMUP)
        warm["blobs"] = warm["blobs"] * 2  # two blobs: the many-blob code path warms up too
        Path(layout_file + ".warmup").write_text(json.dumps(warm))
        # the sides take turns (ours, reference, ours, ...): a VM whose speed drifts during
        # the run slows both alike, and the ratios stay comparable
        runs_of: dict[str, list[dict]] = {side: [] for side in sides}
        for i in range(repeat):
            for side in sides:
                runs = runs_of[side]
                if runs and "error" in runs[-1]:
                    continue
                r = _run_worker(side, path, layout_file, timeout)
                msg = r.get("error") or f"{r['time_s'] * 1e3:.1f} ms, +{r['rss_growth_mb']:.1f} MB"
                _log(f"{key} {side} run {i + 1}/{repeat}: {msg}")
                runs.append(r)
        for side in sides:
            runs = runs_of[side]
            ok = [r for r in runs if "error" not in r]
            result[side] = ({"error": runs[0]["error"]} if not ok else {
                "median_s": statistics.median(r["time_s"] for r in ok),
                "rss_growth_mb_max": max(r["rss_growth_mb"] for r in ok),
                "tensors": ok[0]["tensors"], "nodes": ok[0]["nodes"], "runs": runs})
    for ours, ref in (("ours", "reference"), ("ours_open", "reference_open")):
        if "median_s" in result.get(ours, {}) and "median_s" in result.get(ref, {}):
            result[f"speedup_{ours}"] = result[ref]["median_s"] / result[ours]["median_s"]
    return result


def breakdown(path: str, repeat: int = 15) -> dict[str, float]:
    """Where the end-to-end time goes: warm medians (ms) of ``workbench.open``, the blob
    inspection (run once per program, on the first frame that needs it) and each frame, in one
    process; ``total`` is the median of the runs' sums. ``pandas`` is the median time to build
    every frame again from its own finished columns (``pd.DataFrame(..., copy=True)``, as
    ``workbench.frames.build`` does): the DataFrame construction inside the total.

    Example (from the repository root)::

        >>> breakdown("sample_models/mlp_xnnpack.pte", repeat=3)["total"] > 0   # doctest: +SKIP
        True
    """
    import gc

    import pandas as pd

    import workbench

    def once() -> tuple[dict[str, float], dict]:
        t = time.perf_counter()
        art = workbench.open(path)
        times = {"open": time.perf_counter() - t}
        blobs = art._parsed.extra.delegate_blobs  # (private: what the frames share)
        t = time.perf_counter()
        if blobs is not None:
            _ = blobs.infos
        times["blob inspection"] = time.perf_counter() - t
        frames = {}
        for name in art.frames:
            t = time.perf_counter()
            frames[name] = art.frames[name]
            times[name] = time.perf_counter() - t
        art.close()
        return times, frames

    once()  # lazy imports and first-call set-up
    runs, frames = [], {}
    for _ in range(repeat):
        gc.collect()
        times, frames = once()
        runs.append(times)
    columns = {name: {c: df[c].array for c in df.columns} for name, df in frames.items()}

    def rebuild() -> float:
        t = time.perf_counter()
        for cols in columns.values():
            pd.DataFrame(cols, copy=True)
        return time.perf_counter() - t

    out = {k: statistics.median(r[k] for r in runs) * 1e3 for k in runs[0]}
    out["total"] = statistics.median(sum(r.values()) for r in runs) * 1e3
    out["pandas"] = statistics.median(rebuild() for _ in range(repeat)) * 1e3
    return out


def _print_breakdown(label: str, ms: dict[str, float]) -> None:
    print(f"{label}: warm medians, ms (one process)")
    for k, v in ms.items():
        if k not in ("total", "pandas"):
            print(f"  {k:<20} {v:7.2f}")
    print(f"  {'total':<20} {ms['total']:7.2f}")
    print(f"  {'of which pandas':<20} {ms['pandas']:7.2f}  (DataFrame construction of every frame)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(SPECS), help="these files only")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per side (default 5)")
    parser.add_argument("--sides", nargs="+", choices=sorted(SIDE_MAKERS),
                        default=sorted(SIDE_MAKERS), help="which sides to time (default: all)")
    parser.add_argument("--generate", action="store_true", help="export the files and stop")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--json", metavar="OUT", help="write the results as JSON")
    parser.add_argument("--timeout", type=float, default=900.0, help="per-run timeout, s")
    parser.add_argument("--breakdown", nargs="*", metavar="PTE",
                        help="instead of the comparison: where our end-to-end time goes, "
                        "stage by stage, on these files (none given: the --only files)")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        side, path, layout_file = args.worker
        print(RESULT_MARKER + json.dumps(_worker(side, path, layout_file)), flush=True)
        return 0
    keys = args.only or list(SPECS)
    if args.breakdown is not None:
        paths = args.breakdown or [str(ensure(SPECS[k])) for k in keys]
        for p in paths:
            _print_breakdown(Path(p).name, breakdown(p, max(args.repeat, 3)))
        return 0
    if args.generate:
        for key in keys:
            print(f"{key}\t{ensure(SPECS[key])}")
        return 0
    sides = tuple(s for s in ("ours", "reference", "ours_open", "reference_open")
                  if s in args.sides)
    results = [_bench(k, args.repeat, args.timeout, sides) for k in keys]

    def ms(side: dict | None) -> str:
        return f"{side['median_s'] * 1e3:.1f}" if side and "median_s" in side else "-"

    def mb(side: dict | None) -> str:
        return f"{side['rss_growth_mb_max']:.1f}" if side and "median_s" in side else "-"

    header = (f"{'file':<30} {'MB':>5} {'blobs':>5} {'values':>6} {'nodes':>5} "
              f"{'ours ms':>8} {'ref ms':>8} {'ratio':>6} {'+RSS ours/ref MB':>17} "
              f"{'open: ours ms':>13} {'ref ms':>8} {'ratio':>6}")
    print(header)
    print("-" * len(header))
    missed = False
    for r in results:
        o, f = r.get("ours"), r.get("reference")
        oo, fo = r.get("ours_open"), r.get("reference_open")
        ratio = f"{r['speedup_ours']:.0f}x" if "speedup_ours" in r else "-"
        ratio_open = f"{r['speedup_ours_open']:.0f}x" if "speedup_ours_open" in r else "-"
        print(f"{Path(r['path']).name:<30} {r['size_bytes'] / 1e6:>5.1f} {r['blobs']:>5} "
              f"{(o or oo or {}).get('tensors', '-'):>6} {(o or oo or {}).get('nodes', '-'):>5} "
              f"{ms(o):>8} {ms(f):>8} {ratio:>6} {mb(o) + ' / ' + mb(f):>17} "
              f"{ms(oo):>13} {ms(fo):>8} {ratio_open:>6}")
        for side in sides:
            if "error" in r.get(side, {}):
                print(f"! {r['key']} {side}: {r[side]['error']}")
        for what, targets, got in (("blobs", TARGETS, "speedup_ours"),
                                   ("open + every frame", TARGETS_OPEN, "speedup_ours_open")):
            target = targets.get(r["key"])
            if target is not None and got in r:
                met = r[got] >= target
                missed |= not met
                print(f"  [{'MET' if met else 'MISSED'}] {r['key']}: {what} speed-up >= {target:g}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
