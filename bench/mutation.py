"""Mutation testing of the readers with mutmut 3.8: how many small code changes does the
suite notice?

mutmut rewrites every function of the configured modules into many *mutants* (one small
change each: an operator, a constant, a comparison, a removed argument, ...), records once
which tests reach which function (the "stats" run, the selected suite run once), and then
runs, for each mutant, only the tests that reach its function, stopping at the first
failure. A mutant is *killed* when a test fails, *survived* when they all pass. Survivors
are either gaps in the tests or equivalent mutants (changes that cannot alter behaviour).

The configuration lives in ``[tool.mutmut]`` of ``pyproject.toml``: which modules are
mutated (``only_mutate``), which tests run (``pytest_add_cli_args_test_selection``: the
suite without the browser, notebook, widget, profile, plot and house tests and without
``slow`` tests), what the copy under ``mutants/`` needs (``also_copy``). This script wraps
``mutmut run`` and reports::

    .venv/bin/python bench/mutation.py --modules validate.py          # one module
    .venv/bin/python bench/mutation.py --modules formats/pte/,source.py --jobs 2
    .venv/bin/python bench/mutation.py --modules formats/ --limit 100  # a sample of 100 mutants
    .venv/bin/python bench/mutation.py --deselect-failing             # everything (many hours)
    .venv/bin/python bench/mutation.py --rev HEAD --modules source.py  # a commit, not the tree
    .venv/bin/python bench/mutation.py --count                        # mutants per module, no tests
    .venv/bin/python bench/mutation.py --report                       # report the last results

It prints killed / survived / timeout / suspicious / no-tests per module and in total (with
the share killed), and writes ``build/mutation/summary.json`` and
``build/mutation/survivors.md`` (module, function, mutant name and diff of every survivor,
for triage). ``mutmut browse`` / ``mutmut show NAME`` work on the same folder (run them in
``build/mutation/tree/``).

mutmut runs in a copy of the working tree, ``build/mutation/tree/`` (``--rev REV``: of a
commit), kept in sync file by file; its ``mutants/`` folder there is a cache: unchanged
functions keep their verdicts between runs. The verdicts and mutmut's test-to-function stats
are dropped when the tests or the ``also_copy`` data changed (mutmut does not track test
files), leftovers of deleted modules are removed (mutmut never does), and ``--fresh`` starts
from nothing; a run restricted with ``--modules`` or ``--limit`` always re-tests the mutants
it names. mutmut needs the selected tests to pass without mutants: ``--deselect NODEID``
leaves tests out, ``--deselect-failing`` finds the failing ones first. docs/mutation.md lists
the mutmut quirks handled here (pytest 9, bytecode, fork safety).

Needs mutmut 3.8: ``.venv/bin/pip install -e '.[mutation]'`` (or ``pip install mutmut==3.8.0``).
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import hashlib
import importlib.metadata
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "mutation"
#: mutmut runs in this copy of the working tree (kept in sync, see sync_tree).
WORK = OUT / "tree"
MUTANTS = Path("mutants")  # relative to the tree mutmut runs in, as mutmut has it
MUTMUT_VERSION = "3.8.0"
INSTALL_HINT = (f"mutmut {MUTMUT_VERSION} is needed: .venv/bin/pip install -e '.[mutation]' "
                f"(or .venv/bin/pip install mutmut=={MUTMUT_VERSION})")

#: mutmut's verdicts, in report order (its ``status_by_exit_code`` values).
STATUSES = ("killed", "survived", "timeout", "suspicious", "no tests", "segfault", "skipped",
            "caught by type check", "check was interrupted by user", "not checked")

#: Stamp of what the cached ``mutants/`` was made from (tests, samples, config).
_STAMP = MUTANTS / "bench-mutation-stamp.json"


# -- configuration --------------------------------------------------------------------------

def mutmut_config(root: Path = ROOT) -> dict[str, Any]:
    """``[tool.mutmut]`` of ``root/pyproject.toml``."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    data = tomllib.loads((root / "pyproject.toml").read_text())
    try:
        return data["tool"]["mutmut"]
    except KeyError:
        raise SystemExit("pyproject.toml has no [tool.mutmut] section") from None


def ensure_mutmut() -> str:
    """The installed mutmut version; exits with how to install it when it is missing."""
    try:
        version = importlib.metadata.version("mutmut")
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(INSTALL_HINT) from None
    if not version.startswith("3.8"):
        print(f"warning: mutmut {version} is installed; this script was written for "
              f"{MUTMUT_VERSION} (it reads mutmut's files under mutants/)", file=sys.stderr)
    return version


def mutated_files(cfg: dict[str, Any], root: Path = ROOT) -> list[Path]:
    """The source files mutmut mutates (``source_paths`` filtered by ``only_mutate`` and
    ``do_not_mutate``), relative to ``root``, sorted."""
    only = cfg.get("only_mutate", [])
    never = cfg.get("do_not_mutate", [])
    out = []
    for sp in cfg.get("source_paths", []):
        base = root / sp
        paths = [base] if base.is_file() else sorted(base.rglob("*.py"))
        for p in paths:
            rel = p.relative_to(root).as_posix()
            if only and not any(fnmatch.fnmatch(rel, pat) for pat in only):
                continue
            if any(fnmatch.fnmatch(rel, pat) for pat in never):
                continue
            out.append(Path(rel))
    return sorted(set(out))


