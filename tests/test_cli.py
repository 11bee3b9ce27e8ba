"""The ``workbench`` command line: every sample through --format json/csv/parquet compared
with the Python frames, exit codes, clean machine output, escaping of hostile names, and the
optional commands (compare, profile, plot) once their modules exist."""

from __future__ import annotations

import importlib.util
import io
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import workbench as wb
from workbench.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
ESC = "\x1b"


def _artifacts() -> list[pathlib.Path]:
    """Every sample file that opens (whatever readers exist when the tests run)."""
    out = []
    for p in sorted(SAMPLES.glob("*")):
        if p.suffix in (".pte", ".ptd", ".bpte", ".pt2"):
            try:
                wb.open(p).close()
            except wb.ArtifactError:
                continue
            out.append(p)
    return out


ARTIFACTS = _artifacts()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def norm(v):
    """A comparable plain value: NA -> None, sequences -> lists, numpy scalars -> Python."""
    import numpy as np
    import pandas as pd

    if isinstance(v, (tuple, list, np.ndarray)):
        return [norm(x) for x in v]
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, float) and math.isinf(v):  # JSON has no infinities: the CLI writes strings
        return "Infinity" if v > 0 else "-Infinity"
    if isinstance(v, np.generic):
        return v.item()
    return v


def records(df) -> list[dict]:
    return [{k: norm(v) for k, v in zip(df.columns, row)}
            for row in df.astype(object).itertuples(index=False, name=None)]


