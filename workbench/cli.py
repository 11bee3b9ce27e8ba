"""The ``workbench`` command line (also ``python -m workbench``).

Examples::

    workbench inspect sample_models/                 # a summary of every artifact under a folder
    workbench inspect model.pte --frame tensors      # any frame as a table
    workbench inspect model.pte --frame segments --format csv > segments.csv
    workbench inspect model.pte --frame tensors --format json | jq .
    workbench inspect model.pte --data weights.ptd   # external data given explicitly
    workbench compare old.pte new.pte --frame tensors
    workbench profile model.pte --repeat 5
    workbench plot model.pte --out layout.png --log
    workbench kernels model.pte -o selected_operators.yaml   # the kernels a build needs
    workbench scan corpus/ --out corpus.parquet --jobs 8
    workbench scan corpus/ --out corpus.parquet --dask tcp://scheduler:8786
    workbench inspect https://host/models/llm.pte     # URLs wherever paths go: ranged reads
    workbench scan s3://bucket/models/ --out s.parquet  # (credentials from the environment)

Output: human-readable text on stdout by default; ``--format csv|json|parquet`` writes only
that data to stdout (or ``--out FILE``); messages, warnings about bad files and the progress
bar go to stderr. Names read from files are escaped before they reach a terminal. JSON has no
infinities: ``--format json`` writes them as the strings ``"Infinity"`` / ``"-Infinity"``
(missing values and NaN are ``null``).

Exit codes: 0 ok, 1 an artifact is bad (one line on stderr, never a traceback), 2 usage error
(or a command that is not available in this installation), 70 a bug in workbench itself (the
traceback on stderr).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import io
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from . import __version__
from ._fmt import escape, human_bytes
from .errors import ArtifactError, mask_url

__all__ = ["main"]

_FORMATS = ("table", "csv", "json", "parquet")

_EPILOG = """examples:
  workbench inspect sample_models/
  workbench inspect model.pte --frame tensors
  workbench inspect model.pte --frame segments --format csv > segments.csv
  workbench inspect model.pte --frame tensors --format json | jq .
  workbench compare a.pte b.pte
  workbench profile model.pte --repeat 5
  workbench plot model.pte --out layout.png
  workbench scan corpus/ --out corpus.parquet --jobs 8
  workbench inspect s3://bucket/models/llm.pte --frame segments   # URLs work as paths

