"""Coverage-guided, structure-aware fuzzing of every reader with atheris (libFuzzer), side by
side with the byte mutator of ``bench/fuzz.py`` over the same time.

Each input is written to a file and run through every entry point: ``wb.open``, every frame,
``summary()``, ``validate()``, tensor reads (``bench/fuzz.py``'s ``exercise``), ``wb.compare``
of the file with itself, and the CLI's ``inspect``. A finding is an exception other than an
:class:`~workbench.ArtifactError`, an input slower than ``--slow`` seconds (default 2), a hang,
or peak RSS above the baseline plus twice the largest input plus 64 MiB. For the atheris
engine the RSS is measured by replaying its corpus in a fresh process afterwards (libFuzzer's
tables grow with every execution; ``engine_replay``). The baseline is taken after the
warm-up on the seeds and after importing torch, which the library imports lazily for dtypes
numpy lacks (bfloat16, complex32, ...): a fixed ~185 MiB and ~1 s, paid by the first input
with such a dtype, that is neither growth nor slowness of a reader (``_warm_lazy_imports``).
Failing inputs are saved under ``<out>/<format>/<engine>/failures/`` (turn each into a case of
``tests/attacks/``). The slowest input of each engine is kept as
``<out>/<format>/<engine>/slowest<suffix>``, to be timed again alone.

Mutators (atheris engine; half of the inputs, the rest libFuzzer's own byte mutations):
- **flatbuffer** (.pte, .ptd, .bpte, .etdp): a random table found by its vtable; one vtable
  entry or one field (u8/u32/u64) set to a boundary value (0, -1, 2^31, the buffer size, ...);
- **JSON** (.pt2, ETRecord): one JSON member parsed, one value made deeper (wrapped in up to
  1,000 lists), larger (huge ints, long strings, NaN) or of another type, and re-serialised;
- **zip** (.pt2, ETRecord): one field of one local, central or end record (sizes, offsets,
  counts, name length, flags, method) set to a boundary value.

Every other input is read with ``formats.pte.program.SCALAR_INSTRUCTIONS = 0``: the shipped
threshold reads the few instructions of the samples' methods with the scalar readers, and
the vectorised ones would go unfuzzed.

Seeds: the samples of that format in ``sample_models/`` and ``../shared/corpus/``. Coverage is
the set of lines of ``workbench/formats/`` executed (coverage.py, in the fuzzing process).

Usage::

    .venv/bin/python bench/fuzz_cov.py --format pte --seconds 60        # atheris, then bytes
    .venv/bin/python bench/fuzz_cov.py --format pt2 --seconds 1800 --engine atheris
    .venv/bin/python bench/fuzz_cov.py --format all --seconds 60        # every format
    .venv/bin/python bench/fuzz_cov.py --format all --seconds 1800 --parallel   # the 30-min runs

Needs the ``fuzz`` extra (``pip install 'pte-workbench[fuzz]'``: atheris).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FORMATS_DIR = ROOT / "workbench" / "formats"
if str(ROOT / "bench") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench"))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: format -> file suffix of its inputs
SUFFIX = {"pte": ".pte", "ptd": ".ptd", "bpte": ".bpte", "pt2": ".pt2", "etdump": ".etdp",
          "etrecord": ".etrecord"}
FLATBUFFER = {"pte", "ptd", "bpte", "etdump"}
_INTERESTING = (0, 1, 2, 3, 4, 7, 8, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000,
                0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)


# -- seeds ----------------------------------------------------------------------------------------

def seeds(fmt: str) -> list[Path]:
    """The sample files of ``fmt`` (by magic bytes) in sample_models/ and ../shared/corpus/."""
    from workbench.formats import sniff

    out = []
    for folder in (ROOT / "sample_models", ROOT.parent / "shared" / "corpus"):
        for p in sorted(folder.rglob("*")) if folder.is_dir() else ():
            if p.is_file() and p.stat().st_size < 64 << 20:
                with open(p, "rb") as f:
                    mod = sniff(f.read(64))
                if mod is not None and mod.FORMAT == fmt:
                    out.append(p)
    return out


# -- structure-aware mutators ---------------------------------------------------------------------

def _boundary(rng: random.Random, n: int, old: int) -> int:
    return rng.choice((*_INTERESTING, n, n - 1, n + 1, old + 1, old - 1, old ^ 0x80000000,
                       old * 2, rng.randrange(max(1, n))))


def mutate_flatbuffer(data: bytes, rng: random.Random) -> bytes | None:
    """One vtable entry or one field of a random table (found by a plausible vtable)."""
    n = len(data)
    if n < 16:
        return None
    for _ in range(64):
        t = rng.randrange(0, n - 4) & ~3
        (soff,) = struct.unpack_from("<i", data, t)
        vt = t - soff
        if not (0 <= vt <= n - 4) or vt == t:
            continue
        vsize, tsize = struct.unpack_from("<HH", data, vt)
        if vsize < 4 or vsize & 1 or vsize > 256 or vt + vsize > n or tsize < 4 or t + tsize > n:
            continue
        slots = (vsize - 4) // 2
        d = bytearray(data)
        if slots and rng.random() < 0.4:  # a vtable entry
            at = vt + 4 + 2 * rng.randrange(slots)
            struct.pack_into("<H", d, at, _boundary(rng, tsize, struct.unpack_from("<H", d, at)[0])
                             & 0xFFFF)
            return bytes(d)
        if rng.random() < 0.1:  # the table's soffset (aliasing another vtable / itself)
            struct.pack_into("<i", d, t, rng.choice((0, -4, 4, soff + 4, soff - 4, t)))
            return bytes(d)
        offs = [struct.unpack_from("<H", data, vt + 4 + 2 * i)[0] for i in range(slots)]
        offs = [o for o in offs if o and t + o + 4 <= n]
        if not offs:
            continue
        at = t + rng.choice(offs)
        width = rng.choice((1, 4, 4, 4, 8)) if at + 8 <= n else 4
        fmt = {1: "<B", 4: "<I", 8: "<Q"}[width]
        old = struct.unpack_from(fmt, d, at)[0]
        struct.pack_into(fmt, d, at, _boundary(rng, n, old) & ((1 << 8 * width) - 1))
        if rng.random() < 0.3 and width == 4:  # ... and the vector/string length it points at
            tgt = at + struct.unpack_from("<I", d, at)[0]
            if tgt + 4 <= n:
                struct.pack_into("<I", d, tgt, rng.choice(_INTERESTING))
        return bytes(d)
    return None


def _rezip(items: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, content in items:
            z.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), content)
    return out.getvalue()


def _mutate_value(v: Any, rng: random.Random) -> Any:
    choice = rng.randrange(9)
    if choice == 0:
        for _ in range(rng.choice((2, 10, 100, 300, 1000))):
            v = [v]
        return v
    if choice == 1:
        return rng.choice((2 ** 63, -(2 ** 63) - 1, 2 ** 64, 10 ** 30, -1, 1 << 62))
    if choice == 2:
        return rng.choice((float("nan"), float("inf"), 1e308, 0.5))
    if choice == 3:
        return "x" * rng.choice((0, 1000, 100_000)) + rng.choice(("", "\x00", "/..", "\udcff"[:0]))
    if choice == 4:
        return rng.choice(([], {}, None, True, "", 0))
    if choice == 5 and isinstance(v, dict) and v:
        k = rng.choice(list(v))
        return {**v, k + rng.choice(("", "_")): v[k]}
    if choice == 6 and isinstance(v, list) and v:
        return v + v[: rng.randrange(len(v)) + 1]
    if choice == 7 and isinstance(v, (dict, list)) and v:
        return list(v.values()) if isinstance(v, dict) else {str(i): x for i, x in enumerate(v)}
    return v


def _walk_pick(doc: Any, rng: random.Random) -> tuple[Any, Any] | None:
    """A random (container, key) inside ``doc`` (iteratively, bounded)."""
    spots: list[tuple[Any, Any]] = []
    stack = [doc]
    while stack and len(spots) < 20_000:
        o = stack.pop()
        items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()
        for k, v in items:
            spots.append((o, k))
            if isinstance(v, (dict, list)):
                stack.append(v)
    return rng.choice(spots) if spots else None


def mutate_json(data: bytes, rng: random.Random) -> bytes | None:
    """One JSON member re-serialised with one value deeper, larger or of another type."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            items = [(i.filename, z.read(i)) for i in z.infolist()]
    except Exception:
        return None
    docs = [k for k, (name, c) in enumerate(items) if c[:1] in (b"{", b"[") and len(c) < 8 << 20]
    if not docs:
        return None
    k = rng.choice(docs)
    try:
        doc = json.loads(items[k][1])
    except ValueError:
        return None
    spot = _walk_pick(doc, rng)
    if spot is None:
        doc = _mutate_value(doc, rng)
    else:
        o, key = spot
        o[key] = _mutate_value(o[key], rng)
    try:
        text = json.dumps(doc, separators=rng.choice(((", ", ": "), (",", ":"))))
    except (ValueError, RecursionError):
        return None
    items[k] = (items[k][0], text.encode("utf-8", "surrogatepass"))
    return _rezip(items)


