"""Inputs the coverage-guided fuzzer (``bench/fuzz_cov.py``) found, kept as files in
``tests/attacks/found/``: each once escaped as a non-ArtifactError, and each case pins the
fixed behaviour.

* ``etdump_unnamed_allocator.etdp`` -- a run whose allocators have no name: the ``runs``
  frame raised ``TypeError`` joining ``None``; now each shows ``(unnamed)``.
* ``etrecord_handle_past_int64.etrecord`` -- a debug handle of 2**64 in the
  ``debug_handle_map``: ``OverflowError`` in a numpy column; now a CorruptError naming
  the member, the key path and the offset.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import workbench as wb

from ._common import Case

FOUND = Path(__file__).resolve().parent / "found"


def _copy(name: str):
    def build(tmp: Path) -> Path:
        return Path(shutil.copyfile(FOUND / name, tmp / name))
    return build


def _unnamed(art: wb.Artifact) -> None:
    allocators = art.frames["runs"]["allocators"].tolist()
    assert allocators and all(a == "(unnamed); (unnamed)" for a in allocators[:1]), allocators


CASES = [
    Case("found_etdump_unnamed_allocator", _copy("etdump_unnamed_allocator.etdp"), None,
         check=_unnamed),
    Case("found_etrecord_handle_past_int64", _copy("etrecord_handle_past_int64.etrecord"),
         wb.CorruptError, match="does not fit in 64 bits"),
]
