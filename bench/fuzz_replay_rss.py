"""Replay a fuzz corpus through the readers, without atheris, and print the RSS after each
pass: does memory grow with the number of inputs read (a leak in the readers), or does it
stay flat (the growth seen in an atheris run belongs to libFuzzer / the instrumentation)?

Each input goes through the same ``Run.one`` as ``bench/fuzz_cov.py`` (every entry point,
only ArtifactError may escape); ``--coverage`` also runs coverage.py's tracer, as the
fuzz run does.

Usage (from the repository root)::

    .venv/bin/python bench/fuzz_replay_rss.py build/fuzz_cov/etdump/atheris/corpus \
        --format etdump --passes 8 --coverage
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzz_cov


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path, help="a folder of inputs (e.g. an atheris corpus)")
    ap.add_argument("--format", required=True, choices=sorted(fuzz_cov.SUFFIX))
    ap.add_argument("--passes", type=int, default=8)
    ap.add_argument("--coverage", action="store_true", help="trace with coverage.py too")
    args = ap.parse_args(argv)
    cov = fuzz_cov._start_coverage() if args.coverage else None
    import workbench
    import workbench.cli
    import workbench.comparison  # noqa: F401

    files = [p.read_bytes() for p in sorted(args.corpus.iterdir()) if p.is_file()]
    if not files:
        ap.error(f"{args.corpus}: no inputs")
    with tempfile.TemporaryDirectory() as out:
        run = fuzz_cov.Run(args.format, "replay", Path(out), 1e9, 2.0)
        fuzz_cov.replay(run, files, 1)  # warm-up pass: imports, lazy set-up
        print(f"{len(files)} inputs; after warm-up: RSS {fuzz_cov._vm('VmRSS') >> 20} MiB")
        fuzz_cov.replay(run, files, args.passes, lambda r: print(
            f"execs {r.execs}: RSS {fuzz_cov._vm('VmRSS') >> 20} MiB, "
            f"peak {fuzz_cov._vm('VmHWM') >> 20} MiB", flush=True))
    if cov is not None:
        cov.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