#: record signature -> offsets of its integer fields (width, offset)
_ZIP_FIELDS = {
    b"PK\x03\x04": [(2, 6), (2, 8), (4, 18), (4, 22), (2, 26), (2, 28)],
    b"PK\x01\x02": [(2, 8), (2, 10), (4, 20), (4, 24), (2, 28), (2, 30), (2, 32), (4, 42)],
    b"PK\x05\x06": [(2, 8), (2, 10), (4, 12), (4, 16), (2, 20)],
}


def mutate_zip(data: bytes, rng: random.Random) -> bytes | None:
    """One integer field of one local, central or end-of-directory record."""
    sig = rng.choice(list(_ZIP_FIELDS))
    spots = []
    at = data.find(sig)
    while at >= 0 and len(spots) < 4096:
        spots.append(at)
        at = data.find(sig, at + 4)
    if not spots:
        return None
    at = rng.choice(spots)
    width, off = rng.choice(_ZIP_FIELDS[sig])
    if at + off + width > len(data):
        return None
    fmt = "<H" if width == 2 else "<I"
    d = bytearray(data)
    old = struct.unpack_from(fmt, d, at + off)[0]
    struct.pack_into(fmt, d, at + off, _boundary(rng, len(data), old) & ((1 << 8 * width) - 1))
    return bytes(d)