exit codes: 0 ok, 1 bad artifact (message on stderr), 2 usage
"""


class _Usage(Exception):
    """A usage problem: printed on stderr, exit code 2."""


# -- argument parsing ---------------------------------------------------------------------------

def _sub(sub: Any, name: str, help: str, epilog: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help, description=help, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _output_args(p: argparse.ArgumentParser, frame_help: str) -> None:
    p.add_argument("--frame", metavar="NAME", help=frame_help)
    p.add_argument("--format", choices=_FORMATS, default="table",
                   help="table (default, readable), or csv / json / parquet: only the data, on "
                        "stdout or in --out")
    p.add_argument("--rows", type=int, default=None, metavar="N",
                   help="table format: show at most N rows (default: all; summaries: 5 tensors)")
    p.add_argument("--out", metavar="FILE", help="write the csv / json / parquet output to FILE")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="workbench", description="Look inside ExecuTorch and PyTorch deployment artifacts "
        "(.pte, .ptd, .bpte, .pt2) without running or copying them.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"workbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ins = _sub(sub, "inspect", "summarise artifacts (files or folders), or print one frame",
               "examples:\n"
               "  workbench inspect sample_models/\n"
               "  workbench inspect model.pte --frame tensors --rows 20\n"
               "  workbench inspect model.pte --frame segments --format csv > segments.csv\n"
               "  workbench inspect model.pte --format json          # summary rows as JSON\n"
               "  workbench inspect model.pte --frame tensors --format parquet --out t.parquet\n"
               "  workbench inspect model.pte --data weights.ptd     # external data explicitly\n"
               "  workbench inspect model.pte --no-data              # what is missing without it\n")
    ins.add_argument("paths", nargs="+", metavar="PATH",
                     help="artifact file or folder (recursive); or a URL (http(s)://, s3://, "
                          "any fsspec URL; one ending in / is a folder), read with ranged "
                          "requests, credentials from the environment")
    _output_args(ins, "print this frame of one artifact instead of the summary (tensors, "
                      "segments, ...; 'findings' runs the checks)")
    data = ins.add_mutually_exclusive_group()
    data.add_argument("--data", nargs="+", action="extend", metavar="PTD",
                      help="external data files (.ptd) for a .pte (default: found next to it)")
    data.add_argument("--no-data", action="store_true", help="attach no external data files")

    cmp = _sub(sub, "compare", "compare two artifacts (tensors, segments, summary)",
               "examples:\n"
               "  workbench compare old.pte new.pte\n"
               "  workbench compare model.pte model.pt2 --frame tensors --format csv\n")
    cmp.add_argument("a", metavar="A", help="first artifact")
    cmp.add_argument("b", metavar="B", help="second artifact")
    cmp.add_argument("--data-a", nargs="+", action="extend", metavar="PTD", help="data files for A")
    cmp.add_argument("--data-b", nargs="+", action="extend", metavar="PTD", help="data files for B")
    cmp.add_argument("--hash", action="store_true", help="hash every stored tensor: match by "
                     "content and fill same_bytes (reads all weight bytes)")
    _output_args(cmp, "print this frame of the comparison: tensors, summary, segments, "
                      "duplicates, delta (default: delta as a table, summary otherwise)")

    prof = _sub(sub, "profile", "time loading an artifact's tensors along load paths",
                "examples:\n"
                "  workbench profile model.pte\n"
                "  workbench profile model.pte --paths read,mmap_touch --repeat 5\n"
                "  workbench profile model.pte --cold --format csv > runs.csv\n"
                "  workbench profile model.pte --frame summary --format json\n"
                "  workbench profile model.pte --device cuda --plot load_paths.png\n")
    prof.add_argument("path", metavar="PATH", help="artifact file")
    prof.add_argument("--paths", metavar="P1,P2", help="load paths to time, comma separated "
                      "(default: every path of --device)")
    prof.add_argument("--cold", action="store_true", help="evict the files from the page cache "
                      "before each run")
    prof.add_argument("--repeat", type=int, default=3, metavar="N",
                      help="runs per path, each in a fresh process (default 3)")
    prof.add_argument("--device", choices=("cpu", "cuda", "all"), default="cpu",
                      help="default path set (default: cpu)")
    prof.add_argument("--data", nargs="+", action="extend", metavar="PTD",
                      help="external data files (.ptd) for a .pte")
    prof.add_argument("--trusted", action="store_true", help="also run paths that execute file "
                      "content (torch.export.load unpickles, AOTInductor dlopens): own files only")
    prof.add_argument("--frame", choices=("runs", "summary", "rooflines"), default=None,
                      help="what --format writes: one row per run (default), the per-path "
                           "summary, or the rooflines")
    prof.add_argument("--format", choices=_FORMATS, default="table",
                      help="table (default: the summary, readable) or csv / json / parquet")
    prof.add_argument("--out", metavar="FILE", help="write the csv / json / parquet output to FILE")
    prof.add_argument("--plot", metavar="PNG", help="also save the profile plot to this image")

    plot = _sub(sub, "plot", "draw the byte layout of an artifact (or of two, compared) to an image",
                "examples:\n"
                "  workbench plot model.pte --out layout.png\n"
                "  workbench plot old.pte new.pte --out diff.png --log\n")
    plot.add_argument("paths", nargs="+", metavar="PATH", help="one artifact, or two to compare")
    plot.add_argument("--out", required=True, metavar="FILE", help="image to write (.png, .svg, .pdf)")
    plot.add_argument("--log", action="store_true", help="logarithmic sizes")

    sc = _sub(sub, "scan", "scan every artifact under folders / globs into frames (parquet or csv)",
              "examples:\n"
              "  workbench scan corpus/                              # table of artifacts\n"
              "  workbench scan corpus/ --out corpus.parquet         # corpus.artifacts.parquet,\n"
              "                                                      # corpus.segments.parquet, ...\n"
              "  workbench scan 'models/**/*.pte' --out out/ --jobs 16\n"
              "  workbench scan /shared/corpus --out corpus.parquet --dask tcp://sched:8786\n"
              "  workbench scan corpus/ --out c.parquet --dask local --jobs 4\n"
              "  workbench scan s3://bucket/models/ --out s3.parquet  # a URL prefix\n"
              "\n"
              "--out NAME.parquet (or .csv) writes NAME.<frame>.parquet for every frame\n"
              "(artifacts, segments, tensors, errors); --out DIR/ writes DIR/<frame>.parquet.\n"
              "Unreadable files are rows of the errors frame (and listed on stderr, exit 1);\n"
              "they never stop the scan.\n")
    sc.add_argument("paths", nargs="+", metavar="DIR_OR_GLOB", help="folders, files or glob patterns")
    sc.add_argument("--out", metavar="FILE", help="NAME.parquet, NAME.csv or a folder (default: "
                    "print the artifacts table)")
    sc.add_argument("--jobs", type=int, default=None, metavar="N",
                    help="worker processes (default: CPU count, at most one per 32 files; 1: in "
                         "this process)")
    sc.add_argument("--dask", metavar="ADDRESS", help="run on a Dask cluster: scheduler address, "
                    "or 'local' for a local cluster of --jobs workers")
    sc.add_argument("--frames", default="segments,tensors", metavar="F1,F2",
                    help="format frames to collect (default: segments,tensors)")
    sc.add_argument("--no-progress", action="store_true", help="no progress bar (default: on a terminal)")
    sc.add_argument("-q", "--quiet", action="store_true", help="no summary line on stderr")

    tl = _sub(sub, "timeline", "join an ETDump trace to the program's instructions (wb.timeline)",
              "examples:\n"
              "  workbench timeline model.pte model.etdp\n"
              "  workbench timeline model.pte model.etdp --etrecord model.etrecord --format csv\n"
              "  workbench timeline model.pte model.etdp --by instruction --format json\n")
    tl.add_argument("program", metavar="PROGRAM", help="the .pte or .bpte the trace was made from")
    tl.add_argument("etdump", metavar="ETDP", help="the ETDump trace")
    tl.add_argument("--etrecord", metavar="FILE", help="ETRecord: graph nodes and module paths")
    tl.add_argument("--by", choices=("event", "instruction"), default="event",
                    help="one row per event (default) or duration statistics per instruction")
    tl.add_argument("--format", choices=_FORMATS, default="table",
                    help="table (default, readable) or csv / json / parquet")
    tl.add_argument("--rows", type=int, default=None, metavar="N", help="table: at most N rows")
    tl.add_argument("--out", metavar="FILE", help="write the csv / json / parquet output to FILE")

    kn = _sub(sub, "kernels", "the kernels a program's non-delegated instructions need, the "
              "library of each, whether this ExecuTorch registers it; writes ExecuTorch's "
              "selective-build selected_operators.yaml (wb.runtime.kernels)",
              "examples:\n"
              "  workbench kernels model.pte\n"
              "  workbench kernels model.pte -o selected_operators.yaml\n"
              "  workbench kernels model.pte --format json\n"
              "exit code 1 when the installed runtime lacks a kernel the program calls\n")
    kn.add_argument("program", metavar="PROGRAM", help="the .pte (or .bpte)")
    kn.add_argument("-o", "--yaml", metavar="FILE",
                    help="write selected_operators.yaml (torchgen's SelectiveBuilder format, "
                         "with et_kernel_metadata) to FILE")
    kn.add_argument("--format", choices=_FORMATS, default="table",
                    help="table (default, readable) or csv / json / parquet")
    kn.add_argument("--rows", type=int, default=None, metavar="N", help="table: at most N rows")
    kn.add_argument("--out", metavar="FILE", help="write the csv / json / parquet output to FILE")
    mm = _sub(sub, "memory", "will it fit: the memory a program takes on the runtime, per "
              "component and phase (wb.memory)",
              "examples:\n"
              "  workbench memory model.pte\n"
              "  workbench memory model.pte --data weights.ptd --loader buffer\n"
              "  workbench memory model.pte --budget 512MB      # CI gate\n"
              "  workbench memory model.pte --measure           # also run it and measure\n"
              "exit code 1 when the predicted peak exceeds --budget\n")
    mm.add_argument("program", metavar="PROGRAM", help="the .pte")
    mm.add_argument("--data", metavar="PTD", help="the .ptd with external weights "
                    "(default: the one found next to the program)")
    mm.add_argument("--method", default="forward", help="the method (default: forward)")
    mm.add_argument("--loader", default="mmap",
                    choices=("mmap", "mmap_nolock", "file", "buffer"),
                    help="the runtime's data loader (default: mmap, as the Python runtime)")
    mm.add_argument("--budget", metavar="SIZE", help="exit 1 when the predicted peak exceeds "
                    "SIZE (e.g. 512MB, 1.5GB)")
    mm.add_argument("--measure", action="store_true",
                    help="also run the program in a child process and measure it")
    mm.add_argument("--format", choices=_FORMATS, default="table",
                    help="table (default, readable) or csv / json / parquet")
    mm.add_argument("--out", metavar="FILE", help="write the csv / json / parquet output to FILE")
    return p


# -- output -------------------------------------------------------------------------------------

def _string_columns(df: Any) -> list[str]:
    return [c for c in df.columns
            if df[c].dtype == object or str(df[c].dtype) in ("string", "str", "category")]


def _escaped(df: Any, na: str | None = None) -> Any:
    """A copy of ``df`` whose strings are safe on a terminal (missing ones shown as ``na``)."""
    import pandas as pd

    def cell(v: Any) -> Any:
        if isinstance(v, str):
            return escape(v)
        if na is not None and (v is None or v is pd.NA or (isinstance(v, float) and v != v)):
            return na
        return v

    safe = df.copy()
    for c in _string_columns(safe):
        safe[c] = safe[c].astype(object).map(cell)
    return safe


def _jsonable(df: Any) -> Any:
    import numpy as np

    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object:
            out[c] = out[c].map(lambda v: list(v) if isinstance(v, tuple) else v)
        elif out[c].dtype.kind == "f" and np.isinf(out[c].to_numpy()).any():
            # to_json would write an infinity as null: keep it, as a string
            out[c] = out[c].astype(object).map(
                lambda v: ("Infinity" if v > 0 else "-Infinity") if np.isinf(v) else v)
    return out


def _emit(df: Any, fmt: str, rows: int | None = None, out: str | None = None) -> None:
    """Print ``df`` as a table, or write it as csv / json / parquet to stdout or ``out``."""
    if fmt == "table":
        import pandas as pd

        with pd.option_context("display.max_rows", rows or len(df) or 1, "display.width", 200,
                               "display.max_columns", 60, "display.max_colwidth", 60):
            text = _escaped(df, na="<NA>").to_string(index=False, max_rows=rows, na_rep="<NA>")
        _write_text(text + "\n", out)
    elif fmt == "csv":
        tty = out is None and sys.stdout.isatty()
        _write_text((_escaped(df) if tty else df).to_csv(index=False), out)
    elif fmt == "json":  # force_ascii: control and non-ASCII characters are \\u escaped
        _write_text(_jsonable(df).to_json(orient="records", force_ascii=True, double_precision=15)
                    + "\n", out)
    elif fmt == "parquet":
        if out is None and sys.stdout.isatty():
            raise _Usage("refusing to write parquet (binary) to a terminal; use --out FILE or "
                         "redirect stdout")
        if out is not None:
            df.to_parquet(out, index=False)
        else:
            buf = io.BytesIO()
            df.to_parquet(buf, index=False)
            sys.stdout.flush()
            sys.stdout.buffer.write(buf.getvalue())
            sys.stdout.buffer.flush()
    else:  # pragma: no cover - argparse restricts the choices
        raise _Usage(f"unknown format {fmt!r}")


def _write_text(text: str, out: str | None) -> None:
    if out is None:
        sys.stdout.write(text)
    else:
        with open(out, "w", encoding="utf-8", newline="") as f:
            f.write(text)


#: Exit code for an exception that is not an ArtifactError: a bug (``EX_SOFTWARE``).
EXIT_BUG = 70


def _err(msg: object) -> None:
    print(f"workbench: {escape(msg)}", file=sys.stderr)


# -- inspect ------------------------------------------------------------------------------------

def _files(paths: Sequence[str]) -> list[str]:
    """Files to inspect: files as given; under folders, every artifact (by magic or name).
    URLs work the same way: a URL ending in ``/`` is a folder (listed through fsspec)."""
    from .corpus import discover, is_candidate
    from .remote import is_url

    out: list[str] = []
    for p in paths:
        if os.path.isdir(p) or (is_url(p) and p.endswith("/")):
            found = discover([p], absolute=False)
            out.extend(f for f, explicit in found if is_candidate(f, explicit))
        else:
            out.append(p)
    return out


def _findings_lines(art: Any) -> list[str]:
    """``warning: ...`` lines: missing external data and what ``validate()`` finds."""
    lines = []
    ten = art.tensors
    if "missing" in ten.columns:
        n = int(ten["missing"].fillna(False).astype(bool).sum())
        if n:
            data = art.info.get("data_files") or []
            where = ("not found in " + ", ".join(escape(os.path.basename(d)) for d in data)
                     if data else "no .ptd data file attached")
            lines.append(f"  warning:  {n} external tensors have no data ({where}); "
                         "pass --data FILE.ptd")
    if not hasattr(art, "validate"):
        return lines
    try:
        found = art.validate()
    except ArtifactError as e:
        return [*lines, f"  error:    {escape(e)}"]
    groups: dict[tuple[str, str], list[str]] = {}
    for r in found.itertuples(index=False):
        groups.setdefault((str(r.severity), str(r.message)), []).append(str(r.structure))
    for i, ((sev, msg), where) in enumerate(groups.items()):
        if i == 8:
            lines.append(f"  ...       {len(groups) - 8} more kinds of findings (--frame findings)")
            break
        label = {"error": "error:", "warning": "warning:"}.get(sev, "note:")
        at = escape(where[0]) if len(where) == 1 else f"{len(where)}x: {escape(where[0])}, ..."
        lines.append(f"  {label:<9} {escape(msg)} ({at})")
    return lines


def _summary_text(art: Any, top: int = 5) -> str:
    s = art.summary()
    lines = [f"{escape(art.path)}  [{art.format}]  "
             + ", ".join(f"{escape(os.path.basename(f))} {human_bytes(n)}" for f, n in s["files"].items())]
    kinds = " · ".join(f"{escape(k)} {human_bytes(v)}" for k, v in s["bytes_by_kind"].items())
    lines.append(f"  layout:   {kinds}")
    if "methods" in list(art.frames):
        m = art.frames["methods"]
        const = m["constant_method"].astype(bool) if "constant_value" in m.columns else \
            m["method"].isna()
        lines.append("  methods:  " + ", ".join(
            f"{escape(r.method)} ({r.instructions} instr, {r.operators} ops, {r.delegates} delegates)"
            for r in m[~const].itertuples()))
        if const.any():  # constant methods (an LLM's get_max_seq_len, ...): their values
            lines.append("  constant: " + ", ".join(
                f"{escape(r.method)}={escape(repr(r.constant_value))[:40]}"
                for r in m[const].itertuples()))
    if "models" in list(art.frames):
        m = art.frames["models"]
        lines.append("  models:   " + ", ".join(f"{escape(r.name)} ({escape(r.kind)})"
                                               for r in m.itertuples()))
    storage = " · ".join(f"{escape(k)} {v}" for k, v in s["tensors_by_storage"].items())
    stored = human_bytes(s["stored_tensor_bytes"])
    lines.append(f"  tensors:  {s['tensors']} ({storage}); stored bytes {stored}")
    ten = art.tensors
    ext = ten[ten["storage"] == "external"]
    if len(ext):
        lines.append(f"  note:     {len(ext)} tensors live in external data files (.ptd): "
                     f"{human_bytes(int(ext['nbytes'].sum()))}")
    lines.extend(_llm_lines(art))
    lines.extend(_findings_lines(art))
    largest = largest_stored(art, top)
    if len(largest):
        lines.append("  largest stored tensors:")
        for r in largest.itertuples():
            shape = "x".join(str(d) for d in r.shape) or "scalar"
            dtype = escape(r.dtype) + (f" {escape(r.quant)}" if isinstance(r.quant, str) else "")
            lines.append(f"    {escape(r.name)[:48]:<48} {dtype[:28]:<28} {shape:<14} "
                         f"{human_bytes(r.nbytes):>10}  {escape(r.storage)} @0x{int(r.offset):x}")
    return "\n".join(lines)


def _llm_lines(art: Any) -> list[str]:
    """For an LLM program (attention kernels in ``forward``): its constant bytes by part."""
    from . import llm

    if art.format not in ("pte", "bpte") or "operators" not in list(art.frames):
        return []
    ops = art.frames["operators"]
    if not ops["op"].astype(object).isin(list(llm.ATTENTION)).any():
        return []
    try:
        parts = llm.parts(art)
    except ValueError:
        return []
    shown = [f"{escape(r.part)} {human_bytes(int(r.bytes))}" for r in parts.itertuples()]
    if len(shown) > 8:  # many layers: the first and last two
        shown = [*shown[:3], f"... {len(shown) - 5} more", *shown[-2:]]
    return ["  llm:      " + " · ".join(shown)]


def largest_stored(art: Any, top: int = 5) -> Any:
    """The ``top`` largest tensors whose bytes the artifact's files hold, ranked by bytes:
    program constants, named data and external data (the ``tensors`` frame) and the
    constants inside delegates (``delegate_tensors``), each stored range once. A delegate
    constant stands for the named-data entry it reads (typed: its dtype, shape and
    quantization, with its scales' bytes added), so an 8da4w weight ranks as one int4 tensor,
    not as an anonymous ``uint8`` key.

    Returns:
        A DataFrame with ``name, dtype, quant, shape, nbytes, storage, file, offset``.

    Example:
        >>> art = wb.open("sample_models/wide_xnnpack_8da4w.pte")   # doctest: +SKIP
        >>> largest_stored(art, 1)["dtype"].tolist()              # doctest: +SKIP
        ['int4']
    """
    import pandas as pd

    cols = ["name", "dtype", "quant", "shape", "nbytes", "storage", "file", "offset"]
    ten = art.tensors
    parts = []
    taken: set[tuple[str, int]] = set()
    if "delegate_tensors" in list(art.frames):
        d = art.frames["delegate_tensors"]
        d = d[d["offset"].notna()]
        if len(d):
            scale = pd.to_numeric(d.get("scale_nbytes"), errors="coerce").fillna(0) \
                if "scale_nbytes" in d.columns else 0
            quant = None
            if "quant" in d.columns:
                gs = d["group_size"] if "group_size" in d.columns else [None] * len(d)
                quant = [None if not isinstance(q, str) or q == "none" else
                         q + ("" if pd.isna(g) else f" g{int(g)}")
                         for q, g in zip(d["quant"].astype(object), gs.astype(object))]
            parts.append(pd.DataFrame({
                "name": d["name"].astype(object), "dtype": d["dtype"].astype(object),
                "quant": quant, "shape": d["shape"],
                "nbytes": (d["nbytes"].astype("int64") + scale).astype("int64"),
                "storage": d["storage"].astype(object), "file": d["file"].astype(object),
                "offset": d["offset"].astype("int64")}))
            taken |= set(zip(d["file"].astype(object), d["offset"].astype("int64")))
            if "scale_offset" in d.columns:
                s = d[d["scale_offset"].notna()]
                taken |= set(zip(s["scale_file"].astype(object), s["scale_offset"].astype("int64")))
    t = ten[ten["offset"].notna()]
    if len(t):
        keep = [(f, int(o)) not in taken for f, o in zip(t["file"].astype(object), t["offset"])]
        t = t[keep]
        parts.append(pd.DataFrame({
            "name": t["name"].astype(object), "dtype": t["dtype"].astype(object), "quant": None,
            "shape": t["shape"], "nbytes": t["nbytes"].astype("int64"),
            "storage": t["storage"].astype(object), "file": t["file"].astype(object),
            "offset": t["offset"].astype("int64")}))
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(
        len(p) for p in parts) else pd.DataFrame(columns=cols)
    return out[cols].sort_values(["nbytes", "name"], ascending=[False, True],
                                 kind="stable").head(top).reset_index(drop=True)


def _open(path: str, data: list[str] | None) -> Any:
    from ._open import open as wb_open

    try:
        return wb_open(path, data=data)
    except TypeError as e:  # data= for a file that is not a .pte
        if data is None:
            raise  # (a bug, not a usage error)
        raise _Usage(f"{path}: {e}") from None


def _inspect(args: argparse.Namespace) -> int:
    files = _files(args.paths)
    if args.frame and len(files) != 1:
        raise _Usage(f"--frame needs exactly one artifact file ({len(files)} given); "
                     "use 'workbench scan' for many")
    if not files:
        raise _Usage("no artifacts found under " + ", ".join(map(escape, args.paths)))
    data = [] if args.no_data else args.data
    status = 0
    rows: list[dict[str, Any]] = []
    for i, path in enumerate(files):
        try:
            art = _open(path, data)
        except (ArtifactError, OSError) as e:
            _report(path, e)
            status = 1
            continue
        try:
            if args.frame:
                _emit(_frame(art, args.frame), args.format, args.rows, args.out)
            elif args.format == "table":
                _write_text(("\n" if i else "") + _summary_text(art, args.rows or 5) + "\n", None)
            else:
                from .corpus import artifact_row

                rows.append(artifact_row(art, path))
        except ArtifactError as e:
            _err(e)
            status = 1
        finally:
            art.close()
    if not args.frame and args.format != "table":
        from . import frames

        cols = {c.name: [r.get(c.name) for r in rows] for c in frames.SCHEMAS["artifacts"]}
        _emit(frames.build("artifacts", cols), args.format, args.rows, args.out)
    return status


def _frame(art: Any, name: str) -> Any:
    names = list(art.frames)
    if name in names:
        return art.frames[name]
    if name == "findings" and hasattr(art, "validate"):
        return art.validate()
    raise _Usage(f"{art.format} artifacts have no frame {escape(name)!r}; frames: "
                 f"{', '.join(names)}")


def _report(path: str, e: BaseException) -> None:
    path = mask_url(path)
    if isinstance(e, ArtifactError):
        _err(e)
    elif isinstance(e, OSError):
        _err(f"{path}: {e.strerror or e}")
    else:  # pragma: no cover
        _err(f"{path}: {type(e).__name__}: {e}")


# -- optional commands ---------------------------------------------------------------------------

def _optional(name: str, command: str) -> ModuleType:
    """Import ``workbench.<name>`` for a command, or raise a usage error saying why not."""
    full = f"{__package__}.{name}"
    if importlib.util.find_spec(full) is None:
        raise _Usage(f"'workbench {command}' is not available in this installation "
                     f"(no module {full})")
    try:
        return importlib.import_module(full)
    except ImportError as e:
        missing = e.name or str(e)
        raise _Usage(f"'workbench {command}' needs {missing}, which is not installed "
                     f"(pip install 'pte-workbench[notebook]')") from None


def _print_summary(summary: Any, rows: int | None) -> None:
    """Print a summary that may be a frame, a mapping or text."""
    if hasattr(summary, "to_string"):
        _emit(summary, "table", rows)
    elif isinstance(summary, dict):
        width = max((len(str(k)) for k in summary), default=0)
        for k, v in summary.items():
            print(f"{escape(k):<{width}}  {escape(v)}")
    elif summary is not None:
        print(escape(summary))


def _compare(args: argparse.Namespace) -> int:
    mod = _optional("comparison", "compare")
    cmp = mod.compare(args.a, args.b, data_a=args.data_a, data_b=args.data_b, hashes=args.hash)
    try:
        frames = cmp.frames
        names = [*frames, "delta"]
        if args.frame and args.frame not in names:
            raise _Usage(f"comparisons have no frame {escape(args.frame)!r}; frames: "
                         f"{', '.join(names)}")
        if args.frame == "delta" or (not args.frame and args.format == "table"):
            df = cmp.delta().reset_index()
        else:
            df = frames[args.frame or "summary"]
        if args.format == "table" and not args.frame:
            print(f"A: {escape(args.a)}\nB: {escape(args.b)}\n")
            _emit(df, "table")
            print()
            print(_match_line(frames["tensors"]))
        else:
            _emit(df, args.format, args.rows, args.out)
    finally:
        close = getattr(cmp, "close", None)
        if close is not None:
            close()
    return 0


def _match_line(t: Any) -> str:
    """``tensors: 4 in both (method_value 4); 0 only in A; 0 only in B; moved: ...``."""
    side = t["side"].astype(str).value_counts()
    both = t[t["side"].astype(str) == "both"]
    rules = ", ".join(f"{escape(k)} {v}" for k, v in both["match"].astype(str).value_counts().items())
    line = (f"tensors: {side.get('both', 0)} in both ({rules or 'none'}); "
            f"{side.get('a', 0)} only in A; {side.get('b', 0)} only in B")
    if "moved" in t.columns:
        moved = t["moved"].dropna().astype(str).value_counts()
        if len(moved):
            line += "; moved: " + ", ".join(f"{escape(k)} {v}" for k, v in moved.items())
    return line


def _profile(args: argparse.Namespace) -> int:
    import inspect

    mod = _optional("profiling", "profile")
    if args.repeat < 1:
        raise _Usage("--repeat must be at least 1")
    paths = [p.strip() for p in args.paths.split(",") if p.strip()] if args.paths else None
    wanted = {"paths": paths, "cold": args.cold, "repeat": args.repeat, "device": args.device,
              "data": args.data, "trusted": args.trusted, "progress": sys.stderr.isatty()}
    accepted = inspect.signature(mod.profile).parameters
    kwargs = {k: v for k, v in wanted.items() if k in accepted and v is not None}
    if args.plot:
        os.environ.setdefault("MPLBACKEND", "Agg")
    try:
        prof = mod.profile(args.path, **kwargs)
    except ValueError as e:  # unknown path names, bad device, ...
        if isinstance(e, ArtifactError):
            raise
        raise _Usage(str(e)) from None
    if args.format == "table" and args.frame is None:
        table = getattr(prof, "table", None)
        if callable(table):
            _write_text(table() + "\n", None)
        else:
            _print_summary(prof.summary, None)
    else:
        df = {"runs": prof.frame, "summary": prof.summary,
              "rooflines": getattr(prof, "rooflines", None)}[args.frame or "runs"]
        _emit(df, args.format, None, args.out)
    if args.plot:
        _save(prof.plot(), args.plot)
    return 0


def _save(fig: Any, out: str) -> None:
    fig = getattr(fig, "figure", fig)  # an Axes -> its Figure
    fig.savefig(out, dpi=150, bbox_inches="tight")
    try:
        import matplotlib.pyplot as plt

        plt.close(fig)
    except ImportError:  # pragma: no cover
        pass


def _plot(args: argparse.Namespace) -> int:
    if len(args.paths) > 2:
        raise _Usage("plot takes one artifact, or two to compare")
    os.environ.setdefault("MPLBACKEND", "Agg")  # no display needed
    plots = _optional("plots", "plot")
    if len(args.paths) == 2:
        subject = _optional("comparison", "plot A B").compare(*args.paths)
    else:
        subject = _open(args.paths[0], None)
    _save(plots.layout(subject, log=args.log), args.out)
    return 0


# -- scan ---------------------------------------------------------------------------------------

def _scan(args: argparse.Namespace) -> int:
    from .corpus import DEFAULT_FRAMES, scan, write

    frames = tuple(f.strip() for f in args.frames.split(",") if f.strip()) or DEFAULT_FRAMES
    if args.jobs is not None and args.jobs < 1:
        raise _Usage("--jobs must be at least 1")
    if args.out:
        ext = os.path.splitext(args.out)[1]
        if not (args.out.endswith(("/", os.sep)) or os.path.isdir(args.out) or ext in (".parquet", ".csv")):
            raise _Usage(f"--out must be NAME.parquet, NAME.csv or a folder: {escape(args.out)}")
    progress = False if args.no_progress else None
    cluster = client = None
    try:
        scheduler: Any = None
        if args.dask == "local":
            from distributed import Client, LocalCluster

            cluster = LocalCluster(n_workers=args.jobs or os.cpu_count() or 1, threads_per_worker=1,
                                   processes=True, dashboard_address=":0")
            client = scheduler = Client(cluster)
        elif args.dask:
            scheduler = args.dask
        try:
            res = scan(args.paths, jobs=args.jobs, scheduler=scheduler, frames=frames,
                       progress=progress)
        except ValueError as e:
            raise _Usage(str(e)) from None
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    errors = res["errors"]
    for i, r in enumerate(errors.itertuples(index=False)):
        if i == 10:
            _err(f"... and {len(errors) - 10} more unreadable files (see the errors frame)")
            break
        base = os.path.basename(r.artifact)  # messages name the base name: show the path
        msg = r.message
        _err(_display(r.artifact) + msg[len(base):] if msg.startswith(base + ":") else msg)
    if args.out:
        for p in write(res, args.out):
            print(escape(p))
    else:
        cols = ["artifact", "format", "size", "tensors", "stored_tensor_bytes", "external", "missing",
                "padding_pct"]
        table = res["artifacts"][cols].copy()
        table["padding_pct"] = table["padding_pct"].round(1)
        table["artifact"] = table["artifact"].map(_display)
        _emit(table, "table")
    if not args.quiet:
        print(f"workbench: scanned {res.files} files in {res.seconds:.2f} s ({res.backend}): "
              f"{len(res['artifacts'])} artifacts, {len(errors)} unreadable, "
              f"{len(res.skipped)} skipped (not artifacts)", file=sys.stderr)
    return 1 if len(errors) else 0


def _display(path: str) -> str:
    """``path`` relative to the working directory when it is under it."""
    cwd = os.getcwd() + os.sep
    return path[len(cwd):] if path.startswith(cwd) else path


# -- entry point --------------------------------------------------------------------------------

def _timeline(args: argparse.Namespace) -> int:
    from .timing import timeline

    df = timeline(args.program, args.etdump, args.etrecord, by=args.by)
    if args.format == "table":
        df = df.drop(columns=[c for c in ("reads", "writes", "read_names", "write_names",
                                          "debug_handles", "candidates", "start", "end")
                              if c in df.columns])
    _emit(df, args.format, args.rows, args.out)
    return 0


def _kernels(args: argparse.Namespace) -> int:
    from . import runtime

    art = _open(args.program, None)
    try:
        df = runtime.kernels(art)
        if args.yaml:
            text = runtime.selected_operators_yaml(art)
            with open(args.yaml, "w", encoding="utf-8") as f:
                f.write(text)
            _err(f"wrote {args.yaml}: {len(df)} operators")
    finally:
        art.close()
    if args.format == "table":
        df = df.drop(columns=["module"])
    _emit(df, args.format, args.rows, args.out)
    missing = df[df["registered"].astype("boolean").eq(False).fillna(False)]
    if len(missing):
        _err(f"{escape(args.program)}: {len(missing)} operator(s) have no kernel in this "
             "ExecuTorch installation: " + ", ".join(escape(o) for o in missing["op"]))
        return 1
    if df["registered"].isna().any():
        _err("note: executorch is not installed here: whether the kernels are registered is "
             "unknown")
    return 0


def _memory(args: argparse.Namespace) -> int:
    from .fit import _fmt, memory, parse_bytes

    try:
        budget = parse_bytes(args.budget) if args.budget else None
    except ValueError as e:
        raise _Usage(str(e)) from None
    df = memory(args.program, args.data, method=args.method, loader=args.loader,
                measure=args.measure)
    a = df.attrs
    _emit(df, args.format, None, args.out)
    if args.format == "table":
        phases = "  ".join(f"{k}: {_fmt(v)}" for k, v in a["by_phase"].items())
        print(f"\npredicted ({a['loader']}): {phases}  peak: {_fmt(a['peak'])}")
        if "measured" in a:
            m = a["measured"]
            phases = "  ".join(f"{k}: {_fmt(v)}" for k, v in m["by_phase"].items())
            print(f"measured:  {phases}  peak: {_fmt(m['peak'])}")
        for f in a["findings"]:
            print(f"finding: {escape(f)}")
        for s in a["savings"]:
            print(f"could save {_fmt(s['bytes'])}: {escape(s['what'])} ({escape(s['how'])})")
    if budget is not None and a["peak"] > budget:
        _err(f"{escape(args.program)}: predicted peak {_fmt(a['peak'])} ({a['peak']} bytes) "
             f"exceeds the budget {_fmt(budget)} ({budget} bytes)")
        return 1
    return 0


_COMMANDS = {"inspect": _inspect, "compare": _compare, "profile": _profile, "plot": _plot,
             "scan": _scan, "timeline": _timeline, "kernels": _kernels, "memory": _memory}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``workbench`` command; returns the exit code.

    Example:
        >>> main(["inspect", "sample_models/mlp_portable.pte"])   # doctest: +SKIP
        0
        >>> main(["inspect", "model.pte", "--frame", "tensors", "--format", "json"])  # doctest: +SKIP
    """
    args = _parser().parse_args(argv)
    try:
        code = _COMMANDS[args.command](args)
        sys.stdout.flush()
        return code
    except _Usage as e:
        _err(e)
        return 2
    except ArtifactError as e:
        _err(e)
        return 1
    except BrokenPipeError:  # pragma: no cover - e.g. `workbench inspect ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
        return 141
    except OSError as e:
        _err(f"{e.filename}: {e.strerror or e}" if e.filename else e)
        return 1
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except Exception:  # a bug in workbench, never a bad file: say so, with the traceback
        import traceback

        traceback.print_exc()
        _err("internal error: this is a bug in workbench, not a problem with the file; "
             "please report it with the traceback above")
        return EXIT_BUG


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