def module_of(path: Path) -> str:
    """``workbench/formats/pte.py`` -> ``workbench.formats.pte`` (mutmut's module naming)."""
    name = path.with_suffix("").as_posix().replace("/", ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def select_files(files: Sequence[Path], spec: str | None) -> list[Path]:
    """The files picked by ``--modules`` (comma-separated; ``formats/pte.py``, ``source.py``,
    ``formats/`` or a glob, relative to the package or the repository; None: all)."""
    if not spec:
        return list(files)
    out: list[Path] = []
    for part in (s.strip() for s in spec.split(",")):
        if not part:
            continue
        pats = [part, f"workbench/{part}"]
        if part.endswith("/"):
            pats = [p + "*" for p in pats]
        hit = [f for f in files if any(fnmatch.fnmatch(f.as_posix(), p) for p in pats)]
        if not hit:
            raise SystemExit(f"--modules: {part!r} matches none of the mutated files:\n  "
                             + "\n  ".join(f.as_posix() for f in files))
        out.extend(h for h in hit if h not in out)
    return out


def module_glob(path: Path) -> str:
    """A mutmut mutant-name pattern matching exactly the mutants of ``path``'s module
    (names are ``module.x_func__mutmut_N`` or ``module.xǁClassǁmethod__mutmut_N``)."""
    return f"{module_of(path)}.x[_ǁ]*"


# -- the tree mutmut works in ----------------------------------------------------------------

#: Top-level entries of the work tree that are not the repository's (never deleted by a sync).
_OWN = {"mutants", "shared", ".hypothesis", ".pytest_cache"}


def tree_files(src: Path) -> list[str]:
    """Files of the working tree at ``src``: tracked and untracked, not ignored (git); every
    file when ``src`` is not a git checkout (an exported commit)."""
    if not (src / ".git").exists():
        return sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file())
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=src, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"mutation: cannot list the files of {src} with git: {e}") from None
    return sorted({f for f in out.decode().split("\0") if f and (src / f).is_file()})


def export_revision(rev: str, dst: Path) -> Path:
    """The files of commit ``rev`` of this repository, written to ``dst`` (``git archive``;
    the working tree is not touched)."""
    try:
        tar = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        msg = e.stderr.decode(errors="replace") if isinstance(e, subprocess.CalledProcessError) else e
        raise SystemExit(f"--rev {rev}: git archive failed: {msg}") from None
    dst.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        tf.extractall(dst, filter="data")
    return dst


def sync_tree(src: Path, dst: Path, shared: Path | None = None) -> int:
    """Make ``dst`` a copy of the working tree at ``src`` (as it is now); returns how many
    files were (re)written. Files whose bytes did not change are left alone so that mutmut
    keeps their mutants; written files get a fresh mtime (mutmut regenerates a file's mutants
    when the source is newer than them). ``dst/shared`` links to ``shared`` (default: the
    sibling ``shared/`` of ``src``; tests read ``ROOT.parent / "shared"``, and their ROOT is
    ``dst/mutants`` there)."""
    dst.mkdir(parents=True, exist_ok=True)
    files = tree_files(src)
    keep = set(files)
    written = 0
    for rel in files:
        s, d = src / rel, dst / rel
        data = s.read_bytes()
        if d.is_file() and not d.is_symlink() and d.read_bytes() == data:
            continue
        d.parent.mkdir(parents=True, exist_ok=True)
        if d.is_symlink() or d.exists():
            d.unlink()
        d.write_bytes(data)
        shutil.copymode(s, d)
        written += 1
    for p in sorted(dst.rglob("*"), reverse=True):
        rel = p.relative_to(dst)
        if rel.parts[0] in _OWN:
            continue
        if (p.is_file() or p.is_symlink()) and rel.as_posix() not in keep:
            p.unlink()
        elif p.is_dir() and not any(p.iterdir()):
            p.rmdir()
    shared = shared or src.parent / "shared"
    link = dst / "shared"
    if shared.is_dir() and not link.exists():
        link.symlink_to(shared)
    return written


def patch_work_config(pyproject: Path, node_ids: Sequence[str], debug: bool = False) -> None:
    """Adjust ``[tool.mutmut]`` in the work tree's copy of ``pyproject.toml`` (the
    repository's file is not touched): append ``--deselect ID`` to the test selection (mutmut
    needs the selected tests to pass unmutated: its stats run stops at the first failure), and
    with ``debug`` set ``debug = true`` (mutmut then shows pytest's output)."""
    text = pyproject.read_text()
    if node_ids:
        key = "pytest_add_cli_args_test_selection = ["
        if text.count(key) != 1:
            raise SystemExit(f"--deselect: no single '{key}' line in {pyproject}")
        extra = "".join(f"    {json.dumps('--deselect=' + n)},\n" for n in node_ids)
        text = text.replace(key, key + "\n" + extra.rstrip("\n"), 1)
    if debug:
        if text.count("\n[tool.mutmut]\n") != 1:
            raise SystemExit(f"--debug: no [tool.mutmut] section in {pyproject}")
        text = text.replace("\n[tool.mutmut]\n", "\n[tool.mutmut]\ndebug = true\n", 1)
    pyproject.write_text(text)


#: Lines of mutmut's output that mean "the tests fail without mutants", and what to do.
_ADVICE = {
    "failed to collect stats": "a selected test failed in mutmut's stats run (no mutant active): "
    "rerun with --deselect-failing (or --deselect NODEID); --debug shows pytest's output",
    "Failed to run clean test": "a test that reaches the selected modules failed with no mutant "
    "active; with the plain run passing, usually a time-bounded test on a loaded machine: rerun, "
    "or --deselect it; --debug shows pytest's output",
    "FAILED: Unable to force test failures": "no test failed with every function forced to "
    "raise: the tests do not import the mutated package from mutants/",
}


# -- the cache ------------------------------------------------------------------------------