def structured(fmt: str, data: bytes, rng: random.Random) -> bytes | None:
    """One structure-aware mutation for ``fmt`` (``None`` when none applies)."""
    if fmt in FLATBUFFER:
        return mutate_flatbuffer(data, rng)
    return (mutate_json if rng.random() < 0.6 else mutate_zip)(data, rng)


# -- running one input ----------------------------------------------------------------------------

class Run:
    """Counts, findings and the deadline of one engine's run."""

    def __init__(self, fmt: str, engine: str, out: Path, seconds: float, slow: float) -> None:
        self.fmt, self.engine, self.slow = fmt, engine, slow
        self.out = out / fmt / engine
        (self.out / "failures").mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="fuzz_cov_", dir="/dev/shm"
                                          if os.path.isdir("/dev/shm") else None))
        self.start = time.monotonic()
        self.deadline = self.start + seconds
        self.execs = 0
        self.outcomes: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.slowest = (0.0, "")
        self.largest = 0
        self.warmup_execs = 0  # the first executions, on the seeds (they pay for imports)
        self.shipped_threshold: int | None = None  # program.SCALAR_INSTRUCTIONS as shipped

    def one(self, data: bytes, name: str | None = None, siblings: tuple[Path, ...] = (),
            retry: bool = True) -> float:
        """Run ``data`` through every entry point; record what happened; returns seconds (a
        slow input is run again and counts as slow only when it is slow twice: the first
        run of a code path pays for its imports)."""
        import fuzz

        import workbench as wb
        from workbench import cli
        from workbench.formats.pte import program

        if self.shipped_threshold is None:
            self.shipped_threshold = program.SCALAR_INSTRUCTIONS
        path = self.work / (name or ("input" + SUFFIX[self.fmt]))
        path.write_bytes(data)
        for s in siblings:
            target = self.work / s.name
            if not target.exists():
                target.write_bytes(s.read_bytes())
        self.largest = max(self.largest, len(data))
        self.execs += 1
        # every other input reads even small methods on the vectorised instruction paths
        # (the shipped threshold sends the samples' few instructions to the scalar ones)
        program.SCALAR_INSTRUCTIONS = 0 if self.execs % 2 else self.shipped_threshold
        t0 = time.perf_counter()
        try:
            with fuzz.watchdog(10.0, 60.0):
                fuzz.exercise(path)
                wb.compare(path, path).delta()
                with contextlib.redirect_stdout(io.StringIO()), \
                        contextlib.redirect_stderr(io.StringIO()):
                    code = cli.main(["inspect", str(path)])
                if code not in (0, 1):
                    raise RuntimeError(f"workbench inspect exited {code}")
            self.outcomes["ok"] += 1
        except wb.ArtifactError as e:
            self.outcomes[type(e).__name__] += 1
        except (Exception, fuzz.Hang) as e:  # a finding
            where = traceback.extract_tb(e.__traceback__)[-1]
            key = f"{type(e).__name__} at {Path(where.filename).name}:{where.lineno}"
            self.failures[key] += 1
            if self.failures[key] == 1:
                self._save(key, data, traceback.format_exc())
        dt = time.perf_counter() - t0
        if dt > self.slow and retry:
            dt = min(dt, self.one(data, name, siblings, retry=False))
            self.execs -= 1
            if dt > self.slow:
                self.failures[f"slower than {self.slow:g} s"] += 1
                self._save(f"slow_{self.execs}", data, f"{dt:.2f} s")
        if dt > self.slowest[0]:
            self.slowest = (dt, f"exec {self.execs}")
            # kept, so that a slow execution can be replayed alone afterwards
            (self.out / ("slowest" + SUFFIX[self.fmt])).write_bytes(data)
        return dt

    def _save(self, key: str, data: bytes, text: str) -> None:
        slug = "".join(c if c.isalnum() else "_" for c in key)[:80]
        folder = self.out / "failures" / slug
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ("input" + SUFFIX[self.fmt])).write_bytes(data)
        (folder / "failure.txt").write_text(text)

    def report(self, lines: dict[str, set[int]], baseline_rss: int) -> dict[str, Any]:
        wall = time.monotonic() - self.start
        peak = _vm("VmHWM")
        limit = baseline_rss + 2 * self.largest + (64 << 20)  # (baseline: after the warm-up)
        return {"format": self.fmt, "engine": self.engine, "seconds": round(wall, 1),
                "execs": self.execs, "exec_per_s": round(self.execs / max(wall, 1e-9), 1),
                "outcomes": dict(self.outcomes.most_common()), "failures": dict(self.failures),
                "slowest_s": round(self.slowest[0], 3), "slowest_at": self.slowest[1],
                "warmup_execs": self.warmup_execs, "peak_rss_mib": peak >> 20,
                "rss_limit_mib": limit >> 20, "rss_ok": peak <= limit,
                "lines": sum(map(len, lines.values())),
                "covered": {k: sorted(v) for k, v in lines.items()}}


