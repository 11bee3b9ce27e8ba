"""The ``workbench`` command line.

Examples::

    workbench inspect sample_models/                 # a summary of every artifact in a folder
    workbench inspect model.pte                      # one artifact
    workbench inspect model.pte --frame tensors      # any frame as a table
    workbench inspect model.pte --frame segments --format csv > segments.csv
    workbench inspect model.pte --frame tensors --format json | jq .

Exit codes: 0 ok, 1 an artifact is bad (message on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import __version__
from ._fmt import escape, human_bytes
from .errors import ArtifactError

__all__ = ["main"]

_EPILOG = """examples:
  workbench inspect sample_models/
  workbench inspect model.pte --frame tensors
  workbench inspect model.pte --frame segments --format csv > segments.csv
  workbench inspect model.pte --frame tensors --format json

exit codes: 0 ok, 1 bad artifact (message on stderr), 2 usage
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="workbench", description="Look inside ExecuTorch and PyTorch deployment artifacts.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"workbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ins = sub.add_parser(
        "inspect", help="summarise an artifact (or every artifact in a folder), or print a frame",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ins.add_argument("paths", nargs="+", metavar="PATH", help="artifact file or folder")
    ins.add_argument("--frame", help="print this frame instead of the summary (e.g. tensors)")
    ins.add_argument("--format", choices=("table", "csv", "json"), default="table",
                     help="output format for --frame (default: table)")
    ins.add_argument("--rows", type=int, default=None,
                     help="table format: show at most this many rows (default: all)")
    return p


def _expand(paths: Sequence[str]) -> list[str]:
    """Files as given, and the files directly inside given folders (sorted)."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            out.extend(sorted(os.path.join(p, n) for n in os.listdir(p)
                              if os.path.isfile(os.path.join(p, n))))
        else:
            out.append(p)
    return out


def _is_artifact_candidate(path: str) -> bool:
    """True when the first bytes match any format we know (folders hold other files too)."""
    from . import formats

    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return True  # let open() report it
    return formats.detect(head) is not None or formats.recognised_unreadable(head) is not None


def _summary_text(art) -> str:
    s = art.summary()
    lines = [f"{escape(art.path)}  [{art.format}]  "
             + ", ".join(f"{escape(os.path.basename(f))} {human_bytes(n)}" for f, n in s["files"].items())]
    kinds = " · ".join(f"{escape(k)} {human_bytes(v)}" for k, v in s["bytes_by_kind"].items())
    lines.append(f"  layout:   {kinds}")
    if "methods" in art.frames:
        m = art.frames["methods"]
        lines.append("  methods:  " + ", ".join(
            f"{escape(r.method)} ({r.instructions} instr, {r.operators} ops, {r.delegates} delegates)"
            for r in m.itertuples()))
    storage = " · ".join(f"{escape(k)} {v}" for k, v in s["tensors_by_storage"].items())
    stored = human_bytes(s["stored_tensor_bytes"])
    lines.append(f"  tensors:  {s['tensors']} ({storage}); stored bytes {stored}")
    ext = art.tensors[art.tensors["storage"] == "external"]
    if len(ext):
        lines.append(f"  note:     {len(ext)} tensors live in external data files (.ptd): "
                     f"{human_bytes(int(ext['nbytes'].sum()))}")
    top = art.tensors[art.tensors["offset"].notna()].nlargest(5, "nbytes")
    if len(top):
        lines.append("  largest stored tensors:")
        for r in top.itertuples():
            shape = "x".join(str(d) for d in r.shape) or "scalar"
            lines.append(f"    {escape(r.name)[:64]:<64} {r.dtype:<9} {shape:<14} "
                         f"{human_bytes(r.nbytes):>10}  {r.storage} @0x{int(r.offset):x}")
    return "\n".join(lines)


def _print_frame(df, fmt: str, rows: int | None) -> None:
    if fmt == "csv":
        df.to_csv(sys.stdout, index=False)
    elif fmt == "json":
        out = df.copy()
        for c in out.columns:
            if out[c].dtype == object:
                out[c] = out[c].map(lambda v: list(v) if isinstance(v, tuple) else v)
        sys.stdout.write(out.to_json(orient="records"))
        sys.stdout.write("\n")
    else:
        import pandas as pd

        safe = df.copy()
        for c in safe.columns:
            if safe[c].dtype == object or str(safe[c].dtype) in ("string", "category"):
                safe[c] = safe[c].map(lambda v: escape(v) if isinstance(v, str) else v)
        with pd.option_context("display.max_rows", rows or len(df) or 1, "display.width", 200,
                               "display.max_columns", 50, "display.max_colwidth", 60):
            print(safe.to_string(index=False, max_rows=rows))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``workbench`` command; returns the exit code.

    Example:
        >>> main(["inspect", "sample_models/mlp_portable.pte"])   # doctest: +SKIP
        0
    """
    from . import open as wb_open

    args = _parser().parse_args(argv)
    status = 0
    if args.command == "inspect":
        files = _expand(args.paths)
        from_folder = len(files) != len(args.paths) or any(os.path.isdir(p) for p in args.paths)
        if from_folder:
            files = [f for f in files if _is_artifact_candidate(f)]
        if args.frame and len(files) != 1:
            print("workbench: --frame needs exactly one artifact file", file=sys.stderr)
            return 2
        for i, path in enumerate(files):
            try:
                art = wb_open(path)
            except ArtifactError as e:
                print(f"workbench: {escape(e)}", file=sys.stderr)
                status = 1
                continue
            except OSError as e:
                print(f"workbench: {escape(path)}: {escape(e.strerror or e)}", file=sys.stderr)
                status = 1
                continue
            try:
                if args.frame:
                    if args.frame not in art.frames:
                        print(f"workbench: {art.format} artifacts have no frame {escape(args.frame)!r}; "
                              f"frames: {', '.join(art.frames)}", file=sys.stderr)
                        return 2
                    _print_frame(art.frames[args.frame], args.format, args.rows)
                else:
                    if i:
                        print()
                    print(_summary_text(art))
            except ArtifactError as e:
                print(f"workbench: {escape(e)}", file=sys.stderr)
                status = 1
            finally:
                art.close()
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
