"""Seeded bugs: does the test suite catch seven deliberate, realistic bugs?

Each bug is one or more small patches ``(file, exact old snippet, replacement)`` applied to a
*copy* of the working tree in a temporary folder (the repository's own files are never
touched). The test suite then runs in that copy, with the package imported from the copy
(``PYTHONPATH`` points at it and a pytest plugin refuses to run when ``workbench.__file__``
resolves anywhere else), and the script reports per bug whether it was caught (at least one
test failed that did not fail without the bug) and which tests failed.

The tree is frozen once at the start (a snapshot of the working tree, uncommitted and
untracked-but-not-ignored files included, or of a commit with ``--rev``), so the baseline and
every bug run the same tests even while the working tree changes. A snippet must occur
exactly once in its file: when the code it targets moved or changed, the
script stops with an error naming the bug, the file and the snippet (re-target the patch, do
not let the bug silently disappear). ``--check`` verifies every snippet without running tests.

By default an unpatched copy runs first (the *baseline*): tests that fail there are not
counted for any bug (``--no-baseline`` skips it). The browser, notebook and widget tests are
never run (``tests/test_browser.py``, ``tests/test_notebooks.py``, ``tests/test_widgets.py``).

Usage::

    .venv/bin/python bench/seeded_bugs.py                    # baseline + all seven bugs
    .venv/bin/python bench/seeded_bugs.py --only 4,5         # two bugs
    .venv/bin/python bench/seeded_bugs.py --only 7 --pytest-args "tests/test_pt2.py -k zip"
    .venv/bin/python bench/seeded_bugs.py --jobs 2 --json build/seeded_bugs.json
    .venv/bin/python bench/seeded_bugs.py --only 5 --rev 113972a   # the suite of an older commit
    .venv/bin/python bench/seeded_bugs.py --check            # only verify that every patch applies
    .venv/bin/python bench/seeded_bugs.py --show 1           # print bug 1's patches as a diff

Exit status: 0 when every run completed (caught or not; ``--fail-uncaught`` makes an uncaught
bug exit 1), 2 when a patch no longer applies or a run could not complete.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import difflib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: Test files never run here (they need a browser, execute notebooks or drive widgets).
EXCLUDED_TESTS = ("tests/test_browser.py", "tests/test_notebooks.py", "tests/test_widgets.py")

#: Copied when the tree is not a git checkout (otherwise: tracked + untracked, not ignored).
_COPY_IGNORE = (".git", ".venv", "build", "mutants", "__pycache__", "*.pyc", ".pytest_cache",
                ".ruff_cache", ".hypothesis", ".ipynb_checkpoints", "*.egg-info")


@dataclasses.dataclass(frozen=True)
class Patch:
    """Replace the one occurrence of ``old`` in ``file`` (relative to the tree) by ``new``."""

    file: str
    old: str
    new: str


@dataclasses.dataclass(frozen=True)
class Bug:
    """A seeded bug: a number, a short name, what it breaks, and its patches (all applied)."""

    number: int
    name: str
    description: str
    patches: tuple[Patch, ...]


BUGS: tuple[Bug, ...] = (
    Bug(1, "constant-offset-base",
        "constant tensors are placed from the segment-data base instead of the constant "
        "segment's own offset (fast numpy path and scalar path)",
        # Both paths (Tensors.values_slow and the bulk numpy placement in pte/tensors.py) add
        # Subsegment.base, made once in pte/program.py: wrong there, wrong on both paths.
        (Patch("workbench/formats/pte/program.py",
               '        self.constant_segment = self._subsegment(cs, "Program.constant_segment") '
               'if cs else None\n',
               '        self.constant_segment = self._subsegment(cs, "Program.constant_segment") '
               'if cs else None\n'
               "        if self.constant_segment is not None:  # seeded bug 1\n"
               "            self.constant_segment = self.constant_segment._replace(\n"
               "                base=self.segment_base or 0)\n"),)),
    Bug(2, "no-trailing-row",
        "bytes after the last structure get no segment row (segments coverage of .pte/.ptd)",
        (Patch("workbench/formats/_layout.py",
               "    has_tail = last < end\n",
               "    has_tail = False\n"),)),
    Bug(3, "sibling-ptd-order",
        "the sibling .ptd named like the program is no longer tried first",
        (Patch("workbench/formats/pte/__init__.py",
               "    found.sort(key=lambda n: n[:-4] != stem)\n",
               ""),)),
    Bug(4, "zip-local-extra",
        "a zip member's data offset ignores the local header's extra field",
        (Patch("workbench/formats/_zip.py",
               "data = glho + LOCAL_SIZE + n_len + x_len\n",
               "data = glho + LOCAL_SIZE + n_len\n"),)),
    Bug(5, "alignment-check-inverted",
        "validate() warns about aligned tensor data instead of misaligned data",
        (Patch("workbench/validate.py",
               'r.storage in ("segment", "mutable", "inline") and int(r.offset) % TENSOR_ALIGNMENT:',
               'r.storage in ("segment", "mutable", "inline") and not int(r.offset) % TENSOR_ALIGNMENT:'),)),
    Bug(6, "same-bytes-always",
        "compare: same_bytes is True whenever both sides are hashed",
        (Patch("workbench/comparison.py",
               '"same_bytes": (da == db) if da is not None and db is not None else None,',
               '"same_bytes": True if da is not None and db is not None else None,'),)),
    Bug(7, "zip-descriptor-signature",
        "a zip data descriptor's size ignores its optional 4-byte signature",
        (Patch("workbench/formats/_zip.py",
               " + 4 * has_sig\n",
               " + 0 * has_sig\n"),)),
)

BUG_BY_NUMBER = {b.number: b for b in BUGS}


class PatchError(RuntimeError):
    """A patch's snippet is missing or ambiguous: the code moved, re-target the bug."""