def _warm_lazy_imports() -> None:
    """Import what the library imports lazily on some inputs only, before the baseline: torch
    (``Artifact.tensor``: ``workbench._tensor.read`` and ``empty`` for the dtypes numpy lacks).
    Without it the first mutant with a bfloat16 or complex32 tensor pays torch's import
    (~185 MiB RSS, ~1 s) and is read as a reader's memory growth or slowness."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F401


def _vm(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _lines(cov: Any) -> dict[str, set[int]]:
    data = cov.get_data()
    out = {}
    for f in data.measured_files():
        if f.startswith(str(FORMATS_DIR)):
            out[os.path.relpath(f, ROOT)] = set(data.lines(f) or ())
    return out


def _finish(run: Run, cov: Any, baseline: int) -> None:
    cov.stop()
    rep = run.report(_lines(cov), baseline)
    (run.out / "summary.json").write_text(json.dumps(rep, indent=1))
    sys.stdout.flush()
    os._exit(0)


# -- the two engines ------------------------------------------------------------------------------

def _start_coverage() -> Any:
    import coverage

    cov = coverage.Coverage(source=[str(FORMATS_DIR)], data_file=None, branch=False)
    cov.start()
    return cov


def engine_atheris(args: argparse.Namespace) -> None:
    """libFuzzer over the seeds with the structure-aware mutators; exits at the deadline."""
    import atheris

    cov = _start_coverage()
    with atheris.instrument_imports(include=["workbench"]):
        import workbench
        import workbench.cli
        import workbench.comparison  # noqa: F401
    import fuzz  # noqa: F401
    _warm_lazy_imports()

    run = Run(args.format, "atheris", Path(args.out), args.seconds, args.slow)
    corpus = run.out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for p in seeds(args.format):
        (corpus / p.name).write_bytes(p.read_bytes())
    for p in sorted(corpus.iterdir()):  # warm every code path's imports
        run.one(p.read_bytes())
    run.warmup_execs = run.execs
    baseline = _vm("VmHWM")
    fmt = args.format

    def test_one(data: bytes) -> None:
        if time.monotonic() > run.deadline:
            _finish(run, cov, baseline)
        run.one(data)

    def mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.5:
            out = structured(fmt, data, rng)
            if out is not None and len(out) <= max(max_size, len(data)):
                return out
        return atheris.Mutate(data, max_size)

    biggest = max((p.stat().st_size for p in corpus.iterdir()), default=4096)
    atheris.Setup([sys.argv[0], str(corpus), f"-max_len={max(biggest * 2, 4096)}",
                   f"-seed={args.seed}", "-rss_limit_mb=4096", "-timeout=60",
                   f"-max_total_time={int(args.seconds) + 30}"], test_one,
                  custom_mutator=mutator)
    atheris.Fuzz()


def replay(run: Run, inputs: list[bytes], passes: int, after_pass: Any = None) -> None:
    """Run every input ``passes`` times through ``run.one`` (``after_pass(run)`` after each)."""
    for _ in range(passes):
        for data in inputs:
            run.one(data)
        if after_pass is not None:
            after_pass(run)


def engine_replay(args: argparse.Namespace) -> None:
    """The RSS check of an atheris run: libFuzzer's own tables and the instrumentation grow
    with every input (~7 MiB per 1,000 executions here), so the atheris process's peak says
    nothing about the readers. This replays the corpus that run kept (every input that
    reached new code, the seeds first) twice, in a fresh process with neither, and measures
    the peak against the same limit (baseline after the seeds plus twice the largest input
    plus 64 MiB)."""
    import workbench
    import workbench.cli
    import workbench.comparison  # noqa: F401
    _warm_lazy_imports()

    corpus = Path(args.out) / args.format / "atheris" / "corpus"
    files = sorted(p for p in corpus.iterdir() if p.is_file()) if corpus.is_dir() else []
    run = Run(args.format, "replay", Path(args.out), 1e9, args.slow)
    names = {p.name for p in seeds(args.format)}
    for p in files:  # warm every code path's imports on the seeds, as the engines do
        if p.name in names:
            run.one(p.read_bytes())
    baseline = _vm("VmHWM")
    replay(run, [p.read_bytes() for p in files], 2)
    peak = _vm("VmHWM")
    limit = baseline + 2 * run.largest + (64 << 20)
    rep = {"inputs": len(files), "execs": run.execs, "peak_rss_mib": peak >> 20,
           "rss_limit_mib": limit >> 20, "rss_ok": bool(files) and peak <= limit,
           "failures": dict(run.failures), "outcomes": dict(run.outcomes.most_common())}
    (run.out / "summary.json").write_text(json.dumps(rep, indent=1))


def engine_bytes(args: argparse.Namespace) -> None:
    """bench/fuzz.py's seeded byte mutator over the same samples, for the same time."""
    cov = _start_coverage()
    import fuzz

    import workbench
    import workbench.cli
    import workbench.comparison  # noqa: F401
    _warm_lazy_imports()

    paths = seeds(args.format)
    targets = [t for p in paths for t in fuzz.analyse(p) if t.fmt == args.format] or \
        [t for p in paths for t in fuzz.analyse(p)]
    run = Run(args.format, "bytes", Path(args.out), args.seconds, args.slow)
    for t in targets:  # warm every code path's imports
        run.one(t.data, t.name)
    run.warmup_execs = run.execs
    baseline = _vm("VmHWM")
    i = 0
    while time.monotonic() < run.deadline:
        t = targets[i % len(targets)]
        _, data = fuzz.mutant(t, args.seed, i)
        run.one(data, t.name)
        i += 1
    _finish(run, cov, baseline)


