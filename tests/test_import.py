"""``import workbench`` stays light: no torch, matplotlib or ipywidgets at import time."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "matplotlib", "ipywidgets", "executorch")

_PROBE = """
import json, sys, time
t0 = time.perf_counter()
import workbench
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "modules": sorted(m for m in sys.modules if "." not in m)}))
"""


def _probe() -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_is_light_and_fast():
    r = _probe()
    mods = set(r["modules"])
    loaded = sorted(m for m in HEAVY if m in mods)
    print(f"import workbench: {r['seconds'] * 1000:.0f} ms; pandas imported: {'pandas' in mods}; "
          f"numpy imported: {'numpy' in mods}")
    assert not loaded, f"import workbench pulled in {loaded}"
    assert r["seconds"] < 2.0, f"import workbench took {r['seconds']:.2f} s"  # a hang guard


def test_public_surface():
    import workbench as wb

    for name in ("open", "Artifact", "ArtifactError", "UnknownFormatError", "TruncatedError",
                 "OutOfBoundsError", "CorruptError", "UnsupportedVersionError",
                 "MissingDataError", "UnsafeContentError"):
        assert name in wb.__all__ and hasattr(wb, name), name
    assert issubclass(wb.ArtifactError, ValueError)
    for name in wb.__all__:
        obj = getattr(wb, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and obj is not wb.ArtifactError:
            assert issubclass(obj, wb.ArtifactError), name


def test_errors_pickle():
    import pickle

    import workbench as wb

    e = wb.CorruptError("bad", file="/x/y.pte", structure="Program", offset=0x10)
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is wb.CorruptError
    assert (e2.file, e2.structure, e2.offset, e2.detail) == ("y.pte", "Program", 0x10, "bad")
    assert str(e2) == str(e) == "y.pte: Program at 0x10: bad"