def _tree_hash(paths: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for base in paths:
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for f in files:
            if "__pycache__" in f.parts or f.suffix == ".pyc":
                continue
            h.update(f.as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def cache_stamp(cfg: dict[str, Any]) -> dict[str, str]:
    """What the tests see besides the mutated code: tests/ and the ``also_copy`` paths (a
    change invalidates cached verdicts and test-to-function stats; mutmut itself tracks the
    source functions and its pytest options, not the test files)."""
    paths = [Path("tests"), *(Path(p) for p in cfg.get("also_copy", []))]
    return {"inputs": _tree_hash(p for p in paths if p.exists())}


def reset_verdicts() -> int:
    """Forget every cached verdict and mutmut's test-to-function stats (the mutants stay);
    returns how many verdicts were dropped."""
    (MUTANTS / "mutmut-stats.json").unlink(missing_ok=True)
    n = 0
    for meta in MUTANTS.rglob("*.py.meta"):
        data = json.loads(meta.read_text())
        codes = data.get("exit_code_by_key", {})
        n += sum(v is not None for v in codes.values())
        data["exit_code_by_key"] = dict.fromkeys(codes)
        data["durations_by_key"] = {}
        data["estimated_durations_by_key"] = {}
        meta.write_text(json.dumps(data, indent=4))
    return n


def prune_mutants(cfg: dict[str, Any]) -> int:
    """Delete what ``mutants/`` holds for source files that no longer exist (mutmut never
    does: a module that became a package would otherwise still be imported, mutated, from its
    stale copy, and its stale ``.meta`` counted). Returns how many files were deleted."""
    n = 0
    for sp in cfg.get("source_paths", []):
        base = MUTANTS / sp
        if not base.is_dir():
            continue
        for f in sorted(base.rglob("*"), reverse=True):
            if f.is_dir():
                if f.name != "__pycache__" and not any(f.iterdir()):
                    f.rmdir()
                continue
            if "__pycache__" in f.parts:
                continue
            rel = f.relative_to(MUTANTS).as_posix()
            for suffix in (".meta", ".spans"):
                if rel.endswith(".py" + suffix):
                    rel = rel[: -len(suffix)]
            if not Path(rel).exists():
                f.unlink()
                n += 1
        for d in sorted((p for p in base.rglob("*") if p.is_dir()), reverse=True):
            if not any(p for p in d.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
                shutil.rmtree(d)
    return n


def sample_names(results: Sequence[Mutant], limit: int, seed: int,
                 min_per_module: int | None = None) -> list[str]:
    """A deterministic random sample of ``limit`` mutant names; with ``min_per_module``,
    stratified: each module in proportion to its mutants, at least that many (or all it has).

    Example:
        >>> ms = [Mutant(f"m{k % 2}.x_f__mutmut_{k}", "f.py", f"m{k % 2}", "f", "killed", 1, 0.1)
        ...       for k in range(40)]
        >>> len(sample_names(ms, 10, 0)), len(sample_names(ms, 10, 0, min_per_module=8))
        (10, 16)
    """
    rng = random.Random(seed)
    if min_per_module is None:
        pool = sorted(m.name for m in results)
        return sorted(rng.sample(pool, min(limit, len(pool))))
    by_mod: dict[str, list[str]] = {}
    for m in results:
        by_mod.setdefault(m.module, []).append(m.name)
    total = sum(len(v) for v in by_mod.values()) or 1
    out: list[str] = []
    for mod in sorted(by_mod):
        pool = sorted(by_mod[mod])
        k = min(len(pool), max(min_per_module, round(limit * len(pool) / total)))
        out += rng.sample(pool, k)
    return sorted(out)


def sample_of(out: Path) -> set[str]:
    """The mutant names of the last ``--limit`` sample (``out/sample.json``)."""
    path = out / "sample.json"
    if not path.exists():
        raise SystemExit(f"mutation: --sample: no {path} (run with --limit first)")
    return set(json.loads(path.read_text())["names"])


def resave_stats() -> None:
    """Write ``mutants/mutmut-stats.json`` again with the fingerprint of the work tree's
    current ``[tool.mutmut]`` (after deselecting tests: mutmut would otherwise see a changed
    test selection and throw the stats away)."""
    code = ("import mutmut.__main__\nfrom mutmut.stats import load_stats, save_stats\n"
            "assert load_stats()\nsave_stats()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"mutation: re-saving the stats failed:\n{r.stderr[-2000:]}")


def prepare_cache(cfg: dict[str, Any], fresh: bool, keep_verdicts: bool = False) -> None:
    """Make ``mutants/`` fit for this run: deleted with ``--fresh``; verdicts and stats
    dropped (the generated mutants kept) when the tests or the ``also_copy`` data changed,
    which mutmut does not notice by itself. The copied tests and data are always removed so
    that mutmut copies them afresh (it only ever adds files)."""
    stamp = cache_stamp(cfg)
    old = json.loads(_STAMP.read_text()) if _STAMP.exists() else None
    if MUTANTS.exists() and fresh:
        print(f"mutation: starting afresh (--fresh): removing {MUTANTS}/", flush=True)
        shutil.rmtree(MUTANTS)
    elif MUTANTS.exists() and (old or {}).get("inputs") != stamp["inputs"]:
        if keep_verdicts:
            (MUTANTS / "mutmut-stats.json").unlink(missing_ok=True)
            print("mutation: the tests or their data changed: the stats are collected again; "
                  "cached verdicts kept (--keep-verdicts)", flush=True)
        else:
            n = reset_verdicts()
            print(f"mutation: the tests or their data changed: dropped {n} cached verdicts and "
                  "the test-to-function stats (mutants kept)", flush=True)
    if MUTANTS.exists():
        gone = prune_mutants(cfg)
        if gone:
            print(f"mutation: removed {gone} files of deleted modules from {MUTANTS}/", flush=True)
    MUTANTS.mkdir(exist_ok=True)
    for p in ["tests", *cfg.get("also_copy", [])]:
        target = MUTANTS / p
        if target.is_dir():
            shutil.rmtree(target)
    _STAMP.write_text(json.dumps(stamp))


_GENERATE = """
import sys, warnings
warnings.simplefilter("ignore")
import mutmut.__main__ as mm
mm.makedirs("mutants", exist_ok=True)
mm.copy_src_dir()
mm.copy_also_copy_files()
mm.setup_source_paths()
print(mm.create_mutants(int(sys.argv[1])))
"""


def generate_mutants(jobs: int) -> float:
    """Write (or refresh) the mutants under ``mutants/`` without running any test, using
    mutmut 3.8's own generation step; returns the seconds it took."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", _GENERATE, str(jobs)], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"mutant generation failed (mutmut {MUTMUT_VERSION} internals changed?):\n"
                         + (r.stdout + r.stderr)[-3000:])
    return time.perf_counter() - t0


# -- results --------------------------------------------------------------------------------

@dataclasses.dataclass
class Mutant:
    """One mutant's verdict, as recorded by mutmut in ``mutants/<file>.meta``."""

    name: str
    file: str
    module: str
    function: str
    status: str
    exit_code: int | None
    seconds: float | None


def function_of(name: str) -> str:
    """``workbench.flatbuf.xǁTableǁu32__mutmut_3`` -> ``Table.u32``."""
    mangled = name.partition("__mutmut_")[0].rpartition(".")[2]
    if mangled.startswith("xǁ"):
        cls, _, meth = mangled[2:].partition("ǁ")
        return f"{cls}.{meth}"
    return mangled[2:] if mangled.startswith("x_") else mangled


def read_results(files: Sequence[Path]) -> list[Mutant]:
    """Every mutant of ``files`` with its verdict (``not checked`` before it ran)."""
    from mutmut.stats import status_by_exit_code

    out = []
    for f in files:
        meta = MUTANTS / (f.as_posix() + ".meta")
        if not meta.exists():
            continue
        data = json.loads(meta.read_text())
        durations = data.get("durations_by_key", {})
        for name, code in data["exit_code_by_key"].items():
            out.append(Mutant(name, f.as_posix(), module_of(f), function_of(name),
                              status_by_exit_code[code], code, durations.get(name)))
    return out


def tally(mutants: Iterable[Mutant]) -> dict[str, int]:
    """Counts per status plus ``total``, ``checked`` (a verdict was reached) and ``score``
    (killed / checked, in %; timeouts are reported apart, not counted as killed)."""
    c = {s: 0 for s in STATUSES}
    for m in mutants:
        c[m.status] = c.get(m.status, 0) + 1
    c["total"] = sum(c[s] for s in c)
    c["checked"] = c["total"] - c["not checked"] - c["skipped"]
    c["score"] = round(100 * c["killed"] / c["checked"], 1) if c["checked"] else 0.0
    return c


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of a share ``k / n``, in % (what a sample of mutants
    says of the whole module).

    Example:
        >>> [round(x, 1) for x in wilson(85, 100)]
        [76.7, 90.7]
    """
    if n == 0:
        return (0.0, 100.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / d
    return (100 * max(0.0, c - h), 100 * min(1.0, c + h))


def report_table(mutants: Sequence[Mutant], files: Sequence[Path],
                 population: dict[str, int] | None = None) -> str:
    """Per-module and total counts as a text table; with ``population`` (module -> all its
    mutants, for a sample) also each module's size and the 95 % interval of its share
    killed, and the total weighted by module size."""
    cols = [("killed", "killed"), ("survived", "surv"), ("timeout", "tmout"),
            ("suspicious", "susp"), ("no tests", "notest"), ("not checked", "unchk")]
    w = max([len("module"), *(len(module_of(f)) for f in files)]) + 2
    head = f"{'module':<{w}}{'total':>7}" + "".join(f"{h:>8}" for _, h in cols) + f"{'% killed':>10}"
    if population is not None:
        head += f"{'of':>8}{'95% interval':>16}"
    lines = [head, "-" * len(head)]
    by_mod: dict[str, list[Mutant]] = {}
    for m in mutants:
        by_mod.setdefault(m.module, []).append(m)
    for f in files:
        mod = module_of(f)
        if mod not in by_mod:
            continue
        c = tally(by_mod[mod])
        line = (f"{mod:<{w}}{c['total']:>7}" + "".join(f"{c[s]:>8}" for s, _ in cols)
                + f"{c['score']:>9.1f}%")
        if population is not None:
            lo, hi = wilson(c["killed"], c["checked"])
            line += f"{population.get(mod, 0):>8}{f'{lo:.0f}-{hi:.0f}%':>16}"
        lines.append(line)
    c = tally(mutants)
    lines.append("-" * len(head))
    lines.append(f"{'total':<{w}}{c['total']:>7}" + "".join(f"{c[s]:>8}" for s, _ in cols)
                 + f"{c['score']:>9.1f}%")
    if population is not None:
        est = weighted_score(mutants, population)
        if est is not None:
            lines.append(f"weighted by each module's size ({sum(population.values())} mutants): "
                         f"{est[0]:.1f}% killed (95% interval {est[1]:.1f}-{est[2]:.1f}%)")
    other = {s: c[s] for s in ("segfault", "skipped", "caught by type check",
                               "check was interrupted by user") if c[s]}
    if other:
        lines.append("also: " + ", ".join(f"{k} {v}" for k, v in other.items()))
    return "\n".join(lines)


def weighted_score(mutants: Sequence[Mutant], population: dict[str, int]
                   ) -> tuple[float, float, float] | None:
    """Share killed of all the modules' mutants, estimated from a stratified sample: each
    module's sample share weighted by its size; the interval from the modules' binomial
    variances (normal approximation). None when nothing was checked."""
    by_mod: dict[str, list[Mutant]] = {}
    for m in mutants:
        by_mod.setdefault(m.module, []).append(m)
    total = sum(population.get(mod, 0) for mod in by_mod)
    if not total:
        return None
    est = var = 0.0
    for mod, ms in by_mod.items():
        c = tally(ms)
        if not c["checked"]:
            continue
        wgt = population.get(mod, 0) / total
        p = c["killed"] / c["checked"]
        est += wgt * p
        var += wgt * wgt * p * (1 - p) / c["checked"]
    h = 1.96 * var ** 0.5
    return 100 * est, 100 * max(0.0, est - h), 100 * min(1.0, est + h)


def diff_of(name: str, file: str) -> str:
    """The mutant's diff against the original function (mutmut's own ``show``)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    try:
        return get_diff_for_mutant(name, path=file)
    except Exception as e:  # a diff is a convenience: never lose the report over one
        return f"(no diff: {type(e).__name__}: {e})"


def write_reports(mutants: Sequence[Mutant], files: Sequence[Path], out: Path,
                  extra: dict[str, Any], include: Sequence[str] = ("survived",)) -> tuple[Path, Path]:
    """Write ``summary.json`` (counts per module and in total, every non-killed mutant with
    its diff) and ``survivors.md`` (the mutants whose status is in ``include``, grouped by
    module and function, with diffs). Returns both paths."""
    out.mkdir(parents=True, exist_ok=True)
    by_mod: dict[str, list[Mutant]] = {}
    for m in mutants:
        by_mod.setdefault(m.module, []).append(m)
    interesting = [m for m in mutants if m.status not in ("killed", "not checked")]
    diffs = {m.name: diff_of(m.name, m.file) for m in interesting}
    summary = {
        **extra,
        "modules": {mod: tally(ms) for mod, ms in by_mod.items()},
        "total": tally(mutants),
        "not_killed": [{"module": m.module, "function": m.function, "name": m.name,
                        "status": m.status, "seconds": m.seconds, "diff": diffs[m.name]}
                       for m in interesting],
    }
    js = out / "summary.json"
    js.write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    md = out / "survivors.md"
    picked = [m for m in interesting if m.status in include]
    lines = [f"# Surviving mutants ({len(picked)})", "",
             f"Statuses listed: {', '.join(include)}. Made by `bench/mutation.py` "
             f"({extra.get('when', '')}); triage each: add a test that kills it, or explain in "
             "docs/mutation.md why it is equivalent.", ""]
    for mod in sorted({m.module for m in picked}):
        lines.append(f"## {mod}")
        lines.append("")
        funcs: dict[str, list[Mutant]] = {}
        for m in picked:
            if m.module == mod:
                funcs.setdefault(m.function, []).append(m)
        for fn in sorted(funcs):
            lines.append(f"### `{fn}` ({len(funcs[fn])})")
            lines.append("")
            for m in funcs[fn]:
                lines.append(f"`{m.name}` — {m.status}")
                lines.append("")
                lines.append("```diff")
                lines.append(diffs[m.name])
                lines.append("```")
                lines.append("")
    md.write_text("\n".join(lines))
    return js, md


# -- estimates ------------------------------------------------------------------------------

def stats_estimate(mutants: Sequence[Mutant]) -> dict[str, float] | None:
    """From mutmut's stats (``mutants/mutmut-stats.json``, made by any earlier run): the
    worst-case test seconds of all ``mutants`` (every test that reaches the function runs to
    the end, as for a survivor), and how many have no test at all. None without stats."""
    path = MUTANTS / "mutmut-stats.json"
    if not path.exists():
        return None
    stats = json.loads(path.read_text())
    dur = stats["duration_by_test"]
    tests = stats["tests_by_mangled_function_name"]
    worst, none = 0.0, 0
    for m in mutants:
        ts = tests.get(m.name.partition("__mutmut_")[0], [])
        if not ts:
            none += 1
        worst += sum(dur.get(t, 0.0) for t in ts)
    return {"worst_case_test_seconds": round(worst, 1), "no_tests": none}


def full_run_estimate(measured: Sequence[Mutant], all_files: Sequence[Path],
                      wall: float) -> dict[str, float] | None:
    """Extrapolate this run's wall time to every mutated module: by mutant count, and by the
    worst-case test time of the mutants (mutmut's stats: a mutant costs about the tests that
    reach its function). None without stats or without a tested mutant."""
    done = [m for m in measured if m.status not in ("not checked", "skipped")]
    everything = read_results(all_files)
    est_done, est_all = stats_estimate(done), stats_estimate(everything)
    if not done or not everything or not est_done or not est_all:
        return None
    by_count = wall * len(everything) / len(done)
    w_done = est_done["worst_case_test_seconds"]
    by_time = wall * est_all["worst_case_test_seconds"] / w_done if w_done else by_count
    return {"mutants": len(everything), "modules": len({m.module for m in everything}),
            "hours_by_count": round(by_count / 3600, 1), "hours_by_test_time": round(by_time / 3600, 1),
            "worst_case_test_hours_all": round(est_all["worst_case_test_seconds"] / 3600, 1),
            "no_tests_all": est_all["no_tests"]}


# -- main -----------------------------------------------------------------------------------

def run_env() -> dict[str, str]:
    """The environment of mutmut and of the tests it runs."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(var, "1")  # one thread per mutant process: the cores are the workers
    env.pop("WORKBENCH_GALLERY", None)
    # Mutated modules are several times larger than the originals: without cached bytecode
    # (under mutants/, git-ignored) every `python -m workbench` a test starts recompiles them
    # (~10 s here), which fails test_import's time limit and slows the CLI tests.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONUNBUFFERED"] = "1"  # mutmut's progress line, live in the log
    # Every call of a mutated function goes through a trampoline (and two workers share the
    # cores): the tests' hang guards on hostile inputs get this much more time.
    env.setdefault("WORKBENCH_TEST_TIME_SCALE", "10")
    # Each mutant runs its tests in a new process: keep the layout variants built once (a
    # cache keyed by what they are made from, tests/conftest.py) and let the fork server
    # import ExecuTorch's serializer once, before it forks them.
    env.setdefault("WORKBENCH_TEST_VARIANT_CACHE", str(OUT / "variant-cache"))
    env.setdefault("WORKBENCH_TEST_PRELOAD", "1")
    return env


def find_failing(cfg: dict[str, Any], log: Path) -> list[str]:
    """Node ids of the selected tests that fail in ``mutants/`` with no mutant active (what
    mutmut's stats and clean runs need to pass): the selection run once, plainly."""
    sel = list(cfg.get("pytest_add_cli_args_test_selection", []))
    cmd = [sys.executable, "-m", "pytest", "-q", "--rootdir=.", "--tb=no", "-rfE",
           *sel, *cfg.get("pytest_add_cli_args", [])]
    env = run_env()
    env["MUTANT_UNDER_TEST"] = ""
    env["PYTHONPATH"] = os.pathsep.join([str(Path.cwd() / MUTANTS), *filter(None, [env.get("PYTHONPATH")])])
    print("mutation: running the selected tests once without mutants, to leave out those that "
          "fail anyway", flush=True)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=MUTANTS, env=env, capture_output=True, text=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(r.stdout + r.stderr)
    failing = []
    for line in r.stdout.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            failing.append(line.split(" ", 1)[1].split(" - ", 1)[0].strip())
    if r.returncode not in (0, 1) or (r.returncode == 1 and not failing):
        raise SystemExit(f"mutation: the plain test run exited with {r.returncode}; see {log}")
    print(f"mutation: {len(failing)} failing without mutants ({time.perf_counter() - t0:.0f} s)"
          + "".join(f"\n  --deselect {f}" for f in failing), flush=True)
    return failing


#: mutmut's stats run, made in a fresh process instead of mutmut's forked child (see
#: :func:`collect_stats`). Run in the work tree; argv: the JSON file for the failing tests.
_STATS = """
import json, os, sys, time
import _pytest.nodes
if not hasattr(_pytest.nodes.Node, "_nodeid"):
    _pytest.nodes.Node._nodeid = property(lambda self: self.nodeid)
import mutmut.__main__  # noqa: F401  (sets mutmut's multiprocessing start method, as its CLI does)
from mutmut.configuration import config
from mutmut.state import state
from mutmut.stats import save_stats
from mutmut.utils.file_utils import setup_source_paths
from mutmut.utils.format_utils import strip_prefix
import pytest
import mutmut.core
import mutmut.mutation.trampoline


class CallStack:  # mutmut's MutmutCallStack on a plain list, not a ContextVar (collect_stats)
    _v = [(None, 0)]

    @classmethod
    def get(cls):
        return cls._v[-1]

    @classmethod
    def set(cls, value):
        cls._v.append(value)
        return len(cls._v) - 1

    @classmethod
    def reset(cls, token):
        del cls._v[max(token, 1):]


mutmut.core.MutmutCallStack = CallStack
mutmut.mutation.trampoline.MutmutCallStack = CallStack

cfg = config()                       # read here, in the work tree, as mutmut's CLI reads it
setup_source_paths()                 # the mutated package first on sys.path
os.environ["MUTANT_UNDER_TEST"] = "stats"
os.environ["PY_IGNORE_IMPORTMISMATCH"] = "1"
os.environ["MUTMUT_DEPENDENCY_DEPTH"] = str(cfg.dependency_tracking_depth)
failed = []

class Stats:  # what mutmut's own StatsCollector records
    def pytest_runtest_logstart(self, nodeid, location):
        state().duration_by_test[nodeid] = 0
    def pytest_runtest_teardown(self, item, nextitem):
        for function in state()._stats:
            state().tests_by_mangled_function_name[function].add(
                strip_prefix(item.nodeid, prefix="mutants/"))
        state()._stats.clear()
    def pytest_runtest_makereport(self, item, call):
        if call.when == "call":
            state().duration_by_test[item.nodeid] += call.duration
    def pytest_runtest_logreport(self, report):
        if report.failed and report.nodeid not in failed:
            failed.append(report.nodeid)

t0 = time.process_time()
os.chdir("mutants")
rc = pytest.main(["--rootdir=.", "--tb=short", "-q", "-p", "no:randomly", "-p", "no:random-order",
                  *cfg.pytest_add_cli_args_test_selection, *cfg.pytest_add_cli_args],
                 plugins=[Stats()])
os.chdir("..")
state().stats_time = time.process_time() - t0
for nodeid in failed:  # mutmut needs passing tests: these are deselected by the caller
    state().duration_by_test.pop(nodeid, None)
    for tests in state().tests_by_mangled_function_name.values():
        tests.discard(nodeid)
save_stats()
json.dump({"exit": int(rc), "failed": failed}, open(sys.argv[1], "w"))
"""

#: Starts mutmut's command line. mutmut 3.8's stats collector reads ``item._nodeid``, which
#: pytest 9 no longer has (``AttributeError`` in the stats run: "failed to collect stats"):
#: give pytest's nodes that alias first. mutmut runs pytest in its own process (and forks
#: from it), so the alias reaches every run.
_LAUNCH = """
import sys
import _pytest.nodes
if not hasattr(_pytest.nodes.Node, "_nodeid"):
    _pytest.nodes.Node._nodeid = property(lambda self: self.nodeid)
import mutmut.__main__
sys.argv[0] = "mutmut"
mutmut.__main__.cli()
"""


def collect_stats(log: Path) -> list[str]:
    """mutmut's stats run (which tests reach which mutated function, and how long each
    test takes), made here in a fresh Python process, written where mutmut looks for it
    (``mutants/mutmut-stats.json``); returns the node ids of tests that failed (with no
    mutant active), which are left out of the stats.

    Why not mutmut's own: in the stats run every call of a mutated function pushes and pops
    mutmut's call-stack ``ContextVar`` (``MutmutCallStack``), and on this CPython (3.11.7)
    that run dies with ``SIGSEGV`` in ``test_hostile.py`` (gdb: ``tuplehash`` recursing
    through a tuple that contains itself, i.e. a corrupted context value; faulthandler:
    ``record_trampoline_hit`` or ``ContextVar.reset``). Reproduced with a bare ``os.fork()``
    before ``pytest.main`` and in a plain process; gone when the ContextVar is replaced by
    a list-based stack, which this run does (the stack only names callers for mutmut's
    dependency tracking). Mutant runs never touch it, so mutmut runs those as usual, loading
    these stats instead of collecting its own.
    """
    out = log.with_suffix(".json")
    print("mutation: stats run (every selected test once, in a fresh process; ~15 min here)",
          flush=True)
    t0 = time.perf_counter()
    env = run_env()
    with open(log, "w") as f:
        r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _STATS, str(out)],
                           env=env, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode or not out.exists():
        raise SystemExit(f"mutation: the stats run exited with {r.returncode}; see {log}")
    res = json.loads(out.read_text())
    print(f"mutation: stats collected in {time.perf_counter() - t0:.0f} s; "
          f"{len(res['failed'])} test(s) failed without mutants"
          + "".join(f"\n  --deselect {f}" for f in res["failed"]), flush=True)
    return res["failed"]


def run_mutmut(names: Sequence[str], jobs: int, log: Path) -> tuple[int, float | None]:
    """``mutmut run --max-children JOBS NAMES...`` in the work tree, its output shown and kept
    in ``log``; returns mutmut's exit status and the seconds of its mutation phase (after the
    generation, stats, clean and forced-fail runs; None if it never got there)."""
    cmd = [sys.executable, "-c", _LAUNCH, "run", "--max-children", str(jobs), *names]
    env = run_env()
    log.parent.mkdir(parents=True, exist_ok=True)
    shown = "mutmut " + " ".join(cmd[3:6]) + (f" ... ({len(names)} names)" if len(names) > 3
                                              else " " + " ".join(names))
    print(f"mutation: {shown}", flush=True)
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        last = 0.0
        phase: float | None = None
        for raw in iter(lambda: proc.stdout.read1(4096), b""):  # type: ignore[union-attr]
            text = raw.decode(errors="replace")
            f.write(text)
            if phase is None and "Running mutation testing" in text:
                phase = time.perf_counter()
            # mutmut redraws one status line with \r: show it every few seconds only
            now = time.monotonic()
            if "\n" in text.replace("\r", "") or now - last > 30:
                sys.stdout.write(text.replace("\r", "\n").split("\n")[-1][:160] + "\n"
                                 if now - last > 30 else text.replace("\r", ""))
                sys.stdout.flush()
                last = now
        rc = proc.wait()
        return rc, None if phase is None else time.perf_counter() - phase


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modules", help="comma-separated files or folders, relative to workbench/ "
                    "or the repository (e.g. validate.py,source.py or formats/pte/); default: all")
    ap.add_argument("--limit", type=int, help="test only this many mutants of the selected "
                    "modules (a deterministic random sample, see --seed)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the --limit sample (default 0)")
    ap.add_argument("--stratify", action="store_true",
                    help="with --limit: sample every module in proportion to its mutants (at "
                    "least --min-per-module each), so the report estimates each module")
    ap.add_argument("--min-per-module", type=int, default=10,
                    help="with --stratify: at least this many mutants of every module (default 10)")
    ap.add_argument("--sample", action="store_true",
                    help="with --report (or --retest): only the mutants of the last --limit "
                    "sample (build/mutation/sample.json), reported as a sample")
    ap.add_argument("--retest", metavar="STATUSES",
                    help="re-test only the mutants of the selected modules whose last verdict is "
                    "one of these (comma-separated, e.g. survived,timeout): after adding tests")
    ap.add_argument("--keep-verdicts", action="store_true",
                    help="keep cached verdicts when the tests changed (the stats are still "
                    "collected again); with --retest survived: only survivors are re-run")
    ap.add_argument("--jobs", "--max-children", type=int, default=2, dest="jobs",
                    help="mutants tested at once (mutmut --max-children; default 2)")
    ap.add_argument("--fresh", action="store_true", help="delete mutants/ first")
    ap.add_argument("--rev", help="mutate commit REV of this repository (git archive) instead of "
                    "the working tree")
    ap.add_argument("--deselect", action="append", default=[], metavar="NODEID",
                    help="leave this test out (repeatable): for tests that fail without any "
                    "mutant, which mutmut cannot work with")
    ap.add_argument("--debug", action="store_true",
                    help="mutmut's debug mode (shows pytest's output; slow and verbose)")
    ap.add_argument("--deselect-failing", action="store_true",
                    help="first run the selected tests once without mutants and leave out the "
                    "ones that fail (costs one plain run of the selection)")
    ap.add_argument("--count", action="store_true",
                    help="only generate the mutants and count them per module (no tests)")
    ap.add_argument("--report", action="store_true", help="only report the results in mutants/")
    ap.add_argument("--out", type=Path, default=OUT, help=f"report folder (default {OUT})")
    ap.add_argument("--list", default="survived",
                    help="statuses listed in survivors.md (comma-separated; default survived; "
                         "e.g. survived,timeout,suspicious,no tests)")
    args = ap.parse_args(argv)
    args.out = args.out.resolve()  # the script works in WORK from here on

    version = ensure_mutmut()
    if not args.report:
        if args.rev:
            with tempfile.TemporaryDirectory(prefix="mutation-rev-") as tmp:
                n = sync_tree(export_revision(args.rev, Path(tmp)), WORK, ROOT.parent / "shared")
        else:
            n = sync_tree(ROOT, WORK)
        print(f"mutation: working in {WORK} ({n} files updated from {ROOT}"
              f"{' at ' + args.rev if args.rev else ''})", flush=True)
    if not WORK.is_dir():
        raise SystemExit(f"mutation: no {WORK} yet: run without --report first")
    os.chdir(WORK)
    cfg = mutmut_config(WORK)
    files = select_files(mutated_files(cfg, WORK), args.modules)
    include = [s.strip() for s in args.list.split(",") if s.strip()]
    extra: dict[str, Any] = {"mutmut": version, "modules_selected": [f.as_posix() for f in files],
                             "when": time.strftime("%Y-%m-%d %H:%M"), "jobs": args.jobs,
                             "rev": args.rev}

    if not args.report:
        prepare_cache(cfg, args.fresh, keep_verdicts=args.keep_verdicts)
        deselect = list(args.deselect)
        if args.deselect_failing:
            generate_mutants(args.jobs)
            deselect += [f for f in find_failing(cfg, args.out / "plain-run.log") if f not in deselect]
        patch_work_config(WORK / "pyproject.toml", deselect, args.debug)
        extra["deselected"] = deselect
        if not args.count and not (MUTANTS / "mutmut-stats.json").exists():
            generate_mutants(args.jobs)
            failed = [f for f in collect_stats(args.out / "stats-run.log") if f not in deselect]
            if failed:  # mutmut needs the selection to pass: leave them out, stats kept
                deselect += failed
                patch_work_config(WORK / "pyproject.toml", failed, args.debug)
                resave_stats()
                extra["deselected"] = deselect
    if args.count:
        secs = generate_mutants(args.jobs)
        mutants = read_results(files)
        print(f"generated in {secs:.0f} s")
        print(report_table(mutants, files))
        est = stats_estimate(mutants)
        if est:
            print(f"stats from an earlier run: worst-case test time {est['worst_case_test_seconds']:.0f} s "
                  f"over {len(mutants)} mutants ({est['no_tests']} reach no selected test)")
        return 0

    wall = None
    if not args.report:
        names: list[str] = []
        if args.retest:
            wanted = {x.strip() for x in args.retest.split(",") if x.strip()}
            names = sorted(m.name for m in read_results(files) if m.status in wanted
                           and (not args.sample or m.name in sample_of(args.out)))
            print(f"mutation: re-testing {len(names)} mutants whose verdict is "
                  f"{' or '.join(sorted(wanted))}", flush=True)
            if not names:
                print(report_table(read_results(files), files))
                return 0
        elif args.limit is not None:
            generate_mutants(args.jobs)
            results = read_results(files)
            names = sample_names(results, args.limit, args.seed,
                                 args.min_per_module if args.stratify else None)
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "sample.json").write_text(json.dumps(
                {"limit": args.limit, "seed": args.seed, "stratify": args.stratify,
                 "min_per_module": args.min_per_module, "names": names}, indent=1))
        elif args.modules:
            names = [module_glob(f) for f in files]
        t0 = time.perf_counter()
        rc, phase = run_mutmut(names, args.jobs, args.out / "mutmut.log")
        wall = time.perf_counter() - t0
        extra["wall_seconds"] = round(wall, 1)
        extra["mutation_phase_seconds"] = None if phase is None else round(phase, 1)
        extra["mutmut_exit"] = rc
        if rc:
            print(f"mutation: mutmut exited with {rc}; its output is in {args.out / 'mutmut.log'}",
                  file=sys.stderr)
            text = (args.out / "mutmut.log").read_text(errors="replace")
            for needle, advice in _ADVICE.items():
                if needle in text:
                    print(f"mutation: {advice}", file=sys.stderr)
        if names and (args.limit is not None or args.retest):
            picked = set(names)
            mutants = [m for m in read_results(files) if m.name in picked]
        else:
            mutants = read_results(files)
    else:
        mutants = read_results(files)
    if args.sample:
        picked = sample_of(args.out)
        mutants = [m for m in read_results(files) if m.name in picked]
    if not mutants:
        print("mutation: no results under mutants/ for the selected modules (run without --report)")
        return 1
    print()
    population = None
    if args.limit is not None or args.retest or args.sample:  # a sample: what it tells of all
        population = {}
        for m in read_results(files):
            population[m.module] = population.get(m.module, 0) + 1
        extra["population"] = population
        est = weighted_score(mutants, population)
        if est is not None:
            extra["weighted_score"] = [round(x, 1) for x in est]
    print(report_table(mutants, files, population))
    if wall is not None:
        tested = sum(1 for m in mutants if m.status not in ("not checked", "no tests", "skipped"))
        mphase = extra["mutation_phase_seconds"]
        print(f"wall time {wall:.0f} s, of which {mphase or 0:.0f} s testing {tested} mutants with "
              f"{args.jobs} worker(s)" + (f" ({(mphase or wall) / tested:.1f} s each)" if tested else "")
              + "; the rest: generation, stats, clean and forced-fail runs")
        full = full_run_estimate(mutants, mutated_files(cfg, WORK), mphase or wall)
        if full:
            extra["full_run_estimate"] = full
            print(f"full run estimate: {full['mutants']} mutants in {full['modules']} modules; "
                  f"{full['hours_by_count']:.1f} h scaled by mutant count, "
                  f"{full['hours_by_test_time']:.1f} h scaled by the tests each mutant reaches "
                  f"(same --jobs, same machine load; plus one stats run; rough below ~100 mutants)")
    est = stats_estimate(mutants)
    if est:
        extra["estimate"] = est
    js, md = write_reports(mutants, files, args.out, extra, include)
    print(f"wrote {js} and {md}")
    return 1 if extra.get("mutmut_exit") else 0


if __name__ == "__main__":
    sys.exit(main())
