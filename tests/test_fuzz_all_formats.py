"""A bounded, seeded run of ``bench/fuzz.py`` over the ``.ptd``, ``.bpte`` and ``.pt2`` samples
(the ``.pte`` samples are fuzzed in ``test_hostile.py``): every mutant may only raise
:class:`workbench.ArtifactError`, within 2 s, while every frame, ``validate()`` and tensor reads
(``test_cases`` of a ``.bpte`` too) run on it, and every mutant that opens satisfies
:func:`helpers.check_invariants` (segments tile each file, offsets lie in their file, stored
tensors read back as their file bytes). ``.ptd`` files are also fuzzed as the sibling data
file of their program.

``WORKBENCH_FUZZ_ALL_MUTANTS`` sets the mutants per target (default 30: a few seconds in all).
The property tests of :mod:`workbench.flatbuf` itself live in ``test_flatbuf.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import traceback
import zipfile
from collections import Counter

import pytest
from helpers import check_invariants

import workbench as wb

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
MUTANTS = int(os.environ.get("WORKBENCH_FUZZ_ALL_MUTANTS", "30"))
SEED = 20240611
SLOW_S = 2.0


def _load_fuzz():
    spec = importlib.util.spec_from_file_location("workbench_bench_fuzz", ROOT / "bench" / "fuzz.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


fuzz = _load_fuzz()


def _sample_files() -> list[pathlib.Path]:
    return sorted(p for ext in ("ptd", "bpte", "pt2") for p in SAMPLES.glob(f"*.{ext}"))


@pytest.fixture(scope="module")
def targets() -> dict[str, object]:
    files = _sample_files()
    if not files:
        pytest.skip("no .ptd/.bpte/.pt2 samples")
    return {t.key: t for p in files for t in fuzz.analyse(p)}


def _target_keys() -> list[str]:
    """Target keys without opening anything at collection time (mirrors ``fuzz.analyse``)."""
    keys = []
    for p in _sample_files():
        keys.append(p.name)
        if p.suffix == ".ptd" and p.with_suffix(".pte").is_file():
            keys.append(f"{p.name}@{p.with_suffix('.pte').name}")
    return keys


@pytest.mark.parametrize("key", _target_keys())
def test_mutants_raise_only_artifact_errors(tmp_path, targets, key):
    t = targets[key]
    for s in t.siblings:
        shutil.copyfile(s, tmp_path / s.name)
    # the original passes: failures below are the mutations' doing
    (tmp_path / t.name).write_bytes(t.data)
    o = fuzz.run_one(tmp_path / t.open_name)
    assert o.kind == "ok", f"original {key}: {o.exc_type}: {o.message}"
    with wb.open(tmp_path / t.open_name) as art:
        assert check_invariants(art) > 0
    bad = []
    kinds = Counter()
    for i in range(MUTANTS):
        muts, data = fuzz.mutant(t, SEED, i)
        fuzz._write_atomic(tmp_path / t.name, data)
        o = fuzz.run_one(tmp_path / t.open_name, hang=10.0)
        kinds[o.kind] += 1
        if o.failed or o.seconds > SLOW_S:
            bad.append(f"#{i} {muts}: {o.kind} {o.exc_type} after {o.seconds:.2f} s: {o.message}\n"
                       f"{o.tb}")
        elif o.kind == "ok":  # it opened: the invariants must hold too
            try:
                with wb.open(tmp_path / t.open_name) as art:
                    check_invariants(art, max_tensors=16)
                    if art.format == "bpte":
                        check_invariants(art.program, max_tensors=16)
            except Exception as e:  # any exception here is a finding
                bad.append(f"#{i} {muts}: invariant broken: {type(e).__name__}: {e}\n"
                           f"{traceback.format_exc()}")
    assert not bad, f"{len(bad)} of {MUTANTS} mutants of {key} failed:\n" + "\n".join(bad[:3])
    assert kinds["ok"] + kinds["artifact_error"] == MUTANTS, kinds


def test_mutants_are_deterministic(targets):
    t = next(iter(targets.values()))
    assert fuzz.mutant(t, 1, 7) == fuzz.mutant(t, 1, 7)
    assert fuzz.mutant(t, 1, 7)[1] != fuzz.mutant(t, 2, 7)[1] or fuzz.mutant(t, 1, 8)[1] != t.data


@pytest.mark.parametrize("name", ["mlp.pt2", "tied.pt2", "mlp_aoti.pt2", "mlp_aoti_blob.pt2"])
def test_zip_fields_match_zipfile(sample, name):
    """The fuzzer's own zip parsing (its mutation targets) agrees with Python's zipfile."""
    p = sample(name)
    data = p.read_bytes()
    fields, _, _ = fuzz._zip_fields(data)
    with zipfile.ZipFile(p) as zf:
        infos = zf.infolist()
    lhos = {f.pos - 42 for f in fields if f.name.endswith("] lho")}
    assert len(lhos) == len(infos)
    locals_ = {f.pos - 6 for f in fields if f.name.startswith("local[") and f.name.endswith("flags")}
    assert locals_ == {i.header_offset for i in infos}
    assert any(f.name == "eocd cd offset" for f in fields)
    assert all(0 <= f.pos and f.pos + f.width <= len(data) for f in fields)
    if "aoti" in name:  # the .so's ELF tables and the constants symbols are targeted
        assert any(" e_shoff" in f.name for f in fields)
        assert any(" sym.value" in f.name for f in fields)


def test_pte_targets_cover_header_fields(sample):
    t = fuzz.analyse(sample("mlp_portable.pte"))[0]
    names = {f.name for f in t.fields}
    assert {"root offset", "eh00 length", "eh00 u64 at +16", "eh00 u64 at +24"} <= names
    assert "struct" in t.regions and "head" in t.regions


@pytest.mark.slow
def test_fuzz_script_end_to_end(tmp_path):
    """The script itself: a short supervised run writes a report and exits 0 (no failures)."""
    out = tmp_path / "fuzz"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz.py"), "--seconds", "3",
                        "--seed", "3", "--warmup", "20", "--out", str(out),
                        "--files", str(SAMPLES / "mlp.bpte"), str(SAMPLES / "mlp_external.ptd")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["executions"] > 0 and report["failures"] == 0
    assert not report["other_exceptions"]
    assert set(report["by_target"]) == {"mlp.bpte", "mlp_external.ptd",
                                        "mlp_external.ptd@mlp_external.pte"}
    assert report["peak_rss"] > 0 and "fuzz report" in r.stdout


def test_replay_reports_saved_failures(tmp_path, capsys):
    """``--replay`` re-runs a saved failure folder and says whether it still fails."""
    d = tmp_path / "failures" / "x"
    d.mkdir(parents=True)
    shutil.copyfile(SAMPLES / "mlp.bpte", d / "mlp.bpte")
    (d / "failure.json").write_text(json.dumps({"open": "mlp.bpte", "exc_type": "IndexError",
                                               "reason": "exception"}))
    assert fuzz.replay([str(tmp_path / "failures")], hang=10.0, slow=SLOW_S) == 0
    assert "fixed" in capsys.readouterr().out


#: What the 10-minute runs of ``bench/fuzz.py`` found, as one edit to a sample each:
#: (sample, offset, width, expected old value, new value, exception seen, what goes wrong).
#: Regression tests: only an ArtifactError (or success) is acceptable.
FINDINGS = [
    ("tied_xnnpack.pte", 388, 1, 0x02, 0x82, OverflowError,
     "methods.planned_bytes: the sum of non_const_buffer_sizes overflows int64 (frames._int64)"),
    ("tied_xnnpack.pte", 1052, 1, 0x17, 0x0C, RuntimeError,
     "a qint8 tensor: tensor(copy=True) calls torch clone, unsupported for quantized dtypes"),
    ("mlp_external.ptd", 188, 4, 16, 80, ValueError,
     "a zero-element tensor with huge other dims: np.empty(shape) in Artifact.tensor"),
]


@pytest.mark.parametrize("name,pos,width,old,new,exc,what", FINDINGS,
                         ids=[f"{f[0]}@{f[1]}" for f in FINDINGS])
def test_fuzz_findings(tmp_path, sample, name, pos, width, old, new, exc, what):
    data = bytearray(sample(name).read_bytes())
    fmt = {1: "<B", 4: "<I"}[width]
    if len(data) < pos + width or fuzz.struct.unpack_from(fmt, data, pos)[0] != old:
        pytest.skip(f"{name} was regenerated: byte {pos} no longer holds {old:#x}")
    fuzz.struct.pack_into(fmt, data, pos, new)
    (tmp_path / name).write_bytes(bytes(data))
    o = fuzz.run_one(tmp_path / name)
    assert not o.failed and o.seconds <= SLOW_S, f"{o.exc_type}: {o.message}\n{o.tb}"