# -- the driver -----------------------------------------------------------------------------------

def _print_side_by_side(fmt: str, reps: dict[str, dict[str, Any]]) -> None:
    a, b = reps.get("atheris"), reps.get("bytes")
    print(f"\n== {fmt} ==")
    print(f"{'':24s}{'atheris+structure':>20s}{'bytes (fuzz.py)':>20s}")
    for key in ("seconds", "execs", "exec_per_s", "lines", "slowest_s", "slowest_at", "warmup_execs",
                "peak_rss_mib",
                "rss_limit_mib", "fuzzer_peak_rss_mib"):
        print(f"{key:24s}{a.get(key) if a else '-'!s:>20s}{b.get(key) if b else '-'!s:>20s}")
    if a and b:
        la = {(f, n) for f, ns in a["covered"].items() for n in ns}
        lb = {(f, n) for f, ns in b["covered"].items() for n in ns}
        print(f"{'only atheris reached':24s}{len(la - lb):>20d}{'':>20s}")
        print(f"{'only bytes reached':24s}{'':>20s}{len(lb - la):>20d}")
    for name, r in reps.items():
        print(f"{name}: outcomes {r['outcomes']}")
        print(f"{name}: findings {r['failures'] or 'none'}; rss within limit: {r['rss_ok']}"
              + (f" (replay: {r['replay']})" if "replay" in r else ""))