@dataclasses.dataclass
class RunResult:
    """One pytest run in a copy: the bug (None: baseline), its outcome and failing tests."""

    bug: int | None
    returncode: int
    seconds: float
    failed: list[str]
    collected: int
    workbench_file: str
    log: str
    error: str | None = None


# -- patches --------------------------------------------------------------------------------

def patched(text: str, patch: Patch, bug: Bug) -> str:
    """``text`` with ``patch`` applied; raises :class:`PatchError` unless the snippet occurs
    exactly once."""
    count = text.count(patch.old)
    if count != 1:
        what = "not found (the code moved or changed)" if count == 0 else f"found {count} times"
        raise PatchError(f"bug {bug.number} ({bug.name}): snippet {what} in {patch.file}:\n"
                         + textwrap.indent(patch.old.rstrip("\n"), "    | ")
                         + "\nRe-target the patch in bench/seeded_bugs.py (BUGS).")
    return text.replace(patch.old, patch.new, 1)


def apply_patch(root: Path, patch: Patch, bug: Bug) -> None:
    """Apply ``patch`` to the file under ``root`` (see :func:`patched`)."""
    path = root / patch.file
    if not path.is_file():
        raise PatchError(f"bug {bug.number} ({bug.name}): {patch.file} does not exist")
    path.write_text(patched(path.read_text(), patch, bug))


def apply_bug(root: Path, bug: Bug) -> None:
    """Apply every patch of ``bug`` to the tree at ``root`` (fails loudly, see apply_patch)."""
    for p in bug.patches:
        apply_patch(root, p, bug)


def bug_diff(root: Path, bug: Bug) -> str:
    """The unified diff ``bug`` makes to the tree at ``root`` (nothing is written)."""
    out = []
    texts: dict[str, str] = {}
    for p in bug.patches:
        if not (root / p.file).is_file():
            raise PatchError(f"bug {bug.number} ({bug.name}): {p.file} does not exist")
        texts.setdefault(p.file, (root / p.file).read_text())
    for file, before in texts.items():
        after = before
        for p in bug.patches:
            if p.file == file:
                after = patched(after, p, bug)
        out.extend(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        f"a/{file}", f"b/{file}", n=2))
    return "".join(out)


def check_bugs(root: Path, bugs: Iterable[Bug]) -> list[str]:
    """Problems with the patches of ``bugs`` against the tree at ``root`` (empty: all apply)."""
    problems = []
    for bug in bugs:
        try:
            bug_diff(root, bug)
        except (PatchError, OSError) as e:
            problems.append(str(e))
    return problems


# -- the copy -------------------------------------------------------------------------------

