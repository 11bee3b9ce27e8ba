"""Write the plot gallery: PNGs of every workbench plot on the sample models.

    .venv/bin/python scripts/make_gallery.py                    # -> docs/gallery/
    .venv/bin/python scripts/make_gallery.py --out /tmp/gallery --samples sample_models
    .venv/bin/python scripts/make_gallery.py --only timeline_mlp_portable.png

The PNGs are byte-reproducible for a given matplotlib (no timestamps or software tag in the
files; ``tests/test_plots.py`` checks two runs in processes with different hash seeds). Plots
of ``.pt2`` samples are skipped, with a note, while ``workbench.open`` cannot read ``.pt2``
files (``UnsupportedVersionError``). ``tests/test_plots.py`` runs this script into temporary
folders; it writes ``docs/gallery/`` only when asked: run this script, or the test with
``WORKBENCH_GALLERY=1`` (``scripts/test.sh`` does not set it, so a test run leaves the
repository as it was).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Callable, Collection

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # draw with this checkout's workbench, not another installed one
    sys.path.insert(0, str(ROOT))

#: (png name, sample files it needs, what it shows) — in README order.
GALLERY: list[tuple[str, tuple[str, ...], str]] = [
    ("compare_portable_vs_external.png", ("mlp_portable.pte", "mlp_external.pte", "mlp_external.ptd"),
     "weights moved from the .pte's constant segment to the .ptd"),
    ("compare_tied_portable_vs_xnnpack.png", ("tied_portable.pte", "tied_xnnpack.pte"),
     "the tie breaks under XNNPACK: a second copy as named data"),
    ("compare_aoti_so_vs_blob.png", ("mlp_aoti.pt2", "mlp_aoti_blob.pt2"),
     "AOTInductor constants inside the .so vs in a separate blob member (log widths)"),
    ("compare_pte_vs_pt2.png", ("mlp_portable.pte", "mlp.pt2"),
     "the same weights in a .pte and in a torch.export archive, matched by content"),
    ("anatomy_mlp_xnnpack_external.png", ("mlp_xnnpack_external.pte", "mlp_xnnpack_external.ptd"),
     "every region of a .pte (eh00, delegate blob) and its .ptd, labelled, in file order"),
    ("layout_mlp_portable.png", ("mlp_portable.pte",), "a portable .pte"),
    ("layout_mlp_external.png", ("mlp_external.pte", "mlp_external.ptd"),
     "a .pte with its weights in a .ptd: one band per file"),
    ("layout_mlp_xnnpack_log.png", ("mlp_xnnpack.pte",),
     "an XNNPACK .pte: delegate blob and named data (log widths)"),
    ("layout_kv_cache.png", ("kv_cache.pte",), "constants and a mutable-data segment"),
    ("layout_mlp_bpte.png", ("mlp.bpte",), "a bundled program: the .pte embedded, then test data"),
    ("layout_mlp_pt2_log.png", ("mlp.pt2",), "a torch.export archive (log widths)"),
    ("tensor_sizes_kv_cache.png", ("kv_cache.pte",), "largest tensors, coloured by storage"),
    ("treemap_mlp_external.png", ("mlp_external.pte", "mlp_external.ptd"),
     "stored bytes by module prefix"),
    ("memory_plan_kv_cache.png", ("kv_cache.pte",), "the planned arena: offsets, sizes, reuse"),
    ("timeline_mlp_portable.png", ("mlp_portable.pte", "mlp_portable.etdp",
                                   "mlp_portable.etrecord"),
     "where time goes: one warm run from its ETDump, a lane per instruction"),
    ("lifetimes_kv_cache.png", ("kv_cache.pte",),
     "the memory plan over time: each planned tensor from first to last use"),
]


def _jobs(samples: pathlib.Path) -> dict[str, Callable[[], object]]:
    """png name -> a function that builds its Figure (opening what it needs)."""
    import workbench as wb
    from workbench import plots

    def s(name: str) -> str:
        return str(samples / name)

    def cmp(a: object, b: object, **kw: object) -> object:
        return wb.compare(a, b, hashes=True, **kw)

    return {
        "compare_portable_vs_external.png": lambda: plots.compare(
            cmp(s("mlp_portable.pte"), [s("mlp_external.pte"), s("mlp_external.ptd")])),
        "compare_tied_portable_vs_xnnpack.png": lambda: plots.compare(
            cmp(s("tied_portable.pte"), s("tied_xnnpack.pte"))),
        "compare_aoti_so_vs_blob.png": lambda: plots.compare(
            cmp(s("mlp_aoti.pt2"), s("mlp_aoti_blob.pt2")), log=True),
        "compare_pte_vs_pt2.png": lambda: plots.compare(
            cmp(s("mlp_portable.pte"), s("mlp.pt2")), log=True),
        "anatomy_mlp_xnnpack_external.png": lambda: plots.anatomy(
            wb.open(s("mlp_xnnpack_external.pte"), data=[s("mlp_xnnpack_external.ptd")])),
        "layout_mlp_portable.png": lambda: plots.layout(wb.open(s("mlp_portable.pte"))),
        "layout_mlp_external.png": lambda: plots.layout(
            wb.open(s("mlp_external.pte"), data=[s("mlp_external.ptd")])),
        "layout_mlp_xnnpack_log.png": lambda: plots.layout(
            wb.open(s("mlp_xnnpack.pte"), data=[]), log=True),
        "layout_kv_cache.png": lambda: plots.layout(wb.open(s("kv_cache.pte"))),
        "layout_mlp_bpte.png": lambda: plots.layout(wb.open(s("mlp.bpte"))),
        "layout_mlp_pt2_log.png": lambda: plots.layout(wb.open(s("mlp.pt2")), log=True),
        "tensor_sizes_kv_cache.png": lambda: plots.tensor_sizes(wb.open(s("kv_cache.pte"))),
        "treemap_mlp_external.png": lambda: plots.treemap(
            wb.open(s("mlp_external.pte"), data=[s("mlp_external.ptd")])),
        "memory_plan_kv_cache.png": lambda: plots.memory_plan(wb.open(s("kv_cache.pte"))),
        "timeline_mlp_portable.png": lambda: plots.timeline(wb.timeline(
            s("mlp_portable.pte"), s("mlp_portable.etdp"), s("mlp_portable.etrecord"))),
        "lifetimes_kv_cache.png": lambda: plots.lifetimes(wb.open(s("kv_cache.pte"))),
    }


def make_gallery(out: str | pathlib.Path = ROOT / "docs" / "gallery",
                 samples: str | pathlib.Path = ROOT / "sample_models",
                 log: Callable[[str], object] = print,
                 only: Collection[str] | None = None) -> dict[str, str]:
    """Write every gallery PNG (those named in ``only``, when given) into ``out``; returns
    png name -> ``"written"`` or why skipped.

    Example:
        >>> make_gallery("/tmp/gallery")["layout_mlp_portable.png"]     # doctest: +SKIP
        'written'
    """
    import workbench as wb

    out = pathlib.Path(out)
    samples = pathlib.Path(samples)
    out.mkdir(parents=True, exist_ok=True)
    jobs = _jobs(samples)
    status: dict[str, str] = {}
    unknown = set(only or ()) - {png for png, _, _ in GALLERY}
    if unknown:
        raise ValueError(f"not in the gallery: {sorted(unknown)}")
    for png, needs, _what in GALLERY:
        if only is not None and png not in only:
            continue
        missing = [n for n in needs if not (samples / n).is_file()]
        if missing:
            status[png] = f"skipped: missing samples {missing}"
        else:
            try:
                fig = jobs[png]()
            except wb.UnsupportedVersionError as e:  # .pt2 before its reader lands
                status[png] = f"skipped: {e}"
            else:
                fig.savefig(out / png, dpi=100, metadata={"Software": None})  # type: ignore[attr-defined]
                status[png] = "written"
        log(f"{png}: {status[png]}")
    return status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "gallery"), help="output folder")
    p.add_argument("--samples", default=str(ROOT / "sample_models"), help="sample models folder")
    p.add_argument("--only", nargs="+", metavar="PNG", help="write just these pictures")
    args = p.parse_args(argv)
    status = make_gallery(args.out, args.samples, only=args.only)
    return 0 if any(v == "written" for v in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
