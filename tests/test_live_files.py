"""Live files: the artifact's file changes on disk while it is open.

A map of a file truncated under it faults (SIGBUS) when a page past the new end is touched,
which kills the process. Every public operation is therefore run in a SUBPROCESS (this file,
run as a script: ``python tests/test_live_files.py MODE``): a signal shows up as a negative
return code and fails the test instead of killing pytest. The child opens a fresh copy of a
sample program per operation, changes the file between open and use, runs the operation and
prints one JSON line per operation: the exception's class and message, or the facts it got.

Modes: ``truncate`` (in place, to 120 bytes), ``rewrite`` (in place, same size, new bytes,
newer mtime), ``replace`` (a new file moved over the path with ``os.replace``: the old map
stays valid, so old data is consistent and fine), ``race`` (a truncation between the identity
check and the read: the check is disabled, the descriptor read must still not fault).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_models" / "mlp_portable.pte"
OPS = ("view", "tensor_copy", "frames", "validate", "compare_hashes", "widget_stats", "reload")
MODES = ("truncate", "rewrite", "replace")


# -- the child ---------------------------------------------------------------------------------

def _stored(art):
    """(name, offset, nbytes) of the first stored tensor."""
    ten = art.tensors
    row = ten[ten["offset"].notna() & (ten["nbytes"] > 0)].iloc[0]
    return row["name"], int(row["offset"]), int(row["nbytes"])


def _child(mode: str) -> None:  # pragma: no cover - runs in a subprocess
    import numpy as np

    import workbench as wb
    from workbench.source import Source

    tmp = Path(tempfile.mkdtemp(prefix="wb-live-"))
    orig = SAMPLE.read_bytes()
    with wb.open(SAMPLE) as ref:
        name, off, nbytes = _stored(ref)
        old = ref.tensor(name, copy=True)
    new = bytearray(orig)
    new[off:off + nbytes] = bytes((b + 1) & 0xFF for b in orig[off:off + nbytes])
    other = tmp / "other.pte"
    other.write_bytes(orig)

    def change(p: Path) -> None:
        if mode in ("truncate", "race"):
            with open(p, "r+b") as f:
                f.truncate(120)
        elif mode == "rewrite":
            st = os.stat(p)
            with open(p, "r+b") as f:
                f.write(new)
            os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        else:
            q = p.with_suffix(".tmp")
            q.write_bytes(new)
            os.replace(q, p)

    if mode == "race":  # the identity check misses the change: only the descriptor read is left
        Source.ensure_fresh = lambda self, what=None, offset=None: None

    def run(op: str) -> dict:
        p = tmp / f"{op}.pte"
        p.write_bytes(orig)
        if op == "widget_stats":
            from workbench.widgets import Explorer

            ex = Explorer(str(p))
            ex.art.tensors  # noqa: B018 - built before the change, as a notebook would have
            change(p)
            ex.tabs.selected_index = 3  # the Tensor tab: statistics and histogram
            idx = next(i for i, r in ex.art.tensors.iterrows() if r["name"] == name)
            ex.tensor_pick.value = idx
            out = {"error": ex.tensor_hist.message.value, "offered": ex.reload_bar.offered,
                   "stats": ex.tensor_values.value}
            ex.reload_bar.button.click()
            out["after_reload_offered"] = ex.reload_bar.offered
            out["after_reload_status"] = ex.status.value
            return out
        art = wb.open(p)
        if op in ("view", "tensor_copy", "compare_hashes", "reload"):
            art.tensors  # noqa: B018 - the tensor table is built; the data is not read yet
        change(p)
        out: dict = {"stale": art.is_stale()}
        if op == "view":
            x = art.tensor(name)
            out["equal_old"] = bool(np.array_equal(x, old))
        elif op == "tensor_copy":
            x = art.tensor(name, copy=True)
            out["equal_old"] = bool(np.array_equal(x, old))
        elif op == "frames":
            out["rows"] = len(art.frames["tensors"]) + len(art.frames["segments"])
        elif op == "validate":
            out["findings"] = len(art.validate())
        elif op == "compare_hashes":
            cmp = wb.compare(art, str(other), hashes=True)
            out["same_bytes"] = bool(cmp.tensors["same_bytes"].dropna().all())
        elif op == "reload":
            try:
                art.reload()
            finally:
                out["stale_after"] = art.is_stale()
            x = art.tensor(name, copy=True)
            out["equal_new"] = bool(np.array_equal(x.view(np.uint8).reshape(-1),
                                                   np.frombuffer(new, np.uint8, nbytes, off)))
        return out

    for op in (("tensor_copy", "compare_hashes") if mode == "race" else OPS):
        try:
            res = {"ok": run(op)}
        except Exception as e:  # reported to the parent
            res = {"error": type(e).__name__, "message": str(e),
                   "artifact_error": isinstance(e, wb.ArtifactError)}
        print(json.dumps({"op": op, **res}), flush=True)
    shutil.rmtree(tmp, ignore_errors=True)


def _no_core() -> None:  # pragma: no cover - runs in the child before exec
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _run_child(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONFAULTHANDLER": ""}
    return subprocess.run([sys.executable, __file__, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240, preexec_fn=_no_core)


def _results(mode: str) -> dict[str, dict]:
    proc = _run_child(mode)
    rc = proc.returncode
    died = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"
    assert rc == 0, f"the child died ({died}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return {r["op"]: r for r in map(json.loads, proc.stdout.splitlines()) if "op" in r}


# -- the tests ---------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=MODES)
def outcome(request):
    return request.param, _results(request.param)


def test_every_operation_gives_an_error_or_old_data_never_a_signal(outcome):
    mode, res = outcome
    assert set(res) == set(OPS), res
    for op in ("view", "tensor_copy", "frames", "validate", "compare_hashes"):
        r = res[op]
        if mode == "replace":  # the old map is intact: consistent old data, and is_stale says so
            assert "ok" in r, r
            assert r["ok"]["stale"] is True
            assert r["ok"].get("equal_old", True) is True
            assert r["ok"].get("same_bytes", True) is True
        else:
            assert r.get("error") == "StaleFileError", (op, r)
            assert "changed since it was opened" in r["message"] and f"{op}.pte" in r["message"]
            what = "size" if mode == "truncate" else "mtime"
            assert what in r["message"], r["message"]


def test_widget_statistics_offer_a_reload(outcome):
    mode, res = outcome
    r = res["widget_stats"]["ok"]
    assert r["offered"] is True
    if mode == "replace":
        assert "statistics" in r["stats"]  # old, consistent bytes
    else:
        assert "StaleFileError" in r["error"]
    assert r["after_reload_offered"] is False
    if mode == "truncate":  # the new file is 120 bytes: opening it says why, in the status line
        assert "wb-error" in r["after_reload_status"]
    else:
        assert r["after_reload_status"] == ""


def test_reload(outcome):
    mode, res = outcome
    r = res["reload"]
    if mode == "truncate":  # the truncated file itself is not a program: a clear ArtifactError
        assert r["artifact_error"] and r["error"] != "StaleFileError", r
    else:
        assert r["ok"]["stale"] is True and r["ok"]["stale_after"] is False
        assert r["ok"]["equal_new"] is True


def test_a_truncation_racing_the_check_is_a_short_read_not_a_fault():
    res = _results("race")
    for op in ("tensor_copy", "compare_hashes"):
        assert res[op].get("error") == "StaleFileError", res[op]
        assert "ended at" in res[op]["message"]


def test_the_hazard_is_real():
    """Control: touching a map past a truncated end is SIGBUS (what the child would die of)."""
    proc = _run_child("control")
    assert proc.returncode == -signal.SIGBUS, (proc.returncode, proc.stderr[-2000:])


def test_identity_checks_are_one_stat_per_operation(tmp_path):
    import workbench as wb
    from workbench.source import Source

    p = tmp_path / "m.pte"
    shutil.copy(SAMPLE, p)
    calls = []
    real = os.fstat
    art = wb.open(p)
    name = _stored(art)[0]
    art.tensor(name)  # builds the name index (every tensor frame: one check per frame built)
    try:
        os.fstat = lambda fd: calls.append(fd) or real(fd)
        art.tensor(name)
        assert len(calls) == 1
        calls.clear()
        art.tensor(name, copy=True)  # before and after the copy
        assert len(calls) == 2
    finally:
        os.fstat = real
    assert not art.is_stale() and art.reload() is art
    assert Source(p).identity[0] == p.stat().st_size


def test_the_profiler_refuses_a_file_changed_since_its_plan(tmp_path):
    from workbench.errors import StaleFileError
    from workbench.profiling._files import ensure_unchanged, identities

    p = tmp_path / "m.pte"
    shutil.copy(SAMPLE, p)
    planned = identities([str(p)])
    ensure_unchanged(planned)
    with open(p, "r+b") as f:
        f.truncate(120)
    with pytest.raises(StaleFileError, match="size 5408 -> 120"):
        ensure_unchanged(planned)


def _control() -> None:  # pragma: no cover - runs in a subprocess, dies of SIGBUS
    import mmap

    tmp = Path(tempfile.mkdtemp(prefix="wb-live-"))
    p = tmp / "c.pte"
    shutil.copy(SAMPLE, p)
    with open(p, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    with open(p, "r+b") as f:
        f.truncate(120)
    shutil.rmtree(tmp, ignore_errors=True)
    print(mm[5000])


if __name__ == "__main__":  # pragma: no cover - the child
    sys.path.insert(0, str(ROOT))
    _control() if sys.argv[1] == "control" else _child(sys.argv[1])