def tree_files(src: Path) -> list[str] | None:
    """Files of the working tree (tracked and untracked, not ignored) relative to ``src``,
    or None when ``src`` is not a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=src, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return sorted({f for f in out.decode().split("\0") if f})


def copy_tree(src: Path, dst: Path) -> None:
    """Copy the working tree at ``src`` (as it is now, uncommitted edits included) to ``dst``."""
    files = tree_files(src) if (src / ".git").exists() else None
    if files is None:
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*_COPY_IGNORE), symlinks=True)
        return
    dst.mkdir(parents=True, exist_ok=True)
    for rel in files:
        s = src / rel
        if not s.is_file():  # deleted in the working tree but still tracked, or a submodule
            continue
        d = dst / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(s, d)


def export_revision(src: Path, rev: str, dst: Path) -> None:
    """Write the files of commit ``rev`` of the repository at ``src`` to ``dst`` (``git
    archive``; the working tree is not touched)."""
    dst.mkdir(parents=True, exist_ok=True)
    try:
        tar = subprocess.run(["git", "archive", "--format=tar", rev], cwd=src, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        msg = e.stderr.decode(errors="replace") if isinstance(e, subprocess.CalledProcessError) else e
        raise SystemExit(f"--rev {rev}: git archive failed: {msg}") from None
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        tf.extractall(dst, filter="data")


def snapshot(src: Path, dst: Path, rev: str | None = None) -> Path:
    """Freeze the tree the runs start from (the working tree now, or commit ``rev``) in
    ``dst``, so that the baseline and every bug see the same tests even while the working
    tree changes."""
    if rev:
        export_revision(src, rev, dst)
    else:
        copy_tree(src, dst)
    return dst


# -- running the suite ----------------------------------------------------------------------

#: A pytest plugin loaded into every run: refuses to run unless ``workbench`` is imported from
#: the copy, and records the id of every failing test (and collection error) as JSON.
_GUARD_PLUGIN = '''
import json, os, pathlib
import pytest

_failed = []
_collected = [0]


def pytest_configure(config):
    import workbench
    root = pathlib.Path(os.environ["SEEDED_BUGS_ROOT"]).resolve()
    where = pathlib.Path(workbench.__file__).resolve()
    pathlib.Path(os.environ["SEEDED_BUGS_WHERE"]).write_text(str(where))
    if root not in where.parents:
        raise pytest.UsageError(f"workbench imported from {where}, not from the copy {root}")


def pytest_collectreport(report):
    if report.failed:
        _failed.append(report.nodeid or "<collection>")


def pytest_collection_finish(session):
    _collected[0] = len(session.items)


def pytest_runtest_logreport(report):
    if report.failed and report.nodeid not in _failed:
        _failed.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    pathlib.Path(os.environ["SEEDED_BUGS_OUT"]).write_text(
        json.dumps({"failed": _failed, "collected": _collected[0]}))
'''


def pytest_command(pytest_args: Sequence[str], test_timeout: float) -> list[str]:
    """The pytest command line run in each copy."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_seeded_bugs_guard",
           "--tb=line", "-o", "addopts="]
    cmd += [f"--ignore={t}" for t in EXCLUDED_TESTS]
    if test_timeout > 0:
        cmd.append(f"--timeout={test_timeout:g}")
    return cmd + list(pytest_args)


def run_one(bug: Bug | None, src: Path, workdir: Path, pytest_args: Sequence[str],
            test_timeout: float, run_timeout: float, keep: bool = False,
            shared: Path | None = None) -> RunResult:
    """Copy the snapshot ``src`` to a fresh folder under ``workdir``, apply ``bug`` (None:
    baseline), run the suite there and return the outcome. ``shared``: the folder the tests
    find next to the repository (``ROOT.parent / "shared"``, e.g. the real-file corpus),
    linked next to the copy."""
    label = "baseline" if bug is None else f"bug{bug.number}"
    base = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=workdir))
    if shared is not None and shared.is_dir():
        (base / "shared").symlink_to(shared)
    copy = base / "tree"
    guard = base / "guard"
    guard.mkdir()
    (guard / "_seeded_bugs_guard.py").write_text(_GUARD_PLUGIN)
    out, where = base / "failed.json", base / "workbench_file.txt"
    t0 = time.perf_counter()
    try:
        shutil.copytree(src, copy, symlinks=True)
        if bug is not None:
            apply_bug(copy, bug)
        env = dict(os.environ)
        env.pop("WORKBENCH_GALLERY", None)  # the copy's docs/gallery is not the point here
        env["PYTHONPATH"] = os.pathsep.join([str(copy), str(guard)]
                                            + [p for p in [env.get("PYTHONPATH")] if p])
        env["SEEDED_BUGS_ROOT"] = str(copy)
        env["SEEDED_BUGS_OUT"] = str(out)
        env["SEEDED_BUGS_WHERE"] = str(where)
        env.setdefault("OMP_NUM_THREADS", "1")
        cmd = pytest_command(pytest_args, test_timeout)
        try:
            proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True,
                                  timeout=run_timeout if run_timeout > 0 else None)
            rc, log = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as e:
            rc, log = -1, f"run timed out after {run_timeout:g} s\n{e.stdout or ''}"
        seconds = time.perf_counter() - t0
        wb_file = where.read_text() if where.exists() else ""
        error = None
        failed: list[str] = []
        collected = 0
        if out.exists():
            data = json.loads(out.read_text())
            failed, collected = data["failed"], data["collected"]
        if rc == -1:
            error = f"timed out after {run_timeout:g} s"
        elif rc not in (0, 1) or not out.exists():
            # 2: interrupted / collection errors, 3: internal error, 4: usage (e.g. the guard),
            # 5: no tests collected
            error = f"pytest exited with {rc}"
        return RunResult(None if bug is None else bug.number, rc, seconds, failed, collected,
                         wb_file, log, error)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