def assert_same_records(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in w:
            if isinstance(w[k], float):
                assert g[k] == pytest.approx(w[k], rel=1e-12), k
            else:
                assert g[k] == w[k], (k, g[k], w[k])


# -- inspect: machine formats match the Python frames ---------------------------------------------

@pytest.mark.parametrize("path", ARTIFACTS, ids=[p.name for p in ARTIFACTS])
def test_json_every_frame_matches_python(capsys, path):
    art = wb.open(path)
    try:
        for name in art.frames:
            code, out, err = run(capsys, "inspect", path, "--frame", name, "--format", "json")
            assert code == 0, err
            assert out.endswith("\n") and out.count("\n") == 1  # one JSON document, nothing else
            assert_same_records(json.loads(out), records(art.frames[name]))
    finally:
        art.close()


def test_json_summary_rows_are_scan_rows(capsys):
    paths = [p for p in ARTIFACTS if p.suffix == ".pte"][:3]
    code, out, err = run(capsys, "inspect", *paths, "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    res = wb.scan(paths, jobs=1)
    want = records(res["artifacts"])
    assert [os.path.abspath(r["artifact"]) for r in got] == [r["artifact"] for r in want]
    for g in got:
        g["artifact"] = os.path.abspath(g["artifact"])
    assert_same_records(got, want)


@pytest.mark.parametrize("name", ["tensors", "segments"])
def test_csv_round_trip(capsys, name):
    import pandas as pd

    for path in ARTIFACTS:
        art = wb.open(path)
        df = art.frames[name]
        code, out, err = run(capsys, "inspect", path, "--frame", name, "--format", "csv")
        assert code == 0 and not err
        back = pd.read_csv(io.StringIO(out), dtype=str, keep_default_na=False)
        assert list(back.columns) == list(df.columns)
        want = df.astype(object).map(lambda v: "" if norm(v) is None else str(v))
        assert back.values.tolist() == want.values.tolist(), path.name
        # and numbers parse back as numbers
        typed = pd.read_csv(io.StringIO(out))
        assert typed["offset"].fillna(-1).astype("int64").tolist() == \
            df["offset"].fillna(-1).astype("int64").tolist()
        art.close()


@pytest.mark.parametrize("name", ["tensors", "segments"])
def test_parquet_round_trip(capsysbinary, tmp_path, name):
    import pandas as pd

    for path in ARTIFACTS:
        art = wb.open(path)
        df = art.frames[name]
        code = main(["inspect", str(path), "--frame", name, "--format", "parquet"])
        out, err = capsysbinary.readouterr()
        assert code == 0 and not err
        assert out[:4] == b"PAR1"
        back = pd.read_parquet(io.BytesIO(out))
        assert list(back.columns) == list(df.columns)
        for c in df.columns:
            if df[c].dtype != object:
                # (string columns: parquet reads them back with pandas' default storage)
                assert str(back[c].dtype) == str(df[c].dtype), (path.name, c)
        assert_same_records(records(back), records(df))
        # --out FILE: the same bytes on disk, nothing on stdout
        dest = tmp_path / f"{path.name}.{name}.parquet"
        assert main(["inspect", str(path), "--frame", name, "--format", "parquet",
                     "--out", str(dest)]) == 0
        assert capsysbinary.readouterr().out == b""
        assert_same_records(records(pd.read_parquet(dest)), records(df))
        art.close()


def test_parquet_refuses_a_terminal(capsys, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, err = run(capsys, "inspect", ARTIFACTS[0], "--frame", "tensors", "--format", "parquet")
    assert code == 2 and out == "" and "terminal" in err


def test_python_dash_m_and_console_script():
    pte = next(p for p in ARTIFACTS if p.name == "mlp_portable.pte") if any(
        p.name == "mlp_portable.pte" for p in ARTIFACTS) else ARTIFACTS[0]
    r = subprocess.run([sys.executable, "-m", "workbench", "inspect", str(pte), "--frame",
                        "segments", "--format", "json"], capture_output=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0 and r.stderr == b""
    assert len(json.loads(r.stdout)) == len(wb.open(pte).segments)
    exe = pathlib.Path(sys.executable).with_name("workbench")
    if exe.exists():
        r = subprocess.run([str(exe), "--version"], capture_output=True, timeout=60)
        assert r.returncode == 0 and r.stdout.decode().strip() == f"workbench {wb.__version__}"


# -- inspect: readable summary, warnings -----------------------------------------------------------

def test_summary_of_a_folder(capsys):
    code, out, err = run(capsys, "inspect", SAMPLES)
    # every readable sample is summarised; unreadable ones (if any) are on stderr with exit 1
    for p in ARTIFACTS:
        assert f"{p.name}  [" in out
    assert code == (1 if err else 0)
    assert "README.md" not in out + err  # not an artifact: skipped, by magic


def test_missing_external_data_is_a_warning(capsys, sample):
    pte = sample("mlp_external.pte")
    code, out, _ = run(capsys, "inspect", pte, "--no-data")
    assert code == 0
    assert "external tensors have no data" in out and "--data" in out
    code, out, _ = run(capsys, "inspect", pte)  # the sibling .ptd is found: no warning
    assert "have no data" not in out
    code, out, _ = run(capsys, "inspect", pte, "--data", sample("mlp_external.ptd"),
                       "--frame", "tensors", "--format", "json")
    rows = json.loads(out)
    assert any(r["storage"] == "external" and r["missing"] is False for r in rows)
    code, out, _ = run(capsys, "inspect", pte, "--no-data", "--frame", "tensors", "--format", "json")
    assert any(r["storage"] == "external" and r["missing"] is True for r in json.loads(out))


def test_findings_frame(capsys, sample):
    if not hasattr(wb.Artifact, "validate"):
        pytest.skip("Artifact.validate is not there")
    code, out, err = run(capsys, "inspect", sample("mlp_external.pte"), "--no-data",
                         "--frame", "findings", "--format", "json")
    assert code == 0, err
    assert {r["severity"] for r in json.loads(out)} == {"warning"}


# -- exit codes -------------------------------------------------------------------------------------

def test_exit_codes(capsys, tmp_path):
    good = ARTIFACTS[0]
    bad = tmp_path / "bad.pte"
    bad.write_bytes(good.read_bytes()[:100])
    assert run(capsys, "inspect", good)[0] == 0

    code, out, err = run(capsys, "inspect", bad, "--format", "json")
    assert code == 1 and "bad.pte" in err
    assert json.loads(out) == []  # machine output stays clean: the bad file is on stderr only

    code, out, err = run(capsys, "inspect", good, bad)
    assert code == 1 and good.name in out and "bad.pte" in err

    code, _, err = run(capsys, "inspect", tmp_path / "nope.pte")
    assert code == 1 and "No such file" in err

    for argv in (["inspect", good, "--frame", "no_such_frame"],
                 ["inspect", good, good, "--frame", "tensors"],
                 ["scan", good, "--out", tmp_path / "x.txt"],
                 ["scan", good, "--jobs", "0"],
                 ["scan", good, "--frames", "no_such_frame"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and err.startswith("workbench: "), argv

    for argv in ([], ["inspect"], ["frobnicate"], ["inspect", good, "--format", "xml"]):
        with pytest.raises(SystemExit) as e:
            main([str(a) for a in argv])
        assert e.value.code == 2
    capsys.readouterr()

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"workbench {wb.__version__}"


def test_help_has_examples(capsys):
    for argv in (["--help"], ["inspect", "--help"], ["scan", "--help"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0
        assert "examples:" in capsys.readouterr().out


# -- escaping ---------------------------------------------------------------------------------------

HOSTILE = "\x1b[2J\x1b[31mX"  # clear screen, red: 10 characters, like 'fc1.weight'


@pytest.fixture
def hostile_ptd(tmp_path, sample):
    """mlp_external.ptd with the key 'fc1.weight' replaced by terminal control sequences."""
    data = sample("mlp_external.ptd").read_bytes()
    assert len(HOSTILE) == len("fc1.weight") and b"fc1.weight" in data
    p = tmp_path / "hostile.ptd"
    p.write_bytes(data.replace(b"fc1.weight", HOSTILE.encode()))
    with wb.open(p) as art:
        assert HOSTILE in set(art.tensors["name"])  # the crafted key really is a name
    return p


def test_names_are_escaped_on_a_terminal(capsys, hostile_ptd, monkeypatch):
    for argv in (["inspect", hostile_ptd],
                 ["inspect", hostile_ptd, "--frame", "tensors"],
                 ["inspect", hostile_ptd, "--frame", "named_data"],
                 ["inspect", hostile_ptd, "--frame", "tensors", "--format", "json"]):
        code, out, err = run(capsys, *argv)
        assert code == 0, err
        assert ESC not in out and ESC not in err, argv
        assert "\\x1b[2J" in out or "\\u001b[2J" in out, argv
    # json keeps the exact name (escaped by JSON itself)
    code, out, _ = run(capsys, "inspect", hostile_ptd, "--frame", "tensors", "--format", "json")
    assert HOSTILE in {r["name"] for r in json.loads(out)}
    # csv: exact data into a pipe, escaped on a terminal
    code, out, _ = run(capsys, "inspect", hostile_ptd, "--frame", "tensors", "--format", "csv")
    assert HOSTILE in out
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, _ = run(capsys, "inspect", hostile_ptd, "--frame", "tensors", "--format", "csv")
    assert ESC not in out and "\\x1b[2J" in out


def test_hostile_file_names_are_escaped(capsys, tmp_path):
    evil = tmp_path / f"evil{HOSTILE}.pte"
    evil.write_bytes(b"\0\0\0\0ET12" + b"\xff" * 56)
    code, out, err = run(capsys, "inspect", evil)
    assert code == 1 and ESC not in err and "evil\\x1b[2J" in err
    code, out, err = run(capsys, "scan", tmp_path, "--no-progress")
    assert code == 1 and ESC not in err + out and "evil\\x1b[2J" in err


# -- scan ----------------------------------------------------------------------------------------

def test_scan_writes_one_file_per_frame(capsys, tmp_path):
    import pandas as pd

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for p in ARTIFACTS[:4]:
        shutil.copy(p, corpus / p.name)
    code, out, err = run(capsys, "scan", corpus, "--out", tmp_path / "c.parquet", "--jobs", "1",
                         "--no-progress")
    assert code == 0, err
    written = out.split()
    assert [pathlib.Path(p).name for p in written] == [
        "c.artifacts.parquet", "c.segments.parquet", "c.tensors.parquet", "c.errors.parquet"]
    arts = pd.read_parquet(written[0])
    assert sorted(arts["artifact"]) == list(arts["artifact"])
    assert len(arts) == 4 and "scanned 4 files" in err
    assert len(pd.read_parquet(written[3])) == 0

    # a folder as --out, csv, more frames
    code, out, err = run(capsys, "scan", corpus, "--out", f"{tmp_path / 'dir'}{os.sep}", "-q",
                         "--frames", "tensors", "--no-progress")
    assert code == 0 and err == ""
    assert sorted(os.listdir(tmp_path / "dir")) == ["artifacts.parquet", "errors.parquet",
                                                    "tensors.parquet"]
    code, out, err = run(capsys, "scan", corpus, "--out", tmp_path / "c.csv", "-q", "--no-progress")
    assert code == 0
    assert len(pd.read_csv(tmp_path / "c.artifacts.csv")) == 4


def test_scan_bad_files_exit_1_and_still_write(capsys, tmp_path):
    import pandas as pd

    (tmp_path / "empty.pte").write_bytes(b"")
    shutil.copy(ARTIFACTS[0], tmp_path / ARTIFACTS[0].name)
    code, _, err = run(capsys, "scan", tmp_path, "--out", tmp_path / "c.parquet", "--no-progress")
    assert code == 1
    assert "empty.pte" in err
    errors = pd.read_parquet(tmp_path / "c.errors.parquet")
    assert [os.path.basename(p) for p in errors["artifact"]] == ["empty.pte"]
    assert len(pd.read_parquet(tmp_path / "c.artifacts.parquet")) == 1


def test_scan_table_without_out(capsys):
    from workbench import formats

    # the exit code follows from the files: 1 when any file with a known magic fails to open
    known = unreadable = 0
    for f in SAMPLES.rglob("*"):
        if f.is_file() and formats.sniff_path(f) is not None:
            known += 1
            try:
                wb.open(f).close()
            except wb.ArtifactError:
                unreadable += 1
    code, out, err = run(capsys, "scan", SAMPLES, "--no-progress", "--jobs", "1")
    assert code == (1 if unreadable else 0), err
    assert f"{known - unreadable} artifacts, {unreadable} unreadable" in err
    for p in ARTIFACTS:
        assert p.name in out
    assert "README.md" not in out


# -- optional commands ------------------------------------------------------------------------------

def test_unavailable_command_exits_2(capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "workbench.profiling" else real(name, *a))
    code, out, err = run(capsys, "profile", ARTIFACTS[0])
    assert code == 2 and out == "" and "not available" in err


def test_compare(capsys, sample):
    pytest.importorskip("workbench.comparison")
    a, b = sample("mlp_portable.pte"), sample("mlp_external.pte")
    code, out, err = run(capsys, "compare", a, b)
    assert code == 0, err
    assert "tensors:" in out and "weights" in out
    for name in ("tensors", "summary", "segments"):
        code, out, err = run(capsys, "compare", a, b, "--frame", name, "--format", "json")
        assert code == 0, err
        with wb.compare(a, b) as cmp:
            assert_same_records(json.loads(out), records(cmp.frames[name]))
    code, _, err = run(capsys, "compare", a, b, "--frame", "nope")
    assert code == 2


def test_plot(capsys, tmp_path, sample):
    pytest.importorskip("matplotlib")
    pytest.importorskip("workbench.plots")
    out = tmp_path / "layout.png"
    code, _, err = run(capsys, "plot", sample("mlp_xnnpack.pte"), "--out", out, "--log")
    assert code == 0, err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_profile(capsys, tmp_path, sample):
    pytest.importorskip("workbench.profiling")
    pte = sample("mlp_portable.pte")
    code, out, err = run(capsys, "profile", pte, "--paths", "read", "--repeat", "1",
                         "--format", "json")
    assert code == 0, err
    runs = json.loads(out)
    assert {r["path"] for r in runs} == {"read"} and len(runs) == 1
    code, out, err = run(capsys, "profile", pte, "--paths", "read", "--repeat", "1")
    assert code == 0 and "read" in out and err == ""  # no progress bar off a terminal
    code, out, err = run(capsys, "profile", pte, "--paths", "no_such_path")
    assert code == 2 and out == "" and "no_such_path" in err


def test_escape_neutralises_bidi_overrides():
    """A key with U+202E (right-to-left override) must not reorder what the terminal shows."""
    from workbench._fmt import escape

    assert escape("evil\u202etxt.pte") == "evil\\u202etxt.pte"
    assert escape("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert escape("plain.weight") == "plain.weight"


def test_largest_stored_tensors_rank_delegate_constants(capsys, sample):
    """``inspect`` ranks every stored tensor by bytes: an 8da4w weight inside an XNNPACK
    delegate is one int4 row (its scales added, its named-data keys not listed again), and a
    delegate's constants outrank the program's small scalars."""
    code, out, _ = run(capsys, "inspect", sample("wide_xnnpack_8da4w.pte"))
    assert code == 0
    rows = out.split("largest stored tensors:")[1].strip().splitlines()
    assert "int4 per_channel_group g32" in rows[0] and "32x64" in rows[0]
    assert "1.1 KiB" in rows[0]  # 1,024 B of packed int4 + 128 B of bf16 scales
    assert not any("scale_" in r for r in rows)  # the scales' keys are part of their weight
    from workbench.cli import largest_stored

    for name in ("mlp_xnnpack.pte", "mlp_portable.pte", "tied_xnnpack.pte", "kv_cache.pte"):
        art = wb.open(sample(name))
        top = largest_stored(art, 100)
        assert top["nbytes"].is_monotonic_decreasing
        assert not top.duplicated(["file", "offset"]).any()  # each stored range once
        # every stored byte range of the artifact is ranked (named data through its tensor)
        ten = art.tensors
        assert int(top["nbytes"].sum()) >= int(ten.loc[ten["offset"].notna(), "nbytes"].sum())