def _replayed(rep: dict[str, Any], summary: Path) -> None:
    """Replace an atheris report's RSS verdict by its replay's (``engine_replay``); the
    atheris process's own peak stays as ``fuzzer_peak_rss_mib``."""
    rep["fuzzer_peak_rss_mib"] = rep["peak_rss_mib"]
    if not summary.exists():
        rep.update(peak_rss_mib=None, rss_ok=False, replay="missing (the replay crashed)")
        return
    r = json.loads(summary.read_text())
    rep.update(peak_rss_mib=r["peak_rss_mib"], rss_limit_mib=r["rss_limit_mib"],
               rss_ok=r["rss_ok"], replay=f"{r['inputs']} corpus inputs x 2, "
               f"findings {r['failures'] or 'none'}")
    for key, n in r["failures"].items():
        rep["failures"][f"(replay) {key}"] = n


def _wait(proc: subprocess.Popen, timeout: float) -> None:
    """Wait for an engine process; kill it past ``timeout`` (its summary is then missing)."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    """Parse arguments; run the engines in fresh processes; print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--format", default="pte", choices=[*SUFFIX, "all"])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--engine", default="both", choices=["both", "atheris", "bytes", "replay"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--slow", type=float, default=2.0)
    ap.add_argument("--out", default=str(ROOT / "build" / "fuzz_cov"))
    ap.add_argument("--parallel", action="store_true",
                    help="run the two engines at the same time (one process each: on a "
                    "2-core machine each has a core for the whole run, side by side)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        {"atheris": engine_atheris, "bytes": engine_bytes,
         "replay": engine_replay}[args.engine](args)
        return 0
    formats = list(SUFFIX) if args.format == "all" else [args.format]
    engines = ["atheris", "bytes"] if args.engine == "both" else [args.engine]
    if "replay" in engines:
        ap.error("--engine replay is run after an atheris run, not alone")
    bad = 0
    for fmt in formats:
        reps = {}
        procs = []
        for eng in engines:
            cmd = [sys.executable, __file__, "--child", "--format", fmt, "--engine", eng,
                   "--seconds", str(args.seconds), "--seed", str(args.seed), "--slow",
                   str(args.slow), "--out", args.out]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
            if not args.parallel:
                _wait(procs[-1], args.seconds + 600)
        for proc in procs:
            _wait(proc, args.seconds + 600)
        if "atheris" in engines:  # its RSS check, without libFuzzer (see engine_replay)
            (Path(args.out) / fmt / "replay" / "summary.json").unlink(missing_ok=True)
            cmd = [sys.executable, __file__, "--child", "--format", fmt, "--engine", "replay",
                   "--slow", str(args.slow), "--out", args.out]
            _wait(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                  1800)
        for eng in engines:
            summary = Path(args.out) / fmt / eng / "summary.json"
            if summary.exists():
                reps[eng] = json.loads(summary.read_text())
                if eng == "atheris":
                    _replayed(reps[eng], Path(args.out) / fmt / "replay" / "summary.json")
                bad += bool(reps[eng]["failures"]) or not reps[eng]["rss_ok"]
            else:
                print(f"{fmt}/{eng}: no summary (the engine crashed; see {summary.parent})")
                bad += 1
        _print_side_by_side(fmt, reps)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
