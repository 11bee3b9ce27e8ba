"""Nothing the workbench does writes to an artifact or next to it.

The sample folder is copied to ``tmp_path``; every public operation runs on the copy (open,
every frame, ``summary``, ``validate``, ``_repr_html_``, tensor views and copies, ``compare``
of a few pairs, ``profile`` with cheap CPU paths, ``scan`` of the folder, the CLI ``inspect``
in a subprocess, ``plots.layout`` to a PNG elsewhere). Afterwards every file has the same
sha256, ``mtime_ns`` and size, and no file or folder appeared.

In this process an audit hook (``tests/_audit.py``) also watches every ``open`` in a
writing mode, every removal/rename/creation under the folder, and every ``mmap`` of its
files: all maps must be ``ACCESS_READ``. Numpy views of the map refuse writes
(``ValueError``). Torch views (bfloat16) are documented read-only and are never written to
here: writing through one would fault on the read-only map.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest
from _audit import Seen, watching

import workbench as wb

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
ARTIFACT_SUFFIXES = (".pte", ".ptd", ".bpte", ".pt2", ".etdp", ".etrecord")


# --------------------------------------------------------------------------------------------
# The copied folder and its fingerprint
# --------------------------------------------------------------------------------------------

def fingerprint(root: pathlib.Path) -> dict[str, tuple]:
    """``relative path -> (sha256, mtime_ns, size)`` of every file, ``(dir,)`` for folders."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = ("dir",)
        for f in filenames:
            p = os.path.join(dirpath, f)
            st = os.stat(p)
            with open(p, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
            out[os.path.relpath(p, root)] = (digest, st.st_mtime_ns, st.st_size)
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> pathlib.Path:
    if not SAMPLES.is_dir() or not any(SAMPLES.glob("*.pte")):
        pytest.skip("no sample_models/")
    dst = tmp_path_factory.mktemp("never_writes") / "samples"
    # compat/ (files from older releases) has its own tests; this audit covers today's samples
    shutil.copytree(SAMPLES, dst, ignore=shutil.ignore_patterns("__pycache__", "compat"))
    return dst


@pytest.fixture
def unchanged(corpus) -> Iterator[Seen]:
    """Yield the audit record of the test body, then check nothing under ``corpus`` changed."""
    before = fingerprint(corpus)
    with watching(corpus) as seen:
        yield seen
    after = fingerprint(corpus)
    appeared = sorted(set(after) - set(before))
    assert not appeared, f"new files in the sample folder: {appeared}"
    changed = sorted(k for k in before if before[k] != after.get(k))
    assert not changed, f"changed: {[(k, before[k], after.get(k)) for k in changed]}"
    assert not seen.writes, f"write-mode opens / fs changes under the folder: {seen.writes}"
    bad = [(p, a) for p, a in seen.maps if a != mmap.ACCESS_READ]
    assert not bad, f"maps that are not ACCESS_READ: {bad}"


def artifacts(root: pathlib.Path) -> list[pathlib.Path]:
    """Every artifact under ``root``, recursively (as the scan and the CLI walk folders)."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in ARTIFACT_SUFFIXES)


def _keys(art: wb.Artifact) -> Iterator[tuple[str, object]]:
    """``(frame, key)`` for every stored tensor (``test_cases`` of a .bpte too)."""
    for frame in ("tensors", "test_cases"):
        if frame not in art.frames:
            continue
        df = art.frames[frame]
        for row in df[df["offset"].notna()].itertuples(index=False):
            method, value = getattr(row, "method", None), getattr(row, "value", None)
            if frame == "tensors" and isinstance(method, str) and value == value and value is not None:
                yield frame, (method, int(value))
            else:
                yield frame, str(row.name)


# --------------------------------------------------------------------------------------------
# The operations
# --------------------------------------------------------------------------------------------

def test_open_frames_tensors_never_write(corpus, unchanged):
    views = 0
    for p in artifacts(corpus):
        with wb.open(p) as art:
            for name in list(art.frames):
                art.frames[name]
            art.summary()
            art.validate()
            art._repr_html_()
            if art.format == "bpte":
                inner = art.program
                for name in list(inner.frames):
                    inner.frames[name]
                inner.validate()
            for _, key in _keys(art):
                x = art.tensor(key)
                c = art.tensor(key, copy=True)
                if isinstance(x, np.ndarray):
                    assert np.array_equal(np.asarray(x), c, equal_nan=x.dtype.kind in "fc")
                    if c.size:
                        c.reshape(-1)[0:1] = 0  # the copy is private and writable
                else:  # torch (bf16, float8): read only, never write through the view
                    assert bool((x.contiguous().view(-1) == c.view(-1)).all()) or x.numel() == 0
                views += 1
    assert views > 20
    assert unchanged.maps, "no map of a sample was seen (is the audit hook working?)"


def test_numpy_views_refuse_writes(corpus, unchanged):
    """Every non-empty numpy view of a map is read-only: setting WRITEABLE or assigning raises."""
    checked = 0
    for p in artifacts(corpus):
        with wb.open(p) as art:
            for src in art._parsed.sources.values():
                assert src.buf.readonly
            for _, key in _keys(art):
                x = art.tensor(key)
                if not isinstance(x, np.ndarray) or x.size == 0:
                    continue
                assert not x.flags.writeable
                with pytest.raises(ValueError):
                    x.flags.writeable = True
                with pytest.raises(ValueError):
                    x[...] = 0
                checked += 1
    assert checked > 10


def test_compare_never_writes(corpus, unchanged):
    pairs = [("tied_portable.pte", "tied_xnnpack.pte"), ("mlp_portable.pte", "mlp_xnnpack.pte"),
             ("mlp_external.pte", "mlp_xnnpack_external.pte"), ("mlp.pt2", "tied.pt2"),
             ("mlp.bpte", "mlp_portable.pte")]
    done = 0
    for a, b in pairs:
        if not (corpus / a).is_file() or not (corpus / b).is_file():
            continue
        with wb.compare(corpus / a, corpus / b, hashes=True, progress=False) as cmp:
            for name in ("tensors", "segments", "summary", "duplicates", "delta"):
                getattr(cmp, name)
            cmp._repr_html_()
        done += 1
    assert done >= 3


def test_scan_and_cli_never_write(corpus, unchanged):
    result = wb.scan(corpus, jobs=1)
    assert len(result["artifacts"]) == len(artifacts(corpus))
    r = subprocess.run([sys.executable, "-m", "workbench", "inspect", str(corpus), "--format", "json"],
                       capture_output=True, text=True, timeout=120, cwd=corpus.parent)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == len(artifacts(corpus))


def test_plots_never_write(corpus, tmp_path, unchanged):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from workbench import plots

    out = tmp_path / "plots"
    out.mkdir()
    for name in ("mlp_xnnpack_external.pte", "mlp_aoti_blob.pt2"):
        if (corpus / name).is_file():
            with wb.open(corpus / name) as art:
                fig = plots.layout(art, log=True)
                fig.savefig(out / f"{name}.png")
                plt.close(fig)
    with wb.compare(corpus / "tied_portable.pte", corpus / "tied_xnnpack.pte") as cmp:
        fig = plots.layout(cmp)
        fig.savefig(out / "compare.png")
        plt.close(fig)
    assert len(list(out.glob("*.png"))) >= 2


def test_profile_never_writes(corpus, unchanged):
    prof = wb.profile(corpus / "mlp_external.pte", paths=["read", "wb_views"], repeat=1,
                      progress=False)
    assert set(prof.summary["status"]) == {"ok"}, prof.summary


def test_the_audit_hook_sees_writes_and_writable_maps(tmp_path):
    """The checks above would notice: a write-mode open and an ACCESS_WRITE map are recorded."""
    f = tmp_path / "x.bin"
    f.write_bytes(bytes(16))
    with watching(tmp_path) as seen:
        with open(f, "r+b") as fh:
            m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_WRITE)
            m.close()
        os.rename(f, tmp_path / "y.bin")
    assert [w[0] for w in seen.writes] == ["open", "os.rename"]
    assert seen.maps == [(str(f), mmap.ACCESS_WRITE)]