# -- report ---------------------------------------------------------------------------------

def summarize(bugs: Sequence[Bug], results: dict[int, RunResult],
              baseline: RunResult | None, show: int = 3) -> tuple[str, list[dict[str, Any]]]:
    """The report table (text) and one JSON-ready row per bug."""
    known = set(baseline.failed) if baseline is not None else set()
    rows = []
    for bug in bugs:
        r = results[bug.number]
        new = [t for t in r.failed if t not in known]
        caught = bool(new)  # a collection error caused by the bug counts too
        rows.append({"bug": bug.number, "name": bug.name, "description": bug.description,
                     "caught": caught, "n_failing": len(new), "failing": new,
                     "also_failing_in_baseline": [t for t in r.failed if t in known],
                     "collected": r.collected, "returncode": r.returncode, "error": r.error,
                     "seconds": round(r.seconds, 1)})
    lines = []
    header = f"{'bug':<28} {'caught':<7} {'#fail':>5}  first failing tests"
    lines.append(header)
    lines.append("-" * len(header))
    for row in rows:
        status = "yes" if row["caught"] else ("ERROR" if row["error"] else "no")
        first = ", ".join(_short(t) for t in row["failing"][:show])
        if len(row["failing"]) > show:
            first += f", ... (+{len(row['failing']) - show})"
        if row["error"]:
            first = f"[{row['error']}] {first}"
        lines.append(f"{str(row['bug']) + ' ' + row['name']:<28} {status:<7} {row['n_failing']:>5}  {first}")
    n_caught = sum(r["caught"] for r in rows)
    lines.append("")
    lines.append(f"caught {n_caught} of {len(rows)} seeded bugs")
    if baseline is not None:
        known_list = ", ".join(_short(t) for t in baseline.failed[:show])
        lines.append(f"baseline: {baseline.collected} tests, {len(baseline.failed)} failing without "
                     f"any bug ({baseline.seconds:.0f} s)" + (f": {known_list}" if known_list else ""))
    return "\n".join(lines), rows


def _short(nodeid: str) -> str:
    """``tests/test_pt2.py::test_x[a]`` -> ``test_pt2::test_x[a]``."""
    path, sep, rest = nodeid.partition("::")
    return Path(path).stem + sep + rest


# -- main -----------------------------------------------------------------------------------

