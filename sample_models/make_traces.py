"""Build the runtime traces (ETDump) and ahead-of-time records (ETRecord) in ``sample_models/``.

For ``mlp_portable.pte`` and ``mlp_xnnpack.pte`` (made by ``make_samples.py``):

* ``<name>.etdp`` + ``<name>.debug.bin``: the program is loaded on the ExecuTorch runtime with
  ETDump enabled (``_load_for_executorch(path, enable_etdump=True, debug_buffer_size=N)``),
  ``forward`` runs ``--runs`` times on the fixed MLP input, then
  ``write_etdump_result_to_file(etdp, debug_bin)`` writes the trace and the debug buffer.
  A debug buffer (``N > 0``) makes the runtime log every intermediate output and the program
  outputs into it; the whole buffer (``N`` bytes) is written, its unused tail zeros.
* ``<name>.etrecord``: the same export as ``make_samples.py`` with ``generate_etrecord=True``;
  the script checks that the program it emits is byte-identical to the ``.pte`` in
  ``sample_models/``, so that the record's debug handles belong to that program.

Timestamps differ on every run and the ETRecord zip records the time of writing, so a rerun
never writes the same bytes; event counts, names and logged values are the same.

Usage::

    .venv/bin/python sample_models/make_traces.py                 # all four, into sample_models/
    .venv/bin/python sample_models/make_traces.py --out /tmp/x --runs 5
    .venv/bin/python sample_models/make_traces.py --only mlp_xnnpack --no-etrecord
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Programs traced: name -> how make_samples lowers it.
PROGRAMS = ("mlp_portable", "mlp_xnnpack")
#: Debug buffer bytes: 3 portable runs log about 11 KiB of intermediate outputs.
DEBUG_BUFFER_SIZE = 16 << 10


def write_trace(pte: Path, etdp: Path, debug_bin: Path, runs: int,
                debug_buffer_size: int = DEBUG_BUFFER_SIZE) -> None:
    """Run ``forward`` of ``pte`` ``runs`` times with ETDump on; write the trace and buffer."""
    import torch
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    sys.path.insert(0, str(HERE))
    from make_samples import mlp_inputs

    module = _load_for_executorch(str(pte), enable_etdump=True,
                                  debug_buffer_size=debug_buffer_size)
    inputs = list(mlp_inputs())
    for _ in range(runs):
        out = module.forward(inputs)
    if not module.has_etdump():
        raise RuntimeError(f"{pte.name}: the runtime recorded no ETDump")
    module.write_etdump_result_to_file(str(etdp), str(debug_bin))
    assert isinstance(out[0], torch.Tensor)


def write_etrecord(name: str, pte: Path, out: Path) -> None:
    """Export the MLP as ``make_samples.py`` does, with ``generate_etrecord=True``."""
    sys.path.insert(0, str(HERE))
    import make_samples as ms
    from executorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower

    ep = ms.export(ms.seeded(ms.MLP), ms.mlp_inputs())
    if name == "mlp_xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()],
                                           generate_etrecord=True)
    else:
        edge = to_edge(ep, generate_etrecord=True)
    program = edge.to_executorch(ExecutorchBackendConfig())
    if program.buffer != pte.read_bytes():
        raise RuntimeError(f"the program exported with generate_etrecord=True differs from "
                           f"{pte}: rebuild the samples first (make_samples.py)")
    program.get_etrecord().save(str(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: here)")
    ap.add_argument("--runs", type=int, default=3, help="executions of forward per trace")
    ap.add_argument("--only", nargs="*", choices=PROGRAMS, default=list(PROGRAMS))
    ap.add_argument("--no-etrecord", action="store_true", help="traces only")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only:
        pte = HERE / f"{name}.pte"
        with tempfile.TemporaryDirectory(dir=args.out) as scratch:
            tmp = Path(scratch)
            write_trace(pte, tmp / f"{name}.etdp", tmp / f"{name}.debug.bin", args.runs)
            made = [f"{name}.etdp", f"{name}.debug.bin"]
            if not args.no_etrecord:
                write_etrecord(name, pte, tmp / f"{name}.etrecord")
                made.append(f"{name}.etrecord")
            for f in made:
                shutil.move(str(tmp / f), str(args.out / f))
                print(f"wrote {args.out / f} ({(args.out / f).stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
