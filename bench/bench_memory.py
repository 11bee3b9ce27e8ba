"""Benchmark: wb.memory's prediction against the ExecuTorch runtime's measured memory.

What is measured
----------------
For every case, ``wb.memory(program, loader=..., measure=True)``: the prediction (a view over
the program's frames) and, in a fresh child process on ExecuTorch's Python runtime
(``Runtime.load_program`` -> ``load_method`` -> one ``execute``), the growth of anonymous
memory plus the resident pages of the artifact's own files at the end of each phase
(``/proc/self/status``, ``/proc/self/smaps``) and the peak (``VmHWM``, reset with
``clear_refs`` before ``load_program``, less the runtime's own code pages faulted in).

Accuracy goal: predicted ``by_phase`` and ``peak`` within +-10% of the measured value, or
within 0.5 MB for small programs. No timing is asserted.

Cases
-----
* every sample ``.pte`` in ``sample_models/`` that the installed runtime can run (``mmap``);
* the LLM samples (``llm_tiny.pte`` inline, ``llm_tiny_external.pte`` + ``.ptd``) with the
  ``mmap`` and ``buffer`` loaders;
* the 403 MB portable program (``bench/_artifacts.py big``, cached) with ``mmap`` and
  ``buffer``;
* the llama3.2-1B-shaped export at ``~/.cache/workbench-bench/llm_1b/llm_1b.pte`` (skipped
  with a message when absent).

Rows whose size the prediction cannot know from the file carry ``estimated`` in their
``note``; ``--rows`` prints every case's component table.

Run::

    PYTHONPATH=$PWD .venv/bin/python bench/bench_memory.py [--quick] [--rows]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MB = 1 << 20
#: Samples the installed runtime cannot run (no kernel / backend here).
UNRUNNABLE = {"custom_op.pte": "custom kernel not registered",
              "mlp_coreml.pte": "Core ML backend not in this runtime",
              "mlp_vulkan.pte": "Vulkan backend not in this runtime"}


def within(pred: int, meas: int) -> bool:
    """+-10% of the measured value, or 0.5 MB."""
    return abs(pred - meas) <= max(0.1 * meas, 0.5 * MB)


def cases(quick: bool) -> list[tuple[str, Path, str]]:
    samples = ROOT / "sample_models"
    out = []
    for p in sorted(samples.glob("*.pte")):
        if p.name in UNRUNNABLE:
            print(f"skip {p.name}: {UNRUNNABLE[p.name]}")
            continue
        out.append((p.name, p, "mmap"))
    for name in ("llm_tiny.pte", "llm_tiny_external.pte"):
        out.append((name, samples / name, "buffer"))
    if not quick:
        cache = Path(os.environ.get("WORKBENCH_BENCH_CACHE",
                                    Path.home() / ".cache" / "workbench-bench"))
        big = sorted(cache.glob("executorch-*/big_400mb.pte"))
        if big:
            out += [("big_400mb.pte", big[0], "mmap"), ("big_400mb.pte", big[0], "buffer")]
        else:
            print("skip big_400mb.pte: not built (.venv/bin/python bench/_artifacts.py big)")
        one_b = cache / "llm_1b" / "llm_1b.pte"
        if one_b.is_file():
            out += [("llm_1b.pte", one_b, "mmap"), ("llm_1b.pte", one_b, "buffer")]
        else:
            print(f"skip llm_1b.pte: {one_b} is absent")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the samples only")
    ap.add_argument("--rows", action="store_true", help="print every component table")
    ap.add_argument("--case", action="append", metavar="NAME",
                    help="only these cases (file names, e.g. llm_1b.pte); repeatable")
    args = ap.parse_args(argv)

    import pandas as pd

    import workbench as wb
    from workbench.fit import PHASES

    results = []
    for name, path, loader in cases(args.quick):
        if args.case and name not in args.case:
            continue
        try:
            m = wb.memory(path, loader=loader, measure=True)
        except Exception as e:  # a case that cannot run says why, the others go on
            print(f"{name} [{loader}]: FAILED: {type(e).__name__}: {e}")
            results.append({"case": name, "loader": loader, "quantity": "-", "ok": False})
            continue
        got = m.attrs["measured"]
        if args.rows:
            with pd.option_context("display.width", 200, "display.max_colwidth", 70):
                print(m[["component", "phase", "storage", "bytes", "released", "counted",
                         "note"]].to_string(index=False))
        for q in (*PHASES, "peak"):
            pred = m.attrs["peak"] if q == "peak" else m.attrs["by_phase"][q]
            meas = got["peak"] if q == "peak" else got["by_phase"][q]
            results.append({"case": name, "loader": loader, "quantity": q,
                            "predicted_MB": pred / MB, "measured_MB": meas / MB,
                            "diff_MB": (pred - meas) / MB,
                            "ratio": pred / meas if meas else float("nan"),
                            "ok": within(pred, meas)})
        est = m.loc[m["note"].str.contains("estimated") & m["counted"], "bytes"].sum()
        print(f"{name} [{loader}]: predicted peak {m.attrs['peak'] / MB:.2f} MB, measured "
              f"{got['peak'] / MB:.2f} MB (estimated rows: {est / MB:.2f} MB; code pages "
              f"not counted: {max(got['code'].values()) / MB:.2f} MB)", flush=True)
    df = pd.DataFrame(results)
    with pd.option_context("display.width", 200, "display.max_rows", 1000,
                           "display.float_format", "{:.3f}".format):
        print(df.to_string(index=False))
    bad = df[~df["ok"]]
    print(f"\n{len(df) - len(bad)} of {len(df)} quantities within +-10% or 0.5 MB")
    return 1 if len(bad) else 0


if __name__ == "__main__":
    sys.exit(main())
