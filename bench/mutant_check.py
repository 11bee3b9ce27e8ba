"""Does a test kill a mutant? Run some tests with one mutmut mutant active, in seconds.

After a ``bench/mutation.py`` run, ``build/mutation/tree/mutants/`` holds the mutated package
(every mutant of every function, behind mutmut's trampolines). This script copies the
repository's current ``tests/`` there, then runs pytest once per mutant name with
``MUTANT_UNDER_TEST`` set to it (and once with no mutant, which must pass), and prints
``killed`` / ``SURVIVED`` per mutant::

    .venv/bin/python bench/mutant_check.py workbench.source.xǁSourceǁ_pread__mutmut_11 \\
        -- tests/test_source.py -k pread
    .venv/bin/python bench/mutant_check.py --from build/mutation/survivors.md --module \\
        workbench.source -- tests/test_source.py

``--from FILE`` takes the mutant names listed in a ``survivors.md`` report (optionally only
those of ``--module``). Exit status: 0 when every mutant is killed, 1 otherwise, 2 when the
tests fail without any mutant.

The mutants are those of the last ``bench/mutation.py`` run: when the package changed
since, run it again first (a ``--modules`` run regenerates only what changed).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "build" / "mutation" / "tree" / "mutants"


def names_from(report: Path, module: str | None) -> list[str]:
    """Mutant names listed in a ``survivors.md`` (lines starting with a backquoted name)."""
    out = []
    for line in report.read_text().splitlines():
        m = re.match(r"`([\w.ǁ]+__mutmut_\d+)` — ", line)
        if m and (module is None or m.group(1).startswith(module + ".")):
            out.append(m.group(1))
    return out


def run(mutant: str, pytest_args: list[str]) -> int:
    """pytest's exit status with ``mutant`` active ('' for none)."""
    env = dict(os.environ, MUTANT_UNDER_TEST=mutant, WORKBENCH_TEST_TIME_SCALE="10")
    env["PYTHONPATH"] = os.pathsep.join([str(MUTANTS), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--rootdir=.",
           "--tb=no", *pytest_args]
    return subprocess.run(cmd, cwd=MUTANTS, env=env, capture_output=True).returncode


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    tests = argv[argv.index("--") + 1:] if "--" in argv else ["tests/"]
    own = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="mutant names (workbench.module.x_func__mutmut_N)")
    ap.add_argument("--from", dest="report", type=Path, help="take the names from a survivors.md")
    ap.add_argument("--module", help="with --from: only this module's mutants")
    args = ap.parse_args(own)
    names = list(args.names) + (names_from(args.report, args.module) if args.report else [])
    if not MUTANTS.is_dir():
        raise SystemExit(f"no {MUTANTS}: run bench/mutation.py first")
    if not names:
        raise SystemExit("no mutant names given")
    shutil.copytree(ROOT / "tests", MUTANTS / "tests", dirs_exist_ok=True)
    if run("", tests) != 0:
        print("the tests fail with no mutant active: fix them first", file=sys.stderr)
        return 2
    survived = 0
    for name in names:
        rc = run(name, tests)
        ok = rc != 0
        survived += not ok
        print(f"{'killed  ' if ok else 'SURVIVED'}  {name}", flush=True)
    print(f"{len(names) - survived} of {len(names)} killed")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