def parse_only(spec: str | None) -> list[Bug]:
    """The bugs selected by ``--only`` (``"3,5"``; None: all)."""
    if not spec:
        return list(BUGS)
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) not in BUG_BY_NUMBER:
            raise SystemExit(f"--only: unknown bug {part!r} (known: {sorted(BUG_BY_NUMBER)})")
        out.append(BUG_BY_NUMBER[int(part)])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated bug numbers, e.g. 3,5 (default: all)")
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel (default 1)")
    ap.add_argument("--pytest-args", default="",
                    help="extra pytest arguments, e.g. \"-k zip\" or \"tests/test_pt2.py\" "
                         "(paths replace the default tests/)")
    ap.add_argument("--no-baseline", action="store_true",
                    help="do not run the unpatched copy first (its failures are then counted)")
    ap.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    ap.add_argument("--test-timeout", type=float, default=300,
                    help="pytest-timeout per test in seconds (0: none; default 300)")
    ap.add_argument("--run-timeout", type=float, default=3600,
                    help="limit for one whole pytest run in seconds (0: none; default 3600)")
    ap.add_argument("--source", type=Path, default=ROOT, help="tree to copy (default: this checkout)")
    ap.add_argument("--rev", help="run on this commit of --source (git archive) instead of the "
                    "working tree, e.g. to see whether an older suite caught a bug")
    ap.add_argument("--workdir", type=Path, help="where the copies go (default: a temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the copies (prints where)")
    ap.add_argument("--check", action="store_true", help="only check that every patch applies")
    ap.add_argument("--show", metavar="N", help="print the diffs of these bugs (e.g. 1,7) and exit")
    ap.add_argument("--list", action="store_true", help="list the bugs and exit")
    ap.add_argument("--fail-uncaught", action="store_true", help="exit 1 if a bug is not caught")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each run's pytest output")
    args = ap.parse_args(argv)

    src = args.source.resolve()
    if args.list:
        for b in BUGS:
            print(f"{b.number} {b.name}: {b.description} ({len(b.patches)} patch(es))")
        return 0
    if args.show:
        for b in parse_only(args.show):
            print(f"# bug {b.number} {b.name}: {b.description}")
            print(bug_diff(src, b))
        return 0
    bugs = parse_only(args.only)
    pytest_args = shlex.split(args.pytest_args)
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="seeded_bugs-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return _run_all(args, src, bugs, pytest_args, workdir)
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def _run_all(args: argparse.Namespace, src: Path, bugs: list[Bug], pytest_args: list[str],
             workdir: Path) -> int:
    """Snapshot, check the patches, run the baseline and the bugs, report."""
    frozen = snapshot(src, workdir / "snapshot", args.rev)
    where = f"{src} at {args.rev}" if args.rev else str(src)
    problems = check_bugs(frozen, bugs)
    if problems:
        print(f"seeded_bugs: patches that no longer apply to {where}:\n" + "\n\n".join(problems),
              file=sys.stderr)
        return 2
    if args.check:
        print(f"all {len(bugs)} bug(s) apply to {where}")
        return 0
    jobs: list[Bug | None] = ([] if args.no_baseline else [None]) + list(bugs)
    print(f"seeded_bugs: {len(bugs)} bug(s){'' if args.no_baseline else ' + baseline'} on {where}, "
          f"{args.jobs} at a time, copies under {workdir}", flush=True)
    results: dict[int, RunResult] = {}
    baseline: RunResult | None = None
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = {pool.submit(run_one, b, frozen, workdir, pytest_args, args.test_timeout,
                            args.run_timeout, args.keep, src.parent / "shared"): b for b in jobs}
        for fut in concurrent.futures.as_completed(futs):
            r = fut.result()
            label = "baseline" if r.bug is None else f"bug {r.bug}"
            print(f"  {label}: pytest exit {r.returncode}, {len(r.failed)} failing of "
                  f"{r.collected}, {r.seconds:.0f} s"
                  + (f" [{r.error}]" if r.error else ""), flush=True)
            if args.verbose or r.error:
                print(textwrap.indent(r.log[-4000:], "    | "), flush=True)
            if r.bug is None:
                baseline = r
            else:
                results[r.bug] = r
    runs = [*results.values(), *([baseline] if baseline else [])]
    inside = all(r.workbench_file.startswith(str(workdir)) for r in runs)
    table, rows = summarize(bugs, results, baseline)
    print()
    print(table)
    print(f"(workbench imported from the copy in every run: {'yes' if inside else 'NO'}, e.g. "
          f"{runs[0].workbench_file if runs else '?'}; {time.perf_counter() - t0:.0f} s in all)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "source": str(src), "rev": args.rev, "pytest_args": pytest_args,
            "baseline": None if baseline is None else {
                "collected": baseline.collected, "failing": baseline.failed,
                "returncode": baseline.returncode, "error": baseline.error,
                "seconds": round(baseline.seconds, 1)},
            "bugs": rows}, indent=2))
        print(f"wrote {args.json}")
    if any(r.error and not row["caught"] for r, row in zip([results[b.number] for b in bugs], rows)):
        return 2
    if baseline is not None and baseline.error:
        return 2
    if args.fail_uncaught and not all(row["caught"] for row in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
